/* bf16_gemm.c: bf16 GEMM candidates (bf16 inputs, FP32 accumulation and
 * output) on the products of a TransformerEncoderLayer(512, 8, 2048)
 * training step at (B, L) = (8, 128), i.e. M = 1024 tokens, against the
 * machine's bf16 peak measured in this process (vdpbf16ps chains, like
 * bench/peak.h does for FP32 FMAs) and against qkv's FP32 path (qkv_gemm:
 * OpenBLAS sgemm split over qkv's OpenMP threads).
 *   build/bench/bf16_gemm [-r REPS]
 *   build/bench/bf16_gemm --step B L [-r REPS]
 *   build/bench/bf16_gemm --sweep [-r REPS]
 *   build/bench/bf16_gemm --rnn [-r REPS]
 * The second form times the TransformerEncoderLayer(512, 8, 2048) training
 * step (dropout 0; forward, backward, AdamW) at (B, L) in FP32 and in BF16
 * mode (qkv_ctx_set_precision), interleaved in one process: best of REPS
 * rounds of 3 steps each, and their ratio. The third times qkv_gemm
 * against qkv_gemm_bf16 (conversion included) on small and thin products
 * (x W^T with M rows), interleaved, to show where bf16 stops paying. The
 * fourth times a GRU and an LSTM layer (batch 64, input and hidden 256,
 * length 12: the translation model's recurrent layers), forward and
 * forward + backward, in FP32 and BF16 mode interleaved; then a GRU step's
 * product h W_hh^T (64 x 768 x 256) in FP32, in bf16 converting W_hh in
 * the call (qkv_gemm_bf16), in bf16 from W_hh converted beforehand
 * (qkv_gemm_bf16_pre) and from W_hh packed beforehand (qkv_gemm_bf16_vnni,
 * what the layer does where the CPU has AVX512-BF16), interleaved.
 * Candidates: oneDNN's matmul primitive (Debian's libdnnl-dev) and
 * libxsmm's JIT bf16 kernels (libxsmm-dev; single-thread kernels that this
 * file tiles over OpenMP threads, B packed in libxsmm's VNNI pairs), each
 * built in when its header is there. Timings exclude the FP32 -> bf16
 * conversion of the inputs (one extra column gives qkv_gemm_bf16, which
 * converts as it goes). Repetitions interleave candidates and peak probes;
 * each figure is the best of REPS. One more FP32 column: one cblas_sgemm
 * threaded by OpenBLAS itself (openblas_set_num_threads), against qkv's
 * arrangement (OpenBLAS at one thread, the product split over qkv's OpenMP
 * threads); run it with LD_LIBRARY_PATH at Debian's OpenMP build
 * (libopenblas0-openmp) to compare that build (docs/bf16.md). */
#include <cblas.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench_util.h"
#include "peak.h"
#include "kernels/bf16.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_bf16_vnni.h"
#include "qkv/transformer.h"
#if __has_include(<dnnl.h>) && defined(QKV_BENCH_DNNL)
#include <dnnl.h>
#define HAVE_DNNL 1
#endif
#if __has_include(<libxsmm.h>) && defined(QKV_BENCH_XSMM)
#include <libxsmm.h>
#define HAVE_XSMM 1
#endif

/* One thread's chains of 512-bit bf16 dot products: 16 chains cover the
 * instruction's latency; each does 16 lanes x 2 products = 64 FLOP. */
__attribute__((target("avx512f,avx512bf16"))) static float bf16_chains(long iters)
{
    __m512 a[16];
    __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3400);
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps((float)i);
    for (long n = 0; n < iters; n++)
        for (int i = 0; i < 16; i++) a[i] = _mm512_dpbf16_ps(a[i], x, y);
    __m512 s = a[0];
    for (int i = 1; i < 16; i++) s = _mm512_add_ps(s, a[i]);
    return _mm512_reduce_add_ps(s);
}

