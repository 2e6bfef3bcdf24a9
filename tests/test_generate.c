/* test_generate: the KV cache and decoding.
 *  - the cache is exact: 200 tokens decoded through it give the logits of
 *    recomputing the whole sequence each step (decoder-only LM and
 *    encoder-decoder; the stacks alone in both layouts and unbatched);
 *  - padding: a batch of prompts of different lengths decodes each row as
 *    it decodes alone (greedy, sampling, beam search);
 *  - beam search equals exhaustive search on a tiny vocabulary, width 1
 *    equals greedy; sampling with top_k = 1 equals greedy; the sampling
 *    distribution (temperature, top-k, top-p) and seeded determinism;
 *  - cache reorder and truncate; grad mode restored; bad input everywhere. */
#include "harness.h"

static qkv_ctx *C;
static qkv_arena *A; /* test inputs */

/* ---- helpers ----------------------------------------------------------------- */

static qkv_tensor *ids_tensor(const int64_t *v, int64_t N, int64_t T)
{
    qkv_tensor *t = NULL;
    if (qkv_tensor_new(A, QKV_I64, 2, (int64_t[]){N, T}, &t) != QKV_OK) abort();
    memcpy(t->idx, v, (size_t)(N * T) * sizeof(int64_t));
    return t;
}

static qkv_tensor *pad_tensor(const uint8_t *v, int64_t N, int64_t T)
{
    qkv_tensor *t = NULL;
    if (qkv_tensor_new(A, QKV_BOOL, 2, (int64_t[]){N, T}, &t) != QKV_OK) abort();
    memcpy(t->mask, v, (size_t)(N * T));
    return t;
}

/* Columns [t0, t0+len) of a (N, W) row-major matrix of elem-byte entries. */
static void cols(const void *src, int64_t N, int64_t W, int64_t t0, int64_t len, size_t elem,
                 void *dst)
{
    for (int64_t n = 0; n < N; n++)
        memcpy((char *)dst + (size_t)(n * len) * elem, (const char *)src + (size_t)(n * W + t0) * elem,
               (size_t)len * elem);
}

static qkv_lm_opts small_lm_opts(int variant)
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
    return o;
}

static qkv_seq2seq_opts small_s2s_opts(int64_t V, int variant)
{
    qkv_seq2seq_opts o = qkv_seq2seq_opts_default(9, V, 16, 2, 2, 2, 256);
    o.t.dim_feedforward = 32;
    if (variant == 1) {
        o.t.norm_first = 1;
        o.posenc = QKV_POSENC_LEARNED;
        o.scale_embedding = 0;
    }
    return o;
}

/* ---- the cache is exact ----------------------------------------------------------- */

/* Which tokens a cached step feeds: mostly 1, sometimes a chunk of 3. */
static int64_t chunk_at(int64_t step) { return step % 37 == 5 ? 3 : 1; }

/* LM: ids (N,W) and pad (N,W) (NULL: none); prefill P tokens, then steps
 * to W. Returns the worst norm-wise relative error of the cached logits
 * against the full forward's, over every step. */
static double lm_cache_vs_full(const qkv_lm *m, const int64_t *ids, const uint8_t *pad, int64_t N,
                               int64_t P, int64_t W)
{
    int64_t V = m->o.vocab_size;
    qkv_kv_cache kc;
    double worst = 0;
    int64_t *buf = malloc((size_t)(N * W) * sizeof *buf);
    uint8_t *pbuf = malloc((size_t)(N * W));
    float *ref = malloc((size_t)(N * W * V) * sizeof *ref);
    CHECK_OK(qkv_lm_cache_init(&kc, m, N, W));
    for (int64_t t = 0, step = 0; t < W; step++) {
        int64_t c = t == 0 ? P : chunk_at(step);
        if (t + c > W) c = W - t;
        qkv_ctx_reset(C);
        qkv_arena_reset(A);
        qkv_tensor *lc = NULL, *lf = NULL;
        cols(ids, N, W, t, c, sizeof *ids, buf);
        if (pad) cols(pad, N, W, t, c, 1, pbuf);
        qkv_status s = qkv_lm_forward_cached(C, m, &kc, ids_tensor(buf, N, c),
                                             pad ? pad_tensor(pbuf, N, c) : NULL, &lc);
        CHECK(s == QKV_OK, "cached step at %lld: %s", (long long)t, qkv_last_error());
        cols(ids, N, W, 0, t + c, sizeof *ids, buf);
        if (pad) cols(pad, N, W, 0, t + c, 1, pbuf);
        s = qkv_lm_forward(C, m, ids_tensor(buf, N, t + c), pad ? pad_tensor(pbuf, N, t + c) : NULL,
                           &lf);
        CHECK(s == QKV_OK, "full forward at %lld: %s", (long long)t, qkv_last_error());
        if (!lc || !lf) break;
        cols(lf->data, N, (t + c) * V, t * V, c * V, sizeof(float), ref); /* positions [t,t+c) */
        double e = h_rel_err(lc->data, ref, N * c * V);
        worst = isnan(e) || e > worst ? e : worst;
        t += c;
    }
    CHECK(kc.len == W, "cache len %lld after %lld positions", (long long)kc.len, (long long)W);
    qkv_kv_cache_free(&kc);
    free(buf);
    free(pbuf);
    free(ref);
    return worst;
}

static void test_lm_cache_exact(void)
{
    enum { N = 2, P = 6, STEPS = 200, W = P + STEPS };
    for (int variant = 0; variant < 2; variant++) {
        qkv_params *p;
        qkv_rng rng;
        qkv_lm m;
        CHECK_OK(qkv_params_new(&p));
        qkv_rng_seed(&rng, 10 + variant);
        qkv_lm_opts o = small_lm_opts(variant);
        CHECK_OK(qkv_lm_init(&m, &o, p, "", &rng));
        int64_t ids[N * W];
        uint8_t pad[N * W];
        memset(pad, 0, sizeof pad);
        for (int64_t i = 0; i < N * W; i++) ids[i] = (int64_t)(qkv_rng_next(&rng) % 11);
        for (int64_t t = 0; t < 3; t++) pad[1 * W + t] = 1; /* row 1 left-padded by 3 */
        double e = lm_cache_vs_full(&m, ids, NULL, N, P, W);
        CHECK(e <= 1e-5, "LM variant %d: cached logits vs full recompute, 200 tokens: %.3g",
              variant, e);
        e = lm_cache_vs_full(&m, ids, pad, N, P, W);
        CHECK(e <= 1e-5, "LM variant %d, left-padded row: cached vs full: %.3g", variant, e);
        printf("  lm variant %d: 200 cached tokens vs recompute, worst rel err %.2e\n", variant, e);
        qkv_lm_free(&m);
        qkv_params_free(p);
    }
}

/* Encoder-decoder: src (N,S) with src_pad; tgt (N,W) fed from 1 token. */
static double s2s_cache_vs_full(const qkv_seq2seq *m, const int64_t *src, const uint8_t *src_pad,
                                int64_t N, int64_t S, const int64_t *tgt, int64_t W)
{
    int64_t V = m->o.tgt_vocab;
    qkv_kv_cache kc;
    double worst = 0;
    int64_t *buf = malloc((size_t)(N * W) * sizeof *buf);
    float *ref = malloc((size_t)(N * W * V) * sizeof *ref);
    CHECK_OK(qkv_seq2seq_cache_init(&kc, m, N, W));
    qkv_ctx_reset(C);
    qkv_arena_reset(A);
    CHECK_OK(qkv_seq2seq_start(C, m, &kc, ids_tensor(src, N, S), pad_tensor(src_pad, N, S)));
    for (int64_t t = 0, step = 0; t < W; step++) {
        int64_t c = chunk_at(step);
        if (t + c > W) c = W - t;
        qkv_ctx_reset(C);
        qkv_arena_reset(A);
        qkv_tensor *lc = NULL, *lf = NULL;
        cols(tgt, N, W, t, c, sizeof *tgt, buf);
        CHECK_OK(qkv_seq2seq_forward_cached(C, m, &kc, ids_tensor(buf, N, c), NULL, &lc));
        cols(tgt, N, W, 0, t + c, sizeof *tgt, buf);
        CHECK_OK(qkv_seq2seq_forward(C, m, ids_tensor(src, N, S), ids_tensor(buf, N, t + c),
                                     pad_tensor(src_pad, N, S), NULL, &lf));
        if (!lc || !lf) break;
        cols(lf->data, N, (t + c) * V, t * V, c * V, sizeof(float), ref);
        double e = h_rel_err(lc->data, ref, N * c * V);
        worst = isnan(e) || e > worst ? e : worst;
        t += c;
    }
    qkv_kv_cache_free(&kc);
    free(buf);
    free(ref);
    return worst;
}

static void test_s2s_cache_exact(void)
{
    enum { N = 2, S = 7, W = 200 };
    for (int variant = 0; variant < 2; variant++) {
        qkv_params *p;
        qkv_rng rng;
        qkv_seq2seq m;
        CHECK_OK(qkv_params_new(&p));
        qkv_rng_seed(&rng, 20 + variant);
        qkv_seq2seq_opts o = small_s2s_opts(10, variant);
        CHECK_OK(qkv_seq2seq_init(&m, &o, p, "", &rng));
        int64_t src[N * S], tgt[N * W];
        uint8_t src_pad[N * S] = {0};
        for (int64_t i = 0; i < N * S; i++) src[i] = (int64_t)(qkv_rng_next(&rng) % 9);
        for (int64_t i = 0; i < N * W; i++) tgt[i] = (int64_t)(qkv_rng_next(&rng) % 10);
        src_pad[1 * S + 5] = src_pad[1 * S + 6] = 1; /* row 1: 5 tokens, right-padded */
        double e = s2s_cache_vs_full(&m, src, src_pad, N, S, tgt, W);
        CHECK(e <= 1e-5, "seq2seq variant %d: cached logits vs full recompute, 200 tokens: %.3g",
              variant, e);
        printf("  seq2seq variant %d: 200 cached tokens vs recompute, worst rel err %.2e\n",
               variant, e);
        qkv_seq2seq_free(&m);
        qkv_params_free(p);
    }
}

