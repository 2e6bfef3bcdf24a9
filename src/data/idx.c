/* idx.c: the idx format of MNIST and Fashion-MNIST, plain or gzip'd.
 *
 * A file is a magic 0 0 TYPE NDIM, NDIM big-endian u32 sizes, then the
 * elements big-endian in row-major order. Plain and gzip'd bytes go through
 * one reader (a byte source), so that the header is checked before any
 * large allocation: the element count must not overflow, and its bytes
 * must fit in what the file can hold (for gzip, deflate's largest ratio,
 * 1032:1) before they are allocated, then match exactly what is there. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "data/image_internal.h"

#define IDX_MAX_DIMS 255

struct qkv_idx {
    qkv_idx_type type;
    int ndim;
    int64_t shape[IDX_MAX_DIMS];
    int64_t numel;
    size_t esize;
    void *data; /* numel elements in host byte order */
};

/* ---- the byte source: a plain buffer, or gzip members inflated ---------- */

typedef struct {
    const uint8_t *in; /* the file's bytes */
    size_t n, pos;     /* pos: next unread input byte */
    int gz;            /* gzip'd: inflated through z */
    int z_open, z_end; /* z initialised; the last member ended */
    z_stream z;
    const char *name;
} idx_src;

static int is_gzip(const uint8_t *b, size_t n) { return n >= 2 && b[0] == 0x1f && b[1] == 0x8b; }

/* Reads up to want bytes into dst; *got < want only at the end of the
 * data. A corrupt or truncated gzip stream is an error. */
static qkv_status src_read(idx_src *s, uint8_t *dst, size_t want, size_t *got)
{
    *got = 0;
    if (!s->gz) {
        size_t k = s->n - s->pos < want ? s->n - s->pos : want;
        memcpy(dst, s->in + s->pos, k);
        s->pos += k;
        *got = k;
        return QKV_OK;
    }
    while (*got < want && !s->z_end) {
        /* zlib counts in uInt: feed and fill at most 1 GiB at a time */
        size_t in_left = s->n - s->pos, out_left = want - *got;
        s->z.next_in = (Bytef *)(s->in + s->pos);
        s->z.avail_in = (uInt)(in_left < (1u << 30) ? in_left : (1u << 30));
        s->z.next_out = dst + *got;
        s->z.avail_out = (uInt)(out_left < (1u << 30) ? out_left : (1u << 30));
        uInt in0 = s->z.avail_in, out0 = s->z.avail_out;
        int rc = inflate(&s->z, Z_NO_FLUSH);
        s->pos += in0 - s->z.avail_in;
        *got += out0 - s->z.avail_out;
        if (rc == Z_STREAM_END) {
            /* Another member may follow (gzip files concatenate). */
            if (s->pos == s->n) {
                s->z_end = 1;
            } else if (is_gzip(s->in + s->pos, s->n - s->pos)) {
                if (inflateReset(&s->z) != Z_OK)
                    return qkv_fail(QKV_ERR_FORMAT, "idx_read: %s: zlib cannot restart", s->name);
            } else {
                return qkv_fail(QKV_ERR_FORMAT, "idx_read: %s: %zu bytes after the gzip data that "
                                "are not gzip", s->name, s->n - s->pos);
            }
        } else if (rc == Z_MEM_ERROR) {
            return qkv_fail(QKV_ERR_NOMEM, "idx_read: %s: zlib out of memory", s->name);
        } else if (rc == Z_BUF_ERROR && s->pos == s->n) {
            return qkv_fail(QKV_ERR_FORMAT, "idx_read: %s: truncated gzip data (the stream ends "
                            "before its end mark)", s->name);
        } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
            return qkv_fail(QKV_ERR_FORMAT, "idx_read: %s: corrupt gzip data (%s)", s->name,
                            s->z.msg ? s->z.msg : "zlib error");
        }
    }
    return QKV_OK;
}

/* The most bytes the source can give: a plain buffer's rest; for gzip,
 * deflate's largest expansion (1032:1, zlib's technical notes) of what
 * is left, plus slack for stored blocks' headers. */
static uint64_t src_bound(const idx_src *s)
{
    uint64_t left = s->n - s->pos;
    if (!s->gz) return left;
    return left > UINT64_MAX / 2048 ? UINT64_MAX : left * 1032 + 1024;
}

/* ---- parsing ------------------------------------------------------------ */

static size_t type_size(int t)
{
    switch (t) {
    case QKV_IDX_U8: case QKV_IDX_I8: return 1;
    case QKV_IDX_I16: return 2;
    case QKV_IDX_I32: case QKV_IDX_F32: return 4;
    case QKV_IDX_F64: return 8;
    }
    return 0;
}

static const char *type_name(int t)
{
    switch (t) {
    case QKV_IDX_U8: return "u8";
    case QKV_IDX_I8: return "i8";
    case QKV_IDX_I16: return "i16";
    case QKV_IDX_I32: return "i32";
    case QKV_IDX_F32: return "f32";
    case QKV_IDX_F64: return "f64";
    }
    return "?";
}

