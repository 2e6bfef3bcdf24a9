/* safetensors_read.c: typed reads out of an open safetensors table.
 *
 * Each read accepts only the stored dtypes that mean the same thing as its
 * destination: floats (F32, F16, BF16, F64) into float, integers (I64, I32,
 * I16, I8, U8) widened into int64, BOOL into bytes 0/1. A BOOL mask read as
 * floats would become 0/1 values that are *added* to scores instead of
 * masking them, so that is an error, not a conversion. qkv_safetensors_read_tensor
 * also requires the exact stored shape: a transposed (4,3) weight does not
 * load into a (3,4) tensor just because the counts agree.
 */
#include <string.h>

#include "io/safetensors_internal.h"

/* The three kinds of element a read can ask for. */
typedef enum { ST_KIND_FLOAT, ST_KIND_INT, ST_KIND_BOOL } st_kind;

static st_kind st_kind_of(qkv_st_dtype dt)
{
    switch (dt) {
    case QKV_ST_F32: case QKV_ST_F16: case QKV_ST_BF16: case QKV_ST_F64: return ST_KIND_FLOAT;
    case QKV_ST_BOOL: return ST_KIND_BOOL;
    default: return ST_KIND_INT;
    }
}

static const char *const st_kind_dtypes[3] = {
    "a floating-point dtype (F32, F16, BF16, F64)",
    "an integer dtype (I64, I32, I16, I8, U8)",
    "BOOL",
};
static const char *const st_kind_reader[3] = {"safetensors_read_f32", "safetensors_read_i64",
                                              "safetensors_read_bool"};

/* ---- conversions ------------------------------------------------------ */

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

/* n elements of a floating-point dtype at p into float. */
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
    default: break; /* not a floating-point dtype: refused before */
    }
}

/* n elements of an integer dtype at p, widened to int64 (U8 unsigned). */
static void st_to_i64(qkv_st_dtype dt, const uint8_t *p, int64_t n, int64_t *dst)
{
    int64_t i;
    switch (dt) {
    case QKV_ST_I64: for (i = 0; i < n; i++) dst[i] = (int64_t)st_ld64(p + 8 * i); break;
    case QKV_ST_I32: for (i = 0; i < n; i++) dst[i] = (int32_t)st_ld32(p + 4 * i); break;
    case QKV_ST_I16: for (i = 0; i < n; i++) dst[i] = (int16_t)st_ld16(p + 2 * i); break;
    case QKV_ST_I8: for (i = 0; i < n; i++) dst[i] = (int8_t)p[i]; break;
    case QKV_ST_U8: for (i = 0; i < n; i++) dst[i] = p[i]; break;
    default: break; /* not an integer dtype: refused before */
    }
}

/* ---- the typed reads ---------------------------------------------------- */

/* Checks that t may be read as kind into dst[0, n), then converts. fn names
 * the public call in messages. */
