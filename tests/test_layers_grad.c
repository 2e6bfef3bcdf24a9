/* test_layers_grad.c: the gradients of the layers of include/qkv/nn.h:
 * finite differences of every op (relu, tanh, gelu, add, cat, layer_norm,
 * embedding, dropout, conv1d) and module (Linear, LayerNorm, Embedding,
 * ReLU, a Sequential) w.r.t. every input and parameter, and conv1d's
 * im2col path against its reference loop, forward and backward.
 * GC_VERBOSE=1 prints every gradient check's worst error. */
#include "gradcheck.h"
#include "layers_helpers.h"

#define GC_EPS 1e-2f   /* finite-difference step */
#define GC_FLOOR 1e-2  /* denominator floor of the relative error */
#define GC_TOL 5e-3    /* worst relative error accepted */

/* ---- gradient checks ------------------------------------------------------ */

typedef enum { OP_RELU, OP_TANH, OP_GELU, OP_ADD, OP_CAT, OP_LN, OP_EMB, OP_DROPOUT, OP_CONV, OP_MODULE } op_id;

/* One op with its inputs and options; fwd_case runs it. */
typedef struct {
    op_id op;
    qkv_tensor *x, *a, *b, *w, *bias, *ids;
    const char *approx; /* F.gelu's approximate */
    int dim;
    float eps, p;
    int64_t padding_idx, stride, padding, dilation;
    qkv_module *m;
} gc_case;

static qkv_status fwd_case(qkv_ctx *c, void *u, qkv_tensor **out)
{
    gc_case *k = u;
    switch (k->op) {
    case OP_RELU: return qkv_relu(c, k->x, out);
    case OP_TANH: return qkv_tanh(c, k->x, out);
    case OP_GELU: return qkv_gelu(c, k->x, k->approx, out);
    case OP_ADD: return qkv_add(c, k->a, k->b, out);
    case OP_CAT: return qkv_cat(c, k->a, k->b, k->dim, out);
    case OP_LN: return qkv_layer_norm(c, k->x, k->w, k->bias, k->eps, out);
    case OP_EMB: return qkv_embedding(c, k->w, k->ids, k->padding_idx, out);
    case OP_DROPOUT: return qkv_dropout(c, k->x, k->p, out);
    case OP_CONV: return qkv_conv1d(c, k->x, k->w, k->bias, k->stride, k->padding, k->dilation, out);
    case OP_MODULE: return qkv_module_forward(c, k->m, k->x, out);
    }
    return QKV_ERR_ARG;
}

/* Checks k's gradients w.r.t. the n tensors in; what names the case. */
static void gradcheck(gc_case *k, qkv_tensor **in, int n, const char *what)
{
    double e = h_gradcheck(fwd_case, k, in, n, GC_EPS, GC_FLOOR);
    CHECK(e < GC_TOL, "%s: gradcheck error %g", what, e);
    if (getenv("GC_VERBOSE")) printf("gradcheck %-60s %.3g\n", what, e);
}

/* Moves x's elements at least 0.1 away from 0 (relu's kink). */
static void away_from_zero(qkv_tensor *x)
{
    for (int64_t i = 0; i < qkv_tensor_numel(x); i++)
        x->data[i] = x->data[i] < 0 ? x->data[i] - 0.1f : x->data[i] + 0.1f;
}