static uint64_t be_u(const uint8_t *p, size_t k)
{
    uint64_t v = 0;
    for (size_t i = 0; i < k; i++) v = v << 8 | p[i];
    return v;
}

/* The elements from big-endian bytes to host order, in place. */
static void to_host(qkv_idx *x)
{
    uint8_t *p = x->data;
    size_t k = x->esize;
    if (k == 1) return;
    for (int64_t i = 0; i < x->numel; i++, p += k) {
        uint64_t v = be_u(p, k);
        if (k == 2) { uint16_t u = (uint16_t)v; memcpy(p, &u, 2); }
        else if (k == 4) { uint32_t u = (uint32_t)v; memcpy(p, &u, 4); }
        else memcpy(p, &v, 8);
    }
}

static qkv_status parse_src(idx_src *s, qkv_idx *x)
{
    const char *nm = s->name;
    uint8_t head[4 * IDX_MAX_DIMS];
    size_t got;
    QKV_TRY(src_read(s, head, 4, &got));
    if (got < 4)
        return qkv_fail(QKV_ERR_FORMAT, "idx_read: %s: %zu bytes, too short for an idx header", nm, got);
    if (head[0] != 0 || head[1] != 0)
        return qkv_fail(QKV_ERR_FORMAT, "idx_read: %s: not an idx file (magic %02x %02x %02x %02x, "
                        "expected 00 00 TYPE NDIM)", nm, head[0], head[1], head[2], head[3]);
    x->esize = type_size(head[2]);
    if (!x->esize)
        return qkv_fail(QKV_ERR_FORMAT, "idx_read: %s: type code 0x%02x is none of the idx types "
                        "(0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64)", nm, head[2]);
    x->type = (qkv_idx_type)head[2];
    x->ndim = head[3];
    if (x->ndim == 0) return qkv_fail(QKV_ERR_FORMAT, "idx_read: %s: the header has 0 dimensions", nm);
    QKV_TRY(src_read(s, head, 4 * (size_t)x->ndim, &got));
    if (got < 4 * (size_t)x->ndim)
        return qkv_fail(QKV_ERR_FORMAT, "idx_read: %s: truncated header (%d dimensions need %d "
                        "bytes of sizes, the file has %zu)", nm, x->ndim, 4 * x->ndim, got);
    /* The element count: a zero size makes it 0 whatever the others are;
     * otherwise the product must fit (bytes included) in int64. */
    int zero = 0;
    for (int d = 0; d < x->ndim; d++) {
        x->shape[d] = (int64_t)be_u(head + 4 * d, 4);
        zero |= x->shape[d] == 0;
    }
    uint64_t numel = 1, limit = (uint64_t)INT64_MAX / x->esize;
    for (int d = 0; d < x->ndim && !zero; d++) {
        if ((uint64_t)x->shape[d] > limit / numel)
            return qkv_fail(QKV_ERR_FORMAT, "idx_read: %s: the sizes overflow (dimension %d of %lld "
                            "after %llu elements)", nm, d, (long long)x->shape[d],
                            (unsigned long long)numel);
        numel *= (uint64_t)x->shape[d];
    }
    x->numel = zero ? 0 : (int64_t)numel;
    uint64_t bytes = (uint64_t)x->numel * x->esize;
    if (bytes > src_bound(s) || bytes > SIZE_MAX - 1)
        return qkv_fail(QKV_ERR_FORMAT, "idx_read: %s: the header's %lld %s elements need %llu bytes, "
                        "more than the file %s", nm, (long long)x->numel, type_name(x->type),
                        (unsigned long long)bytes, s->gz ? "can hold (truncated or corrupt?)" : "has left");
    x->data = malloc(bytes ? (size_t)bytes : 1);
    if (!x->data) return qkv_fail(QKV_ERR_NOMEM, "idx_read: %s: no memory for %llu bytes", nm,
                                  (unsigned long long)bytes);
    QKV_TRY(src_read(s, x->data, (size_t)bytes, &got));
    if (got < bytes)
        return qkv_fail(QKV_ERR_FORMAT, "idx_read: %s: truncated: the data ends after %zu of the "
                        "header's %llu bytes", nm, got, (unsigned long long)bytes);
    /* Nothing may follow, and the gzip stream must end well (its CRC is
     * checked at its end). */
    uint8_t extra[64];
    uint64_t more = 0;
    do {
        QKV_TRY(src_read(s, extra, sizeof extra, &got));
        more += got;
    } while (got == sizeof extra && more < (1u << 20));
    if (more)
        return qkv_fail(QKV_ERR_FORMAT, "idx_read: %s: %s%llu bytes after the %llu the header's sizes "
                        "give", nm, more >= (1u << 20) ? "over " : "", (unsigned long long)more,
                        (unsigned long long)bytes);
    to_host(x);
    return QKV_OK;
}

