/* test_decode: the decoding kernel (src/kernels/attention_decode.c), one
 * or a few queries over a long KV cache split into chunks across threads.
 *  - against the reference attention (attention_ref.c, double
 *    accumulation): T = 1 and T > 1, S from 1 to 3000 across chunk
 *    boundaries, head dims 8, 64, 65, batch > 1, causal bottom-right or
 *    none, key padding with a fully masked row (output 0), cache blocks
 *    wider than S (the positions past S hold NaN: never read);
 *  - each build of the FP32 loops (AVX-512, AVX2) against the
 *    reference at the head dims of the AVX-512 loops (16..128);
 *  - the same bits on 1, 2 and 3 threads;
 *  - the cached forwards through it: the decoder-only stack and
 *    TransformerDecoder decoded token by token over 600 positions (three
 *    chunks) with padding equal the full forwards;
 *  - bad input. */
#include <omp.h>
#include "harness.h"
#include "kernels/attention.h"
#include "kernels/attention_decode.h"
#include "kernels/half.h"

static qkv_arena *A; /* inputs and the kernels' scratch */
static qkv_rng R;

/* Padding patterns of kpm (N, S) */
enum { PAD_NONE, PAD_RANDOM, PAD_ROW_ALL, PAD_PREFIX };

/* One problem: q (N,H,T,D); cache k, v (N,H,W,D) with W >= S, NaN at
 * positions >= S; kpm (N,W). */
typedef struct {
    qkv_decode_desc d;
    float *q, *k, *v;
    uint8_t *kpm;
} problem;

static float *alloc_floats(int64_t n)
{
    float *p = qkv_arena_alloc(A, (size_t)n * sizeof(float));
    if (!p) abort();
    return p;
}

static problem problem_make(int64_t N, int64_t H, int64_t T, int64_t S, int64_t D, int causal,
                            int pad, int64_t chunk)
{
    problem p = {0};
    int64_t W = S + 3; /* the cache's max_len: blocks wider than S */
    p.d = (qkv_decode_desc){.N = N, .H = H, .T = T, .S = S, .D = D, .kv_stride = W * D,
                            .scale = 1.0f / sqrtf((float)D), .causal = causal, .chunk = chunk};
    p.q = alloc_floats(N * H * T * D);
    p.k = alloc_floats(N * H * W * D);
    p.v = alloc_floats(N * H * W * D);
    qkv_rng_fill_normal(&R, p.q, N * H * T * D, 0, 1.5f);
    qkv_rng_fill_normal(&R, p.k, N * H * W * D, 0, 1.5f);
    qkv_rng_fill_normal(&R, p.v, N * H * W * D, 0, 1);
    for (int64_t nh = 0; nh < N * H; nh++)
        for (int64_t i = S * D; i < W * D; i++) p.k[nh * W * D + i] = p.v[nh * W * D + i] = NAN;
    if (pad != PAD_NONE) {
        p.kpm = qkv_arena_alloc(A, (size_t)(N * W));
        if (!p.kpm) abort();
        memset(p.kpm, 0, (size_t)(N * W));
        for (int64_t n = 0; n < N; n++)
            for (int64_t j = 0; j < S; j++) {
                uint8_t *m = p.kpm + n * W + j;
                if (pad == PAD_RANDOM) *m = qkv_rng_uniform(&R) < 0.3f;
                if (pad == PAD_ROW_ALL) *m = n == N - 1; /* the last row: every key */
                /* row 0: the keys the first query sees when causal, so it
                 * has none; the later queries see their own */
                if (pad == PAD_PREFIX) *m = n == 0 && j <= S - T;
            }
        p.d.kpm = p.kpm;
        p.d.kpm_stride = W;
    }
    return p;
}

/* The reference attention of p into out (N,H,T,D): the cache blocks
 * copied to (N,H,S,D), the padding to (N,S). */
