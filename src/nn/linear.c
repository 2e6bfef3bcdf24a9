/* linear.c: y = x W^T + b, torch.nn.functional.linear. */
#include <stdio.h>
#include "core/internal.h"
#include "kernels/bf16.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_bf16_vnni.h"
#include "kernels/rows.h"
#include "nn/linear.h"
#include "nn/linear_bf16.h"

typedef struct {
    qkv_tensor *x, *w, *b, *y;
    int64_t M, in, out;
    /* BF16 mode on oneDNN: what the forward converted, used again by the
     * backward (as autocast keeps its copies), or all NULL */
    qkv_linear_kept k;
    int relu; /* y = relu(x W^T + b) (qkv_linear_relu) */
} linear_saved;

void qkv_linear_gemm(const qkv_ctx *c, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                     const float *A, const uint16_t *A16, int64_t lda, const float *B, const uint16_t *B16,
                     int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (A16 || B16) qkv_gemm_bf16_pre(ta, tb, M, N, K, alpha, A, A16, lda, B, B16, ldb, beta, C, ldc);
    else qkv_gemm_ctx(c, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* A tall product (M at least 4 max(out,in): a ViT's 6,400 rows into 64x64)
 * goes by LIN_CHUNKS fixed chunks of rows, one product per chunk on the
 * threads, the chunks' results then added in chunk order: qkv_gemm splits
 * a product by its output's rows or columns, and a 64x64 output (or 192
 * rows, in blocks of 128 and 64) left the second core idle or half idle.
 * The chunks depend on the shape only, so the result does not depend on
 * the thread count. */
enum { LIN_CHUNKS = 4 };

/* dW's product goes by chunks of rows (qkv_linear_weight_grad). */
static int dw_chunked(int64_t M, int64_t in, int64_t out)
{
    int64_t big = in > out ? in : out;
    return !qkv_reference() && M >= 4 * big && M >= 1024;
}

void qkv_linear_dx(const qkv_ctx *c, const qkv_linear_kept *k, int64_t M, int64_t in, int64_t out, float alpha,
                   const float *dy, const uint16_t *dy16, const float *w, float beta, float *dx)
{
    if (k && k->wn && dy16 && qkv_gemm_bf16_packed(0, M, in, out, alpha, dy16, k->wn, NULL, beta, dx)) return;
    qkv_linear_gemm(c, 0, 0, M, in, out, alpha, dy16 ? NULL : dy, dy16, out, w, k ? k->w16 : NULL, in, beta, dx,
                    in);
}

qkv_status qkv_linear_weight_grad(qkv_ctx *c, int64_t M, int64_t in, int64_t out, float alpha, const float *dy,
                                  const uint16_t *dy16, const float *x, const qkv_linear_kept *k, float *dw,
                                  float *db, int *db_done)
{
    const uint16_t *x16 = k ? k->x16 : NULL;
    *db_done = 0;
    if (!dw_chunked(M, in, out)) {
        if (!(k && k->xb && dy16 && qkv_gemm_bf16_packed(1, out, in, M, alpha, dy16, k->xb, NULL, 1.0f, dw)))
            qkv_linear_gemm(c, 1, 0, out, in, M, alpha, dy, dy16, out, x, x16, in, 1.0f, dw, in);
        return QKV_OK;
    }
    if (!dy) db = NULL; /* the column sums need dy in FP32 */
    int64_t len = (M + LIN_CHUNKS - 1) / LIN_CHUNKS, n = out * in;
    float *part = qkv_ctx_alloc_uninit(c, (size_t)(LIN_CHUNKS * (n + out)) * sizeof(float)); // (chunks,out,in)
    if (!part) return QKV_ERR_NOMEM;
    float *pb = part + LIN_CHUNKS * n; // (chunks,out): the bias gradient's
#pragma omp parallel for
    for (int k = 0; k < LIN_CHUNKS; k++) {
        int64_t r0 = k * len, rows = M - r0 < len ? M - r0 : len;
        qkv_linear_gemm(c, 1, 0, out, in, rows, alpha, dy ? dy + r0 * out : NULL, dy16 ? dy16 + r0 * out : NULL,
                        out, x + r0 * in, x16 ? x16 + r0 * in : NULL, in, 0.0f, part + k * n, in);
        if (!db) continue;
        float *acc = pb + k * out;
        for (int64_t j = 0; j < out; j++) acc[j] = 0.0f;
        for (int64_t r = r0; r < r0 + rows; r++)
            for (int64_t j = 0; j < out; j++) acc[j] += dy[r * out + j];
    }
    QKV_PAR_FOR(n >= QKV_PAR_MIN,
        for (int64_t i = 0; i < n; i++) {
            float acc = part[i];
            for (int k = 1; k < LIN_CHUNKS; k++) acc += part[k * n + i];
            dw[i] += acc;
        });
    for (int64_t j = 0; db && j < out; j++) {
        float acc = pb[j];
        for (int k = 1; k < LIN_CHUNKS; k++) acc += pb[k * out + j];
        db[j] += acc;
    }
    *db_done = db != NULL;
    return QKV_OK;
}

/* Differentiates y = x W^T + b:
 * dx += dy W, dW += dy^T x, db += sum_rows dy. */
static qkv_status linear_backward(qkv_ctx *c, void *p)
{
    linear_saved *s = p;
    const float *dy = s->y->grad; // (M,out)
    if (!dy) return QKV_OK;
    qkv_arena *a = qkv_ctx_arena(c);
    float *db = NULL; // (out)
    if (s->b && s->b->requires_grad && !(db = qkv_tensor_grad(a, s->b))) return QKV_ERR_NOMEM;
    int db_done = 0;
    const uint16_t *dy16 = NULL; // (M,out): dy in bf16 once for both products, beside x16 and w16
    if (s->relu) { /* dy through the relu (y > 0), in bf16, and db, in one pass */
        uint16_t *d16 = qkv_arena_alloc_uninit(a, (size_t)(s->M * s->out) * sizeof *d16);
        if (!d16) return QKV_ERR_NOMEM;
        qkv_rows_relu_grad_bf16(s->y->data, dy, s->M, s->out, d16, db);
        dy16 = d16;
        db_done = 1;
    } else if (s->k.x16 && (s->x->requires_grad || s->w->requires_grad) &&
               !(dy16 = qkv_bf16_copy(a, dy, s->M * s->out)))
        return QKV_ERR_NOMEM;
    if (s->x->requires_grad) {
        int fresh; /* a new gradient buffer is written (beta 0), not zeroed and added into */
        float *dx = qkv_tensor_grad_fresh(a, s->x, &fresh); // (M,in)
        if (!dx) return QKV_ERR_NOMEM;
        qkv_linear_dx(c, &s->k, s->M, s->in, s->out, 1.0f, dy, dy16, s->w->data, fresh ? 0.0f : 1.0f, dx);
    }
    if (s->w->requires_grad) {
        float *dw = qkv_tensor_grad(a, s->w); // (out,in)
        if (!dw) return QKV_ERR_NOMEM;
        int done = 0;
        QKV_TRY(qkv_linear_weight_grad(c, s->M, s->in, s->out, 1.0f, dy, dy16, s->x->data, &s->k, dw,
                                       db_done ? NULL : db, &done));
        db_done |= done;
    }
    if (db && !db_done) qkv_rows_sum_into(db, dy, s->M, s->out);
    return QKV_OK;
}

qkv_status qkv_linear_product(qkv_ctx *c, int keep, int need_dx, int need_dw, int64_t M, int64_t out, int64_t in,
                              const float *x, const float *w, const float *b, float *y, qkv_linear_kept *k)
{
    *k = (qkv_linear_kept){NULL, NULL, NULL, NULL};
    if (!keep || qkv_ctx_precision(c) != QKV_BF16 || !qkv_gemm_bf16_dnnl(M, out, in)) {
        qkv_gemm_ctx_bias(c, M, out, in, x, w, b, y);
        return QKV_OK;
    }
    qkv_arena *a = qkv_ctx_arena(c);
    /* x in bf16, and blocked for dW = dy^T x where that product takes it */
    int want_xb = need_dw && !dw_chunked(M, in, out) && qkv_gemm_bf16_packed_ok(1, out, in, M, 1.0f, 0, 1.0f);
    uint16_t *x16 = qkv_arena_alloc_uninit(a, (size_t)(M * in) * sizeof *x16); // (M,in)
    uint16_t *xb = want_xb ? qkv_arena_alloc_uninit(a, (size_t)qkv_bf16_blocked_len(M, in) * sizeof *xb) : NULL;
    if (!x16 || (want_xb && !xb)) return QKV_ERR_NOMEM;
    if (xb) qkv_bf16_copy_blocked(M, in, x, x16, xb);
    else qkv_bf16_from_floats(x, x16, M * in);
    k->x16 = x16, k->xb = xb;
    if (!qkv_gemm_bf16_packed_ok(0, M, out, in, 1.0f, b != NULL, 0.0f)) { /* W in bf16 once for both products */
        uint16_t *w16 = qkv_bf16_copy(a, w, out * in);
        if (!w16) return QKV_ERR_NOMEM;
        k->w16 = w16;
        qkv_gemm_bf16_bias(M, out, in, x16, w, w16, b, y);
        return QKV_OK;
    }
    /* W packed for this product, and for dx = dy W where that takes it, in
     * one pass over W; the forward's pack is released after the product */
    uint16_t *wn = NULL; // op(B) = W (out,in) blocked
    if (need_dx && qkv_gemm_bf16_packed_ok(0, M, in, out, 1.0f, 0, 0.0f) &&
        !(wn = qkv_arena_alloc_uninit(a, (size_t)qkv_bf16_blocked_len(out, in) * sizeof *wn)))
        return QKV_ERR_NOMEM;
    qkv_arena_mark m = qkv_arena_get_mark(a);
    uint16_t *wt = qkv_arena_alloc_uninit(a, (size_t)qkv_bf16_blocked_len(in, out) * sizeof *wt); // op(B) = W^T
    if (!wt) return QKV_ERR_NOMEM;
    qkv_bf16_blocked_pack2(in, out, w, in, wt, wn);
    int done = qkv_gemm_bf16_packed(0, M, out, in, 1.0f, x16, wt, b, 0.0f, y);
    qkv_arena_release(a, m);
    if (!done) qkv_gemm_bf16_bias(M, out, in, x16, w, NULL, b, y); /* oneDNN declined: packs W itself */
    k->wn = wn;
    return QKV_OK;
}

qkv_status qkv_linear_check_shapes(const char *fn, const qkv_tensor *x, const qkv_tensor *w, const qkv_tensor *b)
{
    char bx[64], bw[64], bb[64];
    if (x->dtype != QKV_F32 || w->dtype != QKV_F32 || (b && b->dtype != QKV_F32))
        return qkv_fail(QKV_ERR_DTYPE, "%s: x, weight and bias must be F32", fn);
    if (w->ndim != 2)
        return qkv_fail(QKV_ERR_SHAPE, "%s: weight %s has %d dims, expected 2 (out,in)", fn,
                        qkv_shape_str(w, bw, sizeof bw), w->ndim);
    if (x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1])
        return qkv_fail(QKV_ERR_SHAPE, "%s: x %s last dim does not match weight %s in_features %lld", fn,
                        qkv_shape_str(x, bx, sizeof bx), qkv_shape_str(w, bw, sizeof bw),
                        (long long)w->shape[1]);
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))
        return qkv_fail(QKV_ERR_SHAPE, "%s: bias %s, expected (%lld,)", fn,
                        qkv_shape_str(b, bb, sizeof bb), (long long)w->shape[0]);
    return QKV_OK;
}

