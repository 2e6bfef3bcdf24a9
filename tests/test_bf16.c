/* test_bf16.c: the BF16 precision mode (docs/bf16.md).
 *  - fp32 -> bf16 rounding against PyTorch's (tools/bf16_oracle.py): bit
 *    for bit on ties, subnormals, overflow, +-inf and +-0; NaN stays NaN;
 *  - qkv_gemm_bf16 (oneDNN where built and the CPU runs it, the fallback,
 *    the reference loop) and qkv_gemm_bf16_vnni (an RNN step's product)
 *    against a double-precision product of the bf16-rounded inputs, per
 *    element within the FP32 summation bound;
 *  - Linear forward and backward in BF16 mode against PyTorch's
 *    torch.autocast("cpu", dtype=torch.bfloat16), and bmm in BF16 mode;
 *  - FP32 mode is bit-for-bit what qkv_gemm gives, and the arguments of
 *    qkv_ctx_set_precision are checked;
 *  - a small TransformerEncoderLayer trained in BF16 tracks the same
 *    training in FP32 (final losses within 5%). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <unistd.h>
#include "gemm_check.h"
#include "gradcheck.h"
#include "oracle.h"
#include "kernels/bf16.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_bf16_vnni.h"
#include "qkv/transformer.h"
#include <omp.h>

static uint32_t bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* ---- conversion --------------------------------------------------------- */

static void test_convert(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/convert.safetensors", dir);
    qkv_safetensors *st = NULL;
    qkv_arena *a = NULL;
    CHECK_OK(qkv_arena_new(&a, 0));
    CHECK_OK(qkv_safetensors_open(path, &st));
    if (!st) {
        qkv_arena_free(a);
        return;
    }
    qkv_tensor *x = h_load(st, a, "x", 0), *y = h_load(st, a, "y", 0), *ys = h_load(st, a, "y_scalar", 0);
    CHECK(x && y && ys, "convert: tensors missing");
    if (x && y && ys) {
        int64_t n = qkv_tensor_numel(x), bad = 0, nans = 0, subn = 0, ties = 0;
        float *got = malloc((size_t)n * sizeof *got);
        uint16_t *h = malloc((size_t)n * sizeof *h);
        qkv_bf16_round_floats(x->data, got, n);
        qkv_bf16_from_floats(x->data, h, n);
        for (int64_t i = 0; i < n; i++) {
            float want = y->data[i];
            uint16_t one = qkv_bf16_from_float(x->data[i]);
            int ok;
            if (isnan(want)) {
                nans++;
                ok = isnan(got[i]) && isnan(ys->data[i]) && isnan(qkv_bf16_to_float(one)) && one == h[i];
            } else {
                ok = bits(got[i]) == bits(want) && bits(ys->data[i]) == bits(want) && one == h[i] &&
                     bits(qkv_bf16_to_float(one)) == bits(want);
            }
            uint32_t u = bits(x->data[i]);
            subn += (u & 0x7f800000u) == 0 && (u & 0x7fffffu) != 0;
            ties += (u & 0xffffu) == 0x8000u;
            if (!ok && bad++ < 5)
                fprintf(stderr, "convert: x bits %08x -> %08x, torch %08x\n", (unsigned)u, (unsigned)bits(got[i]),
                        (unsigned)bits(want));
        }
        CHECK(bad == 0, "convert: %lld of %lld values differ from torch's bf16 rounding", (long long)bad,
              (long long)n);
        CHECK(nans >= 6 && subn >= 40 && ties >= 60, "convert: the oracle's set lacks NaNs, subnormals or ties");
        /* the in-place form */
        memcpy(got, x->data, (size_t)n * sizeof *got);
        qkv_bf16_round_floats(got, got, n);
        int same = 1;
        for (int64_t i = 0; i < n; i++) same &= isnan(y->data[i]) ? isnan(got[i]) : bits(got[i]) == bits(y->data[i]);
        CHECK(same, "convert: in place differs");
        free(got);
        free(h);
    }
    qkv_safetensors_close(st);
    qkv_arena_free(a);
}

/* ---- GEMM ----------------------------------------------------------------- */

static int gemm_case(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, float beta, int64_t pad,
                     uint64_t seed, const char *what)
{
    return h_gemm_case(qkv_gemm_bf16, 1, ta, tb, M, N, K, alpha, beta, pad, seed, what);
}

static void gemm_suite(const char *what)
{
    uint64_t seed = 11;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            gemm_case(ta, tb, 37, 29, 70, 1.0f, 0.0f, 0, seed++, what);
            gemm_case(ta, tb, 64, 96, 128, 1.0f, 1.0f, 3, seed++, what);
            gemm_case(ta, tb, 5, 1, 33, 0.5f, 1.0f, 1, seed++, what);
            gemm_case(ta, tb, 1, 130, 17, -2.0f, 0.25f, 0, seed++, what);
        }
    gemm_case(0, 1, 256, 384, 256, 1.0f, 1.0f, 0, seed++, what); /* split over threads */
    gemm_case(1, 0, 300, 200, 1000, 1.0f, 1.0f, 0, seed++, what);
    /* x Wᵀ with a short K and many columns: oneDNN's by column blocks of
     * 128 (a short last block here), beta 0 */
    gemm_case(0, 1, 37, 1000, 200, 1.0f, 0.0f, 2, seed++, what);
    gemm_case(0, 1, 64, 640, 256, 0.5f, 0.0f, 0, seed++, what);
    /* B packed into oneDNN's own layout (qkv_bf16_blocked_pack): K and N
     * not multiples of the blocks (32, 64), B with and without padding */
    for (int tb = 0; tb < 2; tb++) {
        gemm_case(0, tb, 50, 1000, 250, 1.0f, 0.0f, 2, seed++, what);
        gemm_case(0, tb, 33, 960, 500, 0.5f, 1.0f, 1, seed++, what);
    }
}

/* x Wᵀ + b where the product goes by column blocks (W in bf16) or takes W
 * packed into oneDNN's layout (W in FP32): each block's bias is its own
 * columns' (b + n0), and the bias goes in as the sums leave: the result
 * is, bit for bit, the product without the bias plus b in FP32 (both
 * sides add b to the same sums). */
