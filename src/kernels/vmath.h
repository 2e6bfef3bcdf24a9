/* vmath.h: exp, tanh, sigmoid, erf and erfc of a vector, branch-free in a
 * form the compiler vectorises, for rows.c (built for the baseline target:
 * x86-64-v3, 8 floats a vector) and vmath_avx512.c (the same loops built
 * for AVX-512, 16 floats a vector; rows.c picks it at run time). Every
 * function works lane by lane with the same operations in the same order
 * (explicit fmaf, no contraction left to the compiler), so both builds give
 * the same bits (tests/test_vmath.c checks it). */
#ifndef QKV_KERNELS_VMATH_H
#define QKV_KERNELS_VMATH_H
#include <math.h>
#include <stdint.h>
#include <string.h>

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

/* exp passing NaN through (vexp1 clamps it) */
static inline float vexpn1(float x) { return sel(-(int32_t)(x != x), x, vexp1(x)); }

/* vm_NAME(y, x, n): y[i] = F(x[i]) for i < n. y may be x: no alias check
 * (one sent y == x to the scalar loop). */
#define VM_LOOP(NAME, F)                                                  \
    static inline void vm_##NAME(float *y, const float *x, int64_t n)     \
    {                                                                     \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) y[i] = F(x[i]); \
    }
VM_LOOP(erf, verf1)
VM_LOOP(erfc, verfc1)
VM_LOOP(tanh, vtanh1)
VM_LOOP(sigmoid, vsigm1)
VM_LOOP(exp, vexpn1)
#undef VM_LOOP

/* The loops of one build (rows.c picks one): y = f(x) over n elements. */
typedef void (*qkv_vmath_fn)(float *y, const float *x, int64_t n);
typedef struct {
    const char *name;
    qkv_vmath_fn exp, tanh, sigmoid, erf, erfc; /* NULL where the build is empty */
} qkv_vmath;
extern const qkv_vmath qkv_vmath_avx512;
#endif
