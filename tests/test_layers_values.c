/* test_layers_values.c: the values of the layers of include/qkv/nn.h:
 * dropout by its statistics (kept fraction, scaling, its gradient, masks
 * drawn from the seed), the activations, layer_norm and cat against plain
 * formulas, and the modules' parameter names, shapes and initialisation
 * (the lecture's Conv1d net, Linear, LayerNorm, Embedding). */
#include <omp.h>
#include "gradcheck.h"
#include "layers_helpers.h"

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

/* ---- the fast GELU against erff ---------------------------------------------
 * The fast path (plain arithmetic that vectorises) against the reference
 * (libm's erff and expf) on a dense grid of [-12, 12], the gradients
 * included, and at 0, +-inf and NaN. Absolute errors, on values of at most
 * 12 and slopes of at most 1.13. */
/* GELU forward and backward (dy) over xs (n): the output into y; x's
 * gradient added into grad (zeroed here) when grad is given, else written
 * into a new buffer and copied into dx. */
static void gelu_pass(float *xs, const float *dy, int64_t n, float *grad, float *y, float *dx)
{
    qkv_ctx *c;
    qkv_arena *a;
    CHECK_OK(qkv_ctx_new(&c));
    CHECK_OK(qkv_arena_new(&a, 0));
    qkv_tensor *x, *out = NULL;
    CHECK_OK(qkv_tensor_wrap(a, xs, 1, (int64_t[]){n}, &x));
    CHECK_OK(qkv_tensor_set_requires_grad(x, 1));
    if (grad) {
        x->grad = grad;
        memset(grad, 0, (size_t)n * sizeof *grad);
    }
    CHECK_OK(qkv_gelu(c, x, "none", &out));
    if (out) {
        memcpy(y, out->data, (size_t)n * sizeof *y);
        CHECK_OK(qkv_backward(c, out, dy));
    }
    if (!grad) {
        CHECK(x->grad != NULL, "GELU backward: no gradient for x");
        if (x->grad) memcpy(dx, x->grad, (size_t)n * sizeof *dx);
    }
    qkv_ctx_free(c);
    qkv_arena_free(a);
}

static void test_fast_gelu(void)
{
    enum { N = 48001 };
    static float xs[N + 4], dy[N + 4], y[2][N + 4], dx[2][N + 4], dxnew[N + 4];
    for (int i = 0; i < N; i++) xs[i] = -12.0f + 24.0f * (float)i / (float)(N - 1), dy[i] = 1;
    xs[N] = 0, xs[N + 1] = INFINITY, xs[N + 2] = -INFINITY, xs[N + 3] = NAN;
    for (int i = N; i < N + 4; i++) dy[i] = 1;
    for (int ref = 0; ref < 2; ref++) {
        qkv_set_reference(ref);
        gelu_pass(xs, dy, N + 4, dx[ref], y[ref], NULL);
    }
    qkv_set_reference(0);
    double ey = 0, ed = 0;
    for (int i = 0; i < N; i++) {
        ey = fmax(ey, fabs((double)y[0][i] - y[1][i]));
        ed = fmax(ed, fabs((double)dx[0][i] - dx[1][i]));
    }
    CHECK(ey <= 2e-6 && ed <= 1e-6, "fast GELU against erff: values %.3g, slopes %.3g apart", ey, ed);
    CHECK(y[0][N] == 0 && y[0][N + 1] == INFINITY && isnan(y[0][N + 3]) && isnan(dx[0][N + 3]),
          "fast GELU at 0, inf, nan: %g %g %g %g", y[0][N], y[0][N + 1], y[0][N + 3], dx[0][N + 3]);
    CHECK(isnan(y[0][N + 2]) == isnan(y[1][N + 2]), "GELU(-inf): fast %g, reference %g", y[0][N + 2], y[1][N + 2]);
    printf("fast GELU against erff over [-12, 12]: values %.2g, slopes %.2g apart (absolute)\n", ey, ed);
    /* x's gradient not yet there: the fast backward writes a new buffer
     * (no zero fill) with the values it adds into an existing one */
    gelu_pass(xs, dy, N + 4, NULL, y[1], dxnew);
    int same = 1;
    for (int i = 0; same && i < N + 4; i++) same = isnan(dx[0][i]) ? isnan(dxnew[i]) != 0 : dxnew[i] == dx[0][i];
    CHECK(same, "fast GELU backward into a new gradient differs from the one added into zeros");
}

/* ---- the fast layer_norm against the reference -------------------------------
 * The fast path (vectorised row sums, affine gradients by chunks of rows on
 * the threads, the input's gradient written when its buffer is new) against
 * the reference loops, on row counts past one chunk (128 rows), widths of a
 * ViT (64), an LM (192) and an odd one, rows far from zero mean, with and
 * without the affine parameters, and with x's gradient absent (written) or
 * already holding values (added into). */
