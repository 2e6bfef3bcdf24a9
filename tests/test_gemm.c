/* test_gemm.c: qkv_gemm (FP32) on each of its paths, OpenBLAS's sgemm,
 * oneDNN's sgemm (where qkv is built with it) and the automatic choice,
 * against the reference loop (qkv_gemm_ref, double accumulation), on the
 * default ViT's thin shapes (K = 64 forward and dX products, dW products
 * with a long K) cut to fewer rows, odd sizes, strided operands, alpha and
 * beta; the padding of C is never written; a product split over
 * threads gives the bits of one thread. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gemm_check.h"
#include "harness.h"
#include "kernels/gemm.h"
#include "qkv.h"

static int gemm_case(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, float beta, int64_t pad,
                     uint64_t seed, const char *what)
{
    return h_gemm_case(qkv_gemm, 0, ta, tb, M, N, K, alpha, beta, pad, seed, what);
}

/* beta 0: C's old values are not read (a fresh gradient buffer may hold
 * anything; -DQKV_POISON fills them with NaN) */
static void gemm_beta0_nan(const char *what, int ta, int tb, int64_t M, int64_t N, int64_t K)
{
    uint64_t seed = 5;
    float *A = malloc((size_t)(M * K + K * N + M * N) * sizeof *A), *B = A + M * K, *C = B + K * N;
    for (int64_t i = 0; i < M * K + K * N; i++) A[i] = h_gemm_frand(&seed);
    for (int64_t i = 0; i < M * N; i++) C[i] = NAN;
    qkv_gemm(ta, tb, M, N, K, 1.0f, A, ta ? M : K, B, tb ? K : N, 0.0f, C, N);
    int ok = 1;
    for (int64_t i = 0; i < M * N; i++) ok &= isfinite(C[i]) != 0;
    CHECK(ok, "gemm %s ta %d tb %d %lldx%lldx%lld beta 0 over NaN: NaN in C", what, ta, tb, (long long)M,
          (long long)N, (long long)K);
    free(A);
}

static void gemm_suite(const char *what)
{
    uint64_t seed = 7;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            gemm_case(ta, tb, 37, 29, 70, 1.0f, 0.0f, 0, seed++, what);
            gemm_case(ta, tb, 5, 1, 33, 0.5f, 1.0f, 1, seed++, what);
            gemm_case(ta, tb, 1, 130, 17, -2.0f, 0.25f, 0, seed++, what);
            gemm_case(ta, tb, 300, 70, 64, 1.0f, 1.0f, 3, seed++, what);
        }
    /* the ViT step's products (qkv_linear), 640 rows instead of 6,400 */
    gemm_case(0, 1, 640, 192, 64, 1.0f, 0.0f, 0, seed++, what);  /* forward, in-projection */
    gemm_case(0, 1, 640, 64, 256, 1.0f, 1.0f, 0, seed++, what);  /* forward, ff2 onto the bias */
    gemm_case(0, 0, 640, 64, 192, 1.0f, 0.0f, 0, seed++, what);  /* dX, beta 0 (a fresh buffer) */
    gemm_case(0, 0, 640, 256, 64, 1.0f, 1.0f, 0, seed++, what);  /* dX added into */
    gemm_case(1, 0, 192, 64, 1600, 1.0f, 0.0f, 0, seed++, what); /* dW by chunks of rows */
    gemm_case(1, 0, 64, 256, 1600, 1.0f, 1.0f, 0, seed++, what);
    gemm_case(0, 1, 627, 64, 16, 1.0f, 1.0f, 0, seed++, what); /* the patch embedding, K = 16 */
    gemm_case(0, 1, 1100, 64, 64, 1.0f, 1.0f, 0, seed++, what); /* from 1,024 rows: oneDNN in auto */
    gemm_case(1, 0, 64, 48, 1100, 1.0f, 1.0f, 0, seed++, what);
    gemm_beta0_nan(what, 0, 0, 640, 64, 192);
    gemm_beta0_nan(what, 1, 0, 64, 64, 1600);
    gemm_beta0_nan(what, 0, 1, 20, 7, 5);
}

/* The same product with 1, 2, 3 and 8 threads (qkv_gemm splits C into
 * blocks of 64 columns or rows, at least 256 rows for oneDNN): the same
 * bits. */
