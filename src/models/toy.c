/* toy.c: the networks of the lecture's toy experiment (Fleuret, "13.2
 * Attention mechanisms"): a 1-D convolutional network, and the same with a
 * self-attention layer in its middle. */
#include <math.h>
#include <stdio.h>
#include "core/internal.h"

/* y = softmax(Q^T K) V^T, transposed back: Q, K (N,key,T), V (N,out,T). */
static qkv_status toy_attention_forward(qkv_ctx *c, qkv_module *mod, qkv_tensor *x, qkv_tensor **y)
{
    qkv_toy_attention *m = (qkv_toy_attention *)mod;
    qkv_nn_conv1d *conv[3] = {&m->conv_Q, &m->conv_K, &m->conv_V};
    qkv_tensor *t[3]; // each (N,T,C): Q^T, K^T, V^T
    for (int i = 0; i < 3; i++) {
        qkv_tensor *z; // (N,C,T)
        QKV_TRY(qkv_module_forward(c, &conv[i]->base, x, &z));
        if (z->ndim != 3)
            return qkv_fail(QKV_ERR_SHAPE, "toy_attention: x must be batched (N,C,T)");
        QKV_TRY(qkv_permute(c, z, (int[]){0, 2, 1}, &t[i]));
    }
    qkv_sdpa_opts o = qkv_sdpa_opts_default();
    o.scale = m->scaled ? 1.0f / sqrtf((float)m->key_dim) : 1.0f;
    qkv_tensor *a; // (N,T,out)
    QKV_TRY(qkv_sdpa(c, t[0], t[1], t[2], &o, &a, NULL));
    return qkv_permute(c, a, (int[]){0, 2, 1}, y);
}

static qkv_status toy_attention_init_body(qkv_toy_attention *m, int64_t in_dim, int64_t out_dim,
                                          int64_t key_dim, int scaled, qkv_params *p, const char *prefix,
                                          qkv_rng *rng)
{
    QKV_NEED(m, "toy_attention_init", "m");
    *m = (qkv_toy_attention){0};
    if (!prefix) prefix = "";
    char name[256];
    const char *nm[3] = {"conv_Q.", "conv_K.", "conv_V."};
    qkv_nn_conv1d *conv[3] = {&m->conv_Q, &m->conv_K, &m->conv_V};
    for (int i = 0; i < 3; i++) {
        qkv_conv1d_opts o = qkv_conv1d_opts_default(in_dim, i == 2 ? out_dim : key_dim, 1);
        o.bias = 0;
        snprintf(name, sizeof name, "%s%s", prefix, nm[i]);
        QKV_TRY(qkv_nn_conv1d_init(conv[i], &o, p, name, rng));
    }
    m->key_dim = key_dim;
    m->scaled = scaled;
    m->base.type = "SelfAttentionLayer";
    m->base.forward = toy_attention_forward;
    return QKV_OK;
}

qkv_status qkv_toy_attention_init(qkv_toy_attention *m, int64_t in_dim, int64_t out_dim,
                                  int64_t key_dim, int scaled, qkv_params *p, const char *prefix,
                                  qkv_rng *rng)
{
    return qkv_fail_in("toy_attention_init", toy_attention_init_body(m, in_dim, out_dim, key_dim, scaled, p, prefix, rng));
}

static qkv_status toy_net_init_body(qkv_toy_net *net, qkv_toy_model model, int64_t in_channels,
                                    int64_t channels, int64_t kernel, int scaled, qkv_params *p,
                                    qkv_rng *rng)
{
    QKV_NEED(net, "toy_net_init", "net");
    *net = (qkv_toy_net){0};
    if (model != QKV_TOY_CONV && model != QKV_TOY_ATTENTION)
        return qkv_fail(QKV_ERR_ARG, "toy_net_init: model %d is not a qkv_toy_model", (int)model);
    if (in_channels <= 0 || channels <= 0 || kernel <= 0 || kernel % 2 == 0)
        return qkv_fail(QKV_ERR_ARG, "toy_net_init: in_channels %lld and channels %lld must be "
                        "positive, kernel %lld positive and odd", (long long)in_channels,
                        (long long)channels, (long long)kernel);
    QKV_TRY(qkv_sequential_init(&net->seq));
    /* Layer i of the Sequential: a convolution, a ReLU, or the attention. */
    int nconv = 0, nrelu = 0, idx = 0;
    char prefix[32];
    const char *plan = model == QKV_TOY_CONV ? "crcrcrcrc" : "crcracrc";
    for (const char *k = plan; *k; k++, idx++) {
        snprintf(prefix, sizeof prefix, "%d.", idx);
        qkv_module *mod;
        if (*k == 'c') {
            int first = nconv == 0, last = k[1] == '\0';
            qkv_conv1d_opts o = qkv_conv1d_opts_default(first ? in_channels : channels,
                                                        last ? 1 : channels, kernel);
            o.padding = kernel / 2;
            QKV_TRY(qkv_nn_conv1d_init(&net->conv[nconv], &o, p, prefix, rng));
            mod = &net->conv[nconv++].base;
        } else if (*k == 'r') {
            QKV_TRY(qkv_nn_relu_init(&net->relu[nrelu]));
            mod = &net->relu[nrelu++].base;
        } else {
            QKV_TRY(qkv_toy_attention_init(&net->attn, channels, channels, channels, scaled, p,
                                           prefix, rng));
            mod = &net->attn.base;
        }
        QKV_TRY(qkv_sequential_add(&net->seq, mod));
    }
    return QKV_OK;
}

qkv_status qkv_toy_net_init(qkv_toy_net *net, qkv_toy_model model, int64_t in_channels,
                            int64_t channels, int64_t kernel, int scaled, qkv_params *p,
                            qkv_rng *rng)
{
    return qkv_fail_in("toy_net_init", toy_net_init_body(net, model, in_channels, channels, kernel, scaled, p, rng));
}

void qkv_toy_net_free(qkv_toy_net *net)
{
    if (net) qkv_sequential_free(&net->seq);
}
