/* test_conv2d.c: Conv2d, MaxPool2d, BatchNorm2d and the CNN/MLP baselines
 * (src/nn/conv2d.c, pool.c, batchnorm.c, src/models/cnn.c): finite-difference
 * gradients with stride/padding/dilation variants, Conv2d's im2col path
 * against its reference loops, PyTorch parity (tools/conv_oracle.py: values
 * within 1e-5, gradients within 1e-4, norm-wise relative; BatchNorm's
 * running statistics after several steps; the CNN's forward and backward),
 * buffers (optimizer, state_dict round trip), bad input. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <unistd.h>
#include "gradcheck.h"
#include "parity.h"

/* ---- finite differences ---------------------------------------------------- */

typedef struct {
    qkv_tensor *x, *w, *b;
    int64_t s[2], p[2], d[2], k[2];
    int ceil_mode, training;
    qkv_tensor *rm, *rv;
} op_case;

static qkv_status fwd_conv(qkv_ctx *c, void *user, qkv_tensor **out)
{
    op_case *k = user;
    return qkv_conv2d(c, k->x, k->w, k->b, k->s, k->p, k->d, out);
}

static qkv_status fwd_pool(qkv_ctx *c, void *user, qkv_tensor **out)
{
    op_case *k = user;
    return qkv_max_pool2d(c, k->x, k->k, k->s[0] ? k->s : NULL, k->p, k->d, k->ceil_mode, out);
}

static qkv_status fwd_bn(qkv_ctx *c, void *user, qkv_tensor **out)
{
    op_case *k = user;
    return qkv_batch_norm(c, k->x, k->rm, k->rv, k->w, k->b, k->training, 0.1f, 1e-5f, out);
}

static void test_gradcheck_conv(void)
{
    static const struct {
        int64_t N, Cin, H, W, Cout, kh, kw, s[2], p[2], d[2];
        int bias;
    } cfg[] = {
        {2, 2, 5, 6, 3, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1},
        {1, 3, 7, 5, 2, 3, 2, {2, 1}, {0, 1}, {1, 1}, 0},
        {2, 1, 6, 7, 2, 2, 3, {2, 3}, {2, 0}, {2, 1}, 1},
        {0, 2, 4, 4, 2, 1, 1, {1, 1}, {0, 0}, {1, 1}, 1}, /* N = 0: unbatched (C,H,W) */
    };
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        qkv_arena *a;
        qkv_rng r;
        qkv_rng_seed(&r, 10 + i);
        CHECK_OK(qkv_arena_new(&a, 0));
        op_case k = {0};
        int64_t xs[4] = {cfg[i].N, cfg[i].Cin, cfg[i].H, cfg[i].W};
        int64_t ws[4] = {cfg[i].Cout, cfg[i].Cin, cfg[i].kh, cfg[i].kw};
        k.x = cfg[i].N ? h_input(a, &r, 4, xs, 1.0f) : h_input(a, &r, 3, xs + 1, 1.0f);
        k.w = h_input(a, &r, 4, ws, 0.5f);
        k.b = cfg[i].bias ? h_input(a, &r, 1, &cfg[i].Cout, 0.5f) : NULL;
        memcpy(k.s, cfg[i].s, sizeof k.s), memcpy(k.p, cfg[i].p, sizeof k.p), memcpy(k.d, cfg[i].d, sizeof k.d);
        qkv_tensor *in[3] = {k.x, k.w, k.b};
        for (int ref = 0; ref < 2; ref++) {
            qkv_set_reference(ref);
            double e = h_gradcheck(fwd_conv, &k, in, k.b ? 3 : 2, 1e-2f, 1e-2);
            CHECK(e < 2e-3, "gradcheck conv2d config %zu reference %d: worst %.3g", i, ref, e);
            printf("gradcheck conv2d config %zu%s: worst %.3g\n", i, ref ? " reference" : "", e);
        }
        qkv_set_reference(0);
        qkv_arena_free(a);
    }
}

static void test_gradcheck_pool(void)
{
    static const struct {
        int64_t N, C, H, W, k[2], s[2], p[2], d[2];
        int ceil_mode;
    } cfg[] = {
        {2, 2, 6, 6, {2, 2}, {0, 0}, {0, 0}, {1, 1}, 0},  /* stride = kernel */
        {1, 3, 7, 5, {3, 2}, {2, 1}, {1, 1}, {1, 1}, 0},  /* overlapping, padded */
        {2, 1, 7, 8, {3, 3}, {2, 2}, {1, 0}, {2, 1}, 1},  /* dilation, ceil_mode */
        {0, 2, 5, 5, {2, 2}, {2, 2}, {1, 1}, {1, 1}, 1},  /* unbatched */
    };
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        qkv_arena *a;
        qkv_rng r;
        qkv_rng_seed(&r, 20 + i);
        CHECK_OK(qkv_arena_new(&a, 0));
        op_case k = {0};
        int64_t xs[4] = {cfg[i].N, cfg[i].C, cfg[i].H, cfg[i].W};
        k.x = cfg[i].N ? h_input(a, &r, 4, xs, 1.0f) : h_input(a, &r, 3, xs + 1, 1.0f);
        memcpy(k.k, cfg[i].k, sizeof k.k), memcpy(k.s, cfg[i].s, sizeof k.s);
        memcpy(k.p, cfg[i].p, sizeof k.p), memcpy(k.d, cfg[i].d, sizeof k.d);
        k.ceil_mode = cfg[i].ceil_mode;
        /* uniform values are at least ~1e-3 apart with high probability; a
         * step of 2e-4 then never changes a window's argmax */
        double e = h_gradcheck(fwd_pool, &k, &k.x, 1, 2e-4f, 1e-2);
        CHECK(e < 2e-3, "gradcheck max_pool2d config %zu: worst %.3g", i, e);
        printf("gradcheck max_pool2d config %zu: worst %.3g\n", i, e);
        qkv_arena_free(a);
    }
}

