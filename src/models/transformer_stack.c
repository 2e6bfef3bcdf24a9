/* transformer_stack.c: torch.nn.TransformerEncoder, TransformerDecoder and
 * Transformer (stacks of the layers in transformer.c, with PyTorch's names,
 * clone semantics and _reset_parameters), and the decoder-only stack. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "models/transformer_internal.h"

/* _get_clones deep-copies one layer: every layer of a stack starts with
 * layer 0's values. The store holds the n layers' parameters one layer after
 * the other from index first, per parameters each. */
static qkv_status copy_clones(qkv_params *p, int first, int per, int64_t n)
{
    for (int64_t i = 1; i < n; i++)
        for (int j = 0; j < per; j++) {
            qkv_tensor *src = qkv_params_at(p, first + j);
            qkv_tensor *dst = qkv_params_at(p, first + (int)i * per + j);
            int64_t numel = qkv_tensor_numel(src);
            if (!dst || qkv_tensor_numel(dst) != numel)
                return qkv_fail(QKV_ERR_STATE, "transformer_init: layer %lld's parameters do not "
                                "match layer 0's", (long long)i);
            memcpy(dst->data, src->data, (size_t)numel * sizeof(float));
        }
    return QKV_OK;
}

/* Checks what every stack _init shares; fn names the caller. */
static qkv_status check_stack_init(const char *fn, const void *m,
                                   const qkv_transformer_layer_opts *o, int64_t num_layers,
                                   float norm_eps, qkv_params *p, const char *prefix, qkv_rng *rng)
{
    QKV_NEED(m, fn, "module");
    QKV_TRY(tfm_check_init(fn, o, p, prefix, rng));
    if (num_layers < 0 || num_layers > 1000000)
        return qkv_fail(QKV_ERR_ARG, "%s: num_layers %lld outside [0,1000000]", fn,
                        (long long)num_layers);
    if (!(norm_eps >= 0.0f && norm_eps < 1.0f))
        return qkv_fail(QKV_ERR_ARG, "%s: norm_eps %g is not 0 (no final norm) or the final "
                        "LayerNorm's eps in (0,1) (it was a 0/1 flag before qkv 0.2)", fn,
                        (double)norm_eps);
    return QKV_OK;
}

/* Layer i's prefix "<prefix>layers.<i>." into buf. */
static qkv_status layer_prefix(const char *fn, char *buf, size_t n, const char *prefix, int64_t i)
{
    char name[48];
    snprintf(name, sizeof name, "layers.%lld.", (long long)i);
    return tfm_join(fn, buf, n, prefix, name);
}

/* ---- TransformerEncoder ------------------------------------------------ */

static qkv_status encoder_module_forward(qkv_ctx *c, qkv_module *base, qkv_tensor *x, qkv_tensor **y)
{
    return qkv_transformer_encoder_forward(c, (qkv_transformer_encoder *)base, x, NULL, y);
}

/* Initialises one layer of a stack: an encoder or a decoder layer. */
typedef qkv_status (*layer_init_fn)(void *layer, const qkv_transformer_layer_opts *o,
                                    qkv_params *p, const char *prefix, qkv_rng *rng);

static qkv_status encoder_layer_init(void *l, const qkv_transformer_layer_opts *o, qkv_params *p,
                                     const char *prefix, qkv_rng *rng)
{
    return qkv_transformer_encoder_layer_init(l, o, p, prefix, rng);
}

static qkv_status decoder_layer_init(void *l, const qkv_transformer_layer_opts *o, qkv_params *p,
                                     const char *prefix, qkv_rng *rng)
{
    return qkv_transformer_decoder_layer_init(l, o, p, prefix, rng);
}

/* Creates num_layers layers of `size` bytes each into *layers (layer 0
 * from rng, the others from a copy of it, then overwritten with layer 0's
 * values, as PyTorch deep-copies one layer) and the optional final norm. */