static double bf16_peak(int threads)
{
    if (!__builtin_cpu_supports("avx512bf16")) return 0;
    return bench_chains_peak(threads, 5000000, bf16_chains, 16 * 64);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC push_options
#pragma GCC target("amx-tile,amx-bf16") /* this function alone; it runs where qkv_amx_usable() */
#include "kernels/amx.h"
/* One thread's chains of AMX bf16 tile products: six 16x16 FP32 tiles
 * each take a 16x32 by 32x16 product (16384 FLOP) per round. */
static float amx_chains(long iters)
{
    uint16_t a[16 * 32], b[16 * 32];
    float c[16 * 16];
    for (int i = 0; i < 16 * 32; i++) a[i] = 0x3f80, b[i] = 0x3400; /* 1 and 2^-23 */
    amx_begin();
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_zero(4);
    _tile_zero(5);
    _tile_loadd(6, a, 64);
    _tile_loadd(7, b, 64);
    for (long n = 0; n < iters; n++) {
        _tile_dpbf16ps(0, 6, 7);
        _tile_dpbf16ps(1, 6, 7);
        _tile_dpbf16ps(2, 6, 7);
        _tile_dpbf16ps(3, 6, 7);
        _tile_dpbf16ps(4, 6, 7);
        _tile_dpbf16ps(5, 6, 7);
    }
    _tile_stored(0, c, 64);
    amx_end();
    return c[0];
}
#pragma GCC pop_options
#define AMX_CHAINS 1
#endif

/* The AMX tiles' bf16 peak, 0 where the CPU or the OS lends none. */
static double amx_peak(int threads)
{
#if defined(AMX_CHAINS)
    if (qkv_amx_usable()) return bench_chains_peak(threads, 1000000, amx_chains, 6 * 16384.0);
#endif
    return 0;
}


/* The step's products (Linear: y = x W^T; dx = dy W; dW = dy^T x). */
static const bench_shape shapes[] = {
    {"qkv fwd  x W^T", 0, 1, 1024, 1536, 512},   {"qkv dx   dy W", 0, 0, 1024, 512, 1536},
    {"qkv dW   dy^T x", 1, 0, 1536, 512, 1024},  {"out fwd", 0, 1, 1024, 512, 512},
    {"out dx", 0, 0, 1024, 512, 512},            {"out dW", 1, 0, 512, 512, 1024},
    {"ff1 fwd", 0, 1, 1024, 2048, 512},          {"ff1 dx", 0, 0, 1024, 512, 2048},
    {"ff1 dW", 1, 0, 2048, 512, 1024},           {"ff2 fwd", 0, 1, 1024, 512, 2048},
    {"ff2 dx", 0, 0, 1024, 2048, 512},           {"ff2 dW", 1, 0, 512, 2048, 1024},
};
#define NSHAPE (int)(sizeof shapes / sizeof shapes[0])

#ifdef HAVE_DNNL
static dnnl_engine_t eng;
static dnnl_stream_t stream;
/* The memory descriptors of one shape's op(A) (M,K) and op(B) (K,N), bf16,
 * and C (M,N), f32. */
static void dnnl_descs(const bench_shape *s, dnnl_memory_desc_t *a, dnnl_memory_desc_t *b, dnnl_memory_desc_t *c)
{
    int64_t lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    dnnl_dims_t ad = {s->M, s->K}, as = {s->ta ? 1 : lda, s->ta ? lda : 1};
    dnnl_dims_t bd = {s->K, s->N}, bs = {s->tb ? 1 : ldb, s->tb ? ldb : 1};
    dnnl_dims_t cd = {s->M, s->N}, cs = {s->N, 1};
    dnnl_memory_desc_init_by_strides(a, 2, ad, dnnl_bf16, as);
    dnnl_memory_desc_init_by_strides(b, 2, bd, dnnl_bf16, bs);
    dnnl_memory_desc_init_by_strides(c, 2, cd, dnnl_f32, cs);
}

/* A matmul primitive for one shape: C (M,N) f32 = op(A) op(B), bf16 inputs. */
static dnnl_primitive_t dnnl_make(const bench_shape *s)
{
    dnnl_memory_desc_t a, b, c;
    dnnl_descs(s, &a, &b, &c);
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t p = NULL;
    if (dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) != dnnl_success) return NULL;
    if (dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL) != dnnl_success) return NULL;
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    static int said;
    if (!said++) printf("oneDNN matmul implementation: %s\n", impl ? impl : "?");
    if (dnnl_primitive_create(&p, pd) != dnnl_success) p = NULL;
    dnnl_primitive_desc_destroy(pd);
    return p;
}