static void reference(const problem *p, float *out)
{
    const qkv_decode_desc *d = &p->d;
    int64_t N = d->N, H = d->H, T = d->T, S = d->S, D = d->D, W = d->kv_stride / D;
    float *k = alloc_floats(N * H * S * D), *v = alloc_floats(N * H * S * D); // (N,H,S,D)
    float *lse = alloc_floats(N * H * T);
    for (int64_t nh = 0; nh < N * H; nh++) {
        memcpy(k + nh * S * D, p->k + nh * W * D, (size_t)(S * D) * sizeof(float));
        memcpy(v + nh * S * D, p->v + nh * W * D, (size_t)(S * D) * sizeof(float));
    }
    uint8_t *kpm = NULL; // (N,S)
    if (p->kpm) {
        kpm = qkv_arena_alloc(A, (size_t)(N * S));
        if (!kpm) abort();
        for (int64_t n = 0; n < N; n++) memcpy(kpm + n * S, p->kpm + n * W, (size_t)S);
    }
    qkv_attn_desc r = {.N = N, .H = H, .L = T, .S = S, .D = D, .Dv = D, .scale = d->scale,
                       .mask_keys = S, .kpm = kpm, .window = -1};
    r.causal = d->causal ? QKV_CAUSAL_BOTTOM_RIGHT : QKV_CAUSAL_NONE;
    r.diag = d->causal ? S - T : 0;
    double *scratch = qkv_arena_alloc(A, qkv_attn_ref_scratch(&r) * sizeof(double));
    if (!scratch) abort();
    qkv_attn_forward_ref(&r, p->q, k, v, out, lse, NULL, scratch);
}

/* The kernel against the reference on one problem; returns the error. */
static double check_case(int64_t N, int64_t H, int64_t T, int64_t S, int64_t D, int causal,
                         int pad, int64_t chunk)
{
    qkv_arena_reset(A);
    problem p = problem_make(N, H, T, S, D, causal, pad, chunk);
    int64_t n = N * H * T * D;
    float *out = alloc_floats(n), *ref = alloc_floats(n);
    for (int64_t i = 0; i < n; i++) out[i] = NAN; /* every element must be written */
    qkv_status s = qkv_decode_attend(A, &p.d, p.q, p.k, p.v, out);
    CHECK(s == QKV_OK, "decode_attend: %s", qkv_last_error());
    reference(&p, ref);
    double e = h_rel_err(out, ref, n);
    CHECK(e <= 1e-5, "N %lld H %lld T %lld S %lld D %lld causal %d pad %d chunk %lld: rel err %.3g",
          (long long)N, (long long)H, (long long)T, (long long)S, (long long)D, causal, pad,
          (long long)chunk, e);
    if (pad == PAD_ROW_ALL) { /* the last row: every query's output exactly 0 */
        int zero = 1;
        for (int64_t i = (N - 1) * H * T * D; i < n; i++) zero &= out[i] == 0.0f;
        CHECK(zero, "a fully masked row gives 0 (S %lld T %lld)", (long long)S, (long long)T);
    }
    if (pad == PAD_PREFIX && causal) { /* row 0, query 0 of each head: no live key */
        int zero = 1;
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < D; i++) zero &= out[h * T * D + i] == 0.0f;
        CHECK(zero, "a query with every visible key masked gives 0 (S %lld T %lld)", (long long)S,
              (long long)T);
    }
    return e;
}

static void test_against_reference(void)
{
    /* T = 1 over cache lengths on either side of the 256-key chunks. */
    int64_t Ss[] = {1, 2, 63, 255, 256, 257, 511, 513, 1000, 3000};
    int64_t Ds[] = {8, 64, 65};
    double worst = 0;
    for (size_t i = 0; i < sizeof Ss / sizeof *Ss; i++)
        for (size_t j = 0; j < sizeof Ds / sizeof *Ds; j++)
            worst = fmax(worst, check_case(2, 3, 1, Ss[i], Ds[j], 1, PAD_RANDOM, 0));
    /* T > 1, causal: the queries' own keys are the last T. */
    int64_t Ts[] = {2, 5, 16};
    for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++) {
        worst = fmax(worst, check_case(1, 2, Ts[i], Ts[i], 64, 1, PAD_NONE, 0)); /* S = T */
        worst = fmax(worst, check_case(3, 2, Ts[i], 300, 65, 1, PAD_RANDOM, 0));
        worst = fmax(worst, check_case(2, 2, Ts[i], 700, 8, 1, PAD_PREFIX, 0));
    }
    /* Small chunks: many merged per query, the last partial, chunks
     * that a causal query does not reach. */
    int64_t chunks[] = {1, 7, 64, 5000};
    for (size_t i = 0; i < sizeof chunks / sizeof *chunks; i++) {
        worst = fmax(worst, check_case(2, 2, 1, 450, 64, 1, PAD_RANDOM, chunks[i]));
        worst = fmax(worst, check_case(2, 2, 6, 131, 8, 1, PAD_PREFIX, chunks[i]));
    }
    /* Fully masked rows, one and several queries. */
    worst = fmax(worst, check_case(2, 4, 1, 600, 64, 1, PAD_ROW_ALL, 0));
    worst = fmax(worst, check_case(3, 1, 4, 40, 8, 1, PAD_ROW_ALL, 16));
    /* No causal mask (cross-attention): T may exceed S. */
    worst = fmax(worst, check_case(2, 2, 1, 777, 64, 0, PAD_RANDOM, 0));
    worst = fmax(worst, check_case(2, 2, 9, 5, 65, 0, PAD_NONE, 0));
    worst = fmax(worst, check_case(2, 2, 3, 300, 8, 0, PAD_ROW_ALL, 100));
    printf("decode kernel against the reference: worst relative error %.3g\n", worst);
}

