/* shape_ops.c: ops that move elements without arithmetic: permute, reshape,
 * append_row. */
#include <string.h>
#include "core/internal.h"

/* ---- permute ------------------------------------------------------------ */

typedef struct {
    qkv_tensor *x, *y;
    int64_t oshape[4], istride[4]; /* output shape; input stride of each output dim */
} permute_saved;

/* Walks y in order; x offset of each element is sum_i o_i * istride[i].
 * Forward (mode 0) copies x -> y; backward adds dy -> dx (mode 1) or, into
 * a new gradient buffer, writes it (mode 2: the walk covers every element
 * of x once). */
static void permute_walk(const permute_saved *s, const float *from, float *to, int mode)
{
    const int64_t *n = s->oshape, *st = s->istride;
    int64_t outer = n[0] * n[1] * n[2];
    /* Rows of y (its last dim) are independent: the permutation maps them to
     * disjoint elements of x. collapse: the indices are stepped, not divided
     * out per row (three divisions per row of a head's 16 floats showed). */
    QKV_PAR_FOR_WITH(outer * n[3] >= QKV_PAR_MIN, collapse(3),
        for (int64_t a = 0; a < n[0]; a++)
            for (int64_t b = 0; b < n[1]; b++)
                for (int64_t c = 0; c < n[2]; c++) {
                    int64_t base = a * st[0] + b * st[1] + c * st[2], k = ((a * n[1] + b) * n[2] + c) * n[3];
                    if (mode == 0 && st[3] == 1)
                        memcpy(to + k, from + base, (size_t)n[3] * sizeof(float));
                    else if (mode == 0)
                        for (int64_t d = 0; d < n[3]; d++) to[k + d] = from[base + d * st[3]];
                    else if (mode == 2)
                        for (int64_t d = 0; d < n[3]; d++) to[base + d * st[3]] = from[k + d];
                    else
                        for (int64_t d = 0; d < n[3]; d++) to[base + d * st[3]] += from[k + d];
                });
}

/* Differentiates y = x.permute(perm): dx[perm^-1 index] += dy. */
static qkv_status permute_backward(qkv_ctx *c, void *p)
{
    permute_saved *s = p;
    if (!s->y->grad || !s->x->requires_grad) return QKV_OK;
    int fresh;
    float *dx = qkv_tensor_grad_fresh(qkv_ctx_arena(c), s->x, &fresh);
    if (!dx) return QKV_ERR_NOMEM;
    permute_walk(s, s->y->grad, dx, fresh ? 2 : 1);
    return QKV_OK;
}

qkv_status qkv_permute(qkv_ctx *c, qkv_tensor *x, const int *perm, qkv_tensor **y)
{
    QKV_NEED_OUT_CTX(y, c, "permute", "y");
    QKV_NEED(x, "permute", "x");
    QKV_NEED(perm, "permute", "perm");
    if (x->dtype != QKV_F32) return qkv_fail(QKV_ERR_DTYPE, "permute: x is not F32");
    int nd = x->ndim, seen[QKV_MAX_DIMS] = {0};
    for (int i = 0; i < nd; i++) {
        if (perm[i] < 0 || perm[i] >= nd || seen[perm[i]]++)
            return qkv_fail(QKV_ERR_ARG, "permute: perm is not a permutation of 0..%d", nd - 1);
    }
    int64_t stride[QKV_MAX_DIMS], shape[QKV_MAX_DIMS];
    for (int i = nd - 1; i >= 0; i--) stride[i] = i == nd - 1 ? 1 : stride[i + 1] * x->shape[i + 1];
    for (int i = 0; i < nd; i++) shape[i] = x->shape[perm[i]];
    qkv_tensor *in[1] = {x};
    int rec = qkv_ctx_recording(c, in, 1);
    QKV_TRY(qkv_ctx_tensor_uninit(c, nd, shape, rec, y)); /* the walk writes every element */
    permute_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    s->x = x;
    s->y = *y;
    /* Right-align into 4 dims; missing leading dims have size 1. */
    for (int i = 0; i < 4; i++) {
        int j = i - (4 - nd);
        s->oshape[i] = j >= 0 ? shape[j] : 1;
        s->istride[i] = j >= 0 ? stride[perm[j]] : 0;
    }
    permute_walk(s, x->data, (*y)->data, 0);
    return rec ? qkv_ctx_record(c, permute_backward, s) : QKV_OK;
}

