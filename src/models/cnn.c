/* cnn.c: the image baselines the vision transformer is compared with: a
 * small CNN (Conv2d-BatchNorm2d-ReLU-MaxPool2d blocks, then two Linear
 * layers) and an MLP, both nn.Sequential with PyTorch's parameter names
 * (docs/cnn.md). */
#include <stdio.h>
#include <string.h>
#include "core/internal.h"

qkv_cnn_opts qkv_cnn_opts_default(void)
{
    return (qkv_cnn_opts){1, 28, 28, 10, 128, 2, {32, 64}};
}

qkv_mlp_opts qkv_mlp_opts_default(void)
{
    return (qkv_mlp_opts){784, 10, 2, {256, 128}};
}

/* "<prefix><i>." into buf. */
static const char *layer_prefix(char *buf, size_t n, const char *prefix, int i)
{
    snprintf(buf, n, "%s%d.", prefix ? prefix : "", i);
    return buf;
}

static qkv_status cnn_check(const qkv_cnn_opts *o)
{
    if (o->blocks < 1 || o->blocks > QKV_CNN_MAX_BLOCKS)
        return qkv_fail(QKV_ERR_ARG, "cnn_init: blocks %d must be in [1,%d]", o->blocks, QKV_CNN_MAX_BLOCKS);
    if (o->in_channels < 1 || o->num_classes < 1 || o->hidden < 1)
        return qkv_fail(QKV_ERR_ARG, "cnn_init: in_channels %lld, num_classes %lld and hidden %lld must "
                        "be positive", (long long)o->in_channels, (long long)o->num_classes,
                        (long long)o->hidden);
    for (int b = 0; b < o->blocks; b++)
        if (o->channels[b] < 1)
            return qkv_fail(QKV_ERR_ARG, "cnn_init: channels[%d] = %lld must be positive", b,
                            (long long)o->channels[b]);
    /* each block's pool halves the size (floor); it must stay >= 1 */
    if ((o->height >> o->blocks) < 1 || (o->width >> o->blocks) < 1)
        return qkv_fail(QKV_ERR_ARG, "cnn_init: a %lldx%lld image is too small for %d blocks of 2x2 "
                        "pooling", (long long)o->height, (long long)o->width, o->blocks);
    return QKV_OK;
}

/* The pointer arguments of qkv_cnn_init and qkv_mlp_init, in order. */
static qkv_status net_args(const char *fn, const void *net, const void *o, const qkv_params *p,
                           const qkv_rng *rng)
{
    QKV_NEED(net, fn, "net");
    QKV_NEED(o, fn, "opts");
    QKV_NEED(p, fn, "params");
    QKV_NEED(rng, fn, "rng");
    return QKV_OK;
}

