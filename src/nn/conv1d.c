/* conv1d.c: F.conv1d with groups = 1 and zero padding.
 *
 * y[n, o, t] = b[o] + sum_{c,k} w[o, c, k] * x[n, c, t*stride - padding + k*dilation]
 * (x taken as 0 outside [0, L)).
 *
 * Fast path: per sample, im2col unrolls x[n] into cols (Cin*K, Lout), then
 * y[n] = W cols with W viewed as (Cout, Cin*K), one qkv_gemm. The backward
 * recomputes cols rather than storing N copies of it. Under qkv_reference()
 * plain loops (double accumulation) do the forward and the backward. */
#include <stdio.h>
#include <string.h>
#include "nn/nn_check.h"
#include "kernels/gemm.h"

typedef struct {
    int64_t N, Cin, L, Cout, K, Lout, stride, padding, dilation;
} conv_geom;

typedef struct {
    qkv_tensor *x, *w, *b, *y;
    conv_geom g;
} conv_saved;

/* Position in x of output t, tap k (may fall in the padding). */
static inline int64_t conv_pos(const conv_geom *g, int64_t t, int64_t k)
{
    return t * g->stride - g->padding + k * g->dilation;
}

/* A 1x1 conv with stride 1 and no padding: cols is x[n] itself. */
static int conv_pointwise(const conv_geom *g) { return g->K == 1 && g->stride == 1 && g->padding == 0; }

/* cols[(c*K + k), t] = x[c, pos(t, k)] or 0 in the padding. */
static void im2col(const conv_geom *g, const float *xn, float *cols)
{
    // xn is (Cin,L), cols is (Cin*K,Lout)
    for (int64_t c = 0; c < g->Cin; c++)
        for (int64_t k = 0; k < g->K; k++) {
            float *row = cols + (c * g->K + k) * g->Lout;
            for (int64_t t = 0; t < g->Lout; t++) {
                int64_t pos = conv_pos(g, t, k);
                row[t] = pos >= 0 && pos < g->L ? xn[c * g->L + pos] : 0.0f;
            }
        }
}

/* The adjoint of im2col: dx[c, pos(t, k)] += dcols[(c*K + k), t]. */
static void col2im_add(const conv_geom *g, const float *dcols, float *dxn)
{
    // dcols is (Cin*K,Lout), dxn is (Cin,L)
    for (int64_t c = 0; c < g->Cin; c++)
        for (int64_t k = 0; k < g->K; k++) {
            const float *row = dcols + (c * g->K + k) * g->Lout;
            for (int64_t t = 0; t < g->Lout; t++) {
                int64_t pos = conv_pos(g, t, k);
                if (pos >= 0 && pos < g->L) dxn[c * g->L + pos] += row[t];
            }
        }
}

/* ---- reference: plain loops ------------------------------------------------ */

static void conv_forward_ref(const conv_geom *g, const float *x, const float *w, const float *b,
                             float *y)
{
    // x is (N,Cin,L), w is (Cout,Cin,K), b is (Cout) or NULL, y is (N,Cout,Lout)
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t o = 0; o < g->Cout; o++)
            for (int64_t t = 0; t < g->Lout; t++) {
                double acc = b ? b[o] : 0.0;
                for (int64_t c = 0; c < g->Cin; c++)
                    for (int64_t k = 0; k < g->K; k++) {
                        int64_t pos = conv_pos(g, t, k);
                        if (pos >= 0 && pos < g->L)
                            acc += (double)w[(o * g->Cin + c) * g->K + k] * x[(n * g->Cin + c) * g->L + pos];
                    }
                y[(n * g->Cout + o) * g->Lout + t] = (float)acc;
            }
}

