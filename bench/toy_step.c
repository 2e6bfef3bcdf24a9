/* toy_step.c: the time of one training step (forward, backward, Adam) of
 * the lecture's toy networks, to watch threading and kernel changes.
 *   build/bench/toy_step [T] [B]       (defaults 100, 100)
 * Prints ms per step (median of 10 after 2 warm-up steps) and GFLOP/s
 * against the FMA peak measured in the same run. */
#include <stdio.h>
#include <stdlib.h>
#include "peak.h"
#include "qkv.h"

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int64_t T = argc > 1 ? atoll(argv[1]) : 100, B = argc > 2 ? atoll(argv[2]) : 100;
    double peak = bench_fma_peak(omp_get_max_threads());
    const char *names[2] = {"convolutional", "self-attention"};
    for (int model = 0; model < 2; model++) {
        qkv_params *p;
        qkv_ctx *c;
        qkv_optim *o;
        qkv_rng r;
        qkv_toy_net net;
        qkv_rng_seed(&r, 1);
        qkv_optim_opts oo = qkv_optim_adam_opts_default();
        float *in = malloc((size_t)(B * T) * 4), *tg = malloc((size_t)(B * T) * 4);
        if (qkv_params_new(&p) || qkv_ctx_new(&c) || qkv_toy_net_init(&net, model, 1, 64, 5, 0, p, &r) ||
            qkv_optim_new(&o, p, &oo) || qkv_toy_generate(&r, QKV_TOY_PAIRS, B, T, 0.3f, in, tg)) {
            fprintf(stderr, "%s\n", qkv_last_error());
            return 1;
        }
        qkv_ctx_set_training(c, 1);
        double ms[12];
        for (int s = 0; s < 12; s++) {
            double t0 = omp_get_wtime();
            qkv_ctx_reset(c);
            qkv_tensor *x, *t, *y, *l;
            if (qkv_tensor_wrap(qkv_ctx_arena(c), in, 3, (int64_t[]){B, 1, T}, &x) ||
                qkv_tensor_wrap(qkv_ctx_arena(c), tg, 3, (int64_t[]){B, 1, T}, &t) ||
                qkv_module_forward(c, &net.seq.base, x, &y) ||
                qkv_mse_loss(c, y, t, QKV_REDUCTION_MEAN, &l) || qkv_backward(c, l, NULL) ||
                qkv_optim_step(o)) {
                fprintf(stderr, "%s\n", qkv_last_error());
                return 1;
            }
            qkv_params_zero_grad(p);
            ms[s] = (omp_get_wtime() - t0) * 1e3;
        }
        qsort(ms + 2, 10, sizeof *ms, cmp);
        /* Forward flops per sample: each Conv1d 2*Cin*Cout*K*T; attention's
         * three 1x1 convs and QK^T, PV 2*T*T*64 each; training about 3x. */
        double conv = 2.0 * T * (1 * 64 * 5 + 64 * 1 * 5), mid = 2.0 * T * 64 * 64 * 5;
        double fwd = model == 0 ? conv + 3 * mid : conv + 2 * mid + 3 * 2.0 * T * 64 * 64 + 2 * 2.0 * T * T * 64;
        double gf = 3 * fwd * B / (ms[6] * 1e-3) * 1e-9;
        printf("%-14s network, B=%lld T=%lld: %.1f ms/step (median of 10), %.1f GFLOP/s = %.1f%% of "
               "the %.0f GFLOP/s peak measured here\n", names[model], (long long)B, (long long)T, ms[6],
               gf, 100 * gf / peak, peak);
        qkv_optim_free(o);
        qkv_toy_net_free(&net);
        qkv_ctx_free(c);
        qkv_params_free(p);
        free(in);
        free(tg);
    }
    return 0;
}
