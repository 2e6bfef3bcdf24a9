/* rows.c: row loops shared by several ops (rows.h). */
#include <math.h>
#include <string.h>
#include "core/internal.h"
#include "kernels/rows.h"

/* Columns go to threads in blocks of this many, so each thread sums whole
 * columns in row order. */
enum { COLS = 64 };

/* Narrow matrices (one column block: a ViT's 64-wide bias gradients over
 * 6,400 rows ran on one thread) are summed by chunks of rows instead: at
 * most SUM_CHUNKS chunks, each summed in row order on some thread, then the
 * chunks added in order, so the result depends on the shape only. */
enum { SUM_CHUNKS = 32, SUM_CHUNK_MIN = 128 };

void qkv_rows_sum_into(float *acc, const float *x, int64_t rows, int64_t n)
{
    int64_t nblk = (n + COLS - 1) / COLS;
    int64_t nch = rows / SUM_CHUNK_MIN < SUM_CHUNKS ? rows / SUM_CHUNK_MIN : SUM_CHUNKS;
    if (nblk == 1 && nch > 1 && rows * n >= QKV_PAR_MIN && !qkv_reference()) {
        float part[SUM_CHUNKS][COLS]; /* n <= COLS */
        int64_t len = (rows + nch - 1) / nch;
#pragma omp parallel for
        for (int64_t k = 0; k < nch; k++) {
            for (int64_t j = 0; j < n; j++) part[k][j] = 0.0f;
            for (int64_t r = k * len; r < rows && r < (k + 1) * len; r++)
                for (int64_t j = 0; j < n; j++) part[k][j] += x[r * n + j];
        }
        for (int64_t k = 0; k < nch; k++)
            for (int64_t j = 0; j < n; j++) acc[j] += part[k][j];
        return;
    }
#pragma omp parallel for if (rows * n >= QKV_PAR_MIN && nblk > 1)
    for (int64_t b = 0; b < nblk; b++) {
        int64_t j0 = b * COLS, j1 = j0 + COLS < n ? j0 + COLS : n;
        /* the block's sums in a local array (acc might alias x, so sums
         * kept in acc went to memory and back at every row), the same
         * additions in the same order */
        float loc[COLS];
        for (int64_t j = j0; j < j1; j++) loc[j - j0] = acc[j];
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = j0; j < j1; j++) loc[j - j0] += x[r * n + j];
        for (int64_t j = j0; j < j1; j++) acc[j] = loc[j - j0];
    }
}

void qkv_rows_broadcast(float *y, const float *b, int64_t rows, int64_t n)
{
#pragma omp parallel for if (rows * n >= QKV_PAR_MIN)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) y[r * n + j] = b[j];
}

void qkv_rows_add(float *y, const float *a, const float *b, int64_t rows, int64_t n)
{
#pragma omp parallel for if (rows * n >= QKV_PAR_MIN)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) y[r * n + j] = a[r * n + j] + (b ? b[j] : 0.0f);
}

