/* safetensors.c: reading and writing the safetensors format.
 *
 * A file is an 8-byte little-endian header length N, N bytes of UTF-8 JSON
 * (possibly padded at the end with spaces), then the byte buffer that the
 * header's data_offsets index into. The header is an object mapping tensor
 * names to {"dtype", "shape", "data_offsets"}, plus an optional
 * "__metadata__" object of strings.
 *
 * Reading validates everything up front (syntax, fields, sizes, and that the
 * tensors tile the buffer exactly), so the accessors can trust the table and
 * a hostile file can at worst be rejected. Bytes are decoded explicitly as
 * little-endian, so nothing depends on the host's byte order or alignment.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/internal.h"
#include "io/json.h"
#include "io/safetensors_internal.h"

enum {
    ST_MAX_RANK = 8,
    ST_ALIGN = 64,   /* the data buffer's alignment in memory */
    ST_QNAME = 96    /* room for a name quoted in a message */
};
/* The reference implementation's limit; it keeps a hostile length from
 * turning into a huge allocation before anything is checked. */
#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

static const struct {
    const char *name;
    size_t size;
} st_dtypes[] = {
    [QKV_ST_F32] = {"F32", 4},  [QKV_ST_F16] = {"F16", 2}, [QKV_ST_BF16] = {"BF16", 2},
    [QKV_ST_F64] = {"F64", 8},  [QKV_ST_I64] = {"I64", 8}, [QKV_ST_I32] = {"I32", 4},
    [QKV_ST_I16] = {"I16", 2},  [QKV_ST_I8] = {"I8", 1},   [QKV_ST_U8] = {"U8", 1},
    [QKV_ST_BOOL] = {"BOOL", 1},
};
#define ST_NDTYPES ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))

typedef struct {
    char *name;
    qkv_st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_RANK];
    uint64_t begin, end; /* data_offsets, relative to the data buffer */
} st_tensor;

typedef struct {
    char *key, *val;
} st_meta;

struct qkv_safetensors {
    char *label;         /* the path, for messages */
    st_tensor *t;        /* sorted by name, for bsearch */
    int n;
    st_meta *meta;       /* sorted by key */
    int n_meta;
    uint8_t *data;       /* the byte buffer, ST_ALIGN-aligned */
    size_t data_len;
};

/* Where a message comes from: "fn: label: what". */
typedef struct {
    const char *fn, *label;
} st_where;

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static qkv_status st_fail(const st_where *w, qkv_status s, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return qkv_fail(s, "%s: %s: %s", w->fn, w->label, msg);
}

/* A name fit for a message: non-printing bytes as \xNN, long names cut
 * (at a UTF-8 character boundary) with "...". */
static const char *st_quote(const char *s, char buf[ST_QNAME])
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

static uint16_t st_ld16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static uint32_t st_ld32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t st_ld64(const uint8_t *p) { return st_ld32(p) | (uint64_t)st_ld32(p + 4) << 32; }

static void st_st32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void st_st64(uint8_t *p, uint64_t v)
{
    st_st32(p, (uint32_t)v);
    st_st32(p + 4, (uint32_t)(v >> 32));
}

/* "(2,3)" for a shape; "()" for a scalar. */
static const char *st_shape_str(const int64_t *shape, int ndim, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, ")");
    return buf;
}

/* The byte size of a tensor; 0 on overflow (with *ok cleared). A zero
 * dimension makes it empty however large the others are. */
static uint64_t st_nbytes(const int64_t *shape, int ndim, size_t elem, int *ok)
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

/* ---- reading: the header's pieces ------------------------------------- */

