/* generate.c: a decoder-only language model and an encoder-decoder model
 * around the transformer stacks, each with a full-sequence forward
 * (training) and a cached one (kvcache.c), and autoregressive decoding:
 * greedy, sampling (temperature, top-k, top-p) and beam search.
 *
 * The decoding loops allocate their state once (malloc) before the first
 * token; per token they reset the ctx and take everything else from its
 * arena. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "models/transformer_internal.h"

/* ---- shared checks -------------------------------------------------------- */

/* ids: I64 (N,T) with T >= 1. */
static qkv_status check_ids(const char *fn, const char *name, const qkv_tensor *ids)
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

/* mask: NULL or BOOL shaped like ids. */
static qkv_status check_pad(const char *fn, const char *name, const qkv_tensor *mask,
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

static qkv_status check_posenc(const char *fn, qkv_posenc_kind k, int64_t d_model)
{
    if (k != QKV_POSENC_NONE && k != QKV_POSENC_SINUSOIDAL && k != QKV_POSENC_LEARNED)
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

/* The embedding of ids at positions pos (N,T): tok(ids) + table(pos). */
typedef struct {
    const qkv_nn_token_embedding *tok;
    const qkv_nn_learned_pos *learned;
    qkv_posenc_kind kind;
    int64_t max_len;
} embed_spec;

/* pe (N,T,E): the positional rows of pos, a constant tensor (sinusoidal)
 * or rows of the learned table (recorded). */
static qkv_status position_rows(const char *fn, qkv_ctx *c, const embed_spec *es, int64_t N,
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

static qkv_status embed(const char *fn, qkv_ctx *c, const embed_spec *es, qkv_tensor *ids,
                        const qkv_tensor *pad, const int64_t *start, qkv_tensor **x)
{
    int64_t N = ids->shape[0], T = ids->shape[1], E = es->tok->emb.embedding_dim;
    qkv_tensor *e, *pe; // (N,T,E)
    QKV_TRY(qkv_module_forward(c, (qkv_module *)&es->tok->base, ids, &e));
    if (es->kind == QKV_POSENC_NONE) {
        *x = e;
        return QKV_OK;
    }
    int64_t *pos = qkv_ctx_alloc(c, (size_t)(N * T) * sizeof *pos); // (N,T)
    if (!pos) return QKV_ERR_NOMEM;
    count_positions(N, T, pad, start, pos);
    QKV_TRY(position_rows(fn, c, es, N, T, E, pos, &pe));
    return qkv_add(c, e, pe, x);
}

/* start[n] = positions of row n already in the cache that are not padding. */
static int64_t *cache_starts(qkv_ctx *c, const qkv_kv_cache *kc)
{
    int64_t *s = qkv_ctx_alloc(c, (size_t)kc->batch * sizeof *s);
    for (int64_t n = 0; s && n < kc->batch; n++) s[n] = kc->len - kc->npad[n];
    return s;
}

/* ---- the language model -------------------------------------------------------- */

qkv_lm_opts qkv_lm_opts_default(int64_t vocab_size, int64_t d_model, int64_t nhead,
                                int64_t num_layers, int64_t max_len)
{
    qkv_lm_opts o = {0};
    o.vocab_size = vocab_size;
    o.max_len = max_len;
    o.num_layers = num_layers;
    o.layer = qkv_transformer_layer_opts_default(d_model, nhead);
    o.layer.batch_first = 1;
    o.final_norm = 1;
    o.posenc = QKV_POSENC_LEARNED;
    o.padding_idx = -1;
    return o;
}

static qkv_status lm_check_opts(const char *fn, const qkv_lm_opts *o)
{
    if (o->vocab_size < 1 || o->max_len < 1)
        return qkv_fail(QKV_ERR_ARG, "%s: vocab_size %lld and max_len %lld must be >= 1", fn,
                        (long long)o->vocab_size, (long long)o->max_len);
    if (o->padding_idx < -1 || o->padding_idx >= o->vocab_size)
        return qkv_fail(QKV_ERR_ARG, "%s: padding_idx %lld outside [-1, vocab_size %lld)", fn,
                        (long long)o->padding_idx, (long long)o->vocab_size);
    QKV_TRY(tfm_check_opts(fn, &o->layer));
    return check_posenc(fn, o->posenc, o->layer.d_model);
}

static qkv_status lm_build(qkv_lm *m, qkv_params *p, const char *prefix, qkv_rng *rng)
{
    const char *fn = "lm_init";
    const qkv_lm_opts *o = &m->o;
    int64_t E = o->layer.d_model;
    char name[TFM_NAME_BUF];
    QKV_TRY(tfm_join(fn, name, sizeof name, prefix, "tok_emb."));
    QKV_TRY(qkv_nn_token_embedding_init(&m->tok, o->vocab_size, E, o->padding_idx,
                                        o->scale_embedding, p, name, rng));
    if (o->posenc == QKV_POSENC_LEARNED) {
        QKV_TRY(tfm_join(fn, name, sizeof name, prefix, "pos_emb."));
        QKV_TRY(qkv_nn_learned_pos_init(&m->pos, o->max_len, E, 1, p, name, rng));
    }
    QKV_TRY(tfm_join(fn, name, sizeof name, prefix, "blocks."));
    QKV_TRY(qkv_transformer_decoder_only_init(&m->blocks, &o->layer, o->num_layers, o->final_norm,
                                              p, name, rng));
    if (o->tie_weights) return QKV_OK;
    QKV_TRY(tfm_join(fn, name, sizeof name, prefix, "lm_head."));
    return qkv_nn_linear_init(&m->lm_head, E, o->vocab_size, 0, p, name, rng);
}

qkv_status qkv_lm_init(qkv_lm *m, const qkv_lm_opts *o, qkv_params *p, const char *prefix,
                       qkv_rng *rng)
{
    const char *fn = "lm_init";
    QKV_NEED(m, fn, "module");
    *m = (qkv_lm){0};
    QKV_NEED(o, fn, "opts");
    QKV_NEED(p, fn, "params");
    QKV_NEED(rng, fn, "rng");
    qkv_lm_opts oo = *o;
    oo.layer.batch_first = 1;
    QKV_TRY(lm_check_opts(fn, &oo));
    QKV_TRY(tfm_check_prefix(fn, prefix));
    m->o = oo;
    qkv_status s = lm_build(m, p, prefix, rng);
    if (s != QKV_OK) qkv_lm_free(m);
    return s;
}

void qkv_lm_free(qkv_lm *m)
{
    if (!m) return;
    qkv_transformer_decoder_only_free(&m->blocks);
    *m = (qkv_lm){0};
}

static qkv_status lm_ready(const char *fn, const qkv_lm *m)
{
    QKV_NEED(m, fn, "module");
    if (!m->tok.emb.weight || m->blocks.stack.o.d_model <= 0)
        return qkv_fail(QKV_ERR_STATE, "%s: module is not initialised (call qkv_lm_init)", fn);
    return QKV_OK;
}

static embed_spec lm_embed_spec(const qkv_lm *m)
{
    return (embed_spec){&m->tok, &m->pos, m->o.posenc, m->o.max_len};
}

/* logits (...,V) = h lm_head^T, or h tok_emb^T when tied. */
static qkv_status lm_head(qkv_ctx *c, const qkv_lm *m, qkv_tensor *h, qkv_tensor **logits)
{
    qkv_tensor *w = m->o.tie_weights ? m->tok.emb.weight : m->lm_head.weight;
    return qkv_linear(c, h, w, NULL, logits);
}

qkv_status qkv_lm_forward(qkv_ctx *c, const qkv_lm *m, qkv_tensor *ids,
                          const qkv_tensor *key_padding_mask, qkv_tensor **logits)
{
    const char *fn = "lm_forward";
    QKV_NEED(logits, fn, "logits");
    *logits = NULL;
    QKV_NEED(c, fn, "ctx");
    QKV_TRY(lm_ready(fn, m));
    QKV_TRY(check_ids(fn, "ids", ids));
    QKV_TRY(check_pad(fn, "key_padding_mask", key_padding_mask, ids));
    embed_spec es = lm_embed_spec(m);
    qkv_tensor *x, *h; // (N,T,E)
    QKV_TRY(embed(fn, c, &es, ids, key_padding_mask, NULL, &x));
    QKV_TRY(qkv_transformer_decoder_only_forward(c, &m->blocks, x, key_padding_mask, &h));
    return lm_head(c, m, h, logits);
}

qkv_status qkv_lm_cache_init(qkv_kv_cache *kc, const qkv_lm *m, int64_t batch, int64_t max_len)
{
    QKV_NEED(kc, "lm_cache_init", "cache");
    *kc = (qkv_kv_cache){0};
    QKV_TRY(lm_ready("lm_cache_init", m));
    const qkv_transformer_layer_opts *o = &m->o.layer;
    return qkv_kv_cache_init(kc, m->o.num_layers, batch, o->nhead, o->d_model / o->nhead, max_len);
}

/* The stack's output h (N,T,E) for new tokens ids, through the cache. */
static qkv_status lm_cached_hidden(const char *fn, qkv_ctx *c, const qkv_lm *m, qkv_kv_cache *kc,
                                   qkv_tensor *ids, const qkv_tensor *pad, qkv_tensor **h)
{
    QKV_TRY(check_ids(fn, "ids", ids));
    QKV_TRY(check_pad(fn, "key_padding_mask", pad, ids));
    QKV_NEED(kc, fn, "cache");
    if (!tfm_cache_ready(kc) || ids->shape[0] != kc->batch)
        return qkv_fail(QKV_ERR_SHAPE, "%s: ids have batch %lld, the cache %lld (or it is not "
                        "initialised)", fn, (long long)ids->shape[0], (long long)kc->batch);
    int64_t *start = cache_starts(c, kc);
    if (!start) return QKV_ERR_NOMEM;
    embed_spec es = lm_embed_spec(m);
    qkv_tensor *x; // (N,T,E)
    QKV_TRY(embed(fn, c, &es, ids, pad, start, &x));
    return qkv_transformer_decoder_only_forward_cached(c, &m->blocks, kc, x, pad, h);
}

qkv_status qkv_lm_forward_cached(qkv_ctx *c, const qkv_lm *m, qkv_kv_cache *kc, qkv_tensor *ids,
                                 const qkv_tensor *key_padding_mask, qkv_tensor **logits)
{
    const char *fn = "lm_forward_cached";
    QKV_NEED(logits, fn, "logits");
    *logits = NULL;
    QKV_TRY(lm_ready(fn, m));
    int was;
    QKV_TRY(tfm_infer_begin(fn, c, &was));
    qkv_tensor *h; // (N,T,E)
    qkv_status s = lm_cached_hidden(fn, c, m, kc, ids, key_padding_mask, &h);
    if (s == QKV_OK) s = lm_head(c, m, h, logits);
    qkv_ctx_set_grad(c, was);
    return s;
}

/* ---- the encoder-decoder ----------------------------------------------------------- */

qkv_seq2seq_opts qkv_seq2seq_opts_default(int64_t src_vocab, int64_t tgt_vocab, int64_t d_model,
                                          int64_t nhead, int64_t num_encoder_layers,
                                          int64_t num_decoder_layers, int64_t max_len)
{
    qkv_seq2seq_opts o = {0};
    o.src_vocab = src_vocab;
    o.tgt_vocab = tgt_vocab;
    o.max_len = max_len;
    o.t = qkv_transformer_opts_default();
    o.t.d_model = d_model;
    o.t.nhead = nhead;
    o.t.num_encoder_layers = num_encoder_layers;
    o.t.num_decoder_layers = num_decoder_layers;
    o.t.batch_first = 1;
    o.posenc = QKV_POSENC_SINUSOIDAL;
    o.scale_embedding = 1;
    return o;
}

static qkv_status s2s_build(qkv_seq2seq *m, qkv_params *p, const char *prefix, qkv_rng *rng)
{
    const char *fn = "seq2seq_init";
    const qkv_seq2seq_opts *o = &m->o;
    int64_t E = o->t.d_model;
    char name[TFM_NAME_BUF];
    QKV_TRY(tfm_join(fn, name, sizeof name, prefix, "transformer."));
    QKV_TRY(qkv_transformer_init(&m->transformer, &o->t, p, name, rng));
    QKV_TRY(tfm_join(fn, name, sizeof name, prefix, "generator."));
    QKV_TRY(qkv_nn_linear_init(&m->generator, E, o->tgt_vocab, 1, p, name, rng));
    QKV_TRY(tfm_join(fn, name, sizeof name, prefix, "src_tok_emb.embedding."));
    QKV_TRY(qkv_nn_token_embedding_init(&m->src_tok, o->src_vocab, E, -1, o->scale_embedding, p,
                                        name, rng));
    QKV_TRY(tfm_join(fn, name, sizeof name, prefix, "tgt_tok_emb.embedding."));
    QKV_TRY(qkv_nn_token_embedding_init(&m->tgt_tok, o->tgt_vocab, E, -1, o->scale_embedding, p,
                                        name, rng));
    if (o->posenc != QKV_POSENC_LEARNED) return QKV_OK;
    QKV_TRY(tfm_join(fn, name, sizeof name, prefix, "src_pos_emb."));
    QKV_TRY(qkv_nn_learned_pos_init(&m->src_pos, o->max_len, E, 1, p, name, rng));
    QKV_TRY(tfm_join(fn, name, sizeof name, prefix, "tgt_pos_emb."));
    return qkv_nn_learned_pos_init(&m->tgt_pos, o->max_len, E, 1, p, name, rng);
}

qkv_status qkv_seq2seq_init(qkv_seq2seq *m, const qkv_seq2seq_opts *o, qkv_params *p,
                            const char *prefix, qkv_rng *rng)
{
    const char *fn = "seq2seq_init";
    QKV_NEED(m, fn, "module");
    *m = (qkv_seq2seq){0};
    QKV_NEED(o, fn, "opts");
    QKV_NEED(p, fn, "params");
    QKV_NEED(rng, fn, "rng");
    if (o->src_vocab < 1 || o->tgt_vocab < 1 || o->max_len < 1)
        return qkv_fail(QKV_ERR_ARG, "%s: src_vocab %lld, tgt_vocab %lld and max_len %lld must be "
                        ">= 1", fn, (long long)o->src_vocab, (long long)o->tgt_vocab,
                        (long long)o->max_len);
    QKV_TRY(check_posenc(fn, o->posenc, o->t.d_model));
    QKV_TRY(tfm_check_prefix(fn, prefix));
    m->o = *o;
    m->o.t.batch_first = 1;
    qkv_status s = s2s_build(m, p, prefix, rng);
    if (s != QKV_OK) qkv_seq2seq_free(m);
    return s;
}

void qkv_seq2seq_free(qkv_seq2seq *m)
{
    if (!m) return;
    qkv_transformer_free(&m->transformer);
    *m = (qkv_seq2seq){0};
}

static qkv_status s2s_ready(const char *fn, const qkv_seq2seq *m)
{
    QKV_NEED(m, fn, "module");
    if (!m->generator.weight || m->transformer.decoder.o.d_model <= 0)
        return qkv_fail(QKV_ERR_STATE, "%s: module is not initialised (call qkv_seq2seq_init)", fn);
    return QKV_OK;
}

static embed_spec s2s_spec(const qkv_seq2seq *m, int tgt)
{
    return (embed_spec){tgt ? &m->tgt_tok : &m->src_tok, tgt ? &m->tgt_pos : &m->src_pos,
                        m->o.posenc, m->o.max_len};
}

static qkv_status s2s_encode(const char *fn, qkv_ctx *c, const qkv_seq2seq *m, qkv_tensor *src,
                             const qkv_tensor *src_pad, qkv_tensor **memory)
{
    QKV_TRY(check_ids(fn, "src", src));
    QKV_TRY(check_pad(fn, "src_padding_mask", src_pad, src));
    embed_spec es = s2s_spec(m, 0);
    qkv_tensor *x; // (N,S,E)
    QKV_TRY(embed(fn, c, &es, src, src_pad, NULL, &x));
    qkv_transformer_masks mk = qkv_transformer_masks_default();
    mk.src_key_padding_mask = src_pad;
    return qkv_transformer_encoder_forward(c, &m->transformer.encoder, x, &mk, memory);
}

qkv_status qkv_seq2seq_encode(qkv_ctx *c, const qkv_seq2seq *m, qkv_tensor *src,
                              const qkv_tensor *src_padding_mask, qkv_tensor **memory)
{
    const char *fn = "seq2seq_encode";
    QKV_NEED(memory, fn, "memory");
    *memory = NULL;
    QKV_NEED(c, fn, "ctx");
    QKV_TRY(s2s_ready(fn, m));
    return s2s_encode(fn, c, m, src, src_padding_mask, memory);
}

qkv_status qkv_seq2seq_forward(qkv_ctx *c, const qkv_seq2seq *m, qkv_tensor *src,
                               qkv_tensor *tgt, const qkv_tensor *src_padding_mask,
                               const qkv_tensor *tgt_padding_mask, qkv_tensor **logits)
{
    const char *fn = "seq2seq_forward";
    QKV_NEED(logits, fn, "logits");
    *logits = NULL;
    QKV_NEED(c, fn, "ctx");
    QKV_TRY(s2s_ready(fn, m));
    QKV_TRY(check_ids(fn, "src", src));
    QKV_TRY(check_ids(fn, "tgt", tgt));
    QKV_TRY(check_pad(fn, "src_padding_mask", src_padding_mask, src));
    QKV_TRY(check_pad(fn, "tgt_padding_mask", tgt_padding_mask, tgt));
    embed_spec ss = s2s_spec(m, 0), ts = s2s_spec(m, 1);
    qkv_tensor *xs, *xt, *h; // (N,S,E), (N,T,E), (N,T,E)
    QKV_TRY(embed(fn, c, &ss, src, src_padding_mask, NULL, &xs));
    QKV_TRY(embed(fn, c, &ts, tgt, tgt_padding_mask, NULL, &xt));
    qkv_transformer_masks mk = qkv_transformer_masks_default();
    mk.src_key_padding_mask = src_padding_mask;
    mk.memory_key_padding_mask = src_padding_mask;
    mk.tgt_key_padding_mask = tgt_padding_mask;
    mk.tgt_causal = QKV_CAUSAL_TOP_LEFT;
    QKV_TRY(qkv_transformer_forward(c, &m->transformer, xs, xt, &mk, &h));
    return qkv_linear(c, h, m->generator.weight, m->generator.bias, logits);
}

qkv_status qkv_seq2seq_cache_init(qkv_kv_cache *kc, const qkv_seq2seq *m, int64_t batch,
                                  int64_t max_len)
{
    QKV_NEED(kc, "seq2seq_cache_init", "cache");
    *kc = (qkv_kv_cache){0};
    QKV_TRY(s2s_ready("seq2seq_cache_init", m));
    const qkv_transformer_opts *o = &m->o.t;
    return qkv_kv_cache_init(kc, o->num_decoder_layers, batch, o->nhead, o->d_model / o->nhead,
                             max_len);
}

/* Rows of a (N,...) tensor's first dim repeated B times each: (N*B,...). */
static qkv_status repeat_rows(qkv_ctx *c, const qkv_tensor *x, int64_t B, qkv_tensor **y)
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

/* Encodes src (N,S) and sets the cache's memory, each row repeated B times
 * (beam search; B = 1 otherwise). */
static qkv_status s2s_begin(const char *fn, qkv_ctx *c, const qkv_seq2seq *m, qkv_kv_cache *kc,
                            qkv_tensor *src, const qkv_tensor *src_pad, int64_t B)
{
    qkv_tensor *memory; // (N,S,E)
    QKV_TRY(s2s_encode(fn, c, m, src, src_pad, &memory));
    qkv_tensor *pad = (qkv_tensor *)src_pad;
    if (B > 1) {
        QKV_TRY(repeat_rows(c, memory, B, &memory));
        if (pad) QKV_TRY(repeat_rows(c, src_pad, B, &pad));
    }
    return qkv_transformer_decoder_set_memory(c, &m->transformer.decoder, kc, memory, pad);
}

qkv_status qkv_seq2seq_start(qkv_ctx *c, const qkv_seq2seq *m, qkv_kv_cache *kc,
                             qkv_tensor *src, const qkv_tensor *src_padding_mask)
{
    const char *fn = "seq2seq_start";
    QKV_TRY(s2s_ready(fn, m));
    int was;
    QKV_TRY(tfm_infer_begin(fn, c, &was));
    qkv_status s = s2s_begin(fn, c, m, kc, src, src_padding_mask, 1);
    qkv_ctx_set_grad(c, was);
    return s;
}

static qkv_status s2s_cached_hidden(const char *fn, qkv_ctx *c, const qkv_seq2seq *m,
                                    qkv_kv_cache *kc, qkv_tensor *tgt, const qkv_tensor *pad,
                                    qkv_tensor **h)
{
    QKV_TRY(check_ids(fn, "tgt", tgt));
    QKV_TRY(check_pad(fn, "tgt_padding_mask", pad, tgt));
    QKV_NEED(kc, fn, "cache");
    if (!tfm_cache_ready(kc) || tgt->shape[0] != kc->batch)
        return qkv_fail(QKV_ERR_SHAPE, "%s: tgt has batch %lld, the cache %lld (or it is not "
                        "initialised)", fn, (long long)tgt->shape[0], (long long)kc->batch);
    int64_t *start = cache_starts(c, kc);
    if (!start) return QKV_ERR_NOMEM;
    embed_spec es = s2s_spec(m, 1);
    qkv_tensor *x; // (N,T,E)
    QKV_TRY(embed(fn, c, &es, tgt, pad, start, &x));
    return qkv_transformer_decoder_forward_cached(c, &m->transformer.decoder, kc, x, pad, h);
}

qkv_status qkv_seq2seq_forward_cached(qkv_ctx *c, const qkv_seq2seq *m, qkv_kv_cache *kc,
                                      qkv_tensor *tgt, const qkv_tensor *tgt_padding_mask,
                                      qkv_tensor **logits)
{
    const char *fn = "seq2seq_forward_cached";
    QKV_NEED(logits, fn, "logits");
    *logits = NULL;
    QKV_TRY(s2s_ready(fn, m));
    int was;
    QKV_TRY(tfm_infer_begin(fn, c, &was));
    qkv_tensor *h; // (N,T,E)
    qkv_status s = s2s_cached_hidden(fn, c, m, kc, tgt, tgt_padding_mask, &h);
    if (s == QKV_OK) s = qkv_linear(c, h, m->generator.weight, m->generator.bias, logits);
    qkv_ctx_set_grad(c, was);
    return s;
}

/* ---- one decoding step, either model ---------------------------------------------- */

typedef struct {
    const qkv_lm *lm;       /* one of lm, s2s */
    const qkv_seq2seq *s2s;
    int64_t V;
} gen_model;

/* Feeds ids (R,T) through the cached forward; the last position's logits
 * into out (R,V). Only that position goes through the output layer. */
static qkv_status model_step(const char *fn, qkv_ctx *c, const gen_model *g, qkv_kv_cache *kc,
                             qkv_tensor *ids, const qkv_tensor *pad, float *out)
{
    qkv_tensor *h, *last, *logits; // (R,T,E), (R,1,E), (R,1,V)
    if (g->lm) QKV_TRY(lm_cached_hidden(fn, c, g->lm, kc, ids, pad, &h));
    else QKV_TRY(s2s_cached_hidden(fn, c, g->s2s, kc, ids, pad, &h));
    int64_t R = h->shape[0], T = h->shape[1], E = h->shape[2];
    QKV_TRY(qkv_tensor_new(qkv_ctx_arena(c), QKV_F32, 3, (int64_t[]){R, 1, E}, &last));
    for (int64_t r = 0; r < R; r++)
        memcpy(last->data + r * E, h->data + (r * T + T - 1) * E, (size_t)E * sizeof(float));
    if (g->lm) QKV_TRY(lm_head(c, g->lm, last, &logits));
    else QKV_TRY(qkv_linear(c, last, g->s2s->generator.weight, g->s2s->generator.bias, &logits));
    memcpy(out, logits->data, (size_t)(R * g->V) * sizeof(float));
    return QKV_OK;
}

/* Feeds one token per row: next (R). */
static qkv_status feed_tokens(const char *fn, qkv_ctx *c, const gen_model *g, qkv_kv_cache *kc,
                              int64_t *next, float *out)
{
    qkv_ctx_reset(c);
    qkv_tensor *ids; // (R,1)
    QKV_TRY(qkv_tensor_wrap_i64(qkv_ctx_arena(c), next, 2, (int64_t[]){kc->batch, 1}, &ids));
    return model_step(fn, c, g, kc, ids, NULL, out);
}

/* ---- sampling ------------------------------------------------------------------------ */

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

static qkv_status check_sampling(const char *fn, const qkv_generate_opts *o)
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
    return check_sampling(fn, o);
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
    if (!sid) return QKV_ERR_NOMEM;
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
    if (!probs || !sid) return QKV_ERR_NOMEM;
    sampling_probs(logits, V, o, probs, sid);
    *token = draw(probs, V, qkv_rng_uniform(rng));
    qkv_arena_release(a, mk);
    return QKV_OK;
}

/* ---- greedy and sampling ------------------------------------------------------------------ */

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

static qkv_status decode_simple(const char *fn, qkv_ctx *c, const gen_model *g,
                                qkv_kv_cache *kc, const qkv_generate_opts *o, float *logits,
                                int64_t *tokens, int64_t *lengths, float *scores)
{
    int64_t N = kc->batch, V = g->V, M = o->max_new_tokens;
    simple_state s;
    QKV_TRY(simple_alloc(&s, N, o->seed));
    qkv_status st = QKV_OK;
    for (int64_t t = 0; t < M && st == QKV_OK; t++) {
        int all_done;
        st = simple_choose(c, o, &s, N, V, logits, t, tokens, lengths, &all_done);
        if (st != QKV_OK || all_done || t == M - 1) break;
        st = feed_tokens(fn, c, g, kc, s.next, logits);
    }
    for (int64_t n = 0; st == QKV_OK && scores && n < N; n++) scores[n] = (float)s.sum[n];
    simple_free(&s);
    return st;
}

/* ---- beam search ---------------------------------------------------------------------------- */

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

static qkv_status decode_beam(const char *fn, qkv_ctx *c, const gen_model *g, qkv_kv_cache *kc,
                              const qkv_generate_opts *o, float *logits, int64_t *tokens,
                              int64_t *lengths, float *scores)
{
    int64_t B = o->num_beams, N = kc->batch / B, M = o->max_new_tokens;
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
        if (!is_identity(s.parent, s.R)) st = tfm_cache_reorder(c, kc, s.parent, 0);
        if (st == QKV_OK) st = feed_tokens(fn, c, g, kc, s.next, logits);
    }
    if (st == QKV_OK) beam_output(&s, o, tokens, lengths, scores);
    beam_free(&s);
    return st;
}

/* ---- the generate calls ------------------------------------------------------------------------ */

static qkv_status check_generate_opts(const char *fn, const qkv_generate_opts *o, int64_t V)
{
    if (o->kind != QKV_DECODE_GREEDY && o->kind != QKV_DECODE_SAMPLE && o->kind != QKV_DECODE_BEAM)
        return qkv_fail(QKV_ERR_ARG, "%s: kind %d is not a qkv_decode_kind value", fn, (int)o->kind);
    if (o->max_new_tokens < 1)
        return qkv_fail(QKV_ERR_ARG, "%s: max_new_tokens %lld must be >= 1", fn,
                        (long long)o->max_new_tokens);
    if (o->end_id < -1 || o->end_id >= V)
        return qkv_fail(QKV_ERR_ARG, "%s: end_id %lld outside [-1, vocabulary %lld)", fn,
                        (long long)o->end_id, (long long)V);
    if (o->kind == QKV_DECODE_SAMPLE) QKV_TRY(check_sampling(fn, o));
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

/* After the prefill filled logits: decodes, then pads the outputs. */
static qkv_status gen_decode(const gen_call *gc, const gen_model *g, qkv_kv_cache *kc,
                             int64_t N, float *logits)
{
    const qkv_generate_opts *o = gc->o;
    int64_t M = o->max_new_tokens;
    for (int64_t i = 0; i < N * M; i++) gc->tokens[i] = o->pad_id;
    for (int64_t n = 0; n < N; n++) gc->lengths[n] = 0;
    if (o->kind == QKV_DECODE_BEAM)
        return decode_beam(gc->fn, gc->c, g, kc, o, logits, gc->tokens, gc->lengths, gc->scores);
    return decode_simple(gc->fn, gc->c, g, kc, o, logits, gc->tokens, gc->lengths, gc->scores);
}

/* The prompt's padding: BOOL (N,P), every row's last position real. Sets
 * *longest to the most real tokens of a row. */
static qkv_status check_left_pad(const char *fn, const qkv_tensor *pad, const qkv_tensor *prompt,
                                 int64_t *longest)
{
    int64_t N = prompt->shape[0], P = prompt->shape[1];
    QKV_TRY(check_pad(fn, "prompt_padding_mask", pad, prompt));
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
static qkv_status lm_prefill(const char *fn, qkv_ctx *c, const gen_model *g, qkv_kv_cache *kc,
                             const qkv_generate_opts *o, qkv_tensor *prompt,
                             const qkv_tensor *pad, float *logits)
{
    int64_t B = o->kind == QKV_DECODE_BEAM ? o->num_beams : 1;
    qkv_tensor *ids = prompt, *mask = (qkv_tensor *)pad;
    if (B > 1) {
        QKV_TRY(repeat_rows(c, prompt, B, &ids));
        if (pad) QKV_TRY(repeat_rows(c, pad, B, &mask));
    }
    qkv_kv_cache_reset(kc);
    return model_step(fn, c, g, kc, ids, mask, logits);
}

static qkv_status lm_generate_run(const gen_call *gc, const qkv_lm *m, qkv_kv_cache *kc,
                                  qkv_tensor *prompt, const qkv_tensor *pad)
{
    gen_model g = {m, NULL, m->o.vocab_size};
    float *logits = malloc((size_t)(kc->batch * g.V) * sizeof(float)); // (R,V)
    if (!logits) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", gc->fn);
    qkv_status s = lm_prefill(gc->fn, gc->c, &g, kc, gc->o, prompt, pad, logits);
    if (s == QKV_OK) s = gen_decode(gc, &g, kc, prompt->shape[0], logits);
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
    QKV_TRY(check_ids(gc.fn, "prompt", prompt));
    QKV_TRY(check_generate_opts(gc.fn, o, m->o.vocab_size));
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
    gen_model g = {NULL, m, m->o.tgt_vocab};
    int64_t B = gc->o->kind == QKV_DECODE_BEAM ? gc->o->num_beams : 1, R = kc->batch;
    float *logits = malloc((size_t)(R * g.V) * sizeof(float)); // (R,V)
    int64_t *first = malloc((size_t)R * sizeof *first);       // (R) bos
    qkv_status s = logits && first ? QKV_OK : qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", gc->fn);
    for (int64_t r = 0; s == QKV_OK && r < R; r++) first[r] = bos;
    if (s == QKV_OK) s = s2s_begin(gc->fn, gc->c, m, kc, src, pad, B);
    if (s == QKV_OK) s = feed_tokens(gc->fn, gc->c, &g, kc, first, logits);
    if (s == QKV_OK) s = gen_decode(gc, &g, kc, src->shape[0], logits);
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
    QKV_TRY(check_ids(gc.fn, "src", src));
    QKV_TRY(check_pad(gc.fn, "src_padding_mask", src_padding_mask, src));
    QKV_TRY(check_generate_opts(gc.fn, o, m->o.tgt_vocab));
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
