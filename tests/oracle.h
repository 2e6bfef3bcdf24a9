/* oracle.h: reading the files that the PyTorch oracles in tools/ write. */
#ifndef QKV_TEST_ORACLE_H
#define QKV_TEST_ORACLE_H
#include "harness.h"

/* A tensor of the file as a new tensor in a: BOOL and I64 as stored, every
 * other dtype as F32 (with a gradient buffer and requires_grad when grad).
 * NULL when absent. */
static inline qkv_tensor *h_load(qkv_safetensors *st, qkv_arena *a, const char *name, int grad)
{
    qkv_st_dtype dt;
    int nd;
    int64_t shape[8];
    const void *data;
    size_t nbytes;
    if (qkv_safetensors_info(st, name, &dt, &nd, shape, &data, &nbytes) != QKV_OK) return NULL;
    qkv_dtype kind = dt == QKV_ST_BOOL ? QKV_BOOL : dt == QKV_ST_I64 ? QKV_I64 : QKV_F32;
    qkv_tensor *t = NULL;
    if (nd > QKV_MAX_DIMS || qkv_tensor_new(a, kind, nd, shape, &t) != QKV_OK) return NULL;
    if (kind == QKV_BOOL) memcpy(t->mask, data, nbytes);
    else if (kind == QKV_I64) memcpy(t->idx, data, nbytes);
    else if (qkv_safetensors_read_f32(st, name, t->data, qkv_tensor_numel(t)) != QKV_OK) return NULL;
    if (grad && kind == QKV_F32) {
        qkv_tensor_grad(a, t);
        t->requires_grad = 1;
    }
    return t;
}

/* A __metadata__ value as a number (0 when absent). */
static inline int64_t h_meta_int(qkv_safetensors *st, const char *key)
{
    const char *v = qkv_safetensors_meta(st, key);
    return v ? atoll(v) : 0;
}

static inline double h_meta_float(qkv_safetensors *st, const char *key)
{
    const char *v = qkv_safetensors_meta(st, key);
    return v ? atof(v) : 0.0;
}
#endif
