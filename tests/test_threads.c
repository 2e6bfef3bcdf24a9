/* test_threads.c: the elementwise and row ops that run on OpenMP's threads
 * above QKV_PAR_MIN elements (linear's bias, gelu, dropout, add, layer_norm,
 * permute, AdamW, zero_grad, the arena's zeroing) give the same bits on one
 * thread and on two. The other tests run these ops on small tensors, below
 * the threshold; this one runs them large. GEMM takes the reference loop
 * here (qkv_set_reference), whose result does not depend on the threads,
 * so any difference comes from the loops under test. */
#include <math.h>
#include <omp.h>
#include "gradcheck.h"

enum { R = 512, C = 128, F = 256 }; /* rows x C = 65,536 elements: above QKV_PAR_MIN */

typedef struct {
    float *out, *grads, *params; /* copies of y, every gradient, params after a step */
    int64_t nout, ngrads, nparams;
} result;

/* One training step of a small residual block on `threads` threads:
 * y = permute(layer_norm(x + linear2(dropout(gelu(linear1(x)))))). */
static void run(int threads, result *res)
{
    omp_set_num_threads(threads);
    qkv_params *p;
    qkv_ctx *c;
    qkv_optim *o;
    qkv_rng r;
    qkv_rng_seed(&r, 7);
    CHECK_OK(qkv_params_new(&p));
    CHECK_OK(qkv_ctx_new(&c));
    qkv_tensor *w1, *b1, *w2, *b2, *lw, *lb, *x;
    CHECK_OK(qkv_params_add(p, "", "w1", 2, (int64_t[]){F, C}, &w1));
    CHECK_OK(qkv_params_add(p, "", "b1", 1, (int64_t[]){F}, &b1));
    CHECK_OK(qkv_params_add(p, "", "w2", 2, (int64_t[]){C, F}, &w2));
    CHECK_OK(qkv_params_add(p, "", "b2", 1, (int64_t[]){C}, &b2));
    CHECK_OK(qkv_params_add(p, "", "ln.w", 1, (int64_t[]){C}, &lw));
    CHECK_OK(qkv_params_add(p, "", "ln.b", 1, (int64_t[]){C}, &lb));
    CHECK_OK(qkv_params_add(p, "", "x", 2, (int64_t[]){R, C}, &x));
    for (int i = 0; i < qkv_params_count(p); i++) {
        qkv_tensor *t = qkv_params_at(p, i);
        qkv_rng_fill_normal(&r, t->data, qkv_tensor_numel(t), 0.0f, 0.5f);
    }
    qkv_optim_opts oo = qkv_optim_adamw_opts_default();
    CHECK_OK(qkv_optim_new(&o, p, &oo));
    qkv_ctx_set_training(c, 1);
    qkv_ctx_set_seed(c, 3);
    qkv_tensor *h, *y;
    CHECK_OK(qkv_linear(c, x, w1, b1, &h));
    CHECK_OK(qkv_gelu(c, h, "none", &h));
    CHECK_OK(qkv_dropout(c, h, 0.2f, &h));
    CHECK_OK(qkv_linear(c, h, w2, b2, &h));
    CHECK_OK(qkv_add(c, x, h, &h));
    CHECK_OK(qkv_layer_norm(c, h, lw, lb, 1e-5f, &h));
    CHECK_OK(qkv_reshape(c, h, 4, (int64_t[]){8, 64, 2, 64}, &h));
    CHECK_OK(qkv_permute(c, h, (int[]){0, 2, 1, 3}, &y));
    res->nout = qkv_tensor_numel(y);
    res->out = malloc((size_t)res->nout * sizeof(float));
    float *dout = malloc((size_t)res->nout * sizeof(float));
    memcpy(res->out, y->data, (size_t)res->nout * sizeof(float));
    qkv_rng_fill_normal(&r, dout, res->nout, 0.0f, 1.0f);
    CHECK_OK(qkv_backward(c, y, dout));
    res->ngrads = res->nparams = qkv_params_numel(p);
    res->grads = malloc((size_t)res->ngrads * sizeof(float));
    res->params = malloc((size_t)res->nparams * sizeof(float));
    int64_t off = 0;
    for (int i = 0; i < qkv_params_count(p); i++) {
        qkv_tensor *t = qkv_params_at(p, i);
        memcpy(res->grads + off, t->grad, (size_t)qkv_tensor_numel(t) * sizeof(float));
        off += qkv_tensor_numel(t);
    }
    CHECK_OK(qkv_optim_step(o));
    qkv_params_zero_grad(p);
    off = 0;
    int zeroed = 1;
    for (int i = 0; i < qkv_params_count(p); i++) {
        qkv_tensor *t = qkv_params_at(p, i);
        memcpy(res->params + off, t->data, (size_t)qkv_tensor_numel(t) * sizeof(float));
        for (int64_t j = 0; j < qkv_tensor_numel(t); j++) zeroed &= t->grad[j] == 0.0f;
        off += qkv_tensor_numel(t);
    }
    CHECK(zeroed, "%d threads: zero_grad leaves every gradient 0", threads);
    /* The arena hands out zeroed memory, large blocks too, after reuse. */
    qkv_ctx_reset(c);
    size_t nb = (size_t)(4 << 20) * sizeof(float);
    float *big = qkv_arena_alloc(qkv_ctx_arena(c), nb);
    if (big) memset(big, 0xff, nb);
    qkv_ctx_reset(c);
    big = qkv_arena_alloc(qkv_ctx_arena(c), nb);
    int zero = big != NULL;
    for (int64_t i = 0; big && i < (4 << 20); i++) zero &= big[i] == 0.0f;
    CHECK(zero, "%d threads: a 16 MiB arena block comes zeroed after reuse", threads);
    free(dout);
    qkv_optim_free(o);
    qkv_ctx_free(c);
    qkv_params_free(p);
}

