/* gradcheck.h: finite-difference gradient checks for tape ops.
 *
 * The forward callback builds out from the inputs with the ctx given; the
 * check takes loss = sum(R * out) for a fixed random R, gets the analytic
 * gradients with qkv_backward(out, R), and compares each input element's with
 * the central difference (loss(x+e) - loss(x-e)) / 2e, computed in double
 * from float forwards. Inputs must own persistent data and gradient buffers
 * (h_input makes such tensors). */
#ifndef QKV_TEST_GRADCHECK_H
#define QKV_TEST_GRADCHECK_H
#include "harness.h"

typedef qkv_status (*h_forward_fn)(qkv_ctx *c, void *user, qkv_tensor **out);

/* Set to check an op in training mode (dropout on): every forward of the
 * check then starts from the same seed, so it draws the same masks. */
static int h_training;

/* A persistent F32 tensor with a gradient buffer, filled from rng. */
static inline qkv_tensor *h_input(qkv_arena *a, qkv_rng *r, int ndim, const int64_t *shape,
                                  float scale)
{
    qkv_tensor *t = NULL;
    if (qkv_tensor_new(a, QKV_F32, ndim, shape, &t) != QKV_OK) return NULL;
    qkv_rng_fill_uniform(r, t->data, qkv_tensor_numel(t), -scale, scale);
    qkv_tensor_grad(a, t);
    t->requires_grad = 1;
    return t;
}

/* An I64 tensor of class labels in [0,C) for a loss, every third one
 * ignore (an ignore_index). */
static inline qkv_tensor *h_labels(qkv_arena *A, qkv_rng *r, int ndim, const int64_t *shape, int64_t C,
                                   int64_t ignore)
{
    qkv_tensor *y = NULL;
    if (qkv_tensor_new(A, QKV_I64, ndim, shape, &y) != QKV_OK) return NULL;
    for (int64_t i = 0; i < qkv_tensor_numel(y); i++)
        y->idx[i] = (i % 3 == 1) ? ignore : (int64_t)(qkv_rng_next(r) % (uint64_t)C);
    return y;
}

static inline double h_loss(qkv_ctx *c, h_forward_fn f, void *user, const float *R, int *ok)
{
    qkv_ctx_reset(c);
    qkv_ctx_set_grad(c, 0);
    qkv_ctx_set_training(c, h_training);
    qkv_ctx_set_seed(c, 77);
    qkv_tensor *out = NULL;
    *ok = f(c, user, &out) == QKV_OK && out;
    qkv_ctx_set_grad(c, 1);
    if (!*ok) return 0;
    double l = 0;
    for (int64_t i = 0; i < qkv_tensor_numel(out); i++) l += (double)R[i] * out->data[i];
    return l;
}

/* Returns the worst relative error |num - ana| / max(|num|, |ana|, floor)
 * over every element of every input, or +inf if a forward failed. */
static inline double h_gradcheck(h_forward_fn f, void *user, qkv_tensor **inputs, int n,
                                 float eps, double floor_)
{
    qkv_ctx *c = NULL;
    if (qkv_ctx_new(&c) != QKV_OK) return INFINITY;
    qkv_tensor *out = NULL;
    double worst = INFINITY;
    qkv_ctx_set_training(c, h_training);
    qkv_ctx_set_seed(c, 77);
    if (f(c, user, &out) != QKV_OK || !out) goto done;
    int64_t no = qkv_tensor_numel(out);
    float *R = malloc((size_t)no * sizeof *R);
    qkv_rng r;
    qkv_rng_seed(&r, 1234);
    qkv_rng_fill_uniform(&r, R, no, -1, 1);
    for (int i = 0; i < n; i++)
        memset(inputs[i]->grad, 0, (size_t)qkv_tensor_numel(inputs[i]) * sizeof(float));
    if (qkv_backward(c, out, R) != QKV_OK) {
        fprintf(stderr, "gradcheck: backward: %s\n", qkv_last_error());
        free(R);
        goto done;
    }
    worst = 0;
    for (int i = 0; i < n; i++) {
        qkv_tensor *t = inputs[i];
        for (int64_t j = 0; j < qkv_tensor_numel(t); j++) {
            float x0 = t->data[j];
            int ok = 1;
            /* Central differences at eps and eps/2, combined by Richardson
             * extrapolation: (4 D(eps/2) - D(eps)) / 3 cancels the O(eps^2)
             * truncation term, so eps can stay large enough for float32's
             * rounding noise not to dominate. */
            double d[2];
            for (int k = 0; k < 2 && ok; k++) {
                float h = k ? eps / 2 : eps;
                int ok1, ok2;
                t->data[j] = x0 + h;
                double lp = h_loss(c, f, user, R, &ok1);
                t->data[j] = x0 - h;
                double lm = h_loss(c, f, user, R, &ok2);
                t->data[j] = x0;
                ok = ok1 && ok2;
                /* the step actually taken, after float rounding of x0 +- h */
                d[k] = (lp - lm) / ((double)(x0 + h) - (double)(x0 - h));
            }
            if (!ok) {
                worst = INFINITY;
                break;
            }
            double num = (4.0 * d[1] - d[0]) / 3.0, ana = t->grad[j];
            double m = fmax(fmax(fabs(num), fabs(ana)), floor_);
            double e = fabs(num - ana) / m;
            if (e > worst) {
                worst = e;
                if (e > 1e-2)
                    fprintf(stderr, "  gradcheck: input %d elem %lld: numeric %.6g analytic %.6g\n",
                            i, (long long)j, num, ana);
            }
        }
    }
    free(R);
done:
    qkv_ctx_free(c);
    return worst;
}
#endif