static void test_grad_elementwise(qkv_arena *a, qkv_rng *r)
{
    int64_t s3[3] = {2, 3, 4};
    gc_case k = {.op = OP_RELU, .x = h_input(a, r, 3, s3, 2.0f)};
    away_from_zero(k.x);
    gradcheck(&k, &k.x, 1, "relu (2,3,4)");
    k.op = OP_TANH;
    gradcheck(&k, &k.x, 1, "tanh (2,3,4)");
    k.op = OP_GELU;
    k.approx = "none";
    gradcheck(&k, &k.x, 1, "gelu none (2,3,4)");
    k.approx = "tanh";
    gradcheck(&k, &k.x, 1, "gelu tanh (2,3,4)");

    /* add: same shape, (N,T,C) + (T,C), (C) + (N,T,C) */
    int64_t s2[2] = {3, 4}, s1[1] = {4};
    qkv_tensor *big = h_input(a, r, 3, s3, 1.0f), *same = h_input(a, r, 3, s3, 1.0f);
    qkv_tensor *tc = h_input(a, r, 2, s2, 1.0f), *cc = h_input(a, r, 1, s1, 1.0f);
    gc_case ad = {.op = OP_ADD, .a = big, .b = same};
    qkv_tensor *in[4] = {big, same};
    gradcheck(&ad, in, 2, "add (2,3,4) + (2,3,4)");
    ad.b = in[1] = tc;
    gradcheck(&ad, in, 2, "add (2,3,4) + (3,4)");
    ad.a = in[0] = cc;
    ad.b = in[1] = big;
    gradcheck(&ad, in, 2, "add (4,) + (2,3,4)");
    ad.a = ad.b = in[0] = big; /* a tensor added to itself gets both gradients */
    gradcheck(&ad, in, 1, "add x + x");

    /* cat along each dim of (2,3,4) and (.., 2, ..) */
    for (int dim = -1; dim < 3; dim++) {
        int d = dim < 0 ? 2 : dim;
        int64_t sb[3] = {2, 3, 4};
        sb[d] = 2;
        gc_case ct = {.op = OP_CAT, .a = h_input(a, r, 3, s3, 1.0f), .b = h_input(a, r, 3, sb, 1.0f), .dim = dim};
        qkv_tensor *ci[2] = {ct.a, ct.b};
        char what[64];
        snprintf(what, sizeof what, "cat dim %d", dim);
        gradcheck(&ct, ci, 2, what);
    }
}

static void test_grad_layer_norm(qkv_arena *a, qkv_rng *r)
{
    int64_t s3[3] = {2, 3, 5}, s1[1] = {5};
    qkv_tensor *x = h_input(a, r, 3, s3, 2.0f), *w = h_input(a, r, 1, s1, 1.0f);
    qkv_tensor *b = h_input(a, r, 1, s1, 1.0f);
    const char *names[4] = {"layer_norm weight+bias", "layer_norm no affine",
                            "layer_norm weight only", "layer_norm bias only"};
    for (int mode = 0; mode < 4; mode++) {
        gc_case k = {.op = OP_LN, .x = x, .w = (mode == 0 || mode == 2) ? w : NULL,
                     .bias = (mode == 0 || mode == 3) ? b : NULL, .eps = 1e-5f};
        qkv_tensor *in[3] = {x};
        int n = 1;
        if (k.w) in[n++] = w;
        if (k.bias) in[n++] = b;
        gradcheck(&k, in, n, names[mode]);
    }
    gc_case big_eps = {.op = OP_LN, .x = x, .w = w, .bias = b, .eps = 0.5f};
    qkv_tensor *in[3] = {x, w, b};
    gradcheck(&big_eps, in, 3, "layer_norm eps 0.5");
}

static void test_grad_embedding(qkv_arena *a, qkv_rng *r)
{
    static int64_t ids_data[6] = {1, 3, 0, 3, 4, 1};
    int64_t sw[2] = {5, 3}, si[2] = {2, 3};
    qkv_tensor *ids;
    CHECK_OK(qkv_tensor_wrap_i64(a, ids_data, 2, si, &ids));
    gc_case k = {.op = OP_EMB, .w = h_input(a, r, 2, sw, 1.0f), .ids = ids, .padding_idx = -1};
    gradcheck(&k, &k.w, 1, "embedding");
    /* With padding_idx the padding row is looked up but gets no gradient (as
     * PyTorch): not a derivative, so checked by value instead. */
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_tensor *y = NULL;
    memset(k.w->grad, 0, 15 * sizeof(float));
    CHECK_OK(qkv_embedding(c, k.w, ids, 3, &y));
    if (y) {
        CHECK(y->ndim == 3 && y->shape[0] == 2 && y->shape[1] == 3 && y->shape[2] == 3, "embedding: y shape");
        CHECK(y->data[3] == k.w->data[9] && y->data[4] == k.w->data[10], "embedding: padding row not looked up");
        float dy[18];
        for (int i = 0; i < 18; i++) dy[i] = 1.0f + (float)i;
        CHECK_OK(qkv_backward(c, y, dy));
        /* row 1 is used at positions 0 and 5: dy[0..2] + dy[15..17] */
        CHECK(k.w->grad[9] == 0 && k.w->grad[10] == 0 && k.w->grad[11] == 0, "embedding: padding row got a gradient");
        CHECK(k.w->grad[3] == dy[0] + dy[15] && k.w->grad[5] == dy[2] + dy[17], "embedding: repeated id gradient not summed");
        CHECK(k.w->grad[6] == 0, "embedding: unused row 2 got a gradient");
    }
    qkv_ctx_free(c);
}

