/* conv2d.c: F.conv2d with groups = 1 and zero padding, and the kernels
 * F.conv1d shares (conv1d.c maps its 1-D geometry onto this one, H = 1).
 *
 * y[n, o, i, j] = b[o] + sum_{c,p,q} w[o, c, p, q] * x[n, c, ih(i, p), iw(j, q)],
 * ih(i, p) = i*stride_h - padding_h + p*dilation_h (likewise iw), x taken
 * as 0 outside [0,H) x [0,W).
 *
 * Fast path, one sample at a time: im2col unrolls sample n into cols_n
 * (Cin*kh*kw, Hout*Wout), a buffer per thread that stays in cache, and
 * one qkv_gemm gives y[n] = W cols_n with W viewed as (Cout, Cin*kh*kw),
 * written in place (y[n] is (Cout, Hout*Wout) already); a 1x1 kernel with
 * stride 1 and no padding skips the unrolling. The samples run on
 * OpenMP's threads when there are enough of them, else in turn with each
 * product split over the threads. The backward recomputes cols_n. A first
 * version unrolled the whole batch into one (CK, N*HWo) matrix for one
 * large product, then transposed the result: at the default CNN's second
 * layer (batch 64, 32 -> 64 channels, 14x14) it moved 3 such 14 MB
 * matrices through memory per step and took 1.8x the CPU time of this one
 * on one thread (forward 12.5 vs 6.9 ms, backward 27 vs 15 ms, clock() of
 * a single-threaded process, alternating runs on the shared machine). Under qkv_reference() plain loops (double accumulation) do the
 * forward and the backward. */
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include "nn/conv_internal.h"
#include "kernels/gemm_bf16.h"
#include "kernels/rows.h"

typedef struct {
    qkv_tensor *x, *w, *b, *y;
    qkv_conv_geom g;
} conv_saved;

/* Input row (axis 0) or column (axis 1) of output index t, tap k. */
static inline int64_t conv_pos(const qkv_conv_geom *g, int axis, int64_t t, int64_t k)
{
    return t * g->stride[axis] - g->padding[axis] + k * g->dilation[axis];
}

/* The output columns j in [*lo, *hi) whose tap q lands inside [0, W). */
static void valid_cols(const qkv_conv_geom *g, int64_t q, int64_t *lo, int64_t *hi)
{
    int64_t off = q * g->dilation[1] - g->padding[1], s = g->stride[1]; /* iw = j*s + off */
    int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t b = g->W - 1 - off < 0 ? 0 : (g->W - 1 - off) / s + 1;
    *lo = a < g->Wout ? a : g->Wout;
    *hi = b < g->Wout ? b : g->Wout;
    if (*hi < *lo) *hi = *lo;
}

/* cols[(c*kh + p)*kw + q, i*Wout + j] = x[c, ih(i, p), iw(j, q)] or 0 in
 * the padding; rows of cols are ld floats apart. */
static void im2col(const qkv_conv_geom *g, const float *xn, float *cols, int64_t ld)
{
    // xn is (Cin,H,W), cols is (Cin*kh*kw,Hout*Wout) within rows of ld
    for (int64_t c = 0; c < g->Cin; c++)
        for (int64_t p = 0; p < g->kh; p++)
            for (int64_t q = 0; q < g->kw; q++) {
                float *row = cols + ((c * g->kh + p) * g->kw + q) * ld;
                int64_t lo, hi, s = g->stride[1], off = q * g->dilation[1] - g->padding[1];
                valid_cols(g, q, &lo, &hi);
                for (int64_t i = 0; i < g->Hout; i++) {
                    float *dst = row + i * g->Wout;
                    int64_t ih = conv_pos(g, 0, i, p);
                    if (ih < 0 || ih >= g->H) {
                        memset(dst, 0, (size_t)g->Wout * sizeof(float));
                        continue;
                    }
                    int64_t base = (c * g->H + ih) * g->W + off; /* x[c, ih, iw(j, q)] = xn[base + j*s] */
                    for (int64_t j = 0; j < lo; j++) dst[j] = 0.0f;
                    if (s == 1) memcpy(dst + lo, xn + base + lo, (size_t)(hi - lo) * sizeof(float));
                    else
                        for (int64_t j = lo; j < hi; j++) dst[j] = xn[base + j * s];
                    for (int64_t j = hi; j < g->Wout; j++) dst[j] = 0.0f;
                }
            }
}

