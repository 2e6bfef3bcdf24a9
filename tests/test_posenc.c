/* test_posenc.c: the positional encodings of include/qkv/posenc.h:
 * finite-difference gradients of every op and module with inputs or
 * parameters, values by hand, RoPE's properties (norms kept, q.k a function
 * of the position difference, the two layouts a permutation apart), ALiBi's
 * equivalence with the reference's causal bias, bad input, and parity with
 * PyTorch through tools/posenc_oracle.py (run through /usr/bin/python3 from
 * the repo root; the test fails if it cannot run). GC_VERBOSE=1 prints every
 * gradient check's worst error. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <unistd.h>
#include "gradcheck.h"

#define GC_EPS 1e-2f
#define GC_FLOOR 1e-2
#define GC_TOL 5e-3

/* ---- gradient checks ------------------------------------------------------ */

typedef enum { OP_ADDPOS, OP_POSITIONS, OP_SCALE, OP_CATPOS, OP_ROPE, OP_MODULE } op_id;

typedef struct {
    op_id op;
    qkv_tensor *x, *pe;
    int64_t offset, T;
    int flag; /* batch_first or channels_first */
    float alpha;
    qkv_posidx kind;
    qkv_rope_opts rope;
    qkv_module *m;
} gc_case;

static qkv_status fwd_case(qkv_ctx *c, void *u, qkv_tensor **out)
{
    gc_case *k = u;
    switch (k->op) {
    case OP_ADDPOS: return qkv_add_positional(c, k->x, k->pe, k->offset, k->flag, out);
    case OP_POSITIONS: return qkv_positions(c, k->pe, k->offset, k->T, out);
    case OP_SCALE: return qkv_scale(c, k->x, k->alpha, out);
    case OP_CATPOS: return qkv_cat_position(c, k->x, k->kind, k->flag, out);
    case OP_ROPE: return qkv_rope(c, k->x, &k->rope, out);
    case OP_MODULE: return qkv_module_forward(c, k->m, k->x, out);
    }
    return QKV_ERR_ARG;
}

static void gradcheck(gc_case *k, qkv_tensor **in, int n, const char *what)
{
    double e = h_gradcheck(fwd_case, k, in, n, GC_EPS, GC_FLOOR);
    CHECK(e < GC_TOL, "%s: gradcheck error %g", what, e);
    if (getenv("GC_VERBOSE")) printf("gradcheck %-50s %.3g\n", what, e);
}

static void test_grad_add_positional(qkv_arena *a, qkv_rng *r)
{
    int64_t pe_shape[2] = {6, 4};
    qkv_tensor *pe = h_input(a, r, 2, pe_shape, 1.0f);
    int64_t sbf[3] = {2, 3, 4}, ssf[3] = {3, 2, 4}, s2[2] = {3, 4};
    gc_case k = {.op = OP_ADDPOS, .x = h_input(a, r, 3, sbf, 1.0f), .pe = pe, .offset = 2, .flag = 1};
    qkv_tensor *in[2] = {k.x, pe};
    gradcheck(&k, in, 2, "add_positional (N,T,d) batch_first, offset 2");
    k.x = in[0] = h_input(a, r, 3, ssf, 1.0f);
    k.flag = 0;
    gradcheck(&k, in, 2, "add_positional (T,N,d), offset 2");
    k.x = in[0] = h_input(a, r, 2, s2, 1.0f);
    k.offset = 3;
    gradcheck(&k, in, 2, "add_positional (T,d), offset 3");

    gc_case pk = {.op = OP_POSITIONS, .pe = pe, .offset = 1, .T = 4};
    gradcheck(&pk, &pe, 1, "positions offset 1, T 4");
    gc_case sk = {.op = OP_SCALE, .x = h_input(a, r, 3, sbf, 1.0f), .alpha = 2.5f};
    gradcheck(&sk, &sk.x, 1, "scale 2.5");
}

static void test_grad_cat_position(qkv_arena *a, qkv_rng *r)
{
    int64_t s3[3] = {2, 3, 4}, s2[2] = {3, 4};
    for (int cf = 0; cf < 2; cf++)
        for (int nd = 2; nd <= 3; nd++) {
            gc_case k = {.op = OP_CATPOS, .x = h_input(a, r, nd, nd == 3 ? s3 : s2, 1.0f),
                         .kind = cf ? QKV_POSIDX_RAW : QKV_POSIDX_UNIT, .flag = cf};
            char what[64];
            snprintf(what, sizeof what, "cat_position %d-D channels_first %d", nd, cf);
            gradcheck(&k, &k.x, 1, what);
        }
}

/* An I64 (N,T) positions tensor holding v. */
static qkv_tensor *positions_of(qkv_arena *a, int64_t N, int64_t T, const int64_t *v)
{
    qkv_tensor *p = NULL;
    CHECK_OK(qkv_tensor_new(a, QKV_I64, 2, (int64_t[]){N, T}, &p));
    if (p) memcpy(p->idx, v, (size_t)(N * T) * sizeof *v);
    return p;
}

