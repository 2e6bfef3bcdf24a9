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

static inline int h_finish(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, h_pass, h_fail);
    return h_fail ? 1 : 0;
}
#endif
