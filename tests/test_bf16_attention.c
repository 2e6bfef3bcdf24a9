/* test_bf16_attention.c: the fused attention kernels with bf16 operands
 * (the BF16 precision mode, src/kernels/attention_bf16.h), forward and every
 * gradient, against the FP32 reference kernel run on the same inputs
 * rounded to bf16, on every mask kind (local windows and ALiBi included),
 * dropout, a fully masked row, odd
 * lengths and head dims 32/64/80; each bf16 build this CPU runs. And the
 * FP32 mode unchanged around it.
 *
 * The bound. bf16 keeps 8 significant bits: rounding to nearest changes a
 * value by at most 2^-9 of itself. The reference gets q, k, v and dout
 * already rounded, so the kernel's own roundings are the only difference
 * besides FP32 summation order (~1e-6 relative here):
 *   forward: the probabilities p_ij (times the dropout factor z_ij) are
 *     rounded before P V, so out_ix moves by at most
 *       2^-9 * magO_ix,  magO_ix = sum_j z_ij p_ij |v_jx|;
 *   dV = P^T dO: p rounded again:  2^-9 * sum_i z_ij p_ij |dO_ix|;
 *   ds_ij = p_ij (z_ij dp_ij - D_i), D_i = dO_i . out_i: out's error above
 *     moves D_i by dD_i <= 2^-9 sum_x |dO_ix| magO_ix, and ds is rounded
 *     (2^-9 |ds|) before dQ = scale dS K and dK = scale dS^T Q:
 *       dq_ix: scale * sum_j (2^-9 |ds_ij| + p_ij dD_i) |k_jx|, dk alike.
 * The test allows twice these first-order terms (2^-8 in place of 2^-9:
 * second-order terms and the sum order) plus 1e-5 absolute, and computes
 * p, z, ds from the rounded inputs in double. Without the bf16 rounding
 * The bound is of the size of the input rounding itself (the FP32 result
 * of the raw inputs stays within it too), so the test sees arithmetic
 * mistakes, not rounding; dropping the 1/sqrt(D) scale from the bf16
 * build's scores, or pairing the wrong keys in its packs, fails it. */
#include <omp.h>
#include "harness.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"

typedef struct {
    const char *name;
    int64_t N, H, L, S, D;
    int causal, kpm, fmask, bmask_row, dropout;
    int64_t local; /* a local window of this many keys each side; 0: none */
    int alibi;     /* ALiBi slopes, one per head */
    float mag;     /* q and k uniform in [-mag, mag]; 0: 1.5 */
} bcase;

static float *rnd_buf(qkv_rng *r, int64_t n, float lo, float hi)
{
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * qkv_rng_uniform(r);
    return x;
}

static float *rounded(const float *x, int64_t n)
{
    float *y = malloc((size_t)n * sizeof(float));
    qkv_bf16_round_floats(x, y, n);
    return y;
}

static double worst_seen; /* the largest error / bound of a build */

/* max over elements of |a - b| / bound; > 1 fails. NaN if either is NaN. */
static double worst(const float *a, const float *b, const double *bound, int64_t n, int64_t *at)
{
    double w = 0;
    *at = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / bound[i];
        if (isnan(a[i]) != isnan(b[i]) || isnan(e)) return NAN;
        if (e > w) {
            w = e;
            *at = i;
        }
    }
    return w;
}

/* Runs one case through the bf16 build now current; returns the worst
 * ratio of error to bound over out and the gradients (checks inside). */
