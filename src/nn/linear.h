/* linear.h: the pieces of qkv_linear (src/nn/linear.c) that the fused
 * output layer and cross entropy (src/train/loss_linear.c) runs too. */
#ifndef QKV_NN_LINEAR_H
#define QKV_NN_LINEAR_H
#include "core/internal.h"

/* x (...,in), weight (out,in) and bias (out) or NULL, all F32; else an
 * error naming fn and what does not match. */
qkv_status qkv_linear_check_shapes(const char *fn, const qkv_tensor *x, const qkv_tensor *w, const qkv_tensor *b);
/* What a linear layer's forward keeps for its backward in BF16 mode on
 * oneDNN (all NULL otherwise; in the ctx's arena): x16 and w16, bf16
 * copies of x (M,in) and W (out,in) (w16 only where the forward's product
 * does not pack W itself); xb and wn, x and W already in oneDNN's blocked
 * layout (gemm_bf16_vnni.h) as the backward's dW = dy^T x and dx = dy W
 * take them, made where those products run so: packing each once in the
 * forward, from the values it reads anyway, saves the backward a pass
 * over x16 and one over W. */
typedef struct {
    const uint16_t *x16, *w16, *xb, *wn;
} qkv_linear_kept;
/* y (M,out) = x (M,in) W^T (out,in) + b (b (out) or NULL) in ctx c's
 * precision. With keep set, *k gets what the backward reuses (above; xb
 * only when need_dw, wn only when need_dx); without, *k is all NULL. */
qkv_status qkv_linear_product(qkv_ctx *c, int keep, int need_dx, int need_dw, int64_t M, int64_t out, int64_t in,
                              const float *x, const float *w, const float *b, float *y, qkv_linear_kept *k);
/* dx (M,in) = alpha dy W + beta dx for dy (M,out) (or its bf16 copy
 * dy16; dy may then be NULL) and W (out,in), with what the forward kept
 * (k, or NULL). */
void qkv_linear_dx(const qkv_ctx *c, const qkv_linear_kept *k, int64_t M, int64_t in, int64_t out, float alpha,
                   const float *dy, const uint16_t *dy16, const float *w, float beta, float *dx);
/* C = alpha op(A) op(B) + beta C in ctx c's precision; from A16 and B16,
 * bf16 copies of A and B, where given (then in BF16; A or B may then be
 * NULL). */
void qkv_linear_gemm(const qkv_ctx *c, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                     const float *A, const uint16_t *A16, int64_t lda, const float *B, const uint16_t *B16,
                     int64_t ldb, float beta, float *C, int64_t ldc);
/* dW (out,in) += alpha dy^T x for dy (M,out) (or its bf16 copy dy16; dy
 * may then be NULL) and x (M,in), with what the forward kept (k, or
 * NULL). Tall products go by fixed chunks of rows on the threads
 * (linear.c); there db (out), when not NULL and dy is given, gets += the
 * column sums of dy (times 1, not alpha) and *db_done is set; elsewhere
 * *db_done is 0 and db is left to the caller. */
qkv_status qkv_linear_weight_grad(qkv_ctx *c, int64_t M, int64_t in, int64_t out, float alpha, const float *dy,
                                  const uint16_t *dy16, const float *x, const qkv_linear_kept *k, float *dw,
                                  float *db, int *db_done);
#endif
