/* test_sdpa.c: scaled dot-product attention: the lecture's worked example,
 * the fast kernel against the reference on every mask combination, finite
 * differences, permutation properties, fully masked rows, bad input. */
#include "gradcheck.h"
#include "kernels/attention.h" /* qkv_attn_simd_force: each SIMD build in turn */

/* The fast kernel's builds (src/kernels/attention_simd.h); those this CPU
 * cannot run are reported and left out, not counted. */
static const char *ISAS[] = {"avx512", "avx2", "portable"};
enum { NISA = 3 };

static int isa_use(int i)
{
    if (qkv_attn_simd_force(ISAS[i])) return 1;
    printf("note: the %s build does not run on this CPU; not tested here\n", ISAS[i]);
    return 0;
}

static qkv_arena *A; /* persistent inputs */
static qkv_rng R;

static qkv_tensor *rnd(int ndim, const int64_t *shape, float scale)
{
    return h_input(A, &R, ndim, shape, scale);
}

/* The worked example (seed 003): three inputs, W_key, W_query, W_value,
 * unscaled softmax. Scores of input 1 against all keys are [2,4,4]. */
static void test_worked_example(void)
{
    float x[3][4] = {{1, 0, 1, 0}, {0, 2, 0, 2}, {1, 1, 1, 1}};
    float wk[4][3] = {{0, 0, 1}, {1, 1, 0}, {0, 1, 0}, {1, 1, 0}};
    float wq[4][3] = {{1, 0, 1}, {1, 0, 0}, {0, 0, 1}, {0, 1, 1}};
    float wv[4][3] = {{0, 2, 0}, {0, 3, 0}, {1, 0, 3}, {1, 1, 0}};
    float q[3][3] = {{0}}, k[3][3] = {{0}}, v[3][3] = {{0}};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            for (int t = 0; t < 4; t++) {
                q[i][j] += x[i][t] * wq[t][j];
                k[i][j] += x[i][t] * wk[t][j];
                v[i][j] += x[i][t] * wv[t][j];
            }
    /* The notes' projections. */
    CHECK(q[0][0] == 1 && q[0][1] == 0 && q[0][2] == 2, "q1 = [1,0,2]");
    CHECK(k[1][0] == 4 && k[1][1] == 4 && k[1][2] == 0, "k2 = [4,4,0]");
    CHECK(v[2][0] == 2 && v[2][1] == 6 && v[2][2] == 3, "v3 = [2,6,3]");
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    int64_t sh[3] = {1, 3, 3};
    qkv_tensor *tq, *tk, *tv, *out, *w;
    qkv_tensor_wrap(A, &q[0][0], 3, sh, &tq);
    qkv_tensor_wrap(A, &k[0][0], 3, sh, &tk);
    qkv_tensor_wrap(A, &v[0][0], 3, sh, &tv);
    qkv_sdpa_opts o = qkv_sdpa_opts_default();
    o.scale = 1.0f;
    o.need_weights = 1;
    for (int ref = 0; ref < 2; ref++) {
        qkv_set_reference(ref);
        CHECK_OK(qkv_sdpa(c, tq, tk, tv, &o, &out, &w));
        /* softmax([2,4,4]) by hand: e^-2 / (e^-2 + 2), 1 / (e^-2 + 2). */
        double e = exp(-2.0), w0 = e / (e + 2), w1 = 1 / (e + 2);
        CHECK(fabs(w->data[0] - w0) < 1e-6 && fabs(w->data[1] - w1) < 1e-6 &&
                  fabs(w->data[2] - w1) < 1e-6,
              "weights of input 1: %g %g %g", w->data[0], w->data[1], w->data[2]);
        /* Output 1 = w0 [1,2,3] + w1 [2,8,0] + w1 [2,6,3]: the notes round
         * the weights to [0, .5, .5] and get [2, 7, 1.5]. */
        double o1[3] = {w0 * 1 + w1 * 4, w0 * 2 + w1 * 14, w0 * 3 + w1 * 3};
        for (int j = 0; j < 3; j++)
            CHECK(fabs(out->data[j] - o1[j]) < 1e-5, "output 1[%d] = %g, expected %g", j,
                  out->data[j], o1[j]);
        CHECK(fabs(out->data[0] - 2.0) < 0.1 && fabs(out->data[1] - 7.0) < 0.4 &&
                  fabs(out->data[2] - 1.5) < 0.1,
              "output 1 near the notes' rounded [2,7,1.5]");
    }
    qkv_set_reference(0);
    qkv_ctx_free(c);
}

