/* test_determinism.c: which results repeat bit for bit (docs/reliability.md,
 * "Determinism"). Causal attention (4 heads, L = 1024, head_dim 64: 8 key
 * tiles, 16 query blocks, so every thread has work), forward and backward
 * through the fused kernel, and a linear layer large enough to be split
 * across threads, run on 1, 2 and 3 OpenMP threads and twice on 2:
 *  - run after run on one thread count: every output and gradient the same;
 *  - across thread counts: the attention output, dk, dv and the linear
 *    layer the same; dq is summed from one buffer per thread and may round
 *    differently (printed, not required). */
#include <omp.h>
#include "harness.h"

enum { NH = 4, L = 1024, D = 64, ROWS = 4096, E = 512 };
#define NQ ((size_t)NH * L * D)

typedef struct {
    float *out, *dq, *dk, *dv, *lin;
} result;

static void run(int threads, result *res)
{
    omp_set_num_threads(threads);
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_arena *a = qkv_ctx_arena(c);
    qkv_rng r;
    qkv_rng_seed(&r, 3);
    int64_t sh[4] = {1, NH, L, D};
    qkv_tensor *q, *k, *v, *o = NULL, *x, *w, *y = NULL;
    qkv_tensor *in[3];
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 4, sh, &q)); // q, k, v are (1,NH,L,D)
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 4, sh, &k));
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 4, sh, &v));
    in[0] = q, in[1] = k, in[2] = v;
    for (int i = 0; i < 3; i++) {
        qkv_rng_fill_normal(&r, in[i]->data, (int64_t)NQ, 0, 1);
        qkv_tensor_grad(a, in[i]);
        in[i]->requires_grad = 1;
    }
    qkv_sdpa_opts so = qkv_sdpa_opts_default();
    so.causal = QKV_CAUSAL_TOP_LEFT;
    CHECK_OK(qkv_sdpa(c, q, k, v, &so, &o, NULL));
    float *g = malloc(NQ * sizeof *g);
    for (size_t i = 0; i < NQ; i++) g[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
    if (o) {
        memcpy(res->out, o->data, NQ * 4);
        CHECK_OK(qkv_backward(c, o, g));
    }
    memcpy(res->dq, q->grad, NQ * 4);
    memcpy(res->dk, k->grad, NQ * 4);
    memcpy(res->dv, v->grad, NQ * 4);
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 2, (int64_t[]){ROWS, E}, &x)); // x is (ROWS,E)
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 2, (int64_t[]){E, E}, &w));    // w is (E,E)
    qkv_rng_fill_normal(&r, x->data, ROWS * E, 0, 1);
    qkv_rng_fill_normal(&r, w->data, E * E, 0, 1);
    CHECK_OK(qkv_linear(c, x, w, NULL, &y));
    if (y) memcpy(res->lin, y->data, (size_t)ROWS * E * 4);
    free(g);
    qkv_ctx_free(c);
}

static void alloc(result *r)
{
    r->out = calloc(NQ, 4), r->dq = calloc(NQ, 4), r->dk = calloc(NQ, 4), r->dv = calloc(NQ, 4);
    r->lin = calloc((size_t)ROWS * E, 4);
}

static void release(result *r) { free(r->out), free(r->dq), free(r->dk), free(r->dv), free(r->lin); }

static int same(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * 4); }

int main(void)
{
    int max = omp_get_max_threads();
    result one, two, two_again, three;
    alloc(&one), alloc(&two), alloc(&two_again), alloc(&three);
    run(1, &one);
    run(2, &two);
    run(2, &two_again);
    run(3, &three);
    omp_set_num_threads(max);
    const result *rs[2] = {&two_again, &one};
    const char *names[2] = {"2 threads, run again", "1 thread"};
    for (int i = 0; i < 2; i++) {
        const result *r = rs[i];
        CHECK(same(r->out, two.out, NQ), "%s: attention output differs from 2 threads", names[i]);
        CHECK(same(r->dk, two.dk, NQ), "%s: dk differs", names[i]);
        CHECK(same(r->dv, two.dv, NQ), "%s: dv differs", names[i]);
        CHECK(same(r->lin, two.lin, (size_t)ROWS * E), "%s: linear differs", names[i]);
    }
    CHECK(same(two_again.dq, two.dq, NQ), "2 threads twice: dq differs");
    CHECK(same(three.out, two.out, NQ) && same(three.dk, two.dk, NQ) && same(three.dv, two.dv, NQ) &&
              same(three.lin, two.lin, (size_t)ROWS * E),
          "3 threads: output, dk, dv or linear differs from 2 threads");
    printf("dq: 1 vs 2 threads %s, 3 vs 2 threads %s (may differ: one buffer per thread)\n",
           same(one.dq, two.dq, NQ) ? "same bits" : "different bits",
           same(three.dq, two.dq, NQ) ? "same bits" : "different bits");
    release(&one), release(&two), release(&two_again), release(&three);
    return h_finish("test_determinism");
}
