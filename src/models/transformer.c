/* transformer.c: torch.nn.TransformerEncoderLayer and TransformerDecoderLayer
 * (PyTorch 1.13's forward, including where each dropout sits), their
 * options and argument checks, and generate_square_subsequent_mask. The
 * forwards are written once as ops; the tape gives the backward. The stacks
 * built from these layers are in transformer_stack.c. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "models/transformer_internal.h"

qkv_transformer_layer_opts qkv_transformer_layer_opts_default(int64_t d_model, int64_t nhead)
{
    qkv_transformer_layer_opts o = {0};
    o.d_model = d_model;
    o.nhead = nhead;
    o.dim_feedforward = 2048;
    o.dropout = 0.1f;
    o.activation = QKV_ACTIVATION_RELU;
    o.layer_norm_eps = 1e-5f;
    o.bias = 1;
    return o;
}

qkv_transformer_masks qkv_transformer_masks_default(void)
{
    qkv_transformer_masks m = {0};
    return m;
}

/* ---- checks ------------------------------------------------------------ */

qkv_status tfm_check_opts(const char *fn, const qkv_transformer_layer_opts *o)
{
    if (o->d_model <= 0 || o->nhead <= 0)
        return qkv_fail(QKV_ERR_ARG, "%s: d_model %lld and nhead %lld must be positive", fn,
                        (long long)o->d_model, (long long)o->nhead);
    if (o->d_model % o->nhead)
        return qkv_fail(QKV_ERR_ARG, "%s: d_model %lld is not divisible by nhead %lld", fn,
                        (long long)o->d_model, (long long)o->nhead);
    if (o->dim_feedforward <= 0)
        return qkv_fail(QKV_ERR_ARG, "%s: dim_feedforward %lld must be positive", fn,
                        (long long)o->dim_feedforward);
    if (!(o->dropout >= 0.0f && o->dropout <= 1.0f))
        return qkv_fail(QKV_ERR_ARG, "%s: dropout %g outside [0,1]", fn, (double)o->dropout);
    if (!qkv_activation_name(o->activation))
        return qkv_fail(QKV_ERR_ARG, "%s: activation %d is not a qkv_activation value", fn,
                        (int)o->activation);
    if (!(o->layer_norm_eps > 0.0f) || isinf(o->layer_norm_eps))
        return qkv_fail(QKV_ERR_ARG, "%s: layer_norm_eps %g must be positive and finite", fn,
                        (double)o->layer_norm_eps);
    if (o->rotary && (o->d_model / o->nhead) % 2)
        return qkv_fail(QKV_ERR_ARG, "%s: rotary positions need an even head dim, not d_model "
                        "%lld / nhead %lld", fn, (long long)o->d_model, (long long)o->nhead);
    if (o->rotary && !(o->rotary_base >= 0.0f && isfinite(o->rotary_base)))
        return qkv_fail(QKV_ERR_ARG, "%s: rotary_base %g must be positive and finite (0: 10000)",
                        fn, (double)o->rotary_base);
    return QKV_OK;
}

qkv_status tfm_check_prefix(const char *fn, const char *prefix)
{
    size_t len = prefix ? strlen(prefix) : 0;
    if (len > TFM_MAX_PREFIX)
        return qkv_fail(QKV_ERR_ARG, "%s: prefix of %zu characters is too long (at most %d)", fn,
                        len, TFM_MAX_PREFIX);
    return QKV_OK;
}

qkv_status tfm_check_init(const char *fn, const qkv_transformer_layer_opts *o, const qkv_params *p,
                          const char *prefix, const qkv_rng *rng)
{
    QKV_NEED(o, fn, "opts");
    QKV_NEED(p, fn, "params");
    QKV_NEED(rng, fn, "rng");
    QKV_TRY(tfm_check_opts(fn, o));
    return tfm_check_prefix(fn, prefix);
}