/* The FP32 kernel's builds (AVX-512: 16 keys' scores at a time, the
 * probabilities' sum and p v in registers, for D a multiple of 16 up to
 * 128; the others: a key at a time, AVX2 where the build has it) each
 * against the reference:
 * `qkv train lm`'s head dim 32 and the other multiples of 16, cache
 * lengths that leave partial groups of 16 keys, padding (random, a fully
 * masked row, every key a causal query sees), several queries. */
static void test_builds_against_reference(void)
{
    const char *isas[] = {"avx512", "avx2"};
    int64_t Ds[] = {16, 32, 48, 128};
    int64_t Ss[] = {1, 15, 17, 64, 255, 1088};
    for (size_t b = 0; b < sizeof isas / sizeof *isas; b++) {
        if (!qkv_attn_simd_force(isas[b])) {
            printf("(%s does not run here: not tested)\n", isas[b]);
            continue;
        }
        double worst = 0;
        for (size_t i = 0; i < sizeof Ds / sizeof *Ds; i++) {
            for (size_t j = 0; j < sizeof Ss / sizeof *Ss; j++) {
                worst = fmax(worst, check_case(1, 4, 1, Ss[j], Ds[i], 1, PAD_NONE, 0));
                worst = fmax(worst, check_case(2, 2, 1, Ss[j], Ds[i], 1, PAD_RANDOM, 0));
            }
            worst = fmax(worst, check_case(2, 3, 1, 300, Ds[i], 1, PAD_ROW_ALL, 0));
            worst = fmax(worst, check_case(2, 2, 5, 333, Ds[i], 1, PAD_PREFIX, 100));
            worst = fmax(worst, check_case(2, 2, 3, 41, Ds[i], 0, PAD_RANDOM, 16));
        }
        printf("FP32 decode kernel, %s build, D 16..128, against the reference: worst %.3g\n",
               isas[b], worst);
    }
    qkv_attn_simd_force(NULL);
}

/* Each (row, head, chunk) is computed and merged the same way on any
 * number of threads: the outputs are the same bits. */
static void test_threads_same_bits(void)
{
    qkv_arena_reset(A);
    problem p = problem_make(2, 3, 2, 1500, 64, 1, PAD_RANDOM, 0);
    int64_t n = 2 * 3 * 2 * 64;
    float *out[3];
    int threads = omp_get_max_threads();
    for (int t = 0; t < 3; t++) {
        out[t] = alloc_floats(n);
        omp_set_num_threads(t + 1);
        CHECK_OK(qkv_decode_attend(A, &p.d, p.q, p.k, p.v, out[t]));
    }
    omp_set_num_threads(threads);
    CHECK(!memcmp(out[0], out[1], (size_t)n * sizeof(float)) &&
              !memcmp(out[0], out[2], (size_t)n * sizeof(float)),
          "1, 2 and 3 threads give the same bits");
}

/* Over fp16 keys and values the kernel gives what it gives over the same
 * values as floats (up to the order of its sums: fused multiply-adds on
 * the fp16 path). */
