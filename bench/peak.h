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

static double bench_fma_peak(int threads)
{
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 0;
    const long iters = 20000000;
    double t0 = omp_get_wtime();
    float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += bench_fma_chains(iters);
    double t = omp_get_wtime() - t0;
    if (sink == 12345.0f) t += 1e-9; /* keep the result alive */
    return (double)threads * iters * 10 * 8 * 2 / t * 1e-9;
}
#endif
