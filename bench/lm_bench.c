/* lm_bench.c: qkv's side of bench/lm_bench.py: the speed of `qkv train lm`'s
 * default model (4 layers, d_model 128, 4 heads, feed-forward 512, context
 * 128, vocabulary 75 as the KJV's characters give, tied output layer,
 * pre-norm, GELU) on random tokens.
 *   build/bench/lm_bench train [STEPS]          training steps (batch 32 x 128 tokens,
 *                                                AdamW, clipping: qkv_train), tokens/s
 *   build/bench/lm_bench generate CONTEXT [NEW] [fp32|bf16]
 *                                                NEW tokens (default 64) one at a
 *                                                time through the KV cache (FP32 or
 *                                                bf16, docs/bf16_decode.md) after a
 *                                                prompt of CONTEXT tokens, tokens/s
 * --model D,L,H before the mode takes another size: d_model D, L layers, H heads,
 * feed-forward 4D (docs/lm.md: the 30-minute run's model is 192,5,6).
 * Prints "RESULT name value" lines. OpenMP threads: OMP_NUM_THREADS or all. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"

enum { V = 75, CTX = 128, BATCH = 32 };
static int64_t LAYERS = 4, E = 128, HEADS = 4, FF = 512; /* --model D,L,H changes them */

/* In a batch function: return the failure to qkv_train. */
#define BTRY(x)                          \
    do {                                 \
        qkv_status s_ = (x);             \
        if (s_ != QKV_OK) return s_;     \
    } while (0)

static void model(qkv_params **p, qkv_lm *m, int64_t max_len)
{
    qkv_lm_opts o = qkv_lm_opts_default(V, E, HEADS, LAYERS, max_len);
    o.layer.activation = QKV_ACTIVATION_GELU;
    o.layer.norm_first = 1;
    o.layer.dim_feedforward = FF;
    o.layer.dropout = 0;
    o.tie_weights = 1;
    qkv_rng r;
    qkv_rng_seed(&r, 1);
    TRY(qkv_params_new(p));
    TRY(qkv_lm_init(m, &o, *p, "", &r));
    qkv_rng_fill_normal(&r, m->tok.emb.weight->data, qkv_tensor_numel(m->tok.emb.weight), 0, 0.02f);
}

typedef struct {
    qkv_lm *m;
    int64_t x[BATCH * CTX], y[BATCH * CTX];
} train_data;

static qkv_status batch(qkv_ctx *c, void *user, int64_t step, qkv_tensor **loss, int64_t *units)
{
    train_data *d = user;
    qkv_rng r;
    qkv_rng_seed(&r, (uint64_t)step + 7);
    for (int i = 0; i < BATCH * CTX; i++) d->x[i] = (int64_t)(qkv_rng_next(&r) % V), d->y[i] = (int64_t)(qkv_rng_next(&r) % V);
    qkv_tensor *tx, *ty, *logits, *flat;
    qkv_arena *a = qkv_ctx_arena(c);
    BTRY(qkv_tensor_wrap_i64(a, d->x, 2, (int64_t[]){BATCH, CTX}, &tx));
    BTRY(qkv_tensor_wrap_i64(a, d->y, 1, (int64_t[]){BATCH * CTX}, &ty));
    BTRY(qkv_lm_forward(c, d->m, tx, NULL, &logits));
    BTRY(qkv_reshape(c, logits, 2, (int64_t[]){BATCH * CTX, V}, &flat));
    *units = BATCH * CTX;
    return qkv_cross_entropy(c, flat, ty, QKV_IGNORE_INDEX_DEFAULT, 0, QKV_REDUCTION_MEAN, loss);
}

