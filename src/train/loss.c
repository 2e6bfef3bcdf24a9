/* loss.c: F.mse_loss and F.cross_entropy (class-index targets, ignore_index,
 * label smoothing) as tape ops, with PyTorch 1.13's reductions.
 *
 * Sums are taken in double. The cross entropy keeps the log-sum-exp of every
 * position and, when recording, the softmax (one exp per logit, as large as
 * the logits; vectorised in float when the classes are the last dim, under
 * qkv_reference() libm's exp in double) for the backward. Positions run on
 * OpenMP's threads; each one's numbers do not depend on the thread count. */
#include <math.h>
#include <stdio.h>
#include "core/internal.h"
#include "kernels/rows.h"
#include "train/loss.h"

qkv_status qkv_loss_check_reduction(const char *fn, qkv_reduction r)
{
    if (r != QKV_REDUCTION_MEAN && r != QKV_REDUCTION_SUM && r != QKV_REDUCTION_NONE)
        return qkv_fail(QKV_ERR_ARG, "%s: reduction %d, expected QKV_REDUCTION_MEAN, _SUM or _NONE",
                        fn, (int)r);
    return QKV_OK;
}

qkv_status qkv_loss_check_smoothing(const char *fn, double label_smoothing)
{
    if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0))
        return qkv_fail(QKV_ERR_ARG, "%s: label_smoothing %g outside [0,1]", fn, label_smoothing);
    return QKV_OK;
}

/* The arguments every loss of this file takes, in order: loss (NULL
 * first), ctx, its input (named xname), target and the reduction. */
static qkv_status loss_args(const char *fn, qkv_tensor **loss, qkv_ctx *c, const qkv_tensor *x,
                            const char *xname, const qkv_tensor *target, qkv_reduction r)
{
    QKV_NEED_OUT_CTX(loss, c, fn, "loss");
    QKV_NEED(x, fn, xname);
    QKV_NEED(target, fn, "target");
    return qkv_loss_check_reduction(fn, r);
}

qkv_status qkv_loss_tensor(qkv_ctx *c, qkv_reduction r, const qkv_tensor *like, int rec,
                              qkv_tensor **loss)
{
    if (r == QKV_REDUCTION_NONE) return qkv_ctx_tensor(c, like->ndim, like->shape, rec, loss);
    return qkv_ctx_tensor(c, 0, NULL, rec, loss);
}

/* ---- mean squared error ------------------------------------------------- */

typedef struct {
    qkv_tensor *x, *t, *loss;
    qkv_reduction r;
    int64_t n;
} mse_saved;

/* Differentiates loss = reduce((x - t)^2):
 * dx += 2 (x - t) * dl (dl / n for MEAN), dt -= the same. */
static qkv_status mse_backward(qkv_ctx *c, void *p)
{
    mse_saved *s = p;
    const float *dl = s->loss->grad; // () or like x
    if (!dl) return QKV_OK;
    qkv_arena *a = qkv_ctx_arena(c);
    float *dx = s->x->requires_grad ? qkv_tensor_grad(a, s->x) : NULL; // like x
    float *dt = s->t->requires_grad ? qkv_tensor_grad(a, s->t) : NULL; // like x
    if ((s->x->requires_grad && !dx) || (s->t->requires_grad && !dt)) return QKV_ERR_NOMEM;
    const float *x = s->x->data, *t = s->t->data; // like x
    float scale = s->r == QKV_REDUCTION_MEAN ? (float)(2.0 / (double)s->n) : 2.0f;
    for (int64_t i = 0; i < s->n; i++) {
        float g = s->r == QKV_REDUCTION_NONE ? dl[i] : dl[0];
        float d = scale * g * (x[i] - t[i]);
        if (dx) dx[i] += d;
        if (dt) dt[i] -= d;
    }
    return QKV_OK;
}