/* The stacks alone, in the (L,N,E) layout and unbatched. */
static void test_stacks_cached(void)
{
    enum { L = 40, N = 2, E = 8 };
    qkv_params *p;
    qkv_rng rng;
    CHECK_OK(qkv_params_new(&p));
    qkv_rng_seed(&rng, 5);
    qkv_transformer_layer_opts o = qkv_transformer_layer_opts_default(E, 2);
    o.dim_feedforward = 16;
    qkv_transformer_decoder_only dec_only;
    qkv_transformer_decoder dec;
    CHECK_OK(qkv_transformer_decoder_only_init(&dec_only, &o, 2, 1, p, "a.", &rng));
    CHECK_OK(qkv_transformer_decoder_init(&dec, &o, 2, 1, p, "b.", &rng));
    static float x[L * N * E], mem[5 * N * E];
    qkv_rng_fill_normal(&rng, x, L * N * E, 0, 1);
    qkv_rng_fill_normal(&rng, mem, 5 * N * E, 0, 1);
    qkv_ctx_reset(C);
    qkv_arena_reset(A);
    qkv_tensor *xt, *mt, *full, *full_dec, *out, *mpad;
    uint8_t mp[N * 5] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1}; /* (N,S): row 1 has 3 keys */
    CHECK_OK(qkv_tensor_wrap(A, x, 3, (int64_t[]){L, N, E}, &xt));
    CHECK_OK(qkv_tensor_wrap(A, mem, 3, (int64_t[]){5, N, E}, &mt));
    CHECK_OK(qkv_tensor_wrap_bool(A, mp, 2, (int64_t[]){N, 5}, &mpad));
    CHECK_OK(qkv_transformer_decoder_only_forward(C, &dec_only, xt, NULL, &full));
    qkv_transformer_masks mk = qkv_transformer_masks_default();
    mk.tgt_causal = QKV_CAUSAL_TOP_LEFT;
    mk.memory_key_padding_mask = mpad;
    CHECK_OK(qkv_transformer_decoder_forward(C, &dec, xt, mt, &mk, &full_dec));
    qkv_kv_cache k1, k2;
    CHECK_OK(qkv_kv_cache_init(&k1, 2, N, 2, E / 2, L));
    CHECK_OK(qkv_kv_cache_init(&k2, 2, N, 2, E / 2, L));
    CHECK_OK(qkv_transformer_decoder_set_memory(C, &dec, &k2, mt, mpad));
    double e1 = 0, e2 = 0;
    for (int64_t t = 0; t < L;) {
        int64_t c = t % 3 + 1 < L - t ? t % 3 + 1 : L - t;
        qkv_tensor *xs;
        /* (L,N,E): rows [t,t+c) are contiguous. */
        CHECK_OK(qkv_tensor_wrap(A, x + t * N * E, 3, (int64_t[]){c, N, E}, &xs));
        CHECK_OK(qkv_transformer_decoder_only_forward_cached(C, &dec_only, &k1, xs, NULL, &out));
        if (out) e1 = fmax(e1, h_rel_err(out->data, full->data + t * N * E, c * N * E));
        CHECK_OK(qkv_transformer_decoder_forward_cached(C, &dec, &k2, xs, NULL, &out));
        if (out) e2 = fmax(e2, h_rel_err(out->data, full_dec->data + t * N * E, c * N * E));
        t += c;
    }
    CHECK(e1 <= 1e-5, "decoder-only stack (L,N,E) cached vs full: %.3g", e1);
    CHECK(e2 <= 1e-5, "TransformerDecoder (L,N,E) cached vs full: %.3g", e2);
    /* Unbatched (L,E): row 0 of x, a cache of batch 1. */
    qkv_kv_cache k3;
    CHECK_OK(qkv_kv_cache_init(&k3, 2, 1, 2, E / 2, L));
    static float x0[L * E];
    for (int64_t t = 0; t < L; t++) memcpy(x0 + t * E, x + t * N * E, E * sizeof(float));
    qkv_tensor *x0t, *full0;
    CHECK_OK(qkv_tensor_wrap(A, x0, 2, (int64_t[]){L, E}, &x0t));
    CHECK_OK(qkv_transformer_decoder_only_forward(C, &dec_only, x0t, NULL, &full0));
    double e3 = 0;
    for (int64_t t = 0; t < L; t++) {
        qkv_tensor *xs;
        CHECK_OK(qkv_tensor_wrap(A, x0 + t * E, 2, (int64_t[]){1, E}, &xs));
        CHECK_OK(qkv_transformer_decoder_only_forward_cached(C, &dec_only, &k3, xs, NULL, &out));
        if (!out) break;
        CHECK(out->ndim == 2 && out->shape[0] == 1 && out->shape[1] == E, "unbatched out shape");
        e3 = fmax(e3, h_rel_err(out->data, full0->data + t * E, E));
    }
    CHECK(e3 <= 1e-5, "decoder-only unbatched cached vs full: %.3g", e3);
    qkv_kv_cache_free(&k1);
    qkv_kv_cache_free(&k2);
    qkv_kv_cache_free(&k3);
    qkv_transformer_decoder_only_free(&dec_only);
    qkv_transformer_decoder_free(&dec);
    qkv_params_free(p);
}

/* ---- decoding helpers ----------------------------------------------------------------- */

static qkv_status lm_gen(const qkv_lm *m, const int64_t *prompt, const uint8_t *pad, int64_t N,
                         int64_t P, const qkv_generate_opts *o, int64_t *tok, int64_t *len,
                         float *sc)
{
    qkv_kv_cache kc;
    int64_t rows = o->kind == QKV_DECODE_BEAM ? N * o->num_beams : N;
    qkv_status s = qkv_lm_cache_init(&kc, m, rows, P + o->max_new_tokens - 1);
    if (s != QKV_OK) return s;
    qkv_ctx_reset(C);
    qkv_arena_reset(A);
    s = qkv_lm_generate(C, m, &kc, ids_tensor(prompt, N, P), pad ? pad_tensor(pad, N, P) : NULL, o,
                        tok, len, sc);
    qkv_kv_cache_free(&kc);
    return s;
}

static qkv_status s2s_gen(const qkv_seq2seq *m, const int64_t *src, const uint8_t *pad, int64_t N,
                          int64_t S, const qkv_generate_opts *o, int64_t *tok, int64_t *len,
                          float *sc)
{
    qkv_kv_cache kc;
    int64_t rows = o->kind == QKV_DECODE_BEAM ? N * o->num_beams : N;
    qkv_status s = qkv_seq2seq_cache_init(&kc, m, rows, o->max_new_tokens);
    if (s != QKV_OK) return s;
    qkv_ctx_reset(C);
    qkv_arena_reset(A);
    s = qkv_seq2seq_generate(C, m, &kc, ids_tensor(src, N, S), pad ? pad_tensor(pad, N, S) : NULL,
                             0, o, tok, len, sc);
    qkv_kv_cache_free(&kc);
    return s;
}

/* Row r of a batched result equals a result of one row. */
static void check_same_row(const char *what, const int64_t *tb, const int64_t *lb, const float *sb,
                           int64_t r, const int64_t *t1, const int64_t *l1, const float *s1,
                           int64_t M)
{
    int same = lb[r] == l1[0] && !memcmp(tb + r * M, t1, (size_t)M * sizeof *t1);
    CHECK(same, "%s: row %lld of the batch (length %lld) differs from decoding it alone (length "
          "%lld)", what, (long long)r, (long long)lb[r], (long long)l1[0]);
    CHECK(fabsf(sb[r] - s1[0]) <= 1e-4f * fmaxf(1.0f, fabsf(s1[0])),
          "%s: row %lld score %.7g, alone %.7g", what, (long long)r, sb[r], s1[0]);
}

static qkv_generate_opts gen_opts(qkv_decode_kind kind, int64_t max_new, int64_t end_id)
{
    qkv_generate_opts o = qkv_generate_opts_default();
    o.kind = kind;
    o.max_new_tokens = max_new;
    o.end_id = end_id;
    o.pad_id = -7;
    return o;
}

/* ---- padding ------------------------------------------------------------------------------- */