qkv_status tfm_join(const char *fn, char *buf, size_t n, const char *prefix, const char *name)
{
    int len = snprintf(buf, n, "%s%s", prefix ? prefix : "", name);
    if (len < 0 || (size_t)len >= n)
        return qkv_fail(QKV_ERR_ARG, "%s: prefix '%s' is too long (at most %zu characters with "
                        "the names under it)", fn, prefix, n - 1);
    return QKV_OK;
}

qkv_status tfm_check_seq(const char *fn, const char *name, const qkv_tensor *x,
                         const qkv_transformer_layer_opts *o, tfm_seq *d)
{
    char b[64];
    if (x->dtype != QKV_F32 || !x->data)
        return qkv_fail(QKV_ERR_DTYPE, "%s: %s is not F32", fn, name);
    if (x->ndim != 2 && x->ndim != 3)
        return qkv_fail(QKV_ERR_SHAPE, "%s: %s %s has %d dims, expected 3 (%s) or 2 (unbatched)",
                        fn, name, qkv_shape_str(x, b, sizeof b), x->ndim,
                        o->batch_first ? "N,L,E with batch_first" : "L,N,E");
    if (x->shape[x->ndim - 1] != o->d_model)
        return qkv_fail(QKV_ERR_SHAPE, "%s: %s %s last dim is not d_model %lld", fn, name,
                        qkv_shape_str(x, b, sizeof b), (long long)o->d_model);
    d->batched = x->ndim == 3;
    int bf = d->batched && o->batch_first;
    d->L = x->shape[bf ? 1 : 0];
    d->N = d->batched ? x->shape[bf ? 0 : 1] : 1;
    return QKV_OK;
}

qkv_status tfm_check_pair(const char *fn, const char *an, const qkv_tensor *a, const tfm_seq *da,
                          const char *bn, const qkv_tensor *b, const tfm_seq *db, int batch_first)
{
    char ba[64], bb[64];
    if (da->batched != db->batched)
        return qkv_fail(QKV_ERR_SHAPE, "%s: %s %s and %s %s must both be batched (3 dims) or both "
                        "unbatched (2 dims)", fn, an, qkv_shape_str(a, ba, sizeof ba), bn,
                        qkv_shape_str(b, bb, sizeof bb));
    if (da->N != db->N)
        return qkv_fail(QKV_ERR_SHAPE, "%s: %s %s and %s %s have different batch sizes %lld and "
                        "%lld (batch_first %d)", fn, an, qkv_shape_str(a, ba, sizeof ba), bn,
                        qkv_shape_str(b, bb, sizeof bb), (long long)da->N, (long long)db->N,
                        batch_first);
    return QKV_OK;
}

/* One attention's masks: queries q over keys k; lsym and ssym name their
 * lengths in messages ("T", "S"). */