/* ---- reshape -------------------------------------------------------------- */

static qkv_status reshape_body(qkv_ctx *c, qkv_tensor *x, int ndim, const int64_t *shape, qkv_tensor **y)
{
    QKV_NEED_OUT_CTX(y, c, "reshape", "y");
    QKV_NEED(x, "reshape", "x");
    /* A view: its gradient is its base's, so no tape entry is needed. */
    return qkv_tensor_view(qkv_ctx_arena(c), x, ndim, shape, y);
}

qkv_status qkv_reshape(qkv_ctx *c, qkv_tensor *x, int ndim, const int64_t *shape, qkv_tensor **y)
{
    return qkv_fail_in("reshape", reshape_body(c, x, ndim, shape, y));
}

/* ---- append_row ----------------------------------------------------------- */

typedef struct {
    qkv_tensor *x, *row, *y;
    int64_t N, H, S, D;
} append_saved;

/* Differentiates y[:, :, :S] = x, y[n, h, S] = row[h] (or 0):
 * dx = dy[:, :, :S], drow[h] += sum_n dy[n, h, S]. */
static qkv_status append_backward(qkv_ctx *c, void *p)
{
    append_saved *s = p;
    const float *dy = s->y->grad; // (N,H,S+1,D)
    if (!dy) return QKV_OK;
    qkv_arena *a = qkv_ctx_arena(c);
    float *dx = s->x->requires_grad ? qkv_tensor_grad(a, s->x) : NULL;   // (N,H,S,D)
    float *dr = s->row && s->row->requires_grad ? qkv_tensor_grad(a, s->row) : NULL; // (H*D)
    if ((s->x->requires_grad && !dx) || (s->row && s->row->requires_grad && !dr))
        return QKV_ERR_NOMEM;
    int64_t S = s->S, D = s->D;
    for (int64_t nh = 0; nh < s->N * s->H; nh++) {
        const float *src = dy + nh * (S + 1) * D;
        if (dx)
            for (int64_t i = 0; i < S * D; i++) dx[nh * S * D + i] += src[i];
        if (dr)
            for (int64_t d = 0; d < D; d++) dr[(nh % s->H) * D + d] += src[S * D + d];
    }
    return QKV_OK;
}

qkv_status qkv_append_row(qkv_ctx *c, qkv_tensor *x, qkv_tensor *row, qkv_tensor **y)
{
    QKV_NEED_OUT_CTX(y, c, "append_row", "y");
    QKV_NEED(x, "append_row", "x");
    char bx[64], br[64];
    if (x->dtype != QKV_F32 || (row && row->dtype != QKV_F32))
        return qkv_fail(QKV_ERR_DTYPE, "append_row: x and row must be F32");
    if (x->ndim != 4)
        return qkv_fail(QKV_ERR_SHAPE, "append_row: x %s has %d dims, expected 4 (N,H,S,D)",
                        qkv_shape_str(x, bx, sizeof bx), x->ndim);
    int64_t N = x->shape[0], H = x->shape[1], S = x->shape[2], D = x->shape[3];
    if (row && qkv_tensor_numel(row) != H * D)
        return qkv_fail(QKV_ERR_SHAPE, "append_row: row %s has %lld elements, expected H*D = %lld",
                        qkv_shape_str(row, br, sizeof br), (long long)qkv_tensor_numel(row),
                        (long long)(H * D));
    qkv_tensor *in[2] = {x, row};
    int rec = qkv_ctx_recording(c, in, 2);
    int64_t shape[4] = {N, H, S + 1, D};
    QKV_TRY(qkv_ctx_tensor(c, 4, shape, rec, y));
    float *yd = (*y)->data;
    for (int64_t nh = 0; nh < N * H; nh++) {
        memcpy(yd + nh * (S + 1) * D, x->data + nh * S * D, (size_t)(S * D) * sizeof(float));
        if (row) memcpy(yd + (nh * (S + 1) + S) * D, row->data + (nh % H) * D, (size_t)D * sizeof(float));
    }
    if (!rec) return QKV_OK;
    append_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (append_saved){x, row, *y, N, H, S, D};
    return qkv_ctx_record(c, append_backward, s);
}