static qkv_status idx_parse_body(const void *bytes, size_t n, const char *name, qkv_idx **out)
{
    QKV_NEED(out, "idx_parse", "out");
    *out = NULL;
    if (!name) name = "(memory)";
    if (!bytes && n) return qkv_fail(QKV_ERR_ARG, "idx_parse: %s: bytes is NULL, n %zu", name, n);
    if (!bytes) bytes = "";
    qkv_idx *x = calloc(1, sizeof *x);
    if (!x) return qkv_fail(QKV_ERR_NOMEM, "idx_read: %s: out of memory", name);
    idx_src s = {.in = bytes, .n = n, .name = name, .gz = is_gzip(bytes, n)};
    qkv_status st = QKV_OK;
    if (s.gz) {
        /* 16 + MAX_WBITS: a gzip wrapper, its CRC-32 and length checked */
        if (inflateInit2(&s.z, 16 + MAX_WBITS) != Z_OK)
            st = qkv_fail(QKV_ERR_NOMEM, "idx_read: %s: zlib cannot start", name);
        else
            s.z_open = 1;
    }
    if (st == QKV_OK) st = parse_src(&s, x);
    if (s.z_open) inflateEnd(&s.z);
    if (st != QKV_OK) {
        qkv_idx_free(x);
        return st;
    }
    *out = x;
    return QKV_OK;
}

qkv_status qkv_idx_parse(const void *bytes, size_t n, const char *name, qkv_idx **out)
{
    return qkv_fail_in("idx_parse", idx_parse_body(bytes, n, name, out));
}

qkv_status qkv_idx_read(const char *path, qkv_idx **out)
{
    QKV_NEED(out, "idx_read", "out");
    *out = NULL;
    QKV_NEED(path, "idx_read", "path");
    FILE *f = fopen(path, "rb");
    if (!f) return qkv_fail(QKV_ERR_IO, "idx_read: cannot open %s: %s", path, strerror(errno));
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    qkv_status st = QKV_OK;
    for (;;) {
        if (n == cap) {
            size_t nc = cap ? cap * 2 : (1u << 16);
            uint8_t *nb = nc > cap ? realloc(buf, nc) : NULL;
            if (!nb) {
                st = qkv_fail(QKV_ERR_NOMEM, "idx_read: %s: no memory for %zu bytes", path, nc);
                break;
            }
            buf = nb, cap = nc;
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (k == 0) {
            if (ferror(f)) st = qkv_fail(QKV_ERR_IO, "idx_read: cannot read %s: %s", path, strerror(errno));
            break;
        }
    }
    fclose(f);
    if (st == QKV_OK) st = qkv_idx_parse(buf ? (const void *)buf : "", n, path, out);
    free(buf);
    return st;
}

void qkv_idx_free(qkv_idx *x)
{
    if (!x) return;
    free(x->data);
    free(x);
}

qkv_idx_type qkv_idx_type_of(const qkv_idx *x) { return x ? x->type : (qkv_idx_type)0; }
int qkv_idx_ndim(const qkv_idx *x) { return x ? x->ndim : 0; }
int64_t qkv_idx_dim(const qkv_idx *x, int d) { return x && d >= 0 && d < x->ndim ? x->shape[d] : -1; }
int64_t qkv_idx_numel(const qkv_idx *x) { return x ? x->numel : 0; }

static qkv_status check_read(const char *fn, const qkv_idx *x, const void *dst, int64_t n)
{
    QKV_NEED(x, fn, "idx");
    QKV_NEED(dst, fn, "dst");
    if (n != x->numel)
        return qkv_fail(QKV_ERR_SHAPE, "%s: n %lld, the file has %lld elements", fn, (long long)n,
                        (long long)x->numel);
    return QKV_OK;
}

/* Element i as a double (exact for every integer type and f32). */
static double elem(const qkv_idx *x, int64_t i)
{
    const uint8_t *p = (const uint8_t *)x->data + (size_t)i * x->esize;
    int16_t s16;
    int32_t s32;
    float f;
    double d;
    switch (x->type) {
    case QKV_IDX_U8: return p[0];
    case QKV_IDX_I8: return (int8_t)p[0];
    case QKV_IDX_I16: memcpy(&s16, p, 2); return s16;
    case QKV_IDX_I32: memcpy(&s32, p, 4); return s32;
    case QKV_IDX_F32: memcpy(&f, p, 4); return f;
    case QKV_IDX_F64: memcpy(&d, p, 8); return d;
    }
    return 0;
}

qkv_status qkv_idx_read_f32(const qkv_idx *x, float *dst, int64_t n)
{
    QKV_TRY(check_read("idx_read_f32", x, dst, n));
    for (int64_t i = 0; i < n; i++) dst[i] = (float)elem(x, i);
    return QKV_OK;
}

qkv_status qkv_idx_read_i64(const qkv_idx *x, int64_t *dst, int64_t n)
{
    QKV_TRY(check_read("idx_read_i64", x, dst, n));
    if (x->type == QKV_IDX_F32 || x->type == QKV_IDX_F64)
        return qkv_fail(QKV_ERR_DTYPE, "idx_read_i64: the file holds %s, not integers", type_name(x->type));
    for (int64_t i = 0; i < n; i++) dst[i] = (int64_t)elem(x, i);
    return QKV_OK;
}

const uint8_t *qkv_idx_u8(const qkv_idx *x) { return x && x->type == QKV_IDX_U8 ? x->data : NULL; }