static void dnnl_run(dnnl_primitive_t p, const bench_shape *s, uint16_t *A, uint16_t *B, float *C)
{
    dnnl_memory_desc_t a, b, c;
    dnnl_descs(s, &a, &b, &c);
    dnnl_memory_t am, bm, cm;
    dnnl_memory_create(&am, &a, eng, A);
    dnnl_memory_create(&bm, &b, eng, B);
    dnnl_memory_create(&cm, &c, eng, C);
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
    dnnl_primitive_execute(p, stream, 3, args);
    dnnl_stream_wait(stream);
    dnnl_memory_destroy(am);
    dnnl_memory_destroy(bm);
    dnnl_memory_destroy(cm);
}
#endif

#ifdef HAVE_XSMM
/* libxsmm is column-major: C^T (N,M) = B^T (N,K) A^T (K,M). libxsmm's "A"
 * is our B, packed in VNNI pairs Bv[k/2][n][k%2]; its "B" is our A row-major
 * (M,K), i.e. A^T column-major with ld K. Tiles of 64 x 64 of C, full K. */
enum { XT = 64 };
static libxsmm_bsmmfunction xsmm_make(const bench_shape *s)
{
    libxsmm_blasint m = XT, n = XT, k = (libxsmm_blasint)s->K;
    libxsmm_blasint lda = (libxsmm_blasint)s->N, ldb = (libxsmm_blasint)s->K, ldc = (libxsmm_blasint)s->N;
    float alpha = 1, beta = 0;
    int flags = LIBXSMM_GEMM_FLAG_VNNI_A | LIBXSMM_GEMM_FLAG_BETA_0;
    return libxsmm_bsmmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, NULL);
}

static void xsmm_run(libxsmm_bsmmfunction f, const bench_shape *s, const uint16_t *A, const uint16_t *Bv, float *C)
{
    int64_t tm = s->M / XT, tn = s->N / XT;
#pragma omp parallel for
    for (int64_t t = 0; t < tm * tn; t++) {
        int64_t i = t / tn * XT, j = t % tn * XT;
        f((const libxsmm_bfloat16 *)(Bv + 2 * j), (const libxsmm_bfloat16 *)(A + i * s->K), C + i * s->N + j);
    }
}
#endif

static float rnd(uint64_t *st)
{
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*st >> 40) & 0xffffff) / 16777216.0f * 2 - 1;
}

static double rel_err(const float *C, const float *R, int64_t n)
{
    double e = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)C[i] - R[i]));
        m = fmax(m, fabs((double)R[i]));
    }
    return e / m;
}

/* The encoder layer's training step, FP32 against BF16, interleaved. */
static int run_step(long long B, long long L, int reps)
{
    const int64_t E = 512, H = 8, F = 2048;
    qkv_params *p;
    qkv_ctx *c[2];
    qkv_optim *o;
    qkv_rng r;
    qkv_rng_seed(&r, 1);
    qkv_transformer_encoder_layer layer;
    bench_encoder_new(E, H, F, &r, &p, &layer, &o);
    for (int k = 0; k < 2; k++) {
        TRY(qkv_ctx_new(&c[k]));
        qkv_ctx_set_training(c[k], 1);
        TRY(qkv_ctx_set_precision(c[k], k ? QKV_BF16 : QKV_FP32));
    }
    size_t n = (size_t)(L * B * E);
    float *x = malloc(n * 4), *dout = malloc(n * 4);
    if (!x || !dout) return 1;
    qkv_rng_fill_normal(&r, x, (int64_t)n, 0, 1);
    qkv_rng_fill_normal(&r, dout, (int64_t)n, 0, 1);
    double best[2] = {1e30, 1e30};
    for (int rep = -1; rep < reps; rep++) /* rep -1: warm-up */
        for (int k = 0; k < 2; k++) {
            double t0 = bench_now();
            for (int it = 0; it < 3; it++) {
                qkv_ctx_reset(c[k]);
                qkv_tensor *xt, *out;
                TRY(qkv_tensor_wrap(qkv_ctx_arena(c[k]), x, 3, (int64_t[]){L, B, E}, &xt));
                TRY(qkv_transformer_encoder_layer_forward(c[k], &layer, xt, NULL, &out));
                TRY(qkv_backward(c[k], out, dout));
                TRY(qkv_optim_step(o));
                qkv_params_zero_grad(p);
            }
            double ms = (bench_now() - t0) * 1e3 / 3;
            if (rep >= 0 && ms < best[k]) best[k] = ms;
        }
    printf("TransformerEncoderLayer(512, 8, 2048) training step at (B, L) = (%lld, %lld), %d threads, best of %d:\n"
           "  FP32 %.2f ms, BF16 %.2f ms: BF16 is %.2fx FP32's speed (oneDNN %s)\n",
           B, L, omp_get_max_threads(), reps, best[0], best[1], best[0] / best[1],
           qkv_gemm_bf16_accelerated() ? "used" : "not used: the fallback");
    free(x), free(dout);
    qkv_optim_free(o);
    qkv_ctx_free(c[0]);
    qkv_ctx_free(c[1]);
    qkv_params_free(p);
    return 0;
}

