/* params.c: the persistent, named parameter store.
 * Parameters and their gradients come from one arena that is never reset, in
 * large chunks; names are PyTorch state_dict keys. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/internal.h"

struct qkv_params {
    qkv_arena *mem;
    qkv_tensor **items;
    int n, cap;
};

qkv_status qkv_params_new(qkv_params **out)
{
    QKV_NEED(out, "params_new", "out");
    *out = NULL;
    qkv_params *p = calloc(1, sizeof *p);
    if (!p) return qkv_fail(QKV_ERR_NOMEM, "params_new: out of memory");
    qkv_status s = qkv_arena_new(&p->mem, (size_t)16 << 20);
    if (s != QKV_OK) {
        free(p);
        return s;
    }
    *out = p;
    return QKV_OK;
}

void qkv_params_free(qkv_params *p)
{
    if (!p) return;
    qkv_arena_free(p->mem);
    free(p->items);
    free(p);
}

/* A new entry: a parameter (trainable) or a buffer; fn names the caller. */
static qkv_status params_add_entry(const char *fn, qkv_params *p, const char *prefix,
                                   const char *name, int ndim, const int64_t *shape, int trainable,
                                   qkv_tensor **out)
{
    QKV_NEED(out, fn, "out");
    *out = NULL;
    QKV_NEED(p, fn, "params");
    QKV_NEED(name, fn, "name");
    if (!prefix) prefix = "";
    size_t len = strlen(prefix) + strlen(name);
    if (len == 0) return qkv_fail(QKV_ERR_ARG, "%s: empty name", fn);
    char *full = qkv_arena_alloc(p->mem, len + 1);
    if (!full) return QKV_ERR_NOMEM;
    snprintf(full, len + 1, "%s%s", prefix, name);
    if (qkv_params_find(p, full))
        return qkv_fail(QKV_ERR_ARG, "%s: parameter '%s' already exists", fn, full);
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 32;
        qkv_tensor **items = realloc(p->items, (size_t)cap * sizeof *items);
        if (!items) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
        p->items = items;
        p->cap = cap;
    }
    qkv_tensor *t;
    QKV_TRY(qkv_tensor_new(p->mem, QKV_F32, ndim, shape, &t));
    if (!qkv_tensor_grad(p->mem, t)) return QKV_ERR_NOMEM;
    t->requires_grad = trainable != 0;
    t->name = full;
    p->items[p->n++] = t;
    *out = t;
    return QKV_OK;
}

qkv_status qkv_params_add(qkv_params *p, const char *prefix, const char *name, int ndim,
                          const int64_t *shape, qkv_tensor **out)
{
    return qkv_fail_in("params_add", params_add_entry("params_add", p, prefix, name, ndim, shape, 1, out));
}

/* A buffer is an entry with requires_grad 0: it keeps a (zero) gradient
 * buffer so that every loop over the store stays uniform, ops record no
 * gradient path to it, and the optimizers skip it. */
qkv_status qkv_params_add_buffer(qkv_params *p, const char *prefix, const char *name, int ndim,
                                 const int64_t *shape, qkv_tensor **out)
{
    static const char fn[] = "params_add_buffer";
    return qkv_fail_in(fn, params_add_entry(fn, p, prefix, name, ndim, shape, 0, out));
}

int qkv_params_count(const qkv_params *p) { return p ? p->n : 0; }

qkv_tensor *qkv_params_at(qkv_params *p, int i)
{
    return (p && i >= 0 && i < p->n) ? p->items[i] : NULL;
}

qkv_tensor *qkv_params_find(qkv_params *p, const char *name)
{
    if (!p || !name) return NULL;
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->items[i]->name, name) == 0) return p->items[i];
    return NULL;
}

int64_t qkv_params_numel(const qkv_params *p)
{
    int64_t n = 0;
    for (int i = 0; p && i < p->n; i++) n += qkv_tensor_numel(p->items[i]);
    return n;
}

int64_t qkv_params_numel_trainable(const qkv_params *p)
{
    int64_t n = 0;
    for (int i = 0; p && i < p->n; i++)
        if (p->items[i]->requires_grad) n += qkv_tensor_numel(p->items[i]);
    return n;
}

void qkv_params_zero_grad(qkv_params *p)
{
    if (!p) return;
    /* one parallel region for all the tensors, each shared out by `omp for` */
#pragma omp parallel if (qkv_params_numel(p) >= QKV_PAR_MIN)
    for (int i = 0; i < p->n; i++) {
        float *g = p->items[i]->grad;
        int64_t n = qkv_tensor_numel(p->items[i]);
#pragma omp for nowait
        for (int64_t j = 0; j < n; j++) g[j] = 0.0f;
    }
}
