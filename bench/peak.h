/* peak.h: the machine's FP32 FMA peak, measured: 10 independent chains of
 * 8-wide FMAs per thread (enough to cover the FMA latency), for about
 * 0.2 s. Returns GFLOP/s over `threads` OpenMP threads (0 on a CPU without
 * AVX2 and FMA). On Zen 4 the 16-wide AVX-512 FMA has the same peak. */
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
    return bench_chains_peak(threads, 20000000, bench_fma_chains, 10 * 8 * 2);
}
#endif
