/* beam.c: beam search. B = num_beams beams per input, each step's 2B best
 * (beam, token) extensions, finished hypotheses ranked by sum(log p) /
 * lp(len), an input done when no live beam can still beat its worst
 * finished one; the cache's rows follow their beams' parents (the
 * memory's keys and values stay: an input's beams share them). The rules,
 * step by step, are in docs/generation.md ("Beam search"). The state is
 * allocated once, before the first token. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "decode/decode_internal.h"

/* lp(len): ((5 + len) / 6)^alpha or len^alpha. */
static double length_penalty(const qkv_generate_opts *o, int64_t len)
{
    if (o->length_penalty_kind == QKV_LENGTH_PENALTY_POWER)
        return pow((double)len, o->length_penalty);
    return pow((5.0 + (double)len) / 6.0, o->length_penalty);
}

/* Beams: R = N * B rows, beam b of input n in row n * B + b. Finished
 * hypotheses: B slots per input. */
typedef struct {
    int64_t N, B, R, V, M;
    double *score;      /* (R) sum of log-probs of each beam; -inf: no beam */
    double *nscore;     /* (R) the next step's */
    int64_t *hist;      /* (R,M) each beam's tokens */
    int64_t *nhist;     /* (R,M) */
    int64_t *parent;    /* (R) the row each new beam extends */
    int64_t *next;      /* (R) the token each new beam adds */
    double *cand;       /* (2B) candidate scores of one input, best first */
    int64_t *cand_id;   /* (2B) b * V + token */
    int64_t *hyp;       /* (N,B,M) finished hypotheses' tokens */
    int64_t *hyp_len;   /* (N,B) */
    double *hyp_score;  /* (N,B) sum / lp(len) */
    int64_t *nhyp;      /* (N) */
    uint8_t *done;      /* (N) */
} beam_state;

static void beam_free(beam_state *s)
{
    void *p[] = {s->score, s->nscore, s->hist, s->nhist, s->parent, s->next, s->cand,
                 s->cand_id, s->hyp, s->hyp_len, s->hyp_score, s->nhyp, s->done};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) free(p[i]);
}

static qkv_status beam_alloc(beam_state *s, int64_t N, int64_t B, int64_t V, int64_t M)
{
    int64_t R = N * B;
    *s = (beam_state){0};
    s->N = N;
    s->B = B;
    s->R = R;
    s->V = V;
    s->M = M;
    s->score = malloc((size_t)R * sizeof(double));
    s->nscore = malloc((size_t)R * sizeof(double));
    s->hist = calloc((size_t)(R * M), sizeof(int64_t));
    s->nhist = calloc((size_t)(R * M), sizeof(int64_t));
    s->parent = malloc((size_t)R * sizeof(int64_t));
    s->next = calloc((size_t)R, sizeof(int64_t));
    s->cand = malloc((size_t)(2 * B) * sizeof(double));
    s->cand_id = malloc((size_t)(2 * B) * sizeof(int64_t));
    s->hyp = calloc((size_t)(R * M), sizeof(int64_t));
    s->hyp_len = calloc((size_t)R, sizeof(int64_t));
    s->hyp_score = calloc((size_t)R, sizeof(double));
    s->nhyp = calloc((size_t)N, sizeof(int64_t));
    s->done = calloc((size_t)N, 1);
    if (!s->score || !s->nscore || !s->hist || !s->nhist || !s->parent || !s->next || !s->cand ||
        !s->cand_id || !s->hyp || !s->hyp_len || !s->hyp_score || !s->nhyp || !s->done) {
        beam_free(s);
        return qkv_fail(QKV_ERR_NOMEM, "generate: out of memory for %lld beams", (long long)R);
    }
    for (int64_t r = 0; r < R; r++) s->score[r] = r % B ? -INFINITY : 0.0; /* one live beam */
    return QKV_OK;
}

/* Inserts (v, id) into the best-first list of at most K; equal scores keep
 * the earlier (lower id) first. */
static void topk_push(double *val, int64_t *id, int64_t *cnt, int64_t K, double v, int64_t i)
{
    if (*cnt == K && !(v > val[K - 1])) return;
    int64_t j = *cnt < K ? (*cnt)++ : K - 1;
    while (j > 0 && v > val[j - 1]) {
        val[j] = val[j - 1];
        id[j] = id[j - 1];
        j--;
    }
    val[j] = v;
    id[j] = i;
}

/* The 2B best (beam, token) extensions of input n's live beams; logits
 * (R,V). Returns their count. */
static int64_t beam_candidates(beam_state *s, int64_t n, const float *logits)
{
    int64_t cnt = 0, K = 2 * s->B, V = s->V;
    for (int64_t b = 0; b < s->B; b++) {
        int64_t r = n * s->B + b;
        if (s->score[r] == -INFINITY) continue;
        const float *row = logits + r * V; // (V)
        double mx = -INFINITY, z = 0;
        for (int64_t v = 0; v < V; v++) mx = row[v] > mx ? row[v] : mx;
        for (int64_t v = 0; v < V; v++) z += exp((double)row[v] - mx);
        double base = s->score[r] - mx - log(z);
        for (int64_t v = 0; v < V; v++) topk_push(s->cand, s->cand_id, &cnt, K, base + row[v], b * V + v);
    }
    return cnt;
}

/* Adds a finished hypothesis of input n: row r's first t tokens then tok,
 * with sum of log-probs sum; keeps the B best. */