static void test_lm_padding(const qkv_lm *m)
{
    enum { P = 6, M = 25 };
    int64_t a[3] = {4, 9, 1}, b[P] = {3, 3, 8, 0, 5, 10};
    int64_t batch[2 * P] = {7, 7, 7, 4, 9, 1, 3, 3, 8, 0, 5, 10}; /* row 0 left-padded */
    uint8_t pad[2 * P] = {1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    qkv_decode_kind kinds[3] = {QKV_DECODE_GREEDY, QKV_DECODE_SAMPLE, QKV_DECODE_BEAM};
    const char *names[3] = {"greedy", "sampling", "beam"};
    for (int k = 0; k < 3; k++) {
        qkv_generate_opts o = gen_opts(kinds[k], M, 2);
        o.num_beams = 3;
        o.seed = 100;
        o.top_k = 6;
        o.top_p = 0.9f;
        int64_t tb[2 * M], lb[2], t1[M], l1[1];
        float sb[2], s1[1];
        CHECK_OK(lm_gen(m, batch, pad, 2, P, &o, tb, lb, sb));
        CHECK_OK(lm_gen(m, a, NULL, 1, 3, &o, t1, l1, s1)); /* row 0 draws with seed + 0 */
        check_same_row(names[k], tb, lb, sb, 0, t1, l1, s1, M);
        o.seed = 101; /* row 1 draws with seed + 1 */
        CHECK_OK(lm_gen(m, b, NULL, 1, P, &o, t1, l1, s1));
        check_same_row(names[k], tb, lb, sb, 1, t1, l1, s1, M);
        for (int64_t i = lb[0]; i < M; i++)
            CHECK(tb[i] == -7, "%s: entry %lld after the end is %lld, not pad_id", names[k],
                  (long long)i, (long long)tb[i]);
    }
    /* The full forward honours the same convention: the padded row's logits
     * at its real positions equal its logits alone. */
    qkv_ctx_reset(C);
    qkv_arena_reset(A);
    qkv_tensor *lb_, *la;
    CHECK_OK(qkv_lm_forward(C, m, ids_tensor(batch, 2, P), pad_tensor(pad, 2, P), &lb_));
    CHECK_OK(qkv_lm_forward(C, m, ids_tensor(a, 1, 3), NULL, &la));
    int64_t V = m->o.vocab_size;
    if (lb_ && la) {
        double e = h_rel_err(lb_->data + 3 * V, la->data, 3 * V);
        CHECK(e <= 1e-5, "full forward, left-padded row vs alone: %.3g", e);
    }
}

static void test_s2s_padding(const qkv_seq2seq *m)
{
    enum { S = 7, M = 20 };
    int64_t a[4] = {1, 5, 2, 8}, b[S] = {3, 3, 4, 0, 6, 7, 2};
    int64_t batch[2 * S] = {1, 5, 2, 8, 0, 0, 0, 3, 3, 4, 0, 6, 7, 2}; /* row 0 right-padded */
    uint8_t pad[2 * S] = {0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0};
    for (int beam = 0; beam < 2; beam++) {
        qkv_generate_opts o = gen_opts(beam ? QKV_DECODE_BEAM : QKV_DECODE_GREEDY, M, 1);
        o.num_beams = 3;
        int64_t tb[2 * M], lb[2], t1[M], l1[1];
        float sb[2], s1[1];
        const char *what = beam ? "seq2seq beam" : "seq2seq greedy";
        CHECK_OK(s2s_gen(m, batch, pad, 2, S, &o, tb, lb, sb));
        CHECK_OK(s2s_gen(m, a, NULL, 1, 4, &o, t1, l1, s1));
        check_same_row(what, tb, lb, sb, 0, t1, l1, s1, M);
        CHECK_OK(s2s_gen(m, b, NULL, 1, S, &o, t1, l1, s1));
        check_same_row(what, tb, lb, sb, 1, t1, l1, s1, M);
    }
}

/* ---- beam search against exhaustive search ----------------------------------------------- */

typedef double (*seq_logp_fn)(const void *m, const int64_t *seq, int64_t len);

static const int64_t EX_PROMPT[2] = {1, 0};
static const int64_t EX_SRC[3] = {2, 4, 1};

/* Sum of log-probs of seq (len) after the prompt, by the full forward. */
static double lm_seq_logp(const void *mv, const int64_t *seq, int64_t len)
{
    const qkv_lm *m = mv;
    int64_t ids[16], V = m->o.vocab_size, P = 2;
    memcpy(ids, EX_PROMPT, sizeof EX_PROMPT);
    memcpy(ids + P, seq, (size_t)len * sizeof *seq);
    qkv_ctx_reset(C);
    qkv_arena_reset(A);
    qkv_tensor *lg = NULL;
    CHECK_OK(qkv_lm_forward(C, m, ids_tensor(ids, 1, P + len), NULL, &lg));
    double s = 0;
    for (int64_t i = 0; lg && i < len; i++) {
        const float *row = lg->data + (P - 1 + i) * V;
        double z = 0;
        for (int64_t v = 0; v < V; v++) z += exp((double)row[v]);
        s += row[seq[i]] - log(z);
    }
    return s;
}

/* The same for the encoder-decoder: tgt = [bos 0, seq...], src EX_SRC. */
static double s2s_seq_logp(const void *mv, const int64_t *seq, int64_t len)
{
    const qkv_seq2seq *m = mv;
    int64_t tgt[16] = {0}, V = m->o.tgt_vocab;
    memcpy(tgt + 1, seq, (size_t)len * sizeof *seq);
    qkv_ctx_reset(C);
    qkv_arena_reset(A);
    qkv_tensor *lg = NULL;
    CHECK_OK(qkv_seq2seq_forward(C, m, ids_tensor(EX_SRC, 1, 3), ids_tensor(tgt, 1, len), NULL, NULL,
                                 &lg));
    double s = 0;
    for (int64_t i = 0; lg && i < len; i++) {
        const float *row = lg->data + i * V;
        double z = 0;
        for (int64_t v = 0; v < V; v++) z += exp((double)row[v]);
        s += row[seq[i]] - log(z);
    }
    return s;
}

static double lp_of(const qkv_generate_opts *o, int64_t len)
{
    if (o->length_penalty_kind == QKV_LENGTH_PENALTY_POWER) return pow((double)len, o->length_penalty);
    return pow((5.0 + len) / 6.0, o->length_penalty);
}

/* The best hypothesis over every sequence of V tokens up to length M (cut
 * after the end token): into best (M), *best_len; returns its score and
 * the runner-up's in *second. */
static double exhaustive(seq_logp_fn f, const void *m, int64_t V, int64_t M,
                         const qkv_generate_opts *o, int64_t *best, int64_t *best_len,
                         double *second)
{
    double top = -INFINITY;
    *second = -INFINITY;
    int64_t total = 1;
    for (int64_t i = 0; i < M; i++) total *= V;
    for (int64_t code = 0; code < total; code++) {
        int64_t seq[8], len = M, c = code;
        for (int64_t i = 0; i < M; i++, c /= V) seq[i] = c % V;
        for (int64_t i = 0; i < M; i++)
            if (seq[i] == o->end_id) {
                len = i + 1;
                break;
            }
        /* Each cut hypothesis once: the code whose tail after the end is zeros. */
        int canonical = 1;
        for (int64_t i = len; i < M; i++) canonical &= seq[i] == 0;
        if (!canonical) continue;
        double s = f(m, seq, len) / lp_of(o, len);
        if (s > top) {
            *second = top;
            top = s;
            memcpy(best, seq, (size_t)len * sizeof *seq);
            *best_len = len;
        } else if (s > *second) {
            *second = s;
        }
    }
    return top;
}

static void check_beam_exhaustive(const char *what, seq_logp_fn f, const void *m, int is_lm,
                                  qkv_generate_opts o)
{
    enum { V = 4, M = 4 };
    int64_t best[M], best_len = 0, tok[M], len[1];
    float sc[1];
    double second, top = exhaustive(f, m, V, M, &o, best, &best_len, &second);
    o.kind = QKV_DECODE_BEAM;
    o.max_new_tokens = M;
    o.num_beams = 128; /* more than the distinct prefixes: beam search is exhaustive */
    qkv_status s = is_lm ? lm_gen(m, EX_PROMPT, NULL, 1, 2, &o, tok, len, sc)
                         : s2s_gen(m, EX_SRC, NULL, 1, 3, &o, tok, len, sc);
    CHECK(s == QKV_OK, "%s: %s", what, qkv_last_error());
    CHECK(fabs(sc[0] - top) <= 1e-4 * fmax(1, fabs(top)), "%s: beam score %.7g, exhaustive best %.7g",
          what, sc[0], top);
    if (top - second > 1e-3)
        CHECK(len[0] == best_len && !memcmp(tok, best, (size_t)best_len * sizeof *tok),
              "%s: beam returned length %lld, the best has length %lld", what, (long long)len[0],
              (long long)best_len);
}

static void test_beam_exhaustive(void)
{
    qkv_params *p;
    qkv_rng rng;
    qkv_lm lm;
    qkv_seq2seq s2s;
    CHECK_OK(qkv_params_new(&p));
    qkv_rng_seed(&rng, 77);
    qkv_lm_opts lo = qkv_lm_opts_default(4, 16, 2, 2, 16);
    lo.layer.dim_feedforward = 32;
    CHECK_OK(qkv_lm_init(&lm, &lo, p, "lm.", &rng));
    qkv_seq2seq_opts so = small_s2s_opts(4, 0);
    CHECK_OK(qkv_seq2seq_init(&s2s, &so, p, "s2s.", &rng));
    /* Sharpen the models a little, so that the runner-up is not a near tie. */
    qkv_tensor *w = lm.lm_head.weight;
    for (int64_t i = 0; i < qkv_tensor_numel(w); i++) w->data[i] *= 3.0f;
    struct {
        int64_t end_id;
        float alpha;
        qkv_length_penalty kind;
    } cases[] = {{3, 0.6f, QKV_LENGTH_PENALTY_GNMT}, {3, 0.0f, QKV_LENGTH_PENALTY_GNMT},
                 {3, 1.0f, QKV_LENGTH_PENALTY_POWER}, {3, -0.5f, QKV_LENGTH_PENALTY_GNMT},
                 {-1, 0.6f, QKV_LENGTH_PENALTY_GNMT}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        qkv_generate_opts o = gen_opts(QKV_DECODE_BEAM, 4, cases[i].end_id);
        o.length_penalty = cases[i].alpha;
        o.length_penalty_kind = cases[i].kind;
        char what[96];
        snprintf(what, sizeof what, "LM beam vs exhaustive (end %lld, alpha %g, kind %d)",
                 (long long)cases[i].end_id, cases[i].alpha, (int)cases[i].kind);
        check_beam_exhaustive(what, lm_seq_logp, &lm, 1, o);
        snprintf(what, sizeof what, "seq2seq beam vs exhaustive (end %lld, alpha %g, kind %d)",
                 (long long)cases[i].end_id, cases[i].alpha, (int)cases[i].kind);
        check_beam_exhaustive(what, s2s_seq_logp, &s2s, 0, o);
    }
    qkv_lm_free(&lm);
    qkv_seq2seq_free(&s2s);
    qkv_params_free(p);
}

/* Beam width 1 and sampling with top_k 1 are greedy. */
static void test_greedy_equivalents(const qkv_lm *lm, const qkv_seq2seq *s2s)
{
    enum { M = 20 };
    int64_t prompt[2 * 3] = {1, 2, 3, 4, 5, 6}, src[2 * 3] = {1, 2, 3, 4, 5, 6};
    int64_t end_ids[2] = {2, -1};
    float alphas[2] = {0.0f, 0.6f};
    for (int c = 0; c < 2; c++) {
        qkv_generate_opts g = gen_opts(QKV_DECODE_GREEDY, M, end_ids[c]);
        qkv_generate_opts b = g, s = g;
        b.kind = QKV_DECODE_BEAM;
        b.num_beams = 1;
        b.length_penalty = alphas[c];
        s.kind = QKV_DECODE_SAMPLE;
        s.top_k = 1;
        s.temperature = 0.7f;
        s.seed = 3;
        int64_t tg[2 * M], lg[2], tb[2 * M], lb[2], ts[2 * M], ls[2];
        float sg[2], sb[2], ss[2];
        CHECK_OK(lm_gen(lm, prompt, NULL, 2, 3, &g, tg, lg, sg));
        CHECK_OK(lm_gen(lm, prompt, NULL, 2, 3, &b, tb, lb, sb));
        CHECK_OK(lm_gen(lm, prompt, NULL, 2, 3, &s, ts, ls, ss));
        CHECK(!memcmp(tg, tb, sizeof tg) && !memcmp(lg, lb, sizeof lg),
              "LM beam width 1 differs from greedy (end %lld)", (long long)end_ids[c]);
        CHECK(!memcmp(tg, ts, sizeof tg) && !memcmp(lg, ls, sizeof lg),
              "LM sampling with top_k 1 differs from greedy (end %lld)", (long long)end_ids[c]);
        for (int n = 0; n < 2; n++) {
            double want = sg[n] / lp_of(&b, lg[n]);
            CHECK(fabs(sb[n] - want) <= 1e-4 * fmax(1, fabs(want)), "beam-1 score %g, greedy's "
                  "normalised %g", sb[n], want);
            CHECK(fabsf(ss[n] - sg[n]) <= 1e-5f * fmaxf(1, fabsf(sg[n])), "top_k-1 score %g, greedy %g",
                  ss[n], sg[n]);
        }
        CHECK_OK(s2s_gen(s2s, src, NULL, 2, 3, &g, tg, lg, sg));
        CHECK_OK(s2s_gen(s2s, src, NULL, 2, 3, &b, tb, lb, sb));
        CHECK(!memcmp(tg, tb, sizeof tg) && !memcmp(lg, lb, sizeof lg),
              "seq2seq beam width 1 differs from greedy (end %lld)", (long long)end_ids[c]);
    }
    /* Greedy really is the argmax of the full forward, token after token. */
    qkv_generate_opts g = gen_opts(QKV_DECODE_GREEDY, 8, -1);
    int64_t tg[8], lg[1], seq[16] = {1, 2, 3};
    float sg[1];
    CHECK_OK(lm_gen(lm, prompt, NULL, 1, 3, &g, tg, lg, sg));
    int ok = 1;
    for (int64_t t = 0; t < 8; t++) {
        qkv_ctx_reset(C);
        qkv_arena_reset(A);
        qkv_tensor *lf = NULL;
        CHECK_OK(qkv_lm_forward(C, lm, ids_tensor(seq, 1, 3 + t), NULL, &lf));
        if (!lf) break;
        const float *row = lf->data + (2 + t) * lm->o.vocab_size;
        int64_t am = 0;
        for (int64_t v = 1; v < lm->o.vocab_size; v++) am = row[v] > row[am] ? v : am;
        ok &= am == tg[t];
        seq[3 + t] = tg[t];
    }
    CHECK(ok, "greedy tokens are not the full forward's argmax");
}

/* A plain beam search over full forwards (no cache, run to max length, no
 * early stop): the library's must return the same, its stopping rule
 * only ever skipping steps that cannot change the result. */
static void next_logp(const qkv_lm *m, const int64_t *prompt, int64_t P, const int64_t *hist,
                      int64_t t, double *out)
{
    int64_t ids[64], V = m->o.vocab_size;
    memcpy(ids, prompt, (size_t)P * sizeof *ids);
    memcpy(ids + P, hist, (size_t)t * sizeof *ids);
    qkv_ctx_reset(C);
    qkv_arena_reset(A);
    qkv_tensor *lg = NULL;
    CHECK_OK(qkv_lm_forward(C, m, ids_tensor(ids, 1, P + t), NULL, &lg));
    const float *row = lg ? lg->data + (P + t - 1) * V : NULL;
    double z = 0;
    for (int64_t v = 0; row && v < V; v++) z += exp((double)row[v]);
    for (int64_t v = 0; v < V; v++) out[v] = row ? row[v] - log(z) : 0;
}

enum { RB_MAXB = 4, RB_M = 12, RB_V = 11 };
typedef struct {
    int64_t tok[RB_M], len;
    double score;
} ref_hyp;

static void ref_add(ref_hyp *hyps, int64_t *nh, int64_t B, const int64_t *tok, int64_t len,
                    double score)
{
    int64_t slot = *nh;
    if (slot == B) {
        int64_t w = 0;
        for (int64_t j = 1; j < B; j++) w = hyps[j].score < hyps[w].score ? j : w;
        if (!(score > hyps[w].score)) return;
        slot = w;
    } else {
        (*nh)++;
    }
    memcpy(hyps[slot].tok, tok, (size_t)len * sizeof *tok);
    hyps[slot].len = len;
    hyps[slot].score = score;
}

static ref_hyp ref_beam(const qkv_lm *m, const int64_t *prompt, int64_t P,
                        const qkv_generate_opts *o)
{
    int64_t B = o->num_beams, M = o->max_new_tokens, V = m->o.vocab_size, nb = 1, nh = 0;
    int64_t beam[RB_MAXB][RB_M], nbeam[RB_MAXB][RB_M];
    double bs[RB_MAXB] = {0}, nbs[RB_MAXB], lp[RB_MAXB][RB_V];
    ref_hyp hyps[RB_MAXB];
    for (int64_t t = 0; t < M && nb > 0; t++) {
        for (int64_t b = 0; b < nb; b++) next_logp(m, prompt, P, beam[b], t, lp[b]);
        int64_t order[RB_MAXB * RB_V], n = nb * V;
        for (int64_t i = 0; i < n; i++) order[i] = i;
        for (int64_t i = 1; i < n; i++) /* insertion sort: score desc, then index asc */
            for (int64_t j = i; j > 0; j--) {
                double a = bs[order[j - 1] / V] + lp[order[j - 1] / V][order[j - 1] % V];
                double c = bs[order[j] / V] + lp[order[j] / V][order[j] % V];
                if (!(c > a)) break;
                int64_t tmp = order[j];
                order[j] = order[j - 1];
                order[j - 1] = tmp;
            }
        int64_t nn = 0;
        for (int64_t k = 0; k < n && k < 2 * B && nn < B; k++) {
            int64_t b = order[k] / V, v = order[k] % V;
            double s = bs[b] + lp[b][v];
            int64_t seq[RB_M];
            memcpy(seq, beam[b], (size_t)t * sizeof *seq);
            seq[t] = v;
            if (v == o->end_id) {
                if (k < B) ref_add(hyps, &nh, B, seq, t + 1, s / lp_of(o, t + 1));
                continue;
            }
            memcpy(nbeam[nn], seq, (size_t)(t + 1) * sizeof *seq);
            nbs[nn++] = s;
            if (t == M - 1) ref_add(hyps, &nh, B, seq, t + 1, s / lp_of(o, t + 1));
        }
        memcpy(beam, nbeam, sizeof beam);
        memcpy(bs, nbs, sizeof bs);
        nb = nn;
    }
    int64_t best = 0;
    for (int64_t j = 1; j < nh; j++) best = hyps[j].score > hyps[best].score ? j : best;
    return hyps[best];
}

static void check_beam_reference(const qkv_lm *m, const char *name, int64_t B, float alpha,
                                 qkv_length_penalty kind, int64_t end_id, const int64_t *prompt)
{
    qkv_generate_opts o = gen_opts(QKV_DECODE_BEAM, RB_M, end_id);
    o.num_beams = B;
    o.length_penalty = alpha;
    o.length_penalty_kind = kind;
    ref_hyp want = ref_beam(m, prompt, 3, &o);
    int64_t tok[RB_M], len[1];
    float sc[1];
    CHECK_OK(lm_gen(m, prompt, NULL, 1, 3, &o, tok, len, sc));
    CHECK(len[0] == want.len && !memcmp(tok, want.tok, (size_t)want.len * sizeof *tok),
          "%s beam B %lld alpha %g kind %d end %lld: length %lld, the plain beam search's %lld",
          name, (long long)B, alpha, (int)kind, (long long)end_id, (long long)len[0],
          (long long)want.len);
    CHECK(fabs(sc[0] - want.score) <= 1e-4 * fmax(1, fabs(want.score)),
          "%s beam B %lld alpha %g: score %.7g, the plain beam search's %.7g", name, (long long)B,
          alpha, sc[0], want.score);
}

/* On the 11-token LM and on a 5-token one whose end token comes often (so
 * that hypotheses finish early and the stopping rule and the end token's
 * rank rule matter). */
enum { NPROMPT = 3 };

static void test_beam_reference(const qkv_lm *m)
{
    qkv_params *p;
    qkv_rng rng;
    qkv_lm m5;
    CHECK_OK(qkv_params_new(&p));
    qkv_rng_seed(&rng, 55);
    qkv_lm_opts o5 = qkv_lm_opts_default(5, 16, 2, 2, 32);
    o5.layer.dim_feedforward = 32;
    CHECK_OK(qkv_lm_init(&m5, &o5, p, "", &rng));
    qkv_length_penalty G = QKV_LENGTH_PENALTY_GNMT, P = QKV_LENGTH_PENALTY_POWER;
    int64_t prompts[NPROMPT][3];
    for (int i = 0; i < NPROMPT; i++)
        for (int j = 0; j < 3; j++) prompts[i][j] = (int64_t)(qkv_rng_next(&rng) % 5);
    check_beam_reference(m, "V11", 3, 0.6f, G, 2, prompts[0]);
    check_beam_reference(m, "V11", 2, 1.0f, P, 4, prompts[1]);
    check_beam_reference(m, "V11", 4, -0.5f, G, 2, prompts[2]);
    check_beam_reference(m, "V11", 2, 0.0f, G, 0, prompts[0]);
    float alphas[4] = {0.0f, 0.6f, 1.5f, 3.0f};
    for (int i = 0; i < NPROMPT; i++)
        for (int64_t end = 0; end < 5; end++)
            for (int a = 0; a < 4; a++)
                for (int64_t B = 1; B <= 4; B++)
                    check_beam_reference(&m5, "V5", B, alphas[a], a == 2 ? P : G, end, prompts[i]);
    qkv_lm_free(&m5);
    qkv_params_free(p);
}

/* ---- sampling ---------------------------------------------------------------------------- */

/* probs of softmax(x / T) restricted to the ids in keep (nkeep). */
static void restricted_softmax(const float *x, int64_t V, float T, const int64_t *keep,
                               int64_t nkeep, float *out)
{
    double z = 0;
    for (int64_t i = 0; i < V; i++) out[i] = 0;
    for (int64_t j = 0; j < nkeep; j++) z += exp(x[keep[j]] / T);
    for (int64_t j = 0; j < nkeep; j++) out[keep[j]] = (float)(exp(x[keep[j]] / T) / z);
}

static void check_probs(const char *what, const float *logits, int64_t V, qkv_generate_opts o,
                        const int64_t *keep, int64_t nkeep)
{
    float got[8], want[8];
    restricted_softmax(logits, V, o.temperature, keep, nkeep, want);
    qkv_status s = qkv_sample_probs(C, logits, V, &o, got);
    CHECK(s == QKV_OK, "%s: %s", what, qkv_last_error());
    CHECK(h_rel_err(got, want, V) <= 1e-6, "%s: probs differ from the expected (err %.3g)", what,
          h_rel_err(got, want, V));
}

static void test_sampling(const qkv_lm *m)
{
    const float x[6] = {1.0f, 2.5f, -0.5f, 2.5f, 0.0f, 1.5f};
    qkv_generate_opts o = qkv_generate_opts_default();
    check_probs("plain softmax", x, 6, o, (int64_t[]){0, 1, 2, 3, 4, 5}, 6);
    o.temperature = 0.5f;
    check_probs("temperature 0.5", x, 6, o, (int64_t[]){0, 1, 2, 3, 4, 5}, 6);
    o.temperature = 1.0f;
    o.top_k = 2;
    check_probs("top_k 2 (a tie at the top)", x, 6, o, (int64_t[]){1, 3}, 2);
    o.top_k = 3;
    check_probs("top_k 3", x, 6, o, (int64_t[]){1, 3, 5}, 3);
    o.top_k = 0;
    o.top_p = 0.6f; /* sorted probs .367 .367 .135 .082 .030 .018: two reach .6 */
    check_probs("top_p 0.6", x, 6, o, (int64_t[]){1, 3}, 2);
    o.top_p = 0.8f;
    check_probs("top_p 0.8", x, 6, o, (int64_t[]){1, 3, 5}, 3);
    o.top_p = 0.2f; /* the most likely alone (the lower id of the tie) */
    check_probs("top_p 0.2", x, 6, o, (int64_t[]){1}, 1);
    o.top_p = 0.9f;
    o.top_k = 3;
    o.temperature = 2.0f; /* T 2 over {1,3,5}: .38 .38 .23: all three needed for .9 */
    check_probs("top_k 3, top_p 0.9, T 2", x, 6, o, (int64_t[]){1, 3, 5}, 3);
    const float tie[4] = {1, 1, 1, 0};
    qkv_generate_opts ot = qkv_generate_opts_default();
    ot.top_k = 2;
    check_probs("top_k cut inside a tie keeps the lower ids", tie, 4, ot, (int64_t[]){0, 1}, 2);

    /* Draws follow the distribution: 40000 draws, each frequency within 5 sigma. */
    qkv_generate_opts od = qkv_generate_opts_default();
    od.temperature = 0.8f;
    od.top_k = 4;
    od.top_p = 0.95f;
    float probs[6];
    CHECK_OK(qkv_sample_probs(C, x, 6, &od, probs));
    enum { DRAWS = 40000 };
    int64_t count[6] = {0}, first[100], again[100];
    qkv_rng rng;
    qkv_rng_seed(&rng, 9);
    for (int64_t i = 0; i < DRAWS; i++) {
        int64_t tk = -1;
        CHECK_OK(qkv_sample_token(C, x, 6, &od, &rng, &tk));
        if (tk < 0 || tk >= 6) break;
        count[tk]++;
        if (i < 100) first[i] = tk;
    }
    for (int64_t v = 0; v < 6; v++) {
        double f = (double)count[v] / DRAWS, p = probs[v];
        double tol = 5 * sqrt(p * (1 - p) / DRAWS) + 1e-12;
        CHECK(fabs(f - p) <= tol, "id %lld drawn with frequency %.4f, probability %.4f", (long long)v,
              f, p);
    }
    CHECK(probs[2] == 0 && probs[4] == 0 && count[2] == 0 && count[4] == 0,
          "ids outside top_k were drawn");
    qkv_rng_seed(&rng, 9);
    for (int64_t i = 0; i < 100; i++) CHECK_OK(qkv_sample_token(C, x, 6, &od, &rng, &again[i]));
    CHECK(!memcmp(first, again, sizeof first), "the same seed gave different draws");

    /* Seeded generation repeats; another seed gives another text. */
    enum { M = 30 };
    int64_t prompt[3] = {1, 2, 3}, t1[M], t2[M], t3[M], l[1];
    float sc[1];
    qkv_generate_opts og = gen_opts(QKV_DECODE_SAMPLE, M, -1);
    og.seed = 42;
    og.temperature = 1.5f;
    CHECK_OK(lm_gen(m, prompt, NULL, 1, 3, &og, t1, l, sc));
    CHECK_OK(lm_gen(m, prompt, NULL, 1, 3, &og, t2, l, sc));
    og.seed = 43;
    CHECK_OK(lm_gen(m, prompt, NULL, 1, 3, &og, t3, l, sc));
    CHECK(!memcmp(t1, t2, sizeof t1), "sampling with the same seed differs");
    CHECK(memcmp(t1, t3, sizeof t1) != 0, "sampling with seeds 42 and 43 gave the same 30 tokens");
}

/* ---- reorder, truncate, modes --------------------------------------------------------------- */

/* Feeds ids (N,T) (pad or NULL) through the cache; logits copied to out. */
static void lm_feed(const qkv_lm *m, qkv_kv_cache *kc, const int64_t *ids, const uint8_t *pad,
                    int64_t N, int64_t T, float *out)
{
    qkv_ctx_reset(C);
    qkv_arena_reset(A);
    qkv_tensor *lg = NULL;
    CHECK_OK(qkv_lm_forward_cached(C, m, kc, ids_tensor(ids, N, T), pad ? pad_tensor(pad, N, T) : NULL,
                                   &lg));
    if (lg) memcpy(out, lg->data, (size_t)qkv_tensor_numel(lg) * sizeof(float));
}

static void test_reorder_truncate(const qkv_lm *lm, const qkv_seq2seq *s2s)
{
    enum { N = 3, P = 5, V = 11 };
    int64_t pr[N * P] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 0, 3, 5, 7};
    uint8_t pad[N * P] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0};
    int64_t rows[N] = {2, 0, 0}, pr2[N * P], nxt[N] = {4, 4, 4};
    uint8_t pad2[N * P];
    for (int64_t n = 0; n < N; n++) {
        memcpy(pr2 + n * P, pr + rows[n] * P, P * sizeof *pr);
        memcpy(pad2 + n * P, pad + rows[n] * P, P);
    }
    float l1[N * V], l2[N * V], scratch[N * P * V];
    qkv_kv_cache a, b;
    CHECK_OK(qkv_lm_cache_init(&a, lm, N, 16));
    CHECK_OK(qkv_lm_cache_init(&b, lm, N, 16));
    lm_feed(lm, &a, pr, pad, N, P, scratch);
    CHECK_OK(qkv_kv_cache_reorder(C, &a, rows));
    lm_feed(lm, &a, nxt, NULL, N, 1, l1);
    lm_feed(lm, &b, pr2, pad2, N, P, scratch);
    lm_feed(lm, &b, nxt, NULL, N, 1, l2);
    CHECK(h_rel_err(l1, l2, N * V) <= 1e-6, "reordered cache vs a cache of the reordered prompts: %.3g",
          h_rel_err(l1, l2, N * V));
    /* Truncate to 1 position (inside row 0's padding) and feed the same
     * tokens again: the same logits. */
    CHECK_OK(qkv_kv_cache_truncate(&b, 1));
    CHECK(b.len == 1 && b.npad[0] == 1, "truncate: len %lld, npad[0] %lld", (long long)b.len,
          (long long)b.npad[0]);
    int64_t tail[N * 4];
    uint8_t tpad[N * 4];
    cols(pr2, N, P, 1, 4, sizeof *pr2, tail);
    cols(pad2, N, P, 1, 4, 1, tpad);
    lm_feed(lm, &b, tail, tpad, N, 4, scratch);
    lm_feed(lm, &b, nxt, NULL, N, 1, l1);
    CHECK(h_rel_err(l1, l2, N * V) <= 1e-6, "after truncate and refeed: %.3g", h_rel_err(l1, l2, N * V));
    qkv_kv_cache_free(&a);
    qkv_kv_cache_free(&b);

    /* The encoder-decoder's cross-attention keys move with their rows. */
    int64_t src[2 * 3] = {1, 2, 3, 6, 5, 4}, swapped[2 * 3] = {6, 5, 4, 1, 2, 3};
    int64_t bos[2] = {0, 0}, swap[2] = {1, 0};
    float s1[2 * 10], s2[2 * 10];
    qkv_tensor *lg = NULL;
    CHECK_OK(qkv_seq2seq_cache_init(&a, s2s, 2, 4));
    CHECK_OK(qkv_seq2seq_cache_init(&b, s2s, 2, 4));
    qkv_ctx_reset(C);
    qkv_arena_reset(A);
    CHECK_OK(qkv_seq2seq_start(C, s2s, &a, ids_tensor(src, 2, 3), NULL));
    CHECK_OK(qkv_kv_cache_reorder(C, &a, swap));
    CHECK_OK(qkv_seq2seq_forward_cached(C, s2s, &a, ids_tensor(bos, 2, 1), NULL, &lg));
    if (lg) memcpy(s1, lg->data, sizeof s1);
    CHECK_OK(qkv_seq2seq_start(C, s2s, &b, ids_tensor(swapped, 2, 3), NULL));
    CHECK_OK(qkv_seq2seq_forward_cached(C, s2s, &b, ids_tensor(bos, 2, 1), NULL, &lg));
    if (lg) memcpy(s2, lg->data, sizeof s2);
    CHECK(h_rel_err(s1, s2, 20) <= 1e-6, "seq2seq reorder: %.3g", h_rel_err(s1, s2, 20));
    qkv_kv_cache_free(&a);
    qkv_kv_cache_free(&b);
}