static void test_gemm_bias_blocks(void)
{
    int64_t M = 41, N = 700, K = 96; /* oneDNN's size; blocks of 128, the last of 60 */
    uint16_t *a = malloc((size_t)(M * K) * 2), *w = malloc((size_t)(N * K) * 2);
    float *wf = malloc((size_t)(N * K) * 4);
    float *b = malloc((size_t)N * 4), *y = malloc((size_t)(M * N) * 4), *y0 = malloc((size_t)(M * N) * 4);
    qkv_rng r;
    qkv_rng_seed(&r, 5);
    for (int64_t i = 0; i < M * K; i++) a[i] = qkv_bf16_from_float((float)qkv_rng_normal(&r));
    for (int64_t i = 0; i < N * K; i++) wf[i] = (float)qkv_rng_normal(&r), w[i] = qkv_bf16_from_float(wf[i]);
    for (int64_t j = 0; j < N; j++) b[j] = (float)qkv_rng_normal(&r);
    for (int f32 = 0; f32 < 2; f32++) {
        qkv_gemm_bf16_bias(M, N, K, a, f32 ? wf : NULL, f32 ? NULL : w, b, y);
        qkv_gemm_bf16_bias(M, N, K, a, f32 ? wf : NULL, f32 ? NULL : w, NULL, y0);
        int64_t bad = 0;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) bad += bits(y[i * N + j]) != bits(y0[i * N + j] + b[j]);
        CHECK(bad == 0, "gemm_bf16_bias (W in %s): %lld of %lld values are not the product plus b",
              f32 ? "FP32" : "bf16", (long long)bad, (long long)(M * N));
    }
    free(a), free(w), free(wf), free(b), free(y), free(y0);
}

/* qkv_bf16_blocked_pack against the layout gemm_bf16_vnni.h documents,
 * element by element, padding included, from B (K,N) and from W (N,K),
 * each with a leading dimension past its row. */
static void test_blocked_pack(void)
{
    const int64_t sizes[][2] = {{250, 1000}, {32, 64}, {1, 1}, {45, 70}, {512, 2048}};
    qkv_rng r;
    qkv_rng_seed(&r, 11);
    for (size_t c = 0; c < sizeof sizes / sizeof *sizes; c++)
        for (int tb = 0; tb < 2; tb++) {
            int64_t K = sizes[c][0], N = sizes[c][1], ld = (tb ? K : N) + 3, rows = tb ? N : K;
            int64_t Kp = (K + 31) / 32 * 32, Np = (N + 63) / 64 * 64, len = qkv_bf16_blocked_len(K, N);
            float *B = malloc((size_t)(rows * ld) * sizeof *B);
            uint16_t *P = malloc((size_t)len * sizeof *P);
            for (int64_t i = 0; i < rows * ld; i++) B[i] = (float)qkv_rng_normal(&r);
            memset(P, 0xff, (size_t)len * sizeof *P);
            qkv_bf16_blocked_pack(tb, K, N, B, ld, P);
            int64_t bad = len != Kp * Np;
            for (int64_t k = 0; k < Kp; k++)
                for (int64_t n = 0; n < Np; n++) {
                    uint16_t want = k < K && n < N ? qkv_bf16_from_float(tb ? B[n * ld + k] : B[k * ld + n]) : 0;
                    bad += P[n / 64 * Kp * 64 + k / 32 * 2048 + k % 32 / 2 * 128 + n % 64 * 2 + k % 2] != want;
                }
            CHECK(bad == 0, "bf16_blocked_pack K %lld N %lld tb %d: %lld values out of place",
                  (long long)K, (long long)N, tb, (long long)bad);
            if (!tb) { /* from a compact bf16 copy: the same bits */
                uint16_t *B16 = malloc((size_t)(K * N) * sizeof *B16), *P16 = malloc((size_t)len * sizeof *P16);
                for (int64_t k = 0; k < K; k++)
                    for (int64_t n = 0; n < N; n++) B16[k * N + n] = qkv_bf16_from_float(B[k * ld + n]);
                memset(P16, 0xff, (size_t)len * sizeof *P16);
                qkv_bf16_blocked_pack16(K, N, B16, P16);
                CHECK(!memcmp(P, P16, (size_t)len * sizeof *P), "bf16_blocked_pack16 K %lld N %lld: not the FP32 pack's bits",
                      (long long)K, (long long)N);
                free(B16), free(P16);
            }
            free(B), free(P);
        }
    /* a linear layer's one-pass packs: W for both products, x with its
     * copy; the same bits as the packs they replace */
    const int64_t shapes[][2] = {{250, 1000}, {32, 64}, {1, 1}, {45, 70}, {512, 1536}, {96, 33}, {64, 31}};
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
        int64_t K = shapes[c][0], N = shapes[c][1], ld = K + 5; /* W (N,K) with a leading dimension past K */
        int64_t lt = qkv_bf16_blocked_len(K, N), ln = qkv_bf16_blocked_len(N, K);
        float *W = malloc((size_t)(N * ld) * sizeof *W);
        uint16_t *Pt = malloc((size_t)lt * sizeof *Pt), *Pn = malloc((size_t)ln * sizeof *Pn);
        uint16_t *Qt = malloc((size_t)lt * sizeof *Qt), *Qn = malloc((size_t)ln * sizeof *Qn);
        for (int64_t i = 0; i < N * ld; i++) W[i] = (float)qkv_rng_normal(&r);
        memset(Pt, 0xff, (size_t)lt * sizeof *Pt), memset(Pn, 0xff, (size_t)ln * sizeof *Pn);
        memset(Qt, 0x5a, (size_t)lt * sizeof *Qt), memset(Qn, 0x5a, (size_t)ln * sizeof *Qn);
        qkv_bf16_blocked_pack(1, K, N, W, ld, Pt);
        qkv_bf16_blocked_pack(0, N, K, W, ld, Pn);
        qkv_bf16_blocked_pack2(K, N, W, ld, Qt, Qn);
        CHECK(!memcmp(Pt, Qt, (size_t)lt * sizeof *Pt) && !memcmp(Pn, Qn, (size_t)ln * sizeof *Pn),
              "bf16_blocked_pack2 K %lld N %lld: not the two packs' bits", (long long)K, (long long)N);
        memset(Qn, 0x5a, (size_t)ln * sizeof *Qn);
        memset(Qt, 0x5a, (size_t)lt * sizeof *Qt);
        qkv_bf16_blocked_pack2(K, N, W, ld, NULL, Qn); /* each of the two alone */
        qkv_bf16_blocked_pack2(K, N, W, ld, Qt, NULL);
        CHECK(!memcmp(Pn, Qn, (size_t)ln * sizeof *Pn) && !memcmp(Pt, Qt, (size_t)lt * sizeof *Pt),
              "bf16_blocked_pack2 K %lld N %lld: Pn or Pt alone differs", (long long)K, (long long)N);
        /* x (M,K) = (N,K) compact, special values included: the copy is
         * qkv_bf16_from_floats' (subnormals kept, NaN as 0x7fc0) */
        float *x = malloc((size_t)(N * K) * sizeof *x);
        for (int64_t i = 0; i < N * K; i++) x[i] = W[i / K * ld + i % K];
        const float special[] = {NAN, -NAN, INFINITY, -INFINITY, 1e-40f, -1e-39f, -0.0f, 3.4e38f, 1.00390625f};
        for (int64_t i = 0; i < N * K && i < 9; i++) x[(i * 7919) % (N * K)] = special[i];
        int64_t lb = qkv_bf16_blocked_len(N, K);
        uint16_t *c16 = malloc((size_t)(N * K) * sizeof *c16), *cb = malloc((size_t)lb * sizeof *cb);
        uint16_t *d16 = malloc((size_t)(N * K) * sizeof *d16), *db = malloc((size_t)lb * sizeof *db);
        qkv_bf16_from_floats(x, c16, N * K);
        memset(cb, 0xff, (size_t)lb * sizeof *cb), memset(db, 0x5a, (size_t)lb * sizeof *db);
        qkv_bf16_blocked_pack16(N, K, c16, cb);
        qkv_bf16_copy_blocked(N, K, x, d16, db);
        CHECK(!memcmp(c16, d16, (size_t)(N * K) * sizeof *c16) && !memcmp(cb, db, (size_t)lb * sizeof *cb),
              "bf16_copy_blocked M %lld K %lld: not the copy's and pack16's bits", (long long)N, (long long)K);
        free(W), free(Pt), free(Pn), free(Qt), free(Qn), free(x), free(c16), free(cb), free(d16), free(db);
    }
}