static void test_gradcheck_bn(void)
{
    for (int i = 0; i < 4; i++) {
        int training = i < 3, affine = i != 1;
        qkv_arena *a;
        qkv_rng r;
        qkv_rng_seed(&r, 30 + i);
        CHECK_OK(qkv_arena_new(&a, 0));
        op_case k = {0};
        int64_t xs[4] = {2, 3, i == 2 ? 1 : 3, 2}, C = 3;
        k.x = h_input(a, &r, i == 2 ? 3 : 4, xs, 1.0f); /* i == 2: (N,C,L) */
        k.w = affine ? h_input(a, &r, 1, &C, 1.0f) : NULL;
        k.b = affine ? h_input(a, &r, 1, &C, 1.0f) : NULL;
        k.training = training;
        if (!training) { /* eval: fixed running statistics */
            CHECK_OK(qkv_tensor_new(a, QKV_F32, 1, &C, &k.rm));
            CHECK_OK(qkv_tensor_new(a, QKV_F32, 1, &C, &k.rv));
            for (int c = 0; c < 3; c++) k.rm->data[c] = 0.1f * c, k.rv->data[c] = 0.5f + c;
        }
        qkv_tensor *in[3] = {k.x, k.w, k.b};
        double e = h_gradcheck(fwd_bn, &k, in, affine ? 3 : 1, 1e-2f, 1e-2);
        CHECK(e < 2e-3, "gradcheck batch_norm case %d: worst %.3g", i, e);
        printf("gradcheck batch_norm %s%s%s: worst %.3g\n", training ? "train" : "eval",
               affine ? "" : " (no affine)", i == 2 ? " (N,C,L)" : "", e);
        qkv_arena_free(a);
    }
}

/* max_pool2d's choice of element, against what PyTorch 1.13 printed for
 * F.max_pool2d(x.view(1,1,2,2), 2) and its backward of ones: a NaN wins
 * (the last one), ties go to the first maximum, an all -inf window routes
 * to its first element. */
static void test_pool_special(void)
{
    static const float in[3][4] = {{1, NAN, 3, NAN}, {2, 2, 1, 2}, {-INFINITY, -INFINITY, -INFINITY, -INFINITY}};
    static const float want_dx[3][4] = {{0, 0, 0, 1}, {1, 0, 0, 0}, {1, 0, 0, 0}};
    int64_t k[2] = {2, 2};
    for (int i = 0; i < 3; i++) {
        qkv_arena *a;
        qkv_ctx *c;
        CHECK_OK(qkv_arena_new(&a, 0));
        CHECK_OK(qkv_ctx_new(&c));
        qkv_tensor *x, *y = NULL;
        CHECK_OK(qkv_tensor_new(a, QKV_F32, 4, (int64_t[]){1, 1, 2, 2}, &x));
        memcpy(x->data, in[i], sizeof in[i]);
        CHECK_OK(qkv_tensor_set_requires_grad(x, 1));
        CHECK_OK(qkv_max_pool2d(c, x, k, NULL, NULL, NULL, 0, &y));
        float one = 1.0f, dx[4] = {0};
        if (y) {
            float want = i == 0 ? NAN : i == 1 ? 2.0f : -INFINITY;
            CHECK(i == 0 ? isnan(y->data[0]) : y->data[0] == want, "max_pool2d case %d: %g", i, y->data[0]);
            CHECK_OK(qkv_backward(c, y, &one));
            CHECK_OK(qkv_tensor_read_grad(x, dx, 4));
        }
        CHECK(!memcmp(dx, want_dx[i], sizeof dx), "max_pool2d case %d: gradient (%g,%g,%g,%g)", i, dx[0],
              dx[1], dx[2], dx[3]);
        qkv_ctx_free(c);
        qkv_arena_free(a);
    }
}

/* ---- conv2d: im2col + gemm against the reference loops -------------------- */

/* Forward and backward of sum(R * y); y then dx, dw, db into buf. */
static int64_t conv_collect(op_case *k, float *buf)
{
    return h_collect(fwd_conv, k, (qkv_tensor *[]){k->x, k->w, k->b}, 3, NULL, 5, buf);
}

static void test_fast_vs_ref(void)
{
    double worst = 0;
    int n_cfg = 0;
    for (int t = 0; t < 12; t++) {
        qkv_arena *a;
        qkv_rng r;
        qkv_rng_seed(&r, 40 + t);
        CHECK_OK(qkv_arena_new(&a, 0));
        op_case k = {0};
        /* N = 9: the backward's weight gradient in several sample groups;
         * t = 0 is a 1x1 kernel with stride 1 and no padding (no unrolling) */
        int64_t N = t % 4 == 3 ? 9 : t == 0 ? 5 : 1 + t % 3, Cin = 1 + t % 4, Cout = 2 + t % 5, H = 5 + t;
        int64_t W = 4 + 2 * (t % 4);
        int64_t kh = 1 + t % 3, kw = 1 + (t / 2) % 3;
        k.s[0] = 1 + t % 2, k.s[1] = 1 + (t / 3) % 3;
        k.p[0] = t % 3, k.p[1] = (t / 2) % 2;
        k.d[0] = 1 + (t / 4) % 2, k.d[1] = 1 + (t / 5) % 2;
        int64_t xs[4] = {N, Cin, H, W}, ws[4] = {Cout, Cin, kh, kw};
        k.x = h_input(a, &r, 4, xs, 1.0f);
        k.w = h_input(a, &r, 4, ws, 1.0f);
        k.b = t % 3 ? h_input(a, &r, 1, &Cout, 1.0f) : NULL;
        size_t cap = 1 << 16;
        float *f = malloc(cap * sizeof *f), *g = malloc(cap * sizeof *g);
        qkv_set_reference(0);
        int64_t nf = conv_collect(&k, f);
        qkv_set_reference(1);
        int64_t ng = conv_collect(&k, g);
        qkv_set_reference(0);
        CHECK(nf == ng && nf > 0 && (size_t)nf < cap, "fast vs reference: %lld vs %lld values",
              (long long)nf, (long long)ng);
        double e = h_rel_err(f, g, nf);
        CHECK(e <= 1e-5, "conv2d fast vs reference config %d: relative error %.3g", t, e);
        worst = fmax(worst, isnan(e) ? INFINITY : e);
        n_cfg++;
        free(f), free(g);
        qkv_arena_free(a);
    }
    printf("conv2d im2col vs reference loops: %d configurations, worst relative error %.3g\n", n_cfg, worst);
}