/* The adjoint of im2col: dx[c, ih(i, p), iw(j, q)] += dcols[(c*kh + p)*kw + q, i*Wout + j]. */
static void col2im_add(const qkv_conv_geom *g, const float *dcols, int64_t ld, float *dxn)
{
    // dcols is (Cin*kh*kw,Hout*Wout) within rows of ld, dxn is (Cin,H,W)
    for (int64_t c = 0; c < g->Cin; c++)
        for (int64_t p = 0; p < g->kh; p++)
            for (int64_t q = 0; q < g->kw; q++) {
                const float *row = dcols + ((c * g->kh + p) * g->kw + q) * ld;
                int64_t lo, hi, s = g->stride[1], off = q * g->dilation[1] - g->padding[1];
                valid_cols(g, q, &lo, &hi);
                for (int64_t i = 0; i < g->Hout; i++) {
                    int64_t ih = conv_pos(g, 0, i, p);
                    if (ih < 0 || ih >= g->H) continue;
                    const float *src = row + i * g->Wout;
                    int64_t base = (c * g->H + ih) * g->W + off; /* as in im2col */
                    for (int64_t j = lo; j < hi; j++) dxn[base + j * s] += src[j];
                }
            }
}

/* ---- reference: plain loops ------------------------------------------------ */

#define XAT(n, c, h, w_) x[(((n) * g->Cin + (c)) * g->H + (h)) * g->W + (w_)]
#define WAT(o, c, p, q) w[(((o) * g->Cin + (c)) * g->kh + (p)) * g->kw + (q)]
#define YAT(a, n, o, i, j) a[(((n) * g->Cout + (o)) * g->Hout + (i)) * g->Wout + (j)]

static void conv_forward_ref(const qkv_conv_geom *g, const float *x, const float *w, const float *b,
                             float *y)
{
    // x is (N,Cin,H,W), w is (Cout,Cin,kh,kw), b is (Cout) or NULL, y is (N,Cout,Hout,Wout)
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t o = 0; o < g->Cout; o++)
            for (int64_t i = 0; i < g->Hout; i++)
                for (int64_t j = 0; j < g->Wout; j++) {
                    double acc = b ? b[o] : 0.0;
                    for (int64_t c = 0; c < g->Cin; c++)
                        for (int64_t p = 0; p < g->kh; p++)
                            for (int64_t q = 0; q < g->kw; q++) {
                                int64_t ih = conv_pos(g, 0, i, p), iw = conv_pos(g, 1, j, q);
                                if (ih >= 0 && ih < g->H && iw >= 0 && iw < g->W)
                                    acc += (double)WAT(o, c, p, q) * XAT(n, c, ih, iw);
                            }
                    YAT(y, n, o, i, j) = (float)acc;
                }
}

/* The output index t with input index in = pos(t, k) on axis, or -1. */
static int64_t conv_out_at(const qkv_conv_geom *g, int axis, int64_t in, int64_t k)
{
    int64_t num = in + g->padding[axis] - k * g->dilation[axis]; /* = t * stride */
    if (num < 0 || num % g->stride[axis]) return -1;
    int64_t t = num / g->stride[axis];
    return t < (axis ? g->Wout : g->Hout) ? t : -1;
}