/* The arguments of qkv_linear and qkv_linear_relu (fn, their name). */
static qkv_status linear_check(const char *fn, qkv_ctx *c, const qkv_tensor *x, const qkv_tensor *w,
                               const qkv_tensor *b, qkv_tensor **y)
{
    QKV_NEED_OUT_CTX(y, c, fn, "y");
    QKV_NEED(x, fn, "x");
    QKV_NEED(w, fn, "weight");
    return qkv_linear_check_shapes(fn, x, w, b);
}

/* y = x W^T + b, then relu(y) in place where relu is set (only on the
 * BF16 path that records, see qkv_linear_relu). */
static qkv_status linear_node(qkv_ctx *c, qkv_tensor *x, qkv_tensor *w, qkv_tensor *b, int relu, qkv_tensor **y)
{
    int64_t in = w->shape[1], out = w->shape[0];
    int64_t M = 1; /* rows: x's leading dims (also when in = 0: y is then the bias, or 0) */
    for (int i = 0; i < x->ndim - 1; i++) M *= x->shape[i];
    int64_t shape[QKV_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) shape[i] = x->shape[i];
    shape[x->ndim - 1] = out;
    qkv_tensor *in3[3] = {x, w, b};
    int rec = qkv_ctx_recording(c, in3, 3);
    QKV_TRY(qkv_ctx_tensor_uninit(c, x->ndim, shape, rec, y)); /* every element written below */
    float *yd = (*y)->data; // (M,out)
    /* A cached forward with bf16 weights set (kvcache.c): W's bf16 copy. */
    const uint16_t *w16 = rec ? NULL : linear_bf16_find(qkv_ctx_bf16_weights(c), w);
    if (w16) return linear_bf16(c, M, out, in, x->data, w16, b ? b->data : NULL, yd);
    qkv_linear_kept k;
    QKV_TRY(qkv_linear_product(c, rec, x->requires_grad, w->requires_grad, M, out, in, x->data, w->data,
                               b ? b->data : NULL, yd, &k));
    if (relu) qkv_vec_relu(yd, yd, M * out);
    if (!rec) return QKV_OK;
    linear_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (linear_saved){x, w, b, *y, M, in, out, k, relu};
    return qkv_ctx_record(c, linear_backward, s);
}

