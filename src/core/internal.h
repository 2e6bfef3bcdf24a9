/* internal.h: what the library's own files share and users never see. */
#ifndef QKV_INTERNAL_H
#define QKV_INTERNAL_H
#include "qkv.h"

/* Sets the thread's error message (printf-style) and returns s. */
qkv_status qkv_fail(qkv_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* A public function that hands its work to another: s unchanged, and a
 * failure's message prefixed with "fn: " unless it already starts so, so
 * that it names the function the caller called. */
qkv_status qkv_fail_in(const char *fn, qkv_status s);

/* Checks that a pointer argument is present: in function fn, argument arg. */
#define QKV_NEED(ptr, fn, arg)                                                  \
    do {                                                                        \
        if ((ptr) == NULL) return qkv_fail(QKV_ERR_ARG, "%s: %s is NULL", fn, arg); \
    } while (0)

/* An op's first checks, in this order: its output pointer out (argument
 * arg of fn; then *out = NULL, so that every failure leaves it NULL) and
 * its context c. */
#define QKV_NEED_OUT_CTX(out, c, fn, arg)                                       \
    do {                                                                        \
        QKV_NEED(out, fn, arg);                                                 \
        *(out) = NULL;                                                          \
        QKV_NEED(c, fn, "ctx");                                                 \
    } while (0)

#define QKV_TRY(expr)                                                           \
    do {                                                                        \
        qkv_status s_ = (expr);                                                 \
        if (s_ != QKV_OK) return s_;                                            \
    } while (0)

/* The start of a backward with one input x of the output y: declares dy,
 * y's gradient, and dx, x's (allocated on first use), and returns QKV_OK
 * when there is nothing to do (y got no gradient, x needs none). */
#define QKV_BACKWARD_ONE(c, y, x, dy, dx)                                       \
    const float *dy = (y)->grad;                                                \
    if (!dy || !(x)->requires_grad) return QKV_OK;                              \
    float *dx = qkv_tensor_grad(qkv_ctx_arena(c), (x));                         \
    if (!dx) return QKV_ERR_NOMEM

/* Elementwise and row loops over at least this many elements run on
 * OpenMP's threads (#pragma omp parallel for if (n >= QKV_PAR_MIN));
 * below it, waking the team costs more than it saves. Each element (or
 * row) is computed as it would be on one thread, so results do not depend
 * on the thread count. */
#define QKV_PAR_MIN 32768

/* QKV_PAR_FOR(cond, for-statement): the loop on OpenMP's threads
 * (`#pragma omp parallel for`) when cond holds, a plain loop otherwise.
 * OpenMP's own `if (cond)` clause is not enough: false, it still enters
 * the runtime, which makes and frees a team of one thread (about 0.4 us a
 * loop on this machine; a decoding step ran some 300 such small loops).
 * QKV_PAR_FOR_WITH(cond, clauses, for-statement) adds clauses to the
 * pragma (collapse(3), num_threads(n), ...). The statement's own last
 * semicolon is left out: QKV_PAR_FOR(n >= QKV_PAR_MIN, for (...) y[i] = 0). */
#define QKV_PRAGMA(x) _Pragma(#x)
#define QKV_PAR_FOR_WITH(cond, clauses, ...)                                  \
    do {                                                                        \
        if (cond) {                                                             \
            QKV_PRAGMA(omp parallel for clauses)                                \
            __VA_ARGS__;                                                        \
        } else {                                                                \
            __VA_ARGS__;                                                        \
        }                                                                       \
    } while (0)
#define QKV_PAR_FOR(cond, ...) QKV_PAR_FOR_WITH(cond, , __VA_ARGS__)

/* ---- the tape ---------------------------------------------------------- */

/* A recorded op: its backward reads the saved state and adds into the
 * gradients of its inputs (allocated on demand with qkv_tensor_grad). */
typedef qkv_status (*qkv_backward_fn)(qkv_ctx *c, void *saved);

/* True when an op with these inputs must be recorded. */
int qkv_ctx_recording(const qkv_ctx *c, qkv_tensor *const *inputs, int n);
/* Records backward(saved); saved must live in the ctx's arena. */
qkv_status qkv_ctx_record(qkv_ctx *c, qkv_backward_fn backward, void *saved);
uint64_t qkv_ctx_seed(const qkv_ctx *c);
/* The sum across processes qkv_ctx_set_batch_sum set (NULL: none), its user in *user. */
qkv_batch_sum_fn qkv_ctx_batch_sum(const qkv_ctx *c, void **user);
/* A fresh seed for the next random op of this step (counter-based). */
uint64_t qkv_ctx_next_seed(qkv_ctx *c);

/* The bf16 weights (qkv/nn.h) qkv_linear uses while a cached forward
 * runs (src/models/kvcache.c sets them from its cache, NULL after);
 * _set returns the ones it replaces. */
const struct qkv_bf16_weights *qkv_ctx_bf16_weights(const qkv_ctx *c);
const struct qkv_bf16_weights *qkv_ctx_set_bf16_weights(qkv_ctx *c,
                                                        const struct qkv_bf16_weights *w);
/* Appends an attention map to the ctx's captured list (qkv_ctx_set_capture). */
qkv_status qkv_ctx_capture_add(qkv_ctx *c, qkv_tensor *weights);

/* Allocation from the ctx's arena that sets the error on failure. */
void *qkv_ctx_alloc(qkv_ctx *c, size_t bytes);
/* A new F32 output tensor; requires_grad set when rec. */
qkv_status qkv_ctx_tensor(qkv_ctx *c, int ndim, const int64_t *shape, int rec,
                          qkv_tensor **out);

/* The same without zero-filling, for buffers and outputs that the op
 * writes in full before anything reads them (an arena's memory holds the
 * previous step's values: every element must be written). Built with
 * -DQKV_POISON, the memory is filled with NaN instead, so that a test
 * catches an element left unwritten. */
void *qkv_arena_alloc_uninit(qkv_arena *a, size_t bytes);
qkv_status qkv_tensor_new_uninit(qkv_arena *a, int ndim, const int64_t *shape, qkv_tensor **out);
void *qkv_ctx_alloc_uninit(qkv_ctx *c, size_t bytes);
qkv_status qkv_ctx_tensor_uninit(qkv_ctx *c, int ndim, const int64_t *shape, int rec,
                                 qkv_tensor **out);
/* t's gradient buffer like qkv_tensor_grad, but when it has to be
 * allocated it is not zeroed and *fresh is set to 1 (else 0): the caller
 * then writes it in full (a GEMM with beta = 0) instead of adding. */
float *qkv_tensor_grad_fresh(qkv_arena *a, qkv_tensor *t, int *fresh);

/* ---- small helpers ----------------------------------------------------- */

/* Counter-based uniform in [0,1) from (seed, index): dropout masks that the
 * backward can recompute without storing them. */
static inline float qkv_hash_uniform(uint64_t seed, uint64_t idx)
{
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (idx + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

/* The tensor's element data (resolving views). */
static inline float *qkv_data(const qkv_tensor *t) { return t->data; }

#endif
