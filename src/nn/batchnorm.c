/* batchnorm.c: F.batch_norm over dim 1 of (N,C,*) and nn.BatchNorm2d.
 *
 * y = (x - mean_c) * rstd_c * weight_c + bias_c, rstd = 1/sqrt(var + eps),
 * each channel c over its M = N * (spatial size) values. Training: the
 * batch's mean and biased var, and running_{mean,var} move towards the
 * batch's mean and unbiased var (M/(M-1) var) by momentum. Eval: the
 * running statistics.
 *
 * One kernel (per channel, double accumulation, channels in parallel): the
 * op is two passes over memory with a few flops each, nothing a GEMM or a
 * second "fast" version would speed up.
 *
 * Synchronised (SyncBatchNorm: qkv_ctx_set_batch_sum, data-parallel
 * training): in training mode the per-channel sums of every process's rows
 * are added up (sum x and the count, then sum (x - mean)^2; in the
 * backward, sum dy and sum dy xhat), so that each process normalises and
 * differentiates with the statistics of the whole batch. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "kernels/rows.h"
#include "nn/nn_check.h"

typedef struct {
    qkv_tensor *x, *w, *b, *y;
    double *mean, *rstd; // (C) each: the statistics the forward used
    int64_t N, C, S;     /* x is (N,C,S), S the spatial size */
    int training;
    qkv_batch_sum_fn sum; /* synchronised: the sum across processes, else NULL */
    void *sum_user;
    double Mt;            /* synchronised: the values per channel over every process */
} bn_saved;

/* Channel ch's sum dy and sum dy (x - mu) (times rstd: sum dy xhat). */
static void bn_channel_sums(const float *x, const float *dy, int64_t N, int64_t C, int64_t S, int64_t ch,
                            double mu, double *sdy, double *sdyx)
{
    double a = 0, b = 0;
    for (int64_t n = 0; n < N; n++) { // x, dy are (N,C,S)
        const float *xr = x + (n * C + ch) * S, *gr = dy + (n * C + ch) * S;
        a += qkv_sum_f64(gr, S);
        b += qkv_sum_dot_dev(gr, xr, mu, S);
    }
    *sdy = a, *sdyx = b;
}

/* dx of channel ch: dx += rs (wc dy - mg - xhat mgx), mg = mean(g) and
 * mgx = mean(g xhat) over the channel's values (0 in eval mode). */
static void bn_dx_channel(const float *x, const float *dy, float *dx, int64_t N, int64_t C, int64_t S,
                          int64_t ch, double mu, double rs, double wc, double mg, double mgx)
{
    for (int64_t n = 0; n < N; n++) { // x, dy, dx are (N,C,S)
        const float *xr = x + (n * C + ch) * S, *gr = dy + (n * C + ch) * S;
        float *dr = dx + (n * C + ch) * S;
        for (int64_t i = 0; i < S; i++)
            dr[i] += (float)(rs * (wc * gr[i] - mg - (xr[i] - mu) * rs * mgx));
    }
}

/* The synchronised backward: sum dy and sum dy xhat of every process's
 * rows, weighted (qkv_batch_sum_fn) so that each process's dx, once its
 * gradients are weighted and averaged, is the whole batch's. dw and db
 * take this process's sums: the averaging adds them up. */
static qkv_status bn_backward_sync(qkv_ctx *c, const bn_saved *s, float *dx, float *dw, float *db)
{
    const float *dy = s->y->grad, *x = s->x->data, *w = s->w ? s->w->data : NULL; // (N,C,S)
    int64_t N = s->N, C = s->C, S = s->S;
    double *sums = qkv_ctx_alloc(c, (size_t)(2 * C) * sizeof *sums); // (2,C): sum dy, sum dy xhat
    if (!sums) return QKV_ERR_NOMEM;
    QKV_PAR_FOR(N * C * S >= QKV_PAR_MIN,
        for (int64_t ch = 0; ch < C; ch++) {
            double sdy, sdyx;
            bn_channel_sums(x, dy, N, C, S, ch, s->mean[ch], &sdy, &sdyx);
            sdyx *= s->rstd[ch];
            sums[ch] = sdy, sums[C + ch] = sdyx;
            if (db) db[ch] += (float)sdy;
            if (dw) dw[ch] += (float)sdyx;
        });
    /* every process runs the same graph: all take part, with or without dx */
    QKV_TRY(s->sum(s->sum_user, sums, 2 * C, 1));
    if (!dx) return QKV_OK;
    QKV_PAR_FOR(N * C * S >= QKV_PAR_MIN,
        for (int64_t ch = 0; ch < C; ch++) {
            double mu = s->mean[ch], rs = s->rstd[ch], wc = w ? w[ch] : 1.0;
            bn_dx_channel(x, dy, dx, N, C, S, ch, mu, rs, wc, wc * sums[ch] / s->Mt, wc * sums[C + ch] / s->Mt);
        });
    return QKV_OK;
}