static void run_case(const bcase *c, const char *isa)
{
    qkv_rng r;
    qkv_rng_seed(&r, 1234 + (uint64_t)c->L * 7 + (uint64_t)c->D);
    int64_t N = c->N, H = c->H, L = c->L, S = c->S, D = c->D, NH = N * H;
    int64_t nq = NH * L * D, nk = NH * S * D;
    float mag = c->mag > 0 ? c->mag : 1.5f;
    float *q = rnd_buf(&r, nq, -mag, mag), *k = rnd_buf(&r, nk, -mag, mag);
    float *v = rnd_buf(&r, nk, -1, 1), *dout = rnd_buf(&r, nq, -1, 1);
    float *qr = rounded(q, nq), *kr = rounded(k, nk), *vr = rounded(v, nk), *dor = rounded(dout, nq);
    qkv_attn_desc d = {0};
    d.N = N, d.H = H, d.L = L, d.S = S, d.D = D, d.Dv = D;
    d.scale = 1.0f / sqrtf((float)D);
    d.mask_keys = S;
    d.window = -1;
    d.causal = c->causal ? QKV_CAUSAL_TOP_LEFT : QKV_CAUSAL_NONE;
    uint8_t *kpm = NULL, *bm = NULL;
    float *fm = NULL;
    if (c->kpm) { /* the last keys of each batch padded, a different count each */
        kpm = calloc((size_t)(N * S), 1);
        for (int64_t n = 0; n < N; n++)
            for (int64_t j = S - 3 - 5 * n; j < S; j++) kpm[n * S + j] = 1;
        d.kpm = kpm;
    }
    if (c->fmask) {
        fm = rnd_buf(&r, L * S, -2, 1);
        d.fmask = fm;
    }
    if (c->bmask_row) { /* row 1 sees no key: output and gradients 0 */
        bm = calloc((size_t)(L * S), 1);
        for (int64_t j = 0; j < S; j++) bm[1 * S + j] = 1;
        for (int64_t i = 0; i < L; i += 3) bm[i * S + (i * 7) % S] = 1;
        d.bmask = bm;
    }
    if (c->dropout) {
        d.dropout_p = 0.25f;
        d.dropout_seed = 99;
    }
    if (c->local) d.window = c->local;
    float slopes[16];
    if (c->alibi) { /* the ALiBi paper's slopes for H heads: 2^(-8 h / H) */
        for (int64_t h = 0; h < H && h < 16; h++) slopes[h] = powf(2.0f, -8.0f * (float)(h + 1) / (float)H);
        d.alibi = slopes;
    }
    int threads = omp_get_max_threads();
    /* the bf16 kernel on the raw inputs */
    float *out = calloc((size_t)nq, sizeof(float)), *lse = calloc((size_t)(NH * L), sizeof(float));
    float *dq = calloc((size_t)nq, sizeof(float)), *dk = calloc((size_t)nk, sizeof(float));
    float *dv = calloc((size_t)nk, sizeof(float));
    d.bf16 = 1;
    float *fs = malloc(qkv_attn_forward_scratch(&d, threads) * sizeof(float));
    float *bs = malloc(qkv_attn_backward_scratch(&d, threads) * sizeof(float));
    qkv_attn_forward_flash(&d, q, k, v, out, lse, fs, threads);
    qkv_attn_backward_flash(&d, q, k, v, out, lse, dout, dq, dk, dv, bs, threads);
    /* the reference on the rounded inputs */
    qkv_attn_desc d0 = d;
    d0.bf16 = 0;
    float *oref = calloc((size_t)nq, sizeof(float)), *lref = calloc((size_t)(NH * L), sizeof(float));
    float *dqr = calloc((size_t)nq, sizeof(float)), *dkr = calloc((size_t)nk, sizeof(float));
    float *dvr = calloc((size_t)nk, sizeof(float));
    double *rs = malloc(qkv_attn_ref_scratch(&d0) * sizeof(double));
    qkv_attn_forward_ref(&d0, qr, kr, vr, oref, lref, NULL, rs);
    qkv_attn_backward_ref(&d0, qr, kr, vr, oref, lref, dor, dqr, dkr, dvr, rs);
    /* the bounds, in double from the rounded inputs */
    double *bo = calloc((size_t)nq, sizeof(double)), *bq = calloc((size_t)nq, sizeof(double));
    double *bk = calloc((size_t)nk, sizeof(double)), *bv = calloc((size_t)nk, sizeof(double));
    double *p = malloc((size_t)S * sizeof(double)), *ds = malloc((size_t)S * sizeof(double));
    const double u = ldexp(1.0, -9);
    for (int64_t nh = 0; nh < NH; nh++)
        for (int64_t i = 0; i < L; i++) {
            int64_t io = (nh * L + i) * D;
            double li = lref[nh * L + i], Di = 0, dD = 0;
            for (int64_t j = 0; j < S; j++) {
                float t = qkv_attn_mask_term(&d0, nh / H, nh % H, i, j);
                double s = 0;
                for (int64_t x = 0; x < D; x++) s += (double)qr[io + x] * kr[(nh * S + j) * D + x];
                p[j] = (t == -INFINITY || li == -INFINITY) ? 0 : exp(s * d0.scale + t - li);
                double z = qkv_attn_dropout(&d0, nh, i, j);
                for (int64_t x = 0; x < D; x++) {
                    bo[io + x] += z * p[j] * fabs(vr[(nh * S + j) * D + x]);
                    bv[(nh * S + j) * D + x] += z * p[j] * fabs(dor[io + x]);
                }
            }
            for (int64_t x = 0; x < D; x++) {
                Di += (double)dor[io + x] * oref[io + x];
                dD += u * fabs(dor[io + x]) * bo[io + x];
            }
            for (int64_t j = 0; j < S; j++) {
                double dp = 0, z = qkv_attn_dropout(&d0, nh, i, j);
                for (int64_t x = 0; x < D; x++) dp += (double)dor[io + x] * vr[(nh * S + j) * D + x];
                ds[j] = u * fabs(p[j] * (z * dp - Di)) + p[j] * dD;
                for (int64_t x = 0; x < D; x++) {
                    bq[io + x] += d0.scale * ds[j] * fabs(kr[(nh * S + j) * D + x]);
                    bk[(nh * S + j) * D + x] += d0.scale * ds[j] * fabs(qr[io + x]);
                }
            }
        }
    for (int64_t e = 0; e < nq; e++) {
        bo[e] = 2 * u * bo[e] + 1e-5;
        bq[e] = 2 * bq[e] + 1e-5;
    }
    for (int64_t e = 0; e < nk; e++) {
        bv[e] = 2 * u * bv[e] + 1e-5;
        bk[e] = 2 * bk[e] + 1e-5;
    }
    const char *nm[4] = {"out", "dq", "dk", "dv"};
    const float *got[4] = {out, dq, dk, dv}, *want[4] = {oref, dqr, dkr, dvr};
    const double *bnd[4] = {bo, bq, bk, bv};
    int64_t ns[4] = {nq, nq, nk, nk};
    for (int t = 0; t < 4; t++) {
        int64_t at;
        double w = worst(got[t], want[t], bnd[t], ns[t], &at);
        if (w > worst_seen) worst_seen = w;
        CHECK(w <= 1.0, "%s %s %s: error %.3g x the bound at %lld (%g vs %g, bound %.3g)", isa, c->name,
              nm[t], w, (long long)at, got[t][at], want[t][at], bnd[t][at]);
    }
    double le = 0;
    for (int64_t i = 0; i < NH * L; i++)
        if (lref[i] == -INFINITY)
            le = lse[i] == -INFINITY ? le : INFINITY;
        else
            le = fmax(le, fabs((double)lse[i] - lref[i]) / (1 + fabs(lref[i])));
    CHECK(le <= 1e-5, "%s %s: lse off by %.3g (FP32 arithmetic on the same rounded scores)", isa,
          c->name, le);
    if (c->bmask_row) { /* the fully masked row: exactly 0, lse -inf */
        int zero = 1;
        for (int64_t nh = 0; nh < NH; nh++) {
            zero &= lse[nh * L + 1] == -INFINITY;
            for (int64_t x = 0; x < D; x++)
                zero &= out[(nh * L + 1) * D + x] == 0.0f && dq[(nh * L + 1) * D + x] == 0.0f;
        }
        CHECK(zero, "%s %s: a fully masked row gives out 0, dq 0, lse -inf", isa, c->name);
    }
    /* The kernel really rounds P: the FP32 kernel on the same rounded
     * inputs gives other numbers (within the bound too). */
    d0 = d;
    d0.bf16 = 0;
    float *o32 = calloc((size_t)nq, sizeof(float));
    qkv_attn_forward_flash(&d0, qr, kr, vr, o32, lse, fs, threads);
    int64_t at;
    double w32 = worst(o32, oref, bo, nq, &at);
    CHECK(w32 <= 1.0 && memcmp(o32, out, (size_t)nq * sizeof(float)),
          "%s %s: FP32 kernel on the rounded inputs: within the bound (%.3g) and not the bf16 result", isa,
          c->name, w32);
    free(o32);
    free(q), free(k), free(v), free(dout), free(qr), free(kr), free(vr), free(dor);
    free(kpm), free(bm), free(fm), free(out), free(lse), free(dq), free(dk), free(dv), free(fs), free(bs);
    free(oref), free(lref), free(dqr), free(dkr), free(dvr), free(rs), free(bo), free(bq), free(bk), free(bv);
    free(p), free(ds);
}

