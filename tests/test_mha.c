/* test_mha.c: MultiheadAttention beyond the PyTorch parity test: parameter
 * names and shapes, finite differences through the whole module, the same
 * output with and without weights, permutation equivariance, attention
 * capture, bad input; the rotary option (finite differences, its position
 * rules, invariance to a shift of every position, its errors; its PyTorch
 * parity is test_lm's, through tools/lm_torch.py). */
#include "gradcheck.h"

static qkv_arena *A;
static qkv_rng R;

static void test_params(void)
{
    struct {
        int kdim, bias, bias_kv;
        const char *names;
    } cases[] = {
        {0, 1, 0, "in_proj_weight in_proj_bias out_proj.weight out_proj.bias "},
        {5, 1, 1, "q_proj_weight k_proj_weight v_proj_weight in_proj_bias bias_k bias_v out_proj.weight out_proj.bias "},
        {0, 0, 0, "in_proj_weight out_proj.weight "},
    };
    for (int i = 0; i < 3; i++) {
        qkv_params *p;
        qkv_params_new(&p);
        qkv_mha m;
        qkv_mha_opts o = qkv_mha_opts_default(8, 2);
        o.kdim = cases[i].kdim;
        o.bias = cases[i].bias;
        o.add_bias_kv = cases[i].bias_kv;
        CHECK_OK(qkv_mha_init(&m, &o, p, "", &R));
        char got[512] = "";
        for (int j = 0; j < qkv_params_count(p); j++) {
            strcat(got, qkv_params_at(p, j)->name);
            strcat(got, " ");
        }
        CHECK(!strcmp(got, cases[i].names), "parameter names: got '%s', expected '%s'", got, cases[i].names);
        if (i == 1) {
            qkv_tensor *k = qkv_params_find(p, "k_proj_weight");
            CHECK(k && k->shape[0] == 8 && k->shape[1] == 5, "k_proj_weight is (E,kdim)");
            qkv_tensor *b = qkv_params_find(p, "in_proj_bias");
            int zero = 1;
            for (int j = 0; j < 24; j++) zero &= b->data[j] == 0.0f;
            CHECK(zero, "in_proj_bias starts at zero");
        }
        qkv_params_free(p);
    }
    qkv_params *p;
    qkv_params_new(&p);
    qkv_mha m;
    qkv_mha_opts o = qkv_mha_opts_default(8, 2);
    CHECK_OK(qkv_mha_init(&m, &o, p, "layers.0.self_attn.", &R));
    CHECK(qkv_params_find(p, "layers.0.self_attn.out_proj.weight") != NULL, "prefix goes before every name");
    qkv_params_free(p);
}

typedef struct {
    qkv_mha m;
    qkv_tensor *q, *k, *v;
    qkv_mha_args args;
} mha_case;

static qkv_status f_mha(qkv_ctx *c, void *u, qkv_tensor **out)
{
    mha_case *t = u;
    qkv_tensor *w;
    return qkv_mha_forward(c, &t->m, t->q, t->k, t->v, &t->args, out, &w);
}

/* Finite differences of f_mha (t) over q, k, v and every parameter of p,
 * with the reference and the fast kernels. */
static void check_grads(mha_case *t, qkv_params *p, const char *what)
{
    qkv_tensor *in[16] = {t->q, t->k, t->v};
    int n = 3;
    for (int i = 0; i < qkv_params_count(p) && n < 16; i++) in[n++] = qkv_params_at(p, i);
    for (int ref = 0; ref < 2; ref++) {
        qkv_set_reference(ref);
        double e = h_gradcheck(f_mha, t, in, n, 1e-2f, 1e-2);
        CHECK(e < 1e-2, "%s gradcheck (%s kernels), every input and parameter: %g", what, ref ? "reference" : "fast",
              e);
    }
    qkv_set_reference(0);
}

/* Self-attention (query, key and value the same tensor) with the packed
 * in_proj_weight: one product and one head split for q, k and v
 * (mha_project_qkv), both layouts. */
