/* linear.c: y = x W^T + b, torch.nn.functional.linear. */
#include <stdio.h>
#include "core/internal.h"
#include "kernels/bf16.h"
#include "kernels/gemm_bf16.h"
#include "kernels/rows.h"
#include "nn/linear.h"
#include "nn/linear_bf16.h"

typedef struct {
    qkv_tensor *x, *w, *b, *y;
    int64_t M, in, out;
    /* BF16 mode on oneDNN: the forward's bf16 copies of x (M,in) and W
     * (out,in), used again by the backward (as autocast keeps them), or NULL */
    const uint16_t *x16, *w16;
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

qkv_status qkv_linear_weight_grad(qkv_ctx *c, int64_t M, int64_t in, int64_t out, float alpha, const float *dy,
                                  const uint16_t *dy16, const float *x, const uint16_t *x16, float *dw,
                                  float *db, int *db_done)
{
    int64_t big = in > out ? in : out;
    *db_done = 0;
    if (qkv_reference() || M < 4 * big || M < 1024) {
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
    } else if (s->x16 && (s->x->requires_grad || s->w->requires_grad) &&
               !(dy16 = qkv_bf16_copy(a, dy, s->M * s->out)))
        return QKV_ERR_NOMEM;
    if (s->x->requires_grad) {
        int fresh; /* a new gradient buffer is written (beta 0), not zeroed and added into */
        float *dx = qkv_tensor_grad_fresh(a, s->x, &fresh); // (M,in)
        if (!dx) return QKV_ERR_NOMEM;
        qkv_linear_gemm(c, 0, 0, s->M, s->in, s->out, 1.0f, dy, dy16, s->out, s->w->data, s->w16, s->in,
                        fresh ? 0.0f : 1.0f, dx, s->in);
    }
    if (s->w->requires_grad) {
        float *dw = qkv_tensor_grad(a, s->w); // (out,in)
        if (!dw) return QKV_ERR_NOMEM;
        int done = 0;
        QKV_TRY(qkv_linear_weight_grad(c, s->M, s->in, s->out, 1.0f, dy, dy16, s->x->data, s->x16, dw,
                                       db_done ? NULL : db, &done));
        db_done |= done;
    }
    if (db && !db_done) qkv_rows_sum_into(db, dy, s->M, s->out);
    return QKV_OK;
}

qkv_status qkv_linear_product(qkv_ctx *c, int keep, int64_t M, int64_t out, int64_t in, const float *x,
                              const float *w, const float *b, float *y, const uint16_t **x16,
                              const uint16_t **w16)
{
    *x16 = *w16 = NULL;
    if (keep && qkv_ctx_precision(c) == QKV_BF16 && qkv_gemm_bf16_dnnl(M, out, in)) {
        qkv_arena *a = qkv_ctx_arena(c);
        /* W in bf16 once for both products, unless the products pack it
         * into oneDNN's own layout themselves */
        if (!(*x16 = qkv_bf16_copy(a, x, M * in)) ||
            (!qkv_gemm_bf16_blocked(M, out, in, b != NULL) && !(*w16 = qkv_bf16_copy(a, w, out * in))))
            return QKV_ERR_NOMEM;
        qkv_gemm_bf16_bias(M, out, in, *x16, w, *w16, b, y);
    } else
        qkv_gemm_ctx_bias(c, M, out, in, x, w, b, y);
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
    QKV_NEED(y, fn, "y");
    *y = NULL;
    QKV_NEED(c, fn, "ctx");
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
    const uint16_t *x16, *wk16; // (M,in), (out,in)
    QKV_TRY(qkv_linear_product(c, rec, M, out, in, x->data, w->data, b ? b->data : NULL, yd, &x16, &wk16));
    if (relu) qkv_vec_relu(yd, yd, M * out);
    if (!rec) return QKV_OK;
    linear_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (linear_saved){x, w, b, *y, M, in, out, x16, wk16, relu};
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