static void test_grad_rope(qkv_arena *a, qkv_rng *r)
{
    int64_t s4[4] = {2, 2, 3, 8}, s3[3] = {2, 4, 6}, s2[2] = {5, 10};
    for (int layout = 0; layout < 2; layout++) {
        qkv_rope_opts o = qkv_rope_opts_default();
        o.layout = layout ? QKV_ROPE_HALF : QKV_ROPE_INTERLEAVED;
        gc_case k = {.op = OP_ROPE, .x = h_input(a, r, 4, s4, 1.0f), .rope = o};
        char what[80];
        snprintf(what, sizeof what, "rope %s (N,H,T,hd)", layout ? "half" : "interleaved");
        gradcheck(&k, &k.x, 1, what);
        k.rope.offset = 7;
        k.rope.base = 100.0f;
        k.x = h_input(a, r, 3, s3, 1.0f);
        snprintf(what, sizeof what, "rope %s (B,T,hd) offset 7 base 100", layout ? "half" : "interleaved");
        gradcheck(&k, &k.x, 1, what);
        k.rope.rot_dim = 4;
        k.x = h_input(a, r, 2, s2, 1.0f);
        snprintf(what, sizeof what, "rope %s (T,hd) rot_dim 4 of 10", layout ? "half" : "interleaved");
        gradcheck(&k, &k.x, 1, what);
        /* per-(row, step) positions: a table over 0..40 (dense), then one
         * row per entry (a position past N*T) */
        const int64_t dense[6] = {5, 0, 9, 2, 2, 40}, sparse[6] = {1000, 3, 77, 0, 1, 1};
        k.rope = o;
        k.x = h_input(a, r, 4, s4, 1.0f);
        k.rope.positions = positions_of(a, 2, 3, dense);
        snprintf(what, sizeof what, "rope %s (N,H,T,hd) positions (N,T)", layout ? "half" : "interleaved");
        gradcheck(&k, &k.x, 1, what);
        k.rope.positions = positions_of(a, 2, 3, sparse);
        snprintf(what, sizeof what, "rope %s positions up to 1000", layout ? "half" : "interleaved");
        gradcheck(&k, &k.x, 1, what);
    }
}

static void test_grad_modules(qkv_arena *a, qkv_rng *r)
{
    qkv_params *p;
    CHECK_OK(qkv_params_new(&p));
    qkv_nn_learned_pos lp;
    CHECK_OK(qkv_nn_learned_pos_init(&lp, 6, 4, 0, p, "pos.", r));
    lp.offset = 1;
    int64_t ssf[3] = {3, 2, 4}, sbf[3] = {2, 5, 4};
    gc_case k = {.op = OP_MODULE, .x = h_input(a, r, 3, ssf, 1.0f), .m = &lp.base};
    qkv_tensor *in[2] = {k.x, lp.weight};
    gradcheck(&k, in, 2, "nn_learned_pos (T,N,d) offset 1");

    qkv_nn_sinusoidal sp;
    CHECK_OK(qkv_nn_sinusoidal_init(&sp, 4, 0.25f, 16, 1));
    k.m = &sp.base;
    k.x = h_input(a, r, 3, sbf, 1.0f);
    gradcheck(&k, &k.x, 1, "nn_sinusoidal eval");
    h_training = 1; /* dropout on: the same masks in every forward of the check */
    gradcheck(&k, &k.x, 1, "nn_sinusoidal training (dropout 0.25)");
    h_training = 0;

    qkv_nn_token_embedding te;
    CHECK_OK(qkv_nn_token_embedding_init(&te, 7, 9, -1, 1, p, "tok.embedding.", r));
    static int64_t ids_data[6] = {1, 6, 0, 6, 3, 2};
    qkv_tensor *ids;
    CHECK_OK(qkv_tensor_wrap_i64(a, ids_data, 2, (int64_t[]){2, 3}, &ids));
    k.m = &te.base;
    k.x = ids;
    gradcheck(&k, &te.emb.weight, 1, "nn_token_embedding scaled");
    qkv_params_free(p);
}

/* ---- values ----------------------------------------------------------------- */

static void test_values(qkv_arena *a)
{
    /* the sinusoidal table against the channels-first fill of models.h */
    enum { T = 9, D = 6 };
    float pe[T * D], pe_ct[D * T], pe_off[3 * D];
    CHECK_OK(qkv_sinusoidal_fill(0, T, D, pe));
    CHECK_OK(qkv_pos_sinusoidal(T, D, pe_ct));
    int same = 1;
    for (int t = 0; t < T; t++)
        for (int k = 0; k < D; k++) same &= fabsf(pe[t * D + k] - pe_ct[k * T + t]) < 1e-7f;
    CHECK(same, "sinusoidal_fill is qkv_pos_sinusoidal transposed");
    CHECK(pe[0] == 0.0f && pe[1] == 1.0f && fabsf(pe[D] - sinf(1.0f)) < 1e-7f, "pe[0] = (0,1,..), pe[1,0] = sin 1");
    CHECK_OK(qkv_sinusoidal_fill(5, 3, D, pe_off));
    CHECK(!memcmp(pe_off, pe + 5 * D, sizeof pe_off), "offset 5 gives rows 5..7");

    /* (N,T,d) + pe through add_positional equals qkv_add's broadcast */
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_rng r;
    qkv_rng_seed(&r, 5);
    qkv_tensor *x = h_input(a, &r, 3, (int64_t[]){2, T, D}, 1.0f), *tpe, *y1, *y2;
    CHECK_OK(qkv_sinusoidal(c, 0, T, D, &tpe));
    CHECK_OK(qkv_add_positional(c, x, tpe, 0, 1, &y1));
    CHECK_OK(qkv_add(c, x, tpe, &y2));
    CHECK(y1 && y2 && !memcmp(y1->data, y2->data, sizeof(float) * 2 * T * D), "add_positional = qkv_add batch-first");

    /* the index channel */
    qkv_tensor *xc = h_input(a, &r, 3, (int64_t[]){2, 2, 4}, 1.0f), *yc; /* (N,C,T) */
    CHECK_OK(qkv_cat_position(c, xc, QKV_POSIDX_UNIT, 1, &yc));
    CHECK(yc && yc->shape[1] == 3 && yc->data[2 * 4 + 1] == 0.25f && yc->data[12 + 2 * 4 + 3] == 0.75f &&
              yc->data[12] == xc->data[8],
          "cat_position (N,C,T) appends t/T as channel C");
    qkv_tensor *yr;
    CHECK_OK(qkv_cat_position(c, xc, QKV_POSIDX_RAW, 0, &yr)); /* as (N,T,C) = (2,2,4) */
    CHECK(yr && yr->shape[2] == 5 && yr->data[4] == 0.0f && yr->data[9] == 1.0f && yr->data[14] == 0.0f,
          "cat_position (N,T,C) appends t");

    /* ALiBi slopes of 8 heads: 2^-1 .. 2^-8; of 1 head: 2^-8 */
    float s8[8], s1[1];
    CHECK_OK(qkv_alibi_slopes(8, s8));
    CHECK_OK(qkv_alibi_slopes(1, s1));
    same = 1;
    for (int h = 0; h < 8; h++) same &= s8[h] == ldexpf(1.0f, -(h + 1));
    CHECK(same && s1[0] == ldexpf(1.0f, -8), "alibi slopes of 8 heads are 1/2 .. 1/256, of 1 head 1/256");
    qkv_tensor *b;
    CHECK_OK(qkv_alibi_bias(c, 2, 2, 2, 3, QKV_ALIBI_SYMMETRIC, &b));
    /* head 0 slope 1/16 (H = 2: 2^-4, 2^-8); i' = i + 1 */
    CHECK(b && b->shape[0] == 4 && b->data[0] == -0.0625f && b->data[1] == 0.0f && b->data[2] == -0.0625f &&
              b->data[3] == -0.125f && b->data[5] == 0.0f && b->data[6 + 0] == -ldexpf(1.0f, -8) &&
              !memcmp(b->data, b->data + 12, 12 * sizeof(float)),
          "alibi symmetric bias (N=2,H=2,L=2,S=3)");
    qkv_ctx_free(c);
}

