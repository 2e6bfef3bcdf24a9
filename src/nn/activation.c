/* activation.c: elementwise activations: relu, tanh, gelu (exact and tanh
 * approximation), as torch.nn.functional computes them; one enum
 * (qkv_activation) names them for the functional ops, the modules and the
 * transformer's feed-forward. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "kernels/rows.h"
#include "nn/nn_check.h"


#define GELU_BETA 0.7978845608028654f  /* sqrt(2/pi) */
#define GELU_KAPPA 0.044715f
#define INV_SQRT2 0.7071067811865476f  /* 1/sqrt(2) */
#define INV_SQRT2PI 0.3989422804014327f /* 1/sqrt(2 pi): the normal density's factor */

typedef struct {
    qkv_tensor *x, *y;
    qkv_activation kind;
    int64_t n;
    float *cdf; /* (n) Phi(x), saved by the fast GELU's forward; NULL otherwise */
} act_saved;

static float act_value(qkv_activation k, float x)
{
    switch (k) {
    case QKV_ACTIVATION_RELU: return qkv_relu1(x); /* torch.relu: NaN stays NaN, -0 stays -0 */
    case QKV_ACTIVATION_TANH: return tanhf(x);
    case QKV_ACTIVATION_GELU: return 0.5f * x * (1.0f + erff(x * INV_SQRT2));
    case QKV_ACTIVATION_GELU_TANH: return 0.5f * x * (1.0f + tanhf(GELU_BETA * (x + GELU_KAPPA * x * x * x)));
    }
    return 0.0f;
}

/* dy/dx at x (y is the forward's output there). */
static float act_slope(qkv_activation k, float x, float y)
{
    switch (k) {
    case QKV_ACTIVATION_RELU: { /* 0 at x = 0, as PyTorch; a NaN y passes (qkv_relu_passes) */
        int32_t yb;
        memcpy(&yb, &y, sizeof yb);
        return qkv_relu_passes(yb) ? 1.0f : 0.0f;
    }
    case QKV_ACTIVATION_TANH: return 1.0f - y * y;
    case QKV_ACTIVATION_GELU: /* Phi(x) + x phi(x) */
        return 0.5f * (1.0f + erff(x * INV_SQRT2)) + x * INV_SQRT2PI * expf(-0.5f * x * x);
    case QKV_ACTIVATION_GELU_TANH: { /* 0.5 (1 + t) + 0.5 x (1 - t^2) beta (1 + 3 kappa x^2) */
        float t = tanhf(GELU_BETA * (x + GELU_KAPPA * x * x * x));
        return 0.5f * (1.0f + t) +
               0.5f * x * (1.0f - t * t) * GELU_BETA * (1.0f + 3.0f * GELU_KAPPA * x * x);
    }
    }
    return 0.0f;
}

/* ---- the fast exact GELU -------------------------------------------------
 * libm's erff and expf are calls the compiler cannot vectorise, and in a
 * GPT-style model's or a ViT's training they took a fifth of the time. The
 * fast path goes through the vectorised erfc and exp of kernels/rows.c in
 * blocks of GELU_BLOCK elements (scratch on the stack):
 *   GELU(x) = x Phi(x), Phi(x) = 0.5 erfc(-x / sqrt 2) (erfc, not 1 + erf,
 *   which cancels for negative x: Phi keeps its relative accuracy there),
 *   its slope Phi(x) + x phi(x) = Phi(x) + x exp(-x^2/2) / sqrt(2 pi).
 * Measured against the libm path (qkv_set_reference) over [-12, 12]: see
 * tests/test_layers_values.c. The reference keeps erff. */
enum { GELU_BLOCK = 256 };

/* y = x Phi(x) over [i0,i1); Phi(x) itself into cdf when cdf is not NULL
 * (a recorded forward: the backward then needs no erfc of its own). */
