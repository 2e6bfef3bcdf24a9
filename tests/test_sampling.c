/* test_sampling: greedy decoding and sampling.
 *  - beam width 1 and sampling with top_k 1 are greedy; greedy is the full
 *    forward's argmax, token after token;
 *  - the sampling distribution (temperature, top-k, top-p, ties) against
 *    the formulas, draws within 5 sigma of it, seeded repeats;
 *  - suppress_ids: greedy, sampling and beam search never emit them, and
 *    suppressing ids that greedy never picks changes nothing. */
#include "gen_helpers.h"

/* ---- greedy --------------------------------------------------------------------------------- */

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

/* ---- suppress_ids ---------------------------------------------------------------------- */

enum { SUP_N = 2, SUP_M = 12 };

/* Generates SUP_N rows of SUP_M tokens with the language model (prompt
 * (SUP_N,3)) or, lm NULL, the encoder-decoder. */
static void sup_gen(const qkv_lm *lm, const qkv_seq2seq *s2s, const qkv_generate_opts *o,
                    int64_t *tok, int64_t *len)
{
    static const int64_t in[SUP_N * 3] = {1, 4, 2, 3, 0, 5};
    CHECK_OK(gen_run(lm, s2s, in, NULL, SUP_N, 3, o, tok, len, NULL));
}

static void test_suppress_model(const char *what, const qkv_lm *lm, const qkv_seq2seq *s2s,
                                int64_t V)
{
    int64_t tok[SUP_N * SUP_M], tok2[SUP_N * SUP_M], len[SUP_N], len2[SUP_N];
    qkv_generate_opts o = gen_opts(QKV_DECODE_GREEDY, SUP_M, -1);
    sup_gen(lm, s2s, &o, tok, len);
    uint8_t used[16] = {0}; // V <= 16
    for (int64_t i = 0; i < SUP_N * SUP_M; i++) used[tok[i]] = 1;
    int64_t unused[16], picked[16], nu = 0, np = 0;
    for (int64_t v = 0; v < V; v++) {
        if (used[v]) picked[np++] = v;
        else unused[nu++] = v;
    }
    CHECK(nu > 0 && np > 0, "%s: greedy used %lld of %lld ids: no test", what, (long long)np,
          (long long)V);
    /* ids greedy never picks: suppressing them changes nothing */
    o.suppress_ids = unused, o.n_suppress = nu;
    sup_gen(lm, s2s, &o, tok2, len2);
    CHECK(!memcmp(tok, tok2, sizeof tok), "%s: suppressing unused ids changed greedy", what);
    /* the ids greedy picked: never again, whatever the decoding */
    qkv_decode_kind kinds[3] = {QKV_DECODE_GREEDY, QKV_DECODE_SAMPLE, QKV_DECODE_BEAM};
    for (int k = 0; k < 3; k++) {
        o = gen_opts(kinds[k], SUP_M, -1);
        o.num_beams = 3, o.seed = 5, o.temperature = 2.0f;
        o.suppress_ids = picked, o.n_suppress = np;
        sup_gen(lm, s2s, &o, tok2, len2);
        int64_t bad = 0;
        for (int64_t n = 0; n < SUP_N; n++)
            for (int64_t t = 0; t < len2[n]; t++)
                for (int64_t i = 0; i < np; i++) bad += tok2[n * SUP_M + t] == picked[i];
        CHECK(bad == 0 && len2[0] == SUP_M, "%s, decoding %d: %lld suppressed tokens emitted", what,
              k, (long long)bad);
    }
}

static void test_suppress(const qkv_lm *lm, const qkv_seq2seq *s2s)
{
    test_suppress_model("language model", lm, NULL, 11);
    test_suppress_model("encoder-decoder", NULL, s2s, 10);
    int64_t tok[SUP_N * SUP_M], len[SUP_N];
    int64_t all[11] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, bad_id[2] = {3, 11};
    qkv_generate_opts o = gen_opts(QKV_DECODE_GREEDY, SUP_M, -1);
    static const int64_t in[SUP_N * 3] = {1, 4, 2, 3, 0, 5};
    struct { const int64_t *ids; int64_t n; const char *msg; } bad[] = {
        {bad_id, 2, "suppress_ids[1] = 11 outside [0, vocabulary 11)"},
        {NULL, 1, "suppress_ids is NULL"},
        {all, -1, "n_suppress -1 must be >= 0"},
        {all, 11, "covers all 11 ids"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        o.suppress_ids = bad[i].ids, o.n_suppress = bad[i].n;
        qkv_status st = gen_run(lm, NULL, in, NULL, SUP_N, 3, &o, tok, len, NULL);
        CHECK(st == QKV_ERR_ARG && strstr(qkv_last_error(), bad[i].msg),
              "bad suppress_ids %zu: status %d, \"%s\"", i, (int)st, qkv_last_error());
    }
    /* the same ids twice are fine: 10 distinct of 11 leave one id */
    int64_t ten[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 0};
    o.suppress_ids = ten, o.n_suppress = 12;
    CHECK_OK(gen_run(lm, NULL, in, NULL, SUP_N, 3, &o, tok, len, NULL));
    for (int64_t i = 0; i < SUP_N * SUP_M; i++)
        CHECK(tok[i] == 10, "only id 10 is left, token %lld is %lld", (long long)i, (long long)tok[i]);
}

int main(void)
{
    if (qkv_ctx_new(&C) != QKV_OK || qkv_arena_new(&A, 0) != QKV_OK) return 1;
    gen_models g;
    gen_models_init(&g);
    test_greedy_equivalents(&g.lm, &g.s2s);
    test_sampling(&g.lm);
    test_suppress(&g.lm, &g.s2s);
    gen_models_free(&g);
    qkv_arena_free(A);
    qkv_ctx_free(C);
    return h_finish("test_sampling");
}
