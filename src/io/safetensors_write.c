/* safetensors_write.c: qkv_safetensors_save, F32 and BOOL tensors and
 * string metadata, written atomically.
 *
 * Everything is checked before a byte is written (names unique and valid
 * UTF-8, tensors with memory behind them); then the file goes to a new
 * temporary file beside path (created exclusively, never through a
 * symlink), is flushed and fsynced, and renamed over path, so a failed or
 * interrupted save leaves any existing file as it was and no temporary
 * file behind.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/json.h"
#include "io/safetensors_internal.h"

/* A growing string; a failed allocation sets oom and later appends do
 * nothing, so callers check once at the end. */
typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} st_buf;

static void st_buf_put(st_buf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void st_buf_puts(st_buf *b, const char *s) { st_buf_put(b, s, strlen(s)); }

/* s as a JSON string literal. UTF-8 passes through (callers validated it);
 * quote, backslash and control characters are escaped. */
static void st_buf_json_string(st_buf *b, const char *s)
{
    char esc[8];
    st_buf_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        const char *e = NULL;
        switch (c) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        case '\b': e = "\\b"; break;
        case '\f': e = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                e = esc;
            }
        }
        if (e) st_buf_puts(b, e);
        else st_buf_put(b, (const char *)&c, 1);
    }
    st_buf_put(b, "\"", 1);
}

static int st_cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Rejects a repeated string among s[0, n) (sorting a copy); what names
 * the list in the message. */
static qkv_status st_check_distinct(const st_where *w, const char *const *s, int n,
                                    const char *what)
{
    char q[ST_QNAME];
    qkv_status r = QKV_OK;
    if (n < 2) return QKV_OK;
    const char **c = malloc((size_t)n * sizeof *c);
    if (!c) return st_fail(w, QKV_ERR_NOMEM, "out of memory");
    memcpy(c, s, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, st_cmp_cstr);
    for (int i = 1; i < n && !r; i++)
        if (strcmp(c[i - 1], c[i]) == 0)
            r = st_fail(w, QKV_ERR_ARG, "%s '%s' appears twice", what, st_quote(c[i], q));
    free(c);
    return r;
}

/* One tensor to save: a supported dtype, a sane shape, memory behind it. */
static qkv_status st_check_save_tensor(const st_where *w, int i, const char *name,
                                       const qkv_tensor *t)
{
    char q[ST_QNAME];
    int ok;
    st_quote(name, q);
    if (!t) return st_fail(w, QKV_ERR_ARG, "tensors[%d] ('%s') is NULL", i, q);
    if (t->dtype != QKV_F32 && t->dtype != QKV_BOOL)
        return st_fail(w, QKV_ERR_DTYPE, "tensors[%d] ('%s') has unknown dtype %d", i, q,
                       (int)t->dtype);
    if (t->ndim < 0 || t->ndim > QKV_MAX_DIMS)
        return st_fail(w, QKV_ERR_SHAPE, "tensors[%d] ('%s') has ndim %d", i, q, t->ndim);
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] < 0)
            return st_fail(w, QKV_ERR_SHAPE, "tensors[%d] ('%s') has shape[%d] = %lld", i, q, d,
                           (long long)t->shape[d]);
    st_nbytes(t->shape, t->ndim, 4, &ok);
    if (!ok) return st_fail(w, QKV_ERR_SHAPE, "tensors[%d] ('%s') is too large", i, q);
    if (qkv_tensor_numel(t) > 0 && (t->dtype == QKV_F32 ? !qkv_data(t) : !t->mask))
        return st_fail(w, QKV_ERR_ARG, "tensors[%d] ('%s') has no %s", i, q,
                       t->dtype == QKV_F32 ? "data" : "mask");
    return QKV_OK;
}