/* ---- RoPE's properties ------------------------------------------------------ */

/* y = rope(x) for one (T,hd) block with the given layout, offset. */
static qkv_tensor *rope_of(qkv_ctx *c, qkv_tensor *x, qkv_rope_layout layout, int64_t offset)
{
    qkv_rope_opts o = qkv_rope_opts_default();
    o.layout = layout;
    o.offset = offset;
    qkv_tensor *y = NULL;
    CHECK_OK(qkv_rope(c, x, &o, &y));
    return y;
}

static double dot(const float *a, const float *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

static void test_rope_properties(qkv_arena *a, qkv_rng *r)
{
    enum { HD = 16 };
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_ctx_set_grad(c, 0);
    qkv_tensor *x = h_input(a, r, 2, (int64_t[]){20, HD}, 1.0f); /* 20 positions */
    qkv_tensor *q = h_input(a, r, 2, (int64_t[]){1, HD}, 1.0f), *k = h_input(a, r, 2, (int64_t[]){1, HD}, 1.0f);
    for (int layout = 0; layout < 2; layout++) {
        qkv_tensor *y = rope_of(c, x, layout, 3);
        double worst = 0;
        for (int t = 0; y && t < 20; t++) { /* each pair's norm, hence the row's, is kept */
            double n0 = dot(x->data + t * HD, x->data + t * HD, HD), n1 = dot(y->data + t * HD, y->data + t * HD, HD);
            worst = fmax(worst, fabs(n1 - n0) / n0);
        }
        CHECK(worst < 1e-6, "rope layout %d keeps norms (worst %g)", layout, worst);
        /* q at position m, k at position n: q.k depends on m - n only */
        const int64_t pairs[4][2] = {{5, 2}, {103, 100}, {3, 0}, {100003, 100000}};
        double ref = 0;
        for (int i = 0; i < 4; i++) {
            qkv_tensor *rq = rope_of(c, q, layout, pairs[i][0]), *rk = rope_of(c, k, layout, pairs[i][1]);
            double d = rq && rk ? dot(rq->data, rk->data, HD) : NAN;
            if (i == 0) ref = d;
            CHECK(fabs(d - ref) < 2e-5 * (1 + fabs(ref)), "rope layout %d: q.k at (%lld,%lld) = %.7f, at (5,2) %.7f",
                  layout, (long long)pairs[i][0], (long long)pairs[i][1], d, ref);
        }
        qkv_tensor *r0q = rope_of(c, q, layout, 42), *r0k = rope_of(c, k, layout, 42);
        CHECK(r0q && r0k && fabs(dot(r0q->data, r0k->data, HD) - dot(q->data, k->data, HD)) < 1e-5,
              "rope layout %d: equal positions give the plain q.k", layout);
    }
    /* the half layout is the interleaved one on permuted dims: x[i] <-> p[2i], x[i+h] <-> p[2i+1] */
    qkv_tensor *xp;
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 2, (int64_t[]){20, HD}, &xp));
    for (int t = 0; t < 20; t++)
        for (int i = 0; i < HD / 2; i++) {
            xp->data[t * HD + 2 * i] = x->data[t * HD + i];
            xp->data[t * HD + 2 * i + 1] = x->data[t * HD + i + HD / 2];
        }
    qkv_tensor *yh = rope_of(c, x, QKV_ROPE_HALF, 0), *yi = rope_of(c, xp, QKV_ROPE_INTERLEAVED, 0);
    int same = yh && yi;
    for (int t = 0; same && t < 20; t++)
        for (int i = 0; i < HD / 2; i++)
            same &= yh->data[t * HD + i] == yi->data[t * HD + 2 * i] &&
                    yh->data[t * HD + i + HD / 2] == yi->data[t * HD + 2 * i + 1];
    CHECK(same, "rope: half layout = interleaved layout on permuted dims");
    /* positions (N,T) = each row alone at its offset: entry n of x (2,3,T,HD)
     * at positions 7.. and 100000.. (past N*T: the per-entry tables) or 0.. */
    for (int big = 0; big < 2; big++) {
        enum { T = 4 };
        qkv_tensor *x4 = h_input(a, r, 4, (int64_t[]){2, 3, T, HD}, 1.0f), *yp = NULL;
        int64_t start[2] = {7, big ? 100000 : 0}, pv[2 * T];
        for (int n = 0; n < 2; n++)
            for (int t = 0; t < T; t++) pv[n * T + t] = start[n] + t;
        qkv_rope_opts o = qkv_rope_opts_default();
        o.layout = QKV_ROPE_HALF;
        o.positions = positions_of(a, 2, T, pv);
        CHECK_OK(qkv_rope(c, x4, &o, &yp));
        int equal = yp != NULL;
        for (int n = 0; equal && n < 2; n++) {
            qkv_tensor *xn, *yn;
            CHECK_OK(qkv_tensor_wrap(a, x4->data + n * 3 * T * HD, 3, (int64_t[]){3, T, HD}, &xn));
            yn = rope_of(c, xn, QKV_ROPE_HALF, start[n]);
            equal = yn && !memcmp(yn->data, yp->data + n * 3 * T * HD, 3 * T * HD * sizeof(float));
        }
        CHECK(equal, "rope: positions (N,T) give each entry's rotation at its offset (%s)",
              big ? "per-entry tables" : "one table");
    }
    /* position 0 is the identity */
    qkv_tensor *y0 = rope_of(c, x, QKV_ROPE_INTERLEAVED, 0);
    CHECK(y0 && !memcmp(y0->data, x->data, HD * sizeof(float)), "rope at position 0 is the identity");
    qkv_ctx_free(c);
}

