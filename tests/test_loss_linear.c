/* test_loss_linear.c: qkv_linear_cross_entropy, the output layer and its
 * cross entropy as one op. Against finite differences, against the two ops
 * it fuses (qkv_linear then qkv_cross_entropy) in FP32 and in the BF16 mode
 * on output-layer sizes, on 1 and 2 threads, and on bad input. PyTorch
 * parity is in test_train_oracle.c (tools/train_oracle.py, kind "lce"). */
#include <math.h>
#include <omp.h>
#include <string.h>
#include "gradcheck.h"
#include "harness.h"

typedef struct {
    qkv_tensor *x, *w, *b, *y;
    int64_t ignore;
    double ls;
    qkv_reduction r;
} lce_args;

static qkv_status f_lce(qkv_ctx *c, void *u, qkv_tensor **out)
{
    lce_args *a = u;
    return qkv_linear_cross_entropy(c, a->x, a->w, a->b, a->y, a->ignore, a->ls, a->r, out);
}

static void test_gradcheck(qkv_arena *A, qkv_rng *r)
{
    static const char *red[3] = {"mean", "sum", "none"};
    for (int ri = 0; ri < 3; ri++)
        for (int li = 0; li < 2; li++) {
            double ls = li ? 0.3 : 0.0;
            lce_args a = {h_input(A, r, 3, (int64_t[]){2, 3, 4}, 1), h_input(A, r, 2, (int64_t[]){7, 4}, 1),
                          ri == 1 ? NULL : h_input(A, r, 1, (int64_t[]){7}, 1),
                          h_labels(A, r, 2, (int64_t[]){2, 3}, 7, -100), -100, ls, (qkv_reduction)ri};
            qkv_tensor *in[3] = {a.x, a.w, a.b};
            double e = h_gradcheck(f_lce, &a, in, a.b ? 3 : 2, 1e-2f, 1e-2);
            CHECK(e < 1e-2, "linear_cross_entropy gradcheck (%s, smoothing %g): %g", red[ri], ls, e);
        }
}

/* The fused op and the two ops, from the same inputs in ctx c: loss and the
 * gradients of x, W, b for upstream gradient dl (NULL: 1). Writes into the
 * three tensors' gradients, zeroed first, then copies them out to g (x, W,
 * b one after the other). */
static void run_both(qkv_ctx *c, lce_args *a, int fused, const float *dl, float *loss, float *g)
{
    int64_t nx = qkv_tensor_numel(a->x), nw = qkv_tensor_numel(a->w), nb = qkv_tensor_numel(a->b);
    memset(a->x->grad, 0, (size_t)nx * 4), memset(a->w->grad, 0, (size_t)nw * 4), memset(a->b->grad, 0, (size_t)nb * 4);
    qkv_ctx_reset(c);
    qkv_tensor *l = NULL, *lg, *l2, *y1;
    int64_t M = qkv_tensor_numel(a->y), V = a->w->shape[0];
    qkv_status s;
    if (fused) s = f_lce(c, a, &l);
    else {
        s = qkv_linear(c, a->x, a->w, a->b, &lg);
        if (!s) s = qkv_reshape(c, lg, 2, (int64_t[]){M, V}, &l2);
        if (!s) s = qkv_tensor_view(qkv_ctx_arena(c), a->y, 1, &M, &y1);
        if (!s) s = qkv_cross_entropy(c, l2, y1, a->ignore, a->ls, a->r, &l);
    }
    CHECK(s == QKV_OK, "%s: %s", fused ? "fused" : "two ops", qkv_last_error());
    if (s) return;
    CHECK_OK(qkv_backward(c, l, dl));
    memcpy(loss, l->data, (size_t)qkv_tensor_numel(l) * 4);
    memcpy(g, a->x->grad, (size_t)nx * 4);
    memcpy(g + nx, a->w->grad, (size_t)nw * 4);
    memcpy(g + nx + nw, a->b->grad, (size_t)nb * 4);
}

/* Output-layer sizes (the translation model's, smaller): FP32 fused against
 * the two ops, on 1 and 2 threads; BF16 fused against the two ops in BF16
 * (the same roundings of the same numbers) and against FP32. */