static qkv_status st_read_as(const char *fn, const qkv_safetensors *st, const st_tensor *t,
                             st_kind kind, void *dst, int64_t n)
{
    char q[ST_QNAME], sh[ST_SHAPE];
    st_kind have = st_kind_of(t->dtype);
    if (have != kind)
        return qkv_fail(QKV_ERR_DTYPE, "%s: %s: tensor '%s' is %s, not %s (read it with %s)", fn,
                        st->label, st_quote(t->name, q), st_dtype_name(t->dtype),
                        st_kind_dtypes[kind], st_kind_reader[have]);
    int64_t numel = (int64_t)((t->end - t->begin) / st_dtype_size(t->dtype));
    if (n != numel)
        return qkv_fail(QKV_ERR_SHAPE, "%s: %s: tensor '%s' %s %s has %lld elements, n is %lld", fn,
                        st->label, st_quote(t->name, q), st_dtype_name(t->dtype),
                        st_shape_str(t->shape, t->ndim, sh, sizeof sh), (long long)numel,
                        (long long)n);
    if (!dst && n > 0) return qkv_fail(QKV_ERR_ARG, "%s: dst is NULL", fn);
    const uint8_t *p = st->data + t->begin;
    if (kind == ST_KIND_FLOAT) st_to_f32(t->dtype, p, n, dst);
    else if (kind == ST_KIND_INT) st_to_i64(t->dtype, p, n, dst);
    else for (int64_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = p[i] != 0;
    return QKV_OK;
}

/* A public typed read: look the tensor up, then st_read_as. */
static qkv_status st_read_named(const char *fn, const qkv_safetensors *st, const char *name,
                                st_kind kind, void *dst, int64_t n)
{
    const st_tensor *t;
    QKV_TRY(st_lookup(fn, st, name, &t));
    return st_read_as(fn, st, t, kind, dst, n);
}

qkv_status qkv_safetensors_read_f32(const qkv_safetensors *st, const char *name, float *dst,
                                    int64_t n)
{
    return st_read_named("safetensors_read_f32", st, name, ST_KIND_FLOAT, dst, n);
}

qkv_status qkv_safetensors_read_i64(const qkv_safetensors *st, const char *name, int64_t *dst,
                                    int64_t n)
{
    return st_read_named("safetensors_read_i64", st, name, ST_KIND_INT, dst, n);
}

qkv_status qkv_safetensors_read_bool(const qkv_safetensors *st, const char *name, uint8_t *dst,
                                     int64_t n)
{
    return st_read_named("safetensors_read_bool", st, name, ST_KIND_BOOL, dst, n);
}

/* ---- into qkv tensors ---------------------------------------------------- */

qkv_status qkv_safetensors_read_tensor(const qkv_safetensors *st, const char *name,
                                       qkv_tensor *dst)
{
    static const char fn[] = "safetensors_read_tensor";
    char q[ST_QNAME], s1[ST_SHAPE], s2[ST_SHAPE];
    const st_tensor *t;
    QKV_NEED(dst, fn, "dst");
    QKV_TRY(st_lookup(fn, st, name, &t));
    if (dst->ndim < 0 || dst->ndim > QKV_MAX_DIMS)
        return qkv_fail(QKV_ERR_SHAPE, "%s: dst has ndim %d, expected 0..%d", fn, dst->ndim,
                        QKV_MAX_DIMS);
    int same = t->ndim == dst->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == dst->shape[d];
    if (!same)
        return qkv_fail(QKV_ERR_SHAPE, "%s: %s: '%s' is %s in the file, %s in the tensor", fn,
                        st->label, st_quote(name, q),
                        st_shape_str(t->shape, t->ndim, s1, sizeof s1),
                        st_shape_str(dst->shape, dst->ndim, s2, sizeof s2));
    int64_t n = qkv_tensor_numel(dst);
    switch (dst->dtype) {
    case QKV_F32: return st_read_as(fn, st, t, ST_KIND_FLOAT, dst->data, n);
    case QKV_I64: return st_read_as(fn, st, t, ST_KIND_INT, dst->idx, n);
    case QKV_BOOL: return st_read_as(fn, st, t, ST_KIND_BOOL, dst->mask, n);
    }
    return qkv_fail(QKV_ERR_DTYPE, "%s: dst has unknown dtype %d", fn, (int)dst->dtype);
}

qkv_status qkv_safetensors_load_tensor(const qkv_safetensors *st, const char *name, qkv_arena *a,
                                       qkv_tensor **out)
{
    static const char fn[] = "safetensors_load_tensor";
    static const qkv_dtype as[3] = {[ST_KIND_FLOAT] = QKV_F32, [ST_KIND_INT] = QKV_I64,
                                    [ST_KIND_BOOL] = QKV_BOOL};
    char q[ST_QNAME], sh[ST_SHAPE];
    const st_tensor *t;
    QKV_NEED(out, fn, "out");
    *out = NULL;
    QKV_NEED(a, fn, "arena");
    QKV_TRY(st_lookup(fn, st, name, &t));
    if (t->ndim > QKV_MAX_DIMS)
        return qkv_fail(QKV_ERR_SHAPE, "%s: %s: tensor '%s' is %s, %d dims; qkv tensors have at "
                        "most %d", fn, st->label, st_quote(name, q),
                        st_shape_str(t->shape, t->ndim, sh, sizeof sh), t->ndim, QKV_MAX_DIMS);
    qkv_arena_mark m = qkv_arena_get_mark(a);
    qkv_tensor *x;
    QKV_TRY(qkv_tensor_new(a, as[st_kind_of(t->dtype)], t->ndim, t->shape, &x));
    qkv_status s = qkv_safetensors_read_tensor(st, name, x);
    if (s) {
        qkv_arena_release(a, m);
        return s;
    }
    *out = x;
    return QKV_OK;
}
