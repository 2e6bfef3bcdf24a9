/* data_parallel.c: data-parallel training over the collectives of
 * src/dist/: the gradients' weighted mean in buckets, a parameter
 * checksum, agreeing on a step's loss (or on who failed), BatchNorm's
 * buffers and sums across ranks, ZeRO-1's sharded optimizer step, and
 * checkpoints written by rank 0 only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dist/comm.h"
#include "train/optim_internal.h"

enum { DEFAULT_BUCKET = 1 << 20 };

/* Every rank's (failed, a, b): *sa and *sb get the sums of a and b over
 * the ranks that did not fail, in rank order (the same bits on every rank);
 * *first the first failed rank (-1: none), whose message (mine_msg, NULL:
 * qkv_last_error()) is copied into msg on every rank. */
static qkv_status agree(qkv_dist *d, qkv_status mine, const char *mine_msg, double a, double b,
                        double *sa, double *sb, int *first, char *msg, size_t cap)
{
    int n = qkv_dist_size(d);
    double mine3[3] = {mine != QKV_OK, mine ? 0 : a, mine ? 0 : b};
    double *all = malloc(3 * (size_t)n * sizeof *all);
    if (!all) return qkv_fail(QKV_ERR_NOMEM, "dist: out of memory agreeing on a status");
    qkv_status s = qkv_dist_allgather(d, mine3, sizeof mine3, all);
    *first = -1, *sa = 0, *sb = 0;
    for (int r = 0; !s && r < n; r++) {
        if (all[3 * r] != 0 && *first < 0) *first = r;
        *sa += all[3 * r + 1], *sb += all[3 * r + 2];
    }
    free(all);
    if (s || *first < 0) return s;
    /* the first failing rank's message to everyone */
    if (qkv_dist_rank(d) == *first) snprintf(msg, cap, "%s", mine_msg ? mine_msg : qkv_last_error());
    return qkv_dist_broadcast(d, msg, (int64_t)cap, *first);
}

qkv_status qkv_dist_batch_agree(qkv_dist *d, qkv_status mine, double units, double loss,
                                int64_t step, double *total_units, double *mean_loss)
{
    QKV_NEED(d, "dist_batch_agree", "dist");
    /* (failed, units, loss * units) per rank */
    char msg[480] = "";
    double u, l;
    int first;
    QKV_TRY(agree(d, mine, NULL, units, loss * units, &u, &l, &first, msg, sizeof msg));
    if (first >= 0)
        return qkv_fail(mine ? mine : QKV_ERR_STATE, "train: rank %d of %d stopped at step %lld: %s",
                        first, qkv_dist_size(d), (long long)step, msg);
    if (total_units) *total_units = u;
    if (mean_loss) *mean_loss = u > 0 ? l / u : loss;
    qkv_dist_set_weight(d, u > 0 ? units / u : 0);
    return QKV_OK;
}

qkv_status qkv_dist_batch_sum(void *user, double *x, int64_t n, int weighted)
{
    qkv_dist *d = user;
    QKV_NEED(d, "dist_batch_sum", "dist (user)");
    QKV_NEED(x, "dist_batch_sum", "x");
    if (n < 0) return qkv_fail(QKV_ERR_ARG, "dist_batch_sum: n %lld < 0", (long long)n);
    if (!qkv_dist_started(d))
        return qkv_fail(QKV_ERR_ARG, "dist_batch_sum: user is not a started qkv_dist");
    if (qkv_dist_size(d) == 1) return QKV_OK;
    double w = qkv_dist_weight(d);
    if (weighted && w > 0)
        for (int64_t i = 0; i < n; i++) x[i] *= w;
    QKV_TRY(qkv_dist_allreduce_f64(d, x, n, QKV_DIST_SUM));
    if (weighted && w > 0)
        for (int64_t i = 0; i < n; i++) x[i] /= w;
    return QKV_OK;
}

