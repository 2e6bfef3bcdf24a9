/* rms_norm.c: F.rms_norm over the last dim (PyTorch 2.4's nn.RMSNorm):
 * y = x * rstd * weight, rstd = 1/sqrt(mean(x^2) + eps); the row sums in
 * double (qkv_rows_rms_norm, kernels/rows.c, which the models' inference
 * forwards call directly). */
#include <float.h>
#include <math.h>
#include "kernels/rows.h"
#include "nn/nn_check.h"

typedef struct {
    qkv_tensor *x, *w, *y;
    double *rstd; // (rows)
    int64_t rows, C;
} rms_saved;

/* Differentiates y = x * r * w, r = (mean(x^2) + eps)^(-1/2), per row:
 * dw += sum_rows dy * x * r, and with g = dy * w,
 * dx += r * g - x * r^3 * mean(g * x). */
static qkv_status rms_backward(qkv_ctx *c, void *p)
{
    rms_saved *s = p;
    const float *dy = s->y->grad; // (rows,C)
    if (!dy) return QKV_OK;
    qkv_arena *a = qkv_ctx_arena(c);
    int gx = s->x->requires_grad, gw = s->w && s->w->requires_grad;
    float *dx = gx ? qkv_tensor_grad(a, s->x) : NULL; // (rows,C)
    float *dw = gw ? qkv_tensor_grad(a, s->w) : NULL; // (C)
    if ((gx && !dx) || (gw && !dw)) return QKV_ERR_NOMEM;
    const float *x = s->x->data, *w = s->w ? s->w->data : NULL; // (rows,C), (C)
    int64_t C = s->C, rows = s->rows;
    const double *rstd = s->rstd; // (rows)
    if (dw) { /* by blocks of columns, each summed over the rows in order */
        int64_t nblk = (C + 63) / 64;
        QKV_PAR_FOR(rows * C >= QKV_PAR_MIN && nblk > 1,
            for (int64_t b = 0; b < nblk; b++)
                for (int64_t j = b * 64; j < C && j < b * 64 + 64; j++) {
                    double acc = 0;
                    for (int64_t r = 0; r < rows; r++) acc += (double)dy[r * C + j] * x[r * C + j] * rstd[r];
                    dw[j] += (float)acc;
                });
    }
    if (!dx) return QKV_OK;
    QKV_PAR_FOR(rows * C >= QKV_PAR_MIN,
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * C, *gr = dy + r * C;
            double rs = rstd[r], sgx = 0; /* sum g * x */
            for (int64_t j = 0; j < C; j++) sgx += (w ? (double)gr[j] * w[j] : gr[j]) * xr[j];
            sgx /= (double)C;
            for (int64_t j = 0; j < C; j++) {
                double g = w ? (double)gr[j] * w[j] : gr[j];
                dx[r * C + j] += (float)(rs * g - xr[j] * rs * rs * rs * sgx);
            }
        });
    return QKV_OK;
}

qkv_status qkv_rms_norm(qkv_ctx *c, qkv_tensor *x, qkv_tensor *weight, float eps, qkv_tensor **y)
{
    QKV_NEED(y, "rms_norm", "y");
    *y = NULL;
    QKV_NEED(c, "rms_norm", "ctx");
    QKV_NEED_F32(x, "rms_norm", "x");
    char bx[64], bw[64];
    if (x->ndim < 1 || x->shape[x->ndim - 1] < 1)
        return qkv_fail(QKV_ERR_SHAPE, "rms_norm: x %s has no last dim to normalise over",
                        qkv_shape_str(x, bx, sizeof bx));
    int64_t C = x->shape[x->ndim - 1], rows = qkv_tensor_numel(x) / C;
    if (weight) {
        QKV_NEED_F32(weight, "rms_norm", "weight");
        if (weight->ndim != 1 || weight->shape[0] != C)
            return qkv_fail(QKV_ERR_SHAPE, "rms_norm: weight %s does not match x %s, expected (%lld,)",
                            qkv_shape_str(weight, bw, sizeof bw), qkv_shape_str(x, bx, sizeof bx),
                            (long long)C);
    }
    if (isnan(eps)) eps = FLT_EPSILON; /* PyTorch's eps=None: torch.finfo(float32).eps */
    if (!(eps >= 0.0f) || isinf(eps))
        return qkv_fail(QKV_ERR_ARG, "rms_norm: eps %g must be >= 0 and finite (NAN for the default)",
                        (double)eps);
    qkv_tensor *in[2] = {x, weight};
    int rec = qkv_ctx_recording(c, in, 2);
    QKV_TRY(qkv_ctx_tensor_uninit(c, x->ndim, x->shape, rec, y)); /* every row written below */
    double *rstd = rec ? qkv_ctx_alloc(c, (size_t)rows * sizeof *rstd) : NULL; // (rows)
    if (rec && !rstd) return QKV_ERR_NOMEM;
    qkv_rows_rms_norm(x->data, weight ? weight->data : NULL, eps, (*y)->data, rstd, rows, C);
    if (!rec) return QKV_OK;
    rms_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (rms_saved){x, weight, *y, rstd, rows, C};
    return qkv_ctx_record(c, rms_backward, s);
}
