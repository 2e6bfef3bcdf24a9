/* seq2seq.c: an encoder-decoder (the PyTorch translation tutorial's
 * Seq2SeqTransformer) around nn.Transformer: source and target token
 * embeddings plus positions (seq_embed.c), the transformer with causal
 * decoder self-attention and the source padding as the memory's, and a
 * generator layer. A full forward (training), the encoder alone, and a
 * cached decoder (kvcache.c) for generation (src/decode/). */
#include "models/seq_internal.h"

qkv_seq2seq_opts qkv_seq2seq_opts_default(int64_t src_vocab, int64_t tgt_vocab, int64_t d_model,
                                          int64_t nhead, int64_t num_encoder_layers,
                                          int64_t num_decoder_layers, int64_t max_len)
{
    qkv_seq2seq_opts o = {0};
    o.src_vocab = src_vocab;
    o.tgt_vocab = tgt_vocab;
    o.max_len = max_len;
    o.t = qkv_transformer_opts_default();
    o.t.layer = qkv_transformer_layer_opts_default(d_model, nhead);
    o.t.layer.batch_first = 1;
    o.t.num_encoder_layers = num_encoder_layers;
    o.t.num_decoder_layers = num_decoder_layers;
    o.posenc = QKV_POSENC_SINUSOIDAL;
    o.scale_embedding = 1;
    return o;
}

static qkv_status s2s_check_opts(const char *fn, const qkv_seq2seq_opts *o)
{
    if (o->src_vocab < 1 || o->tgt_vocab < 1 || o->max_len < 1)
        return qkv_fail(QKV_ERR_ARG, "%s: src_vocab %lld, tgt_vocab %lld and max_len %lld must be "
                        ">= 1", fn, (long long)o->src_vocab, (long long)o->tgt_vocab,
                        (long long)o->max_len);
    if (o->posenc == QKV_POSENC_ROTARY)
        return qkv_fail(QKV_ERR_ARG, "%s: rotary positions are the language model's (qkv_lm) only", fn);
    return seq_check_posenc(fn, o->posenc, o->t.layer.d_model);
}

static qkv_status s2s_build(qkv_seq2seq *m, qkv_params *p, const char *prefix, qkv_rng *rng)
{
    const char *fn = "seq2seq_init";
    const qkv_seq2seq_opts *o = &m->o;
    int64_t E = o->t.layer.d_model;
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
    QKV_TRY(seq_init_begin(fn, m, sizeof *m, o, p, rng));
    QKV_TRY(s2s_check_opts(fn, o));
    QKV_TRY(tfm_check_prefix(fn, prefix));
    m->o = *o;
    m->o.t.layer.batch_first = 1;
    qkv_status s = s2s_build(m, p, prefix, rng);
    if (s != QKV_OK) qkv_seq2seq_free(m);
    return s;
}

qkv_status s2s_ready(const char *fn, const qkv_seq2seq *m)
{
    QKV_NEED(m, fn, "module");
    if (!m->generator.weight || m->transformer.decoder.o.d_model <= 0)
        return qkv_fail(QKV_ERR_STATE, "%s: module is not initialised (call qkv_seq2seq_init)", fn);
    return QKV_OK;
}

/* The source's (tgt 0) or the target's (tgt 1) embedding. */
static seq_embed_spec s2s_spec(const qkv_seq2seq *m, int tgt)
{
    return (seq_embed_spec){tgt ? &m->tgt_tok : &m->src_tok, tgt ? &m->tgt_pos : &m->src_pos,
                            m->o.posenc, m->o.max_len};
}

qkv_status s2s_logits(qkv_ctx *c, const qkv_seq2seq *m, qkv_tensor *h, qkv_tensor **logits)
{
    return qkv_linear(c, h, m->generator.weight, m->generator.bias, logits);
}

static qkv_status s2s_encode(const char *fn, qkv_ctx *c, const qkv_seq2seq *m, qkv_tensor *src,
                             const qkv_tensor *src_pad, qkv_tensor **memory)
{
    QKV_TRY(seq_check_ids(fn, "src", src));
    QKV_TRY(seq_check_pad(fn, "src_padding_mask", src_pad, src));
    seq_embed_spec es = s2s_spec(m, 0);
    qkv_tensor *x; // (N,S,E)
    QKV_TRY(seq_embed(fn, c, &es, src, src_pad, &x));
    qkv_transformer_masks mk = qkv_transformer_masks_default();
    mk.src_key_padding_mask = src_pad;
    return qkv_transformer_encoder_forward(c, &m->transformer.encoder, x, &mk, memory);
}

