/* checkpoint.c: parameters, optimizer state, training position and RNG state
 * in one safetensors file.
 *
 * Tensors: "param/<state_dict name>" and "optim/<name>/<buffer>" (buffer as
 * PyTorch's optimizer state names it: exp_avg, exp_avg_sq, max_exp_avg_sq,
 * momentum_buffer), all F32. Integers and hyper-parameters go in the
 * metadata as decimal strings (doubles with 17 significant digits, so they
 * read back exactly; RNG words in hex), with a checksum of every tensor's
 * name and bytes and of every metadata entry (version 2; version 1 left the
 * metadata outside the checksum and is refused by name). Saving is atomic
 * (the safetensors writer's temporary file, fsync, rename) and refuses
 * non-finite parameters or optimizer state. Loading checks everything
 * (numbers must be written exactly as a save writes them, and in range) and
 * reads every tensor into scratch memory before it changes anything. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "train/optim_internal.h"

#define CKPT_FORMAT "qkv-checkpoint"
enum { META_MAX = 32, VAL_LEN = 40 };
/* Counters (train.step, .epoch, .batch, optim.step) stay at or below 2^53:
 * a double still counts every step there, and step + 1 cannot overflow. */
#define COUNT_MAX ((int64_t)1 << 53)

/* ---- the checksum ----------------------------------------------------------- */

/* FNV-1a over a tensor's name (with its NUL) and then its bytes as stored
 * (little-endian); the file's checksum is the sum over its tensors, so it
 * does not depend on their order. It catches corruption, not tampering. */
static uint64_t fnv(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t hash_name(const char *name)
{
    return fnv(0xcbf29ce484222325ull, (const uint8_t *)name, strlen(name) + 1);
}

static uint64_t hash_f32(const char *name, const float *x, int64_t n)
{
    uint64_t h = hash_name(name);
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        uint8_t b[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
        h = fnv(h, b, 4);
    }
    return h;
}

/* A metadata entry: FNV-1a over "__metadata__/", key and value, each with
 * its NUL, summed with the tensors' hashes (so order does not matter and
 * no entry can pass for a tensor). Every entry but "checksum" counts. */
static uint64_t hash_meta(const char *key, const char *val)
{
    uint64_t h = hash_name("__metadata__/");
    h = fnv(h, (const uint8_t *)key, strlen(key) + 1);
    return fnv(h, (const uint8_t *)val, strlen(val) + 1);
}

int qkv_first_nonfinite(const float *x, int64_t n, int64_t *at)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            *at = i;
            return 1;
        }
    return 0;
}

const qkv_tensor *qkv_params_nonfinite(qkv_params *p, int64_t *at)
{
    for (int i = 0; i < qkv_params_count(p); i++) {
        const qkv_tensor *t = qkv_params_at(p, i);
        if (qkv_first_nonfinite(t->data, qkv_tensor_numel(t), at)) return t;
    }
    return NULL;
}

/* ---- saving --------------------------------------------------------------- */

/* Metadata under construction: keys are literals, values live in vals. */
typedef struct {
    const char *keys[META_MAX];
    const char *ptrs[META_MAX];
    char vals[META_MAX][VAL_LEN];
    int n;
} meta_list;

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void meta_add(meta_list *m, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->vals[m->n], VAL_LEN, fmt, ap);
    va_end(ap);
    m->keys[m->n] = key;
    m->ptrs[m->n] = m->vals[m->n];
    m->n++;
}

static const char *user_keys[QKV_CHECKPOINT_USER_INTS] = {"train.user0", "train.user1",
                                                          "train.user2", "train.user3"};