qkv_status qkv_linear(qkv_ctx *c, qkv_tensor *x, qkv_tensor *w, qkv_tensor *b, qkv_tensor **y)
{
    QKV_TRY(linear_check("linear", c, x, w, b, y));
    return linear_node(c, x, w, b, 0, y);
}

qkv_status qkv_linear_relu(qkv_ctx *c, qkv_tensor *x, qkv_tensor *w, qkv_tensor *b, qkv_tensor **y)
{
    QKV_TRY(linear_check("linear_relu", c, x, w, b, y));
    /* One node where it saves passes: recording in BF16 mode on oneDNN
     * (the backward's mask, bf16 conversion and bias sums in one pass);
     * elsewhere the two ops, the same numbers either way. */
    qkv_tensor *in3[3] = {x, w, b};
    int64_t M = 1; // x's rows
    for (int i = 0; i < x->ndim - 1; i++) M *= x->shape[i];
    if (qkv_ctx_recording(c, in3, 3) && qkv_ctx_precision(c) == QKV_BF16 &&
        qkv_gemm_bf16_dnnl(M, w->shape[0], w->shape[1]))
        return linear_node(c, x, w, b, 1, y);
    qkv_tensor *h; // (...,out)
    QKV_TRY(linear_node(c, x, w, b, 0, &h));
    return qkv_activation_apply(c, QKV_ACTIVATION_RELU, h, y);
}