/* A non-negative JSON integer that fits int64; what names it in messages. */
static qkv_status st_read_uint(const st_where *w, const char *tname, const char *what,
                               const json_value *v, uint64_t *out)
{
    char q[ST_QNAME];
    if (v->type != JSON_NUMBER)
        return st_fail(w, QKV_ERR_FORMAT, "tensor '%s' %s is %s, not an integer",
                       st_quote(tname, q), what, json_type_name(v->type));
    if (v->u.num.neg && (v->u.num.big || v->u.num.mag != 0 || !v->u.num.integral))
        return st_fail(w, QKV_ERR_FORMAT, "tensor '%s' %s is negative", st_quote(tname, q),
                       what);
    if (!v->u.num.integral)
        return st_fail(w, QKV_ERR_FORMAT,
                       "tensor '%s' %s is not an integer (it has a fraction or exponent)",
                       st_quote(tname, q), what);
    if (v->u.num.big)
        return st_fail(w, QKV_ERR_FORMAT, "tensor '%s' %s is too large (over 2^63-1)",
                       st_quote(tname, q), what);
    *out = v->u.num.mag;
    return QKV_OK;
}

static qkv_status st_read_dtype(const st_where *w, st_tensor *t, const json_value *v)
{
    char q[ST_QNAME], q2[ST_QNAME];
    if (v->type != JSON_STRING)
        return st_fail(w, QKV_ERR_FORMAT, "tensor '%s' dtype is %s, not a string",
                       st_quote(t->name, q), json_type_name(v->type));
    for (int i = 0; i < ST_NDTYPES; i++) {
        if (strlen(st_dtypes[i].name) == v->u.str.len &&
            strcmp(st_dtypes[i].name, v->u.str.s) == 0) {
            t->dtype = (qkv_st_dtype)i;
            return QKV_OK;
        }
    }
    return st_fail(w, QKV_ERR_FORMAT,
                   "tensor '%s' has unknown dtype '%s' (expected F32, F16, BF16, F64, I64, "
                   "I32, I16, I8, U8 or BOOL)",
                   st_quote(t->name, q), st_quote(v->u.str.s, q2));
}

static qkv_status st_read_shape(const st_where *w, st_tensor *t, const json_value *v)
{
    char q[ST_QNAME], what[32];
    if (v->type != JSON_ARRAY)
        return st_fail(w, QKV_ERR_FORMAT, "tensor '%s' shape is %s, not an array",
                       st_quote(t->name, q), json_type_name(v->type));
    if (v->u.arr.n > ST_MAX_RANK)
        return st_fail(w, QKV_ERR_FORMAT, "tensor '%s' has rank %zu; at most %d is supported",
                       st_quote(t->name, q), v->u.arr.n, ST_MAX_RANK);
    t->ndim = (int)v->u.arr.n;
    for (int i = 0; i < t->ndim; i++) {
        uint64_t d;
        snprintf(what, sizeof what, "shape[%d]", i);
        qkv_status s = st_read_uint(w, t->name, what, &v->u.arr.items[i], &d);
        if (s) return s;
        t->shape[i] = (int64_t)d;
    }
    return QKV_OK;
}

static qkv_status st_read_offsets(const st_where *w, st_tensor *t, const json_value *v,
                                  size_t data_len)
{
    char q[ST_QNAME];
    qkv_status s;
    if (v->type != JSON_ARRAY)
        return st_fail(w, QKV_ERR_FORMAT, "tensor '%s' data_offsets is %s, not an array",
                       st_quote(t->name, q), json_type_name(v->type));
    if (v->u.arr.n != 2)
        return st_fail(w, QKV_ERR_FORMAT, "tensor '%s' data_offsets has %zu entries, not 2",
                       st_quote(t->name, q), v->u.arr.n);
    if ((s = st_read_uint(w, t->name, "data_offsets[0]", &v->u.arr.items[0], &t->begin)) ||
        (s = st_read_uint(w, t->name, "data_offsets[1]", &v->u.arr.items[1], &t->end)))
        return s;
    if (t->end < t->begin)
        return st_fail(w, QKV_ERR_FORMAT,
                       "tensor '%s' data_offsets [%llu,%llu] end before they begin",
                       st_quote(t->name, q), (unsigned long long)t->begin,
                       (unsigned long long)t->end);
    if (t->end > data_len)
        return st_fail(w, QKV_ERR_FORMAT,
                       "tensor '%s' data_offsets [%llu,%llu] run past the end of the %zu-byte "
                       "data buffer",
                       st_quote(t->name, q), (unsigned long long)t->begin,
                       (unsigned long long)t->end, data_len);
    return QKV_OK;
}