qkv_status qkv_cnn_init(qkv_cnn *net, const qkv_cnn_opts *o, qkv_params *p, const char *prefix,
                        qkv_rng *rng)
{
    QKV_TRY(net_args("cnn_init", net, o, p, rng));
    QKV_TRY(cnn_check(o));
    memset(net, 0, sizeof *net);
    net->o = *o;
    QKV_TRY(qkv_sequential_init(&net->seq));
    char pre[256];
    int i = 0; /* the layer's index in the Sequential */
    int64_t cin = o->in_channels, h = o->height, w = o->width;
    qkv_status s = QKV_OK;
    for (int b = 0; !s && b < o->blocks; b++) {
        qkv_conv2d_opts co = qkv_conv2d_opts_default(cin, o->channels[b], 3);
        co.padding[0] = co.padding[1] = 1;
        qkv_batchnorm_opts bo = qkv_batchnorm_opts_default(o->channels[b]);
        s = qkv_nn_conv2d_init(&net->conv[b], &co, p, layer_prefix(pre, sizeof pre, prefix, i), rng);
        if (!s) s = qkv_nn_batchnorm2d_init(&net->bn[b], &bo, p, layer_prefix(pre, sizeof pre, prefix, i + 1));
        if (!s) s = qkv_nn_relu_init(&net->relu[b]);
        if (!s) s = qkv_nn_maxpool2d_init(&net->pool[b], 2, 0, 0);
        qkv_module *layer[4] = {&net->conv[b].base, &net->bn[b].base, &net->relu[b].base, &net->pool[b].base};
        for (int k = 0; !s && k < 4; k++) s = qkv_sequential_add(&net->seq, layer[k]);
        i += 4;
        cin = o->channels[b], h /= 2, w /= 2;
    }
    if (!s) s = qkv_nn_flatten_init(&net->flatten);
    if (!s) s = qkv_sequential_add(&net->seq, &net->flatten.base);
    if (!s) s = qkv_nn_linear_init(&net->fc1, cin * h * w, o->hidden, 1, p,
                                   layer_prefix(pre, sizeof pre, prefix, i + 1), rng);
    if (!s) s = qkv_nn_relu_init(&net->relu[o->blocks]);
    if (!s) s = qkv_nn_linear_init(&net->fc2, o->hidden, o->num_classes, 1, p,
                                   layer_prefix(pre, sizeof pre, prefix, i + 3), rng);
    qkv_module *tail[3] = {&net->fc1.base, &net->relu[o->blocks].base, &net->fc2.base};
    for (int k = 0; !s && k < 3; k++) s = qkv_sequential_add(&net->seq, tail[k]);
    if (s) qkv_sequential_free(&net->seq);
    return s;
}

void qkv_cnn_free(qkv_cnn *net)
{
    if (net) qkv_sequential_free(&net->seq);
}

qkv_status qkv_mlp_init(qkv_mlp *net, const qkv_mlp_opts *o, qkv_params *p, const char *prefix,
                        qkv_rng *rng)
{
    QKV_TRY(net_args("mlp_init", net, o, p, rng));
    if (o->layers < 0 || o->layers > QKV_MLP_MAX_HIDDEN)
        return qkv_fail(QKV_ERR_ARG, "mlp_init: layers %d must be in [0,%d]", o->layers, QKV_MLP_MAX_HIDDEN);
    if (o->in_features < 1 || o->num_classes < 1)
        return qkv_fail(QKV_ERR_ARG, "mlp_init: in_features %lld and num_classes %lld must be positive",
                        (long long)o->in_features, (long long)o->num_classes);
    for (int l = 0; l < o->layers; l++)
        if (o->hidden[l] < 1)
            return qkv_fail(QKV_ERR_ARG, "mlp_init: hidden[%d] = %lld must be positive", l,
                            (long long)o->hidden[l]);
    memset(net, 0, sizeof *net);
    net->o = *o;
    QKV_TRY(qkv_sequential_init(&net->seq));
    char pre[256];
    qkv_status s = qkv_nn_flatten_init(&net->flatten);
    if (!s) s = qkv_sequential_add(&net->seq, &net->flatten.base);
    int64_t in = o->in_features;
    for (int l = 0; !s && l <= o->layers; l++) { /* Linear at index 2l+1, ReLU at 2l+2 */
        int64_t out = l < o->layers ? o->hidden[l] : o->num_classes;
        s = qkv_nn_linear_init(&net->fc[l], in, out, 1, p, layer_prefix(pre, sizeof pre, prefix, 2 * l + 1), rng);
        if (!s) s = qkv_sequential_add(&net->seq, &net->fc[l].base);
        if (!s && l < o->layers) s = qkv_nn_relu_init(&net->relu[l]);
        if (!s && l < o->layers) s = qkv_sequential_add(&net->seq, &net->relu[l].base);
        in = out;
    }
    if (s) qkv_sequential_free(&net->seq);
    return s;
}

void qkv_mlp_free(qkv_mlp *net)
{
    if (net) qkv_sequential_free(&net->seq);
}
