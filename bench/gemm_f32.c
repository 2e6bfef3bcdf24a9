/* gemm_f32.c: qkv_gemm's FP32 paths, OpenBLAS's sgemm against oneDNN's
 * (qkv_gemm_set_path), on the products of the default ViT's training step
 * (bench/vit_step.c: 6,400 rows of d_model 64, feed-forward 256; the
 * forward x W^T, the dX products dy W, the dW products dy^T x by chunks of
 * 1,600 rows and whole) and on small ones, where a call's own cost shows.
 *   build/bench/gemm_f32 [-r REPS]
 * Run with OMP_NUM_THREADS=1 for one core's figures (qkv_gemm splits a
 * product over qkv's OpenMP threads). The paths alternate within each
 * repetition; each figure is the best of REPS (default 20), in
 * microseconds and GFLOP/s, with OpenBLAS's time over oneDNN's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench_util.h"
#include "kernels/gemm.h"


static const bench_shape shapes[] = {
    {"fwd in-proj x W^T", 0, 1, 6400, 192, 64}, {"fwd out-proj x W^T", 0, 1, 6400, 64, 64},
    {"fwd ff1 x W^T", 0, 1, 6400, 256, 64},     {"fwd ff2 x W^T", 0, 1, 6400, 64, 256},
    {"dX in-proj dy W", 0, 0, 6400, 64, 192},   {"dX out-proj dy W", 0, 0, 6400, 64, 64},
    {"dX ff1 dy W", 0, 0, 6400, 64, 256},       {"dX ff2 dy W", 0, 0, 6400, 256, 64},
    {"dW in-proj chunk", 1, 0, 192, 64, 1600},  {"dW out-proj chunk", 1, 0, 64, 64, 1600},
    {"dW ff1 chunk", 1, 0, 256, 64, 1600},      {"dW ff2 chunk", 1, 0, 64, 256, 1600},
    {"dW in-proj whole", 1, 0, 192, 64, 6400},  {"patch embedding", 0, 1, 6272, 64, 16},
    {"head", 0, 1, 128, 10, 64},                {"small 64^3", 0, 1, 64, 64, 64},
    {"small 100^3", 0, 1, 100, 100, 100},       {"32x512x128", 0, 1, 32, 512, 128},
};

int main(int argc, char **argv)
{
    int reps = 20;
    if (argc == 3 && !strcmp(argv[1], "-r")) reps = atoi(argv[2]);
    else if (argc != 1) {
        fprintf(stderr, "usage: gemm_f32 [-r REPS]\n");
        return 2;
    }
    if (reps < 1) reps = 1;
    size_t n = 6400 * 256;
    float *A = malloc(n * sizeof *A), *B = malloc(n * sizeof *B), *C = malloc(n * sizeof *C);
    if (!A || !B || !C) return 1;
    for (size_t i = 0; i < n; i++) A[i] = (float)(i % 17) * 0.01f, B[i] = (float)(i % 13) * 0.02f, C[i] = 0;
    printf("%-20s %18s %22s %22s %6s\n", "product", "M x N x K", "OpenBLAS us (GF/s)", "oneDNN us (GF/s)",
           "ratio");
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const bench_shape *g = &shapes[s];
        int64_t lda = g->ta ? g->M : g->K, ldb = g->tb ? g->K : g->N;
        double best[2] = {1e30, 1e30};
        for (int r = 0; r < reps + 1; r++) /* the first round warms up */
            for (int p = 0; p < 2; p++) {
                qkv_gemm_set_path(p ? QKV_GEMM_DNNL : QKV_GEMM_BLAS);
                double t0 = bench_now();
                qkv_gemm(g->ta, g->tb, g->M, g->N, g->K, 1.0f, A, lda, B, ldb, 0.0f, C, g->N);
                double t = bench_now() - t0;
                if (r && t < best[p]) best[p] = t;
            }
        double fl = 2.0 * (double)g->M * (double)g->N * (double)g->K;
        printf("%-20s %5lld x %4lld x %4lld %13.1f (%5.1f) %13.1f (%5.1f) %6.2f\n", g->name, (long long)g->M,
               (long long)g->N, (long long)g->K, best[0] * 1e6, fl / best[0] * 1e-9, best[1] * 1e6,
               fl / best[1] * 1e-9, best[0] / best[1]);
    }
    qkv_gemm_set_path(QKV_GEMM_AUTO);
    free(A), free(B), free(C);
    return 0;
}
