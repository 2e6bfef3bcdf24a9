/* test_loss.c: the losses of include/qkv/train.h.
 *
 *  - finite-difference checks of mse_loss and cross_entropy (every
 *    reduction, ignore_index, label smoothing, every logits layout);
 *  - cross_entropy of an intermediate tensor (tanh(x)), once (its backward
 *    writes a fresh gradient, ignored rows 0) and twice with other labels
 *    (the second backward adds to the first's);
 *  - a cross entropy whose every target is ignored, and an empty batch:
 *    0 (PyTorch: NaN) with a zero gradient;
 *  - bad input to mse_loss and cross_entropy.
 * Parity with PyTorch's losses: test_train_oracle.c. */
#include <stdint.h>
#include "gradcheck.h"

/* ---- finite differences ------------------------------------------------- */

typedef struct {
    qkv_tensor *x, *t;      /* mse: input, target; ce: logits, - */
    qkv_tensor *y;          /* ce: I64 labels */
    int64_t ignore;
    double ls;
    qkv_reduction r;
} loss_args;

static qkv_status f_mse(qkv_ctx *c, void *u, qkv_tensor **out)
{
    loss_args *a = u;
    return qkv_mse_loss(c, a->x, a->t, a->r, out);
}

static qkv_status f_ce(qkv_ctx *c, void *u, qkv_tensor **out)
{
    loss_args *a = u;
    return qkv_cross_entropy(c, a->x, a->y, a->ignore, a->ls, a->r, out);
}

/* ce(tanh(x), y), and + ce(tanh(x), y2) when y2 is set: the logits are
 * an op's output, whose gradient the cross entropy's backward writes (the
 * first) or adds to (the second). */
typedef struct {
    qkv_tensor *x, *y, *y2;
    int64_t ignore;
} mid_args;

static qkv_status f_ce_mid(qkv_ctx *c, void *u, qkv_tensor **out)
{
    mid_args *a = u;
    qkv_tensor *h, *l1, *l2;
    qkv_status st = qkv_tanh(c, a->x, &h);
    if (!st) st = qkv_cross_entropy(c, h, a->y, a->ignore, 0.0, QKV_REDUCTION_MEAN, &l1);
    if (st || !a->y2) return *out = l1, st;
    st = qkv_cross_entropy(c, h, a->y2, a->ignore, 0.0, QKV_REDUCTION_MEAN, &l2);
    return st ? st : qkv_add(c, l1, l2, out);
}

static void test_gradcheck(qkv_arena *A, qkv_rng *r)
{
    static const char *red[3] = {"mean", "sum", "none"};
    for (int ri = 0; ri < 3; ri++) {
        loss_args a = {0};
        a.r = (qkv_reduction)ri;
        int64_t shape[3] = {3, 4, 2};
        a.x = h_input(A, r, 3, shape, 1);
        a.t = h_input(A, r, 3, shape, 1);
        qkv_tensor *in[2] = {a.x, a.t};
        double e = h_gradcheck(f_mse, &a, in, 2, 1e-2f, 1e-2);
        CHECK(e < 1e-2, "mse_loss gradcheck (%s): %g", red[ri], e);
    }
    /* logits layouts: (N,C), (N,C,d1), (N,C,d1,d2), (C) */
    const int nd[4] = {2, 3, 4, 1};
    const int64_t shapes[4][4] = {{5, 4}, {3, 5, 2}, {2, 3, 2, 2}, {6}};
    const double smooth[3] = {0.0, 0.25, 1.0};
    for (int li = 0; li < 4; li++)
        for (int ri = 0; ri < 3; ri++)
            for (int si = 0; si < 3; si++) {
                loss_args a = {0};
                a.r = (qkv_reduction)ri;
                a.ls = smooth[si];
                a.ignore = si == 1 ? 1 : -100; /* an ignore_index that is also a class */
                const int64_t *sh = shapes[li];
                int64_t C = nd[li] == 1 ? sh[0] : sh[1], tshape[3];
                int tnd = nd[li] - 1;
                if (tnd > 0) tshape[0] = sh[0];
                for (int k = 1; k < tnd; k++) tshape[k] = sh[k + 1];
                a.x = h_input(A, r, nd[li], sh, 2);
                a.y = h_labels(A, r, tnd, tshape, C, nd[li] == 1 ? -100 : a.ignore);
                double e = h_gradcheck(f_ce, &a, &a.x, 1, 1e-2f, 1e-2);
                CHECK(e < 1e-2, "cross_entropy gradcheck (layout %d, %s, smoothing %g): %g", li,
                      red[ri], a.ls, e);
            }
}

static void test_gradcheck_mid(qkv_arena *A, qkv_rng *r)
{
    for (int twice = 0; twice < 2; twice++) {
        mid_args a = {0};
        a.ignore = -100;
        a.x = h_input(A, r, 2, (int64_t[]){6, 37}, 1); /* 37 classes: a vector body and a tail */
        a.y = h_labels(A, r, 1, (int64_t[]){6}, 37, -100);
        a.y2 = twice ? h_labels(A, r, 1, (int64_t[]){6}, 37, -100) : NULL;
        if (twice) a.y2->idx[1] = 5; /* a row ignored by the first loss only */
        double e = h_gradcheck(f_ce_mid, &a, &a.x, 1, 1e-2f, 1e-2);
        CHECK(e < 1e-2, "cross_entropy of tanh(x)%s gradcheck: %g", twice ? ", twice" : "", e);
    }
}

