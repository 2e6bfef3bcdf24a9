/* state_dict.c: PyTorch state_dicts (safetensors files) into and out of a
 * qkv_params store, as module.load_state_dict(sd, strict) and
 * safetensors.torch.save_file(module.state_dict()) do.
 *
 * Names: a file key is prefix + parameter name. Loading strips the prefix
 * and ignores keys without it, the way one loads "encoder.layers.0." of a
 * whole model's file into one layer; saving prepends it.
 *
 * Loading matches the store's names against the file's in one merge (both
 * sorted; the keys under a prefix are one contiguous run of the file's
 * sorted names), checks every match (exact shape, floating-point dtype)
 * and only then copies, so a failed load leaves the store as it was.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors_internal.h"

enum { SD_LIST = 3 }; /* names quoted in a message before "..." */

void qkv_state_dict_report_free(qkv_state_dict_report *r)
{
    if (!r) return;
    for (int i = 0; r->missing && i < r->n_missing; i++) free(r->missing[i]);
    for (int i = 0; r->unexpected && i < r->n_unexpected; i++) free(r->unexpected[i]);
    free(r->missing);
    free(r->unexpected);
    memset(r, 0, sizeof *r);
}

/* ---- matching --------------------------------------------------------- */

/* A store parameter by name, for sorting (qsort has no context argument,
 * so the name travels with the index). */
typedef struct {
    const char *name;
    int i;
} sd_param;

static int sd_cmp_param(const void *a, const void *b)
{
    return strcmp(((const sd_param *)a)->name, ((const sd_param *)b)->name);
}

/* One load's working state: for store parameter i, file[i] is its tensor
 * in the file (NULL: missing); unexpected lists file entries. */
typedef struct {
    const st_tensor **file;  /* (np) */
    const st_tensor **unexp; /* (n_unexp) */
    int n_unexp, n_missing, n_ignored;
} sd_match;

