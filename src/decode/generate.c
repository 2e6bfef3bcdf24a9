/* generate.c: the generate calls of the language model and of the
 * encoder-decoder: their checks, the prefill (the prompt, or the
 * encoder's memory and the begin token, through the cache), then greedy
 * decoding or sampling (greedy.c) or beam search (beam.c), which call one
 * decoding step of either model through dec_model.
 *
 * The loops allocate their state once (malloc) before the first token;
 * per token they reset the ctx and take everything else from its arena. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "decode/decode_internal.h"

/* ---- one decoding step, either model ------------------------------------------------ */

static qkv_status lm_hidden(const char *fn, qkv_ctx *c, const void *m, qkv_kv_cache *kc,
                            qkv_tensor *ids, const qkv_tensor *pad, qkv_tensor **h)
{
    return lm_hidden_cached(fn, c, m, kc, ids, pad, h);
}

static qkv_status lm_head(qkv_ctx *c, const void *m, qkv_tensor *h, qkv_tensor **logits)
{
    return lm_logits(c, m, h, logits);
}

static qkv_status s2s_hidden(const char *fn, qkv_ctx *c, const void *m, qkv_kv_cache *kc,
                             qkv_tensor *ids, const qkv_tensor *pad, qkv_tensor **h)
{
    return s2s_hidden_cached(fn, c, m, kc, ids, pad, h);
}

static qkv_status s2s_head(qkv_ctx *c, const void *m, qkv_tensor *h, qkv_tensor **logits)
{
    return s2s_logits(c, m, h, logits);
}

qkv_status dec_model_step(const char *fn, qkv_ctx *c, const dec_model *g, qkv_kv_cache *kc,
                          qkv_tensor *ids, const qkv_tensor *pad, float *out)
{
    qkv_tensor *h, *last, *logits; // (R,T,E), (R,1,E), (R,1,V)
    QKV_TRY(g->hidden(fn, c, g->m, kc, ids, pad, &h));
    int64_t R = h->shape[0], T = h->shape[1], E = h->shape[2];
    QKV_TRY(qkv_tensor_new(qkv_ctx_arena(c), QKV_F32, 3, (int64_t[]){R, 1, E}, &last));
    for (int64_t r = 0; r < R; r++)
        memcpy(last->data + r * E, h->data + (r * T + T - 1) * E, (size_t)E * sizeof(float));
    QKV_TRY(g->logits(c, g->m, last, &logits));
    memcpy(out, logits->data, (size_t)(R * g->V) * sizeof(float));
    return QKV_OK;
}

void dec_suppress(const qkv_generate_opts *o, int64_t R, int64_t V, float *logits)
{
    for (int64_t r = 0; r < R; r++)
        for (int64_t i = 0; i < o->n_suppress; i++) logits[r * V + o->suppress_ids[i]] = -INFINITY;
}

qkv_status dec_feed_tokens(const char *fn, qkv_ctx *c, const dec_model *g, qkv_kv_cache *kc,
                           const qkv_generate_opts *o, int64_t *next, float *out)
{
    qkv_ctx_reset(c);
    int64_t R = kc ? kc->batch : g->rows;
    if (g->feed) {
        QKV_TRY(g->feed(fn, c, g, next, out));
    } else {
        qkv_tensor *ids; // (R,1)
        QKV_TRY(qkv_tensor_wrap_i64(qkv_ctx_arena(c), next, 2, (int64_t[]){R, 1}, &ids));
        QKV_TRY(dec_model_step(fn, c, g, kc, ids, NULL, out));
    }
    dec_suppress(o, R, g->V, out);
    return QKV_OK;
}