qkv_status qkv_dist_agree(qkv_dist *d, qkv_status mine, const char *mine_msg, const char *what)
{
    QKV_NEED(d, "dist_agree", "dist");
    QKV_NEED(what, "dist_agree", "what");
    if (qkv_dist_size(d) == 1) return mine;
    char msg[480] = "";
    double u, l;
    int first;
    QKV_TRY(agree(d, mine, mine_msg, 0, 0, &u, &l, &first, msg, sizeof msg));
    if (first < 0) return QKV_OK;
    return qkv_fail(mine ? mine : QKV_ERR_STATE, "%s: rank %d of %d failed: %s", what, first, qkv_dist_size(d), msg);
}

qkv_status qkv_dist_buffers_sync(qkv_dist *d, qkv_params *params)
{
    QKV_NEED(d, "dist_buffers_sync", "dist");
    QKV_NEED(params, "dist_buffers_sync", "params");
    if (qkv_dist_size(d) == 1) return QKV_OK;
    int np = qkv_params_count(params);
    int64_t n = 0;
    for (int i = 0; i < np; i++) {
        qkv_tensor *t = qkv_params_at(params, i);
        if (!t->requires_grad) n += qkv_tensor_numel(t);
    }
    if (n == 0) return QKV_OK; /* the same store on every rank: all skip together */
    float *flat;
    QKV_TRY(qkv_dist_scratch(d, n, &flat));
    int64_t at = 0;
    for (int i = 0; i < np; i++) { /* rank 0 packs, everyone unpacks */
        qkv_tensor *t = qkv_params_at(params, i);
        int64_t k = qkv_tensor_numel(t);
        if (t->requires_grad) continue;
        if (qkv_dist_rank(d) == 0) memcpy(flat + at, t->data, (size_t)k * sizeof *flat);
        at += k;
    }
    QKV_TRY(qkv_dist_broadcast(d, flat, n * (int64_t)sizeof *flat, 0));
    at = 0;
    for (int i = 0; i < np; i++) {
        qkv_tensor *t = qkv_params_at(params, i);
        int64_t k = qkv_tensor_numel(t);
        if (t->requires_grad) continue;
        memcpy(t->data, flat + at, (size_t)k * sizeof *flat);
        at += k;
    }
    return QKV_OK;
}

qkv_status qkv_dist_grads_allreduce(qkv_dist *d, qkv_params *params, double units,
                                    int64_t bucket_floats, double *total_units)
{
    QKV_NEED(d, "dist_grads_allreduce", "dist");
    QKV_NEED(params, "dist_grads_allreduce", "params");
    if (!(units >= 0))
        return qkv_fail(QKV_ERR_ARG, "dist_grads_allreduce: units %g, expected >= 0", units);
    if (bucket_floats < 0)
        return qkv_fail(QKV_ERR_ARG, "dist_grads_allreduce: bucket_floats %lld is negative",
                        (long long)bucket_floats);
    double total = units;
    if (qkv_dist_size(d) > 1) QKV_TRY(qkv_dist_allreduce_f64(d, &total, 1, QKV_DIST_SUM));
    if (total_units) *total_units = total;
    if (qkv_dist_size(d) == 1) return QKV_OK;
    if (!(total > 0))
        return qkv_fail(QKV_ERR_ARG, "dist_grads_allreduce: the ranks' units sum to %g", total);
    const float w = (float)(units / total);
    const int64_t P = qkv_params_numel(params), B = bucket_floats ? bucket_floats : DEFAULT_BUCKET;
    float *flat;
    QKV_TRY(qkv_dist_scratch(d, P, &flat));
    /* Pack w * grad in store order; a bucket starts as soon as it is packed,
     * so that packing the next overlaps the transfer of the last. */
    int np = qkv_params_count(params), k = 0;
    int64_t at = 0, started = 0;
    for (int i = 0; i < np; i++) {
        qkv_tensor *t = qkv_params_at(params, i);
        int64_t n = qkv_tensor_numel(t);
        for (int64_t j = 0; j < n; j++) flat[at + j] = t->grad ? w * t->grad[j] : 0.0f;
        at += n;
        while (at - started >= B || (i == np - 1 && at > started)) {
            int64_t len = at - started < B ? at - started : B;
            QKV_TRY(qkv_dist_iallreduce(d, flat + started, len, k++));
            started += len;
        }
    }
    QKV_TRY(qkv_dist_wait_all(d, k));
    at = 0;
    for (int i = 0; i < np; i++) {
        qkv_tensor *t = qkv_params_at(params, i);
        int64_t n = qkv_tensor_numel(t);
        if (t->grad) memcpy(t->grad, flat + at, (size_t)n * sizeof *flat);
        at += n;
    }
    return QKV_OK;
}

