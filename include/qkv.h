/* qkv.h: the public interface of libqkv, attention and transformers in C11.
 *
 * Conventions (docs/core.md explains them in full):
 *  - Every public call returns a qkv_status; on failure qkv_last_error()
 *    says what was wrong and with which argument and shapes. The library never
 *    exits and never prints.
 *  - Tensors are dense, row-major, up to 4 dims, in PyTorch's dim order.
 *  - Ops take a qkv_ctx: outputs come from its activation arena (reset every
 *    step with qkv_ctx_reset) and, when any input needs a gradient, the op is
 *    recorded on the ctx's tape. qkv_backward runs the tape in reverse.
 *  - Parameters live in a qkv_params store, which outlives steps, keeps
 *    PyTorch state_dict names and holds their gradients.
 */
#ifndef QKV_H
#define QKV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* QKV_API marks what libqkv.so (and libqkv-plot.so) export: every function
 * declared in include/. The libraries are built with -fvisibility=hidden, so
 * anything not marked stays inside them (docs/core.md, "The shared library:
 * what it exports"). */
#ifndef QKV_API
#if defined(__GNUC__) || defined(__clang__)
#define QKV_API __attribute__((visibility("default")))
#else
#define QKV_API
#endif
#endif

/* QKV_DEPRECATED("qkv_new_name") marks an old name kept as an alias of its
 * new one until the next major version (docs/core.md, "Names"): it still
 * links, and a call warns with the name to use instead. */
#ifndef QKV_DEPRECATED
#if defined(__GNUC__) || defined(__clang__)
#define QKV_DEPRECATED(new_name) __attribute__((deprecated("use " new_name)))
#else
#define QKV_DEPRECATED(new_name)
#endif
#endif

/* The library's version (qkv.pc says the same); qkv_version() gives the
 * version of the library actually linked. */
#define QKV_VERSION "0.2.0"
QKV_API const char *qkv_version(void);

/* ---- status and errors ------------------------------------------------ */

typedef enum {
    QKV_OK = 0,
    QKV_ERR_ARG,    /* a NULL pointer or a bad option value */
    QKV_ERR_SHAPE,  /* ranks or sizes that do not fit together */
    QKV_ERR_DTYPE,  /* a tensor of the wrong element type */
    QKV_ERR_NOMEM,  /* an allocation failed */
    QKV_ERR_IO,     /* a file could not be opened, read or written */
    QKV_ERR_FORMAT, /* a file's contents are malformed */
    QKV_ERR_STATE,  /* a call made in the wrong order */
    QKV_ERR_NOTFOUND
} qkv_status;

/* The message of the last failed call on this thread ("" if none). */
QKV_API const char *qkv_last_error(void);
QKV_API const char *qkv_status_name(qkv_status s);

/* ---- memory: arenas --------------------------------------------------- */

/* A bump allocator over large chunks. Pointers stay valid until
 * qkv_arena_reset (which keeps the chunks for reuse) or qkv_arena_free. */
typedef struct qkv_arena qkv_arena;
QKV_API qkv_status qkv_arena_new(qkv_arena **out, size_t chunk_bytes);
QKV_API void qkv_arena_free(qkv_arena *a);
QKV_API void qkv_arena_reset(qkv_arena *a);
/* 64-byte aligned, zero-filled; NULL (with the error set) when out of memory. */
QKV_API void *qkv_arena_alloc(qkv_arena *a, size_t bytes);
QKV_API size_t qkv_arena_used(const qkv_arena *a);  /* bytes handed out since reset */
QKV_API size_t qkv_arena_peak(const qkv_arena *a);  /* most bytes ever handed out at once */
/* Scratch: mark the arena, allocate, then release back to the mark, which
 * frees everything allocated after it (in LIFO order, like a stack). */
typedef struct {
    void *chunk;
    size_t used, total;
} qkv_arena_mark;
QKV_API qkv_arena_mark qkv_arena_get_mark(const qkv_arena *a);
QKV_API void qkv_arena_release(qkv_arena *a, qkv_arena_mark m);

/* ---- tensors ---------------------------------------------------------- */

#define QKV_MAX_DIMS 4

typedef enum { QKV_F32 = 0, QKV_BOOL = 1, QKV_I64 = 2 } qkv_dtype;

typedef struct qkv_tensor qkv_tensor;
struct qkv_tensor {
    qkv_dtype dtype;
    int ndim;
    int64_t shape[QKV_MAX_DIMS];
    float *data;      /* F32 elements, or NULL for BOOL tensors */
    uint8_t *mask;    /* BOOL elements (0 or 1), or NULL */
    int64_t *idx;     /* I64 elements (token ids, class labels), or NULL */
    float *grad;      /* same size as data; NULL until a gradient is needed */
    int requires_grad;
    /* A view shares data (and gradient) with base, starting at offset. */
    qkv_tensor *base;
    int64_t offset;
    const char *name; /* parameters: their state_dict key */
    /* An op's recorded output: the ctx graph that made it, so that
     * qkv_backward refuses it once that graph is consumed or reset; 0 for
     * leaves (parameters, inputs, views). */
    uint64_t graph;
};

QKV_API int64_t qkv_tensor_numel(const qkv_tensor *t);
/* "(2,3,4)" into buf; returns buf. */
QKV_API const char *qkv_shape_str(const qkv_tensor *t, char *buf, size_t n);

/* A new zero-filled tensor from the arena. shape has ndim entries. */
QKV_API qkv_status qkv_tensor_new(qkv_arena *a, qkv_dtype dtype, int ndim, const int64_t *shape,
                                  qkv_tensor **out);
/* A tensor over caller-owned memory (no copy); for inputs and masks. */
QKV_API qkv_status qkv_tensor_wrap(qkv_arena *a, float *data, int ndim, const int64_t *shape,
                                   qkv_tensor **out);
QKV_API qkv_status qkv_tensor_wrap_bool(qkv_arena *a, uint8_t *mask, int ndim, const int64_t *shape,
                                        qkv_tensor **out);
QKV_API qkv_status qkv_tensor_wrap_i64(qkv_arena *a, int64_t *idx, int ndim, const int64_t *shape,
                                       qkv_tensor **out);
/* A view with another shape over the same elements (a reshape). */
QKV_API qkv_status qkv_tensor_view(qkv_arena *a, qkv_tensor *t, int ndim, const int64_t *shape,
                                   qkv_tensor **out);
/* A view of rows [start, start+len) along dim 0 (contiguous, so a view). */
QKV_API qkv_status qkv_tensor_narrow(qkv_arena *a, qkv_tensor *t, int64_t start, int64_t len,
                                     qkv_tensor **out);
/* The tensor's gradient buffer, allocated zeroed from the arena if absent
 * (views resolve to their base's gradient). */
QKV_API float *qkv_tensor_grad(qkv_arena *a, qkv_tensor *t);
/* x.requires_grad_(requires_grad): whether ops record a gradient path back
 * to this tensor (an input you want d(loss)/d(input) for; parameters have
 * it set by qkv_params_add). F32 tensors only, not views (set it on the
 * tensor viewed). Set it before the forward: ops see it when they run. */
QKV_API qkv_status qkv_tensor_set_requires_grad(qkv_tensor *t, int requires_grad);
/* After qkv_backward: copies t's gradient into dst (n = t's element
 * count). A gradient never produced (t did not require one, or no path led
 * from it to the output, PyTorch's None) reads as zeros. t->grad is the
 * same buffer, or NULL when none was produced. */
QKV_API qkv_status qkv_tensor_read_grad(const qkv_tensor *t, float *dst, int64_t n);

/* ---- random numbers --------------------------------------------------- */

/* xoshiro256** seeded through splitmix64: reproducible across platforms. */
typedef struct { uint64_t s[4]; } qkv_rng;
QKV_API void qkv_rng_seed(qkv_rng *r, uint64_t seed);
QKV_API uint64_t qkv_rng_next(qkv_rng *r);
QKV_API float qkv_rng_uniform(qkv_rng *r);                  /* [0,1) */
QKV_API float qkv_rng_normal(qkv_rng *r);                   /* N(0,1) */
QKV_API void qkv_rng_fill_uniform(qkv_rng *r, float *x, int64_t n, float lo, float hi);
QKV_API void qkv_rng_fill_normal(qkv_rng *r, float *x, int64_t n, float mean, float std);

/* PyTorch's initialisers (torch.nn.init), same distributions and fans. */
QKV_API qkv_status qkv_init_xavier_uniform(qkv_rng *r, qkv_tensor *t, float gain);
QKV_API qkv_status qkv_init_xavier_normal(qkv_rng *r, qkv_tensor *t, float gain);
/* kaiming_uniform_(a=sqrt(5)) as nn.Linear uses: U(-1/sqrt(fan_in), 1/sqrt(fan_in)). */
QKV_API qkv_status qkv_init_linear_default(qkv_rng *r, qkv_tensor *t);
QKV_API qkv_status qkv_init_uniform(qkv_rng *r, qkv_tensor *t, float lo, float hi);
QKV_API qkv_status qkv_init_constant(qkv_tensor *t, float v);

/* ---- parameters ------------------------------------------------------- */

/* Named, persistent parameters with gradients, in one store. */
typedef struct qkv_params qkv_params;
QKV_API qkv_status qkv_params_new(qkv_params **out);
QKV_API void qkv_params_free(qkv_params *p);
/* A new zeroed parameter named prefix+name with a zeroed gradient. */
QKV_API qkv_status qkv_params_add(qkv_params *p, const char *prefix, const char *name, int ndim,
                                  const int64_t *shape, qkv_tensor **out);
/* A buffer (PyTorch's register_buffer: BatchNorm's running_mean,
 * running_var, num_batches_tracked): a zeroed, named F32 entry of the same
 * store with requires_grad 0. It saves and loads with the state_dict and
 * checkpoint functions like a parameter (loading also accepts an integer
 * dtype, as num_batches_tracked is int64 in PyTorch's files); ops record no
 * gradient for it and the optimizers leave it alone; modules update it. */
QKV_API qkv_status qkv_params_add_buffer(qkv_params *p, const char *prefix, const char *name,
                                         int ndim, const int64_t *shape, qkv_tensor **out);
QKV_API int qkv_params_count(const qkv_params *p);
QKV_API qkv_tensor *qkv_params_at(qkv_params *p, int i);
QKV_API qkv_tensor *qkv_params_find(qkv_params *p, const char *name);
QKV_API int64_t qkv_params_numel(const qkv_params *p); /* every entry, buffers too */
/* The trainable elements only (requires_grad set): PyTorch's
 * sum(p.numel() for p in model.parameters()). */
QKV_API int64_t qkv_params_numel_trainable(const qkv_params *p);
QKV_API void qkv_params_zero_grad(qkv_params *p);

/* ---- context: arena + tape ------------------------------------------- */

typedef struct qkv_ctx qkv_ctx;
QKV_API qkv_status qkv_ctx_new(qkv_ctx **out);
QKV_API void qkv_ctx_free(qkv_ctx *c);
/* Drops the tape and every activation of the step; parameters stay. */
QKV_API void qkv_ctx_reset(qkv_ctx *c);
QKV_API qkv_arena *qkv_ctx_arena(qkv_ctx *c);
/* Training mode turns dropout on (default: off, as after module.eval()). */
QKV_API void qkv_ctx_set_training(qkv_ctx *c, int training);
QKV_API int qkv_ctx_training(const qkv_ctx *c);
/* Seeds the counter-based RNG that dropout masks are drawn from. */
QKV_API void qkv_ctx_set_seed(qkv_ctx *c, uint64_t seed);
/* A sum across the processes that train one batch together, each on its
 * rows (data-parallel training with synchronised BatchNorm, PyTorch's
 * SyncBatchNorm): fn sums x (n doubles) over them in place, every process
 * getting the same sum. weighted 0: the plain sum (a forward's
 * statistics); 1 (a backward's): sum_r w_r x_r / w_me, w_r the weight the
 * gradients of process r get when they are averaged (its share of the
 * batch). While set, BatchNorm in training mode normalises with the
 * statistics of every process's rows together. NULL (the default): this
 * process's rows only. qkv_train sets it for qkv_trainer.sync_batchnorm. */
typedef qkv_status (*qkv_batch_sum_fn)(void *user, double *x, int64_t n, int weighted);
QKV_API void qkv_ctx_set_batch_sum(qkv_ctx *c, qkv_batch_sum_fn fn, void *user);
/* With grad off (like torch.no_grad) ops record nothing. Default: on. */
QKV_API void qkv_ctx_set_grad(qkv_ctx *c, int enabled);
/* Attention capture, for figures and the explorer: while on, every
 * MultiheadAttention forward run on c (so every transformer layer's
 * self- and cross-attention, in the order they run) also keeps its per-head
 * weights (N,H,L,S), post-dropout, in c's arena, whatever need_weights
 * says; qkv_ctx_captured(c, i) gives the i-th (NULL out of range). The
 * list empties at qkv_ctx_reset. Costs the O(L*S) weights per attention.
 * The KV-cache (decoding) forwards capture nothing. Default: off. */
QKV_API void qkv_ctx_set_capture(qkv_ctx *c, int on);
QKV_API int qkv_ctx_capturing(const qkv_ctx *c);
QKV_API int qkv_ctx_captured_count(const qkv_ctx *c);
QKV_API qkv_tensor *qkv_ctx_captured(const qkv_ctx *c, int i);
/* Matmul precision, like PyTorch's torch.autocast("cpu", dtype=torch.bfloat16)
 * for its matmuls: under QKV_BF16 the products of Linear (forward and both
 * backward products), of qkv_bmm (and the score functions' batched
 * products) and of Conv1d/Conv2d (their im2col products) run on c round
 * their inputs to bf16
 * (to nearest even) and accumulate in FP32; outputs stay F32 (PyTorch's
 * autocast also rounds them to bf16: qkv does not). Parameters stay F32
 * (master weights, rounded where used) and their gradients arrive in F32;
 * everything else (softmax, LayerNorm, attention kernels, losses, the
 * optimizer) runs in FP32. QKV_FP32 (default) is unchanged. See docs/bf16.md. */
typedef enum { QKV_FP32 = 0, QKV_BF16 = 1 } qkv_precision;
QKV_API qkv_status qkv_ctx_set_precision(qkv_ctx *c, qkv_precision p);
QKV_API qkv_precision qkv_ctx_precision(const qkv_ctx *c); /* QKV_FP32 for NULL */

/* Backpropagates from out: seeds out's gradient with dout (a tensor of the
 * same numel), or with 1 when out has one element and dout is NULL. A
 * graph is backpropagated once, as in PyTorch: the call consumes the tape,
 * and a second backward from an output of that graph (or from one made
 * before a qkv_ctx_reset, or on another ctx) is QKV_ERR_STATE. */
QKV_API qkv_status qkv_backward(qkv_ctx *c, qkv_tensor *out, const float *dout);

/* Forces the reference kernels (plain loops) everywhere; for tests.
 * The environment variable QKV_REFERENCE=1 sets it at start-up. */
QKV_API void qkv_set_reference(int on);
QKV_API int qkv_reference(void);

/* ---- basic ops (forward recorded on the tape) ------------------------- */

/* y = x W^T + b, as torch.nn.functional.linear.
 * x (...,in), w (out,in), b (out) or NULL -> y (...,out) */
QKV_API qkv_status qkv_linear(qkv_ctx *c, qkv_tensor *x, qkv_tensor *w, qkv_tensor *b,
                              qkv_tensor **y);
/* y = x.permute(perm) made contiguous; perm has x->ndim entries. */
QKV_API qkv_status qkv_permute(qkv_ctx *c, qkv_tensor *x, const int *perm, qkv_tensor **y);
/* A reshape recorded as a view (no copy; gradients flow through the base). */
QKV_API qkv_status qkv_reshape(qkv_ctx *c, qkv_tensor *x, int ndim, const int64_t *shape,
                               qkv_tensor **y);
/* Appends one row per (n,h) along dim 2: x (N,H,S,D), row (H*D) or NULL for
 * zeros -> y (N,H,S+1,D). MultiheadAttention's bias_k/bias_v and add_zero_attn. */
QKV_API qkv_status qkv_append_row(qkv_ctx *c, qkv_tensor *x, qkv_tensor *row, qkv_tensor **y);

#ifdef __cplusplus
}
#endif

/* The rest of the public API, one header per area (include/qkv/). */
#include "qkv/attention.h"
#include "qkv/io.h"
#include "qkv/nn.h"
#include "qkv/posenc.h"
#include "qkv/dist.h"
#include "qkv/train.h"
#include "qkv/transformer.h"
#include "qkv/generate.h"
#include "qkv/decode.h"
#include "qkv/data.h"
#include "qkv/image.h"
#include "qkv/models.h"
#include "qkv/vision.h"
#include "qkv/cnn.h"
#include "qkv/quant.h"
#include "qkv/gguf.h"
#include "qkv/llm.h"
#endif
