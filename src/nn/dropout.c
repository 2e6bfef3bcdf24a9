/* dropout.c: F.dropout. In training mode element i is kept when
 * u(seed, i) >= p, u a counter-based hash uniform in [0,1), and scaled by
 * 1/(1-p); the backward draws the same u again instead of storing a mask. */
#include <math.h>
#include "nn/nn_check.h"

typedef struct {
    qkv_tensor *x, *y;
    uint64_t seed;
    float p;
    int64_t n;
} dropout_saved;

/* The factor element i is multiplied by: 0 or 1/(1-p). */
static inline float keep_factor(uint64_t seed, int64_t i, float p, float scale)
{
    return qkv_hash_uniform(seed, (uint64_t)i) < p ? 0.0f : scale;
}

/* Differentiates y = x * m, m[i] = keep_factor(seed, i): dx += dy * m. */
static qkv_status dropout_backward(qkv_ctx *c, void *p)
{
    dropout_saved *s = p;
    QKV_BACKWARD_ONE(c, s->y, s->x, dy, dx); // (n) each
    if (s->p >= 1.0f) return QKV_OK; /* every element dropped */
    float scale = 1.0f / (1.0f - s->p);
    QKV_PAR_FOR(s->n >= QKV_PAR_MIN,
        for (int64_t i = 0; i < s->n; i++) dx[i] += dy[i] * keep_factor(s->seed, i, s->p, scale));
    return QKV_OK;
}

qkv_status qkv_dropout(qkv_ctx *c, qkv_tensor *x, float p, qkv_tensor **y)
{
    QKV_NEED_OUT_CTX(y, c, "dropout", "y");
    QKV_NEED_F32(x, "dropout", "x");
    if (!(p >= 0.0f && p <= 1.0f))
        return qkv_fail(QKV_ERR_ARG, "dropout: p %g must be in [0,1]", (double)p);
    if (!qkv_ctx_training(c) || p == 0.0f) { /* identity: PyTorch returns its input */
        *y = x;
        return QKV_OK;
    }
    qkv_tensor *in[1] = {x};
    int rec = qkv_ctx_recording(c, in, 1);
    QKV_TRY(qkv_ctx_tensor(c, x->ndim, x->shape, rec, y));
    int64_t n = qkv_tensor_numel(x);
    uint64_t seed = qkv_ctx_next_seed(c);
    const float *xd = x->data; // (n)
    float *yd = (*y)->data;    // (n), zeros from the arena
    if (p < 1.0f) {
        float scale = 1.0f / (1.0f - p);
        QKV_PAR_FOR(n >= QKV_PAR_MIN,
            for (int64_t i = 0; i < n; i++) yd[i] = xd[i] * keep_factor(seed, i, p, scale));
    }
    if (!rec) return QKV_OK;
    dropout_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (dropout_saved){x, *y, seed, p, n};
    return qkv_ctx_record(c, dropout_backward, s);
}