qkv_status qkv_mse_loss(qkv_ctx *c, qkv_tensor *input, qkv_tensor *target,
                        qkv_reduction reduction, qkv_tensor **loss)
{
    QKV_TRY(loss_args("mse_loss", loss, c, input, "input", target, reduction));
    if (input->dtype != QKV_F32 || target->dtype != QKV_F32 ||
        (qkv_tensor_numel(input) > 0 && (!input->data || !target->data)))
        return qkv_fail(QKV_ERR_DTYPE, "mse_loss: input and target must be F32");
    char bi[64], bt[64];
    int same = input->ndim == target->ndim;
    for (int i = 0; same && i < input->ndim; i++) same = input->shape[i] == target->shape[i];
    if (!same)
        return qkv_fail(QKV_ERR_SHAPE, "mse_loss: target %s, expected the shape of input %s",
                        qkv_shape_str(target, bt, sizeof bt), qkv_shape_str(input, bi, sizeof bi));
    qkv_tensor *in2[2] = {input, target};
    int rec = qkv_ctx_recording(c, in2, 2);
    QKV_TRY(qkv_loss_tensor(c, reduction, input, rec, loss));
    int64_t n = qkv_tensor_numel(input);
    const float *x = input->data, *t = target->data; // like input
    float *l = (*loss)->data;                       // () or like input
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        float d = x[i] - t[i];
        if (reduction == QKV_REDUCTION_NONE) l[i] = d * d;
        else sum += (double)d * d;
    }
    if (reduction == QKV_REDUCTION_SUM) l[0] = (float)sum;
    if (reduction == QKV_REDUCTION_MEAN) l[0] = n ? (float)(sum / (double)n) : NAN;
    if (!rec) return QKV_OK;
    mse_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (mse_saved){input, target, *loss, reduction, n};
    return qkv_ctx_record(c, mse_backward, s);
}

/* ---- cross entropy ------------------------------------------------------ */

/* logits seen as (N,C,K): K positions per sample after the class dim. */
typedef struct {
    int64_t N, C, K;
} ce_dims;

typedef struct {
    qkv_tensor *x, *loss;
    const int64_t *y;    // (N,K) labels
    const double *lse;   // (N,K) log-sum-exp over the classes
    const float *p;      // (N,C,K) softmax over the classes times 1/scale, kept for the backward
    const double *scale; // (N,K) 1 / the sum of exp(x - max) where p holds those exps, or NULL (p normalised)
    ce_dims d;
    int64_t ignore;
    double ls;           // label smoothing
    int64_t n_valid;
    qkv_reduction r;
} ce_saved;

/* The weights of the two terms of position i's loss, times its upstream
 * gradient g: loss_i = wn * nll_i + ws * smooth_i (see the forward). */
static void ce_weights(const ce_saved *s, float g, double *wn, double *ws)
{
    qkv_ce_weights(s->r, s->ls, s->d.C, s->n_valid, g, wn, ws);
}

/* Differentiates loss = (1-ls) R(nll) + ls/C R(smooth), where for position i
 * with label y, nll_i = lse_i - x_iy and smooth_i = sum_c (lse_i - x_ic):
 * dx_ic += wn (p_ic - [c == y]) + ws (C p_ic - 1), p = softmax(x_i) (kept
 * by the forward, or its exps kept and 1/their sum: p = pi scale).
 * Where dx is fresh (nothing else wrote it yet) it is written, not added
 * to, and ignored positions get 0. Contiguous classes without smoothing
 * (the language models' and translators' case) take the same sums in a
 * loop the compiler vectorises: wn p_ic for c != y, then the label's. */
static qkv_status ce_backward(qkv_ctx *c, void *p)
{
    ce_saved *s = p;
    const float *dl = s->loss->grad; // () or (N,K)
    if (!dl || !s->x->requires_grad || s->n_valid == 0) return QKV_OK;
    int fresh;
    float *dx = qkv_tensor_grad_fresh(qkv_ctx_arena(c), s->x, &fresh); // (N,C,K)
    if (!dx) return QKV_ERR_NOMEM;
    int64_t C = s->d.C, K = s->d.K, N = s->d.N;
    int plain = K == 1 && s->ls == 0;
    /* positions are independent: each writes only its own row of dx */
    QKV_PAR_FOR_WITH(N * C * K >= QKV_PAR_MIN, collapse(2),
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < K; k++) {
                int64_t i = n * K + k, y = s->y[i];
                const float *pi = s->p + n * C * K + k;
                float *gi = dx + n * C * K + k;
                if (y == s->ignore) {
                    for (int64_t cl = 0; fresh && cl < C; cl++) gi[cl * K] = 0.0f;
                    continue;
                }
                double wn, ws;
                ce_weights(s, s->r == QKV_REDUCTION_NONE ? dl[i] : dl[0], &wn, &ws);
                double sc = s->scale ? s->scale[i] : 1.0; /* p = pi sc */
                if (plain) {
                    float gy = fresh ? 0.0f : gi[y];
                    double wp = wn * sc; /* the scale folded into the weight */
                    if (fresh)
                        for (int64_t cl = 0; cl < C; cl++) gi[cl] = (float)(wp * (double)pi[cl]);
                    else
                        for (int64_t cl = 0; cl < C; cl++) gi[cl] += (float)(wp * (double)pi[cl]);
                    gi[y] = gy + (float)(wn * (sc * (double)pi[y] - 1.0)); /* the label's own term */
                    continue;
                }
                for (int64_t cl = 0; cl < C; cl++) {
                    double pc = sc * pi[cl * K];
                    gi[cl * K] = (fresh ? 0.0f : gi[cl * K]) +
                                 (float)(wn * (pc - (cl == y)) + ws * ((double)C * pc - 1.0));
                }
            });
    return QKV_OK;
}