/* ---- PyTorch parity ---------------------------------------------------------- */

/* The worst errors per kind of case: conv, pool, bn, cnn, mlp (kind_i). */
static double worst_val_k[5], worst_grad_k[5];
static int n_cases, n_ran[4], n_mlp, kind_i;
#define worst_val worst_val_k[kind_i]
#define worst_grad worst_grad_k[kind_i]

static int same_shape(const char *file, const char *what, const qkv_tensor *y, const qkv_tensor *want)
{
    char b1[64], b2[64];
    int same = y && want && y->ndim == want->ndim &&
               !memcmp(y->shape, want->shape, sizeof(int64_t) * (size_t)y->ndim);
    CHECK(same, "%s: %s %s, PyTorch %s", file, what, y ? qkv_shape_str(y, b1, 64) : "NULL",
          want ? qkv_shape_str(want, b2, 64) : "NULL");
    return same;
}

static void zero_grad(qkv_tensor *t)
{
    if (t && t->grad) memset(t->grad, 0, (size_t)qkv_tensor_numel(t) * sizeof(float));
}

static void parity_conv(qkv_safetensors *st, qkv_arena *a, const char *file)
{
    qkv_tensor *x = h_load(st, a, "x", 1), *w = h_load(st, a, "weight", 1), *b = h_load(st, a, "bias", 1);
    qkv_tensor *dy = h_load(st, a, "dy", 0);
    int64_t s[2] = {h_meta_int(st, "stride_h"), h_meta_int(st, "stride_w")};
    int64_t p[2] = {h_meta_int(st, "padding_h"), h_meta_int(st, "padding_w")};
    int64_t d[2] = {h_meta_int(st, "dilation_h"), h_meta_int(st, "dilation_w")};
    for (int ref = 0; ref < 2 && x && w && dy; ref++) {
        qkv_set_reference(ref);
        qkv_ctx *c;
        CHECK_OK(qkv_ctx_new(&c));
        zero_grad(x), zero_grad(w), zero_grad(b);
        qkv_tensor *y = NULL;
        CHECK_OK(qkv_conv2d(c, x, w, b, s, p, d, &y));
        qkv_tensor *want = h_load(st, a, "y", 0);
        if (same_shape(file, "y", y, want)) {
            n_ran[0]++;
            h_compare(file, "y", y->data, want, 1e-5, &worst_val);
            CHECK_OK(qkv_backward(c, y, dy->data));
            h_compare_grad(st, a, file, "grad.", "x", x, &worst_grad);
            h_compare_grad(st, a, file, "grad.", "weight", w, &worst_grad);
            if (b) h_compare_grad(st, a, file, "grad.", "bias", b, &worst_grad);
        }
        qkv_ctx_free(c);
    }
    qkv_set_reference(0);
}

static void parity_pool(qkv_safetensors *st, qkv_arena *a, const char *file)
{
    qkv_tensor *x = h_load(st, a, "x", 1), *dy = h_load(st, a, "dy", 0);
    int64_t k[2] = {h_meta_int(st, "kernel_h"), h_meta_int(st, "kernel_w")};
    int64_t s[2] = {h_meta_int(st, "stride_h"), h_meta_int(st, "stride_w")};
    int64_t p[2] = {h_meta_int(st, "padding_h"), h_meta_int(st, "padding_w")};
    int64_t d[2] = {h_meta_int(st, "dilation_h"), h_meta_int(st, "dilation_w")};
    qkv_nn_maxpool2d m; /* through the module when its options allow */
    int use_module = s[0] == 0 && d[0] == 1 && d[1] == 1 && k[0] == k[1] && p[0] == p[1] &&
                     !h_meta_int(st, "ceil_mode");
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_tensor *y = NULL;
    if (use_module) {
        CHECK_OK(qkv_nn_maxpool2d_init(&m, k[0], 0, p[0]));
        CHECK_OK(qkv_module_forward(c, &m.base, x, &y));
    } else {
        CHECK_OK(qkv_max_pool2d(c, x, k, s[0] ? s : NULL, p, d, (int)h_meta_int(st, "ceil_mode"), &y));
    }
    qkv_tensor *want = h_load(st, a, "y", 0);
    if (x && dy && same_shape(file, "y", y, want)) {
        n_ran[1]++;
        h_compare(file, "y", y->data, want, 1e-5, &worst_val);
        CHECK_OK(qkv_backward(c, y, dy->data));
        h_compare_grad(st, a, file, "grad.", "x", x, &worst_grad); /* ties: the first maximum */
    }
    qkv_ctx_free(c);
}

