/* test_bf16_decode: decoding in bf16 (docs/bf16_decode.md).
 *  - the conversions against torch 1.13 (tools/bf16_convert_oracle.py): float ->
 *    bf16 bit for bit on special values (NaN, inf, halfway ties, the
 *    largest floats, subnormals) and 24000 random ones; bf16 -> float for
 *    all 65536 patterns;
 *  - the decoding kernel over bf16 keys and values: what it gives over the
 *    same values as floats (AVX-512 and AVX2 builds, causal, padding with
 *    NaN behind it, a fully masked row, head dims 16, 64, 67), and its
 *    error against the unrounded floats;
 *  - the bf16 matrix-vector kernel against its double reference (every
 *    build, odd sizes, 1 to 9 rows);
 *  - a language model decoded token by token with a bf16 cache, bf16
 *    weights, or both, against the FP32 cache and weights (the tolerance
 *    from bf16's 8-bit significand, below); with bf16 weights against the
 *    FP32 model whose weights were rounded to bf16 (equal up to the order
 *    of sums); the greedy tokens agree wherever FP32's top two logits are
 *    further apart than the bf16 run's logit error;
 *  - bad arguments. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include "oracle.h"
#include "kernels/attention.h"
#include "kernels/attention_decode.h"
#include "kernels/half.h"
#include "kernels/matvec.h"

static qkv_arena *A;
static qkv_rng R;

static float *floats(int64_t n)
{
    float *p = qkv_arena_alloc(A, (size_t)n * sizeof(float));
    if (!p) abort();
    return p;
}

static uint16_t *halves(int64_t n)
{
    uint16_t *p = qkv_arena_alloc(A, (size_t)n * sizeof(uint16_t));
    if (!p) abort();
    return p;
}

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* ---- conversions against torch --------------------------------------------------------- */

static void test_conversions(void)
{
    char dir[] = "/tmp/qkv_bf16_XXXXXX", path[600];
    if (!h_oracle_run("bf16_convert_oracle.py", dir, NULL)) return;
    snprintf(path, sizeof path, "%s/bf16.safetensors", dir);
    qkv_safetensors *st = NULL;
    CHECK_OK(qkv_safetensors_open(path, &st));
    if (!st) return;
    qkv_arena_reset(A);
    qkv_tensor *x = h_load(st, A, "x", 0), *bits = h_load(st, A, "bits", 0);
    qkv_tensor *all = h_load(st, A, "all", 0), *wide = h_load(st, A, "wide", 0);
    CHECK(x && bits && all && wide, "the oracle's tensors are there");
    if (x && bits && all && wide) {
        int64_t n = qkv_tensor_numel(x), bad = 0, bad_bulk = 0, nan = 0;
        uint16_t *y = halves(n);
        qkv_bf16_from_floats(x->data, y, n);
        for (int64_t i = 0; i < n; i++) {
            uint16_t one = qkv_bf16_from_float(x->data[i]);
            /* a NaN need only stay a NaN: torch's vector path gives 0xffff,
             * c10's scalar one (and qkv) 0x7fc0 */
            int both_nan = isnan(x->data[i]) && isnan(qkv_bf16_to_float(one));
            if (one != (uint16_t)bits->idx[i] && !both_nan) {
                if (bad++ < 5)
                    printf("  x bits %08x: qkv %04x, torch %04x\n", bits_of(x->data[i]), one,
                           (unsigned)bits->idx[i]);
            }
            bad_bulk += y[i] != one;
            nan += isnan(x->data[i]);
        }
        CHECK(bad == 0 && bad_bulk == 0 && nan > 50,
              "float -> bf16: %lld values bit for bit as torch, NaNs NaN (%lld NaNs; %lld differ, bulk %lld)",
              (long long)n, (long long)nan, (long long)bad, (long long)bad_bulk);
        float *w = floats(65536);
        uint16_t *pat = halves(65536);
        for (int64_t i = 0; i < 65536; i++) pat[i] = (uint16_t)all->idx[i];
        qkv_bf16_to_floats(pat, w, 65536);
        int64_t badw = 0;
        for (int64_t i = 0; i < 65536; i++)
            badw += bits_of(w[i]) != bits_of(wide->data[i]) ||
                    bits_of(qkv_bf16_to_float(pat[i])) != bits_of(wide->data[i]);
        CHECK(badw == 0, "bf16 -> float: all 65536 patterns as torch (%lld differ)", (long long)badw);
    }
    qkv_safetensors_close(st);
    unlink(path);
    rmdir(dir);
}

