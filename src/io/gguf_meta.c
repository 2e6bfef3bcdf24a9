/* gguf_meta.c: looking things up in an open GGUF file: the hash tables
 * over keys and tensor names, the metadata getters (typed, converting
 * only where nothing is lost or the value is range-checked), the arrays
 * and the tensor accessors. Everything here reads what gguf.c validated.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf_internal.h"

/* ---- hash tables ------------------------------------------------------------ */

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

void gguf_hash_free(gguf_hash *h)
{
    free(h->slot);
    h->slot = NULL;
    h->cap = 0;
}

/* The index whose name (name_of) is s, or -1. */
static int64_t hash_find(const qkv_gguf *g, const gguf_hash *h, int tensors, const char *s)
{
    if (!h->cap) return -1;
    for (size_t k = (size_t)hash_str(s) & (h->cap - 1);; k = (k + 1) & (h->cap - 1)) {
        int64_t i = h->slot[k];
        if (i < 0) return -1;
        size_t off = tensors ? g->t[i].name : g->kv[i].key;
        if (strcmp(gguf_str(g, off), s) == 0) return i;
    }
}

/* A table over n names (keys or tensor names); a duplicate is refused. */
static qkv_status hash_fill(qkv_gguf *g, gguf_hash *h, int tensors, int64_t n, const char *fn)
{
    size_t cap = 16;
    while (cap < 2 * (size_t)n) cap *= 2;
    h->slot = malloc(cap * sizeof *h->slot);
    if (!h->slot)
        return qkv_fail(QKV_ERR_NOMEM, "%s: %s: out of memory for a table of %lld names", fn,
                        g->label, (long long)n);
    memset(h->slot, 0xff, cap * sizeof *h->slot); /* every slot -1 */
    h->cap = cap;
    for (int64_t i = 0; i < n; i++) {
        const char *s = gguf_str(g, tensors ? g->t[i].name : g->kv[i].key);
        size_t k = (size_t)hash_str(s) & (cap - 1);
        for (; h->slot[k] >= 0; k = (k + 1) & (cap - 1)) {
            size_t off = tensors ? g->t[h->slot[k]].name : g->kv[h->slot[k]].key;
            if (strcmp(gguf_str(g, off), s) == 0) {
                char q[GGUF_QNAME];
                return qkv_fail(QKV_ERR_FORMAT, "%s: %s: %s '%s' appears twice (%s %lld and %lld)",
                                fn, g->label, tensors ? "tensor" : "key", gguf_quote(s, q),
                                tensors ? "tensors" : "keys", (long long)h->slot[k], (long long)i);
            }
        }
        h->slot[k] = i;
    }
    return QKV_OK;
}

qkv_status gguf_hash_build(qkv_gguf *g, const char *fn)
{
    QKV_TRY(hash_fill(g, &g->kv_hash, 0, g->n_kv, fn));
    return hash_fill(g, &g->t_hash, 1, g->n_t, fn);
}

/* ---- the file and its keys ----------------------------------------------------- */

int qkv_gguf_version(const qkv_gguf *g) { return g ? g->version : 0; }
int64_t qkv_gguf_alignment(const qkv_gguf *g) { return g ? (int64_t)g->alignment : 0; }
uint64_t qkv_gguf_data_offset(const qkv_gguf *g) { return g ? g->data_off : 0; }
int64_t qkv_gguf_meta_count(const qkv_gguf *g) { return g ? g->n_kv : 0; }

static const gguf_kv *kv_at(const qkv_gguf *g, int64_t i)
{
    return g && i >= 0 && i < g->n_kv ? &g->kv[i] : NULL;
}

const char *qkv_gguf_meta_key(const qkv_gguf *g, int64_t i)
{
    const gguf_kv *kv = kv_at(g, i);
    return kv ? gguf_str(g, kv->key) : NULL;
}

int64_t qkv_gguf_meta_find(const qkv_gguf *g, const char *key)
{
    return g && key ? hash_find(g, &g->kv_hash, 0, key) : -1;
}

