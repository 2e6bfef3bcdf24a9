/* test_vmath.c: the AVX-512 build of the vectorised exp, tanh, sigmoid, erf
 * and erfc (kernels/vmath.h, picked at run time where the CPU has it) gives
 * the same bits as the baseline build, so results do not depend on the CPU;
 * and both stay near libm in double (the accuracy bounds themselves are
 * tested in test_seq2seq_rnn.c and test_layers_values.c); and the same for
 * the fused cross entropy's row passes, each against its definition. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "kernels/bf16.h"
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

/* The fused cross entropy's row passes (rows.h: qkv_ce_*) in one build:
 * y = x + b and its max, exps and their sum, g = e a + c in bf16 and
 * column sums; each checked against its definition, element by element
 * (exact but for the double sum, which is within 1e-12 of a plain sum). */
typedef struct {
    float y[N], e[N], colsum[N], max;
    uint16_t d16[N];
    double sum;
} ce_out;

static void ce_run(const char *build, const float *x, const float *b, int n, ce_out *o)
{
    qkv_vmath_force(build);
    for (int i = 0; i < n; i++) o->colsum[i] = i % 2 ? 0.0f : 1.5f; /* odd i: colsum is g itself */
    o->max = qkv_ce_bias_max(o->y, x, b, n);
    memcpy(o->e, o->y, (size_t)n * sizeof(float));
    o->sum = qkv_ce_exp_sum(o->e, o->max, n);
    qkv_ce_grad(o->e, n, 0.3f, -0.01f, o->d16, o->colsum);
    qkv_vmath_force(NULL);
}

static void ce_rows_check(void)
{
    static float x[N], b[N], t[N];
    static ce_out o[2];
    /* logits within a few units of each other (exps spread over (0, 1]),
     * one -inf (exp 0) */
    for (int i = 0; i < N; i++) x[i] = 3.0f * sinf(0.37f * (float)i), b[i] = (float)(i % 13) * 0.25f - 1.5f;
    x[5] = -INFINITY;
    int lens[] = {1, 7, 15, 17, 31, 33, 255, 4000};
    for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
        int n = lens[l];
        ce_run("base", x, b, n, &o[0]);
        ce_run("avx512", x, b, n, &o[1]);
        int same = o[0].max == o[1].max && o[0].sum == o[1].sum && !memcmp(o[0].y, o[1].y, (size_t)n * 4) &&
                   !memcmp(o[0].d16, o[1].d16, (size_t)n * 2) && !memcmp(o[0].colsum, o[1].colsum, (size_t)n * 4);
        CHECK(same, "ce rows n=%d: the two builds differ", n);
        int bad = 0;
        double sum = 0;
        for (int i = 0; i < n; i++) t[i] = x[i] + b[i];
        float mx = -INFINITY; /* the rule, in one plain loop */
        for (int i = 0; i < n; i++) mx = t[i] > mx ? t[i] : mx;
        for (int i = 0; i < n; i++) {
            float e = t[i] - mx, g;
            qkv_vec_exp(&e, &e, 1);
            sum += e;
            g = fmaf(e, 0.3f, -0.01f);
            bad += memcmp(&o[1].y[i], &t[i], 4) != 0 || o[1].d16[i] != qkv_bf16_from_float(g) ||
                   o[1].colsum[i] != (i % 2 ? 0.0f : 1.5f) + g;
        }
        CHECK(bad == 0 && o[1].max == mx, "ce rows n=%d: %d values not as defined (max %g, expected %g)", n, bad,
              o[1].max, mx);
        CHECK(fabs(o[1].sum - sum) <= 1e-12 * sum, "ce rows n=%d: sum %.17g, expected %.17g", n, o[1].sum, sum);
    }
    /* no bias, in place (y = x, as loss_linear.c calls it) */
    memcpy(t, x, sizeof t);
    qkv_vmath_force("avx512");
    float m = qkv_ce_bias_max(t, t, NULL, 4000);
    qkv_vmath_force(NULL);
    float mx = -INFINITY;
    for (int i = 0; i < 4000; i++) mx = x[i] > mx ? x[i] : mx;
    CHECK(m == mx && !memcmp(t, x, 4000 * sizeof *t), "ce rows: bias_max without a bias");
}

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
    ce_rows_check();
    return h_finish("test_vmath");
}