/* A GRU and an LSTM layer, forward and forward + backward, FP32 against
 * BF16 mode, interleaved: best of REPS rounds of 5 calls each. */
static int run_rnn(int reps)
{
    const int64_t N = 64, In = 256, H = 256, L = 12;
    float *x = malloc((size_t)(L * N * In) * 4), *dy = malloc((size_t)(L * N * H) * 4);
    if (!x || !dy) return 1;
    qkv_rng r;
    qkv_rng_seed(&r, 1);
    qkv_rng_fill_normal(&r, x, L * N * In, 0, 1);
    qkv_rng_fill_normal(&r, dy, L * N * H, 0, 1);
    printf("GRU / LSTM layer, (L, N, input, hidden) = (%lld, %lld, %lld, %lld), %d threads, best of %d rounds "
           "of 5 calls, ms per call:\n", (long long)L, (long long)N, (long long)In, (long long)H,
           omp_get_max_threads(), reps);
    for (int lstm = 0; lstm < 2; lstm++) {
        qkv_params *p;
        qkv_ctx *c[2];
        qkv_nn_rnn m;
        qkv_rnn_opts ro = qkv_rnn_opts_default(In, H);
        TRY(qkv_params_new(&p));
        TRY((lstm ? qkv_nn_lstm_init : qkv_nn_gru_init)(&m, &ro, p, "", &r));
        for (int k = 0; k < 2; k++) {
            TRY(qkv_ctx_new(&c[k]));
            TRY(qkv_ctx_set_precision(c[k], k ? QKV_BF16 : QKV_FP32));
        }
        double best[2][2] = {{1e30, 1e30}, {1e30, 1e30}}; /* [backward][precision] */
        for (int rep = -1; rep < reps; rep++) /* rep -1: warm-up */
            for (int bw = 0; bw < 2; bw++)
                for (int k = 0; k < 2; k++) {
                    double t0 = bench_now();
                    for (int it = 0; it < 5; it++) {
                        qkv_ctx_reset(c[k]);
                        qkv_ctx_set_grad(c[k], bw);
                        qkv_tensor *xt, *y;
                        TRY(qkv_tensor_wrap(qkv_ctx_arena(c[k]), x, 3, (int64_t[]){L, N, In}, &xt));
                        if (lstm) TRY(qkv_nn_lstm_forward(c[k], &m, xt, NULL, NULL, NULL, &y, NULL, NULL));
                        else TRY(qkv_nn_gru_forward(c[k], &m, xt, NULL, NULL, &y, NULL));
                        if (bw) TRY(qkv_backward(c[k], y, dy));
                        if (bw) qkv_params_zero_grad(p);
                    }
                    double ms = (bench_now() - t0) * 1e3 / 5;
                    if (rep >= 0) best[bw][k] = fmin(best[bw][k], ms);
                }
        for (int bw = 0; bw < 2; bw++)
            printf("  %s %-18s FP32 %7.3f ms, BF16 %7.3f ms: BF16 is %.2fx FP32's speed\n", lstm ? "LSTM" : "GRU ",
                   bw ? "forward + backward" : "forward", best[bw][0], best[bw][1], best[bw][0] / best[bw][1]);
        qkv_ctx_free(c[0]);
        qkv_ctx_free(c[1]);
        qkv_nn_gru_free(&m); /* the same for an LSTM */
        qkv_params_free(p);
    }
    /* one step's product, h (N,H) W_hh^T, W_hh (3H,H) */
    int64_t G = 3 * H;
    float *w = malloc((size_t)(G * H) * 4), *C = malloc((size_t)(N * G) * 4);
    uint16_t *w16 = malloc((size_t)(G * H) * 2), *wp = malloc((size_t)qkv_bf16_vnni_len(H, G) * 2);
    if (!w || !C || !w16 || !wp) return 1;
    qkv_rng_fill_normal(&r, w, G * H, 0, 0.06f);
    qkv_bf16_from_floats(w, w16, G * H);
    int vnni = qkv_gemm_bf16_vnni_usable(N, G, H);
    if (vnni) qkv_bf16_vnni_pack(1, H, G, w, wp);
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    for (int rep = -1; rep < reps; rep++)
        for (int k = 0; k < 3 + vnni; k++) {
            double t0 = bench_now();
            for (int it = 0; it < 200; it++) {
                if (k == 0) qkv_gemm(0, 1, N, G, H, 1.0f, x, H, w, H, 0.0f, C, G);
                if (k == 1) qkv_gemm_bf16(0, 1, N, G, H, 1.0f, x, H, w, H, 0.0f, C, G);
                if (k == 2) qkv_gemm_bf16_pre(0, 1, N, G, H, 1.0f, x, NULL, H, NULL, w16, H, 0.0f, C, G);
                if (k == 3) qkv_gemm_bf16_vnni(N, G, H, x, wp, 0.0f, C);
            }
            if (rep >= 0) best[k] = fmin(best[k], (bench_now() - t0) / 200 * 1e6);
        }
    printf("  a GRU step's h W_hh^T (%lld x %lld x %lld), us per call: FP32 %.1f, bf16 converting W_hh %.1f, "
           "bf16 from W_hh converted once %.1f", (long long)N, (long long)G, (long long)H, best[0], best[1],
           best[2]);
    if (vnni) printf(", bf16 from W_hh packed once (qkv_gemm_bf16_vnni) %.1f\n", best[3]);
    else printf(" (qkv_gemm_bf16_vnni does not run here)\n");
    free(w), free(C), free(w16), free(wp);
    free(x), free(dy);
    return 0;
}