/* dx, dw, db (any may be NULL) += the gradients of conv_forward_ref given dy. */
static void conv_backward_ref(const qkv_conv_geom *g, const float *x, const float *w, const float *dy,
                              float *dx, float *dw, float *db)
{
    // dy is (N,Cout,Hout,Wout); dx like x, dw like w, db (Cout)
    for (int64_t o = 0; o < g->Cout; o++) {
        if (db) {
            double acc = 0;
            for (int64_t n = 0; n < g->N; n++)
                for (int64_t i = 0; i < g->Hout; i++)
                    for (int64_t j = 0; j < g->Wout; j++) acc += YAT(dy, n, o, i, j);
            db[o] += (float)acc;
        }
        for (int64_t c = 0; c < g->Cin && dw; c++)
            for (int64_t p = 0; p < g->kh; p++)
                for (int64_t q = 0; q < g->kw; q++) {
                    double acc = 0;
                    for (int64_t n = 0; n < g->N; n++)
                        for (int64_t i = 0; i < g->Hout; i++)
                            for (int64_t j = 0; j < g->Wout; j++) {
                                int64_t ih = conv_pos(g, 0, i, p), iw = conv_pos(g, 1, j, q);
                                if (ih >= 0 && ih < g->H && iw >= 0 && iw < g->W)
                                    acc += (double)YAT(dy, n, o, i, j) * XAT(n, c, ih, iw);
                            }
                    dw[(((o * g->Cin + c) * g->kh) + p) * g->kw + q] += (float)acc;
                }
    }
    if (!dx) return;
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t c = 0; c < g->Cin; c++)
            for (int64_t ih = 0; ih < g->H; ih++)
                for (int64_t iw = 0; iw < g->W; iw++) {
                    double acc = 0; /* every (o, i, j, p, q) whose tap lands on (ih, iw) */
                    for (int64_t p = 0; p < g->kh; p++) {
                        int64_t i = conv_out_at(g, 0, ih, p);
                        for (int64_t q = 0; q < g->kw && i >= 0; q++) {
                            int64_t j = conv_out_at(g, 1, iw, q);
                            for (int64_t o = 0; o < g->Cout && j >= 0; o++)
                                acc += (double)YAT(dy, n, o, i, j) * WAT(o, c, p, q);
                        }
                    }
                    dx[(((n * g->Cin + c) * g->H) + ih) * g->W + iw] += (float)acc;
                }
}

#undef XAT
#undef WAT
#undef YAT

/* ---- fast: im2col + gemm, one sample at a time ---------------------------------- */

/* Samples per partial weight gradient: dW is summed within fixed groups of
 * samples, then over the groups in order, so it does not depend on the
 * thread count. */
enum { CONV_GROUP = 4 };

/* Whether a loop of n items runs on OpenMP's threads (each item's products
 * then run whole on one thread); otherwise the items run in turn and
 * qkv_gemm splits each product over the threads. */
static int conv_par(int64_t n) { return omp_get_max_threads() > 1 && n >= omp_get_max_threads(); }

/* A 1x1 kernel with stride 1 and no padding reads x[n] (Cin, H*W) as it
 * is: cols_n = x[n], no unrolling. */
static int conv_is_pointwise(const qkv_conv_geom *g)
{
    return g->kh == 1 && g->kw == 1 && g->stride[0] == 1 && g->stride[1] == 1 && g->padding[0] == 0 &&
           g->padding[1] == 0;
}

/* y[n] = W cols_n (+ b): cols_n (CK, HWo) is sample n unrolled into its
 * thread's buffer, small enough to stay in cache, and the product lands in
 * y[n] (Cout, HWo) directly. */