/* end - begin must be exactly the size that dtype and shape imply. */
static qkv_status st_check_size(const st_where *w, const st_tensor *t)
{
    char q[ST_QNAME], sh[200];
    int ok;
    uint64_t want = st_nbytes(t->shape, t->ndim, st_dtypes[t->dtype].size, &ok);
    st_shape_str(t->shape, t->ndim, sh, sizeof sh);
    if (!ok)
        return st_fail(w, QKV_ERR_FORMAT, "tensor '%s' shape %s with dtype %s is too large",
                       st_quote(t->name, q), sh, st_dtypes[t->dtype].name);
    if (t->end - t->begin != want)
        return st_fail(w, QKV_ERR_FORMAT,
                       "tensor '%s' data_offsets [%llu,%llu] do not match dtype %s and shape %s "
                       "(%llu bytes)",
                       st_quote(t->name, q), (unsigned long long)t->begin,
                       (unsigned long long)t->end, st_dtypes[t->dtype].name, sh,
                       (unsigned long long)want);
    return QKV_OK;
}

/* Sorts a tensor entry's three fields out of its object, rejecting
 * missing, repeated and unknown ones. */
static qkv_status st_entry_fields(const st_where *w, const st_tensor *t, const json_value *v,
                                  const json_value *field[3])
{
    static const char *names[3] = {"dtype", "shape", "data_offsets"};
    char q[ST_QNAME], q2[ST_QNAME];
    if (v->type != JSON_OBJECT)
        return st_fail(w, QKV_ERR_FORMAT, "tensor '%s' is %s, not an object",
                       st_quote(t->name, q), json_type_name(v->type));
    for (size_t i = 0; i < v->u.obj.n; i++) {
        const json_member *m = &v->u.obj.items[i];
        int k = 0;
        while (k < 3 && !(strcmp(m->key, names[k]) == 0 && m->key_len == strlen(names[k]))) k++;
        if (k == 3)
            return st_fail(w, QKV_ERR_FORMAT, "tensor '%s' has an unknown field '%s'",
                           st_quote(t->name, q), st_quote(m->key, q2));
        if (field[k])
            return st_fail(w, QKV_ERR_FORMAT, "tensor '%s' has a duplicate field '%s'",
                           st_quote(t->name, q), names[k]);
        field[k] = &m->val;
    }
    for (int k = 0; k < 3; k++)
        if (!field[k])
            return st_fail(w, QKV_ERR_FORMAT, "tensor '%s' is missing the '%s' field",
                           st_quote(t->name, q), names[k]);
    return QKV_OK;
}

/* One "name": {...} member into t. Takes the key's string from the tree
 * (m->key becomes NULL) so that t->name needs no copy. */
static qkv_status st_read_tensor(const st_where *w, json_member *m, st_tensor *t,
                                 size_t data_len)
{
    char q[ST_QNAME];
    const json_value *field[3] = {NULL, NULL, NULL};
    qkv_status s;
    t->name = m->key;
    m->key = NULL;
    if (strlen(t->name) != m->key_len)
        return st_fail(w, QKV_ERR_FORMAT, "tensor name '%s' contains a NUL character",
                       st_quote(t->name, q));
    if ((s = st_entry_fields(w, t, &m->val, field)) || (s = st_read_dtype(w, t, field[0])) ||
        (s = st_read_shape(w, t, field[1])) ||
        (s = st_read_offsets(w, t, field[2], data_len)) || (s = st_check_size(w, t)))
        return s;
    return QKV_OK;
}