/* ---- the decoding kernel ------------------------------------------------------------------ */

/* Over bf16 keys and values the kernel gives what the FP32 kernel gives
 * over the same values widened (exact), up to the order of its sums; the
 * unrounded floats differ by bf16's rounding: relative 2^-9 per element,
 * so scores move by at most 2^-9 scale sum|q_i k_i| and outputs by about
 * 2^-9 max|v| plus the weights' change; 2^-9 * 8 bounds it here. */
static void kernel_case(int64_t N, int64_t H, int64_t T, int64_t S, int64_t D, int causal, int pad,
                        const char *isa)
{
    qkv_arena_reset(A);
    int64_t W = S + 2, nq = N * H * T * D, nkv = N * H * W * D;
    qkv_decode_desc d = {.N = N, .H = H, .T = T, .S = S, .D = D, .kv_stride = W * D,
                         .scale = 1.0f / sqrtf((float)D), .causal = causal, .chunk = 100};
    float *q = floats(nq), *k = floats(nkv), *v = floats(nkv), *kr = floats(nkv), *vr = floats(nkv);
    float *o16 = floats(nq), *o32 = floats(nq), *oex = floats(nq);
    uint16_t *kb = halves(nkv), *vb = halves(nkv);
    uint8_t *kpm = qkv_arena_alloc(A, (size_t)(N * W));
    qkv_rng_fill_normal(&R, q, nq, 0, 1.5f);
    qkv_rng_fill_normal(&R, k, nkv, 0, 1.5f);
    qkv_rng_fill_normal(&R, v, nkv, 0, 1);
    for (int64_t nh = 0; nh < N * H; nh++) /* past S: never read */
        for (int64_t i = S * D; i < W * D; i++) k[nh * W * D + i] = v[nh * W * D + i] = NAN;
    memset(kpm, 0, (size_t)(N * W));
    if (pad) {
        for (int64_t j = 0; j < S; j++) kpm[j] = j % 7 == 3; /* row 0: some keys */
        k[3 * D] = v[3 * D + 1] = NAN; /* row 0, head 0, key 3, masked: never weighs in */
        if (N > 1) memset(kpm + W, 1, (size_t)S);        /* row 1: every key */
        d.kpm = kpm;
        d.kpm_stride = W;
    }
    qkv_bf16_from_floats(k, kb, nkv);
    qkv_bf16_from_floats(v, vb, nkv);
    qkv_bf16_to_floats(kb, kr, nkv);
    qkv_bf16_to_floats(vb, vr, nkv);
    CHECK(qkv_attn_simd_force(isa), "the %s build runs here", isa);
    CHECK_OK(qkv_decode_attend_bf16(A, &d, q, kb, vb, o16));
    qkv_attn_simd_force(NULL);
    CHECK_OK(qkv_decode_attend(A, &d, q, kr, vr, o32));
    CHECK_OK(qkv_decode_attend(A, &d, q, k, v, oex));
    double e = h_rel_err(o16, o32, nq), ex = h_rel_err(o16, oex, nq);
    CHECK(e <= 2e-6, "%s, N %lld H %lld T %lld S %lld D %lld causal %d pad %d: bf16 kernel = FP32 "
          "kernel on the widened values (rel %.3g)", isa, (long long)N, (long long)H, (long long)T,
          (long long)S, (long long)D, causal, pad, e);
    CHECK(ex <= 8 * 0x1p-9 && ex > 0, "  and within 8 * 2^-9 of the unrounded floats (rel %.3g)", ex);
    if (pad && N > 1) { /* row 1 is fully masked: output 0 */
        int zero = 1;
        for (int64_t i = H * T * D; i < 2 * H * T * D; i++) zero &= o16[i] == 0.0f;
        CHECK(zero, "  a fully masked row gives 0");
    }
}