static const bcase CASES[] = {
    {"plain L67 S131 D64", 1, 2, 67, 131, 64, 0, 0, 0, 0, 0, 0, 0, 0},
    {"causal L150 S150 D32", 1, 2, 150, 150, 32, 1, 0, 0, 0, 0, 0, 0, 0},
    {"kpm N2 L33 S70 D80", 2, 2, 33, 70, 80, 0, 1, 0, 0, 0, 0, 0, 0},
    {"float mask L65 S257 D64", 1, 1, 65, 257, 64, 0, 0, 1, 0, 0, 0, 0, 0},
    {"bool mask, masked row L40 S140 D32", 1, 2, 40, 140, 32, 0, 0, 0, 1, 0, 0, 0, 0},
    {"dropout L70 S129 D64", 1, 2, 70, 129, 64, 0, 0, 0, 0, 1, 0, 0, 0},
    {"everything L77 S133 D80", 2, 1, 77, 133, 80, 1, 1, 1, 1, 1, 0, 0, 0},
    {"short S9 D80", 1, 3, 5, 9, 80, 0, 0, 0, 0, 0, 0, 0, 0},
    {"odd head dim D33 L20 S45, causal", 1, 2, 20, 45, 33, 1, 0, 0, 0, 0, 0, 0, 0},
    {"head dim 8, L130 S200 kpm", 1, 2, 130, 200, 8, 0, 1, 0, 0, 0, 0, 0, 0},
    {"local window 7, causal L90 S90 D64", 1, 2, 90, 90, 64, 1, 0, 0, 0, 0, 7, 0, 0},
    {"local window 20 L70 S150 D32", 1, 2, 70, 150, 32, 0, 0, 0, 0, 0, 20, 0, 0},
    {"ALiBi, causal L100 S100 D64", 1, 4, 100, 100, 64, 1, 0, 0, 0, 0, 0, 1, 0},
    {"ALiBi, kpm, window 9, causal N2 L60 S60 D48", 2, 2, 60, 60, 48, 1, 1, 0, 0, 0, 9, 1, 0},
    /* scores up to about +-200: exp(s - m) overflows unless m is each
     * row's true running max (softmax hides a wrong but moderate one) */
    {"large scores L70 S300 D64", 1, 2, 70, 300, 64, 0, 0, 0, 0, 0, 0, 0, 12.0f},
    {"large scores, causal L130 S130 D64", 1, 2, 130, 130, 64, 1, 0, 0, 0, 0, 0, 0, 12.0f},
    /* heads enough for every thread, few query blocks, one key tile: the
     * kernel packs each head's operands as a thread takes it (per head) */
    {"per-head packs: dropout, kpm N2 H3 L100 S110 D64", 2, 3, 100, 110, 64, 0, 1, 0, 0, 1, 0, 0, 0},
    {"per-head packs: causal N3 H2 L64 S64 D32", 3, 2, 64, 64, 32, 1, 0, 0, 0, 0, 0, 0, 0},
};