static qkv_status check_attn_masks(const char *fn, const qkv_transformer_layer_opts *o,
                                   const char *mname, const qkv_tensor *am, const char *kname,
                                   const qkv_tensor *kpm, const char *cname, qkv_causal causal,
                                   const tfm_seq *q, const tfm_seq *k, const char *lsym,
                                   const char *ssym)
{
    char b[64];
    int64_t L = q->L, S = k->L, NH = q->N * o->nhead;
    if (am) {
        if (am->dtype != QKV_BOOL && am->dtype != QKV_F32)
            return qkv_fail(QKV_ERR_DTYPE, "%s: %s must be BOOL or F32", fn, mname);
        int ok = (am->ndim == 2 && am->shape[0] == L && am->shape[1] == S) ||
                 (am->ndim == 3 && am->shape[0] == NH && am->shape[1] == L && am->shape[2] == S);
        if (!ok)
            return qkv_fail(QKV_ERR_SHAPE, "%s: %s %s, expected (%s,%s) = (%lld,%lld) or "
                            "(N*nhead,%s,%s) = (%lld,%lld,%lld)", fn, mname,
                            qkv_shape_str(am, b, sizeof b), lsym, ssym, (long long)L, (long long)S,
                            lsym, ssym, (long long)NH, (long long)L, (long long)S);
    }
    if (kpm) {
        if (kpm->dtype != QKV_BOOL && kpm->dtype != QKV_F32)
            return qkv_fail(QKV_ERR_DTYPE, "%s: %s must be BOOL or F32", fn, kname);
        int ok = q->batched ? kpm->ndim == 2 && kpm->shape[0] == q->N && kpm->shape[1] == S
                            : kpm->ndim == 1 && kpm->shape[0] == S;
        if (!ok && q->batched)
            return qkv_fail(QKV_ERR_SHAPE, "%s: %s %s, expected (N,%s) = (%lld,%lld)", fn, kname,
                            qkv_shape_str(kpm, b, sizeof b), ssym, (long long)q->N, (long long)S);
        if (!ok)
            return qkv_fail(QKV_ERR_SHAPE, "%s: %s %s, expected (%s) = (%lld) for unbatched input",
                            fn, kname, qkv_shape_str(kpm, b, sizeof b), ssym, (long long)S);
    }
    if (causal != QKV_CAUSAL_NONE && causal != QKV_CAUSAL_TOP_LEFT &&
        causal != QKV_CAUSAL_BOTTOM_RIGHT)
        return qkv_fail(QKV_ERR_ARG, "%s: %s is %d, not a qkv_causal value", fn, cname, (int)causal);
    return QKV_OK;
}

qkv_status tfm_check_src_masks(const char *fn, const qkv_transformer_layer_opts *o,
                               const qkv_transformer_masks *mk, const tfm_seq *s, const char *pre,
                               const char *sym)
{
    char mn[32], kn[48], cn[32];
    snprintf(mn, sizeof mn, "%smask", pre);
    snprintf(kn, sizeof kn, "%skey_padding_mask", pre);
    snprintf(cn, sizeof cn, "%scausal", pre);
    return check_attn_masks(fn, o, mn, mk->src_mask, kn, mk->src_key_padding_mask, cn,
                            mk->src_causal, s, s, sym, sym);
}

qkv_status tfm_check_tgt_masks(const char *fn, const qkv_transformer_layer_opts *o,
                               const qkv_transformer_masks *mk, const tfm_seq *t,
                               const tfm_seq *s)
{
    QKV_TRY(check_attn_masks(fn, o, "tgt_mask", mk->tgt_mask, "tgt_key_padding_mask",
                             mk->tgt_key_padding_mask, "tgt_causal", mk->tgt_causal, t, t, "T", "T"));
    return check_attn_masks(fn, o, "memory_mask", mk->memory_mask, "memory_key_padding_mask",
                            mk->memory_key_padding_mask, "memory_causal", mk->memory_causal, t, s,
                            "T", "S");
}

/* ---- submodules -------------------------------------------------------- */

qkv_status tfm_norm_init(qkv_nn_layernorm *n, const qkv_transformer_layer_opts *o, qkv_params *p,
                         const char *prefix, const char *name)
{
    char full[TFM_NAME_BUF];
    QKV_TRY(tfm_join("transformer_init", full, sizeof full, prefix, name));
    if (o->bias) return qkv_nn_layernorm_init(n, o->d_model, o->layer_norm_eps, 1, p, full);
    /* LayerNorm(bias=False) (PyTorch 2.1): the weight only. */
    QKV_TRY(qkv_nn_layernorm_init(n, o->d_model, o->layer_norm_eps, 0, NULL, full));
    QKV_TRY(qkv_params_add(p, full, "weight", 1, &o->d_model, &n->weight));
    return qkv_init_constant(n->weight, 1.0f);
}

qkv_status tfm_norm_run(qkv_ctx *c, const qkv_nn_layernorm *n, qkv_tensor *x, qkv_tensor **y)
{
    return qkv_layer_norm(c, x, n->weight, n->bias, n->eps, y);
}

