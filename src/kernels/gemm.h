/* gemm.h: row-major C = alpha * op(A) op(B) + beta * C. */
#ifndef QKV_GEMM_H
#define QKV_GEMM_H
#include <stdint.h>

/* op(A) is (M,K): A is (M,K) with lda, or (K,M) when ta. op(B) is (K,N):
 * B is (K,N) with ldb, or (N,K) when tb. C is (M,N) with ldc.
 * Uses CBLAS sgemm unless the reference switch is on. */
void qkv_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
              int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* C = alpha * op(A) op(B) + bias, bias (N) added to every row of C: a
 * linear layer's y = x W^T + b in one parallel region, with the same sums
 * as C set to the bias and then qkv_gemm with beta 1. */
void qkv_gemm_bias(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                   const float *B, int64_t ldb, const float *bias, float *C, int64_t ldc);
/* The library behind qkv_gemm: QKV_GEMM_AUTO (default: oneDNN's sgemm for
 * products from 4 MFLOP with at least 1,024 rows (or K for op(A) = A^T)
 * where qkv is built with oneDNN, OpenBLAS's for the rest, gemm.c), QKV_GEMM_BLAS (OpenBLAS always), QKV_GEMM_DNNL (oneDNN for every
 * size where built with it). The reference switch overrides all three. */
enum { QKV_GEMM_AUTO, QKV_GEMM_BLAS, QKV_GEMM_DNNL };
void qkv_gemm_set_path(int path);
/* The plain triple loop (double accumulation), for tests. */
void qkv_gemm_ref(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
#endif