/* ALiBi's -m (i' - j) with a causal mask gives the same softmax as the
 * reference's m j (a constant per row), also for the last L rows of S. */
static void softmax_rows(const float *s, const float *bias, int64_t L, int64_t S, int64_t shift, double *p)
{
    for (int64_t i = 0; i < L; i++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i + shift; j++) mx = fmax(mx, (double)s[i * S + j] + bias[i * S + j]);
        for (int64_t j = 0; j < S; j++) {
            p[i * S + j] = j <= i + shift ? exp((double)s[i * S + j] + bias[i * S + j] - mx) : 0;
            sum += p[i * S + j];
        }
        for (int64_t j = 0; j < S; j++) p[i * S + j] /= sum;
    }
}

/* ALiBi's bias as qkv_sdpa's float attn_mask (N*H,L,S) with its causal
 * mask, against attention computed here in double. */
static void test_alibi_sdpa(qkv_arena *a, qkv_rng *r)
{
    enum { N = 2, H = 3, L = 5, D = 4 };
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    int64_t sh[4] = {N, H, L, D};
    qkv_tensor *q = h_input(a, r, 4, sh, 1.0f), *k = h_input(a, r, 4, sh, 1.0f), *v = h_input(a, r, 4, sh, 1.0f);
    qkv_tensor *bias = NULL, *out = NULL;
    CHECK_OK(qkv_alibi_bias(c, N, H, L, L, QKV_ALIBI_CAUSAL, &bias));
    qkv_sdpa_opts o = qkv_sdpa_opts_default();
    o.attn_mask = bias;
    o.causal = QKV_CAUSAL_TOP_LEFT;
    CHECK_OK(qkv_sdpa(c, q, k, v, &o, &out, NULL));
    float slopes[H];
    CHECK_OK(qkv_alibi_slopes(H, slopes));
    double worst = 0;
    for (int b = 0; out && b < N * H; b++) {
        const float *qb = q->data + b * L * D, *kb = k->data + b * L * D, *vb = v->data + b * L * D;
        for (int i = 0; i < L; i++) {
            double p[L], sum = 0;
            for (int j = 0; j <= i; j++) {
                p[j] = exp(dot(qb + i * D, kb + j * D, D) / sqrt((double)D) - (double)slopes[b % H] * (i - j));
                sum += p[j];
            }
            for (int d = 0; d < D; d++) {
                double o_ = 0;
                for (int j = 0; j <= i; j++) o_ += p[j] / sum * vb[j * D + d];
                worst = fmax(worst, fabs(o_ - out->data[(b * L + i) * D + d]));
            }
        }
    }
    CHECK(out && worst < 1e-5, "sdpa with the ALiBi bias as attn_mask: worst difference %g", worst);
    qkv_ctx_free(c);
}

/* The materialised bias as attn_mask against qkv_sdpa's on-the-fly
 * alibi_slopes: symmetric without a causal mask (L == S), and causal at the
 * end of a cache (L < S, bottom-right). */
static void test_alibi_vs_sdpa_slopes(qkv_arena *a, qkv_rng *r)
{
    enum { N = 2, H = 5, D = 4 };
    const struct { int64_t L, S; qkv_alibi_kind kind; qkv_causal causal; } cases[2] = {
        {6, 6, QKV_ALIBI_SYMMETRIC, QKV_CAUSAL_NONE}, {3, 7, QKV_ALIBI_CAUSAL, QKV_CAUSAL_BOTTOM_RIGHT}};
    float slopes[H];
    CHECK_OK(qkv_alibi_slopes(H, slopes));
    for (int k = 0; k < 2; k++) {
        qkv_ctx *c;
        CHECK_OK(qkv_ctx_new(&c));
        qkv_ctx_set_grad(c, 0);
        int64_t L = cases[k].L, S = cases[k].S;
        qkv_tensor *q = h_input(a, r, 4, (int64_t[]){N, H, L, D}, 2.0f);
        qkv_tensor *kk = h_input(a, r, 4, (int64_t[]){N, H, S, D}, 2.0f), *v = h_input(a, r, 4, (int64_t[]){N, H, S, D}, 1.0f);
        qkv_tensor *bias = NULL, *o1 = NULL, *o2 = NULL;
        CHECK_OK(qkv_alibi_bias(c, N, H, L, S, cases[k].kind, &bias));
        qkv_sdpa_opts o = qkv_sdpa_opts_default();
        o.causal = cases[k].causal;
        o.attn_mask = bias;
        CHECK_OK(qkv_sdpa(c, q, kk, v, &o, &o1, NULL));
        o.attn_mask = NULL;
        o.alibi_slopes = slopes;
        CHECK_OK(qkv_sdpa(c, q, kk, v, &o, &o2, NULL));
        double e = o1 && o2 ? h_rel_err(o1->data, o2->data, qkv_tensor_numel(o1)) : INFINITY;
        CHECK(e < 1e-5, "alibi bias (case %d) vs sdpa's alibi_slopes: %g", k, e);
        qkv_ctx_free(c);
    }
}

/* ---- bad input -------------------------------------------------------------- */

