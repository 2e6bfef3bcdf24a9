/* layers_bench.c: qkv's side of the benchmark suite (bench/suite.sh), one
 * configuration per process so that peak memory is per configuration.
 *
 *   build/bench/layers_bench peak [threads]      FP32 FMA peak, GFLOP/s (default 2 threads)
 *   build/bench/layers_bench --one CONFIG        time one configuration
 *   build/bench/layers_bench --list              the default configurations
 *
 * CONFIG names (bench/torch_peer.py takes the same ones):
 *   attn_L<L>_D<D>[_causal]      scaled dot-product attention, B=1, 8 heads, head_dim D,
 *                                forward and backward (two rows)
 *   attnfwd_L<L>_D<D>[_causal]   forward only (the --sweep of suite.sh)
 *   mha_B<B>_L<L>[_causal]       MultiheadAttention(512, 8) forward, need_weights=0, no grad
 *   enc_B<B>_L<L>                TransformerEncoderLayer(512, 8, 2048), dropout 0:
 *                                forward + backward + AdamW step
 *   attnbf16_[B<B>_]L<L>_D<D>[_causal]  the same attention (batch B, default 1) in the FP32
 *                                and the BF16 mode (bf16 flash attention) in one process,
 *                                interleaved, best of 5 rounds; rows _fp32_fwd/_bwd and
 *                                _bf16_fwd/_bwd, then the speed-ups on a # line; qkv only
 *   decode_S<S>_D<D>             the decoding kernel (src/kernels/attention_decode.c):
 *                                one query, 8 heads, over a KV cache of S keys, in
 *                                fp32, fp16 and bf16 (bf16 on AVX-512 and on AVX2);
 *                                qkv only (not in --list: torch_peer.py has no peer)
 *
 * QKV_BENCH_PRECISION=bf16 in the environment runs the MHA and encoder
 * configurations in the BF16 mode (qkv_ctx_set_precision: bf16 matmuls,
 * docs/bf16.md), to compare with suite.sh's TORCH_VARIANTS=bf16.
 *
 * Each run warms up once (except forward-only attention over 20 GFLOP),
 * then times iterations (omp_get_wtime) until 0.5 s have passed (at least
 * 1, at most 10) and prints, per row,
 *   ROW <label> <median ms> <flops per iteration> <peak RSS growth MiB>
 * Peak RSS growth is VmHWM (the process's peak resident set) minus VmRSS
 * before the configuration's first allocation. The attention forward row
 * reads VmHWM after the first forward (before any backward).
 *
 * FLOP counts (2 per multiply-add):
 *   attention forward  4*B*H*L*S*D        (QK^T and PV), halved when causal
 *   attention backward 2.5 x the forward  (QK^T recomputed, dV, dP, dQ, dK)
 *   MHA forward        4 * 2*B*L*E*E      (q, k, v, out projections) + attention forward
 *   encoder forward    2*B*L*(4*E*E + 2*E*F) + attention forward (4*B*L*L*E)
 *   encoder step       3 x the encoder forward */
#define _POSIX_C_SOURCE 200809L
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench_util.h"
#include "kernels/attention.h"
#include "kernels/attention_decode.h"
#include "kernels/half.h"
#include "peak.h"
#include "qkv.h"
#include "qkv/transformer.h"

