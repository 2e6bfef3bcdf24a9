/* test_layers.c: the layers of include/qkv/nn.h: finite-difference gradients
 * of every op and module w.r.t. every input and parameter, conv1d's im2col
 * path against its reference loop, dropout by its statistics, parameter
 * names and initialisation, bad inputs, and parity with PyTorch 1.13
 * (tools/layers_oracle.py, run through /usr/bin/python3 from the repo root:
 * forward within 1e-5, gradients within 1e-4, relative to each tensor's
 * largest element). GC_VERBOSE=1 prints every gradient check's worst error. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <unistd.h>
#include "gradcheck.h"
#include "oracle.h"

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

/* ---- dropout by its statistics --------------------------------------------- */

static void test_dropout_stats(qkv_arena *a, qkv_rng *r)
{
    int64_t n = 200000, s1[1] = {n};
    qkv_tensor *x = h_input(a, r, 1, s1, 1.0f);
    for (int64_t i = 0; i < n; i++) x->data[i] += x->data[i] < 0 ? -0.5f : 0.5f; /* nonzero */
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_tensor *y = NULL, *y2 = NULL;

    /* eval mode, and p == 0 in training: the input itself, nothing recorded */
    CHECK_OK(qkv_dropout(c, x, 0.5f, &y));
    CHECK(y == x, "dropout: eval mode did not return x itself");
    qkv_ctx_set_training(c, 1);
    CHECK_OK(qkv_dropout(c, x, 0.0f, &y));
    CHECK(y == x, "dropout: p 0 did not return x itself");

    const float ps[3] = {0.1f, 0.5f, 0.9f};
    for (int k = 0; k < 3; k++) {
        float p = ps[k];
        qkv_ctx_reset(c);
        qkv_ctx_set_seed(c, 1000 + (uint64_t)k);
        CHECK_OK(qkv_dropout(c, x, p, &y));
        if (!y) continue;
        int64_t kept = 0, bad = 0;
        for (int64_t i = 0; i < n; i++) {
            if (y->data[i] == 0.0f) continue;
            kept++;
            if (fabsf(y->data[i] - x->data[i] / (1.0f - p)) > 1e-6f * fabsf(y->data[i])) bad++;
        }
        double frac = (double)kept / (double)n, sd = sqrt(p * (1.0 - p) / (double)n);
        CHECK(fabs(frac - (1.0 - p)) < 6 * sd, "dropout p %g: kept %.5f, expected %.5f +- %.5f",
              (double)p, frac, 1.0 - p, 6 * sd);
        CHECK(bad == 0, "dropout p %g: %lld kept values not x/(1-p)", (double)p, (long long)bad);
        printf("dropout p %.1f: kept fraction %.5f over %lld elements (expected %.1f)\n", (double)p,
               frac, (long long)n, 1.0 - p);

        /* backward: dx = dy * (mask / (1-p)), recomputed from the seed */
        memset(x->grad, 0, (size_t)n * sizeof(float));
        float *dy = malloc((size_t)n * sizeof *dy);
        for (int64_t i = 0; i < n; i++) dy[i] = 1.0f + (float)(i % 7);
        CHECK_OK(qkv_backward(c, y, dy));
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; i++) {
            float want = y->data[i] == 0.0f ? 0.0f : dy[i] / (1.0f - p);
            if (fabsf(x->grad[i] - want) > 1e-6f * fabsf(want)) wrong++;
        }
        CHECK(wrong == 0, "dropout p %g: %lld gradients not dy * mask / (1-p)", (double)p, (long long)wrong);
        free(dy);

        /* the same seed draws the same mask; the next op of a step a new one */
        qkv_ctx_reset(c);
        qkv_ctx_set_seed(c, 1000 + (uint64_t)k);
        CHECK_OK(qkv_dropout(c, x, p, &y2));
        qkv_tensor *y3 = NULL;
        CHECK_OK(qkv_dropout(c, x, p, &y3));
        if (y2 && y3) {
            int64_t diff_same = 0, diff_next = 0;
            for (int64_t i = 0; i < n; i++) {
                diff_same += (y->data[i] == 0.0f) != (y2->data[i] == 0.0f);
                diff_next += (y2->data[i] == 0.0f) != (y3->data[i] == 0.0f);
            }
            CHECK(diff_same == 0, "dropout p %g: same seed, %lld mask bits differ", (double)p, (long long)diff_same);
            CHECK(diff_next > n / 20, "dropout p %g: consecutive calls share their mask (%lld differ)",
                  (double)p, (long long)diff_next);
        }
    }

    /* p == 1: zeros and zero gradients */
    qkv_ctx_reset(c);
    CHECK_OK(qkv_dropout(c, x, 1.0f, &y));
    if (y) {
        int nonzero = 0;
        for (int64_t i = 0; i < n; i++) nonzero += y->data[i] != 0.0f;
        memset(x->grad, 0, (size_t)n * sizeof(float));
        float *dy = malloc((size_t)n * sizeof *dy);
        for (int64_t i = 0; i < n; i++) dy[i] = 1.0f;
        CHECK_OK(qkv_backward(c, y, dy));
        for (int64_t i = 0; i < n; i++) nonzero += x->grad[i] != 0.0f;
        CHECK(nonzero == 0, "dropout p 1: %d nonzero outputs or gradients", nonzero);
        free(dy);
    }
    /* grad off: nothing recorded */
    qkv_ctx_reset(c);
    qkv_ctx_set_grad(c, 0);
    CHECK_OK(qkv_dropout(c, x, 0.5f, &y));
    CHECK(y && !y->requires_grad, "dropout: recorded with grad off");
    qkv_ctx_free(c);
}

/* ---- values against plain formulas ------------------------------------------ */

static void test_values(qkv_arena *a, qkv_rng *r)
{
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    float xv[6] = {-2.0f, -0.5f, 0.0f, 0.5f, 1.0f, 3.0f};
    int64_t s1[1] = {6};
    qkv_tensor *x, *y = NULL;
    CHECK_OK(qkv_tensor_wrap(qkv_ctx_arena(c), xv, 1, s1, &x));
    double worst = 0;
    for (int op = 0; op < 4; op++) {
        if (op == 0) CHECK_OK(qkv_relu(c, x, &y));
        if (op == 1) CHECK_OK(qkv_tanh(c, x, &y));
        if (op >= 2) CHECK_OK(qkv_gelu(c, x, op == 2 ? "none" : "tanh", &y));
        for (int i = 0; y && i < 6; i++) {
            double v = xv[i], want = op == 0 ? fmax(v, 0) : op == 1 ? tanh(v)
                : op == 2 ? 0.5 * v * (1 + erf(v / sqrt(2.0)))
                : 0.5 * v * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (v + 0.044715 * v * v * v)));
            worst = fmax(worst, fabs(y->data[i] - want));
        }
        CHECK(y && !y->requires_grad, "activation %d recorded without an input needing grad", op);
    }
    CHECK(worst < 1e-6, "activations: values off by %g", worst);

    /* layer_norm: mean 0, biased variance 1 per row (eps tiny) */
    int64_t s2[2] = {3, 8};
    qkv_tensor *xl = h_input(a, r, 2, s2, 3.0f), *yl = NULL;
    CHECK_OK(qkv_layer_norm(c, xl, NULL, NULL, 1e-12f, &yl));
    for (int row = 0; yl && row < 3; row++) {
        double m = 0, v = 0;
        for (int j = 0; j < 8; j++) m += yl->data[row * 8 + j];
        for (int j = 0; j < 8; j++) v += (yl->data[row * 8 + j] - m / 8) * (yl->data[row * 8 + j] - m / 8);
        CHECK(fabs(m / 8) < 1e-6 && fabs(v / 8 - 1) < 1e-5, "layer_norm row %d: mean %g, var %g", row, m / 8, v / 8);
    }

    /* cat of (N,C1,T) and (N,C2,T) along dim 1: the lecture's positional encoding */
    int64_t sa[3] = {2, 1, 4}, sb[3] = {2, 3, 4};
    qkv_tensor *ca = h_input(a, r, 3, sa, 1.0f), *cb = h_input(a, r, 3, sb, 1.0f), *yc = NULL;
    CHECK_OK(qkv_cat(c, ca, cb, 1, &yc));
    if (yc) {
        CHECK(yc->ndim == 3 && yc->shape[0] == 2 && yc->shape[1] == 4 && yc->shape[2] == 4, "cat: shape");
        CHECK(yc->data[16] == ca->data[4] && yc->data[20] == cb->data[12] && yc->data[31] == cb->data[23],
              "cat: elements misplaced");
    }
    qkv_ctx_free(c);
}

