/* optim.c: SGD, Adam and AdamW with PyTorch 1.13's update rules
 * (torch.optim's _single_tensor_* functions), and clip_grad_norm_.
 *
 * Each update mirrors PyTorch's sequence of float32 tensor ops, one rounding
 * per op, with the Python-side scalars (bias corrections, step size)
 * computed in double and rounded to float where PyTorch hands them to a
 * float tensor op. So results agree with PyTorch's to float rounding (where
 * PyTorch's vector kernels fuse a multiply-add, the last bit may differ). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/rows.h"
#include "train/optim_internal.h"

qkv_optim_opts qkv_optim_sgd_opts_default(double lr)
{
    qkv_optim_opts o = {0};
    o.kind = QKV_OPTIM_SGD;
    o.lr = lr;
    o.beta1 = 0.9;
    o.beta2 = 0.999;
    o.eps = 1e-8;
    return o;
}

qkv_optim_opts qkv_optim_adam_opts_default(void)
{
    qkv_optim_opts o = qkv_optim_sgd_opts_default(1e-3);
    o.kind = QKV_OPTIM_ADAM;
    return o;
}

qkv_optim_opts qkv_optim_adamw_opts_default(void)
{
    qkv_optim_opts o = qkv_optim_adam_opts_default();
    o.kind = QKV_OPTIM_ADAMW;
    o.weight_decay = 1e-2;
    return o;
}

/* the deprecated names (docs/core.md, "Names") */
qkv_optim_opts qkv_optim_sgd_default(double lr) { return qkv_optim_sgd_opts_default(lr); }
qkv_optim_opts qkv_optim_adam_default(void) { return qkv_optim_adam_opts_default(); }
qkv_optim_opts qkv_optim_adamw_default(void) { return qkv_optim_adamw_opts_default(); }

const char *qkv_optim_kind_name(qkv_optim_kind k)
{
    switch (k) {
    case QKV_OPTIM_SGD: return "sgd";
    case QKV_OPTIM_ADAM: return "adam";
    case QKV_OPTIM_ADAMW: return "adamw";
    }
    return "?";
}

int qkv_optim_nbuf_for(const qkv_optim_opts *o)
{
    if (o->kind == QKV_OPTIM_SGD) return o->momentum != 0 ? 1 : 0;
    return o->amsgrad ? 3 : 2;
}

const char *qkv_optim_buf_name(const qkv_optim *o, int b)
{
    static const char *adam[OPTIM_MAX_BUFS] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    if (b < 0 || b >= o->nbuf) return NULL;
    return o->o.kind == QKV_OPTIM_SGD ? "momentum_buffer" : adam[b];
}

static qkv_status check_lr(const char *fn, double lr)
{
    if (!(lr >= 0) || isinf(lr))
        return qkv_fail(QKV_ERR_ARG, "%s: learning rate %g, expected a finite value >= 0", fn, lr);
    return QKV_OK;
}

qkv_status qkv_optim_check_opts(const char *fn, const qkv_optim_opts *o)
{
    if (o->kind != QKV_OPTIM_SGD && o->kind != QKV_OPTIM_ADAM && o->kind != QKV_OPTIM_ADAMW)
        return qkv_fail(QKV_ERR_ARG, "%s: kind %d, expected QKV_OPTIM_SGD, _ADAM or _ADAMW", fn,
                        (int)o->kind);
    QKV_TRY(check_lr(fn, o->lr));
    if (!(o->weight_decay >= 0) || isinf(o->weight_decay))
        return qkv_fail(QKV_ERR_ARG, "%s: weight_decay %g, expected a finite value >= 0", fn,
                        o->weight_decay);
    if (o->kind == QKV_OPTIM_SGD) {
        if (!(o->momentum >= 0) || isinf(o->momentum))
            return qkv_fail(QKV_ERR_ARG, "%s: momentum %g, expected a finite value >= 0", fn,
                            o->momentum);
        if (!isfinite(o->dampening))
            return qkv_fail(QKV_ERR_ARG, "%s: dampening %g is not finite", fn, o->dampening);
        if (o->nesterov && (o->momentum <= 0 || o->dampening != 0))
            return qkv_fail(QKV_ERR_ARG, "%s: nesterov needs momentum > 0 and dampening 0 "
                                         "(momentum %g, dampening %g)",
                            fn, o->momentum, o->dampening);
        return QKV_OK;
    }
    if (!(o->beta1 >= 0 && o->beta1 < 1))
        return qkv_fail(QKV_ERR_ARG, "%s: beta1 %g outside [0,1)", fn, o->beta1);
    if (!(o->beta2 >= 0 && o->beta2 < 1))
        return qkv_fail(QKV_ERR_ARG, "%s: beta2 %g outside [0,1)", fn, o->beta2);
    if (!(o->eps >= 0) || isinf(o->eps))
        return qkv_fail(QKV_ERR_ARG, "%s: eps %g, expected a finite value >= 0", fn, o->eps);
    return QKV_OK;
}

