/* gguf.c: reading GGUF files: open (mmap), the parse, the validation.
 *
 * A file (little-endian, docs/gguf.md "The format"):
 *   "GGUF", u32 version (2 or 3), u64 tensor_count, u64 kv_count,
 *   kv_count x { string key, u32 value type, value },
 *   tensor_count x { string name, u32 ndim, ndim x u64 dims, u32 type, u64 offset },
 *   padding to general.alignment (default 32), then the tensor data; each
 *   offset is relative to the start of that data section.
 * A string is a u64 length and that many bytes (no NUL); an array is a
 * u32 element type, a u64 count and the elements (arrays may nest).
 *
 * Everything is checked before it is used (docs/gguf.md "What the reader
 * checks"); a refusal names the key or tensor and the offset.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/gguf_internal.h"

/* ---- messages ----------------------------------------------------------- */

typedef struct {
    qkv_gguf *g;
    const char *fn; /* the public call, for messages */
    uint64_t pos;   /* the next byte to read */
} gcur;

static qkv_status gfail(const gcur *c, qkv_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static qkv_status gfail(const gcur *c, qkv_status s, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return qkv_fail(s, "%s: %s: %s", c->fn, c->g->label, msg);
}

const char *qkv_gguf_vtype_name(qkv_gguf_vtype t)
{
    static const char *const names[] = {"U8",  "I8",   "U16",    "I16",   "U32", "I32", "F32",
                                        "BOOL", "STRING", "ARRAY", "U64", "I64", "F64"};
    return (int)t >= 0 && (int)t <= QKV_GGUF_F64 ? names[t] : "unknown";
}

/* Where the parse is, for a message: "key 'general.name'", "element 7 of
 * key 'tokenizer.ggml.tokens'", "tensor 3 ('output.weight')". */
typedef struct {
    const char *what; /* "key", "tensor" */
    int64_t index;    /* the key's or tensor's position */
    const char *name; /* its name once read, or NULL */
    int64_t elem;     /* the array element, or -1 */
} gwhere;

static const char *where_str(const gwhere *w, char *buf, size_t cap)
{
    char q[GGUF_QNAME];
    size_t n = 0;
    if (w->elem >= 0) n = (size_t)snprintf(buf, cap, "element %lld of ", (long long)w->elem);
    if (w->name)
        snprintf(buf + n, cap - n, "%s '%s'", w->what, gguf_quote(w->name, q));
    else if (w->index < 0)
        snprintf(buf + n, cap - n, "%s", w->what);
    else
        snprintf(buf + n, cap - n, "%s %lld", w->what, (long long)w->index);
    return buf;
}

/* n more bytes must be there for part (of w); else a truncation error. */
static qkv_status need(const gcur *c, uint64_t n, const char *part, const gwhere *w)
{
    if (n <= c->g->len - c->pos) return QKV_OK;
    char wb[200];
    return gfail(c, QKV_ERR_FORMAT,
                 "truncated: %s of %s: %llu bytes needed at offset %llu, the file has %llu left",
                 part, where_str(w, wb, sizeof wb), (unsigned long long)n,
                 (unsigned long long)c->pos, (unsigned long long)(c->g->len - c->pos));
}

static uint32_t rd32(gcur *c)
{
    uint32_t v = gguf_ld32(c->g->base + c->pos);
    c->pos += 4;
    return v;
}

static uint64_t rd64(gcur *c)
{
    uint64_t v = gguf_ld64(c->g->base + c->pos);
    c->pos += 8;
    return v;
}

/* ---- the string pool ------------------------------------------------------ */

/* Appends bytes [p, p+n) and a NUL to the pool; *off gets their offset. */
static qkv_status pool_add(gcur *c, const uint8_t *p, uint64_t n, size_t *off)
{
    qkv_gguf *g = c->g;
    /* n is at most the file's length, so these sums cannot overflow. */
    if (g->pool_len + n + 1 > g->pool_cap) {
        size_t cap = g->pool_cap ? g->pool_cap : 4096;
        while (cap < g->pool_len + n + 1) cap *= 2;
        char *np = realloc(g->pool, cap);
        if (!np) return gfail(c, QKV_ERR_NOMEM, "out of memory for %zu bytes of strings", cap);
        g->pool = np;
        g->pool_cap = cap;
    }
    *off = g->pool_len;
    if (n) memcpy(g->pool + g->pool_len, p, (size_t)n);
    g->pool[g->pool_len + n] = '\0';
    g->pool_len += (size_t)n + 1;
    return QKV_OK;
}

/* Makes room for `more` strings in soff/slen (more is bounded by the file). */
static qkv_status strs_reserve(gcur *c, int64_t more)
{
    qkv_gguf *g = c->g;
    if (g->n_str + more <= g->cap_str) return QKV_OK;
    int64_t cap = g->cap_str ? g->cap_str : 256;
    while (cap < g->n_str + more) cap *= 2;
    size_t *so = realloc(g->soff, (size_t)cap * sizeof *so);
    if (so) g->soff = so;
    uint64_t *sl = so ? realloc(g->slen, (size_t)cap * sizeof *sl) : NULL;
    if (sl) g->slen = sl;
    if (!so || !sl) return gfail(c, QKV_ERR_NOMEM, "out of memory for %lld strings", (long long)cap);
    g->cap_str = cap;
    return QKV_OK;
}

/* Reads a string (u64 length, bytes). keep: copied into the pool, *off
 * and *len set; else only checked and skipped. */
static qkv_status rd_str(gcur *c, const char *part, const gwhere *w, int keep, size_t *off,
                         uint64_t *len)
{
    QKV_TRY(need(c, 8, part, w));
    uint64_t n = rd64(c);
    if (n > c->g->len - c->pos) {
        char wb[200];
        return gfail(c, QKV_ERR_FORMAT,
                     "%s of %s: string length %llu at offset %llu runs past the end of the file "
                     "(%llu bytes left)", part, where_str(w, wb, sizeof wb), (unsigned long long)n,
                     (unsigned long long)(c->pos - 8), (unsigned long long)(c->g->len - c->pos));
    }
    const uint8_t *p = c->g->base + c->pos;
    c->pos += n;
    if (len) *len = n;
    return keep ? pool_add(c, p, n, off) : QKV_OK;
}

/* ---- metadata values -------------------------------------------------------- */

/* Checks an element type read from the file. */
static qkv_status check_vtype(const gcur *c, uint32_t t, const gwhere *w, const char *part)
{
    if (t <= QKV_GGUF_F64) return QKV_OK;
    char wb[200];
    return gfail(c, QKV_ERR_FORMAT, "%s of %s: unknown value type id %u (GGUF has 0..12)", part,
                 where_str(w, wb, sizeof wb), t);
}

/* n scalars of type t (arr: the elements of an array), bools checked to
 * be 0 or 1. */
static qkv_status skip_scalars(gcur *c, uint32_t t, uint64_t n, gwhere *w, int arr)
{
    uint64_t sz = (uint64_t)gguf_scalar_size((int)t);
    if (n > (c->g->len - c->pos) / sz) {
        char wb[200];
        return gfail(c, QKV_ERR_FORMAT,
                     "%s: %llu elements of %s (%llu bytes each) run past the end of the file "
                     "(%llu bytes left at offset %llu)", where_str(w, wb, sizeof wb),
                     (unsigned long long)n, qkv_gguf_vtype_name((qkv_gguf_vtype)t),
                     (unsigned long long)sz, (unsigned long long)(c->g->len - c->pos),
                     (unsigned long long)c->pos);
    }
    if (t == QKV_GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (c->g->base[c->pos + i] > 1) {
                char wb[200];
                if (arr) w->elem = (int64_t)i;
                return gfail(c, QKV_ERR_FORMAT, "%s: BOOL value %u at offset %llu is not 0 or 1",
                             where_str(w, wb, sizeof wb), c->g->base[c->pos + i],
                             (unsigned long long)(c->pos + i));
            }
    c->pos += n * sz;
    return QKV_OK;
}

static qkv_status skip_array(gcur *c, gwhere *w, int depth);

/* An array's element type and count, the count bounded by the bytes left
 * (each element takes at least min bytes). */
static qkv_status array_head(gcur *c, gwhere *w, uint32_t *t, uint64_t *n)
{
    QKV_TRY(need(c, 12, "the array header", w));
    *t = rd32(c);
    *n = rd64(c);
    QKV_TRY(check_vtype(c, *t, w, "the array element type"));
    uint64_t min = *t == QKV_GGUF_STRING ? 8 : *t == QKV_GGUF_ARRAY ? 12
                                                               : (uint64_t)gguf_scalar_size((int)*t);
    if (*n > (c->g->len - c->pos) / min) {
        char wb[200];
        return gfail(c, QKV_ERR_FORMAT,
                     "%s: array length %llu of %s cannot fit in the %llu bytes left at offset %llu",
                     where_str(w, wb, sizeof wb), (unsigned long long)*n,
                     qkv_gguf_vtype_name((qkv_gguf_vtype)*t),
                     (unsigned long long)(c->g->len - c->pos), (unsigned long long)c->pos);
    }
    if (*n > INT64_MAX) return gfail(c, QKV_ERR_FORMAT, "array length overflows");
    return QKV_OK;
}

/* The elements of an array whose header has been read: checked and skipped
 * (an array inside an array: its elements are not indexed). */
static qkv_status skip_elems(gcur *c, gwhere *w, uint32_t t, uint64_t n, int depth)
{
    if (t == QKV_GGUF_ARRAY) {
        if (depth >= GGUF_MAX_DEPTH) {
            char wb[200];
            return gfail(c, QKV_ERR_FORMAT, "%s: arrays nested deeper than %d",
                         where_str(w, wb, sizeof wb), GGUF_MAX_DEPTH);
        }
        for (uint64_t i = 0; i < n; i++) QKV_TRY(skip_array(c, w, depth + 1));
        return QKV_OK;
    }
    if (t == QKV_GGUF_STRING) {
        for (uint64_t i = 0; i < n; i++) QKV_TRY(rd_str(c, "a string", w, 0, NULL, NULL));
        return QKV_OK;
    }
    return skip_scalars(c, t, n, w, 1);
}

static qkv_status skip_array(gcur *c, gwhere *w, int depth)
{
    uint32_t t;
    uint64_t n;
    QKV_TRY(array_head(c, w, &t, &n));
    return skip_elems(c, w, t, n, depth);
}

/* The value of kv (its type already read): checked, strings kept. */
static qkv_status read_value(gcur *c, gguf_kv *kv, gwhere *w)
{
    qkv_gguf *g = c->g;
    if (kv->type == QKV_GGUF_STRING) {
        QKV_TRY(strs_reserve(c, 1));
        kv->pos = c->pos;
        kv->str = g->n_str;
        QKV_TRY(rd_str(c, "the value", w, 1, &g->soff[g->n_str], &g->slen[g->n_str]));
        g->n_str++;
        return QKV_OK;
    }
    if (kv->type != QKV_GGUF_ARRAY) {
        QKV_TRY(need(c, (uint64_t)gguf_scalar_size(kv->type), "the value", w));
        kv->pos = c->pos;
        return skip_scalars(c, kv->type, 1, w, 0);
    }
    uint32_t t;
    uint64_t n;
    QKV_TRY(array_head(c, w, &t, &n));
    kv->elem = (qkv_gguf_vtype)t;
    kv->n = (int64_t)n;
    kv->pos = c->pos;
    if (t != QKV_GGUF_STRING) return skip_elems(c, w, t, n, 1);
    /* An array of strings: each one copied and indexed, for O(1) access. */
    QKV_TRY(strs_reserve(c, (int64_t)n));
    kv->str = g->n_str;
    for (uint64_t i = 0; i < n; i++) {
        w->elem = (int64_t)i;
        QKV_TRY(rd_str(c, "a string", w, 1, &g->soff[g->n_str], &g->slen[g->n_str]));
        g->n_str++;
    }
    w->elem = -1;
    return QKV_OK;
}

/* A key or tensor name: not empty, no NUL inside, at most max bytes. */
static qkv_status check_name(const gcur *c, const gwhere *w, uint64_t len, size_t off, uint64_t max)
{
    char wb[200];
    const char *s = gguf_str(c->g, off);
    if (len == 0) return gfail(c, QKV_ERR_FORMAT, "%s: empty name", where_str(w, wb, sizeof wb));
    if (strlen(s) != len)
        return gfail(c, QKV_ERR_FORMAT, "%s ('%s...'): the name holds a NUL byte",
                     where_str(w, wb, sizeof wb), s);
    if (len > max)
        return gfail(c, QKV_ERR_FORMAT, "%s: the name is %llu bytes, more than %llu",
                     where_str(w, wb, sizeof wb), (unsigned long long)len, (unsigned long long)max);
    return QKV_OK;
}

static qkv_status read_kvs(gcur *c)
{
    qkv_gguf *g = c->g;
    for (int64_t i = 0; i < g->n_kv; i++) {
        gguf_kv *kv = &g->kv[i];
        gwhere w = {"key", i, NULL, -1};
        QKV_TRY(rd_str(c, "the name", &w, 1, &kv->key, &kv->key_len));
        QKV_TRY(check_name(c, &w, kv->key_len, kv->key, GGUF_MAX_KEY));
        w.name = gguf_str(g, kv->key);
        QKV_TRY(need(c, 4, "the value type", &w));
        uint32_t t = rd32(c);
        QKV_TRY(check_vtype(c, t, &w, "the value type"));
        kv->type = kv->elem = (qkv_gguf_vtype)t;
        kv->n = 1;
        kv->str = -1;
        QKV_TRY(read_value(c, kv, &w));
    }
    return QKV_OK;
}

/* ---- tensors ---------------------------------------------------------------- */

/* One tensor info: name, dims, type, offset; the shape checked and its
 * byte size computed. */
static qkv_status read_tensor(gcur *c, int64_t i)
{
    qkv_gguf *g = c->g;
    gguf_tensor *t = &g->t[i];
    gwhere w = {"tensor", i, NULL, -1};
    char wb[200];
    uint64_t len;
    QKV_TRY(rd_str(c, "the name", &w, 1, &t->name, &len));
    QKV_TRY(check_name(c, &w, len, t->name, GGUF_MAX_NAME - 1));
    w.name = gguf_str(g, t->name);
    where_str(&w, wb, sizeof wb);
    QKV_TRY(need(c, 4, "the dimension count", &w));
    uint32_t nd = rd32(c);
    if (nd < 1 || nd > GGUF_MAX_DIMS)
        return gfail(c, QKV_ERR_FORMAT, "%s: %u dimensions, expected 1..%d", wb, nd, GGUF_MAX_DIMS);
    t->ndim = (int)nd;
    QKV_TRY(need(c, 8 * (uint64_t)nd + 12, "the dimensions, type and offset", &w));
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t v = rd64(c);
        if (v == 0 || v > INT64_MAX)
            return gfail(c, QKV_ERR_FORMAT, "%s: dimension %d is %llu, expected 1..2^63-1", wb, d,
                         (unsigned long long)v);
        if (numel > (uint64_t)INT64_MAX / v)
            return gfail(c, QKV_ERR_FORMAT, "%s: the element count (the product of the "
                         "dimensions) overflows int64 at dimension %d", wb, d);
        numel *= v;
        t->dims[d] = (int64_t)v;
    }
    uint32_t type = rd32(c);
    t->off = rd64(c);
    if (!qkv_qtype_known((int)type))
        return gfail(c, QKV_ERR_FORMAT, "%s: unknown tensor type id %u", wb, type);
    t->type = (qkv_qtype)type;
    int blk = qkv_qtype_block_elems(t->type);
    if (t->dims[0] % blk != 0)
        return gfail(c, QKV_ERR_FORMAT, "%s: %s rows of %lld elements are not whole blocks of %d",
                     wb, qkv_qtype_name(t->type), (long long)t->dims[0], blk);
    uint64_t blocks = (uint64_t)(t->dims[0] / blk), bb = (uint64_t)qkv_qtype_block_bytes(t->type);
    uint64_t rows = numel / (uint64_t)t->dims[0], row = blocks * bb;
    if (blocks > UINT64_MAX / bb || row > UINT64_MAX / rows || row * rows > SIZE_MAX)
        return gfail(c, QKV_ERR_FORMAT, "%s: its byte size overflows", wb);
    t->nbytes = row * rows;
    return QKV_OK;
}

/* general.alignment: a U32, a power of two (default 32). */
static qkv_status read_alignment(gcur *c)
{
    qkv_gguf *g = c->g;
    g->alignment = GGUF_DEFAULT_ALIGN;
    for (int64_t i = 0; i < g->n_kv; i++) {
        const gguf_kv *kv = &g->kv[i];
        if (strcmp(gguf_str(g, kv->key), "general.alignment") != 0) continue;
        if (kv->type != QKV_GGUF_U32)
            return gfail(c, QKV_ERR_FORMAT, "key 'general.alignment' is %s, expected U32",
                         qkv_gguf_vtype_name(kv->type));
        uint32_t a = gguf_ld32(g->base + kv->pos);
        if (a == 0 || (a & (a - 1)) != 0)
            return gfail(c, QKV_ERR_FORMAT,
                         "key 'general.alignment' is %u, expected a power of two", a);
        g->alignment = a;
    }
    return QKV_OK;
}

typedef struct {
    uint64_t off, end;
    int64_t i;
} gspan;

static int cmp_span(const void *a, const void *b)
{
    const gspan *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off ? 1 : (x->i > y->i) - (x->i < y->i);
}

/* Every tensor's data aligned, inside the file, and no two overlapping. */
static qkv_status check_data(gcur *c)
{
    qkv_gguf *g = c->g;
    char q[GGUF_QNAME], q2[GGUF_QNAME];
    if (g->n_t == 0) return QKV_OK;
    uint64_t room = g->data_off <= g->len ? g->len - g->data_off : 0;
    gspan *sp = malloc((size_t)g->n_t * sizeof *sp);
    if (!sp) return gfail(c, QKV_ERR_NOMEM, "out of memory for %lld tensors", (long long)g->n_t);
    qkv_status s = QKV_OK;
    for (int64_t i = 0; i < g->n_t && !s; i++) {
        const gguf_tensor *t = &g->t[i];
        const char *nm = gguf_quote(gguf_str(g, t->name), q);
        if (t->off % g->alignment != 0)
            s = gfail(c, QKV_ERR_FORMAT, "tensor '%s': data offset %llu is not a multiple of the "
                      "alignment %llu", nm, (unsigned long long)t->off,
                      (unsigned long long)g->alignment);
        else if (t->off > room || t->nbytes > room - t->off)
            s = gfail(c, QKV_ERR_FORMAT, "tensor '%s': its %llu bytes at data offset %llu (file "
                      "offset %llu) run past the end of the file (%llu bytes)", nm,
                      (unsigned long long)t->nbytes, (unsigned long long)t->off,
                      (unsigned long long)(g->data_off + t->off), (unsigned long long)g->len);
        sp[i] = (gspan){t->off, t->off + t->nbytes, i};
    }
    if (!s) qsort(sp, (size_t)g->n_t, sizeof *sp, cmp_span);
    for (int64_t k = 1; k < g->n_t && !s; k++)
        if (sp[k].off < sp[k - 1].end)
            s = gfail(c, QKV_ERR_FORMAT, "tensors '%s' (data bytes %llu..%llu) and '%s' (from %llu) "
                      "overlap", gguf_quote(gguf_str(g, g->t[sp[k - 1].i].name), q),
                      (unsigned long long)sp[k - 1].off, (unsigned long long)sp[k - 1].end,
                      gguf_quote(gguf_str(g, g->t[sp[k].i].name), q2),
                      (unsigned long long)sp[k].off);
    free(sp);
    return s;
}

/* ---- the header and the whole parse ------------------------------------------ */

/* Magic, version (2 or 3; 1 and big-endian files refused by name), counts. */
static qkv_status read_header(gcur *c, uint64_t *n_t, uint64_t *n_kv)
{
    const uint8_t *b = c->g->base;
    size_t len = c->g->len;
    if (len < 4 || memcmp(b, "GGUF", 4) != 0) {
        if (len < 4)
            return gfail(c, QKV_ERR_FORMAT, "not a GGUF file: %zu bytes, too short for the magic",
                         len);
        return gfail(c, QKV_ERR_FORMAT, "not a GGUF file: the magic is %02x %02x %02x %02x, "
                     "expected 'GGUF' (47 47 55 46)", b[0], b[1], b[2], b[3]);
    }
    gwhere w = {"the header", -1, NULL, -1};
    c->pos = 4;
    QKV_TRY(need(c, 4, "the version", &w));
    uint32_t v = rd32(c);
    uint32_t swapped = (v >> 24) | ((v >> 8) & 0xff00) | ((v << 8) & 0xff0000) | (v << 24);
    if ((v & 0xffff) == 0 && swapped >= 1 && swapped <= 3)
        return gfail(c, QKV_ERR_FORMAT, "a big-endian GGUF file (version %u read byte-swapped); "
                     "qkv reads little-endian files only", swapped);
    if (v == 1)
        return gfail(c, QKV_ERR_FORMAT, "GGUF version 1 (the first format, with 32-bit counts "
                     "and lengths) is not supported; qkv reads versions 2 and 3");
    if (v != 2 && v != 3)
        return gfail(c, QKV_ERR_FORMAT, "unknown GGUF version %u; qkv reads versions 2 and 3", v);
    c->g->version = (int)v;
    QKV_TRY(need(c, 16, "the tensor and key counts", &w));
    *n_t = rd64(c);
    *n_kv = rd64(c);
    /* A key takes at least 13 bytes (length, 1 byte, type, a U8), a
     * tensor info 32 (length, ndim, one dim, type, offset). */
    uint64_t left = len - c->pos;
    if (*n_kv > left / 13 || *n_t > (left - *n_kv * 13) / 32)
        return gfail(c, QKV_ERR_FORMAT, "truncated or corrupt: %llu keys and %llu tensors take "
                     "at least 13 and 32 bytes each, and the file has %llu bytes after its header",
                     (unsigned long long)*n_kv, (unsigned long long)*n_t,
                     (unsigned long long)left);
    return QKV_OK;
}

qkv_status gguf_parse(qkv_gguf *g, const char *fn)
{
    gcur c = {g, fn, 0};
    uint64_t n_t = 0, n_kv = 0;
    QKV_TRY(read_header(&c, &n_t, &n_kv));
    g->kv = calloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kv);
    g->t = calloc(n_t ? (size_t)n_t : 1, sizeof *g->t);
    if (!g->kv || !g->t)
        return gfail(&c, QKV_ERR_NOMEM, "out of memory for %llu keys and %llu tensors",
                     (unsigned long long)n_kv, (unsigned long long)n_t);
    g->n_kv = (int64_t)n_kv;
    QKV_TRY(read_kvs(&c));
    g->n_t = (int64_t)n_t;
    for (int64_t i = 0; i < g->n_t; i++) QKV_TRY(read_tensor(&c, i));
    QKV_TRY(read_alignment(&c));
    /* The data section starts at the next multiple of the alignment. */
    uint64_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
    g->data_off = c.pos + pad;
    QKV_TRY(check_data(&c));
    return gguf_hash_build(g, fn);
}

