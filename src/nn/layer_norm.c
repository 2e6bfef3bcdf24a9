/* layer_norm.c: F.layer_norm over the last dim with PyTorch's biased
 * variance: y = (x - mean) * rstd * weight + bias, rstd = 1/sqrt(var + eps). */
#include <math.h>
#include <stdio.h>
#include "kernels/rows.h"
#include "nn/nn_check.h"

typedef struct {
    qkv_tensor *x, *w, *b, *y;
    double *mean, *rstd; // (rows) each
    int64_t rows, C;
} ln_saved;

/* ---- the fast path: rows that vectorise -----------------------------------
 * The loops further down (one running double sum per row, one thread per
 * column block for the affine gradients) are the reference
 * (qkv_set_reference). The fast path computes the same expressions in
 * double (a layer norm over few elements, or of rows far from zero mean, is
 * ill-conditioned: float sums failed the parity tests' 1e-4), but sums each
 * row with the vector lanes as partial sums (omp simd reductions), and the
 * affine gradients over fixed chunks of LN_CHUNK rows on the threads, the
 * chunks' sums then added in chunk order: the order depends on the shape
 * only, so results do not depend on the thread count. */
enum { LN_CHUNK = 128 };

/* A row's mean and 1/sqrt(var + eps) in one pass, in double: sums of
 * d = x - x[0] and d^2 (the shift keeps d^2's sum from cancelling against
 * the mean's square: x[0] is within a few standard deviations of the mean),
 * var = mean(d^2) - mean(d)^2. Two passes (the mean, then the squares about
 * it) made the row wait on the first pass's sums: 1.5x slower. */
static void ln_row_stats(const float *xr, int64_t C, float eps, double *mean, double *rstd)
{
    double K = xr[0], s1 = 0, s2 = 0;
#pragma omp simd reduction(+ : s1, s2)
    for (int64_t j = 0; j < C; j++) {
        double d = (double)xr[j] - K;
        s1 += d;
        s2 += d * d;
    }
    s1 /= (double)C;
    s2 /= (double)C;
    double var = s2 - s1 * s1;
    *mean = K + s1;
    *rstd = 1.0 / sqrt((var > 0.0 ? var : 0.0) + eps);
}

/* (x - mean) in float without the rounding of mean to float: mean split as
 * hi + lo, (x - hi) - lo (x - hi is exact or nearly, being small). */
#define LN_CENTRE(x, hi, lo) (((x) - (hi)) - (lo))

static void ln_forward_fast(const float *x, const float *w, const float *b, float eps, float *y,
                            double *mean, double *rstd, int64_t rows, int64_t C)
{
    // x, y (rows,C); w, b (C) or NULL; mean, rstd (rows) or NULL
    QKV_PAR_FOR(rows * C >= QKV_PAR_MIN,
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * C;
            float *yr = y + r * C;
            double mu, rs;
            ln_row_stats(xr, C, eps, &mu, &rs);
            /* the output in float, as PyTorch's */
            float hi = (float)mu, lo = (float)(mu - hi), rsf = (float)rs;
            if (w && b)
                for (int64_t j = 0; j < C; j++) yr[j] = fmaf(LN_CENTRE(xr[j], hi, lo) * rsf, w[j], b[j]);
            else
                for (int64_t j = 0; j < C; j++)
                    yr[j] = fmaf(LN_CENTRE(xr[j], hi, lo) * rsf, w ? w[j] : 1.0f, b ? b[j] : 0.0f);
            if (mean) {
                mean[r] = mu;
                rstd[r] = rs;
            }
        });
}

/* The chunks' sums of dy * xhat and dy (part: 2 * nch * C doubles), each
 * chunk of rows on some thread: a worksharing loop without its barrier,
 * called inside ln_backward's parallel region (or on one thread). */
static void ln_affine_chunks(const float *x, const float *dy, const double *mean, const double *rstd,
                             int64_t rows, int64_t C, double *part)
{
    int64_t nch = (rows + LN_CHUNK - 1) / LN_CHUNK;
#pragma omp for nowait
    for (int64_t k = 0; k < nch; k++) {
        double *pw = part + k * 2 * C, *pb = pw + C; // (C) each
        for (int64_t j = 0; j < C; j++) pw[j] = pb[j] = 0.0;
        for (int64_t r = k * LN_CHUNK; r < rows && r < (k + 1) * LN_CHUNK; r++) {
            const float *xr = x + r * C, *gr = dy + r * C;
            double mu = mean[r], rs = rstd[r];
            for (int64_t j = 0; j < C; j++) {
                pw[j] += gr[j] * (xr[j] - mu) * rs;
                pb[j] += gr[j];
            }
        }
    }
}