static int differs(const float *a, const float *b, int64_t n)
{
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) k += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return (int)(k > 0);
}

/* Attention's backward sums dq over per-thread buffers; with the tiles
 * dealt the same way on every run, repeated runs give the same bits. */
static void test_attention_repeats(void)
{
    qkv_set_reference(0);
    omp_set_num_threads(2);
    qkv_arena *a;
    qkv_rng r;
    qkv_rng_seed(&r, 11);
    CHECK_OK(qkv_arena_new(&a, 0));
    int64_t shape[4] = {1, 2, 700, 32}, n = 2 * 700 * 32;
    qkv_tensor *q = h_input(a, &r, 4, shape, 1.0f), *k = h_input(a, &r, 4, shape, 1.0f),
               *v = h_input(a, &r, 4, shape, 1.0f);
    float *dout = malloc((size_t)n * sizeof(float)), *first = malloc((size_t)n * sizeof(float));
    qkv_rng_fill_normal(&r, dout, n, 0.0f, 1.0f);
    int same = 1;
    for (int run = 0; run < 4; run++) {
        qkv_ctx *c;
        CHECK_OK(qkv_ctx_new(&c));
        qkv_sdpa_opts o = qkv_sdpa_opts_default();
        o.causal = QKV_CAUSAL_TOP_LEFT;
        qkv_tensor *out;
        memset(q->grad, 0, (size_t)n * sizeof(float));
        CHECK_OK(qkv_sdpa(c, q, k, v, &o, &out, NULL));
        CHECK_OK(qkv_backward(c, out, dout));
        if (run == 0) memcpy(first, q->grad, (size_t)n * sizeof(float));
        else same &= !differs(first, q->grad, n);
        qkv_ctx_free(c);
    }
    CHECK(same, "attention backward on 2 threads: dq repeats bit for bit over 4 runs");
    free(dout), free(first);
    qkv_arena_free(a);
}

/* qkv_gemm splits a large product into blocks that OpenMP threads hand to
 * BLAS at once: BLAS must be safe to call from several threads (Debian's
 * single-threaded OpenBLAS is not: its packing buffers are shared, and a
 * linear layer came out wrong). Fast, split, against the reference loop. */
static void test_gemm_split(void)
{
    omp_set_num_threads(2);
    qkv_arena *a;
    qkv_rng r;
    qkv_rng_seed(&r, 12);
    CHECK_OK(qkv_arena_new(&a, 0));
    enum { M = 600, K = 300, N = 700 }; /* 252 MFLOP: split over both threads */
    qkv_tensor *x = h_input(a, &r, 2, (int64_t[]){M, K}, 1.0f),
               *w = h_input(a, &r, 2, (int64_t[]){N, K}, 1.0f);
    double worst = 0;
    for (int rep = 0; rep < 20; rep++) {
        qkv_ctx *c;
        CHECK_OK(qkv_ctx_new(&c));
        qkv_tensor *y1, *y2;
        qkv_set_reference(0);
        CHECK_OK(qkv_linear(c, x, w, NULL, &y1));
        qkv_set_reference(1);
        CHECK_OK(qkv_linear(c, x, w, NULL, &y2));
        qkv_set_reference(0);
        double e = h_rel_err(y1->data, y2->data, (int64_t)M * N);
        worst = isnan(e) || e > worst ? e : worst;
        qkv_ctx_free(c);
    }
    CHECK(worst <= 1e-5, "linear (%d,%d)x(%d,%d)^T split over 2 threads vs reference: %.3g", M, K,
          N, K, worst);
    qkv_arena_free(a);
}

int main(void)
{
    test_gemm_split();
    test_attention_repeats();
    qkv_set_reference(1);
    result one, two;
    run(1, &one);
    run(2, &two);
    CHECK(!differs(one.out, two.out, one.nout), "forward: 1 and 2 threads give the same bits");
    CHECK(!differs(one.grads, two.grads, one.ngrads), "gradients: 1 and 2 threads give the same bits");
    CHECK(!differs(one.params, two.params, one.nparams),
          "AdamW step: 1 and 2 threads give the same bits");
    /* The run did something: the step moved the parameters. */
    int moved = 0;
    for (int64_t i = 0; i < one.nparams; i++) moved += one.params[i] != 0.0f;
    CHECK(moved > one.nparams / 2, "the parameters are set and stepped (%d of %lld nonzero)", moved,
          (long long)one.nparams);
    free(one.out), free(one.grads), free(one.params);
    free(two.out), free(two.grads), free(two.params);
    return h_finish("test_threads");
}
