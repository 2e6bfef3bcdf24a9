/* bf16.c: fp32 <-> bf16 over arrays (bf16.h). Plain loops over the inline
 * conversions; the compiler vectorises them (integer adds and shifts, a
 * select for NaN), so they run the same on every CPU and stay exact where
 * the hardware's vcvtneps2bf16 would flush subnormals to zero. */
#define _DEFAULT_SOURCE /* syscall() for arch_prctl */
#include "core/internal.h"
#include "kernels/bf16.h"
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#include <cpuid.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

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

/* AMX: the CPU has the tiles and their bf16 products (CPUID leaf 7: EDX
 * bits 24 and 22), the OS saves tile state (XCR0 bits 17 and 18), and
 * Linux grants this process the tile data (arch_prctl
 * ARCH_REQ_XCOMP_PERM, feature 18): without that grant the first tile
 * instruction faults. Asked once; the answer is kept. QKV_AMX=0 in the
 * environment says no without asking (qkv's own tile kernels off; oneDNN
 * has its own switch, ONEDNN_MAX_CPU_ISA). */
int qkv_amx_usable(void)
{
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
    static int state; /* 0 not asked, 1 usable, -1 not */
    int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
    if (s) return s > 0;
    unsigned a, b, c, d;
    const char *env = getenv("QKV_AMX");
    int ok = !(env && !strcmp(env, "0")) && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1) && (d >> 22 & 1) &&
             __get_cpuid(1, &a, &b, &c, &d) && (c >> 27 & 1); /* OSXSAVE: xgetbv works */
    if (ok) {
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        ok = (lo >> 17 & 3) == 3 && syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18) == 0;
    }
    __atomic_store_n(&state, ok ? 1 : -1, __ATOMIC_RELEASE);
    return ok;
#else
    return 0;
#endif
}