static void test_kernel(void)
{
    const char *isas[] = {"avx512", "avx2"};
    for (int i = 0; i < 2; i++) {
        if (!qkv_attn_simd_force(isas[i])) {
            printf("(%s does not run here: not tested)\n", isas[i]);
            continue;
        }
        qkv_attn_simd_force(NULL);
        kernel_case(1, 8, 1, 1000, 64, 1, 0, isas[i]);
        kernel_case(2, 2, 3, 350, 64, 1, 1, isas[i]);
        kernel_case(2, 3, 1, 77, 67, 0, 1, isas[i]);
        kernel_case(1, 2, 2, 250, 16, 0, 0, isas[i]);
    }
}

/* ---- the matrix-vector kernel -------------------------------------------------------------- */

static void test_matvec(void)
{
    const char *isas[] = {"avx512", "avx2", "portable"};
    /* one row of x with in a multiple of 64 takes a loop of its own */
    int64_t sizes[][3] = {{1, 64, 512}, {1, 67, 128}, {2, 64, 512}, {3, 37, 70}, {5, 9, 16}, {9, 130, 33}, {4, 1, 1}};
    for (int s = 0; s < 7; s++) {
        int64_t M = sizes[s][0], out = sizes[s][1], in = sizes[s][2];
        qkv_arena_reset(A);
        float *x = floats(M * in), *wf = floats(out * in), *ref = floats(M * out), *y = floats(M * out);
        uint16_t *w = halves(out * in);
        qkv_rng_fill_normal(&R, x, M * in, 0, 1);
        qkv_rng_fill_normal(&R, wf, out * in, 0, 1);
        qkv_bf16_from_floats(wf, w, out * in);
        for (int64_t i = 0; i < M * out; i++) ref[i] = y[i] = 0.5f; /* += into what is there */
        qkv_set_reference(1);
        qkv_matvec_bf16(M, out, in, x, w, ref);
        qkv_set_reference(0);
        /* the reference itself: sums in double of the widened weights */
        double worst = 0, scale = 0;
        for (int64_t r = 0; r < M; r++)
            for (int64_t o = 0; o < out; o++) {
                double sum = 0.5;
                for (int64_t i = 0; i < in; i++) sum += (double)x[r * in + i] * qkv_bf16_to_float(w[o * in + i]);
                worst = fmax(worst, fabs(sum - ref[r * out + o]));
                scale = fmax(scale, fabs(sum));
            }
        CHECK(worst <= 1e-6 * scale, "matvec reference (%lld,%lld,%lld) sums as double", (long long)M,
              (long long)out, (long long)in);
        for (int i = 0; i < 3; i++) {
            if (!qkv_attn_simd_force(isas[i])) continue;
            for (int64_t j = 0; j < M * out; j++) y[j] = 0.5f;
            qkv_matvec_bf16(M, out, in, x, w, y);
            qkv_attn_simd_force(NULL);
            double e = h_rel_err(y, ref, M * out);
            CHECK(e <= 1e-5, "matvec %s (%lld,%lld,%lld) = reference (rel %.3g)", isas[i],
                  (long long)M, (long long)out, (long long)in, e);
        }
    }
}

/* ---- a language model decoded with bf16 ---------------------------------------------------- */

enum { LV = 50, LE = 64, LH = 4, LLAYERS = 2, LN = 2, LP = 20, LSTEPS = 60 };

static qkv_lm_opts lm_opts(void)
{
    qkv_lm_opts o = qkv_lm_opts_default(LV, LE, LH, LLAYERS, 128);
    o.layer.dim_feedforward = 128;
    o.layer.norm_first = 1;
    o.layer.activation = QKV_ACTIVATION_GELU;
    return o;
}