static void test_fast_layer_norm(void)
{
    int64_t cases[][3] = {{300, 64, 1}, {257, 192, 0}, {130, 7, 1}, {5, 33, 0}}; /* rows, C, affine */
    for (size_t t = 0; t < sizeof cases / sizeof *cases; t++) {
        int64_t rows = cases[t][0], C = cases[t][1], n = rows * C;
        int affine = (int)cases[t][2];
        qkv_arena *a;
        CHECK_OK(qkv_arena_new(&a, 0));
        qkv_tensor *x0 = h_input(a, &R, 2, (int64_t[]){rows, C}, 3.0f);
        qkv_tensor *w = h_input(a, &R, 1, (int64_t[]){C}, 1.0f), *b = h_input(a, &R, 1, (int64_t[]){C}, 1.0f);
        float *dy = malloc((size_t)n * sizeof *dy), *res[2][5];
        qkv_rng_fill_uniform(&R, dy, n, -1, 1);
        for (int64_t r = 0; r < rows; r++) /* rows far from zero mean */
            for (int64_t j = 0; j < C; j++) x0->data[r * C + j] += (float)(r % 7) * 4.0f;
        for (int pre = 0; pre < 2; pre++) {
            for (int ref = 0; ref < 2; ref++) {
                qkv_set_reference(ref);
                qkv_ctx *c;
                CHECK_OK(qkv_ctx_new(&c));
                qkv_tensor *x, *y = NULL;
                CHECK_OK(qkv_tensor_wrap(qkv_ctx_arena(c), x0->data, 2, (int64_t[]){rows, C}, &x));
                CHECK_OK(qkv_tensor_set_requires_grad(x, 1));
                if (pre) { /* a gradient already there: the backward adds into it */
                    x->grad = qkv_arena_alloc(qkv_ctx_arena(c), (size_t)n * sizeof(float));
                    for (int64_t i = 0; i < n; i++) x->grad[i] = 0.5f;
                }
                memset(w->grad, 0, (size_t)C * sizeof(float));
                memset(b->grad, 0, (size_t)C * sizeof(float));
                CHECK_OK(qkv_layer_norm(c, x, affine ? w : NULL, affine ? b : NULL, 1e-5f, &y));
                if (y) CHECK_OK(qkv_backward(c, y, dy));
                for (int k = 0; k < 5; k++) res[ref][k] = malloc((size_t)n * sizeof(float));
                memcpy(res[ref][0], y ? y->data : dy, (size_t)n * sizeof(float));
                memcpy(res[ref][1], x->grad ? x->grad : dy, (size_t)n * sizeof(float));
                memcpy(res[ref][2], w->grad, (size_t)C * sizeof(float));
                memcpy(res[ref][3], b->grad, (size_t)C * sizeof(float));
                qkv_ctx_free(c);
            }
            qkv_set_reference(0);
            double e[4] = {h_rel_err(res[0][0], res[1][0], n), h_rel_err(res[0][1], res[1][1], n),
                           h_rel_err(res[0][2], res[1][2], C), h_rel_err(res[0][3], res[1][3], C)};
            CHECK(e[0] <= 1e-6 && e[1] <= 1e-6 && e[2] <= 1e-6 && e[3] <= 1e-6,
                  "layer_norm fast vs reference (%lld,%lld) affine %d, x.grad %s: y %.3g dx %.3g dw %.3g db %.3g",
                  (long long)rows, (long long)C, affine, pre ? "added into" : "new", e[0], e[1], e[2], e[3]);
            for (int ref = 0; ref < 2; ref++)
                for (int k = 0; k < 5; k++) free(res[ref][k]);
        }
        free(dy);
        qkv_arena_free(a);
    }
}

/* ---- linear's weight gradient by chunks of rows ------------------------------
 * A tall product (rows >= 4 max(in, out), >= 1024) is summed by fixed
 * chunks of rows on the threads, the bias gradient beside it: against the
 * reference (one plain loop in double; the bias's column sums), and bit for
 * bit the same on one thread and on two. */
