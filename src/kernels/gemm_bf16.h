/* gemm_bf16.h: C = alpha * op(A) op(B) + beta * C with the inputs rounded
 * to bf16 and the products accumulated in FP32 (the BF16 precision mode's
 * matmuls, like PyTorch's CPU autocast). Same arguments as qkv_gemm. */
#ifndef QKV_GEMM_BF16_H
#define QKV_GEMM_BF16_H
#include <stdint.h>
#include "qkv.h"

/* Through oneDNN's bf16 matmul where qkv was built with it (QKV_DNNL) and
 * the CPU runs it; otherwise (and under qkv_reference()) the inputs are
 * rounded to bf16 and multiplied by FP32 arithmetic (qkv_gemm, or
 * qkv_gemm_ref): the same numbers up to the order of the FP32 sums. */
void qkv_gemm_bf16(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                   int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* qkv_gemm_bf16 with inputs already in bf16 where given: A16 compact,
 * (M,K) or (K,M) when ta, in place of A (then lda is ignored); B16 in
 * place of B likewise. For a value converted once for several products:
 * an RNN's W_hh for every time step, a linear layer's x and W kept from
 * its forward for its backward. The same numbers as qkv_gemm_bf16 on
 * their values as floats. */
void qkv_gemm_bf16_pre(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                       const uint16_t *A16, int64_t lda, const float *B, const uint16_t *B16, int64_t ldb,
                       float beta, float *C, int64_t ldc);
/* C (M,N) = A16 B^T + bias (each row; bias may be NULL) from compact
 * bf16 A16 (M,K) and B16 (N,K), or B (N,K) in FP32 where B16 is NULL:
 * a linear layer's y = x W^T + b. The same numbers as filling C with the
 * bias and adding qkv_gemm_bf16_pre's product into it (beta 1); on oneDNN
 * the bias goes into the primitive. */
void qkv_gemm_bf16_bias(int64_t M, int64_t N, int64_t K, const uint16_t *A16, const float *B, const uint16_t *B16,
                        const float *bias, float *C);
/* C (M,N) compact = alpha op(A16) P + bias + beta C on oneDNN, with op(B)
 * (K,N) already in its blocked layout P (qkv_bf16_blocked_pack2,
 * qkv_bf16_copy_blocked: packed once, kept from a linear layer's forward
 * for its backward) and A16 compact bf16, (M,K) or (K,M) when ta; bias
 * (N) or NULL. 1 when done; 0 when oneDNN does not run the product (not
 * built, declined, small: qkv_gemm_bf16_packed_ok), C untouched, and the
 * caller takes another path (oneDNN declines before it writes C). */
int qkv_gemm_bf16_packed(int ta, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A16,
                         const uint16_t *P, const float *bias, float beta, float *C);
/* 1 when qkv_gemm_bf16_packed would run that product (so packing B for it
 * is worth doing; the primitive is asked for once and kept). With ta 0,
 * alpha 1 and beta 0 it is also whether qkv_gemm_bf16_bias packs an FP32
 * B itself, so that a compact bf16 copy made beforehand is no use to it. */
int qkv_gemm_bf16_packed_ok(int ta, int64_t M, int64_t N, int64_t K, float alpha, int bias, float beta);
/* 1 when qkv_gemm_bf16 runs an (M,N,K) product on oneDNN from bf16 copies
 * of its inputs (so converting them beforehand saves work); 0 when it
 * takes the fallback (small products, no oneDNN, the reference). */
int qkv_gemm_bf16_dnnl(int64_t M, int64_t N, int64_t K);

/* The matmul of ctx c's precision: qkv_gemm (QKV_FP32) or qkv_gemm_bf16. */
void qkv_gemm_ctx(const qkv_ctx *c, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                  int64_t ldc);
/* y = x W^T + bias (bias may be NULL) in the context's precision: x (M,K),
 * W (N,K), C (M,N), all compact; FP32 through qkv_gemm_bias. */
void qkv_gemm_ctx_bias(const qkv_ctx *c, int64_t M, int64_t N, int64_t K, const float *A, const float *B,
                       const float *bias, float *C);

/* For tests and benchmarks: 1 when the oneDNN path is built and usable.
 * The path of every product: QKV_BF16_AUTO (default: oneDNN from
 * QKV_BF16_DNNL_MIN_FLOPS on, the fallback below), QKV_BF16_FALLBACK,
 * or QKV_BF16_DNNL (oneDNN whatever the size, where usable). */
enum { QKV_BF16_AUTO, QKV_BF16_FALLBACK, QKV_BF16_DNNL };
int qkv_gemm_bf16_accelerated(void);
void qkv_gemm_bf16_set_path(int path);
/* For tests: oneDNN's own cache of primitives (its default holds 1024).
 * With 0, a primitive that qkv's table drops is freed at once, so a
 * table that dropped one still running would be seen. Nothing without
 * oneDNN. */
void qkv_gemm_bf16_set_dnnl_cache(int capacity);
/* For tests: how many products oneDNN is running now from qkv's table;
 * how many primitives qkv has made; the next n to be made fail as oneDNN
 * does when out of memory (a failure that is not kept: the shape is tried
 * again when next asked, where a decline is kept). */
int qkv_gemm_bf16_running(void);
long qkv_gemm_bf16_made(void);
void qkv_gemm_bf16_fail_next(int n);
#endif