/* qkv_gemm against qkv_gemm_bf16 on small and thin products. */
static int run_sweep(int reps)
{
    static const int64_t sz[][3] = {{16, 16, 16},   {32, 32, 32},    {64, 64, 64},    {128, 128, 128},
                                    {256, 256, 256}, {512, 512, 512}, {1024, 1024, 1024}, {1, 2048, 512},
                                    {4, 2048, 512},  {16, 2048, 512}, {64, 2048, 512},  {256, 2048, 512}};
    int n = (int)(sizeof sz / sizeof sz[0]);
    float *A = malloc(1024 * 1024 * 4), *B = malloc(2048 * 1024 * 4), *C = malloc(1024 * 2048 * 4);
    if (!A || !B || !C) return 1;
    uint64_t st = 3;
    for (int64_t i = 0; i < 1024 * 1024; i++) A[i] = rnd(&st);
    for (int64_t i = 0; i < 2048 * 1024; i++) B[i] = rnd(&st);
    printf("x W^T (M,K)x(N,K)^T, %d threads, best of %d rounds (each: calls for ~20 ms):\n", omp_get_max_threads(),
           reps);
    printf("%6s %5s %5s | %12s | %12s | bf16 speed-up\n", "M", "N", "K", "FP32 us", "bf16 us");
    for (int i = 0; i < n; i++) {
        int64_t M = sz[i][0], N = sz[i][1], K = sz[i][2];
        double fl = 2.0 * M * N * K, best[2] = {1e30, 1e30};
        int calls = (int)(2e-2 * 50e9 / fl) + 1;
        if (calls > 20000) calls = 20000;
        for (int r = 0; r < reps; r++)
            for (int k = 0; k < 2; k++) {
                double t0 = bench_now();
                for (int c = 0; c < calls; c++)
                    (k ? qkv_gemm_bf16 : qkv_gemm)(0, 1, M, N, K, 1, A, K, B, K, 0, C, N);
                best[k] = fmin(best[k], (bench_now() - t0) / calls);
            }
        printf("%6lld %5lld %5lld | %12.1f | %12.1f | %.2fx\n", (long long)M, (long long)N, (long long)K,
               best[0] * 1e6, best[1] * 1e6, best[0] / best[1]);
    }
    free(A), free(B), free(C);
    return 0;
}

