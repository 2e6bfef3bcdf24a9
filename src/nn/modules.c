/* modules.c: torch.nn modules over the functional ops: Linear, Conv1d,
 * Conv2d, LayerNorm, Embedding, ReLU, Tanh, GELU, Dropout, Flatten, and the
 * Sequential container (MaxPool2d is in pool.c, BatchNorm2d in
 * batchnorm.c). Each _init checks all its options before it adds a parameter,
 * so bad options leave the store untouched. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nn/nn_check.h"

qkv_status qkv_module_forward(qkv_ctx *c, qkv_module *m, qkv_tensor *x, qkv_tensor **y)
{
    QKV_NEED(y, "module_forward", "y");
    *y = NULL;
    QKV_NEED(c, "module_forward", "ctx");
    QKV_NEED(m, "module_forward", "module");
    if (!m->forward)
        return qkv_fail(QKV_ERR_STATE, "module_forward: module has no forward (was its _init called?)");
    return m->forward(c, m, x, y);
}

/* Checks the arguments every _init with parameters shares. */
static qkv_status init_common(const char *fn, const void *m, qkv_params *p, qkv_rng *rng, int need_rng)
{
    QKV_NEED(m, fn, "module");
    QKV_NEED(p, fn, "params");
    if (need_rng) QKV_NEED(rng, fn, "rng");
    return QKV_OK;
}

/* ---- Linear ----------------------------------------------------------------- */

static qkv_status linear_forward(qkv_ctx *c, qkv_module *base, qkv_tensor *x, qkv_tensor **y)
{
    qkv_nn_linear *m = (qkv_nn_linear *)base;
    return qkv_linear(c, x, m->weight, m->bias, y);
}

static qkv_status nn_linear_init_body(qkv_nn_linear *m, int64_t in_features, int64_t out_features,
                                      int bias, qkv_params *p, const char *prefix, qkv_rng *rng)
{
    QKV_TRY(init_common("nn_linear_init", m, p, rng, 1));
    if (in_features < 1 || out_features < 1)
        return qkv_fail(QKV_ERR_ARG, "nn_linear_init: in_features %lld and out_features %lld must be positive",
                        (long long)in_features, (long long)out_features);
    memset(m, 0, sizeof *m);
    int64_t ws[2] = {out_features, in_features};
    QKV_TRY(qkv_params_add(p, prefix, "weight", 2, ws, &m->weight));
    QKV_TRY(qkv_init_linear_default(rng, m->weight));
    if (bias) { /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in_features */
        QKV_TRY(qkv_params_add(p, prefix, "bias", 1, &out_features, &m->bias));
        float bound = 1.0f / sqrtf((float)in_features);
        QKV_TRY(qkv_init_uniform(rng, m->bias, -bound, bound));
    }
    m->in_features = in_features;
    m->out_features = out_features;
    m->base = (qkv_module){"Linear", linear_forward};
    return QKV_OK;
}

qkv_status qkv_nn_linear_init(qkv_nn_linear *m, int64_t in_features, int64_t out_features,
                              int bias, qkv_params *p, const char *prefix, qkv_rng *rng)
{
    return qkv_fail_in("nn_linear_init", nn_linear_init_body(m, in_features, out_features, bias, p, prefix, rng));
}

/* ---- Conv1d ----------------------------------------------------------------- */

qkv_conv1d_opts qkv_conv1d_opts_default(int64_t in_channels, int64_t out_channels,
                                        int64_t kernel_size)
{
    return (qkv_conv1d_opts){in_channels, out_channels, kernel_size, 1, 0, 1, 1};
}

static qkv_status conv1d_forward(qkv_ctx *c, qkv_module *base, qkv_tensor *x, qkv_tensor **y)
{
    qkv_nn_conv1d *m = (qkv_nn_conv1d *)base;
    return qkv_conv1d(c, x, m->weight, m->bias, m->o.stride, m->o.padding, m->o.dilation, y);
}

