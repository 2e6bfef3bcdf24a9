/* test_score.c: softmax, bmm and the six score functions: finite-difference
 * gradients, argument checks, and parity with PyTorch (tools/score_oracle.py,
 * run through /usr/bin/python3 from the repo root). */
#define _POSIX_C_SOURCE 200809L /* WEXITSTATUS, mkdtemp */
#include <unistd.h>
#include <sys/wait.h>
#include "gradcheck.h"

#define GC_EPS 1e-2f   /* finite-difference step */
#define GC_FLOOR 1e-2  /* denominator floor of the relative error */
#define GC_TOL 5e-3    /* worst relative error accepted (measured worst: 1.3e-3, cosine) */

static const char *const kind_names[] = {"dot", "scaled_dot", "cosine",
                                         "general", "reduced_rank", "additive"};

static int has_nan(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (isnan(x[i]) || isinf(x[i])) return 1;
    return 0;
}

/* ---- gradient checks ------------------------------------------------------ */

typedef struct {
    qkv_tensor *x;
    const qkv_tensor *mask;
} softmax_case;

static qkv_status fwd_softmax(qkv_ctx *c, void *u, qkv_tensor **out)
{
    softmax_case *s = u;
    return qkv_softmax(c, s->x, s->mask, out);
}

typedef struct {
    qkv_tensor *a, *b;
} bmm_case;

static qkv_status fwd_bmm(qkv_ctx *c, void *u, qkv_tensor **out)
{
    bmm_case *s = u;
    return qkv_bmm(c, s->a, s->b, out);
}

typedef struct {
    const qkv_score *sc;
    qkv_tensor *q, *k;
} score_case;

static qkv_status fwd_score(qkv_ctx *c, void *u, qkv_tensor **out)
{
    score_case *s = u;
    return qkv_score_forward(c, s->sc, s->q, s->k, out);
}

