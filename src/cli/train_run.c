/* train_run.c: the trainers' one skeleton (train_run.h). The qkv_dist_*
 * calls of the trainers' setup are here: the checkpoint's state, ZeRO-1,
 * the agreement. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli/train_run.h"

int train_run_mkdir(const char *dir)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0777) && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(buf, 0777) && errno != EEXIST ? -1 : 0;
}

int train_run_fail(train_run *t, const char *what)
{
    char msg[700];
    snprintf(msg, sizeof msg, "%s%s%s", what ? what : "", what ? ": " : "", qkv_cli_last_error());
    if (!t->reported) {
        if (qkv_dist_size(t->dist) > 1) qkv_cli_report(t->cmd, "rank %d: %s", qkv_dist_rank(t->dist), msg);
        else qkv_cli_report(t->cmd, "%s", msg);
    }
    t->reported = 1;
    if (!t->agreed) { /* the others would wait for this rank at the first step */
        qkv_cli_fail(QKV_ERR_STATE, "%s", msg);
        qkv_cli_dist_agree(t->dist, QKV_ERR_STATE, t->cmd);
        t->agreed = 1;
    }
    return t->fail_exit ? t->fail_exit : QKV_EXIT_FAILURE;
}

qkv_status train_run_meta(train_run *t, const char *key, const char *val)
{
    if (t->meta.n >= TRAIN_META_MAX) return qkv_cli_fail(QKV_ERR_ARG, "%s: too much metadata", t->cmd);
    t->keys[t->meta.n] = key, t->vals[t->meta.n] = val;
    t->meta.n++;
    return QKV_OK;
}

qkv_status train_run_read_train(train_run *t, const rf_field *f, int n, void *obj, size_t size,
                                int (*legacy)(const char *text, void *obj))
{
    char key[64], what[1200], *text = NULL;
    snprintf(key, sizeof key, "%s.train", t->family);
    snprintf(what, sizeof what, "%s: %s", t->ckpt, key);
    QKV_CLI_TRY(qkv_checkpoint_read_meta(t->ckpt, key, &text));
    qkv_status s;
    if (rf_is_lines(text) || !legacy) s = rf_read(what, text, f, n, obj, size);
    else s = legacy(text, obj) ? QKV_OK : qkv_cli_fail(QKV_ERR_FORMAT, "%s: metadata %s is malformed", t->ckpt, key);
    free(text);
    return s;
}

/* The checkpoint's path; a new run's folder (rank 0 writes there, the
 * others, on another machine maybe, only read), refusing to train over a
 * checkpoint; the batch against the ranks. */
static int folder(train_run *t)
{
    snprintf(t->ckpt, sizeof t->ckpt, "%s/%s", t->out, t->ckpt_name);
    if (!t->resume && qkv_dist_rank(t->dist) == 0) {
        if (train_run_mkdir(t->out) != 0)
            return qkv_cli_fail(QKV_ERR_IO, "cannot make %s: %s", t->out, strerror(errno)), train_run_fail(t, NULL);
        if (access(t->ckpt, F_OK) == 0 && t->exists_is_usage) {
            t->fail_exit = QKV_EXIT_USAGE;
            qkv_cli_fail(QKV_ERR_ARG, "%s already holds a model: give --resume to continue it, or another --out",
                         t->out);
            return train_run_fail(t, NULL);
        }
        if (access(t->ckpt, F_OK) == 0)
            return qkv_cli_fail(QKV_ERR_ARG, "%s exists: continue it with --resume, or give another --out",
                                t->ckpt), train_run_fail(t, NULL);
    }
    if (t->batch > 0 && t->batch < qkv_dist_size(t->dist))
        return qkv_cli_fail(QKV_ERR_ARG, "--batch %lld is smaller than the %d ranks", (long long)t->batch,
                            qkv_dist_size(t->dist)), train_run_fail(t, NULL);
    return 0;
}

