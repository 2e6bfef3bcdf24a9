/* vmath.c: the vectorised exp, tanh, sigmoid, erf and erfc (kernels/vmath.h)
 * in their baseline build (x86-64-v3: 8 floats a vector) and their AVX-512
 * build (16), one thread, 256 floats in L1 (the exact GELU's block), in
 * nanoseconds a float; the best of 5 rounds of 200,000 calls each.
 *   build/bench/vmath
 * (docs/benchmarks.md, "Parallel regions": "The vector math in AVX-512"). */
#include <stdio.h>
#include <stdlib.h>
#include "bench_util.h"
#include "kernels/rows.h"

enum { N = 256, CALLS = 200000, ROUNDS = 5 };

static double ns_per_float(void (*f)(float *, const float *, int64_t), float *x, float *y)
{
    double best = 1e30;
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = bench_now();
        for (int c = 0; c < CALLS; c++) {
            f(y, x, N);
            x[c % N] += y[0] * 1e-30f; /* a dependence, so no call is skipped */
        }
        double t = (bench_now() - t0) / CALLS / N * 1e9;
        if (t < best) best = t;
    }
    return best;
}

int main(void)
{
    static float x[N], y[N];
    srand(1);
    for (int i = 0; i < N; i++) x[i] = ((float)rand() / (float)RAND_MAX - 0.5f) * 6.0f; /* GELU's inputs' range */
    static const struct {
        const char *name;
        void (*f)(float *, const float *, int64_t);
    } fns[] = {{"exp", qkv_vec_exp}, {"tanh", qkv_vec_tanh}, {"sigmoid", qkv_vec_sigmoid},
               {"erf", qkv_vec_erf}, {"erfc", qkv_vec_erfc}};
    int wide = qkv_vmath_force("avx512");
    printf("%-8s %14s %14s\n", "function", "base ns/float", wide ? "avx512 ns/float" : "(no AVX-512)");
    for (size_t i = 0; i < sizeof fns / sizeof *fns; i++) {
        qkv_vmath_force("base");
        double b = ns_per_float(fns[i].f, x, y);
        double w = wide && qkv_vmath_force("avx512") ? ns_per_float(fns[i].f, x, y) : 0;
        printf("%-8s %14.3f %14.3f\n", fns[i].name, b, w);
    }
    qkv_vmath_force(NULL);
    return 0;
}