int main(int argc, char **argv)
{
    int reps = 5;
    long long sB = 0, sL = 0;
    int sweep = 0, rnn = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sweep")) sweep = 1;
        else if (!strcmp(argv[i], "--rnn")) rnn = 1;
        else if (!strcmp(argv[i], "--step") && i + 2 < argc) sB = atoll(argv[i + 1]), sL = atoll(argv[i + 2]), i += 2;
        else reps = 0;
    }
    if (reps < 1 || reps > 100 || sB < 0 || sL < 0 || (sB > 0) != (sL > 0) || sB * sL > (1 << 20)) {
        fprintf(stderr, "usage: bf16_gemm [-r REPS] | --step B L [-r REPS] | --sweep [-r REPS] | --rnn [-r REPS]\n");
        return 2;
    }
    if (sB) return run_step(sB, sL, reps);
    if (sweep) return run_sweep(reps);
    if (rnn) return run_rnn(reps);
    int nt = omp_get_max_threads();
#ifdef HAVE_DNNL
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) || dnnl_stream_create(&stream, eng, dnnl_stream_default_flags)) {
        fprintf(stderr, "oneDNN: no CPU engine\n");
        return 1;
    }
    dnnl_primitive_t dp[NSHAPE];
    for (int i = 0; i < NSHAPE; i++) dp[i] = dnnl_make(&shapes[i]);
#endif
#ifdef HAVE_XSMM
    libxsmm_init();
    printf("libxsmm target: %s\n", libxsmm_get_target_arch());
    libxsmm_bsmmfunction xf[NSHAPE];
    for (int i = 0; i < NSHAPE; i++) xf[i] = xsmm_make(&shapes[i]);
