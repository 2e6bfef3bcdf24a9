/* matvec_bf16.h: y += x W^T for a few rows x against bf16 weights W,
 * FP32 arithmetic (the linear layers of a decoding step with bf16
 * weights, src/nn/linear_bf16.c). */
#ifndef QKV_KERNELS_MATVEC_BF16_H
#define QKV_KERNELS_MATVEC_BF16_H
#include <stdint.h>

/* y (M,out) += x (M,in) W^T, W (out,in) bf16 row-major. Each weight is
 * widened to a float (exact) and multiplied by x in FP32 with fused
 * multiply-adds: AVX-512 where the attention kernels run their AVX-512
 * build (qkv_attn_simd_current()), AVX2 where the library is built for it,
 * else portable C; under qkv_reference() a plain loop summing in double.
 * Weight rows are shared out across OpenMP's threads (the result does not
 * depend on their number); W is read once per call for M <= 4, once per 4
 * rows of x beyond. */
void qkv_matvec_bf16(int64_t M, int64_t out, int64_t in, const float *x, const uint16_t *w,
                     float *y);
#endif