static qkv_status ce_check_shapes(const qkv_tensor *x, const qkv_tensor *y, ce_dims *d)
{
    char bx[64], by[64];
    if (x->dtype != QKV_F32 || (!x->data && qkv_tensor_numel(x) > 0))
        return qkv_fail(QKV_ERR_DTYPE, "cross_entropy: logits must be F32");
    if (y->dtype != QKV_I64 || (!y->idx && qkv_tensor_numel(y) > 0))
        return qkv_fail(QKV_ERR_DTYPE, "cross_entropy: target must be QKV_I64 class indices");
    int ok = x->ndim >= 1 && y->ndim == x->ndim - 1;
    if (ok && x->ndim >= 2) {
        ok = y->shape[0] == x->shape[0];
        for (int i = 2; ok && i < x->ndim; i++) ok = y->shape[i - 1] == x->shape[i];
    }
    if (!ok)
        return qkv_fail(QKV_ERR_SHAPE,
                        "cross_entropy: logits %s and target %s, expected (N,C) with (N), "
                        "(N,C,d1..) with (N,d1..) or (C) with ()",
                        qkv_shape_str(x, bx, sizeof bx), qkv_shape_str(y, by, sizeof by));
    int cdim = x->ndim == 1 ? 0 : 1;
    d->N = x->ndim == 1 ? 1 : x->shape[0];
    d->C = x->shape[cdim];
    d->K = 1;
    for (int i = cdim + 1; i < x->ndim; i++) d->K *= x->shape[i];
    if (d->C < 1)
        return qkv_fail(QKV_ERR_SHAPE, "cross_entropy: logits %s has no classes",
                        qkv_shape_str(x, bx, sizeof bx));
    return QKV_OK;
}

qkv_status qkv_ce_check_labels(const char *fn, const qkv_tensor *y, int64_t C, int64_t ignore)
{
    int64_t n = qkv_tensor_numel(y);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = y->idx[i];
        if (v == ignore || (v >= 0 && v < C)) continue;
        char pos[96] = "";
        int64_t rest = i, at[QKV_MAX_DIMS] = {0}; /* the multi-index of i */
        size_t k = 0;
        for (int dim = y->ndim - 1; dim >= 0; dim--) {
            at[dim] = y->shape[dim] ? rest % y->shape[dim] : 0;
            rest = y->shape[dim] ? rest / y->shape[dim] : 0;
        }
        for (int dim = 0; dim < y->ndim && k < sizeof pos; dim++)
            k += (size_t)snprintf(pos + k, sizeof pos - k, "[%lld]", (long long)at[dim]);
        return qkv_fail(QKV_ERR_ARG,
                        "%s: target%s = %lld is not a class in [0,%lld) nor "
                        "ignore_index %lld",
                        fn, pos, (long long)v, (long long)C, (long long)ignore);
    }
    return QKV_OK;
}

/* log-sum-exp over the classes of every position, in double; p (may be
 * NULL) gets softmax(x) over the classes (one exp per element in all).
 * Contiguous classes (K = 1) with p kept, outside the reference: exp(x -
 * max) vectorised in float (qkv_ce_exp_sum), summed in double, and p keeps
 * those exps, scale[i] = 1 / their sum (the backward multiplies; a pass
 * dividing 13 MB of them cost a fifth of this function, perf). libm's exp
 * in double otherwise, p normalised. */