static void test_against_two_ops(qkv_arena *A, qkv_rng *r)
{
    int64_t N = 24, T = 13, K = 64, V = 1000, M = N * T; /* 12.8 MFLOP a product: oneDNN's in BF16 */
    for (int ri = 0; ri < 3; ri++)
        for (int li = 0; li < 2; li++) {
            lce_args a = {h_input(A, r, 3, (int64_t[]){N, T, K}, 1), h_input(A, r, 2, (int64_t[]){V, K}, 0.5f),
                          h_input(A, r, 1, (int64_t[]){V}, 1), h_labels(A, r, 2, (int64_t[]){N, T}, V, 0), 0,
                          li ? 0.1 : 0.0, (qkv_reduction)ri};
            int64_t nl = ri == QKV_REDUCTION_NONE ? M : 1, ng = M * K + V * K + V;
            float *dl = malloc((size_t)nl * 4), *l[5], *g[5];
            for (int64_t i = 0; i < nl; i++) dl[i] = ri == QKV_REDUCTION_NONE ? (float)(i % 7) - 2.5f : 0.5f;
            for (int k = 0; k < 5; k++) l[k] = malloc((size_t)nl * 4), g[k] = malloc((size_t)ng * 4);
            qkv_ctx *c;
            qkv_ctx_new(&c);
            omp_set_num_threads(1);
            run_both(c, &a, 1, dl, l[0], g[0]); /* FP32 fused, 1 thread */
            omp_set_num_threads(2);
            run_both(c, &a, 1, dl, l[1], g[1]); /* FP32 fused, 2 threads */
            run_both(c, &a, 0, dl, l[2], g[2]); /* FP32 two ops */
            CHECK_OK(qkv_ctx_set_precision(c, QKV_BF16));
            run_both(c, &a, 1, dl, l[3], g[3]); /* BF16 fused */
            run_both(c, &a, 0, dl, l[4], g[4]); /* BF16 two ops */
            const char *what = ri == 0 ? "mean" : ri == 1 ? "sum" : "none";
            CHECK(!memcmp(l[0], l[1], (size_t)nl * 4) && !memcmp(g[0], g[1], (size_t)ng * 4),
                  "linear_cross_entropy (%s, ls %g): 1 and 2 threads differ", what, a.ls);
            double el = h_rel_err(l[1], l[2], nl), eg = h_rel_err(g[1], g[2], ng);
            CHECK(el < 1e-6 && eg < 1e-5, "FP32 fused vs two ops (%s, ls %g): loss %g, grads %g", what, a.ls, el, eg);
            /* BF16: the same bf16 inputs of the products either way (the
             * upstream 0.5, a power of 2, commutes with the rounding that the
             * fused op makes before it and the two ops after it); only the
             * order of the FP32 sums of the bias gradient differs */
            el = h_rel_err(l[3], l[4], nl), eg = h_rel_err(g[3], g[4], ng);
            CHECK(el < 1e-6 && eg < 1e-4, "BF16 fused vs two ops (%s, ls %g): loss %g, grads %g", what, a.ls, el, eg);
            /* BF16 against FP32: inputs rounded to 8 bits of mantissa
             * (relative 2^-9 each), K = 64 and V = 1000 terms summed */
            el = h_rel_err(l[3], l[1], nl), eg = h_rel_err(g[3], g[1], ng);
            CHECK(el < 1e-2 && eg < 3e-2 && eg > 0, "BF16 vs FP32 fused (%s, ls %g): loss %g, grads %g", what, a.ls,
                  el, eg);
            qkv_ctx_free(c);
            for (int k = 0; k < 5; k++) free(l[k]), free(g[k]);
            free(dl);
        }
}

/* x feeds the op twice: the second backward adds into x's gradient. And a
 * mean over targets that are all ignored: 0 with zero gradients. */
static void test_accumulate_and_ignored(qkv_arena *A, qkv_rng *r)
{
    qkv_ctx *c;
    qkv_ctx_new(&c);
    lce_args a = {h_input(A, r, 2, (int64_t[]){6, 5}, 1), h_input(A, r, 2, (int64_t[]){9, 5}, 1),
                  h_input(A, r, 1, (int64_t[]){9}, 1), h_labels(A, r, 1, (int64_t[]){6}, 9, -100), -100, 0,
                  QKV_REDUCTION_MEAN};
    qkv_tensor *l1, *l2, *sum;
    CHECK_OK(f_lce(c, &a, &l1));
    CHECK_OK(f_lce(c, &a, &l2));
    CHECK_OK(qkv_add(c, l1, l2, &sum));
    CHECK_OK(qkv_backward(c, sum, NULL));
    float g2[30];
    memcpy(g2, a.x->grad, sizeof g2);
    memset(a.x->grad, 0, sizeof g2), memset(a.w->grad, 0, 9 * 5 * 4), memset(a.b->grad, 0, 9 * 4);
    qkv_ctx_reset(c);
    CHECK_OK(f_lce(c, &a, &l1));
    CHECK_OK(qkv_backward(c, l1, NULL));
    double worst = 0;
    for (int i = 0; i < 30; i++) worst = fmax(worst, fabs(g2[i] - 2 * a.x->grad[i]));
    CHECK(worst < 1e-6, "linear_cross_entropy twice: x's gradient is not twice once's (%g)", worst);
    for (int i = 0; i < 6; i++) a.y->idx[i] = -100;
    memset(a.x->grad, 0, sizeof g2), memset(a.w->grad, 0, 9 * 5 * 4), memset(a.b->grad, 0, 9 * 4);
    qkv_ctx_reset(c);
    CHECK_OK(f_lce(c, &a, &l1));
    CHECK(l1->data[0] == 0.0f, "all ignored: mean loss %g, expected 0", l1->data[0]);
    CHECK_OK(qkv_backward(c, l1, NULL));
    int nz = 0;
    for (int i = 0; i < 45; i++) nz += a.w->grad[i] != 0.0f || (i < 30 && a.x->grad[i] != 0.0f) || (i < 9 && a.b->grad[i] != 0.0f);
    CHECK(nz == 0, "all ignored: %d nonzero gradients", nz);
    qkv_ctx_free(c);
}

