/* decode.c: the time of one decoding step with the KV cache, against
 * recomputing the whole sequence, for a GPT-style decoder-only stack:
 * 6 layers, d_model 512, 8 heads, dim_feedforward 2048, random weights,
 * batch 1, cache max_len 4096.
 *   make && build/bench/decode             (OpenMP threads: OMP_NUM_THREADS or all)
 * At positions 10, 64, 100, 1000 and 4095 (the cache's last) it prints the
 * median time of one cached step (one new token attending to the cache),
 * the time of one full forward of the sequence so far (what a step costs
 * without a cache), their ratio, and the cached step's time(4095) /
 * time(64) (the target: <= 2) and time(1000) / time(10): with the cache a
 * step's cost grows linearly with the position, the weights' products are
 * the same at every position, and the attention over the cache runs on
 * every thread, split over the cache length.
 *
 * Then the 16-bit variants against the FP32 step, timed interleaved (one
 * step of each per round, the best of each: ratios under the same load):
 * an fp16 cache, a bf16 cache, bf16 weights (qkv_bf16_weights on the
 * cache) with an FP32 cache, and bf16 weights with a bf16 cache
 * (docs/bf16_decode.md). Last, FP32 against bf16 weights and cache as a
 * generation loop runs them: each variant's steps back to back (median of
 * 41), the two in alternated blocks, four blocks at positions 64 and 4095. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "bench_util.h"

enum { LAYERS = 6, E = 512, HEADS = 8, FF = 2048, MAX_LEN = 4096, NPOS = 5 };

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static float *xs; /* (MAX_LEN, E): the inputs of every position, batch 1 */

/* Fills the cache from its len up to position p (one forward of the gap). */
static void fill_to(qkv_ctx *c, const qkv_transformer_decoder_only *m, qkv_kv_cache *kc, int64_t p)
{
    if (kc->len >= p) return;
    qkv_ctx_reset(c);
    qkv_tensor *x, *y;
    TRY(qkv_tensor_wrap(qkv_ctx_arena(c), xs + kc->len * E, 3, (int64_t[]){1, p - kc->len, E}, &x));
    TRY(qkv_transformer_decoder_only_forward_cached(c, m, kc, x, NULL, &y));
}

/* Median seconds of one cached step at position p (the token at index p). */
static double cached_step(qkv_ctx *c, const qkv_transformer_decoder_only *m, qkv_kv_cache *kc,
                          int64_t p, int reps)
{
    double t[64];
    fill_to(c, m, kc, p);
    for (int r = 0; r < reps; r++) {
        TRY(qkv_kv_cache_truncate(kc, p));
        qkv_ctx_reset(c);
        qkv_tensor *x, *y;
        double t0 = bench_now();
        TRY(qkv_tensor_wrap(qkv_ctx_arena(c), xs + p * E, 3, (int64_t[]){1, 1, E}, &x));
        TRY(qkv_transformer_decoder_only_forward_cached(c, m, kc, x, NULL, &y));
        t[r] = bench_now() - t0;
    }
    return median(t, reps);
}

enum { NVAR = 5 };

/* The best seconds of one cached step at position p of each cache in
 * kcs, in rounds of one step each. */
static void cached_steps_interleaved(qkv_ctx *c, const qkv_transformer_decoder_only *m,
                                     qkv_kv_cache **kcs, int n, int64_t p, int rounds, double *best)
{
    for (int i = 0; i < n; i++) {
        fill_to(c, m, kcs[i], p);
        best[i] = 1e30;
    }
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < n; i++) {
            TRY(qkv_kv_cache_truncate(kcs[i], p));
            qkv_ctx_reset(c);
            qkv_tensor *x, *y;
            double t0 = bench_now();
            TRY(qkv_tensor_wrap(qkv_ctx_arena(c), xs + p * E, 3, (int64_t[]){1, 1, E}, &x));
            TRY(qkv_transformer_decoder_only_forward_cached(c, m, kcs[i], x, NULL, &y));
            double dt = bench_now() - t0;
            if (dt < best[i]) best[i] = dt;
        }
}

/* Median seconds of the full forward of positions [0, p] (no cache). */
static double recompute(qkv_ctx *c, const qkv_transformer_decoder_only *m, int64_t p, int reps)
{
    double t[8];
    for (int r = 0; r < reps; r++) {
        qkv_ctx_reset(c);
        qkv_tensor *x, *y;
        double t0 = bench_now();
        TRY(qkv_tensor_wrap(qkv_ctx_arena(c), xs, 3, (int64_t[]){1, p + 1, E}, &x));
        TRY(qkv_transformer_decoder_only_forward(c, m, x, NULL, &y));
        t[r] = bench_now() - t0;
    }
    return median(t, reps);
}