/* MultiheadAttention(d_model, nhead, dropout, bias, batch_first) as
 * prefix+name; a self-attention takes the layer's rotary positions. */
static qkv_status attn_init(qkv_mha *m, const qkv_transformer_layer_opts *o, qkv_params *p,
                            const char *prefix, const char *name, int self, qkv_rng *rng)
{
    char full[TFM_NAME_BUF];
    QKV_TRY(tfm_join("transformer_init", full, sizeof full, prefix, name));
    qkv_mha_opts mo = qkv_mha_opts_default(o->d_model, o->nhead);
    mo.dropout = o->dropout;
    mo.bias = o->bias;
    mo.batch_first = o->batch_first;
    mo.rotary = self && o->rotary;
    mo.rotary_base = o->rotary_base;
    return qkv_mha_init(m, &mo, p, full, rng);
}

/* linear1 = Linear(d_model, dim_feedforward), linear2 = Linear(dim_feedforward, d_model). */
static qkv_status ff_init(qkv_nn_linear *l1, qkv_nn_linear *l2, const qkv_transformer_layer_opts *o,
                          qkv_params *p, const char *prefix, qkv_rng *rng)
{
    char full[TFM_NAME_BUF];
    QKV_TRY(tfm_join("transformer_init", full, sizeof full, prefix, "linear1."));
    QKV_TRY(qkv_nn_linear_init(l1, o->d_model, o->dim_feedforward, o->bias, p, full, rng));
    QKV_TRY(tfm_join("transformer_init", full, sizeof full, prefix, "linear2."));
    return qkv_nn_linear_init(l2, o->dim_feedforward, o->d_model, o->bias, p, full, rng);
}

/* ---- the blocks of a layer's forward ----------------------------------- */

/* A block's input: norm(x) in a pre-norm layer, x itself in a post-norm one. */
static qkv_status block_in(qkv_ctx *c, const qkv_transformer_layer_opts *o,
                           const qkv_nn_layernorm *n, qkv_tensor *x, qkv_tensor **y)
{
    if (o->norm_first) return tfm_norm_run(c, n, x, y);
    *y = x;
    return QKV_OK;
}

/* A block's output f with the residual: x + f (pre-norm), norm(x + f) (post-norm). */
static qkv_status block_out(qkv_ctx *c, const qkv_transformer_layer_opts *o,
                            const qkv_nn_layernorm *n, qkv_tensor *x, qkv_tensor *f, qkv_tensor **y)
{
    qkv_tensor *s; // like x
    QKV_TRY(qkv_add(c, x, f, &s));
    if (!o->norm_first) return tfm_norm_run(c, n, s, y);
    *y = s;
    return QKV_OK;
}

/* The masked attentions of the layers' forward: MultiheadAttention(x, mem,
 * mem, masks, need_weights=False) with the masks of the attention kind;
 * arg is a tfm_mask_arg. */
qkv_status tfm_attn_masked(qkv_ctx *c, const qkv_mha *m, tfm_attn_kind kind, qkv_tensor *x,
                           void *arg, qkv_tensor **y)
{
    const tfm_mask_arg *ma = arg;
    const qkv_transformer_masks *mk = ma->masks;
    qkv_mha_args a = qkv_mha_args_default();
    a.need_weights = 0;
    qkv_tensor *mem = x;
    if (kind == TFM_ATTN_ENCODER_SELF) {
        a.attn_mask = mk->src_mask;
        a.key_padding_mask = mk->src_key_padding_mask;
        a.causal = mk->src_causal;
    } else if (kind == TFM_ATTN_DECODER_SELF) {
        a.attn_mask = mk->tgt_mask;
        a.key_padding_mask = mk->tgt_key_padding_mask;
        a.causal = mk->tgt_causal;
    } else {
        a.attn_mask = mk->memory_mask;
        a.key_padding_mask = mk->memory_key_padding_mask;
        a.causal = mk->memory_causal;
        mem = ma->memory;
    }
    return qkv_mha_forward(c, m, x, mem, mem, &a, y, NULL);
}