/* Each row of dS sums to 0 in exact arithmetic (softmax's gradient is
 * blind to a shift of a row's scores), so the keys' gradients sum to 0:
 * sum_j dk_j = scale sum_i (sum_j ds_ij) q_i. The bf16 kernel rounds each
 * ds_ij on its own (errors of either sign, which mostly cancel in the sum);
 * what it must not do is give a row's ds one error of one sign, as it did
 * while D_i = dO_i . out_i took dO unrounded and dp_ij took it rounded.
 * Bound: two bf16 roundings, 2^-8, of sum_j |dk_jx|, on peaked attention
 * (large q and k, where dp_ij - D_i cancels and the rows' errors matter
 * most). Measured 2026-11-27: 1.8e-3 and 2.2e-3 with D_i from the rounded
 * dO, 8.6e-3 and 3.0e-2 with it from the unrounded one. */
static void test_ds_rows_sum_to_zero(const char *isa)
{
    int64_t H = 4, L = 64, S = 64, D = 64, nq = H * L * D;
    int threads = omp_get_max_threads();
    for (int m = 0; m < 2; m++) {
        float mag = m ? 12.0f : 8.0f;
        qkv_rng r;
        qkv_rng_seed(&r, 7);
        float *q = rnd_buf(&r, nq, -mag, mag), *k = rnd_buf(&r, nq, -mag, mag);
        float *v = rnd_buf(&r, nq, -1, 1), *dout = rnd_buf(&r, nq, -1, 1);
        qkv_attn_desc d = {0};
        d.N = 1, d.H = H, d.L = L, d.S = S, d.D = d.Dv = D, d.mask_keys = S, d.window = -1;
        d.scale = 1.0f / 8.0f;
        d.bf16 = 1;
        float *out = calloc((size_t)nq, sizeof(float)), *lse = calloc((size_t)(H * L), sizeof(float));
        float *dq = calloc((size_t)nq, sizeof(float)), *dk = calloc((size_t)nq, sizeof(float));
        float *dv = calloc((size_t)nq, sizeof(float));
        float *fs = malloc(qkv_attn_forward_scratch(&d, threads) * sizeof(float));
        float *bs = malloc(qkv_attn_backward_scratch(&d, threads) * sizeof(float));
        qkv_attn_forward_flash(&d, q, k, v, out, lse, fs, threads);
        qkv_attn_backward_flash(&d, q, k, v, out, lse, dout, dq, dk, dv, bs, threads);
        double worst_ratio = 0;
        for (int64_t h = 0; h < H; h++)
            for (int64_t x = 0; x < D; x++) {
                double sum = 0, abs_sum = 0;
                for (int64_t j = 0; j < S; j++) {
                    sum += dk[(h * S + j) * D + x];
                    abs_sum += fabs(dk[(h * S + j) * D + x]);
                }
                worst_ratio = fmax(worst_ratio, fabs(sum) / abs_sum);
            }
        CHECK(worst_ratio <= ldexp(1.0, -8), "%s: |q|,|k| <= %g: |sum_j dk_j| = %.3g of sum_j |dk_j|, over 2^-8",
              isa, (double)mag, worst_ratio);
        free(q), free(k), free(v), free(dout), free(out), free(lse), free(dq), free(dk), free(dv), free(fs),
            free(bs);
    }
}