static qkv_status stack_build(const char *fn, void **layers, size_t size, layer_init_fn init,
                              int64_t num_layers, float norm_eps, int *has_norm, qkv_nn_layernorm *nm,
                              const qkv_transformer_layer_opts *o, qkv_params *p,
                              const char *prefix, qkv_rng *rng)
{
    char *mem = calloc((size_t)(num_layers ? num_layers : 1), size);
    if (!mem) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    *layers = mem;
    int first = qkv_params_count(p), per = 0;
    qkv_rng spare;
    char name[TFM_NAME_BUF];
    for (int64_t i = 0; i < num_layers; i++) {
        QKV_TRY(layer_prefix(fn, name, sizeof name, prefix, i));
        QKV_TRY(init(mem + (size_t)i * size, o, p, name, i ? &spare : rng));
        if (i == 0) {
            per = qkv_params_count(p) - first;
            spare = *rng;
        }
    }
    QKV_TRY(copy_clones(p, first, per, num_layers));
    *has_norm = norm_eps > 0.0f;
    qkv_transformer_layer_opts no = *o; /* the final norm has its own eps */
    no.layer_norm_eps = norm_eps;
    if (*has_norm) QKV_TRY(tfm_norm_init(nm, &no, p, prefix, "norm."));
    return QKV_OK;
}

static qkv_status encoder_build(qkv_transformer_encoder *m, const qkv_transformer_layer_opts *o,
                                int64_t num_layers, float norm_eps, qkv_params *p,
                                const char *prefix, qkv_rng *rng)
{
    m->num_layers = num_layers;
    return stack_build("transformer_encoder_init", (void **)&m->layers, sizeof *m->layers,
                       encoder_layer_init, num_layers, norm_eps, &m->has_norm, &m->norm, o, p,
                       prefix, rng);
}

qkv_status qkv_transformer_encoder_init(qkv_transformer_encoder *m,
                                        const qkv_transformer_layer_opts *o, int64_t num_layers,
                                        float norm_eps, qkv_params *p, const char *prefix,
                                        qkv_rng *rng)
{
    const char *fn = "transformer_encoder_init";
    if (m) *m = (qkv_transformer_encoder){0};
    QKV_TRY(check_stack_init(fn, m, o, num_layers, norm_eps, p, prefix, rng));
    qkv_status s = encoder_build(m, o, num_layers, norm_eps, p, prefix, rng);
    if (s != QKV_OK) {
        qkv_transformer_encoder_free(m);
        return s;
    }
    m->o = *o;
    m->base = (qkv_module){"TransformerEncoder", encoder_module_forward};
    return QKV_OK;
}

void qkv_transformer_encoder_free(qkv_transformer_encoder *m)
{
    if (!m) return;
    free(m->layers);
    *m = (qkv_transformer_encoder){0};
}

/* The stack without checks: the layers in turn, then the norm. */
static qkv_status encoder_run(qkv_ctx *c, const qkv_transformer_encoder *m, qkv_tensor *x,
                              const qkv_transformer_masks *mk, qkv_tensor **out)
{
    for (int64_t i = 0; i < m->num_layers; i++)
        QKV_TRY(tfm_encoder_layer_run(c, &m->layers[i], x, mk, &x));
    if (m->has_norm) return tfm_norm_run(c, &m->norm, x, out);
    *out = x;
    return QKV_OK;
}

/* The checks every encoder forward shares; fn names the caller. */
static qkv_status encoder_check(const char *fn, qkv_ctx *c, const qkv_transformer_encoder *m,
                                const char *name, qkv_tensor *src, const qkv_transformer_masks *mk,
                                qkv_tensor **out)
{
    QKV_NEED_OUT_CTX(out, c, fn, "out");
    QKV_NEED(m, fn, "module");
    QKV_NEED(src, fn, name);
    if (m->o.d_model <= 0)
        return qkv_fail(QKV_ERR_STATE, "%s: module is not initialised (call its _init)", fn);
    tfm_seq s;
    QKV_TRY(tfm_check_seq(fn, name, src, &m->o, &s));
    int is_src = !strcmp(name, "src");
    return tfm_check_src_masks(fn, &m->o, mk, &s, is_src ? "src_" : "", is_src ? "S" : "L");
}

qkv_status qkv_transformer_encoder_forward(qkv_ctx *c, const qkv_transformer_encoder *m,
                                           qkv_tensor *src, const qkv_transformer_masks *masks,
                                           qkv_tensor **out)
{
    qkv_transformer_masks mk = masks ? *masks : qkv_transformer_masks_default();
    QKV_TRY(encoder_check("transformer_encoder_forward", c, m, "src", src, &mk, out));
    return encoder_run(c, m, src, &mk, out);
}

/* ---- TransformerDecoder ------------------------------------------------ */

static qkv_status decoder_build(qkv_transformer_decoder *m, const qkv_transformer_layer_opts *o,
                                int64_t num_layers, float norm_eps, qkv_params *p,
                                const char *prefix, qkv_rng *rng)
{
    m->num_layers = num_layers;
    return stack_build("transformer_decoder_init", (void **)&m->layers, sizeof *m->layers,
                       decoder_layer_init, num_layers, norm_eps, &m->has_norm, &m->norm, o, p,
                       prefix, rng);
}