static void parity_bn(qkv_safetensors *st, qkv_arena *a, const char *file)
{
    qkv_params *p;
    CHECK_OK(qkv_params_new(&p));
    qkv_batchnorm_opts o = qkv_batchnorm_opts_default(h_meta_int(st, "C"));
    o.affine = (int)h_meta_int(st, "affine");
    const char *mom = qkv_safetensors_meta(st, "momentum");
    o.momentum = mom && !strcmp(mom, "none") ? NAN : (float)h_meta_float(st, "momentum");
    qkv_nn_batchnorm2d m;
    CHECK_OK(qkv_nn_batchnorm2d_init(&m, &o, p, ""));
    CHECK_OK(qkv_params_load_state_dict(p, st, "bn.", 1, NULL)); /* num_batches_tracked: int64 */
    int steps = (int)h_meta_int(st, "steps");
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_tensor *y = NULL, *x = NULL;
    qkv_ctx_set_training(c, 1);
    for (int i = 0; i < steps; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "x%d", i);
        qkv_ctx_reset(c);
        x = h_load(st, a, nm, 1);
        CHECK_OK(qkv_module_forward(c, &m.base, x, &y));
    }
    qkv_tensor *want = h_load(st, a, "y", 0), *dy = h_load(st, a, "dy", 0);
    if (same_shape(file, "y", y, want) && dy) {
        n_ran[2]++;
        h_compare(file, "y (training)", y->data, want, 1e-5, &worst_val);
        CHECK_OK(qkv_backward(c, y, dy->data));
        h_compare_grad(st, a, file, "grad.", "x", x, &worst_grad);
        if (m.weight) h_compare_grad(st, a, file, "grad.", "weight", m.weight, &worst_grad);
        if (m.weight) h_compare_grad(st, a, file, "grad.", "bias", m.bias, &worst_grad);
    }
    h_compare(file, "running_mean", m.running_mean->data, h_load(st, a, "after.running_mean", 0), 1e-5,
              &worst_val);
    h_compare(file, "running_var", m.running_var->data, h_load(st, a, "after.running_var", 0), 1e-5,
              &worst_val);
    qkv_tensor *nbt = h_load(st, a, "after.num_batches_tracked", 0);
    CHECK(nbt && nbt->idx && m.num_batches_tracked->data[0] == (float)nbt->idx[0],
          "%s: num_batches_tracked %g, PyTorch %lld", file, (double)m.num_batches_tracked->data[0],
          nbt && nbt->idx ? (long long)nbt->idx[0] : -1LL);
    /* eval: the running statistics */
    qkv_params_zero_grad(p);
    qkv_ctx_reset(c);
    qkv_ctx_set_training(c, 0);
    qkv_tensor *xe = h_load(st, a, "xe", 1), *dye = h_load(st, a, "dye", 0), *ye = NULL;
    CHECK_OK(qkv_module_forward(c, &m.base, xe, &ye));
    want = h_load(st, a, "ye", 0);
    if (same_shape(file, "ye", ye, want) && dye) {
        h_compare(file, "y (eval)", ye->data, want, 1e-5, &worst_val);
        CHECK_OK(qkv_backward(c, ye, dye->data));
        h_compare_grad(st, a, file, "grad_e.", "x", xe, &worst_grad);
        if (m.weight) h_compare_grad(st, a, file, "grad_e.", "weight", m.weight, &worst_grad);
        if (m.weight) h_compare_grad(st, a, file, "grad_e.", "bias", m.bias, &worst_grad);
    }
    CHECK(m.num_batches_tracked->data[0] == (float)steps, "%s: eval moved num_batches_tracked", file);
    qkv_ctx_free(c);
    qkv_params_free(p);
}

static int is_conv_bias(const qkv_cnn *net, const qkv_tensor *t)
{
    for (int b = 0; b < net->o.blocks; b++)
        if (net->conv[b].bias == t) return 1;
    return 0;
}

/* A conv bias before a BatchNorm in training mode has a gradient of 0 in
 * exact arithmetic (the batch mean takes any per-channel constant away),
 * so both sides hold rounding noise; it is judged at the scale of the same
 * layer's weight gradient instead of its own. */
static void compare_conv_bias(qkv_safetensors *st, qkv_arena *a, const char *file, const qkv_tensor *t)
{
    char g[128], gw[128];
    snprintf(g, sizeof g, "grad.%s", t->name);
    snprintf(gw, sizeof gw, "grad.%.*sweight", (int)(strlen(t->name) - 4), t->name);
    qkv_tensor *want = h_load(st, a, g, 0), *ww = h_load(st, a, gw, 0);
    CHECK(want && ww, "%s: %s or %s missing", file, g, gw);
    if (!want || !ww) return;
    double diff = 0, scale = 0;
    for (int64_t i = 0; i < qkv_tensor_numel(t); i++) diff = fmax(diff, fabs((double)t->grad[i] - want->data[i]));
    for (int64_t i = 0; i < qkv_tensor_numel(ww); i++) scale = fmax(scale, fabs((double)ww->data[i]));
    double e = diff / (scale > 0 ? scale : 1e-30);
    CHECK(e <= 1e-4, "%s: %s error %.3g at the scale of %s", file, g, e, gw);
    if (isnan(e) || e > worst_grad) worst_grad = isnan(e) ? INFINITY : e;
}

