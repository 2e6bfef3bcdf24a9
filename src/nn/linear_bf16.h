/* linear_bf16.h: the linear layer over bf16 inference weights
 * (qkv_bf16_weights, src/nn/linear_bf16.c), for qkv_linear. */
#ifndef QKV_NN_LINEAR_BF16_H
#define QKV_NN_LINEAR_BF16_H
#include "core/internal.h"

/* The bf16 copy of weight w (a parameter or a view into one, such as a
 * row block of in_proj_weight) in t, or NULL when t has none. */
const uint16_t *linear_bf16_find(const qkv_bf16_weights *t, const qkv_tensor *w);
/* y (M,out) = x (M,in) W16^T + b (b (out) or NULL); scratch from c's arena
 * for more than a few rows. */
qkv_status linear_bf16(qkv_ctx *c, int64_t M, int64_t out, int64_t in, const float *x,
                       const uint16_t *w16, const float *b, float *y);
#endif