static void lm_new(qkv_params **p, qkv_lm *m, int round_bf16)
{
    qkv_rng rng;
    qkv_rng_seed(&rng, 5);
    qkv_lm_opts o = lm_opts();
    CHECK_OK(qkv_params_new(p));
    CHECK_OK(qkv_lm_init(m, &o, *p, "lm.", &rng));
    /* A trained-looking head: a larger output scale than the init's, so
     * the logits are spread as a trained model's are (greedy picks are
     * not near-ties everywhere). */
    qkv_tensor *head = qkv_params_find(*p, "lm.lm_head.weight");
    CHECK(head != NULL, "the model has lm_head.weight");
    if (head)
        for (int64_t i = 0; i < qkv_tensor_numel(head); i++) head->data[i] *= 8.0f;
    if (round_bf16) /* every linear's weight rounded to bf16, kept in FP32 (the
                       embeddings are looked up, in FP32, in both runs) */
        for (int i = 0; i < qkv_params_count(*p); i++) {
            qkv_tensor *t = qkv_params_at(*p, i);
            if (t->ndim != 2 || strstr(t->name, "_emb.")) continue;
            for (int64_t j = 0; j < qkv_tensor_numel(t); j++)
                t->data[j] = qkv_bf16_to_float(qkv_bf16_from_float(t->data[j]));
        }
}

/* One run: the prompt (LN,LP) left-padded in row 1 (through qkv_sdpa and
 * the bf16 weights' widened GEMM), then LSTEPS tokens one at a time (the
 * decoding kernel, the matvec kernel), each step fed the tokens given in
 * feed (LN,LSTEPS); logits of every step into out (LSTEPS,LN,LV). */
static void lm_run(qkv_ctx *c, const qkv_lm *m, qkv_kv_cache *kc, const int64_t *prompt,
                   const uint8_t *pad, const int64_t *feed, float *out)
{
    qkv_arena_reset(A);
    qkv_kv_cache_reset(kc);
    qkv_tensor *ids, *pm, *lg = NULL;
    CHECK_OK(qkv_tensor_new(A, QKV_I64, 2, (int64_t[]){LN, LP}, &ids));
    CHECK_OK(qkv_tensor_new(A, QKV_BOOL, 2, (int64_t[]){LN, LP}, &pm));
    memcpy(ids->idx, prompt, sizeof(int64_t) * LN * LP);
    memcpy(pm->mask, pad, LN * LP);
    CHECK_OK(qkv_lm_forward_cached(c, m, kc, ids, pm, &lg));
    for (int64_t t = 0; t < LSTEPS && lg; t++) {
        /* logits of the last position fed */
        int64_t T = lg->shape[1];
        for (int64_t n = 0; n < LN; n++)
            memcpy(out + (t * LN + n) * LV, lg->data + (n * T + T - 1) * LV, sizeof(float) * LV);
        qkv_ctx_reset(c);
        qkv_tensor *step;
        CHECK_OK(qkv_tensor_new(qkv_ctx_arena(c), QKV_I64, 2, (int64_t[]){LN, 1}, &step));
        for (int64_t n = 0; n < LN; n++) step->idx[n] = feed[n * LSTEPS + t];
        lg = NULL;
        CHECK_OK(qkv_lm_forward_cached(c, m, kc, step, NULL, &lg));
    }
    qkv_ctx_reset(c);
}

/* The worst over steps of max|a - b| / max|b| per step and row. */
static double logits_err(const float *a, const float *b)
{
    double worst = 0;
    for (int64_t i = 0; i < LSTEPS * LN; i++) {
        double e = h_rel_err(a + i * LV, b + i * LV, LV);
        worst = isnan(e) || e > worst ? e : worst;
    }
    return worst;
}

/* Greedy with the bf16 run agrees with FP32 wherever FP32's top logit
 * leads the bf16 run's pick by more than twice the logits' difference
 * (which is all that could have swapped them); returns the agreements. */
static int64_t greedy_agree(const float *f32, const float *b16, int64_t *checked)
{
    int64_t agree = 0;
    *checked = 0;
    for (int64_t i = 0; i < LSTEPS * LN; i++) {
        const float *a = f32 + i * LV, *b = b16 + i * LV;
        int64_t ia = h_argmax(a, LV), ib = h_argmax(b, LV);
        double diff = 0;
        for (int64_t j = 0; j < LV; j++) diff = fmax(diff, fabs((double)a[j] - b[j]));
        agree += ia == ib;
        if (ia != ib) CHECK(a[ia] - a[ib] <= 2 * diff, "step %lld: greedy differs with a margin %.3g "
                            "> 2 x the logit difference %.3g", (long long)i, a[ia] - a[ib], diff);
        *checked += 1;
    }
    return agree;
}