qkv_status qkv_optim_new(qkv_optim **out, qkv_params *params, const qkv_optim_opts *opts)
{
    QKV_NEED(out, "optim_new", "out");
    *out = NULL;
    QKV_NEED(params, "optim_new", "params");
    QKV_NEED(opts, "optim_new", "opts");
    QKV_TRY(qkv_optim_check_opts("optim_new", opts));
    int n = qkv_params_count(params);
    if (n == 0) return qkv_fail(QKV_ERR_ARG, "optim_new: the parameter store is empty");
    qkv_optim *o = calloc(1, sizeof *o);
    if (!o) return qkv_fail(QKV_ERR_NOMEM, "optim_new: out of memory");
    o->params = params;
    o->o = *opts;
    o->n = n;
    o->nbuf = qkv_optim_nbuf_for(opts);
    o->off = malloc((size_t)n * sizeof *o->off);
    for (int i = 0; o->off && i < n; i++) {
        o->off[i] = o->numel;
        o->numel += qkv_tensor_numel(qkv_params_at(params, i));
    }
    o->hi = o->numel;
    size_t nstate = (size_t)o->nbuf * (size_t)o->numel;
    o->state = calloc(nstate ? nstate : 1, sizeof *o->state);
    if (!o->off || !o->state) {
        qkv_optim_free(o);
        return qkv_fail(QKV_ERR_NOMEM, "optim_new: out of memory for %zu floats of state", nstate);
    }
    *out = o;
    return QKV_OK;
}

void qkv_optim_free(qkv_optim *o)
{
    if (!o) return;
    free(o->state);
    free(o->off);
    free(o);
}

qkv_status qkv_optim_set_lr(qkv_optim *o, double lr)
{
    QKV_NEED(o, "optim_set_lr", "optim");
    QKV_TRY(check_lr("optim_set_lr", lr));
    o->o.lr = lr;
    return QKV_OK;
}

double qkv_optim_get_lr(const qkv_optim *o) { return o ? o->o.lr : NAN; }

int64_t qkv_optim_steps(const qkv_optim *o) { return o ? o->step : 0; }

qkv_status qkv_optim_get_opts(const qkv_optim *o, qkv_optim_opts *opts)
{
    QKV_NEED(o, "optim_get_opts", "optim");
    QKV_NEED(opts, "optim_get_opts", "opts");
    *opts = o->o;
    return QKV_OK;
}

/* ---- the update rules --------------------------------------------------- */

/* _single_tensor_sgd on one parameter: p (n), g (n), buf (n) or NULL. */
static void sgd_update(const qkv_optim_opts *o, int64_t step, float *p, const float *g,
                       float *buf, int64_t n)
{
    const float wd = (float)o->weight_decay, mom = (float)o->momentum;
    const float keep = (float)(1.0 - o->dampening), neg_lr = (float)(-o->lr);
#pragma omp for nowait /* shared by the threads of qkv_optim_step's region */
    for (int64_t j = 0; j < n; j++) {
        float d = o->maximize ? -g[j] : g[j];
        if (o->weight_decay != 0) d = fmaf(wd, p[j], d);  /* d_p.add(param, alpha=wd) */
        if (buf) {
            if (step == 1) buf[j] = d;                     /* buf = clone(d_p) */
            else buf[j] = fmaf(keep, d, buf[j] * mom);     /* mul_(momentum).add_(d_p, 1-dampening) */
            d = o->nesterov ? fmaf(mom, buf[j], d) : buf[j];
        }
        p[j] = fmaf(neg_lr, d, p[j]);                      /* param.add_(d_p, alpha=-lr) */
    }
}