/* A random attention problem with a chosen set of masks. */
typedef struct {
    qkv_tensor *q, *k, *v, *amask, *kpm;
    qkv_sdpa_opts o;
} problem;

static void problem_make(problem *p, int64_t N, int64_t H, int64_t L, int64_t S, int64_t D,
                         int64_t Dv, int flags)
{
    memset(p, 0, sizeof *p);
    p->o = qkv_sdpa_opts_default();
    p->q = rnd(4, (int64_t[]){N, H, L, D}, 1.0f);
    p->k = rnd(4, (int64_t[]){N, H, S, D}, 1.0f);
    p->v = rnd(4, (int64_t[]){N, H, S, Dv}, 1.0f);
    if (flags & 1) { /* bool attn_mask, 2-D */
        qkv_tensor_new(A, QKV_BOOL, 2, (int64_t[]){L, S}, &p->amask);
        for (int64_t i = 0; i < L * S; i++) p->amask->mask[i] = qkv_rng_uniform(&R) < 0.3f;
    }
    if (flags & 2) { /* float attn_mask, 3-D, with some -inf */
        qkv_tensor_new(A, QKV_F32, 3, (int64_t[]){N * H, L, S}, &p->amask);
        for (int64_t i = 0; i < N * H * L * S; i++)
            p->amask->data[i] = qkv_rng_uniform(&R) < 0.2f ? -INFINITY : qkv_rng_normal(&R);
    }
    if (flags & 4) { /* key padding: the last keys of batch 0 */
        qkv_tensor_new(A, QKV_BOOL, 2, (int64_t[]){N, S}, &p->kpm);
        for (int64_t j = S / 2; j < S; j++) p->kpm->mask[j] = 1;
    }
    if (flags & 8) p->o.causal = QKV_CAUSAL_TOP_LEFT;
    if (flags & 16) p->o.causal = QKV_CAUSAL_BOTTOM_RIGHT;
    if (flags & 32) p->o.window = 2;
    if (flags & 64) { /* a row with every key masked */
        qkv_tensor_new(A, QKV_BOOL, 2, (int64_t[]){L, S}, &p->amask);
        for (int64_t j = 0; j < S; j++) p->amask->mask[1 * S + j] = 1;
    }
    if (flags & 128) p->o.mask_keys = S - 1; /* one key no mask covers, as bias_k */
    p->o.attn_mask = p->amask;
    p->o.key_padding_mask = p->kpm;
}

static qkv_status problem_forward(qkv_ctx *c, void *user, qkv_tensor **out)
{
    problem *p = user;
    return qkv_sdpa(c, p->q, p->k, p->v, &p->o, out, NULL);
}

/* Runs forward + backward in the current kernel mode; copies out, dq, dk,
 * dv into bufs (allocated by the caller, sized to the problem). */
static void run_problem(problem *p, float *out, float *g)
{
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_tensor *t[3] = {p->q, p->k, p->v};
    for (int i = 0; i < 3; i++) memset(t[i]->grad, 0, (size_t)qkv_tensor_numel(t[i]) * 4);
    qkv_tensor *o;
    CHECK_OK(problem_forward(c, p, &o));
    int64_t no = qkv_tensor_numel(o);
    memcpy(out, o->data, (size_t)no * 4);
    float *dout = malloc((size_t)no * 4);
    qkv_rng r2;
    qkv_rng_seed(&r2, 7);
    qkv_rng_fill_uniform(&r2, dout, no, -1, 1);
    CHECK_OK(qkv_backward(c, o, dout));
    for (int i = 0; i < 3; i++) {
        memcpy(g, t[i]->grad, (size_t)qkv_tensor_numel(t[i]) * 4);
        g += qkv_tensor_numel(t[i]);
    }
    free(dout);
    qkv_ctx_free(c);
}

