/* matvec.h: y += x W^T for a few rows x against bf16 weights W, FP32
 * arithmetic (the linear layers of a decoding step with bf16 weights,
 * src/nn/linear_bf16.c); and one row x times FP32 weights (qkv_gemm's
 * products of one row). */
#ifndef QKV_KERNELS_MATVEC_H
#define QKV_KERNELS_MATVEC_H
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

/* y[o] = alpha (x . W_o) + beta y[o] for o < out (beta 0: y is not read):
 * x (in), W (out,in) FP32 with leading dimension ldw. The weight rows are
 * read one after the other, four chains of 16 lanes along each (a decoding
 * step's products are bound by reading the weights). On the calling
 * thread. Returns 1 when done; 0, touching nothing, where this loop does
 * not apply (no AVX-512 build picked, in not a multiple of 64, the
 * reference): the caller then runs its GEMM. */
int qkv_matvec_row_f32(int64_t out, int64_t in, const float *x, const float *w, int64_t ldw, float alpha,
                       float beta, float *y);
#endif
