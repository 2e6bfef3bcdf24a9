/* loss_linear.c: cross_entropy(linear(x, W, b), target) as one tape op
 * (qkv_linear_cross_entropy). The two ops write the logits (M,V), read
 * them for the softmax, write the softmax, read it back for the gradient,
 * write the gradient, and then the backward reads it twice more (its bf16
 * copy, the bias's column sums) before the two products. Here one pass
 * over the logits, row by row while a row is in cache, gives the row's
 * loss, its gradient (for upstream gradient 1) in place of the logits (in
 * bf16 in the BF16 mode, where the products take it so), and the bias
 * gradient's column sums; the backward scales by the upstream gradient in
 * the products' alpha. Under qkv_reference(), and when not recording, it
 * is the two ops. */
#include <math.h>
#include "core/internal.h"
#include "kernels/bf16.h"
#include "kernels/rows.h"
#include "nn/linear.h"
#include "train/loss.h"

/* The rows go by this many fixed chunks (fewer when there are fewer rows),
 * each with its own column sums, added in chunk order: the bias gradient
 * does not depend on the thread count. */
enum { LCE_CHUNKS = 16 };

typedef struct {
    qkv_tensor *x, *w, *b, *loss;
    int64_t M, K, V;
    float *d;            // (M,V) d loss / d logits for an upstream gradient of 1 (NULL when in d16)
    uint16_t *d16;       // (M,V) the same in bf16 (BF16 mode on oneDNN, reductions MEAN and SUM), or NULL
    qkv_linear_kept k; // what the forward converted (linear.h), or all NULL
    float *colsum;       // (V) the column sums of d
    qkv_reduction r;
} lce_saved;

/* Row x (V) of the logits without the bias b (V, or NULL: none), which is
 * added here while the row is in cache (as the product's epilogue would
 * add it: the same sums), with label y: its loss terms, and the row turned
 * into d loss_i / d x for the terms' weights wn and ws (at an upstream
 * gradient of 1), over x or, in bf16, to d16; colsum += it. The formulas
 * of qkv_cross_entropy's vectorised path (loss.c), in three vectorised
 * passes over the row (rows.h: qkv_ce_*), the gradient in float. */
static void lce_row(float *restrict x, const float *restrict b, int64_t V, int64_t y, double wn, double ws,
                    uint16_t *d16, float *colsum, double *nll, double *smooth)
{
    float mx = qkv_ce_bias_max(x, x, b, V);
    double xy = x[y], sx = ws != 0 ? qkv_sum_f64(x, V) : 0.0;
    double sum = qkv_ce_exp_sum(x, mx, V), sc = 1.0 / sum; /* x = exp(x - mx) */
    double lse = isinf(mx) ? (double)mx : (double)mx + log(sum);
    *nll = lse - xy;
    *smooth = (double)V * lse - sx;
    double py = sc * (double)x[y];
    float gy = (float)(wn * (py - 1.0) + ws * ((double)V * py - 1.0)); /* the label's own term */
    /* the other columns: wn sc e + ws (V sc e - 1) = e a + c, in float */
    float a = (float)((wn + ws * (double)V) * sc), c = (float)-ws;
    qkv_ce_grad(x, y, a, c, d16, colsum);
    qkv_ce_grad(x + y + 1, V - y - 1, a, c, d16 ? d16 + y + 1 : NULL, colsum + y + 1);
    if (d16) d16[y] = qkv_bf16_from_float(gy);
    else x[y] = gy;
    colsum[y] += gy;
}

/* Differentiates loss = R(cross_entropy(x W^T + b)) with saved d = dloss /
 * dlogits at upstream gradient 1: dx += g d W, dW += g d^T x, db += g
 * colsum(d); g the loss's gradient (NONE: per row, applied to d first). */