static void meta_train(meta_list *m, const qkv_params *p, const qkv_optim *o,
                       const qkv_train_pos *pos, const qkv_rng *rng)
{
    meta_add(m, "format", "%s", CKPT_FORMAT);
    meta_add(m, "format_version", "%d", QKV_CHECKPOINT_VERSION);
    meta_add(m, "params", "%d", qkv_params_count(p));
    if (pos) {
        meta_add(m, "train.step", "%lld", (long long)pos->step);
        meta_add(m, "train.epoch", "%lld", (long long)pos->epoch);
        meta_add(m, "train.batch", "%lld", (long long)pos->batch);
        for (int i = 0; i < QKV_CHECKPOINT_USER_INTS; i++)
            meta_add(m, user_keys[i], "%lld", (long long)pos->user[i]);
    }
    if (rng)
        for (int i = 0; i < 4; i++) {
            static const char *k[4] = {"rng.s0", "rng.s1", "rng.s2", "rng.s3"};
            meta_add(m, k[i], "%016" PRIx64, rng->s[i]);
        }
    if (!o) return;
    const qkv_optim_opts *q = &o->o;
    meta_add(m, "optim.kind", "%s", qkv_optim_kind_name(q->kind));
    meta_add(m, "optim.step", "%lld", (long long)o->step);
    meta_add(m, "optim.lr", "%.17g", q->lr);
    meta_add(m, "optim.weight_decay", "%.17g", q->weight_decay);
    meta_add(m, "optim.maximize", "%d", q->maximize != 0);
    meta_add(m, "optim.momentum", "%.17g", q->momentum);
    meta_add(m, "optim.dampening", "%.17g", q->dampening);
    meta_add(m, "optim.nesterov", "%d", q->nesterov != 0);
    meta_add(m, "optim.beta1", "%.17g", q->beta1);
    meta_add(m, "optim.beta2", "%.17g", q->beta2);
    meta_add(m, "optim.eps", "%.17g", q->eps);
    meta_add(m, "optim.amsgrad", "%d", q->amsgrad != 0);
}

/* "optim/<name>/<buffer>" or "param/<name>", malloc'd. */
static char *tensor_key(const char *name, const char *buf)
{
    size_t len = strlen(name) + (buf ? strlen(buf) + 8 : 7);
    char *k = malloc(len);
    if (k) {
        if (buf) snprintf(k, len, "optim/%s/%s", name, buf);
        else snprintf(k, len, "param/%s", name);
    }
    return k;
}

static qkv_status check_pair(const char *fn, qkv_params *p, const qkv_optim *o)
{
    if (o && o->params != p)
        return qkv_fail(QKV_ERR_ARG, "%s: the optimizer was made for another parameter store", fn);
    if (o && qkv_params_count(p) != o->n)
        return qkv_fail(QKV_ERR_STATE,
                        "%s: the store has %d parameters, the optimizer was made for %d",
                        fn, qkv_params_count(p), o->n);
    if (o && qkv_optim_sharded(o))
        return qkv_fail(QKV_ERR_STATE, "%s: the optimizer keeps only elements [%lld, %lld) of its "
                        "state (ZeRO-1): save with qkv_dist_checkpoint_save, load before qkv_dist_zero1",
                        fn, (long long)o->lo, (long long)o->hi);
    return QKV_OK;
}

/* What a load would refuse is never saved: counters out of [0, 2^53], an
 * all-zero RNG, a NaN or infinite parameter or optimizer state. */
static qkv_status check_savable(qkv_params *p, const qkv_optim *o, const qkv_train_pos *pos,
                                const qkv_rng *rng)
{
    const char *fn = "checkpoint_save";
    if (pos) {
        const int64_t v[3] = {pos->step, pos->epoch, pos->batch};
        static const char *k[3] = {"train.step", "train.epoch", "train.batch"};
        for (int i = 0; i < 3; i++)
            if (v[i] < 0 || v[i] > COUNT_MAX)
                return qkv_fail(QKV_ERR_ARG, "%s: %s %lld outside [0, 2^53]", fn, k[i],
                                (long long)v[i]);
    }
    if (rng && !(rng->s[0] | rng->s[1] | rng->s[2] | rng->s[3]))
        return qkv_fail(QKV_ERR_ARG, "%s: the RNG state is all zeros", fn);
    if (o && (o->step < 0 || o->step > COUNT_MAX))
        return qkv_fail(QKV_ERR_ARG, "%s: optim.step %lld outside [0, 2^53]", fn,
                        (long long)o->step);
    int64_t at;
    const qkv_tensor *t = qkv_params_nonfinite(p, &at);
    if (t)
        return qkv_fail(QKV_ERR_ARG, "%s: parameter '%s' has a non-finite value (%g at element "
                        "%lld): not saved, a checkpoint must be resumable", fn, t->name,
                        (double)t->data[at], (long long)at);
    for (int b = 0; o && b < o->nbuf; b++)
        for (int i = 0; i < o->n; i++) {
            const float *x = qkv_optim_buf(o, b, i);
            if (qkv_first_nonfinite(x, qkv_tensor_numel(qkv_params_at(p, i)), &at))
                return qkv_fail(QKV_ERR_ARG, "%s: optimizer state %s of '%s' has a non-finite "
                                "value (%g at element %lld): not saved", fn,
                                qkv_optim_buf_name(o, b), qkv_params_at(p, i)->name,
                                (double)x[at], (long long)at);
        }
    return QKV_OK;
}

