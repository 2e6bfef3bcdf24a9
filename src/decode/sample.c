/* sample.c: sampling's distribution and draw (temperature, top-k, top-p),
 * and the decoding options' defaults. The formulas, ties included, are in
 * docs/generation.md ("Sampling"). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "decode/decode_internal.h"

qkv_generate_opts qkv_generate_opts_default(void)
{
    qkv_generate_opts o = {0};
    o.kind = QKV_DECODE_GREEDY;
    o.max_new_tokens = 20;
    o.end_id = -1;
    o.temperature = 1.0f;
    o.top_p = 1.0f;
    o.num_beams = 4;
    o.length_penalty = 0.6f;
    o.length_penalty_kind = QKV_LENGTH_PENALTY_GNMT;
    return o;
}

qkv_status dec_check_sampling(const char *fn, const qkv_generate_opts *o)
{
    if (!(o->temperature > 0.0f) || !isfinite(o->temperature))
        return qkv_fail(QKV_ERR_ARG, "%s: temperature %g must be positive and finite", fn,
                        (double)o->temperature);
    if (o->top_k < 0)
        return qkv_fail(QKV_ERR_ARG, "%s: top_k %lld must be >= 0 (0: off)", fn, (long long)o->top_k);
    if (!(o->top_p > 0.0f && o->top_p <= 1.0f))
        return qkv_fail(QKV_ERR_ARG, "%s: top_p %g outside (0,1]", fn, (double)o->top_p);
    return QKV_OK;
}

typedef struct {
    float v;
    int64_t i;
} scored_id;

/* Descending value, then ascending id. */
static int by_value_desc(const void *pa, const void *pb)
{
    const scored_id *a = pa, *b = pb;
    if (a->v != b->v) return a->v > b->v ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

/* probs (V) from logits (V) under temperature, top_k, top_p; scratch is
 * (V) scored_ids. */
static void sampling_probs(const float *logits, int64_t V, const qkv_generate_opts *o,
                           float *probs, scored_id *sid)
{
    double T = o->temperature;
    for (int64_t i = 0; i < V; i++) sid[i] = (scored_id){logits[i], i};
    int64_t keep = o->top_k > 0 && o->top_k < V ? o->top_k : V;
    if (keep < V || o->top_p < 1.0f) qsort(sid, (size_t)V, sizeof *sid, by_value_desc);
    float top = -INFINITY;
    for (int64_t j = 0; j < keep; j++) top = sid[j].v > top ? sid[j].v : top;
    double sum = 0;
    for (int64_t j = 0; j < keep; j++) sum += exp(((double)sid[j].v - top) / T);
    int64_t cut = keep;
    double mass = sum;
    if (o->top_p < 1.0f) { /* the smallest prefix of the sorted ids reaching top_p */
        double cum = 0;
        for (int64_t j = 0; j < keep; j++) {
            cum += exp(((double)sid[j].v - top) / T);
            if (cum >= o->top_p * sum) {
                cut = j + 1;
                mass = cum;
                break;
            }
        }
    }
    memset(probs, 0, (size_t)V * sizeof(float));
    for (int64_t j = 0; j < cut; j++)
        probs[sid[j].i] = (float)(exp(((double)sid[j].v - top) / T) / mass);
}

static qkv_status sample_args(const char *fn, qkv_ctx *c, const float *logits, int64_t V,
                              const qkv_generate_opts *o)
{
    QKV_NEED(c, fn, "ctx");
    QKV_NEED(logits, fn, "logits");
    QKV_NEED(o, fn, "opts");
    if (V < 1) return qkv_fail(QKV_ERR_ARG, "%s: V %lld must be >= 1", fn, (long long)V);
    for (int64_t i = 0; i < V; i++)
        if (isnan(logits[i]) || logits[i] == INFINITY)
            return qkv_fail(QKV_ERR_ARG, "%s: logits[%lld] is %g", fn, (long long)i, logits[i]);
    /* All -inf: every probability would be 0/0 (PyTorch's multinomial
     * raises on such a row). */
    int64_t finite = 0;
    while (finite < V && logits[finite] == -INFINITY) finite++;
    if (finite == V)
        return qkv_fail(QKV_ERR_ARG, "%s: every logit is -inf (all %lld tokens are masked): "
                        "there is no distribution to sample from", fn, (long long)V);
    return dec_check_sampling(fn, o);
}

qkv_status qkv_sample_probs(qkv_ctx *c, const float *logits, int64_t V,
                            const qkv_generate_opts *o, float *probs)
{
    const char *fn = "sample_probs";
    QKV_NEED(probs, fn, "probs");
    QKV_TRY(sample_args(fn, c, logits, V, o));
    qkv_arena *a = qkv_ctx_arena(c);
    qkv_arena_mark mk = qkv_arena_get_mark(a);
    scored_id *sid = qkv_arena_alloc(a, (size_t)V * sizeof *sid); // (V)
    if (!sid) {
        qkv_arena_release(a, mk);
        return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for %lld scores", fn, (long long)V);
    }
    sampling_probs(logits, V, o, probs, sid);
    qkv_arena_release(a, mk);
    return QKV_OK;
}

/* The first id whose cumulative probability exceeds u * total. */
static int64_t draw(const float *probs, int64_t V, float u)
{
    double total = 0, cum = 0;
    int64_t last = 0;
    for (int64_t i = 0; i < V; i++) total += probs[i];
    for (int64_t i = 0; i < V; i++) {
        if (probs[i] <= 0) continue;
        cum += probs[i];
        last = i;
        if (cum > u * total) return i;
    }
    return last;
}

qkv_status qkv_sample_token(qkv_ctx *c, const float *logits, int64_t V,
                            const qkv_generate_opts *o, qkv_rng *rng, int64_t *token)
{
    const char *fn = "sample_token";
    QKV_NEED(token, fn, "token");
    QKV_NEED(rng, fn, "rng");
    QKV_TRY(sample_args(fn, c, logits, V, o));
    qkv_arena *a = qkv_ctx_arena(c);
    qkv_arena_mark mk = qkv_arena_get_mark(a);
    float *probs = qkv_arena_alloc(a, (size_t)V * sizeof(float));         // (V)
    scored_id *sid = qkv_arena_alloc(a, (size_t)V * sizeof(scored_id)); // (V)
    if (!probs || !sid) {
        qkv_arena_release(a, mk);
        return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for %lld scores", fn, (long long)V);
    }
    sampling_probs(logits, V, o, probs, sid);
    *token = draw(probs, V, qkv_rng_uniform(rng));
    qkv_arena_release(a, mk);
    return QKV_OK;
}