static void test_fast_vs_reference(void)
{
    int flag_sets[] = {0,     1,  2,     4,      8,          16,        32,      1 | 4,
                       2 | 8, 4 | 8 | 32, 16 | 32, 64, 64 | 8, 2 | 4 | 16, 128 | 32, 128 | 8,
                       128 | 16 | 32};
    int64_t sizes[][6] = {{2, 3, 5, 7, 4, 3},       {1, 2, 70, 130, 8, 5}, {2, 1, 129, 65, 16, 16},
                          {1, 1, 1, 1, 3, 2},       {1, 2, 40, 33, 5, 6},  {1, 2, 150, 200, 64, 64},
                          {1, 1, 70, 67, 33, 20},   {3, 2, 8, 2, 4, 4},    {1, 4, 8, 1, 3, 3},
                          /* a ViT's 50 tokens, head size 16 (short key tiles, 52 rows worked) */
                          {2, 4, 50, 50, 16, 16},   {1, 2, 50, 51, 16, 16}};
    double worst_f = 0, worst_b = 0;
    for (int isa = 0; isa < NISA; isa++) {
        if (!isa_use(isa)) continue;
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
            for (size_t f = 0; f < sizeof flag_sets / sizeof *flag_sets; f++) {
                int64_t *z = sizes[s];
                if ((flag_sets[f] & 64) && z[2] < 2) continue;
                problem p;
                problem_make(&p, z[0], z[1], z[2], z[3], z[4], z[5], flag_sets[f]);
                int64_t no = z[0] * z[1] * z[2] * z[5];
                int64_t ng = qkv_tensor_numel(p.q) + qkv_tensor_numel(p.k) + qkv_tensor_numel(p.v);
                float *o1 = malloc(no * 4), *o2 = malloc(no * 4), *g1 = malloc(ng * 4), *g2 = malloc(ng * 4);
                qkv_set_reference(1);
                run_problem(&p, o1, g1);
                qkv_set_reference(0);
                run_problem(&p, o2, g2);
                double ef = h_rel_err(o2, o1, no), eb = h_rel_err(g2, g1, ng);
                CHECK(ef <= 1e-5, "%s size %zu flags %d: forward fast vs reference %g", ISAS[isa], s,
                      flag_sets[f], ef);
                CHECK(eb <= 1e-4, "%s size %zu flags %d: backward fast vs reference %g", ISAS[isa], s,
                      flag_sets[f], eb);
                if (ef > worst_f || isnan(ef)) worst_f = ef;
                if (eb > worst_b || isnan(eb)) worst_b = eb;
                if (flag_sets[f] & 64) { /* row 1 fully masked: out 0, dq 0 */
                    int zero = 1;
                    for (int64_t nh = 0; nh < z[0] * z[1]; nh++)
                        for (int64_t x = 0; x < z[5]; x++) zero &= o2[(nh * z[2] + 1) * z[5] + x] == 0.0f;
                    for (int64_t nh = 0; nh < z[0] * z[1]; nh++)
                        for (int64_t x = 0; x < z[4]; x++) zero &= g2[(nh * z[2] + 1) * z[4] + x] == 0.0f;
                    CHECK(zero, "fully masked row gives output 0 and gradient 0");
                }
                free(o1), free(o2), free(g1), free(g2);
            }
    }
    qkv_attn_simd_force(NULL);
    printf("fast (every SIMD build) vs reference: worst forward %.3g, backward %.3g\n", worst_f,
           worst_b);
}