static void test_gradcheck_self(void)
{
    for (int bf = 0; bf < 2; bf++) {
        qkv_params *p;
        qkv_params_new(&p);
        mha_case t;
        qkv_mha_opts o = qkv_mha_opts_default(6, 2);
        o.batch_first = bf;
        CHECK_OK(qkv_mha_init(&t.m, &o, p, "", &R));
        for (int i = 0; i < qkv_params_count(p); i++)
            qkv_rng_fill_uniform(&R, qkv_params_at(p, i)->data, qkv_tensor_numel(qkv_params_at(p, i)), -0.7f, 0.7f);
        t.q = t.k = t.v = h_input(A, &R, 3, bf ? (int64_t[]){2, 4, 6} : (int64_t[]){4, 2, 6}, 1);
        t.args = qkv_mha_args_default();
        t.args.causal = QKV_CAUSAL_TOP_LEFT;
        qkv_tensor *in[8] = {t.q};
        int n = 1;
        for (int i = 0; i < qkv_params_count(p) && n < 8; i++) in[n++] = qkv_params_at(p, i);
        for (int ref = 0; ref < 2; ref++) {
            qkv_set_reference(ref);
            double e = h_gradcheck(f_mha, &t, in, n, 1e-2f, 1e-2);
            CHECK(e < 1e-2, "self-attention (batch_first %d) gradcheck (%s kernels): %g", bf, ref ? "reference" : "fast", e);
        }
        qkv_set_reference(0);
        qkv_params_free(p);
    }
}

static void test_gradcheck(void)
{
    qkv_params *p;
    qkv_params_new(&p);
    mha_case t;
    qkv_mha_opts o = qkv_mha_opts_default(4, 2);
    o.kdim = 3;
    o.vdim = 5;
    o.add_bias_kv = 1;
    o.add_zero_attn = 1;
    CHECK_OK(qkv_mha_init(&t.m, &o, p, "", &R));
    for (int i = 0; i < qkv_params_count(p); i++) /* non-zero biases */
        qkv_rng_fill_uniform(&R, qkv_params_at(p, i)->data, qkv_tensor_numel(qkv_params_at(p, i)), -0.7f, 0.7f);
    t.q = h_input(A, &R, 3, (int64_t[]){3, 2, 4}, 1);
    t.k = h_input(A, &R, 3, (int64_t[]){4, 2, 3}, 1);
    t.v = h_input(A, &R, 3, (int64_t[]){4, 2, 5}, 1);
    t.args = qkv_mha_args_default();
    qkv_tensor *km;
    qkv_tensor_new(A, QKV_BOOL, 2, (int64_t[]){2, 4}, &km);
    km->mask[3] = km->mask[4] = 1;
    t.args.key_padding_mask = km;
    t.args.causal = QKV_CAUSAL_BOTTOM_RIGHT;
    check_grads(&t, p, "MultiheadAttention");
    qkv_params_free(p);
}

/* nn.MultiheadAttention(16, 4, batch_first=True) in a new store. */
static void make_mha16(qkv_params **p, qkv_mha *m)
{
    qkv_params_new(p);
    qkv_mha_opts o = qkv_mha_opts_default(16, 4);
    o.batch_first = 1;
    CHECK_OK(qkv_mha_init(m, &o, *p, "", &R));
}

/* Weights requested or not, training (dropout 0) or eval: the same output;
 * and self-attention without positions is permutation-equivariant. */
