/* test_generate: the generate calls of both models.
 *  - padding: a batch of prompts of different lengths decodes each row as
 *    it decodes alone (greedy, sampling, beam search; language model and
 *    encoder-decoder);
 *  - bad input to the models and to the generate and sampling calls.
 * The KV cache is test_kvcache's, beam search test_beam's, sampling and
 * greedy test_sampling's. */
#include "gen_helpers.h"

/* ---- padding ------------------------------------------------------------------------------- */

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

/* Rotary positions: greedy decoding of a left-padded batch through the
 * cache gives, token after token, the argmax of the full forward over the
 * prompt and the tokens so far (the cache keeps rotated keys, and the new
 * tokens are rotated at their true positions); and each row as it would
 * alone (test_lm_padding). */
static void test_rotary_greedy(void)
{
    enum { P = 6, M = 30 };
    qkv_params *p;
    qkv_rng rng;
    qkv_lm m;
    new_lm(&p, &rng, 77, small_lm_opts(2), "", &m);
    int64_t prompt[2 * P] = {7, 7, 7, 4, 9, 1, 3, 3, 8, 0, 5, 10}; /* row 0 left-padded by 3 */
    uint8_t pad[2 * P] = {1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    qkv_generate_opts o = gen_opts(QKV_DECODE_GREEDY, M, -1);
    int64_t tok[2 * M], len[2];
    CHECK_OK(lm_gen(&m, prompt, pad, 2, P, &o, tok, len, NULL));
    enum { W = P + M };
    int64_t seq[2 * W];
    uint8_t spad[2 * W];
    memset(spad, 0, sizeof spad);
    for (int n = 0; n < 2; n++) {
        memcpy(seq + n * W, prompt + n * P, P * sizeof *seq);
        memcpy(spad + n * W, pad + n * P, P);
        memcpy(seq + n * W + P, tok + n * M, M * sizeof *seq);
    }
    int64_t V = m.o.vocab_size, agree = 0, distinct = 0;
    for (int64_t t = 0; t < M; t++) { /* the full forward over [0, P + t) */
        int64_t w = P + t, in[2 * W];
        uint8_t ip[2 * W];
        cols(seq, 2, W, 0, w, sizeof *seq, in);
        cols(spad, 2, W, 0, w, 1, ip);
        qkv_ctx_reset(C);
        qkv_arena_reset(A);
        qkv_tensor *lf = NULL;
        CHECK_OK(qkv_lm_forward(C, &m, ids_tensor(in, 2, w), pad_tensor(ip, 2, w), &lf));
        for (int n = 0; lf && n < 2; n++) {
            const float *row = lf->data + (n * w + w - 1) * V; // (V): the last position's
            int64_t best = 0;
            for (int64_t v = 1; v < V; v++) best = row[v] > row[best] ? v : best;
            agree += best == tok[n * M + t];
            CHECK(best == tok[n * M + t], "rotary greedy row %d step %lld: cached %lld, full forward's argmax %lld",
                  n, (long long)t, (long long)tok[n * M + t], (long long)best);
        }
    }
    for (int64_t v = 0; v < V; v++) { /* the check means something only if the tokens vary */
        int seen = 0;
        for (int64_t i = 0; i < 2 * M; i++) seen |= tok[i] == v;
        distinct += seen;
    }
    CHECK(distinct >= 3, "rotary greedy: only %lld distinct tokens generated", (long long)distinct);
    printf("rotary LM: cached greedy = full forward's argmax at %lld of %d steps (2 rows, one left-padded; "
           "%lld distinct tokens)\n", (long long)agree, 2 * M, (long long)distinct);
    test_lm_padding(&m);
    qkv_lm_free(&m);
    qkv_params_free(p);
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

/* ---- bad input ------------------------------------------------------------------------------ */

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
    so.t.layer.d_model = 15;
    so.t.layer.nhead = 3;
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
    new_lm(&p, &rng, 2, qkv_lm_opts_default(5, 8, 2, 1, 6), "", &small);
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
    gen_models g;
    gen_models_init(&g);
    test_lm_padding(&g.lm);
    test_s2s_padding(&g.s2s);
    test_rotary_greedy();
    test_bad_models(&g.lm, &g.s2s);
    test_bad_generate(&g.lm, &g.s2s);
    gen_models_free(&g);
    qkv_arena_free(A);
    qkv_ctx_free(C);
    return h_finish("test_generate");
}
