/* safetensors.c: reading the safetensors format: open, parse, look up.
 *
 * A file is an 8-byte little-endian header length N, N bytes of UTF-8 JSON
 * (possibly padded at the end with spaces), then the byte buffer that the
 * header's data_offsets index into. The header is an object mapping tensor
 * names to {"dtype", "shape", "data_offsets"}, plus an optional
 * "__metadata__" object of strings.
 *
 * Opening reads the whole file and validates it (safetensors_validate.c)
 * before handing out a table; typed reads are in safetensors_read.c, the
 * writer in safetensors_write.c. Bytes are decoded explicitly as
 * little-endian, so nothing depends on the host's byte order or alignment.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/safetensors_internal.h"

static const struct {
    const char *name;
    size_t size;
} st_dtypes[ST_NDTYPES] = {
    [QKV_ST_F32] = {"F32", 4},  [QKV_ST_F16] = {"F16", 2}, [QKV_ST_BF16] = {"BF16", 2},
    [QKV_ST_F64] = {"F64", 8},  [QKV_ST_I64] = {"I64", 8}, [QKV_ST_I32] = {"I32", 4},
    [QKV_ST_I16] = {"I16", 2},  [QKV_ST_I8] = {"I8", 1},   [QKV_ST_U8] = {"U8", 1},
    [QKV_ST_BOOL] = {"BOOL", 1},
};

const char *st_dtype_name(qkv_st_dtype dt)
{
    return (int)dt >= 0 && (int)dt < ST_NDTYPES ? st_dtypes[dt].name : "?";
}

size_t st_dtype_size(qkv_st_dtype dt)
{
    return (int)dt >= 0 && (int)dt < ST_NDTYPES ? st_dtypes[dt].size : 1;
}

/* ---- messages and shapes ---------------------------------------------- */

qkv_status st_fail(const st_where *w, qkv_status s, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return qkv_fail(s, "%s: %s: %s", w->fn, w->label, msg);
}

const char *st_quote(const char *s, char buf[ST_QNAME])
{
    size_t n = 0;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        /* Stop at a character boundary near the end, or hard before it
         * (a caller's name need not be valid UTF-8). */
        if (n >= ST_QNAME - 8 && ((c & 0xC0) != 0x80 || n >= ST_QNAME - 5)) {
            memcpy(buf + n, "...", 3);
            n += 3;
            break;
        }
        if (c < 0x20 || c == 0x7f)
            n += (size_t)snprintf(buf + n, ST_QNAME - n, "\\x%02x", c);
        else
            buf[n++] = (char)c;
    }
    buf[n] = '\0';
    return buf;
}

const char *st_shape_str(const int64_t *shape, int ndim, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, ")");
    return buf;
}

uint64_t st_nbytes(const int64_t *shape, int ndim, size_t elem, int *ok)
{
    uint64_t bytes = elem;
    *ok = 1;
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 0) return 0;
    for (int i = 0; i < ndim; i++) {
        uint64_t d = (uint64_t)shape[i];
        if (bytes > UINT64_MAX / d) {
            *ok = 0;
            return 0;
        }
        bytes *= d;
    }
    return bytes;
}