qkv_status qkv_transformer_decoder_init(qkv_transformer_decoder *m,
                                        const qkv_transformer_layer_opts *o, int64_t num_layers,
                                        float norm_eps, qkv_params *p, const char *prefix,
                                        qkv_rng *rng)
{
    if (m) *m = (qkv_transformer_decoder){0};
    QKV_TRY(check_stack_init("transformer_decoder_init", m, o, num_layers, norm_eps, p, prefix,
                             rng));
    qkv_status s = decoder_build(m, o, num_layers, norm_eps, p, prefix, rng);
    if (s != QKV_OK) {
        qkv_transformer_decoder_free(m);
        return s;
    }
    m->o = *o;
    m->base = (qkv_module){"TransformerDecoder", tfm_module_needs_memory};
    return QKV_OK;
}

void qkv_transformer_decoder_free(qkv_transformer_decoder *m)
{
    if (!m) return;
    free(m->layers);
    *m = (qkv_transformer_decoder){0};
}

static qkv_status decoder_run(qkv_ctx *c, const qkv_transformer_decoder *m, qkv_tensor *x,
                              qkv_tensor *memory, const qkv_transformer_masks *mk, qkv_tensor **out)
{
    for (int64_t i = 0; i < m->num_layers; i++)
        QKV_TRY(tfm_decoder_layer_run(c, &m->layers[i], x, memory, mk, &x));
    if (m->has_norm) return tfm_norm_run(c, &m->norm, x, out);
    *out = x;
    return QKV_OK;
}

qkv_status qkv_transformer_decoder_forward(qkv_ctx *c, const qkv_transformer_decoder *m,
                                           qkv_tensor *tgt, qkv_tensor *memory,
                                           const qkv_transformer_masks *masks, qkv_tensor **out)
{
    qkv_transformer_masks mk;
    QKV_TRY(tfm_check_decoder_call("transformer_decoder_forward", "transformer_decoder_init", c, m,
                                   m ? &m->o : NULL, tgt, memory, masks, &mk, out));
    return decoder_run(c, m, tgt, memory, &mk, out);
}

/* ---- Transformer ------------------------------------------------------- */

qkv_transformer_opts qkv_transformer_opts_default(void)
{
    qkv_transformer_opts o = {0};
    o.layer = qkv_transformer_layer_opts_default(512, 8);
    o.num_encoder_layers = 6;
    o.num_decoder_layers = 6;
    return o;
}

/* The encoder and decoder, then _reset_parameters: xavier_uniform_ on every
 * parameter of more than one dim, in parameters() order. */
static qkv_status transformer_build(qkv_transformer *m, qkv_params *p, const char *prefix,
                                    qkv_rng *rng)
{
    const char *fn = "transformer_init";
    const qkv_transformer_layer_opts *lo = &m->o.layer;
    char name[TFM_NAME_BUF];
    int first = qkv_params_count(p);
    QKV_TRY(tfm_join(fn, name, sizeof name, prefix, "encoder."));
    QKV_TRY(qkv_transformer_encoder_init(&m->encoder, lo, m->o.num_encoder_layers,
                                         lo->layer_norm_eps, p, name, rng));
    QKV_TRY(tfm_join(fn, name, sizeof name, prefix, "decoder."));
    QKV_TRY(qkv_transformer_decoder_init(&m->decoder, lo, m->o.num_decoder_layers,
                                         lo->layer_norm_eps, p, name, rng));
    for (int i = first; i < qkv_params_count(p); i++) {
        qkv_tensor *t = qkv_params_at(p, i);
        if (t->ndim > 1) QKV_TRY(qkv_init_xavier_uniform(rng, t, 1.0f));
    }
    return QKV_OK;
}

qkv_status qkv_transformer_init(qkv_transformer *m, const qkv_transformer_opts *o, qkv_params *p,
                                const char *prefix, qkv_rng *rng)
{
    const char *fn = "transformer_init";
    QKV_NEED(m, fn, "module");
    *m = (qkv_transformer){0};
    QKV_NEED(o, fn, "opts");
    QKV_NEED(p, fn, "params");
    QKV_NEED(rng, fn, "rng");
    QKV_TRY(tfm_check_opts(fn, &o->layer));
    QKV_TRY(tfm_check_prefix(fn, prefix));
    if (o->num_encoder_layers < 0 || o->num_decoder_layers < 0)
        return qkv_fail(QKV_ERR_ARG, "%s: num_encoder_layers %lld and num_decoder_layers %lld "
                        "must not be negative", fn, (long long)o->num_encoder_layers,
                        (long long)o->num_decoder_layers);
    m->o = *o;
    qkv_status s = transformer_build(m, p, prefix, rng);
    if (s != QKV_OK) qkv_transformer_free(m);
    return s;
}

