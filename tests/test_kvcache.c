/* test_kvcache: the KV cache and the cached forwards.
 *  - the cache is exact: 200 tokens decoded through it give the logits of
 *    recomputing the whole sequence each step (decoder-only LM and
 *    encoder-decoder; the stacks alone in both layouts and unbatched);
 *  - cache reorder (also of the memory's keys and values) and truncate;
 *    cached outputs record nothing, grad mode restored, training refused;
 *  - bad input to the cache and the stacks' cached forwards. */
#include "gen_helpers.h"

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
    for (int variant = 0; variant < 3; variant++) { /* 2: rotary positions */
        qkv_params *p;
        qkv_rng rng;
        qkv_lm m;
        new_lm(&p, &rng, 10 + variant, small_lm_opts(variant), "", &m);
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
        new_s2s(&p, &rng, 20 + variant, small_s2s_opts(10, variant), "", &m);
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
    CHECK_OK(qkv_transformer_decoder_only_init(&dec_only, &o, 2, 1e-5f, p, "a.", &rng));
    CHECK_OK(qkv_transformer_decoder_init(&dec, &o, 2, 1e-5f, p, "b.", &rng));
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

int main(void)
{
    if (qkv_ctx_new(&C) != QKV_OK || qkv_arena_new(&A, 0) != QKV_OK) return 1;
    test_stacks_cached();
    test_lm_cache_exact();
    test_s2s_cache_exact();
    gen_models g;
    gen_models_init(&g);
    test_reorder_truncate(&g.lm, &g.s2s);
    test_modes(&g.lm);
    test_bad_cache_and_stacks(&g.lm, &g.s2s);
    gen_models_free(&g);
    qkv_arena_free(A);
    qkv_ctx_free(C);
    return h_finish("test_kvcache");
}
