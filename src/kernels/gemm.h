/* gemm.h: row-major C = alpha * op(A) op(B) + beta * C. */
#ifndef QKV_GEMM_H
#define QKV_GEMM_H
#include <stdint.h>

/* op(A) is (M,K): A is (M,K) with lda, or (K,M) when ta. op(B) is (K,N):
 * B is (K,N) with ldb, or (N,K) when tb. C is (M,N) with ldc.
 * Uses CBLAS sgemm unless the reference switch is on. */
void qkv_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
              int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* The plain triple loop (double accumulation), for tests. */
void qkv_gemm_ref(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
#endif