/* Cached forwards record nothing and leave grad mode as they found it. */
static void test_modes(const qkv_lm *lm)
{
    qkv_kv_cache kc;
    int64_t ids[2] = {1, 2}, tok[4], len[1];
    CHECK_OK(qkv_lm_cache_init(&kc, lm, 1, 8));
    qkv_ctx_reset(C);
    qkv_arena_reset(A);
    qkv_tensor *lg = NULL;
    CHECK_OK(qkv_lm_forward_cached(C, lm, &kc, ids_tensor(ids, 1, 2), NULL, &lg));
    CHECK(lg && !lg->requires_grad, "cached logits require grad");
    qkv_generate_opts o = gen_opts(QKV_DECODE_GREEDY, 4, -1);
    CHECK_OK(qkv_lm_generate(C, lm, &kc, ids_tensor(ids, 1, 2), NULL, &o, tok, len, NULL));
    qkv_ctx_reset(C);
    qkv_tensor *h = NULL;
    CHECK_OK(qkv_linear(C, lm->tok.emb.weight, lm->lm_head.weight, NULL, &h));
    CHECK(h && h->requires_grad, "grad mode was not restored after generate");
    qkv_ctx_set_grad(C, 0);
    CHECK_OK(qkv_lm_generate(C, lm, &kc, ids_tensor(ids, 1, 2), NULL, &o, tok, len, NULL));
    CHECK_OK(qkv_linear(C, lm->tok.emb.weight, lm->lm_head.weight, NULL, &h));
    CHECK(h && !h->requires_grad, "grad off was not kept after generate");
    qkv_ctx_set_grad(C, 1);
    qkv_ctx_set_training(C, 1);
    CHECK_ERR(qkv_lm_forward_cached(C, lm, &kc, ids_tensor(ids, 1, 2), NULL, &lg), QKV_ERR_STATE,
              "inference only");
    CHECK_ERR(qkv_lm_generate(C, lm, &kc, ids_tensor(ids, 1, 2), NULL, &o, tok, len, NULL),
              QKV_ERR_STATE, "training mode");
    qkv_ctx_set_training(C, 0);
    qkv_kv_cache_free(&kc);
}