static void test_grad_conv1d(qkv_arena *a, qkv_rng *r)
{
    struct { int64_t N, Cin, Cout, K, L, stride, padding, dilation; int bias, unbatched; } cfg[] = {
        {2, 3, 2, 3, 7, 1, 1, 1, 1, 0}, {1, 2, 3, 2, 9, 2, 2, 2, 0, 0}, {2, 2, 2, 1, 5, 1, 0, 1, 1, 0},
        {1, 3, 2, 3, 6, 3, 0, 1, 1, 1}, {2, 1, 4, 5, 8, 1, 2, 1, 1, 0},
    };
    for (int ref = 0; ref < 2; ref++) {
        qkv_set_reference(ref);
        for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
            int64_t sx[3] = {cfg[i].N, cfg[i].Cin, cfg[i].L}, sw[3] = {cfg[i].Cout, cfg[i].Cin, cfg[i].K};
            int64_t sb[1] = {cfg[i].Cout};
            gc_case k = {.op = OP_CONV, .stride = cfg[i].stride, .padding = cfg[i].padding,
                         .dilation = cfg[i].dilation};
            k.x = cfg[i].unbatched ? h_input(a, r, 2, sx + 1, 1.0f) : h_input(a, r, 3, sx, 1.0f);
            k.w = h_input(a, r, 3, sw, 1.0f);
            k.bias = cfg[i].bias ? h_input(a, r, 1, sb, 1.0f) : NULL;
            qkv_tensor *in[3] = {k.x, k.w, k.bias};
            char what[160], bx[32], bw[32];
            snprintf(what, sizeof what, "conv1d %s x %s w %s stride %lld padding %lld dilation %lld%s",
                     ref ? "reference" : "im2col", qkv_shape_str(k.x, bx, sizeof bx),
                     qkv_shape_str(k.w, bw, sizeof bw), (long long)k.stride, (long long)k.padding,
                     (long long)k.dilation, cfg[i].bias ? "" : " no bias");
            gradcheck(&k, in, cfg[i].bias ? 3 : 2, what);
        }
    }
    qkv_set_reference(0);
}

static void test_grad_dropout(qkv_arena *a, qkv_rng *r)
{
    int64_t s2[2] = {6, 7};
    gc_case k = {.op = OP_DROPOUT, .x = h_input(a, r, 2, s2, 1.0f), .p = 0.3f};
    h_training = 1;
    gradcheck(&k, &k.x, 1, "dropout p 0.3, training");
    k.p = 1.0f;
    gradcheck(&k, &k.x, 1, "dropout p 1, training");
    h_training = 0;
    k.p = 0.3f;
    gradcheck(&k, &k.x, 1, "dropout p 0.3, eval");
}