/* dx, dw, db (any may be NULL) += the gradients of conv_forward_ref given dy. */
static void conv_backward_ref(const conv_geom *g, const float *x, const float *w, const float *dy,
                              float *dx, float *dw, float *db)
{
    // dy is (N,Cout,Lout); dx like x (N,Cin,L), dw like w (Cout,Cin,K), db (Cout)
    for (int64_t o = 0; o < g->Cout; o++) {
        if (db) {
            double acc = 0;
            for (int64_t n = 0; n < g->N; n++)
                for (int64_t t = 0; t < g->Lout; t++) acc += dy[(n * g->Cout + o) * g->Lout + t];
            db[o] += (float)acc;
        }
        for (int64_t c = 0; c < g->Cin && dw; c++)
            for (int64_t k = 0; k < g->K; k++) {
                double acc = 0;
                for (int64_t n = 0; n < g->N; n++)
                    for (int64_t t = 0; t < g->Lout; t++) {
                        int64_t pos = conv_pos(g, t, k);
                        if (pos >= 0 && pos < g->L)
                            acc += (double)dy[(n * g->Cout + o) * g->Lout + t] * x[(n * g->Cin + c) * g->L + pos];
                    }
                dw[(o * g->Cin + c) * g->K + k] += (float)acc;
            }
    }
    if (!dx) return;
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t c = 0; c < g->Cin; c++)
            for (int64_t l = 0; l < g->L; l++) {
                double acc = 0; /* every (o, t, k) whose tap lands on l */
                for (int64_t k = 0; k < g->K; k++) {
                    int64_t num = l + g->padding - k * g->dilation; /* = t * stride */
                    if (num < 0 || num % g->stride) continue;
                    int64_t t = num / g->stride;
                    if (t >= g->Lout) continue;
                    for (int64_t o = 0; o < g->Cout; o++)
                        acc += (double)dy[(n * g->Cout + o) * g->Lout + t] * w[(o * g->Cin + c) * g->K + k];
                }
                dx[(n * g->Cin + c) * g->L + l] += (float)acc;
            }
}

/* ---- fast: im2col + gemm ----------------------------------------------------- */

static qkv_status conv_forward_fast(qkv_ctx *c, const conv_geom *g, const float *x, const float *w,
                                    const float *b, float *y)
{
    int64_t CK = g->Cin * g->K, Lo = g->Lout;
    float *cols = conv_pointwise(g) ? NULL : qkv_ctx_alloc(c, (size_t)(CK * Lo) * sizeof(float)); // (CK,Lout)
    if (!conv_pointwise(g) && !cols) return QKV_ERR_NOMEM;
    for (int64_t n = 0; n < g->N; n++) {
        const float *xn = x + n * g->Cin * g->L; // (Cin,L)
        float *yn = y + n * g->Cout * Lo;        // (Cout,Lout)
        if (cols) im2col(g, xn, cols);
        if (b)
            for (int64_t o = 0; o < g->Cout; o++)
                for (int64_t t = 0; t < Lo; t++) yn[o * Lo + t] = b[o];
        qkv_gemm(0, 0, g->Cout, Lo, CK, 1.0f, w, CK, cols ? cols : xn, Lo, b ? 1.0f : 0.0f, yn, Lo);
    }
    return QKV_OK;
}

static qkv_status conv_backward_fast(qkv_ctx *c, const conv_geom *g, const float *x,
                                     const float *w, const float *dy, float *dx, float *dw, float *db)
{
    int64_t CK = g->Cin * g->K, Lo = g->Lout;
    int pw = conv_pointwise(g);
    float *cols = NULL, *dcols = NULL; // (CK,Lout) each
    if (!pw && dw && !(cols = qkv_ctx_alloc(c, (size_t)(CK * Lo) * sizeof(float)))) return QKV_ERR_NOMEM;
    if (!pw && dx && !(dcols = qkv_ctx_alloc(c, (size_t)(CK * Lo) * sizeof(float)))) return QKV_ERR_NOMEM;
    for (int64_t n = 0; n < g->N; n++) {
        const float *xn = x + n * g->Cin * g->L; // (Cin,L)
        const float *dyn = dy + n * g->Cout * Lo; // (Cout,Lout)
        float *dxn = dx ? dx + n * g->Cin * g->L : NULL; // (Cin,L)
        if (db)
            for (int64_t o = 0; o < g->Cout; o++)
                for (int64_t t = 0; t < Lo; t++) db[o] += dyn[o * Lo + t];
        if (dw) { /* dW += dy[n] cols^T */
            if (cols) im2col(g, xn, cols);
            qkv_gemm(0, 1, g->Cout, CK, Lo, 1.0f, dyn, Lo, cols ? cols : xn, Lo, 1.0f, dw, CK);
        }
        if (dx && pw) { /* dx[n] += W^T dy[n] */
            qkv_gemm(1, 0, CK, Lo, g->Cout, 1.0f, w, CK, dyn, Lo, 1.0f, dxn, Lo);
        } else if (dx) { /* dcols = W^T dy[n], then scattered back onto x's positions */
            qkv_gemm(1, 0, CK, Lo, g->Cout, 1.0f, w, CK, dyn, Lo, 0.0f, dcols, Lo);
            col2im_add(g, dcols, dxn);
        }
    }
    return QKV_OK;
}

