/* linear_bf16.c: bf16 copies of a model's weights for inference
 * (qkv_bf16_weights, qkv/nn.h) and the linear layer over them, which
 * qkv_linear calls while a cached forward has them set on the ctx. */
#include <stdlib.h>
#include <string.h>
#include "core/internal.h"
#include "kernels/gemm.h"
#include "kernels/half.h"
#include "kernels/matvec.h"
#include "kernels/rows.h"
#include "nn/linear_bf16.h"

/* Up to this many rows of x the bf16 weights are read directly
 * (qkv_matvec_bf16, which reads them once per 4 rows); a longer block (a
 * prompt) multiplies by them widened back to floats through qkv_gemm. */
enum { MATVEC_ROWS = 8 };

static int by_address(const void *a, const void *b)
{
    const qkv_tensor *x = *(qkv_tensor *const *)a, *y = *(qkv_tensor *const *)b;
    return x->data < y->data ? -1 : x->data > y->data;
}

qkv_status qkv_bf16_weights_init(qkv_bf16_weights *w, qkv_params *p)
{
    const char *fn = "bf16_weights_init";
    QKV_NEED(w, fn, "weights");
    *w = (qkv_bf16_weights){0};
    QKV_NEED(p, fn, "params");
    int n = qkv_params_count(p), k = 0;
    int64_t total = 0;
    qkv_tensor **ts = malloc((size_t)(n > 0 ? n : 1) * sizeof *ts);
    if (!ts) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    for (int i = 0; i < n; i++) {
        qkv_tensor *t = qkv_params_at(p, i);
        if (t && t->dtype == QKV_F32 && t->ndim == 2 && t->data && !t->base) {
            ts[k++] = t;
            total += qkv_tensor_numel(t);
        }
    }
    qsort(ts, (size_t)k, sizeof *ts, by_address);
    w->f32 = malloc((size_t)(k > 0 ? k : 1) * sizeof *w->f32);
    w->numel = malloc((size_t)(k > 0 ? k : 1) * sizeof *w->numel);
    w->bf16 = malloc((size_t)(k > 0 ? k : 1) * sizeof *w->bf16);
    w->data = malloc((size_t)(total > 0 ? total : 1) * sizeof *w->data);
    if (!w->f32 || !w->numel || !w->bf16 || !w->data) {
        free(ts);
        qkv_bf16_weights_free(w);
        return qkv_fail(QKV_ERR_NOMEM, "%s: cannot allocate %lld bf16 weights", fn,
                        (long long)total);
    }
    int64_t at = 0;
    for (int i = 0; i < k; i++) {
        int64_t m = qkv_tensor_numel(ts[i]);
        w->f32[i] = ts[i]->data;
        w->numel[i] = m;
        w->bf16[i] = w->data + at;
        qkv_bf16_from_floats(ts[i]->data, w->bf16[i], m);
        at += m;
    }
    w->count = k;
    free(ts);
    return QKV_OK;
}

void qkv_bf16_weights_free(qkv_bf16_weights *w)
{
    if (!w) return;
    free(w->f32);
    free(w->numel);
    free(w->bf16);
    free(w->data);
    *w = (qkv_bf16_weights){0};
}

const uint16_t *linear_bf16_find(const qkv_bf16_weights *t, const qkv_tensor *w)
{
    if (!t || !t->count || !w->data) return NULL;
    int64_t lo = 0, hi = t->count - 1, n = qkv_tensor_numel(w);
    while (lo < hi) { /* the last copy whose data starts at or before w's */
        int64_t mid = (lo + hi + 1) / 2;
        if (t->f32[mid] <= w->data) lo = mid;
        else hi = mid - 1;
    }
    const float *base = t->f32[lo];
    if (w->data < base || w->data + n > base + t->numel[lo]) return NULL;
    return t->bf16[lo] + (w->data - base);
}

qkv_status linear_bf16(qkv_ctx *c, int64_t M, int64_t out, int64_t in, const float *x,
                       const uint16_t *w16, const float *b, float *y)
{
    if (b) qkv_rows_broadcast(y, b, M, out);
    else memset(y, 0, (size_t)(M * out) * sizeof *y);
    if (M <= MATVEC_ROWS) {
        qkv_matvec_bf16(M, out, in, x, w16, y);
        return QKV_OK;
    }
    qkv_arena *a = qkv_ctx_arena(c);
    qkv_arena_mark mark = qkv_arena_get_mark(a);
    float *wf = qkv_arena_alloc(a, (size_t)(out * in) * sizeof *wf); // (out,in)
    if (!wf) return qkv_fail(QKV_ERR_NOMEM, "linear: cannot allocate %lld floats of scratch",
                             (long long)(out * in));
    qkv_bf16_to_floats(w16, wf, out * in);
    qkv_gemm(0, 1, M, out, in, 1.0f, x, in, wf, in, 1.0f, y, out);
    qkv_arena_release(a, mark);
    return QKV_OK;
}