/* suppress_ids: each in [0,V), not every id of the vocabulary. */
static qkv_status check_suppress(const char *fn, const qkv_generate_opts *o, int64_t V)
{
    if (o->n_suppress < 0)
        return qkv_fail(QKV_ERR_ARG, "%s: n_suppress %lld must be >= 0", fn, (long long)o->n_suppress);
    if (o->n_suppress == 0) return QKV_OK;
    if (!o->suppress_ids)
        return qkv_fail(QKV_ERR_ARG, "%s: suppress_ids is NULL with n_suppress %lld", fn,
                        (long long)o->n_suppress);
    uint8_t *seen = calloc((size_t)V, 1);
    if (!seen) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    int64_t distinct = 0;
    for (int64_t i = 0; i < o->n_suppress; i++) {
        int64_t id = o->suppress_ids[i];
        if (id < 0 || id >= V) {
            free(seen);
            return qkv_fail(QKV_ERR_ARG, "%s: suppress_ids[%lld] = %lld outside [0, vocabulary %lld)",
                            fn, (long long)i, (long long)id, (long long)V);
        }
        distinct += !seen[id];
        seen[id] = 1;
    }
    free(seen);
    if (distinct == V)
        return qkv_fail(QKV_ERR_ARG, "%s: suppress_ids covers all %lld ids: nothing is left to "
                        "generate", fn, (long long)V);
    return QKV_OK;
}

/* ---- the generate calls ------------------------------------------------------------------- */

qkv_status dec_check_generate_opts(const char *fn, const qkv_generate_opts *o, int64_t V)
{
    if (o->kind != QKV_DECODE_GREEDY && o->kind != QKV_DECODE_SAMPLE && o->kind != QKV_DECODE_BEAM)
        return qkv_fail(QKV_ERR_ARG, "%s: kind %d is not a qkv_decode_kind value", fn, (int)o->kind);
    if (o->max_new_tokens < 1)
        return qkv_fail(QKV_ERR_ARG, "%s: max_new_tokens %lld must be >= 1", fn,
                        (long long)o->max_new_tokens);
    if (o->end_id < -1 || o->end_id >= V)
        return qkv_fail(QKV_ERR_ARG, "%s: end_id %lld outside [-1, vocabulary %lld)", fn,
                        (long long)o->end_id, (long long)V);
    QKV_TRY(check_suppress(fn, o, V));
    if (o->kind == QKV_DECODE_SAMPLE) QKV_TRY(dec_check_sampling(fn, o));
    if (o->kind != QKV_DECODE_BEAM) return QKV_OK;
    if (o->num_beams < 1)
        return qkv_fail(QKV_ERR_ARG, "%s: num_beams %lld must be >= 1", fn, (long long)o->num_beams);
    if (!isfinite(o->length_penalty))
        return qkv_fail(QKV_ERR_ARG, "%s: length_penalty %g is not finite", fn,
                        (double)o->length_penalty);
    if (o->length_penalty_kind != QKV_LENGTH_PENALTY_GNMT &&
        o->length_penalty_kind != QKV_LENGTH_PENALTY_POWER)
        return qkv_fail(QKV_ERR_ARG, "%s: length_penalty_kind %d is not a qkv_length_penalty value",
                        fn, (int)o->length_penalty_kind);
    return QKV_OK;
}

/* The cache: rows for N inputs (times num_beams), need positions. */
static qkv_status check_gen_cache(const char *fn, const qkv_kv_cache *kc,
                                  const qkv_generate_opts *o, int64_t N, int64_t need)
{
    int64_t rows = o->kind == QKV_DECODE_BEAM ? N * o->num_beams : N;
    if (!tfm_cache_ready(kc))
        return qkv_fail(QKV_ERR_STATE, "%s: cache is not initialised", fn);
    if (kc->batch != rows)
        return qkv_fail(QKV_ERR_SHAPE, "%s: cache has batch %lld, needs %lld (%lld inputs%s)", fn,
                        (long long)kc->batch, (long long)rows, (long long)N,
                        o->kind == QKV_DECODE_BEAM ? " times num_beams" : "");
    if (need > kc->max_len)
        return qkv_fail(QKV_ERR_SHAPE, "%s: %lld positions needed (max_new_tokens %lld), beyond the "
                        "cache's max_len %lld", fn, (long long)need, (long long)o->max_new_tokens,
                        (long long)kc->max_len);
    return QKV_OK;
}

typedef struct {
    const char *fn;
    qkv_ctx *c;
    const qkv_generate_opts *o;
    int64_t *tokens, *lengths;
    float *scores;
} gen_call;

static qkv_status check_gen_call(const gen_call *gc)
{
    QKV_NEED(gc->c, gc->fn, "ctx");
    QKV_NEED(gc->o, gc->fn, "opts");
    QKV_NEED(gc->tokens, gc->fn, "tokens");
    QKV_NEED(gc->lengths, gc->fn, "lengths");
    return QKV_OK;
}