/* ---- bad input ------------------------------------------------------------------------------ */

static void test_bad_cache_and_stacks(const qkv_lm *lm, const qkv_seq2seq *s2s)
{
    qkv_kv_cache kc, zero = {0};
    int64_t rows[2] = {0, 2};
    CHECK_ERR(qkv_kv_cache_init(NULL, 1, 1, 1, 1, 1), QKV_ERR_ARG, "cache is NULL");
    CHECK_ERR(qkv_kv_cache_init(&kc, 1, 0, 1, 1, 1), QKV_ERR_ARG, "batch 0");
    CHECK_ERR(qkv_kv_cache_init(&kc, 1, 1, 1, 1, -3), QKV_ERR_ARG, "max_len -3");
    qkv_kv_cache_free(NULL);
    qkv_kv_cache_reset(NULL);
    qkv_kv_cache_reset(&zero);
    CHECK_ERR(qkv_kv_cache_truncate(&zero, 0), QKV_ERR_STATE, "not initialised");
    CHECK_ERR(qkv_kv_cache_reorder(C, &zero, rows), QKV_ERR_STATE, "not initialised");
    CHECK_OK(qkv_lm_cache_init(&kc, lm, 2, 4));
    CHECK_ERR(qkv_kv_cache_truncate(&kc, 1), QKV_ERR_ARG, "len 1 outside [0, 0]");
    CHECK_ERR(qkv_kv_cache_reorder(C, &kc, rows), QKV_ERR_ARG, "rows[1] = 2 outside [0, batch 2)");
    CHECK_ERR(qkv_kv_cache_reorder(NULL, &kc, rows), QKV_ERR_ARG, "ctx is NULL");
    CHECK_ERR(qkv_kv_cache_reorder(C, &kc, NULL), QKV_ERR_ARG, "rows is NULL");

    /* The stacks' cached forwards. */
    const qkv_transformer_decoder_only *st = &lm->blocks;
    const qkv_transformer_decoder *dec = &s2s->transformer.decoder;
    qkv_tensor *x, *xbad, *out, *kpm_f, *kpm_s, *mem;
    static float xd[2 * 3 * 16], md[2 * 5 * 16];
    uint8_t km[2 * 3] = {0};
    qkv_ctx_reset(C);
    qkv_arena_reset(A);
    CHECK_OK(qkv_tensor_wrap(A, xd, 3, (int64_t[]){2, 3, 16}, &x));    /* (N,T,E) */
    CHECK_OK(qkv_tensor_wrap(A, xd, 3, (int64_t[]){3, 2, 16}, &xbad)); /* batch 3 */
    CHECK_OK(qkv_tensor_wrap(A, xd, 2, (int64_t[]){2, 3}, &kpm_f));     /* F32 mask */
    CHECK_OK(qkv_tensor_wrap_bool(A, km, 2, (int64_t[]){3, 2}, &kpm_s));
    CHECK_OK(qkv_tensor_wrap(A, md, 3, (int64_t[]){2, 5, 16}, &mem));
    const char *fn = "transformer_decoder_only_forward_cached";
    CHECK_ERR(qkv_transformer_decoder_only_forward_cached(C, st, &kc, x, NULL, NULL), QKV_ERR_ARG,
              "out is NULL");
    CHECK_ERR(qkv_transformer_decoder_only_forward_cached(NULL, st, &kc, x, NULL, &out), QKV_ERR_ARG,
              "ctx is NULL");
    CHECK_ERR(qkv_transformer_decoder_only_forward_cached(C, NULL, &kc, x, NULL, &out), QKV_ERR_ARG,
              "module is NULL");
    CHECK_ERR(qkv_transformer_decoder_only_forward_cached(C, st, NULL, x, NULL, &out), QKV_ERR_ARG,
              "cache is NULL");
    CHECK_ERR(qkv_transformer_decoder_only_forward_cached(C, st, &kc, NULL, NULL, &out), QKV_ERR_ARG,
              "x is NULL");
    CHECK_ERR(qkv_transformer_decoder_only_forward_cached(C, st, &kc, xbad, NULL, &out),
              QKV_ERR_SHAPE, "has batch 3, the cache 2");
    CHECK_ERR(qkv_transformer_decoder_only_forward_cached(C, st, &kc, x, kpm_f, &out), QKV_ERR_DTYPE,
              "must be BOOL");
    CHECK_ERR(qkv_transformer_decoder_only_forward_cached(C, st, &kc, x, kpm_s, &out), QKV_ERR_SHAPE,
              "key_padding_mask (3,2), expected (N,T) = (2,3)");
    CHECK_OK(qkv_transformer_decoder_only_forward_cached(C, st, &kc, x, NULL, &out));
    CHECK_ERR(qkv_transformer_decoder_only_forward_cached(C, st, &kc, x, NULL, &out), QKV_ERR_SHAPE,
              "3 new positions after the cache's 3 exceed its max_len 4");
    CHECK(strstr(qkv_last_error(), fn) != NULL, "message names %s: %s", fn, qkv_last_error());
    CHECK(kc.len == 3, "a failed step moved the cache to %lld", (long long)kc.len);
    qkv_kv_cache k3;
    CHECK_OK(qkv_kv_cache_init(&k3, 3, 2, 2, 8, 4));
    CHECK_ERR(qkv_transformer_decoder_only_forward_cached(C, st, &k3, x, NULL, &out), QKV_ERR_SHAPE,
              "cache of 3 layers, 2 heads of 8 dims does not fit the model's 2 layers");
    qkv_kv_cache_free(&k3);
    qkv_transformer_decoder_only blank = {0};
    CHECK_ERR(qkv_transformer_decoder_only_forward_cached(C, &blank, &kc, x, NULL, &out),
              QKV_ERR_STATE, "not initialised");

    qkv_kv_cache kd;
    CHECK_OK(qkv_seq2seq_cache_init(&kd, s2s, 2, 4));
    CHECK_ERR(qkv_transformer_decoder_forward_cached(C, dec, &kd, x, NULL, &out), QKV_ERR_STATE,
              "no memory in the cache");
    CHECK_ERR(qkv_transformer_decoder_set_memory(C, dec, &kd, NULL, NULL), QKV_ERR_ARG,
              "memory is NULL");
    CHECK_ERR(qkv_transformer_decoder_set_memory(C, dec, &kd, xbad, NULL), QKV_ERR_SHAPE,
              "memory (3,2,16) has batch 3, the cache 2");
    CHECK_ERR(qkv_transformer_decoder_set_memory(C, dec, &kd, mem, kpm_s), QKV_ERR_SHAPE,
              "memory_key_padding_mask (3,2), expected (N,S) = (2,5)");
    CHECK_ERR(qkv_transformer_decoder_set_memory(C, dec, &kd, mem, kpm_f), QKV_ERR_DTYPE,
              "must be BOOL");
    CHECK_ERR(qkv_transformer_decoder_set_memory(NULL, dec, &kd, mem, NULL), QKV_ERR_ARG,
              "ctx is NULL");
    CHECK_OK(qkv_kv_cache_init(&k3, 3, 2, 2, 8, 4));
    CHECK_ERR(qkv_transformer_decoder_set_memory(C, dec, &k3, mem, NULL), QKV_ERR_SHAPE,
              "does not fit");
    qkv_kv_cache_free(&k3);
    CHECK_OK(qkv_transformer_decoder_set_memory(C, dec, &kd, mem, NULL));
    CHECK_ERR(qkv_transformer_decoder_forward_cached(C, dec, &kd, xbad, NULL, &out), QKV_ERR_SHAPE,
              "tgt (3,2,16) has batch 3");
    CHECK_ERR(qkv_transformer_decoder_forward_cached(C, NULL, &kd, x, NULL, &out), QKV_ERR_ARG,
              "module is NULL");
    CHECK_OK(qkv_transformer_decoder_forward_cached(C, dec, &kd, x, NULL, &out));
    qkv_kv_cache_free(&kd);
    qkv_kv_cache_free(&kc);
}

