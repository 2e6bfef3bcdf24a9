/* seq_embed.c: what the language model (lm.c) and the encoder-decoder
 * (seq2seq.c) share: the checks of token ids and padding masks, and the
 * token embedding plus positional encoding, where a token's position is
 * the number of non-padding tokens before it in its row (a left-padded
 * prompt starts at position 0, as it would alone), in the full forwards
 * and in the cached ones alike. Rotary positions (the LM's) add no table
 * here: the self-attentions rotate q and k by the same rule (mha.c from
 * the padding mask, kvcache.c from the cache's padding). And the last part
 * of both cached forwards (seq_forward_cached). */
#include <string.h>
#include "models/seq_internal.h"

/* ---- checks -------------------------------------------------------------- */

qkv_status seq_init_begin(const char *fn, void *m, size_t size, const void *opts,
                          const qkv_params *p, const qkv_rng *rng)
{
    QKV_NEED(m, fn, "module");
    memset(m, 0, size);
    QKV_NEED(opts, fn, "opts");
    QKV_NEED(p, fn, "params");
    QKV_NEED(rng, fn, "rng");
    return QKV_OK;
}

qkv_status seq_check_ids(const char *fn, const char *name, const qkv_tensor *ids)
{
    char b[64];
    QKV_NEED(ids, fn, name);
    if (ids->dtype != QKV_I64 || !ids->idx)
        return qkv_fail(QKV_ERR_DTYPE, "%s: %s must be I64 token ids", fn, name);
    if (ids->ndim != 2 || ids->shape[1] < 1)
        return qkv_fail(QKV_ERR_SHAPE, "%s: %s %s, expected (N,T) with T >= 1", fn, name,
                        qkv_shape_str(ids, b, sizeof b));
    return QKV_OK;
}

qkv_status seq_check_pad(const char *fn, const char *name, const qkv_tensor *mask,
                         const qkv_tensor *ids)
{
    char b[64];
    if (!mask) return QKV_OK;
    if (mask->dtype != QKV_BOOL || !mask->mask)
        return qkv_fail(QKV_ERR_DTYPE, "%s: %s must be BOOL (true = padding)", fn, name);
    if (mask->ndim != 2 || mask->shape[0] != ids->shape[0] || mask->shape[1] != ids->shape[1])
        return qkv_fail(QKV_ERR_SHAPE, "%s: %s %s, expected (N,T) = (%lld,%lld)", fn, name,
                        qkv_shape_str(mask, b, sizeof b), (long long)ids->shape[0],
                        (long long)ids->shape[1]);
    return QKV_OK;
}

qkv_status seq_check_posenc(const char *fn, qkv_posenc_kind k, int64_t d_model)
{
    if (k != QKV_POSENC_NONE && k != QKV_POSENC_SINUSOIDAL && k != QKV_POSENC_LEARNED &&
        k != QKV_POSENC_ROTARY)
        return qkv_fail(QKV_ERR_ARG, "%s: posenc %d is not a qkv_posenc_kind value", fn, (int)k);
    if (k == QKV_POSENC_SINUSOIDAL && d_model % 2)
        return qkv_fail(QKV_ERR_ARG, "%s: sinusoidal positions need an even d_model, not %lld", fn,
                        (long long)d_model);
    return QKV_OK;
}

/* ---- embeddings with positions ----------------------------------------------- */

/* pos (N,T): the number of non-padding tokens before each position of its
 * row, counted from start[n] (NULL: 0). */
static void count_positions(int64_t N, int64_t T, const qkv_tensor *pad, const int64_t *start,
                            int64_t *pos)
{
    for (int64_t n = 0; n < N; n++) {
        int64_t p = start ? start[n] : 0;
        for (int64_t t = 0; t < T; t++) {
            pos[n * T + t] = p;
            p += !(pad && pad->mask[n * T + t]);
        }
    }
}

/* pe (N,T,E): the positional rows of pos, a constant tensor (sinusoidal)
 * or rows of the learned table (recorded). */
static qkv_status position_rows(const char *fn, qkv_ctx *c, const seq_embed_spec *es, int64_t N,
                                int64_t T, int64_t E, int64_t *pos, qkv_tensor **pe)
{
    for (int64_t i = 0; i < N * T; i++)
        if (pos[i] >= es->max_len)
            return qkv_fail(QKV_ERR_SHAPE, "%s: position %lld (row %lld) is beyond max_len %lld",
                            fn, (long long)pos[i], (long long)(i / T), (long long)es->max_len);
    qkv_arena *a = qkv_ctx_arena(c);
    if (es->kind == QKV_POSENC_LEARNED) {
        qkv_tensor *ids;
        QKV_TRY(qkv_tensor_wrap_i64(a, pos, 2, (int64_t[]){N, T}, &ids));
        return qkv_embedding(c, es->learned->weight, ids, -1, pe);
    }
    QKV_TRY(qkv_tensor_new(a, QKV_F32, 3, (int64_t[]){N, T, E}, pe));
    for (int64_t i = 0; i < N * T; i++)
        QKV_TRY(qkv_sinusoidal_fill(pos[i], 1, E, (*pe)->data + i * E));
    return QKV_OK;
}