/* The caller's metadata may not take a key the checkpoint writes itself. */
static int meta_reserved(const char *key)
{
    static const char *exact[] = {"format", "format_version", "params", "checksum"};
    static const char *prefix[] = {"train.", "rng.", "optim."};
    for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
        if (!strcmp(key, exact[i])) return 1;
    for (size_t i = 0; i < sizeof prefix / sizeof *prefix; i++)
        if (!strncmp(key, prefix[i], strlen(prefix[i]))) return 1;
    return 0;
}

static qkv_status check_meta(const qkv_checkpoint_meta *x)
{
    const char *fn = "checkpoint_save";
    if (!x) return QKV_OK;
    if (x->n < 0 || x->n > 64 || (x->n && (!x->keys || !x->vals)))
        return qkv_fail(QKV_ERR_ARG, "%s: meta has %d entries (0 to 64, with keys and values)", fn, x->n);
    for (int i = 0; i < x->n; i++) {
        if (!x->keys[i] || !x->vals[i] || !x->keys[i][0])
            return qkv_fail(QKV_ERR_ARG, "%s: meta entry %d has no key or no value", fn, i);
        if (meta_reserved(x->keys[i]))
            return qkv_fail(QKV_ERR_ARG, "%s: meta key '%.64s' is the checkpoint's own", fn, x->keys[i]);
        for (int j = 0; j < i; j++)
            if (!strcmp(x->keys[i], x->keys[j]))
                return qkv_fail(QKV_ERR_ARG, "%s: meta key '%.64s' given twice", fn, x->keys[i]);
    }
    return QKV_OK;
}