qkv_status qkv_nn_conv1d_init(qkv_nn_conv1d *m, const qkv_conv1d_opts *o, qkv_params *p,
                              const char *prefix, qkv_rng *rng)
{
    QKV_TRY(init_common("nn_conv1d_init", m, p, rng, 1));
    QKV_NEED(o, "nn_conv1d_init", "opts");
    if (o->in_channels < 1 || o->out_channels < 1 || o->kernel_size < 1)
        return qkv_fail(QKV_ERR_ARG, "nn_conv1d_init: in_channels %lld, out_channels %lld and "
                        "kernel_size %lld must be positive", (long long)o->in_channels,
                        (long long)o->out_channels, (long long)o->kernel_size);
    if (o->stride < 1 || o->padding < 0 || o->dilation < 1)
        return qkv_fail(QKV_ERR_ARG, "nn_conv1d_init: stride %lld, padding %lld, dilation %lld: "
                        "expected stride >= 1, padding >= 0, dilation >= 1", (long long)o->stride,
                        (long long)o->padding, (long long)o->dilation);
    memset(m, 0, sizeof *m);
    int64_t ws[3] = {o->out_channels, o->in_channels, o->kernel_size};
    QKV_TRY(qkv_params_add(p, prefix, "weight", 3, ws, &m->weight));
    QKV_TRY(qkv_init_linear_default(rng, m->weight)); /* fan_in = Cin * K */
    if (o->bias) {
        QKV_TRY(qkv_params_add(p, prefix, "bias", 1, &o->out_channels, &m->bias));
        float bound = 1.0f / sqrtf((float)(o->in_channels * o->kernel_size));
        QKV_TRY(qkv_init_uniform(rng, m->bias, -bound, bound));
    }
    m->o = *o;
    m->base = (qkv_module){"Conv1d", conv1d_forward};
    return QKV_OK;
}

/* ---- Conv2d ----------------------------------------------------------------- */

qkv_conv2d_opts qkv_conv2d_opts_default(int64_t in_channels, int64_t out_channels,
                                        int64_t kernel_size)
{
    return (qkv_conv2d_opts){in_channels, out_channels, {kernel_size, kernel_size}, {1, 1},
                             {0, 0}, {1, 1}, 1};
}

static qkv_status conv2d_forward(qkv_ctx *c, qkv_module *base, qkv_tensor *x, qkv_tensor **y)
{
    qkv_nn_conv2d *m = (qkv_nn_conv2d *)base;
    return qkv_conv2d(c, x, m->weight, m->bias, m->o.stride, m->o.padding, m->o.dilation, y);
}

qkv_status qkv_nn_conv2d_init(qkv_nn_conv2d *m, const qkv_conv2d_opts *o, qkv_params *p,
                              const char *prefix, qkv_rng *rng)
{
    QKV_TRY(init_common("nn_conv2d_init", m, p, rng, 1));
    QKV_NEED(o, "nn_conv2d_init", "opts");
    const int64_t *k = o->kernel_size, *s = o->stride, *pd = o->padding, *d = o->dilation;
    if (o->in_channels < 1 || o->out_channels < 1 || k[0] < 1 || k[1] < 1)
        return qkv_fail(QKV_ERR_ARG, "nn_conv2d_init: in_channels %lld, out_channels %lld and "
                        "kernel_size (%lld,%lld) must be positive", (long long)o->in_channels,
                        (long long)o->out_channels, (long long)k[0], (long long)k[1]);
    if (s[0] < 1 || s[1] < 1 || pd[0] < 0 || pd[1] < 0 || d[0] < 1 || d[1] < 1)
        return qkv_fail(QKV_ERR_ARG, "nn_conv2d_init: stride (%lld,%lld), padding (%lld,%lld), "
                        "dilation (%lld,%lld): expected stride >= 1, padding >= 0, dilation >= 1",
                        (long long)s[0], (long long)s[1], (long long)pd[0], (long long)pd[1],
                        (long long)d[0], (long long)d[1]);
    memset(m, 0, sizeof *m);
    int64_t ws[4] = {o->out_channels, o->in_channels, k[0], k[1]};
    QKV_TRY(qkv_params_add(p, prefix, "weight", 4, ws, &m->weight));
    QKV_TRY(qkv_init_linear_default(rng, m->weight)); /* fan_in = Cin * kH * kW */
    if (o->bias) {
        QKV_TRY(qkv_params_add(p, prefix, "bias", 1, &o->out_channels, &m->bias));
        float bound = 1.0f / sqrtf((float)(o->in_channels * k[0] * k[1]));
        QKV_TRY(qkv_init_uniform(rng, m->bias, -bound, bound));
    }
    m->o = *o;
    m->base = (qkv_module){"Conv2d", conv2d_forward};
    return QKV_OK;
}

/* ---- LayerNorm and RMSNorm ---------------------------------------------------- */