static void test_half_same_as_rounded(void)
{
    qkv_arena_reset(A);
    problem p = problem_make(2, 2, 3, 700, 64, 1, PAD_RANDOM, 0);
    int64_t nkv = p.d.N * p.d.H * p.d.kv_stride, n = 2 * 2 * 3 * 64;
    uint16_t *k16 = malloc((size_t)nkv * sizeof *k16), *v16 = malloc((size_t)nkv * sizeof *v16);
    float *kr = alloc_floats(nkv), *vr = alloc_floats(nkv), *o1 = alloc_floats(n), *o2 = alloc_floats(n);
    qkv_half_from_floats(p.k, k16, nkv);
    qkv_half_from_floats(p.v, v16, nkv);
    qkv_half_to_floats(k16, kr, nkv);
    qkv_half_to_floats(v16, vr, nkv);
    CHECK_OK(qkv_decode_attend_half(A, &p.d, p.q, k16, v16, o1));
    CHECK_OK(qkv_decode_attend(A, &p.d, p.q, kr, vr, o2));
    double e = h_rel_err(o1, o2, n);
    CHECK(e <= 1e-6, "fp16 keys/values: as their floats up to rounding (rel err %.3g)", e);
    free(k16), free(v16);
}

/* ---- the cached forwards through the kernel --------------------------------------- */

enum { CL = 600, CN = 2, CE = 8, CH = 2, CS = 300 }; /* positions, batch, d_model, heads, memory */

/* Feeds x (CL,CN,CE) to the cached forward fwd in pieces: a prompt of 40
 * (qkv_sdpa), then 1 or 3 positions at a time (the decoding kernel); the
 * worst error against full (CL,CN,CE). */
typedef qkv_status (*cached_fn)(qkv_ctx *c, const void *m, qkv_kv_cache *kc, qkv_tensor *x,
                                const qkv_tensor *kpm, qkv_tensor **out);

static qkv_status run_dec_only(qkv_ctx *c, const void *m, qkv_kv_cache *kc, qkv_tensor *x,
                               const qkv_tensor *kpm, qkv_tensor **out)
{
    return qkv_transformer_decoder_only_forward_cached(c, m, kc, x, kpm, out);
}

static qkv_status run_dec(qkv_ctx *c, const void *m, qkv_kv_cache *kc, qkv_tensor *x,
                          const qkv_tensor *kpm, qkv_tensor **out)
{
    return qkv_transformer_decoder_forward_cached(c, m, kc, x, kpm, out);
}

static double cached_vs_full(qkv_ctx *c, cached_fn fwd, const void *m, qkv_kv_cache *kc,
                             float *x, const uint8_t *pad, const float *full)
{
    double worst = 0;
    static uint8_t pt[CN * CL]; // (CN, c) padding of the new positions
    for (int64_t t = 0; t < CL;) {
        int64_t n = t == 0 ? 40 : t % 50 == 7 ? 3 : 1;
        qkv_tensor *xs, *ps, *out = NULL;
        for (int64_t r = 0; r < CN; r++) memcpy(pt + r * n, pad + r * CL + t, (size_t)n);
        CHECK_OK(qkv_tensor_wrap(A, x + t * CN * CE, 3, (int64_t[]){n, CN, CE}, &xs));
        CHECK_OK(qkv_tensor_wrap_bool(A, pt, 2, (int64_t[]){CN, n}, &ps));
        CHECK_OK(fwd(c, m, kc, xs, ps, &out));
        if (!out) return NAN;
        double e = h_rel_err(out->data, full + t * CN * CE, n * CN * CE);
        worst = isnan(e) || e > worst ? e : worst;
        t += n;
        qkv_ctx_reset(c);
    }
    return worst;
}