static void test_bad_input(qkv_arena *a, qkv_rng *r)
{
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_tensor *y = (qkv_tensor *)1, *x3 = h_input(a, r, 3, (int64_t[]){2, 3, 4}, 1.0f);
    qkv_tensor *pe = h_input(a, r, 2, (int64_t[]){5, 4}, 1.0f), *x4 = h_input(a, r, 4, (int64_t[]){1, 2, 3, 6}, 1.0f);
    qkv_tensor *mask;
    CHECK_OK(qkv_tensor_new(a, QKV_BOOL, 2, (int64_t[]){3, 4}, &mask));
    float buf[64];
    CHECK_ERR(qkv_sinusoidal_fill(0, 4, 5, buf), QKV_ERR_ARG, "sinusoidal: d 5 must be even");
    CHECK_ERR(qkv_sinusoidal_fill(-1, 4, 4, buf), QKV_ERR_ARG, "offset -1");
    CHECK_ERR(qkv_sinusoidal_fill(0, 4, 4, NULL), QKV_ERR_ARG, "sinusoidal: pe is NULL");
    CHECK_ERR(qkv_sinusoidal(c, 0, 4, 0, &y), QKV_ERR_ARG, "d 0");
    CHECK(y == NULL, "a failed op sets *y to NULL");
    CHECK_ERR(qkv_add_positional(c, x3, pe, 3, 1, &y), QKV_ERR_SHAPE, "positions [3,6) of x (2,3,4) are outside pe (5,4)");
    CHECK_ERR(qkv_add_positional(c, x3, pe, 4, 0, &y), QKV_ERR_SHAPE, "positions [4,6) of x (2,3,4)"); /* (T,N,d): T 2 */
    CHECK_ERR(qkv_add_positional(c, x4, pe, 0, 1, &y), QKV_ERR_SHAPE, "add_positional: x (1,2,3,6) has 4 dims, expected (N,T,d)");
    CHECK_ERR(qkv_add_positional(c, x3, x3, 0, 1, &y), QKV_ERR_SHAPE, "add_positional: pe (2,3,4), expected (P,4)");
    CHECK_ERR(qkv_add_positional(c, mask, pe, 0, 1, &y), QKV_ERR_DTYPE, "add_positional: x is BOOL, expected F32");
    CHECK_ERR(qkv_add_positional(c, x3, NULL, 0, 1, &y), QKV_ERR_ARG, "add_positional: pe is NULL");
    CHECK_ERR(qkv_add_positional(NULL, x3, pe, 0, 1, &y), QKV_ERR_ARG, "add_positional: ctx is NULL");
    CHECK_ERR(qkv_positions(c, pe, 2, 4, &y), QKV_ERR_SHAPE, "positions: 4 rows from row 2 (offset 2, T 4) are outside weight (5,4)");
    /* offset + T near INT64_MAX: the message does not overflow (UBSan flagged it). */
    CHECK_ERR(qkv_positions(c, pe, INT64_MAX, 2, &y), QKV_ERR_SHAPE, "2 rows from row 9223372036854775807");
    CHECK_ERR(qkv_positions(c, x3, 0, 1, &y), QKV_ERR_SHAPE, "positions: weight (2,3,4) has 3 dims");
    CHECK_ERR(qkv_scale(c, x3, NAN, &y), QKV_ERR_ARG, "scale: alpha nan is not finite");
    CHECK_ERR(qkv_scale(c, NULL, 1.0f, &y), QKV_ERR_ARG, "scale: x is NULL");
    CHECK_ERR(qkv_cat_position(c, x4, QKV_POSIDX_UNIT, 0, &y), QKV_ERR_SHAPE, "cat_position: x (1,2,3,6) has 4 dims, expected (N,T,C) or (T,C)");
    CHECK_ERR(qkv_cat_position(c, x3, (qkv_posidx)7, 0, &y), QKV_ERR_ARG, "cat_position: kind 7");

    qkv_rope_opts o = qkv_rope_opts_default();
    qkv_tensor *odd = h_input(a, r, 2, (int64_t[]){3, 5}, 1.0f), *x1 = h_input(a, r, 1, (int64_t[]){4}, 1.0f);
    CHECK_ERR(qkv_rope(c, odd, &o, &y), QKV_ERR_SHAPE, "rope: rotary dims 5 (rot_dim 0) of x (3,5) must be even");
    o.rot_dim = 8;
    CHECK_ERR(qkv_rope(c, x4, &o, &y), QKV_ERR_SHAPE, "must be even and at most head_dim 6");
    o = qkv_rope_opts_default();
    CHECK_ERR(qkv_rope(c, x1, &o, &y), QKV_ERR_SHAPE, "rope: x (4,) has 1 dims");
    o.base = 0.0f;
    CHECK_ERR(qkv_rope(c, x4, &o, &y), QKV_ERR_ARG, "rope: base 0 must be positive");
    o = qkv_rope_opts_default();
    o.offset = -2;
    CHECK_ERR(qkv_rope(c, x4, &o, &y), QKV_ERR_ARG, "rope: offset -2 must be >= 0");
    o = qkv_rope_opts_default();
    o.layout = (qkv_rope_layout)3;
    CHECK_ERR(qkv_rope(c, x4, &o, &y), QKV_ERR_ARG, "rope: layout 3");
    o = qkv_rope_opts_default(); /* positions for x4 (1,2,3,6) are (1,3) */
    o.positions = positions_of(a, 1, 3, (int64_t[]){0, -1, 2});
    CHECK_ERR(qkv_rope(c, x4, &o, &y), QKV_ERR_ARG, "rope: positions[0,1] = -1 is outside [0, 2^53]");
    o.positions = positions_of(a, 1, 3, (int64_t[]){0, 1, 2});
    o.offset = 4;
    CHECK_ERR(qkv_rope(c, x4, &o, &y), QKV_ERR_ARG, "rope: offset 4 with positions: give one or the other");
    o.offset = 0;
    o.positions = positions_of(a, 2, 3, (int64_t[]){0, 1, 2, 0, 1, 2});
    CHECK_ERR(qkv_rope(c, x4, &o, &y), QKV_ERR_SHAPE, "rope: positions (2,3), expected (N,T) = (1,3) for x (1,2,3,6)");
    o.positions = x3;
    CHECK_ERR(qkv_rope(c, x4, &o, &y), QKV_ERR_DTYPE, "rope: positions must be I64");

    CHECK_ERR(qkv_alibi_slopes(0, buf), QKV_ERR_ARG, "alibi_slopes: num_heads 0 must be positive");
    CHECK_ERR(qkv_alibi_slopes(4, NULL), QKV_ERR_ARG, "alibi_slopes: slopes is NULL");
    CHECK_ERR(qkv_alibi_bias_fill(1, 2, 0, 3, QKV_ALIBI_CAUSAL, buf), QKV_ERR_ARG, "alibi_bias: N 1, H 2, L 0 and S 3 must be positive");
    /* Sizes whose product does not fit: refused before anything is written
     * (the fill wrote out of bounds once, the product never checked). */
    CHECK_ERR(qkv_alibi_bias_fill(1 << 20, 1 << 20, 1 << 20, 1 << 20, QKV_ALIBI_CAUSAL, buf), QKV_ERR_ARG,
              "do not fit in memory");
    CHECK_ERR(qkv_alibi_bias_fill(1, 1, 1LL << 32, 1LL << 32, QKV_ALIBI_SYMMETRIC, buf), QKV_ERR_ARG,
              "L 4294967296 x S 4294967296 floats do not fit");
    CHECK_ERR(qkv_alibi_bias(c, 1, 2, 2, 3, (qkv_alibi_kind)9, &y), QKV_ERR_ARG, "alibi_bias: kind 9");

    qkv_params *p;
    CHECK_OK(qkv_params_new(&p));
    qkv_nn_sinusoidal sm;
    CHECK_ERR(qkv_nn_sinusoidal_init(&sm, 5, 0.1f, 10, 0), QKV_ERR_ARG, "nn_sinusoidal_init: d_model 5 must be even");
    CHECK_ERR(qkv_nn_sinusoidal_init(&sm, 4, 1.5f, 10, 0), QKV_ERR_ARG, "dropout 1.5 must be in [0,1]");
    CHECK_OK(qkv_nn_sinusoidal_init(&sm, 4, 0.1f, 2, 1));
    CHECK_ERR(qkv_module_forward(c, &sm.base, x3, &y), QKV_ERR_SHAPE, "nn_sinusoidal: positions [0,3) of x (2,3,4) exceed max_len 2");
    CHECK_OK(qkv_nn_sinusoidal_init(&sm, 6, 0.1f, 20, 0));
    CHECK_ERR(qkv_module_forward(c, &sm.base, x3, &y), QKV_ERR_SHAPE, "nn_sinusoidal: x (2,3,4), expected d_model 6");
    qkv_nn_learned_pos lp;
    CHECK_ERR(qkv_nn_learned_pos_init(&lp, 0, 4, 0, p, "", r), QKV_ERR_ARG, "nn_learned_pos_init: max_len 0");
    CHECK(qkv_params_count(p) == 0, "failed inits add no parameter");
    qkv_nn_token_embedding te;
    CHECK_ERR(qkv_nn_token_embedding_init(&te, 5, 4, 7, 1, p, "", r), QKV_ERR_ARG, "padding_idx 7 out of range");
    qkv_params_free(p);
    qkv_ctx_free(c);
}