static void parity_cnn(qkv_safetensors *st, qkv_arena *a, const char *file)
{
    qkv_params *p;
    qkv_rng r;
    qkv_rng_seed(&r, 2);
    CHECK_OK(qkv_params_new(&p));
    qkv_cnn_opts o = qkv_cnn_opts_default();
    o.in_channels = h_meta_int(st, "in_channels"), o.height = h_meta_int(st, "height");
    o.width = h_meta_int(st, "width"), o.hidden = h_meta_int(st, "hidden");
    o.num_classes = h_meta_int(st, "num_classes"), o.blocks = (int)h_meta_int(st, "blocks");
    const char *ch = qkv_safetensors_meta(st, "channels");
    for (int b = 0; ch && b < o.blocks; b++) {
        o.channels[b] = atoll(ch);
        ch = strchr(ch, ',');
        if (ch) ch++;
    }
    qkv_cnn net;
    CHECK_OK(qkv_cnn_init(&net, &o, p, "", &r));
    CHECK(qkv_params_numel_trainable(p) == h_meta_int(st, "params"), "%s: %lld parameters, PyTorch %lld",
          file, (long long)qkv_params_numel_trainable(p), (long long)h_meta_int(st, "params"));
    CHECK_OK(qkv_params_load_state_dict(p, st, "model.", 1, NULL)); /* every name matches */
    qkv_tensor *x = h_load(st, a, "x", 1), *dl = h_load(st, a, "dlogits", 0);
    for (int ref = 0; ref < 2 && x && dl; ref++) {
        qkv_set_reference(ref);
        if (ref) CHECK_OK(qkv_params_load_state_dict(p, st, "model.", 1, NULL)); /* fresh buffers */
        qkv_ctx *c;
        CHECK_OK(qkv_ctx_new(&c));
        qkv_ctx_set_training(c, 1);
        qkv_params_zero_grad(p);
        zero_grad(x);
        qkv_tensor *y = NULL;
        CHECK_OK(qkv_module_forward(c, &net.seq.base, x, &y));
        qkv_tensor *want = h_load(st, a, "logits", 0);
        if (same_shape(file, "logits", y, want)) {
            n_ran[3]++;
            h_compare(file, "logits", y->data, want, 1e-5, &worst_val);
            CHECK_OK(qkv_backward(c, y, dl->data));
            h_compare_grad(st, a, file, "grad.", "x", x, &worst_grad);
            for (int i = 0; i < qkv_params_count(p); i++) {
                qkv_tensor *t = qkv_params_at(p, i);
                char nm[128];
                snprintf(nm, sizeof nm, "after.%s", t->name);
                if (t->requires_grad && is_conv_bias(&net, t)) compare_conv_bias(st, a, file, t);
                else if (t->requires_grad) h_compare_grad(st, a, file, "grad.", t->name, t, &worst_grad);
                else if (t->ndim == 1) h_compare(file, nm, t->data, h_load(st, a, nm, 0), 1e-5, &worst_val);
            }
            qkv_ctx_reset(c);
            qkv_ctx_set_training(c, 0);
            CHECK_OK(qkv_module_forward(c, &net.seq.base, x, &y));
            h_compare(file, "logits (eval)", y ? y->data : NULL, h_load(st, a, "logits_eval", 0), 1e-5,
                      &worst_val);
        }
        qkv_ctx_free(c);
    }
    qkv_set_reference(0);
    qkv_cnn_free(&net);
    qkv_params_free(p);
}

/* The MLP of a cnn case: same images, its own weights and dlogits. */
static void parity_mlp(qkv_safetensors *st, qkv_arena *a, const char *file)
{
    qkv_params *p;
    qkv_rng r;
    qkv_rng_seed(&r, 3);
    CHECK_OK(qkv_params_new(&p));
    qkv_mlp_opts o = qkv_mlp_opts_default();
    o.in_features = h_meta_int(st, "in_channels") * h_meta_int(st, "height") * h_meta_int(st, "width");
    o.num_classes = h_meta_int(st, "num_classes");
    o.layers = 0;
    for (const char *h = qkv_safetensors_meta(st, "mlp_hidden"); h && *h && o.layers < QKV_MLP_MAX_HIDDEN;) {
        o.hidden[o.layers++] = atoll(h);
        h = strchr(h, ',');
        if (h) h++;
    }
    qkv_mlp net;
    CHECK_OK(qkv_mlp_init(&net, &o, p, "", &r));
    CHECK(qkv_params_numel_trainable(p) == h_meta_int(st, "mlp_params"), "%s: MLP %lld parameters, PyTorch %lld",
          file, (long long)qkv_params_numel_trainable(p), (long long)h_meta_int(st, "mlp_params"));
    CHECK_OK(qkv_params_load_state_dict(p, st, "mlp.", 1, NULL));
    qkv_tensor *x = h_load(st, a, "x", 1), *dl = h_load(st, a, "mlp_dlogits", 0), *y = NULL;
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    CHECK_OK(qkv_module_forward(c, &net.seq.base, x, &y));
    qkv_tensor *want = h_load(st, a, "mlp_logits", 0);
    if (x && dl && same_shape(file, "mlp_logits", y, want)) {
        n_mlp++;
        h_compare(file, "mlp_logits", y->data, want, 1e-5, &worst_val);
        CHECK_OK(qkv_backward(c, y, dl->data));
        h_compare_grad(st, a, file, "mlp_grad.", "x", x, &worst_grad);
        h_compare_grads(st, a, file, "mlp_grad.", p, &worst_grad);
    }
    qkv_ctx_free(c);
    qkv_mlp_free(&net);
    qkv_params_free(p);
}

static void parity_case(const char *path, const char *file)
{
    qkv_safetensors *st;
    qkv_arena *a;
    if (!h_case_open(path, &st, &a, NULL, NULL)) return;
    n_cases++;
    const char *kind = qkv_safetensors_meta(st, "kind");
    if (!kind) CHECK(0, "%s: no kind", file);
    else if (!strcmp(kind, "conv")) kind_i = 0, parity_conv(st, a, file);
    else if (!strcmp(kind, "pool")) kind_i = 1, parity_pool(st, a, file);
    else if (!strcmp(kind, "bn")) kind_i = 2, parity_bn(st, a, file);
    else if (!strcmp(kind, "cnn")) kind_i = 3, parity_cnn(st, a, file), kind_i = 4, parity_mlp(st, a, file);
    else CHECK(0, "%s: unknown kind %s", file, kind);
    h_case_close(st, a, NULL);
}