/* Adam's constants for one step. */
typedef struct {
    float b1, a1, b2, a2, wd, decay, neg_step_size, bc2_sqrt, eps;
    float sign;   /* -1 when maximizing */
    int adamw, l2; /* decoupled decay; L2 decay added to the gradient */
} adam_k;

/* One element: p, m, v and vmax (max_exp_avg_sq, or NULL) updated in
 * place from the gradient g. Selects, not branches, so that the loops
 * over it vectorise (with -fno-math-errno, Makefile). */
static inline void adam_elem(const adam_k *k, float *p, float g, float *m, float *v, float *vmax)
{
    float gj = k->sign * g, pj = p[0];
    pj = k->adamw ? pj * k->decay : pj;          /* param.mul_(1 - lr*wd) */
    gj = k->l2 ? fmaf(k->wd, pj, gj) : gj;       /* grad.add(param, alpha=wd) */
    float mj = fmaf(k->a1, gj, m[0] * k->b1);    /* mul_(beta1).add_(grad, 1-beta1) */
    float vj = fmaf(k->a2 * gj, gj, v[0] * k->b2); /* mul_(beta2).addcmul_(grad, grad, 1-beta2) */
    m[0] = mj;
    v[0] = vj;
    float second = vj;
    if (vmax) /* torch.maximum: NaN wins */
        second = vmax[0] = vj > vmax[0] || vj != vj ? vj : vmax[0];
    float denom = sqrtf(second) / k->bc2_sqrt + k->eps;
    p[0] = pj + k->neg_step_size * mj / denom;   /* addcdiv_(m, denom, -step_size) */
}

/* _single_tensor_adam / _adamw on one parameter: p, g, m (exp_avg),
 * v (exp_avg_sq), vmax (max_exp_avg_sq, or NULL), all (n). */
static void adam_update(const qkv_optim_opts *o, int64_t step, float *p, const float *g,
                        float *m, float *v, float *vmax, int64_t n)
{
    const double bc1 = 1.0 - pow(o->beta1, (double)step), bc2 = 1.0 - pow(o->beta2, (double)step);
    const int adamw = o->kind == QKV_OPTIM_ADAMW;
    const adam_k k = {(float)o->beta1, (float)(1.0 - o->beta1), (float)o->beta2, (float)(1.0 - o->beta2),
                      (float)o->weight_decay, (float)(1.0 - o->lr * o->weight_decay),
                      (float)(-(o->lr / bc1)), (float)sqrt(bc2), (float)o->eps, o->maximize ? -1.0f : 1.0f,
                      adamw, !adamw && o->weight_decay != 0};
    /* shared by the threads of qkv_optim_step's region */
    if (vmax) {
#pragma omp for nowait
        for (int64_t j = 0; j < n; j++) adam_elem(&k, p + j, g[j], m + j, v + j, vmax + j);
    } else {
#pragma omp for nowait
        for (int64_t j = 0; j < n; j++) adam_elem(&k, p + j, g[j], m + j, v + j, NULL);
    }
}

qkv_status qkv_optim_step(qkv_optim *o)
{
    QKV_NEED(o, "optim_step", "optim");
    if (qkv_params_count(o->params) != o->n)
        return qkv_fail(QKV_ERR_STATE,
                        "optim_step: the store has %d parameters, the optimizer was made for %d",
                        qkv_params_count(o->params), o->n);
    o->step++;
    const int64_t span = o->hi - o->lo;
    /* One parallel region for every parameter (waking the threads once per
     * tensor cost 30-60 us each under OMP_WAIT_POLICY=PASSIVE, bench/omp_wake); each
     * tensor's elements are shared out by the update's `omp for`. Every
     * element is updated on its own, so the bits do not depend on the split. */
#pragma omp parallel if (span >= QKV_PAR_MIN)
    for (int i = 0; i < o->n; i++) {
        qkv_tensor *t = qkv_params_at(o->params, i);
        if (!t->requires_grad) continue; /* a buffer (qkv_params_add_buffer): not a parameter */
        /* this parameter's elements [a, b) of the kept range, in flat terms */
        int64_t a = o->off[i] > o->lo ? o->off[i] : o->lo;
        int64_t b = o->off[i] + qkv_tensor_numel(t);
        if (b > o->hi) b = o->hi;
        if (a >= b) continue;
        int64_t n = b - a, j = a - o->off[i];
        float *st = o->state + (a - o->lo);
        if (o->o.kind == QKV_OPTIM_SGD)
            sgd_update(&o->o, o->step, t->data + j, t->grad + j, o->nbuf ? st : NULL, n);
        else
            adam_update(&o->o, o->step, t->data + j, t->grad + j, st, st + span,
                        o->nbuf > 2 ? st + 2 * span : NULL, n);
    }
    return QKV_OK;
}