static qkv_status conv_forward_fast(qkv_ctx *c, const qkv_conv_geom *g, const float *x,
                                    const float *w, const float *b, float *y)
{
    int64_t CK = g->Cin * g->kh * g->kw, HWo = g->Hout * g->Wout, HW = g->H * g->W;
    int par = conv_par(g->N), nbuf = par ? omp_get_max_threads() : 1, pw = conv_is_pointwise(g);
    qkv_arena_mark mark = qkv_arena_get_mark(qkv_ctx_arena(c)); /* cols: scratch */
    float *cols = qkv_ctx_alloc(c, (size_t)((pw ? 1 : nbuf) * CK * HWo) * sizeof(float)); // (threads,CK,HWo)
    if (!cols) return QKV_ERR_NOMEM;
    QKV_PAR_FOR_WITH(par, schedule(static),
        for (int64_t n = 0; n < g->N; n++) {
            const float *xn = x + n * g->Cin * HW; // (Cin,H,W)
            float *cn = cols + omp_get_thread_num() * CK * HWo; // (CK,HWo)
            float *yn = y + n * g->Cout * HWo;                   // (Cout,HWo)
            if (pw) cn = (float *)xn;
            else im2col(g, xn, cn, HWo);
            for (int64_t o = 0; b && o < g->Cout; o++)
                for (int64_t i = 0; i < HWo; i++) yn[o * HWo + i] = b[o];
            qkv_gemm_ctx(c, 0, 0, g->Cout, HWo, CK, 1.0f, w, CK, cn, HWo, b ? 1.0f : 0.0f, yn, HWo);
        });
    qkv_arena_release(qkv_ctx_arena(c), mark);
    return QKV_OK;
}

/* Per sample n: dW_group += dy[n] cols_n^T (cols recomputed), and
 * dcols_n = W^T dy[n] scattered back onto dx[n] (col2im). */
static qkv_status conv_backward_fast(qkv_ctx *c, const qkv_conv_geom *g, const float *x,
                                     const float *w, const float *dy, float *dx, float *dw, float *db)
{
    int64_t CK = g->Cin * g->kh * g->kw, HWo = g->Hout * g->Wout, HW = g->H * g->W;
    int64_t ngrp = (g->N + CONV_GROUP - 1) / CONV_GROUP, WK = g->Cout * CK;
    int par = conv_par(ngrp), nbuf = par ? omp_get_max_threads() : 1, pw = conv_is_pointwise(g);
    if (db) /* db[o] += sum_{n,i} dy[n, o, i], in sample order */
        QKV_PAR_FOR(g->N * g->Cout * HWo >= QKV_PAR_MIN,
            for (int64_t o = 0; o < g->Cout; o++) {
                double acc = 0;
                for (int64_t n = 0; n < g->N; n++) acc += qkv_sum_f64(dy + (n * g->Cout + o) * HWo, HWo);
                db[o] += (float)acc;
            });
    if (!dw && !dx) return QKV_OK;
    /* Everything below is scratch: the gradients were allocated before. */
    qkv_arena_mark mark = qkv_arena_get_mark(qkv_ctx_arena(c));
    float *cols = qkv_ctx_alloc(c, (size_t)((pw ? 1 : nbuf) * CK * HWo) * sizeof(float)); // (threads,CK,HWo)
    float *dwp = dw ? qkv_ctx_alloc(c, (size_t)(ngrp * WK) * sizeof(float)) : NULL; // (groups,Cout,CK)
    if (!cols || (dw && !dwp)) return QKV_ERR_NOMEM;
    QKV_PAR_FOR_WITH(par, schedule(static),
        for (int64_t grp = 0; grp < ngrp; grp++) {
            float *cn = cols + omp_get_thread_num() * CK * HWo; // (CK,HWo): cols_n, then dcols_n
            for (int64_t n = grp * CONV_GROUP; n < g->N && n < (grp + 1) * CONV_GROUP; n++) {
                const float *dyn = dy + n * g->Cout * HWo; // (Cout,HWo)
                const float *xn = x + n * g->Cin * HW;     // (Cin,H,W)
                float *dxn = dx ? dx + n * g->Cin * HW : NULL;
                if (dw) {
                    if (!pw) im2col(g, xn, cn, HWo);
                    qkv_gemm_ctx(c, 0, 1, g->Cout, CK, HWo, 1.0f, dyn, HWo, pw ? xn : cn, HWo, 1.0f, dwp + grp * WK,
                                 CK);
                }
                if (dx && pw) { /* dcols_n is dx[n]'s own increment */
                    qkv_gemm_ctx(c, 1, 0, CK, HWo, g->Cout, 1.0f, w, CK, dyn, HWo, 1.0f, dxn, HWo);
                } else if (dx) {
                    qkv_gemm_ctx(c, 1, 0, CK, HWo, g->Cout, 1.0f, w, CK, dyn, HWo, 0.0f, cn, HWo);
                    col2im_add(g, cn, HWo, dxn);
                }
            }
        });
    if (dw)
        QKV_PAR_FOR(ngrp * WK >= QKV_PAR_MIN,
            for (int64_t j = 0; j < WK; j++) {
                float acc = 0.0f;
                for (int64_t grp = 0; grp < ngrp; grp++) acc += dwp[grp * WK + j];
                dw[j] += acc;
            });
    qkv_arena_release(qkv_ctx_arena(c), mark);
    return QKV_OK;
}