/* The table full of small shapes; one thread runs a long product (its
 * entry, made last, busy while it runs) while the other uses every other
 * entry again and then makes new shapes: the entry used least recently is
 * then the long product's, and the table must drop another (the busy
 * count), not destroy a primitive that is running. The long product must
 * come out as the same product run alone (bit for bit: the same primitive
 * on one thread). Prints whether the new shapes were made while it ran
 * (the case this test is for; the timing is the machine's). */
static void test_table_busy(void)
{
    enum { M = 1024, N = 512, K = 16384, SMALL = 256 };
    uint64_t seed = 77;
    float *A = malloc(sizeof(float) * (M * K + N * K + 2 * M * N)), *B = A + M * K, *C = B + N * K, *C1 = C + M * N;
    float x[SMALL * 32], w[16 * 32], y[SMALL * 16];
    for (int64_t i = 0; i < M * K + N * K; i++) A[i] = h_gemm_frand(&seed);
    for (int i = 0; i < SMALL * 32; i++) x[i] = h_gemm_frand(&seed);
    for (int i = 0; i < 16 * 32; i++) w[i] = h_gemm_frand(&seed);
    qkv_gemm_bf16_set_dnnl_cache(0); /* a dropped primitive is gone at once */
    /* the long product alone, on one thread (inside a team of two) */
#pragma omp parallel num_threads(2)
    if (omp_get_thread_num() == 0) qkv_gemm_bf16(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N);
    for (int m = 1; m <= SMALL; m++) qkv_gemm_bf16(0, 1, m, 16, 32, 1.0f, x, 32, w, 32, 0.0f, y, 16); /* fills it */
    double t_long = 0, t_new = 0;
    int ok = 1, done = 0, during = 0;
#pragma omp parallel num_threads(2) reduction(&& : ok)
    {
        double t0 = omp_get_wtime();
        if (omp_get_thread_num() == 0) {
            qkv_gemm_bf16(0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C1, N);
            t_long = omp_get_wtime() - t0;
#pragma omp atomic write
            done = 1;
        } else {
            while (!qkv_gemm_bf16_running() && omp_get_wtime() - t0 < 10) { /* its conversions; it runs */
            }
            for (int m = 2; m <= SMALL; m++) qkv_gemm_bf16(0, 1, m, 16, 32, 1.0f, x, 32, w, 32, 0.0f, y, 16);
            for (int m = 0; m < 4; m++) /* shapes no other test makes */
                ok = gemm_case(0, 1, 3000 + m, 16, 32, 1.0f, 0.0f, 0, 900 + (uint64_t)m, "table, busy") && ok;
            t_new = omp_get_wtime() - t0;
#pragma omp atomic read
            during = done;
            during = !during;
        }
    }
    qkv_gemm_bf16_set_dnnl_cache(1024);
    CHECK(ok, "gemm_bf16: new shapes past the table while a long product runs");
    CHECK(!memcmp(C, C1, sizeof(float) * M * N), "gemm_bf16: the long product changed while the table made room");
    printf("test_bf16: a %dx%dx%d product ran %.1f ms; the table's entries used again and 4 new shapes made by %.1f "
           "ms%s\n", M, N, K, t_long * 1e3, t_new * 1e3, during ? "" : " (after it: not the case tested)");
    free(A);
}

/* A primitive that oneDNN could not make for want of memory is not kept
 * as declined: the product falls back (and is right), and the shape is
 * made when next asked. */
static void test_made_again(void)
{
    long made = qkv_gemm_bf16_made();
    qkv_gemm_bf16_fail_next(1);
    int ok = gemm_case(0, 1, 4000, 24, 40, 1.0f, 0.0f, 0, 31, "out of memory once");
    CHECK(ok && qkv_gemm_bf16_made() == made, "gemm_bf16: the failed make was not a fallback (%ld made, %ld before)",
          qkv_gemm_bf16_made(), made);
    ok = gemm_case(0, 1, 4000, 24, 40, 1.0f, 0.0f, 0, 32, "after out of memory");
    CHECK(ok && qkv_gemm_bf16_made() == made + 1, "gemm_bf16: a shape that failed for memory was not made again "
          "(%ld made, %ld before)", qkv_gemm_bf16_made(), made);
}

