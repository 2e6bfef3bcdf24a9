/* tensor.c: dense row-major tensors, views and gradient buffers. */
#include <stdio.h>
#include <string.h>
#include "core/internal.h"

int64_t qkv_tensor_numel(const qkv_tensor *t)
{
    if (!t || t->ndim < 0 || t->ndim > QKV_MAX_DIMS) return 0; /* damaged: shape[] holds 4 */
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

const char *qkv_shape_str(const qkv_tensor *t, char *buf, size_t n)
{
    if (!buf || n == 0) return "";
    if (!t) {
        snprintf(buf, n, "(null)");
        return buf;
    }
    if (t->ndim < 0 || t->ndim > QKV_MAX_DIMS) { /* a damaged tensor: shape[] holds only 4 */
        snprintf(buf, n, "(with ndim %d)", t->ndim);
        return buf;
    }
    size_t k = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < t->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)t->shape[i]);
    if (t->ndim == 1 && k < n) k += (size_t)snprintf(buf + k, n - k, ",");
    if (k < n) snprintf(buf + k, n - k, ")");
    return buf;
}

/* Validates ndim and shape and returns the element count (or -1). */
static int64_t shape_numel(const char *fn, int ndim, const int64_t *shape)
{
    if (ndim < 0 || ndim > QKV_MAX_DIMS) {
        qkv_fail(QKV_ERR_SHAPE, "%s: ndim %d, expected 0..%d", fn, ndim, QKV_MAX_DIMS);
        return -1;
    }
    if (ndim > 0 && !shape) {
        qkv_fail(QKV_ERR_ARG, "%s: shape is NULL", fn);
        return -1;
    }
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] > 0 && n > INT64_MAX / 4 / shape[i])) {
            qkv_fail(QKV_ERR_SHAPE, "%s: bad size %lld in dim %d", fn, (long long)shape[i], i);
            return -1;
        }
        n *= shape[i];
    }
    return n;
}

static qkv_status tensor_header(qkv_arena *a, const char *fn, qkv_dtype dtype, int ndim,
                                const int64_t *shape, qkv_tensor **out)
{
    QKV_NEED(out, fn, "out");
    *out = NULL;
    QKV_NEED(a, fn, "arena");
    if (dtype != QKV_F32 && dtype != QKV_BOOL && dtype != QKV_I64)
        return qkv_fail(QKV_ERR_DTYPE, "%s: unknown dtype %d", fn, (int)dtype);
    if (shape_numel(fn, ndim, shape) < 0) return QKV_ERR_SHAPE;
    qkv_tensor *t = qkv_arena_alloc(a, sizeof *t);
    if (!t) return QKV_ERR_NOMEM;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    *out = t;
    return QKV_OK;
}

qkv_status qkv_tensor_new(qkv_arena *a, qkv_dtype dtype, int ndim, const int64_t *shape,
                          qkv_tensor **out)
{
    QKV_TRY(tensor_header(a, "tensor_new", dtype, ndim, shape, out));
    qkv_tensor *t = *out;
    int64_t n = qkv_tensor_numel(t);
    size_t size = dtype == QKV_F32 ? sizeof(float) : dtype == QKV_I64 ? sizeof(int64_t) : 1;
    void *mem = qkv_arena_alloc(a, (size_t)n * size);
    if (!mem) {
        *out = NULL;
        return QKV_ERR_NOMEM;
    }
    if (dtype == QKV_F32) t->data = mem;
    else if (dtype == QKV_I64) t->idx = mem;
    else t->mask = mem;
    return QKV_OK;
}

/* An F32 tensor whose data is not zeroed (core/internal.h). */
qkv_status qkv_tensor_new_uninit(qkv_arena *a, int ndim, const int64_t *shape, qkv_tensor **out)
{
    QKV_TRY(tensor_header(a, "tensor_new", QKV_F32, ndim, shape, out));
    qkv_tensor *t = *out;
    t->data = qkv_arena_alloc_uninit(a, (size_t)qkv_tensor_numel(t) * sizeof(float));
    if (!t->data) {
        *out = NULL;
        return QKV_ERR_NOMEM;
    }
    return QKV_OK;
}

/* A header of dtype dt over the caller's elems (argument arg of fn). */
static qkv_status tensor_wrap(qkv_arena *a, const char *fn, const char *arg, qkv_dtype dt, void *elems,
                              int ndim, const int64_t *shape, qkv_tensor **out)
{
    QKV_NEED(elems, fn, arg);
    QKV_TRY(tensor_header(a, fn, dt, ndim, shape, out));
    if (dt == QKV_F32) (*out)->data = elems;
    else if (dt == QKV_BOOL) (*out)->mask = elems;
    else (*out)->idx = elems;
    return QKV_OK;
}

qkv_status qkv_tensor_wrap(qkv_arena *a, float *data, int ndim, const int64_t *shape,
                           qkv_tensor **out)
{
    return tensor_wrap(a, "tensor_wrap", "data", QKV_F32, data, ndim, shape, out);
}

qkv_status qkv_tensor_wrap_bool(qkv_arena *a, uint8_t *mask, int ndim, const int64_t *shape,
                                qkv_tensor **out)
{
    return tensor_wrap(a, "tensor_wrap_bool", "mask", QKV_BOOL, mask, ndim, shape, out);
}

qkv_status qkv_tensor_wrap_i64(qkv_arena *a, int64_t *idx, int ndim, const int64_t *shape,
                               qkv_tensor **out)
{
    return tensor_wrap(a, "tensor_wrap_i64", "idx", QKV_I64, idx, ndim, shape, out);
}

