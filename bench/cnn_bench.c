/* cnn_bench.c: Conv2d forward + backward at the default CNN's shapes
 * (batch 64), and a whole forward + backward of the default CNN, in ms
 * (the median of iterations filling 0.5 s, at most 20).
 *   build/bench/cnn_bench [--cpu] [N]         (default 64)
 * --cpu times with the process's CPU time (clock()) instead of the wall
 * clock: for one-thread runs on a shared machine, where wall time is
 * mostly other people's work.
 * bench/cnn_suite.sh runs it interleaved with bench/cnn_torch.py (PyTorch,
 * the same shapes) and prints the ratios. Lines: "ROW name ms". */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "qkv.h"

#define CHECK(expr)                                                            \
    do {                                                                       \
        if ((expr) != QKV_OK) {                                                \
            fprintf(stderr, "cnn_bench: %s: %s\n", #expr, qkv_last_error());   \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

static int use_cpu;

static double now(void) { return use_cpu ? (double)clock() / CLOCKS_PER_SEC : omp_get_wtime(); }

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    qkv_ctx *c;
    qkv_tensor *x, *w, *b; /* conv: input and parameters; cnn: x only */
    qkv_cnn *net;
    float *dy;
} job;

/* One forward + backward; x needs a gradient when x->requires_grad. */
static void step(job *j)
{
    qkv_ctx_reset(j->c);
    qkv_tensor *y;
    if (j->net) CHECK(qkv_module_forward(j->c, &j->net->seq.base, j->x, &y));
    else CHECK(qkv_conv2d(j->c, j->x, j->w, j->b, NULL, (int64_t[]){1, 1}, NULL, &y));
    CHECK(qkv_backward(j->c, y, j->dy));
}

static void timeit(const char *name, job *j)
{
    double t[20], total = 0;
    int n = 0;
    step(j); /* warm-up */
    while (n < 20 && (n < 3 || total < 0.5)) {
        double t0 = now();
        step(j);
        t[n] = now() - t0;
        total += t[n++];
    }
    qsort(t, (size_t)n, sizeof *t, cmp);
    printf("ROW %s %.4f\n", name, 1e3 * (n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2])));
    fflush(stdout);
}

int main(int argc, char **argv)
{
    use_cpu = argc > 1 && !strcmp(argv[1], "--cpu");
    int64_t N = argc > 1 + use_cpu ? atoll(argv[1 + use_cpu]) : 64;
    qkv_rng r;
    qkv_rng_seed(&r, 1);
    qkv_arena *a;
    qkv_params *p;
    CHECK(qkv_arena_new(&a, 0));
    CHECK(qkv_params_new(&p));
    /* conv1: (N,1,28,28) -> 32, the image needs no gradient; conv2:
     * (N,32,14,14) -> 64, its input does */
    const int64_t cfg[2][4] = {{1, 32, 28, 0}, {32, 64, 14, 1}};
    for (int i = 0; i < 2; i++) {
        job j = {0};
        CHECK(qkv_ctx_new(&j.c));
        int64_t xs[4] = {N, cfg[i][0], cfg[i][2], cfg[i][2]}, ws[4] = {cfg[i][1], cfg[i][0], 3, 3};
        CHECK(qkv_tensor_new(a, QKV_F32, 4, xs, &j.x));
        qkv_rng_fill_normal(&r, j.x->data, qkv_tensor_numel(j.x), 0, 1);
        if (cfg[i][3]) CHECK(qkv_tensor_set_requires_grad(j.x, 1));
        char pre[16];
        snprintf(pre, sizeof pre, "c%d.", i);
        CHECK(qkv_params_add(p, pre, "weight", 4, ws, &j.w));
        CHECK(qkv_params_add(p, pre, "bias", 1, &cfg[i][1], &j.b));
        CHECK(qkv_init_linear_default(&r, j.w));
        int64_t ny = N * cfg[i][1] * cfg[i][2] * cfg[i][2];
        j.dy = malloc((size_t)ny * sizeof *j.dy);
        qkv_rng_fill_normal(&r, j.dy, ny, 0, 1);
        timeit(i ? "conv2_fwd_bwd" : "conv1_fwd_bwd", &j);
        qkv_ctx_free(j.c);
        free(j.dy);
    }
    qkv_cnn net;
    qkv_cnn_opts o = qkv_cnn_opts_default();
    CHECK(qkv_cnn_init(&net, &o, p, "", &r));
    job j = {.net = &net};
    CHECK(qkv_ctx_new(&j.c));
    qkv_ctx_set_training(j.c, 1);
    CHECK(qkv_tensor_new(a, QKV_F32, 4, (int64_t[]){N, 1, 28, 28}, &j.x));
    qkv_rng_fill_normal(&r, j.x->data, qkv_tensor_numel(j.x), 0, 1);
    j.dy = malloc((size_t)(N * 10) * sizeof *j.dy);
    qkv_rng_fill_normal(&r, j.dy, N * 10, 0, 1);
    timeit("cnn_fwd_bwd", &j);
    qkv_ctx_free(j.c);
    free(j.dy);
    qkv_cnn_free(&net);
    qkv_params_free(p);
    qkv_arena_free(a);
    return 0;
}