static void test_gemm(void)
{
    printf("bf16 GEMM: oneDNN %s\n", qkv_gemm_bf16_accelerated() ? "used" : "not built or not usable here");
    qkv_gemm_bf16_set_path(QKV_BF16_DNNL); /* every size through oneDNN, where it is there */
    gemm_suite(qkv_gemm_bf16_accelerated() ? "oneDNN" : "fallback");
    qkv_gemm_bf16_set_path(QKV_BF16_FALLBACK);
    gemm_suite("fallback");
    qkv_gemm_bf16_set_path(QKV_BF16_AUTO);
    gemm_suite("auto");
    qkv_set_reference(1);
    gemm_suite("reference");
    qkv_set_reference(0);
    h_gemm_edges(qkv_gemm_bf16, "gemm_bf16");
    /* concurrent products from OpenMP threads (qkv's ops call gemm inside
     * parallel loops): each must come out as on one thread */
    int ok = 1;
    qkv_gemm_bf16_set_path(QKV_BF16_DNNL);
#pragma omp parallel for reduction(&& : ok)
    for (int t = 0; t < 4; t++) ok = gemm_case(t & 1, t >> 1, 48, 40, 96, 1.0f, 1.0f, 0, 100 + (uint64_t)t, "threads") && ok;
    CHECK(ok, "gemm_bf16 from several threads at once");
    /* a weight gradient's shape, whose oneDNN product needs a scratchpad
     * (with oneDNN's global one, two at once came out wrong by more than
     * their size), twice so that the kept primitive runs at once too */
    ok = 1;
    for (int round = 0; round < 2; round++) {
#pragma omp parallel for reduction(&& : ok)
        for (int t = 0; t < 4; t++) ok = gemm_case(1, 0, 64, 256, 1024, 1.0f, 0.0f, 0, 200 + (uint64_t)t, "scratchpad") && ok;
    }
    CHECK(ok, "gemm_bf16 with a scratchpad from several threads at once");
    /* more shapes than the kept primitives' table holds (256), from two
     * threads at once, twice over: entries dropped to make room (never
     * one that a thread is running) and made again, each product right */
    ok = 1;
    for (int round = 0; round < 2; round++) {
#pragma omp parallel for schedule(dynamic) num_threads(2) reduction(&& : ok)
        for (int m = 1; m <= 300; m++) ok = gemm_case(0, m & 1, m, 64, 32, 1.0f, 0.0f, 0, 300 + (uint64_t)m, "table") && ok;
    }
    CHECK(ok, "gemm_bf16 past the primitives' table, from two threads");
    test_table_busy();
    if (qkv_gemm_bf16_accelerated()) test_made_again();
    qkv_gemm_bf16_set_path(QKV_BF16_AUTO);
}

/* qkv_gemm_bf16_vnni through qkv_gemm's signature, for h_gemm_case: ta = 0
 * and alpha = 1 only; A and C copied compact, op(B) packed. */
static void vnni_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                      const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (ta || alpha != 1.0f) abort();
    int64_t nb = N * K;
    float *Ac = malloc(sizeof(float) * (size_t)(M * K + nb + M * N)), *Bc = Ac + M * K, *Cc = Bc + nb;
    uint16_t *P = malloc(sizeof *P * (size_t)qkv_bf16_vnni_len(K, N));
    for (int64_t i = 0; i < M; i++) memcpy(Ac + i * K, A + i * lda, sizeof(float) * (size_t)K);
    for (int64_t r = 0; r < (tb ? N : K); r++) memcpy(Bc + r * (tb ? K : N), B + r * ldb, sizeof(float) * (size_t)(tb ? K : N));
    for (int64_t i = 0; i < M; i++) memcpy(Cc + i * N, C + i * ldc, sizeof(float) * (size_t)N);
    qkv_bf16_vnni_pack(tb, K, N, Bc, P);
    qkv_gemm_bf16_vnni(M, N, K, Ac, P, beta, Cc);
    for (int64_t i = 0; i < M; i++) memcpy(C + i * ldc, Cc + i * N, sizeof(float) * (size_t)N);
    free(Ac);
    free(P);
}

/* M x N x K from 1 and 2 threads: the same bits; beta 0 keeps C's NaNs out. */
static void vnni_threads(int64_t M, int64_t N, int64_t K, uint64_t *seedp)
{
    uint64_t seed = *seedp;
    float *A = malloc(sizeof(float) * (size_t)(M * K + N * K + 2 * M * N)), *B = A + M * K, *C1 = B + N * K, *C2 = C1 + M * N;
    for (int64_t i = 0; i < M * K; i++) A[i] = h_gemm_frand(&seed);
    for (int64_t i = 0; i < N * K; i++) B[i] = h_gemm_frand(&seed);
    for (int64_t i = 0; i < M * N; i++) C1[i] = C2[i] = NAN;
    uint16_t *P = malloc(sizeof *P * (size_t)qkv_bf16_vnni_len(K, N));
    qkv_bf16_vnni_pack(1, K, N, B, P);
    int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    qkv_gemm_bf16_vnni(M, N, K, A, P, 0.0f, C1);
    omp_set_num_threads(2);
    qkv_gemm_bf16_vnni(M, N, K, A, P, 0.0f, C2);
    omp_set_num_threads(nt);
    int finite = 1;
    for (int64_t i = 0; i < M * N; i++) finite &= isfinite(C1[i]);
    CHECK(finite, "gemm_bf16_vnni beta 0 (K %lld): C's NaNs reached the result", (long long)K);
    CHECK(!memcmp(C1, C2, sizeof(float) * (size_t)(M * N)), "gemm_bf16_vnni (K %lld): 1 and 2 threads differ",
          (long long)K);
    free(A);
    free(P);
    *seedp = seed;
}

/* The products of a GRU/LSTM step (batch 64, hidden 256: h W_hh^T and dAh
 * W_hh) and odd shapes: K odd (a zero pair), rows not a multiple of the
 * kernel's 6, one row, 16 columns; beta 0 ignores C (NaN there stays out);
 * the same bits on 1 and 2 threads. Where the CPU lends AMX tiles, K a
 * multiple of 32 takes them: rows not a multiple of 16 (61, 17, 40: a
 * short block through the buffer), 16 and 48 columns (a lone tile). */