/* The "__metadata__" object into st->meta, taking its strings. */
static qkv_status st_read_meta(const st_where *w, json_value *v, qkv_safetensors *st)
{
    char q[ST_QNAME];
    if (v->type != JSON_OBJECT)
        return st_fail(w, QKV_ERR_FORMAT, "__metadata__ is %s, not an object",
                       json_type_name(v->type));
    if (v->u.obj.n > INT_MAX)
        return st_fail(w, QKV_ERR_FORMAT, "__metadata__ has too many entries");
    st->meta = calloc(v->u.obj.n ? v->u.obj.n : 1, sizeof *st->meta);
    if (!st->meta) return st_fail(w, QKV_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < v->u.obj.n; i++) {
        json_member *m = &v->u.obj.items[i];
        st_meta *e = &st->meta[st->n_meta++];
        e->key = m->key;
        m->key = NULL;
        if (m->val.type != JSON_STRING)
            return st_fail(w, QKV_ERR_FORMAT, "__metadata__ value for '%s' is %s, not a string",
                           st_quote(e->key, q), json_type_name(m->val.type));
        e->val = m->val.u.str.s;
        m->val.u.str.s = NULL;
        if (strlen(e->key) != m->key_len || strlen(e->val) != m->val.u.str.len)
            return st_fail(w, QKV_ERR_FORMAT, "__metadata__ entry '%s' contains a NUL character",
                           st_quote(e->key, q));
    }
    return QKV_OK;
}

/* ---- reading: whole-table checks -------------------------------------- */

static int st_cmp_tensor_name(const void *a, const void *b)
{
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int st_cmp_meta_key(const void *a, const void *b)
{
    return strcmp(((const st_meta *)a)->key, ((const st_meta *)b)->key);
}

static int st_cmp_offsets(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name); /* deterministic messages */
}

/* Sorts names (for lookup) and rejects repeats: a JSON object may hold a
 * key twice, and which one would win is anyone's guess. */
static qkv_status st_check_unique(const st_where *w, qkv_safetensors *st)
{
    char q[ST_QNAME];
    if (st->n > 1) qsort(st->t, (size_t)st->n, sizeof *st->t, st_cmp_tensor_name);
    for (int i = 1; i < st->n; i++)
        if (strcmp(st->t[i - 1].name, st->t[i].name) == 0)
            return st_fail(w, QKV_ERR_FORMAT, "duplicate tensor name '%s'",
                           st_quote(st->t[i].name, q));
    if (st->n_meta > 1) qsort(st->meta, (size_t)st->n_meta, sizeof *st->meta, st_cmp_meta_key);
    for (int i = 1; i < st->n_meta; i++)
        if (strcmp(st->meta[i - 1].key, st->meta[i].key) == 0)
            return st_fail(w, QKV_ERR_FORMAT, "duplicate __metadata__ key '%s'",
                           st_quote(st->meta[i].key, q));
    return QKV_OK;
}

/* The tensors, sorted by offset, must tile [0, data_len) exactly: no
 * overlaps (two tensors aliasing bytes), no holes (bytes nobody owns). */
static qkv_status st_check_tiling(const st_where *w, const qkv_safetensors *st)
{
    char q[ST_QNAME], q2[ST_QNAME];
    qkv_status s = QKV_OK;
    const st_tensor **order = malloc((st->n ? (size_t)st->n : 1) * sizeof *order);
    if (!order) return st_fail(w, QKV_ERR_NOMEM, "out of memory");
    for (int i = 0; i < st->n; i++) order[i] = &st->t[i];
    qsort(order, (size_t)st->n, sizeof *order, st_cmp_offsets);
    uint64_t at = 0;
    for (int i = 0; i < st->n && !s; i++) {
        const st_tensor *t = order[i];
        if (t->begin > at)
            s = st_fail(w, QKV_ERR_FORMAT,
                        "data buffer has a hole: bytes [%llu,%llu) belong to no tensor (next "
                        "is '%s')",
                        (unsigned long long)at, (unsigned long long)t->begin,
                        st_quote(t->name, q));
        else if (t->begin < at)
            s = st_fail(w, QKV_ERR_FORMAT,
                        "tensor '%s' data_offsets [%llu,%llu] overlap tensor '%s' [%llu,%llu]",
                        st_quote(t->name, q), (unsigned long long)t->begin,
                        (unsigned long long)t->end, st_quote(order[i - 1]->name, q2),
                        (unsigned long long)order[i - 1]->begin,
                        (unsigned long long)order[i - 1]->end);
        at = t->end;
    }
    if (!s && at != st->data_len)
        s = st_fail(w, QKV_ERR_FORMAT,
                    "tensors cover %llu bytes but the data buffer has %zu (bytes [%llu,%zu) "
                    "belong to no tensor)",
                    (unsigned long long)at, st->data_len, (unsigned long long)at, st->data_len);
    free(order);
    return s;
}