static __attribute__((noinline)) void gelu_fast_forward(const float *restrict x, float *restrict y,
                                                        float *restrict cdf, int64_t i0, int64_t i1)
{
    float e[GELU_BLOCK];
    for (int64_t b = i0; b < i1; b += GELU_BLOCK) {
        int64_t n = i1 - b < GELU_BLOCK ? i1 - b : GELU_BLOCK;
        float *ph = cdf ? cdf + b : e; /* Phi straight into cdf when it is kept */
        for (int64_t k = 0; k < n; k++) ph[k] = -x[b + k] * INV_SQRT2;
        qkv_vec_erfc(ph, ph, n);
        for (int64_t k = 0; k < n; k++) {
            ph[k] *= 0.5f;
            y[b + k] = x[b + k] * ph[k];
        }
    }
}

/* dx += dy (Phi(x) + x phi(x)), or dx = ... when assign (a new gradient
 * buffer: no zero fill, no read); Phi from the forward's cdf when it saved
 * it (the same erfc of the same x: the same bits), else computed here. */
static __attribute__((noinline)) void gelu_fast_backward(const float *restrict x, const float *restrict cdf,
                                                         const float *restrict dy, float *restrict dx,
                                                         int assign, int64_t i0, int64_t i1)
{
    float e[GELU_BLOCK], g[GELU_BLOCK];
    for (int64_t b = i0; b < i1; b += GELU_BLOCK) {
        int64_t n = i1 - b < GELU_BLOCK ? i1 - b : GELU_BLOCK;
        for (int64_t k = 0; k < n; k++) g[k] = -0.5f * x[b + k] * x[b + k];
        const float *ph = cdf ? cdf + b : e;
        if (!cdf) {
            for (int64_t k = 0; k < n; k++) e[k] = -x[b + k] * INV_SQRT2;
            qkv_vec_erfc(e, e, n);
            for (int64_t k = 0; k < n; k++) e[k] *= 0.5f;
        }
        qkv_vec_exp(g, g, n);
        if (assign)
            for (int64_t k = 0; k < n; k++) dx[b + k] = dy[b + k] * (ph[k] + x[b + k] * INV_SQRT2PI * g[k]);
        else
            for (int64_t k = 0; k < n; k++) dx[b + k] += dy[b + k] * (ph[k] + x[b + k] * INV_SQRT2PI * g[k]);
    }
}

/* The loops over elements [i0,i1): each case fixes the kind, so act_value
 * and act_slope inline without their switch and the relu and tanh loops
 * vectorise (kept out of line: inlined into the OpenMP region, GCC 12 no
 * longer vectorised them). */
#define ACT_CASE(NAME, name, module) \
    case QKV_ACTIVATION_##NAME: ACT_LOOP(QKV_ACTIVATION_##NAME); break;
/* ACT_LOOP(K), defined at the use, is the loop for the constant kind K. */
#define ACT_CASES(k) switch (k) { QKV_ACTIVATIONS(ACT_CASE) }

static __attribute__((noinline)) void
act_forward_range(qkv_activation k, const float *restrict x, float *restrict y, float *restrict cdf,
                  int64_t i0, int64_t i1)
{
#define ACT_LOOP(K) for (int64_t i = i0; i < i1; i++) y[i] = act_value(K, x[i])
    if (k == QKV_ACTIVATION_GELU && !qkv_reference()) return gelu_fast_forward(x, y, cdf, i0, i1);
    ACT_CASES(k)
#undef ACT_LOOP
}

/* ReLU's backward, dx += y <= 0 ? 0 : dy (torch's threshold_backward: a
 * NaN y passes dy), with the test read from y's bits as an int32
 * (qkv_relu_passes): GCC 12 kept the float compare scalar and branchy (it
 * may trap), a mispredicted branch per element on real data; the integer
 * compare vectorises. Measured on the default CNN's step (batch 64, one thread,
 * CPU time): the step's backward went from 33 to 22 ms, this loop from
 * 19% of the step's time to 2%. */
