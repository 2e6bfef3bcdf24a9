/* bf16.c: fp32 <-> bf16 over arrays (bf16.h). Plain loops over the inline
 * conversions; the compiler vectorises them (integer adds and shifts, a
 * select for NaN), so they run the same on every CPU and stay exact where
 * the hardware's vcvtneps2bf16 would flush subnormals to zero. */
#include "core/internal.h"
#include "kernels/bf16.h"

void qkv_bf16_from_floats(const float *x, uint16_t *y, int64_t n)
{
    QKV_PAR_FOR(n >= 4 * QKV_PAR_MIN,
        for (int64_t i = 0; i < n; i++) y[i] = qkv_bf16_from_float(x[i]));
}

uint16_t *qkv_bf16_copy(qkv_arena *a, const float *x, int64_t n)
{
    uint16_t *y = qkv_arena_alloc_uninit(a, (size_t)n * sizeof *y);
    if (y) qkv_bf16_from_floats(x, y, n);
    return y;
}

void qkv_bf16_to_floats(const uint16_t *x, float *y, int64_t n)
{
    QKV_PAR_FOR(n >= 4 * QKV_PAR_MIN,
        for (int64_t i = 0; i < n; i++) y[i] = qkv_bf16_to_float(x[i]));
}

void qkv_bf16_round_floats(const float *x, float *y, int64_t n)
{
    QKV_PAR_FOR(n >= 4 * QKV_PAR_MIN,
        for (int64_t i = 0; i < n; i++) y[i] = qkv_bf16_round(x[i]));
}

int qkv_bf16_dot_supported(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    return __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}