/* A norm module's x must end in its normalized_shape C (op names the op). */
static qkv_status norm_check_x(const char *op, const qkv_tensor *x, int64_t C)
{
    if (x && x->ndim >= 1 && x->shape[x->ndim - 1] != C) {
        char bx[64];
        return qkv_fail(QKV_ERR_SHAPE, "%s: x %s last dim does not match normalized_shape (%lld,)", op,
                        qkv_shape_str(x, bx, sizeof bx), (long long)C);
    }
    return QKV_OK;
}

/* What nn.LayerNorm and nn.RMSNorm share at init (fn names the call):
 * the argument checks, then (norm_params) "weight" (C) ones when affine
 * and "bias" (C) zeros when b is wanted too (b NULL: none). */
static qkv_status norm_check_init(const char *fn, const void *m, int64_t C, int affine, const qkv_params *p)
{
    QKV_NEED(m, fn, "module");
    if (affine) QKV_NEED(p, fn, "params");
    if (C < 1) return qkv_fail(QKV_ERR_ARG, "%s: normalized_shape %lld must be positive", fn, (long long)C);
    return QKV_OK;
}

static qkv_status norm_params(int64_t C, int affine, qkv_params *p, const char *prefix, qkv_tensor **w,
                              qkv_tensor **b)
{
    *w = NULL;
    if (b) *b = NULL;
    if (!affine) return QKV_OK;
    QKV_TRY(qkv_params_add(p, prefix, "weight", 1, &C, w));
    QKV_TRY(qkv_init_constant(*w, 1.0f));
    if (b) QKV_TRY(qkv_params_add(p, prefix, "bias", 1, &C, b));
    return QKV_OK;
}

static qkv_status layernorm_forward(qkv_ctx *c, qkv_module *base, qkv_tensor *x, qkv_tensor **y)
{
    qkv_nn_layernorm *m = (qkv_nn_layernorm *)base;
    QKV_TRY(norm_check_x("layer_norm", x, m->normalized_shape));
    return qkv_layer_norm(c, x, m->weight, m->bias, m->eps, y);
}

static qkv_status nn_layernorm_init_body(qkv_nn_layernorm *m, int64_t normalized_shape, float eps,
                                         int elementwise_affine, qkv_params *p, const char *prefix)
{
    QKV_TRY(norm_check_init("nn_layernorm_init", m, normalized_shape, elementwise_affine, p));
    if (!(eps > 0.0f) || isinf(eps))
        return qkv_fail(QKV_ERR_ARG, "nn_layernorm_init: eps %g must be positive and finite", (double)eps);
    qkv_tensor *w, *b;
    QKV_TRY(norm_params(normalized_shape, elementwise_affine, p, prefix, &w, &b));
    *m = (qkv_nn_layernorm){{"LayerNorm", layernorm_forward}, normalized_shape, eps, elementwise_affine != 0, w, b};
    return QKV_OK;
}

qkv_status qkv_nn_layernorm_init(qkv_nn_layernorm *m, int64_t normalized_shape, float eps,
                                 int elementwise_affine, qkv_params *p, const char *prefix)
{
    return qkv_fail_in("nn_layernorm_init", nn_layernorm_init_body(m, normalized_shape, eps, elementwise_affine, p, prefix));
}

static qkv_status rmsnorm_forward(qkv_ctx *c, qkv_module *base, qkv_tensor *x, qkv_tensor **y)
{
    qkv_nn_rmsnorm *m = (qkv_nn_rmsnorm *)base;
    QKV_TRY(norm_check_x("rms_norm", x, m->normalized_shape));
    return qkv_rms_norm(c, x, m->weight, m->eps, y);
}

static qkv_status nn_rmsnorm_init_body(qkv_nn_rmsnorm *m, int64_t normalized_shape, float eps,
                                       int elementwise_affine, qkv_params *p, const char *prefix)
{
    QKV_TRY(norm_check_init("nn_rmsnorm_init", m, normalized_shape, elementwise_affine, p));
    if (!isnan(eps) && (!(eps >= 0.0f) || isinf(eps)))
        return qkv_fail(QKV_ERR_ARG, "nn_rmsnorm_init: eps %g must be >= 0 and finite (NAN for the default)",
                        (double)eps);
    qkv_tensor *w;
    QKV_TRY(norm_params(normalized_shape, elementwise_affine, p, prefix, &w, NULL));
    *m = (qkv_nn_rmsnorm){{"RMSNorm", rmsnorm_forward}, normalized_shape, eps, elementwise_affine != 0, w};
    return QKV_OK;
}