static __attribute__((noinline)) void
relu_backward_range(const float *restrict y, const float *restrict dy, float *restrict dx, int assign,
                    int64_t i0, int64_t i1)
{
    for (int64_t i = i0; i < i1; i++) {
        int32_t bits;
        memcpy(&bits, &y[i], sizeof bits);
        /* assign: a fresh dx written, not zeroed and added into (0 + g, the
         * same bits: a -0 dy gives +0 either way) */
        dx[i] = (assign ? 0.0f : dx[i]) + (qkv_relu_passes(bits) ? dy[i] : 0.0f);
    }
}

static __attribute__((noinline)) void
act_backward_range(qkv_activation k, const float *restrict x, const float *restrict y,
                   const float *restrict cdf, const float *restrict dy, float *restrict dx, int64_t i0,
                   int64_t i1)
{
    if (k == QKV_ACTIVATION_RELU) { /* relu_backward_range's select vectorises; the compare did not */
        relu_backward_range(y, dy, dx, 0, i0, i1);
        return;
    }
#define ACT_LOOP(K) for (int64_t i = i0; i < i1; i++) dx[i] += dy[i] * act_slope(K, x[i], y[i])
    if (k == QKV_ACTIVATION_GELU && !qkv_reference()) return gelu_fast_backward(x, cdf, dy, dx, 0, i0, i1);
    ACT_CASES(k)
#undef ACT_LOOP
}

/* Blocks of elements for the threads. */
enum { ACT_BLOCK = 8192 };

/* Differentiates y = f(x) elementwise: dx += dy * f'(x). */
static qkv_status act_backward(qkv_ctx *c, void *p)
{
    act_saved *s = p;
    const float *dy = s->y->grad; // (n)
    if (!dy || !s->x->requires_grad) return QKV_OK;
    int fresh; /* a new buffer is zeroed block by block by its thread, in cache */
    float *dx = qkv_tensor_grad_fresh(qkv_ctx_arena(c), s->x, &fresh); // (n)
    if (!dx) return QKV_ERR_NOMEM;
    const float *x = s->x->data, *y = s->y->data; // (n) each
    int64_t n = s->n, nblk = (n + ACT_BLOCK - 1) / ACT_BLOCK;
    QKV_PAR_FOR(n >= QKV_PAR_MIN,
        for (int64_t b = 0; b < nblk; b++) {
            int64_t i0 = b * ACT_BLOCK, i1 = i0 + ACT_BLOCK < n ? i0 + ACT_BLOCK : n;
            if (fresh && s->kind == QKV_ACTIVATION_GELU && !qkv_reference()) { /* written, not added into */
                gelu_fast_backward(x, s->cdf, dy, dx, 1, i0, i1);
                continue;
            }
            if (fresh && s->kind == QKV_ACTIVATION_RELU) {
                relu_backward_range(y, dy, dx, 1, i0, i1);
                continue;
            }
            if (fresh) memset(dx + i0, 0, (size_t)(i1 - i0) * sizeof(float));
            act_backward_range(s->kind, x, y, s->cdf, dy, dx, i0, i1);
        });
    return QKV_OK;
}

static qkv_status activation(qkv_ctx *c, const char *fn, qkv_activation kind, qkv_tensor *x,
                             qkv_tensor **y)
{
    QKV_NEED_OUT_CTX(y, c, fn, "y");
    QKV_NEED_F32(x, fn, "x");
    qkv_tensor *in[1] = {x};
    int rec = qkv_ctx_recording(c, in, 1);
    QKV_TRY(qkv_ctx_tensor_uninit(c, x->ndim, x->shape, rec, y)); /* every element written below */
    int64_t n = qkv_tensor_numel(x);
    const float *xd = x->data; // (n)
    float *yd = (*y)->data;    // (n)
    int64_t nblk = (n + ACT_BLOCK - 1) / ACT_BLOCK;
    /* tanh: the vectorised kernel (kernels/rows.c), libm's tanhf under qkv_reference() */
    int vec_tanh = kind == QKV_ACTIVATION_TANH && !qkv_reference();
    /* the fast GELU keeps Phi(x) for its backward when recording */
    float *cdf = NULL; // (n)
    if (rec && kind == QKV_ACTIVATION_GELU && !qkv_reference() && x->requires_grad) {
        cdf = qkv_ctx_alloc_uninit(c, (size_t)n * sizeof *cdf);
        if (!cdf) return QKV_ERR_NOMEM;
    }
    QKV_PAR_FOR(n >= QKV_PAR_MIN,
        for (int64_t b = 0; b < nblk; b++) {
            int64_t i0 = b * ACT_BLOCK, i1 = i0 + ACT_BLOCK < n ? i0 + ACT_BLOCK : n;
            if (vec_tanh) qkv_vec_tanh(yd + i0, xd + i0, i1 - i0);
            else act_forward_range(kind, xd, yd, cdf, i0, i1);
        });
    if (!rec) return QKV_OK;
    act_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (act_saved){x, *y, kind, n, cdf};
    return qkv_ctx_record(c, act_backward, s);
}