/* An attention sublayer with its residual and norm n (block_in, block_out)
 * around _sa_block / _mha_block: dropout(attn(x, ...)), attn from the caller. */
static qkv_status attn_sublayer(qkv_ctx *c, const qkv_transformer_layer_opts *o,
                                const qkv_nn_layernorm *n, const qkv_mha *m, tfm_attn_kind kind,
                                const tfm_attn *at, qkv_tensor *x, qkv_tensor **y)
{
    qkv_tensor *h; // like x
    QKV_TRY(block_in(c, o, n, x, &h));
    QKV_TRY(at->fn(c, m, kind, h, at->arg, &h));
    QKV_TRY(qkv_dropout(c, h, o->dropout, &h));
    return block_out(c, o, n, x, h, y);
}

/* The feed-forward sublayer with its residual and norm n around _ff_block:
 * dropout(linear2(dropout(act(linear1(x))))). */
static qkv_status ff_sublayer(qkv_ctx *c, const qkv_transformer_layer_opts *o, const qkv_nn_layernorm *n,
                              const qkv_nn_linear *l1, const qkv_nn_linear *l2, qkv_tensor *x,
                              qkv_tensor **y)
{
    qkv_tensor *in, *h; // like x, (...,dim_feedforward)
    QKV_TRY(block_in(c, o, n, x, &in));
    if (o->activation == QKV_ACTIVATION_RELU) {
        QKV_TRY(qkv_linear_relu(c, in, l1->weight, l1->bias, &h));
    } else {
        QKV_TRY(qkv_linear(c, in, l1->weight, l1->bias, &h));
        QKV_TRY(qkv_activation_apply(c, o->activation, h, &h));
    }
    QKV_TRY(qkv_dropout(c, h, o->dropout, &h));
    qkv_tensor *f; // (...,d_model)
    QKV_TRY(qkv_linear(c, h, l2->weight, l2->bias, &f));
    QKV_TRY(qkv_dropout(c, f, o->dropout, &f));
    return block_out(c, o, n, x, f, y);
}

/* ---- TransformerEncoderLayer ------------------------------------------- */

static qkv_status encoder_layer_module_forward(qkv_ctx *c, qkv_module *base, qkv_tensor *x,
                                               qkv_tensor **y)
{
    return qkv_transformer_encoder_layer_forward(c, (qkv_transformer_encoder_layer *)base, x, NULL, y);
}

qkv_status qkv_transformer_encoder_layer_init(qkv_transformer_encoder_layer *m,
                                              const qkv_transformer_layer_opts *o, qkv_params *p,
                                              const char *prefix, qkv_rng *rng)
{
    const char *fn = "transformer_encoder_layer_init";
    QKV_NEED(m, fn, "module");
    *m = (qkv_transformer_encoder_layer){0};
    QKV_TRY(tfm_check_init(fn, o, p, prefix, rng));
    /* PyTorch's registration order: self_attn, linear1, linear2, norm1, norm2. */
    QKV_TRY(attn_init(&m->self_attn, o, p, prefix, "self_attn.", 1, rng));
    QKV_TRY(ff_init(&m->linear1, &m->linear2, o, p, prefix, rng));
    QKV_TRY(tfm_norm_init(&m->norm1, o, p, prefix, "norm1."));
    QKV_TRY(tfm_norm_init(&m->norm2, o, p, prefix, "norm2."));
    m->o = *o; /* set last: a module with d_model 0 is not ready */
    m->base = (qkv_module){"TransformerEncoderLayer", encoder_layer_module_forward};
    return QKV_OK;
}