qkv_status dec_run(const char *fn, qkv_ctx *c, const dec_model *g, qkv_kv_cache *kc,
                   const qkv_generate_opts *o, int64_t N, float *logits, int64_t *tokens,
                   int64_t *lengths, float *scores)
{
    int64_t M = o->max_new_tokens;
    for (int64_t i = 0; i < N * M; i++) tokens[i] = o->pad_id;
    for (int64_t n = 0; n < N; n++) lengths[n] = 0;
    if (o->kind == QKV_DECODE_BEAM) return dec_beam(fn, c, g, kc, o, logits, tokens, lengths, scores);
    return dec_greedy(fn, c, g, kc, o, logits, tokens, lengths, scores);
}


/* The prompt's padding: BOOL (N,P), every row's last position real. Sets
 * *longest to the most real tokens of a row. */
static qkv_status check_left_pad(const char *fn, const qkv_tensor *pad, const qkv_tensor *prompt,
                                 int64_t *longest)
{
    int64_t N = prompt->shape[0], P = prompt->shape[1];
    QKV_TRY(seq_check_pad(fn, "prompt_padding_mask", pad, prompt));
    *longest = pad ? 0 : P;
    for (int64_t n = 0; pad && n < N; n++) {
        if (pad->mask[n * P + P - 1])
            return qkv_fail(QKV_ERR_ARG, "%s: prompt_padding_mask row %lld ends in padding: prompts "
                            "must be left-padded", fn, (long long)n);
        int64_t real = 0;
        for (int64_t t = 0; t < P; t++) real += !pad->mask[n * P + t];
        *longest = real > *longest ? real : *longest;
    }
    return QKV_OK;
}

/* Prefill: the prompt (repeated num_beams times for beam search) through
 * the cache; the last position's logits into logits (R,V). */
static qkv_status lm_prefill(const char *fn, qkv_ctx *c, const dec_model *g, qkv_kv_cache *kc,
                             const qkv_generate_opts *o, qkv_tensor *prompt,
                             const qkv_tensor *pad, float *logits)
{
    int64_t B = o->kind == QKV_DECODE_BEAM ? o->num_beams : 1;
    qkv_tensor *ids = prompt, *mask = (qkv_tensor *)pad;
    if (B > 1) {
        QKV_TRY(seq_repeat_rows(c, prompt, B, &ids));
        if (pad) QKV_TRY(seq_repeat_rows(c, pad, B, &mask));
    }
    qkv_kv_cache_reset(kc);
    QKV_TRY(dec_model_step(fn, c, g, kc, ids, mask, logits));
    dec_suppress(o, kc->batch, g->V, logits);
    return QKV_OK;
}

static qkv_status lm_generate_run(const gen_call *gc, const qkv_lm *m, qkv_kv_cache *kc,
                                  qkv_tensor *prompt, const qkv_tensor *pad)
{
    dec_model g = {m, lm_hidden, lm_head, m->o.vocab_size, NULL, NULL, NULL, 0};
    int64_t N = prompt->shape[0]; /* now: prompt may live in the arena that the steps reset */
    float *logits = malloc((size_t)(kc->batch * g.V) * sizeof(float)); // (R,V)
    if (!logits) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", gc->fn);
    qkv_status s = lm_prefill(gc->fn, gc->c, &g, kc, gc->o, prompt, pad, logits);
    if (s == QKV_OK)
        s = dec_run(gc->fn, gc->c, &g, kc, gc->o, N, logits, gc->tokens, gc->lengths, gc->scores);
    free(logits);
    return s;
}