/* ---- modules: names, shapes, initialisation --------------------------------- */

static double max_abs_f(const float *x, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

static double max_abs(const qkv_tensor *t) { return max_abs_f(t->data, qkv_tensor_numel(t)); }

static void test_module_init(qkv_rng *r)
{
    qkv_params *p;
    CHECK_OK(qkv_params_new(&p));
    /* The lecture's net: Sequential(Conv1d(1,64,5,padding=2), ReLU(),
     * Conv1d(64,64,5,padding=2), ReLU(), Conv1d(64,1,5,padding=2)). */
    qkv_nn_conv1d conv[3];
    qkv_nn_relu relu[2];
    qkv_sequential net;
    CHECK_OK(qkv_sequential_init(&net));
    int64_t cin[3] = {1, 64, 64}, cout[3] = {64, 64, 1};
    for (int i = 0; i < 3; i++) {
        qkv_conv1d_opts o = qkv_conv1d_opts_default(cin[i], cout[i], 5);
        o.padding = 2;
        char prefix[16];
        snprintf(prefix, sizeof prefix, "%d.", 2 * i);
        CHECK_OK(qkv_nn_conv1d_init(&conv[i], &o, p, prefix, r));
        CHECK_OK(qkv_sequential_add(&net, &conv[i].base));
        if (i < 2) {
            CHECK_OK(qkv_nn_relu_init(&relu[i]));
            CHECK_OK(qkv_sequential_add(&net, &relu[i].base));
        }
    }
    const char *names[6] = {"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"};
    CHECK(qkv_params_count(p) == 6, "lecture net: %d parameters, expected 6", qkv_params_count(p));
    for (int i = 0; i < 6; i++) {
        qkv_tensor *t = qkv_params_find(p, names[i]);
        const qkv_nn_conv1d *cv = &conv[i / 2];
        CHECK(t && t == (i % 2 ? cv->bias : cv->weight), "lecture net: %s missing", names[i]);
        if (!t) continue;
        double bound = 1.0 / sqrt((double)(cv->o.in_channels * 5));
        double m = max_abs(t);
        /* the largest of n uniform draws is near the bound when n is large */
        double low = qkv_tensor_numel(t) >= 64 ? 0.8 * bound : 0.0;
        CHECK(m <= bound && m > low, "%s: max |w| %g, bound %g", names[i], m, bound);
    }
    CHECK(conv[1].weight->ndim == 3 && conv[1].weight->shape[0] == 64 && conv[1].weight->shape[1] == 64 &&
              conv[1].weight->shape[2] == 5, "Conv1d(64,64,5) weight shape");
    CHECK(!strcmp(net.base.type, "Sequential") && !strcmp(conv[0].base.type, "Conv1d") &&
              !strcmp(relu[0].base.type, "ReLU"), "module type names");
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_arena *a = qkv_ctx_arena(c);
    int64_t sx[3] = {4, 1, 50}, sbad[3] = {4, 2, 50};
    qkv_tensor *x = NULL, *y = NULL, *bad = NULL;
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 3, sx, &x));
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 3, sbad, &bad));
    qkv_rng_fill_uniform(r, x->data, 200, -1, 1);
    CHECK_OK(qkv_module_forward(c, &net.base, x, &y));
    CHECK(y && y->ndim == 3 && y->shape[0] == 4 && y->shape[1] == 1 && y->shape[2] == 50,
          "lecture net: output shape");
    if (y) {
        float dy[200];
        for (int i = 0; i < 200; i++) dy[i] = 1.0f;
        CHECK_OK(qkv_backward(c, y, dy));
        CHECK(max_abs_f(conv[0].bias->grad, 64) > 0,
              "lecture net: no gradient reached the first layer");
    }
    CHECK_ERR(qkv_module_forward(c, &net.base, bad, &y), QKV_ERR_SHAPE,
              "sequential: layer 0 (Conv1d): conv1d: weight (64,1,5) in_channels 1 does not match x (4,2,50) channels 2");
    qkv_ctx_free(c);
    qkv_sequential_free(&net);
    qkv_params_free(p);

    /* Linear, LayerNorm, Embedding */
    CHECK_OK(qkv_params_new(&p));
    qkv_nn_linear lin, lin_nb;
    qkv_nn_layernorm ln, ln_na;
    qkv_nn_embedding emb;
    CHECK_OK(qkv_nn_linear_init(&lin, 16, 8, 1, p, "fc.", r));
    CHECK_OK(qkv_nn_linear_init(&lin_nb, 16, 8, 0, p, "fc2.", r));
    CHECK_OK(qkv_nn_layernorm_init(&ln, 10, 1e-5f, 1, p, "norm."));
    CHECK_OK(qkv_nn_layernorm_init(&ln_na, 10, 1e-5f, 0, NULL, NULL));
    CHECK_OK(qkv_nn_embedding_init(&emb, 100, 32, 0, p, "tok.", r));
    CHECK(qkv_params_count(p) == 6, "linear/layernorm/embedding: %d parameters, expected 6", qkv_params_count(p));
    CHECK(qkv_params_find(p, "fc.weight") == lin.weight && qkv_params_find(p, "fc.bias") == lin.bias &&
              qkv_params_find(p, "fc2.weight") == lin_nb.weight && !lin_nb.bias &&
              qkv_params_find(p, "norm.weight") == ln.weight && qkv_params_find(p, "norm.bias") == ln.bias &&
              qkv_params_find(p, "tok.weight") == emb.weight && !ln_na.weight && !ln_na.bias,
          "linear/layernorm/embedding parameter names");
    CHECK(lin.weight->shape[0] == 8 && lin.weight->shape[1] == 16, "Linear(16,8) weight shape");
    CHECK(max_abs(lin.weight) <= 0.25 && max_abs(lin.weight) > 0.2 && max_abs(lin.bias) <= 0.25,
          "Linear(16,8) init outside U(-1/4, 1/4): %g %g", max_abs(lin.weight), max_abs(lin.bias));
    int ones = 1;
    for (int i = 0; i < 10; i++) ones &= ln.weight->data[i] == 1.0f && ln.bias->data[i] == 0.0f;
    CHECK(ones && ln.eps == 1e-5f, "LayerNorm init: weight ones, bias zeros");
    double s = 0, ss = 0;
    int pad_zero = 1;
    for (int64_t i = 0; i < 100 * 32; i++) {
        if (i < 32) pad_zero &= emb.weight->data[i] == 0.0f;
        else s += emb.weight->data[i], ss += (double)emb.weight->data[i] * emb.weight->data[i];
    }
    double mean = s / 3168, sd = sqrt(ss / 3168 - mean * mean);
    CHECK(pad_zero, "Embedding: padding_idx row not zeroed at init");
    CHECK(fabs(mean) < 0.1 && fabs(sd - 1) < 0.1, "Embedding init: mean %g, std %g, expected N(0,1)", mean, sd);
    qkv_params_free(p);
}