/* dw += sum of the chunks' dy * xhat, db += theirs of dy, in chunk order. */
static void ln_affine_sum(const double *part, int64_t rows, int64_t C, float *dw, float *db)
{
    int64_t nch = (rows + LN_CHUNK - 1) / LN_CHUNK;
    for (int64_t j = 0; j < C; j++) {
        double sw = 0, sb = 0;
        for (int64_t k = 0; k < nch; k++) {
            sw += part[k * 2 * C + j];
            sb += part[k * 2 * C + C + j];
        }
        if (dw) dw[j] += (float)sw;
        if (db) db[j] += (float)sb;
    }
}

/* dx (+)= rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w; dx is
 * written, not added into, when fresh. */
static void ln_dx_rows(const float *x, const float *w, const float *dy, const double *mean,
                       const double *rstd, float *dx, int fresh, int64_t rows, int64_t C)
{
#pragma omp for /* inside ln_backward's region, as ln_affine_chunks */
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * C, *gr = dy + r * C;
        float *dr = dx + r * C;
        double mu = mean[r], rs = rstd[r], sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
        for (int64_t j = 0; j < C; j++) {
            double g = w ? (double)gr[j] * w[j] : gr[j];
            sg += g;
            sgx += g * (xr[j] - mu) * rs;
        }
        sg /= (double)C;
        sgx /= (double)C;
        for (int64_t j = 0; j < C; j++) {
            double g = w ? (double)gr[j] * w[j] : gr[j];
            float v = (float)(rs * (g - sg - (xr[j] - mu) * rs * sgx));
            dr[j] = fresh ? v : dr[j] + v;
        }
    }
}

/* Differentiates y = xhat * w + b, xhat = (x - mean) * rstd, per row:
 * dw += sum_rows dy * xhat, db += sum_rows dy, and with g = dy * w,
 * dx += rstd * (g - mean(g) - xhat * mean(g * xhat)). */
static qkv_status ln_backward(qkv_ctx *c, void *p)
{
    ln_saved *s = p;
    const float *dy = s->y->grad; // (rows,C)
    if (!dy) return QKV_OK;
    qkv_arena *a = qkv_ctx_arena(c);
    int gx = s->x->requires_grad, gw = s->w && s->w->requires_grad, gb = s->b && s->b->requires_grad;
    int fresh = 0, fast = !qkv_reference();
    float *dx = gx ? (fast ? qkv_tensor_grad_fresh(a, s->x, &fresh) : qkv_tensor_grad(a, s->x)) : NULL; // (rows,C)
    float *dw = gw ? qkv_tensor_grad(a, s->w) : NULL; // (C)
    float *db = gb ? qkv_tensor_grad(a, s->b) : NULL; // (C)
    if ((gx && !dx) || (gw && !dw) || (gb && !db)) return QKV_ERR_NOMEM;
    const float *x = s->x->data, *w = s->w ? s->w->data : NULL; // (rows,C), (C)
    int64_t C = s->C, rows = s->rows;
    const double *mean = s->mean, *rstd = s->rstd; // (rows) each
    if (fast) {
        double *part = NULL; // (nch,2,C)
        if (dw || db) {
            int64_t nch = (rows + LN_CHUNK - 1) / LN_CHUNK;
            if (!(part = qkv_ctx_alloc_uninit(c, (size_t)(2 * nch * C) * sizeof(double)))) return QKV_ERR_NOMEM;
        }
        /* the affine gradients' chunks and dx's rows in one region */
#pragma omp parallel if (rows * C >= QKV_PAR_MIN)
        {
            if (part) ln_affine_chunks(x, dy, mean, rstd, rows, C, part);
            if (dx) ln_dx_rows(x, w, dy, mean, rstd, dx, fresh, rows, C);
        }
        if (part) ln_affine_sum(part, rows, C, dw, db);
        return QKV_OK;
    }
    if (db) qkv_rows_sum_into(db, dy, rows, C);
    if (dw) { /* by blocks of columns, each summed over the rows in order */
        int64_t nblk = (C + 63) / 64;
        QKV_PAR_FOR(rows * C >= QKV_PAR_MIN && nblk > 1,
            for (int64_t b = 0; b < nblk; b++)
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t j = b * 64; j < C && j < b * 64 + 64; j++)
                        dw[j] += (float)(dy[r * C + j] * (x[r * C + j] - mean[r]) * rstd[r]));
    }
    if (!dx) return QKV_OK;
    QKV_PAR_FOR(rows * C >= QKV_PAR_MIN,
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * C, *gr = dy + r * C;
            double mu = mean[r], rs = rstd[r];
            double sg = 0, sgx = 0; /* sum g, sum g * xhat */
            for (int64_t j = 0; j < C; j++) {
                double g = w ? (double)gr[j] * w[j] : gr[j];
                sg += g;
                sgx += g * (xr[j] - mu) * rs;
            }
            sg /= (double)C;
            sgx /= (double)C;
            for (int64_t j = 0; j < C; j++) {
                double g = w ? (double)gr[j] * w[j] : gr[j];
                dx[r * C + j] += (float)(rs * (g - sg - (xr[j] - mu) * rs * sgx));
            }
        });
    return QKV_OK;
}

