/* ctx.c: the per-step context: activation arena, tape, mode flags.
 *
 * The tape is a list of (backward function, saved state) pairs in the order
 * the forward ran. qkv_backward walks it in reverse; each backward adds into
 * its inputs' gradients. Saved state and gradients of activations live in the
 * arena, so qkv_ctx_reset drops a whole step at once. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "core/internal.h"

/* Graph ids, unique in the process: a recorded output carries its graph's
 * id, so a backward can tell an output of the live graph from a stale one. */
static atomic_uint_fast64_t qkv_graphs;

typedef struct {
    qkv_backward_fn fn;
    void *saved;
} tape_entry;

static uint64_t graph_next(void) { return (uint64_t)atomic_fetch_add(&qkv_graphs, 1) + 1; }

struct qkv_ctx {
    qkv_arena *arena;
    tape_entry *tape;
    int n, cap;
    int training, grad;
    uint64_t seed, counter;
    /* The graph now recording, and the last one consumed by a backward. */
    uint64_t graph, consumed;
    /* Attention maps captured since the last reset (in the arena). */
    int capture, n_captured, cap_captured;
    qkv_tensor **captured;
    /* bf16 inference weights of the cached forward running, or NULL. */
    const qkv_bf16_weights *bf16_weights;
    /* Sums across the processes sharing a batch (SyncBatchNorm); NULL: none. */
    qkv_batch_sum_fn batch_sum;
    void *batch_sum_user;
    qkv_precision precision;
};

qkv_status qkv_ctx_new(qkv_ctx **out)
{
    QKV_NEED(out, "ctx_new", "out");
    *out = NULL;
    qkv_ctx *c = calloc(1, sizeof *c);
    if (!c) return qkv_fail(QKV_ERR_NOMEM, "ctx_new: out of memory");
    qkv_status s = qkv_arena_new(&c->arena, (size_t)16 << 20);
    if (s != QKV_OK) {
        free(c);
        return s;
    }
    c->grad = 1;
    c->seed = 0x5EED;
    c->graph = graph_next();
    *out = c;
    return QKV_OK;
}

void qkv_ctx_free(qkv_ctx *c)
{
    if (!c) return;
    qkv_arena_free(c->arena);
    free(c->tape);
    free(c);
}

void qkv_ctx_reset(qkv_ctx *c)
{
    if (!c) return;
    qkv_arena_reset(c->arena);
    c->n = 0;
    c->graph = graph_next(); /* outputs made before the reset are stale */
    c->n_captured = c->cap_captured = 0;
    c->captured = NULL;
}

void qkv_ctx_set_capture(qkv_ctx *c, int on) { if (c) c->capture = on != 0; }
int qkv_ctx_capturing(const qkv_ctx *c) { return c && c->capture; }

const qkv_bf16_weights *qkv_ctx_bf16_weights(const qkv_ctx *c) { return c ? c->bf16_weights : NULL; }

const qkv_bf16_weights *qkv_ctx_set_bf16_weights(qkv_ctx *c, const qkv_bf16_weights *w)
{
    const qkv_bf16_weights *was = c->bf16_weights;
    c->bf16_weights = w;
    return was;
}
int qkv_ctx_captured_count(const qkv_ctx *c) { return c ? c->n_captured : 0; }

qkv_tensor *qkv_ctx_captured(const qkv_ctx *c, int i)
{
    return c && i >= 0 && i < c->n_captured ? c->captured[i] : NULL;
}

qkv_status qkv_ctx_capture_add(qkv_ctx *c, qkv_tensor *weights)
{
    if (c->n_captured == c->cap_captured) { /* the list lives in the arena too: grow by copying */
        int cap = c->cap_captured ? 2 * c->cap_captured : 16;
        qkv_tensor **list = qkv_arena_alloc(c->arena, (size_t)cap * sizeof *list);
        if (!list) return QKV_ERR_NOMEM;
        if (c->n_captured) memcpy(list, c->captured, (size_t)c->n_captured * sizeof *list);
        c->captured = list;
        c->cap_captured = cap;
    }
    c->captured[c->n_captured++] = weights;
    return QKV_OK;
}

qkv_status qkv_ctx_set_precision(qkv_ctx *c, qkv_precision p)
{
    QKV_NEED(c, "ctx_set_precision", "ctx");
    if (p != QKV_FP32 && p != QKV_BF16)
        return qkv_fail(QKV_ERR_ARG, "ctx_set_precision: precision %d is neither QKV_FP32 (0) nor QKV_BF16 (1)",
                        (int)p);
    c->precision = p;
    return QKV_OK;
}

qkv_precision qkv_ctx_precision(const qkv_ctx *c) { return c ? c->precision : QKV_FP32; }

qkv_arena *qkv_ctx_arena(qkv_ctx *c) { return c ? c->arena : NULL; }
void qkv_ctx_set_training(qkv_ctx *c, int training) { if (c) c->training = training != 0; }
int qkv_ctx_training(const qkv_ctx *c) { return c ? c->training : 0; }
void qkv_ctx_set_grad(qkv_ctx *c, int enabled) { if (c) c->grad = enabled != 0; }
void qkv_ctx_set_seed(qkv_ctx *c, uint64_t seed)
{
    if (!c) return;
    c->seed = seed;
    c->counter = 0;
}
uint64_t qkv_ctx_seed(const qkv_ctx *c) { return c->seed; }