/* ---- bad inputs --------------------------------------------------------------- */

static void test_bad_ops(qkv_arena *a)
{
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_tensor *y = NULL, *x, *xb, *xi, *x4, *x0, *x35, *t3, *t24;
    int64_t s3[3] = {2, 3, 4}, s4[4] = {1, 2, 3, 4}, s35[2] = {3, 5}, s24[3] = {2, 4, 4};
    qkv_tensor_new(a, QKV_F32, 3, s3, &x);
    qkv_tensor_new(a, QKV_BOOL, 3, s3, &xb);
    qkv_tensor_new(a, QKV_I64, 3, s3, &xi);
    qkv_tensor_new(a, QKV_F32, 4, s4, &x4);
    qkv_tensor_new(a, QKV_F32, 0, NULL, &x0);
    qkv_tensor_new(a, QKV_F32, 2, s35, &x35);
    qkv_tensor_new(a, QKV_F32, 3, s3, &t3);
    qkv_tensor_new(a, QKV_F32, 3, s24, &t24);

    /* activations */
    CHECK_ERR(qkv_relu(c, x, NULL), QKV_ERR_ARG, "relu: y is NULL");
    CHECK_ERR(qkv_relu(NULL, x, &y), QKV_ERR_ARG, "relu: ctx is NULL");
    CHECK_ERR(qkv_relu(c, NULL, &y), QKV_ERR_ARG, "relu: x is NULL");
    CHECK_ERR(qkv_relu(c, xb, &y), QKV_ERR_DTYPE, "relu: x is BOOL, expected F32");
    CHECK_ERR(qkv_tanh(c, NULL, &y), QKV_ERR_ARG, "tanh: x is NULL");
    CHECK_ERR(qkv_tanh(c, xi, &y), QKV_ERR_DTYPE, "tanh: x is I64, expected F32");
    CHECK_ERR(qkv_tanh(NULL, x, &y), QKV_ERR_ARG, "tanh: ctx is NULL");
    CHECK_ERR(qkv_gelu(c, x, "none", NULL), QKV_ERR_ARG, "gelu: y is NULL");
    CHECK_ERR(qkv_gelu(c, NULL, "tanh", &y), QKV_ERR_ARG, "gelu: x is NULL");
    CHECK_ERR(qkv_gelu(c, xb, NULL, &y), QKV_ERR_DTYPE, "gelu: x is BOOL");
    CHECK_ERR(qkv_gelu(c, x, "erf", &y), QKV_ERR_ARG, "gelu: approximate 'erf' is not 'none' or 'tanh'");
    CHECK_ERR(qkv_activation_apply(c, (qkv_activation)9, x, &y), QKV_ERR_ARG,
              "activation: 9 is not a qkv_activation value");
    CHECK(y == NULL, "a failed activation leaves y NULL");
    {
        /* The one enum names every activation, and the names parse back. */
        for (int a = 0; a < 4; a++) {
            qkv_activation back = (qkv_activation)-1;
            const char *nm = qkv_activation_name((qkv_activation)a);
            CHECK(nm && qkv_activation_parse(nm, &back) == QKV_OK && back == (qkv_activation)a,
                  "activation %d round-trips through its name", a);
        }
        qkv_activation back;
        CHECK_ERR(qkv_activation_parse("swish", &back), QKV_ERR_ARG, "'swish' is not");
        CHECK(qkv_activation_name((qkv_activation)4) == NULL, "no name past the last kind");
        /* apply(kind) is the functional op of that kind, bit for bit. */
        qkv_tensor *y1, *y2;
        CHECK_OK(qkv_activation_apply(c, QKV_ACTIVATION_GELU_TANH, x, &y1));
        CHECK_OK(qkv_gelu(c, x, "tanh", &y2));
        CHECK(y1 && y2 && !memcmp(y1->data, y2->data, qkv_tensor_numel(x) * sizeof(float)),
              "apply(GELU_TANH) == gelu(tanh)");
        CHECK_OK(qkv_activation_apply(c, QKV_ACTIVATION_TANH, x, &y1));
        CHECK_OK(qkv_tanh(c, x, &y2));
        CHECK(y1 && y2 && !memcmp(y1->data, y2->data, qkv_tensor_numel(x) * sizeof(float)),
              "apply(TANH) == tanh");
    }
    CHECK(y == NULL, "gelu: *y not cleared on failure");
    CHECK_OK(qkv_relu(c, x0, &y)); /* 0-dim is a tensor too */

    /* add */
    CHECK_ERR(qkv_add(c, x, x, NULL), QKV_ERR_ARG, "add: y is NULL");
    CHECK_ERR(qkv_add(NULL, x, x, &y), QKV_ERR_ARG, "add: ctx is NULL");
    CHECK_ERR(qkv_add(c, NULL, x, &y), QKV_ERR_ARG, "add: a is NULL");
    CHECK_ERR(qkv_add(c, x, NULL, &y), QKV_ERR_ARG, "add: b is NULL");
    CHECK_ERR(qkv_add(c, x, xb, &y), QKV_ERR_DTYPE, "add: b is BOOL, expected F32");
    CHECK_ERR(qkv_add(c, x, x35, &y), QKV_ERR_SHAPE,
              "add: a (2,3,4) and b (3,5) differ, and neither is the other's trailing dims");
    CHECK_ERR(qkv_add(c, x4, t24, &y), QKV_ERR_SHAPE, "add: a (1,2,3,4) and b (2,4,4) differ");
    CHECK_ERR(qkv_add(c, x35, x4, &y), QKV_ERR_SHAPE, "add: a (3,5) and b (1,2,3,4) differ");
    CHECK_OK(qkv_add(c, x4, x, &y)); /* (1,2,3,4) + (2,3,4) broadcasts */
    CHECK(y && y->ndim == 4, "add: broadcast result shape");
    y = NULL;
    CHECK_ERR(qkv_add(c, x, x35, &y), QKV_ERR_SHAPE, "add: a (2,3,4) and b (3,5)");
    CHECK(y == NULL, "add: *y not cleared on failure");

    /* cat */
    CHECK_ERR(qkv_cat(c, x, x, 0, NULL), QKV_ERR_ARG, "cat: y is NULL");
    CHECK_ERR(qkv_cat(NULL, x, x, 0, &y), QKV_ERR_ARG, "cat: ctx is NULL");
    CHECK_ERR(qkv_cat(c, NULL, x, 0, &y), QKV_ERR_ARG, "cat: a is NULL");
    CHECK_ERR(qkv_cat(c, x, NULL, 0, &y), QKV_ERR_ARG, "cat: b is NULL");
    CHECK_ERR(qkv_cat(c, xi, x, 0, &y), QKV_ERR_DTYPE, "cat: a is I64, expected F32");
    CHECK_ERR(qkv_cat(c, x, x4, 0, &y), QKV_ERR_SHAPE,
              "cat: a (2,3,4) and b (1,2,3,4) must have the same number of dims");
    CHECK_ERR(qkv_cat(c, x0, x0, 0, &y), QKV_ERR_SHAPE, "cat: a () and b ()");
    CHECK_ERR(qkv_cat(c, x, x, 3, &y), QKV_ERR_ARG, "cat: dim 3 out of range for 3-dim tensors (expected -3..2)");
    CHECK_ERR(qkv_cat(c, x, x, -4, &y), QKV_ERR_ARG, "cat: dim -4 out of range");
    CHECK_ERR(qkv_cat(c, x, t24, 2, &y), QKV_ERR_SHAPE,
              "cat: a (2,3,4) and b (2,4,4) differ in dim 1 (only dim 2 may differ)");
    CHECK_OK(qkv_cat(c, x, t24, -2, &y));

    /* layer_norm */
    qkv_tensor *w4, *w5, *w2d, *wb;
    int64_t s1_4[1] = {4}, s1_5[1] = {5}, s2_4[2] = {1, 4};
    qkv_tensor_new(a, QKV_F32, 1, s1_4, &w4);
    qkv_tensor_new(a, QKV_F32, 1, s1_5, &w5);
    qkv_tensor_new(a, QKV_F32, 2, s2_4, &w2d);
    qkv_tensor_new(a, QKV_BOOL, 1, s1_4, &wb);
    CHECK_ERR(qkv_layer_norm(c, x, w4, w4, 1e-5f, NULL), QKV_ERR_ARG, "layer_norm: y is NULL");
    CHECK_ERR(qkv_layer_norm(NULL, x, w4, w4, 1e-5f, &y), QKV_ERR_ARG, "layer_norm: ctx is NULL");
    CHECK_ERR(qkv_layer_norm(c, NULL, w4, w4, 1e-5f, &y), QKV_ERR_ARG, "layer_norm: x is NULL");
    CHECK_ERR(qkv_layer_norm(c, xb, w4, w4, 1e-5f, &y), QKV_ERR_DTYPE, "layer_norm: x is BOOL");
    CHECK_ERR(qkv_layer_norm(c, x, wb, NULL, 1e-5f, &y), QKV_ERR_DTYPE, "layer_norm: weight is BOOL");
    CHECK_ERR(qkv_layer_norm(c, x0, NULL, NULL, 1e-5f, &y), QKV_ERR_SHAPE,
              "layer_norm: x () has no last dim to normalise over");
    CHECK_ERR(qkv_layer_norm(c, x, w5, w4, 1e-5f, &y), QKV_ERR_SHAPE,
              "layer_norm: weight (5,) does not match x (2,3,4), expected (4,)");
    CHECK_ERR(qkv_layer_norm(c, x, w4, w2d, 1e-5f, &y), QKV_ERR_SHAPE,
              "layer_norm: bias (1,4) does not match x (2,3,4), expected (4,)");
    CHECK_ERR(qkv_layer_norm(c, x, w4, w4, 0.0f, &y), QKV_ERR_ARG, "layer_norm: eps 0 must be positive and finite");
    CHECK_ERR(qkv_layer_norm(c, x, w4, w4, -1e-5f, &y), QKV_ERR_ARG, "layer_norm: eps -1e-05 must be positive");
    CHECK_ERR(qkv_layer_norm(c, x, w4, w4, NAN, &y), QKV_ERR_ARG, "layer_norm: eps nan");
    CHECK_ERR(qkv_layer_norm(c, x, w4, w4, INFINITY, &y), QKV_ERR_ARG, "layer_norm: eps inf");

    /* embedding */
    static int64_t ids_ok[6] = {0, 1, 2, 3, 4, 0}, ids_bad[6] = {0, 1, 2, 3, 10, 0}, ids_neg[6] = {0, -1};
    int64_t sw[2] = {5, 3}, si[2] = {2, 3}, si4[4] = {1, 1, 2, 3};
    qkv_tensor *emb_w, *ids, *idsb, *idsn, *ids4;
    qkv_tensor_new(a, QKV_F32, 2, sw, &emb_w);
    qkv_tensor_wrap_i64(a, ids_ok, 2, si, &ids);
    qkv_tensor_wrap_i64(a, ids_bad, 2, si, &idsb);
    qkv_tensor_wrap_i64(a, ids_neg, 2, si, &idsn);
    qkv_tensor_wrap_i64(a, ids_ok, 4, si4, &ids4);
    CHECK_ERR(qkv_embedding(c, emb_w, ids, -1, NULL), QKV_ERR_ARG, "embedding: y is NULL");
    CHECK_ERR(qkv_embedding(NULL, emb_w, ids, -1, &y), QKV_ERR_ARG, "embedding: ctx is NULL");
    CHECK_ERR(qkv_embedding(c, NULL, ids, -1, &y), QKV_ERR_ARG, "embedding: weight is NULL");
    CHECK_ERR(qkv_embedding(c, emb_w, NULL, -1, &y), QKV_ERR_ARG, "embedding: ids is NULL");
    CHECK_ERR(qkv_embedding(c, emb_w, x, -1, &y), QKV_ERR_DTYPE, "embedding: ids is F32, expected I64");
    CHECK_ERR(qkv_embedding(c, xi, ids, -1, &y), QKV_ERR_DTYPE, "embedding: weight is I64, expected F32");
    CHECK_ERR(qkv_embedding(c, x, ids, -1, &y), QKV_ERR_SHAPE,
              "embedding: weight (2,3,4) has 3 dims, expected 2 (num_embeddings,embedding_dim)");
    CHECK_ERR(qkv_embedding(c, emb_w, ids4, -1, &y), QKV_ERR_SHAPE, "embedding: ids (1,1,2,3) has 4 dims, at most 3");
    CHECK_ERR(qkv_embedding(c, emb_w, ids, 5, &y), QKV_ERR_ARG,
              "embedding: padding_idx 5 out of range for weight (5,3) (0..4, or -1 for none)");
    CHECK_ERR(qkv_embedding(c, emb_w, ids, -2, &y), QKV_ERR_ARG, "embedding: padding_idx -2 out of range");
    CHECK_ERR(qkv_embedding(c, emb_w, idsb, -1, &y), QKV_ERR_ARG,
              "embedding: ids[1][1] = 10 is out of range for weight (5,3) (0..4)");
    CHECK_ERR(qkv_embedding(c, emb_w, idsn, -1, &y), QKV_ERR_ARG, "embedding: ids[0][1] = -1 is out of range");
    CHECK(y == NULL, "embedding: *y not cleared on failure");

    /* dropout */
    CHECK_ERR(qkv_dropout(c, x, 0.5f, NULL), QKV_ERR_ARG, "dropout: y is NULL");
    CHECK_ERR(qkv_dropout(NULL, x, 0.5f, &y), QKV_ERR_ARG, "dropout: ctx is NULL");
    CHECK_ERR(qkv_dropout(c, NULL, 0.5f, &y), QKV_ERR_ARG, "dropout: x is NULL");
    CHECK_ERR(qkv_dropout(c, xb, 0.5f, &y), QKV_ERR_DTYPE, "dropout: x is BOOL, expected F32");
    CHECK_ERR(qkv_dropout(c, x, -0.1f, &y), QKV_ERR_ARG, "dropout: p -0.1 must be in [0,1]");
    CHECK_ERR(qkv_dropout(c, x, 1.5f, &y), QKV_ERR_ARG, "dropout: p 1.5 must be in [0,1]");
    CHECK_ERR(qkv_dropout(c, x, NAN, &y), QKV_ERR_ARG, "dropout: p nan must be in [0,1]");

    /* conv1d */
    qkv_tensor *cx, *cw, *cwb, *cb, *cb2, *cx2, *cw2d, *cwk0;
    int64_t sx[3] = {100, 1, 64}, sww[3] = {64, 32, 5}, swg[3] = {64, 1, 5}, sb[1] = {64}, sb2[1] = {63};
    int64_t sw2d[2] = {64, 5}, swk0[3] = {64, 1, 0}, sx2[2] = {1, 64};
    qkv_tensor_new(a, QKV_F32, 3, sx, &cx);
    qkv_tensor_new(a, QKV_F32, 3, sww, &cwb);
    qkv_tensor_new(a, QKV_F32, 3, swg, &cw);
    qkv_tensor_new(a, QKV_F32, 1, sb, &cb);
    qkv_tensor_new(a, QKV_F32, 1, sb2, &cb2);
    qkv_tensor_new(a, QKV_F32, 2, sw2d, &cw2d);
    qkv_tensor_new(a, QKV_F32, 3, swk0, &cwk0);
    qkv_tensor_new(a, QKV_F32, 2, sx2, &cx2);
    CHECK_ERR(qkv_conv1d(c, cx, cw, cb, 1, 2, 1, NULL), QKV_ERR_ARG, "conv1d: y is NULL");
    CHECK_ERR(qkv_conv1d(NULL, cx, cw, cb, 1, 2, 1, &y), QKV_ERR_ARG, "conv1d: ctx is NULL");
    CHECK_ERR(qkv_conv1d(c, NULL, cw, cb, 1, 2, 1, &y), QKV_ERR_ARG, "conv1d: x is NULL");
    CHECK_ERR(qkv_conv1d(c, cx, NULL, cb, 1, 2, 1, &y), QKV_ERR_ARG, "conv1d: weight is NULL");
    CHECK_ERR(qkv_conv1d(c, xb, cw, cb, 1, 2, 1, &y), QKV_ERR_DTYPE, "conv1d: x is BOOL, expected F32");
    CHECK_ERR(qkv_conv1d(c, cx, xi, cb, 1, 2, 1, &y), QKV_ERR_DTYPE, "conv1d: weight is I64");
    CHECK_ERR(qkv_conv1d(c, cx, cw, wb, 1, 2, 1, &y), QKV_ERR_DTYPE, "conv1d: bias is BOOL");
    CHECK_ERR(qkv_conv1d(c, x4, cw, cb, 1, 2, 1, &y), QKV_ERR_SHAPE,
              "conv1d: x (1,2,3,4) has 4 dims, expected (N,Cin,L) or (Cin,L)");
    CHECK_ERR(qkv_conv1d(c, cx, cw2d, cb, 1, 2, 1, &y), QKV_ERR_SHAPE,
              "conv1d: weight (64,5) has 2 dims, expected 3 (out_channels,in_channels,kernel_size)");
    CHECK_ERR(qkv_conv1d(c, cx, cwb, cb, 1, 2, 1, &y), QKV_ERR_SHAPE,
              "conv1d: weight (64,32,5) in_channels 32 does not match x (100,1,64) channels 1");
    CHECK_ERR(qkv_conv1d(c, cx, cwk0, NULL, 1, 0, 1, &y), QKV_ERR_SHAPE, "conv1d: weight (64,1,0) has kernel_size 0");
    CHECK_ERR(qkv_conv1d(c, cx, cw, cb2, 1, 2, 1, &y), QKV_ERR_SHAPE,
              "conv1d: bias (63,) does not match weight (64,1,5), expected (64,)");
    CHECK_ERR(qkv_conv1d(c, cx, cw, cb, 0, 2, 1, &y), QKV_ERR_ARG, "conv1d: stride 0 must be >= 1");
    CHECK_ERR(qkv_conv1d(c, cx, cw, cb, 1, -1, 1, &y), QKV_ERR_ARG, "conv1d: padding -1 must be >= 0");
    CHECK_ERR(qkv_conv1d(c, cx, cw, cb, 1, 2, 0, &y), QKV_ERR_ARG, "conv1d: dilation 0 must be >= 1");
    CHECK_ERR(qkv_conv1d(c, cx, cw, cb, 1, 0, 20, &y), QKV_ERR_SHAPE,
              "conv1d: x (100,1,64) padded length 64 (padding 0) is shorter than the kernel 5 with dilation 20 (81)");
    CHECK(y == NULL, "conv1d: *y not cleared on failure");
    CHECK_OK(qkv_conv1d(c, cx2, cw, cb, 1, 2, 1, &y)); /* unbatched (Cin,L) */
    CHECK(y && y->ndim == 2 && y->shape[0] == 64 && y->shape[1] == 64, "conv1d: unbatched output shape");
    qkv_ctx_free(c);
}