/* ---- modules: names and values ------------------------------------------------ */

static void test_modules(qkv_arena *a, qkv_rng *r)
{
    qkv_params *p;
    CHECK_OK(qkv_params_new(&p));
    qkv_nn_learned_pos lp;
    qkv_nn_token_embedding te;
    CHECK_OK(qkv_nn_learned_pos_init(&lp, 10, 4, 1, p, "pos_emb.", r));
    CHECK_OK(qkv_nn_token_embedding_init(&te, 7, 16, 0, 1, p, "tok.embedding.", r));
    CHECK(qkv_params_find(p, "pos_emb.weight") == lp.weight && qkv_params_find(p, "tok.embedding.weight") == te.emb.weight,
          "parameter names");
    CHECK(!strcmp(lp.base.type, "LearnedPositionalEmbedding") && !strcmp(te.base.type, "TokenEmbedding") && te.scale == 4.0f,
          "module types and sqrt(16) = 4");
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    static int64_t ids_data[3] = {0, 3, 6};
    qkv_tensor *ids, *y, *pos;
    CHECK_OK(qkv_tensor_wrap_i64(a, ids_data, 1, (int64_t[]){3}, &ids));
    CHECK_OK(qkv_module_forward(c, &te.base, ids, &y));
    CHECK(y && y->data[0] == 0.0f && y->data[16 + 5] == 4.0f * te.emb.weight->data[3 * 16 + 5],
          "token embedding = weight[id] * 4, padding row 0");
    lp.offset = 4;
    qkv_tensor *x = h_input(a, r, 3, (int64_t[]){2, 3, 4}, 1.0f);
    CHECK_OK(qkv_module_forward(c, &lp.base, x, &y));
    CHECK_OK(qkv_positions(c, lp.weight, 4, 3, &pos));
    CHECK(y && pos && y->data[12 + 4 + 2] == x->data[12 + 4 + 2] + lp.weight->data[5 * 4 + 2] &&
              pos->data[0] == lp.weight->data[16],
          "learned positions at offset 4");
    qkv_params_free(p);
    qkv_ctx_free(c);
}

/* ---- parity with PyTorch ------------------------------------------------------ */