static void test_bad_models(const qkv_lm *lm, const qkv_seq2seq *s2s)
{
    qkv_params *p;
    qkv_rng rng;
    qkv_lm m;
    qkv_seq2seq s;
    CHECK_OK(qkv_params_new(&p));
    qkv_rng_seed(&rng, 1);
    qkv_lm_opts o = small_lm_opts(0);
    CHECK_ERR(qkv_lm_init(NULL, &o, p, "", &rng), QKV_ERR_ARG, "module is NULL");
    CHECK_ERR(qkv_lm_init(&m, NULL, p, "", &rng), QKV_ERR_ARG, "opts is NULL");
    CHECK_ERR(qkv_lm_init(&m, &o, NULL, "", &rng), QKV_ERR_ARG, "params is NULL");
    o.vocab_size = 0;
    CHECK_ERR(qkv_lm_init(&m, &o, p, "", &rng), QKV_ERR_ARG, "lm_init: vocab_size 0");
    o = small_lm_opts(0);
    o.padding_idx = 11;
    CHECK_ERR(qkv_lm_init(&m, &o, p, "", &rng), QKV_ERR_ARG, "padding_idx 11 outside [-1, vocab_size 11)");
    o = small_lm_opts(0);
    o.posenc = (qkv_posenc_kind)9;
    CHECK_ERR(qkv_lm_init(&m, &o, p, "", &rng), QKV_ERR_ARG, "posenc 9");
    o = qkv_lm_opts_default(5, 6, 3, 1, 8);
    o.posenc = QKV_POSENC_SINUSOIDAL;
    o.layer.d_model = 9;
    CHECK_ERR(qkv_lm_init(&m, &o, p, "", &rng), QKV_ERR_ARG, "sinusoidal positions need an even d_model");
    o = small_lm_opts(0);
    o.layer.nhead = 3;
    CHECK_ERR(qkv_lm_init(&m, &o, p, "", &rng), QKV_ERR_ARG, "not divisible by nhead 3");
    qkv_lm_free(NULL);
    qkv_seq2seq_opts so = small_s2s_opts(5, 0);
    so.tgt_vocab = 0;
    CHECK_ERR(qkv_seq2seq_init(&s, &so, p, "", &rng), QKV_ERR_ARG, "tgt_vocab 0");
    so = small_s2s_opts(5, 0);
    so.t.d_model = 15;
    so.t.nhead = 3;
    CHECK_ERR(qkv_seq2seq_init(&s, &so, p, "", &rng), QKV_ERR_ARG, "even d_model");
    CHECK_ERR(qkv_seq2seq_init(&s, &so, p, "", NULL), QKV_ERR_ARG, "rng is NULL");
    qkv_seq2seq_free(NULL);
    qkv_params_free(p);

    qkv_lm blank = {0};
    qkv_seq2seq sblank = {0};
    qkv_kv_cache kc;
    int64_t ids[6] = {1, 2, 3, 4, 5, 11}, big[300] = {0};
    uint8_t pad[6] = {0};
    qkv_tensor *lg, *mem;
    qkv_ctx_reset(C);
    qkv_arena_reset(A);
    qkv_tensor *good = ids_tensor(ids, 2, 2), *bad_id = ids_tensor(ids, 1, 6);
    qkv_tensor *f32, *one_d, *pad32 = pad_tensor(pad, 3, 2);
    static float fd[4];
    CHECK_OK(qkv_tensor_wrap(A, fd, 2, (int64_t[]){2, 2}, &f32));
    CHECK_OK(qkv_tensor_wrap_i64(A, ids, 1, (int64_t[]){6}, &one_d));
    CHECK_ERR(qkv_lm_forward(C, &blank, good, NULL, &lg), QKV_ERR_STATE, "call qkv_lm_init");
    CHECK_ERR(qkv_lm_forward(C, lm, NULL, NULL, &lg), QKV_ERR_ARG, "ids is NULL");
    CHECK_ERR(qkv_lm_forward(C, lm, good, NULL, NULL), QKV_ERR_ARG, "logits is NULL");
    CHECK_ERR(qkv_lm_forward(NULL, lm, good, NULL, &lg), QKV_ERR_ARG, "ctx is NULL");
    CHECK_ERR(qkv_lm_forward(C, lm, f32, NULL, &lg), QKV_ERR_DTYPE, "ids must be I64");
    CHECK_ERR(qkv_lm_forward(C, lm, one_d, NULL, &lg), QKV_ERR_SHAPE, "ids (6,), expected (N,T)");
    CHECK_ERR(qkv_lm_forward(C, lm, good, pad32, &lg), QKV_ERR_SHAPE,
              "key_padding_mask (3,2), expected (N,T) = (2,2)");
    CHECK_ERR(qkv_lm_forward(C, lm, good, f32, &lg), QKV_ERR_DTYPE, "must be BOOL");
    CHECK_ERR(qkv_lm_forward(C, lm, bad_id, NULL, &lg), QKV_ERR_ARG, "11");
    CHECK_ERR(qkv_lm_forward(C, lm, ids_tensor(big, 1, 300), NULL, &lg), QKV_ERR_SHAPE,
              "position 256 (row 0) is beyond max_len 256");
    CHECK_ERR(qkv_lm_cache_init(&kc, &blank, 1, 4), QKV_ERR_STATE, "call qkv_lm_init");
    CHECK_ERR(qkv_lm_cache_init(NULL, lm, 1, 4), QKV_ERR_ARG, "cache is NULL");
    CHECK_OK(qkv_lm_cache_init(&kc, lm, 1, 4));
    CHECK_ERR(qkv_lm_forward_cached(C, lm, &kc, good, NULL, &lg), QKV_ERR_SHAPE,
              "ids have batch 2, the cache 1");
    CHECK_ERR(qkv_lm_forward_cached(C, lm, &kc, ids_tensor(ids, 1, 5), NULL, &lg), QKV_ERR_SHAPE,
              "exceed its max_len 4");
    CHECK_ERR(qkv_lm_forward_cached(C, lm, NULL, good, NULL, &lg), QKV_ERR_ARG, "cache is NULL");
    CHECK_ERR(qkv_lm_forward_cached(NULL, lm, &kc, good, NULL, &lg), QKV_ERR_ARG, "ctx is NULL");
    CHECK_ERR(qkv_lm_forward_cached(C, lm, &kc, good, NULL, NULL), QKV_ERR_ARG, "logits is NULL");
    qkv_kv_cache_free(&kc);

    CHECK_ERR(qkv_seq2seq_forward(C, &sblank, good, good, NULL, NULL, &lg), QKV_ERR_STATE,
              "call qkv_seq2seq_init");
    CHECK_ERR(qkv_seq2seq_forward(C, s2s, good, f32, NULL, NULL, &lg), QKV_ERR_DTYPE,
              "tgt must be I64");
    CHECK_ERR(qkv_seq2seq_forward(C, s2s, good, good, pad32, NULL, &lg), QKV_ERR_SHAPE,
              "src_padding_mask (3,2)");
    CHECK_ERR(qkv_seq2seq_forward(C, s2s, good, good, NULL, pad32, &lg), QKV_ERR_SHAPE,
              "tgt_padding_mask (3,2)");
    CHECK_ERR(qkv_seq2seq_encode(C, s2s, NULL, NULL, &mem), QKV_ERR_ARG, "src is NULL");
    CHECK_ERR(qkv_seq2seq_encode(C, s2s, good, NULL, NULL), QKV_ERR_ARG, "memory is NULL");
    CHECK_ERR(qkv_seq2seq_encode(C, &sblank, good, NULL, &mem), QKV_ERR_STATE, "seq2seq_init");
    CHECK_OK(qkv_seq2seq_encode(C, s2s, good, NULL, &mem));
    CHECK(mem && mem->ndim == 3 && mem->shape[0] == 2 && mem->shape[1] == 2 && mem->shape[2] == 16,
          "encode: memory shape");
    CHECK_ERR(qkv_seq2seq_cache_init(&kc, &sblank, 1, 4), QKV_ERR_STATE, "seq2seq_init");
    CHECK_OK(qkv_seq2seq_cache_init(&kc, s2s, 1, 4));
    CHECK_ERR(qkv_seq2seq_forward_cached(C, s2s, &kc, ids_tensor(ids, 1, 1), NULL, &lg),
              QKV_ERR_STATE, "no memory in the cache");
    CHECK_ERR(qkv_seq2seq_start(C, s2s, &kc, good, NULL), QKV_ERR_SHAPE, "has batch 2, the cache 1");
    CHECK_ERR(qkv_seq2seq_start(C, s2s, &kc, NULL, NULL), QKV_ERR_ARG, "src is NULL");
    CHECK_ERR(qkv_seq2seq_start(NULL, s2s, &kc, good, NULL), QKV_ERR_ARG, "ctx is NULL");
    CHECK_OK(qkv_seq2seq_start(C, s2s, &kc, ids_tensor(ids, 1, 3), NULL));
    CHECK_ERR(qkv_seq2seq_forward_cached(C, s2s, &kc, good, NULL, &lg), QKV_ERR_SHAPE,
              "tgt has batch 2, the cache 1");
    CHECK_ERR(qkv_seq2seq_forward_cached(C, s2s, &kc, ids_tensor(ids, 1, 2), pad32, &lg),
              QKV_ERR_SHAPE, "tgt_padding_mask (3,2)");
    qkv_kv_cache_free(&kc);
}