/* x (N,T,E) = tok(ids) + pe, positions counted from start (NULL: 0). */
static qkv_status embed_from(const char *fn, qkv_ctx *c, const seq_embed_spec *es,
                             qkv_tensor *ids, const qkv_tensor *pad, const int64_t *start,
                             qkv_tensor **x)
{
    int64_t N = ids->shape[0], T = ids->shape[1], E = es->tok->emb.embedding_dim;
    qkv_tensor *e, *pe; // (N,T,E)
    QKV_TRY(qkv_module_forward(c, (qkv_module *)&es->tok->base, ids, &e));
    if (es->kind == QKV_POSENC_NONE || es->kind == QKV_POSENC_ROTARY) { /* no table */
        *x = e;
        return QKV_OK;
    }
    int64_t *pos = qkv_ctx_alloc(c, (size_t)(N * T) * sizeof *pos); // (N,T)
    if (!pos) return QKV_ERR_NOMEM;
    count_positions(N, T, pad, start, pos);
    QKV_TRY(position_rows(fn, c, es, N, T, E, pos, &pe));
    return qkv_add(c, e, pe, x);
}

qkv_status seq_embed(const char *fn, qkv_ctx *c, const seq_embed_spec *es, qkv_tensor *ids,
                     const qkv_tensor *pad, qkv_tensor **x)
{
    return embed_from(fn, c, es, ids, pad, NULL, x);
}

qkv_status seq_embed_cached(const char *fn, qkv_ctx *c, const seq_embed_spec *es,
                            const qkv_kv_cache *kc, const char *name, qkv_tensor *ids,
                            const char *pad_name, const qkv_tensor *pad, qkv_tensor **x)
{
    QKV_TRY(seq_check_ids(fn, name, ids));
    QKV_TRY(seq_check_pad(fn, pad_name, pad, ids));
    QKV_NEED(kc, fn, "cache");
    if (!tfm_cache_ready(kc) || ids->shape[0] != kc->batch)
        return qkv_fail(QKV_ERR_SHAPE, "%s: %s %s batch %lld, the cache %lld (or it is not "
                        "initialised)", fn, name, strcmp(name, "ids") ? "has" : "have",
                        (long long)ids->shape[0], (long long)kc->batch);
    /* start[n]: positions of row n already in the cache that are not padding. */
    int64_t *start = qkv_ctx_alloc(c, (size_t)kc->batch * sizeof *start); // (N)
    if (!start) return QKV_ERR_NOMEM;
    for (int64_t n = 0; n < kc->batch; n++) start[n] = kc->len - kc->npad[n];
    return embed_from(fn, c, es, ids, pad, start, x);
}

qkv_status seq_repeat_rows(qkv_ctx *c, const qkv_tensor *x, int64_t B, qkv_tensor **y)
{
    int64_t shape[QKV_MAX_DIMS], N = x->shape[0], row = 1;
    for (int i = 0; i < x->ndim; i++) shape[i] = x->shape[i];
    for (int i = 1; i < x->ndim; i++) row *= x->shape[i];
    shape[0] = N * B;
    QKV_TRY(qkv_tensor_new(qkv_ctx_arena(c), x->dtype, x->ndim, shape, y));
    size_t es = x->dtype == QKV_F32 ? sizeof(float) : x->dtype == QKV_I64 ? sizeof(int64_t) : 1;
    const char *src = x->dtype == QKV_F32 ? (const char *)x->data
                    : x->dtype == QKV_I64 ? (const char *)x->idx : (const char *)x->mask;
    char *dst = (*y)->dtype == QKV_F32 ? (char *)(*y)->data
              : (*y)->dtype == QKV_I64 ? (char *)(*y)->idx : (char *)(*y)->mask;
    for (int64_t r = 0; r < N * B; r++)
        memcpy(dst + (size_t)(r * row) * es, src + (size_t)((r / B) * row) * es, (size_t)row * es);
    return QKV_OK;
}

qkv_status seq_forward_cached(const char *fn, qkv_ctx *c, const qkv_lm *lm, const qkv_seq2seq *s2s,
                              qkv_kv_cache *kc, qkv_tensor *ids, const qkv_tensor *pad,
                              qkv_tensor **logits)
{
    QKV_NEED(logits, fn, "logits");
    *logits = NULL;
    QKV_TRY(lm ? lm_ready(fn, lm) : s2s_ready(fn, s2s));
    int was;
    QKV_TRY(tfm_infer_begin(fn, c, &was));
    qkv_tensor *h; // (N,T,E)
    qkv_status s = lm ? lm_hidden_cached(fn, c, lm, kc, ids, pad, &h)
                      : s2s_hidden_cached(fn, c, s2s, kc, ids, pad, &h);
    if (s == QKV_OK) { /* the head with the cache's bf16 weights too, if set */
        const qkv_bf16_weights *w0 = qkv_ctx_set_bf16_weights(c, kc->weights);
        s = lm ? lm_logits(c, lm, h, logits) : s2s_logits(c, s2s, h, logits);
        qkv_ctx_set_bf16_weights(c, w0);
    }
    qkv_ctx_set_grad(c, was);
    return s;
}