static void test_bad_modules(qkv_rng *r)
{
    qkv_params *p;
    CHECK_OK(qkv_params_new(&p));
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_tensor *y = NULL, *x;
    int64_t s3[3] = {2, 3, 4};
    qkv_tensor_new(qkv_ctx_arena(c), QKV_F32, 3, s3, &x);

    /* module_forward */
    qkv_module blank = {0};
    qkv_nn_relu relu;
    CHECK_OK(qkv_nn_relu_init(&relu));
    CHECK_ERR(qkv_module_forward(c, &relu.base, x, NULL), QKV_ERR_ARG, "module_forward: y is NULL");
    CHECK_ERR(qkv_module_forward(NULL, &relu.base, x, &y), QKV_ERR_ARG, "module_forward: ctx is NULL");
    CHECK_ERR(qkv_module_forward(c, NULL, x, &y), QKV_ERR_ARG, "module_forward: module is NULL");
    CHECK_ERR(qkv_module_forward(c, &blank, x, &y), QKV_ERR_STATE,
              "module_forward: module has no forward (was its _init called?)");
    CHECK_ERR(qkv_module_forward(c, &relu.base, NULL, &y), QKV_ERR_ARG, "relu: x is NULL");

    /* Linear */
    qkv_nn_linear lin;
    CHECK_ERR(qkv_nn_linear_init(NULL, 4, 3, 1, p, "", r), QKV_ERR_ARG, "nn_linear_init: module is NULL");
    CHECK_ERR(qkv_nn_linear_init(&lin, 4, 3, 1, NULL, "", r), QKV_ERR_ARG, "nn_linear_init: params is NULL");
    CHECK_ERR(qkv_nn_linear_init(&lin, 4, 3, 1, p, "", NULL), QKV_ERR_ARG, "nn_linear_init: rng is NULL");
    CHECK_ERR(qkv_nn_linear_init(&lin, 0, 3, 1, p, "", r), QKV_ERR_ARG,
              "nn_linear_init: in_features 0 and out_features 3 must be positive");
    CHECK_ERR(qkv_nn_linear_init(&lin, 4, -3, 1, p, "", r), QKV_ERR_ARG, "out_features -3 must be positive");
    CHECK(qkv_params_count(p) == 0, "nn_linear_init added parameters before failing its checks");
    CHECK_OK(qkv_nn_linear_init(&lin, 4, 3, 1, p, "fc.", r));
    CHECK_ERR(qkv_nn_linear_init(&lin, 4, 3, 1, p, "fc.", r), QKV_ERR_ARG, "parameter 'fc.weight' already exists");
    /* a failed _init leaves the module without a forward */
    CHECK_ERR(qkv_module_forward(c, &lin.base, x, &y), QKV_ERR_STATE, "module has no forward");
    CHECK_OK(qkv_nn_linear_init(&lin, 4, 3, 1, p, "fc2.", r));
    CHECK_OK(qkv_module_forward(c, &lin.base, x, &y));
    CHECK(y && y->ndim == 3 && y->shape[2] == 3 && !strcmp(lin.base.type, "Linear"), "Linear(4,3): y shape");

    /* Conv1d */
    qkv_nn_conv1d conv;
    qkv_conv1d_opts o = qkv_conv1d_opts_default(4, 8, 3);
    CHECK(o.stride == 1 && o.padding == 0 && o.dilation == 1 && o.bias == 1, "conv1d_opts_default");
    CHECK_ERR(qkv_nn_conv1d_init(NULL, &o, p, "", r), QKV_ERR_ARG, "nn_conv1d_init: module is NULL");
    CHECK_ERR(qkv_nn_conv1d_init(&conv, NULL, p, "", r), QKV_ERR_ARG, "nn_conv1d_init: opts is NULL");
    CHECK_ERR(qkv_nn_conv1d_init(&conv, &o, NULL, "", r), QKV_ERR_ARG, "nn_conv1d_init: params is NULL");
    CHECK_ERR(qkv_nn_conv1d_init(&conv, &o, p, "", NULL), QKV_ERR_ARG, "nn_conv1d_init: rng is NULL");
    o.kernel_size = 0;
    CHECK_ERR(qkv_nn_conv1d_init(&conv, &o, p, "", r), QKV_ERR_ARG,
              "nn_conv1d_init: in_channels 4, out_channels 8 and kernel_size 0 must be positive");
    o = qkv_conv1d_opts_default(4, 8, 3);
    o.padding = -2;
    CHECK_ERR(qkv_nn_conv1d_init(&conv, &o, p, "", r), QKV_ERR_ARG,
              "nn_conv1d_init: stride 1, padding -2, dilation 1: expected stride >= 1, padding >= 0, dilation >= 1");
    o.padding = 0;
    o.stride = 0;
    CHECK_ERR(qkv_nn_conv1d_init(&conv, &o, p, "", r), QKV_ERR_ARG, "stride 0, padding 0");
    o.stride = 1;
    o.dilation = 0;
    CHECK_ERR(qkv_nn_conv1d_init(&conv, &o, p, "", r), QKV_ERR_ARG, "dilation 0: expected");
    o.dilation = 1;
    o.bias = 0;
    CHECK_OK(qkv_nn_conv1d_init(&conv, &o, p, "conv.", r));
    CHECK(conv.bias == NULL && !qkv_params_find(p, "conv.bias"), "Conv1d(bias=False) has a bias");
    CHECK_ERR(qkv_module_forward(c, &conv.base, x, &y), QKV_ERR_SHAPE,
              "conv1d: weight (8,4,3) in_channels 4 does not match x (2,3,4) channels 3");

    /* LayerNorm */
    qkv_nn_layernorm ln;
    CHECK_ERR(qkv_nn_layernorm_init(NULL, 4, 1e-5f, 1, p, ""), QKV_ERR_ARG, "nn_layernorm_init: module is NULL");
    CHECK_ERR(qkv_nn_layernorm_init(&ln, 4, 1e-5f, 1, NULL, ""), QKV_ERR_ARG, "nn_layernorm_init: params is NULL");
    CHECK_ERR(qkv_nn_layernorm_init(&ln, 0, 1e-5f, 1, p, ""), QKV_ERR_ARG,
              "nn_layernorm_init: normalized_shape 0 must be positive");
    CHECK_ERR(qkv_nn_layernorm_init(&ln, 4, 0.0f, 1, p, ""), QKV_ERR_ARG,
              "nn_layernorm_init: eps 0 must be positive and finite");
    CHECK_OK(qkv_nn_layernorm_init(&ln, 5, 1e-5f, 1, p, "ln."));
    CHECK_ERR(qkv_module_forward(c, &ln.base, x, &y), QKV_ERR_SHAPE,
              "layer_norm: x (2,3,4) last dim does not match normalized_shape (5,)");

    /* Embedding */
    qkv_nn_embedding emb;
    CHECK_ERR(qkv_nn_embedding_init(NULL, 10, 4, -1, p, "", r), QKV_ERR_ARG, "nn_embedding_init: module is NULL");
    CHECK_ERR(qkv_nn_embedding_init(&emb, 10, 4, -1, NULL, "", r), QKV_ERR_ARG, "nn_embedding_init: params is NULL");
    CHECK_ERR(qkv_nn_embedding_init(&emb, 10, 4, -1, p, "", NULL), QKV_ERR_ARG, "nn_embedding_init: rng is NULL");
    CHECK_ERR(qkv_nn_embedding_init(&emb, 0, 4, -1, p, "", r), QKV_ERR_ARG,
              "nn_embedding_init: num_embeddings 0 and embedding_dim 4 must be positive");
    CHECK_ERR(qkv_nn_embedding_init(&emb, 10, 4, 10, p, "", r), QKV_ERR_ARG,
              "nn_embedding_init: padding_idx 10 out of range (0..9, or -1 for none)");
    CHECK_ERR(qkv_nn_embedding_init(&emb, 10, 4, -3, p, "", r), QKV_ERR_ARG, "padding_idx -3 out of range");
    CHECK_OK(qkv_nn_embedding_init(&emb, 10, 4, -1, p, "emb.", r));
    CHECK_ERR(qkv_module_forward(c, &emb.base, x, &y), QKV_ERR_DTYPE, "embedding: ids is F32, expected I64");

    /* parameterless */
    qkv_nn_gelu gelu;
    qkv_nn_dropout drop;
    CHECK_ERR(qkv_nn_relu_init(NULL), QKV_ERR_ARG, "nn_relu_init: module is NULL");
    CHECK_ERR(qkv_nn_tanh_init(NULL), QKV_ERR_ARG, "nn_tanh_init: module is NULL");
    CHECK_ERR(qkv_nn_gelu_init(NULL, "none"), QKV_ERR_ARG, "nn_gelu_init: module is NULL");
    CHECK_ERR(qkv_nn_gelu_init(&gelu, "Tanh"), QKV_ERR_ARG,
              "nn_gelu_init: approximate 'Tanh' is not 'none' or 'tanh'");
    CHECK_ERR(qkv_nn_activation_init(&gelu, (qkv_activation)-1), QKV_ERR_ARG,
              "nn_activation_init: kind -1 is not a qkv_activation value");
    CHECK_ERR(qkv_nn_dropout_init(NULL, 0.1f), QKV_ERR_ARG, "nn_dropout_init: module is NULL");
    CHECK_ERR(qkv_nn_dropout_init(&drop, 1.01f), QKV_ERR_ARG, "nn_dropout_init: p 1.01 must be in [0,1]");
    CHECK_ERR(qkv_nn_dropout_init(&drop, NAN), QKV_ERR_ARG, "nn_dropout_init: p nan must be in [0,1]");
    CHECK_OK(qkv_nn_gelu_init(&gelu, "tanh"));
    CHECK_OK(qkv_nn_dropout_init(&drop, 0.0f));
    CHECK(!strcmp(gelu.base.type, "GELU") && !strcmp(drop.base.type, "Dropout"), "GELU/Dropout type names");

    /* Sequential */
    qkv_sequential seq, raw;
    memset(&raw, 0, sizeof raw);
    CHECK_ERR(qkv_sequential_init(NULL), QKV_ERR_ARG, "sequential_init: s is NULL");
    CHECK_ERR(qkv_sequential_add(NULL, &relu.base), QKV_ERR_ARG, "sequential_add: s is NULL");
    CHECK_ERR(qkv_sequential_add(&raw, &relu.base), QKV_ERR_STATE,
              "sequential_add: s is not initialised (call qkv_sequential_init)");
    CHECK_OK(qkv_sequential_init(&seq));
    CHECK_ERR(qkv_sequential_add(&seq, NULL), QKV_ERR_ARG, "sequential_add: module is NULL");
    CHECK_ERR(qkv_sequential_add(&seq, &blank), QKV_ERR_ARG,
              "sequential_add: module has no forward (was its _init called?)");
    CHECK_ERR(qkv_sequential_add(&seq, &seq.base), QKV_ERR_ARG, "sequential_add: cannot add a Sequential to itself");
    /* empty: the identity; then relu, gelu, and a LayerNorm(5) that fails on (..,4) */
    CHECK_OK(qkv_module_forward(c, &seq.base, x, &y));
    CHECK(y == x, "empty Sequential is not the identity");
    for (int i = 0; i < 10; i++) CHECK_OK(qkv_sequential_add(&seq, i % 2 ? &gelu.base : &relu.base));
    CHECK(seq.n == 10 && seq.cap >= 10, "sequential_add: %d layers", seq.n);
    CHECK_OK(qkv_module_forward(c, &seq.base, x, &y));
    CHECK_OK(qkv_sequential_add(&seq, &ln.base));
    CHECK_ERR(qkv_module_forward(c, &seq.base, x, &y), QKV_ERR_SHAPE,
              "sequential: layer 10 (LayerNorm): layer_norm: x (2,3,4) last dim does not match normalized_shape (5,)");
    qkv_sequential_free(&seq);
    qkv_sequential_free(&seq); /* twice is harmless */
    qkv_sequential_free(NULL);
    CHECK(seq.n == 0 && seq.layers == NULL, "sequential_free left layers behind");
    qkv_ctx_free(c);
    qkv_params_free(p);
}

