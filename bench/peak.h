/* peak.h: the machine's FP32 FMA peak, measured: 10 independent chains of
 * 8-wide FMAs per thread (enough to cover the FMA latency), for about
 * 0.2 s, and on a CPU with AVX-512 also 12 chains of 16-wide ones; the
 * higher of the two. Returns GFLOP/s over `threads` OpenMP threads (0 on a
 * CPU without AVX2 and FMA). On Zen 4 the 16-wide AVX-512 FMA has the same
 * peak as the 8-wide one (it runs as two halves); on Zen 5 twice it (the
 * 8-wide probe alone measured 216 GFLOP/s on 2 threads where OpenBLAS's
 * sgemm reached 375). */
#ifndef QKV_BENCH_PEAK_H
#define QKV_BENCH_PEAK_H
#include <immintrin.h>
#include <omp.h>

/* One thread's chains (built for AVX2+FMA whatever the file's flags). */
__attribute__((target("avx2,fma"))) static float bench_fma_chains(long iters)
{
    __m256 a[10], x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 10; i++) a[i] = _mm256_set1_ps((float)i);
    for (long n = 0; n < iters; n++)
        for (int i = 0; i < 10; i++) a[i] = _mm256_fmadd_ps(a[i], x, y);
    __m256 s = a[0];
    for (int i = 1; i < 10; i++) s = _mm256_add_ps(s, a[i]);
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0];
}

__attribute__((target("avx512f"))) static float bench_fma_chains16(long iters)
{
    __m512 a[12], x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
    for (long n = 0; n < iters; n++)
        for (int i = 0; i < 12; i++) a[i] = _mm512_fmadd_ps(a[i], x, y);
    __m512 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, a[i]);
    return _mm512_reduce_add_ps(s);
}

/* GFLOP/s of `threads` OpenMP threads each running chains(iters), which
 * does flops_per_iter floating-point operations an iteration. */
static double bench_chains_peak(int threads, long iters, float (*chains)(long), double flops_per_iter)
{
    double t0 = omp_get_wtime();
    float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += chains(iters);
    double t = omp_get_wtime() - t0;
    if (sink == 12345.0f) t += 1e-9; /* keep the result alive */
    return (double)threads * iters * flops_per_iter / t * 1e-9;
}

static double bench_fma_peak(int threads)
{
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 0;
    double p8 = bench_chains_peak(threads, 20000000, bench_fma_chains, 10 * 8 * 2);
    if (!__builtin_cpu_supports("avx512f")) return p8;
    double p16 = bench_chains_peak(threads, 10000000, bench_fma_chains16, 12 * 16 * 2);
    return p16 > p8 ? p16 : p8;
}
#endif