/* The mode through qkv_sdpa: BF16 gives the bf16 kernel's result, FP32
 * before and after it is bit for bit the same. */
static void test_ctx_mode(void)
{
    qkv_arena *A;
    CHECK_OK(qkv_arena_new(&A, 1 << 20));
    qkv_rng r;
    qkv_rng_seed(&r, 5);
    int64_t sh[4] = {1, 2, 70, 64}, n = 2 * 70 * 64;
    float *x[3];
    qkv_tensor *t[3];
    for (int i = 0; i < 3; i++) {
        x[i] = rnd_buf(&r, n, -1, 1);
        CHECK_OK(qkv_tensor_wrap(A, x[i], 4, sh, &t[i]));
    }
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_sdpa_opts o = qkv_sdpa_opts_default();
    o.causal = QKV_CAUSAL_TOP_LEFT;
    float *res[3];
    for (int m = 0; m < 3; m++) {
        qkv_tensor *out = NULL;
        CHECK_OK(qkv_ctx_set_precision(c, m == 1 ? QKV_BF16 : QKV_FP32));
        CHECK_OK(qkv_sdpa(c, t[0], t[1], t[2], &o, &out, NULL));
        res[m] = malloc((size_t)n * sizeof(float));
        if (out) memcpy(res[m], out->data, (size_t)n * sizeof(float));
        qkv_ctx_reset(c);
    }
    CHECK(!memcmp(res[0], res[2], (size_t)n * sizeof(float)), "FP32 sdpa bit for bit the same after BF16");
    CHECK(memcmp(res[0], res[1], (size_t)n * sizeof(float)), "BF16 sdpa differs from FP32");
    /* the kernel itself, FP32 and bf16, gives sdpa's two results */
    qkv_attn_desc d = {0};
    d.N = 1, d.H = 2, d.L = d.S = 70, d.D = d.Dv = 64, d.mask_keys = 70, d.window = -1;
    d.scale = 1.0f / 8.0f;
    d.causal = QKV_CAUSAL_TOP_LEFT;
    int threads = omp_get_max_threads();
    float *ob = malloc((size_t)n * sizeof(float)), *lse = malloc(140 * sizeof(float));
    for (int b = 0; b < 2; b++) {
        d.bf16 = b;
        float *s = malloc(qkv_attn_forward_scratch(&d, threads) * sizeof(float));
        qkv_attn_forward_flash(&d, x[0], x[1], x[2], ob, lse, s, threads);
        CHECK(!memcmp(ob, res[b], (size_t)n * sizeof(float)), "sdpa in %s mode runs the %s kernel",
              b ? "BF16" : "FP32", b ? "bf16" : "FP32");
        free(s);
    }
    free(ob), free(lse);
    for (int m = 0; m < 3; m++) free(res[m]);
    for (int i = 0; i < 3; i++) free(x[i]);
    qkv_ctx_free(c);
    qkv_arena_free(A);
}

