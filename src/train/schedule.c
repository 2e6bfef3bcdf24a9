/* schedule.c: learning rate as a pure function of the step: linear warm-up,
 * then constant, cosine or linear decay to min_lr (docs/training.md names
 * the PyTorch schedulers each one equals). */
#include <math.h>
#include "core/internal.h"

static const double pi = 3.14159265358979323846;

qkv_schedule qkv_schedule_default(double base_lr)
{
    qkv_schedule s = {0};
    s.base_lr = base_lr;
    s.decay = QKV_SCHEDULE_CONSTANT;
    return s;
}

qkv_status qkv_schedule_check(const qkv_schedule *s)
{
    QKV_NEED(s, "schedule_check", "schedule");
    if (!(s->base_lr >= 0) || isinf(s->base_lr))
        return qkv_fail(QKV_ERR_ARG, "schedule: base_lr %g, expected a finite value >= 0", s->base_lr);
    if (s->warmup_steps < 0)
        return qkv_fail(QKV_ERR_ARG, "schedule: warmup_steps %lld < 0", (long long)s->warmup_steps);
    if (!(s->warmup_start_factor >= 0 && s->warmup_start_factor <= 1))
        return qkv_fail(QKV_ERR_ARG, "schedule: warmup_start_factor %g outside [0,1]",
                        s->warmup_start_factor);
    if (s->decay == QKV_SCHEDULE_CONSTANT) return QKV_OK;
    if (s->decay != QKV_SCHEDULE_COSINE && s->decay != QKV_SCHEDULE_LINEAR)
        return qkv_fail(QKV_ERR_ARG, "schedule: decay %d, expected QKV_SCHEDULE_CONSTANT, "
                                     "_COSINE or _LINEAR", (int)s->decay);
    if (s->total_steps <= s->warmup_steps)
        return qkv_fail(QKV_ERR_ARG, "schedule: total_steps %lld, expected more than "
                                     "warmup_steps %lld",
                        (long long)s->total_steps, (long long)s->warmup_steps);
    if (!(s->min_lr >= 0) || isinf(s->min_lr))
        return qkv_fail(QKV_ERR_ARG, "schedule: min_lr %g, expected a finite value >= 0", s->min_lr);
    return QKV_OK;
}

/* No qkv_fail here: a pure function must not touch the error state. */
static int schedule_ok(const qkv_schedule *s)
{
    if (!s || !(s->base_lr >= 0) || isinf(s->base_lr) || s->warmup_steps < 0) return 0;
    if (!(s->warmup_start_factor >= 0 && s->warmup_start_factor <= 1)) return 0;
    if (s->decay == QKV_SCHEDULE_CONSTANT) return 1;
    if (s->decay != QKV_SCHEDULE_COSINE && s->decay != QKV_SCHEDULE_LINEAR) return 0;
    return s->total_steps > s->warmup_steps && s->min_lr >= 0 && !isinf(s->min_lr);
}

double qkv_schedule_lr_at(const qkv_schedule *s, int64_t step)
{
    if (!schedule_ok(s) || step < 0) return NAN;
    int64_t W = s->warmup_steps;
    if (step < W) {
        double f = s->warmup_start_factor;
        return s->base_lr * (f + (1.0 - f) * (double)step / (double)W);
    }
    if (s->decay == QKV_SCHEDULE_CONSTANT) return s->base_lr;
    if (step >= s->total_steps) return s->min_lr;
    double t = (double)(step - W) / (double)(s->total_steps - W); /* in [0,1) */
    if (s->decay == QKV_SCHEDULE_COSINE)
        return s->min_lr + (s->base_lr - s->min_lr) * (1.0 + cos(pi * t)) / 2.0;
    return s->base_lr + (s->min_lr - s->base_lr) * t;
}