/* Module gradients: every parameter of each module and of a Sequential. */
static void test_grad_modules(qkv_arena *a, qkv_rng *r)
{
    qkv_params *p;
    CHECK_OK(qkv_params_new(&p));
    qkv_nn_linear lin;
    qkv_nn_conv1d conv0, conv2, conv4;
    qkv_nn_layernorm ln;
    qkv_nn_embedding emb;
    qkv_nn_gelu gelu;
    qkv_nn_tanh tanh_m;
    qkv_nn_relu relu;
    qkv_nn_dropout drop;
    CHECK_OK(qkv_nn_linear_init(&lin, 4, 3, 1, p, "lin.", r));
    CHECK_OK(qkv_nn_layernorm_init(&ln, 4, 1e-5f, 1, p, "ln."));
    CHECK_OK(qkv_nn_embedding_init(&emb, 6, 4, 2, p, "emb.", r));
    /* non-trivial affine parameters */
    qkv_rng_fill_uniform(r, ln.weight->data, 4, 0.5f, 1.5f);
    qkv_rng_fill_uniform(r, ln.bias->data, 4, -0.5f, 0.5f);
    int64_t s3[3] = {2, 3, 4};
    qkv_tensor *x = h_input(a, r, 3, s3, 1.0f);
    gc_case k = {.op = OP_MODULE, .x = x, .m = &lin.base};
    qkv_tensor *in[8] = {x, lin.weight, lin.bias};
    gradcheck(&k, in, 3, "module Linear(4,3)");
    k.m = &ln.base;
    in[1] = ln.weight;
    in[2] = ln.bias;
    gradcheck(&k, in, 3, "module LayerNorm(4)");

    static int64_t ids_data[4] = {0, 5, 1, 3};
    int64_t si[1] = {4};
    qkv_tensor *ids;
    CHECK_OK(qkv_tensor_wrap_i64(a, ids_data, 1, si, &ids));
    gc_case ke = {.op = OP_MODULE, .x = ids, .m = &emb.base};
    gradcheck(&ke, &emb.weight, 1, "module Embedding(6,4,padding_idx=2)");

    /* Sequential(Conv1d(1,4,5,padding=2), Tanh, Conv1d(4,4,3,padding=1,dilation=2..),
     * GELU(tanh), Conv1d(4,1,1), ReLU, Dropout): every parameter at once. */
    qkv_conv1d_opts o0 = qkv_conv1d_opts_default(1, 4, 5), o2 = qkv_conv1d_opts_default(4, 4, 3);
    qkv_conv1d_opts o4 = qkv_conv1d_opts_default(4, 1, 1);
    o0.padding = 2;
    o2.padding = 2;
    o2.dilation = 2;
    CHECK_OK(qkv_nn_conv1d_init(&conv0, &o0, p, "seq.0.", r));
    CHECK_OK(qkv_nn_tanh_init(&tanh_m));
    CHECK_OK(qkv_nn_conv1d_init(&conv2, &o2, p, "seq.2.", r));
    CHECK_OK(qkv_nn_gelu_init(&gelu, "tanh"));
    CHECK_OK(qkv_nn_conv1d_init(&conv4, &o4, p, "seq.4.", r));
    CHECK_OK(qkv_nn_relu_init(&relu));
    CHECK_OK(qkv_nn_dropout_init(&drop, 0.25f));
    qkv_sequential seq;
    CHECK_OK(qkv_sequential_init(&seq));
    qkv_module *layers[6] = {&conv0.base, &tanh_m.base, &conv2.base, &gelu.base, &conv4.base, &drop.base};
    for (int i = 0; i < 6; i++) CHECK_OK(qkv_sequential_add(&seq, layers[i]));
    int64_t sx[3] = {2, 1, 9};
    qkv_tensor *xs = h_input(a, r, 3, sx, 1.0f);
    gc_case ks = {.op = OP_MODULE, .x = xs, .m = &seq.base};
    qkv_tensor *sin[7] = {xs, conv0.weight, conv0.bias, conv2.weight, conv2.bias, conv4.weight, conv4.bias};
    h_training = 1;
    gradcheck(&ks, sin, 7, "Sequential(Conv1d, Tanh, Conv1d, GELU, Conv1d, Dropout) in training");
    h_training = 0;
    qkv_sequential_free(&seq);

    /* ReLU as a module, away from its kink */
    qkv_tensor *xr = h_input(a, r, 3, s3, 1.0f);
    away_from_zero(xr);
    gc_case kr = {.op = OP_MODULE, .x = xr, .m = &relu.base};
    gradcheck(&kr, &xr, 1, "module ReLU");
    qkv_params_free(p);
}

/* ---- conv1d: im2col + gemm against the reference loop --------------------- */

/* Runs conv1d forward and backward(dy); copies y, dx, dw, db into out[0..3]
 * (each sized by the caller; out[3] unused without bias). */