void qkv_transformer_free(qkv_transformer *m)
{
    if (!m) return;
    qkv_transformer_encoder_free(&m->encoder);
    qkv_transformer_decoder_free(&m->decoder);
    *m = (qkv_transformer){0};
}

qkv_status qkv_transformer_forward(qkv_ctx *c, const qkv_transformer *m, qkv_tensor *src,
                                   qkv_tensor *tgt, const qkv_transformer_masks *masks,
                                   qkv_tensor **out)
{
    const char *fn = "transformer_forward";
    QKV_NEED_OUT_CTX(out, c, fn, "out");
    QKV_NEED(m, fn, "module");
    QKV_NEED(src, fn, "src");
    QKV_NEED(tgt, fn, "tgt");
    const qkv_transformer_layer_opts *o = &m->encoder.o;
    if (o->d_model <= 0 || m->decoder.o.d_model <= 0)
        return qkv_fail(QKV_ERR_STATE, "%s: module is not initialised (call qkv_transformer_init)", fn);
    qkv_transformer_masks mk = masks ? *masks : qkv_transformer_masks_default();
    tfm_seq s, t;
    QKV_TRY(tfm_check_seq(fn, "src", src, o, &s));
    QKV_TRY(tfm_check_seq(fn, "tgt", tgt, o, &t));
    QKV_TRY(tfm_check_pair(fn, "src", src, &s, "tgt", tgt, &t, o->batch_first));
    QKV_TRY(tfm_check_src_masks(fn, o, &mk, &s, "src_", "S"));
    QKV_TRY(tfm_check_tgt_masks(fn, o, &mk, &t, &s));
    qkv_tensor *memory; // like src
    QKV_TRY(encoder_run(c, &m->encoder, src, &mk, &memory));
    return decoder_run(c, &m->decoder, tgt, memory, &mk, out);
}

/* ---- decoder-only ------------------------------------------------------ */

static qkv_status decoder_only_module_forward(qkv_ctx *c, qkv_module *base, qkv_tensor *x,
                                              qkv_tensor **y)
{
    return qkv_transformer_decoder_only_forward(c, (qkv_transformer_decoder_only *)base, x, NULL, y);
}

qkv_status qkv_transformer_decoder_only_init(qkv_transformer_decoder_only *m,
                                             const qkv_transformer_layer_opts *o,
                                             int64_t num_layers, float norm_eps, qkv_params *p,
                                             const char *prefix, qkv_rng *rng)
{
    QKV_NEED(m, "transformer_decoder_only_init", "module");
    *m = (qkv_transformer_decoder_only){0};
    QKV_TRY(check_stack_init("transformer_decoder_only_init", m, o, num_layers, norm_eps, p,
                             prefix, rng));
    QKV_TRY(qkv_transformer_encoder_init(&m->stack, o, num_layers, norm_eps, p, prefix, rng));
    m->base = (qkv_module){"TransformerDecoderOnly", decoder_only_module_forward};
    return QKV_OK;
}

void qkv_transformer_decoder_only_free(qkv_transformer_decoder_only *m)
{
    if (!m) return;
    qkv_transformer_encoder_free(&m->stack);
    *m = (qkv_transformer_decoder_only){0};
}

qkv_status qkv_transformer_decoder_only_forward(qkv_ctx *c, const qkv_transformer_decoder_only *m,
                                                qkv_tensor *x, const qkv_tensor *key_padding_mask,
                                                qkv_tensor **out)
{
    const char *fn = "transformer_decoder_only_forward";
    QKV_NEED(out, fn, "out");
    *out = NULL;
    QKV_NEED(m, fn, "module");
    qkv_transformer_masks mk = qkv_transformer_masks_default();
    mk.src_key_padding_mask = key_padding_mask;
    mk.src_causal = QKV_CAUSAL_TOP_LEFT;
    QKV_TRY(encoder_check(fn, c, &m->stack, "x", x, &mk, out));
    return encoder_run(c, &m->stack, x, &mk, out);
}