qkv_status qkv_optim_shard(qkv_optim *o, int64_t lo, int64_t hi)
{
    QKV_NEED(o, "optim_shard", "optim");
    if (qkv_optim_sharded(o))
        return qkv_fail(QKV_ERR_STATE, "optim_shard: the optimizer is already sharded");
    if (lo < 0 || hi < lo || hi > o->numel)
        return qkv_fail(QKV_ERR_ARG, "optim_shard: range [%lld, %lld) outside the %lld elements",
                        (long long)lo, (long long)hi, (long long)o->numel);
    int64_t span = hi - lo;
    size_t nstate = (size_t)o->nbuf * (size_t)span;
    float *st = malloc((nstate ? nstate : 1) * sizeof *st);
    if (!st) return qkv_fail(QKV_ERR_NOMEM, "optim_shard: out of memory for %zu floats", nstate);
    for (int b = 0; b < o->nbuf; b++)
        memcpy(st + b * span, o->state + b * o->numel + lo, (size_t)span * sizeof *st);
    free(o->state);
    o->state = st;
    o->lo = lo, o->hi = hi, o->sharded = 1;
    return QKV_OK;
}

/* ---- gradient clipping -------------------------------------------------- */

qkv_status qkv_clip_grad_norm(qkv_params *params, float max_norm, float *total_norm)
{
    if (total_norm) *total_norm = 0;
    QKV_NEED(params, "clip_grad_norm", "params");
    if (!(max_norm >= 0))
        return qkv_fail(QKV_ERR_ARG, "clip_grad_norm: max_norm %g, expected >= 0", max_norm);
    /* total = norm(stack([norm(g) for g in grads])): each norm a float. */
    /* Each tensor's norm on one thread (qkv_sum_sq_dev: 8 partial sums in
     * double, a fixed order), the tensors shared out in one parallel region,
     * then summed in order: the bits do not depend on the thread count. */
    int np = qkv_params_count(params);
    int64_t all = qkv_params_numel(params);
    float *norms = malloc((size_t)(np ? np : 1) * sizeof *norms);
    if (!norms) return qkv_fail(QKV_ERR_NOMEM, "clip_grad_norm: out of memory for %d norms", np);
    QKV_PAR_FOR_WITH(all >= QKV_PAR_MIN, schedule(dynamic),
        for (int i = 0; i < np; i++) {
            qkv_tensor *t = qkv_params_at(params, i);
            norms[i] = (float)sqrt(qkv_sum_sq_dev(t->grad, 0.0, qkv_tensor_numel(t)));
        });
    double sq = 0;
    for (int i = 0; i < np; i++) sq += (double)norms[i] * norms[i];
    free(norms);
    float total = (float)sqrt(sq);
    /* clamp(max_norm / (total + 1e-6), max=1), where scalar / tensor is
     * reciprocal(tensor) * scalar. */
    float coef = (1.0f / (total + 1e-6f)) * max_norm;
    if (coef > 1.0f) coef = 1.0f;
    if (coef != 1.0f) /* times 1 leaves every gradient as it is */
#pragma omp parallel if (all >= QKV_PAR_MIN)
        for (int i = 0; i < np; i++) {
            qkv_tensor *t = qkv_params_at(params, i);
            int64_t n = qkv_tensor_numel(t);
#pragma omp for nowait
            for (int64_t j = 0; j < n; j++) t->grad[j] *= coef;
        }
    if (total_norm) *total_norm = total;
    return QKV_OK;
}
