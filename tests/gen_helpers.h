/* gen_helpers.h: what the generation tests share (test_kvcache,
 * test_generate, test_beam, test_sampling): the ctx and the arena of test
 * inputs, token-id and mask tensors, the small models, generating through
 * a fresh cache, the length penalty, and the two models most checks
 * decode with. */
#ifndef QKV_TEST_GEN_HELPERS_H
#define QKV_TEST_GEN_HELPERS_H
#include "harness.h"

static qkv_ctx *C;
static qkv_arena *A; /* test inputs */

static inline qkv_tensor *ids_tensor(const int64_t *v, int64_t N, int64_t T)
{
    qkv_tensor *t = NULL;
    if (qkv_tensor_new(A, QKV_I64, 2, (int64_t[]){N, T}, &t) != QKV_OK) abort();
    memcpy(t->idx, v, (size_t)(N * T) * sizeof(int64_t));
    return t;
}

static inline qkv_tensor *pad_tensor(const uint8_t *v, int64_t N, int64_t T)
{
    qkv_tensor *t = NULL;
    if (qkv_tensor_new(A, QKV_BOOL, 2, (int64_t[]){N, T}, &t) != QKV_OK) abort();
    memcpy(t->mask, v, (size_t)(N * T));
    return t;
}

/* Columns [t0, t0+len) of a (N, W) row-major matrix of elem-byte entries. */
static inline void cols(const void *src, int64_t N, int64_t W, int64_t t0, int64_t len,
                        size_t elem, void *dst)
{
    for (int64_t n = 0; n < N; n++)
        memcpy((char *)dst + (size_t)(n * len) * elem, (const char *)src + (size_t)(n * W + t0) * elem,
               (size_t)len * elem);
}

static inline qkv_lm_opts small_lm_opts(int variant)
{
    qkv_lm_opts o = qkv_lm_opts_default(11, 16, 2, 2, 256);
    o.layer.dim_feedforward = 32;
    if (variant == 1) {
        o.layer.norm_first = 1;
        o.layer.activation = QKV_ACTIVATION_GELU;
        o.posenc = QKV_POSENC_SINUSOIDAL;
        o.tie_weights = 1;
        o.scale_embedding = 1;
    }
    if (variant == 2) { /* GPT-style with rotary positions, a base whose angles move fast */
        o.layer.norm_first = 1;
        o.layer.activation = QKV_ACTIVATION_GELU;
        o.posenc = QKV_POSENC_ROTARY;
        o.layer.rotary_base = 100.0f;
    }
    return o;
}

static inline qkv_seq2seq_opts small_s2s_opts(int64_t V, int variant)
{
    qkv_seq2seq_opts o = qkv_seq2seq_opts_default(9, V, 16, 2, 2, 2, 256);
    o.t.layer.dim_feedforward = 32;
    if (variant == 1) {
        o.t.layer.norm_first = 1;
        o.posenc = QKV_POSENC_LEARNED;
        o.scale_embedding = 0;
    }
    return o;
}

/* Generates through a fresh cache of the size o needs, with the language
 * model lm (prompt in (N,L), pad (N,L) or NULL) or, lm NULL, the
 * encoder-decoder s2s (src in (N,L), begin token 0). */
static inline qkv_status gen_run(const qkv_lm *lm, const qkv_seq2seq *s2s, const int64_t *in,
                                 const uint8_t *pad, int64_t N, int64_t L,
                                 const qkv_generate_opts *o, int64_t *tok, int64_t *len,
                                 float *sc)
{
    qkv_kv_cache kc;
    int64_t rows = o->kind == QKV_DECODE_BEAM ? N * o->num_beams : N, M = o->max_new_tokens;
    qkv_status s = lm ? qkv_lm_cache_init(&kc, lm, rows, L + M - 1)
                      : qkv_seq2seq_cache_init(&kc, s2s, rows, M);
    if (s != QKV_OK) return s;
    qkv_ctx_reset(C);
    qkv_arena_reset(A);
    qkv_tensor *x = ids_tensor(in, N, L), *xp = pad ? pad_tensor(pad, N, L) : NULL;
    s = lm ? qkv_lm_generate(C, lm, &kc, x, xp, o, tok, len, sc)
           : qkv_seq2seq_generate(C, s2s, &kc, x, xp, 0, o, tok, len, sc);
    qkv_kv_cache_free(&kc);
    return s;
}

static inline qkv_status lm_gen(const qkv_lm *m, const int64_t *prompt, const uint8_t *pad,
                                int64_t N, int64_t P, const qkv_generate_opts *o, int64_t *tok,
                                int64_t *len, float *sc)
{
    return gen_run(m, NULL, prompt, pad, N, P, o, tok, len, sc);
}

static inline qkv_status s2s_gen(const qkv_seq2seq *m, const int64_t *src, const uint8_t *pad,
                                 int64_t N, int64_t S, const qkv_generate_opts *o, int64_t *tok,
                                 int64_t *len, float *sc)
{
    return gen_run(NULL, m, src, pad, N, S, o, tok, len, sc);
}

/* Options with pad_id -7 (so that padding is seen). */
static inline qkv_generate_opts gen_opts(qkv_decode_kind kind, int64_t max_new, int64_t end_id)
{
    qkv_generate_opts o = qkv_generate_opts_default();
    o.kind = kind;
    o.max_new_tokens = max_new;
    o.end_id = end_id;
    o.pad_id = -7;
    return o;
}

/* The length penalty lp(len), as docs/generation.md writes it. */
static inline double lp_of(const qkv_generate_opts *o, int64_t len)
{
    if (o->length_penalty_kind == QKV_LENGTH_PENALTY_POWER) return pow((double)len, o->length_penalty);
    return pow((5.0 + len) / 6.0, o->length_penalty);
}

/* A model with options o in a params store of its own (*p), its weights
 * drawn from rng seeded seed (rng left for further draws). */
static inline void new_lm(qkv_params **p, qkv_rng *rng, uint64_t seed, qkv_lm_opts o,
                          const char *prefix, qkv_lm *m)
{
    CHECK_OK(qkv_params_new(p));
    qkv_rng_seed(rng, seed);
    CHECK_OK(qkv_lm_init(m, &o, *p, prefix, rng));
}

static inline void new_s2s(qkv_params **p, qkv_rng *rng, uint64_t seed, qkv_seq2seq_opts o,
                           const char *prefix, qkv_seq2seq *m)
{
    CHECK_OK(qkv_params_new(p));
    qkv_rng_seed(rng, seed);
    CHECK_OK(qkv_seq2seq_init(m, &o, *p, prefix, rng));
}

/* The language model (11 tokens) and the encoder-decoder (9 -> 10 tokens)
 * that most checks decode with, from one rng seeded 31. */
typedef struct {
    qkv_params *p;
    qkv_lm lm;
    qkv_seq2seq s2s;
} gen_models;

static inline void gen_models_init(gen_models *g)
{
    qkv_rng rng;
    new_lm(&g->p, &rng, 31, small_lm_opts(0), "lm.", &g->lm);
    qkv_seq2seq_opts so = small_s2s_opts(10, 0);
    CHECK_OK(qkv_seq2seq_init(&g->s2s, &so, g->p, "s2s.", &rng));
}

static inline void gen_models_free(gen_models *g)
{
    qkv_lm_free(&g->lm);
    qkv_seq2seq_free(&g->s2s);
    qkv_params_free(g->p);
}
#endif
