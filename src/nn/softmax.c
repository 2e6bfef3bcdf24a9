/* softmax.c: softmax over the last dim with an optional key padding mask.
 * Masked entries take no part (as if they were -inf) and get weight 0; a row
 * whose entries are all masked, or all -inf, gives zeros and a zero gradient,
 * never NaN. */
#include <math.h>
#include <stdio.h>
#include "core/internal.h"

typedef struct {
    qkv_tensor *x, *y;
    int64_t rows, S;
} softmax_saved;

/* Differentiates y = softmax(x) row by row: dx += y * (dy - sum(dy * y)).
 * Masked entries and all-masked rows have y = 0, so their dx is 0. */
static qkv_status softmax_backward(qkv_ctx *c, void *p)
{
    softmax_saved *s = p;
    QKV_BACKWARD_ONE(c, s->y, s->x, dy, dx); // (rows,S) each
    const float *y = s->y->data; // (rows,S)
    int64_t S = s->S;
    for (int64_t r = 0; r < s->rows; r++) {
        const float *yr = y + r * S, *gr = dy + r * S;
        double dot = 0;
        for (int64_t j = 0; j < S; j++) dot += (double)gr[j] * yr[j];
        for (int64_t j = 0; j < S; j++) dx[r * S + j] += yr[j] * (float)(gr[j] - dot);
    }
    return QKV_OK;
}

/* One row: y = exp(x - max) / sum over the unmasked entries (mask may be
 * NULL), zeros when nothing is left. */
static void softmax_row(const float *x, const uint8_t *mask, float *y, int64_t S)
{
    float mx = -INFINITY;
    for (int64_t j = 0; j < S; j++)
        if (!(mask && mask[j]) && x[j] > mx) mx = x[j];
    if (mx == -INFINITY) { /* every entry masked or -inf: y stays 0 */
        for (int64_t j = 0; j < S; j++) y[j] = 0.0f;
        return;
    }
    double sum = 0;
    for (int64_t j = 0; j < S; j++) {
        y[j] = (mask && mask[j]) ? 0.0f : expf(x[j] - mx);
        sum += y[j];
    }
    float inv = (float)(1.0 / sum); /* sum >= 1: the max contributes exp(0) */
    for (int64_t j = 0; j < S; j++) y[j] *= inv;
}

qkv_status qkv_softmax(qkv_ctx *c, qkv_tensor *x, const qkv_tensor *key_padding_mask,
                       qkv_tensor **y)
{
    QKV_NEED_OUT_CTX(y, c, "softmax", "y");
    QKV_NEED(x, "softmax", "x");
    const qkv_tensor *m = key_padding_mask;
    char bx[64], bm[64];
    if (x->dtype != QKV_F32) return qkv_fail(QKV_ERR_DTYPE, "softmax: x is not F32");
    if (x->ndim < 1)
        return qkv_fail(QKV_ERR_SHAPE, "softmax: x %s has 0 dims, expected at least 1",
                        qkv_shape_str(x, bx, sizeof bx));
    int64_t S = x->shape[x->ndim - 1];
    int64_t rows = S ? qkv_tensor_numel(x) / S : 0;
    int64_t N = x->shape[0], T = x->ndim == 3 ? x->shape[1] : 1; /* x as (N,T,S) */
    if (m) {
        if (m->dtype != QKV_BOOL || !m->mask)
            return qkv_fail(QKV_ERR_DTYPE, "softmax: key_padding_mask must be BOOL");
        if (x->ndim != 2 && x->ndim != 3)
            return qkv_fail(QKV_ERR_SHAPE,
                            "softmax: x %s has %d dims, expected (N,S) or (N,T,S) with a key_padding_mask",
                            qkv_shape_str(x, bx, sizeof bx), x->ndim);
        if (m->ndim != 2 || m->shape[0] != N || m->shape[1] != S)
            return qkv_fail(QKV_ERR_SHAPE, "softmax: key_padding_mask %s does not match x %s, expected (%lld,%lld)",
                            qkv_shape_str(m, bm, sizeof bm), qkv_shape_str(x, bx, sizeof bx),
                            (long long)N, (long long)S);
    }
    qkv_tensor *in[1] = {x};
    int rec = qkv_ctx_recording(c, in, 1);
    QKV_TRY(qkv_ctx_tensor(c, x->ndim, x->shape, rec, y));
    const float *xd = x->data; // (rows,S) = (N*T,S) when masked
    float *yd = (*y)->data;    // (rows,S)
    for (int64_t r = 0; r < rows; r++)
        softmax_row(xd + r * S, m ? m->mask + (r / T) * S : NULL, yd + r * S, S);
    if (!rec) return QKV_OK;
    softmax_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (softmax_saved){x, *y, rows, S};
    return qkv_ctx_record(c, softmax_backward, s);
}
