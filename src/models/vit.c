/* vit.c: the vision transformer (Dosovitskiy et al., torchvision's
 * VisionTransformer), written as forward code over tape ops:
 *
 *   tokens = patch_embed(images)               (N, gh*gw, D)
 *   tokens = cat(class_token, tokens)          (N, S, D), S = 1 + gh*gw
 *   tokens = dropout(tokens + positions)       learned or 2-D sinusoidal
 *   tokens = encoder(tokens)                   pre-norm layers, final LayerNorm
 *   logits = head(tokens[:, 0])                or the mean over tokens
 *
 * Two small ops of its own (the class token's prepend and the pooling)
 * have their backward here; the rest comes from the library's ops. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "models/transformer_internal.h"

/* ---- 2-D sinusoidal positions (MAE) -------------------------------------- */

/* MAE's get_1d_sincos_pos_embed_from_grid for one position p into out (h):
 * out[k] = sin(p w_k), out[h/2 + k] = cos(p w_k), w_k = 10000^(-k/(h/2)). */
static void sincos_1d(double p, int64_t h, float *out)
{
    int64_t q = h / 2;
    for (int64_t k = 0; k < q; k++) {
        double a = p * pow(10000.0, -(double)k / (double)q);
        out[k] = (float)sin(a);
        out[q + k] = (float)cos(a);
    }
}

qkv_status qkv_pos_2d_sincos_fill(int64_t grid_h, int64_t grid_w, int64_t d, int cls, float *pe)
{
    QKV_NEED(pe, "pos_2d_sincos_fill", "pe");
    if (grid_h < 1 || grid_w < 1 || d < 4 || d % 4 != 0)
        return qkv_fail(QKV_ERR_ARG, "pos_2d_sincos_fill: grid %lldx%lld, d %lld: the grid must be "
                        "at least 1x1 and d a positive multiple of 4", (long long)grid_h,
                        (long long)grid_w, (long long)d);
    float *row = pe;
    if (cls) {
        memset(row, 0, (size_t)d * sizeof *row); // the class token's row: zeros
        row += d;
    }
    for (int64_t i = 0; i < grid_h; i++)
        for (int64_t j = 0; j < grid_w; j++, row += d) {
            sincos_1d((double)j, d / 2, row);         // the column: MAE's "emb_h" (meshgrid order)
            sincos_1d((double)i, d / 2, row + d / 2); // the row
        }
    return QKV_OK;
}

/* ---- prepend the class token ---------------------------------------------- */

typedef struct {
    qkv_tensor *tok, *x, *y;
    int64_t N, P, D;
} prepend_saved;

/* Differentiates y[n,0] = tok, y[n,1+p] = x[n,p]:
 * dtok += sum_n dy[n,0], dx[n,p] += dy[n,1+p]. */
static qkv_status prepend_backward(qkv_ctx *c, void *p)
{
    prepend_saved *s = p;
    const float *dy = s->y->grad; // (N,1+P,D)
    if (!dy) return QKV_OK;
    qkv_arena *a = qkv_ctx_arena(c);
    int64_t P = s->P, D = s->D;
    if (s->tok->requires_grad) {
        float *dt = qkv_tensor_grad(a, s->tok); // (D)
        if (!dt) return QKV_ERR_NOMEM;
        for (int64_t n = 0; n < s->N; n++)
            for (int64_t d = 0; d < D; d++) dt[d] += dy[n * (P + 1) * D + d];
    }
    if (s->x->requires_grad) {
        float *dx = qkv_tensor_grad(a, s->x); // (N,P,D)
        if (!dx) return QKV_ERR_NOMEM;
        for (int64_t n = 0; n < s->N; n++)
            for (int64_t i = 0; i < P * D; i++) dx[n * P * D + i] += dy[(n * (P + 1) + 1) * D + i];
    }
    return QKV_OK;
}