qkv_gguf_vtype qkv_gguf_meta_type(const qkv_gguf *g, int64_t i)
{
    const gguf_kv *kv = kv_at(g, i);
    return kv ? kv->type : (qkv_gguf_vtype)-1;
}

qkv_gguf_vtype qkv_gguf_meta_elem_type(const qkv_gguf *g, int64_t i)
{
    const gguf_kv *kv = kv_at(g, i);
    return kv ? kv->elem : (qkv_gguf_vtype)-1;
}

int64_t qkv_gguf_meta_len(const qkv_gguf *g, int64_t i)
{
    const gguf_kv *kv = kv_at(g, i);
    return kv ? kv->n : -1;
}

/* The pair called key, or an error from fn. */
static qkv_status find_kv(const char *fn, const qkv_gguf *g, const char *key, const gguf_kv **out)
{
    char q[GGUF_QNAME];
    if (!g) return qkv_fail(QKV_ERR_ARG, "%s: g is NULL", fn);
    if (!key) return qkv_fail(QKV_ERR_ARG, "%s: key is NULL", fn);
    int64_t i = hash_find(g, &g->kv_hash, 0, key);
    if (i < 0)
        return qkv_fail(QKV_ERR_NOTFOUND, "%s: %s: no key '%s'", fn, g->label, gguf_quote(key, q));
    *out = &g->kv[i];
    return QKV_OK;
}

/* "key 'K' is STRING, expected WANT". */
static qkv_status wrong_type(const char *fn, const qkv_gguf *g, const gguf_kv *kv, const char *want)
{
    char q[GGUF_QNAME];
    if (kv->type == QKV_GGUF_ARRAY)
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s: key '%s' is an ARRAY of %s, expected %s", fn,
                        g->label, gguf_quote(gguf_str(g, kv->key), q),
                        qkv_gguf_vtype_name(kv->elem), want);
    return qkv_fail(QKV_ERR_FORMAT, "%s: %s: key '%s' is %s, expected %s", fn, g->label,
                    gguf_quote(gguf_str(g, kv->key), q), qkv_gguf_vtype_name(kv->type), want);
}

/* ---- numbers ------------------------------------------------------------------- */

static int is_int_type(qkv_gguf_vtype t)
{
    return t == QKV_GGUF_U8 || t == QKV_GGUF_I8 || t == QKV_GGUF_U16 || t == QKV_GGUF_I16 ||
           t == QKV_GGUF_U32 || t == QKV_GGUF_I32 || t == QKV_GGUF_U64 || t == QKV_GGUF_I64;
}

/* An integer or BOOL at p as int64; 0 if it is a U64 above INT64_MAX. */
static int int_at(qkv_gguf_vtype t, const uint8_t *p, int64_t *v)
{
    uint64_t u;
    switch (t) {
    case QKV_GGUF_U8: case QKV_GGUF_BOOL: *v = p[0]; return 1;
    case QKV_GGUF_I8: *v = (int8_t)p[0]; return 1;
    case QKV_GGUF_U16: *v = gguf_ld16(p); return 1;
    case QKV_GGUF_I16: *v = (int16_t)gguf_ld16(p); return 1;
    case QKV_GGUF_U32: *v = gguf_ld32(p); return 1;
    case QKV_GGUF_I32: *v = (int32_t)gguf_ld32(p); return 1;
    case QKV_GGUF_I64: *v = (int64_t)gguf_ld64(p); return 1;
    case QKV_GGUF_U64:
        u = gguf_ld64(p);
        *v = (int64_t)(u & INT64_MAX);
        return u <= INT64_MAX;
    default: *v = 0; return 0;
    }
}

