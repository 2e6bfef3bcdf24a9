/* gemm_check.h: a GEMM (qkv_gemm's signature) checked against the product
 * in double, for test_gemm.c (FP32) and test_bf16.c (bf16 inputs). */
#ifndef QKV_TEST_GEMM_CHECK_H
#define QKV_TEST_GEMM_CHECK_H
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "kernels/bf16.h"

typedef void (*h_gemm_fn)(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                          int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* uniform in [-1, 1), from a 64-bit LCG */
static inline float h_gemm_frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2 - 1;
}

static inline uint32_t h_gemm_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* Checks C (M,N; ldc) = alpha op(A) op(B) + beta C0 from gemm against the
 * product in double of the inputs (rounded to bf16 first when bf16: a
 * product of two bf16 is exact in FP32, so both sides then multiply the
 * same values and differ only by FP32 summation). |err| <= gamma_K
 * sum_k |a_ik b_kj| in any summation order, gamma_K ~ K 2^-24: checked at
 * 2 (K + 2) 2^-24 of that sum plus the rounding of beta C0 and of the
 * result. The padding of C (ldc > N) must not be written. */
static inline int h_gemm_case(h_gemm_fn gemm, int bf16, int ta, int tb, int64_t M, int64_t N, int64_t K,
                              float alpha, float beta, int64_t pad, uint64_t seed, const char *what)
{
    int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    int64_t na = (ta ? K : M) * lda, nb = (tb ? N : K) * ldb, nc = M * ldc;
    float *A = malloc((size_t)(na + nb + 2 * nc) * sizeof *A), *B = A + na, *C = B + nb, *C0 = C + nc;
    for (int64_t i = 0; i < na; i++) A[i] = h_gemm_frand(&seed) * 3;
    for (int64_t i = 0; i < nb; i++) B[i] = h_gemm_frand(&seed);
    for (int64_t i = 0; i < nc; i++) C0[i] = C[i] = h_gemm_frand(&seed);
    gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    int ok = 1;
    double worst = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                float a = ta ? A[k * lda + i] : A[i * lda + k], b = tb ? B[j * ldb + k] : B[k * ldb + j];
                if (bf16) a = qkv_bf16_to_float(qkv_bf16_from_float(a)), b = qkv_bf16_to_float(qkv_bf16_from_float(b));
                acc += (double)a * b;
                mag += fabs((double)a * b);
            }
            double c0 = beta == 0 ? 0 : beta * (double)C0[i * ldc + j], want = alpha * acc + c0;
            double bound = fabs(alpha) * mag * 2 * (double)(K + 2) * 0x1p-24 + (fabs(want) + fabs(c0)) * 0x1p-23 +
                           1e-30;
            double e = fabs(C[i * ldc + j] - want);
            if (!(e <= bound)) ok = 0;
            worst = fmax(worst, e / bound);
        }
    for (int64_t i = 0; i < M; i++) /* the padding is not written */
        for (int64_t j = N; j < ldc; j++) ok &= h_gemm_bits(C[i * ldc + j]) == h_gemm_bits(C0[i * ldc + j]);
    CHECK(ok, "gemm%s %s ta %d tb %d M %lld N %lld K %lld alpha %g beta %g pad %lld: error %.2f x the bound",
          bf16 ? "_bf16" : "", what, ta, tb, (long long)M, (long long)N, (long long)K, alpha, beta, (long long)pad,
          worst);
    free(A);
    return ok;
}
/* The empty products: K = 0 gives C = beta C; M = 0 writes nothing. */
static inline void h_gemm_edges(h_gemm_fn gemm, const char *name)
{
    float C[6] = {1, 2, 3, 4, 5, 6}, A[1] = {9}, B[1] = {9};
    gemm(0, 0, 2, 3, 0, 1.0f, A, 1, B, 3, 0.5f, C, 3);
    CHECK(C[0] == 0.5f && C[5] == 3.0f, "%s K=0: C = beta C", name);
    gemm(0, 0, 0, 3, 4, 1.0f, A, 4, B, 3, 0.0f, C, 3);
    CHECK(C[0] == 0.5f, "%s M=0 wrote C", name);
}
#endif
