/* pool.c: F.max_pool2d with PyTorch's CPU semantics.
 *
 * y[n, c, i, j] = max over the window rows ih = i*stride_h - padding_h +
 * p*dilation_h (p < kH) inside [0,H), likewise columns; the padding never
 * wins (it is -inf). The scan is row-major and keeps the first maximum
 * (val > max), except that a NaN always takes over, so the argmax is the
 * one PyTorch's cpu_max_pool reports. The forward keeps the argmax of every
 * output when recording; the backward adds dy there.
 *
 * One kernel: the op reads each input a few times and does no arithmetic,
 * so a separate "fast" version would gain nothing; it runs over the N*C
 * planes in parallel. */
#include <math.h>
#include <stdio.h>
#include "nn/nn_check.h"

typedef struct {
    int64_t planes, H, W, Hout, Wout;
    int64_t k[2], s[2], p[2], d[2];
} pool_geom;

typedef struct {
    qkv_tensor *x, *y;
    int64_t *arg; // (planes,Hout,Wout): flat index in the plane (H*W)
    pool_geom g;
} pool_saved;

static void pool_forward(const pool_geom *g, const float *x, float *y, int64_t *arg)
{
    // x is (planes,H,W), y and arg are (planes,Hout,Wout)
    int64_t HWo = g->Hout * g->Wout;
    QKV_PAR_FOR(g->planes * HWo >= QKV_PAR_MIN / 8,
        for (int64_t pl = 0; pl < g->planes; pl++) {
            const float *xp = x + pl * g->H * g->W;
            for (int64_t i = 0; i < g->Hout; i++) {
                int64_t h0 = i * g->s[0] - g->p[0], h1 = h0 + (g->k[0] - 1) * g->d[0] + 1;
                if (h1 > g->H) h1 = g->H;
                while (h0 < 0) h0 += g->d[0];
                for (int64_t j = 0; j < g->Wout; j++) {
                    int64_t w0 = j * g->s[1] - g->p[1], w1 = w0 + (g->k[1] - 1) * g->d[1] + 1;
                    if (w1 > g->W) w1 = g->W;
                    while (w0 < 0) w0 += g->d[1];
                    /* Selects rather than branches (on real data a branch per
                     * element is a coin toss: with the branchy scan this loop
                     * took 18% of the default CNN's step, and the forward ran
                     * 22 instead of 15 ms, one thread, batch 64); a NaN is
                     * tracked apart and wins at the end, the last one, as in
                     * PyTorch's scan. */
                    int64_t best = h0 * g->W + w0, nan_at = -1;
                    float m = -INFINITY;
                    for (int64_t ih = h0; ih < h1; ih += g->d[0])
                        for (int64_t iw = w0; iw < w1; iw += g->d[1]) {
                            int64_t at = ih * g->W + iw;
                            float v = xp[at];
                            int gt = v > m;
                            m = gt ? v : m;
                            best = gt ? at : best;
                            nan_at = v != v ? at : nan_at;
                        }
                    if (nan_at >= 0) m = xp[best = nan_at];
                    y[pl * HWo + i * g->Wout + j] = m;
                    if (arg) arg[pl * HWo + i * g->Wout + j] = best;
                }
            }
        });
}

/* Differentiates y = max over the window: dx[argmax] += dy. */
static qkv_status pool_backward(qkv_ctx *c, void *p)
{
    pool_saved *s = p;
    const float *dy = s->y->grad; // (planes,Hout,Wout)
    if (!dy) return QKV_OK;
    float *dx = qkv_tensor_grad(qkv_ctx_arena(c), s->x); // (planes,H,W)
    if (!dx) return QKV_ERR_NOMEM;
    const pool_geom *g = &s->g;
    int64_t HWo = g->Hout * g->Wout, HW = g->H * g->W;
    QKV_PAR_FOR(g->planes * HWo >= QKV_PAR_MIN,
        for (int64_t pl = 0; pl < g->planes; pl++) /* windows overlap within a plane only */
            for (int64_t o = 0; o < HWo; o++) dx[pl * HW + s->arg[pl * HWo + o]] += dy[pl * HWo + o]);
    return QKV_OK;
}

/* PyTorch's pooling_output_shape: floor (or ceil) division, and with
 * ceil_mode the last window must start inside the input or left padding. */
static int64_t pool_out_len(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int ceil_mode)
{
    int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
    if (num < 0) return 0;
    int64_t out = num / s + 1;
    if (ceil_mode && (out - 1) * s >= in + p) out--;
    return out;
}