static void test_lm(void)
{
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_ctx_set_training(c, 0);
    qkv_params *p, *pr;
    qkv_lm m, mr; /* the model, and the same with its weights rounded to bf16 */
    lm_new(&p, &m, 0);
    lm_new(&pr, &mr, 1);
    int64_t prompt[LN * LP], feed[LN * LSTEPS];
    uint8_t pad[LN * LP] = {0};
    for (int64_t i = 0; i < LN * LP; i++) prompt[i] = (i * 7 + 3) % LV;
    for (int64_t j = 0; j < 6; j++) pad[LP + j] = 1; /* row 1: 6 positions of left padding */
    static float f32[LSTEPS * LN * LV], out[LSTEPS * LN * LV], rounded[LSTEPS * LN * LV];
    /* The FP32 run chooses the fed tokens: its greedy picks. */
    qkv_kv_cache kc;
    CHECK_OK(qkv_lm_cache_init(&kc, &m, LN, LP + LSTEPS));
    for (int64_t i = 0; i < LN * LSTEPS; i++) feed[i] = 0;
    lm_run(c, &m, &kc, prompt, pad, feed, f32); /* first pass: logits for the picks */
    for (int64_t t = 0; t < LSTEPS; t++)
        for (int64_t n = 0; n < LN; n++) feed[n * LSTEPS + t] = h_argmax(f32 + (t * LN + n) * LV, LV);
    /* Greedy fed forward: step t's pick is fed at step t (teacher forcing
     * on FP32's own choices: every run sees the same sequence). */
    lm_run(c, &m, &kc, prompt, pad, feed, f32);
    for (int64_t t = 0; t < LSTEPS; t++)
        for (int64_t n = 0; n < LN; n++) feed[n * LSTEPS + t] = h_argmax(f32 + (t * LN + n) * LV, LV);
    lm_run(c, &m, &kc, prompt, pad, feed, f32);
    qkv_kv_cache_free(&kc);
    /* bf16 weights; the FP32 model with rounded weights. */
    qkv_bf16_weights w;
    CHECK_OK(qkv_bf16_weights_init(&w, p));
    CHECK(w.count == 3 + 4 * LLAYERS, "bf16 copies of the 2-D parameters (embeddings, head, "
          "4 per layer): %lld",
          (long long)w.count);
    CHECK_OK(qkv_lm_cache_init(&kc, &m, LN, LP + LSTEPS));
    kc.weights = &w;
    lm_run(c, &m, &kc, prompt, pad, feed, out);
    qkv_kv_cache_free(&kc);
    CHECK_OK(qkv_lm_cache_init(&kc, &mr, LN, LP + LSTEPS));
    lm_run(c, &mr, &kc, prompt, pad, feed, rounded);
    qkv_kv_cache_free(&kc);
    double e_round = logits_err(out, rounded), e_w = logits_err(out, f32);
    /* Tolerance: each weight moves by at most 2^-9 of itself, so each
     * linear's output by at most 2^-9 sum|x_i w_i|, about 2^-9 of its
     * scale; 4 linears per layer and the head add up along the path (the
     * LayerNorms keep scales near 1): 2 (4 L + 1) 2^-9 with a factor 2 of
     * margin, 0.035 for L = 2. */
    double tol = 2.0 * (4 * LLAYERS + 1) * 0x1p-9;
    CHECK(e_round <= 1e-5, "bf16 weights = FP32 with the weights rounded to bf16, up to sum order "
          "(rel %.3g)", e_round);
    CHECK(e_w <= tol && e_w > 0, "bf16 weights vs FP32 weights: logits rel %.3g <= %.3g", e_w, tol);
    int64_t checked, agree = greedy_agree(f32, out, &checked);
    printf("bf16 weights: logits rel %.3g (bound %.3g), = rounded FP32 %.3g; greedy agrees %lld/%lld\n",
           e_w, tol, e_round, (long long)agree, (long long)checked);
    /* bf16 cache: keys and values move by 2^-9 of themselves: the
     * attention output by about that (kernel_case), 2 per layer on the
     * path plus what the following layers make of it: 2 (2 L) 2^-9. */
    double tol_kv = 2.0 * (2 * LLAYERS) * 0x1p-9;
    CHECK_OK(qkv_kv_cache_init_bf16(&kc, LLAYERS, LN, LH, LE / LH, LP + LSTEPS));
    CHECK(kc.dtype == QKV_KV_BF16 && kc.k16 && !kc.k, "a bf16 cache keeps k16, dtype BF16");
    lm_run(c, &m, &kc, prompt, pad, feed, out);
    double e_kv = logits_err(out, f32);
    CHECK(e_kv <= tol_kv && e_kv > 0, "bf16 cache vs FP32 cache: logits rel %.3g <= %.3g", e_kv, tol_kv);
    agree = greedy_agree(f32, out, &checked);
    printf("bf16 cache: logits rel %.3g (bound %.3g); greedy agrees %lld/%lld\n", e_kv, tol_kv,
           (long long)agree, (long long)checked);
    /* Both. */
    kc.weights = &w;
    lm_run(c, &m, &kc, prompt, pad, feed, out);
    double e_both = logits_err(out, f32);
    CHECK(e_both <= tol + tol_kv, "bf16 cache and weights vs FP32: logits rel %.3g <= %.3g", e_both,
          tol + tol_kv);
    agree = greedy_agree(f32, out, &checked);
    printf("bf16 cache and weights: logits rel %.3g; greedy agrees %lld/%lld\n", e_both,
           (long long)agree, (long long)checked);
    /* Reordering a bf16 cache (beam search) moves its rows. */
    int64_t blk = kc.max_len * kc.head_dim;
    int differ = memcmp(kc.k16, kc.k16 + LH * blk, (size_t)blk * 2) != 0;
    CHECK_OK(qkv_kv_cache_reorder(c, &kc, (int64_t[]){1, 1}));
    CHECK(differ && !memcmp(kc.k16, kc.k16 + LH * blk, (size_t)blk * 2), "bf16 cache reorder");
    qkv_kv_cache_free(&kc);
    qkv_bf16_weights_free(&w);
    qkv_lm_free(&m);
    qkv_lm_free(&mr);
    qkv_params_free(p);
    qkv_params_free(pr);
    qkv_ctx_free(c);
}