static void test_bad_generate(const qkv_lm *lm, const qkv_seq2seq *s2s)
{
    enum { M = 4 };
    int64_t ids[4] = {1, 2, 3, 4}, tok[2 * M], len[2];
    uint8_t right[4] = {0, 1, 0, 0};
    qkv_kv_cache kc, kb;
    CHECK_OK(qkv_lm_cache_init(&kc, lm, 2, 5));
    CHECK_OK(qkv_lm_cache_init(&kb, lm, 2 * 3, 5));
    qkv_ctx_reset(C);
    qkv_arena_reset(A);
    qkv_tensor *pr = ids_tensor(ids, 2, 2);
    qkv_generate_opts o = gen_opts(QKV_DECODE_GREEDY, M, -1), b;
    const char *fn = "lm_generate";
#define GEN(opts) qkv_lm_generate(C, lm, &kc, pr, NULL, (opts), tok, len, NULL)
    CHECK_OK(GEN(&o));
    CHECK_ERR(qkv_lm_generate(NULL, lm, &kc, pr, NULL, &o, tok, len, NULL), QKV_ERR_ARG, "ctx is NULL");
    CHECK_ERR(qkv_lm_generate(C, NULL, &kc, pr, NULL, &o, tok, len, NULL), QKV_ERR_ARG, "module is NULL");
    CHECK_ERR(qkv_lm_generate(C, lm, NULL, pr, NULL, &o, tok, len, NULL), QKV_ERR_ARG, "cache is NULL");
    CHECK_ERR(qkv_lm_generate(C, lm, &kc, NULL, NULL, &o, tok, len, NULL), QKV_ERR_ARG, "prompt is NULL");
    CHECK_ERR(qkv_lm_generate(C, lm, &kc, pr, NULL, NULL, tok, len, NULL), QKV_ERR_ARG, "opts is NULL");
    CHECK_ERR(qkv_lm_generate(C, lm, &kc, pr, NULL, &o, NULL, len, NULL), QKV_ERR_ARG, "tokens is NULL");
    CHECK_ERR(qkv_lm_generate(C, lm, &kc, pr, NULL, &o, tok, NULL, NULL), QKV_ERR_ARG, "lengths is NULL");
    CHECK_ERR(qkv_lm_generate(C, lm, &kc, pr, pad_tensor(right, 2, 2), &o, tok, len, NULL), QKV_ERR_ARG,
              "row 0 ends in padding: prompts must be left-padded");
    b = o;
    b.max_new_tokens = 0;
    CHECK_ERR(GEN(&b), QKV_ERR_ARG, "max_new_tokens 0 must be >= 1");
    b = o;
    b.max_new_tokens = 5;
    CHECK_ERR(GEN(&b), QKV_ERR_SHAPE, "6 positions needed (max_new_tokens 5), beyond the cache's max_len 5");
    CHECK(strstr(qkv_last_error(), fn) != NULL, "message names %s", fn);
    b = o;
    b.end_id = 11;
    CHECK_ERR(GEN(&b), QKV_ERR_ARG, "end_id 11 outside [-1, vocabulary 11)");
    b = o;
    b.kind = (qkv_decode_kind)7;
    CHECK_ERR(GEN(&b), QKV_ERR_ARG, "kind 7");
    b = o;
    b.kind = QKV_DECODE_SAMPLE;
    b.temperature = 0;
    CHECK_ERR(GEN(&b), QKV_ERR_ARG, "temperature 0 must be positive");
    b.temperature = NAN;
    CHECK_ERR(GEN(&b), QKV_ERR_ARG, "temperature nan");
    b.temperature = INFINITY;
    CHECK_ERR(GEN(&b), QKV_ERR_ARG, "temperature inf");
    b.temperature = 1;
    b.top_k = -1;
    CHECK_ERR(GEN(&b), QKV_ERR_ARG, "top_k -1 must be >= 0");
    b.top_k = 0;
    b.top_p = 0;
    CHECK_ERR(GEN(&b), QKV_ERR_ARG, "top_p 0 outside (0,1]");
    b.top_p = 1.5f;
    CHECK_ERR(GEN(&b), QKV_ERR_ARG, "top_p 1.5 outside (0,1]");
    b.top_p = NAN;
    CHECK_ERR(GEN(&b), QKV_ERR_ARG, "top_p nan");
    b = o;
    b.kind = QKV_DECODE_BEAM;
    b.num_beams = 3;
    CHECK_ERR(GEN(&b), QKV_ERR_SHAPE, "cache has batch 2, needs 6 (2 inputs times num_beams)");
    CHECK_OK(qkv_lm_generate(C, lm, &kb, pr, NULL, &b, tok, len, NULL));
    b.num_beams = 0;
    CHECK_ERR(GEN(&b), QKV_ERR_ARG, "num_beams 0 must be >= 1");
    b.num_beams = 1;
    b.length_penalty = INFINITY;
    CHECK_ERR(GEN(&b), QKV_ERR_ARG, "length_penalty inf is not finite");
    b.length_penalty = 1;
    b.length_penalty_kind = (qkv_length_penalty)5;
    CHECK_ERR(GEN(&b), QKV_ERR_ARG, "length_penalty_kind 5");
#undef GEN
    /* Beyond the model's positions: a cache longer than the model's max_len. */
    qkv_params *p;
    qkv_rng rng;
    qkv_lm small;
    qkv_kv_cache kl;
    CHECK_OK(qkv_params_new(&p));
    qkv_rng_seed(&rng, 2);
    qkv_lm_opts so = qkv_lm_opts_default(5, 8, 2, 1, 6);
    CHECK_OK(qkv_lm_init(&small, &so, p, "", &rng));
    CHECK_OK(qkv_lm_cache_init(&kl, &small, 2, 32));
    b = gen_opts(QKV_DECODE_GREEDY, 6, -1);
    CHECK_ERR(qkv_lm_generate(C, &small, &kl, pr, NULL, &b, tok, len, NULL), QKV_ERR_SHAPE,
              "reach position 6, beyond the model's max_len 6");
    b.max_new_tokens = 5;
    int64_t t5[10];
    CHECK_OK(qkv_lm_generate(C, &small, &kl, pr, NULL, &b, t5, len, NULL));
    qkv_kv_cache_free(&kl);
    qkv_lm_free(&small);
    qkv_params_free(p);

    /* seq2seq_generate. */
    qkv_kv_cache ks;
    CHECK_OK(qkv_seq2seq_cache_init(&ks, s2s, 2, M));
    qkv_arena_reset(A);
    pr = ids_tensor(ids, 2, 2);
    CHECK_OK(qkv_seq2seq_generate(C, s2s, &ks, pr, NULL, 0, &o, tok, len, NULL));
    CHECK_ERR(qkv_seq2seq_generate(C, s2s, &ks, pr, NULL, 10, &o, tok, len, NULL), QKV_ERR_ARG,
              "bos_id 10 outside [0, tgt_vocab 10)");
    CHECK_ERR(qkv_seq2seq_generate(C, s2s, &ks, pr, NULL, -1, &o, tok, len, NULL), QKV_ERR_ARG,
              "bos_id -1");
    CHECK_ERR(qkv_seq2seq_generate(C, s2s, &ks, NULL, NULL, 0, &o, tok, len, NULL), QKV_ERR_ARG,
              "src is NULL");
    CHECK_ERR(qkv_seq2seq_generate(C, s2s, &ks, pr, pad_tensor(right, 1, 4), 0, &o, tok, len, NULL),
              QKV_ERR_SHAPE, "src_padding_mask (1,4)");
    b = o;
    b.max_new_tokens = M + 1;
    CHECK_ERR(qkv_seq2seq_generate(C, s2s, &ks, pr, NULL, 0, &b, tok, len, NULL), QKV_ERR_SHAPE,
              "beyond the cache's max_len 4");
    b = o;
    b.kind = QKV_DECODE_BEAM;
    b.num_beams = 2;
    CHECK_ERR(qkv_seq2seq_generate(C, s2s, &ks, pr, NULL, 0, &b, tok, len, NULL), QKV_ERR_SHAPE,
              "needs 4");
    qkv_kv_cache_free(&ks);
    qkv_kv_cache_free(&kc);
    qkv_kv_cache_free(&kb);

    /* The sampling functions. */
    float x[3] = {0, 1, 2}, probs[3], nanx[3] = {0, NAN, 1};
    int64_t t;
    qkv_rng r;
    qkv_rng_seed(&r, 0);
    qkv_generate_opts so2 = qkv_generate_opts_default();
    CHECK_ERR(qkv_sample_probs(NULL, x, 3, &so2, probs), QKV_ERR_ARG, "ctx is NULL");
    CHECK_ERR(qkv_sample_probs(C, NULL, 3, &so2, probs), QKV_ERR_ARG, "logits is NULL");
    CHECK_ERR(qkv_sample_probs(C, x, 3, NULL, probs), QKV_ERR_ARG, "opts is NULL");
    CHECK_ERR(qkv_sample_probs(C, x, 3, &so2, NULL), QKV_ERR_ARG, "probs is NULL");
    CHECK_ERR(qkv_sample_probs(C, x, 0, &so2, probs), QKV_ERR_ARG, "V 0 must be >= 1");
    CHECK_ERR(qkv_sample_probs(C, nanx, 3, &so2, probs), QKV_ERR_ARG, "logits[1] is nan");
    CHECK_ERR(qkv_sample_token(C, x, 3, &so2, NULL, &t), QKV_ERR_ARG, "rng is NULL");
    CHECK_ERR(qkv_sample_token(C, x, 3, &so2, &r, NULL), QKV_ERR_ARG, "token is NULL");
    so2.temperature = -1;
    CHECK_ERR(qkv_sample_token(C, x, 3, &so2, &r, &t), QKV_ERR_ARG, "sample_token: temperature -1");
    so2.temperature = 1;
    so2.top_p = 2;
    CHECK_ERR(qkv_sample_probs(C, x, 3, &so2, probs), QKV_ERR_ARG, "sample_probs: top_p 2");
}