#endif
    int64_t big = 2048 * 1536;
    float *A = malloc(big * 4), *B = malloc(big * 4), *C = malloc(big * 4), *R = malloc(big * 4);
    float *Ar = malloc(big * 4), *Br = malloc(big * 4);
    uint16_t *Ah = malloc(big * 2), *Bh = malloc(big * 2), *Bv = malloc(big * 2);
    if (!A || !B || !C || !R || !Ar || !Br || !Ah || !Bh || !Bv) return 1;
    uint64_t st = 1;
    for (int64_t i = 0; i < big; i++) A[i] = rnd(&st), B[i] = rnd(&st);
    double best[NSHAPE][5], pk32 = 0, pk16 = 0, pkamx = 0;
    for (int i = 0; i < NSHAPE; i++)
        for (int j = 0; j < 5; j++) best[i][j] = 1e30;
    double err[NSHAPE][3] = {{0}};
    for (int r = 0; r < reps; r++) {
        pk32 = fmax(pk32, bench_fma_peak(nt));
        pk16 = fmax(pk16, bf16_peak(nt));
        pkamx = fmax(pkamx, amx_peak(nt));
        for (int i = 0; i < NSHAPE; i++) {
            const bench_shape *s = &shapes[i];
            int64_t lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
            int64_t na = s->M * s->K, nb = s->K * s->N;
            double t;
            /* FP32: qkv_gemm */
            t = bench_now();
            qkv_gemm(s->ta, s->tb, s->M, s->N, s->K, 1, A, lda, B, ldb, 0, C, s->N);
            best[i][0] = fmin(best[i][0], bench_now() - t);
            /* FP32: OpenBLAS's own threads, one call */
            openblas_set_num_threads(nt);
            t = bench_now();
            cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans,
                        (blasint)s->M, (blasint)s->N, (blasint)s->K, 1, A, (blasint)lda, B, (blasint)ldb, 0, C,
                        (blasint)s->N);
            best[i][4] = fmin(best[i][4], bench_now() - t);
            openblas_set_num_threads(1);
            /* qkv_gemm_bf16: conversion included */
            t = bench_now();
            qkv_gemm_bf16(s->ta, s->tb, s->M, s->N, s->K, 1, A, lda, B, ldb, 0, C, s->N);
            best[i][1] = fmin(best[i][1], bench_now() - t);
            if (r == 0) { /* reference on bf16-rounded inputs (FP32 sgemm) */
                qkv_bf16_round_floats(A, Ar, na);
                qkv_bf16_round_floats(B, Br, nb);
                qkv_gemm(s->ta, s->tb, s->M, s->N, s->K, 1, Ar, lda, Br, ldb, 0, R, s->N);
                err[i][0] = rel_err(C, R, s->M * s->N);
            }
            qkv_bf16_from_floats(A, Ah, na);
            qkv_bf16_from_floats(B, Bh, nb);
#ifdef HAVE_DNNL
            if (dp[i]) {
                t = bench_now();
                dnnl_run(dp[i], s, Ah, Bh, C);
                best[i][2] = fmin(best[i][2], bench_now() - t);
                if (r == 0) err[i][1] = rel_err(C, R, s->M * s->N);
            }
#endif
#ifdef HAVE_XSMM
            if (xf[i]) {
                /* our A row-major (M,K) and B row-major (K,N), packed (not timed) */
                for (int64_t m = 0; m < s->M; m++)
                    for (int64_t k = 0; k < s->K; k++) Ah[m * s->K + k] = qkv_bf16_from_float(s->ta ? A[k * lda + m] : A[m * lda + k]);
                for (int64_t k = 0; k < s->K; k++)
                    for (int64_t n = 0; n < s->N; n++)
                        Bv[((k >> 1) * s->N + n) * 2 + (k & 1)] = qkv_bf16_from_float(s->tb ? B[n * ldb + k] : B[k * ldb + n]);
                t = bench_now();
                xsmm_run(xf[i], s, Ah, Bv, C);
                best[i][3] = fmin(best[i][3], bench_now() - t);
                if (r == 0) err[i][2] = rel_err(C, R, s->M * s->N);
            }
#endif
        }
    }
    printf("threads %d; peaks in this process: FP32 FMA %.0f GFLOP/s, bf16 vdpbf16ps %.0f GFLOP/s (best of %d)\n",
           nt, pk32, pk16, reps);
    printf("OpenBLAS: %s, %s threading\n", openblas_get_config(),
           openblas_get_parallel() == 2 ? "OpenMP" : openblas_get_parallel() == 1 ? "pthread" : "no");
    printf("%-16s %6s %5s %5s | %-16s | %-16s | %-16s | %-16s | %-16s | max rel err vs FP32 on rounded inputs\n",
           "product", "M", "N", "K", "FP32 qkv_gemm", "qkv_gemm_bf16", "oneDNN bf16", "libxsmm bf16",
           "FP32 BLAS thr.");
    double tot[5] = {0};
    double fl_tot = 0;
    for (int i = 0; i < NSHAPE; i++) {
        const bench_shape *s = &shapes[i];
        double fl = 2.0 * s->M * s->N * s->K;
        fl_tot += fl;
        printf("%-16s %6lld %5lld %5lld", s->name, (long long)s->M, (long long)s->N, (long long)s->K);
        for (int j = 0; j < 5; j++) {
            if (best[i][j] > 1e29) {
                printf(" | %-16s", "n/a");
                continue;
            }
            tot[j] += best[i][j];
            double g = fl / best[i][j] * 1e-9;
            printf(" | %5.0f GF %4.0f%%  ", g, pk16 > 0 ? 100 * g / pk16 : 0);
        }
        printf(" | %.1e %.1e %.1e\n", err[i][0], err[i][1], err[i][2]);
    }
    printf("%-30s", "all 12 products");
    for (int j = 0; j < 5; j++) {
        double g = tot[j] > 0 ? fl_tot / tot[j] * 1e-9 : 0;
        printf(" | %5.0f GF %4.0f%%  ", g, pk16 > 0 ? 100 * g / pk16 : 0);
    }
    printf("\n(%% = of the bf16 peak; the FP32 FMA peak is %.0f%% of it)\n", pk16 > 0 ? 100 * pk32 / pk16 : 0);
    if (pkamx > 0) /* the tiles' peak, where this CPU has them: what oneDNN's products run on */
        printf("AMX tiles (tdpbf16ps) peak in this process: %.0f GFLOP/s; oneDNN's 12 products are %.0f%% of it\n",
               pkamx, tot[2] > 0 ? 100 * fl_tot / tot[2] * 1e-9 / pkamx : 0);
    return 0;
}