static qkv_status checkpoint_save_meta_body(const char *path, qkv_params *params, const qkv_optim *optim,
                                            const qkv_train_pos *pos, const qkv_rng *rng,
                                            const qkv_checkpoint_meta *meta)
{
    QKV_NEED(path, "checkpoint_save", "path");
    QKV_NEED(params, "checkpoint_save", "params");
    QKV_TRY(check_pair("checkpoint_save", params, optim));
    QKV_TRY(check_savable(params, optim, pos, rng));
    QKV_TRY(check_meta(meta));
    int np = qkv_params_count(params), nb = optim ? optim->nbuf : 0;
    int n = np * (1 + nb), nx = meta ? meta->n : 0;
    char **names = calloc((size_t)n + 1, sizeof *names);
    const qkv_tensor **ts = calloc((size_t)n + 1, sizeof *ts);
    qkv_tensor *bufs = calloc((size_t)(np * nb) + 1, sizeof *bufs); /* headers over the state */
    meta_list *m = calloc(1, sizeof *m);
    const char **keys = calloc(META_MAX + (size_t)nx, sizeof *keys);
    const char **vals = calloc(META_MAX + (size_t)nx, sizeof *vals);
    qkv_status s = QKV_OK;
    if (!names || !ts || !bufs || !m || !keys || !vals)
        s = qkv_fail(QKV_ERR_NOMEM, "checkpoint_save: out of memory");
    for (int i = 0; !s && i < np; i++) {
        qkv_tensor *t = qkv_params_at(params, i);
        names[i] = tensor_key(t->name, NULL);
        ts[i] = t;
        for (int b = 0; b < nb; b++) {
            qkv_tensor *h = &bufs[i * nb + b];
            h->dtype = QKV_F32;
            h->ndim = t->ndim;
            memcpy(h->shape, t->shape, sizeof h->shape);
            h->data = qkv_optim_buf(optim, b, i);
            names[np + i * nb + b] = tensor_key(t->name, qkv_optim_buf_name(optim, b));
            ts[np + i * nb + b] = h;
        }
    }
    for (int i = 0; !s && i < n; i++)
        if (!names[i]) s = qkv_fail(QKV_ERR_NOMEM, "checkpoint_save: out of memory");
    if (!s) {
        uint64_t sum = 0;
        for (int i = 0; i < n; i++) sum += hash_f32(names[i], ts[i]->data, qkv_tensor_numel(ts[i]));
        meta_train(m, params, optim, pos, rng);
        for (int i = 0; i < m->n; i++) sum += hash_meta(m->keys[i], m->ptrs[i]);
        for (int i = 0; i < nx; i++) sum += hash_meta(meta->keys[i], meta->vals[i]);
        meta_add(m, "checksum", "%016" PRIx64, sum);
        for (int i = 0; i < m->n; i++) keys[i] = m->keys[i], vals[i] = m->ptrs[i];
        for (int i = 0; i < nx; i++) keys[m->n + i] = meta->keys[i], vals[m->n + i] = meta->vals[i];
        s = qkv_safetensors_save(path, n, (const char *const *)names, ts, m->n + nx, keys, vals);
    }
    for (int i = 0; names && i < n; i++) free(names[i]);
    free(names);
    free(ts);
    free(bufs);
    free(m);
    free(keys);
    free(vals);
    return s;
}

qkv_status qkv_checkpoint_save_meta(const char *path, qkv_params *params, const qkv_optim *optim,
                                    const qkv_train_pos *pos, const qkv_rng *rng,
                                    const qkv_checkpoint_meta *meta)
{
    return qkv_fail_in("checkpoint_save_meta", checkpoint_save_meta_body(path, params, optim, pos, rng, meta));
}

qkv_status qkv_checkpoint_save(const char *path, qkv_params *params, const qkv_optim *optim,
                               const qkv_train_pos *pos, const qkv_rng *rng)
{
    return checkpoint_save_meta_body(path, params, optim, pos, rng, NULL);
}

/* ---- loading -------------------------------------------------------------- */

typedef struct {
    const char *path;
    qkv_safetensors *st;
} ckpt_file;

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static qkv_status ck_fail(const ckpt_file *f, qkv_status s, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return qkv_fail(s, "checkpoint_load: %s: %s", f->path, msg);
}

static qkv_status meta_str(const ckpt_file *f, const char *key, const char **v)
{
    *v = qkv_safetensors_meta(f->st, key);
    if (!*v) return ck_fail(f, QKV_ERR_FORMAT, "metadata '%s' is missing", key);
    return QKV_OK;
}

/* Metadata key as a number written exactly as a save writes it: into *i an
 * integer ("%lld": no sign, space or leading zero), or (i NULL) into *d a
 * finite double ("%.17g"). */
static qkv_status meta_num(const ckpt_file *f, const char *key, int64_t *i, double *d)
{
    const char *v;
    QKV_TRY(meta_str(f, key, &v));
    char *end, back[VAL_LEN];
    errno = 0;
    long long xi = 0;
    double xd = 0;
    if (i) xi = strtoll(v, &end, 10);
    else xd = strtod(v, &end);
    int ok = !errno && end != v && !*end && (i || isfinite(xd));
    if (ok && i) snprintf(back, sizeof back, "%lld", xi);
    else if (ok) snprintf(back, sizeof back, "%.17g", xd);
    if (!ok || strcmp(back, v) != 0)
        return ck_fail(f, QKV_ERR_FORMAT, i ? "metadata '%s' = '%s' is not an integer written canonically"
                                            : "metadata '%s' = '%s' is not a finite number written "
                                              "as a save writes it (%%.17g)", key, v);
    if (i) *i = xi;
    else *d = xd;
    return QKV_OK;
}