/* y = cat(tok.expand(N,1,D), x, dim=1): tok (1,1,D), x (N,P,D) -> y (N,1+P,D). */
static qkv_status prepend_token(qkv_ctx *c, qkv_tensor *tok, qkv_tensor *x, qkv_tensor **y)
{
    int64_t N = x->shape[0], P = x->shape[1], D = x->shape[2];
    qkv_tensor *in[2] = {tok, x};
    int rec = qkv_ctx_recording(c, in, 2);
    int64_t shape[3] = {N, P + 1, D};
    QKV_TRY(qkv_ctx_tensor(c, 3, shape, rec, y));
    float *yd = (*y)->data;
    for (int64_t n = 0; n < N; n++) {
        memcpy(yd + n * (P + 1) * D, tok->data, (size_t)D * sizeof(float));
        memcpy(yd + (n * (P + 1) + 1) * D, x->data + n * P * D, (size_t)(P * D) * sizeof(float));
    }
    if (!rec) return QKV_OK;
    prepend_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (prepend_saved){tok, x, *y, N, P, D};
    return qkv_ctx_record(c, prepend_backward, s);
}

/* ---- pooling --------------------------------------------------------------- */

typedef struct {
    qkv_tensor *x, *y;
    int64_t N, S, D;
    int mean;
} pool_saved;

/* Differentiates y[n] = x[n,0] (dx[n,0] += dy[n]) or y[n] = mean_s x[n,s]
 * (dx[n,s] += dy[n] / S). */
static qkv_status pool_backward(qkv_ctx *c, void *p)
{
    pool_saved *s = p;
    QKV_BACKWARD_ONE(c, s->y, s->x, dy, dx); // dy (N,D), dx (N,S,D)
    int64_t S = s->S, D = s->D;
    float inv = 1.0f / (float)S;
    for (int64_t n = 0; n < s->N; n++)
        for (int64_t t = 0; t < (s->mean ? S : 1); t++)
            for (int64_t d = 0; d < D; d++)
                dx[(n * S + t) * D + d] += s->mean ? dy[n * D + d] * inv : dy[n * D + d];
    return QKV_OK;
}

/* x (N,S,D) -> y (N,D): the first token, or the mean over the S tokens. */
static qkv_status pool_tokens(qkv_ctx *c, qkv_tensor *x, int mean, qkv_tensor **y)
{
    int64_t N = x->shape[0], S = x->shape[1], D = x->shape[2];
    qkv_tensor *in[1] = {x};
    int rec = qkv_ctx_recording(c, in, 1);
    int64_t shape[2] = {N, D};
    QKV_TRY(qkv_ctx_tensor(c, 2, shape, rec, y));
    float *yd = (*y)->data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t d = 0; d < D; d++) {
            if (!mean) {
                yd[n * D + d] = x->data[n * S * D + d];
                continue;
            }
            double acc = 0;
            for (int64_t t = 0; t < S; t++) acc += x->data[(n * S + t) * D + d];
            yd[n * D + d] = (float)(acc / (double)S);
        }
    if (!rec) return QKV_OK;
    pool_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (pool_saved){x, *y, N, S, D, mean};
    return qkv_ctx_record(c, pool_backward, s);
}

/* ---- the model -------------------------------------------------------------- */

qkv_vit_opts qkv_vit_opts_default(int64_t image_h, int64_t image_w, int64_t in_channels,
                                  int64_t patch, int64_t num_classes)
{
    qkv_vit_opts o;
    memset(&o, 0, sizeof o);
    o.image_h = image_h, o.image_w = image_w, o.in_channels = in_channels;
    o.patch = patch, o.num_classes = num_classes;
    o.d_model = 64, o.nhead = 4, o.num_layers = 4, o.dim_feedforward = 256;
    o.dropout = 0.0f;
    o.activation = QKV_ACTIVATION_GELU;
    o.layer_norm_eps = 1e-6f;
    o.pos = QKV_VIT_POS_LEARNED;
    o.pool = QKV_VIT_POOL_CLS;
    o.class_token = 1;
    return o;
}

static qkv_transformer_layer_opts vit_layer_opts(const qkv_vit_opts *o)
{
    qkv_transformer_layer_opts l = qkv_transformer_layer_opts_default(o->d_model, o->nhead);
    l.dim_feedforward = o->dim_feedforward;
    l.dropout = o->dropout;
    l.activation = o->activation;
    l.layer_norm_eps = o->layer_norm_eps;
    l.batch_first = 1;
    l.norm_first = 1;
    return l;
}