static void test_gradcheck(void)
{
    int flag_sets[] = {0, 2, 4 | 8, 32, 64, 16 | 1};
    for (int ref = 0; ref < 1 + NISA; ref++) { /* 0: reference, then each fast build */
        if (ref > 0 && !isa_use(ref - 1)) continue;
        qkv_set_reference(ref == 0);
        for (size_t f = 0; f < sizeof flag_sets / sizeof *flag_sets; f++) {
            problem p;
            problem_make(&p, 2, 2, 4, 5, 3, 2, flag_sets[f]);
            qkv_tensor *in[3] = {p.q, p.k, p.v};
            double e = h_gradcheck(problem_forward, &p, in, 3, 1e-2f, 1e-2);
            CHECK(e < 1e-2, "gradcheck %s flags %d: worst rel %g", ref ? ISAS[ref - 1] : "ref",
                  flag_sets[f], e);
        }
    }
    qkv_attn_simd_force(NULL);
    /* With dropout in training mode: the mask is a function of the seed and
     * the position, so finite differences see the same mask. */
    problem p;
    problem_make(&p, 1, 2, 4, 6, 3, 3, 4 | 8);
    p.o.dropout_p = 0.3f;
    qkv_tensor *in[3] = {p.q, p.k, p.v};
    h_training = 1;
    for (int ref = 0; ref < 2; ref++) {
        qkv_set_reference(ref);
        double e = h_gradcheck(problem_forward, &p, in, 3, 1e-2f, 1e-2);
        CHECK(e < 1e-2, "gradcheck with dropout 0.3 in training (%s): worst rel %g", ref ? "ref" : "fast", e);
    }
    h_training = 0;
    qkv_set_reference(0);
    problem_make(&p, 1, 2, 4, 6, 3, 3, 0);
    p.o.dropout_p = 0.3f;
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_ctx_set_training(c, 1);
    qkv_ctx_set_seed(c, 99);
    qkv_tensor *o1, *o2, *w1;
    p.o.need_weights = 1;
    qkv_set_reference(1);
    CHECK_OK(qkv_sdpa(c, p.q, p.k, p.v, &p.o, &o1, &w1));
    qkv_ctx_set_seed(c, 99);
    qkv_set_reference(0);
    p.o.need_weights = 0;
    CHECK_OK(qkv_sdpa(c, p.q, p.k, p.v, &p.o, &o2, NULL));
    CHECK(h_rel_err(o2->data, o1->data, qkv_tensor_numel(o1)) < 1e-5,
          "dropout: fast and reference draw the same mask");
    int zeros = 0;
    for (int64_t i = 0; i < qkv_tensor_numel(w1); i++) zeros += w1->data[i] == 0.0f;
    CHECK(zeros > 5 && zeros < 40, "dropout 0.3 zeroes some of 48 weights (%d)", zeros);
    qkv_ctx_free(c);
}

/* Self-attention without positions: permuting the queries permutes the
 * output; permuting keys and values together changes nothing. */
/* A window wider than any distance is no window, even INT64_MAX (which
 * must not overflow i + window in the kernels). */
static void test_wide_window(void)
{
    for (int ref = 0; ref < 2; ref++) {
        qkv_set_reference(ref);
        problem p;
        problem_make(&p, 1, 2, 3, 10, 4, 4, 0);
        int64_t no = 2 * 3 * 4;
        float *o1 = malloc(no * 4), *o2 = malloc(no * 4);
        int64_t ng = qkv_tensor_numel(p.q) + qkv_tensor_numel(p.k) + qkv_tensor_numel(p.v);
        float *g1 = malloc(ng * 4), *g2 = malloc(ng * 4);
        run_problem(&p, o1, g1);
        p.o.window = INT64_MAX;
        run_problem(&p, o2, g2);
        CHECK(!memcmp(o1, o2, no * 4) && !memcmp(g1, g2, ng * 4),
              "%s: window INT64_MAX gives what no window gives", ref ? "reference" : "fast");
        free(o1), free(o2), free(g1), free(g2);
    }
    qkv_set_reference(0);
}