/* Differentiates y = xhat * w + b, xhat = (x - mean) * rstd, per channel
 * over its M values, with g = dy * w: db += sum dy, dw += sum dy * xhat, and
 * training (mean, rstd functions of x): dx += rstd (g - mean(g) - xhat mean(g xhat));
 * eval (constants): dx += rstd g. */
static qkv_status bn_backward(qkv_ctx *c, void *p)
{
    bn_saved *s = p;
    const float *dy = s->y->grad; // (N,C,S)
    if (!dy) return QKV_OK;
    qkv_arena *a = qkv_ctx_arena(c);
    int gx = s->x->requires_grad, gw = s->w && s->w->requires_grad, gb = s->b && s->b->requires_grad;
    float *dx = gx ? qkv_tensor_grad(a, s->x) : NULL; // (N,C,S)
    float *dw = gw ? qkv_tensor_grad(a, s->w) : NULL; // (C)
    float *db = gb ? qkv_tensor_grad(a, s->b) : NULL; // (C)
    if ((gx && !dx) || (gw && !dw) || (gb && !db)) return QKV_ERR_NOMEM;
    if (s->sum) return bn_backward_sync(c, s, dx, dw, db);
    const float *x = s->x->data, *w = s->w ? s->w->data : NULL;
    int64_t N = s->N, C = s->C, S = s->S;
    double M = (double)(N * S);
    QKV_PAR_FOR(N * C * S >= QKV_PAR_MIN,
        for (int64_t ch = 0; ch < C; ch++) {
            double mu = s->mean[ch], rs = s->rstd[ch], wc = w ? w[ch] : 1.0;
            double sdy, sdyx; /* sum dy, sum dy * xhat */
            bn_channel_sums(x, dy, N, C, S, ch, mu, &sdy, &sdyx);
            sdyx *= rs;
            if (db) db[ch] += (float)sdy;
            if (dw) dw[ch] += (float)sdyx;
            if (!dx) continue;
            /* mean(g) = wc sdy / M, mean(g xhat) = wc sdyx / M */
            double mg = s->training ? wc * sdy / M : 0, mgx = s->training ? wc * sdyx / M : 0;
            bn_dx_channel(x, dy, dx, N, C, S, ch, mu, rs, wc, mg, mgx);
        });
    return QKV_OK;
}

/* Checks an optional (C) argument. */
static qkv_status check_channel_vec(const qkv_tensor *t, const char *arg, const qkv_tensor *x, int64_t C)
{
    return qkv_check_vec_c("batch_norm", t, arg, x, C, " channels");
}

static qkv_status bn_check(const qkv_tensor *x, const qkv_tensor *rm, const qkv_tensor *rv,
                           const qkv_tensor *w, const qkv_tensor *b, int training, float momentum,
                           float eps)
{
    QKV_NEED_F32(x, "batch_norm", "x");
    char bx[64];
    if (x->ndim < 2)
        return qkv_fail(QKV_ERR_SHAPE, "batch_norm: x %s has %d dims, expected (N,C), (N,C,L) or (N,C,H,W)",
                        qkv_shape_str(x, bx, sizeof bx), x->ndim);
    int64_t C = x->shape[1];
    QKV_TRY(check_channel_vec(rm, "running_mean", x, C));
    QKV_TRY(check_channel_vec(rv, "running_var", x, C));
    QKV_TRY(check_channel_vec(w, "weight", x, C));
    QKV_TRY(check_channel_vec(b, "bias", x, C));
    if (!(eps > 0.0f) || isinf(eps))
        return qkv_fail(QKV_ERR_ARG, "batch_norm: eps %g must be positive and finite", (double)eps);
    if (!isfinite(momentum))
        return qkv_fail(QKV_ERR_ARG, "batch_norm: momentum %g must be finite", (double)momentum);
    if (!training && (!rm || !rv))
        return qkv_fail(QKV_ERR_ARG, "batch_norm: eval mode (training 0) needs running_mean and running_var");
    if (training && (!rm) != (!rv))
        return qkv_fail(QKV_ERR_ARG, "batch_norm: running_mean and running_var must be given together");
    int64_t M = qkv_tensor_numel(x) / (C ? C : 1);
    if (C < 1 || M < 1)
        return qkv_fail(QKV_ERR_SHAPE, "batch_norm: x %s has a zero size", qkv_shape_str(x, bx, sizeof bx));
    if (training && M == 1)
        return qkv_fail(QKV_ERR_SHAPE, "batch_norm: expected more than 1 value per channel when training, "
                        "got x %s", qkv_shape_str(x, bx, sizeof bx));
    return QKV_OK;
}