static void test_gemm_vnni(void)
{
    if (!qkv_gemm_bf16_vnni_usable(64, 768, 256)) {
        printf("test_bf16: qkv_gemm_bf16_vnni does not run on this CPU (no AVX512-BF16): not tested\n");
        return;
    }
    static const int64_t shapes[][3] = {{64, 768, 256}, {64, 256, 768}, {61, 784, 255}, {1, 16, 1}, {7, 48, 3},
                                        {13, 32, 9},    {61, 784, 256}, {17, 48, 64},  {40, 16, 32}, {1, 32, 32}};
    uint64_t seed = 300;
    for (int tb = 0; tb < 2; tb++)
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            int64_t M = shapes[k][0], N = shapes[k][1], K = shapes[k][2];
            h_gemm_case(vnni_gemm, 1, 0, tb, M, N, K, 1.0f, 0.0f, 0, seed++, "vnni");
            h_gemm_case(vnni_gemm, 1, 0, tb, M, N, K, 1.0f, 1.0f, 3, seed++, "vnni");
            h_gemm_case(vnni_gemm, 1, 0, tb, M, N, K, 1.0f, -0.25f, 1, seed++, "vnni");
        }
    for (int64_t K = 255; K <= 256; K++) /* vdpbf16ps; the tiles where the CPU lends them */
        vnni_threads(61, 784, K, &seed);
    printf("test_bf16: AMX tiles %s here (qkv_amx_usable)\n", qkv_amx_usable() ? "usable" : "not usable");
}

/* ---- Linear against torch.autocast ---------------------------------------- */

/* One oracle case: y and the gradients of x, w, b. torch's autocast rounds
 * x, w, b and dy to bf16 (as qkv does for x, w and dy), multiplies with
 * FP32 sums, then rounds y, dx, dW and db to bf16; qkv keeps them FP32 and
 * its bias and db in FP32. Per element:
 *   |qkv - torch| <= 2^-8 |torch| + 2^-8 |b| (y) + 2^-8 sum|dy| (db)
 *                    + 2 K 2^-24 sum_k |a_k b_k|
 * where 2^-8 is twice bf16's half-ulp (2^-9 relative: torch's rounding of
 * its result, of the bias and of dy in db's sum), and the last term the
 * FP32 summation bound. Without the bf16 rounding of the inputs qkv would
 * miss by up to ~2^-8 |x||w| per term: the check can fail. */
static int close_to(const float *got, qkv_tensor *want, const float *slack, int64_t n, const char *what,
                    const char *file)
{
    if (!want) {
        CHECK(0, "%s: %s missing", file, what);
        return 0;
    }
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double t = want->data[i], bound = 0x1p-8 * fabs(t) + slack[i] + 1e-30;
        if (!(fabs(got[i] - t) <= bound) && bad++ < 3)
            fprintf(stderr, "%s %s[%lld]: qkv %.9g torch %.9g bound %.3g\n", file, what, (long long)i, got[i], t, bound);
    }
    CHECK(bad == 0, "%s: %s: %lld elements outside the bf16 bound", file, what, (long long)bad);
    return bad == 0;
}

static void linear_case(const char *dir, int k)
{
    char path[600], file[32];
    snprintf(file, sizeof file, "linear_%d", k);
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, file);
    qkv_safetensors *st = NULL;
    qkv_arena *a = NULL;
    qkv_ctx *c = NULL;
    CHECK_OK(qkv_arena_new(&a, 0));
    CHECK_OK(qkv_ctx_new(&c));
    CHECK_OK(qkv_safetensors_open(path, &st));
    if (!st || !c) goto done;
    qkv_tensor *x = h_load(st, a, "x", 1), *w = h_load(st, a, "w", 1), *b = h_load(st, a, "b", 1);
    qkv_tensor *ty = h_load(st, a, "y", 0), *dout = h_load(st, a, "dout", 0);
    if (!x || !w || !ty || !dout) {
        CHECK(0, "%s: tensors missing", file);
        goto done;
    }
    CHECK_OK(qkv_ctx_set_precision(c, QKV_BF16));
    qkv_tensor *y = NULL;
    CHECK_OK(qkv_linear(c, x, w, b, &y));
    if (!y) goto done;
    CHECK_OK(qkv_backward(c, y, dout->data));
    int64_t in = w->shape[1], out = w->shape[0], M = qkv_tensor_numel(x) / in;
    const float *X = x->data, *W = w->data, *D = dout->data;
    float *sy = calloc((size_t)(M * out), sizeof *sy), *sx = calloc((size_t)(M * in), sizeof *sx);
    float *sw = calloc((size_t)(out * in), sizeof *sw), *sb = calloc((size_t)out, sizeof *sb);
#define R(v) fabs((double)qkv_bf16_to_float(qkv_bf16_from_float(v)))
    double gam = 0x1p-24 * 2;
    for (int64_t i = 0; i < M; i++)
        for (int64_t o = 0; o < out; o++) {
            double m = 0;
            for (int64_t j = 0; j < in; j++) m += R(X[i * in + j]) * R(W[o * in + j]);
            sy[i * out + o] = (float)(gam * (in + 2) * m + (b ? 0x1p-8 * fabs(b->data[o]) : 0));
        }
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < in; j++) {
            double m = 0;
            for (int64_t o = 0; o < out; o++) m += R(D[i * out + o]) * R(W[o * in + j]);
            sx[i * in + j] = (float)(gam * (out + 2) * m);
        }
    for (int64_t o = 0; o < out; o++) {
        double s = 0;
        for (int64_t j = 0; j < in; j++) {
            double m = 0;
            for (int64_t i = 0; i < M; i++) m += R(D[i * out + o]) * R(X[i * in + j]);
            sw[o * in + j] = (float)(gam * (M + 2) * m);
        }
        for (int64_t i = 0; i < M; i++) s += fabs(D[i * out + o]);
        sb[o] = (float)(0x1p-8 * s);
    }
#undef R
    close_to(y->data, ty, sy, M * out, "y", file);
    close_to(x->grad, h_load(st, a, "grad.x", 0), sx, M * in, "grad.x", file);
    close_to(w->grad, h_load(st, a, "grad.w", 0), sw, out * in, "grad.w", file);
    if (b) close_to(b->grad, h_load(st, a, "grad.b", 0), sb, out, "grad.b", file);
    free(sy);
    free(sx);
    free(sw);
    free(sb);
done:
    qkv_safetensors_close(st);
    qkv_ctx_free(c);
    qkv_arena_free(a);
}

/* ---- FP32 unchanged, bmm in BF16, arguments ------------------------------- */

