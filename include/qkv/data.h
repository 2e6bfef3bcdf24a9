/* qkv/data.h: data sets and readers (included by qkv.h). */
#include "qkv.h" /* first: qkv.h includes every area header in order */
#ifndef QKV_DATA_H
#define QKV_DATA_H
#ifdef __cplusplus
extern "C" {
#endif

/* ---- the lecture's toy sequence task (Fleuret, "13.2 Attention
 * mechanisms") ----------------------------------------------------------- */

typedef enum {
    QKV_TOY_PAIRS = 0,   /* average the heights of the two triangles, and of the two boxes */
    QKV_TOY_POSITIONAL   /* average the two leftmost shapes, and the two rightmost */
} qkv_toy_task;

/* n sequences of length T, each two triangles and two boxes at random,
 * non-overlapping places, heights in [1,25], widths in [5,11] scaled by
 * T/100, plus uniform noise of amplitude noise (the lecture: 0.3); as in
 * the lecture's generator, only draws whose two pair averages differ by
 * more than 4 are kept, so that getting the pairs wrong costs.
 * input and target are (n,1,T) (Conv1d's (N,C,L)); target is noise-free. */
qkv_status qkv_toy_generate(qkv_rng *r, qkv_toy_task task, int64_t n, int64_t T, float noise,
                            float *input, float *target);

#ifdef __cplusplus
}
#endif
#endif