/* FNV-1a over 32-bit words of every parameter's bits. */
static uint64_t params_hash(qkv_params *p)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < qkv_params_count(p); i++) {
        qkv_tensor *t = qkv_params_at(p, i);
        const uint32_t *w = (const uint32_t *)(const void *)t->data;
        for (int64_t j = 0; j < qkv_tensor_numel(t); j++) h = (h ^ w[j]) * 1099511628211ull;
    }
    return h;
}

qkv_status qkv_dist_check_params(qkv_dist *d, qkv_params *params, int64_t step)
{
    QKV_NEED(d, "dist_check_params", "dist");
    QKV_NEED(params, "dist_check_params", "params");
    if (qkv_dist_size(d) == 1) return QKV_OK;
    uint64_t h = params_hash(params);
    uint64_t *all = malloc((size_t)qkv_dist_size(d) * sizeof *all);
    if (!all) return qkv_fail(QKV_ERR_NOMEM, "dist_check_params: out of memory");
    qkv_status s = qkv_dist_allgather(d, &h, sizeof h, all);
    for (int r = 1; !s && r < qkv_dist_size(d); r++)
        if (all[r] != all[0])
            s = qkv_fail(QKV_ERR_STATE, "train: the parameters of rank %d differ from rank 0's after "
                         "step %lld (checksums %016llx and %016llx): the ranks no longer train the same "
                         "model; stopped", r, (long long)step, (unsigned long long)all[r],
                         (unsigned long long)all[0]);
    free(all);
    return s;
}

/* counts and displacements of every rank's shard of n elements */
static qkv_status shards(const qkv_dist *d, int64_t n, int64_t **out)
{
    int64_t *cd = malloc(2 * (size_t)qkv_dist_size(d) * sizeof *cd);
    if (!cd) return qkv_fail(QKV_ERR_NOMEM, "dist: out of memory");
    for (int r = 0; r < qkv_dist_size(d); r++) {
        qkv_dist_shard_of(n, r, qkv_dist_size(d), &cd[qkv_dist_size(d) + r], &cd[r]);
    }
    *out = cd;
    return QKV_OK;
}

qkv_status qkv_dist_zero1(qkv_dist *d, qkv_optim *o, int64_t *saved_bytes)
{
    if (saved_bytes) *saved_bytes = 0;
    QKV_NEED(d, "dist_zero1", "dist");
    QKV_NEED(o, "dist_zero1", "optim");
    if (qkv_dist_size(d) == 1) return QKV_OK; /* one rank keeps everything: nothing to shard */
    int64_t lo, n;
    qkv_dist_shard(d, o->numel, &lo, &n);
    QKV_TRY(qkv_optim_shard(o, lo, lo + n));
    if (saved_bytes) *saved_bytes = (int64_t)o->nbuf * (o->numel - n) * (int64_t)sizeof(float);
    return QKV_OK;
}

