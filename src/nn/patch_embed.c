/* patch_embed.c: a ViT's patch embedding, Conv2d(C, D, kernel_size=P,
 * stride=P) computed as a linear map on flattened patches.
 *
 * With stride equal to the kernel the patches do not overlap, so the
 * convolution is one GEMM: gather x into patches (N, gh*gw, C*ph*pw) (the
 * walk of rearrange's "n c (h p1) (w p2) -> n (h w) (c p1 p2)", cropping
 * what does not fill a patch), then y = patches w^T + b with w (D,C,ph,pw)
 * viewed as (D, C*ph*pw): the (c, u, v) order of a flattened patch is
 * the order of w's last three dims, so PyTorch's weights load as they are.
 * The gather and qkv_linear are tape ops, so the backward comes from them
 * (dw = dy^T patches, dpatches = dy w scattered back into x). */
#include <math.h>
#include <stdio.h>
#include "nn/gather.h"
#include "nn/nn_check.h"

#define FN "patch_embed"

qkv_status qkv_patch_embed(qkv_ctx *c, qkv_tensor *x, qkv_tensor *w, qkv_tensor *b,
                           qkv_tensor **y)
{
    QKV_NEED_OUT_CTX(y, c, FN, "y");
    QKV_NEED_F32(x, FN, "x");
    QKV_NEED_F32(w, FN, "w");
    if (b) QKV_NEED_F32(b, FN, "b");
    char bx[64], bw[64], bb[64];
    if (x->ndim != 4)
        return qkv_fail(QKV_ERR_SHAPE, FN ": x %s has %d dims, expected 4 (N,C,H,W)",
                        qkv_shape_str(x, bx, sizeof bx), x->ndim);
    if (w->ndim != 4 || w->shape[1] != x->shape[1] || w->shape[0] < 1 || w->shape[2] < 1 || w->shape[3] < 1)
        return qkv_fail(QKV_ERR_SHAPE, FN ": w %s, expected (D,C,ph,pw) with C = %lld (x %s)",
                        qkv_shape_str(w, bw, sizeof bw), (long long)x->shape[1],
                        qkv_shape_str(x, bx, sizeof bx));
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))
        return qkv_fail(QKV_ERR_SHAPE, FN ": b %s, expected (%lld) (D of w %s)",
                        qkv_shape_str(b, bb, sizeof bb), (long long)w->shape[0],
                        qkv_shape_str(w, bw, sizeof bw));
    int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    int64_t D = w->shape[0], ph = w->shape[2], pw = w->shape[3];
    if (H < ph || W < pw)
        return qkv_fail(QKV_ERR_SHAPE, FN ": image %lldx%lld is smaller than a %lldx%lld patch",
                        (long long)H, (long long)W, (long long)ph, (long long)pw);
    int64_t gh = H / ph, gw = W / pw;
    // patches[n, i*gw + j, (c*ph + u)*pw + v] = x[n, c, i*ph + u, j*pw + v]
    qkv_gather_map m = {6, {N, gh, gw, C, ph, pw},
                        {C * H * W, ph * W, pw, H * W, W, 1}};
    int64_t pshape[3] = {N, gh * gw, C * ph * pw}, wshape[2] = {D, C * ph * pw};
    qkv_tensor *patches, *w2;
    QKV_TRY(qkv_gather(c, FN, x, &m, 3, pshape, &patches)); // (N, gh*gw, C*ph*pw)
    QKV_TRY(qkv_tensor_view(qkv_ctx_arena(c), w, 2, wshape, &w2)); // (D, C*ph*pw)
    return qkv_linear(c, patches, w2, b, y);                       // (N, gh*gw, D)
}

static qkv_status patch_embed_module_forward(qkv_ctx *c, qkv_module *base, qkv_tensor *x,
                                             qkv_tensor **y)
{
    qkv_nn_patch_embed *m = (qkv_nn_patch_embed *)base;
    return qkv_patch_embed(c, x, m->weight, m->bias, y);
}

static qkv_status nn_patch_embed_init_body(qkv_nn_patch_embed *m, int64_t in_channels, int64_t embed_dim,
                                           int64_t patch, qkv_params *p, const char *prefix,
                                           qkv_rng *rng)
{
    const char *fn = "nn_patch_embed_init";
    QKV_TRY(qkv_nn_init_args(fn, m, p, rng, 1));
    if (in_channels < 1 || embed_dim < 1 || patch < 1)
        return qkv_fail(QKV_ERR_ARG, "%s: in_channels %lld, embed_dim %lld, patch %lld: each must be >= 1",
                        fn, (long long)in_channels, (long long)embed_dim, (long long)patch);
    int64_t ws[4] = {embed_dim, in_channels, patch, patch}, bs[1] = {embed_dim};
    qkv_tensor *w, *b;
    QKV_TRY(qkv_params_add(p, prefix, "weight", 4, ws, &w));
    QKV_TRY(qkv_params_add(p, prefix, "bias", 1, bs, &b));
    QKV_TRY(qkv_init_linear_default(rng, w));
    /* Conv2d's bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = C*P*P. */
    float bound = (float)(1.0 / sqrt((double)(in_channels * patch * patch)));
    QKV_TRY(qkv_init_uniform(rng, b, -bound, bound));
    m->base.type = "PatchEmbed";
    m->base.forward = patch_embed_module_forward;
    m->in_channels = in_channels, m->embed_dim = embed_dim, m->patch = patch;
    m->weight = w, m->bias = b;
    return QKV_OK;
}

qkv_status qkv_nn_patch_embed_init(qkv_nn_patch_embed *m, int64_t in_channels, int64_t embed_dim,
                                   int64_t patch, qkv_params *p, const char *prefix,
                                   qkv_rng *rng)
{
    return qkv_fail_in("nn_patch_embed_init", nn_patch_embed_init_body(m, in_channels, embed_dim, patch, p, prefix, rng));
}
