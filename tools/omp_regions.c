/* omp_regions.c: counts the OpenMP parallel regions a program opens (GCC's
 * libgomp: each `#pragma omp parallel` is a call of GOMP_parallel), and
 * of them those that ran on more than one thread; printed on stderr at
 * exit. An LD_PRELOAD wrapper, for docs/benchmarks.md ("Parallel regions"):
 *   cc -O2 -shared -fPIC tools/omp_regions.c -o build/omp_regions.so -ldl
 *   OMP_WAIT_POLICY=PASSIVE LD_PRELOAD=build/omp_regions.so build/bench/vit_step --no-torch -r 1
 * (vit_step -r 1 runs 12 steps; lm_bench train 8 runs 10, set-up aside). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

typedef void (*region_fn)(void *);
static long regions, parallel;

void GOMP_parallel(region_fn fn, void *data, unsigned nthreads, unsigned flags)
{
    static void (*real)(region_fn, void *, unsigned, unsigned);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "GOMP_parallel");
    __atomic_add_fetch(&regions, 1, __ATOMIC_RELAXED);
    if (nthreads != 1) __atomic_add_fetch(&parallel, 1, __ATOMIC_RELAXED);
    real(fn, data, nthreads, flags);
}

__attribute__((destructor)) static void report(void)
{
    fprintf(stderr, "omp_regions: %ld parallel regions, %ld of them on more than one thread\n", regions, parallel);
}