int main(void)
{
    if (qkv_ctx_new(&C) != QKV_OK || qkv_arena_new(&A, 0) != QKV_OK) return 1;
    test_stacks_cached();
    test_lm_cache_exact();
    test_s2s_cache_exact();

    qkv_params *p;
    qkv_rng rng;
    qkv_lm lm;
    qkv_seq2seq s2s;
    CHECK_OK(qkv_params_new(&p));
    qkv_rng_seed(&rng, 31);
    qkv_lm_opts lo = small_lm_opts(0);
    CHECK_OK(qkv_lm_init(&lm, &lo, p, "lm.", &rng));
    qkv_seq2seq_opts so = small_s2s_opts(10, 0);
    CHECK_OK(qkv_seq2seq_init(&s2s, &so, p, "s2s.", &rng));
    test_lm_padding(&lm);
    test_s2s_padding(&s2s);
    test_greedy_equivalents(&lm, &s2s);
    test_beam_exhaustive();
    test_beam_reference(&lm);
    test_sampling(&lm);
    test_reorder_truncate(&lm, &s2s);
    test_modes(&lm);
    test_bad_cache_and_stacks(&lm, &s2s);
    test_bad_models(&lm, &s2s);
    test_bad_generate(&lm, &s2s);

    qkv_lm_free(&lm);
    qkv_seq2seq_free(&s2s);
    qkv_params_free(p);
    qkv_arena_free(A);
    qkv_ctx_free(C);
    return h_finish("test_generate");
}