static void test_linear_chunked_grad(void)
{
    int64_t M = 2051, in = 48, out = 40;
    qkv_arena *a;
    CHECK_OK(qkv_arena_new(&a, 0));
    qkv_tensor *x = h_input(a, &R, 2, (int64_t[]){M, in}, 1.0f);
    qkv_tensor *w = h_input(a, &R, 2, (int64_t[]){out, in}, 1.0f), *b = h_input(a, &R, 1, (int64_t[]){out}, 1.0f);
    float *dy = malloc((size_t)(M * out) * sizeof *dy), *dw[3], *dx[3], db[3][40];
    qkv_rng_fill_uniform(&R, dy, M * out, -1, 1);
    int max_threads = omp_get_max_threads();
    for (int run = 0; run < 3; run++) { /* reference; fast on all threads; fast on one */
        qkv_set_reference(run == 0);
        omp_set_num_threads(run == 2 ? 1 : max_threads);
        qkv_ctx *c;
        CHECK_OK(qkv_ctx_new(&c));
        memset(w->grad, 0, (size_t)(out * in) * sizeof(float));
        memset(x->grad, 0, (size_t)(M * in) * sizeof(float));
        for (int64_t i = 0; i < out * in; i++) w->grad[i] = 0.25f; /* added into */
        for (int64_t j = 0; j < out; j++) b->grad[j] = -0.5f;
        qkv_tensor *y = NULL;
        CHECK_OK(qkv_linear(c, x, w, b, &y));
        if (y) CHECK_OK(qkv_backward(c, y, dy));
        dw[run] = malloc((size_t)(out * in) * sizeof(float));
        dx[run] = malloc((size_t)(M * in) * sizeof(float));
        memcpy(dw[run], w->grad, (size_t)(out * in) * sizeof(float));
        memcpy(dx[run], x->grad, (size_t)(M * in) * sizeof(float));
        memcpy(db[run], b->grad, (size_t)out * sizeof(float));
        qkv_ctx_free(c);
    }
    qkv_set_reference(0);
    omp_set_num_threads(max_threads);
    double ew = h_rel_err(dw[1], dw[0], out * in), ex = h_rel_err(dx[1], dx[0], M * in);
    CHECK(ew <= 1e-6 && ex <= 1e-6, "linear (%lld rows) fast vs reference: dW %.3g, dx %.3g", (long long)M, ew, ex);
    CHECK(!memcmp(dw[1], dw[2], (size_t)(out * in) * sizeof(float)),
          "linear's chunked dW is the same on %d threads and on one", max_threads);
    double eb = h_rel_err(db[1], db[0], out);
    CHECK(eb <= 1e-5, "linear (%lld rows) fast vs reference: db %.3g", (long long)M, eb);
    CHECK(!memcmp(db[1], db[2], (size_t)out * sizeof(float)), "linear's db is the same on %d threads and on one",
          max_threads);
    for (int run = 0; run < 3; run++) free(dw[run]), free(dx[run]);
    free(dy);
    qkv_arena_free(a);
}

/* cat's backward with one tensor on both sides, large enough for the
 * threads (832 rows of 600): dx = the two halves of dy added, exactly
 * (0 + left + right in float, as zero-filled accumulation gives), then
 * again on top of that gradient. (h_input's tensors keep their gradient,
 * so this takes the accumulating path; the fresh one is the activations'
 * below.) */
static void test_cat_grad(qkv_arena *a, qkv_rng *r)
{
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    int64_t sx[3] = {64, 13, 300}, n = 64 * 13;
    qkv_tensor *x = h_input(a, r, 3, sx, 1.0f), *dy = h_input(a, r, 3, (int64_t[]){64, 13, 600}, 1.0f), *y = NULL;
    for (int round = 0; x && dy && round < 2; round++) {
        qkv_ctx_reset(c);
        CHECK_OK(qkv_cat(c, x, x, -1, &y));
        CHECK_OK(qkv_backward(c, y, dy->data));
        int64_t bad = 0;
        for (int64_t o = 0; o < n; o++)
            for (int64_t j = 0; j < 300; j++) {
                float l = dy->data[o * 600 + j], rt = dy->data[o * 600 + 300 + j], want = 0.0f + l + rt;
                if (round) want = want + l + rt; /* round 0's sum, then the two halves added to it */
                bad += x->grad[o * 300 + j] != want;
            }
        CHECK(bad == 0, "cat(x, x) backward, round %d: %lld of dx's elements are not the halves' sum", round,
              (long long)bad);
    }
    /* an activation's gradient, fresh when cat's backward reaches it first */
    qkv_tensor *t = NULL;
    qkv_ctx_reset(c);
    CHECK_OK(qkv_tanh(c, x, &t));
    CHECK_OK(qkv_cat(c, t, t, -1, &y));
    CHECK_OK(qkv_backward(c, y, dy->data));
    int64_t bad = 0;
    for (int64_t o = 0; t && t->grad && o < n; o++)
        for (int64_t j = 0; j < 300; j++)
            bad += t->grad[o * 300 + j] != 0.0f + dy->data[o * 600 + j] + dy->data[o * 600 + 300 + j];
    CHECK(t && t->grad && bad == 0, "cat(t, t) backward into a fresh gradient: %lld elements differ", (long long)bad);
    /* a tensor and an overlapping view of it, with integer dy (every order
     * of the sums exact): t (3000,64) an activation (its gradient fresh)
     * and its rows 1500.. seen as (3000,32), cat along the features, large
     * enough for the threads: t's rows 1500.. get both terms */
    qkv_ctx_reset(c);
    int64_t sv[2] = {3000, 64};
    qkv_tensor *xv = h_input(a, r, 2, sv, 1.0f), *tv = NULL, *hi = NULL, *hv = NULL, *yv = NULL;
    float *dyv = malloc(sizeof(float) * 3000 * 96);
    for (int64_t i = 0; dyv && i < 3000 * 96; i++) dyv[i] = (float)(i % 7 + 1);
    CHECK_OK(qkv_tanh(c, xv, &tv));
    if (tv) CHECK_OK(qkv_tensor_narrow(qkv_ctx_arena(c), tv, 1500, 1500, &hi));
    if (hi) CHECK_OK(qkv_tensor_view(qkv_ctx_arena(c), hi, 2, (int64_t[]){3000, 32}, &hv));
    if (hv) CHECK_OK(qkv_cat(c, tv, hv, 1, &yv));
    if (yv && dyv) CHECK_OK(qkv_backward(c, yv, dyv));
    bad = 0;
    for (int64_t i = 0; tv && tv->grad && dyv && i < 3000 * 64; i++) {
        int64_t row = i / 64, j = i % 64, k = i - 1500 * 64; /* k: the view's flat index */
        float want = dyv[row * 96 + j];
        if (k >= 0) want += dyv[(k / 32) * 96 + 64 + k % 32];
        bad += tv->grad[i] != want;
    }
    CHECK(tv && tv->grad && bad == 0, "cat of a tensor and an overlapping view of it: %lld of the gradient's "
          "elements wrong", (long long)bad);
    free(dyv);
    qkv_ctx_free(c);
}