static void test_bad_args(qkv_arena *A, qkv_rng *r)
{
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_tensor *x = h_input(A, r, 2, (int64_t[]){3, 4}, 1), *w = h_input(A, r, 2, (int64_t[]){5, 4}, 1);
    qkv_tensor *b = h_input(A, r, 1, (int64_t[]){5}, 1), *b6 = h_input(A, r, 1, (int64_t[]){6}, 1);
    qkv_tensor *w3 = h_input(A, r, 2, (int64_t[]){5, 3}, 1), *loss = (qkv_tensor *)1, *y, *y4, *yf = x;
    int64_t lab[4] = {0, 4, 2, 1};
    qkv_tensor_wrap_i64(A, lab, 1, (int64_t[]){3}, &y);
    qkv_tensor_wrap_i64(A, lab, 1, (int64_t[]){4}, &y4);
    const qkv_reduction M = QKV_REDUCTION_MEAN;
    CHECK_ERR(qkv_linear_cross_entropy(c, x, w, b, y, -100, 0, M, NULL), QKV_ERR_ARG, "linear_cross_entropy: loss is NULL");
    CHECK_ERR(qkv_linear_cross_entropy(NULL, x, w, b, y, -100, 0, M, &loss), QKV_ERR_ARG, "ctx is NULL");
    CHECK(loss == NULL, "linear_cross_entropy: *loss not cleared on error");
    CHECK_ERR(qkv_linear_cross_entropy(c, NULL, w, b, y, -100, 0, M, &loss), QKV_ERR_ARG, "x is NULL");
    CHECK_ERR(qkv_linear_cross_entropy(c, x, NULL, b, y, -100, 0, M, &loss), QKV_ERR_ARG, "weight is NULL");
    CHECK_ERR(qkv_linear_cross_entropy(c, x, w, b, NULL, -100, 0, M, &loss), QKV_ERR_ARG, "target is NULL");
    CHECK_ERR(qkv_linear_cross_entropy(c, x, w, b, yf, -100, 0, M, &loss), QKV_ERR_DTYPE, "target must be QKV_I64");
    CHECK_ERR(qkv_linear_cross_entropy(c, x, w3, b, y, -100, 0, M, &loss), QKV_ERR_SHAPE,
              "x (3,4) last dim does not match weight (5,3)");
    CHECK_ERR(qkv_linear_cross_entropy(c, x, w, b6, y, -100, 0, M, &loss), QKV_ERR_SHAPE, "bias (6,), expected (5,)");
    CHECK_ERR(qkv_linear_cross_entropy(c, x, w, b, y4, -100, 0, M, &loss), QKV_ERR_SHAPE,
              "target (4,), expected x's leading dims");
    CHECK_ERR(qkv_linear_cross_entropy(c, x, w, b, y, -100, 1.5, M, &loss), QKV_ERR_ARG, "label_smoothing 1.5");
    CHECK_ERR(qkv_linear_cross_entropy(c, x, w, b, y, -100, 0, (qkv_reduction)9, &loss), QKV_ERR_ARG, "reduction 9");
    lab[1] = 5;
    CHECK_ERR(qkv_linear_cross_entropy(c, x, w, b, y, -100, 0, M, &loss), QKV_ERR_ARG,
              "linear_cross_entropy: target[1] = 5 is not a class in [0,5)");
    lab[1] = 4;
    CHECK_OK(qkv_linear_cross_entropy(c, x, w, NULL, y, -100, 0, M, &loss));
    qkv_ctx_free(c);
}

int main(void)
{
    qkv_arena *A;
    qkv_arena_new(&A, 0);
    qkv_rng r;
    qkv_rng_seed(&r, 2026);
    test_gradcheck(A, &r);
    test_against_two_ops(A, &r);
    test_accumulate_and_ignored(A, &r);
    test_bad_args(A, &r);
    qkv_arena_free(A);
    return h_finish("test_loss_linear");
}
