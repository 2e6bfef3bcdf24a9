/* image_internal.h: what the image data files (src/data/idx.c, images.c)
 * share. */
#ifndef QKV_IMAGE_INTERNAL_H
#define QKV_IMAGE_INTERNAL_H
#include "core/internal.h"

/* An idx file's elements when they are unsigned bytes, else NULL. */
const uint8_t *qkv_idx_u8(const qkv_idx *x);

/* A uniform integer in [0, k), k >= 1, unbiased (draws past the largest
 * multiple of k are redrawn). */
static inline uint64_t qkv_rng_below(qkv_rng *r, uint64_t k)
{
    uint64_t lim = UINT64_MAX - UINT64_MAX % k, v;
    do v = qkv_rng_next(r);
    while (v >= lim);
    return v % k;
}

/* The dims of an image batch (n,c,h,w): all >= 0 (n may be 0), and
 * n*c*h*w elements within int64; fn names the caller in the message. */
qkv_status qkv_image_check_dims(const char *fn, int64_t n, int64_t c, int64_t h, int64_t w);

#endif