/* A numeric value at p as a double (64-bit integers rounded). */
static double num_at(qkv_gguf_vtype t, const uint8_t *p)
{
    uint32_t b32;
    uint64_t b64;
    float f;
    double d;
    int64_t v;
    switch (t) {
    case QKV_GGUF_F32:
        b32 = gguf_ld32(p);
        memcpy(&f, &b32, 4);
        return f;
    case QKV_GGUF_F64:
        b64 = gguf_ld64(p);
        memcpy(&d, &b64, 8);
        return d;
    case QKV_GGUF_U64: return (double)gguf_ld64(p);
    default: int_at(t, p, &v); return (double)v;
    }
}

/* d as a float; 0 if it is finite but beyond float's range. */
static int to_float(double d, float *out)
{
    if (isfinite(d) && fabs(d) > FLT_MAX) return 0;
    *out = (float)d;
    return 1;
}

qkv_status qkv_gguf_get_i64(const qkv_gguf *g, const char *key, int64_t *out)
{
    static const char fn[] = "gguf_get_i64";
    const gguf_kv *kv;
    char q[GGUF_QNAME];
    QKV_TRY(find_kv(fn, g, key, &kv));
    QKV_NEED(out, fn, "out");
    if (!is_int_type(kv->type) && kv->type != QKV_GGUF_BOOL)
        return wrong_type(fn, g, kv, "an integer type or BOOL");
    if (!int_at(kv->type, g->base + kv->pos, out))
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s: key '%s' is U64 %llu, above INT64_MAX", fn,
                        g->label, gguf_quote(key, q),
                        (unsigned long long)gguf_ld64(g->base + kv->pos));
    return QKV_OK;
}

qkv_status qkv_gguf_get_f32(const qkv_gguf *g, const char *key, float *out)
{
    static const char fn[] = "gguf_get_f32";
    const gguf_kv *kv;
    char q[GGUF_QNAME];
    QKV_TRY(find_kv(fn, g, key, &kv));
    QKV_NEED(out, fn, "out");
    if (kv->type != QKV_GGUF_F32 && kv->type != QKV_GGUF_F64)
        return wrong_type(fn, g, kv, "F32 or F64");
    double d = num_at(kv->type, g->base + kv->pos);
    if (!to_float(d, out))
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s: key '%s' is F64 %g, beyond float's range", fn,
                        g->label, gguf_quote(key, q), d);
    return QKV_OK;
}

qkv_status qkv_gguf_get_str(const qkv_gguf *g, const char *key, const char **s, size_t *len)
{
    static const char fn[] = "gguf_get_str";
    const gguf_kv *kv;
    QKV_TRY(find_kv(fn, g, key, &kv));
    QKV_NEED(s, fn, "s");
    if (kv->type != QKV_GGUF_STRING) return wrong_type(fn, g, kv, "STRING");
    *s = gguf_str(g, g->soff[kv->str]);
    if (len) *len = (size_t)g->slen[kv->str];
    return QKV_OK;
}

qkv_status qkv_gguf_get_bool(const qkv_gguf *g, const char *key, int *out)
{
    static const char fn[] = "gguf_get_bool";
    const gguf_kv *kv;
    QKV_TRY(find_kv(fn, g, key, &kv));
    QKV_NEED(out, fn, "out");
    if (kv->type != QKV_GGUF_BOOL) return wrong_type(fn, g, kv, "BOOL");
    *out = g->base[kv->pos] != 0;
    return QKV_OK;
}

qkv_status qkv_gguf_get_u64(const qkv_gguf *g, const char *key, uint64_t *out)
{
    static const char fn[] = "gguf_get_u64";
    const gguf_kv *kv;
    char q[GGUF_QNAME];
    QKV_TRY(find_kv(fn, g, key, &kv));
    QKV_NEED(out, fn, "out");
    if (!is_int_type(kv->type) && kv->type != QKV_GGUF_BOOL)
        return wrong_type(fn, g, kv, "an integer type or BOOL");
    int64_t v;
    if (!int_at(kv->type, g->base + kv->pos, &v)) {
        *out = gguf_ld64(g->base + kv->pos); /* a U64 above INT64_MAX */
        return QKV_OK;
    }
    if (v < 0)
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s: key '%s' is %s %lld, negative", fn, g->label,
                        gguf_quote(key, q), qkv_gguf_vtype_name(kv->type), (long long)v);
    *out = (uint64_t)v;
    return QKV_OK;
}

