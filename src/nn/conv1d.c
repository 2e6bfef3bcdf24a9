/* conv1d.c: F.conv1d with groups = 1 and zero padding.
 *
 * y[n, o, t] = b[o] + sum_{c,k} w[o, c, k] * x[n, c, t*stride - padding + k*dilation]
 * (x taken as 0 outside [0, L)).
 *
 * Fast path: im2col unrolls the whole batch into cols (Cin*K, N*Lout)
 * (sample n in columns [n*Lout, (n+1)*Lout)), then one qkv_gemm gives
 * yt = W cols (Cout, N*Lout) with W viewed as (Cout, Cin*K), and yt is
 * scattered into y (N,Cout,Lout). One large product keeps BLAS (and its
 * threads) busy where N small ones per sample would not. The backward
 * recomputes cols. Under qkv_reference() plain loops (double accumulation)
 * do the forward and the backward. */
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

/* cols[(c*K + k), t] = x[c, pos(t, k)] or 0 in the padding; rows of cols
 * are ld floats apart. */
static void im2col(const conv_geom *g, const float *xn, float *cols, int64_t ld)
{
    // xn is (Cin,L), cols is (Cin*K,Lout) within rows of ld
    for (int64_t c = 0; c < g->Cin; c++)
        for (int64_t k = 0; k < g->K; k++) {
            float *row = cols + (c * g->K + k) * ld;
            for (int64_t t = 0; t < g->Lout; t++) {
                int64_t pos = conv_pos(g, t, k);
                row[t] = pos >= 0 && pos < g->L ? xn[c * g->L + pos] : 0.0f;
            }
        }
}

/* The adjoint of im2col: dx[c, pos(t, k)] += dcols[(c*K + k), t]. */
static void col2im_add(const conv_geom *g, const float *dcols, int64_t ld, float *dxn)
{
    // dcols is (Cin*K,Lout) within rows of ld, dxn is (Cin,L)
    for (int64_t c = 0; c < g->Cin; c++)
        for (int64_t k = 0; k < g->K; k++) {
            const float *row = dcols + (c * g->K + k) * ld;
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

/* cols (CK, N*Lout) for the whole batch. */
static float *batch_cols(qkv_ctx *c, const conv_geom *g, const float *x)
{
    int64_t CK = g->Cin * g->K, NL = g->N * g->Lout;
    float *cols = qkv_ctx_alloc(c, (size_t)(CK * NL) * sizeof(float));
    if (!cols) return NULL;
#pragma omp parallel for if (g->N > 1)
    for (int64_t n = 0; n < g->N; n++) im2col(g, x + n * g->Cin * g->L, cols + n * g->Lout, NL);
    return cols;
}

/* y[n, o, t] = yt[o, n*Lout + t] (to), or yt[o, n*Lout + t] = y[n, o, t]. */
static void batch_layout(const conv_geom *g, float *yt, float *y, int to_y)
{
    int64_t Lo = g->Lout, NL = g->N * Lo;
#pragma omp parallel for if (g->N > 1)
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t o = 0; o < g->Cout; o++) {
            float *a = y + (n * g->Cout + o) * Lo, *b = yt + o * NL + n * Lo;
            memcpy(to_y ? a : b, to_y ? b : a, (size_t)Lo * sizeof(float));
        }
}

static qkv_status conv_forward_fast(qkv_ctx *c, const conv_geom *g, const float *x, const float *w,
                                    const float *b, float *y)
{
    int64_t CK = g->Cin * g->K, NL = g->N * g->Lout;
    qkv_arena_mark mark = qkv_arena_get_mark(qkv_ctx_arena(c)); /* cols, yt: scratch */
    float *cols = batch_cols(c, g, x);                                      // (CK,N*Lout)
    float *yt = qkv_ctx_alloc(c, (size_t)(g->Cout * NL) * sizeof(float)); // (Cout,N*Lout)
    if (!cols || !yt) return QKV_ERR_NOMEM;
    if (b)
        for (int64_t o = 0; o < g->Cout; o++)
            for (int64_t i = 0; i < NL; i++) yt[o * NL + i] = b[o];
    qkv_gemm(0, 0, g->Cout, NL, CK, 1.0f, w, CK, cols, NL, b ? 1.0f : 0.0f, yt, NL);
    batch_layout(g, yt, y, 1);
    qkv_arena_release(qkv_ctx_arena(c), mark);
    return QKV_OK;
}

static qkv_status conv_backward_fast(qkv_ctx *c, const conv_geom *g, const float *x,
                                     const float *w, const float *dy, float *dx, float *dw, float *db)
{
    int64_t CK = g->Cin * g->K, Lo = g->Lout, NL = g->N * Lo;
    /* Everything below is scratch: the gradients were allocated before. */
    qkv_arena_mark mark = qkv_arena_get_mark(qkv_ctx_arena(c));
    float *dyt = qkv_ctx_alloc(c, (size_t)(g->Cout * NL) * sizeof(float)); // (Cout,N*Lout)
    if (!dyt) return QKV_ERR_NOMEM;
    batch_layout(g, dyt, (float *)dy, 0);
    if (db)
        for (int64_t o = 0; o < g->Cout; o++)
            for (int64_t i = 0; i < NL; i++) db[o] += dyt[o * NL + i];
    if (dw) { /* dW += dyt cols^T */
        float *cols = batch_cols(c, g, x); // (CK,N*Lout)
        if (!cols) return QKV_ERR_NOMEM;
        qkv_gemm(0, 1, g->Cout, CK, NL, 1.0f, dyt, NL, cols, NL, 1.0f, dw, CK);
    }
    if (dx) { /* dcols = W^T dyt, scattered back onto x's positions */
        float *dcols = qkv_ctx_alloc(c, (size_t)(CK * NL) * sizeof(float)); // (CK,N*Lout)
        if (!dcols) return QKV_ERR_NOMEM;
        qkv_gemm(1, 0, CK, NL, g->Cout, 1.0f, w, CK, dyt, NL, 0.0f, dcols, NL);
#pragma omp parallel for if (g->N > 1)
        for (int64_t n = 0; n < g->N; n++) col2im_add(g, dcols + n * Lo, NL, dx + n * g->Cin * g->L);
    }
    qkv_arena_release(qkv_ctx_arena(c), mark);
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