static void test_cached_stacks(void)
{
    qkv_params *p;
    qkv_ctx *c;
    qkv_rng rng;
    CHECK_OK(qkv_params_new(&p));
    CHECK_OK(qkv_ctx_new(&c));
    qkv_rng_seed(&rng, 11);
    qkv_transformer_layer_opts o = qkv_transformer_layer_opts_default(CE, CH);
    o.dim_feedforward = 16;
    qkv_transformer_decoder_only dec_only;
    qkv_transformer_decoder dec;
    CHECK_OK(qkv_transformer_decoder_only_init(&dec_only, &o, 2, 1e-5f, p, "a.", &rng));
    CHECK_OK(qkv_transformer_decoder_init(&dec, &o, 2, 1e-5f, p, "b.", &rng));
    static float x[CL * CN * CE], mem[CS * CN * CE], full[CL * CN * CE], full_dec[CL * CN * CE];
    static uint8_t pad[CN * CL], mpad[CN * CS];
    qkv_rng_fill_normal(&rng, x, CL * CN * CE, 0, 1);
    qkv_rng_fill_normal(&rng, mem, CS * CN * CE, 0, 1);
    for (int64_t j = 0; j < CL; j++) pad[CL + j] = j < 5 || (j > 290 && j < 300); /* row 1 */
    for (int64_t j = 0; j < CS; j++) mpad[CS + j] = j >= 260; /* row 1: 260 memory keys */
    qkv_arena_reset(A);
    qkv_tensor *xt, *mt, *pt, *mpt, *out;
    CHECK_OK(qkv_tensor_wrap(A, x, 3, (int64_t[]){CL, CN, CE}, &xt));
    CHECK_OK(qkv_tensor_wrap(A, mem, 3, (int64_t[]){CS, CN, CE}, &mt));
    CHECK_OK(qkv_tensor_wrap_bool(A, pad, 2, (int64_t[]){CN, CL}, &pt));
    CHECK_OK(qkv_tensor_wrap_bool(A, mpad, 2, (int64_t[]){CN, CS}, &mpt));
    CHECK_OK(qkv_transformer_decoder_only_forward(c, &dec_only, xt, pt, &out));
    if (out) memcpy(full, out->data, sizeof full);
    qkv_transformer_masks mk = qkv_transformer_masks_default();
    mk.tgt_causal = QKV_CAUSAL_TOP_LEFT;
    mk.tgt_key_padding_mask = pt;
    mk.memory_key_padding_mask = mpt;
    CHECK_OK(qkv_transformer_decoder_forward(c, &dec, xt, mt, &mk, &out));
    if (out) memcpy(full_dec, out->data, sizeof full_dec);
    qkv_ctx_reset(c);
    qkv_kv_cache k1, k2;
    CHECK_OK(qkv_kv_cache_init(&k1, 2, CN, CH, CE / CH, CL));
    CHECK_OK(qkv_kv_cache_init(&k2, 2, CN, CH, CE / CH, CL));
    double e1 = cached_vs_full(c, run_dec_only, &dec_only, &k1, x, pad, full);
    CHECK(e1 <= 1e-5, "decoder-only stack, %d positions, cached vs full: %.3g", CL, e1);
    CHECK_OK(qkv_transformer_decoder_set_memory(c, &dec, &k2, mt, mpt));
    double e2 = cached_vs_full(c, run_dec, &dec, &k2, x, pad, full_dec);
    CHECK(e2 <= 1e-5, "TransformerDecoder, %d positions, %d memory keys, cached vs full: %.3g", CL,
          CS, e2);
    printf("cached vs full over %d positions: decoder-only %.3g, TransformerDecoder %.3g\n", CL, e1,
           e2);
    /* fp16 caches: keys and values rounded to half precision (relative
     * 2^-11), so close to the full forward but not equal to it. */
    qkv_kv_cache h1, h2;
    CHECK_OK(qkv_kv_cache_init_half(&h1, 2, CN, CH, CE / CH, CL));
    CHECK_OK(qkv_kv_cache_init_half(&h2, 2, CN, CH, CE / CH, CL));
    CHECK(h1.k16 && !h1.k, "a half cache keeps k16, not k");
    double e3 = cached_vs_full(c, run_dec_only, &dec_only, &h1, x, pad, full);
    CHECK(e3 <= 5e-3 && e3 > 1e-6, "decoder-only stack, fp16 cache vs full: %.3g", e3);
    CHECK_OK(qkv_transformer_decoder_set_memory(c, &dec, &h2, mt, mpt));
    double e4 = cached_vs_full(c, run_dec, &dec, &h2, x, pad, full_dec);
    CHECK(e4 <= 5e-3 && e4 > 1e-6, "TransformerDecoder, fp16 cache vs full: %.3g", e4);
    printf("fp16 cache vs full: decoder-only %.3g, TransformerDecoder %.3g\n", e3, e4);
    /* Reordering rows (beam search) moves the fp16 blocks. */
    int64_t blk = CL * (CE / CH); // one (layer, row, head) block
    uint16_t *row0 = malloc((size_t)blk * sizeof *row0);
    memcpy(row0, h1.k16 + CH * blk, (size_t)blk * sizeof *row0); // layer 0, row 1, head 0
    int differed = memcmp(h1.k16, row0, (size_t)blk * sizeof *row0) != 0;
    CHECK_OK(qkv_kv_cache_reorder(c, &h1, (int64_t[]){1, 1}));
    CHECK(differed && !memcmp(h1.k16, row0, (size_t)blk * sizeof *row0) &&
              !memcmp(h1.k16 + CH * blk, row0, (size_t)blk * sizeof *row0),
          "fp16 cache reorder: rows {1,1} copies row 1 over row 0");
    free(row0);
    qkv_kv_cache_free(&h1);
    qkv_kv_cache_free(&h2);
    qkv_kv_cache_free(&k1);
    qkv_kv_cache_free(&k2);
    qkv_transformer_decoder_only_free(&dec_only);
    qkv_transformer_decoder_free(&dec);
    qkv_ctx_free(c);
    qkv_params_free(p);
}