/* The first index of st's sorted names whose name is >= prefix. */
static int sd_lower_bound(const qkv_safetensors *st, const char *prefix)
{
    int lo = 0, hi = st->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (strcmp(st->t[mid].name, prefix) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static qkv_status sd_match_names(const char *fn, qkv_params *p, const qkv_safetensors *st,
                                 const char *prefix, sd_match *m)
{
    int np = qkv_params_count(p);
    size_t plen = strlen(prefix);
    sd_param *order = malloc((np ? (size_t)np : 1) * sizeof *order);
    m->file = calloc(np ? (size_t)np : 1, sizeof *m->file);
    m->unexp = malloc((st->n ? (size_t)st->n : 1) * sizeof *m->unexp);
    if (!order || !m->file || !m->unexp) {
        free(order);
        return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    }
    for (int i = 0; i < np; i++) order[i] = (sd_param){qkv_params_at(p, i)->name, i};
    qsort(order, (size_t)np, sizeof *order, sd_cmp_param);
    int i = 0, j = sd_lower_bound(st, prefix), first = j;
    while (j < st->n && strncmp(st->t[j].name, prefix, plen) == 0) {
        int c = i < np ? strcmp(order[i].name, st->t[j].name + plen) : 1;
        if (c == 0) m->file[order[i++].i] = &st->t[j++];
        else if (c < 0) i++;
        else m->unexp[m->n_unexp++] = &st->t[j++];
    }
    m->n_ignored = st->n - (j - first);
    for (int k = 0; k < np; k++) m->n_missing += m->file[k] == NULL;
    free(order);
    return QKV_OK;
}

/* ---- the report and messages ------------------------------------------ */

static char *sd_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* The report's lists: missing names in store order, unexpected ones in the
 * file's (sorted) order with the prefix cut off. */
static qkv_status sd_fill_report(const char *fn, qkv_params *p, const sd_match *m, size_t plen,
                                 qkv_state_dict_report *r)
{
    int np = qkv_params_count(p);
    r->n_ignored = m->n_ignored;
    r->missing = calloc((size_t)m->n_missing + 1, sizeof *r->missing);
    r->unexpected = calloc((size_t)m->n_unexp + 1, sizeof *r->unexpected);
    int ok = r->missing && r->unexpected;
    for (int i = 0; ok && i < np; i++)
        if (!m->file[i])
            ok = !!(r->missing[r->n_missing++] = sd_strdup(qkv_params_at(p, i)->name));
    for (int k = 0; ok && k < m->n_unexp; k++)
        ok = !!(r->unexpected[r->n_unexpected++] = sd_strdup(m->unexp[k]->name + plen));
    if (ok) return QKV_OK;
    qkv_state_dict_report_free(r);
    return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for the report", fn);
}

/* "'a', 'b', 'c', ... (5 more)" into buf: the first SD_LIST of n names. */
static const char *sd_list(char *buf, size_t cap, int n, char *const *names)
{
    char q[ST_QNAME];
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && i < SD_LIST && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s'%s'", i ? ", " : "", st_quote(names[i], q));
    if (n > SD_LIST && at < cap) snprintf(buf + at, cap - at, ", ... (%d more)", n - SD_LIST);
    return buf;
}

static qkv_status sd_fail_names(const char *fn, const qkv_safetensors *st, const char *prefix,
                                const qkv_state_dict_report *r)
{
    char miss[240], unexp[240], pre[ST_QNAME + 80] = "", q[ST_QNAME];
    size_t plen = strlen(prefix);
    if (plen)
        snprintf(pre, sizeof pre, " (file keys under prefix '%s'%s)", st_quote(prefix, q),
                 prefix[plen - 1] != '.' ? ", which does not end with '.'" : "");
    sd_list(miss, sizeof miss, r->n_missing, r->missing);
    sd_list(unexp, sizeof unexp, r->n_unexpected, r->unexpected);
    return qkv_fail(QKV_ERR_NOTFOUND,
                    "%s: %s: strict load: %d missing (in the store, not in the file): %s; "
                    "%d unexpected (in the file, not in the store): %s%s",
                    fn, st->label, r->n_missing, r->n_missing ? miss : "none", r->n_unexpected,
                    r->n_unexpected ? unexp : "none", pre);
}

/* ---- checks of the matched pairs -------------------------------------- */

static int sd_is_float(qkv_st_dtype dt)
{
    return dt == QKV_ST_F32 || dt == QKV_ST_F16 || dt == QKV_ST_BF16 || dt == QKV_ST_F64;
}

static int sd_is_int(qkv_st_dtype dt)
{
    return dt == QKV_ST_I64 || dt == QKV_ST_I32 || dt == QKV_ST_I16 || dt == QKV_ST_I8 ||
           dt == QKV_ST_U8;
}

/* Buffers (requires_grad 0) also load from integers: PyTorch saves
 * BatchNorm's num_batches_tracked as int64. */
static int sd_dtype_ok(const st_tensor *f, const qkv_tensor *t)
{
    return t->dtype == QKV_F32 && (sd_is_float(f->dtype) || (!t->requires_grad && sd_is_int(f->dtype)));
}

static int sd_same_shape(const st_tensor *f, const qkv_tensor *t)
{
    if (f->ndim != t->ndim) return 0;
    for (int d = 0; d < f->ndim; d++)
        if (f->shape[d] != t->shape[d]) return 0;
    return 1;
}

/* Every matched pair: the exact shape (even when not strict, as PyTorch
 * raises a size mismatch), then a floating-point dtype. The first problem
 * of the worse kind is named, with a count of the others. */
static qkv_status sd_check_pairs(const char *fn, qkv_params *p, const qkv_safetensors *st,
                                 const sd_match *m)
{
    char q[ST_QNAME], s1[ST_SHAPE], s2[ST_SHAPE];
    int np = qkv_params_count(p), bad_shape = -1, bad_dtype = -1, n_shape = 0, n_dtype = 0;
    for (int i = 0; i < np; i++) {
        const st_tensor *f = m->file[i];
        if (!f) continue;
        if (!sd_same_shape(f, qkv_params_at(p, i))) {
            if (!n_shape++) bad_shape = i;
        } else if (!sd_dtype_ok(f, qkv_params_at(p, i))) {
            if (!n_dtype++) bad_dtype = i;
        }
    }
    char more[64] = "";
    int n_more = (n_shape ? n_shape : n_dtype) - 1;
    if (n_more > 0)
        snprintf(more, sizeof more, " (and %d more such tensor%s)", n_more, n_more > 1 ? "s" : "");
    if (n_shape) {
        const st_tensor *f = m->file[bad_shape];
        const qkv_tensor *t = qkv_params_at(p, bad_shape);
        return qkv_fail(QKV_ERR_SHAPE, "%s: %s: size mismatch for '%s': %s in the file, %s in the "
                        "store%s", fn, st->label, st_quote(f->name, q),
                        st_shape_str(f->shape, f->ndim, s1, sizeof s1),
                        st_shape_str(t->shape, t->ndim, s2, sizeof s2), more);
    }
    if (n_dtype)
        return qkv_fail(QKV_ERR_DTYPE, "%s: %s: '%s' is %s in the file; F32 parameters load only "
                        "from F32, F16, BF16 or F64 (buffers also from integers)%s", fn, st->label,
                        st_quote(m->file[bad_dtype]->name, q),
                        st_dtype_name(m->file[bad_dtype]->dtype), more);
    return QKV_OK;
}

/* ---- loading ---------------------------------------------------------- */

static qkv_status sd_load(const char *fn, qkv_params *p, const qkv_safetensors *st,
                          const char *prefix, int strict, qkv_state_dict_report *report)
{
    qkv_state_dict_report local = {0};
    qkv_state_dict_report *r = report ? report : &local;
    sd_match m = {0};
    if (!prefix) prefix = "";
    memset(r, 0, sizeof *r);
    qkv_status s = sd_match_names(fn, p, st, prefix, &m);
    if (!s) s = sd_fill_report(fn, p, &m, strlen(prefix), r);
    if (!s && strict && (r->n_missing || r->n_unexpected)) s = sd_fail_names(fn, st, prefix, r);
    if (!s) s = sd_check_pairs(fn, p, st, &m);
    /* Integer buffers go through int64 scratch, allocated before any copy. */
    int64_t nint = 0, *scratch = NULL;
    for (int i = 0; !s && i < qkv_params_count(p); i++)
        if (m.file[i] && sd_is_int(m.file[i]->dtype) && qkv_tensor_numel(qkv_params_at(p, i)) > nint)
            nint = qkv_tensor_numel(qkv_params_at(p, i));
    if (!s && nint && !(scratch = malloc((size_t)nint * sizeof *scratch)))
        s = qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    /* Everything is checked: the reads below cannot fail. */
    for (int i = 0; !s && i < qkv_params_count(p); i++) {
        qkv_tensor *t = qkv_params_at(p, i);
        int64_t n = qkv_tensor_numel(t);
        if (!m.file[i]) continue;
        if (sd_is_int(m.file[i]->dtype)) {
            s = qkv_safetensors_read_i64(st, m.file[i]->name, scratch, n);
            for (int64_t j = 0; !s && j < n; j++) qkv_data(t)[j] = (float)scratch[j];
        } else {
            s = qkv_safetensors_read_f32(st, m.file[i]->name, qkv_data(t), n);
        }
        r->n_loaded += !s;
    }
    free(scratch);
    free(m.file);
    free(m.unexp);
    qkv_state_dict_report_free(&local);
    return s;
}

/* The public loads' common start: a cleared report and present arguments. */
static qkv_status sd_args(const char *fn, qkv_params *p, const void *src, const char *src_name,
                          qkv_state_dict_report *report)
{
    if (report) memset(report, 0, sizeof *report);
    QKV_NEED(p, fn, "params");
    QKV_NEED(src, fn, src_name);
    return QKV_OK;
}

qkv_status qkv_params_load_state_dict(qkv_params *p, const qkv_safetensors *st, const char *prefix,
                                      int strict, qkv_state_dict_report *report)
{
    static const char fn[] = "params_load_state_dict";
    QKV_TRY(sd_args(fn, p, st, "st", report));
    return sd_load(fn, p, st, prefix, strict, report);
}

static qkv_status params_load_safetensors_body(qkv_params *p, const char *path, const char *prefix,
                                               int strict, qkv_state_dict_report *report)
{
    static const char fn[] = "params_load_safetensors";
    qkv_safetensors *st;
    QKV_TRY(sd_args(fn, p, path, "path", report));
    QKV_TRY(qkv_safetensors_open(path, &st));
    qkv_status s = sd_load(fn, p, st, prefix, strict, report);
    qkv_safetensors_close(st);
    return s;
}

qkv_status qkv_params_load_safetensors(qkv_params *p, const char *path, const char *prefix,
                                       int strict, qkv_state_dict_report *report)
{
    return qkv_fail_in("params_load_safetensors", params_load_safetensors_body(p, path, prefix, strict, report));
}

/* ---- saving ----------------------------------------------------------- */

qkv_status qkv_params_save_safetensors(qkv_params *p, const char *path, const char *prefix)
{
    static const char fn[] = "params_save_safetensors";
    static const char *const meta_k[1] = {"format"}, *const meta_v[1] = {"pt"};
    QKV_NEED(p, fn, "params");
    QKV_NEED(path, fn, "path");
    if (!prefix) prefix = "";
    int n = qkv_params_count(p);
    size_t plen = strlen(prefix);
    char **names = calloc((size_t)n + 1, sizeof *names);
    const qkv_tensor **ts = calloc((size_t)n + 1, sizeof *ts);
    qkv_status s = names && ts ? QKV_OK : qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    for (int i = 0; !s && i < n; i++) {
        ts[i] = qkv_params_at(p, i);
        size_t len = plen + strlen(ts[i]->name) + 1;
        if (!(names[i] = malloc(len))) s = qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
        else snprintf(names[i], len, "%s%s", prefix, ts[i]->name);
    }
    if (!s) s = qkv_safetensors_save(path, n, (const char *const *)names, ts, 1, meta_k, meta_v);
    for (int i = 0; names && i < n; i++) free(names[i]);
    free(names);
    free(ts);
    return s;
}