int main(void)
{
    qkv_params *p;
    qkv_ctx *c;
    qkv_rng rng;
    TRY(qkv_params_new(&p));
    TRY(qkv_ctx_new(&c));
    qkv_ctx_set_grad(c, 0);
    qkv_rng_seed(&rng, 1);
    qkv_transformer_layer_opts o = qkv_transformer_layer_opts_default(E, HEADS);
    o.dim_feedforward = FF;
    o.batch_first = 1;
    o.norm_first = 1;
    o.activation = QKV_ACTIVATION_GELU;
    qkv_transformer_decoder_only m;
    TRY(qkv_transformer_decoder_only_init(&m, &o, LAYERS, 1e-5f, p, "", &rng));
    for (int i = 0; i < qkv_params_count(p); i++) { /* layers differ, as after training */
        qkv_tensor *t = qkv_params_at(p, i);
        if (t->ndim > 1) TRY(qkv_init_xavier_uniform(&rng, t, 1.0f));
    }
    xs = malloc((size_t)MAX_LEN * E * sizeof *xs);
    qkv_rng_fill_normal(&rng, xs, (int64_t)MAX_LEN * E, 0, 1);
    qkv_kv_cache kc, kh; /* fp32, and fp16 (qkv_kv_cache_init_half) */
    TRY(qkv_kv_cache_init(&kc, LAYERS, 1, HEADS, E / HEADS, MAX_LEN));
    TRY(qkv_kv_cache_init_half(&kh, LAYERS, 1, HEADS, E / HEADS, MAX_LEN));

    int64_t pos[NPOS] = {10, 64, 100, 1000, MAX_LEN - 1};
    int reps_c[NPOS] = {41, 41, 41, 41, 21}, reps_r[NPOS] = {5, 5, 5, 3, 1};
    double tc[NPOS], th[NPOS], tr[NPOS];
    printf("decoder-only stack: %d layers, d_model %d, %d heads, dim_feedforward %d, batch 1, "
           "cache max_len %d, %d OpenMP threads\n", LAYERS, E, HEADS, FF, MAX_LEN,
           omp_get_max_threads());
    printf("%9s %18s %18s %18s %10s\n", "position", "cached step ms", "fp16 cache ms",
           "recompute ms", "speedup");
    cached_step(c, &m, &kc, 5, 5); /* warm-up */
    cached_step(c, &m, &kh, 5, 5);
    for (int i = 0; i < NPOS; i++) {
        tc[i] = cached_step(c, &m, &kc, pos[i], reps_c[i]);
        th[i] = cached_step(c, &m, &kh, pos[i], reps_c[i]);
        tr[i] = recompute(c, &m, pos[i], reps_r[i]);
        printf("%9lld %18.3f %18.3f %18.2f %9.1fx\n", (long long)pos[i], 1e3 * tc[i], 1e3 * th[i],
               1e3 * tr[i], tr[i] / tc[i]);
        fflush(stdout);
    }
    printf("cached step time(%d) / time(64) = %.2f (target <= 2); time(1000) / time(10) = %.2f; "
           "time(%d) / time(10) = %.2f\n", MAX_LEN - 1, tc[4] / tc[1], tc[3] / tc[0],
           MAX_LEN - 1, tc[4] / tc[0]);
    printf("fp16 cache: time(%d) / time(64) = %.2f (target <= 2); time(%d) / time(10) = %.2f\n",
           MAX_LEN - 1, th[4] / th[1], MAX_LEN - 1, th[4] / th[0]);

    /* The 16-bit variants, interleaved with the FP32 step. */
    qkv_bf16_weights w;
    TRY(qkv_bf16_weights_init(&w, p));
    qkv_kv_cache kb, kw, kbw; /* bf16 cache; FP32 cache + bf16 weights; both */
    TRY(qkv_kv_cache_init_bf16(&kb, LAYERS, 1, HEADS, E / HEADS, MAX_LEN));
    TRY(qkv_kv_cache_init(&kw, LAYERS, 1, HEADS, E / HEADS, MAX_LEN));
    TRY(qkv_kv_cache_init_bf16(&kbw, LAYERS, 1, HEADS, E / HEADS, MAX_LEN));
    kw.weights = kbw.weights = &w;
    qkv_kv_cache *kcs[NVAR] = {&kc, &kh, &kb, &kw, &kbw};
    printf("\nbest of interleaved rounds, time / FP32 step's (FP32 weights and cache):\n");
    printf("%9s %12s %12s %12s %14s %16s\n", "position", "fp32 ms", "fp16 cache", "bf16 cache",
           "bf16 weights", "bf16 both");
    for (int i = 0; i < NPOS; i++) {
        double b[NVAR];
        cached_steps_interleaved(c, &m, kcs, NVAR, pos[i], i == NPOS - 1 ? 15 : 31, b);
        printf("%9lld %12.3f %12.2f %12.2f %14.2f %16.2f\n", (long long)pos[i], 1e3 * b[0],
               b[1] / b[0], b[2] / b[0], b[3] / b[0], b[4] / b[0]);
        fflush(stdout);
    }
    /* The same ratio as a generation loop sees it: each variant's steps one
     * after the other (the median of 41), FP32 and bf16 both in alternated
     * blocks, so that a step starts with the caches its own previous step
     * left, not another variant's. */
    printf("\nback-to-back steps, median of 41 each, FP32 and bf16 both (weights and cache) in "
           "alternated blocks:\n%9s %12s %12s %8s\n", "position", "fp32 ms", "bf16 both ms", "ratio");
    int64_t bpos[2] = {64, MAX_LEN - 1};
    for (int i = 0; i < 2; i++)
        for (int blk = 0; blk < 4; blk++) {
            double a = cached_step(c, &m, &kc, bpos[i], 41), b = cached_step(c, &m, &kbw, bpos[i], 41);
            printf("%9lld %12.3f %12.3f %8.2f\n", (long long)bpos[i], 1e3 * a, 1e3 * b, b / a);
            fflush(stdout);
        }
    qkv_kv_cache_free(&kb);
    qkv_kv_cache_free(&kw);
    qkv_kv_cache_free(&kbw);
    qkv_bf16_weights_free(&w);
    qkv_kv_cache_free(&kc);
    qkv_kv_cache_free(&kh);
    qkv_transformer_decoder_only_free(&m);
    free(xs);
    qkv_ctx_free(c);
    qkv_params_free(p);
    return 0;
}