static void test_consistency(void)
{
    qkv_params *p;
    qkv_mha m;
    make_mha16(&p, &m);
    int64_t L = 7, E = 16;
    qkv_tensor *x = h_input(A, &R, 3, (int64_t[]){1, L, E}, 1), *xp;
    qkv_tensor_new(A, QKV_F32, 3, x->shape, &xp);
    int perm[7] = {4, 0, 6, 2, 1, 5, 3};
    for (int i = 0; i < L; i++) memcpy(xp->data + i * E, x->data + perm[i] * E, E * 4);
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_tensor *o1, *o2, *o3, *op, *w;
    qkv_mha_args a = qkv_mha_args_default();
    CHECK_OK(qkv_mha_forward(c, &m, x, x, x, &a, &o1, &w));
    a.need_weights = 0;
    CHECK_OK(qkv_mha_forward(c, &m, x, x, x, &a, &o2, NULL));
    qkv_ctx_set_training(c, 1);
    CHECK_OK(qkv_mha_forward(c, &m, x, x, x, &a, &o3, NULL));
    CHECK(!memcmp(o1->data, o2->data, L * E * 4) && !memcmp(o1->data, o3->data, L * E * 4),
          "the same output with and without weights, in training and eval");
    CHECK_OK(qkv_mha_forward(c, &m, xp, xp, xp, &a, &op, NULL));
    double e = 0;
    for (int i = 0; i < L; i++)
        for (int j = 0; j < E; j++) e = fmax(e, fabs(op->data[i * E + j] - o1->data[perm[i] * E + j]));
    CHECK(e < 1e-5, "self-attention is permutation-equivariant (max diff %g)", e);
    qkv_ctx_free(c);
    qkv_params_free(p);
}

/* Attention capture: every MultiheadAttention forward on a capturing ctx
 * keeps its per-head weights, in call order, without changing outputs. */
static void test_capture(void)
{
    qkv_params *p;
    qkv_mha m;
    make_mha16(&p, &m);
    qkv_tensor *x = h_input(A, &R, 3, (int64_t[]){2, 5, 16}, 0), *x2 = h_input(A, &R, 3, (int64_t[]){2, 3, 16}, 0);
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_tensor *o1, *o2, *w, *w2;
    qkv_mha_args a = qkv_mha_args_default();
    a.average_attn_weights = 0;
    a.causal = QKV_CAUSAL_TOP_LEFT;
    CHECK_OK(qkv_mha_forward(c, &m, x, x, x, &a, &o1, &w)); /* (2,4,5,5) asked for */
    CHECK(!qkv_ctx_capturing(c) && qkv_ctx_captured_count(c) == 0, "capture is off by default");
    qkv_ctx_set_capture(c, 1);
    CHECK_OK(qkv_mha_forward(c, &m, x, x, x, &a, &o2, NULL));
    a.causal = QKV_CAUSAL_NONE;
    a.average_attn_weights = 1;
    CHECK_OK(qkv_mha_forward(c, &m, x2, x, x, &a, &o2, &w2)); /* cross: 3 queries, 5 keys; averaged asked */
    CHECK(qkv_ctx_captured_count(c) == 2, "two forwards captured: %d", qkv_ctx_captured_count(c));
    qkv_tensor *c0 = qkv_ctx_captured(c, 0), *c1 = qkv_ctx_captured(c, 1);
    CHECK(c0 && c0->ndim == 4 && c0->shape[0] == 2 && c0->shape[1] == 4 && c0->shape[2] == 5 &&
              c0->shape[3] == 5 && !memcmp(c0->data, w->data, 2 * 4 * 5 * 5 * sizeof(float)),
          "the first capture is the per-head weights the same call returns");
    CHECK(c1 && c1->shape[1] == 4 && c1->shape[2] == 3 && c1->shape[3] == 5 && w2->ndim == 3,
          "the second: per head (N,H,3,5) though the caller asked for the average");
    double avg_err = 0; /* the caller's average is the mean of the captured heads */
    for (int64_t i = 0; i < 3 * 5; i++) {
        double s = 0;
        for (int h = 0; h < 4; h++) s += c1->data[h * 15 + i];
        avg_err = fmax(avg_err, fabs(s / 4 - w2->data[i]));
    }
    CHECK(avg_err < 1e-6, "captured heads average to the returned weights (%g)", avg_err);
    CHECK(qkv_ctx_captured(c, 2) == NULL && qkv_ctx_captured(c, -1) == NULL, "out of range: NULL");
    /* A whole encoder: one capture per layer. */
    qkv_transformer_layer_opts lo = qkv_transformer_layer_opts_default(16, 2);
    lo.batch_first = 1;
    lo.dim_feedforward = 8;
    qkv_transformer_encoder enc;
    CHECK_OK(qkv_transformer_encoder_init(&enc, &lo, 3, 0, p, "enc.", &R));
    qkv_ctx_reset(c);
    CHECK(qkv_ctx_captured_count(c) == 0, "reset empties the capture");
    qkv_tensor *y;
    CHECK_OK(qkv_transformer_encoder_forward(c, &enc, x, NULL, &y));
    CHECK(qkv_ctx_captured_count(c) == 3 && qkv_ctx_captured(c, 2)->shape[1] == 2,
          "a 3-layer encoder captures 3 maps of 2 heads (%d)", qkv_ctx_captured_count(c));
    qkv_transformer_encoder_free(&enc);
    qkv_ctx_free(c);
    qkv_params_free(p);
}