/* The metadata every run's checkpoints carry, after setup's own pairs. */
static qkv_status metadata(train_run *t)
{
    static char keys[4][64];
    const char *names[3] = {"config", "train", "precision"};
    const char *vals[3] = {t->config, t->train, qkv_cli_precision_name(t->precision)};
    QKV_CLI_TRY(train_run_meta(t, "kind", t->kind));
    for (int i = 0; i < 3; i++) {
        if (!vals[i][0] || (i == 2 && t->precision == QKV_FP32)) continue; /* an FP32 run names none */
        snprintf(keys[i], sizeof keys[i], "%s.%s", t->family, names[i]);
        QKV_CLI_TRY(train_run_meta(t, keys[i], vals[i]));
    }
    t->meta.keys = t->keys, t->meta.vals = t->vals;
    return QKV_OK;
}

/* The optimizer, the contexts, the state resumed, ZeRO-1; 0 or a failure's exit status. */
static int prepare(train_run *t)
{
    if (t->resume && !t->precision_read) {
        char key[64];
        snprintf(key, sizeof key, "%s.precision", t->family);
        if (qkv_cli_checkpoint_precision(t->ckpt, key, &t->precision)) return train_run_fail(t, NULL);
    }
    if (qkv_optim_new(&t->opt, t->params, &t->optim) || qkv_ctx_new(&t->c) || qkv_ctx_new(&t->eval) ||
        metadata(t) || (t->has_schedule && qkv_schedule_check(&t->sched)) ||
        qkv_ctx_set_precision(t->c, t->precision) || qkv_ctx_set_precision(t->eval, t->precision))
        return train_run_fail(t, NULL);
    if (t->resume) {
        if (qkv_checkpoint_load(t->ckpt, t->params, t->opt, &t->pos, t->keep_rng ? &t->rng : NULL))
            return train_run_fail(t, "resume");
        if (t->hooks->resumed && t->hooks->resumed(t)) return train_run_fail(t, NULL);
    }
    /* after the load (the whole state): this rank's 1/N of the moments */
    if (t->zero1 && qkv_dist_zero1(t->dist, t->opt, &t->zero1_saved)) return train_run_fail(t, "--zero1");
    if (t->hooks->before_agree && qkv_dist_rank(t->dist) == 0 && t->hooks->before_agree(t))
        return train_run_fail(t, NULL);
    /* every rank's setup went well: from here on all take the same steps */
    t->agreed = 1;
    if (qkv_cli_dist_agree(t->dist, QKV_OK, t->cmd)) return train_run_fail(t, NULL);
    if (t->batch > 0 && t->batch % qkv_dist_size(t->dist) && qkv_dist_rank(t->dist) == 0)
        qkv_cli_report(t->cmd, "note: the batch of %lld is split unevenly between %d ranks", (long long)t->batch,
                       qkv_dist_size(t->dist));
    return 0;
}

/* qkv_train with the skeleton's parts; the finish hook's exit status. */
static int fit(train_run *t)
{
    if (t->hooks->describe) t->hooks->describe(t);
    if (t->zero1) qkv_cli_zero1_note(t->dist, t->zero1_saved);
    if (t->hooks->describe_more) t->hooks->describe_more(t);
    fflush(stdout);
    t->tr.params = t->params, t->tr.optim = t->opt, t->tr.schedule = t->has_schedule ? &t->sched : NULL;
    t->tr.checkpoint = t->ckpt, t->tr.rng = t->keep_rng ? &t->rng : NULL, t->tr.meta = &t->meta;
    t->tr.dist = t->dist;
    int64_t first = t->pos.step;
    double t0 = qkv_cli_now();
    if (qkv_train(t->c, &t->tr, &t->pos) && !t->stopped) return train_run_fail(t, t->training_what);
    return t->hooks->finish(t, first, qkv_cli_now() - t0);
}

int train_run_main(train_run *t)
{
    int rc = folder(t);
    if (!rc && t->hooks->setup(t)) rc = train_run_fail(t, NULL);
    if (!rc) rc = prepare(t);
    if (!rc) rc = fit(t);
    if (t->hooks->free) t->hooks->free(t);
    qkv_optim_free(t->opt);
    qkv_ctx_free(t->c);
    qkv_ctx_free(t->eval);
    return rc;
}