/* The logits' gradient of an ignored row is 0 even where the arena's memory
 * held another step's values (a fresh gradient is not zeroed first). */
static void test_ignored_row_fresh(qkv_arena *A, qkv_rng *r)
{
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_tensor *x = h_input(A, r, 2, (int64_t[]){4, 40}, 1);
    int64_t all[4] = {1, 2, 3, 4}, some[4] = {1, -100, 3, -100};
    for (int step = 0; step < 2; step++) {
        qkv_ctx_reset(c);
        memset(x->grad, 0, 160 * sizeof(float));
        qkv_tensor *y, *h, *loss;
        CHECK_OK(qkv_tensor_wrap_i64(qkv_ctx_arena(c), step ? some : all, 1, (int64_t[]){4}, &y));
        CHECK_OK(qkv_tanh(c, x, &h));
        CHECK_OK(qkv_cross_entropy(c, h, y, -100, 0.0, QKV_REDUCTION_MEAN, &loss));
        CHECK_OK(qkv_backward(c, loss, NULL));
        if (!step) continue;
        int zero = 1;
        for (int j = 0; j < 40; j++) zero &= x->grad[40 + j] == 0.0f && x->grad[120 + j] == 0.0f;
        CHECK(zero, "cross_entropy: an ignored row's gradient is not 0 after a step that used the memory");
    }
    qkv_ctx_free(c);
}

/* A mean cross entropy whose every target is ignored: 0 with a zero
 * gradient (PyTorch: NaN). Also sum and none: 0. */
static void test_all_ignored(qkv_arena *A, qkv_rng *r)
{
    for (int ri = 0; ri < 3; ri++) {
        qkv_ctx *c;
        CHECK_OK(qkv_ctx_new(&c));
        qkv_tensor *x = h_input(A, r, 2, (int64_t[]){3, 4}, 1);
        memset(x->grad, 0, 12 * sizeof(float));
        int64_t lab[3] = {-100, -100, -100};
        qkv_tensor *y, *loss;
        CHECK_OK(qkv_tensor_wrap_i64(A, lab, 1, (int64_t[]){3}, &y));
        CHECK_OK(qkv_cross_entropy(c, x, y, -100, 0.3, (qkv_reduction)ri, &loss));
        int64_t n = qkv_tensor_numel(loss);
        float dl[3] = {1, 1, 1};
        CHECK_OK(qkv_backward(c, loss, n == 1 ? NULL : dl));
        float zero[12] = {0};
        int ok = 1;
        for (int64_t i = 0; i < n; i++) ok &= loss->data[i] == 0.0f;
        CHECK(ok && !memcmp(x->grad, zero, sizeof zero),
              "all-ignored cross entropy (reduction %d): loss %g, want 0 and zero gradient", ri,
              loss->data[0]);
        qkv_ctx_free(c);
    }
}

/* An empty batch: MEAN gives 0 (PyTorch: NaN), SUM 0, NONE an empty loss. */
static void test_empty_batch(qkv_arena *A, qkv_rng *r)
{
    for (int ri = 0; ri < 3; ri++) {
        qkv_ctx *c;
        CHECK_OK(qkv_ctx_new(&c));
        qkv_tensor *x = h_input(A, r, 2, (int64_t[]){0, 5}, 1), *y, *loss = NULL;
        CHECK_OK(qkv_tensor_new(A, QKV_I64, 1, (int64_t[]){0}, &y));
        CHECK_OK(qkv_cross_entropy(c, x, y, -100, 0.1, (qkv_reduction)ri, &loss));
        int64_t n = loss ? qkv_tensor_numel(loss) : -1;
        CHECK(loss && (ri == 2 ? n == 0 : n == 1 && loss->data[0] == 0.0f),
              "empty batch cross entropy (reduction %d): %lld elements", ri, (long long)n);
        if (loss && n == 1) CHECK_OK(qkv_backward(c, loss, NULL));
        qkv_ctx_free(c);
    }
}

/* ---- bad input ------------------------------------------------------------------- */

