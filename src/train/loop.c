/* loop.c: the training loop and its progress line. */
#define _POSIX_C_SOURCE 200809L /* fileno */
#include <math.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include "train/optim_internal.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void qkv_progress_start(qkv_progress *p, FILE *out, int64_t total_steps, const char *unit)
{
    if (!p) return;
    *p = (qkv_progress){0};
    p->out = out;
    p->live = out && isatty(fileno(out));
    p->total = total_steps;
    p->unit = unit ? unit : "samples";
    p->t0 = p->last = now();
    p->every = total_steps > 20 ? total_steps / 20 : 1;
}

void qkv_progress_step(qkv_progress *p, int64_t step, double loss, double lr, int64_t units)
{
    if (!p || !p->out) return;
    p->units += units;
    double t = now();
    int last = step + 1 >= p->total;
    if (p->live ? !last && t - p->last < 0.1 : !last && (step + 1) % p->every != 0) return;
    p->last = t;
    double rate = t > p->t0 ? (double)p->units / (t - p->t0) : 0;
    fprintf(p->out, "%sstep %lld/%lld  loss %.5g  lr %.3g  %.0f %s/s%s", p->live ? "\r" : "",
            (long long)step + 1, (long long)p->total, loss, lr, rate, p->unit, p->live ? "   " : "\n");
    fflush(p->out);
}

void qkv_progress_finish(qkv_progress *p)
{
    if (p && p->out && p->live) fputc('\n', p->out);
}

static qkv_status check_trainer(const qkv_ctx *c, const qkv_trainer *t, const qkv_train_pos *pos)
{
    QKV_NEED(c, "train", "ctx");
    QKV_NEED(t, "train", "trainer");
    QKV_NEED(pos, "train", "pos");
    QKV_NEED(t->params, "train", "trainer->params");
    QKV_NEED(t->optim, "train", "trainer->optim");
    QKV_NEED(t->batch, "train", "trainer->batch");
    if (t->steps < 0 || pos->step < 0)
        return qkv_fail(QKV_ERR_ARG, "train: steps %lld and pos->step %lld must not be negative",
                        (long long)t->steps, (long long)pos->step);
    if (t->checkpoint && t->checkpoint_every <= 0)
        return qkv_fail(QKV_ERR_ARG, "train: checkpoint_every %lld must be positive with a checkpoint",
                        (long long)t->checkpoint_every);
    if (t->schedule) QKV_TRY(qkv_schedule_check(t->schedule));
    return QKV_OK;
}

/* "; the last checkpoint, PATH at step N, is kept" or "" */
static const char *kept(const qkv_trainer *t, int64_t saved, char *buf, size_t n)
{
    if (!t->checkpoint || saved < 0) return "; no checkpoint was written";
    snprintf(buf, n, "; the last checkpoint, %s at step %lld, is kept", t->checkpoint, (long long)saved);
    return buf;
}

