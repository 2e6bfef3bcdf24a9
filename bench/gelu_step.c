/* gelu_step.c: the exact GELU's forward and backward (qkv_gelu, "none") on
 * the default ViT's feed-forward activations (batch 128 x 50 tokens x 256 =
 * 1,638,400 elements), the fast path (qkv_vec_erf, qkv_vec_exp) against the
 * reference (libm's erff and expf, qkv_set_reference(1)), interleaved.
 *   build/bench/gelu_step [-n ELEMENTS] [-r REPS]
 * Each repetition times 5 forward+backward passes of each path; the table
 * gives medians over repetitions (ms per pass) and their ratio. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "qkv.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ms per forward + backward pass, over 5 passes; -1 on failure. */
static double passes(float *x, float *dy, float *dx, int64_t n, int reference)
{
    qkv_set_reference(reference);
    qkv_ctx *c;
    qkv_arena *a;
    if (qkv_ctx_new(&c) || qkv_arena_new(&a, 0)) return -1;
    double t0 = now();
    for (int k = 0; k < 5; k++) {
        qkv_ctx_reset(c);
        qkv_tensor *tx, *y;
        if (qkv_tensor_wrap(a, x, 1, (int64_t[]){n}, &tx) || qkv_tensor_set_requires_grad(tx, 1)) return -1;
        tx->grad = dx;
        if (qkv_gelu(c, tx, "none", &y) || qkv_backward(c, y, dy)) return -1;
    }
    double ms = (now() - t0) * 1000 / 5;
    qkv_ctx_free(c);
    qkv_arena_free(a);
    qkv_set_reference(0);
    return ms;
}

int main(int argc, char **argv)
{
    int64_t n = 128 * 50 * 256;
    int reps = 7;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-n")) n = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
    }
    if (n < 1 || reps < 1 || reps > 100) {
        fprintf(stderr, "usage: gelu_step [-n ELEMENTS] [-r REPS]\n");
        return 2;
    }
    float *x = malloc((size_t)n * sizeof *x), *dy = malloc((size_t)n * sizeof *dy),
          *dx = calloc((size_t)n, sizeof *dx);
    if (!x || !dy || !dx) return 1;
    qkv_rng r;
    qkv_rng_seed(&r, 1);
    qkv_rng_fill_normal(&r, x, n, 0, 1);
    qkv_rng_fill_normal(&r, dy, n, 0, 1);
    double f[100], l[100];
    for (int k = 0; k < reps; k++) {
        l[k] = passes(x, dy, dx, n, 1);
        f[k] = passes(x, dy, dx, n, 0);
        if (f[k] < 0 || l[k] < 0) {
            fprintf(stderr, "gelu_step: %s\n", qkv_last_error());
            return 1;
        }
    }
    qsort(f, (size_t)reps, sizeof *f, cmp);
    qsort(l, (size_t)reps, sizeof *l, cmp);
    double mf = f[reps / 2], ml = l[reps / 2];
    printf("exact GELU forward + backward, %lld elements, medians of %d repetitions: libm (reference) %.2f ms, "
           "fast (qkv_vec_erf) %.2f ms: %.2fx\n", (long long)n, reps, ml, mf, ml / mf);
    free(x), free(dy), free(dx);
    return 0;
}