static qkv_status meta_i64(const ckpt_file *f, const char *key, int64_t *out)
{
    return meta_num(f, key, out, NULL);
}

static qkv_status meta_f64(const ckpt_file *f, const char *key, double *out)
{
    return meta_num(f, key, NULL, out);
}

static qkv_status meta_flag(const ckpt_file *f, const char *key, int *out)
{
    int64_t x = 0;
    QKV_TRY(meta_i64(f, key, &x));
    if (x != 0 && x != 1)
        return ck_fail(f, QKV_ERR_FORMAT, "metadata '%s' = %lld, expected 0 or 1", key,
                       (long long)x);
    *out = (int)x;
    return QKV_OK;
}

static qkv_status read_header(const ckpt_file *f)
{
    const char *fmt = qkv_safetensors_meta(f->st, "format");
    if (!fmt || strcmp(fmt, CKPT_FORMAT) != 0)
        return ck_fail(f, QKV_ERR_FORMAT,
                       "not a qkv checkpoint (metadata format is '%s', expected '%s')",
                       fmt ? fmt : "(none)", CKPT_FORMAT);
    int64_t v;
    QKV_TRY(meta_i64(f, "format_version", &v));
    if (v == 1)
        return ck_fail(f, QKV_ERR_FORMAT, "format version 1 predates the metadata checksum: its "
                       "step, learning rate and RNG state cannot be verified, so it is refused "
                       "(this library reads version %d; docs/reliability.md)",
                       QKV_CHECKPOINT_VERSION);
    if (v != QKV_CHECKPOINT_VERSION)
        return ck_fail(f, QKV_ERR_FORMAT, "format version %lld, this library reads %d",
                       (long long)v, QKV_CHECKPOINT_VERSION);
    const char *want;
    QKV_TRY(meta_str(f, "checksum", &want));
    uint64_t sum = 0;
    for (int i = 0; i < qkv_safetensors_count(f->st); i++) {
        const char *name = qkv_safetensors_name(f->st, i);
        const void *data;
        size_t nbytes;
        QKV_TRY(qkv_safetensors_info(f->st, name, NULL, NULL, NULL, &data, &nbytes));
        sum += fnv(hash_name(name), data, nbytes);
    }
    for (int i = 0; i < qkv_safetensors_meta_count(f->st); i++) {
        const char *key = qkv_safetensors_meta_key(f->st, i);
        if (strcmp(key, "checksum") != 0) sum += hash_meta(key, qkv_safetensors_meta(f->st, key));
    }
    char got[20];
    snprintf(got, sizeof got, "%016" PRIx64, sum);
    if (strcmp(got, want) != 0)
        return ck_fail(f, QKV_ERR_FORMAT, "checksum %s, the file says %s: the file is corrupt",
                       got, want);
    int64_t np;
    QKV_TRY(meta_i64(f, "params", &np));
    if (np < 0 || np > qkv_safetensors_count(f->st))
        return ck_fail(f, QKV_ERR_FORMAT, "metadata 'params' = %lld, but the file has %d tensors",
                       (long long)np, qkv_safetensors_count(f->st));
    return QKV_OK;
}

/* A counter in [0, 2^53]. */
static qkv_status meta_count(const ckpt_file *f, const char *key, int64_t *out)
{
    QKV_TRY(meta_i64(f, key, out));
    if (*out < 0 || *out > COUNT_MAX)
        return ck_fail(f, QKV_ERR_FORMAT, "metadata '%s' = %lld outside [0, 2^53]", key,
                       (long long)*out);
    return QKV_OK;
}

static qkv_status read_pos(const ckpt_file *f, qkv_train_pos *pos)
{
    QKV_TRY(meta_count(f, "train.step", &pos->step));
    QKV_TRY(meta_count(f, "train.epoch", &pos->epoch));
    QKV_TRY(meta_count(f, "train.batch", &pos->batch));
    for (int i = 0; i < QKV_CHECKPOINT_USER_INTS; i++)
        QKV_TRY(meta_i64(f, user_keys[i], &pos->user[i]));
    return QKV_OK;
}