/* ---- bad input ------------------------------------------------------------------------------ */

static void test_bad_input(void)
{
    qkv_arena_reset(A);
    problem p = problem_make(1, 2, 2, 10, 8, 1, PAD_RANDOM, 0);
    float *out = alloc_floats(2 * 2 * 8);
    qkv_decode_desc d = p.d;
#define BAD(field_change, status, needle)                                              \
    do {                                                                               \
        d = p.d;                                                                       \
        field_change;                                                                  \
        CHECK_ERR(qkv_decode_attend(A, &d, p.q, p.k, p.v, out), status, needle);       \
    } while (0)
    BAD(d.T = 11, QKV_ERR_SHAPE, "causal with T 11 queries > S 10");
    BAD(d.N = 0, QKV_ERR_SHAPE, "must all be >= 1");
    BAD(d.D = -1, QKV_ERR_SHAPE, "must all be >= 1");
    BAD(d.kv_stride = 79, QKV_ERR_SHAPE, "kv_stride 79 < S*D = 80");
    BAD(d.kpm_stride = 9, QKV_ERR_SHAPE, "kpm_stride 9 < S 10");
    BAD(d.chunk = -2, QKV_ERR_ARG, "chunk -2 < 0");
    BAD(d.scale = INFINITY, QKV_ERR_ARG, "scale inf is not finite");
    BAD(d.S = (int64_t)1 << 50; d.kv_stride = d.S * d.D, QKV_ERR_ARG, "is too large");
    BAD(d.H = (int64_t)1 << 62, QKV_ERR_ARG, "is too large");
    BAD(d.kv_stride = (int64_t)1 << 62, QKV_ERR_ARG, "is too large");
    BAD(d.kpm_stride = (int64_t)1 << 62, QKV_ERR_ARG, "is too large");
#undef BAD
    d = p.d;
    CHECK_ERR(qkv_decode_attend(A, &d, NULL, p.k, p.v, out), QKV_ERR_ARG, "q is NULL");
    CHECK_ERR(qkv_decode_attend(A, &d, p.q, p.k, p.v, NULL), QKV_ERR_ARG, "out is NULL");
    CHECK_ERR(qkv_decode_attend(A, NULL, p.q, p.k, p.v, out), QKV_ERR_ARG, "desc is NULL");
    CHECK_ERR(qkv_decode_attend(NULL, &d, p.q, p.k, p.v, out), QKV_ERR_ARG, "arena is NULL");
    d.kpm_stride = 0; /* no padding: the stride is not read */
    d.kpm = NULL;
    CHECK_OK(qkv_decode_attend(A, &d, p.q, p.k, p.v, out));
}

int main(void)
{
    if (qkv_arena_new(&A, 1 << 20) != QKV_OK) return 1;
    qkv_rng_seed(&R, 7);
    test_against_reference();
    test_builds_against_reference();
    test_threads_same_bits();
    test_half_same_as_rounded();
    test_cached_stacks();
    test_bad_input();
    qkv_arena_free(A);
    return h_finish("test_decode");
}