qkv_status qkv_nn_rmsnorm_init(qkv_nn_rmsnorm *m, int64_t normalized_shape, float eps,
                               int elementwise_affine, qkv_params *p, const char *prefix)
{
    return qkv_fail_in("nn_rmsnorm_init", nn_rmsnorm_init_body(m, normalized_shape, eps, elementwise_affine, p, prefix));
}

/* ---- Embedding -------------------------------------------------------------- */

static qkv_status embedding_forward(qkv_ctx *c, qkv_module *base, qkv_tensor *x, qkv_tensor **y)
{
    qkv_nn_embedding *m = (qkv_nn_embedding *)base;
    return qkv_embedding(c, m->weight, x, m->padding_idx, y);
}

static qkv_status nn_embedding_init_body(qkv_nn_embedding *m, int64_t num_embeddings,
                                         int64_t embedding_dim, int64_t padding_idx, qkv_params *p,
                                         const char *prefix, qkv_rng *rng)
{
    QKV_TRY(init_common("nn_embedding_init", m, p, rng, 1));
    if (num_embeddings < 1 || embedding_dim < 1)
        return qkv_fail(QKV_ERR_ARG, "nn_embedding_init: num_embeddings %lld and embedding_dim %lld "
                        "must be positive", (long long)num_embeddings, (long long)embedding_dim);
    if (padding_idx < -1 || padding_idx >= num_embeddings)
        return qkv_fail(QKV_ERR_ARG, "nn_embedding_init: padding_idx %lld out of range "
                        "(0..%lld, or -1 for none)", (long long)padding_idx, (long long)num_embeddings - 1);
    memset(m, 0, sizeof *m);
    int64_t ws[2] = {num_embeddings, embedding_dim};
    QKV_TRY(qkv_params_add(p, prefix, "weight", 2, ws, &m->weight));
    qkv_rng_fill_normal(rng, m->weight->data, num_embeddings * embedding_dim, 0.0f, 1.0f);
    if (padding_idx >= 0)
        memset(m->weight->data + padding_idx * embedding_dim, 0, (size_t)embedding_dim * sizeof(float));
    m->num_embeddings = num_embeddings;
    m->embedding_dim = embedding_dim;
    m->padding_idx = padding_idx;
    m->base = (qkv_module){"Embedding", embedding_forward};
    return QKV_OK;
}

qkv_status qkv_nn_embedding_init(qkv_nn_embedding *m, int64_t num_embeddings,
                                 int64_t embedding_dim, int64_t padding_idx, qkv_params *p,
                                 const char *prefix, qkv_rng *rng)
{
    return qkv_fail_in("nn_embedding_init", nn_embedding_init_body(m, num_embeddings, embedding_dim, padding_idx, p, prefix, rng));
}

/* ---- parameterless ---------------------------------------------------------- */

static qkv_status activation_forward(qkv_ctx *c, qkv_module *base, qkv_tensor *x, qkv_tensor **y)
{
    return qkv_activation_apply(c, ((qkv_nn_activation *)base)->kind, x, y);
}

static qkv_status dropout_forward(qkv_ctx *c, qkv_module *base, qkv_tensor *x, qkv_tensor **y)
{
    return qkv_dropout(c, x, ((qkv_nn_dropout *)base)->p, y);
}

/* PyTorch's class name for each kind. */
#define ACT_MODULE(NAME, name, module) module,
static const char *const activation_types[] = {QKV_ACTIVATIONS(ACT_MODULE)};
#undef ACT_MODULE

qkv_status qkv_nn_activation_init(qkv_nn_activation *m, qkv_activation kind)
{
    QKV_NEED(m, "nn_activation_init", "module");
    if (!qkv_activation_name(kind))
        return qkv_fail(QKV_ERR_ARG, "nn_activation_init: kind %d is not a qkv_activation value",
                        (int)kind);
    m->base = (qkv_module){activation_types[kind], activation_forward};
    m->kind = kind;
    return QKV_OK;
}

qkv_status qkv_nn_relu_init(qkv_nn_relu *m)
{
    QKV_NEED(m, "nn_relu_init", "module");
    return qkv_nn_activation_init(m, QKV_ACTIVATION_RELU);
}