static qkv_status read_rng(const ckpt_file *f, qkv_rng *r)
{
    static const char *k[4] = {"rng.s0", "rng.s1", "rng.s2", "rng.s3"};
    for (int i = 0; i < 4; i++) {
        const char *v;
        QKV_TRY(meta_str(f, k[i], &v));
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v, &end, 16);
        int lower = 1; /* as written: 16 lower-case hex digits, nothing else */
        for (const char *d = v; *d; d++) lower &= (*d >= '0' && *d <= '9') || (*d >= 'a' && *d <= 'f');
        if (errno || strlen(v) != 16 || *end || !lower)
            return ck_fail(f, QKV_ERR_FORMAT, "metadata '%s' = '%s' is not 16 hex digits", k[i], v);
        r->s[i] = x;
    }
    if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3]))
        return ck_fail(f, QKV_ERR_FORMAT, "the RNG state is all zeros");
    return QKV_OK;
}

/* The optimizer's options and step from the file; its kind and buffers must
 * match o's. */
static qkv_status read_optim(const ckpt_file *f, const qkv_optim *o, qkv_optim_opts *q,
                             int64_t *step)
{
    const char *kind;
    QKV_TRY(meta_str(f, "optim.kind", &kind));
    if (strcmp(kind, qkv_optim_kind_name(o->o.kind)) != 0)
        return ck_fail(f, QKV_ERR_ARG, "the checkpoint's optimizer is %s, this one is %s", kind,
                       qkv_optim_kind_name(o->o.kind));
    *q = o->o;
    QKV_TRY(meta_count(f, "optim.step", step));
    QKV_TRY(meta_f64(f, "optim.lr", &q->lr));
    QKV_TRY(meta_f64(f, "optim.weight_decay", &q->weight_decay));
    QKV_TRY(meta_flag(f, "optim.maximize", &q->maximize));
    QKV_TRY(meta_f64(f, "optim.momentum", &q->momentum));
    QKV_TRY(meta_f64(f, "optim.dampening", &q->dampening));
    QKV_TRY(meta_flag(f, "optim.nesterov", &q->nesterov));
    QKV_TRY(meta_f64(f, "optim.beta1", &q->beta1));
    QKV_TRY(meta_f64(f, "optim.beta2", &q->beta2));
    QKV_TRY(meta_f64(f, "optim.eps", &q->eps));
    QKV_TRY(meta_flag(f, "optim.amsgrad", &q->amsgrad));
    if (*step < 0) return ck_fail(f, QKV_ERR_FORMAT, "optimizer step %lld < 0", (long long)*step);
    if (qkv_optim_check_opts("checkpoint_load", q) != QKV_OK)
        return ck_fail(f, QKV_ERR_FORMAT, "bad optimizer hyper-parameters (%s)", qkv_last_error());
    if (qkv_optim_nbuf_for(q) != o->nbuf)
        return ck_fail(f, QKV_ERR_ARG,
                       "the checkpoint's %s keeps %d state buffers per parameter (amsgrad %d, "
                       "momentum %g), this optimizer %d",
                       kind, qkv_optim_nbuf_for(q), q->amsgrad, q->momentum, o->nbuf);
    return QKV_OK;
}

static const char *dims_str(int ndim, const int64_t *shape, char *buf, size_t n)
{
    qkv_tensor t = {0};
    t.ndim = ndim > QKV_MAX_DIMS ? QKV_MAX_DIMS : ndim;
    memcpy(t.shape, shape, (size_t)t.ndim * sizeof *shape);
    qkv_shape_str(&t, buf, n);
    if (ndim > QKV_MAX_DIMS) snprintf(buf, n, "(%d dims)", ndim);
    return buf;
}