/* Differentiates y = conv(x, w, b): dx += conv_transpose(dy, w),
 * dw[o, c, p, q] += sum_{n,i,j} dy[n, o, i, j] x[n, c, ih(i, p), iw(j, q)],
 * db[o] += sum_{n,i,j} dy[n, o, i, j]. */
static qkv_status conv_backward(qkv_ctx *c, void *p)
{
    conv_saved *s = p;
    const float *dy = s->y->grad; // (N,Cout,Hout,Wout)
    if (!dy) return QKV_OK;
    qkv_arena *a = qkv_ctx_arena(c);
    int gx = s->x->requires_grad, gw = s->w->requires_grad, gb = s->b && s->b->requires_grad;
    float *dx = gx ? qkv_tensor_grad(a, s->x) : NULL; // (N,Cin,H,W)
    float *dw = gw ? qkv_tensor_grad(a, s->w) : NULL; // (Cout,Cin,kh,kw)
    float *db = gb ? qkv_tensor_grad(a, s->b) : NULL; // (Cout)
    if ((gx && !dx) || (gw && !dw) || (gb && !db)) return QKV_ERR_NOMEM;
    if (qkv_reference()) {
        conv_backward_ref(&s->g, s->x->data, s->w->data, dy, dx, dw, db);
        return QKV_OK;
    }
    return conv_backward_fast(c, &s->g, s->x->data, s->w->data, dy, dx, dw, db);
}

qkv_status qkv_conv_apply(qkv_ctx *c, const qkv_conv_geom *g, qkv_tensor *x, qkv_tensor *w,
                          qkv_tensor *b, int ndim, const int64_t *shape, qkv_tensor **y)
{
    qkv_tensor *in[3] = {x, w, b};
    int rec = qkv_ctx_recording(c, in, 3);
    QKV_TRY(qkv_ctx_tensor(c, ndim, shape, rec, y));
    if (qkv_reference())
        conv_forward_ref(g, x->data, w->data, b ? b->data : NULL, (*y)->data);
    else
        QKV_TRY(conv_forward_fast(c, g, x->data, w->data, b ? b->data : NULL, (*y)->data));
    if (!rec) return QKV_OK;
    conv_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (conv_saved){x, w, b, *y, *g};
    return qkv_ctx_record(c, conv_backward, s);
}

/* ---- F.conv2d: argument checks ------------------------------------------------ */

/* One of stride/padding/dilation: NULL gives def on both axes; values must
 * be >= min and not absurdly large. */
static qkv_status pair_arg(const int64_t *v, int64_t def, int64_t min, const char *what, int64_t out[2])
{
    const int64_t big = (int64_t)1 << 40; /* keeps the size arithmetic far from overflow */
    out[0] = v ? v[0] : def;
    out[1] = v ? v[1] : def;
    for (int a = 0; a < 2; a++)
        if (out[a] < min || out[a] > big)
            return qkv_fail(QKV_ERR_ARG, "conv2d: %s (%lld,%lld) must be >= %lld", what,
                            (long long)out[0], (long long)out[1], (long long)min);
    return QKV_OK;
}