/* relu at NaN, -0, +-inf, as torch.relu: the values, their bits and the
 * gradient below are what PyTorch 1.13 printed for
 *   x = [nan, -0., 0., -1., 2., -inf, -nan, inf]; relu(x).backward(3 * ones)
 * y bits 7fc00000 80000000 0 0 40000000 0 ffc00000 7f800000, x.grad
 * [3, 0, 0, 0, 3, 0, 3, 3]: a NaN stays NaN and passes the gradient (torch's
 * threshold_backward: y <= 0 ? 0 : dy), -0 stays -0. Through the op
 * (qkv_relu: the activation's forward and backward), twice: once into a
 * fresh gradient and once added into one. */
static void test_relu_torch(void)
{
    const uint32_t xb[8] = {0x7fc00000u, 0x80000000u, 0, 0xbf800000u, 0x40000000u, 0xff800000u, 0xffc00000u,
                            0x7f800000u};
    const uint32_t want_y[8] = {0x7fc00000u, 0x80000000u, 0, 0, 0x40000000u, 0, 0xffc00000u, 0x7f800000u};
    const float want_g[8] = {3, 0, 0, 0, 3, 0, 3, 3}, dy[8] = {3, 3, 3, 3, 3, 3, 3, 3};
    for (int added = 0; added < 2; added++) {
        float xs[8], grad[8] = {0};
        memcpy(xs, xb, sizeof xs);
        qkv_ctx *c;
        qkv_arena *a;
        CHECK_OK(qkv_ctx_new(&c));
        CHECK_OK(qkv_arena_new(&a, 0));
        qkv_tensor *x, *y = NULL;
        CHECK_OK(qkv_tensor_wrap(a, xs, 1, (int64_t[]){8}, &x));
        CHECK_OK(qkv_tensor_set_requires_grad(x, 1));
        if (added) x->grad = grad; /* an existing gradient, added into */
        CHECK_OK(qkv_relu(c, x, &y));
        int bad_y = 0, bad_g = 0;
        for (int i = 0; y && i < 8; i++) bad_y += memcmp(&y->data[i], &want_y[i], sizeof want_y[i]) != 0;
        if (y) CHECK_OK(qkv_backward(c, y, dy));
        for (int i = 0; x->grad && i < 8; i++) bad_g += x->grad[i] != want_g[i];
        CHECK(y && bad_y == 0, "relu: %d of NaN, -0, inf's values are not torch.relu's bits", bad_y);
        CHECK(x->grad && bad_g == 0, "relu backward (%s): %d gradients are not torch's", added ? "added" : "fresh",
              bad_g);
        qkv_ctx_free(c);
        qkv_arena_free(a);
    }
}

int main(void)
{
    if (!layers_setup()) return 1;
    test_cat_grad(A, &R);
    test_dropout_stats(A, &R);
    test_values(A, &R);
    test_relu_torch();
    test_module_init(&R);
    test_fast_gelu();
    test_fast_layer_norm();
    test_linear_chunked_grad();
    return layers_finish("test_layers_values");
}