/* ---- PyTorch parity --------------------------------------------------------- */

typedef struct {
    const char *op;
    double fwd, grad;
    int cases;
} op_worst;

static op_worst worst[] = {{.op = "relu"}, {.op = "tanh"}, {.op = "gelu"}, {.op = "add"},
                           {.op = "cat"}, {.op = "layer_norm"}, {.op = "embedding"},
                           {.op = "conv1d"}, {.op = "linear"}, {.op = "sequential"}};
#define N_OPS ((int)(sizeof worst / sizeof worst[0]))

static op_worst *worst_of(const char *op)
{
    for (int i = 0; i < N_OPS; i++)
        if (!strcmp(worst[i].op, op)) return &worst[i];
    return NULL;
}

/* One case: the file, its inputs, and (module variant) qkv's module. */
typedef struct {
    qkv_safetensors *st;
    const char *file, *op;
    qkv_arena *a;
    qkv_tensor *x, *ta, *tb, *ids, *weight, *bias; /* from the file */
    qkv_params *p;                                  /* the module's parameters */
    qkv_nn_linear lin;
    qkv_nn_conv1d conv[3];
    qkv_nn_layernorm ln;
    qkv_nn_embedding emb;
    qkv_nn_relu relu;
    qkv_nn_gelu gelu;
    qkv_nn_tanh tanh_m;
    qkv_sequential seq;
} pcase;

