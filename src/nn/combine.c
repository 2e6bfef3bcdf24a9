/* combine.c: ops of two tensors: add (with broadcasting over leading dims,
 * for residual connections and positional encodings) and cat. */
#include <string.h>
#include "kernels/rows.h"
#include "nn/nn_check.h"

/* ---- add ------------------------------------------------------------------ */

typedef struct {
    qkv_tensor *a, *b, *y; /* a has y's shape; b is a's trailing dims */
    int64_t rows, nb;      /* y as (rows,nb) */
} add_saved;

/* Differentiates y[r, j] = a[r, j] + b[j]: da += dy, db[j] += sum_r dy[r, j].
 * A residual connection (b of a's shape: rows is 1) gives both dy, in one
 * pass; a new gradient buffer gets dy's copy, not zeros and an addition. */
static qkv_status add_backward(qkv_ctx *c, void *p)
{
    add_saved *s = p;
    const float *dy = s->y->grad; // (rows,nb)
    if (!dy) return QKV_OK;
    qkv_arena *ar = qkv_ctx_arena(c);
    int same = s->rows == 1, fresh[2] = {0, 0};
    qkv_tensor *t[2] = {s->a, s->b};
    float *g[2] = {NULL, NULL}; // (rows,nb) each
    for (int i = 0; i < 1 + same; i++)
        if (t[i]->requires_grad && !(g[i] = qkv_tensor_grad_fresh(ar, t[i], &fresh[i]))) return QKV_ERR_NOMEM;
    if (g[0] || g[1]) qkv_vec_to2(g[0], !fresh[0], g[1], !fresh[1], dy, s->rows * s->nb);
    if (!same && s->b->requires_grad) {
        float *db = qkv_tensor_grad(ar, s->b); // (nb)
        if (!db) return QKV_ERR_NOMEM;
        qkv_rows_sum_into(db, dy, s->rows, s->nb);
    }
    return QKV_OK;
}

/* True when small's shape equals big's trailing small->ndim dims. */
static int trailing_match(const qkv_tensor *big, const qkv_tensor *small)
{
    if (small->ndim > big->ndim) return 0;
    int off = big->ndim - small->ndim;
    for (int i = 0; i < small->ndim; i++)
        if (small->shape[i] != big->shape[off + i]) return 0;
    return 1;
}

qkv_status qkv_add(qkv_ctx *c, qkv_tensor *a, qkv_tensor *b, qkv_tensor **y)
{
    QKV_NEED_OUT_CTX(y, c, "add", "y");
    QKV_NEED_F32(a, "add", "a");
    QKV_NEED_F32(b, "add", "b");
    /* Addition commutes: put the larger shape first. */
    if (!trailing_match(a, b)) {
        if (!trailing_match(b, a)) {
            char ba[64], bb[64];
            return qkv_fail(QKV_ERR_SHAPE,
                            "add: a %s and b %s differ, and neither is the other's trailing dims",
                            qkv_shape_str(a, ba, sizeof ba), qkv_shape_str(b, bb, sizeof bb));
        }
        qkv_tensor *t = a;
        a = b;
        b = t;
    }
    qkv_tensor *in[2] = {a, b};
    int rec = qkv_ctx_recording(c, in, 2);
    QKV_TRY(qkv_ctx_tensor_uninit(c, a->ndim, a->shape, rec, y)); /* written in full below */
    int64_t nb = qkv_tensor_numel(b), rows = nb ? qkv_tensor_numel(a) / nb : 0;
    const float *ad = a->data, *bd = b->data; // (rows,nb), (nb)
    float *yd = (*y)->data;                   // (rows,nb)
    qkv_rows_add(yd, ad, bd, rows, nb);
    if (!rec) return QKV_OK;
    add_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (add_saved){a, b, *y, rows, nb};
    return qkv_ctx_record(c, add_backward, s);
}

/* ---- cat ------------------------------------------------------------------ */

typedef struct {
    qkv_tensor *a, *b, *y;
    int64_t outer, ia, ib; /* a as (outer,ia), b as (outer,ib), y as (outer,ia+ib) */
} cat_saved;

/* dst[i] = src[i] (fresh: nothing there yet) or dst[i] += src[i], i < n. */
static void cat_put(float *dst, const float *src, int64_t n, int fresh)
{
    if (fresh) memcpy(dst, src, (size_t)n * sizeof(float));
    else
        for (int64_t i = 0; i < n; i++) dst[i] += src[i];
}

