/* gather.h: the strided gather that rearrange compiles a pattern to and
 * that the patch embedding uses directly (internal). */
#ifndef QKV_NN_GATHER_H
#define QKV_NN_GATHER_H
#include "core/internal.h"

/* Up to this many elementary axes (einops' axes after every group is
 * decomposed: "b c (h p1) (w p2)" has 6). */
#define QKV_GATHER_MAX_AXES 16

/* y's elements in order walk the axes (slowest first) of lengths len[i];
 * element (o_0, ..., o_{n-1}) of the walk reads x at sum_i o_i istride[i]. */
typedef struct {
    int n;
    int64_t len[QKV_GATHER_MAX_AXES];
    int64_t istride[QKV_GATHER_MAX_AXES];
} qkv_gather_map;

/* Drops unit axes and merges neighbours that are contiguous in x (the walk
 * stays the same); returns 1 when the walk reads x in order from 0 (a
 * reshape: y could be a view). */
int qkv_gather_simplify(qkv_gather_map *m);

/* y = the walk of m over x, a new tensor of shape (ndim, shape), whose
 * numel must be the product of m's lengths; recorded on the tape (the
 * backward adds dy back through the same walk: dx[at(o)] += dy[o], the
 * inverse permutation, zero for elements of x the walk skips). fn names
 * the caller in messages. */
qkv_status qkv_gather(qkv_ctx *c, const char *fn, qkv_tensor *x, const qkv_gather_map *m,
                      int ndim, const int64_t *shape, qkv_tensor **y);
#endif
