/* test_beam: beam search.
 *  - it equals exhaustive search on a 4-token vocabulary and 4 new tokens,
 *    with and without an end token, several length penalties, language
 *    model and encoder-decoder;
 *  - it equals a plain beam search written here (full forwards, no cache,
 *    no early stop) on 11- and 5-token vocabularies, widths 1-4, several
 *    alphas and end tokens: the stopping rule never changes the result. */
#include "gen_helpers.h"

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
    qkv_lm_opts lo = qkv_lm_opts_default(4, 16, 2, 2, 16);
    lo.layer.dim_feedforward = 32;
    new_lm(&p, &rng, 77, lo, "lm.", &lm);
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

/* ---- beam search against a plain one -------------------------------------------------------- */

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
    qkv_lm_opts o5 = qkv_lm_opts_default(5, 16, 2, 2, 32);
    o5.layer.dim_feedforward = 32;
    new_lm(&p, &rng, 55, o5, "", &m5);
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

int main(void)
{
    if (qkv_ctx_new(&C) != QKV_OK || qkv_arena_new(&A, 0) != QKV_OK) return 1;
    test_beam_exhaustive();
    gen_models g;
    gen_models_init(&g);
    test_beam_reference(&g.lm);
    gen_models_free(&g);
    qkv_arena_free(A);
    qkv_ctx_free(C);
    return h_finish("test_beam");
}