static void beam_add_hyp(beam_state *s, const qkv_generate_opts *o, int64_t n, int64_t r,
                         int64_t t, int64_t tok, double sum)
{
    int64_t B = s->B, M = s->M, slot = s->nhyp[n];
    double sc = sum / length_penalty(o, t + 1);
    if (slot == B) { /* full: replace the worst if this is better */
        int64_t w = 0;
        for (int64_t j = 1; j < B; j++)
            if (s->hyp_score[n * B + j] < s->hyp_score[n * B + w]) w = j;
        if (!(sc > s->hyp_score[n * B + w])) return;
        slot = w;
    } else {
        s->nhyp[n]++;
    }
    int64_t *h = s->hyp + (n * B + slot) * M; // (M)
    memcpy(h, s->hist + r * M, (size_t)t * sizeof *h);
    h[t] = tok;
    s->hyp_len[n * B + slot] = t + 1;
    s->hyp_score[n * B + slot] = sc;
}

/* Whether input n is finished: B hypotheses, and no live beam can still
 * beat the worst: its best possible score is sum / max lp over the
 * lengths it can reach (t + 2 .. M), as log-probs only lower the sum. */
static int beam_finished(const beam_state *s, const qkv_generate_opts *o, int64_t n, int64_t t)
{
    int64_t B = s->B;
    double best = -INFINITY, worst = INFINITY;
    for (int64_t b = 0; b < B; b++) best = fmax(best, s->nscore[n * B + b]);
    if (best == -INFINITY) return 1;
    if (s->nhyp[n] < B) return 0;
    for (int64_t j = 0; j < B; j++) worst = fmin(worst, s->hyp_score[n * B + j]);
    double lp = fmax(length_penalty(o, t + 2), length_penalty(o, s->M));
    return worst >= best / lp;
}

/* Step t of input n: the new beams (parent, next, nscore) from the
 * candidates; an end token among the B best candidates finishes a
 * hypothesis; at the last step every new beam does. */
static void beam_select(beam_state *s, const qkv_generate_opts *o, int64_t n, int64_t t,
                        const float *logits)
{
    int64_t B = s->B, V = s->V, j = 0;
    int64_t cnt = s->done[n] ? 0 : beam_candidates(s, n, logits);
    for (int64_t k = 0; k < cnt && j < B; k++) {
        int64_t r = n * B + s->cand_id[k] / V, tok = s->cand_id[k] % V;
        if (tok == o->end_id) {
            if (k < B) beam_add_hyp(s, o, n, r, t, tok, s->cand[k]);
            continue;
        }
        s->parent[n * B + j] = r;
        s->next[n * B + j] = tok;
        s->nscore[n * B + j] = s->cand[k];
        if (t == s->M - 1) beam_add_hyp(s, o, n, r, t, tok, s->cand[k]);
        j++;
    }
    for (; j < B; j++) { /* no candidate left: a dead beam */
        s->parent[n * B + j] = n * B + j;
        s->next[n * B + j] = 0;
        s->nscore[n * B + j] = -INFINITY;
    }
    if (!s->done[n] && t < s->M - 1) s->done[n] = beam_finished(s, o, n, t);
}

/* New beams' histories: the parent's first t tokens, then the new token. */
static void beam_advance(beam_state *s, int64_t t)
{
    int64_t M = s->M;
    for (int64_t r = 0; r < s->R; r++) {
        memcpy(s->nhist + r * M, s->hist + s->parent[r] * M, (size_t)t * sizeof(int64_t));
        s->nhist[r * M + t] = s->next[r];
    }
    int64_t *h = s->hist;
    s->hist = s->nhist;
    s->nhist = h;
    double *sc = s->score;
    s->score = s->nscore;
    s->nscore = sc;
}

/* The best hypothesis of each input into tokens, lengths, scores. */
static void beam_output(const beam_state *s, const qkv_generate_opts *o, int64_t *tokens,
                        int64_t *lengths, float *scores)
{
    int64_t B = s->B, M = s->M;
    for (int64_t n = 0; n < s->N; n++) {
        int64_t best = -1;
        for (int64_t j = 0; j < s->nhyp[n]; j++)
            if (best < 0 || s->hyp_score[n * B + j] > s->hyp_score[n * B + best]) best = j;
        lengths[n] = best < 0 ? 0 : s->hyp_len[n * B + best];
        for (int64_t i = 0; i < lengths[n]; i++) tokens[n * M + i] = s->hyp[(n * B + best) * M + i];
        if (scores) scores[n] = best < 0 ? -INFINITY : (float)s->hyp_score[n * B + best];
    }
}

static int is_identity(const int64_t *rows, int64_t R)
{
    for (int64_t r = 0; r < R; r++)
        if (rows[r] != r) return 0;
    return 1;
}

qkv_status dec_beam(const char *fn, qkv_ctx *c, const dec_model *g, qkv_kv_cache *kc,
                    const qkv_generate_opts *o, float *logits, int64_t *tokens,
                    int64_t *lengths, float *scores)
{
    int64_t B = o->num_beams, N = (kc ? kc->batch : g->rows) / B, M = o->max_new_tokens;
    beam_state s;
    QKV_TRY(beam_alloc(&s, N, B, g->V, M));
    qkv_status st = QKV_OK;
    for (int64_t t = 0; t < M && st == QKV_OK; t++) {
        int all_done = 1;
        for (int64_t n = 0; n < N; n++) {
            beam_select(&s, o, n, t, logits);
            all_done &= s.done[n];
        }
        beam_advance(&s, t);
        if (all_done || t == M - 1) break;
        qkv_ctx_reset(c);
        if (!is_identity(s.parent, s.R))
            st = g->reorder ? g->reorder(c, g, s.parent) : tfm_cache_reorder(c, kc, s.parent, 0);
        if (st == QKV_OK) st = dec_feed_tokens(fn, c, g, kc, o, s.next, logits);
    }
    if (st == QKV_OK) beam_output(&s, o, tokens, lengths, scores);
    beam_free(&s);
    return st;
}
