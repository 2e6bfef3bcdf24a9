/* gather.c: y = a strided walk over x, the one kernel behind rearrange
 * (every einops pattern is a reshape, a permute of the elementary axes and
 * a reshape) and the patch embedding's patchifier.
 *
 * Reference: each element of y decodes its index into the walk's axes and
 * reads x. Fast: unit axes dropped, axes that stay contiguous merged, then
 * rows of the last axis copied (a memcpy when it has stride 1), rows spread
 * over OpenMP's threads. The backward is the same walk with the roles
 * swapped: dx[at(o)] += dy[o]. */
#include <string.h>
#include "nn/gather.h"

int qkv_gather_simplify(qkv_gather_map *m)
{
    int k = 0;
    for (int i = 0; i < m->n; i++) {
        if (m->len[i] == 1) continue;
        /* axis i follows axis k-1 in x when stepping k-1 once equals
         * stepping i through its whole length. */
        if (k > 0 && m->istride[k - 1] == m->istride[i] * m->len[i]) {
            m->len[k - 1] *= m->len[i];
            m->istride[k - 1] = m->istride[i];
            continue;
        }
        m->len[k] = m->len[i];
        m->istride[k] = m->istride[i];
        k++;
    }
    m->n = k;
    return k == 0 || (k == 1 && m->istride[0] == 1);
}

/* Offset in x of the walk's element idx (decoded slowest axis first). */
static int64_t walk_at(const qkv_gather_map *m, int64_t idx)
{
    int64_t at = 0;
    for (int i = m->n - 1; i >= 0; i--) {
        at += idx % m->len[i] * m->istride[i];
        idx /= m->len[i];
    }
    return at;
}

/* backward = 0: to[o] = from[at(o)]; 1: to[at(o)] += from[o]. */
static void walk_ref(const qkv_gather_map *m, const float *from, float *to, int64_t total,
                     int backward)
{
    for (int64_t o = 0; o < total; o++) {
        int64_t at = walk_at(m, o);
        if (backward) to[at] += from[o];
        else to[o] = from[at];
    }
}

static void walk_fast(const qkv_gather_map *m0, const float *from, float *to, int64_t total,
                      int backward)
{
    qkv_gather_map m = *m0;
    qkv_gather_simplify(&m);
    if (total == 0) return;
    if (m.n == 0) { /* a single element */
        if (backward) to[0] += from[0];
        else to[0] = from[0];
        return;
    }
    int64_t inner = m.len[m.n - 1], st = m.istride[m.n - 1], rows = total / inner;
    /* Rows of the walk touch disjoint elements of x (the walk is one to
     * one), so the backward's adds do not race. */
    qkv_gather_map outer = m;
    outer.n = m.n - 1;
    QKV_PAR_FOR(total >= QKV_PAR_MIN,
        for (int64_t r = 0; r < rows; r++) {
            int64_t at = walk_at(&outer, r);
            const float *src = backward ? from + r * inner : from + at;
            float *dst = backward ? to + at : to + r * inner;
            if (backward) {
                for (int64_t j = 0; j < inner; j++) dst[j * st] += src[j];
            } else if (st == 1) {
                memcpy(dst, src, (size_t)inner * sizeof(float));
            } else {
                for (int64_t j = 0; j < inner; j++) dst[j] = src[j * st];
            }
        });
}

static void walk(const qkv_gather_map *m, const float *from, float *to, int64_t total, int backward)
{
    if (qkv_reference()) walk_ref(m, from, to, total, backward);
    else walk_fast(m, from, to, total, backward);
}

typedef struct {
    qkv_tensor *x, *y;
    qkv_gather_map m;
} gather_saved;

/* Differentiates y[o] = x[at(o)]: dx[at(o)] += dy[o]. */
static qkv_status gather_backward(qkv_ctx *c, void *p)
{
    gather_saved *s = p;
    QKV_BACKWARD_ONE(c, s->y, s->x, dy, dx);
    walk(&s->m, dy, dx, qkv_tensor_numel(s->y), 1);
    return QKV_OK;
}

qkv_status qkv_gather(qkv_ctx *c, const char *fn, qkv_tensor *x, const qkv_gather_map *m,
                      int ndim, const int64_t *shape, qkv_tensor **y)
{
    int64_t total = 1, reach = 0;
    for (int i = 0; i < m->n; i++) {
        total *= m->len[i];
        if (m->len[i] > 0) reach += (m->len[i] - 1) * m->istride[i];
    }
    /* The caller's map must stay inside x: an internal invariant. */
    if (total > 0 && reach >= qkv_tensor_numel(x))
        return qkv_fail(QKV_ERR_STATE, "%s: internal error: the walk leaves x", fn);
    int64_t ny = 1;
    for (int i = 0; i < ndim; i++) ny *= shape[i];
    if (ny != total)
        return qkv_fail(QKV_ERR_STATE, "%s: internal error: the walk has %lld elements, y %lld",
                        fn, (long long)total, (long long)ny);
    qkv_tensor *in[1] = {x};
    int rec = qkv_ctx_recording(c, in, 1);
    QKV_TRY(qkv_ctx_tensor(c, ndim, shape, rec, y));
    walk(m, x->data, (*y)->data, total, 0);
    if (!rec) return QKV_OK;
    gather_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    s->x = x;
    s->y = *y;
    s->m = *m;
    return qkv_ctx_record(c, gather_backward, s);
}