static void test_bad_input(void)
{
    qkv_params *p;
    qkv_params_new(&p);
    qkv_mha m;
    qkv_mha_opts o = qkv_mha_opts_default(6, 4);
    CHECK_ERR(qkv_mha_init(&m, &o, p, "", &R), QKV_ERR_ARG, "embed_dim 6 not divisible by num_heads 4");
    o = qkv_mha_opts_default(0, 1);
    CHECK_ERR(qkv_mha_init(&m, &o, p, "", &R), QKV_ERR_ARG, "must be positive");
    o = qkv_mha_opts_default(8, 2);
    o.dropout = -0.5f;
    CHECK_ERR(qkv_mha_init(&m, &o, p, "", &R), QKV_ERR_ARG, "dropout -0.5");
    CHECK_ERR(qkv_mha_init(&m, NULL, p, "", &R), QKV_ERR_ARG, "opts is NULL");
    o = qkv_mha_opts_default(8, 2);
    CHECK_OK(qkv_mha_init(&m, &o, p, "", &R));
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_tensor *x, *y, *w, *k4, *x4, *bad;
    qkv_tensor_new(A, QKV_F32, 3, (int64_t[]){5, 2, 8}, &x);
    qkv_tensor_new(A, QKV_F32, 3, (int64_t[]){5, 2, 7}, &bad);
    qkv_tensor_new(A, QKV_F32, 4, (int64_t[]){1, 5, 2, 8}, &x4);
    qkv_tensor_new(A, QKV_F32, 2, (int64_t[]){5, 8}, &k4);
    qkv_mha_args a = qkv_mha_args_default();
    CHECK_ERR(qkv_mha_forward(c, &m, x4, x, x, &a, &y, &w), QKV_ERR_SHAPE, "query (1,5,2,8) has 4 dims, expected 2 or 3");
    CHECK_ERR(qkv_mha_forward(c, &m, x, k4, x, &a, &y, &w), QKV_ERR_SHAPE, "must all be batched");
    CHECK_ERR(qkv_mha_forward(c, &m, bad, x, x, &a, &y, &w), QKV_ERR_SHAPE, "query (5,2,7) last dim is not embed_dim 8");
    CHECK_ERR(qkv_mha_forward(c, &m, x, x, bad, &a, &y, &w), QKV_ERR_SHAPE, "value (5,2,7) last dim is not vdim 8");
    qkv_tensor *x3;
    qkv_tensor_new(A, QKV_F32, 3, (int64_t[]){5, 3, 8}, &x3);
    CHECK_ERR(qkv_mha_forward(c, &m, x, x3, x3, &a, &y, &w), QKV_ERR_SHAPE, "batch sizes");
    /* need_weights keeps PyTorch's default (True), but a NULL weights
     * pointer means "don't compute them": the output is the same. */
    CHECK(a.need_weights == 1, "need_weights defaults to 1 as PyTorch's");
    {
        qkv_tensor *xr, *y1, *y2;
        qkv_tensor_new(A, QKV_F32, 3, (int64_t[]){5, 2, 8}, &xr);
        qkv_rng_fill_normal(&R, xr->data, 80, 0, 1);
        CHECK_OK(qkv_mha_forward(c, &m, xr, xr, xr, &a, &y1, &w));
        CHECK(w != NULL, "weights returned when asked for");
        CHECK_OK(qkv_mha_forward(c, &m, xr, xr, xr, &a, &y2, NULL));
        CHECK(y2 && y1 && memcmp(y1->data, y2->data, 80 * sizeof(float)) == 0,
              "weights=NULL gives the same output");
    }
    CHECK_ERR(qkv_mha_forward(c, &m, NULL, x, x, &a, &y, &w), QKV_ERR_ARG, "query is NULL");
    CHECK_ERR(qkv_mha_forward(c, NULL, x, x, x, &a, &y, &w), QKV_ERR_ARG, "module is NULL");
    qkv_mha blank = {0};
    CHECK_ERR(qkv_mha_forward(c, &blank, x, x, x, &a, &y, &w), QKV_ERR_STATE, "not initialised");
    qkv_tensor *mk;
    qkv_tensor_new(A, QKV_BOOL, 2, (int64_t[]){5, 4}, &mk);
    a.attn_mask = mk;
    CHECK_ERR(qkv_mha_forward(c, &m, x, x, x, &a, &y, &w), QKV_ERR_SHAPE, "attn_mask (5,4), expected (L,S) = (5,5) or (N*num_heads,L,S) = (4,5,5)");
    qkv_tensor_new(A, QKV_BOOL, 3, (int64_t[]){2, 5, 5}, &mk);
    a.attn_mask = mk;
    CHECK_ERR(qkv_mha_forward(c, &m, x, x, x, &a, &y, &w), QKV_ERR_SHAPE, "attn_mask (2,5,5)");
    a = qkv_mha_args_default();
    qkv_tensor_new(A, QKV_BOOL, 2, (int64_t[]){5, 2}, &mk);
    a.key_padding_mask = mk;
    CHECK_ERR(qkv_mha_forward(c, &m, x, x, x, &a, &y, &w), QKV_ERR_SHAPE, "key_padding_mask (5,2), expected (2,5)");
    a = qkv_mha_args_default();
    a.causal = (qkv_causal)5;
    CHECK_ERR(qkv_mha_forward(c, &m, x, x, x, &a, &y, &w), QKV_ERR_ARG, "causal is 5");
    qkv_ctx_free(c);
    qkv_params_free(p);
}