qkv_status qkv_dist_optim_step(qkv_dist *d, qkv_optim *o)
{
    QKV_NEED(o, "dist_optim_step", "optim");
    QKV_TRY(qkv_optim_step(o));
    if (!d || !qkv_optim_sharded(o) || qkv_dist_size(d) == 1) return QKV_OK;
    float *flat;
    int64_t *cd = NULL;
    QKV_TRY(qkv_dist_scratch(d, o->numel, &flat));
    QKV_TRY(shards(d, o->numel, &cd));
    /* this rank's updated range in, everyone's out */
    qkv_params *p = o->params;
    for (int i = 0; i < o->n; i++) {
        qkv_tensor *t = qkv_params_at(p, i);
        int64_t a = o->off[i] > o->lo ? o->off[i] : o->lo, b = o->off[i] + qkv_tensor_numel(t);
        if (b > o->hi) b = o->hi;
        if (a < b) memcpy(flat + a, t->data + (a - o->off[i]), (size_t)(b - a) * sizeof *flat);
    }
    qkv_status s = qkv_dist_allgatherv(d, flat, cd, cd + qkv_dist_size(d));
    free(cd);
    if (s) return s;
    for (int i = 0; i < o->n; i++) {
        qkv_tensor *t = qkv_params_at(p, i);
        memcpy(t->data, flat + o->off[i], (size_t)qkv_tensor_numel(t) * sizeof *flat);
    }
    return QKV_OK;
}

/* Rank 0 writes (from a whole copy of a sharded optimizer's state). */
static qkv_status save_on_root(qkv_dist *d, const char *path, qkv_params *params,
                               const qkv_optim *optim, const qkv_train_pos *pos, const qkv_rng *rng,
                               const qkv_checkpoint_meta *meta)
{
    if (!optim || !qkv_optim_sharded(optim))
        return qkv_dist_rank(d) == 0 ? qkv_checkpoint_save_meta(path, params, optim, pos, rng, meta) : QKV_OK;
    int64_t *cd = NULL, numel = optim->numel, span = optim->hi - optim->lo;
    QKV_TRY(shards(d, numel, &cd));
    float *full = qkv_dist_rank(d) == 0 ? malloc(((size_t)optim->nbuf * (size_t)numel + 1) * sizeof *full) : NULL;
    int ok = qkv_dist_rank(d) != 0 || full != NULL;
    /* everyone must take part in the gathers, so a failed malloc is told after */
    qkv_status s = QKV_OK;
    for (int b = 0; b < optim->nbuf && !s; b++)
        s = qkv_dist_gatherv(d, optim->state + b * span, full ? full + b * numel : NULL, cd,
                            cd + qkv_dist_size(d), 0);
    free(cd);
    if (!s && qkv_dist_rank(d) == 0) {
        if (!ok) s = qkv_fail(QKV_ERR_NOMEM, "dist_checkpoint_save: out of memory for the state");
        else {
            qkv_optim whole = *optim;
            whole.state = full, whole.lo = 0, whole.hi = numel, whole.sharded = 0;
            s = qkv_checkpoint_save_meta(path, params, &whole, pos, rng, meta);
        }
    }
    free(full);
    return s;
}

qkv_status qkv_dist_checkpoint_save(qkv_dist *d, const char *path, qkv_params *params,
                                    const qkv_optim *optim, const qkv_train_pos *pos, const qkv_rng *rng,
                                    const qkv_checkpoint_meta *meta)
{
    if (!d || qkv_dist_size(d) == 1) return qkv_checkpoint_save_meta(path, params, optim, pos, rng, meta);
    QKV_NEED(params, "dist_checkpoint_save", "params");
    if (optim && optim->params != params)
        return qkv_fail(QKV_ERR_ARG, "dist_checkpoint_save: the optimizer was made for another store");
    qkv_status s = save_on_root(d, path, params, optim, pos, rng, meta);
    /* rank 0's outcome, and its message, to every rank */
    struct { int status; char msg[500]; } out = {s, ""};
    if (qkv_dist_rank(d) == 0 && s) snprintf(out.msg, sizeof out.msg, "%s", qkv_last_error());
    QKV_TRY(qkv_dist_broadcast(d, &out, sizeof out, 0));
    if (out.status == QKV_OK) return QKV_OK;
    if (qkv_dist_rank(d) == 0) return s;
    return qkv_fail((qkv_status)out.status, "dist_checkpoint_save: rank 0 failed: %s", out.msg);
}