qkv_status qkv_nn_tanh_init(qkv_nn_tanh *m)
{
    QKV_NEED(m, "nn_tanh_init", "module");
    return qkv_nn_activation_init(m, QKV_ACTIVATION_TANH);
}

qkv_status qkv_nn_gelu_init(qkv_nn_gelu *m, const char *approximate)
{
    qkv_activation kind;
    QKV_NEED(m, "nn_gelu_init", "module");
    QKV_TRY(qkv_gelu_parse("nn_gelu_init", approximate, &kind));
    return qkv_nn_activation_init(m, kind);
}

qkv_status qkv_nn_dropout_init(qkv_nn_dropout *m, float p)
{
    QKV_NEED(m, "nn_dropout_init", "module");
    if (!(p >= 0.0f && p <= 1.0f))
        return qkv_fail(QKV_ERR_ARG, "nn_dropout_init: p %g must be in [0,1]", (double)p);
    m->base = (qkv_module){"Dropout", dropout_forward};
    m->p = p;
    return QKV_OK;
}

/* nn.Flatten(): (N,...) -> (N,prod(...)), recorded as a view (no copy). */
static qkv_status flatten_forward(qkv_ctx *c, qkv_module *base, qkv_tensor *x, qkv_tensor **y)
{
    QKV_NEED(x, "flatten", "x");
    if (x->ndim < 2) { /* torch.flatten(x, 1) needs a dim 1 */
        char bx[64];
        return qkv_fail(QKV_ERR_SHAPE, "flatten: x %s has %d dims, expected (N,...) with at least 2",
                        qkv_shape_str(x, bx, sizeof bx), x->ndim);
    }
    int64_t shape[2] = {x->shape[0], x->shape[0] ? qkv_tensor_numel(x) / x->shape[0] : 0};
    return qkv_reshape(c, x, 2, shape, y);
}

qkv_status qkv_nn_flatten_init(qkv_nn_flatten *m)
{
    QKV_NEED(m, "nn_flatten_init", "module");
    m->base = (qkv_module){"Flatten", flatten_forward};
    return QKV_OK;
}

/* ---- Sequential ------------------------------------------------------------- */

/* y = layers[n-1](... layers[0](x)); a failing layer's message gets the
 * layer's index and type in front. */
static qkv_status sequential_forward(qkv_ctx *c, qkv_module *base, qkv_tensor *x, qkv_tensor **y)
{
    qkv_sequential *s = (qkv_sequential *)base;
    qkv_tensor *h = x;
    for (int i = 0; i < s->n; i++) {
        qkv_tensor *next = NULL;
        qkv_status st = qkv_module_forward(c, s->layers[i], h, &next);
        if (st != QKV_OK) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s", qkv_last_error());
            return qkv_fail(st, "sequential: layer %d (%s): %s", i,
                            s->layers[i]->type ? s->layers[i]->type : "?", msg);
        }
        h = next;
    }
    *y = h;
    return QKV_OK;
}

qkv_status qkv_sequential_init(qkv_sequential *s)
{
    QKV_NEED(s, "sequential_init", "s");
    memset(s, 0, sizeof *s);
    s->base = (qkv_module){"Sequential", sequential_forward};
    return QKV_OK;
}

qkv_status qkv_sequential_add(qkv_sequential *s, qkv_module *m)
{
    QKV_NEED(s, "sequential_add", "s");
    QKV_NEED(m, "sequential_add", "module");
    if (s->base.forward != sequential_forward)
        return qkv_fail(QKV_ERR_STATE, "sequential_add: s is not initialised (call qkv_sequential_init)");
    if (!m->forward)
        return qkv_fail(QKV_ERR_ARG, "sequential_add: module has no forward (was its _init called?)");
    if (m == &s->base)
        return qkv_fail(QKV_ERR_ARG, "sequential_add: cannot add a Sequential to itself");
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 8;
        qkv_module **layers = realloc(s->layers, (size_t)cap * sizeof *layers);
        if (!layers) return qkv_fail(QKV_ERR_NOMEM, "sequential_add: out of memory");
        s->layers = layers;
        s->cap = cap;
    }
    s->layers[s->n++] = m;
    return QKV_OK;
}

void qkv_sequential_free(qkv_sequential *s)
{
    if (!s) return;
    free(s->layers);
    s->layers = NULL;
    s->n = s->cap = 0;
}