/* The tensor a name of the file's "inputs" list stands for. */
static qkv_tensor *bind(pcase *k, const char *name, int module)
{
    if (!strcmp(name, "x")) return k->x;
    if (!strcmp(name, "a")) return k->ta;
    if (!strcmp(name, "b")) return k->tb;
    if (module) return qkv_params_find(k->p, name);
    if (!strcmp(name, "weight")) return k->weight;
    if (!strcmp(name, "bias")) return k->bias;
    return NULL;
}

static qkv_status call_functional(qkv_ctx *c, pcase *k, qkv_tensor **y)
{
    qkv_safetensors *st = k->st;
    const char *op = k->op;
    if (!strcmp(op, "relu")) return qkv_relu(c, k->x, y);
    if (!strcmp(op, "tanh")) return qkv_tanh(c, k->x, y);
    if (!strcmp(op, "gelu")) return qkv_gelu(c, k->x, h_meta_int(st, "approximate") ? "tanh" : "none", y);
    if (!strcmp(op, "add")) return qkv_add(c, k->ta, k->tb, y);
    if (!strcmp(op, "cat")) return qkv_cat(c, k->ta, k->tb, (int)h_meta_int(st, "dim"), y);
    if (!strcmp(op, "layer_norm"))
        return qkv_layer_norm(c, k->x, k->weight, k->bias, (float)atof(qkv_safetensors_meta(st, "eps")), y);
    if (!strcmp(op, "embedding")) return qkv_embedding(c, k->weight, k->ids, h_meta_int(st, "padding_idx"), y);
    if (!strcmp(op, "conv1d"))
        return qkv_conv1d(c, k->x, k->weight, k->bias, h_meta_int(st, "stride"), h_meta_int(st, "padding"),
                          h_meta_int(st, "dilation"), y);
    if (!strcmp(op, "linear")) return qkv_linear(c, k->x, k->weight, k->bias, y);
    return QKV_ERR_NOTFOUND; /* sequential: a module only */
}

