/* omp_wake.c: what one OpenMP parallel region costs on this machine, and
 * from what size an elementwise loop gains by running on the threads.
 *   build/bench/omp_wake            (run it under each OMP_WAIT_POLICY)
 * For n = 1 (an empty region) up to 2^20 floats it times y = 0.999 y + x
 * over n elements, 2,000 times, on one thread and on OpenMP's threads, and
 * prints microseconds a call. Under OMP_WAIT_POLICY=PASSIVE the threads
 * sleep between regions and each region pays for waking them; unset (the
 * default), they spin a while first (docs/benchmarks.md, "Parallel
 * regions"). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    enum { REPS = 2000, NMAX = 1 << 20 };
    float *x = malloc(2 * (size_t)NMAX * sizeof *x);
    if (!x) return 1;
    for (int i = 0; i < 2 * NMAX; i++) x[i] = (float)(i % 97);
    const char *pol = getenv("OMP_WAIT_POLICY");
    printf("OMP_WAIT_POLICY=%s, %d threads\n", pol ? pol : "(unset)", omp_get_max_threads());
    printf("%10s %14s %14s\n", "floats", "1 thread us", "threads us");
    for (int n = 1; n <= NMAX; n *= n == 1 ? 4096 : 4) {
        double us[2];
        for (int par = 0; par < 2; par++) {
            double t0 = omp_get_wtime();
            for (int r = 0; r < REPS; r++) {
#pragma omp parallel for if (par)
                for (int i = 0; i < n; i++) x[i] = x[i] * 0.999f + x[NMAX + i];
            }
            us[par] = (omp_get_wtime() - t0) / REPS * 1e6;
        }
        printf("%10d %14.2f %14.2f\n", n, us[0], us[1]);
    }
    free(x);
    return 0;
}
