/* seq2seq_rnn_step.c: the time of one training step (forward, cross-entropy,
 * backward, Adam) of the recurrent encoder-decoder with attention, qkv's
 * side of bench/seq2seq_rnn.sh (bench/seq2seq_rnn_step.py is PyTorch's).
 *   build/bench/seq2seq_rnn_step [ATTN [RNN [B [H [V [L [STEPS]]]]]]]
 * defaults: additive gru 64 256 8000 12 10. Embedding size = H; source
 * lengths drawn in [L/2, L], targets of L+1 steps (the last row's shorter,
 * padded with 0 = ignore_index). Prints "ROW qkv<threads> <attn> <rnn>
 * <median ms> <median CPU ms>" over STEPS steps after 2 warm-up steps (CPU
 * time: the process's, all threads; on a shared machine it moves less
 * than the wall time). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "qkv.h"

static double cpu_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *an = argc > 1 ? argv[1] : "additive", *rn = argc > 2 ? argv[2] : "gru";
    int64_t B = argc > 3 ? atoll(argv[3]) : 64, H = argc > 4 ? atoll(argv[4]) : 256;
    int64_t V = argc > 5 ? atoll(argv[5]) : 8000, L = argc > 6 ? atoll(argv[6]) : 12;
    int steps = argc > 7 ? atoi(argv[7]) : 10, T = (int)L + 1;
    qkv_seq2seq_rnn_opts o = qkv_seq2seq_rnn_opts_default(V, V, H, H);
    o.rnn = rn[0] == 'l' ? QKV_RNN_LSTM : QKV_RNN_GRU;
    o.max_length = T;
    o.padding_idx = 0;
    qkv_params *p;
    qkv_ctx *c;
    qkv_optim *opt;
    qkv_rng r;
    qkv_seq2seq_rnn m;
    qkv_rng_seed(&r, 1);
    qkv_optim_opts oo = qkv_optim_adam_opts_default();
    int64_t *src = malloc((size_t)(B * L) * 8), *tin = malloc((size_t)(B * T) * 8);
    int64_t *tout = malloc((size_t)(B * T) * 8), *lens = malloc((size_t)B * 8);
    for (int64_t n = 0; n < B; n++) {
        lens[n] = n == 0 ? L : L / 2 + (int64_t)(qkv_rng_next(&r) % (uint64_t)(L - L / 2 + 1));
        for (int64_t j = 0; j < L; j++) src[n * L + j] = j < lens[n] ? 3 + (int64_t)(qkv_rng_next(&r) % (uint64_t)(V - 3)) : 0;
        for (int64_t t = 0; t < T; t++) {
            tout[n * T + t] = n == B - 1 && t > T / 2 ? 0 : 3 + (int64_t)(qkv_rng_next(&r) % (uint64_t)(V - 3));
            tin[n * T + t] = t == 0 ? 1 : tout[n * T + t - 1];
        }
    }
    if (qkv_rnn_attention_parse(an, &o.attention) || qkv_params_new(&p) || qkv_ctx_new(&c) ||
        qkv_seq2seq_rnn_init(&m, &o, p, "", &r) || qkv_optim_new(&opt, p, &oo)) {
        fprintf(stderr, "%s\n", qkv_last_error());
        return 1;
    }
    qkv_ctx_set_training(c, 1);
    /* QKV_BENCH_PRECISION=bf16: qkv's BF16 mode (docs/bf16.md) */
    const char *prec = getenv("QKV_BENCH_PRECISION");
    int bf16 = prec && !strcmp(prec, "bf16");
    if (bf16 && qkv_ctx_set_precision(c, QKV_BF16)) {
        fprintf(stderr, "%s\n", qkv_last_error());
        return 1;
    }
    /* QKV_BENCH_TWO_CALLS=1: the forward's logits, then the loss (the
     * output layer and the cross entropy as two ops), for comparison */
    const char *tc = getenv("QKV_BENCH_TWO_CALLS");
    int two_calls = tc && !strcmp(tc, "1");
    double *ms = malloc((size_t)(steps + 2) * sizeof *ms), *cpu = malloc((size_t)(steps + 2) * sizeof *cpu);
    for (int s = 0; s < steps + 2; s++) {
        double t0 = omp_get_wtime(), c0 = cpu_ms();
        qkv_ctx_reset(c);
        qkv_arena *a = qkv_ctx_arena(c);
        qkv_tensor *ts, *ti, *to, *lg, *loss = NULL;
        if (qkv_tensor_wrap_i64(a, src, 2, (int64_t[]){B, L}, &ts) ||
            qkv_tensor_wrap_i64(a, tin, 2, (int64_t[]){B, T}, &ti) ||
            qkv_tensor_wrap_i64(a, tout, 2, (int64_t[]){B, T}, &to) ||
            (two_calls ? qkv_seq2seq_rnn_forward(c, &m, ts, lens, ti, NULL, &lg, NULL) ||
                             qkv_seq2seq_rnn_loss(c, lg, to, 0, &loss)
                       : qkv_seq2seq_rnn_forward_loss(c, &m, ts, lens, ti, to, 0, NULL, &loss, NULL)) ||
            qkv_backward(c, loss, NULL) ||
            qkv_optim_step(opt)) {
            fprintf(stderr, "%s\n", qkv_last_error());
            return 1;
        }
        qkv_params_zero_grad(p);
        ms[s] = (omp_get_wtime() - t0) * 1e3;
        cpu[s] = cpu_ms() - c0;
    }
    qsort(ms + 2, (size_t)steps, sizeof *ms, cmp);
    qsort(cpu + 2, (size_t)steps, sizeof *cpu, cmp);
    printf("ROW qkv%s%d %s %s %.2f %.2f\n", bf16 ? "bf16_" : "", omp_get_max_threads(), an, rn, ms[2 + steps / 2],
           cpu[2 + steps / 2]);
    qkv_optim_free(opt);
    qkv_seq2seq_rnn_free(&m);
    qkv_ctx_free(c);
    qkv_params_free(p);
    free(ms), free(cpu), free(src), free(tin), free(tout), free(lens);
    return 0;
}