/* Tensor name of st as F32 in a (I64 when as_ids), or NULL. */
static qkv_tensor *load(qkv_safetensors *st, qkv_arena *a, const char *name, int as_ids)
{
    int ndim;
    int64_t shape[8];
    if (qkv_safetensors_info(st, name, NULL, &ndim, shape, NULL, NULL) != QKV_OK || ndim > QKV_MAX_DIMS) {
        CHECK(0, "oracle file lacks %s", name);
        return NULL;
    }
    qkv_tensor *t = NULL;
    if (qkv_tensor_new(a, as_ids ? QKV_I64 : QKV_F32, ndim, shape, &t) != QKV_OK) return NULL;
    CHECK_OK(qkv_safetensors_read_tensor(st, name, t)); /* ids: an integer dtype */
    return t;
}

static qkv_safetensors *open_case(const char *dir, const char *file)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    qkv_safetensors *st = NULL;
    CHECK_OK(qkv_safetensors_open(path, &st));
    return st;
}

/* Max |a - b|, and max |b|. */
static double max_abs_diff(const float *x, const float *ref, int64_t n)
{
    double d = 0;
    for (int64_t i = 0; i < n; i++) d = fmax(d, fabs((double)x[i] - ref[i]));
    return d;
}

static void parity_sinusoidal(const char *dir, qkv_arena *a)
{
    qkv_safetensors *st = open_case(dir, "sinusoidal.safetensors");
    if (!st) return;
    qkv_tensor *x = load(st, a, "x", 0), *want = load(st, a, "y", 0), *pe = load(st, a, "pe", 0);
    qkv_tensor *exact = load(st, a, "pe_exact", 0), *big = load(st, a, "pe_big", 0), *bigx = load(st, a, "pe_big_exact", 0);
    if (x && want && pe && exact && big && bigx) {
        qkv_ctx *c;
        CHECK_OK(qkv_ctx_new(&c));
        qkv_nn_sinusoidal m;
        CHECK_OK(qkv_nn_sinusoidal_init(&m, 16, 0.1f, 64, 0)); /* the tutorial's (T,N,d), eval */
        qkv_tensor *y = NULL, *tab = NULL, *tbig = NULL;
        CHECK_OK(qkv_module_forward(c, &m.base, x, &y));
        CHECK_OK(qkv_sinusoidal(c, 0, 64, 16, &tab));
        CHECK_OK(qkv_sinusoidal(c, 0, 2048, 64, &tbig));
        if (y && tab && tbig) {
            double ey = max_abs_diff(y->data, want->data, qkv_tensor_numel(y));
            double et = max_abs_diff(tab->data, pe->data, 64 * 16), ex = max_abs_diff(tab->data, exact->data, 64 * 16);
            double bt = max_abs_diff(tbig->data, big->data, 2048 * 64), bx = max_abs_diff(tbig->data, bigx->data, 2048 * 64);
            CHECK(ey < 5e-6, "sinusoidal: PositionalEncoding forward differs by %g", ey);
            CHECK(et < 5e-6 && ex < 1e-7, "sinusoidal (64,16): %g from the tutorial's float32 table, %g from float64", et, ex);
            /* the tutorial's float32 angles drift by ~t * 6e-8 at t up to 2047 */
            CHECK(bt < 2e-4 && bx < 1e-7, "sinusoidal (2048,64): %g from the tutorial's table, %g from float64", bt, bx);
            printf("parity sinusoidal: forward %.3g; table vs tutorial %.3g (max_len 64), %.3g (max_len 2048); "
                   "vs float64 %.3g, %.3g\n", ey, et, bt, ex, bx);
        }
        qkv_ctx_free(c);
    }
    qkv_safetensors_close(st);
}

static void parity_rope(const char *dir, qkv_arena *a)
{
    char path[512];
    snprintf(path, sizeof path, "%s/rope.count", dir);
    FILE *f = fopen(path, "r");
    int n = 0;
    if (f) {
        if (fscanf(f, "%d", &n) != 1) n = 0;
        fclose(f);
    }
    CHECK(n >= 8, "oracle wrote %d RoPE cases", n);
    double worst_y = 0, worst_g = 0;
    int n_pos = 0;
    for (int k = 0; k < n; k++) {
        char file[64];
        snprintf(file, sizeof file, "rope_%d.safetensors", k);
        qkv_safetensors *st = open_case(dir, file);
        if (!st) continue;
        qkv_tensor *x = load(st, a, "x", 0), *want = load(st, a, "y", 0), *dout = load(st, a, "dout", 0);
        qkv_tensor *gx = load(st, a, "grad.x", 0);
        const char *layout = qkv_safetensors_meta(st, "layout"), *base = qkv_safetensors_meta(st, "base");
        const char *off = qkv_safetensors_meta(st, "offset"), *rot = qkv_safetensors_meta(st, "rot_dim");
        CHECK(layout && base && off && rot, "%s: metadata", file);
        if (x && want && dout && gx && layout && base && off && rot) {
            qkv_rope_opts o = {!strcmp(layout, "half") ? QKV_ROPE_HALF : QKV_ROPE_INTERLEAVED,
                               strtof(base, NULL), atoll(off), atoll(rot), NULL};
            if (qkv_safetensors_meta(st, "positions")) { /* per-(row, step) positions */
                o.positions = load(st, a, "positions", 1);
                CHECK(o.positions != NULL, "%s: no positions tensor", file);
                n_pos++;
            }
            x->requires_grad = 1;
            memset(qkv_tensor_grad(a, x), 0, sizeof(float) * (size_t)qkv_tensor_numel(x));
            qkv_ctx *c;
            CHECK_OK(qkv_ctx_new(&c));
            qkv_tensor *y = NULL;
            CHECK_OK(qkv_rope(c, x, &o, &y));
            if (y) {
                double ey = h_rel_err(y->data, want->data, qkv_tensor_numel(y));
                CHECK_OK(qkv_backward(c, y, dout->data));
                double eg = h_rel_err(x->grad, gx->data, qkv_tensor_numel(x));
                CHECK(ey < 1e-6 && eg < 1e-6, "%s (%s offset %s rot_dim %s): forward %g, gradient %g", file,
                      layout, off, rot, ey, eg);
                worst_y = fmax(worst_y, ey);
                worst_g = fmax(worst_g, eg);
            }
            qkv_ctx_free(c);
        }
        qkv_safetensors_close(st);
    }
    CHECK(n_pos >= 3, "oracle wrote %d RoPE cases with positions (N,T)", n_pos);
    printf("parity rope: %d cases, %d with positions (N,T) (interleaved = RoFormer, half = HF rotate_half): "
           "worst forward %.3g, gradient %.3g\n", n, n_pos, worst_y, worst_g);
}