/* ---- buffers -------------------------------------------------------------------- */

/* BatchNorm's buffers: no gradient, untouched by the optimizer (even with
 * weight decay), saved and loaded with the state_dict. */
static void test_buffers(void)
{
    qkv_params *p, *q;
    qkv_arena *a;
    qkv_rng r;
    qkv_rng_seed(&r, 6);
    CHECK_OK(qkv_params_new(&p));
    CHECK_OK(qkv_params_new(&q));
    CHECK_OK(qkv_arena_new(&a, 0));
    qkv_nn_batchnorm2d m, m2;
    qkv_batchnorm_opts o = qkv_batchnorm_opts_default(2);
    CHECK_OK(qkv_nn_batchnorm2d_init(&m, &o, p, "bn."));
    CHECK_OK(qkv_nn_batchnorm2d_init(&m2, &o, q, "bn."));
    CHECK(qkv_params_count(p) == 5 && qkv_params_numel_trainable(p) == 4 && qkv_params_numel(p) == 9,
          "BatchNorm2d(2): %d entries, %lld trainable, %lld in all", qkv_params_count(p),
          (long long)qkv_params_numel_trainable(p), (long long)qkv_params_numel(p));
    CHECK(m.num_batches_tracked && m.num_batches_tracked->ndim == 0 && !m.running_var->requires_grad,
          "num_batches_tracked is not a 0-dim buffer");
    CHECK(m.running_var->data[0] == 1.0f && m.running_mean->data[1] == 0.0f, "running stats init");
    qkv_tensor *x = h_input(a, &r, 4, (int64_t[]){3, 2, 2, 2}, 1.0f), *y;
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_ctx_set_training(c, 1);
    CHECK_OK(qkv_module_forward(c, &m.base, x, &y));
    float rm0 = m.running_mean->data[0];
    CHECK(rm0 != 0.0f && m.num_batches_tracked->data[0] == 1.0f, "training did not update the buffers");
    float dy[24];
    for (int i = 0; i < 24; i++) dy[i] = (float)(i % 5) - 2.0f;
    CHECK_OK(qkv_backward(c, y, dy));
    CHECK(m.running_mean->grad[0] == 0.0f, "a buffer got a gradient");
    qkv_optim_opts oo = qkv_optim_adamw_opts_default();
    oo.weight_decay = 0.5;
    qkv_optim *opt;
    CHECK_OK(qkv_optim_new(&opt, p, &oo));
    float w0 = m.weight->data[0];
    CHECK_OK(qkv_optim_step(opt));
    CHECK(m.running_mean->data[0] == rm0 && m.running_var->data[1] != 0.0f &&
          m.num_batches_tracked->data[0] == 1.0f && m.weight->data[0] != w0,
          "the optimizer moved a buffer (or not the weight)");
    qkv_optim_free(opt);
    char dir[] = "/tmp/qkv_bn_XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/bn.safetensors", dir);
    CHECK_OK(qkv_params_save_safetensors(p, path, NULL));
    CHECK_OK(qkv_params_load_safetensors(q, path, NULL, 1, NULL));
    for (int i = 0; i < 5; i++)
        CHECK(!memcmp(qkv_params_at(p, i)->data, qkv_params_at(q, i)->data,
                      (size_t)qkv_tensor_numel(qkv_params_at(p, i)) * sizeof(float)),
              "state_dict round trip: %s differs", qkv_params_at(p, i)->name);
    unlink(path);
    rmdir(dir);
    /* eval uses the running statistics: y = (x - rm) / sqrt(rv + eps) * w + b */
    qkv_ctx_reset(c);
    qkv_ctx_set_training(c, 0);
    CHECK_OK(qkv_module_forward(c, &m.base, x, &y));
    double want = (x->data[0] - m.running_mean->data[0]) / sqrt(m.running_var->data[0] + 1e-5) *
                  m.weight->data[0] + m.bias->data[0];
    CHECK(y && fabs(y->data[0] - want) < 1e-5, "eval output %g, expected %g", y ? y->data[0] : 0.0, want);
    CHECK(m.num_batches_tracked->data[0] == 1.0f, "eval moved num_batches_tracked");
    qkv_ctx_free(c);
    qkv_arena_free(a);
    qkv_params_free(p);
    qkv_params_free(q);
}

/* The default CNN after one training step, saved by qkv, loads into
 * PyTorch's nn.Sequential strictly, buffers included. */
static void test_save_for_torch(void)
{
    h_env e;
    h_env_begin(&e, 12);
    qkv_cnn net;
    qkv_cnn_opts o = qkv_cnn_opts_default();
    CHECK_OK(qkv_cnn_init(&net, &o, e.p, "", &e.r));
    qkv_tensor *x = h_input(e.a, &e.r, 4, (int64_t[]){4, 1, 28, 28}, 1.0f), *y = NULL;
    qkv_ctx_set_training(e.c, 1);
    CHECK_OK(qkv_module_forward(e.c, &net.seq.base, x, &y));
    char dir[] = "/tmp/qkv_cnn_XXXXXX", path[64], cmd[160];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/cnn.safetensors", dir);
    CHECK_OK(qkv_params_save_safetensors(e.p, path, NULL));
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/conv_oracle.py --load-check %s", path);
    int rc = system(cmd);
    CHECK(rc == 0, "PyTorch did not load qkv's CNN state_dict (exit %d): %s", rc, cmd);
    unlink(path);
    rmdir(dir);
    qkv_cnn_free(&net);
    h_env_end(&e);
}

/* ---- bad input --------------------------------------------------------------- */