/* Differentiates y[o] = (a[o], b[o]) row by row: da[o] += dy[o, :ia],
 * db[o] += dy[o, ia:] (written, not added, into a fresh gradient); the
 * rows on OpenMP's threads where there are many. Two different views of
 * one tensor (cat(h[:-1], h[1:])) share a gradient whose rows overlap at
 * other o: they are added into, zero-filled first, on one thread, row
 * after row (a fresh write would drop an earlier row's sum; two threads
 * would add into one element at once). One tensor twice takes the fast
 * path: each row's two writes stay on one thread, in order. */
static qkv_status cat_backward(qkv_ctx *c, void *p)
{
    cat_saved *s = p;
    const float *dy = s->y->grad; // (outer,ia+ib)
    if (!dy) return QKV_OK;
    qkv_arena *ar = qkv_ctx_arena(c);
    int overlap = s->a != s->b && (s->a->base ? s->a->base : s->a) == (s->b->base ? s->b->base : s->b);
    int fa = 0, fb = 0;
    float *da = NULL, *db = NULL; // (outer,ia), (outer,ib)
    if (s->a->requires_grad)
        da = overlap ? qkv_tensor_grad(ar, s->a) : qkv_tensor_grad_fresh(ar, s->a, &fa);
    if (s->b->requires_grad)
        db = overlap ? qkv_tensor_grad(ar, s->b) : qkv_tensor_grad_fresh(ar, s->b, &fb);
    if ((s->a->requires_grad && !da) || (s->b->requires_grad && !db)) return QKV_ERR_NOMEM;
    int64_t ia = s->ia, ib = s->ib;
    QKV_PAR_FOR(!overlap && s->outer * (ia + ib) >= QKV_PAR_MIN, for (int64_t o = 0; o < s->outer; o++) {
        const float *row = dy + o * (ia + ib);
        if (da) cat_put(da + o * ia, row, ia, fa);
        if (db) cat_put(db + o * ib, row + ia, ib, fb);
    });
    return QKV_OK;
}

qkv_status qkv_cat(qkv_ctx *c, qkv_tensor *a, qkv_tensor *b, int dim, qkv_tensor **y)
{
    QKV_NEED_OUT_CTX(y, c, "cat", "y");
    QKV_NEED_F32(a, "cat", "a");
    QKV_NEED_F32(b, "cat", "b");
    char ba[64], bb[64];
    int nd = a->ndim;
    if (nd < 1 || b->ndim != nd)
        return qkv_fail(QKV_ERR_SHAPE, "cat: a %s and b %s must have the same number of dims (at least 1)",
                        qkv_shape_str(a, ba, sizeof ba), qkv_shape_str(b, bb, sizeof bb));
    if (dim < -nd || dim >= nd)
        return qkv_fail(QKV_ERR_ARG, "cat: dim %d out of range for %d-dim tensors (expected %d..%d)",
                        dim, nd, -nd, nd - 1);
    int d = dim < 0 ? dim + nd : dim;
    for (int i = 0; i < nd; i++)
        if (i != d && a->shape[i] != b->shape[i])
            return qkv_fail(QKV_ERR_SHAPE, "cat: a %s and b %s differ in dim %d (only dim %d may differ)",
                            qkv_shape_str(a, ba, sizeof ba), qkv_shape_str(b, bb, sizeof bb), i, d);
    int64_t shape[QKV_MAX_DIMS], outer = 1, inner = 1;
    for (int i = 0; i < nd; i++) {
        shape[i] = i == d ? a->shape[i] + b->shape[i] : a->shape[i];
        if (i < d) outer *= a->shape[i];
        if (i > d) inner *= a->shape[i];
    }
    qkv_tensor *in[2] = {a, b};
    int rec = qkv_ctx_recording(c, in, 2);
    QKV_TRY(qkv_ctx_tensor_uninit(c, nd, shape, rec, y)); /* written in full below */
    int64_t ia = a->shape[d] * inner, ib = b->shape[d] * inner;
    float *yd = (*y)->data; // (outer,ia+ib)
    QKV_PAR_FOR(outer * (ia + ib) >= QKV_PAR_MIN, for (int64_t o = 0; o < outer; o++) {
        memcpy(yd + o * (ia + ib), a->data + o * ia, (size_t)ia * sizeof(float));
        memcpy(yd + o * (ia + ib) + ia, b->data + o * ib, (size_t)ib * sizeof(float));
    });
    if (!rec) return QKV_OK;
    cat_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (cat_saved){a, b, *y, outer, ia, ib};
    return qkv_ctx_record(c, cat_backward, s);
}