static void test_modes(void)
{
    qkv_ctx *c = NULL;
    qkv_arena *a = NULL;
    qkv_rng r;
    qkv_rng_seed(&r, 3);
    CHECK_OK(qkv_ctx_new(&c));
    CHECK_OK(qkv_arena_new(&a, 0));
    if (!c || !a) return;
    CHECK(qkv_ctx_precision(c) == QKV_FP32, "default precision is not FP32");
    CHECK(qkv_ctx_precision(NULL) == QKV_FP32, "precision of NULL is not FP32");
    CHECK_ERR(qkv_ctx_set_precision(NULL, QKV_BF16), QKV_ERR_ARG, "ctx_set_precision: ctx is NULL");
    CHECK_ERR(qkv_ctx_set_precision(c, (qkv_precision)7), QKV_ERR_ARG, "ctx_set_precision: precision 7");
    CHECK(qkv_ctx_precision(c) == QKV_FP32, "a refused precision changed the ctx");

    /* FP32: Linear's forward and backward are qkv_gemm's bits, before and
     * after a round trip through BF16. */
    int64_t M = 12, in = 40, out = 24, xs[2] = {M, in}, ws[2] = {out, in};
    qkv_tensor *x = h_input(a, &r, 2, xs, 1.0f), *w = h_input(a, &r, 2, ws, 0.3f);
    float *dy = malloc(sizeof(float) * (size_t)(M * out)), *ref = malloc(sizeof(float) * (size_t)(M * in + out * in + M * out));
    for (int64_t i = 0; i < M * out; i++) dy[i] = (float)((i * 37 % 11) - 5) * 0.1f;
    float *ry = ref, *rdx = ry + M * out, *rdw = rdx + M * in;
    qkv_gemm(0, 1, M, out, in, 1.0f, x->data, in, w->data, in, 0.0f, ry, out);
    memset(rdx, 0, sizeof(float) * (size_t)(M * in + out * in));
    qkv_gemm(0, 0, M, in, out, 1.0f, dy, out, w->data, in, 1.0f, rdx, in);
    qkv_gemm(1, 0, out, in, M, 1.0f, dy, out, x->data, in, 1.0f, rdw, in);
    for (int round = 0; round < 3; round++) {
        qkv_precision p = round == 1 ? QKV_BF16 : QKV_FP32;
        CHECK_OK(qkv_ctx_set_precision(c, p));
        CHECK(qkv_ctx_precision(c) == p, "precision not kept");
        qkv_ctx_reset(c);
        memset(x->grad, 0, sizeof(float) * (size_t)(M * in));
        memset(w->grad, 0, sizeof(float) * (size_t)(out * in));
        qkv_tensor *y = NULL;
        CHECK_OK(qkv_linear(c, x, w, NULL, &y));
        if (!y) continue;
        CHECK_OK(qkv_backward(c, y, dy));
        int same = !memcmp(y->data, ry, sizeof(float) * (size_t)(M * out)) &&
                   !memcmp(x->grad, rdx, sizeof(float) * (size_t)(M * in)) &&
                   !memcmp(w->grad, rdw, sizeof(float) * (size_t)(out * in));
        if (p == QKV_FP32) CHECK(same, "FP32 Linear (round %d) is not qkv_gemm's bits", round);
        else CHECK(!same, "BF16 Linear gave FP32's bits: the inputs were not rounded");
    }

    /* bmm in BF16: qkv_gemm_bf16's numbers, batch by batch */
    int64_t as[3] = {3, 5, 33}, bs[3] = {3, 33, 7};
    qkv_tensor *ta = h_input(a, &r, 3, as, 1.0f), *tb = h_input(a, &r, 3, bs, 1.0f), *ty = NULL;
    CHECK_OK(qkv_ctx_set_precision(c, QKV_BF16));
    qkv_ctx_reset(c);
    CHECK_OK(qkv_bmm(c, ta, tb, &ty));
    if (ty) {
        float want[3 * 5 * 7];
        for (int i = 0; i < 3; i++)
            qkv_gemm_bf16(0, 0, 5, 7, 33, 1.0f, ta->data + i * 5 * 33, 33, tb->data + i * 33 * 7, 7, 0.0f,
                          want + i * 35, 7);
        CHECK(!memcmp(want, ty->data, sizeof want), "bmm in BF16 is not qkv_gemm_bf16's product");
    }
    /* Conv1d (and so Conv2d: the same im2col + gemm) in BF16: the FP32
     * convolution of the bf16-rounded input and weight, up to the order of
     * the FP32 sums; and not the FP32 convolution of the raw ones. */
    int64_t cxs[3] = {2, 5, 19}, cws[3] = {7, 5, 3};
    qkv_tensor *cx = h_input(a, &r, 3, cxs, 1.0f), *cw = h_input(a, &r, 3, cws, 0.5f), *cb = NULL;
    qkv_tensor *rx = h_input(a, &r, 3, cxs, 1.0f), *rw = h_input(a, &r, 3, cws, 0.5f);
    qkv_bf16_round_floats(cx->data, rx->data, 2 * 5 * 19);
    qkv_bf16_round_floats(cw->data, rw->data, 7 * 5 * 3);
    qkv_tensor *yb = NULL, *yr = NULL, *yf = NULL;
    qkv_ctx_reset(c);
    CHECK_OK(qkv_conv1d(c, cx, cw, cb, 1, 1, 1, &yb)); /* still BF16 */
    CHECK_OK(qkv_ctx_set_precision(c, QKV_FP32));
    CHECK_OK(qkv_conv1d(c, rx, rw, cb, 1, 1, 1, &yr));
    CHECK_OK(qkv_conv1d(c, cx, cw, cb, 1, 1, 1, &yf));
    if (yb && yr && yf) {
        int64_t n = qkv_tensor_numel(yb);
        double e = h_rel_err(yb->data, yr->data, n), e32 = h_rel_err(yf->data, yr->data, n);
        CHECK(e <= 1e-6, "conv1d in BF16: %.3g from FP32 on rounded inputs", e);
        CHECK(e32 > 1e-4, "conv1d: FP32 on raw inputs only %.3g from rounded ones: the check cannot tell", e32);
    }
    free(dy);
    free(ref);
    qkv_ctx_free(c);
    qkv_arena_free(a);
}

/* Linear in BF16 mode keeps the forward's bf16 copies of x and W for its
 * backward and converts dy once for both products (qkv_gemm_bf16_pre):
 * y, dx and dW must still be qkv_gemm_bf16's bits on the float
 * tensors, on products that run on oneDNN (from 4 MFLOP) and with dW taken
 * by the layer's 4 chunks of rows (M >= 1024 and 4 max(in,out)), whose
 * results it adds in chunk order. */