static void test_errors(void)
{
    qkv_arena *a;
    qkv_ctx *c;
    qkv_params *p;
    qkv_rng r;
    qkv_rng_seed(&r, 8);
    CHECK_OK(qkv_arena_new(&a, 0));
    CHECK_OK(qkv_ctx_new(&c));
    CHECK_OK(qkv_params_new(&p));
    qkv_tensor *x4, *x2, *w, *w3, *b5, *y = NULL;
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 4, (int64_t[]){2, 3, 5, 5}, &x4));
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 2, (int64_t[]){3, 5}, &x2));
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 4, (int64_t[]){4, 3, 3, 3}, &w));
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 3, (int64_t[]){4, 3, 3}, &w3));
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 1, (int64_t[]){5}, &b5));
    /* conv2d */
    CHECK_ERR(qkv_conv2d(c, x2, w, NULL, NULL, NULL, NULL, &y), QKV_ERR_SHAPE,
              "conv2d: x (3,5) has 2 dims, expected (N,Cin,H,W) or (Cin,H,W)");
    CHECK(y == NULL, "y set on failure");
    CHECK_ERR(qkv_conv2d(c, x4, w3, NULL, NULL, NULL, NULL, &y), QKV_ERR_SHAPE,
              "conv2d: weight (4,3,3) has 3 dims, expected 4");
    qkv_tensor *wbad;
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 4, (int64_t[]){4, 2, 3, 3}, &wbad));
    CHECK_ERR(qkv_conv2d(c, x4, wbad, NULL, NULL, NULL, NULL, &y), QKV_ERR_SHAPE,
              "conv2d: weight (4,2,3,3) in_channels 2 does not match x (2,3,5,5) channels 3");
    CHECK_ERR(qkv_conv2d(c, x4, w, b5, NULL, NULL, NULL, &y), QKV_ERR_SHAPE,
              "conv2d: bias (5,) does not match weight (4,3,3,3), expected (4,)");
    qkv_tensor *wbig;
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 4, (int64_t[]){4, 3, 6, 3}, &wbig));
    CHECK_ERR(qkv_conv2d(c, x4, wbig, NULL, NULL, NULL, NULL, &y), QKV_ERR_SHAPE,
              "conv2d: x (2,3,5,5) padded height 5 (padding 0) is smaller than the kernel 6");
    CHECK_OK(qkv_conv2d(c, x4, wbig, NULL, NULL, (int64_t[]){1, 0}, NULL, &y)); /* 7 >= 6 */
    CHECK_ERR(qkv_conv2d(c, x4, w, NULL, NULL, NULL, (int64_t[]){3, 1}, &y), QKV_ERR_SHAPE,
              "is smaller than the kernel 3 with dilation 3 (7)");
    CHECK_ERR(qkv_conv2d(c, x4, w, NULL, (int64_t[]){0, 1}, NULL, NULL, &y), QKV_ERR_ARG,
              "conv2d: stride (0,1) must be >= 1");
    CHECK_ERR(qkv_conv2d(c, x4, w, NULL, NULL, (int64_t[]){-1, 0}, NULL, &y), QKV_ERR_ARG,
              "conv2d: padding (-1,0) must be >= 0");
    CHECK_ERR(qkv_conv2d(c, NULL, w, NULL, NULL, NULL, NULL, &y), QKV_ERR_ARG, "conv2d: x is NULL");
    /* max_pool2d */
    int64_t k2[2] = {2, 2}, k7[2] = {7, 7};
    CHECK_ERR(qkv_max_pool2d(c, x2, k2, NULL, NULL, NULL, 0, &y), QKV_ERR_SHAPE,
              "max_pool2d: x (3,5) has 2 dims, expected (N,C,H,W) or (C,H,W)");
    CHECK_ERR(qkv_max_pool2d(c, x4, k7, NULL, NULL, NULL, 0, &y), QKV_ERR_SHAPE,
              "max_pool2d: x (2,3,5,5): the height output would be 0");
    CHECK_ERR(qkv_max_pool2d(c, x4, k2, (int64_t[]){0, 0}, NULL, NULL, 0, &y), QKV_ERR_ARG,
              "max_pool2d: kernel_size 2, stride 0, dilation 1 (height): each must be >= 1");
    CHECK_ERR(qkv_max_pool2d(c, x4, k2, NULL, (int64_t[]){0, 2}, NULL, 0, &y), QKV_ERR_ARG,
              "max_pool2d: padding 2 (width) must be in [0, kernel_size / 2 = 1]");
    CHECK_ERR(qkv_max_pool2d(c, x4, NULL, NULL, NULL, NULL, 0, &y), QKV_ERR_ARG,
              "max_pool2d: kernel_size is NULL");
    qkv_nn_maxpool2d mp;
    CHECK_ERR(qkv_nn_maxpool2d_init(&mp, 2, 0, 2), QKV_ERR_ARG, "nn_maxpool2d_init: kernel_size 2, stride 0, padding 2");
    /* batch_norm */
    qkv_tensor *rm3, *rm4, *one;
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 1, (int64_t[]){3}, &rm3));
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 1, (int64_t[]){4}, &rm4));
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 4, (int64_t[]){1, 3, 1, 1}, &one));
    CHECK_ERR(qkv_batch_norm(c, x4, rm4, rm3, NULL, NULL, 1, 0.1f, 1e-5f, &y), QKV_ERR_SHAPE,
              "batch_norm: running_mean (4,) does not match x (2,3,5,5) channels, expected (3,)");
    CHECK_ERR(qkv_batch_norm(c, x4, NULL, NULL, NULL, NULL, 0, 0.1f, 1e-5f, &y), QKV_ERR_ARG,
              "batch_norm: eval mode (training 0) needs running_mean and running_var");
    CHECK_ERR(qkv_batch_norm(c, one, NULL, NULL, NULL, NULL, 1, 0.1f, 1e-5f, &y), QKV_ERR_SHAPE,
              "batch_norm: expected more than 1 value per channel when training, got x (1,3,1,1)");
    CHECK_ERR(qkv_batch_norm(c, x4, NULL, NULL, NULL, NULL, 1, 0.1f, 0.0f, &y), QKV_ERR_ARG,
              "batch_norm: eps 0 must be positive and finite");
    CHECK_ERR(qkv_batch_norm(c, b5, NULL, NULL, NULL, NULL, 1, 0.1f, 1e-5f, &y), QKV_ERR_SHAPE,
              "batch_norm: x (5,) has 1 dims");
    qkv_nn_batchnorm2d bn;
    qkv_batchnorm_opts bo = qkv_batchnorm_opts_default(4);
    CHECK_OK(qkv_nn_batchnorm2d_init(&bn, &bo, p, "bn."));
    qkv_ctx_set_training(c, 1);
    CHECK_ERR(qkv_module_forward(c, &bn.base, x4, &y), QKV_ERR_SHAPE,
              "batch_norm2d: x (2,3,5,5) has 3 channels, num_features is 4");
    qkv_tensor *x3;
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 3, (int64_t[]){2, 4, 5}, &x3));
    CHECK_ERR(qkv_module_forward(c, &bn.base, x3, &y), QKV_ERR_SHAPE,
              "batch_norm2d: expected a 4-D input (N,C,H,W), got x (2,4,5)");
    qkv_tensor *one4;
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 4, (int64_t[]){1, 4, 1, 1}, &one4));
    CHECK_ERR(qkv_module_forward(c, &bn.base, one4, &y), QKV_ERR_SHAPE, "more than 1 value per channel");
    CHECK(bn.num_batches_tracked->data[0] == 0.0f, "a failed forward moved num_batches_tracked");
    bo.num_features = 0;
    CHECK_ERR(qkv_nn_batchnorm2d_init(&bn, &bo, p, "bn2."), QKV_ERR_ARG,
              "nn_batchnorm2d_init: num_features 0 must be positive");
    /* modules and models */
    qkv_nn_conv2d conv;
    qkv_conv2d_opts co = qkv_conv2d_opts_default(3, 4, 3);
    co.stride[1] = 0;
    CHECK_ERR(qkv_nn_conv2d_init(&conv, &co, p, "c.", &r), QKV_ERR_ARG, "nn_conv2d_init: stride (1,0)");
    int n0 = qkv_params_count(p);
    qkv_cnn net;
    qkv_cnn_opts no = qkv_cnn_opts_default();
    no.height = 3;
    CHECK_ERR(qkv_cnn_init(&net, &no, p, "", &r), QKV_ERR_ARG,
              "cnn_init: a 3x28 image is too small for 2 blocks of 2x2 pooling");
    CHECK(qkv_params_count(p) == n0, "a failed cnn_init added parameters");
    no = qkv_cnn_opts_default();
    CHECK_OK(qkv_cnn_init(&net, &no, p, "cnn.", &r));
    qkv_tensor *img;
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 4, (int64_t[]){2, 1, 28, 27}, &img));
    CHECK_ERR(qkv_module_forward(c, &net.seq.base, img, &y), QKV_ERR_SHAPE, "sequential: layer 9 (Linear)");
    qkv_cnn_free(&net);
    qkv_mlp mlp;
    qkv_mlp_opts mo = qkv_mlp_opts_default();
    CHECK_OK(qkv_mlp_init(&mlp, &mo, p, "mlp.", &r));
    CHECK(qkv_params_find(p, "mlp.5.weight") != NULL && qkv_params_find(p, "mlp.1.weight")->shape[1] == 784,
          "MLP names: mlp.1.weight (256,784) ... mlp.5.weight");
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 4, (int64_t[]){2, 1, 28, 28}, &img));
    CHECK_OK(qkv_module_forward(c, &mlp.seq.base, img, &y));
    CHECK(y && y->ndim == 2 && y->shape[0] == 2 && y->shape[1] == 10, "MLP logits not (2,10)");
    qkv_nn_flatten fl;
    CHECK_OK(qkv_nn_flatten_init(&fl));
    CHECK_ERR(qkv_module_forward(c, &fl.base, b5, &y), QKV_ERR_SHAPE,
              "flatten: x (5,) has 1 dims, expected (N,...) with at least 2");
    qkv_mlp_free(&mlp);
    qkv_ctx_free(c);
    qkv_params_free(p);
    qkv_arena_free(a);
}

int main(void)
{
    test_errors();
    test_buffers();
    test_save_for_torch();
    test_gradcheck_conv();
    test_gradcheck_pool();
    test_pool_special();
    test_gradcheck_bn();
    test_fast_vs_ref();
    int n = h_oracle_cases("conv_oracle.py", 48, parity_case);
    CHECK(n == 48 && n_ran[0] == 24 && n_ran[1] == 12 && n_ran[2] == 12 && n_ran[3] == 24,
          "parity: %d cases, runs compared: conv %d, pool %d, bn %d, cnn %d", n, n_ran[0], n_ran[1],
          n_ran[2], n_ran[3]);
    static const char *const kinds[5] = {"conv2d", "max_pool2d", "BatchNorm2d", "CNN", "MLP"};
    CHECK(n_mlp == 12, "parity: %d MLP runs compared", n_mlp);
    printf("parity: %d cases\n", n_cases);
    for (int k = 0; k < 5; k++)
        printf("  %-11s %2d runs: worst value error %.3g, worst gradient error %.3g\n", kinds[k],
               k < 4 ? n_ran[k] : n_mlp, worst_val_k[k], worst_grad_k[k]);
    return h_finish("test_conv2d");
}