static qkv_status vit_check_opts(const char *fn, const qkv_vit_opts *o)
{
    if (o->in_channels < 1 || o->patch < 1 || o->image_h < o->patch || o->image_w < o->patch)
        return qkv_fail(QKV_ERR_ARG, "%s: image %lldx%lld with %lld channels, patch %lld: need "
                        "channels >= 1 and an image at least one patch wide and high", fn,
                        (long long)o->image_h, (long long)o->image_w, (long long)o->in_channels,
                        (long long)o->patch);
    if (o->num_classes < 1)
        return qkv_fail(QKV_ERR_ARG, "%s: num_classes %lld must be >= 1", fn, (long long)o->num_classes);
    if (o->pos != QKV_VIT_POS_LEARNED && o->pos != QKV_VIT_POS_SINCOS && o->pos != QKV_VIT_POS_NONE)
        return qkv_fail(QKV_ERR_ARG, "%s: pos %d is not a qkv_vit_pos", fn, (int)o->pos);
    if (o->pool != QKV_VIT_POOL_CLS && o->pool != QKV_VIT_POOL_MEAN)
        return qkv_fail(QKV_ERR_ARG, "%s: pool %d is not a qkv_vit_pool", fn, (int)o->pool);
    if (o->pool == QKV_VIT_POOL_CLS && !o->class_token)
        return qkv_fail(QKV_ERR_ARG, "%s: pool on the class token needs class_token = 1", fn);
    if (o->pos == QKV_VIT_POS_SINCOS && o->d_model % 4 != 0)
        return qkv_fail(QKV_ERR_ARG, "%s: 2-D sinusoidal positions need d_model %% 4 == 0 (d_model %lld)",
                        fn, (long long)o->d_model);
    if (o->num_layers < 0)
        return qkv_fail(QKV_ERR_ARG, "%s: num_layers %lld must be >= 0", fn, (long long)o->num_layers);
    qkv_transformer_layer_opts l = vit_layer_opts(o);
    return tfm_check_opts(fn, &l);
}

/* torchvision's conv_proj init: trunc_normal_(std = sqrt(1/fan_in)), cut at
 * two standard deviations (redrawn beyond). */
static void init_trunc_normal(qkv_rng *r, qkv_tensor *t, float std)
{
    for (int64_t i = 0; i < qkv_tensor_numel(t); i++) {
        float z;
        do z = qkv_rng_normal(r);
        while (fabsf(z) > 2.0f);
        t->data[i] = z * std;
    }
}

static qkv_status vit_build(qkv_vit *m, qkv_params *p, const char *prefix, qkv_rng *rng)
{
    const char *fn = "vit_init";
    const qkv_vit_opts *o = &m->o;
    char full[TFM_NAME_BUF];
    int64_t D = o->d_model, S = m->seq_len;
    QKV_TRY(tfm_join(fn, full, sizeof full, prefix, "conv_proj."));
    QKV_TRY(qkv_nn_patch_embed_init(&m->conv_proj, o->in_channels, D, o->patch, p, full, rng));
    init_trunc_normal(rng, m->conv_proj.weight,
                      (float)sqrt(1.0 / (double)(o->in_channels * o->patch * o->patch)));
    QKV_TRY(qkv_init_constant(m->conv_proj.bias, 0.0f));
    if (o->class_token) {
        QKV_TRY(tfm_join(fn, full, sizeof full, prefix, "class_token"));
        QKV_TRY(qkv_params_add(p, "", full, 3, (int64_t[]){1, 1, D}, &m->class_token));
    }
    if (o->pos == QKV_VIT_POS_LEARNED) {
        QKV_TRY(tfm_join(fn, full, sizeof full, prefix, "pos_embedding"));
        QKV_TRY(qkv_params_add(p, "", full, 3, (int64_t[]){1, S, D}, &m->pos_embedding));
        qkv_rng_fill_normal(rng, m->pos_embedding->data, S * D, 0.0f, 0.02f);
    } else if (o->pos == QKV_VIT_POS_SINCOS) {
        m->pos_table = malloc((size_t)(S * D) * sizeof(float));
        if (!m->pos_table) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
        QKV_TRY(qkv_pos_2d_sincos_fill(m->grid_h, m->grid_w, D, o->class_token, m->pos_table));
    }
    qkv_transformer_layer_opts l = vit_layer_opts(o);
    QKV_TRY(tfm_join(fn, full, sizeof full, prefix, "encoder."));
    QKV_TRY(qkv_transformer_encoder_init(&m->encoder, &l, o->num_layers, o->layer_norm_eps, p,
                                         full, rng));
    QKV_TRY(tfm_join(fn, full, sizeof full, prefix, "head."));
    QKV_TRY(qkv_nn_linear_init(&m->head, D, o->num_classes, 1, p, full, rng));
    QKV_TRY(qkv_init_constant(m->head.weight, 0.0f));
    return qkv_init_constant(m->head.bias, 0.0f);
}