/* ---- open and close ----------------------------------------------------------- */

void qkv_gguf_close(qkv_gguf *g)
{
    if (!g) return;
    if (g->mapped && g->len) munmap((void *)g->base, g->len);
    gguf_hash_free(&g->kv_hash);
    gguf_hash_free(&g->t_hash);
    free(g->kv);
    free(g->t);
    free(g->pool);
    free(g->soff);
    free(g->slen);
    free(g->label);
    free(g);
}

static qkv_gguf *gguf_new(const char *label)
{
    qkv_gguf *g = calloc(1, sizeof *g);
    if (g) g->label = strdup(label);
    if (g && !g->label) {
        free(g);
        return NULL;
    }
    return g;
}

/* Parses g (base and len set) and hands it out, or closes it. */
static qkv_status gguf_finish(qkv_gguf *g, const char *fn, qkv_gguf **out)
{
    qkv_status s = gguf_parse(g, fn);
    if (s) {
        qkv_gguf_close(g);
        return s;
    }
    *out = g;
    return QKV_OK;
}

qkv_status qkv_gguf_open_memory(const void *buf, size_t len, const char *label, qkv_gguf **out)
{
    static const char fn[] = "gguf_open_memory";
    QKV_NEED(out, fn, "out");
    *out = NULL;
    if (!buf && len) return qkv_fail(QKV_ERR_ARG, "%s: buf is NULL", fn);
    qkv_gguf *g = gguf_new(label ? label : "<memory>");
    if (!g) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    g->base = buf ? buf : (const uint8_t *)"";
    g->len = len;
    return gguf_finish(g, fn, out);
}