#define CHECK(call)                                                                   \
    do {                                                                              \
        if ((call) != QKV_OK) {                                                       \
            fprintf(stderr, "layers_bench: %s failed: %s\n", #call, qkv_last_error()); \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

static double status_mib(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double v = 0;
    size_t n = strlen(key);
    if (!f) return 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') {
            v = atof(line + n + 1) / 1024.0; /* kB */
            break;
        }
    fclose(f);
    return v;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define MAXIT 10
static const double MIN_TIME = 0.5;

/* ---- attention ------------------------------------------------------------ */

typedef struct {
    int64_t B, H, L, D;
    int causal, backward;
    float *q, *k, *v, *dout;
    qkv_ctx *c;
    qkv_tensor *out;
} attn_t;

static void attn_forward(attn_t *a)
{
    qkv_ctx_reset(a->c);
    qkv_arena *ar = qkv_ctx_arena(a->c);
    int64_t shape[4] = {a->B, a->H, a->L, a->D};
    qkv_tensor *q, *k, *v;
    CHECK(qkv_tensor_wrap(ar, a->q, 4, shape, &q));
    CHECK(qkv_tensor_wrap(ar, a->k, 4, shape, &k));
    CHECK(qkv_tensor_wrap(ar, a->v, 4, shape, &v));
    q->requires_grad = k->requires_grad = v->requires_grad = a->backward;
    qkv_sdpa_opts o = qkv_sdpa_opts_default();
    o.causal = a->causal ? QKV_CAUSAL_TOP_LEFT : QKV_CAUSAL_NONE;
    CHECK(qkv_sdpa(a->c, q, k, v, &o, &a->out, NULL));
}

/* Normal random q, k, v, dout (seed 1) and a ctx for a's shape. */
static void attn_init(attn_t *a)
{
    size_t n = (size_t)(a->B * a->H * a->L * a->D);
    qkv_rng r;
    qkv_rng_seed(&r, 1);
    a->q = malloc(n * 4), a->k = malloc(n * 4), a->v = malloc(n * 4), a->dout = malloc(n * 4);
    if (!a->q || !a->k || !a->v || !a->dout) {
        fprintf(stderr, "layers_bench: out of memory\n");
        exit(1);
    }
    qkv_rng_fill_normal(&r, a->q, (int64_t)n, 0, 1);
    qkv_rng_fill_normal(&r, a->k, (int64_t)n, 0, 1);
    qkv_rng_fill_normal(&r, a->v, (int64_t)n, 0, 1);
    qkv_rng_fill_normal(&r, a->dout, (int64_t)n, 0, 1);
    CHECK(qkv_ctx_new(&a->c));
}

static void attn_free(attn_t *a)
{
    qkv_ctx_free(a->c);
    free(a->q), free(a->k), free(a->v), free(a->dout);
}

static void run_attention(int64_t L, int64_t D, int causal, int backward, const char *name)
{
    double base = status_mib("VmRSS");
    attn_t a = {.B = 1, .H = 8, .L = L, .D = D, .causal = causal, .backward = backward};
    attn_init(&a);
    if (!backward) qkv_ctx_set_grad(a.c, 0);
    double fl = 4.0 * a.B * a.H * L * L * D * (causal ? 0.5 : 1.0);
    /* warm-up, reading the forward's peak before any backward; the sweep's
     * forward-only runs over 20 GFLOP skip it (seconds to minutes each, and
     * their O(L) buffers are small) and read the peak after the timings */
    double fwd_mib = -1;
    if (backward || fl <= 2e10) {
        attn_forward(&a);
        fwd_mib = status_mib("VmHWM") - base;
        if (backward) CHECK(qkv_backward(a.c, a.out, a.dout));
    }
    double tf[MAXIT], tb[MAXIT], total = 0;
    int it = 0;
    while (it < MAXIT && (it == 0 || total < MIN_TIME)) {
        double t0 = omp_get_wtime();
        attn_forward(&a);
        double t1 = omp_get_wtime();
        if (backward) CHECK(qkv_backward(a.c, a.out, a.dout));
        double t2 = omp_get_wtime();
        tf[it] = (t1 - t0) * 1e3, tb[it] = (t2 - t1) * 1e3;
        total += t2 - t0;
        it++;
    }
    double all_mib = status_mib("VmHWM") - base;
    if (fwd_mib < 0) fwd_mib = all_mib;
    printf("ROW %s_fwd %.4f %.6g %.1f\n", name, median(tf, it), fl, fwd_mib);
    if (backward) printf("ROW %s_bwd %.4f %.6g %.1f\n", name, median(tb, it), 2.5 * fl, all_mib);
    attn_free(&a);
}

/* FP32 against BF16 attention in one process: each round runs forward and
 * backward in FP32, then in BF16, on the same inputs; best of the rounds
 * (the machine is shared: the best is the least disturbed). */
static void run_attention_bf16(int64_t B, int64_t L, int64_t D, int causal, const char *name)
{
    enum { ROUNDS = 5 };
    double base = status_mib("VmRSS");
    attn_t a = {.B = B, .H = 8, .L = L, .D = D, .causal = causal, .backward = 1};
    attn_init(&a);
    double fl = 4.0 * a.B * a.H * L * L * D * (causal ? 0.5 : 1.0);
    double best[2][2] = {{1e30, 1e30}, {1e30, 1e30}}; /* [bf16][bwd] */
    for (int round = -1; round < ROUNDS; round++) /* round -1: warm-up */
        for (int b = 0; b < 2; b++) {
            CHECK(qkv_ctx_set_precision(a.c, b ? QKV_BF16 : QKV_FP32));
            double t0 = omp_get_wtime();
            attn_forward(&a);
            double t1 = omp_get_wtime();
            CHECK(qkv_backward(a.c, a.out, a.dout));
            double t2 = omp_get_wtime();
            if (round < 0) continue;
            if ((t1 - t0) * 1e3 < best[b][0]) best[b][0] = (t1 - t0) * 1e3;
            if ((t2 - t1) * 1e3 < best[b][1]) best[b][1] = (t2 - t1) * 1e3;
        }
    double mib = status_mib("VmHWM") - base;
    for (int b = 0; b < 2; b++) {
        printf("ROW %s_%s_fwd %.4f %.6g %.1f\n", name, b ? "bf16" : "fp32", best[b][0], fl, mib);
        printf("ROW %s_%s_bwd %.4f %.6g %.1f\n", name, b ? "bf16" : "fp32", best[b][1], 2.5 * fl, mib);
    }
    printf("# %s (%s): BF16 speed-up forward %.2fx (%.0f -> %.0f GFLOP/s), backward %.2fx "
           "(%.0f -> %.0f GFLOP/s); best of %d interleaved rounds, %d threads\n",
           name, qkv_attn_simd_bf16_current()->name, best[0][0] / best[1][0], fl / best[0][0] / 1e6,
           fl / best[1][0] / 1e6, best[0][1] / best[1][1], 2.5 * fl / best[0][1] / 1e6,
           2.5 * fl / best[1][1] / 1e6, ROUNDS, omp_get_max_threads());
    attn_free(&a);
}

/* ---- MultiheadAttention(512, 8) forward ---------------------------------- */

static void run_mha(int64_t B, int64_t L, int causal, const char *name)
{
    const int64_t E = 512, H = 8;
    double base = status_mib("VmRSS");
    qkv_params *p;
    qkv_ctx *c;
    qkv_rng r;
    qkv_rng_seed(&r, 1);
    qkv_mha m;
    qkv_mha_opts mo = qkv_mha_opts_default(E, H);
    CHECK(qkv_params_new(&p));
    CHECK(qkv_ctx_new(&c));
    bench_set_precision(c);
    CHECK(qkv_mha_init(&m, &mo, p, "", &r));
    qkv_ctx_set_grad(c, 0); /* torch.no_grad() */
    size_t n = (size_t)(L * B * E);
    float *x = malloc(n * 4);
    if (!x) {
        fprintf(stderr, "layers_bench: out of memory\n");
        exit(1);
    }
    qkv_rng_fill_normal(&r, x, (int64_t)n, 0, 1);
    qkv_mha_args args = qkv_mha_args_default();
    args.need_weights = 0;
    args.causal = causal ? QKV_CAUSAL_TOP_LEFT : QKV_CAUSAL_NONE;
    double t[MAXIT], total = 0;
    int it = -1;
    while (it < MAXIT && (it < 1 || total < MIN_TIME)) {
        double t0 = omp_get_wtime();
        qkv_ctx_reset(c);
        qkv_tensor *xt, *out;
        CHECK(qkv_tensor_wrap(qkv_ctx_arena(c), x, 3, (int64_t[]){L, B, E}, &xt));
        CHECK(qkv_mha_forward(c, &m, xt, xt, xt, &args, &out, NULL));
        double dt = omp_get_wtime() - t0;
        if (it >= 0) t[it] = dt * 1e3, total += dt; /* it == -1: the warm-up */
        it++;
    }
    double fl = 4 * 2.0 * B * L * E * E + 4.0 * B * L * L * E * (causal ? 0.5 : 1.0);
    printf("ROW %s %.4f %.6g %.1f\n", name, median(t, it), fl, status_mib("VmHWM") - base);
    free(x);
    qkv_ctx_free(c);
    qkv_params_free(p);
}

/* ---- TransformerEncoderLayer(512, 8, 2048) training step ------------------ */

static void run_encoder(int64_t B, int64_t L, const char *name)
{
    const int64_t E = 512, H = 8, F = 2048;
    double base = status_mib("VmRSS");
    qkv_params *p;
    qkv_ctx *c;
    qkv_optim *o;
    qkv_rng r;
    qkv_rng_seed(&r, 1);
    qkv_transformer_encoder_layer layer;
    bench_encoder_new(E, H, F, &r, &p, &layer, &o);
    CHECK(qkv_ctx_new(&c));
    bench_set_precision(c);
    qkv_ctx_set_training(c, 1);
    size_t n = (size_t)(L * B * E);
    float *x = malloc(n * 4), *dout = malloc(n * 4);
    if (!x || !dout) {
        fprintf(stderr, "layers_bench: out of memory\n");
        exit(1);
    }
    qkv_rng_fill_normal(&r, x, (int64_t)n, 0, 1);
    qkv_rng_fill_normal(&r, dout, (int64_t)n, 0, 1);
    double t[MAXIT], total = 0;
    int it = -1;
    while (it < MAXIT && (it < 1 || total < MIN_TIME)) {
        double t0 = omp_get_wtime();
        qkv_ctx_reset(c);
        qkv_tensor *xt, *out;
        CHECK(qkv_tensor_wrap(qkv_ctx_arena(c), x, 3, (int64_t[]){L, B, E}, &xt));
        CHECK(qkv_transformer_encoder_layer_forward(c, &layer, xt, NULL, &out));
        CHECK(qkv_backward(c, out, dout));
        CHECK(qkv_optim_step(o));
        qkv_params_zero_grad(p);
        double dt = omp_get_wtime() - t0;
        if (it >= 0) t[it] = dt * 1e3, total += dt;
        it++;
    }
    double fwd = 2.0 * B * L * (4 * E * E + 2 * E * F) + 4.0 * B * L * L * E;
    printf("ROW %s %.4f %.6g %.1f\n", name, median(t, it), 3 * fwd, status_mib("VmHWM") - base);
    free(x), free(dout);
    qkv_optim_free(o);
    qkv_ctx_free(c);
    qkv_params_free(p);
}

/* ---- the decoding kernel over fp32, fp16 and bf16 caches ------------------ */

/* One query per head over S keys, 8 heads of D: the step of one layer.
 * The variants run interleaved (one call of each per round, 200 rounds)
 * and each row gives its best time, so that they are compared under the
 * same load (the ratios are what to read on a shared machine). "_hot"
 * rows call one layer's cache again and again (16 MiB in fp32 at S 4096,
 * D 64: it stays in this CPU's 32 MiB L3); "_cold" rows go round 6
 * layers' caches, as a 6-layer model's step does, so that every call reads
 * its keys and values from memory. FLOPs: 4*H*S*D (q.k and p v). */
static void run_decode(int64_t S, int64_t D, const char *name)
{
    enum { H = 8, LAYERS = 6, ROUNDS = 200, NV = 5 };
    double base = status_mib("VmRSS");
    int64_t blk = H * S * D, n = LAYERS * blk; /* (LAYERS, H, S, D) */
    float *q = malloc(H * D * sizeof *q), *out = malloc(H * D * sizeof *out);
    float *k = malloc(n * sizeof *k), *v = malloc(n * sizeof *v);
    uint16_t *k16 = malloc(n * 2), *v16 = malloc(n * 2), *kb = malloc(n * 2), *vb = malloc(n * 2);
    qkv_arena *a;
    CHECK(qkv_arena_new(&a, (size_t)16 << 20));
    if (!q || !out || !k || !v || !k16 || !v16 || !kb || !vb) {
        fprintf(stderr, "layers_bench: out of memory\n");
        exit(1);
    }
    qkv_rng r;
    qkv_rng_seed(&r, 1);
    qkv_rng_fill_normal(&r, q, H * D, 0, 1);
    qkv_rng_fill_normal(&r, k, n, 0, 1);
    qkv_rng_fill_normal(&r, v, n, 0, 1);
    qkv_half_from_floats(k, k16, n);
    qkv_half_from_floats(v, v16, n);
    qkv_bf16_from_floats(k, kb, n);
    qkv_bf16_from_floats(v, vb, n);
    qkv_decode_desc d = {.N = 1, .H = H, .T = 1, .S = S, .D = D, .kv_stride = S * D,
                         .scale = 1.0f / sqrtf((float)D), .causal = 1};
    static const char *const vname[NV] = {"fp32", "fp16", "bf16", "bf16_avx2", "-"};
    int wide = qkv_attn_simd_force("avx512");
    qkv_attn_simd_force(NULL);
    for (int cold = 0; cold < 2; cold++) {
        double best[NV];
        for (int i = 0; i < NV; i++) best[i] = 1e30;
        for (int round = 0; round < ROUNDS; round++)
            for (int i = 0; i < 4; i++) {
                int64_t l = cold ? round % LAYERS : 0, off = l * blk;
                if (i == 3 && !wide) continue;
                if (i == 3) qkv_attn_simd_force("avx2");
                double t0 = omp_get_wtime();
                if (i == 0) CHECK(qkv_decode_attend(a, &d, q, k + off, v + off, out));
                if (i == 1) CHECK(qkv_decode_attend_half(a, &d, q, k16 + off, v16 + off, out));
                if (i >= 2) CHECK(qkv_decode_attend_bf16(a, &d, q, kb + off, vb + off, out));
                double dt = (omp_get_wtime() - t0) * 1e3;
                if (i == 3) qkv_attn_simd_force(NULL);
                if (dt < best[i]) best[i] = dt;
            }
        for (int i = 0; i < 4; i++)
            if (i != 3 || wide)
                printf("ROW %s_%s_%s %.4f %.6g %.1f\n", name, cold ? "cold" : "hot", vname[i],
                       best[i], 4.0 * H * S * D, status_mib("VmHWM") - base);
        printf("# %s %s: fp32 / fp16 %.2f, fp32 / bf16 %.2f%s (best of %d interleaved rounds)\n",
               name, cold ? "cold" : "hot", best[0] / best[1], best[0] / best[2],
               wide ? "" : " (no AVX-512 here)", ROUNDS);
        if (wide) printf("# bf16 AVX2 / AVX-512 time %.2f\n", best[3] / best[2]);
    }
    qkv_arena_free(a);
    free(q), free(out), free(k), free(v), free(k16), free(v16), free(kb), free(vb);
}

static const char *DEFAULTS[] = {
    "attn_L1024_D64", "attn_L1024_D64_causal", "attn_L4096_D64", "attn_L4096_D64_causal",
    "mha_B1_L4096",   "mha_B1_L4096_causal",   "mha_B4_L1024",   "mha_B4_L1024_causal",
    "mha_B1_L8192",   "mha_B1_L16384",         "enc_B8_L128",    "enc_B1_L1024",
};

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "peak")) {
        int th = argc > 2 ? atoi(argv[2]) : 2;
        printf("%.2f\n", bench_fma_peak(th));
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "--list")) {
        for (size_t i = 0; i < sizeof DEFAULTS / sizeof *DEFAULTS; i++) printf("%s\n", DEFAULTS[i]);
        return 0;
    }
    if (argc < 3 || strcmp(argv[1], "--one")) {
        fprintf(stderr, "usage: %s peak [threads] | --list | --one CONFIG\n", argv[0]);
        return 2;
    }
    const char *cfg = argv[2];
    long long L = 1, D = 1, B = 1; /* a size the configuration does not name stays 1 */
    int causal = strstr(cfg, "_causal") != NULL, kind;
    if (sscanf(cfg, "attn_L%lld_D%lld", &L, &D) == 2) kind = 0;
    else if (sscanf(cfg, "attnbf16_L%lld_D%lld", &L, &D) == 2) kind = 1;
    else if (sscanf(cfg, "attnbf16_B%lld_L%lld_D%lld", &B, &L, &D) == 3) kind = 1;
    else if (sscanf(cfg, "attnfwd_L%lld_D%lld", &L, &D) == 2) kind = 2;
    else if (sscanf(cfg, "mha_B%lld_L%lld", &B, &L) == 2) kind = 3;
    else if (sscanf(cfg, "enc_B%lld_L%lld", &B, &L) == 2) kind = 4;
    else if (sscanf(cfg, "decode_S%lld_D%lld", &L, &D) == 2) kind = 5;
    else {
        fprintf(stderr, "layers_bench: unknown configuration '%s'\n", cfg);
        return 2;
    }
    if (L < 1 || D < 1 || B < 1) {
        fprintf(stderr, "layers_bench: '%s': every size (B, L, S, D) must be at least 1\n", cfg);
        return 2;
    }
    switch (kind) {
    case 0: run_attention(L, D, causal, 1, cfg); break;
    case 1: run_attention_bf16(B, L, D, causal, cfg); break;
    case 2: run_attention(L, D, causal, 0, cfg); break;
    case 3: run_mha(B, L, causal, cfg); break;
    case 4: run_encoder(B, L, cfg); break;
    default: run_decode(L, D, cfg); break;
    }
    return 0;
}