static void train(int64_t steps)
{
    qkv_params *p;
    qkv_lm m;
    model(&p, &m, CTX);
    qkv_optim *opt;
    qkv_optim_opts oo = qkv_optim_adamw_opts_default();
    oo.lr = 1e-3;
    TRY(qkv_optim_new(&opt, p, &oo));
    qkv_ctx *c;
    TRY(qkv_ctx_new(&c));
    bench_set_precision(c); /* QKV_BENCH_PRECISION=bf16: products in bf16 */
    train_data *d = malloc(sizeof *d);
    d->m = &m;
    qkv_trainer t = {.params = p, .optim = opt, .clip_norm = 1, .steps = 2, .batch = batch, .user = d};
    qkv_train_pos pos = {0};
    TRY(qkv_train(c, &t, &pos)); /* warm-up: the arena grows to its size */
    t.steps = 2 + steps;
    double t0 = bench_now();
    TRY(qkv_train(c, &t, &pos));
    double sec = bench_now() - t0;
    printf("RESULT train_tokens_per_s %.1f\n", (double)(steps * BATCH * CTX) / sec);
    printf("RESULT train_params %lld\n", (long long)qkv_params_numel(p));
    free(d);
    qkv_ctx_free(c);
    qkv_optim_free(opt);
    qkv_lm_free(&m);
    qkv_params_free(p);
}

static void generate(int64_t context, int64_t new_tokens, int bf16_cache)
{
    qkv_params *p;
    qkv_lm m;
    model(&p, &m, context + new_tokens);
    qkv_kv_cache kc;
    if (bf16_cache)
        TRY(qkv_kv_cache_init_bf16(&kc, LAYERS, 1, HEADS, E / HEADS, context + new_tokens));
    else
        TRY(qkv_lm_cache_init(&kc, &m, 1, context + new_tokens));
    qkv_ctx *c;
    TRY(qkv_ctx_new(&c));
    qkv_ctx_set_grad(c, 0);
    int64_t *ids = malloc((size_t)(context + new_tokens) * sizeof *ids);
    qkv_rng r;
    qkv_rng_seed(&r, 3);
    for (int64_t i = 0; i < context; i++) ids[i] = (int64_t)(qkv_rng_next(&r) % V);
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) { /* the best of three passes */
        qkv_kv_cache_reset(&kc);
        qkv_ctx_reset(c);
        qkv_tensor *x, *logits;
        TRY(qkv_tensor_wrap_i64(qkv_ctx_arena(c), ids, 2, (int64_t[]){1, context}, &x));
        TRY(qkv_lm_forward_cached(c, &m, &kc, x, NULL, &logits));
        double t0 = bench_now();
        for (int64_t i = context; i < context + new_tokens; i++) {
            const float *l = logits->data + (logits->shape[1] - 1) * V;
            int64_t best_id = 0;
            for (int64_t v = 1; v < V; v++)
                if (l[v] > l[best_id]) best_id = v;
            ids[i] = best_id;
            qkv_ctx_reset(c);
            TRY(qkv_tensor_wrap_i64(qkv_ctx_arena(c), ids + i, 2, (int64_t[]){1, 1}, &x));
            TRY(qkv_lm_forward_cached(c, &m, &kc, x, NULL, &logits));
        }
        double sec = bench_now() - t0;
        if (sec < best) best = sec;
    }
    printf("RESULT generate_%lld_tokens_per_s %.1f\n", (long long)context, (double)new_tokens / best);
    free(ids);
    qkv_ctx_free(c);
    qkv_kv_cache_free(&kc);
    qkv_lm_free(&m);
    qkv_params_free(p);
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "--model")) {
        long long d, l, h;
        if (sscanf(argv[2], "%lld,%lld,%lld", &d, &l, &h) != 3 || d < 1 || l < 1 || h < 1 || d % h) {
            fprintf(stderr, "lm_bench: --model %s: expected D,L,H with H dividing D\n", argv[2]);
            return 2;
        }
        E = d, LAYERS = l, HEADS = h, FF = 4 * d;
        argc -= 2, argv += 2;
    }
    if (argc >= 2 && !strcmp(argv[1], "train")) {
        train(argc >= 3 ? atoll(argv[2]) : 10);
    } else if (argc >= 3 && !strcmp(argv[1], "generate")) {
        int bf16 = argc >= 5 && !strcmp(argv[4], "bf16");
        if (argc >= 5 && !bf16 && strcmp(argv[4], "fp32")) {
            fprintf(stderr, "lm_bench: cache %s: expected fp32 or bf16\n", argv[4]);
            return 2;
        }
        generate(atoll(argv[2]), argc >= 4 ? atoll(argv[3]) : 64, bf16);
    } else {
        fprintf(stderr, "usage: lm_bench train [STEPS] | generate CONTEXT [NEW] [fp32|bf16]\n");
        return 2;
    }
    printf("RESULT threads %d\n", omp_get_max_threads());
    return 0;
}