qkv_status tfm_encoder_layer_run(qkv_ctx *c, const qkv_transformer_encoder_layer *m,
                                 qkv_tensor *x, const qkv_transformer_masks *mk,
                                 qkv_tensor **out)
{
    tfm_mask_arg ma = {mk, NULL};
    tfm_attn at = {tfm_attn_masked, &ma};
    return tfm_encoder_layer_run_attn(c, m, x, &at, out);
}

qkv_status tfm_encoder_layer_run_attn(qkv_ctx *c, const qkv_transformer_encoder_layer *m,
                                      qkv_tensor *x, const tfm_attn *at, qkv_tensor **out)
{
    const qkv_transformer_layer_opts *o = &m->o;
    QKV_TRY(attn_sublayer(c, o, &m->norm1, &m->self_attn, TFM_ATTN_ENCODER_SELF, at, x, &x));
    return ff_sublayer(c, o, &m->norm2, &m->linear1, &m->linear2, x, out);
}

qkv_status qkv_transformer_encoder_layer_forward(qkv_ctx *c,
                                                 const qkv_transformer_encoder_layer *m,
                                                 qkv_tensor *src,
                                                 const qkv_transformer_masks *masks,
                                                 qkv_tensor **out)
{
    const char *fn = "transformer_encoder_layer_forward";
    QKV_NEED_OUT_CTX(out, c, fn, "out");
    QKV_NEED(m, fn, "module");
    QKV_NEED(src, fn, "src");
    if (m->o.d_model <= 0)
        return qkv_fail(QKV_ERR_STATE, "%s: module is not initialised (call "
                        "qkv_transformer_encoder_layer_init)", fn);
    qkv_transformer_masks mk = masks ? *masks : qkv_transformer_masks_default();
    tfm_seq s;
    QKV_TRY(tfm_check_seq(fn, "src", src, &m->o, &s));
    QKV_TRY(tfm_check_src_masks(fn, &m->o, &mk, &s, "src_", "S"));
    return tfm_encoder_layer_run(c, m, src, &mk, out);
}

/* ---- TransformerDecoderLayer ------------------------------------------- */

qkv_status tfm_module_needs_memory(qkv_ctx *c, qkv_module *base, qkv_tensor *x, qkv_tensor **y)
{
    if (y) *y = NULL;
    return qkv_fail(QKV_ERR_STATE, "%s: a decoder's forward needs memory (the encoder's output); "
                    "call qkv_transformer_decoder_layer_forward or qkv_transformer_decoder_forward",
                    base->type);
}

qkv_status qkv_transformer_decoder_layer_init(qkv_transformer_decoder_layer *m,
                                              const qkv_transformer_layer_opts *o, qkv_params *p,
                                              const char *prefix, qkv_rng *rng)
{
    const char *fn = "transformer_decoder_layer_init";
    QKV_NEED(m, fn, "module");
    *m = (qkv_transformer_decoder_layer){0};
    QKV_TRY(tfm_check_init(fn, o, p, prefix, rng));
    /* self_attn, multihead_attn, linear1, linear2, norm1, norm2, norm3. */
    QKV_TRY(attn_init(&m->self_attn, o, p, prefix, "self_attn.", 1, rng));
    QKV_TRY(attn_init(&m->multihead_attn, o, p, prefix, "multihead_attn.", 0, rng));
    QKV_TRY(ff_init(&m->linear1, &m->linear2, o, p, prefix, rng));
    QKV_TRY(tfm_norm_init(&m->norm1, o, p, prefix, "norm1."));
    QKV_TRY(tfm_norm_init(&m->norm2, o, p, prefix, "norm2."));
    QKV_TRY(tfm_norm_init(&m->norm3, o, p, prefix, "norm3."));
    m->o = *o;
    m->base = (qkv_module){"TransformerDecoderLayer", tfm_module_needs_memory};
    return QKV_OK;
}

qkv_status tfm_decoder_layer_run(qkv_ctx *c, const qkv_transformer_decoder_layer *m,
                                 qkv_tensor *x, qkv_tensor *memory,
                                 const qkv_transformer_masks *mk, qkv_tensor **out)
{
    tfm_mask_arg ma = {mk, memory};
    tfm_attn at = {tfm_attn_masked, &ma};
    return tfm_decoder_layer_run_attn(c, m, x, &at, out);
}

