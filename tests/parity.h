/* parity.h: what the parity tests share: a whole file read back, an oracle
 * case file opened with its arena, parameters and generator, a tensor's
 * gradient checked against the oracle's, and the forward and backward of
 * sum(R * y) collected into one buffer to compare two code paths. */
#ifndef QKV_TEST_PARITY_H
#define QKV_TEST_PARITY_H
#include "oracle.h"

/* Opens the oracle's case file path into *st with a new arena *a, and,
 * where p and r are not NULL, a new parameter set *p and a generator *r
 * seeded 1; each a check. 0 when the file does not open (nothing else is
 * made then). */
static inline int h_case_open(const char *path, qkv_safetensors **st, qkv_arena **a, qkv_params **p,
                              qkv_rng *r)
{
    *st = NULL;
    CHECK_OK(qkv_safetensors_open(path, st));
    if (!*st) return 0;
    if (r) qkv_rng_seed(r, 1);
    CHECK_OK(qkv_arena_new(a, 0));
    if (p) CHECK_OK(qkv_params_new(p));
    return 1;
}

/* Frees what h_case_open made (p may be NULL). */
static inline void h_case_close(qkv_safetensors *st, qkv_arena *a, qkv_params *p)
{
    qkv_params_free(p);
    qkv_arena_free(a);
    qkv_safetensors_close(st);
}

/* A whole parity case: the oracle's file, an arena, a parameter set and a
 * generator seeded 1, opened by h_case_begin (0 when the file does not
 * open) and freed by h_case_end. */
typedef struct {
    qkv_safetensors *st;
    qkv_arena *a;
    qkv_params *p;
    qkv_rng r;
} h_case;

static inline int h_case_begin(const char *path, h_case *k)
{
    return h_case_open(path, &k->st, &k->a, &k->p, &k->r);
}

static inline void h_case_end(h_case *k) { h_case_close(k->st, k->a, k->p); }

/* Checks t's gradient against the oracle's tensor "<prefix><name>"
 * (norm-wise relative error <= 1e-4), keeping the worst error in *worst. */
static inline void h_compare_grad(qkv_safetensors *st, qkv_arena *a, const char *file, const char *prefix,
                                  const char *name, const qkv_tensor *t, double *worst)
{
    char g[128];
    snprintf(g, sizeof g, "%s%s", prefix, name);
    float *got = malloc((size_t)qkv_tensor_numel(t) * sizeof *got);
    CHECK_OK(qkv_tensor_read_grad(t, got, qkv_tensor_numel(t)));
    h_compare(file, g, got, h_load(st, a, g, 0), 1e-4, worst);
    free(got);
}

/* h_compare_grad on each of p's tensors, by its name. */
static inline void h_compare_grads(qkv_safetensors *st, qkv_arena *a, const char *file, const char *prefix,
                                   qkv_params *p, double *worst)
{
    for (int i = 0; i < qkv_params_count(p); i++)
        h_compare_grad(st, a, file, prefix, qkv_params_at(p, i)->name, qkv_params_at(p, i), worst);
}

/* Appends t's n values to buf at *at. */
static inline void h_append(float *buf, int64_t *at, const float *t, int64_t n)
{
    memcpy(buf + *at, t, (size_t)n * sizeof(float));
    *at += n;
}

/* fwd's output y, then the gradients of sum(R * y) (R uniform in [-1, 1)
 * from seed) of ins[0..n_ins) (NULL ones skipped) and of p's tensors (p
 * may be NULL), each zeroed first, into buf in that order: one run of two
 * code paths compared value for value. The count of values written (0
 * when fwd gave no output). */
static inline int64_t h_collect(qkv_status (*fwd)(qkv_ctx *, void *, qkv_tensor **), void *user,
                                qkv_tensor *const *ins, int n_ins, qkv_params *p, uint64_t seed, float *buf)
{
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    if (p) qkv_params_zero_grad(p);
    for (int i = 0; i < n_ins; i++)
        if (ins[i]) memset(ins[i]->grad, 0, (size_t)qkv_tensor_numel(ins[i]) * sizeof(float));
    qkv_tensor *y = NULL;
    int64_t n = 0;
    CHECK_OK(fwd(c, user, &y));
    if (y) {
        int64_t ny = qkv_tensor_numel(y);
        float *R = malloc((size_t)ny * sizeof *R);
        qkv_rng r;
        qkv_rng_seed(&r, seed);
        qkv_rng_fill_uniform(&r, R, ny, -1, 1);
        h_append(buf, &n, y->data, ny);
        CHECK_OK(qkv_backward(c, y, R));
        free(R);
        for (int i = 0; i < n_ins; i++)
            if (ins[i]) h_append(buf, &n, ins[i]->grad, qkv_tensor_numel(ins[i]));
        for (int i = 0; p && i < qkv_params_count(p); i++)
            h_append(buf, &n, qkv_params_at(p, i)->grad, qkv_tensor_numel(qkv_params_at(p, i)));
    }
    qkv_ctx_free(c);
    return n;
}

#endif