qkv_status qkv_train(qkv_ctx *c, const qkv_trainer *t, qkv_train_pos *pos)
{
    QKV_TRY(check_trainer(c, t, pos));
    qkv_dist *d = qkv_dist_size(t->dist) > 1 ? t->dist : NULL; /* one rank: as without */
    qkv_progress pr;
    qkv_progress_start(&pr, qkv_dist_rank(t->dist) == 0 ? t->progress : NULL, t->steps, t->unit);
    int64_t saved = -1;
    char buf[600];
    qkv_status s = QKV_OK;
    /* SyncBatchNorm: BatchNorm's sums over every rank, for this loop only */
    int sync = d && t->sync_batchnorm;
    if (sync) qkv_ctx_set_batch_sum(c, qkv_dist_batch_sum, d);
    while (pos->step < t->steps) {
        int64_t step = pos->step;
        qkv_ctx_reset(c);
        qkv_ctx_set_training(c, 1);
        if (t->schedule && (s = qkv_optim_set_lr(t->optim, qkv_schedule_lr_at(t->schedule, step))))
            break;
        qkv_tensor *loss = NULL;
        int64_t units = 0;
        s = t->batch(c, t->user, step, &loss, &units);
        if (!s && (!loss || loss->dtype != QKV_F32 || qkv_tensor_numel(loss) != 1))
            s = qkv_fail(QKV_ERR_ARG, "train: the batch function's loss at step %lld is not one "
                         "F32 number", (long long)step);
        if (s && sync) {
            /* the others wait in a BatchNorm's sum this rank will not join */
            char why[512];
            snprintf(why, sizeof why, "%s", qkv_last_error());
            qkv_dist_set_broken(d);
            s = qkv_fail(s, "train: rank %d of %d stopped at step %lld: %s (with synchronised BatchNorm "
                         "the other ranks cannot be told: this rank exits, and mpirun stops them)",
                         qkv_dist_rank(d), qkv_dist_size(d), (long long)step, why);
            break;
        }
        float l = s ? NAN : loss->data[0];
        double total_units = (double)units, mean_loss = l;
        /* every rank learns whether one failed, and the global batch's loss */
        if (d && (s = qkv_dist_batch_agree(d, s, (double)units, l, step, &total_units, &mean_loss)))
            break;
        if (s) break;
        const int64_t my_units = units;
        if (d) l = (float)mean_loss, units = (int64_t)total_units;
        if (!isfinite(l)) {
            s = qkv_fail(QKV_ERR_STATE, "train: loss is %g at step %lld: stopped before updating "
                         "the parameters%s", l, (long long)step, kept(t, saved, buf, sizeof buf));
            break;
        }
        if ((s = qkv_backward(c, loss, NULL)) != QKV_OK) break;
        /* After the whole backward: the tape has no hook that says when a
         * parameter's gradient is final (docs/distributed.md). */
        if (d && (s = qkv_dist_grads_allreduce(d, t->params, (double)my_units,
                                               t->bucket_floats, NULL)))
            break;
        /* Without clipping, max_norm inf only measures the norm (the
         * gradients are multiplied by exactly 1). */
        float norm;
        if ((s = qkv_clip_grad_norm(t->params, t->clip_norm > 0 ? t->clip_norm : INFINITY, &norm)))
            break;
        if (!isfinite(norm)) {
            qkv_params_zero_grad(t->params);
            s = qkv_fail(QKV_ERR_STATE, "train: gradient norm is %g at step %lld: stopped before "
                         "updating the parameters%s", norm, (long long)step, kept(t, saved, buf, sizeof buf));
            break;
        }
        if ((s = qkv_dist_optim_step(d, t->optim)) != QKV_OK) break;
        /* BatchNorm's running statistics moved with each rank's shard:
         * rank 0's to everyone (docs/distributed.md, "BatchNorm") */
        if (d && (s = qkv_dist_buffers_sync(d, t->params)) != QKV_OK) break;
        qkv_params_zero_grad(t->params);
        /* A finite loss and norm can still give a non-finite update (an
         * overflowing lr or step counter): such parameters are never saved
         * nor named as resumable. O(parameters), small beside the step. */
        int64_t at;
        const qkv_tensor *bad = qkv_params_nonfinite(t->params, &at);
        if (bad) {
            s = qkv_fail(QKV_ERR_STATE, "train: parameter '%s' is %g (element %lld) after the "
                         "update at step %lld: not saved; the parameters in memory are unusable%s",
                         bad->name, (double)bad->data[at], (long long)at, (long long)step,
                         kept(t, saved, buf, sizeof buf));
            break;
        }
        pos->step++;
        int64_t every = t->check_every > 0 ? t->check_every : 50;
        if (d && (pos->step % every == 0 || pos->step == t->steps) &&
            (s = qkv_dist_check_params(d, t->params, step)) != QKV_OK)
            break;
        qkv_progress_step(&pr, step, l, qkv_optim_get_lr(t->optim), units);
        if (t->checkpoint && (pos->step % t->checkpoint_every == 0 || pos->step == t->steps)) {
            if ((s = qkv_dist_checkpoint_save(d, t->checkpoint, t->params, t->optim, pos, t->rng,
                                              t->meta)) != QKV_OK) {
                /* a full disk, say: the parameters in memory are fine */
                char why[512];
                snprintf(why, sizeof why, "%s", qkv_last_error());
                s = qkv_fail(s, "train: the checkpoint at step %lld was not saved: %s; training stopped%s",
                             (long long)pos->step, why, kept(t, saved, buf, sizeof buf));
                break;
            }
            saved = pos->step;
        }
        if (t->after_step) {
            if ((s = t->after_step(c, t->user, pos, l)) != QKV_OK) break;
        }
    }
    if (sync) qkv_ctx_set_batch_sum(c, NULL, NULL);
    qkv_progress_finish(&pr);
    return s;
}
