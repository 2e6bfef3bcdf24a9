/* half.c: fp16 <-> fp32 (half.h); bf16 is in bf16.c. */
#include <math.h>
#include <string.h>
#include "kernels/half.h"
#if defined(__F16C__)
#include <immintrin.h>
#endif

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float float_of(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

uint16_t qkv_half_from_float(float x)
{
    uint32_t f = bits_of(x), sign = (f >> 16) & 0x8000;
    f &= 0x7fffffff;
    if (f > 0x7f800000) return (uint16_t)(sign | 0x7e00 | ((f >> 13) & 0x3ff)); /* NaN stays NaN */
    if (f >= 0x477ff000) return (uint16_t)(sign | 0x7c00); /* |x| >= 65520 rounds to inf */
    if (f < 0x38800000) /* below 2^-14: a subnormal half, |x| * 2^24 rounded (exact scaling) */
        return (uint16_t)(sign | (uint32_t)lrintf(float_of(f) * 16777216.0f));
    /* Normal: round the mantissa to 10 bits (to even), rebias the exponent. */
    uint32_t m = f + 0xfff + ((f >> 13) & 1);
    return (uint16_t)(sign | ((m - 0x38000000) >> 13));
}

float qkv_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) return float_of(sign | bits_of((float)m * 5.9604644775390625e-8f)); /* m 2^-24 */
    if (e == 31) return float_of(sign | 0x7f800000 | (m << 13));
    return float_of(sign | ((e + 112) << 23) | (m << 13));
}

void qkv_half_from_floats(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; i++) y[i] = qkv_half_from_float(x[i]);
}

void qkv_half_to_floats(const uint16_t *x, float *y, int64_t n)
{
    int64_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
#endif
    for (; i < n; i++) y[i] = qkv_half_to_float(x[i]);
}