static void parity_alibi(const char *dir, qkv_arena *a)
{
    qkv_safetensors *st = open_case(dir, "alibi.safetensors");
    if (!st) return;
    const char *heads = qkv_safetensors_meta(st, "heads");
    CHECK(heads != NULL, "alibi.safetensors: no heads");
    int checked = 0;
    double worst = 0;
    for (const char *s = heads; s && *s;) {
        char *end;
        long h = strtol(s, &end, 10);
        if (end == s) break;
        char name[32];
        snprintf(name, sizeof name, "slopes.%ld", h);
        qkv_tensor *want = load(st, a, name, 0);
        float got[128];
        if (want && h <= 128) {
            CHECK_OK(qkv_alibi_slopes(h, got));
            double e = h_rel_err(got, want->data, h);
            worst = fmax(worst, e);
            CHECK(e == 0, "alibi slopes of %ld heads differ from get_slopes (%g)", h, e);
            checked++;
        }
        s = *end == ',' ? end + 1 : end;
    }
    CHECK(checked >= 40, "alibi: checked %d head counts", checked);
    /* the bias: softmax(scores + ours, causal) = the reference's probabilities */
    enum { H = 6, S = 7, L = 3 };
    qkv_tensor *scores = load(st, a, "scores", 0), *probs = load(st, a, "probs", 0);
    float bias[H * S * S], tail[H * L * S];
    double p[S * S], worst_p = 0;
    CHECK_OK(qkv_alibi_bias_fill(1, H, S, S, QKV_ALIBI_CAUSAL, bias));
    CHECK_OK(qkv_alibi_bias_fill(1, H, L, S, QKV_ALIBI_CAUSAL, tail)); /* the last L queries, as with a cache */
    for (int h = 0; scores && probs && h < H; h++) {
        const float *sc = scores->data + h * S * S, *pr = probs->data + h * S * S;
        softmax_rows(sc, bias + h * S * S, S, S, 0, p);
        for (int i = 0; i < S * S; i++) worst_p = fmax(worst_p, fabs(p[i] - pr[i]));
        softmax_rows(sc + (S - L) * S, tail + h * L * S, L, S, S - L, p);
        for (int i = 0; i < L * S; i++) worst_p = fmax(worst_p, fabs(p[i] - pr[(S - L) * S + i]));
    }
    CHECK(worst_p < 1e-6, "alibi: causal softmax differs from the reference's by %g", worst_p);
    printf("parity alibi: slopes of %d head counts, worst %.3g; causal softmax (with and without a cache) %.3g\n",
           checked, worst, worst_p);
    qkv_safetensors_close(st);
}

static void parity_tokemb(const char *dir, qkv_arena *a, qkv_rng *r)
{
    qkv_safetensors *st = open_case(dir, "tokemb.safetensors");
    if (!st) return;
    qkv_tensor *w = load(st, a, "weight", 0), *ids = load(st, a, "ids", 1), *want = load(st, a, "y", 0);
    qkv_tensor *dout = load(st, a, "dout", 0), *gw = load(st, a, "grad.weight", 0);
    if (w && ids && want && dout && gw) {
        qkv_params *p;
        CHECK_OK(qkv_params_new(&p));
        qkv_nn_token_embedding te;
        CHECK_OK(qkv_nn_token_embedding_init(&te, w->shape[0], w->shape[1], -1, 1, p, "embedding.", r));
        memcpy(te.emb.weight->data, w->data, sizeof(float) * (size_t)qkv_tensor_numel(w));
        qkv_ctx *c;
        CHECK_OK(qkv_ctx_new(&c));
        qkv_tensor *y = NULL;
        CHECK_OK(qkv_module_forward(c, &te.base, ids, &y));
        if (y) {
            double ey = h_rel_err(y->data, want->data, qkv_tensor_numel(y));
            CHECK_OK(qkv_backward(c, y, dout->data));
            double eg = h_rel_err(te.emb.weight->grad, gw->data, qkv_tensor_numel(gw));
            CHECK(ey < 1e-6 && eg < 1e-6, "TokenEmbedding: forward %g, gradient %g", ey, eg);
            printf("parity TokenEmbedding (* sqrt(d)): forward %.3g, gradient %.3g\n", ey, eg);
        }
        qkv_ctx_free(c);
        qkv_params_free(p);
    }
    qkv_safetensors_close(st);
}

static void test_parity(qkv_arena *a, qkv_rng *r)
{
    char dir[] = "/tmp/qkv_posenc_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp failed");
        return;
    }
    char cmd[512];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/posenc_oracle.py --out %s --seed 1", dir);
    int rc = system(cmd);
    CHECK(rc == 0, "the PyTorch oracle failed (exit %d): %s (run the test from the repo root)", rc, cmd);
    if (rc == 0) {
        parity_sinusoidal(dir, a);
        parity_rope(dir, a);
        parity_alibi(dir, a);
        parity_tokemb(dir, a, r);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

int main(void)
{
    qkv_rng r;
    qkv_rng_seed(&r, 42);
    qkv_arena *a;
    if (qkv_arena_new(&a, 0) != QKV_OK) return 1;
    test_grad_add_positional(a, &r);
    test_grad_cat_position(a, &r);
    test_grad_rope(a, &r);
    test_grad_modules(a, &r);
    test_values(a);
    test_rope_properties(a, &r);
    test_alibi_sdpa(a, &r);
    test_alibi_vs_sdpa_slopes(a, &r);
    test_modules(a, &r);
    test_bad_input(a, &r);
    test_parity(a, &r);
    qkv_arena_free(a);
    return h_finish("test_posenc");
}