qkv_status tfm_decoder_layer_run_attn(qkv_ctx *c, const qkv_transformer_decoder_layer *m,
                                      qkv_tensor *x, const tfm_attn *at, qkv_tensor **out)
{
    const qkv_transformer_layer_opts *o = &m->o;
    QKV_TRY(attn_sublayer(c, o, &m->norm1, &m->self_attn, TFM_ATTN_DECODER_SELF, at, x, &x));
    QKV_TRY(attn_sublayer(c, o, &m->norm2, &m->multihead_attn, TFM_ATTN_CROSS, at, x, &x));
    return ff_sublayer(c, o, &m->norm3, &m->linear1, &m->linear2, x, out);
}

qkv_status tfm_check_decoder_call(const char *fn, const char *init, qkv_ctx *c, const void *m,
                                  const qkv_transformer_layer_opts *o, qkv_tensor *tgt,
                                  qkv_tensor *memory, const qkv_transformer_masks *masks,
                                  qkv_transformer_masks *mk, qkv_tensor **out)
{
    QKV_NEED_OUT_CTX(out, c, fn, "out");
    QKV_NEED(m, fn, "module");
    QKV_NEED(tgt, fn, "tgt");
    QKV_NEED(memory, fn, "memory");
    if (o->d_model <= 0)
        return qkv_fail(QKV_ERR_STATE, "%s: module is not initialised (call qkv_%s)", fn, init);
    *mk = masks ? *masks : qkv_transformer_masks_default();
    tfm_seq t, s;
    QKV_TRY(tfm_check_seq(fn, "tgt", tgt, o, &t));
    QKV_TRY(tfm_check_seq(fn, "memory", memory, o, &s));
    QKV_TRY(tfm_check_pair(fn, "tgt", tgt, &t, "memory", memory, &s, o->batch_first));
    return tfm_check_tgt_masks(fn, o, mk, &t, &s);
}

qkv_status qkv_transformer_decoder_layer_forward(qkv_ctx *c,
                                                 const qkv_transformer_decoder_layer *m,
                                                 qkv_tensor *tgt, qkv_tensor *memory,
                                                 const qkv_transformer_masks *masks,
                                                 qkv_tensor **out)
{
    qkv_transformer_masks mk;
    QKV_TRY(tfm_check_decoder_call("transformer_decoder_layer_forward", "transformer_decoder_layer_init",
                                   c, m, m ? &m->o : NULL, tgt, memory, masks, &mk, out));
    return tfm_decoder_layer_run(c, m, tgt, memory, &mk, out);
}

/* ---- generate_square_subsequent_mask ----------------------------------- */

qkv_status qkv_transformer_square_subsequent_mask(qkv_tensor *mask)
{
    const char *fn = "transformer_square_subsequent_mask";
    char b[64];
    QKV_NEED(mask, fn, "mask");
    if (mask->ndim != 2 || mask->shape[0] != mask->shape[1])
        return qkv_fail(QKV_ERR_SHAPE, "%s: mask %s is not square (sz,sz)", fn,
                        qkv_shape_str(mask, b, sizeof b));
    int is_f32 = mask->dtype == QKV_F32 && mask->data;
    if (!is_f32 && !(mask->dtype == QKV_BOOL && mask->mask))
        return qkv_fail(QKV_ERR_DTYPE, "%s: mask must be F32 or BOOL", fn);
    int64_t sz = mask->shape[0];
    for (int64_t i = 0; i < sz; i++)
        for (int64_t j = 0; j < sz; j++) {
            if (is_f32) mask->data[i * sz + j] = j > i ? -INFINITY : 0.0f;
            else mask->mask[i * sz + j] = j > i;
        }
    return QKV_OK;
}