static void conv_run(qkv_tensor *x, qkv_tensor *w, qkv_tensor *b, int64_t stride, int64_t padding,
                     int64_t dilation, const float *dy, float *out[4], const int64_t n[4])
{
    qkv_tensor *in[3] = {x, w, b};
    for (int i = 0; i < 3; i++)
        if (in[i]) memset(in[i]->grad, 0, (size_t)qkv_tensor_numel(in[i]) * sizeof(float));
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_tensor *y = NULL;
    CHECK_OK(qkv_conv1d(c, x, w, b, stride, padding, dilation, &y));
    if (y && qkv_tensor_numel(y) == n[0]) {
        memcpy(out[0], y->data, (size_t)n[0] * sizeof(float));
        CHECK_OK(qkv_backward(c, y, dy));
        for (int i = 0; i < 3; i++)
            if (in[i]) memcpy(out[i + 1], in[i]->grad, (size_t)n[i + 1] * sizeof(float));
    } else {
        CHECK(0, "conv1d: no output or wrong size");
    }
    qkv_ctx_free(c);
}

static void test_conv_fast_vs_ref(qkv_arena *a, qkv_rng *r)
{
    double worst_fwd = 0, worst_grad = 0;
    int configs = 0;
    for (int64_t K = 1; K <= 5; K += 2)
        for (int64_t stride = 1; stride <= 3; stride++)
            for (int64_t padding = 0; padding <= 3; padding += 3)
                for (int64_t dilation = 1; dilation <= 2; dilation++) {
                    int bias = configs % 2;
                    int64_t N = 3, Cin = 6, Cout = 7, L = 41;
                    int64_t Lout = (L + 2 * padding - dilation * (K - 1) - 1) / stride + 1;
                    int64_t sx[3] = {N, Cin, L}, sw[3] = {Cout, Cin, K}, sb[1] = {Cout};
                    qkv_tensor *x = h_input(a, r, 3, sx, 1.0f), *w = h_input(a, r, 3, sw, 1.0f);
                    qkv_tensor *b = bias ? h_input(a, r, 1, sb, 1.0f) : NULL;
                    int64_t n[4] = {N * Cout * Lout, N * Cin * L, Cout * Cin * K, Cout};
                    float *dy = malloc((size_t)n[0] * sizeof *dy), *got[2][4];
                    qkv_rng_fill_uniform(r, dy, n[0], -1, 1);
                    for (int ref = 0; ref < 2; ref++) {
                        for (int i = 0; i < 4; i++) got[ref][i] = calloc((size_t)n[i], sizeof(float));
                        qkv_set_reference(ref);
                        conv_run(x, w, b, stride, padding, dilation, dy, got[ref], n);
                    }
                    qkv_set_reference(0);
                    for (int i = 0; i < 4; i++) {
                        double e = h_rel_err(got[0][i], got[1][i], n[i]);
                        e = isnan(e) ? INFINITY : e;
                        CHECK(e <= 1e-5, "conv1d im2col vs reference: K %lld stride %lld padding %lld "
                              "dilation %lld: %s relative error %g", (long long)K, (long long)stride,
                              (long long)padding, (long long)dilation,
                              i == 0 ? "y" : i == 1 ? "dx" : i == 2 ? "dw" : "db", e);
                        if (i == 0) worst_fwd = fmax(worst_fwd, e);
                        else worst_grad = fmax(worst_grad, e);
                        free(got[0][i]);
                        free(got[1][i]);
                    }
                    free(dy);
                    configs++;
                }
    printf("conv1d im2col vs reference loop: %d configs, worst forward %.3g, worst gradient %.3g\n",
           configs, worst_fwd, worst_grad);
}

int main(void)
{
    if (!layers_setup()) return 1;
    test_grad_elementwise(A, &R);
    test_grad_layer_norm(A, &R);
    test_grad_embedding(A, &R);
    test_grad_conv1d(A, &R);
    test_grad_dropout(A, &R);
    test_grad_modules(A, &R);
    test_conv_fast_vs_ref(A, &R);
    return layers_finish("test_layers_grad");
}