static void ce_lse(const float *x, ce_dims d, double *lse, float *p, double *scale)
{
    int vec = scale != NULL; /* given exactly on that path (qkv_cross_entropy) */
    QKV_PAR_FOR_WITH(d.N * d.C * d.K >= QKV_PAR_MIN, collapse(2),
        for (int64_t n = 0; n < d.N; n++)
            for (int64_t k = 0; k < d.K; k++) {
                const float *xi = x + n * d.C * d.K + k; // (C) with stride K
                float *pi = p ? p + n * d.C * d.K + k : NULL; // (C) with stride K
                float mx = -INFINITY;
                double sum = 0;
                if (vec) { /* the fused cross entropy's passes (rows.h) */
                    mx = qkv_ce_bias_max(pi, xi, NULL, d.C);
                    sum = qkv_ce_exp_sum(pi, mx, d.C);
                    scale[n] = 1.0 / sum;
                    lse[n] = isinf(mx) ? (double)mx : (double)mx + log(sum);
                    continue;
                }
                for (int64_t cl = 0; cl < d.C; cl++)
                    if (xi[cl * d.K] > mx) mx = xi[cl * d.K];
                for (int64_t cl = 0; cl < d.C; cl++) {
                    double e = exp((double)xi[cl * d.K] - mx);
                    sum += e;
                    if (pi) pi[cl * d.K] = (float)e;
                }
                lse[n * d.K + k] = isinf(mx) ? (double)mx : (double)mx + log(sum);
                for (int64_t cl = 0; pi && cl < d.C; cl++) pi[cl * d.K] = (float)(pi[cl * d.K] / sum);
            });
}

/* Fills the loss: NONE per position, else the reduction over positions. */
static void ce_forward(const ce_saved *s, float *l)
{
    const float *x = s->x->data; // (N,C,K)
    int64_t C = s->d.C, K = s->d.K;
    double nll_sum = 0, smooth_sum = 0;
    for (int64_t n = 0; n < s->d.N; n++)
        for (int64_t k = 0; k < K; k++) {
            int64_t i = n * K + k, y = s->y[i];
            if (y == s->ignore) {
                if (s->r == QKV_REDUCTION_NONE) l[i] = 0.0f;
                continue;
            }
            const float *xi = x + n * C * K + k;
            double nll = s->lse[i] - xi[y * K], smooth = 0;
            if (s->ls != 0)
                for (int64_t cl = 0; cl < C; cl++) smooth += s->lse[i] - xi[cl * K];
            if (s->r == QKV_REDUCTION_NONE) l[i] = qkv_ce_mix(s->ls, C, nll, smooth);
            nll_sum += nll;
            smooth_sum += smooth;
        }
    if (s->r != QKV_REDUCTION_NONE) l[0] = qkv_ce_reduce(s->r, s->ls, C, s->n_valid, nll_sum, smooth_sum);
}

qkv_status qkv_cross_entropy(qkv_ctx *c, qkv_tensor *logits, const qkv_tensor *target,
                             int64_t ignore_index, double label_smoothing,
                             qkv_reduction reduction, qkv_tensor **loss)
{
    QKV_TRY(loss_args("cross_entropy", loss, c, logits, "logits", target, reduction));
    QKV_TRY(qkv_loss_check_smoothing("cross_entropy", label_smoothing));
    ce_dims d;
    QKV_TRY(ce_check_shapes(logits, target, &d));
    QKV_TRY(qkv_ce_check_labels("cross_entropy", target, d.C, ignore_index));
    int rec = qkv_ctx_recording(c, &logits, 1);
    QKV_TRY(qkv_loss_tensor(c, reduction, target, rec, loss));
    double *lse = qkv_ctx_alloc(c, (size_t)(d.N * d.K) * sizeof *lse); // (N,K)
    int64_t *y = qkv_ctx_alloc(c, (size_t)(d.N * d.K) * sizeof *y);    // (N,K)
    ce_saved *s = qkv_ctx_alloc(c, sizeof *s);
    float *pr = rec ? qkv_ctx_alloc_uninit(c, (size_t)(d.N * d.C * d.K) * sizeof *pr) : NULL; // (N,C,K) every element written by ce_lse
    int keep_exps = rec && d.K == 1 && !qkv_reference(); /* ce_lse's vectorised path */
    double *scale = keep_exps ? qkv_ctx_alloc(c, (size_t)d.N * sizeof *scale) : NULL; // (N)
    if (!lse || !y || !s || (rec && !pr) || (keep_exps && !scale)) return QKV_ERR_NOMEM;
    /* A copy of the labels: the caller may refill its batch before backward. */
    int64_t n_valid = 0;
    for (int64_t i = 0; i < d.N * d.K; i++) {
        y[i] = target->idx[i];
        n_valid += y[i] != ignore_index;
    }
    *s = (ce_saved){logits, *loss, y, lse, pr, scale, d, ignore_index, label_smoothing, n_valid, reduction};
    ce_lse(logits->data, d, lse, pr, scale);
    ce_forward(s, (*loss)->data);
    if (!rec) return QKV_OK;
    return qkv_ctx_record(c, ce_backward, s);
}