/* The synchronised statistics: mean (C) and sq (C), sum (x - mean)^2, over
 * every process's rows; *Mt the values per channel there. */
static qkv_status bn_stats_sync(const float *xd, int64_t N, int64_t C, int64_t S, qkv_batch_sum_fn fn,
                                void *user, double *mean, double *sq, double *Mt, double *buf)
{
    // xd is (N,C,S); buf (C+1): the sums of x, then the count
    QKV_PAR_FOR(N * C * S >= QKV_PAR_MIN,
        for (int64_t ch = 0; ch < C; ch++) {
            double sum = 0;
            for (int64_t n = 0; n < N; n++) sum += qkv_sum_f64(xd + (n * C + ch) * S, S);
            buf[ch] = sum;
        });
    buf[C] = (double)(N * S);
    QKV_TRY(fn(user, buf, C + 1, 0));
    *Mt = buf[C];
    QKV_PAR_FOR(N * C * S >= QKV_PAR_MIN,
        for (int64_t ch = 0; ch < C; ch++) {
            double mu = buf[ch] / *Mt, q = 0;
            for (int64_t n = 0; n < N; n++) q += qkv_sum_sq_dev(xd + (n * C + ch) * S, mu, S);
            mean[ch] = mu, sq[ch] = q;
        });
    return fn(user, sq, C, 0);
}

qkv_status qkv_batch_norm(qkv_ctx *c, qkv_tensor *x, qkv_tensor *running_mean,
                          qkv_tensor *running_var, qkv_tensor *weight, qkv_tensor *bias,
                          int training, float momentum, float eps, qkv_tensor **y)
{
    QKV_NEED_OUT_CTX(y, c, "batch_norm", "y");
    QKV_TRY(bn_check(x, running_mean, running_var, weight, bias, training, momentum, eps));
    int64_t N = x->shape[0], C = x->shape[1], S = qkv_tensor_numel(x) / (N * C);
    qkv_tensor *in[3] = {x, weight, bias};
    int rec = qkv_ctx_recording(c, in, 3);
    QKV_TRY(qkv_ctx_tensor(c, x->ndim, x->shape, rec, y));
    double *mean = qkv_ctx_alloc(c, (size_t)C * sizeof *mean); // (C)
    double *rstd = qkv_ctx_alloc(c, (size_t)C * sizeof *rstd); // (C)
    if (!mean || !rstd) return QKV_ERR_NOMEM;
    const float *xd = x->data; // (N,C,S)
    float *yd = (*y)->data;    // (N,C,S)
    double M = (double)(N * S);
    void *sum_user = NULL;
    qkv_batch_sum_fn sum_fn = training ? qkv_ctx_batch_sum(c, &sum_user) : NULL;
    if (sum_fn) { /* mean and rstd hold the whole batch's mean and sum of squares */
        double *buf = qkv_ctx_alloc(c, (size_t)(C + 1) * sizeof *buf);
        if (!buf) return QKV_ERR_NOMEM;
        QKV_TRY(bn_stats_sync(xd, N, C, S, sum_fn, sum_user, mean, rstd, &M, buf));
    }
    QKV_PAR_FOR(N * C * S >= QKV_PAR_MIN,
        for (int64_t ch = 0; ch < C; ch++) {
            double mu, var;
            if (training) {
                double sum = 0, sq = 0;
                if (sum_fn) {
                    mu = mean[ch], sq = rstd[ch];
                } else {
                    for (int64_t n = 0; n < N; n++) sum += qkv_sum_f64(xd + (n * C + ch) * S, S);
                    mu = sum / M;
                    for (int64_t n = 0; n < N; n++) sq += qkv_sum_sq_dev(xd + (n * C + ch) * S, mu, S);
                }
                var = sq / M;
                if (running_mean) { /* in place, as F.batch_norm does; no gradient */
                    float *rm = running_mean->data, *rv = running_var->data;
                    rm[ch] = (float)((1.0 - momentum) * rm[ch] + momentum * mu);
                    rv[ch] = (float)((1.0 - momentum) * rv[ch] + momentum * sq / (M - 1));
                }
            } else {
                mu = running_mean->data[ch];
                var = running_var->data[ch];
            }
            double rs = 1.0 / sqrt(var + eps), wc = weight ? weight->data[ch] : 1.0;
            double bc = bias ? bias->data[ch] : 0.0;
            for (int64_t n = 0; n < N; n++)
                for (int64_t i = 0; i < S; i++) {
                    int64_t at = (n * C + ch) * S + i;
                    yd[at] = (float)((xd[at] - mu) * rs * wc + bc);
                }
            mean[ch] = mu;
            rstd[ch] = rs;
        });
    if (!rec) return QKV_OK;
    bn_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (bn_saved){x, weight, bias, *y, mean, rstd, N, C, S, training != 0, sum_fn, sum_user, M};
    return qkv_ctx_record(c, bn_backward, s);
}