void qkv_ctx_set_batch_sum(qkv_ctx *c, qkv_batch_sum_fn fn, void *user)
{
    if (!c) return;
    c->batch_sum = fn;
    c->batch_sum_user = fn ? user : NULL;
}

qkv_batch_sum_fn qkv_ctx_batch_sum(const qkv_ctx *c, void **user)
{
    *user = c->batch_sum_user;
    return c->batch_sum;
}

uint64_t qkv_ctx_next_seed(qkv_ctx *c)
{
    /* splitmix64 step over (seed, counter): independent streams per op. */
    uint64_t z = c->seed + 0x9E3779B97F4A7C15ull * ++c->counter;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int qkv_ctx_recording(const qkv_ctx *c, qkv_tensor *const *inputs, int n)
{
    if (!c->grad) return 0;
    for (int i = 0; i < n; i++)
        if (inputs[i] && inputs[i]->requires_grad) return 1;
    return 0;
}

qkv_status qkv_ctx_record(qkv_ctx *c, qkv_backward_fn backward, void *saved)
{
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 256;
        tape_entry *t = realloc(c->tape, (size_t)cap * sizeof *t);
        if (!t) return qkv_fail(QKV_ERR_NOMEM, "tape: out of memory");
        c->tape = t;
        c->cap = cap;
    }
    c->tape[c->n].fn = backward;
    c->tape[c->n].saved = saved;
    c->n++;
    return QKV_OK;
}

void *qkv_ctx_alloc(qkv_ctx *c, size_t bytes) { return qkv_arena_alloc(c->arena, bytes); }
void *qkv_ctx_alloc_uninit(qkv_ctx *c, size_t bytes) { return qkv_arena_alloc_uninit(c->arena, bytes); }

qkv_status qkv_ctx_tensor(qkv_ctx *c, int ndim, const int64_t *shape, int rec, qkv_tensor **out)
{
    QKV_TRY(qkv_tensor_new(c->arena, QKV_F32, ndim, shape, out));
    (*out)->requires_grad = rec;
    (*out)->graph = rec ? c->graph : 0;
    return QKV_OK;
}

qkv_status qkv_ctx_tensor_uninit(qkv_ctx *c, int ndim, const int64_t *shape, int rec,
                                 qkv_tensor **out)
{
    QKV_TRY(qkv_tensor_new_uninit(c->arena, ndim, shape, out));
    (*out)->requires_grad = rec;
    (*out)->graph = rec ? c->graph : 0;
    return QKV_OK;
}

/* Empties the tape; what the next ops record is a new graph. */
static void graph_consume(qkv_ctx *c)
{
    c->n = 0;
    c->consumed = c->graph;
    c->graph = graph_next();
}

qkv_status qkv_backward(qkv_ctx *c, qkv_tensor *out, const float *dout)
{
    QKV_NEED(c, "backward", "ctx");
    QKV_NEED(out, "backward", "out");
    if (out->dtype != QKV_F32) return qkv_fail(QKV_ERR_DTYPE, "backward: out is not F32");
    if (!out->requires_grad)
        return qkv_fail(QKV_ERR_STATE, "backward: out does not require grad (no parameter or "
                                       "input with a gradient led to it, or grad was off)");
    if (out->graph && out->graph != c->graph) {
        if (out->graph == c->consumed)
            return qkv_fail(QKV_ERR_STATE, "backward: out's graph was consumed by an earlier "
                            "backward (PyTorch: 'Trying to backward through the graph a second "
                            "time'): run the forward again");
        return qkv_fail(QKV_ERR_STATE, "backward: out is stale: its graph was dropped by "
                        "qkv_ctx_reset (or it was made on another ctx)");
    }
    int64_t n = qkv_tensor_numel(out);
    if (!dout && n != 1)
        return qkv_fail(QKV_ERR_ARG, "backward: dout is NULL but out has %lld elements, not 1",
                        (long long)n);
    float *g = qkv_tensor_grad(c->arena, out);
    if (!g) return QKV_ERR_NOMEM;
    for (int64_t i = 0; i < n; i++) g[i] += dout ? dout[i] : 1.0f;
    for (int i = c->n - 1; i >= 0; i--) {
        qkv_status s = c->tape[i].fn(c, c->tape[i].saved);
        if (s != QKV_OK) {
            graph_consume(c);
            return s;
        }
    }
    graph_consume(c); /* like PyTorch, the graph is consumed by one backward */
    return QKV_OK;
}

/* ---- the reference switch --------------------------------------------- */

static int qkv_ref_flag = -1;

void qkv_set_reference(int on) { qkv_ref_flag = on != 0; }

int qkv_reference(void)
{
    if (qkv_ref_flag < 0) {
        const char *e = getenv("QKV_REFERENCE");
        qkv_ref_flag = e && strcmp(e, "0") != 0 && e[0] != '\0';
    }
    return qkv_ref_flag;
}