static qkv_status pool_check(const qkv_tensor *x, const int64_t *kernel, const int64_t *stride,
                             const int64_t *padding, const int64_t *dilation, int ceil_mode,
                             pool_geom *g)
{
    QKV_NEED_F32(x, "max_pool2d", "x");
    QKV_NEED(kernel, "max_pool2d", "kernel_size");
    char bx[64];
    if (x->ndim != 4 && x->ndim != 3)
        return qkv_fail(QKV_ERR_SHAPE, "max_pool2d: x %s has %d dims, expected (N,C,H,W) or (C,H,W)",
                        qkv_shape_str(x, bx, sizeof bx), x->ndim);
    int b4 = x->ndim == 4;
    int64_t H = x->shape[b4 + 1], W = x->shape[b4 + 2], in[2] = {H, W}, out[2];
    if (H < 1 || W < 1 || x->shape[b4] < 1 || (b4 && x->shape[0] < 1))
        return qkv_fail(QKV_ERR_SHAPE, "max_pool2d: x %s has a zero size", qkv_shape_str(x, bx, sizeof bx));
    const int64_t big = (int64_t)1 << 40;
    for (int a = 0; a < 2; a++) {
        int64_t k = kernel[a], s = stride ? stride[a] : k, p = padding ? padding[a] : 0;
        int64_t d = dilation ? dilation[a] : 1;
        if (k < 1 || k > big || s < 1 || s > big || d < 1 || d > big)
            return qkv_fail(QKV_ERR_ARG, "max_pool2d: kernel_size %lld, stride %lld, dilation %lld "
                            "(%s): each must be >= 1", (long long)k, (long long)s, (long long)d,
                            a ? "width" : "height");
        if (p < 0 || p > k / 2)
            return qkv_fail(QKV_ERR_ARG, "max_pool2d: padding %lld (%s) must be in [0, kernel_size / 2 "
                            "= %lld]", (long long)p, a ? "width" : "height", (long long)(k / 2));
        out[a] = pool_out_len(in[a], k, s, p, d, ceil_mode);
        if (out[a] < 1)
            return qkv_fail(QKV_ERR_SHAPE, "max_pool2d: x %s: the %s output would be %lld (kernel_size %lld, "
                            "padding %lld, dilation %lld): the window is larger than the padded input",
                            qkv_shape_str(x, bx, sizeof bx), a ? "width" : "height", (long long)out[a],
                            (long long)k, (long long)p, (long long)d);
        g->k[a] = k, g->s[a] = s, g->p[a] = p, g->d[a] = d;
    }
    g->planes = (b4 ? x->shape[0] : 1) * x->shape[b4];
    g->H = H, g->W = W, g->Hout = out[0], g->Wout = out[1];
    return QKV_OK;
}

qkv_status qkv_max_pool2d(qkv_ctx *c, qkv_tensor *x, const int64_t *kernel_size,
                          const int64_t *stride, const int64_t *padding, const int64_t *dilation,
                          int ceil_mode, qkv_tensor **y)
{
    QKV_NEED_OUT_CTX(y, c, "max_pool2d", "y");
    pool_geom g;
    QKV_TRY(pool_check(x, kernel_size, stride, padding, dilation, ceil_mode, &g));
    int64_t shape[4] = {x->ndim == 4 ? x->shape[0] : 1, x->shape[x->ndim - 3], g.Hout, g.Wout};
    int rec = qkv_ctx_recording(c, &x, 1);
    QKV_TRY(qkv_ctx_tensor(c, x->ndim, x->ndim == 4 ? shape : shape + 1, rec, y));
    int64_t *arg = NULL;
    if (rec && !(arg = qkv_ctx_alloc(c, (size_t)(g.planes * g.Hout * g.Wout) * sizeof *arg)))
        return QKV_ERR_NOMEM;
    pool_forward(&g, x->data, (*y)->data, arg);
    if (!rec) return QKV_OK;
    pool_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (pool_saved){x, *y, arg, g};
    return qkv_ctx_record(c, pool_backward, s);
}

/* ---- nn.MaxPool2d ---------------------------------------------------------------- */

static qkv_status maxpool2d_forward(qkv_ctx *c, qkv_module *base, qkv_tensor *x, qkv_tensor **y)
{
    qkv_nn_maxpool2d *m = (qkv_nn_maxpool2d *)base;
    int dflt = m->stride[0] == 0 && m->stride[1] == 0;
    return qkv_max_pool2d(c, x, m->kernel_size, dflt ? NULL : m->stride, m->padding, m->dilation,
                          m->ceil_mode, y);
}

qkv_status qkv_nn_maxpool2d_init(qkv_nn_maxpool2d *m, int64_t kernel_size, int64_t stride,
                                 int64_t padding)
{
    QKV_NEED(m, "nn_maxpool2d_init", "module");
    if (kernel_size < 1 || stride < 0 || padding < 0 || padding > kernel_size / 2)
        return qkv_fail(QKV_ERR_ARG, "nn_maxpool2d_init: kernel_size %lld, stride %lld, padding %lld: "
                        "expected kernel_size >= 1, stride >= 1 (0 for kernel_size), 0 <= padding <= "
                        "kernel_size / 2", (long long)kernel_size, (long long)stride, (long long)padding);
    *m = (qkv_nn_maxpool2d){{"MaxPool2d", maxpool2d_forward}, {kernel_size, kernel_size},
                            {stride, stride}, {padding, padding}, {1, 1}, 0};
    return QKV_OK;
}
