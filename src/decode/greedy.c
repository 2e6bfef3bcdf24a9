/* greedy.c: greedy decoding and sampling, one token per row per step:
 * the argmax (lowest id on ties) or a draw from the row's own seeded rng
 * (sample.c); a row stops at its end token, the loop when every row has.
 * The state is allocated once, before the first token. */
#include <math.h>
#include <stdlib.h>
#include "decode/decode_internal.h"

/* log softmax(row)[tok] of a logits row (V). */
static double log_prob(const float *row, int64_t V, int64_t tok)
{
    double mx = -INFINITY, s = 0;
    for (int64_t i = 0; i < V; i++) mx = row[i] > mx ? row[i] : mx;
    for (int64_t i = 0; i < V; i++) s += exp((double)row[i] - mx);
    return (double)row[tok] - mx - log(s);
}

static int64_t argmax(const float *row, int64_t V)
{
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (row[i] > row[best]) best = i;
    return best;
}

/* The state of greedy decoding and sampling: (N) each. */
typedef struct {
    uint8_t *done;
    qkv_rng *rng;
    int64_t *next;
    double *sum;
} simple_state;

static void simple_free(simple_state *s)
{
    free(s->done);
    free(s->rng);
    free(s->next);
    free(s->sum);
}

static qkv_status simple_alloc(simple_state *s, int64_t N, uint64_t seed)
{
    s->done = calloc((size_t)N, 1);
    s->rng = calloc((size_t)N, sizeof *s->rng);
    s->next = calloc((size_t)N, sizeof *s->next);
    s->sum = calloc((size_t)N, sizeof *s->sum);
    if (!s->done || !s->rng || !s->next || !s->sum) {
        simple_free(s);
        return qkv_fail(QKV_ERR_NOMEM, "generate: out of memory");
    }
    for (int64_t n = 0; n < N; n++) qkv_rng_seed(&s->rng[n], seed + (uint64_t)n);
    return QKV_OK;
}

/* Chooses every unfinished row's token t from logits (N,V); 1 in *all_done
 * when every row has ended. */
static qkv_status simple_choose(qkv_ctx *c, const qkv_generate_opts *o, simple_state *s,
                                int64_t N, int64_t V, const float *logits, int64_t t,
                                int64_t *tokens, int64_t *lengths, int *all_done)
{
    int64_t M = o->max_new_tokens;
    *all_done = 1;
    for (int64_t n = 0; n < N; n++) {
        if (s->done[n]) continue;
        const float *row = logits + n * V; // (V)
        int64_t tok;
        if (o->kind == QKV_DECODE_SAMPLE) QKV_TRY(qkv_sample_token(c, row, V, o, &s->rng[n], &tok));
        else tok = argmax(row, V);
        s->sum[n] += log_prob(row, V, tok);
        tokens[n * M + t] = tok;
        lengths[n] = t + 1;
        s->next[n] = tok;
        s->done[n] = tok == o->end_id;
        *all_done &= s->done[n];
    }
    return QKV_OK;
}

qkv_status dec_greedy(const char *fn, qkv_ctx *c, const dec_model *g, qkv_kv_cache *kc,
                      const qkv_generate_opts *o, float *logits, int64_t *tokens,
                      int64_t *lengths, float *scores)
{
    int64_t N = kc ? kc->batch : g->rows, V = g->V, M = o->max_new_tokens;
    simple_state s;
    QKV_TRY(simple_alloc(&s, N, o->seed));
    qkv_status st = QKV_OK;
    for (int64_t t = 0; t < M && st == QKV_OK; t++) {
        int all_done;
        st = simple_choose(c, o, &s, N, V, logits, t, tokens, lengths, &all_done);
        if (st != QKV_OK || all_done || t == M - 1) break;
        st = dec_feed_tokens(fn, c, g, kc, o, s.next, logits);
    }
    for (int64_t n = 0; st == QKV_OK && scores && n < N; n++) scores[n] = (float)s.sum[n];
    simple_free(&s);
    return st;
}