qkv_status qkv_vit_init(qkv_vit *m, const qkv_vit_opts *o, qkv_params *p, const char *prefix,
                        qkv_rng *rng)
{
    const char *fn = "vit_init";
    QKV_NEED(m, fn, "module");
    memset(m, 0, sizeof *m);
    QKV_NEED(o, fn, "opts");
    QKV_NEED(p, fn, "params");
    QKV_NEED(rng, fn, "rng");
    QKV_TRY(vit_check_opts(fn, o));
    QKV_TRY(tfm_check_prefix(fn, prefix));
    m->o = *o;
    m->grid_h = o->image_h / o->patch;
    m->grid_w = o->image_w / o->patch;
    m->seq_len = (o->class_token ? 1 : 0) + m->grid_h * m->grid_w;
    qkv_status s = vit_build(m, p, prefix, rng);
    if (s != QKV_OK) qkv_vit_free(m);
    return s;
}

void qkv_vit_free(qkv_vit *m)
{
    if (!m) return;
    qkv_transformer_encoder_free(&m->encoder);
    free(m->pos_table);
    m->pos_table = NULL;
}

qkv_status qkv_vit_features(qkv_ctx *c, const qkv_vit *m, qkv_tensor *images, qkv_tensor **tokens)
{
    const char *fn = "vit_features";
    QKV_NEED_OUT_CTX(tokens, c, fn, "tokens");
    QKV_NEED(m, fn, "model");
    QKV_NEED(images, fn, "images");
    if (!m->conv_proj.weight)
        return qkv_fail(QKV_ERR_STATE, "%s: the model is not initialised (qkv_vit_init)", fn);
    const qkv_vit_opts *o = &m->o;
    char b[64];
    if (images->dtype != QKV_F32 || images->ndim != 4 || images->shape[1] != o->in_channels ||
        images->shape[2] != o->image_h || images->shape[3] != o->image_w)
        return qkv_fail(QKV_ERR_SHAPE, "%s: images %s, expected F32 (N,%lld,%lld,%lld) "
                        "(resize or convert them to the model's input first)", fn,
                        qkv_shape_str(images, b, sizeof b), (long long)o->in_channels,
                        (long long)o->image_h, (long long)o->image_w);
    int64_t D = o->d_model, S = m->seq_len;
    qkv_tensor *x, *pos;
    QKV_TRY(qkv_patch_embed(c, images, m->conv_proj.weight, m->conv_proj.bias, &x)); // (N,P,D)
    if (o->class_token) QKV_TRY(prepend_token(c, m->class_token, x, &x));           // (N,S,D)
    if (o->pos == QKV_VIT_POS_LEARNED) {
        QKV_TRY(qkv_tensor_view(qkv_ctx_arena(c), m->pos_embedding, 2, (int64_t[]){S, D}, &pos));
        QKV_TRY(qkv_add(c, x, pos, &x));
    } else if (o->pos == QKV_VIT_POS_SINCOS) {
        QKV_TRY(qkv_tensor_wrap(qkv_ctx_arena(c), m->pos_table, 2, (int64_t[]){S, D}, &pos));
        QKV_TRY(qkv_add(c, x, pos, &x));
    }
    QKV_TRY(qkv_dropout(c, x, o->dropout, &x));
    return qkv_transformer_encoder_forward(c, &m->encoder, x, NULL, tokens);
}

static qkv_status vit_forward_body(qkv_ctx *c, const qkv_vit *m, qkv_tensor *images, qkv_tensor **logits)
{
    QKV_NEED(logits, "vit_forward", "logits");
    *logits = NULL;
    qkv_tensor *t, *pooled;
    QKV_TRY(qkv_vit_features(c, m, images, &t));
    QKV_TRY(pool_tokens(c, t, m->o.pool == QKV_VIT_POOL_MEAN, &pooled)); // (N,D)
    return qkv_linear(c, pooled, m->head.weight, m->head.bias, logits);  // (N,K)
}

qkv_status qkv_vit_forward(qkv_ctx *c, const qkv_vit *m, qkv_tensor *images, qkv_tensor **logits)
{
    return qkv_fail_in("vit_forward", vit_forward_body(c, m, images, logits));
}
