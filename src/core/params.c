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

qkv_status qkv_params_add(qkv_params *p, const char *prefix, const char *name, int ndim,
                          const int64_t *shape, qkv_tensor **out)
{
    QKV_NEED(out, "params_add", "out");
    *out = NULL;
    QKV_NEED(p, "params_add", "params");
    QKV_NEED(name, "params_add", "name");
    if (!prefix) prefix = "";
    size_t len = strlen(prefix) + strlen(name);
    if (len == 0) return qkv_fail(QKV_ERR_ARG, "params_add: empty name");
    char *full = qkv_arena_alloc(p->mem, len + 1);
    if (!full) return QKV_ERR_NOMEM;
    snprintf(full, len + 1, "%s%s", prefix, name);
    if (qkv_params_find(p, full))
        return qkv_fail(QKV_ERR_ARG, "params_add: parameter '%s' already exists", full);
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 32;
        qkv_tensor **items = realloc(p->items, (size_t)cap * sizeof *items);
        if (!items) return qkv_fail(QKV_ERR_NOMEM, "params_add: out of memory");
        p->items = items;
        p->cap = cap;
    }
    qkv_tensor *t;
    QKV_TRY(qkv_tensor_new(p->mem, QKV_F32, ndim, shape, &t));
    if (!qkv_tensor_grad(p->mem, t)) return QKV_ERR_NOMEM;
    t->requires_grad = 1;
    t->name = full;
    p->items[p->n++] = t;
    *out = t;
    return QKV_OK;
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

void qkv_params_zero_grad(qkv_params *p)
{
    for (int i = 0; p && i < p->n; i++) {
        float *g = p->items[i]->grad;
        int64_t n = qkv_tensor_numel(p->items[i]);
#pragma omp parallel for if (n >= QKV_PAR_MIN)
        for (int64_t j = 0; j < n; j++) g[j] = 0.0f;
    }
}