/* Differentiates y = conv1d(x, w, b): dx += conv_transpose(dy, w),
 * dw[o, c, k] += sum_{n,t} dy[n, o, t] x[n, c, pos(t, k)], db[o] += sum_{n,t} dy[n, o, t]. */
static qkv_status conv_backward(qkv_ctx *c, void *p)
{
    conv_saved *s = p;
    const float *dy = s->y->grad; // (N,Cout,Lout)
    if (!dy) return QKV_OK;
    qkv_arena *a = qkv_ctx_arena(c);
    int gx = s->x->requires_grad, gw = s->w->requires_grad, gb = s->b && s->b->requires_grad;
    float *dx = gx ? qkv_tensor_grad(a, s->x) : NULL; // (N,Cin,L)
    float *dw = gw ? qkv_tensor_grad(a, s->w) : NULL; // (Cout,Cin,K)
    float *db = gb ? qkv_tensor_grad(a, s->b) : NULL; // (Cout)
    if ((gx && !dx) || (gw && !dw) || (gb && !db)) return QKV_ERR_NOMEM;
    if (qkv_reference()) {
        conv_backward_ref(&s->g, s->x->data, s->w->data, dy, dx, dw, db);
        return QKV_OK;
    }
    return conv_backward_fast(c, &s->g, s->x->data, s->w->data, dy, dx, dw, db);
}

/* Checks the arguments and fills g. */
static qkv_status conv_check(const qkv_tensor *x, const qkv_tensor *w, const qkv_tensor *b,
                             int64_t stride, int64_t padding, int64_t dilation, conv_geom *g)
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
    *g = (conv_geom){b3 ? x->shape[0] : 1, Cin, L, w->shape[0], K,
                     (L + 2 * padding - span) / stride + 1, stride, padding, dilation};
    return QKV_OK;
}

qkv_status qkv_conv1d(qkv_ctx *c, qkv_tensor *x, qkv_tensor *w, qkv_tensor *b, int64_t stride,
                      int64_t padding, int64_t dilation, qkv_tensor **y)
{
    QKV_NEED(y, "conv1d", "y");
    *y = NULL;
    QKV_NEED(c, "conv1d", "ctx");
    conv_geom g;
    QKV_TRY(conv_check(x, w, b, stride, padding, dilation, &g));
    int64_t shape3[3] = {g.N, g.Cout, g.Lout};
    qkv_tensor *in[3] = {x, w, b};
    int rec = qkv_ctx_recording(c, in, 3);
    QKV_TRY(qkv_ctx_tensor(c, x->ndim, x->ndim == 3 ? shape3 : shape3 + 1, rec, y));
    if (qkv_reference())
        conv_forward_ref(&g, x->data, w->data, b ? b->data : NULL, (*y)->data);
    else
        QKV_TRY(conv_forward_fast(c, &g, x->data, w->data, b ? b->data : NULL, (*y)->data));
    if (!rec) return QKV_OK;
    conv_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (conv_saved){x, w, b, *y, g};
    return qkv_ctx_record(c, conv_backward, s);
}
