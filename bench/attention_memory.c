/* attention_memory.c: attention over a long sequence, forward and backward,
 * and the peak resident memory it took. The (L,S) matrix would be
 * L*L*4 bytes (1 GiB at L = 16384); qkv keeps O(L).
 *   build/bench/attention_memory [L] [D]      (defaults 16384, 64)
 * Speed is printed as GFLOP/s and as a fraction of the FMA peak this
 * program measures on the same machine. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include "qkv.h"
#include "peak.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static double peak_mib(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss / 1024.0; /* ru_maxrss is in KiB on Linux */
}

int main(int argc, char **argv)
{
    int64_t L = argc > 1 ? atoll(argv[1]) : 16384, D = argc > 2 ? atoll(argv[2]) : 64;
    double base = peak_mib();
    qkv_ctx *c;
    qkv_arena *a;
    if (qkv_ctx_new(&c) || qkv_arena_new(&a, 0)) return 1;
    qkv_rng r;
    qkv_rng_seed(&r, 1);
    qkv_tensor *q, *k, *v, *out;
    int64_t shape[4] = {1, 1, L, D};
    if (qkv_tensor_new(a, QKV_F32, 4, shape, &q) || qkv_tensor_new(a, QKV_F32, 4, shape, &k) ||
        qkv_tensor_new(a, QKV_F32, 4, shape, &v)) {
        fprintf(stderr, "%s\n", qkv_last_error());
        return 1;
    }
    qkv_tensor *in[3] = {q, k, v};
    for (int i = 0; i < 3; i++) {
        qkv_rng_fill_normal(&r, in[i]->data, L * D, 0, 1);
        in[i]->requires_grad = 1;
    }
    float *dout = malloc((size_t)(L * D) * sizeof *dout);
    qkv_rng_fill_normal(&r, dout, L * D, 0, 1);
    double t0 = now();
    if (qkv_sdpa(c, q, k, v, NULL, &out, NULL)) {
        fprintf(stderr, "%s\n", qkv_last_error());
        return 1;
    }
    double t1 = now();
    if (qkv_backward(c, out, dout)) {
        fprintf(stderr, "%s\n", qkv_last_error());
        return 1;
    }
    double t2 = now();
    double peak1 = bench_fma_peak(1), peak2 = bench_fma_peak(2);
    double fl = 4.0 * L * L * D; /* QK^T and PV, 2 flops per multiply-add */
    printf("attention L=%lld D=%lld, 1 head: forward %.2f s (%.1f GFLOP/s), backward %.2f s "
           "(%.1f GFLOP/s counting 2.5x the forward's flops)\n",
           (long long)L, (long long)D, t1 - t0, fl / (t1 - t0) * 1e-9, t2 - t1,
           2.5 * fl / (t2 - t1) * 1e-9);
    printf("measured FMA peak: %.0f GFLOP/s on 1 thread, %.0f on 2: forward at %.1f%% of the "
           "2-thread peak, backward at %.1f%%\n",
           peak1, peak2, 100 * fl / (t1 - t0) * 1e-9 / peak2, 100 * 2.5 * fl / (t2 - t1) * 1e-9 / peak2);
    printf("peak resident memory %.1f MiB (%.1f MiB at start); the (L,L) weights alone would be "
           "%.0f MiB\n", peak_mib(), base, (double)L * L * 4 / (1 << 20));
    free(dout);
    qkv_arena_free(a);
    qkv_ctx_free(c);
    return 0;
}