static void test_bad_losses(qkv_arena *A, qkv_rng *r)
{
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_tensor *x = h_input(A, r, 2, (int64_t[]){3, 5}, 1), *t = h_input(A, r, 2, (int64_t[]){3, 5}, 1);
    qkv_tensor *t2 = h_input(A, r, 2, (int64_t[]){5, 3}, 1), *loss = (qkv_tensor *)1;
    const qkv_reduction M = QKV_REDUCTION_MEAN;
    CHECK_ERR(qkv_mse_loss(c, x, t, M, NULL), QKV_ERR_ARG, "loss is NULL");
    CHECK_ERR(qkv_mse_loss(NULL, x, t, M, &loss), QKV_ERR_ARG, "ctx is NULL");
    CHECK(loss == NULL, "mse_loss: *loss not cleared on error");
    CHECK_ERR(qkv_mse_loss(c, NULL, t, M, &loss), QKV_ERR_ARG, "input is NULL");
    CHECK_ERR(qkv_mse_loss(c, x, NULL, M, &loss), QKV_ERR_ARG, "target is NULL");
    CHECK_ERR(qkv_mse_loss(c, x, t2, M, &loss), QKV_ERR_SHAPE, "target (5,3), expected the shape of input (3,5)");
    CHECK_ERR(qkv_mse_loss(c, x, t, (qkv_reduction)7, &loss), QKV_ERR_ARG, "reduction 7");
    int64_t lab[3] = {0, 4, 2}, lab2[6] = {0};
    qkv_tensor *y, *y_bad, *y23;
    qkv_tensor_wrap_i64(A, lab, 1, (int64_t[]){3}, &y);
    qkv_tensor_wrap_i64(A, lab2, 1, (int64_t[]){4}, &y_bad);
    qkv_tensor_wrap_i64(A, lab2, 2, (int64_t[]){2, 3}, &y23);
    CHECK_ERR(qkv_mse_loss(c, x, y, M, &loss), QKV_ERR_DTYPE, "must be F32");
    CHECK_ERR(qkv_cross_entropy(c, x, y, -100, 0, M, NULL), QKV_ERR_ARG, "loss is NULL");
    CHECK_ERR(qkv_cross_entropy(NULL, x, y, -100, 0, M, &loss), QKV_ERR_ARG, "ctx is NULL");
    CHECK_ERR(qkv_cross_entropy(c, NULL, y, -100, 0, M, &loss), QKV_ERR_ARG, "logits is NULL");
    CHECK_ERR(qkv_cross_entropy(c, x, NULL, -100, 0, M, &loss), QKV_ERR_ARG, "target is NULL");
    CHECK_ERR(qkv_cross_entropy(c, x, t, -100, 0, M, &loss), QKV_ERR_DTYPE, "target must be QKV_I64");
    CHECK_ERR(qkv_cross_entropy(c, y, y, -100, 0, M, &loss), QKV_ERR_DTYPE, "logits must be F32");
    CHECK_ERR(qkv_cross_entropy(c, x, y_bad, -100, 0, M, &loss), QKV_ERR_SHAPE, "logits (3,5) and target (4,)");
    CHECK_ERR(qkv_cross_entropy(c, x, y23, -100, 0, M, &loss), QKV_ERR_SHAPE, "target (2,3)");
    CHECK_ERR(qkv_cross_entropy(c, x, y, -100, -0.1, M, &loss), QKV_ERR_ARG, "label_smoothing -0.1");
    CHECK_ERR(qkv_cross_entropy(c, x, y, -100, 1.5, M, &loss), QKV_ERR_ARG, "label_smoothing 1.5");
    CHECK_ERR(qkv_cross_entropy(c, x, y, -100, NAN, M, &loss), QKV_ERR_ARG, "label_smoothing nan");
    CHECK_ERR(qkv_cross_entropy(c, x, y, -100, 0, (qkv_reduction)-1, &loss), QKV_ERR_ARG, "reduction -1");
    lab[1] = 5;
    CHECK_ERR(qkv_cross_entropy(c, x, y, -100, 0, M, &loss), QKV_ERR_ARG,
              "target[1] = 5 is not a class in [0,5) nor ignore_index -100");
    lab[1] = -1;
    CHECK_ERR(qkv_cross_entropy(c, x, y, -100, 0, M, &loss), QKV_ERR_ARG, "target[1] = -1");
    CHECK_OK(qkv_cross_entropy(c, x, y, -1, 0, M, &loss)); /* now it is the ignore_index */
    /* (N,C,d1): the position is named in full. */
    qkv_tensor *x3 = h_input(A, r, 3, (int64_t[]){2, 3, 3}, 1);
    lab2[4] = 3;
    CHECK_ERR(qkv_cross_entropy(c, x3, y23, -100, 0, M, &loss), QKV_ERR_ARG, "target[1][1] = 3");
    lab2[4] = 0;
    qkv_tensor *x0 = h_input(A, r, 2, (int64_t[]){2, 0}, 1);
    qkv_tensor *y2;
    qkv_tensor_wrap_i64(A, lab2, 1, (int64_t[]){2}, &y2);
    CHECK_ERR(qkv_cross_entropy(c, x0, y2, -100, 0, M, &loss), QKV_ERR_SHAPE, "has no classes");
    qkv_ctx_free(c);
}


int main(void)
{
    qkv_arena *A;
    qkv_arena_new(&A, 0);
    qkv_rng r;
    qkv_rng_seed(&r, 2024);
    test_gradcheck(A, &r);
    test_gradcheck_mid(A, &r);
    test_ignored_row_fresh(A, &r);
    test_all_ignored(A, &r);
    test_empty_batch(A, &r);
    test_bad_losses(A, &r);
    qkv_arena_free(A);
    return h_finish("test_loss");
}