/* The parsed header object into st (whose data_len is already set). */
static qkv_status st_read_root(const st_where *w, json_value *root, qkv_safetensors *st)
{
    qkv_status s;
    int seen_meta = 0;
    if (root->type != JSON_OBJECT)
        return st_fail(w, QKV_ERR_FORMAT, "header is %s, not an object",
                       json_type_name(root->type));
    if (root->u.obj.n > INT_MAX)
        return st_fail(w, QKV_ERR_FORMAT, "header has too many entries");
    st->t = calloc(root->u.obj.n ? root->u.obj.n : 1, sizeof *st->t);
    if (!st->t) return st_fail(w, QKV_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < root->u.obj.n; i++) {
        json_member *m = &root->u.obj.items[i];
        if (strcmp(m->key, "__metadata__") == 0 && m->key_len == 12) {
            if (seen_meta++)
                return st_fail(w, QKV_ERR_FORMAT, "duplicate __metadata__ key in the header");
            s = st_read_meta(w, &m->val, st);
        } else {
            /* Counted first so that close() frees a half-read entry. */
            s = st_read_tensor(w, m, &st->t[st->n++], st->data_len);
        }
        if (s) return s;
    }
    if ((s = st_check_unique(w, st))) return s;
    return st_check_tiling(w, st);
}

static qkv_status st_parse_header(const st_where *w, const char *hdr, size_t hlen,
                                  qkv_safetensors *st)
{
    /* Real headers nest three deep and shapes have at most 8 entries; the
     * limits stop hostile input from costing deep recursion or memory. */
    const json_limits lim = {16, 64};
    json_value *root;
    size_t end;
    char err[256];
    json_result r = json_parse(hdr, hlen, &lim, &root, &end, err, sizeof err);
    if (r == JSON_ENOMEM) return st_fail(w, QKV_ERR_NOMEM, "out of memory reading the header");
    if (r != JSON_OK) return st_fail(w, QKV_ERR_FORMAT, "invalid JSON header %s", err);
    for (size_t i = end; i < hlen; i++) {
        if (hdr[i] != ' ') {
            json_free(root);
            return st_fail(w, QKV_ERR_FORMAT,
                           "invalid JSON header at byte %zu: unexpected data after the header "
                           "object (only space padding may follow it)",
                           i);
        }
    }
    qkv_status s = st_read_root(w, root, st);
    json_free(root);
    return s;
}

/* ---- reading: files and buffers --------------------------------------- */

/* Checks the 8-byte length prefix against the total size; total is the
 * file's length and prefix its first 8 bytes (unused when total < 8). */
static qkv_status st_check_prefix(const st_where *w, const uint8_t prefix[8], uint64_t total,
                                  uint64_t *hlen)
{
    if (total < 8)
        return st_fail(w, QKV_ERR_FORMAT,
                       "file is %llu bytes, shorter than the 8-byte header length",
                       (unsigned long long)total);
    *hlen = st_ld64(prefix);
    if (*hlen > ST_MAX_HEADER)
        return st_fail(w, QKV_ERR_FORMAT, "header length %llu exceeds the 100 MB limit",
                       (unsigned long long)*hlen);
    if (*hlen > total - 8)
        return st_fail(w, QKV_ERR_FORMAT,
                       "header length %llu runs past the end of the file (%llu bytes follow "
                       "the length)",
                       (unsigned long long)*hlen, (unsigned long long)(total - 8));
    return QKV_OK;
}

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

/* The tensor called name, or an error from fn. */
static qkv_status st_lookup(const char *fn, const qkv_safetensors *st, const char *name,
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

/* IEEE half to float, exactly: every half value (subnormals included) is
 * representable as a float. */
static float st_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    float f;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | man << 13; /* inf, or nan keeping its payload */
    } else if (exp != 0) {
        bits = sign | (exp + 112) << 23 | man << 13; /* rebias 15 -> 127 */
    } else {
        f = (float)man * 0x1p-24f; /* zero or subnormal: man * 2^-24 */
        memcpy(&bits, &f, 4);
        bits |= sign;
    }
    memcpy(&f, &bits, 4);
    return f;
}