void qkv_vec_add_into(float *y, const float *x, int64_t n)
{
#pragma omp parallel for if (n >= QKV_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

/* ---- exp, sigmoid, tanh and erf of a vector, in a form the compiler vectorises ----
 * exp: Cephes' expf (x = n ln2 + r, ln 2 in two parts, a degree-6
 * polynomial in r, 2^n built in the exponent bits; n rounded with the
 * 1.5*2^23 trick), x clamped to [-87, 88]. sigmoid(x) = 1 / (1 + exp(-x)).
 * tanh: |x| < 0.625: x + x^3 P(x^2) (Cephes' tanhf polynomial); else
 * sign(x) (1 - 2 / (exp(2|x|) + 1)), |x| clamped to 9.1 (tanh is 1 in
 * float from 9.01). Every branch is computed and one selected bitwise: the
 * loops have no branch (a float ?: stops GCC's vectoriser here). NaN gives
 * NaN. Measured in tests/test_seq2seq_rnn.c against double precision. */
static inline int32_t fbits(float f)
{
    int32_t i;
    memcpy(&i, &f, sizeof i);
    return i;
}

static inline float bitsf(int32_t i)
{
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}

/* a where m is all ones, b where m is 0. */
static inline float sel(int32_t m, float a, float b) { return bitsf((fbits(a) & m) | (fbits(b) & ~m)); }

static inline float vexp1(float x)
{
    x = sel(-(int32_t)(x < 88.0f), x, 88.0f);
    x = sel(-(int32_t)(x > -87.0f), x, -87.0f);
    float fx = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    /* the polynomial by Horner's rule in fused multiply-adds (fmaf: a
     * vector FMA on x86-64-v3), half the dependent steps of the multiply
     * then add that GCC keeps in ISO C mode: the exact GELU's forward and
     * backward (bench/gelu_step, one thread, old and new builds alternating)
     * went from 4.3-5.1x to 5.0-6.3x libm's speed, about 15% less time */
    float r = x - fx * 0.693359375f + fx * 2.12194440e-4f, r2 = r * r;
    float ep = fmaf(r, 1.9875691500e-4f, 1.3981999507e-3f);
    ep = fmaf(ep, r, 8.3334519073e-3f);
    ep = fmaf(ep, r, 4.1665795894e-2f);
    ep = fmaf(ep, r, 1.6666665459e-1f);
    ep = fmaf(ep, r, 5.0000001201e-1f);
    ep = fmaf(ep, r2, r) + 1.0f;
    return ep * bitsf(((int32_t)fx + 127) << 23);
}

static inline float vtanh1(float x)
{
    float a = fabsf(x), z = x * x;
    float p = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
                1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
    float big = copysignf(1.0f - 2.0f / (vexp1(2.0f * sel(-(int32_t)(a < 9.1f), a, 9.1f)) + 1.0f), x);
    float t = sel(-(int32_t)(a < 0.625f), p, big);
    return sel(-(int32_t)(x != x), x, t);
}

static inline float vsigm1(float x)
{
    return sel(-(int32_t)(x != x), x, 1.0f / (1.0f + vexp1(-x)));
}

/* erf and erfc: |x| < 1: erf = x P(x^2), P of degree 6 fitted to
 * erf(x)/x on [0, 1] (relative error 1.2e-9 in double; float rounding
 * dominates); |x| >= 1, and erfc everywhere: erfc(|x|) by Numerical Recipes'
 * erfcc (Press et al., 6.2): t = 1 / (1 + |x|/2), erfc = t exp(-x^2 +
 * c(t)), c of degree 9, fractional error below 1.2e-7, so erfc keeps its
 * relative accuracy far into the tail (GELU's Phi(x) = erfc(-x/sqrt 2) / 2
 * for negative x needs it: 1 + erf cancels there); erf(x) = sign(x) (1 -
 * erfc(|x|)), erfc(-|x|) = 2 - erfc(|x|). erfc(+inf) is 0 (t is 0). */
static inline float verf_small(float x)
{
    float z = x * x;
    return ((((((7.889219705e-05f * z - 8.020874229e-04f) * z + 5.189539399e-03f) * z -
               2.685444616e-02f) * z + 1.128360033e-01f) * z - 3.761262596e-01f) * z +
            1.128379107e+00f) * x;
}

/* erfc(a) for a >= 0 (a may be +inf) */
static inline float verfc_tail(float a)
{
    /* c(t) by Horner's rule in fused multiply-adds (fmaf: one rounding
     * each; a vector FMA where the target has one, half the instructions of
     * the multiply-then-add GCC keeps in ISO C mode) */
    float t = 1.0f / (1.0f + 0.5f * a);
    float c = fmaf(t, 0.17087277f, -0.82215223f);
    c = fmaf(t, c, 1.48851587f);
    c = fmaf(t, c, -1.13520398f);
    c = fmaf(t, c, 0.27886807f);
    c = fmaf(t, c, -0.18628806f);
    c = fmaf(t, c, 0.09678418f);
    c = fmaf(t, c, 0.37409196f);
    c = fmaf(t, c, 1.00002368f);
    c = fmaf(t, c, -1.26551223f);
    return t * vexp1(c - a * a);
}

static inline float verf1(float x)
{
    float a = fabsf(x);
    float big = copysignf(1.0f - verfc_tail(a), x);
    float e = sel(-(int32_t)(a < 1.0f), verf_small(x), big);
    return sel(-(int32_t)(x != x), x, e);
}

/* erfc: the erfcc form on the whole line (its fraction holds from 0 on;
 * 1 - x P(x^2) would lose erfc's relative accuracy near |x| = 1) */
static inline float verfc1(float x)
{
    float tail = verfc_tail(fabsf(x));
    float e = sel(-(int32_t)(x < 0.0f), 2.0f - tail, tail);
    return sel(-(int32_t)(x != x), x, e);
}

void qkv_vec_erf(float *y, const float *x, int64_t n)
{
#pragma omp simd /* y may be x: no alias check (it sent y == x to the scalar loop) */
    for (int64_t i = 0; i < n; i++) y[i] = verf1(x[i]);
}

void qkv_vec_erfc(float *y, const float *x, int64_t n)
{
#pragma omp simd /* y may be x: no alias check (it sent y == x to the scalar loop) */
    for (int64_t i = 0; i < n; i++) y[i] = verfc1(x[i]);
}

void qkv_vec_tanh(float *y, const float *x, int64_t n)
{
#pragma omp simd /* y may be x: no alias check (it sent y == x to the scalar loop) */
    for (int64_t i = 0; i < n; i++) y[i] = vtanh1(x[i]);
}

void qkv_vec_sigmoid(float *y, const float *x, int64_t n)
{
#pragma omp simd /* y may be x: no alias check (it sent y == x to the scalar loop) */
    for (int64_t i = 0; i < n; i++) y[i] = vsigm1(x[i]);
}

void qkv_vec_exp(float *y, const float *x, int64_t n)
{
#pragma omp simd /* y may be x: no alias check (it sent y == x to the scalar loop) */
    for (int64_t i = 0; i < n; i++) y[i] = sel(-(int32_t)(x[i] != x[i]), x[i], vexp1(x[i]));
}

/* The three sums share one shape: 8 lanes, then the tail, then the lanes
 * in order. TERM(i) is the i-th term. */
#define SUM8(n, TERM)                                                   \
    do {                                                                \
        double p_[8] = {0}, s_ = 0;                                     \
        int64_t i = 0;                                                  \
        for (; i + 8 <= (n); i += 8)                                    \
            for (int k_ = 0; k_ < 8; k_++) p_[k_] += TERM(i + k_);      \
        for (; i < (n); i++) s_ += TERM(i);                             \
        for (int k_ = 0; k_ < 8; k_++) s_ += p_[k_];                    \
        return s_;                                                      \
    } while (0)

double qkv_sum_f64(const float *x, int64_t n)
{
#define T(i) (double)x[i]
    SUM8(n, T);
#undef T
}

double qkv_sum_sq_dev(const float *x, double m, int64_t n)
{
#define T(i) (((double)x[i] - m) * ((double)x[i] - m))
    SUM8(n, T);
#undef T
}

double qkv_sum_dot_dev(const float *g, const float *x, double m, int64_t n)
{
#define T(i) ((double)g[i] * ((double)x[i] - m))
    SUM8(n, T);
#undef T
}
#undef SUM8
