/* lm.c: a decoder-only (GPT-style) language model around the decoder-only
 * stack: token embedding plus positions (seq_embed.c; rotary positions
 * are the stack's self-attentions'), the stack, a final
 * linear layer (or the token embedding's transpose when tied). A
 * full-sequence forward (training; the tape gives the backward) and a
 * cached one (kvcache.c) for generation (src/decode/). */
#include "models/seq_internal.h"

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
    return seq_check_posenc(fn, o->posenc, o->layer.d_model);
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
    QKV_TRY(qkv_transformer_decoder_only_init(&m->blocks, &o->layer, o->num_layers,
                                              o->final_norm ? o->layer.layer_norm_eps : 0.0f, p,
                                              name, rng));
    if (o->tie_weights) return QKV_OK;
    QKV_TRY(tfm_join(fn, name, sizeof name, prefix, "lm_head."));
    return qkv_nn_linear_init(&m->lm_head, E, o->vocab_size, 0, p, name, rng);
}

qkv_status qkv_lm_init(qkv_lm *m, const qkv_lm_opts *o, qkv_params *p, const char *prefix,
                       qkv_rng *rng)
{
    const char *fn = "lm_init";
    QKV_TRY(seq_init_begin(fn, m, sizeof *m, o, p, rng));
    qkv_lm_opts oo = *o;
    oo.layer.batch_first = 1;
    oo.layer.rotary = oo.posenc == QKV_POSENC_ROTARY; /* follows posenc */
    QKV_TRY(lm_check_opts(fn, &oo));
    QKV_TRY(tfm_check_prefix(fn, prefix));
    m->o = oo;
    qkv_status s = lm_build(m, p, prefix, rng);
    if (s != QKV_OK) qkv_lm_free(m);
    return s;
}

qkv_status lm_ready(const char *fn, const qkv_lm *m)
{
    QKV_NEED(m, fn, "module");
    if (!m->tok.emb.weight || m->blocks.stack.o.d_model <= 0)
        return qkv_fail(QKV_ERR_STATE, "%s: module is not initialised (call qkv_lm_init)", fn);
    return QKV_OK;
}

static seq_embed_spec lm_embed_spec(const qkv_lm *m)
{
    return (seq_embed_spec){&m->tok, &m->pos, m->o.posenc, m->o.max_len};
}

/* logits (...,V) = h lm_head^T, or h tok_emb^T when tied. */
qkv_status lm_logits(qkv_ctx *c, const qkv_lm *m, qkv_tensor *h, qkv_tensor **logits)
{
    qkv_tensor *w = m->o.tie_weights ? m->tok.emb.weight : m->lm_head.weight;
    return qkv_linear(c, h, w, NULL, logits);
}

qkv_status qkv_lm_forward(qkv_ctx *c, const qkv_lm *m, qkv_tensor *ids,
                          const qkv_tensor *key_padding_mask, qkv_tensor **logits)
{
    const char *fn = "lm_forward";
    QKV_NEED_OUT_CTX(logits, c, fn, "logits");
    QKV_TRY(lm_ready(fn, m));
    QKV_TRY(seq_check_ids(fn, "ids", ids));
    QKV_TRY(seq_check_pad(fn, "key_padding_mask", key_padding_mask, ids));
    seq_embed_spec es = lm_embed_spec(m);
    qkv_tensor *x, *h; // (N,T,E)
    QKV_TRY(seq_embed(fn, c, &es, ids, key_padding_mask, &x));
    QKV_TRY(qkv_transformer_decoder_only_forward(c, &m->blocks, x, key_padding_mask, &h));
    return lm_logits(c, m, h, logits);
}

qkv_status qkv_lm_cache_init(qkv_kv_cache *kc, const qkv_lm *m, int64_t batch, int64_t max_len)
{
    QKV_NEED(kc, "lm_cache_init", "cache");
    *kc = (qkv_kv_cache){0};
    QKV_TRY(lm_ready("lm_cache_init", m));
    const qkv_transformer_layer_opts *o = &m->o.layer;
    return qkv_kv_cache_init(kc, m->o.num_layers, batch, o->nhead, o->d_model / o->nhead, max_len);
}

qkv_status lm_hidden_cached(const char *fn, qkv_ctx *c, const qkv_lm *m, qkv_kv_cache *kc,
                            qkv_tensor *ids, const qkv_tensor *pad, qkv_tensor **h)
{
    seq_embed_spec es = lm_embed_spec(m);
    qkv_tensor *x; // (N,T,E)
    QKV_TRY(seq_embed_cached(fn, c, &es, kc, "ids", ids, "key_padding_mask", pad, &x));
    return qkv_transformer_decoder_only_forward_cached(c, &m->blocks, kc, x, pad, h);
}

qkv_status qkv_lm_forward_cached(qkv_ctx *c, const qkv_lm *m, qkv_kv_cache *kc, qkv_tensor *ids,
                                 const qkv_tensor *key_padding_mask, qkv_tensor **logits)
{
    return seq_forward_cached("lm_forward_cached", c, m, NULL, kc, ids, key_padding_mask, logits);
}

void qkv_lm_free(qkv_lm *m)
{
    if (!m) return;
    qkv_transformer_decoder_only_free(&m->blocks);
    *m = (qkv_lm){0};
}