qkv_status qkv_gguf_get_f64(const qkv_gguf *g, const char *key, double *out)
{
    static const char fn[] = "gguf_get_f64";
    const gguf_kv *kv;
    QKV_TRY(find_kv(fn, g, key, &kv));
    QKV_NEED(out, fn, "out");
    if (kv->type != QKV_GGUF_F32 && kv->type != QKV_GGUF_F64)
        return wrong_type(fn, g, kv, "F32 or F64");
    *out = num_at(kv->type, g->base + kv->pos);
    return QKV_OK;
}

/* ---- arrays ----------------------------------------------------------------------- */

/* The ARRAY called key, or an error from fn. */
static qkv_status find_array(const char *fn, const qkv_gguf *g, const char *key,
                             const gguf_kv **kv)
{
    QKV_TRY(find_kv(fn, g, key, kv));
    return (*kv)->type == QKV_GGUF_ARRAY ? QKV_OK : wrong_type(fn, g, *kv, "an ARRAY");
}

qkv_status qkv_gguf_get_array(const qkv_gguf *g, const char *key, qkv_gguf_vtype *elem, int64_t *n)
{
    const gguf_kv *kv;
    QKV_TRY(find_array("gguf_get_array", g, key, &kv));
    if (elem) *elem = kv->elem;
    if (n) *n = kv->n;
    return QKV_OK;
}

qkv_status qkv_gguf_array_str(const qkv_gguf *g, const char *key, int64_t j, const char **s,
                              size_t *len)
{
    static const char fn[] = "gguf_array_str";
    const gguf_kv *kv;
    char q[GGUF_QNAME];
    QKV_TRY(find_array(fn, g, key, &kv));
    QKV_NEED(s, fn, "s");
    if (kv->elem != QKV_GGUF_STRING) return wrong_type(fn, g, kv, "an ARRAY of STRING");
    if (j < 0 || j >= kv->n)
        return qkv_fail(QKV_ERR_ARG, "%s: %s: index %lld outside key '%s' (%lld strings)", fn,
                        g->label, (long long)j, gguf_quote(key, q), (long long)kv->n);
    *s = gguf_str(g, g->soff[kv->str + j]);
    if (len) *len = (size_t)g->slen[kv->str + j];
    return QKV_OK;
}

/* The numeric ARRAY called key for a copy of n elements: found, of an
 * integer type or BOOL (ints_only) or of any numeric type, of length n,
 * dst present. */
static qkv_status numeric_array(const char *fn, const qkv_gguf *g, const char *key, const void *dst,
                                int64_t n, int ints_only, const gguf_kv **kv)
{
    char q[GGUF_QNAME];
    QKV_TRY(find_array(fn, g, key, kv));
    qkv_gguf_vtype e = (*kv)->elem;
    int ok = ints_only ? is_int_type(e) || e == QKV_GGUF_BOOL : is_int_type(e) || e == QKV_GGUF_F32 ||
                                                                e == QKV_GGUF_F64;
    if (!ok)
        return wrong_type(fn, g, *kv, ints_only ? "an ARRAY of an integer type or BOOL"
                                                : "an ARRAY of a numeric type");
    if (n != (*kv)->n)
        return qkv_fail(QKV_ERR_SHAPE, "%s: %s: key '%s' has %lld elements, n is %lld", fn,
                        g->label, gguf_quote(key, q), (long long)(*kv)->n, (long long)n);
    if (!dst && n > 0) return qkv_fail(QKV_ERR_ARG, "%s: dst is NULL", fn);
    return QKV_OK;
}