/* Checks an optional (C) parameter of layer_norm. */
static qkv_status check_affine(const qkv_tensor *t, const char *arg, const qkv_tensor *x, int64_t C)
{
    return qkv_check_vec_c("layer_norm", t, arg, x, C, "");
}

qkv_status qkv_layer_norm(qkv_ctx *c, qkv_tensor *x, qkv_tensor *weight, qkv_tensor *bias,
                          float eps, qkv_tensor **y)
{
    QKV_NEED_OUT_CTX(y, c, "layer_norm", "y");
    QKV_NEED_F32(x, "layer_norm", "x");
    char bx[64];
    if (x->ndim < 1 || x->shape[x->ndim - 1] < 1)
        return qkv_fail(QKV_ERR_SHAPE, "layer_norm: x %s has no last dim to normalise over",
                        qkv_shape_str(x, bx, sizeof bx));
    int64_t C = x->shape[x->ndim - 1], rows = qkv_tensor_numel(x) / C;
    QKV_TRY(check_affine(weight, "weight", x, C));
    QKV_TRY(check_affine(bias, "bias", x, C));
    if (!(eps > 0.0f) || isinf(eps))
        return qkv_fail(QKV_ERR_ARG, "layer_norm: eps %g must be positive and finite", (double)eps);
    qkv_tensor *in[3] = {x, weight, bias};
    int rec = qkv_ctx_recording(c, in, 3);
    QKV_TRY(qkv_ctx_tensor_uninit(c, x->ndim, x->shape, rec, y)); /* every row written below */
    double *mean = rec ? qkv_ctx_alloc(c, (size_t)rows * sizeof *mean) : NULL; // (rows)
    double *rstd = rec ? qkv_ctx_alloc(c, (size_t)rows * sizeof *rstd) : NULL; // (rows)
    if (rec && (!mean || !rstd)) return QKV_ERR_NOMEM;
    const float *xd = x->data; // (rows,C)
    float *yd = (*y)->data;    // (rows,C)
    if (!qkv_reference())
        ln_forward_fast(xd, weight ? weight->data : NULL, bias ? bias->data : NULL, eps, yd, mean, rstd,
                        rows, C);
    else { /* the reference */
    QKV_PAR_FOR(rows * C >= QKV_PAR_MIN,
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = xd + r * C;
            double mu = 0, var = 0;
            for (int64_t j = 0; j < C; j++) mu += xr[j];
            mu /= (double)C;
            for (int64_t j = 0; j < C; j++) var += (xr[j] - mu) * (xr[j] - mu);
            var /= (double)C;
            double rs = 1.0 / sqrt(var + eps);
            for (int64_t j = 0; j < C; j++) {
                double v = (xr[j] - mu) * rs;
                if (weight) v *= weight->data[j];
                if (bias) v += bias->data[j];
                yd[r * C + j] = (float)v;
            }
            if (rec) {
                mean[r] = mu;
                rstd[r] = rs;
            }
        });
    }
    if (!rec) return QKV_OK;
    ln_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (ln_saved){x, weight, bias, *y, mean, rstd, rows, C};
    return qkv_ctx_record(c, ln_backward, s);
}