static qkv_status lce_backward(qkv_ctx *c, void *p)
{
    lce_saved *s = p;
    const float *dl = s->loss->grad; // () or (M)
    if (!dl) return QKV_OK;
    qkv_arena *a = qkv_ctx_arena(c);
    float g = dl[0];
    const uint16_t *d16 = s->d16;
    const float *d = s->d;        // (M,V) or NULL
    const float *colsum = s->colsum; // (V)
    if (s->r == QKV_REDUCTION_NONE) { /* each row times its own gradient (a copy); then as for g = 1 */
        float *dg = qkv_arena_alloc_uninit(a, (size_t)(s->M * s->V) * sizeof *dg); // (M,V)
        float *cs = qkv_arena_alloc(a, (size_t)s->V * sizeof *cs);                // (V)
        if (!dg || !cs) return QKV_ERR_NOMEM;
        QKV_PAR_FOR(s->M * s->V >= QKV_PAR_MIN,
            for (int64_t i = 0; i < s->M; i++)
                for (int64_t j = 0; j < s->V; j++) dg[i * s->V + j] = s->d[i * s->V + j] * dl[i]);
        qkv_rows_sum_into(cs, dg, s->M, s->V);
        if (s->k.x16 && !(d16 = qkv_bf16_copy(a, dg, s->M * s->V))) return QKV_ERR_NOMEM;
        d = dg, colsum = cs, g = 1.0f;
    }
    if (s->b && s->b->requires_grad) {
        float *db = qkv_tensor_grad(a, s->b); // (V)
        if (!db) return QKV_ERR_NOMEM;
        for (int64_t j = 0; j < s->V; j++) db[j] += g * colsum[j];
    }
    if (s->x->requires_grad) {
        int fresh; /* a new gradient buffer is written (beta 0), not zeroed and added into */
        float *dx = qkv_tensor_grad_fresh(a, s->x, &fresh); // (M,K)
        if (!dx) return QKV_ERR_NOMEM;
        qkv_linear_dx(c, &s->k, s->M, s->K, s->V, g, d, d16, s->w->data, fresh ? 0.0f : 1.0f, dx);
    }
    if (s->w->requires_grad) {
        float *dw = qkv_tensor_grad(a, s->w); // (V,K)
        if (!dw) return QKV_ERR_NOMEM;
        int done;
        QKV_TRY(qkv_linear_weight_grad(c, s->M, s->K, s->V, g, d16 ? NULL : d, d16, s->x->data, &s->k, dw,
                                       NULL, &done));
    }
    return QKV_OK;
}

/* The linear layer's arguments (qkv_linear's checks), at least one class,
 * and target I64 shaped like x's leading dims. */
static qkv_status lce_check(const char *fn, const qkv_tensor *x, const qkv_tensor *w, const qkv_tensor *b,
                            const qkv_tensor *y)
{
    char bx[64], bw[64], by[64];
    QKV_TRY(qkv_linear_check_shapes(fn, x, w, b));
    if (w->shape[0] < 1)
        return qkv_fail(QKV_ERR_SHAPE, "%s: weight %s, expected (V,K) with V >= 1 classes", fn,
                        qkv_shape_str(w, bw, sizeof bw));
    if (y->dtype != QKV_I64 || (!y->idx && qkv_tensor_numel(y) > 0))
        return qkv_fail(QKV_ERR_DTYPE, "%s: target must be QKV_I64 class indices", fn);
    int ok = y->ndim == x->ndim - 1;
    for (int i = 0; ok && i < y->ndim; i++) ok = y->shape[i] == x->shape[i];
    if (!ok)
        return qkv_fail(QKV_ERR_SHAPE, "%s: target %s, expected x's leading dims (x is %s)", fn,
                        qkv_shape_str(y, by, sizeof by), qkv_shape_str(x, bx, sizeof bx));
    return QKV_OK;
}

/* The two ops: linear, then cross_entropy on (M,V) logits. */
static qkv_status lce_compose(qkv_ctx *c, qkv_tensor *x, qkv_tensor *w, qkv_tensor *b, const qkv_tensor *y,
                              int64_t M, int64_t ignore, double ls, qkv_reduction r, qkv_tensor **loss)
{
    qkv_tensor *lg, *l2, *y1;
    QKV_TRY(qkv_linear(c, x, w, b, &lg));
    QKV_TRY(qkv_reshape(c, lg, 2, (int64_t[]){M, w->shape[0]}, &l2));
    QKV_TRY(qkv_tensor_view(qkv_ctx_arena(c), (qkv_tensor *)y, 1, &M, &y1));
    QKV_TRY(qkv_cross_entropy(c, l2, y1, ignore, ls, r, loss));
    if (r != QKV_REDUCTION_NONE) return QKV_OK;
    return qkv_reshape(c, *loss, y->ndim, y->shape, loss);
}