/* Every case on bf16 build b (its name), forced. */
static void run_build(const char *b)
{
    worst_seen = 0;
    for (size_t k = 0; k < sizeof CASES / sizeof *CASES; k++) run_case(&CASES[k], b);
    test_ds_rows_sum_to_zero(b);
    printf("%s: largest error %.3f of the bound\n", b, worst_seen);
}

int main(void)
{
    /* each FP32 build and its bf16 builds: on avx512 both the AMX tiles'
     * and the vdpbf16ps one, where the CPU runs them */
    const char *isas[] = {"avx512", "avx2", "portable"};
    const char *bf16s[3][2] = {{"bf16_amx", "bf16_avx512"}, {"bf16_avx2", NULL}, {"bf16_portable", NULL}};
    for (int i = 0; i < 3; i++) {
        if (!qkv_attn_simd_force(isas[i])) {
            printf("note: the %s build does not run on this CPU; its bf16 build not tested\n", isas[i]);
            continue;
        }
        int ran = 0;
        for (int j = 0; j < 2 && bf16s[i][j]; j++) {
            if (!qkv_attn_simd_bf16_force(bf16s[i][j])) {
                printf("note: %s does not run on this CPU: not tested here\n", bf16s[i][j]);
                continue;
            }
            CHECK(!strcmp(qkv_attn_simd_bf16_current()->name, bf16s[i][j]), "%s forced is the build used",
                  bf16s[i][j]);
            run_build(bf16s[i][j]);
            ran = 1;
        }
        qkv_attn_simd_bf16_force(NULL);
        if (!ran) { /* no AVX512-BF16: the build that takes its place */
            const char *b = qkv_attn_simd_bf16_current()->name;
            printf("note: %s takes their place\n", b);
            run_build(b);
        }
    }
    qkv_attn_simd_force(NULL);
    CHECK(!qkv_attn_simd_bf16_force("bf16_nonesuch"), "an unknown bf16 build is refused");
    CHECK(qkv_attn_simd_bf16_current() != NULL, "a refused name changes nothing");
    test_ctx_mode();
    return h_finish("test_bf16_attention");
}