static void test_softmax_grad(qkv_arena *a, qkv_rng *r)
{
    int64_t s3[3] = {2, 3, 5}, s2[2] = {2, 5}, ms[2] = {2, 5};
    softmax_case sc = {h_input(a, r, 3, s3, 2.0f), NULL};
    double e = h_gradcheck(fwd_softmax, &sc, &sc.x, 1, GC_EPS, GC_FLOOR);
    CHECK(e < GC_TOL, "softmax (2,3,5) no mask: gradcheck error %g", e);

    /* Batch 0: keys 1 and 4 masked; batch 1: every key masked. */
    static uint8_t m[10] = {0, 1, 0, 0, 1, 1, 1, 1, 1, 1};
    qkv_tensor *mask;
    CHECK_OK(qkv_tensor_wrap_bool(a, m, 2, ms, &mask));
    sc.mask = mask;
    e = h_gradcheck(fwd_softmax, &sc, &sc.x, 1, GC_EPS, GC_FLOOR);
    CHECK(e < GC_TOL, "softmax (2,3,5) masked: gradcheck error %g", e);
    softmax_case sc2 = {h_input(a, r, 2, s2, 2.0f), mask};
    e = h_gradcheck(fwd_softmax, &sc2, &sc2.x, 1, GC_EPS, GC_FLOOR);
    CHECK(e < GC_TOL, "softmax (2,5) masked: gradcheck error %g", e);

    /* The masked entries and the all-masked rows: 0 out, 0 gradient, no NaN. */
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_tensor *y = NULL;
    memset(sc.x->grad, 0, 30 * sizeof(float));
    CHECK_OK(qkv_softmax(c, sc.x, mask, &y));
    if (y) {
        float dy[30];
        for (int i = 0; i < 30; i++) dy[i] = 1.0f + 0.1f * (float)i;
        CHECK_OK(qkv_backward(c, y, dy));
        CHECK(!has_nan(y->data, 30) && !has_nan(sc.x->grad, 30), "softmax: NaN with a full mask");
        int zero = 1;
        double rowsum = 0;
        for (int t = 0; t < 3; t++)
            for (int j = 0; j < 5; j++) {
                int i0 = t * 5 + j, i1 = 15 + t * 5 + j; /* batch 0, batch 1 */
                if (m[j] && (y->data[i0] != 0 || sc.x->grad[i0] != 0)) zero = 0;
                if (y->data[i1] != 0 || sc.x->grad[i1] != 0) zero = 0;
                if (t == 0) rowsum += y->data[i0];
            }
        CHECK(zero, "softmax: masked entries / all-masked rows not exactly 0 with 0 gradient");
        CHECK(fabs(rowsum - 1) < 1e-6, "softmax: unmasked row sums to %.9g", rowsum);
    }

    /* A row of -inf (an additive mask applied by hand) also gives zeros. */
    qkv_ctx_reset(c);
    float xi[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    float xs[4] = {1000.0f, 999.0f, -1000.0f, -INFINITY}; /* large: needs max-subtraction */
    int64_t s14[2] = {1, 4};
    qkv_tensor *ti, *ts, *yi = NULL, *ys = NULL;
    CHECK_OK(qkv_tensor_wrap(qkv_ctx_arena(c), xi, 2, s14, &ti));
    CHECK_OK(qkv_tensor_wrap(qkv_ctx_arena(c), xs, 2, s14, &ts));
    CHECK_OK(qkv_softmax(c, ti, NULL, &yi));
    CHECK_OK(qkv_softmax(c, ts, NULL, &ys));
    if (yi && ys) {
        CHECK(yi->data[0] == 0 && yi->data[3] == 0 && !has_nan(yi->data, 4),
              "softmax: an all -inf row gives %g %g", yi->data[0], yi->data[3]);
        double w0 = 1 / (1 + exp(-1.0));
        CHECK(fabs(ys->data[0] - w0) < 1e-6 && fabs(ys->data[1] - (1 - w0)) < 1e-6 &&
                  ys->data[2] == 0 && ys->data[3] == 0,
              "softmax: large logits gave %g %g %g %g", ys->data[0], ys->data[1], ys->data[2],
              ys->data[3]);
    }
    qkv_ctx_free(c);
}

static void test_bmm_grad(qkv_arena *a, qkv_rng *r)
{
    int64_t sa[3] = {2, 3, 4}, sb[3] = {2, 4, 5}, sa2[2] = {2, 4};
    bmm_case bc = {h_input(a, r, 3, sa, 1.0f), h_input(a, r, 3, sb, 1.0f)};
    qkv_tensor *in[2] = {bc.a, bc.b};
    double e = h_gradcheck(fwd_bmm, &bc, in, 2, GC_EPS, GC_FLOOR);
    CHECK(e < GC_TOL, "bmm (2,3,4)x(2,4,5): gradcheck error %g", e);
    bmm_case bc2 = {h_input(a, r, 2, sa2, 1.0f), bc.b};
    in[0] = bc2.a;
    e = h_gradcheck(fwd_bmm, &bc2, in, 2, GC_EPS, GC_FLOOR);
    CHECK(e < GC_TOL, "bmm (2,4)x(2,4,5): gradcheck error %g", e);

    /* Values against a plain loop. */
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_tensor *y = NULL, *y2 = NULL;
    CHECK_OK(qkv_bmm(c, bc.a, bc.b, &y));
    CHECK_OK(qkv_bmm(c, bc2.a, bc.b, &y2));
    if (y && y2) {
        CHECK(y->ndim == 3 && y->shape[0] == 2 && y->shape[1] == 3 && y->shape[2] == 5, "bmm: 3-D shape");
        CHECK(y2->ndim == 2 && y2->shape[0] == 2 && y2->shape[1] == 5, "bmm: 2-D shape");
        double worst = 0;
        for (int i = 0; i < 2; i++)
            for (int m = 0; m < 3; m++)
                for (int p = 0; p < 5; p++) {
                    double acc = 0, acc2 = 0;
                    for (int k = 0; k < 4; k++) {
                        acc += (double)bc.a->data[(i * 3 + m) * 4 + k] * bc.b->data[(i * 4 + k) * 5 + p];
                        acc2 += (double)bc2.a->data[i * 4 + k] * bc.b->data[(i * 4 + k) * 5 + p];
                    }
                    worst = fmax(worst, fabs(acc - y->data[(i * 3 + m) * 5 + p]));
                    if (m == 0) worst = fmax(worst, fabs(acc2 - y2->data[i * 5 + p]));
                }
        CHECK(worst < 1e-5, "bmm: values off by %g", worst);
    }
    qkv_ctx_free(c);
}

static void test_score_grad(qkv_arena *a, qkv_rng *r)
{
    for (int kind = 0; kind < 6; kind++) {
        int64_t Dq = 3, Dk = kind <= QKV_SCORE_COSINE ? 3 : 5, R = 2;
        qkv_params *p;
        CHECK_OK(qkv_params_new(&p));
        qkv_score sc;
        CHECK_OK(qkv_score_init(&sc, (qkv_score_kind)kind, Dq, Dk, R, p, "attn.", r));
        /* Larger weights than the init's so tanh and the products are not near-linear. */
        for (int i = 0; i < qkv_params_count(p); i++) {
            qkv_tensor *t = qkv_params_at(p, i);
            qkv_rng_fill_uniform(r, t->data, qkv_tensor_numel(t), -1.0f, 1.0f);
        }
        int64_t sq3[3] = {2, 3, Dq}, sq2[2] = {2, Dq}, sk[3] = {2, 4, Dk};
        qkv_tensor *q3 = h_input(a, r, 3, sq3, 1.0f), *q2 = h_input(a, r, 2, sq2, 1.0f);
        qkv_tensor *k = h_input(a, r, 3, sk, 1.0f);
        for (int form = 0; form < 2; form++) {
            score_case cs = {&sc, form ? q2 : q3, k};
            qkv_tensor *in[5] = {cs.q, cs.k};
            int n = 2;
            for (int i = 0; i < qkv_params_count(p); i++) in[n++] = qkv_params_at(p, i);
            double e = h_gradcheck(fwd_score, &cs, in, n, GC_EPS, GC_FLOOR);
            CHECK(e < GC_TOL, "score %s, query %s: gradcheck error %g (query, keys, %d params)",
                  kind_names[kind], form ? "(N,Dq)" : "(N,T,Dq)", e, n - 2);
        }
        qkv_params_free(p);
    }
}

/* ---- the cosine zero-norm convention and plain values ---------------------- */

static void test_score_values(qkv_arena *a, qkv_rng *r)
{
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_score sc;
    CHECK_OK(qkv_score_init(&sc, QKV_SCORE_COSINE, 3, 3, 0, NULL, NULL, NULL));
    /* query (1,2,3): row 0 zero; keys (1,3,3): key 1 zero. */
    int64_t sq[3] = {1, 2, 3}, sk[3] = {1, 3, 3};
    qkv_tensor *q = h_input(a, r, 3, sq, 1.0f), *k = h_input(a, r, 3, sk, 1.0f);
    for (int d = 0; d < 3; d++) q->data[d] = k->data[3 + d] = 0.0f;
    q->data[3] = 1; q->data[4] = 2; q->data[5] = 2;   /* |s| = 3 */
    k->data[0] = 2; k->data[1] = 0; k->data[2] = 0;   /* |h| = 2, cos = 1/3 */
    memset(q->grad, 0, 6 * sizeof(float));
    memset(k->grad, 0, 9 * sizeof(float));
    qkv_tensor *s = NULL;
    CHECK_OK(qkv_score_forward(c, &sc, q, k, &s));
    if (s) {
        CHECK(s->data[0] == 0 && s->data[1] == 0 && s->data[2] == 0 && s->data[4] == 0,
              "cosine: zero-norm scores %g %g %g %g", s->data[0], s->data[1], s->data[2], s->data[4]);
        CHECK(fabs(s->data[3] - 1.0 / 3) < 1e-6, "cosine: score %g, expected 1/3", s->data[3]);
        float ds[6] = {1, 1, 1, 1, 1, 1};
        CHECK_OK(qkv_backward(c, s, ds));
        CHECK(!has_nan(q->grad, 6) && !has_nan(k->grad, 9), "cosine: NaN gradient at zero norm");
        CHECK(q->grad[0] == 0 && q->grad[1] == 0 && q->grad[2] == 0 && k->grad[3] == 0 &&
                  k->grad[4] == 0 && k->grad[5] == 0,
              "cosine: zero-norm rows got a nonzero gradient");
    }

    /* Scaled dot is dot / sqrt(Dq); 2-D query gives (N,S); grad off records nothing. */
    qkv_score sd, ss;
    CHECK_OK(qkv_score_init(&sd, QKV_SCORE_DOT, 3, 3, 7, NULL, "", NULL));
    CHECK_OK(qkv_score_init(&ss, QKV_SCORE_SCALED_DOT, 3, 3, 0, NULL, "", NULL));
    CHECK(sd.rank == 0 && !sd.W_a && !sd.U_a && !sd.V_a && !sd.v_a, "dot: rank kept or parameters set");
    int64_t sq2[2] = {1, 3};
    qkv_tensor *q2 = h_input(a, r, 2, sq2, 1.0f), *s1 = NULL, *s2 = NULL;
    qkv_ctx_reset(c);
    qkv_ctx_set_grad(c, 0);
    CHECK_OK(qkv_score_forward(c, &sd, q2, k, &s1));
    CHECK_OK(qkv_score_forward(c, &ss, q2, k, &s2));
    qkv_ctx_set_grad(c, 1);
    if (s1 && s2) {
        CHECK(s1->ndim == 2 && s1->shape[0] == 1 && s1->shape[1] == 3, "dot: 2-D query shape");
        CHECK(!s1->requires_grad, "dot: recorded with grad off");
        double worst = 0;
        for (int j = 0; j < 3; j++) {
            double d = 0;
            for (int i = 0; i < 3; i++) d += (double)q2->data[i] * k->data[j * 3 + i];
            worst = fmax(worst, fabs(s1->data[j] - d));
            worst = fmax(worst, fabs(s2->data[j] - d / sqrt(3.0)));
        }
        CHECK(worst < 1e-6, "dot / scaled dot values off by %g", worst);
    }
    qkv_ctx_free(c);

    /* Parameters: names under the prefix, shapes, init bounds. */
    qkv_params *p;
    CHECK_OK(qkv_params_new(&p));
    qkv_score sa, sr, sg;
    CHECK_OK(qkv_score_init(&sa, QKV_SCORE_ADDITIVE, 4, 9, 16, p, "dec.attn.", r));
    CHECK_OK(qkv_score_init(&sr, QKV_SCORE_REDUCED_RANK, 4, 9, 2, p, "rr.", r));
    CHECK_OK(qkv_score_init(&sg, QKV_SCORE_GENERAL, 4, 9, 0, p, NULL, r));
    CHECK(qkv_params_count(p) == 6, "score params: %d, expected 6", qkv_params_count(p));
    struct { const char *name; qkv_tensor *t; int ndim; int64_t d0, d1; double bound; } want[] = {
        {"dec.attn.W_a", sa.W_a, 2, 16, 9, 1 / 3.0}, {"dec.attn.V_a", sa.V_a, 2, 16, 4, 0.5},
        {"dec.attn.v_a", sa.v_a, 1, 16, 0, 0.25},    {"rr.U_a", sr.U_a, 2, 2, 4, 0.5},
        {"rr.V_a", sr.V_a, 2, 2, 9, 1 / 3.0},        {"W_a", sg.W_a, 2, 4, 9, 1 / 3.0},
    };
    for (int i = 0; i < 6; i++) {
        qkv_tensor *t = qkv_params_find(p, want[i].name);
        CHECK(t && t == want[i].t, "score param %s missing or not in the struct", want[i].name);
        if (!t) continue;
        CHECK(t->ndim == want[i].ndim && t->shape[0] == want[i].d0 &&
                  (t->ndim == 1 || t->shape[1] == want[i].d1),
              "score param %s has the wrong shape", want[i].name);
        double mx = 0;
        for (int64_t j = 0; j < qkv_tensor_numel(t); j++) mx = fmax(mx, fabs(t->data[j]));
        CHECK(mx <= want[i].bound && mx > want[i].bound / 2,
              "score param %s: max |w| %g, bound %g", want[i].name, mx, want[i].bound);
    }
    CHECK(!sa.U_a && !sr.W_a && !sr.v_a && !sg.U_a && !sg.V_a && !sg.v_a, "unused params not NULL");
    qkv_params_free(p);
}

/* ---- bad inputs ------------------------------------------------------------ */

static void test_bad_inputs(qkv_arena *a, qkv_rng *r)
{
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_tensor *y = NULL, *x, *x1, *x4, *bt, *m, *m3, *mf;
    int64_t s3[3] = {2, 3, 4}, s1[1] = {4}, s4[4] = {1, 2, 3, 4}, s2[2] = {2, 4}, s23[2] = {2, 3};
    int64_t s5[3] = {2, 5, 3}, s32[3] = {3, 5, 4};
    static uint8_t mb[24];
    qkv_tensor_new(a, QKV_F32, 3, s3, &x);
    qkv_tensor_new(a, QKV_F32, 1, s1, &x1);
    qkv_tensor_new(a, QKV_F32, 4, s4, &x4);
    qkv_tensor_new(a, QKV_BOOL, 3, s3, &bt);
    qkv_tensor_wrap_bool(a, mb, 2, s2, &m);
    qkv_tensor_wrap_bool(a, mb, 2, s23, &m3);
    qkv_tensor_new(a, QKV_F32, 2, s2, &mf);

    /* softmax */
    CHECK_ERR(qkv_softmax(c, x, NULL, NULL), QKV_ERR_ARG, "softmax: y is NULL");
    CHECK_ERR(qkv_softmax(NULL, x, NULL, &y), QKV_ERR_ARG, "softmax: ctx is NULL");
    CHECK(y == NULL, "softmax: *y not cleared on failure");
    CHECK_ERR(qkv_softmax(c, NULL, NULL, &y), QKV_ERR_ARG, "softmax: x is NULL");
    CHECK_ERR(qkv_softmax(c, bt, NULL, &y), QKV_ERR_DTYPE, "softmax: x is not F32");
    CHECK_ERR(qkv_softmax(c, x, mf, &y), QKV_ERR_DTYPE, "key_padding_mask must be BOOL");
    CHECK_ERR(qkv_softmax(c, x, m3, &y), QKV_ERR_SHAPE,
              "softmax: key_padding_mask (2,3) does not match x (2,3,4), expected (2,4)");
    CHECK_OK(qkv_softmax(c, x4, NULL, &y)); /* any rank without a mask */
    CHECK_ERR(qkv_softmax(c, x4, m, &y), QKV_ERR_SHAPE, "softmax: x (1,2,3,4) has 4 dims");
    CHECK_ERR(qkv_softmax(c, x1, m, &y), QKV_ERR_SHAPE, "softmax: x (4,) has 1 dims");

    /* bmm */
    qkv_tensor *b3, *b2, *bb;
    int64_t sb[3] = {2, 4, 5}, sbx[3] = {3, 4, 5};
    qkv_tensor_new(a, QKV_F32, 3, sb, &b3);
    qkv_tensor_new(a, QKV_F32, 3, sbx, &bb);
    qkv_tensor_new(a, QKV_F32, 2, s2, &b2);
    CHECK_ERR(qkv_bmm(c, x, b3, NULL), QKV_ERR_ARG, "bmm: y is NULL");
    CHECK_ERR(qkv_bmm(NULL, x, b3, &y), QKV_ERR_ARG, "bmm: ctx is NULL");
    CHECK_ERR(qkv_bmm(c, NULL, b3, &y), QKV_ERR_ARG, "bmm: a is NULL");
    CHECK_ERR(qkv_bmm(c, x, NULL, &y), QKV_ERR_ARG, "bmm: b is NULL");
    CHECK_ERR(qkv_bmm(c, bt, b3, &y), QKV_ERR_DTYPE, "bmm: a and b must be F32");
    CHECK_ERR(qkv_bmm(c, x, b2, &y), QKV_ERR_SHAPE, "bmm: b (2,4) has 2 dims, expected 3");
    CHECK_ERR(qkv_bmm(c, x4, b3, &y), QKV_ERR_SHAPE, "bmm: a (1,2,3,4) has 4 dims");
    CHECK_ERR(qkv_bmm(c, x1, b3, &y), QKV_ERR_SHAPE, "bmm: a (4,) has 1 dims");
    CHECK_ERR(qkv_bmm(c, x, bb, &y), QKV_ERR_SHAPE, "bmm: batch sizes differ: a (2,3,4), b (3,4,5)");
    CHECK_ERR(qkv_bmm(c, b3, b3, &y), QKV_ERR_SHAPE,
              "bmm: a (2,4,5) last dim 5 does not match b (2,4,5) dim 1 4");
    CHECK_ERR(qkv_bmm(c, b2, x, &y), QKV_ERR_SHAPE, "bmm: a (2,4) last dim 4 does not match b (2,3,4) dim 1 3");

    /* score_init */
    qkv_params *p;
    CHECK_OK(qkv_params_new(&p));
    qkv_score sc;
    CHECK_ERR(qkv_score_init(NULL, QKV_SCORE_DOT, 4, 4, 0, p, "", r), QKV_ERR_ARG, "score_init: sc is NULL");
    CHECK_ERR(qkv_score_init(&sc, (qkv_score_kind)6, 4, 4, 0, p, "", r), QKV_ERR_ARG,
              "score_init: kind 6 is not a qkv_score_kind");
    CHECK_ERR(qkv_score_init(&sc, (qkv_score_kind)-1, 4, 4, 0, p, "", r), QKV_ERR_ARG,
              "score_init: kind -1");
    CHECK_ERR(qkv_score_init(&sc, QKV_SCORE_GENERAL, 0, 4, 0, p, "", r), QKV_ERR_ARG,
              "score_init: query_dim 0 and key_dim 4 must be positive");
    CHECK_ERR(qkv_score_init(&sc, QKV_SCORE_DOT, 4, -2, 0, p, "", r), QKV_ERR_ARG,
              "key_dim -2 must be positive");
    for (int k = QKV_SCORE_DOT; k <= QKV_SCORE_COSINE; k++) {
        char want[96];
        snprintf(want, sizeof want, "score_init: %s needs query_dim == key_dim, got 4 and 5", kind_names[k]);
        CHECK_ERR(qkv_score_init(&sc, (qkv_score_kind)k, 4, 5, 0, p, "", r), QKV_ERR_SHAPE, want);
    }
    CHECK_ERR(qkv_score_init(&sc, QKV_SCORE_REDUCED_RANK, 4, 5, 0, p, "", r), QKV_ERR_ARG,
              "score_init: reduced_rank needs rank > 0, got 0");
    CHECK_ERR(qkv_score_init(&sc, QKV_SCORE_ADDITIVE, 4, 5, -3, p, "", r), QKV_ERR_ARG,
              "score_init: additive needs rank > 0, got -3");
    CHECK_ERR(qkv_score_init(&sc, QKV_SCORE_GENERAL, 4, 5, 0, NULL, "", r), QKV_ERR_ARG,
              "score_init: params is NULL");
    CHECK_ERR(qkv_score_init(&sc, QKV_SCORE_ADDITIVE, 4, 5, 2, p, "", NULL), QKV_ERR_ARG,
              "score_init: rng is NULL");
    CHECK(qkv_params_count(p) == 0, "score_init added parameters before failing its checks");
    CHECK_OK(qkv_score_init(&sc, QKV_SCORE_GENERAL, 4, 5, 0, p, "x.", r));
    CHECK_ERR(qkv_score_init(&sc, QKV_SCORE_GENERAL, 4, 5, 0, p, "x.", r), QKV_ERR_ARG,
              "already exists");

    /* score_forward */
    qkv_score dot, gen, add, bad;
    CHECK_OK(qkv_score_init(&dot, QKV_SCORE_DOT, 4, 4, 0, NULL, NULL, NULL));
    CHECK_OK(qkv_score_init(&gen, QKV_SCORE_GENERAL, 4, 3, 0, p, "g.", r));
    CHECK_OK(qkv_score_init(&add, QKV_SCORE_ADDITIVE, 4, 3, 2, p, "a.", r));
    qkv_tensor *q = x, *k, *k3, *kq, *q2;          // q (2,3,4)
    qkv_tensor_new(a, QKV_F32, 3, s3, &k);         // (2,3,4)
    qkv_tensor_new(a, QKV_F32, 3, s5, &k3);        // (2,5,3)
    qkv_tensor_new(a, QKV_F32, 3, s32, &kq);       // (3,5,4)
    qkv_tensor_new(a, QKV_F32, 2, s2, &q2);        // (2,4)
    CHECK_ERR(qkv_score_forward(c, &dot, q, k, NULL), QKV_ERR_ARG, "score_forward: scores is NULL");
    CHECK_ERR(qkv_score_forward(NULL, &dot, q, k, &y), QKV_ERR_ARG, "score_forward: ctx is NULL");
    CHECK_ERR(qkv_score_forward(c, NULL, q, k, &y), QKV_ERR_ARG, "score_forward: sc is NULL");
    CHECK_ERR(qkv_score_forward(c, &dot, NULL, k, &y), QKV_ERR_ARG, "score_forward: query is NULL");
    CHECK_ERR(qkv_score_forward(c, &dot, q, NULL, &y), QKV_ERR_ARG, "score_forward: keys is NULL");
    memset(&bad, 0xA5, sizeof bad);
    CHECK_ERR(qkv_score_forward(c, &bad, q, k, &y), QKV_ERR_ARG, "not a qkv_score_kind (was qkv_score_init called?)");
    memset(&bad, 0, sizeof bad);
    CHECK_ERR(qkv_score_forward(c, &bad, q, k, &y), QKV_ERR_ARG,
              "score_forward: sc has query_dim 0, key_dim 0 (was qkv_score_init called?)");
    bad = dot;
    bad.key_dim = 3;
    CHECK_ERR(qkv_score_forward(c, &bad, q, k, &y), QKV_ERR_SHAPE, "dot needs query_dim == key_dim, sc has 4 and 3");
    bad = add;
    bad.rank = 0;
    CHECK_ERR(qkv_score_forward(c, &bad, q, k3, &y), QKV_ERR_ARG, "additive needs rank > 0, sc has 0");
    bad = gen;
    bad.W_a = NULL;
    CHECK_ERR(qkv_score_forward(c, &bad, q, k3, &y), QKV_ERR_ARG, "score_forward: sc->W_a is NULL, which general needs");
    bad = add;
    bad.W_a = gen.W_a;
    CHECK_ERR(qkv_score_forward(c, &bad, q, k3, &y), QKV_ERR_SHAPE, "score_forward: W_a (4,3), expected (2,3)");
    bad = add;
    bad.v_a = add.W_a;
    CHECK_ERR(qkv_score_forward(c, &bad, q, k3, &y), QKV_ERR_SHAPE, "score_forward: v_a (2,3), expected (2,)");
    CHECK_ERR(qkv_score_forward(c, &dot, bt, k, &y), QKV_ERR_DTYPE, "score_forward: query and keys must be F32");
    CHECK_ERR(qkv_score_forward(c, &dot, x4, k, &y), QKV_ERR_SHAPE,
              "score_forward: query (1,2,3,4) has 4 dims, expected (N,T,Dq) or (N,Dq)");
    CHECK_ERR(qkv_score_forward(c, &dot, x1, k, &y), QKV_ERR_SHAPE, "score_forward: query (4,) has 1 dims");
    CHECK_ERR(qkv_score_forward(c, &dot, q, q2, &y), QKV_ERR_SHAPE,
              "score_forward: keys (2,4) has 2 dims, expected (N,S,Dk)");
    CHECK_ERR(qkv_score_forward(c, &dot, q, k3, &y), QKV_ERR_SHAPE,
              "score_forward: keys (2,5,3) last dim 3 does not match key_dim 4");
    CHECK_ERR(qkv_score_forward(c, &gen, k3, k3, &y), QKV_ERR_SHAPE,
              "score_forward: query (2,5,3) last dim 3 does not match query_dim 4");
    CHECK_ERR(qkv_score_forward(c, &dot, q, kq, &y), QKV_ERR_SHAPE,
              "score_forward: batch sizes differ: query (2,3,4), keys (3,5,4)");
    CHECK(y == NULL, "score_forward: *scores not cleared on failure");
    /* The same shapes that fail above pass when they fit. */
    CHECK_OK(qkv_score_forward(c, &gen, q, k3, &y));
    CHECK_OK(qkv_score_forward(c, &add, q2, k3, &y));
    CHECK(y && y->ndim == 2 && y->shape[0] == 2 && y->shape[1] == 5, "additive: 2-D query shape");
    qkv_params_free(p);
    qkv_ctx_free(c);
}

/* ---- PyTorch parity ---------------------------------------------------------- */

typedef struct {
    char name[96];
    int ndim;
    int64_t shape[QKV_MAX_DIMS];
    int64_t n;
    float *data;
} orec;

static orec *g_rec;
static int g_nrec;

/* Reads tools/score_oracle.py's format: "NAME NDIM D0 D1 ...\n" + float32 LE. */
static int load_oracle(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char line[256];
    int cap = 0, ok = 1;
    while (fgets(line, sizeof line, f)) {
        orec o = {0};
        int used = 0;
        if (sscanf(line, "%95s %d%n", o.name, &o.ndim, &used) != 2 || o.ndim < 0 ||
            o.ndim > QKV_MAX_DIMS) {
            ok = 0;
            break;
        }
        o.n = 1;
        const char *pos = line + used;
        for (int i = 0; i < o.ndim; i++) {
            long long d;
            int u;
            if (sscanf(pos, "%lld%n", &d, &u) != 1 || d < 0) ok = 0;
            pos += u;
            o.shape[i] = d;
            o.n *= d;
        }
        if (!ok) break;
        o.data = malloc((size_t)(o.n ? o.n : 1) * sizeof(float));
        if (!o.data || fread(o.data, sizeof(float), (size_t)o.n, f) != (size_t)o.n) { /* x86: LE */
            free(o.data);
            ok = 0;
            break;
        }
        if (g_nrec == cap) {
            cap = cap ? 2 * cap : 64;
            g_rec = realloc(g_rec, (size_t)cap * sizeof *g_rec);
        }
        g_rec[g_nrec++] = o;
    }
    fclose(f);
    return ok && g_nrec > 0;
}

static orec *find_rec(const char *kind, const char *cs, const char *what)
{
    char name[96];
    snprintf(name, sizeof name, "%s.%s.%s", kind, cs, what);
    for (int i = 0; i < g_nrec; i++)
        if (strcmp(g_rec[i].name, name) == 0) return &g_rec[i];
    return NULL;
}

/* A persistent copy of a record with a gradient, or NULL when missing. */
static qkv_tensor *rec_input(qkv_arena *a, orec *o)
{
    qkv_tensor *t = NULL;
    if (!o || qkv_tensor_new(a, QKV_F32, o->ndim, o->shape, &t) != QKV_OK) return NULL;
    memcpy(t->data, o->data, (size_t)o->n * sizeof(float));
    t->requires_grad = 1;
    return t;
}

/* Errors are norm-wise (h_rel_err in harness.h): max |qkv - torch| over
 * max |torch| per tensor. SCORE_VERBOSE=1 prints the error of every compared
 * tensor; the oracle's seed comes from SCORE_ORACLE_SEED (see
 * tools/score_oracle.py). */
#define PAR_FWD_TOL 1e-5
#define PAR_GRAD_TOL 1e-4

/* Relative error of got against record what (INFINITY when missing or sized wrong). */
static double rec_err(const char *kind, const char *cs, const char *what, const float *got,
                      int64_t n)
{
    orec *o = find_rec(kind, cs, what);
    if (!o || !got || o->n != n) {
        fprintf(stderr, "  parity %s.%s.%s: missing (%p, %p) or size %lld != %lld\n", kind, cs,
                what, (void *)o, (const void *)got, o ? (long long)o->n : -1LL, (long long)n);
        return INFINITY;
    }
    double e = h_rel_err(got, o->data, n);
    if (getenv("SCORE_VERBOSE")) fprintf(stderr, "  %s.%s.%s %.3g\n", kind, cs, what, e);
    return isnan(e) ? INFINITY : e;
}

/* Runs one (kind, case); folds its worst errors into *fwd and *grad. */
static void parity_case(int kind, const char *cs, double *fwd, double *grad)
{
    const char *kn = kind_names[kind];
    qkv_ctx *c;
    qkv_params *p;
    if (qkv_ctx_new(&c) != QKV_OK || qkv_params_new(&p) != QKV_OK) return;
    qkv_arena *a = qkv_ctx_arena(c);
    qkv_tensor *q = rec_input(a, find_rec(kn, cs, "query"));
    qkv_tensor *k = rec_input(a, find_rec(kn, cs, "keys"));
    qkv_tensor *v = rec_input(a, find_rec(kn, cs, "values"));
    orec *mrec = find_rec(kn, cs, "mask"), *dout = find_rec(kn, cs, "dout");
    CHECK(q && k && v && dout, "parity %s.%s: oracle file lacks inputs", kn, cs);
    if (!q || !k || !v || !dout) goto done;
    static const char *const pnames[4] = {"W_a", "U_a", "V_a", "v_a"};
    int64_t rank = 0;
    for (int i = 0; i < 4; i++) {
        orec *o = find_rec(kn, cs, pnames[i]);
        if (o) rank = o->shape[0];
    }
    qkv_rng rng;
    qkv_rng_seed(&rng, 7);
    qkv_score sc;
    CHECK_OK(qkv_score_init(&sc, (qkv_score_kind)kind, q->shape[q->ndim - 1], k->shape[2], rank,
                            p, "", &rng));
    qkv_tensor *pt[4] = {sc.W_a, sc.U_a, sc.V_a, sc.v_a};
    for (int i = 0; i < 4; i++) {
        orec *o = find_rec(kn, cs, pnames[i]);
        CHECK(!o == !pt[i] && (!o || o->n == qkv_tensor_numel(pt[i])),
              "parity %s.%s: parameter %s differs from the oracle's", kn, cs, pnames[i]);
        if (o && pt[i] && o->n == qkv_tensor_numel(pt[i]))
            memcpy(pt[i]->data, o->data, (size_t)o->n * sizeof(float));
    }
    qkv_tensor *mask = NULL;
    uint8_t *mb = NULL;
    if (mrec) {
        mb = qkv_arena_alloc(a, (size_t)mrec->n);
        for (int64_t i = 0; i < mrec->n; i++) mb[i] = mrec->data[i] != 0;
        CHECK_OK(qkv_tensor_wrap_bool(a, mb, mrec->ndim, mrec->shape, &mask));
    }
    qkv_tensor *s = NULL, *w = NULL, *out = NULL;
    CHECK_OK(qkv_score_forward(c, &sc, q, k, &s));
    if (s) CHECK_OK(qkv_softmax(c, s, mask, &w));
    if (w) CHECK_OK(qkv_bmm(c, w, v, &out));
    if (!out) goto done;
    CHECK(out->ndim == q->ndim && qkv_tensor_numel(out) == dout->n, "parity %s.%s: out shape", kn, cs);
    if (qkv_tensor_numel(out) != dout->n) goto done;
    CHECK_OK(qkv_backward(c, out, dout->data));
    double f = 0, g = 0;
    f = fmax(f, rec_err(kn, cs, "scores", s->data, qkv_tensor_numel(s)));
    f = fmax(f, rec_err(kn, cs, "weights", w->data, qkv_tensor_numel(w)));
    f = fmax(f, rec_err(kn, cs, "out", out->data, qkv_tensor_numel(out)));
    g = fmax(g, rec_err(kn, cs, "dscores", s->grad, qkv_tensor_numel(s)));
    g = fmax(g, rec_err(kn, cs, "dquery", q->grad, qkv_tensor_numel(q)));
    g = fmax(g, rec_err(kn, cs, "dkeys", k->grad, qkv_tensor_numel(k)));
    g = fmax(g, rec_err(kn, cs, "dvalues", v->grad, qkv_tensor_numel(v)));
    for (int i = 0; i < 4; i++) {
        if (!pt[i]) continue;
        char dn[8];
        snprintf(dn, sizeof dn, "d%s", pnames[i]);
        g = fmax(g, rec_err(kn, cs, dn, pt[i]->grad, qkv_tensor_numel(pt[i])));
    }
    CHECK(f <= PAR_FWD_TOL, "parity %s.%s: forward max rel error %.3g > %g", kn, cs, f, PAR_FWD_TOL);
    CHECK(g <= PAR_GRAD_TOL, "parity %s.%s: gradient max rel error %.3g > %g", kn, cs, g, PAR_GRAD_TOL);
    *fwd = fmax(*fwd, f);
    *grad = fmax(*grad, g);
done:
    qkv_params_free(p);
    qkv_ctx_free(c);
}

static void test_parity(void)
{
    char dir[] = "/tmp/qkv_score_XXXXXX", out[64], cmd[160];
    CHECK(mkdtemp(dir) != NULL, "parity: mkdtemp failed");
    snprintf(out, sizeof out, "%s/score_oracle.bin", dir);
    FILE *probe = fopen("tools/score_oracle.py", "r");
    CHECK(probe != NULL, "parity: tools/score_oracle.py not found; run from the repo root");
    if (!probe) return;
    fclose(probe);
    /* Needs Debian's PyTorch (tools/setup.sh --test): without it this fails. */
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/score_oracle.py %s", out);
    int rc = system(cmd);
    CHECK(rc == 0, "parity: tools/score_oracle.py failed (status %d)", rc);
    CHECK(load_oracle(out), "parity: cannot read %s", out);
    if (!g_nrec) return;
    for (int kind = 0; kind < 6; kind++) {
        double f = 0, g = 0;
        parity_case(kind, "q3", &f, &g);
        parity_case(kind, "q2", &f, &g);
        printf("parity %-12s worst forward rel err %.3g, gradient rel err %.3g\n", kind_names[kind], f, g);
    }
    for (int i = 0; i < g_nrec; i++) free(g_rec[i].data);
    free(g_rec);
    remove(out);
    rmdir(dir);
}

int main(void)
{
    qkv_arena *a;
    if (qkv_arena_new(&a, (size_t)1 << 20) != QKV_OK) return 1;
    qkv_rng r;
    qkv_rng_seed(&r, 42);
    test_softmax_grad(a, &r);
    test_bmm_grad(a, &r);
    test_score_grad(a, &r);
    test_score_values(a, &r);
    test_bad_inputs(a, &r);
    test_parity();
    qkv_arena_free(a);
    return h_finish("test_score");
}