/* ---- rotary positions ---------------------------------------------------------- */

static qkv_tensor *i64_tensor(int ndim, const int64_t *shape, const int64_t *v)
{
    qkv_tensor *t = NULL;
    CHECK_OK(qkv_tensor_new(A, QKV_I64, ndim, shape, &t));
    if (t) memcpy(t->idx, v, (size_t)qkv_tensor_numel(t) * sizeof *v);
    return t;
}

/* out of m on x (N,L,E) self-attention with args a (a fresh ctx each time). */
static qkv_tensor *rot_out(qkv_ctx *c, const qkv_mha *m, qkv_tensor *x, const qkv_mha_args *a)
{
    qkv_tensor *y = NULL;
    CHECK_OK(qkv_mha_forward(c, m, x, x, x, a, &y, NULL));
    return y;
}

static double max_diff(const qkv_tensor *a, const qkv_tensor *b)
{
    if (!a || !b) return INFINITY;
    double e = 0;
    for (int64_t i = 0; i < qkv_tensor_numel(a); i++) e = fmax(e, fabs(a->data[i] - b->data[i]));
    return e;
}

static void test_rotary(void)
{
    enum { N = 2, L = 5, E = 8 };
    qkv_params *p;
    qkv_params_new(&p);
    mha_case t;
    qkv_mha_opts o = qkv_mha_opts_default(E, 2);
    o.batch_first = 1;
    o.rotary = 1;
    o.rotary_base = 100.0f; /* angles that move within 5 positions */
    CHECK_OK(qkv_mha_init(&t.m, &o, p, "", &R));
    for (int i = 0; i < qkv_params_count(p); i++)
        qkv_rng_fill_uniform(&R, qkv_params_at(p, i)->data, qkv_tensor_numel(qkv_params_at(p, i)), -0.7f, 0.7f);
    /* finite differences: q, k, v and every parameter; row 0 left-padded by
     * 2 (positions 0,0,0,1,2 from the mask), causal */
    t.q = h_input(A, &R, 3, (int64_t[]){N, L, E}, 1);
    t.k = h_input(A, &R, 3, (int64_t[]){N, L, E}, 1);
    t.v = h_input(A, &R, 3, (int64_t[]){N, L, E}, 1);
    t.args = qkv_mha_args_default();
    qkv_tensor *km;
    qkv_tensor_new(A, QKV_BOOL, 2, (int64_t[]){N, L}, &km);
    km->mask[0] = km->mask[1] = 1;
    t.args.key_padding_mask = km;
    t.args.causal = QKV_CAUSAL_TOP_LEFT;
    check_grads(&t, p, "rotary MultiheadAttention");

    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_ctx_set_grad(c, 0);
    qkv_tensor *x = t.q;
    qkv_mha_args a = qkv_mha_args_default(), b = a;
    qkv_tensor *y0 = rot_out(c, &t.m, x, &a);
    const int64_t arange[N * L] = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4};
    b.positions = i64_tensor(2, (int64_t[]){N, L}, arange);
    CHECK(max_diff(y0, rot_out(c, &t.m, x, &b)) == 0, "rotary: no mask, no positions = positions 0..L-1");
    /* the scores see position differences only: every position + 1000 */
    int64_t shifted[N * L];
    for (int i = 0; i < N * L; i++) shifted[i] = arange[i] + 1000;
    b.positions = i64_tensor(2, (int64_t[]){N, L}, shifted);
    double e = max_diff(y0, rot_out(c, &t.m, x, &b));
    CHECK(e < 1e-5, "rotary: shifting every position leaves the output (max diff %g)", e);
    /* ... but a module without rotation differs, and so do other positions */
    qkv_mha plain = t.m;
    plain.o.rotary = 0;
    CHECK(max_diff(y0, rot_out(c, &plain, x, &a)) > 1e-3, "rotary changes the output");
    const int64_t swapped[N * L] = {0, 1, 2, 4, 3, 0, 1, 2, 3, 4};
    b.positions = i64_tensor(2, (int64_t[]){N, L}, swapped);
    CHECK(max_diff(y0, rot_out(c, &t.m, x, &b)) > 1e-3, "rotary: other positions, other output");
    /* positions from the padding mask: BOOL, F32 -inf and explicit agree */
    a.key_padding_mask = km;
    qkv_tensor *yb = rot_out(c, &t.m, x, &a);
    qkv_tensor *kf;
    qkv_tensor_new(A, QKV_F32, 2, (int64_t[]){N, L}, &kf);
    kf->data[0] = kf->data[1] = -INFINITY;
    kf->data[7] = -0.5f; /* a finite bias is not padding */
    a.key_padding_mask = kf;
    qkv_tensor *yf = rot_out(c, &t.m, x, &a);
    a.positions = i64_tensor(2, (int64_t[]){N, L}, (int64_t[]){0, 0, 0, 1, 2, 0, 1, 2, 3, 4});
    qkv_tensor *yfe = rot_out(c, &t.m, x, &a);
    a.key_padding_mask = km;
    qkv_tensor *ye = rot_out(c, &t.m, x, &a);
    CHECK(max_diff(yb, ye) == 0, "rotary: a BOOL padding mask gives positions 0,0,0,1,2 for a row padded by 2");
    CHECK(max_diff(yf, yfe) == 0 && yf && yb && !memcmp(yf->data, yb->data, L * E * sizeof(float)),
          "rotary: an F32 mask's -inf entries are the padding (its finite entries are not)");
    /* the padded row's real positions = that row alone */
    qkv_tensor *x0;
    CHECK_OK(qkv_tensor_new(A, QKV_F32, 3, (int64_t[]){1, L - 2, E}, &x0));
    memcpy(x0->data, x->data + 2 * E, (L - 2) * E * sizeof(float));
    qkv_mha_args none = qkv_mha_args_default();
    qkv_tensor *y1 = rot_out(c, &t.m, x0, &none);
    double e1 = INFINITY;
    if (y1 && yb) {
        e1 = 0;
        for (int64_t i = 0; i < (L - 2) * E; i++) e1 = fmax(e1, fabs(y1->data[i] - yb->data[2 * E + i]));
    }
    CHECK(e1 < 1e-5, "rotary: a left-padded row's outputs = the row alone (%g)", e1);
    /* unbatched: positions (L) */
    qkv_tensor *xu, *yu = NULL;
    CHECK_OK(qkv_tensor_view(A, x0, 2, (int64_t[]){L - 2, E}, &xu));
    none.positions = i64_tensor(1, (int64_t[]){L - 2}, arange);
    CHECK_OK(qkv_mha_forward(c, &t.m, xu, xu, xu, &none, &yu, NULL));
    CHECK(yu && y1 && !memcmp(yu->data, y1->data, (L - 2) * E * sizeof(float)), "rotary: unbatched, positions (L)");

    /* errors */
    qkv_tensor *y = NULL, *k3 = h_input(A, &R, 3, (int64_t[]){N, L + 1, E}, 0);
    a = qkv_mha_args_default();
    CHECK_ERR(qkv_mha_forward(c, &t.m, x, k3, k3, &a, &y, NULL), QKV_ERR_SHAPE,
              "rotary positions are for self-attention: key (2,6,8) has 6 positions, query (2,5,8) 5");
    a.positions = i64_tensor(2, (int64_t[]){1, L}, arange);
    CHECK_ERR(qkv_mha_forward(c, &t.m, x, x, x, &a, &y, NULL), QKV_ERR_SHAPE, "positions (1,5), expected (2,5)");
    a.positions = km;
    CHECK_ERR(qkv_mha_forward(c, &t.m, x, x, x, &a, &y, NULL), QKV_ERR_DTYPE, "positions must be I64");
    a.positions = i64_tensor(2, (int64_t[]){N, L}, (int64_t[]){0, 1, 2, 3, -4, 0, 1, 2, 3, 4});
    CHECK_ERR(qkv_mha_forward(c, &t.m, x, x, x, &a, &y, NULL), QKV_ERR_ARG, "rope: positions[0,4] = -4");
    a.positions = b.positions;
    CHECK_ERR(qkv_mha_forward(c, &plain, x, x, x, &a, &y, NULL), QKV_ERR_ARG,
              "positions given to a module without rotary positions");
    qkv_mha m2;
    o = qkv_mha_opts_default(6, 2);
    o.rotary = 1;
    CHECK_ERR(qkv_mha_init(&m2, &o, p, "", &R), QKV_ERR_ARG, "rotary positions need an even head_dim, not 3");
    o = qkv_mha_opts_default(8, 2);
    o.rotary = 1;
    o.rotary_base = -1.0f;
    CHECK_ERR(qkv_mha_init(&m2, &o, p, "", &R), QKV_ERR_ARG, "rotary_base -1 must be positive");
    qkv_ctx_free(c);
    qkv_params_free(p);
}

