/* bf16.h: bfloat16 (the top 16 bits of an IEEE float: 8 exponent bits,
 * 7 stored mantissa bits), for the BF16 precision mode's matmuls.
 * Conversions round to nearest even like PyTorch's
 * c10::BFloat16 (round_to_nearest_even): subnormals are kept (not flushed
 * to zero), overflow goes to inf, NaN stays NaN (0x7fc0, sign dropped, as
 * c10's scalar conversion does). */
#ifndef QKV_KERNELS_BF16_H
#define QKV_KERNELS_BF16_H
#include <stdint.h>
#include <string.h>
#include "qkv.h"

static inline uint16_t qkv_bf16_from_float(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16; /* ties go to the even result */
    return (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)0x7fc0 : (uint16_t)r;
}

static inline float qkv_bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* x rounded to bf16 and back: the value a bf16 product sees. */
static inline float qkv_bf16_round(float x) { return qkv_bf16_to_float(qkv_bf16_from_float(x)); }

/* n values: y (n) from x (n). */
void qkv_bf16_from_floats(const float *x, uint16_t *y, int64_t n);
void qkv_bf16_to_floats(const uint16_t *x, float *y, int64_t n);
/* y = float(bf16(x)): x rounded to bf16, kept as floats (y may be x). */
void qkv_bf16_round_floats(const float *x, float *y, int64_t n);
/* A bf16 copy of x's n floats on arena a (every element written, so not
 * zeroed first), NULL when out of memory: a value converted once for
 * several products (a Linear's x and W, an RNN's W_hh). */
uint16_t *qkv_bf16_copy(qkv_arena *a, const float *x, int64_t n);
/* True when the CPU has AVX512-BF16 dot products (vdpbf16ps). */
int qkv_bf16_dot_supported(void);
/* True when AMX tiles with bf16 products run here (CPU and OS both), the
 * process having been granted their state; asking grants it. */
int qkv_amx_usable(void);
#endif
