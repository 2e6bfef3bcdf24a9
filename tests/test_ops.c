/* test_ops.c: tensors, arenas, parameters, initialisers, and the basic ops
 * (linear, permute, append_row, reshape): finite differences, reference vs
 * BLAS, bad input. */
#include "gradcheck.h"

static qkv_arena *A;
static qkv_rng R;

typedef struct {
    qkv_tensor *x, *w, *b, *row;
    int perm[4];
} op_args;

static qkv_status f_linear(qkv_ctx *c, void *u, qkv_tensor **out)
{
    op_args *a = u;
    return qkv_linear(c, a->x, a->w, a->b, out);
}

static qkv_status f_permute(qkv_ctx *c, void *u, qkv_tensor **out)
{
    op_args *a = u;
    return qkv_permute(c, a->x, a->perm, out);
}

static qkv_status f_append(qkv_ctx *c, void *u, qkv_tensor **out)
{
    op_args *a = u;
    qkv_tensor *y;
    if (qkv_append_row(c, a->x, a->row, &y)) return QKV_ERR_ARG;
    return qkv_append_row(c, y, NULL, out); /* a zero row after it */
}

/* A reshape view then a permute: gradients must reach the base. */
static qkv_status f_view_chain(qkv_ctx *c, void *u, qkv_tensor **out)
{
    op_args *a = u;
    qkv_tensor *v, *p;
    if (qkv_reshape(c, a->x, 3, (int64_t[]){2, 3, 4}, &v)) return QKV_ERR_ARG;
    if (qkv_permute(c, v, (int[]){2, 0, 1}, &p)) return QKV_ERR_ARG;
    return qkv_linear(c, p, a->w, NULL, out);
}

static void test_gradchecks(void)
{
    op_args a = {0};
    a.x = h_input(A, &R, 3, (int64_t[]){2, 3, 5}, 1);
    a.w = h_input(A, &R, 2, (int64_t[]){4, 5}, 1);
    a.b = h_input(A, &R, 1, (int64_t[]){4}, 1);
    for (int ref = 0; ref < 2; ref++) {
        qkv_set_reference(ref);
        qkv_tensor *in[3] = {a.x, a.w, a.b};
        double e = h_gradcheck(f_linear, &a, in, 3, 1e-2f, 1e-2);
        CHECK(e < 1e-2, "linear gradcheck (%s): %g", ref ? "reference" : "BLAS", e);
    }
    qkv_set_reference(0);
    int perms[][4] = {{0, 1, 2, 3}, {1, 2, 0, 3}, {3, 2, 1, 0}, {0, 2, 1, 3}, {2, 0, 3, 1}};
    a.x = h_input(A, &R, 4, (int64_t[]){2, 3, 4, 5}, 1);
    for (int i = 0; i < 5; i++) {
        memcpy(a.perm, perms[i], sizeof a.perm);
        double e = h_gradcheck(f_permute, &a, &a.x, 1, 1e-2f, 1e-2);
        CHECK(e < 1e-2, "permute (%d,%d,%d,%d) gradcheck: %g", perms[i][0], perms[i][1], perms[i][2],
              perms[i][3], e);
    }
    a.x = h_input(A, &R, 4, (int64_t[]){2, 3, 4, 2}, 1);
    a.row = h_input(A, &R, 3, (int64_t[]){1, 1, 6}, 1);
    qkv_tensor *in2[2] = {a.x, a.row};
    double e = h_gradcheck(f_append, &a, in2, 2, 1e-2f, 1e-2);
    CHECK(e < 1e-2, "append_row gradcheck: %g", e);
    a.x = h_input(A, &R, 2, (int64_t[]){6, 4}, 1);
    a.w = h_input(A, &R, 2, (int64_t[]){3, 3}, 1);
    qkv_tensor *in3[2] = {a.x, a.w};
    e = h_gradcheck(f_view_chain, &a, in3, 2, 1e-2f, 1e-2);
    CHECK(e < 1e-2, "reshape view + permute + linear gradcheck: %g", e);
}