static void gemm_threads(const char *what, int ta, int tb, int64_t M, int64_t N, int64_t K)
{
    uint64_t seed = 99;
    int64_t na = M * K, nb = K * N, nc = M * N;
    float *A = malloc((size_t)(na + nb + 2 * nc) * sizeof *A), *B = A + na, *C1 = B + nb, *C2 = C1 + nc;
    for (int64_t i = 0; i < na + nb; i++) A[i] = h_gemm_frand(&seed);
    int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    qkv_gemm(ta, tb, M, N, K, 1.0f, A, ta ? M : K, B, tb ? K : N, 0.0f, C1, N);
    static const int counts[] = {2, 3, 8}; /* more threads than cores: smaller blocks */
    for (int t = 0; t < 3; t++) {
        omp_set_num_threads(counts[t]);
        qkv_gemm(ta, tb, M, N, K, 1.0f, A, ta ? M : K, B, tb ? K : N, 0.0f, C2, N);
        CHECK(!memcmp(C1, C2, (size_t)nc * sizeof *C1), "gemm %s ta %d tb %d %lldx%lldx%lld: 1 and %d threads differ",
              what, ta, tb, (long long)M, (long long)N, (long long)K, counts[t]);
    }
    omp_set_num_threads(nt);
    free(A);
}

/* qkv_gemm_bias (a linear layer's x W^T + b) gives the bits of the bias
 * broadcast into C and then qkv_gemm with beta 1, at 1 and 2 threads (the
 * broadcast runs inside each thread's block); K = 0 leaves the bias. */
static void gemm_bias(const char *what, int64_t M, int64_t N, int64_t K)
{
    uint64_t seed = 41;
    int64_t na = M * K, nb = K * N, nc = M * N;
    float *A = malloc((size_t)(na + nb + N + 2 * nc + 1) * sizeof *A), *B = A + na, *bias = B + nb, *C1 = bias + N,
          *C2 = C1 + nc;
    for (int64_t i = 0; i < na + nb + N; i++) A[i] = h_gemm_frand(&seed);
    int nt = omp_get_max_threads();
    for (int t = 1; t <= 2; t++) {
        omp_set_num_threads(t);
        for (int64_t i = 0; i < nc; i++) C1[i] = bias[i % N], C2[i] = NAN; /* C2's old values are not read */
        qkv_gemm(0, 1, M, N, K, 1.0f, A, K, B, K, 1.0f, C1, N);
        qkv_gemm_bias(0, 1, M, N, K, 1.0f, A, K, B, K, bias, C2, N);
        CHECK(!memcmp(C1, C2, (size_t)nc * sizeof *C1), "gemm_bias %s %lldx%lldx%lld, %d threads: not the bits of broadcast + gemm",
              what, (long long)M, (long long)N, (long long)K, t);
    }
    omp_set_num_threads(nt);
    qkv_gemm_bias(0, 1, M, N, 0, 1.0f, A, 1, B, 1, bias, C2, N);
    int ok = 1;
    for (int64_t i = 0; i < nc; i++) ok &= C2[i] == bias[i % N];
    CHECK(ok, "gemm_bias %s K = 0: C is not the bias", what);
    free(A);
}

int main(void)
{
    static const struct {
        int path;
        const char *name;
    } paths[] = {{QKV_GEMM_BLAS, "OpenBLAS"}, {QKV_GEMM_DNNL, "oneDNN"}, {QKV_GEMM_AUTO, "auto"}};
    for (int p = 0; p < 3; p++) {
        qkv_gemm_set_path(paths[p].path);
        gemm_suite(paths[p].name);
        gemm_threads(paths[p].name, 0, 1, 640, 192, 64);  /* split by columns */
        gemm_threads(paths[p].name, 0, 0, 1000, 64, 256); /* split by rows */
        gemm_threads(paths[p].name, 1, 0, 256, 64, 1600);
        gemm_threads(paths[p].name, 1, 0, 64, 64, 1600); /* one block: not split */
        gemm_threads(paths[p].name, 1, 0, 64, 256, 1600); /* split by columns, B not transposed */
        gemm_threads(paths[p].name, 0, 1, 1030, 256, 784); /* a short last row block joins the one before */
        gemm_threads(paths[p].name, 0, 0, 1300, 64, 192);
        gemm_bias(paths[p].name, 256, 512, 64);  /* split by columns */
        gemm_bias(paths[p].name, 1300, 64, 192); /* split by rows */
        gemm_bias(paths[p].name, 20, 7, 5);      /* whole on one thread */
    }
    qkv_gemm_set_path(QKV_GEMM_AUTO);
    qkv_set_reference(1);
    gemm_suite("reference");
    gemm_bias("reference", 30, 9, 17);
    qkv_set_reference(0);
    h_gemm_edges(qkv_gemm, "gemm");
    /* products from inside a parallel loop (qkv's ops call gemm there) */
    int ok = 1;
    qkv_gemm_set_path(QKV_GEMM_DNNL);
#pragma omp parallel for reduction(&& : ok)
    for (int t = 0; t < 4; t++) ok = gemm_case(t & 1, t >> 1, 300, 70, 64, 1.0f, 1.0f, 0, 100 + (uint64_t)t, "threads");
    qkv_gemm_set_path(QKV_GEMM_AUTO);
    CHECK(ok, "gemm from several threads at once");
    return h_finish("test_gemm");
}
