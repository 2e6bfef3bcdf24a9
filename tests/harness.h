/* A minimal test harness: CHECK counts passes and failures (atomically:
 * tests check from OpenMP threads too), and each test
 * program ends with "NAME: N passed, N failed" (tests/run_all.sh sums them). */
#ifndef QKV_TEST_HARNESS_H
#define QKV_TEST_HARNESS_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "qkv.h"

static int h_pass, h_fail;

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (cond) {                                                           \
            __atomic_fetch_add(&h_pass, 1, __ATOMIC_RELAXED);                 \
        } else {                                                              \
            __atomic_fetch_add(&h_fail, 1, __ATOMIC_RELAXED);                 \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);              \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
        }                                                                     \
    } while (0)

/* A call that must succeed; on failure prints the library's message. */
#define CHECK_OK(expr)                                                        \
    do {                                                                      \
        qkv_status st_ = (expr);                                              \
        CHECK(st_ == QKV_OK, "%s -> %s: %s", #expr, qkv_status_name(st_),     \
              qkv_last_error());                                              \
    } while (0)

/* A call that must fail with status want and a message containing needle. */
#define CHECK_ERR(expr, want, needle)                                         \
    do {                                                                      \
        qkv_status st_ = (expr);                                              \
        CHECK(st_ == (want) && strstr(qkv_last_error(), (needle)) != NULL,    \
              "%s -> %s \"%s\", wanted %s with \"%s\"", #expr,                \
              qkv_status_name(st_), qkv_last_error(), qkv_status_name(want),  \
              (needle));                                                      \
    } while (0)

/* In a function returning qkv_status: a call that returns its status on
 * failure (a test's forward callbacks and setup). */
#define TRY(expr)                                                             \
    do {                                                                      \
        qkv_status s_ = (expr);                                               \
        if (s_ != QKV_OK) return s_;                                          \
    } while (0)

/* Relative error of a against the reference b, norm-wise:
 * max_i |a_i - b_i| / max_i |b_i| (the infinity norm, so elements that come
 * out of cancellation are judged at the tensor's scale). NaN if either
 * holds a NaN; 0 for two all-zero tensors. */
static inline double h_rel_err(const float *a, const float *b, int64_t n)
{
    double diff = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return NAN;
        diff = fmax(diff, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    return diff == 0 ? 0 : diff / (scale > 0 ? scale : 1e-30);
}

/* The whole of path, NUL-terminated (NULL when it cannot be read); its
 * size in *n (n may be NULL; 0 when unread). */
static inline char *h_slurp(const char *path, size_t *n)
{
    if (n) *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, k = 0;
    char *b = malloc(cap);
    while (b && (k += fread(b + k, 1, cap - k - 1, f)) == cap - 1) {
        char *b2 = realloc(b, cap * 2);
        if (!b2) free(b);
        b = b2, cap *= 2;
    }
    fclose(f);
    if (b) b[k] = 0;
    if (n) *n = k;
    return b;
}

/* h_slurp of dir/name (void *: the caller reads floats, ids or text). */
static inline void *h_slurp_at(const char *dir, const char *name, size_t *n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return h_slurp(path, n);
}

/* The index of x's largest value (the first of equals), n >= 1. */
static inline int64_t h_argmax(const float *x, int64_t n)
{
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* What most op tests start with: a parameter set, an arena, a context and
 * a generator seeded with seed (h_env_begin; each a check), all freed by
 * h_env_end. */
typedef struct {
    qkv_params *p;
    qkv_arena *a;
    qkv_ctx *c;
    qkv_rng r;
} h_env;

static inline void h_env_begin(h_env *e, uint64_t seed)
{
    qkv_rng_seed(&e->r, seed);
    CHECK_OK(qkv_params_new(&e->p));
    CHECK_OK(qkv_arena_new(&e->a, 0));
    CHECK_OK(qkv_ctx_new(&e->c));
}

static inline void h_env_end(h_env *e)
{
    qkv_ctx_free(e->c);
    qkv_arena_free(e->a);
    qkv_params_free(e->p);
}

/* Deletes the temporary folder dir with what it holds (a note when it
 * cannot). */
static inline void h_tmpdir_remove(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static inline int h_finish(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, h_pass, h_fail);
    return h_fail ? 1 : 0;
}
#endif