static void test_linear_kept(void)
{
    enum { CH = 4 };
    static const int64_t shapes[2][3] = {{512, 96, 80}, {2048, 64, 48}}; /* M, in, out */
    qkv_ctx *c = NULL;
    qkv_arena *a = NULL;
    qkv_rng r;
    qkv_rng_seed(&r, 11);
    CHECK_OK(qkv_ctx_new(&c));
    CHECK_OK(qkv_arena_new(&a, 0));
    if (!c || !a) return;
    CHECK_OK(qkv_ctx_set_precision(c, QKV_BF16));
    for (int k = 0; k < 2; k++) {
        int64_t M = shapes[k][0], in = shapes[k][1], out = shapes[k][2], chunked = k == 1;
        int64_t xs[2] = {M, in}, ws[2] = {out, in}, bs[1] = {out};
        qkv_tensor *x = h_input(a, &r, 2, xs, 1.0f), *w = h_input(a, &r, 2, ws, 0.3f);
        qkv_tensor *b = h_input(a, &r, 1, bs, 0.5f), *y = NULL;
        size_t n = (size_t)(M * out + M * in + out * in + out + CH * out * in);
        float *dy = malloc(sizeof(float) * (size_t)(M * out)), *ref = calloc(n, sizeof(float));
        if (!dy || !ref || !x || !w || !b) break;
        float *ry = ref, *rdx = ry + M * out, *rdw = rdx + M * in, *rdb = rdw + out * in, *part = rdb + out;
        qkv_rng_fill_uniform(&r, dy, M * out, -1, 1);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < out; j++) ry[i * out + j] = b->data[j];
        qkv_gemm_bf16(0, 1, M, out, in, 1.0f, x->data, in, w->data, in, 1.0f, ry, out);
        qkv_gemm_bf16(0, 0, M, in, out, 1.0f, dy, out, w->data, in, 0.0f, rdx, in);
        if (!chunked) qkv_gemm_bf16(1, 0, out, in, M, 1.0f, dy, out, x->data, in, 1.0f, rdw, in);
        for (int64_t q = 0; chunked && q < CH; q++)
            qkv_gemm_bf16(1, 0, out, in, M / CH, 1.0f, dy + q * (M / CH) * out, out, x->data + q * (M / CH) * in,
                          in, 0.0f, part + q * out * in, in);
        for (int64_t i = 0; chunked && i < out * in; i++) {
            float s = part[i];
            for (int q = 1; q < CH; q++) s += part[q * out * in + i];
            rdw[i] = s;
        }
        qkv_ctx_reset(c);
        CHECK_OK(qkv_linear(c, x, w, b, &y));
        if (y) CHECK_OK(qkv_backward(c, y, dy));
        CHECK(y && !memcmp(y->data, ry, sizeof(float) * (size_t)(M * out)), "BF16 Linear %lld: y is not qkv_gemm_bf16's",
              (long long)M);
        CHECK(!memcmp(x->grad, rdx, sizeof(float) * (size_t)(M * in)), "BF16 Linear %lld: dx is not qkv_gemm_bf16's",
              (long long)M);
        CHECK(!memcmp(w->grad, rdw, sizeof(float) * (size_t)(out * in)),
              "BF16 Linear %lld: dW is not qkv_gemm_bf16's (%s)", (long long)M, chunked ? "4 chunks" : "whole");
        free(dy);
        free(ref);
    }
    qkv_ctx_free(c);
    qkv_arena_free(a);
}

/* qkv_linear_relu against qkv_linear then the relu activation, both in
 * BF16 mode: y, dx, dW and db must be the same bits (the one-node backward
 * masks dy, converts it to bf16 and sums db in one pass, in
 * qkv_rows_sum_into's order), but db where the two-op layer takes it
 * from its 4 chunks of rows (M >= 1024 and 4 max(in,out)): there within
 * 1e-5 of the sum of |g|. Some dy are -0 and some pre-activations are
 * exactly 0 (a zero row of x and a zero bias entry), where relu's
 * gradient is 0. */
static void test_linear_relu(void)
{
    static const int64_t shapes[3][3] = {{512, 96, 80}, {300, 128, 200}, {2048, 64, 48}}; /* M, in, out */
    qkv_ctx *c = NULL;
    qkv_arena *a = NULL;
    qkv_rng r;
    qkv_rng_seed(&r, 12);
    CHECK_OK(qkv_ctx_new(&c));
    CHECK_OK(qkv_arena_new(&a, 0));
    if (!c || !a) return;
    CHECK_OK(qkv_ctx_set_precision(c, QKV_BF16));
    for (int k = 0; k < 3; k++) {
        int64_t M = shapes[k][0], in = shapes[k][1], out = shapes[k][2], chunked = k == 2;
        int64_t xs[2] = {M, in}, ws[2] = {out, in}, bs[1] = {out};
        qkv_tensor *x = h_input(a, &r, 2, xs, 1.0f), *w = h_input(a, &r, 2, ws, 0.3f);
        qkv_tensor *b = h_input(a, &r, 1, bs, 0.5f);
        float *dy = malloc(sizeof(float) * (size_t)(M * out));
        float *want = malloc(sizeof(float) * (size_t)(M * out + M * in + out * in + out));
        if (!dy || !want || !x || !w || !b) break;
        qkv_rng_fill_uniform(&r, dy, M * out, -1, 1);
        for (int64_t i = 0; i < M * out; i += 7) dy[i] = -0.0f;
        memset(x->data + 3 * in, 0, sizeof(float) * (size_t)in); /* row 3: y = relu(b) */
        b->data[1] = 0.0f;                                          /* so y[3][1] is relu(0) */
        float *wy = want, *wdx = wy + M * out, *wdw = wdx + M * in, *wdb = wdw + out * in;
        for (int fused = 0; fused < 2; fused++) {
            qkv_ctx_reset(c);
            memset(x->grad, 0, sizeof(float) * (size_t)(M * in));
            memset(w->grad, 0, sizeof(float) * (size_t)(out * in));
            memset(b->grad, 0, sizeof(float) * (size_t)out);
            qkv_tensor *h = NULL, *y = NULL;
            if (fused) CHECK_OK(qkv_linear_relu(c, x, w, b, &y));
            else if (qkv_linear(c, x, w, b, &h) == QKV_OK) CHECK_OK(qkv_activation_apply(c, QKV_ACTIVATION_RELU, h, &y));
            if (!y) break;
            CHECK_OK(qkv_backward(c, y, dy));
            if (!fused) {
                memcpy(wy, y->data, sizeof(float) * (size_t)(M * out));
                memcpy(wdx, x->grad, sizeof(float) * (size_t)(M * in));
                memcpy(wdw, w->grad, sizeof(float) * (size_t)(out * in));
                memcpy(wdb, b->grad, sizeof(float) * (size_t)out);
                continue;
            }
            CHECK(!memcmp(y->data, wy, sizeof(float) * (size_t)(M * out)), "linear_relu %lld: y differs", (long long)M);
            CHECK(!memcmp(x->grad, wdx, sizeof(float) * (size_t)(M * in)), "linear_relu %lld: dx differs", (long long)M);
            CHECK(!memcmp(w->grad, wdw, sizeof(float) * (size_t)(out * in)), "linear_relu %lld: dW differs", (long long)M);
            int64_t bad = 0;
            for (int64_t j = 0; j < out; j++) {
                double mag = 0.0;
                for (int64_t i = 0; i < M; i++) mag += wy[i * out + j] > 0.0f ? fabs(dy[i * out + j]) : 0.0;
                if (chunked ? fabs(b->grad[j] - wdb[j]) > 1e-5 * mag + 1e-30 : bits(b->grad[j]) != bits(wdb[j])) bad++;
            }
            CHECK(bad == 0, "linear_relu %lld: db differs in %lld of %lld (%s)", (long long)M, (long long)bad,
                  (long long)out, chunked ? "bound" : "bits");
            CHECK(y->data[3 * out + 1] == 0.0f, "linear_relu: relu(0) is %g", y->data[3 * out + 1]);
        }
        free(dy);
        free(want);
    }
    qkv_ctx_free(c);
    qkv_arena_free(a);
}