static float st_bits_f32(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static void st_to_f32(qkv_st_dtype dt, const uint8_t *p, int64_t n, float *dst)
{
    int64_t i;
    double d;
    uint64_t u;
    switch (dt) {
    case QKV_ST_F32: for (i = 0; i < n; i++) dst[i] = st_bits_f32(st_ld32(p + 4 * i)); break;
    case QKV_ST_F16: for (i = 0; i < n; i++) dst[i] = st_f16_to_f32(st_ld16(p + 2 * i)); break;
    case QKV_ST_BF16:
        for (i = 0; i < n; i++) dst[i] = st_bits_f32((uint32_t)st_ld16(p + 2 * i) << 16);
        break;
    case QKV_ST_F64:
        for (i = 0; i < n; i++) {
            u = st_ld64(p + 8 * i);
            memcpy(&d, &u, 8);
            dst[i] = (float)d;
        }
        break;
    case QKV_ST_I64: for (i = 0; i < n; i++) dst[i] = (float)(int64_t)st_ld64(p + 8 * i); break;
    case QKV_ST_I32: for (i = 0; i < n; i++) dst[i] = (float)(int32_t)st_ld32(p + 4 * i); break;
    case QKV_ST_I16: for (i = 0; i < n; i++) dst[i] = (float)(int16_t)st_ld16(p + 2 * i); break;
    case QKV_ST_I8: for (i = 0; i < n; i++) dst[i] = (float)(int8_t)p[i]; break;
    case QKV_ST_U8: for (i = 0; i < n; i++) dst[i] = (float)p[i]; break;
    case QKV_ST_BOOL: for (i = 0; i < n; i++) dst[i] = p[i] ? 1.0f : 0.0f; break;
    }
}

qkv_status qkv_safetensors_read_f32(const qkv_safetensors *st, const char *name, float *dst,
                                    int64_t n)
{
    char q[ST_QNAME], sh[200];
    const st_tensor *t;
    qkv_status s = st_lookup("safetensors_read_f32", st, name, &t);
    if (s) return s;
    int64_t numel = (int64_t)((t->end - t->begin) / st_dtypes[t->dtype].size);
    if (n != numel)
        return qkv_fail(QKV_ERR_SHAPE,
                        "safetensors_read_f32: %s: tensor '%s' %s %s has %lld elements, n is %lld",
                        st->label, st_quote(name, q), st_dtypes[t->dtype].name,
                        st_shape_str(t->shape, t->ndim, sh, sizeof sh), (long long)numel,
                        (long long)n);
    if (!dst && n > 0) return qkv_fail(QKV_ERR_ARG, "safetensors_read_f32: dst is NULL");
    st_to_f32(t->dtype, st->data + t->begin, numel, dst);
    return QKV_OK;
}

/* ---- writing ---------------------------------------------------------- */

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

static int64_t st_tensor_numel(const qkv_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
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
    if (st_tensor_numel(t) > 0 && (t->dtype == QKV_F32 ? !qkv_data(t) : !t->mask))
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
        int64_t numel = st_tensor_numel(t);
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

/* Writes to path.tmp, flushes it to disk, then renames it over path, so a
 * crash leaves either the old file or the new one, never half of one. */
static qkv_status st_write_atomic(const st_where *w, const char *path, const st_buf *hdr, int n,
                                  const qkv_tensor *const *tensors, const int *order)
{
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    const char *step = NULL;
    int err = 0;
    if (!tmp) return st_fail(w, QKV_ERR_NOMEM, "out of memory");
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        qkv_status s = st_fail(w, QKV_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
        free(tmp);
        return s;
    }
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
        remove(tmp);
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

int qkv_safetensors_meta_count(const qkv_safetensors *st) { return st ? st->n_meta : 0; }

const char *qkv_safetensors_meta_key(const qkv_safetensors *st, int i)
{
    return st && i >= 0 && i < st->n_meta ? st->meta[i].key : NULL;
}