/* Checks the arguments and fills g. */
static qkv_status conv2d_check(const qkv_tensor *x, const qkv_tensor *w, const qkv_tensor *b,
                               const int64_t *stride, const int64_t *padding,
                               const int64_t *dilation, qkv_conv_geom *g)
{
    QKV_NEED_F32(x, "conv2d", "x");
    QKV_NEED_F32(w, "conv2d", "weight");
    if (b) QKV_NEED_F32(b, "conv2d", "bias");
    char bx[64], bw[64], bb[64];
    if (x->ndim != 4 && x->ndim != 3)
        return qkv_fail(QKV_ERR_SHAPE, "conv2d: x %s has %d dims, expected (N,Cin,H,W) or (Cin,H,W)",
                        qkv_shape_str(x, bx, sizeof bx), x->ndim);
    if (w->ndim != 4)
        return qkv_fail(QKV_ERR_SHAPE, "conv2d: weight %s has %d dims, expected 4 "
                        "(out_channels,in_channels,kH,kW)", qkv_shape_str(w, bw, sizeof bw), w->ndim);
    int b4 = x->ndim == 4;
    int64_t Cin = x->shape[b4], H = x->shape[b4 + 1], W = x->shape[b4 + 2];
    if (w->shape[1] != Cin)
        return qkv_fail(QKV_ERR_SHAPE, "conv2d: weight %s in_channels %lld does not match x %s channels %lld",
                        qkv_shape_str(w, bw, sizeof bw), (long long)w->shape[1],
                        qkv_shape_str(x, bx, sizeof bx), (long long)Cin);
    if (w->shape[0] < 1 || w->shape[2] < 1 || w->shape[3] < 1)
        return qkv_fail(QKV_ERR_SHAPE, "conv2d: weight %s has a zero size", qkv_shape_str(w, bw, sizeof bw));
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))
        return qkv_fail(QKV_ERR_SHAPE, "conv2d: bias %s does not match weight %s, expected (%lld,)",
                        qkv_shape_str(b, bb, sizeof bb), qkv_shape_str(w, bw, sizeof bw),
                        (long long)w->shape[0]);
    if ((b4 && x->shape[0] < 1) || Cin < 1 || H < 1 || W < 1)
        return qkv_fail(QKV_ERR_SHAPE, "conv2d: x %s has a zero size", qkv_shape_str(x, bx, sizeof bx));
    int64_t s[2], p[2], d[2], k[2] = {w->shape[2], w->shape[3]}, in[2] = {H, W}, out[2];
    QKV_TRY(pair_arg(stride, 1, 1, "stride", s));
    QKV_TRY(pair_arg(padding, 0, 0, "padding", p));
    QKV_TRY(pair_arg(dilation, 1, 1, "dilation", d));
    for (int a = 0; a < 2; a++) {
        int64_t span = d[a] * (k[a] - 1) + 1; /* the dilated kernel */
        if (in[a] + 2 * p[a] < span)
            return qkv_fail(QKV_ERR_SHAPE, "conv2d: x %s padded %s %lld (padding %lld) is smaller than "
                            "the kernel %lld with dilation %lld (%lld)", qkv_shape_str(x, bx, sizeof bx),
                            a ? "width" : "height", (long long)(in[a] + 2 * p[a]), (long long)p[a],
                            (long long)k[a], (long long)d[a], (long long)span);
        out[a] = qkv_conv_out_len(in[a], k[a], s[a], p[a], d[a]);
    }
    *g = (qkv_conv_geom){b4 ? x->shape[0] : 1, Cin, H, W, w->shape[0], k[0], k[1], out[0], out[1],
                         {s[0], s[1]}, {p[0], p[1]}, {d[0], d[1]}};
    return QKV_OK;
}

qkv_status qkv_conv2d(qkv_ctx *c, qkv_tensor *x, qkv_tensor *w, qkv_tensor *b, const int64_t *stride,
                      const int64_t *padding, const int64_t *dilation, qkv_tensor **y)
{
    QKV_NEED_OUT_CTX(y, c, "conv2d", "y");
    qkv_conv_geom g;
    QKV_TRY(conv2d_check(x, w, b, stride, padding, dilation, &g));
    int64_t shape[4] = {g.N, g.Cout, g.Hout, g.Wout};
    return qkv_conv_apply(c, &g, x, w, b, x->ndim, x->ndim == 4 ? shape : shape + 1, y);
}