static qkv_status st_check_save_args(const st_where *w, int n, const char *const *names,
                                     const qkv_tensor *const *tensors, int n_meta,
                                     const char *const *keys, const char *const *vals)
{
    qkv_status s;
    if (n < 0 || n_meta < 0)
        return st_fail(w, QKV_ERR_ARG, "negative count (n %d, n_meta %d)", n, n_meta);
    if (n > 0 && (!names || !tensors))
        return st_fail(w, QKV_ERR_ARG, "names or tensors is NULL");
    if (n_meta > 0 && (!keys || !vals))
        return st_fail(w, QKV_ERR_ARG, "meta_keys or meta_vals is NULL");
    for (int i = 0; i < n; i++) {
        if (!names[i]) return st_fail(w, QKV_ERR_ARG, "names[%d] is NULL", i);
        if (!names[i][0]) return st_fail(w, QKV_ERR_ARG, "names[%d] is empty", i);
        if (!json_utf8_valid(names[i], strlen(names[i])))
            return st_fail(w, QKV_ERR_ARG, "names[%d] is not valid UTF-8", i);
        if (strcmp(names[i], "__metadata__") == 0)
            return st_fail(w, QKV_ERR_ARG, "names[%d] is the reserved key __metadata__", i);
        if ((s = st_check_save_tensor(w, i, names[i], tensors[i]))) return s;
    }
    for (int i = 0; i < n_meta; i++) {
        if (!keys[i] || !vals[i])
            return st_fail(w, QKV_ERR_ARG, "meta_keys[%d] or meta_vals[%d] is NULL", i, i);
        if (!json_utf8_valid(keys[i], strlen(keys[i])) ||
            !json_utf8_valid(vals[i], strlen(vals[i])))
            return st_fail(w, QKV_ERR_ARG, "metadata entry %d is not valid UTF-8", i);
    }
    if ((s = st_check_distinct(w, names, n, "tensor name"))) return s;
    return st_check_distinct(w, keys, n_meta, "metadata key");
}

/* The data layout: F32 tensors first, then BOOL ones, so that every F32
 * tensor starts 4-byte aligned (the buffer itself starts 8-aligned). */
static void st_save_order(int n, const qkv_tensor *const *tensors, int *order)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (tensors[i]->dtype == QKV_F32) order[k++] = i;
    for (int i = 0; i < n; i++)
        if (tensors[i]->dtype != QKV_F32) order[k++] = i;
}

/* The JSON header, padded with spaces to a multiple of 8 bytes. */
static qkv_status st_build_header(const st_where *w, int n, const char *const *names,
                                  const qkv_tensor *const *tensors, const int *order,
                                  int n_meta, const char *const *keys,
                                  const char *const *vals, st_buf *b)
{
    char num[64];
    uint64_t at = 0;
    int ok;
    st_buf_puts(b, "{");
    if (n_meta > 0) {
        st_buf_puts(b, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) st_buf_puts(b, ",");
            st_buf_json_string(b, keys[i]);
            st_buf_puts(b, ":");
            st_buf_json_string(b, vals[i]);
        }
        st_buf_puts(b, n > 0 ? "}," : "}");
    }
    for (int k = 0; k < n; k++) {
        const qkv_tensor *t = tensors[order[k]];
        int is_f32 = t->dtype == QKV_F32;
        uint64_t bytes = st_nbytes(t->shape, t->ndim, is_f32 ? 4 : 1, &ok);
        if (at > UINT64_MAX - bytes) return st_fail(w, QKV_ERR_SHAPE, "tensors are too large");
        if (k) st_buf_puts(b, ",");
        st_buf_json_string(b, names[order[k]]);
        st_buf_puts(b, is_f32 ? ":{\"dtype\":\"F32\",\"shape\":["
                              : ":{\"dtype\":\"BOOL\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            snprintf(num, sizeof num, d ? ",%lld" : "%lld", (long long)t->shape[d]);
            st_buf_puts(b, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                 (unsigned long long)(at + bytes));
        st_buf_puts(b, num);
        at += bytes;
    }
    st_buf_puts(b, "}");
    while (!b->oom && b->len % 8) st_buf_puts(b, " ");
    if (b->oom) return st_fail(w, QKV_ERR_NOMEM, "out of memory building the header");
    return QKV_OK;
}

/* n floats as little-endian bytes, through a small staging buffer. */
static int st_write_f32(FILE *f, const float *x, int64_t n)
{
    uint8_t buf[16384];
    const int64_t per = (int64_t)sizeof buf / 4;
    for (int64_t i = 0; i < n; i += per) {
        int64_t m = n - i < per ? n - i : per;
        for (int64_t j = 0; j < m; j++) {
            uint32_t bits;
            memcpy(&bits, &x[i + j], 4);
            st_st32(buf + 4 * j, bits);
        }
        if (fwrite(buf, 4, (size_t)m, f) != (size_t)m) return -1;
    }
    return 0;
}

/* n booleans as bytes 0/1 (any nonzero mask byte counts as true). */
static int st_write_bool(FILE *f, const uint8_t *m, int64_t n)
{
    uint8_t buf[16384];
    for (int64_t i = 0; i < n; i += (int64_t)sizeof buf) {
        int64_t k = n - i < (int64_t)sizeof buf ? n - i : (int64_t)sizeof buf;
        for (int64_t j = 0; j < k; j++) buf[j] = m[i + j] != 0;
        if (fwrite(buf, 1, (size_t)k, f) != (size_t)k) return -1;
    }
    return 0;
}