/* The permute op moves elements where PyTorch's permute does. */
static void test_permute_values(void)
{
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_tensor *x, *y;
    qkv_tensor_new(A, QKV_F32, 3, (int64_t[]){2, 3, 4}, &x);
    for (int i = 0; i < 24; i++) x->data[i] = (float)i;
    CHECK_OK(qkv_permute(c, x, (int[]){2, 0, 1}, &y));
    int ok = y->shape[0] == 4 && y->shape[1] == 2 && y->shape[2] == 3;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 2; b++)
            for (int d = 0; d < 3; d++) ok &= y->data[(a * 2 + b) * 3 + d] == (float)(b * 12 + d * 4 + a);
    CHECK(ok, "permute(2,0,1) of arange(24).view(2,3,4)");
    qkv_ctx_free(c);
}

/* Initialisers: bounds and moments of torch.nn.init's distributions. */
static void test_init(void)
{
    qkv_tensor *t;
    qkv_tensor_new(A, QKV_F32, 2, (int64_t[]){300, 100}, &t);
    CHECK_OK(qkv_init_xavier_uniform(&R, t, 1.0f));
    double a = sqrt(6.0 / 400), mx = 0, s2 = 0;
    for (int i = 0; i < 30000; i++) {
        mx = fmax(mx, fabs(t->data[i]));
        s2 += t->data[i] * t->data[i];
    }
    CHECK(mx <= a && mx > 0.99 * a, "xavier_uniform bound %g (max %g)", a, mx);
    CHECK(fabs(sqrt(s2 / 30000) - a / sqrt(3)) < 0.01 * a, "xavier_uniform std");
    CHECK_OK(qkv_init_xavier_normal(&R, t, 1.0f));
    s2 = 0;
    double m = 0;
    for (int i = 0; i < 30000; i++) s2 += t->data[i] * t->data[i], m += t->data[i];
    CHECK(fabs(sqrt(s2 / 30000) - sqrt(2.0 / 400)) < 0.02 * sqrt(2.0 / 400) && fabs(m / 30000) < 0.002,
          "xavier_normal std %g, expected %g", sqrt(s2 / 30000), sqrt(2.0 / 400));
    CHECK_OK(qkv_init_linear_default(&R, t));
    mx = 0;
    for (int i = 0; i < 30000; i++) mx = fmax(mx, fabs(t->data[i]));
    CHECK(mx <= 0.1 && mx > 0.099, "Linear default bound 1/sqrt(100) (max %g)", mx);
    qkv_tensor *b3;
    qkv_tensor_new(A, QKV_F32, 3, (int64_t[]){1, 1, 4000}, &b3);
    CHECK_OK(qkv_init_xavier_normal(&R, b3, 1.0f)); /* bias_k: fans 4000 and 4000 */
    s2 = 0;
    for (int i = 0; i < 4000; i++) s2 += b3->data[i] * b3->data[i];
    CHECK(fabs(sqrt(s2 / 4000) - sqrt(1.0 / 4000)) < 0.05 * sqrt(1.0 / 4000), "xavier_normal of (1,1,E)");
    qkv_tensor *v1;
    qkv_tensor_new(A, QKV_F32, 1, (int64_t[]){5}, &v1);
    CHECK_ERR(qkv_init_xavier_uniform(&R, v1, 1.0f), QKV_ERR_SHAPE, "at least 2 dims");
    CHECK_ERR(qkv_init_xavier_uniform(NULL, t, 1.0f), QKV_ERR_ARG, "rng is NULL");
}