/* ---- nn.BatchNorm2d ------------------------------------------------------------ */

qkv_batchnorm_opts qkv_batchnorm_opts_default(int64_t num_features)
{
    return (qkv_batchnorm_opts){num_features, 1e-5f, 0.1f, 1, 1};
}

/* _BatchNorm.forward: training -> batch statistics (and, when tracking,
 * num_batches_tracked += 1 and the running update by momentum, or by
 * 1/num_batches_tracked for momentum None); eval -> the running statistics
 * when tracked, else the batch's. Everything is checked before the
 * counter moves, so a bad input changes no buffer. */
static qkv_status batchnorm2d_forward(qkv_ctx *c, qkv_module *base, qkv_tensor *x, qkv_tensor **y)
{
    qkv_nn_batchnorm2d *m = (qkv_nn_batchnorm2d *)base;
    char bx[64];
    QKV_NEED_F32(x, "batch_norm2d", "x");
    if (x->ndim != 4)
        return qkv_fail(QKV_ERR_SHAPE, "batch_norm2d: expected a 4-D input (N,C,H,W), got x %s",
                        qkv_shape_str(x, bx, sizeof bx));
    if (x->shape[1] != m->o.num_features)
        return qkv_fail(QKV_ERR_SHAPE, "batch_norm2d: x %s has %lld channels, num_features is %lld",
                        qkv_shape_str(x, bx, sizeof bx), (long long)x->shape[1],
                        (long long)m->o.num_features);
    int training = qkv_ctx_training(c), track = m->o.track_running_stats;
    int batch_stats = training || !track;
    float momentum = isnan(m->o.momentum) ? 0.0f : m->o.momentum;
    if (training && track) {
        QKV_TRY(bn_check(x, m->running_mean, m->running_var, m->weight, m->bias, 1, 0.0f, m->o.eps));
        float n = m->num_batches_tracked->data[0] + 1.0f;
        if (isnan(m->o.momentum)) momentum = 1.0f / n; /* cumulative moving average */
        QKV_TRY(qkv_batch_norm(c, x, m->running_mean, m->running_var, m->weight, m->bias, 1, momentum,
                               m->o.eps, y));
        m->num_batches_tracked->data[0] = n;
        return QKV_OK;
    }
    return qkv_batch_norm(c, x, track ? m->running_mean : NULL, track ? m->running_var : NULL,
                          m->weight, m->bias, batch_stats, momentum, m->o.eps, y);
}

qkv_status qkv_nn_batchnorm2d_init(qkv_nn_batchnorm2d *m, const qkv_batchnorm_opts *o,
                                   qkv_params *p, const char *prefix)
{
    QKV_NEED(m, "nn_batchnorm2d_init", "module");
    QKV_NEED(o, "nn_batchnorm2d_init", "opts");
    if (o->affine || o->track_running_stats) QKV_NEED(p, "nn_batchnorm2d_init", "params");
    if (o->num_features < 1)
        return qkv_fail(QKV_ERR_ARG, "nn_batchnorm2d_init: num_features %lld must be positive",
                        (long long)o->num_features);
    if (!(o->eps > 0.0f) || isinf(o->eps))
        return qkv_fail(QKV_ERR_ARG, "nn_batchnorm2d_init: eps %g must be positive and finite", (double)o->eps);
    if (isinf(o->momentum))
        return qkv_fail(QKV_ERR_ARG, "nn_batchnorm2d_init: momentum %g must be finite (NAN for None)",
                        (double)o->momentum);
    memset(m, 0, sizeof *m);
    const int64_t *C = &o->num_features;
    if (o->affine) {
        QKV_TRY(qkv_params_add(p, prefix, "weight", 1, C, &m->weight));
        QKV_TRY(qkv_init_constant(m->weight, 1.0f));
        QKV_TRY(qkv_params_add(p, prefix, "bias", 1, C, &m->bias));
    }
    if (o->track_running_stats) {
        QKV_TRY(qkv_params_add_buffer(p, prefix, "running_mean", 1, C, &m->running_mean));
        QKV_TRY(qkv_params_add_buffer(p, prefix, "running_var", 1, C, &m->running_var));
        QKV_TRY(qkv_init_constant(m->running_var, 1.0f));
        QKV_TRY(qkv_params_add_buffer(p, prefix, "num_batches_tracked", 0, NULL, &m->num_batches_tracked));
    }
    m->o = *o;
    m->o.affine = o->affine != 0;
    m->o.track_running_stats = o->track_running_stats != 0;
    m->base = (qkv_module){"BatchNorm2d", batchnorm2d_forward};
    return QKV_OK;
}