/* Builds qkv's version of the file's torch.nn module into k (parameters in
 * k->p) and loads the file's values into it by state_dict name. */
static qkv_module *build_module(pcase *k, qkv_rng *r)
{
    qkv_safetensors *st = k->st;
    const char *mod = qkv_safetensors_meta(st, "module");
    qkv_module *m = NULL;
    if (!strcmp(mod, "Linear")) {
        CHECK_OK(qkv_nn_linear_init(&k->lin, h_meta_int(st, "in_features"), h_meta_int(st, "out_features"),
                                    (int)h_meta_int(st, "bias"), k->p, "", r));
        m = &k->lin.base;
    } else if (!strcmp(mod, "Conv1d")) {
        qkv_conv1d_opts o = qkv_conv1d_opts_default(h_meta_int(st, "in_channels"), h_meta_int(st, "out_channels"),
                                                    h_meta_int(st, "kernel_size"));
        o.stride = h_meta_int(st, "stride");
        o.padding = h_meta_int(st, "padding");
        o.dilation = h_meta_int(st, "dilation");
        o.bias = (int)h_meta_int(st, "bias");
        CHECK_OK(qkv_nn_conv1d_init(&k->conv[0], &o, k->p, "", r));
        m = &k->conv[0].base;
    } else if (!strcmp(mod, "LayerNorm")) {
        CHECK_OK(qkv_nn_layernorm_init(&k->ln, k->x->shape[k->x->ndim - 1],
                                       (float)atof(qkv_safetensors_meta(st, "eps")), 1, k->p, ""));
        m = &k->ln.base;
    } else if (!strcmp(mod, "Embedding")) {
        CHECK_OK(qkv_nn_embedding_init(&k->emb, k->weight->shape[0], k->weight->shape[1],
                                       h_meta_int(st, "padding_idx"), k->p, "", r));
        m = &k->emb.base;
    } else if (!strcmp(mod, "Sequential")) {
        /* Sequential(Conv1d(1,C,5,padding=2), ReLU(), Conv1d(C,C,5,padding=2),
         * GELU(approximate), Conv1d(C,1,1), Tanh()) */
        int64_t C = h_meta_int(st, "channels"), cin[3] = {1, C, C}, cout[3] = {C, C, 1}, ks[3] = {5, 5, 1};
        const char *prefix[3] = {"0.", "2.", "4."};
        CHECK_OK(qkv_sequential_init(&k->seq));
        CHECK_OK(qkv_nn_relu_init(&k->relu));
        CHECK_OK(qkv_nn_gelu_init(&k->gelu, h_meta_int(st, "approximate") ? "tanh" : "none"));
        CHECK_OK(qkv_nn_tanh_init(&k->tanh_m));
        qkv_module *act[3] = {&k->relu.base, &k->gelu.base, &k->tanh_m.base};
        for (int i = 0; i < 3; i++) {
            qkv_conv1d_opts o = qkv_conv1d_opts_default(cin[i], cout[i], ks[i]);
            o.padding = ks[i] / 2;
            CHECK_OK(qkv_nn_conv1d_init(&k->conv[i], &o, k->p, prefix[i], r));
            CHECK_OK(qkv_sequential_add(&k->seq, &k->conv[i].base));
            CHECK_OK(qkv_sequential_add(&k->seq, act[i]));
        }
        m = &k->seq.base;
    }
    CHECK(m != NULL, "%s: unknown module %s", k->file, mod);
    /* Every file tensor that is not an input or a result is a parameter. */
    int n = 0;
    for (int i = 0; i < qkv_safetensors_count(st); i++) {
        const char *name = qkv_safetensors_name(st, i);
        if (!strncmp(name, "grad.", 5) || !strcmp(name, "y") || !strcmp(name, "dout") || !strcmp(name, "x") ||
            !strcmp(name, "a") || !strcmp(name, "b") || !strcmp(name, "ids"))
            continue;
        qkv_tensor *t = qkv_params_find(k->p, name);
        CHECK(t != NULL, "%s: PyTorch parameter %s missing in qkv's %s", k->file, name, mod);
        if (!t) continue;
        n++;
        CHECK_OK(qkv_safetensors_read_f32(st, name, t->data, qkv_tensor_numel(t)));
    }
    CHECK(n == qkv_params_count(k->p), "%s: qkv's %s has %d parameters, PyTorch %d", k->file, mod,
          qkv_params_count(k->p), n);
    return m;
}