static void test_bad_input(void)
{
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_tensor *x, *w, *y, *b;
    qkv_tensor_new(A, QKV_F32, 2, (int64_t[]){3, 5}, &x);
    qkv_tensor_new(A, QKV_F32, 2, (int64_t[]){4, 6}, &w);
    CHECK_ERR(qkv_linear(c, x, w, NULL, &y), QKV_ERR_SHAPE, "x (3,5) last dim does not match weight (4,6)");
    qkv_tensor_new(A, QKV_F32, 2, (int64_t[]){4, 5}, &w);
    qkv_tensor_new(A, QKV_F32, 1, (int64_t[]){5}, &b);
    CHECK_ERR(qkv_linear(c, x, w, b, &y), QKV_ERR_SHAPE, "bias (5,), expected (4,)");
    CHECK_ERR(qkv_linear(c, x, NULL, NULL, &y), QKV_ERR_ARG, "weight is NULL");
    CHECK_ERR(qkv_linear(c, x, w, NULL, NULL), QKV_ERR_ARG, "y is NULL");
    CHECK_ERR(qkv_permute(c, x, (int[]){0, 0}, &y), QKV_ERR_ARG, "not a permutation");
    CHECK_ERR(qkv_append_row(c, x, NULL, &y), QKV_ERR_SHAPE, "expected 4 (N,H,S,D)");
    CHECK_ERR(qkv_tensor_view(A, x, 2, (int64_t[]){4, 4}, &y), QKV_ERR_SHAPE, "cannot view (3,5)");
    CHECK_ERR(qkv_tensor_narrow(A, x, 2, 2, &y), QKV_ERR_SHAPE, "2 rows from row 2 do not fit t (3,5)");
    CHECK_ERR(qkv_tensor_narrow(A, x, INT64_MAX, 2, &y), QKV_ERR_SHAPE, "from row 9223372036854775807");
    CHECK_ERR(qkv_tensor_new(A, QKV_F32, 5, (int64_t[]){1, 1, 1, 1, 1}, &y), QKV_ERR_SHAPE, "ndim 5");
    CHECK_ERR(qkv_tensor_new(A, QKV_F32, 1, (int64_t[]){-3}, &y), QKV_ERR_SHAPE, "bad size -3");
    CHECK_ERR(qkv_tensor_new(A, QKV_F32, 2, (int64_t[]){INT64_MAX / 2, 4}, &y), QKV_ERR_SHAPE, "bad size");
    CHECK_ERR(qkv_tensor_new(A, (qkv_dtype)9, 1, (int64_t[]){3}, &y), QKV_ERR_DTYPE, "unknown dtype 9");
    CHECK_ERR(qkv_tensor_wrap(A, NULL, 1, (int64_t[]){3}, &y), QKV_ERR_ARG, "data is NULL");
    qkv_params *p;
    qkv_params_new(&p);
    CHECK_OK(qkv_params_add(p, "a.", "w", 1, (int64_t[]){3}, &y));
    CHECK(qkv_params_find(p, "a.w") == y && qkv_params_numel(p) == 3, "params_find by full name");
    CHECK_ERR(qkv_params_add(p, "a.", "w", 1, (int64_t[]){3}, &y), QKV_ERR_ARG, "'a.w' already exists");
    CHECK_ERR(qkv_params_add(p, "", "", 1, (int64_t[]){3}, &y), QKV_ERR_ARG, "empty name");
    qkv_params_free(p);
    /* backward on something that needs no gradient */
    x->requires_grad = 1;
    CHECK_ERR(qkv_backward(c, x, NULL), QKV_ERR_ARG, "dout is NULL but out has 15 elements");
    qkv_tensor *s1;
    qkv_tensor_new(A, QKV_F32, 1, (int64_t[]){1}, &s1);
    CHECK_ERR(qkv_backward(c, s1, NULL), QKV_ERR_STATE, "does not require grad");
    /* arena: reuse after reset, peak tracking */
    qkv_arena *ar;
    qkv_arena_new(&ar, 1024);
    void *p1 = qkv_arena_alloc(ar, 4000);
    qkv_arena_alloc(ar, 100);
    size_t peak = qkv_arena_peak(ar);
    qkv_arena_reset(ar);
    void *p2 = qkv_arena_alloc(ar, 4000);
    CHECK(p1 == p2 && qkv_arena_used(ar) == 4032 && peak == 4160, "arena reuses its chunks after reset");
    qkv_arena_mark mk = qkv_arena_get_mark(ar);
    void *sc = qkv_arena_alloc(ar, 100);
    qkv_arena_alloc(ar, 5000); /* a new chunk */
    qkv_arena_release(ar, mk);
    CHECK(qkv_arena_used(ar) == 4032 && qkv_arena_alloc(ar, 100) == sc, "release returns to the mark");
    qkv_arena_free(ar);
    qkv_ctx_free(c);
}