#define ACT_NAME(NAME, name, module) name,
static const char *const act_names[] = {QKV_ACTIVATIONS(ACT_NAME)};
#undef ACT_NAME
enum { N_ACT = sizeof act_names / sizeof *act_names };

const char *qkv_activation_name(qkv_activation act)
{
    return (unsigned)act < N_ACT ? act_names[act] : NULL;
}

qkv_status qkv_activation_parse(const char *name, qkv_activation *act)
{
    QKV_NEED(act, "activation_parse", "act");
    QKV_NEED(name, "activation_parse", "name");
    for (unsigned i = 0; i < N_ACT; i++)
        if (!strcmp(name, act_names[i])) {
            *act = (qkv_activation)i;
            return QKV_OK;
        }
    char known[128] = ""; /* "relu, gelu, gelu_tanh or tanh" */
    for (unsigned i = 0; i < N_ACT; i++) {
        const char *sep = i == 0 ? "" : i + 1 < N_ACT ? ", " : " or ";
        size_t len = strlen(known);
        snprintf(known + len, sizeof known - len, "%s%s", sep, act_names[i]);
    }
    return qkv_fail(QKV_ERR_ARG, "activation_parse: '%s' is not %s", name, known);
}

static qkv_status activation_apply_body(qkv_ctx *c, qkv_activation act, qkv_tensor *x, qkv_tensor **y)
{
    const char *name = qkv_activation_name(act);
    if (!name) {
        if (y) *y = NULL;
        return qkv_fail(QKV_ERR_ARG, "activation: %d is not a qkv_activation value", (int)act);
    }
    return activation(c, name, act, x, y);
}

qkv_status qkv_activation_apply(qkv_ctx *c, qkv_activation act, qkv_tensor *x, qkv_tensor **y)
{
    return qkv_fail_in("activation_apply", activation_apply_body(c, act, x, y));
}

qkv_status qkv_relu(qkv_ctx *c, qkv_tensor *x, qkv_tensor **y)
{
    return activation(c, "relu", QKV_ACTIVATION_RELU, x, y);
}

qkv_status qkv_tanh(qkv_ctx *c, qkv_tensor *x, qkv_tensor **y)
{
    return activation(c, "tanh", QKV_ACTIVATION_TANH, x, y);
}

qkv_status qkv_gelu_parse(const char *fn, const char *approximate, qkv_activation *act)
{
    if (!approximate || !strcmp(approximate, "none")) {
        *act = QKV_ACTIVATION_GELU;
        return QKV_OK;
    }
    if (!strcmp(approximate, "tanh")) {
        *act = QKV_ACTIVATION_GELU_TANH;
        return QKV_OK;
    }
    return qkv_fail(QKV_ERR_ARG, "%s: approximate '%s' is not 'none' or 'tanh'", fn, approximate);
}

qkv_status qkv_gelu(qkv_ctx *c, qkv_tensor *x, const char *approximate, qkv_tensor **y)
{
    qkv_activation act = QKV_ACTIVATION_RELU; /* set by qkv_gelu_parse */
    if (y) *y = NULL;
    QKV_TRY(qkv_gelu_parse("gelu", approximate, &act));
    return activation(c, "gelu", act, x, y);
}