int st_cmp_tensor_name(const void *a, const void *b)
{
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

int st_cmp_meta_key(const void *a, const void *b)
{
    return strcmp(((const st_meta *)a)->key, ((const st_meta *)b)->key);
}

/* ---- opening: files and buffers -------------------------------------- */

void qkv_safetensors_close(qkv_safetensors *st)
{
    if (!st) return;
    for (int i = 0; i < st->n; i++) free(st->t[i].name);
    for (int i = 0; i < st->n_meta; i++) {
        free(st->meta[i].key);
        free(st->meta[i].val);
    }
    free(st->t);
    free(st->meta);
    free(st->data);
    free(st->label);
    free(st);
}

/* An empty table with room for a data buffer of data_len bytes. */
static qkv_status st_new(const st_where *w, uint64_t data_len, qkv_safetensors **out)
{
    *out = NULL;
    if (data_len > SIZE_MAX - ST_ALIGN)
        return st_fail(w, QKV_ERR_NOMEM, "a %llu-byte data buffer does not fit in memory",
                       (unsigned long long)data_len);
    qkv_safetensors *st = calloc(1, sizeof *st);
    size_t lablen = strlen(w->label);
    if (st) st->label = malloc(lablen + 1);
    /* aligned_alloc wants a multiple of the alignment, and never 0. */
    size_t cap = ((size_t)data_len + ST_ALIGN) / ST_ALIGN * ST_ALIGN;
    if (st && st->label) st->data = aligned_alloc(ST_ALIGN, cap);
    if (!st || !st->label || !st->data) {
        qkv_safetensors_close(st);
        return st_fail(w, QKV_ERR_NOMEM, "out of memory for a %llu-byte data buffer",
                       (unsigned long long)data_len);
    }
    memcpy(st->label, w->label, lablen + 1);
    st->data_len = (size_t)data_len;
    *out = st;
    return QKV_OK;
}

qkv_status qkv_safetensors_parse(const uint8_t *buf, size_t len, const char *label,
                                 qkv_safetensors **out)
{
    st_where w = {"safetensors_parse", label ? label : "<memory>"};
    uint8_t prefix[8] = {0};
    uint64_t hlen = 0;
    qkv_safetensors *st;
    qkv_status s;
    if (!out) return qkv_fail(QKV_ERR_ARG, "safetensors_parse: out is NULL");
    *out = NULL;
    if (!buf && len) return qkv_fail(QKV_ERR_ARG, "safetensors_parse: buf is NULL");
    if (len >= 8) memcpy(prefix, buf, 8);
    if ((s = st_check_prefix(&w, prefix, len, &hlen))) return s;
    if ((s = st_new(&w, len - 8 - hlen, &st))) return s;
    if (st->data_len) memcpy(st->data, buf + 8 + hlen, st->data_len);
    if ((s = st_parse_header(&w, (const char *)buf + 8, (size_t)hlen, st))) {
        qkv_safetensors_close(st);
        return s;
    }
    *out = st;
    return QKV_OK;
}

/* fread of exactly n bytes, or an IO error naming what was being read. */
static qkv_status st_fread(const st_where *w, FILE *f, void *dst, size_t n, const char *what)
{
    if (n == 0 || fread(dst, 1, n, f) == n) return QKV_OK;
    if (ferror(f)) return st_fail(w, QKV_ERR_IO, "cannot read the %s: %s", what, strerror(errno));
    return st_fail(w, QKV_ERR_IO, "cannot read the %s: the file got shorter while reading", what);
}

/* Reads the file in three parts (length, header, data), the data straight
 * into the table's aligned buffer so that nothing is copied twice. */
static qkv_status st_load_file(const st_where *w, FILE *f, qkv_safetensors **out)
{
    struct stat sb;
    uint8_t prefix[8] = {0};
    uint64_t hlen = 0;
    qkv_safetensors *st = NULL;
    char *hdr = NULL;
    qkv_status s;
    if (fstat(fileno(f), &sb) != 0)
        return st_fail(w, QKV_ERR_IO, "cannot stat: %s", strerror(errno));
    if (!S_ISREG(sb.st_mode)) return st_fail(w, QKV_ERR_IO, "not a regular file");
    uint64_t total = (uint64_t)sb.st_size;
    if (total >= 8 && (s = st_fread(w, f, prefix, 8, "header length"))) return s;
    if ((s = st_check_prefix(w, prefix, total, &hlen))) return s;
    hdr = malloc(hlen ? (size_t)hlen : 1);
    if (!hdr) return st_fail(w, QKV_ERR_NOMEM, "out of memory for a %llu-byte header",
                             (unsigned long long)hlen);
    if (!(s = st_fread(w, f, hdr, (size_t)hlen, "header")) &&
        !(s = st_new(w, total - 8 - hlen, &st)) &&
        !(s = st_fread(w, f, st->data, st->data_len, "data buffer")))
        s = st_parse_header(w, hdr, (size_t)hlen, st);
    free(hdr);
    if (s) {
        qkv_safetensors_close(st);
        return s;
    }
    *out = st;
    return QKV_OK;
}

qkv_status qkv_safetensors_open(const char *path, qkv_safetensors **out)
{
    if (!out) return qkv_fail(QKV_ERR_ARG, "safetensors_open: out is NULL");
    *out = NULL;
    if (!path) return qkv_fail(QKV_ERR_ARG, "safetensors_open: path is NULL");
    st_where w = {"safetensors_open", path};
    FILE *f = fopen(path, "rb");
    if (!f) return st_fail(&w, QKV_ERR_IO, "cannot open: %s", strerror(errno));
    qkv_status s = st_load_file(&w, f, out);
    fclose(f);
    return s;
}

/* ---- accessors -------------------------------------------------------- */

int qkv_safetensors_count(const qkv_safetensors *st) { return st ? st->n : 0; }

const char *qkv_safetensors_name(const qkv_safetensors *st, int i)
{
    return st && i >= 0 && i < st->n ? st->t[i].name : NULL;
}

const char *qkv_safetensors_meta(const qkv_safetensors *st, const char *key)
{
    if (!st || !key || st->n_meta == 0) return NULL;
    st_meta probe = {(char *)key, NULL};
    const st_meta *m = bsearch(&probe, st->meta, (size_t)st->n_meta, sizeof *st->meta,
                               st_cmp_meta_key);
    return m ? m->val : NULL;
}

qkv_status st_lookup(const char *fn, const qkv_safetensors *st, const char *name,
                     const st_tensor **out)
{
    char q[ST_QNAME];
    if (!st) return qkv_fail(QKV_ERR_ARG, "%s: st is NULL", fn);
    if (!name) return qkv_fail(QKV_ERR_ARG, "%s: name is NULL", fn);
    st_tensor probe = {0};
    probe.name = (char *)name;
    *out = st->n == 0 ? NULL
                      : bsearch(&probe, st->t, (size_t)st->n, sizeof *st->t, st_cmp_tensor_name);
    if (!*out)
        return qkv_fail(QKV_ERR_NOTFOUND, "%s: %s: no tensor named '%s'", fn, st->label,
                        st_quote(name, q));
    return QKV_OK;
}

qkv_status qkv_safetensors_info(const qkv_safetensors *st, const char *name,
                                qkv_st_dtype *dtype, int *ndim, int64_t *shape,
                                const void **data, size_t *nbytes)
{
    const st_tensor *t;
    qkv_status s = st_lookup("safetensors_info", st, name, &t);
    if (s) return s;
    if (dtype) *dtype = t->dtype;
    if (ndim) *ndim = t->ndim;
    if (shape) memcpy(shape, t->shape, (size_t)t->ndim * sizeof *shape);
    if (data) *data = st->data + t->begin;
    if (nbytes) *nbytes = (size_t)(t->end - t->begin);
    return QKV_OK;
}

int qkv_safetensors_meta_count(const qkv_safetensors *st) { return st ? st->n_meta : 0; }

const char *qkv_safetensors_meta_key(const qkv_safetensors *st, int i)
{
    return st && i >= 0 && i < st->n_meta ? st->meta[i].key : NULL;
}