qkv_status qkv_lm_generate(qkv_ctx *c, const qkv_lm *m, qkv_kv_cache *kc, qkv_tensor *prompt,
                           const qkv_tensor *prompt_padding_mask, const qkv_generate_opts *o,
                           int64_t *tokens, int64_t *lengths, float *scores)
{
    gen_call gc = {"lm_generate", c, o, tokens, lengths, scores};
    QKV_TRY(check_gen_call(&gc));
    QKV_TRY(lm_ready(gc.fn, m));
    QKV_NEED(kc, gc.fn, "cache");
    QKV_TRY(seq_check_ids(gc.fn, "prompt", prompt));
    QKV_TRY(dec_check_generate_opts(gc.fn, o, m->o.vocab_size));
    int64_t longest, P = prompt->shape[1], M = o->max_new_tokens;
    QKV_TRY(check_left_pad(gc.fn, prompt_padding_mask, prompt, &longest));
    QKV_TRY(check_gen_cache(gc.fn, kc, o, prompt->shape[0], P + M - 1));
    if (longest + M - 1 > m->o.max_len)
        return qkv_fail(QKV_ERR_SHAPE, "%s: a prompt of %lld tokens and max_new_tokens %lld reach "
                        "position %lld, beyond the model's max_len %lld", gc.fn, (long long)longest,
                        (long long)M, (long long)(longest + M - 2), (long long)m->o.max_len);
    int was;
    QKV_TRY(tfm_infer_begin(gc.fn, c, &was));
    qkv_status s = lm_generate_run(&gc, m, kc, prompt, prompt_padding_mask);
    qkv_ctx_set_grad(c, was);
    return s;
}

static qkv_status s2s_generate_run(const gen_call *gc, const qkv_seq2seq *m, qkv_kv_cache *kc,
                                   qkv_tensor *src, const qkv_tensor *pad, int64_t bos)
{
    dec_model g = {m, s2s_hidden, s2s_head, m->o.tgt_vocab, NULL, NULL, NULL, 0};
    /* N now: src may live in the ctx's arena, which the first token's step resets */
    int64_t B = gc->o->kind == QKV_DECODE_BEAM ? gc->o->num_beams : 1, R = kc->batch, N = src->shape[0];
    float *logits = malloc((size_t)(R * g.V) * sizeof(float)); // (R,V)
    int64_t *first = malloc((size_t)R * sizeof *first);       // (R) bos
    qkv_status s = logits && first ? QKV_OK : qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", gc->fn);
    for (int64_t r = 0; s == QKV_OK && r < R; r++) first[r] = bos;
    if (s == QKV_OK) s = s2s_begin(gc->fn, gc->c, m, kc, src, pad, B);
    if (s == QKV_OK) s = dec_feed_tokens(gc->fn, gc->c, &g, kc, gc->o, first, logits);
    if (s == QKV_OK)
        s = dec_run(gc->fn, gc->c, &g, kc, gc->o, N, logits, gc->tokens, gc->lengths, gc->scores);
    free(logits);
    free(first);
    return s;
}

qkv_status qkv_seq2seq_generate(qkv_ctx *c, const qkv_seq2seq *m, qkv_kv_cache *kc,
                                qkv_tensor *src, const qkv_tensor *src_padding_mask,
                                int64_t bos_id, const qkv_generate_opts *o, int64_t *tokens,
                                int64_t *lengths, float *scores)
{
    gen_call gc = {"seq2seq_generate", c, o, tokens, lengths, scores};
    QKV_TRY(check_gen_call(&gc));
    QKV_TRY(s2s_ready(gc.fn, m));
    QKV_NEED(kc, gc.fn, "cache");
    QKV_TRY(seq_check_ids(gc.fn, "src", src));
    QKV_TRY(seq_check_pad(gc.fn, "src_padding_mask", src_padding_mask, src));
    QKV_TRY(dec_check_generate_opts(gc.fn, o, m->o.tgt_vocab));
    if (bos_id < 0 || bos_id >= m->o.tgt_vocab)
        return qkv_fail(QKV_ERR_ARG, "%s: bos_id %lld outside [0, tgt_vocab %lld)", gc.fn,
                        (long long)bos_id, (long long)m->o.tgt_vocab);
    int64_t M = o->max_new_tokens;
    QKV_TRY(check_gen_cache(gc.fn, kc, o, src->shape[0], M));
    if (M > m->o.max_len)
        return qkv_fail(QKV_ERR_SHAPE, "%s: max_new_tokens %lld reach target position %lld, beyond "
                        "the model's max_len %lld", gc.fn, (long long)M, (long long)(M - 1),
                        (long long)m->o.max_len);
    int was;
    QKV_TRY(tfm_infer_begin(gc.fn, c, &was));
    qkv_status s = s2s_generate_run(&gc, m, kc, src, src_padding_mask, bos_id);
    qkv_ctx_set_grad(c, was);
    return s;
}