/* Tensor key must be in the file, F32, shaped like t. */
static qkv_status check_tensor(const ckpt_file *f, const char *key, const qkv_tensor *t)
{
    qkv_st_dtype dt;
    int nd;
    int64_t shape[8];
    if (qkv_safetensors_info(f->st, key, &dt, &nd, shape, NULL, NULL) != QKV_OK)
        return ck_fail(f, QKV_ERR_ARG, "'%s' is missing: the checkpoint is of another model "
                                       "(or lacks that state)", key);
    char b1[64], b2[64];
    int same = nd == t->ndim;
    for (int d = 0; same && d < nd; d++) same = shape[d] == t->shape[d];
    if (!same)
        return ck_fail(f, QKV_ERR_SHAPE, "'%s' is %s in the checkpoint, %s in the store", key,
                       dims_str(nd, shape, b1, sizeof b1), qkv_shape_str(t, b2, sizeof b2));
    if (dt != QKV_ST_F32) return ck_fail(f, QKV_ERR_DTYPE, "'%s' is not F32", key);
    return QKV_OK;
}

/* The file's "param/" tensors are exactly the store's np parameters, and
 * every other tensor is optimizer state. */
static qkv_status check_no_extra(const ckpt_file *f, qkv_params *p, int np)
{
    int have = 0;
    for (int i = 0; i < qkv_safetensors_count(f->st); i++) {
        const char *name = qkv_safetensors_name(f->st, i);
        if (!strncmp(name, "optim/", 6)) continue;
        if (strncmp(name, "param/", 6) != 0)
            return ck_fail(f, QKV_ERR_FORMAT, "unexpected tensor '%s'", name);
        have++;
        if (!qkv_params_find(p, name + 6))
            return ck_fail(f, QKV_ERR_ARG, "the checkpoint has parameter '%s', which the store "
                                           "lacks", name + 6);
    }
    if (have != np) /* duplicates are impossible in a valid file; kept as a guard */
        return ck_fail(f, QKV_ERR_FORMAT, "%d parameters, expected %d", have, np);
    return QKV_OK;
}

/* All the checks; on success *scratch holds every tensor's elements, params
 * first, then the optimizer's buffers in state order. */
static qkv_status load_checked(const ckpt_file *f, qkv_params *p, const qkv_optim *o,
                               float **scratch)
{
    int np = qkv_params_count(p), nb = o ? o->nbuf : 0;
    for (int i = 0; i < np; i++) {
        qkv_tensor *t = qkv_params_at(p, i);
        char *key = tensor_key(t->name, NULL);
        if (!key) return qkv_fail(QKV_ERR_NOMEM, "checkpoint_load: out of memory");
        qkv_status s = check_tensor(f, key, t);
        free(key);
        QKV_TRY(s);
    }
    QKV_TRY(check_no_extra(f, p, np));
    int n_optim = 0;
    for (int i = 0; i < qkv_safetensors_count(f->st); i++)
        n_optim += !strncmp(qkv_safetensors_name(f->st, i), "optim/", 6);
    for (int i = 0; o && i < np; i++)
        for (int b = 0; b < nb; b++) {
            char *key = tensor_key(qkv_params_at(p, i)->name, qkv_optim_buf_name(o, b));
            if (!key) return qkv_fail(QKV_ERR_NOMEM, "checkpoint_load: out of memory");
            qkv_status s = check_tensor(f, key, qkv_params_at(p, i));
            free(key);
            QKV_TRY(s);
        }
    if (o && n_optim != np * nb)
        return ck_fail(f, QKV_ERR_FORMAT, "%d optimizer tensors, expected %d", n_optim, np * nb);
    int64_t numel = qkv_params_numel(p);
    size_t total = (size_t)numel * (size_t)(1 + nb);
    float *buf = malloc((total ? total : 1) * sizeof *buf);
    if (!buf) return qkv_fail(QKV_ERR_NOMEM, "checkpoint_load: out of memory for %zu floats", total);
    float *at = buf;
    qkv_status s = QKV_OK;
    for (int b = -1; !s && b < nb; b++)
        for (int i = 0; !s && i < np; i++) {
            qkv_tensor *t = qkv_params_at(p, i);
            char *key = tensor_key(t->name, b < 0 ? NULL : qkv_optim_buf_name(o, b));
            s = key ? qkv_safetensors_read_f32(f->st, key, at, qkv_tensor_numel(t))
                    : qkv_fail(QKV_ERR_NOMEM, "checkpoint_load: out of memory");
            free(key);
            at += qkv_tensor_numel(t);
        }
    /* Non-finite values would poison the run that resumes from here. */
    at = buf;
    for (int b = -1; !s && b < nb; b++)
        for (int i = 0; !s && i < np; i++) {
            const qkv_tensor *t = qkv_params_at(p, i);
            int64_t bad;
            if (qkv_first_nonfinite(at, qkv_tensor_numel(t), &bad))
                s = ck_fail(f, QKV_ERR_FORMAT, "'%s%s%s' element %lld is %g: a checkpoint with "
                            "non-finite values is not resumable", b < 0 ? "param/" : "optim/",
                            t->name, b < 0 ? "" : "/...", (long long)bad, (double)at[bad]);
            at += qkv_tensor_numel(t);
        }
    if (s) {
        free(buf);
        return s;
    }
    *scratch = buf;
    return QKV_OK;
}

