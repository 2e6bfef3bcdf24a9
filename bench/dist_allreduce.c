/* dist_allreduce.c: the all-reduce's cost on this machine, for the
 * communication model of docs/distributed.md:
 *   mpirun --allow-run-as-root -np N build/bench/dist_allreduce [P]
 * times qkv_dist_allreduce (SUM) of 1 float (latency: 2(N-1) messages) and
 * of 4M floats (bandwidth), fits t = 2(N-1)/N * bytes / bw + 2(N-1) * lat,
 * and prints the predicted and measured time of gradients' all-reduce for
 * P parameters (default 54081, the toy attention network) through
 * qkv_dist_grads_allreduce. Run as one process it says there is nothing to
 * measure. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "qkv.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* median-free: the mean of reps calls after a warm-up, the slowest rank's */
static double time_allreduce(qkv_dist *d, float *x, int64_t n, int reps)
{
    qkv_dist_allreduce(d, x, n, QKV_DIST_SUM);
    qkv_dist_barrier(d);
    double t0 = now();
    for (int i = 0; i < reps; i++) qkv_dist_allreduce(d, x, n, QKV_DIST_SUM);
    double t = (now() - t0) / reps;
    qkv_dist_allreduce_f64(d, &t, 1, QKV_DIST_SUM);
    return t / qkv_dist_size(d);
}

int main(int argc, char **argv)
{
    int64_t P = argc > 1 ? atoll(argv[1]) : 54081;
    qkv_dist *d;
    if (qkv_dist_new(&d, QKV_DIST_AUTO) || P <= 0) {
        fprintf(stderr, "dist_allreduce: %s\n", P <= 0 ? "P must be positive" : qkv_last_error());
        return 1;
    }
    int N = qkv_dist_size(d), me = qkv_dist_rank(d);
    if (N == 1) {
        printf("dist_allreduce: one process (%s engine): nothing to measure; run under mpirun -np N\n",
               qkv_dist_engine_name(d));
        qkv_dist_free(d);
        return 0;
    }
    const int64_t big = 1 << 22;
    float *x = calloc((size_t)big, sizeof *x);
    double lat_t = time_allreduce(d, x, 1, 2000);
    double big_t = time_allreduce(d, x, big, 10);
    double lat = lat_t / (2.0 * (N - 1));
    double ring = 2.0 * (N - 1) / N * (double)big * 4;
    double bw = ring / (big_t - lat_t > 0 ? big_t - lat_t : big_t);
    double pred = 2.0 * (N - 1) / N * (double)P * 4 / bw + 2.0 * (N - 1) * lat;
    /* the gradients' all-reduce as training does it (packing included) */
    qkv_params *p;
    qkv_params_new(&p);
    qkv_tensor *w;
    qkv_params_add(p, "", "w", 1, (int64_t[]){P}, &w);
    qkv_params_zero_grad(p);
    qkv_dist_grads_allreduce(d, p, 1, 0, NULL);
    qkv_dist_barrier(d);
    double t0 = now();
    enum { REPS = 200 };
    for (int i = 0; i < REPS; i++) qkv_dist_grads_allreduce(d, p, 1, 0, NULL);
    double meas = (now() - t0) / REPS;
    qkv_dist_allreduce_f64(d, &meas, 1, QKV_DIST_MEAN);
    if (me == 0) {
        printf("ranks %d: latency %.2f us per message, bandwidth %.2f GB/s (all-reduce of 1 float "
               "%.2f us, of %lld floats %.2f ms)\n", N, lat * 1e6, bw / 1e9, lat_t * 1e6,
               (long long)big, big_t * 1e3);
        printf("gradients of %lld parameters (%lld bytes): model %.1f us, measured %.1f us per step\n",
               (long long)P, (long long)P * 4, pred * 1e6, meas * 1e6);
    }
    free(x);
    qkv_params_free(p);
    qkv_dist_free(d);
    return 0;
}