static void compare(pcase *k, const char *what, const float *got, const char *want_name, double tol,
                    double *worst_e)
{
    qkv_tensor *want = h_load(k->st, k->a, want_name, 1);
    CHECK(want != NULL, "%s: reference tensor %s missing", k->file, want_name);
    if (!want || !got) {
        CHECK(got != NULL, "%s: %s has no value/gradient", k->file, what);
        return;
    }
    double e = h_rel_err(got, want->data, qkv_tensor_numel(want));
    CHECK(e <= tol, "%s (%s): %s relative error %.3g > %.0e", k->file, k->op, what, e, tol);
    *worst_e = fmax(*worst_e, isnan(e) ? INFINITY : e);
}

/* One forward + backward of the functional op (module 0) or of qkv's
 * module (module 1), compared with the file. */
static void run_variant(pcase *k, int module, qkv_module *m, op_worst *w)
{
    qkv_tensor *ins[5] = {k->x, k->ta, k->tb, k->weight, k->bias};
    for (int i = 0; i < 5; i++)
        if (ins[i]) memset(ins[i]->grad, 0, (size_t)qkv_tensor_numel(ins[i]) * sizeof(float));
    qkv_params_zero_grad(k->p);
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_tensor *y = NULL;
    qkv_status s = module ? qkv_module_forward(c, m, !strcmp(k->op, "embedding") ? k->ids : k->x, &y)
                          : call_functional(c, k, &y);
    CHECK(s == QKV_OK, "%s (%s, %s): %s", k->file, k->op, module ? "module" : "functional", qkv_last_error());
    qkv_tensor *want = h_load(k->st, k->a, "y", 1), *dout = h_load(k->st, k->a, "dout", 1);
    if (s == QKV_OK && want && dout) {
        char b1[64], b2[64];
        int same = y->ndim == want->ndim && !memcmp(y->shape, want->shape, sizeof(int64_t) * (size_t)y->ndim);
        CHECK(same, "%s: y %s, PyTorch %s", k->file, qkv_shape_str(y, b1, 64), qkv_shape_str(want, b2, 64));
        if (same) {
            compare(k, "y", y->data, "y", 1e-5, &w->fwd);
            CHECK_OK(qkv_backward(c, y, dout->data));
            char list[256], gname[160];
            snprintf(list, sizeof list, "%s", qkv_safetensors_meta(k->st, "inputs"));
            for (char *save = NULL, *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
                qkv_tensor *t = bind(k, name, module);
                CHECK(t != NULL, "%s: no qkv tensor for input %s", k->file, name);
                snprintf(gname, sizeof gname, "grad.%s", name);
                if (t) compare(k, gname, t->grad, gname, 1e-4, &w->grad);
            }
        }
    }
    qkv_ctx_free(c);
}

static void run_case(const char *path, const char *file, qkv_rng *r)
{
    pcase k;
    memset(&k, 0, sizeof k);
    k.file = file;
    CHECK_OK(qkv_safetensors_open(path, &k.st));
    if (!k.st) return;
    k.op = qkv_safetensors_meta(k.st, "op");
    op_worst *w = k.op ? worst_of(k.op) : NULL;
    CHECK(w != NULL, "%s: unknown op %s", file, k.op ? k.op : "(none)");
    if (w) {
        w->cases++;
        qkv_arena_new(&k.a, 0);
        qkv_params_new(&k.p);
        k.x = h_load(k.st, k.a, "x", 1);
        k.ta = h_load(k.st, k.a, "a", 1);
        k.tb = h_load(k.st, k.a, "b", 1);
        k.ids = h_load(k.st, k.a, "ids", 1);
        k.weight = h_load(k.st, k.a, "weight", 1);
        k.bias = h_load(k.st, k.a, "bias", 1);
        qkv_module *m = qkv_safetensors_meta(k.st, "module") ? build_module(&k, r) : NULL;
        for (int ref = 0; ref < 2; ref++) {
            qkv_set_reference(ref);
            if (strcmp(k.op, "sequential")) run_variant(&k, 0, NULL, w);
            if (m) run_variant(&k, 1, m, w);
        }
        qkv_set_reference(0);
        qkv_sequential_free(&k.seq);
        qkv_params_free(k.p);
        qkv_arena_free(k.a);
    }
    qkv_safetensors_close(k.st);
}

static void test_parity(qkv_rng *r)
{
    char dir[] = "/tmp/qkv_layers_parity_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp failed");
        return;
    }
    char cmd[256], path[320];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/layers_oracle.py --out %s --seed 1", dir);
    int rc = system(cmd);
    CHECK(rc == 0, "the PyTorch oracle failed (exit %d): %s (run the test from the repo root)", rc, cmd);
    int cases = 0;
    snprintf(path, sizeof path, "%s/count", dir);
    FILE *f = rc == 0 ? fopen(path, "r") : NULL;
    if (f) {
        if (fscanf(f, "%d", &cases) != 1) cases = 0;
        fclose(f);
    }
    unlink(path);
    CHECK(rc != 0 || cases > 0, "the oracle wrote no cases");
    for (int i = 0; i < cases; i++) {
        char file[32];
        snprintf(file, sizeof file, "case_%04d", i);
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, file);
        run_case(path, file, r);
        unlink(path);
    }
    rmdir(dir);
    int total = 0;
    for (int i = 0; i < N_OPS; i++) {
        total += worst[i].cases;
        CHECK(rc != 0 || worst[i].cases > 0, "parity: no case for %s", worst[i].op);
        printf("parity %-10s %2d cases: worst forward %.3g, worst gradient %.3g\n", worst[i].op,
               worst[i].cases, worst[i].fwd, worst[i].grad);
    }
    CHECK(total == cases, "parity: ran %d of %d cases", total, cases);
}

int main(void)
{
    qkv_rng r;
    qkv_rng_seed(&r, 42);
    qkv_arena *a;
    if (qkv_arena_new(&a, 0) != QKV_OK) return 1;
    test_grad_elementwise(a, &r);
    test_grad_layer_norm(a, &r);
    test_grad_embedding(a, &r);
    test_grad_conv1d(a, &r);
    test_grad_dropout(a, &r);
    test_grad_modules(a, &r);
    test_conv_fast_vs_ref(a, &r);
    test_dropout_stats(a, &r);
    test_values(a, &r);
    test_module_init(&r);
    test_bad_ops(a);
    test_bad_modules(&r);
    test_parity(&r);
    qkv_arena_free(a);
    return h_finish("test_layers");
}