static void test_permutation(void)
{
    int64_t L = 9, S = 11, D = 8;
    problem p;
    problem_make(&p, 1, 1, L, S, D, D, 0);
    int perm[16];
    for (int i = 0; i < 16; i++) perm[i] = i;
    for (int i = 10; i > 0; i--) {
        int j = (int)(qkv_rng_next(&R) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_tensor *o, *oq, *okv;
    CHECK_OK(qkv_sdpa(c, p.q, p.k, p.v, NULL, &o, NULL));
    qkv_tensor *q2, *k2, *v2;
    qkv_tensor_new(A, QKV_F32, 4, p.q->shape, &q2);
    qkv_tensor_new(A, QKV_F32, 4, p.k->shape, &k2);
    qkv_tensor_new(A, QKV_F32, 4, p.v->shape, &v2);
    int qperm[9] = {3, 1, 8, 0, 5, 2, 7, 4, 6};
    for (int64_t i = 0; i < L; i++) memcpy(q2->data + i * D, p.q->data + qperm[i] * D, D * 4);
    for (int64_t j = 0; j < S; j++) {
        memcpy(k2->data + j * D, p.k->data + perm[j] * D, D * 4);
        memcpy(v2->data + j * D, p.v->data + perm[j] * D, D * 4);
    }
    CHECK_OK(qkv_sdpa(c, q2, p.k, p.v, NULL, &oq, NULL));
    CHECK_OK(qkv_sdpa(c, p.q, k2, v2, NULL, &okv, NULL));
    double e1 = 0, e2 = 0;
    for (int64_t i = 0; i < L; i++)
        for (int64_t x = 0; x < D; x++) {
            e1 = fmax(e1, fabs(oq->data[i * D + x] - o->data[qperm[i] * D + x]));
            e2 = fmax(e2, fabs(okv->data[i * D + x] - o->data[i * D + x]));
        }
    CHECK(e1 < 1e-6, "equivariant in the queries (max diff %g)", e1);
    CHECK(e2 < 1e-5, "invariant to a joint permutation of keys and values (max diff %g)", e2);
    qkv_ctx_free(c);
}


/* ALiBi computed on the fly equals the same bias given as a float mask. */
static void test_alibi(void)
{
    int64_t N = 2, H = 3, L = 40, S = 70;
    float slopes[3] = {0.5f, 0.125f, 0.03125f};
    for (int causal = 0; causal < 3; causal++) {
        problem p;
        problem_make(&p, N, H, L, S, 8, 8, 0);
        qkv_tensor *bias;
        qkv_tensor_new(A, QKV_F32, 3, (int64_t[]){N * H, L, S}, &bias);
        int64_t diag = causal == 2 ? S - L : 0;
        for (int64_t nh = 0; nh < N * H; nh++)
            for (int64_t i = 0; i < L; i++)
                for (int64_t j = 0; j < S; j++)
                    bias->data[(nh * L + i) * S + j] = -slopes[nh % H] * (float)llabs(i + diag - j);
        qkv_ctx *c;
        qkv_ctx_new(&c);
        for (int ref = 0; ref < 2; ref++) {
            qkv_set_reference(ref);
            qkv_tensor *o1, *o2;
            qkv_sdpa_opts a = qkv_sdpa_opts_default(), b = qkv_sdpa_opts_default();
            a.causal = b.causal = (qkv_causal)causal;
            a.alibi_slopes = slopes;
            b.attn_mask = bias;
            CHECK_OK(qkv_sdpa(c, p.q, p.k, p.v, &a, &o1, NULL));
            CHECK_OK(qkv_sdpa(c, p.q, p.k, p.v, &b, &o2, NULL));
            double e = h_rel_err(o1->data, o2->data, qkv_tensor_numel(o1));
            CHECK(e < 1e-6, "ALiBi (causal %d, %s) equals its materialised bias: %g", causal,
                  ref ? "reference" : "fast", e);
        }
        qkv_set_reference(0);
        p.o.alibi_slopes = slopes;
        p.o.causal = (qkv_causal)causal;
        qkv_tensor *in[3] = {p.q, p.k, p.v};
        double g = h_gradcheck(problem_forward, &p, in, 3, 1e-2f, 1e-2);
        CHECK(g < 1e-2, "ALiBi gradcheck (causal %d): %g", causal, g);
        qkv_ctx_free(c);
    }
    float bad[3] = {0.5f, NAN, 0.1f};
    problem p;
    problem_make(&p, N, H, L, S, 8, 8, 0);
    p.o.alibi_slopes = bad;
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_tensor *o;
    CHECK_ERR(qkv_sdpa(c, p.q, p.k, p.v, &p.o, &o, NULL), QKV_ERR_ARG, "alibi_slopes[1] is nan");
    qkv_ctx_free(c);
}

static void test_bad_input(void)
{
    qkv_ctx *c;
    qkv_ctx_new(&c);
    problem p;
    problem_make(&p, 2, 2, 4, 5, 3, 2, 0);
    qkv_tensor *o, *w, *bad, *m;
    qkv_sdpa_opts opt = qkv_sdpa_opts_default();
    CHECK_ERR(qkv_sdpa(NULL, p.q, p.k, p.v, NULL, &o, NULL), QKV_ERR_ARG, "ctx is NULL");
    CHECK_ERR(qkv_sdpa(c, NULL, p.k, p.v, NULL, &o, NULL), QKV_ERR_ARG, "query is NULL");
    CHECK_ERR(qkv_sdpa(c, p.q, p.k, p.v, NULL, NULL, NULL), QKV_ERR_ARG, "out is NULL");
    qkv_tensor_new(A, QKV_F32, 2, (int64_t[]){4, 3}, &bad);
    CHECK_ERR(qkv_sdpa(c, bad, p.k, p.v, NULL, &o, NULL), QKV_ERR_SHAPE, "query (4,3) has 2 dims");
    qkv_tensor_new(A, QKV_F32, 4, (int64_t[]){2, 2, 5, 4}, &bad);
    CHECK_ERR(qkv_sdpa(c, p.q, bad, p.v, NULL, &o, NULL), QKV_ERR_SHAPE, "key (2,2,5,4) last dim");
    qkv_tensor_new(A, QKV_F32, 4, (int64_t[]){2, 2, 6, 2}, &bad);
    CHECK_ERR(qkv_sdpa(c, p.q, p.k, bad, NULL, &o, NULL), QKV_ERR_SHAPE, "value (2,2,6,2) has 6 keys");
    qkv_tensor_new(A, QKV_BOOL, 2, (int64_t[]){4, 6}, &m);
    opt.attn_mask = m;
    CHECK_ERR(qkv_sdpa(c, p.q, p.k, p.v, &opt, &o, NULL), QKV_ERR_SHAPE, "attn_mask (4,6)");
    qkv_tensor_new(A, QKV_F32, 3, (int64_t[]){2, 4, 5}, &m);
    opt.attn_mask = m;
    CHECK_ERR(qkv_sdpa(c, p.q, p.k, p.v, &opt, &o, NULL), QKV_ERR_SHAPE, "attn_mask (2,4,5)");
    opt = qkv_sdpa_opts_default();
    qkv_tensor_new(A, QKV_BOOL, 2, (int64_t[]){2, 4}, &m);
    opt.key_padding_mask = m;
    CHECK_ERR(qkv_sdpa(c, p.q, p.k, p.v, &opt, &o, NULL), QKV_ERR_SHAPE, "key_padding_mask (2,4)");
    opt = qkv_sdpa_opts_default();
    opt.dropout_p = 1.5f;
    CHECK_ERR(qkv_sdpa(c, p.q, p.k, p.v, &opt, &o, NULL), QKV_ERR_ARG, "dropout_p 1.5");
    opt = qkv_sdpa_opts_default();
    opt.scale = INFINITY;
    CHECK_ERR(qkv_sdpa(c, p.q, p.k, p.v, &opt, &o, NULL), QKV_ERR_ARG, "scale inf");
    opt = qkv_sdpa_opts_default();
    opt.need_weights = 1; /* with weights NULL: not computed, not an error */
    CHECK_OK(qkv_sdpa(c, p.q, p.k, p.v, &opt, &o, NULL));
    CHECK(o != NULL, "sdpa with need_weights and weights NULL gives the output");
    opt.causal = 7;
    CHECK_ERR(qkv_sdpa(c, p.q, p.k, p.v, &opt, &o, &w), QKV_ERR_ARG, "causal is 7");
    {
        /* A damaged tensor (ndim 7, more than shape[] holds): a clear error,
         * and its shape is not read past shape[3] while the message is made. */
        qkv_tensor bad = *p.q;
        bad.ndim = 7;
        CHECK_ERR(qkv_sdpa(c, &bad, p.k, p.v, NULL, &o, NULL), QKV_ERR_SHAPE, "(with ndim 7)");
    }
    opt = qkv_sdpa_opts_default();
    opt.mask_keys = 9;
    CHECK_ERR(qkv_sdpa(c, p.q, p.k, p.v, &opt, &o, NULL), QKV_ERR_ARG, "mask_keys 9");
    CHECK_ERR(qkv_backward(c, p.q, NULL), QKV_ERR_ARG, "dout is NULL");
    qkv_ctx_free(c);
}

/* q, k and v whose gradients the backward meets first (a multi-head
 * attention's, from its head split): the fast kernels zero them head by
 * head as they go instead of adding into zeroed buffers. The gradients must
 * equal, bit for bit, those added into zeros (run_problem's). Two runs in
 * one ctx: the second run's new buffers hold the first run's numbers (the
 * arena is reused), not zeros. One key tile (S <= 128, dq added directly)
 * and several (dq summed from per-thread buffers). */
static void test_unset_grads(void)
{
    /* 129 queries on 65 keys, bottom-right causal: the first query block
     * sees no key (its dq rows get no addition) */
    int64_t sizes[][6] = {{2, 4, 50, 50, 16, 16}, {1, 2, 150, 200, 64, 64}, {1, 2, 70, 130, 8, 5},
                          {2, 1, 129, 65, 16, 16}};
    int flag_sets[] = {0, 4 | 8, 64, 16};
    for (int isa = 0; isa < NISA; isa++) {
        if (!isa_use(isa)) continue;
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
            for (size_t f = 0; f < sizeof flag_sets / sizeof *flag_sets; f++) {
                int64_t *z = sizes[s];
                problem p;
                problem_make(&p, z[0], z[1], z[2], z[3], z[4], z[5], flag_sets[f]);
                int64_t no = z[0] * z[1] * z[2] * z[5];
                int64_t n3[3] = {qkv_tensor_numel(p.q), qkv_tensor_numel(p.k), qkv_tensor_numel(p.v)};
                float *o1 = malloc(no * 4), *g1 = malloc((n3[0] + n3[1] + n3[2]) * 4), *dout = malloc(no * 4);
                run_problem(&p, o1, g1);
                qkv_rng r2;
                qkv_rng_seed(&r2, 7); /* run_problem's dout */
                qkv_rng_fill_uniform(&r2, dout, no, -1, 1);
                qkv_ctx *c;
                qkv_ctx_new(&c);
                for (int run = 0; run < 2; run++) {
                    qkv_ctx_reset(c);
                    problem p2 = p;
                    qkv_tensor **t[3] = {&p2.q, &p2.k, &p2.v}, *src[3] = {p.q, p.k, p.v}, *o;
                    for (int i = 0; i < 3; i++) {
                        CHECK_OK(qkv_tensor_wrap(qkv_ctx_arena(c), src[i]->data, 4, src[i]->shape, t[i]));
                        qkv_tensor_set_requires_grad(*t[i], 1);
                    }
                    CHECK_OK(problem_forward(c, &p2, &o));
                    CHECK_OK(qkv_backward(c, o, dout));
                    int same = 1;
                    for (int i = 0, off = 0; i < 3; off += (int)n3[i], i++)
                        same &= (*t[i])->grad && !memcmp((*t[i])->grad, g1 + off, (size_t)n3[i] * 4);
                    CHECK(same, "%s size %zu flags %d run %d: new gradient buffers differ from added-into zeros",
                          ISAS[isa], s, flag_sets[f], run);
                }
                qkv_ctx_free(c);
                free(o1), free(g1), free(dout);
            }
    }
    qkv_attn_simd_force(NULL);
}

int main(void)
{
    qkv_arena_new(&A, 0);
    qkv_rng_seed(&R, 42);
    test_worked_example();
    test_fast_vs_reference();
    test_unset_grads();
    test_gradcheck();
    test_permutation();
    test_wide_window();
    test_alibi();
    test_bad_input();
    qkv_arena_free(A);
    return h_finish("test_sdpa");
}