qkv_status qkv_seq2seq_encode(qkv_ctx *c, const qkv_seq2seq *m, qkv_tensor *src,
                              const qkv_tensor *src_padding_mask, qkv_tensor **memory)
{
    const char *fn = "seq2seq_encode";
    QKV_NEED_OUT_CTX(memory, c, fn, "memory");
    QKV_TRY(s2s_ready(fn, m));
    return s2s_encode(fn, c, m, src, src_padding_mask, memory);
}

qkv_status qkv_seq2seq_forward(qkv_ctx *c, const qkv_seq2seq *m, qkv_tensor *src,
                               qkv_tensor *tgt, const qkv_tensor *src_padding_mask,
                               const qkv_tensor *tgt_padding_mask, qkv_tensor **logits)
{
    const char *fn = "seq2seq_forward";
    QKV_NEED_OUT_CTX(logits, c, fn, "logits");
    QKV_TRY(s2s_ready(fn, m));
    QKV_TRY(seq_check_ids(fn, "src", src));
    QKV_TRY(seq_check_ids(fn, "tgt", tgt));
    QKV_TRY(seq_check_pad(fn, "src_padding_mask", src_padding_mask, src));
    QKV_TRY(seq_check_pad(fn, "tgt_padding_mask", tgt_padding_mask, tgt));
    seq_embed_spec ss = s2s_spec(m, 0), ts = s2s_spec(m, 1);
    qkv_tensor *xs, *xt, *h; // (N,S,E), (N,T,E), (N,T,E)
    QKV_TRY(seq_embed(fn, c, &ss, src, src_padding_mask, &xs));
    QKV_TRY(seq_embed(fn, c, &ts, tgt, tgt_padding_mask, &xt));
    qkv_transformer_masks mk = qkv_transformer_masks_default();
    mk.src_key_padding_mask = src_padding_mask;
    mk.memory_key_padding_mask = src_padding_mask;
    mk.tgt_key_padding_mask = tgt_padding_mask;
    mk.tgt_causal = QKV_CAUSAL_TOP_LEFT;
    QKV_TRY(qkv_transformer_forward(c, &m->transformer, xs, xt, &mk, &h));
    return s2s_logits(c, m, h, logits);
}

qkv_status qkv_seq2seq_cache_init(qkv_kv_cache *kc, const qkv_seq2seq *m, int64_t batch,
                                  int64_t max_len)
{
    QKV_NEED(kc, "seq2seq_cache_init", "cache");
    *kc = (qkv_kv_cache){0};
    QKV_TRY(s2s_ready("seq2seq_cache_init", m));
    const qkv_transformer_opts *o = &m->o.t;
    return qkv_kv_cache_init(kc, o->num_decoder_layers, batch, o->layer.nhead,
                             o->layer.d_model / o->layer.nhead, max_len);
}

qkv_status s2s_begin(const char *fn, qkv_ctx *c, const qkv_seq2seq *m, qkv_kv_cache *kc,
                     qkv_tensor *src, const qkv_tensor *src_pad, int64_t B)
{
    qkv_tensor *memory; // (N,S,E)
    QKV_TRY(s2s_encode(fn, c, m, src, src_pad, &memory));
    qkv_tensor *pad = (qkv_tensor *)src_pad;
    if (B > 1) {
        QKV_TRY(seq_repeat_rows(c, memory, B, &memory));
        if (pad) QKV_TRY(seq_repeat_rows(c, src_pad, B, &pad));
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

qkv_status s2s_hidden_cached(const char *fn, qkv_ctx *c, const qkv_seq2seq *m,
                             qkv_kv_cache *kc, qkv_tensor *tgt, const qkv_tensor *pad,
                             qkv_tensor **h)
{
    seq_embed_spec es = s2s_spec(m, 1);
    qkv_tensor *x; // (N,T,E)
    QKV_TRY(seq_embed_cached(fn, c, &es, kc, "tgt", tgt, "tgt_padding_mask", pad, &x));
    return qkv_transformer_decoder_forward_cached(c, &m->transformer.decoder, kc, x, pad, h);
}

qkv_status qkv_seq2seq_forward_cached(qkv_ctx *c, const qkv_seq2seq *m, qkv_kv_cache *kc,
                                      qkv_tensor *tgt, const qkv_tensor *tgt_padding_mask,
                                      qkv_tensor **logits)
{
    return seq_forward_cached("seq2seq_forward_cached", c, NULL, m, kc, tgt, tgt_padding_mask, logits);
}

void qkv_seq2seq_free(qkv_seq2seq *m)
{
    if (!m) return;
    qkv_transformer_free(&m->transformer);
    *m = (qkv_seq2seq){0};
}