static int st_write_body(FILE *f, const st_buf *hdr, int n, const qkv_tensor *const *tensors,
                         const int *order)
{
    uint8_t len8[8];
    st_st64(len8, hdr->len);
    if (fwrite(len8, 1, 8, f) != 8 || fwrite(hdr->p, 1, hdr->len, f) != hdr->len) return -1;
    for (int k = 0; k < n; k++) {
        const qkv_tensor *t = tensors[order[k]];
        int64_t numel = qkv_tensor_numel(t);
        if (numel == 0) continue;
        if (t->dtype == QKV_F32 ? st_write_f32(f, qkv_data(t), numel)
                                : st_write_bool(f, t->mask, numel))
            return -1;
    }
    return 0;
}

/* Makes the rename itself durable: it lives in the directory, which only
 * an fsync of the directory flushes. Best effort: the data is already safe
 * and some file systems refuse to fsync directories. */
static void st_sync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return;
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

/* Creates the temporary file beside path: "path.tmp.<pid>.<n>", opened
 * with O_CREAT|O_EXCL|O_NOFOLLOW, so it is always a new file of ours: a
 * symlink or a file planted at the name makes the open fail (EEXIST) and
 * the next name is tried, never followed or overwritten. Mode 0666 less
 * the umask, as fopen gives. *tmp is malloc'd. */
static qkv_status st_create_tmp(const st_where *w, const char *path, char **tmp, FILE **file)
{
    static atomic_uint counter; /* distinct names within the process */
    size_t len = strlen(path) + 48;
    char *name = malloc(len);
    if (!name) return st_fail(w, QKV_ERR_NOMEM, "out of memory");
    int fd = -1, err = 0;
    for (int attempt = 0; fd < 0 && attempt < 100; attempt++) {
        snprintf(name, len, "%s.tmp.%ld.%u", path, (long)getpid(),
                 (unsigned)atomic_fetch_add(&counter, 1u));
        fd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        err = errno;
        if (fd < 0 && err != EEXIST) break;
    }
    if (fd < 0) {
        qkv_status s = st_fail(w, QKV_ERR_IO, "cannot create %s: %s", name, strerror(err));
        free(name);
        return s;
    }
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        err = errno;
        close(fd);
        unlink(name);
        qkv_status s = st_fail(w, QKV_ERR_IO, "cannot create %s: %s", name, strerror(err));
        free(name);
        return s;
    }
    *tmp = name;
    *file = f;
    return QKV_OK;
}

/* Writes to a new temporary file, flushes it to disk, then renames it over
 * path, so a crash leaves either the old file or the new one, never half of
 * one; on any failure the temporary file is removed. */
static qkv_status st_write_atomic(const st_where *w, const char *path, const st_buf *hdr, int n,
                                  const qkv_tensor *const *tensors, const int *order)
{
    char *tmp = NULL;
    FILE *f = NULL;
    const char *step = NULL;
    int err = 0;
    QKV_TRY(st_create_tmp(w, path, &tmp, &f));
    if (st_write_body(f, hdr, n, tensors, order) != 0) step = "write";
    else if (fflush(f) != 0) step = "flush";
    else if (fsync(fileno(f)) != 0) step = "fsync";
    if (step) err = errno;
    if (fclose(f) != 0 && !step) {
        step = "close";
        err = errno;
    }
    if (!step && rename(tmp, path) != 0) {
        step = "rename";
        err = errno;
    }
    if (step) {
        unlink(tmp);
        qkv_status s = st_fail(w, QKV_ERR_IO, "%s of %s failed: %s", step, tmp, strerror(err));
        free(tmp);
        return s;
    }
    free(tmp);
    st_sync_dir(path);
    return QKV_OK;
}

qkv_status qkv_safetensors_save(const char *path, int n, const char *const *names,
                                const qkv_tensor *const *tensors, int n_meta,
                                const char *const *meta_keys, const char *const *meta_vals)
{
    if (!path || !path[0]) return qkv_fail(QKV_ERR_ARG, "safetensors_save: path is NULL or empty");
    st_where w = {"safetensors_save", path};
    st_buf hdr = {0};
    qkv_status s = st_check_save_args(&w, n, names, tensors, n_meta, meta_keys, meta_vals);
    if (s) return s;
    int *order = malloc((n ? (size_t)n : 1) * sizeof *order);
    if (!order) return st_fail(&w, QKV_ERR_NOMEM, "out of memory");
    st_save_order(n, tensors, order);
    s = st_build_header(&w, n, names, tensors, order, n_meta, meta_keys, meta_vals, &hdr);
    if (!s) s = st_write_atomic(&w, path, &hdr, n, tensors, order);
    free(hdr.p);
    free(order);
    return s;
}