qkv_status qkv_gguf_array_f32(const qkv_gguf *g, const char *key, float *dst, int64_t n)
{
    static const char fn[] = "gguf_array_f32";
    const gguf_kv *kv;
    char q[GGUF_QNAME];
    QKV_TRY(numeric_array(fn, g, key, dst, n, 0, &kv));
    int sz = gguf_scalar_size(kv->elem);
    const uint8_t *p = g->base + kv->pos;
    if (kv->elem == QKV_GGUF_F32) {
        for (int64_t j = 0; j < n; j++) {
            uint32_t b = gguf_ld32(p + 4 * j);
            memcpy(&dst[j], &b, 4);
        }
        return QKV_OK;
    }
    for (int64_t j = 0; j < n; j++) {
        double d = num_at(kv->elem, p + (size_t)j * (size_t)sz);
        if (!to_float(d, &dst[j]))
            return qkv_fail(QKV_ERR_FORMAT, "%s: %s: element %lld of key '%s' is %g, beyond "
                            "float's range", fn, g->label, (long long)j, gguf_quote(key, q), d);
    }
    return QKV_OK;
}

qkv_status qkv_gguf_array_i32(const qkv_gguf *g, const char *key, int32_t *dst, int64_t n)
{
    static const char fn[] = "gguf_array_i32";
    const gguf_kv *kv;
    char q[GGUF_QNAME];
    QKV_TRY(numeric_array(fn, g, key, dst, n, 1, &kv));
    int sz = gguf_scalar_size(kv->elem);
    const uint8_t *p = g->base + kv->pos;
    for (int64_t j = 0; j < n; j++) {
        int64_t v;
        const uint8_t *e = p + (size_t)j * (size_t)sz;
        if (!int_at(kv->elem, e, &v) || v < INT32_MIN || v > INT32_MAX)
            return qkv_fail(QKV_ERR_FORMAT, "%s: %s: element %lld of key '%s' (%s) is outside "
                            "int32", fn, g->label, (long long)j, gguf_quote(key, q),
                            qkv_gguf_vtype_name(kv->elem));
        dst[j] = (int32_t)v;
    }
    return QKV_OK;
}

/* ---- tensors ------------------------------------------------------------------------ */

int64_t qkv_gguf_tensor_count(const qkv_gguf *g) { return g ? g->n_t : 0; }

const char *qkv_gguf_tensor_name(const qkv_gguf *g, int64_t i)
{
    return g && i >= 0 && i < g->n_t ? gguf_str(g, g->t[i].name) : NULL;
}

int64_t qkv_gguf_tensor_find(const qkv_gguf *g, const char *name)
{
    return g && name ? hash_find(g, &g->t_hash, 1, name) : -1;
}

uint64_t qkv_gguf_tensor_offset(const qkv_gguf *g, int64_t i)
{
    return g && i >= 0 && i < g->n_t ? g->t[i].off : 0;
}

qkv_status qkv_gguf_tensor_info(const qkv_gguf *g, const char *name, qkv_qtype *type, int *ndim,
                                int64_t *dims, const void **data, size_t *nbytes)
{
    static const char fn[] = "gguf_tensor_info";
    char q[GGUF_QNAME];
    if (!g) return qkv_fail(QKV_ERR_ARG, "%s: g is NULL", fn);
    if (!name) return qkv_fail(QKV_ERR_ARG, "%s: name is NULL", fn);
    int64_t i = hash_find(g, &g->t_hash, 1, name);
    if (i < 0)
        return qkv_fail(QKV_ERR_NOTFOUND, "%s: %s: no tensor named '%s'", fn, g->label,
                        gguf_quote(name, q));
    const gguf_tensor *t = &g->t[i];
    if (type) *type = t->type;
    if (ndim) *ndim = t->ndim;
    if (dims) memcpy(dims, t->dims, (size_t)t->ndim * sizeof *dims);
    if (data) *data = g->base + g->data_off + t->off;
    if (nbytes) *nbytes = (size_t)t->nbytes;
    return QKV_OK;
}
