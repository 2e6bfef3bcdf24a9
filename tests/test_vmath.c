/* test_vmath.c: the AVX-512 build of the vectorised exp, tanh, sigmoid, erf
 * and erfc (kernels/vmath.h, picked at run time where the CPU has it) gives
 * the same bits as the baseline build, so results do not depend on the CPU;
 * and both stay near libm in double (the accuracy bounds themselves are
 * tested in test_seq2seq_rnn.c and test_layers_values.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "kernels/rows.h"

enum { N = 1 << 16 };

typedef void (*fn_t)(float *y, const float *x, int64_t n);

/* inputs: a sweep of [-lim, lim], random values at every scale, and the
 * special values, at lengths that leave every tail length of both builds */
static void fill(float *x, float lim)
{
    for (int i = 0; i < N / 2; i++) x[i] = -lim + 2 * lim * (float)i / (N / 2);
    srand(7);
    for (int i = N / 2; i < N; i++) {
        float u = (float)rand() / RAND_MAX, e = (float)(rand() % 40) - 20;
        x[i] = (rand() & 1 ? -1 : 1) * u * powf(2.0f, e);
    }
    const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 88.0f, -87.0f, 1e-40f, -1e-40f, 9.1f, 0.625f, 1.0f};
    for (size_t i = 0; i < sizeof sp / sizeof *sp; i++) x[i * 97] = sp[i];
}

static void same_bits(const char *name, fn_t f, double (*ref)(double), float lim)
{
    static float x[N], a[N], b[N];
    fill(x, lim);
    int lens[] = {1, 7, 15, 17, 31, 33, 255, N};
    for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
        int n = lens[l];
        CHECK(qkv_vmath_force("base"), "base build");
        f(a, x, n);
        qkv_vmath_force("avx512");
        f(b, x, n);
        int diff = 0, first = -1;
        for (int i = 0; i < n; i++)
            if (memcmp(&a[i], &b[i], sizeof(float)) && !(isnan(a[i]) && isnan(b[i]))) diff++, first = first < 0 ? i : first;
        CHECK(diff == 0, "%s n=%d: %d elements differ between builds (first x=%g: %a vs %a)", name, n, diff,
              first < 0 ? 0.0 : x[first], first < 0 ? 0.0 : a[first], first < 0 ? 0.0 : b[first]);
    }
    /* in place (y == x), as the GELU calls them */
    memcpy(a, x, sizeof x);
    qkv_vmath_force("avx512");
    f(a, a, N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        double r = ref(x[i]);
        if (fabs(x[i]) > lim || isnan(r) != isnan(a[i])) continue;
        if (!isnan(r) && fabs(a[i] - r) > 1e-6 * (1 + fabs(r))) bad++;
    }
    CHECK(bad == 0, "%s: %d in-place values off libm by more than 1e-6 (1 + |f|)", name, bad);
    qkv_vmath_force(NULL);
}

static double sigm(double x) { return 1 / (1 + exp(-x)); }

int main(void)
{
    if (!qkv_vmath_force("avx512")) {
        printf("test_vmath: this CPU has no AVX-512; only the baseline build runs here, nothing to compare\n");
        qkv_vmath_force(NULL);
        return h_finish("test_vmath");
    }
    same_bits("exp", qkv_vec_exp, exp, 80.0f);
    same_bits("tanh", qkv_vec_tanh, tanh, 12.0f);
    same_bits("sigmoid", qkv_vec_sigmoid, sigm, 30.0f);
    same_bits("erf", qkv_vec_erf, erf, 6.0f);
    same_bits("erfc", qkv_vec_erfc, erfc, 9.0f);
    return h_finish("test_vmath");
}