/* ---- training in BF16 tracks FP32 ----------------------------------------- */

/* A TransformerEncoderLayer(32, 4, 64) learns a fixed random one (the
 * teacher) on random inputs (L 16, N 8): MSE, AdamW lr 3e-3, 80 steps, the
 * same initialisation and data in both precisions. Returns the last loss
 * and the first in *first (NaN on failure). */
static double train_run(qkv_precision prec, double *first)
{
    enum { E = 32, H = 4, F = 64, L = 16, N = 8, STEPS = 80 };
    double last = NAN;
    *first = NAN;
    qkv_params *pt = NULL, *ps = NULL;
    qkv_ctx *c = NULL;
    qkv_arena *a = NULL;
    qkv_optim *o = NULL;
    qkv_rng r;
    qkv_transformer_encoder_layer teacher, student;
    qkv_transformer_layer_opts lo = qkv_transformer_layer_opts_default(E, H);
    lo.dim_feedforward = F;
    lo.dropout = 0;
    qkv_optim_opts oo = qkv_optim_adamw_opts_default();
    oo.lr = 3e-3;
    if (qkv_params_new(&pt) || qkv_params_new(&ps) || qkv_ctx_new(&c) || qkv_arena_new(&a, 0)) goto done;
    qkv_rng_seed(&r, 21);
    if (qkv_transformer_encoder_layer_init(&teacher, &lo, pt, "", &r)) goto done;
    qkv_rng_seed(&r, 22);
    if (qkv_transformer_encoder_layer_init(&student, &lo, ps, "", &r) || qkv_optim_new(&o, ps, &oo)) goto done;
    qkv_tensor *x = NULL, *y = NULL;
    int64_t xs[3] = {L, N, E};
    if (qkv_tensor_new(a, QKV_F32, 3, xs, &x) || qkv_tensor_new(a, QKV_F32, 3, xs, &y)) goto done;
    qkv_ctx_set_training(c, 1);
    for (int step = 0; step < STEPS; step++) {
        qkv_rng_seed(&r, 1000 + (uint64_t)step);
        qkv_rng_fill_normal(&r, x->data, L * N * E, 0, 1);
        qkv_tensor *out, *loss;
        qkv_ctx_reset(c);
        if (qkv_ctx_set_precision(c, QKV_FP32)) goto done; /* the targets: FP32 */
        qkv_ctx_set_grad(c, 0);
        if (qkv_transformer_encoder_layer_forward(c, &teacher, x, NULL, &out)) goto done;
        memcpy(y->data, out->data, sizeof(float) * L * N * E);
        qkv_ctx_set_grad(c, 1);
        qkv_ctx_reset(c);
        if (qkv_ctx_set_precision(c, prec)) goto done;
        if (qkv_transformer_encoder_layer_forward(c, &student, x, NULL, &out) ||
            qkv_mse_loss(c, out, y, QKV_REDUCTION_MEAN, &loss) || qkv_backward(c, loss, NULL) || qkv_optim_step(o))
            goto done;
        qkv_params_zero_grad(ps);
        if (step == 0) *first = loss->data[0];
        last = loss->data[0];
    }
done:
    qkv_optim_free(o);
    qkv_arena_free(a);
    qkv_ctx_free(c);
    qkv_params_free(ps);
    qkv_params_free(pt);
    return last;
}

static void test_training(void)
{
    double f32_first, b16_first;
    double f32 = train_run(QKV_FP32, &f32_first), b16 = train_run(QKV_BF16, &b16_first);
    printf("training: loss %.6f -> %.6f in FP32, %.6f -> %.6f in BF16\n", f32_first, f32, b16_first, b16);
    CHECK(f32 < 0.8 * f32_first && b16 < 0.8 * b16_first, "training: the loss did not fall (%g -> %g, %g -> %g)",
          f32_first, f32, b16_first, b16);
    CHECK(fabs(b16 - f32) <= 0.05 * f32, "training: BF16's final loss %g is not within 5%% of FP32's %g", b16, f32);
    CHECK(b16 != f32, "training: BF16 gave FP32's loss exactly: not in BF16");
}

int main(void)
{
    test_training();
    test_modes();
    test_linear_kept();
    test_linear_relu();
    test_gemm();
    test_gemm_bias_blocks();
    if (qkv_bf16_dot_supported())
        test_blocked_pack(); /* the AVX-512 BF16 pack; the library calls it only there */
    else
        printf("test_bf16: the blocked pack not tested: this CPU has no bf16 dot products\n");
    test_gemm_vnni();
    char dir[] = "/tmp/qkv_bf16_XXXXXX";
    if (h_oracle_run("bf16_oracle.py", dir, NULL)) {
        test_convert(dir);
        char path[600];
        snprintf(path, sizeof path, "%s/linear.count", dir);
        FILE *f = fopen(path, "r");
        int n = 0;
        CHECK(f && fscanf(f, "%d", &n) == 1 && n > 0, "linear.count unreadable");
        if (f) fclose(f);
        for (int k = 0; k < n; k++) linear_case(dir, k);
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        CHECK(system(cmd) == 0, "rm %s", dir);
    }
    return h_finish("test_bf16");
}