qkv_status qkv_checkpoint_load(const char *path, qkv_params *params, qkv_optim *optim,
                               qkv_train_pos *pos, qkv_rng *rng)
{
    QKV_NEED(path, "checkpoint_load", "path");
    QKV_NEED(params, "checkpoint_load", "params");
    QKV_TRY(check_pair("checkpoint_load", params, optim));
    ckpt_file f = {path, NULL};
    qkv_status so = qkv_safetensors_open(path, &f.st);
    if (so != QKV_OK) { /* name this function before the reader's message */
        char why[768];
        snprintf(why, sizeof why, "%s", qkv_last_error());
        return qkv_fail(so, "checkpoint_load: %s", why);
    }
    qkv_train_pos new_pos = {0};
    qkv_rng new_rng = {{0}};
    qkv_optim_opts new_opts;
    int64_t new_step = 0;
    float *scratch = NULL;
    qkv_status s = read_header(&f);
    if (!s && pos) s = read_pos(&f, &new_pos);
    if (!s && rng) s = read_rng(&f, &new_rng);
    if (!s && optim) s = read_optim(&f, optim, &new_opts, &new_step);
    if (!s) s = load_checked(&f, params, optim, &scratch);
    qkv_safetensors_close(f.st);
    if (s) return s;
    /* Nothing can fail from here on. */
    const float *at = scratch;
    int np = qkv_params_count(params);
    for (int i = 0; i < np; i++) {
        qkv_tensor *t = qkv_params_at(params, i);
        memcpy(t->data, at, (size_t)qkv_tensor_numel(t) * sizeof *at);
        at += qkv_tensor_numel(t);
    }
    if (optim) {
        memcpy(optim->state, at, (size_t)optim->nbuf * (size_t)optim->numel * sizeof *at);
        optim->o = new_opts;
        optim->step = new_step;
    }
    if (pos) *pos = new_pos;
    if (rng) *rng = new_rng;
    free(scratch);
    return QKV_OK;
}

qkv_status qkv_checkpoint_read_meta(const char *path, const char *key, char **val)
{
    QKV_NEED(val, "checkpoint_read_meta", "val");
    *val = NULL;
    QKV_NEED(path, "checkpoint_read_meta", "path");
    QKV_NEED(key, "checkpoint_read_meta", "key");
    ckpt_file f = {path, NULL};
    QKV_TRY(qkv_safetensors_open(path, &f.st));
    qkv_status s = read_header(&f);
    const char *v = s ? NULL : qkv_safetensors_meta(f.st, key);
    if (!s && !v)
        s = qkv_fail(QKV_ERR_NOTFOUND, "checkpoint_read_meta: %s has no metadata '%.64s'", path, key);
    if (!s && !(*val = strdup(v))) s = qkv_fail(QKV_ERR_NOMEM, "checkpoint_read_meta: out of memory");
    qkv_safetensors_close(f.st);
    return s;
}
