/* vit_ops.c: two ops of the default ViT's training step on its shapes,
 * forward and backward, to follow them between builds (docs/vision_cli.md,
 * "Speed"): LayerNorm over (6400, 64) (batch 128 x 50 tokens, d_model 64)
 * and multi-head self-attention's kernels over (N, H, L, hd) =
 * (128, 4, 50, 16), through qkv_layer_norm and qkv_sdpa with every input
 * requiring its gradient.
 *   build/bench/vit_ops [-r REPS]
 * Prints the best of REPS (default 100) forward and backward times, in
 * microseconds, on OpenMP's threads (OMP_NUM_THREADS=1 for one core). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "qkv.h"

static float *rnd(qkv_rng *r, int64_t n)
{
    float *x = malloc((size_t)n * sizeof *x);
    if (x) qkv_rng_fill_uniform(r, x, n, -1, 1);
    return x;
}

/* Wraps data (ndim, shape) in c's arena, requiring its gradient. */
static qkv_tensor *input(qkv_ctx *c, float *data, int ndim, const int64_t *shape)
{
    qkv_tensor *t = NULL;
    if (qkv_tensor_wrap(qkv_ctx_arena(c), data, ndim, shape, &t) || qkv_tensor_set_requires_grad(t, 1))
        return NULL;
    return t;
}

int main(int argc, char **argv)
{
    int reps = 100;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else return fprintf(stderr, "usage: vit_ops [-r REPS]\n"), 2;
    }
    if (reps < 1) return fprintf(stderr, "vit_ops: -r must be at least 1\n"), 2;
    enum { N = 128, H = 4, L = 50, HD = 16, E = H * HD };
    const int64_t rows = (int64_t)N * L, na = (int64_t)N * H * L * HD;
    qkv_rng r;
    qkv_rng_seed(&r, 1);
    float *x = rnd(&r, rows * E), *w = rnd(&r, E), *b = rnd(&r, E), *dy = rnd(&r, rows * E);
    float *q = rnd(&r, na), *k = rnd(&r, na), *v = rnd(&r, na), *dout = rnd(&r, na);
    qkv_ctx *c;
    if (!x || !w || !b || !dy || !q || !k || !v || !dout || qkv_ctx_new(&c)) return fprintf(stderr, "vit_ops: out of memory\n"), 1;
    qkv_ctx_set_training(c, 1);
    double best[2][2] = {{1e9, 1e9}, {1e9, 1e9}}; /* [op][forward, backward] */
    for (int i = 0; i < reps; i++)
        for (int op = 0; op < 2; op++) {
            qkv_ctx_reset(c);
            qkv_tensor *y = NULL, *t0, *t1, *t2;
            double a = omp_get_wtime();
            qkv_status st;
            if (op == 0) {
                t0 = input(c, x, 2, (int64_t[]){rows, E}), t1 = input(c, w, 1, (int64_t[]){E});
                t2 = input(c, b, 1, (int64_t[]){E});
                a = omp_get_wtime();
                st = t0 && t1 && t2 ? qkv_layer_norm(c, t0, t1, t2, 1e-6f, &y) : QKV_ERR_NOMEM;
            } else {
                const int64_t sh[4] = {N, H, L, HD};
                t0 = input(c, q, 4, sh), t1 = input(c, k, 4, sh), t2 = input(c, v, 4, sh);
                qkv_sdpa_opts so = qkv_sdpa_opts_default();
                a = omp_get_wtime();
                st = t0 && t1 && t2 ? qkv_sdpa(c, t0, t1, t2, &so, &y, NULL) : QKV_ERR_NOMEM;
            }
            double m = omp_get_wtime();
            if (st || qkv_backward(c, y, op == 0 ? dy : dout))
                return fprintf(stderr, "vit_ops: %s\n", qkv_last_error()), 1;
            double e = omp_get_wtime();
            if (m - a < best[op][0]) best[op][0] = m - a;
            if (e - m < best[op][1]) best[op][1] = e - m;
        }
    printf("the default ViT's ops, %d OpenMP threads, best of %d (us):\n", omp_get_max_threads(), reps);
    printf("  layer_norm (6400,64):       forward %8.1f  backward %8.1f\n", best[0][0] * 1e6, best[0][1] * 1e6);
    printf("  attention (128,4,50,16):    forward %8.1f  backward %8.1f\n", best[1][0] * 1e6, best[1][1] * 1e6);
    qkv_ctx_free(c);
    free(x), free(w), free(b), free(dy), free(q), free(k), free(v), free(dout);
    return 0;
}