/* Self-attention without weights asked for reads the heads where the
 * packed projection holds them and writes its output merged (no split, no
 * merge, mha_attend_packed); asked for weights it takes the split path.
 * Both must give the same bits: output, input gradient, every parameter's
 * gradient. Batch-first and not, unbatched, masks, dropout, and 150 keys
 * (two key tiles: dq summed from per-thread buffers); FP32 and BF16. */
static void test_packed_path(void)
{
    struct {
        int64_t N, L, E, H;
        int bf, unbatched, causal, kpm;
        float dropout;
    } cases[] = {{3, 50, 64, 4, 1, 0, 0, 0, 0.0f}, {2, 150, 16, 2, 0, 0, 1, 1, 0.0f},
                 {2, 37, 24, 3, 1, 0, 0, 1, 0.2f}, {1, 9, 8, 2, 0, 1, 1, 0, 0.0f}};
    for (size_t t = 0; t < 2 * sizeof cases / sizeof *cases; t++) {
        /* each case in FP32, then in the BF16 mode (bf16 products and attention) */
        qkv_precision prec = t < sizeof cases / sizeof *cases ? QKV_FP32 : QKV_BF16;
        size_t ci = t % (sizeof cases / sizeof *cases);
        qkv_params *p;
        qkv_mha m;
        qkv_params_new(&p);
        qkv_mha_opts o = qkv_mha_opts_default(cases[ci].E, cases[ci].H);
        o.batch_first = cases[ci].bf;
        o.dropout = cases[ci].dropout;
        CHECK_OK(qkv_mha_init(&m, &o, p, "", &R));
        int64_t N = cases[ci].N, L = cases[ci].L, E = cases[ci].E, n = N * L * E;
        int64_t shape[3] = {cases[ci].bf ? N : L, cases[ci].bf ? L : N, E};
        qkv_tensor *kp = NULL;
        if (cases[ci].kpm) {
            qkv_tensor_new(A, QKV_BOOL, 2, (int64_t[]){N, L}, &kp);
            for (int64_t j = L - 5; j < L; j++) kp->mask[j] = 1; /* batch 0's last 5 keys */
        }
        float *xd = malloc(n * 4), *dy = malloc(n * 4), *res[2][3];
        int64_t np = qkv_params_numel(p);
        qkv_rng_fill_uniform(&R, xd, n, -1, 1);
        qkv_rng_fill_uniform(&R, dy, n, -1, 1);
        for (int path = 0; path < 2; path++) {
            qkv_ctx *c;
            qkv_ctx_new(&c);
            qkv_ctx_set_training(c, 1);
            CHECK_OK(qkv_ctx_set_precision(c, prec));
            qkv_params_zero_grad(p);
            qkv_tensor *x, *y, *w = NULL;
            /* unbatched: against the split path on (L,1,E) (unbatched, the
             * split path projects query, key and value one by one) */
            int unb = cases[ci].unbatched && path == 1;
            CHECK_OK(qkv_tensor_wrap(qkv_ctx_arena(c), xd, unb ? 2 : 3, unb ? (int64_t[]){L, E} : shape, &x));
            qkv_tensor_set_requires_grad(x, 1);
            qkv_mha_args a = qkv_mha_args_default();
            a.need_weights = path == 0;
            a.key_padding_mask = kp;
            a.causal = cases[ci].causal ? QKV_CAUSAL_TOP_LEFT : QKV_CAUSAL_NONE;
            CHECK_OK(qkv_mha_forward(c, &m, x, x, x, &a, &y, path == 0 ? &w : NULL));
            CHECK_OK(qkv_backward(c, y, dy));
            res[path][0] = malloc(n * 4), res[path][1] = malloc(n * 4), res[path][2] = malloc(np * 4);
            memcpy(res[path][0], y->data, n * 4);
            CHECK_OK(qkv_tensor_read_grad(x, res[path][1], n));
            for (int i = 0, off = 0; i < qkv_params_count(p); i++) {
                qkv_tensor *pt = qkv_params_at(p, i);
                int64_t k = qkv_tensor_numel(pt);
                CHECK_OK(qkv_tensor_read_grad(pt, res[path][2] + off, k));
                off += (int)k;
            }
            qkv_ctx_free(c);
        }
        CHECK(!memcmp(res[0][0], res[1][0], n * 4), "case %zu%s: packed path's output differs from the split's", ci, prec ? " (BF16)" : "");
        CHECK(!memcmp(res[0][1], res[1][1], n * 4), "case %zu%s: input gradients differ", ci, prec ? " (BF16)" : "");
        CHECK(!memcmp(res[0][2], res[1][2], np * 4), "case %zu%s: parameter gradients differ", ci, prec ? " (BF16)" : "");
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++) free(res[i][j]);
        free(xd), free(dy);
        qkv_params_free(p);
    }
}

int main(void)
{
    qkv_arena_new(&A, 0);
    qkv_rng_seed(&R, 5);
    test_params();
    test_gradcheck();
    test_gradcheck_self();
    test_consistency();
    test_packed_path();
    test_capture();
    test_bad_input();
    test_rotary();
    qkv_arena_free(A);
    return h_finish("test_mha");
}