/* An input's gradient, the way a user asks for it: requires_grad on the
 * input, backward, then read it (zeros where none was produced). */
static void test_input_grad(void)
{
    qkv_ctx *c;
    qkv_ctx_new(&c);
    float xd[6] = {1, -2, 3, 0.5f, 4, -1}, wd[6] = {0.5f, 1, -1, 2, 0, 3}; // x (2,3), w (2,3)
    float dout[4] = {1, 2, -1, 0.5f};                                          // (2,2)
    qkv_tensor *x, *w, *y, *z;
    qkv_tensor_wrap(A, xd, 2, (int64_t[]){2, 3}, &x);
    qkv_tensor_wrap(A, wd, 2, (int64_t[]){2, 3}, &w);
    CHECK(!x->requires_grad, "a wrapped input does not require grad by default");
    CHECK_OK(qkv_tensor_set_requires_grad(x, 1));
    CHECK_OK(qkv_linear(c, x, w, NULL, &y));
    CHECK_OK(qkv_backward(c, y, dout));
    /* y = x w^T, so dx[i][k] = sum_j dout[i][j] w[j][k], by hand here. */
    float dx[6], want[6];
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 3; k++) want[i * 3 + k] = dout[i * 2] * wd[k] + dout[i * 2 + 1] * wd[3 + k];
    CHECK_OK(qkv_tensor_read_grad(x, dx, 6));
    CHECK(h_rel_err(dx, want, 6) < 1e-6, "input gradient read back: rel err %g", h_rel_err(dx, want, 6));
    /* w did not require a gradient: reads as zeros, not garbage. */
    float dw[6] = {9, 9, 9, 9, 9, 9};
    CHECK_OK(qkv_tensor_read_grad(w, dw, 6));
    CHECK(dw[0] == 0 && dw[5] == 0 && w->grad == NULL, "a never-produced gradient reads as zeros");
    /* A view's gradient is the rows of its base's. */
    CHECK_OK(qkv_tensor_narrow(A, x, 1, 1, &z));
    float d1[3];
    CHECK_OK(qkv_tensor_read_grad(z, d1, 3));
    CHECK(d1[0] == dx[3] && d1[2] == dx[5], "a view reads its base's gradient rows");
    CHECK_ERR(qkv_tensor_read_grad(x, dx, 5), QKV_ERR_SHAPE, "n 5 is not t's 6 elements");
    CHECK_ERR(qkv_tensor_set_requires_grad(z, 1), QKV_ERR_STATE, "t is a view");
    qkv_tensor *ids;
    qkv_tensor_new(A, QKV_I64, 1, (int64_t[]){3}, &ids);
    CHECK_ERR(qkv_tensor_set_requires_grad(ids, 1), QKV_ERR_DTYPE, "only F32 tensors");
    CHECK_ERR(qkv_tensor_set_requires_grad(NULL, 1), QKV_ERR_ARG, "t is NULL");
    /* Switched off again, the input no longer gets one. */
    qkv_ctx_reset(c);
    qkv_tensor_wrap(A, xd, 2, (int64_t[]){2, 3}, &x);
    CHECK_OK(qkv_tensor_set_requires_grad(x, 1));
    CHECK_OK(qkv_tensor_set_requires_grad(x, 0));
    CHECK_OK(qkv_linear(c, x, w, NULL, &y));
    CHECK(!y->requires_grad, "nothing recorded when no input requires grad");
    qkv_ctx_free(c);
}

int main(void)
{
    qkv_arena_new(&A, 0);
    qkv_rng_seed(&R, 3);
    test_gradchecks();
    test_permute_values();
    test_init();
    test_bad_input();
    test_input_grad();
    qkv_arena_free(A);
    return h_finish("test_ops");
}
