/* ce_rows.h: the per-row passes of a softmax cross entropy (the fused
 * op's in train/loss_linear.c; its max, exps and sum also for the two-op
 * qkv_cross_entropy, train/loss.c, and the max for qkv_max_f32) in a form
 * the compiler vectorises, included by rows.c (the baseline build) and
 * vmath_avx512.c (16 lanes). Every sum has
 * 16 partials in a fixed order and the exp is vmath.h's vexpn1, so both
 * builds give the same bits. */
#ifndef QKV_KERNELS_CE_ROWS_H
#define QKV_KERNELS_CE_ROWS_H
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include "kernels/bf16.h"
#include "kernels/vmath.h"

enum { CE_LANES = 16 };

/* The largest of x (n) that is not NaN (-inf if there is none): a
 * comparison that sees a NaN takes the other value (qkv_max_f32). */
static inline float ce_max(const float *x, int64_t n)
{
    float pm[CE_LANES];
    int64_t i = 0;
#if defined(__AVX512F__)
    /* vmaxps(a, b) is a > b ? a : b, lane by lane (GCC does not make it of
     * the C below) */
    __m512 v = _mm512_set1_ps(-INFINITY);
    for (; i + CE_LANES <= n; i += CE_LANES) v = _mm512_max_ps(_mm512_loadu_ps(x + i), v);
    _mm512_storeu_ps(pm, v);
#else
    for (int k = 0; k < CE_LANES; k++) pm[k] = -INFINITY;
    for (; i + CE_LANES <= n; i += CE_LANES)
        for (int k = 0; k < CE_LANES; k++) pm[k] = x[i + k] > pm[k] ? x[i + k] : pm[k];
#endif
    float m = -INFINITY;
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    for (int k = 0; k < CE_LANES; k++) m = pm[k] > m ? pm[k] : m;
    return m;
}

/* y (n) = x + b (b may be NULL: y = x; y may be x); returns ce_max(y). */
static inline float ce_bias_max(float *y, const float *x, const float *b, int64_t n)
{
    if (b)
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i] = x[i] + b[i];
    else if (y != x)
        memcpy(y, x, (size_t)n * sizeof *y);
    return ce_max(y, n);
}

/* x (n) = exp(x - m) (vexpn1); returns their sum in double. */
static inline double ce_exp_sum(float *restrict x, float m, int64_t n)
{
    double ps[CE_LANES];
    for (int k = 0; k < CE_LANES; k++) ps[k] = 0.0;
    int64_t i = 0;
    for (; i + CE_LANES <= n; i += CE_LANES)
        for (int k = 0; k < CE_LANES; k++) {
            float e = vexpn1(x[i + k] - m);
            x[i + k] = e;
            ps[k] += (double)e;
        }
    double s = 0.0;
    for (; i < n; i++) {
        float e = vexpn1(x[i] - m);
        x[i] = e;
        s += (double)e;
    }
    for (int k = 0; k < CE_LANES; k++) s += ps[k];
    return s;
}

/* g = e a + c for the n exps e: written over e, or to d16 in bf16 where
 * d16 is not NULL; colsum (n) += g. */
static inline void ce_grad(float *restrict e, int64_t n, float a, float c, uint16_t *restrict d16,
                           float *restrict colsum)
{
    if (d16) {
#pragma omp simd
        for (int64_t j = 0; j < n; j++) {
            float g = fmaf(e[j], a, c);
            d16[j] = qkv_bf16_from_float(g);
            colsum[j] += g;
        }
        return;
    }
#pragma omp simd
    for (int64_t j = 0; j < n; j++) {
        float g = fmaf(e[j], a, c);
        e[j] = g;
        colsum[j] += g;
    }
}

/* The loops of one build, picked as vmath's are (rows.c): the inline
 * functions above, compiled with that build's flags. */
typedef struct {
    float (*max)(const float *x, int64_t n);
    float (*bias_max)(float *y, const float *x, const float *b, int64_t n);
    double (*exp_sum)(float *x, float m, int64_t n);
    void (*grad)(float *e, int64_t n, float a, float c, uint16_t *d16, float *colsum);
} qkv_ce_rows;
extern const qkv_ce_rows qkv_ce_rows_avx512; /* NULL members where that build is empty */
#endif
