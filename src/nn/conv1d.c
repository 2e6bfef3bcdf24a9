/* conv1d.c: F.conv1d with groups = 1 and zero padding.
 *
 * y[n, o, t] = b[o] + sum_{c,k} w[o, c, k] * x[n, c, t*stride - padding + k*dilation]
 * (x taken as 0 outside [0, L)).
 *
 * A 1-D convolution is the 2-D one of conv2d.c with H = 1 and a kernel
 * of height 1: this file checks the arguments and maps the geometry; the
 * kernels (im2col + one qkv_gemm, plain loops under qkv_reference()) and
 * the tape op are conv2d.c's. */
#include <stdio.h>
#include "nn/conv_internal.h"

/* Checks the arguments and fills g. */
static qkv_status conv_check(const qkv_tensor *x, const qkv_tensor *w, const qkv_tensor *b,
                             int64_t stride, int64_t padding, int64_t dilation, qkv_conv_geom *g)
{
    QKV_NEED_F32(x, "conv1d", "x");
    QKV_NEED_F32(w, "conv1d", "weight");
    if (b) QKV_NEED_F32(b, "conv1d", "bias");
    char bx[64], bw[64], bb[64];
    if (x->ndim != 3 && x->ndim != 2)
        return qkv_fail(QKV_ERR_SHAPE, "conv1d: x %s has %d dims, expected (N,Cin,L) or (Cin,L)",
                        qkv_shape_str(x, bx, sizeof bx), x->ndim);
    if (w->ndim != 3)
        return qkv_fail(QKV_ERR_SHAPE, "conv1d: weight %s has %d dims, expected 3 "
                        "(out_channels,in_channels,kernel_size)", qkv_shape_str(w, bw, sizeof bw), w->ndim);
    int b3 = x->ndim == 3;
    int64_t Cin = x->shape[b3], L = x->shape[b3 + 1];
    if (w->shape[1] != Cin)
        return qkv_fail(QKV_ERR_SHAPE, "conv1d: weight %s in_channels %lld does not match x %s channels %lld",
                        qkv_shape_str(w, bw, sizeof bw), (long long)w->shape[1],
                        qkv_shape_str(x, bx, sizeof bx), (long long)Cin);
    if (w->shape[2] < 1)
        return qkv_fail(QKV_ERR_SHAPE, "conv1d: weight %s has kernel_size 0", qkv_shape_str(w, bw, sizeof bw));
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))
        return qkv_fail(QKV_ERR_SHAPE, "conv1d: bias %s does not match weight %s, expected (%lld,)",
                        qkv_shape_str(b, bb, sizeof bb), qkv_shape_str(w, bw, sizeof bw),
                        (long long)w->shape[0]);
    const int64_t big = (int64_t)1 << 40; /* keeps the length arithmetic far from overflow */
    if (stride < 1 || stride > big)
        return qkv_fail(QKV_ERR_ARG, "conv1d: stride %lld must be >= 1", (long long)stride);
    if (padding < 0 || padding > big)
        return qkv_fail(QKV_ERR_ARG, "conv1d: padding %lld must be >= 0", (long long)padding);
    if (dilation < 1 || dilation > big)
        return qkv_fail(QKV_ERR_ARG, "conv1d: dilation %lld must be >= 1", (long long)dilation);
    int64_t K = w->shape[2], span = dilation * (K - 1) + 1; /* the dilated kernel */
    if (L + 2 * padding < span)
        return qkv_fail(QKV_ERR_SHAPE, "conv1d: x %s padded length %lld (padding %lld) is shorter than "
                        "the kernel %lld with dilation %lld (%lld)", qkv_shape_str(x, bx, sizeof bx),
                        (long long)(L + 2 * padding), (long long)padding, (long long)K,
                        (long long)dilation, (long long)span);
    /* (N,Cin,L) as (N,Cin,1,L), the kernel as (Cout,Cin,1,K) */
    *g = (qkv_conv_geom){b3 ? x->shape[0] : 1, Cin, 1, L, w->shape[0], 1, K, 1,
                         qkv_conv_out_len(L, K, stride, padding, dilation),
                         {1, stride}, {0, padding}, {1, dilation}};
    return QKV_OK;
}

qkv_status qkv_conv1d(qkv_ctx *c, qkv_tensor *x, qkv_tensor *w, qkv_tensor *b, int64_t stride,
                      int64_t padding, int64_t dilation, qkv_tensor **y)
{
    QKV_NEED_OUT_CTX(y, c, "conv1d", "y");
    qkv_conv_geom g;
    QKV_TRY(conv_check(x, w, b, stride, padding, dilation, &g));
    int64_t shape3[3] = {g.N, g.Cout, g.Wout};
    return qkv_conv_apply(c, &g, x, w, b, x->ndim, x->ndim == 3 ? shape3 : shape3 + 1, y);
}