qkv_status qkv_linear_cross_entropy(qkv_ctx *c, qkv_tensor *x, qkv_tensor *weight, qkv_tensor *bias,
                                    const qkv_tensor *target, int64_t ignore_index, double label_smoothing,
                                    qkv_reduction reduction, qkv_tensor **loss)
{
    const char *fn = "linear_cross_entropy";
    QKV_NEED_OUT_CTX(loss, c, fn, "loss");
    QKV_NEED(x, fn, "x");
    QKV_NEED(weight, fn, "weight");
    QKV_NEED(target, fn, "target");
    QKV_TRY(qkv_loss_check_reduction(fn, reduction));
    QKV_TRY(qkv_loss_check_smoothing(fn, label_smoothing));
    QKV_TRY(lce_check(fn, x, weight, bias, target));
    int64_t V = weight->shape[0], K = weight->shape[1], M = qkv_tensor_numel(target);
    QKV_TRY(qkv_ce_check_labels(fn, target, V, ignore_index));
    qkv_tensor *in3[3] = {x, weight, bias};
    int rec = qkv_ctx_recording(c, in3, 3);
    if (!rec || qkv_reference() || M == 0 || K == 0)
        return lce_compose(c, x, weight, bias, target, M, ignore_index, label_smoothing, reduction, loss);
    QKV_TRY(qkv_loss_tensor(c, reduction, target, rec, loss));
    lce_saved *s = qkv_ctx_alloc(c, sizeof *s);
    float *lg = qkv_ctx_alloc_uninit(c, (size_t)(M * V) * sizeof *lg); // (M,V) the logits, then d
    int nch = M < LCE_CHUNKS ? (int)M : LCE_CHUNKS;
    float *part = qkv_ctx_alloc(c, (size_t)((nch + 1) * V) * sizeof *part); // (nch,V) column sums, then (V)
    double *terms = qkv_ctx_alloc(c, (size_t)(2 * M) * sizeof *terms);      // (M,2) nll, smooth
    if (!s || !lg || !part || !terms) return QKV_ERR_NOMEM;
    qkv_linear_kept k;
    QKV_TRY(qkv_linear_product(c, 1, x->requires_grad, weight->requires_grad, M, V, K, x->data, weight->data, NULL,
                               lg, &k)); /* bias: lce_row */
    const float *bd = bias ? bias->data : NULL; // (V)
    uint16_t *d16 = NULL;
    if (k.x16 && reduction != QKV_REDUCTION_NONE &&
        !(d16 = qkv_arena_alloc_uninit(qkv_ctx_arena(c), (size_t)(M * V) * sizeof *d16)))
        return QKV_ERR_NOMEM;
    int64_t n_valid = 0;
    for (int64_t i = 0; i < M; i++) n_valid += target->idx[i] != ignore_index;
    double wn, ws; /* the terms' weights at an upstream gradient of 1 */
    qkv_ce_weights(reduction, label_smoothing, V, n_valid, 1.0, &wn, &ws);
    int64_t len = (M + nch - 1) / nch;
#pragma omp parallel for if (M * V >= QKV_PAR_MIN)
    for (int k = 0; k < nch; k++)
        for (int64_t i = k * len; i < M && i < (k + 1) * len; i++) {
            int64_t y = target->idx[i];
            float *row = lg + i * V;
            if (y == ignore_index) { /* no loss, a zero gradient */
                for (int64_t j = 0; j < V; j++) {
                    if (d16) d16[i * V + j] = 0;
                    else row[j] = 0.0f;
                }
                terms[2 * i] = terms[2 * i + 1] = 0.0;
                continue;
            }
            lce_row(row, bd, V, y, wn, ws, d16 ? d16 + i * V : NULL, part + k * V, &terms[2 * i], &terms[2 * i + 1]);
        }
    float *colsum = part + nch * V; // (V)
    for (int k = 0; k < nch; k++)
        for (int64_t j = 0; j < V; j++) colsum[j] += part[k * V + j];
    /* the loss: qkv_cross_entropy's sums, in row order (an ignored row's terms are 0) */
    float *l = (*loss)->data;
    double nll_sum = 0, smooth_sum = 0;
    for (int64_t i = 0; i < M; i++) {
        if (reduction == QKV_REDUCTION_NONE) l[i] = qkv_ce_mix(label_smoothing, V, terms[2 * i], terms[2 * i + 1]);
        nll_sum += terms[2 * i];
        smooth_sum += terms[2 * i + 1];
    }
    if (reduction != QKV_REDUCTION_NONE) l[0] = qkv_ce_reduce(reduction, label_smoothing, V, n_valid, nll_sum, smooth_sum);
    *s = (lce_saved){x, weight, bias, *loss, M, K, V, d16 ? NULL : lg, d16, k, colsum, reduction};
    return qkv_ctx_record(c, lce_backward, s);
}