/* A view: same dtype, data at an offset, gradient through the root base. */
static qkv_status tensor_view_at(qkv_arena *a, const char *fn, qkv_tensor *t, int64_t offset,
                                 int ndim, const int64_t *shape, qkv_tensor **out)
{
    QKV_TRY(tensor_header(a, fn, t->dtype, ndim, shape, out));
    qkv_tensor *v = *out;
    qkv_tensor *root = t->base ? t->base : t;
    v->base = root;
    v->offset = (t->base ? t->offset : 0) + offset;
    if (t->data) v->data = t->data + offset;
    if (t->mask) v->mask = t->mask + offset;
    if (t->idx) v->idx = t->idx + offset;
    if (t->grad) v->grad = t->grad + offset;
    v->requires_grad = t->requires_grad;
    v->name = t->name;
    return QKV_OK;
}

qkv_status qkv_tensor_view(qkv_arena *a, qkv_tensor *t, int ndim, const int64_t *shape,
                           qkv_tensor **out)
{
    QKV_NEED(out, "tensor_view", "out");
    *out = NULL;
    QKV_NEED(t, "tensor_view", "t");
    int64_t n = shape_numel("tensor_view", ndim, shape);
    if (n < 0) return QKV_ERR_SHAPE;
    if (n != qkv_tensor_numel(t)) {
        char b[64];
        return qkv_fail(QKV_ERR_SHAPE, "tensor_view: cannot view %s (%lld elements) as %lld elements",
                        qkv_shape_str(t, b, sizeof b), (long long)qkv_tensor_numel(t), (long long)n);
    }
    return tensor_view_at(a, "tensor_view", t, 0, ndim, shape, out);
}

qkv_status qkv_tensor_narrow(qkv_arena *a, qkv_tensor *t, int64_t start, int64_t len,
                             qkv_tensor **out)
{
    QKV_NEED(out, "tensor_narrow", "out");
    *out = NULL;
    QKV_NEED(t, "tensor_narrow", "t");
    if (t->ndim < 1) return qkv_fail(QKV_ERR_SHAPE, "tensor_narrow: t has 0 dims");
    if (start < 0 || len < 0 || start > t->shape[0] - len) {
        char b[64];
        return qkv_fail(QKV_ERR_SHAPE, "tensor_narrow: %lld rows from row %lld do not fit t %s",
                        (long long)len, (long long)start, qkv_shape_str(t, b, sizeof b));
    }
    int64_t row = t->shape[0] ? qkv_tensor_numel(t) / t->shape[0] : 0;
    int64_t shape[QKV_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[0] = len;
    return tensor_view_at(a, "tensor_narrow", t, start * row, t->ndim, shape, out);
}

float *qkv_tensor_grad(qkv_arena *a, qkv_tensor *t)
{
    if (!t || t->dtype != QKV_F32) return NULL;
    if (t->grad) return t->grad;
    if (t->base) {
        float *g = qkv_tensor_grad(a, t->base);
        if (!g) return NULL;
        t->grad = g + t->offset;
        return t->grad;
    }
    t->grad = qkv_arena_alloc(a, (size_t)qkv_tensor_numel(t) * sizeof(float));
    return t->grad;
}

float *qkv_tensor_grad_fresh(qkv_arena *a, qkv_tensor *t, int *fresh)
{
    *fresh = 0;
    if (!t || t->dtype != QKV_F32) return NULL;
    if (t->grad) return t->grad;
    /* A view shares its base's gradient: fresh only where the base has none
     * yet and the view covers all of it (a reshape; views are contiguous). */
    qkv_tensor *b = t->base ? t->base : t;
    if (t->base && (b->grad || t->offset != 0 || qkv_tensor_numel(t) != qkv_tensor_numel(b)))
        return qkv_tensor_grad(a, t);
    b->grad = qkv_arena_alloc_uninit(a, (size_t)qkv_tensor_numel(b) * sizeof(float));
    t->grad = b->grad;
    *fresh = t->grad != NULL;
    return t->grad;
}

qkv_status qkv_tensor_set_requires_grad(qkv_tensor *t, int requires_grad)
{
    QKV_NEED(t, "tensor_set_requires_grad", "t");
    if (t->dtype != QKV_F32)
        return qkv_fail(QKV_ERR_DTYPE, "tensor_set_requires_grad: t is %s; only F32 tensors can "
                        "require gradients", t->dtype == QKV_BOOL ? "BOOL" : "I64");
    if (t->base)
        return qkv_fail(QKV_ERR_STATE, "tensor_set_requires_grad: t is a view; set it on the "
                        "tensor it views (its gradient is that tensor's)");
    t->requires_grad = requires_grad != 0;
    return QKV_OK;
}

qkv_status qkv_tensor_read_grad(const qkv_tensor *t, float *dst, int64_t n)
{
    QKV_NEED(t, "tensor_read_grad", "t");
    QKV_NEED(dst, "tensor_read_grad", "dst");
    if (t->dtype != QKV_F32)
        return qkv_fail(QKV_ERR_DTYPE, "tensor_read_grad: t is not F32 (it has no gradient)");
    int64_t numel = qkv_tensor_numel(t);
    if (n != numel)
        return qkv_fail(QKV_ERR_SHAPE, "tensor_read_grad: n %lld is not t's %lld elements",
                        (long long)n, (long long)numel);
    /* A view's gradient is its base's, from its offset, even when the base's
     * gradient was allocated after the view was made. */
    const float *g = t->grad;
    if (!g && t->base && t->base->grad) g = t->base->grad + t->offset;
    if (g) memcpy(dst, g, (size_t)n * sizeof(float));
    else memset(dst, 0, (size_t)n * sizeof(float));
    return QKV_OK;
}