/* ---- bad arguments ------------------------------------------------------------------------- */

static void test_bad(void)
{
    qkv_bf16_weights w;
    CHECK(qkv_bf16_weights_init(NULL, NULL) == QKV_ERR_ARG, "bf16_weights_init(NULL)");
    CHECK(qkv_bf16_weights_init(&w, NULL) == QKV_ERR_ARG &&
              !strncmp(qkv_last_error(), "bf16_weights_init", 17),
          "bf16_weights_init without params: %s", qkv_last_error());
    qkv_bf16_weights_free(NULL);
    qkv_kv_cache kc;
    CHECK(qkv_kv_cache_init_bf16(&kc, 1, 0, 1, 1, 1) == QKV_ERR_ARG &&
              !strncmp(qkv_last_error(), "kv_cache_init_bf16", 18),
          "kv_cache_init_bf16 with batch 0: %s", qkv_last_error());
    qkv_params *p;
    CHECK_OK(qkv_params_new(&p));
    CHECK_OK(qkv_bf16_weights_init(&w, p));
    CHECK(w.count == 0, "no parameters, no copies");
    qkv_bf16_weights_free(&w);
    qkv_params_free(p);
}

int main(void)
{
    CHECK_OK(qkv_arena_new(&A, (size_t)64 << 20));
    qkv_rng_seed(&R, 3);
    test_conversions();
    test_kernel();
    test_matvec();
    test_lm();
    test_bad();
    qkv_arena_free(A);
    return h_finish("test_bf16_decode");
}
