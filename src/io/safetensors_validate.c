/* safetensors_validate.c: the safetensors header, read and checked.
 *
 * Everything is validated before a table is handed out: JSON syntax (the
 * strict reader in json.c), each entry's fields (dtype, shape,
 * data_offsets, nothing else), that each entry's byte range matches its
 * dtype and shape, that names are unique, and that the tensors tile the
 * data buffer exactly (no overlaps, no holes). The accessors can then trust
 * the table, and a hostile file can at worst be rejected.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "io/safetensors_internal.h"

/* The reference implementation's limit; it keeps a hostile length from
 * turning into a huge allocation before anything is checked. */
#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

/* ---- the header's pieces ---------------------------------------------- */

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
        if (strlen(st_dtype_name((qkv_st_dtype)i)) == v->u.str.len &&
            strcmp(st_dtype_name((qkv_st_dtype)i), v->u.str.s) == 0) {
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
    uint64_t want = st_nbytes(t->shape, t->ndim, st_dtype_size(t->dtype), &ok);
    st_shape_str(t->shape, t->ndim, sh, sizeof sh);
    if (!ok)
        return st_fail(w, QKV_ERR_FORMAT, "tensor '%s' shape %s with dtype %s is too large",
                       st_quote(t->name, q), sh, st_dtype_name(t->dtype));
    if (t->end - t->begin != want)
        return st_fail(w, QKV_ERR_FORMAT,
                       "tensor '%s' data_offsets [%llu,%llu] do not match dtype %s and shape %s "
                       "(%llu bytes)",
                       st_quote(t->name, q), (unsigned long long)t->begin,
                       (unsigned long long)t->end, st_dtype_name(t->dtype), sh,
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

/* ---- whole-table checks ----------------------------------------------- */

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

qkv_status st_parse_header(const st_where *w, const char *hdr, size_t hlen, qkv_safetensors *st)
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

/* ---- the length prefix ------------------------------------------------ */

qkv_status st_check_prefix(const st_where *w, const uint8_t prefix[8], uint64_t total,
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