qkv_status qkv_gguf_open(const char *path, qkv_gguf **out)
{
    static const char fn[] = "gguf_open";
    QKV_NEED(out, fn, "out");
    *out = NULL;
    QKV_NEED(path, fn, "path");
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        qkv_status s = errno == ENOENT ? QKV_ERR_NOTFOUND : QKV_ERR_IO;
        return qkv_fail(s, "%s: %s: cannot open: %s", fn, path, strerror(errno));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return qkv_fail(QKV_ERR_IO, "%s: %s: cannot stat: %s", fn, path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return qkv_fail(QKV_ERR_IO, "%s: %s: not a regular file", fn, path);
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return qkv_fail(QKV_ERR_NOMEM, "%s: %s: too large to map", fn, path);
    }
    size_t len = (size_t)sb.st_size;
    void *p = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    int e = errno;
    close(fd);
    if (p == MAP_FAILED)
        return qkv_fail(QKV_ERR_IO, "%s: %s: cannot map %zu bytes: %s", fn, path, len, strerror(e));
    qkv_gguf *g = gguf_new(path);
    if (!g) {
        if (p) munmap(p, len);
        return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    }
    g->base = p ? p : (const uint8_t *)"";
    g->len = len;
    g->mapped = p != NULL;
    return gguf_finish(g, fn, out);
}
