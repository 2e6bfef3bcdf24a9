/* test_nan.c: NaN inputs to attention, one behaviour on every path
 * (docs/reliability.md, "NaN and infinity"): the reference kernel, each
 * SIMD build of the fused kernel this CPU runs (avx512, avx2, portable),
 * with and without weights, the decoding kernel over float and fp16
 * caches, and MultiheadAttention. The rule, per query row i:
 *  - every key masked: output 0, weights 0, dq_i 0, whatever q_i holds;
 *  - else a NaN score of an unmasked key (NaN in q_i, in an unmasked k_j,
 *    a NaN float-mask value): output row, weights row and dq_i all NaN;
 *  - else output column x is NaN where an unmasked key's v_j[x] is NaN;
 *  - a masked key's k and v are never read (a NaN there changes nothing).
 * The expected pattern is computed here from the rule, not from a kernel;
 * finite values must match the reference kernel's to 1e-5. */
#include "gradcheck.h"
#include "kernels/attention.h" /* qkv_attn_simd_force */
#include "kernels/attention_decode.h"
#include "kernels/half.h"

/* The paths: the reference, each FP32 build, and the BF16 mode over each
 * (its bf16 build follows the FP32 one: bf16_avx512, bf16_avx2,
 * bf16_portable), whose finite values are checked to bf16's tolerance. */
static const char *PATHS[] = {"reference", "avx512", "avx2", "portable",
                              "avx512 bf16", "avx2 bf16", "portable bf16"};
enum { NPATH = 7, H = 2, D = 4, DV = 3 };

static qkv_arena *A;
static int path_bf16; /* the path runs in the BF16 mode */

/* Selects path p (0 the reference); 0 if this CPU cannot run it. */
static int path_use(int p)
{
    static const char *const builds[NPATH] = {"", "avx512", "avx2", "portable", "avx512", "avx2", "portable"};
    qkv_set_reference(p == 0);
    path_bf16 = p >= 4;
    if (p == 0) return 1;
    if (qkv_attn_simd_force(builds[p])) return 1;
    printf("note: the %s build does not run on this CPU; not tested here\n", PATHS[p]);
    return 0;
}

/* One sdpa problem: q (1,H,L,D), k (1,H,S,D), v (1,H,S,DV); a BOOL or F32
 * (L,S) mask or none; causal or not. */
typedef struct {
    int64_t L, S;
    float *q, *k, *v;
    uint8_t *bmask; /* (L,S) or NULL */
    float *fmask;   /* (L,S) or NULL */
    int causal;     /* top-left */
} problem;

static problem problem_make(int64_t L, int64_t S, uint64_t seed)
{
    problem P = {L, S, NULL, NULL, NULL, NULL, NULL, 0};
    qkv_rng r;
    qkv_rng_seed(&r, seed);
    P.q = qkv_arena_alloc(A, (size_t)(H * L * D) * sizeof(float));
    P.k = qkv_arena_alloc(A, (size_t)(H * S * D) * sizeof(float));
    P.v = qkv_arena_alloc(A, (size_t)(H * S * DV) * sizeof(float));
    qkv_rng_fill_uniform(&r, P.q, H * L * D, -1, 1);
    qkv_rng_fill_uniform(&r, P.k, H * S * D, -1, 1);
    qkv_rng_fill_uniform(&r, P.v, H * S * DV, -1, 1);
    return P;
}

static int masked(const problem *P, int64_t i, int64_t j)
{
    return (P->causal && j > i) || (P->bmask && P->bmask[i * P->S + j]) ||
           (P->fmask && P->fmask[i * P->S + j] == -INFINITY);
}

static int any_nan(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (isnan(x[i])) return 1;
    return 0;
}

/* The rule: row (h,i) is 'z' (every key masked: zeros), 'n' (all NaN) or
 * 'f' (finite but for the columns nancol[x] = 1). */
static char expect_row(const problem *P, int64_t h, int64_t i, int nancol[DV])
{
    int visible = 0, nan = 0;
    for (int x = 0; x < DV; x++) nancol[x] = 0;
    for (int64_t j = 0; j < P->S; j++) {
        if (masked(P, i, j)) continue;
        visible = 1;
        if (any_nan(P->q + (h * P->L + i) * D, D) || any_nan(P->k + (h * P->S + j) * D, D) ||
            (P->fmask && isnan(P->fmask[i * P->S + j])))
            nan = 1;
        for (int x = 0; x < DV; x++) nancol[x] |= isnan(P->v[(h * P->S + j) * DV + x]);
    }
    return !visible ? 'z' : nan ? 'n' : 'f';
}

/* Runs sdpa on the current path: out (H,L,DV), w (H,L,S) when want_w, and
 * dq (H,L,D) from a backward with dout = 1 when dq is not NULL. */
static void run(const problem *P, int want_w, float *out, float *w, float *dq)
{
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    if (path_bf16) CHECK_OK(qkv_ctx_set_precision(c, QKV_BF16));
    qkv_arena *a = qkv_ctx_arena(c);
    qkv_tensor *q, *k, *v, *o, *wt = NULL, *m = NULL;
    CHECK_OK(qkv_tensor_wrap(a, P->q, 4, (int64_t[]){1, H, P->L, D}, &q));
    CHECK_OK(qkv_tensor_wrap(a, P->k, 4, (int64_t[]){1, H, P->S, D}, &k));
    CHECK_OK(qkv_tensor_wrap(a, P->v, 4, (int64_t[]){1, H, P->S, DV}, &v));
    if (dq) {
        qkv_tensor_grad(a, q);
        q->requires_grad = 1;
        memset(q->grad, 0, (size_t)(H * P->L * D) * sizeof(float));
    }
    qkv_sdpa_opts o_ = qkv_sdpa_opts_default();
    if (P->bmask) CHECK_OK(qkv_tensor_wrap_bool(a, P->bmask, 2, (int64_t[]){P->L, P->S}, &m));
    if (P->fmask) CHECK_OK(qkv_tensor_wrap(a, P->fmask, 2, (int64_t[]){P->L, P->S}, &m));
    o_.attn_mask = m;
    o_.causal = P->causal ? QKV_CAUSAL_TOP_LEFT : QKV_CAUSAL_NONE;
    o_.need_weights = want_w;
    CHECK_OK(qkv_sdpa(c, q, k, v, &o_, &o, want_w ? &wt : NULL));
    if (o) memcpy(out, o->data, (size_t)(H * P->L * DV) * sizeof(float));
    if (want_w && wt) memcpy(w, wt->data, (size_t)(H * P->L * P->S) * sizeof(float));
    if (dq && o) {
        float *ones = malloc((size_t)(H * P->L * DV) * sizeof(float));
        for (int64_t x = 0; x < H * P->L * DV; x++) ones[x] = 1;
        CHECK_OK(qkv_backward(c, o, ones));
        memcpy(dq, q->grad, (size_t)(H * P->L * D) * sizeof(float));
        free(ones);
    }
    qkv_ctx_free(c);
}

/* Checks row (h,i) of x (rows of n, ref the reference's) against its
 * expected kind; cols (may be NULL) the NaN columns of an 'f' row. */
static void check_row(const char *what, const char *path, int64_t h, int64_t i, char kind,
                      const int *cols, const float *x, const float *ref, int64_t n)
{
    for (int64_t c = 0; c < n; c++) {
        float e = x[c];
        int want_nan = kind == 'n' || (kind == 'f' && cols && cols[c]);
        if (kind == 'z')
            CHECK(e == 0, "%s %s: row (%lld,%lld) has every key masked: [%lld] = %g, not 0", path, what,
                  (long long)h, (long long)i, (long long)c, e);
        else if (want_nan)
            CHECK(isnan(e), "%s %s: row (%lld,%lld)[%lld] = %g, expected NaN", path, what, (long long)h,
                  (long long)i, (long long)c, e);
        else /* bf16 operands: |q.k| <= 4 and |v| <= 1 rounded to 2^-9 relative */
            CHECK(isfinite(e) && fabsf(e - ref[c]) <= (path_bf16 ? 3e-2f : 1e-5f),
                  "%s %s: row (%lld,%lld)[%lld] = %g, reference %g",
                  path, what, (long long)h, (long long)i, (long long)c, e, ref[c]);
    }
}

/* Every path against the rule: out, weights (masked entries 0 in an 'f'
 * row), and dq when grads (then no NaN may sit in v or k of a visible key:
 * dq of such rows is not part of the rule). */
static void check_paths(const char *name, const problem *P, int grads)
{
    int64_t L = P->L, S = P->S;
    size_t no = (size_t)(H * L * DV), nw = (size_t)(H * L * S), nq = (size_t)(H * L * D);
    float *ref = calloc(no, 4), *refw = calloc(nw, 4), *refdq = calloc(nq, 4);
    float *out = calloc(no, 4), *out2 = calloc(no, 4), *w = calloc(nw, 4), *dq = calloc(nq, 4);
    char label[96];
    for (int p = 0; p < NPATH; p++) {
        if (!path_use(p)) continue;
        snprintf(label, sizeof label, "%s %s", name, PATHS[p]);
        run(P, 1, out, w, grads ? dq : NULL);
        run(P, 0, out2, NULL, NULL);
        if (p == 0) {
            memcpy(ref, out, no * 4), memcpy(refw, w, nw * 4), memcpy(refdq, dq, nq * 4);
        }
        CHECK(!memcmp(out, out2, no * 4), "%s: the output depends on need_weights", label);
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < L; i++) {
                int cols[DV];
                char kind = expect_row(P, h, i, cols);
                int64_t r = h * L + i;
                check_row("out", label, h, i, kind, cols, out + r * DV, ref + r * DV, DV);
                check_row("weights", label, h, i, kind, NULL, w + r * S, refw + r * S, S);
                for (int64_t j = 0; kind == 'f' && j < S; j++)
                    if (masked(P, i, j))
                        CHECK(w[r * S + j] == 0, "%s: weight (%lld,%lld,%lld) of a masked key is %g", label,
                              (long long)h, (long long)i, (long long)j, w[r * S + j]);
                if (grads) check_row("dq", label, h, i, kind, NULL, dq + r * D, refdq + r * D, D);
            }
    }
    qkv_set_reference(0);
    qkv_attn_simd_force(NULL);
    free(ref), free(refw), free(refdq), free(out), free(out2), free(w), free(dq);
}

/* A boolean mask: row 3 fully masked (and its q NaN in both heads); key 5
 * masked for every row (its k and v NaN in head 0); q NaN at row 1 of head
 * 0 only, and a NaN k at an unmasked key of head 1 (every live row of head
 * 1 NaN). L = 70, S = 200: two query blocks, two key tiles. */
static void test_bool_mask(void)
{
    problem P = problem_make(70, 200, 1);
    P.bmask = qkv_arena_alloc(A, (size_t)(P.L * P.S));
    memset(P.bmask, 0, (size_t)(P.L * P.S));
    for (int64_t j = 0; j < P.S; j++) P.bmask[3 * P.S + j] = 1;
    for (int64_t i = 0; i < P.L; i++) P.bmask[i * P.S + 5] = 1;
    for (int h = 0; h < H; h++) P.q[(h * P.L + 3) * D + 0] = NAN;
    P.k[5 * D + 1] = NAN, P.v[5 * DV + 0] = NAN; /* head 0, masked key 5 */
    P.q[1 * D + 2] = NAN;                         /* head 0, row 1 */
    check_paths("bool mask, NaN q", &P, 1);
    P.k[(1 * P.S + 150) * D] = NAN; /* head 1, unmasked key 150 */
    check_paths("bool mask, NaN q and k", &P, 0);
}

/* A float mask with a NaN value at (2,7) and -inf at (4,*) except one key
 * with NaN q (row 4 then NaN: its one visible key has a NaN score). */
static void test_float_mask(void)
{
    problem P = problem_make(9, 20, 2);
    P.fmask = qkv_arena_alloc(A, (size_t)(P.L * P.S) * sizeof(float));
    for (int64_t x = 0; x < P.L * P.S; x++) P.fmask[x] = 0.25f * (float)(x % 3);
    P.fmask[2 * P.S + 7] = NAN;
    for (int64_t j = 0; j < P.S; j++) P.fmask[4 * P.S + j] = j == 11 ? 0.0f : -INFINITY;
    check_paths("float mask NaN", &P, 1);
    P.q[(1 * P.L + 4) * D] = NAN; /* head 1, row 4 */
    check_paths("float mask NaN, NaN q", &P, 1);
}

/* Causal: a NaN v at key 40 reaches rows >= 40 (its column only), a NaN k
 * at key 50 makes rows >= 50 NaN; earlier rows never read them. */
static void test_causal(void)
{
    problem P = problem_make(140, 140, 3);
    P.causal = 1;
    P.v[40 * DV + 1] = NAN;  /* head 0 */
    P.k[(P.S + 50) * D] = NAN; /* head 1 */
    check_paths("causal, NaN v and k", &P, 0);
    P.v[40 * DV + 1] = 0.5f, P.k[(P.S + 50) * D] = 0.5f;
    P.k[(P.S + 130) * D + 3] = NAN; /* head 1, key 130: in the second key tile */
    check_paths("causal, NaN k late", &P, 1);
    /* L = 70 < S = 200: the second query block sees keys [0,70), a tile
     * of 70 keys whose rows are worked in fours; keys 70 and 71 after it
     * are masked for every row, and their NaN k and v must not be read
     * (the bf16 forward packs keys once per call: its packed rows after
     * key 69 are those keys, not zeros). */
    problem C = problem_make(70, 200, 4);
    C.causal = 1;
    C.k[70 * D] = NAN, C.v[71 * DV + 2] = NAN;             /* head 0 */
    C.k[(C.S + 71) * D + 1] = NAN, C.v[(C.S + 70) * DV] = NAN; /* head 1 */
    check_paths("causal L70 S200, NaN after the last visible key", &C, 1);
}

/* The decoding kernel (float, fp16 and bf16 cache): T = 3 queries over S = 9 keys
 * in chunks of 2, causal bottom-right, key padding; the same rule. */
static void test_decode(void)
{
    enum { T = 3, S = 9 };
    problem P = problem_make(T, S, 4);
    uint8_t kpm[S] = {0, 0, 1, 0, 0, 0, 0, 0, 0};
    P.bmask = qkv_arena_alloc(A, T * S);
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < S; j++) P.bmask[i * S + j] = kpm[j] || j > S - T + i;
    P.q[(0 * T + 1) * D] = NAN;             /* head 0, query 1 */
    P.k[2 * D] = NAN, P.v[2 * DV] = NAN;    /* head 0, padded key 2 */
    P.v[(S + 4) * DV + 2] = NAN;            /* head 1, key 4: column 2 */
    P.k[(S + 8) * D] = NAN;                 /* head 1, key 8: only query 2 sees it */
    /* decode takes v rows of D floats: copy v (DV) into (S,D) rows */
    float *vd = qkv_arena_alloc(A, (size_t)(H * S * D) * sizeof(float));
    uint16_t *k16 = qkv_arena_alloc(A, (size_t)(H * S * D) * 2), *v16 = qkv_arena_alloc(A, (size_t)(H * S * D) * 2);
    uint16_t *kb = qkv_arena_alloc(A, (size_t)(H * S * D) * 2), *vb = qkv_arena_alloc(A, (size_t)(H * S * D) * 2);
    for (int64_t r = 0; r < H * S; r++)
        for (int x = 0; x < D; x++) vd[r * D + x] = x < DV ? P.v[r * DV + x] : 0.0f;
    for (int64_t x = 0; x < H * S * D; x++) {
        k16[x] = qkv_half_from_float(P.k[x]);
        v16[x] = qkv_half_from_float(vd[x]);
        kb[x] = qkv_bf16_from_float(P.k[x]);
        vb[x] = qkv_bf16_from_float(vd[x]);
    }
    qkv_decode_desc d = {1, H, T, S, D, S * D, 1.0f / 2.0f, 1, kpm, S, 2, 0, 0};
    float out[H * T * D], ref[H * T * DV];
    run(&P, 0, ref, NULL, NULL); /* the current default path as the value reference */
    static const char *const names[] = {"decode", "decode fp16", "decode bf16"};
    for (int half = 0; half < 3; half++) { /* 0 floats, 1 fp16, 2 bf16 */
        if (half == 2) CHECK_OK(qkv_decode_attend_bf16(A, &d, P.q, kb, vb, out));
        else CHECK_OK(half ? qkv_decode_attend_half(A, &d, P.q, k16, v16, out) : qkv_decode_attend(A, &d, P.q, P.k, vd, out));
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < T; i++) {
                int cols[DV];
                char kind = expect_row(&P, h, i, cols);
                float o3[DV];
                for (int x = 0; x < DV; x++) o3[x] = out[(h * T + i) * D + x];
                if (half) /* 16-bit keys and values: compare the pattern, values loosely */
                    for (int x = 0; x < DV; x++)
                        if (isfinite(o3[x]) && fabsf(o3[x] - ref[(h * T + i) * DV + x]) < (half == 2 ? 3e-2f : 5e-3f))
                            o3[x] = ref[(h * T + i) * DV + x];
                check_row("out", names[half], h, i, kind, cols, o3, ref + (h * T + i) * DV, DV);
            }
    }
}

/* MultiheadAttention: a NaN in query row 2 of batch 1 makes that output
 * row NaN (every head of it), the other rows finite; with and without
 * weights, on the reference and the default fast path. */
static void test_mha(void)
{
    qkv_params *ps;
    CHECK_OK(qkv_params_new(&ps));
    qkv_rng r;
    qkv_rng_seed(&r, 5);
    qkv_mha m;
    qkv_mha_opts mo = qkv_mha_opts_default(8, 2);
    CHECK_OK(qkv_mha_init(&m, &mo, ps, "", &r));
    enum { L = 5, N = 2, E = 8 };
    float x[L * N * E];
    qkv_rng_fill_uniform(&r, x, L * N * E, -1, 1);
    x[(2 * N + 1) * E + 3] = NAN; /* (L,N,E): row 2 of batch 1 */
    for (int p = 0; p < 2; p++)
        for (int ww = 0; ww < 2; ww++) {
            qkv_set_reference(p == 0);
            qkv_ctx *c;
            CHECK_OK(qkv_ctx_new(&c));
            qkv_tensor *in, *out = NULL, *w = NULL;
            CHECK_OK(qkv_tensor_wrap(qkv_ctx_arena(c), x, 3, (int64_t[]){L, N, E}, &in));
            qkv_mha_args a = qkv_mha_args_default();
            a.need_weights = ww;
            CHECK_OK(qkv_mha_forward(c, &m, in, in, in, &a, &out, ww ? &w : NULL));
            for (int64_t l = 0; out && l < L; l++)
                for (int64_t n = 0; n < N; n++)
                    for (int64_t e = 0; e < E; e++) {
                        float y = out->data[(l * N + n) * E + e];
                        /* row 2 of batch 1 is NaN; every other query of
                         * batch 1 reads key 2 (NaN k, v): NaN too */
                        int nan = n == 1;
                        CHECK(nan ? isnan(y) : isfinite(y), "mha %s weights %d: out (%lld,%lld,%lld) = %g",
                              p ? "fast" : "reference", ww, (long long)l, (long long)n, (long long)e, y);
                    }
            if (ww && w)
                for (int64_t i = 0; i < N * L * L; i++)
                    CHECK(i / (L * L) == 1 ? isnan(w->data[i]) : isfinite(w->data[i]),
                          "mha weights [%lld] = %g", (long long)i, w->data[i]);
            qkv_ctx_free(c);
        }
    qkv_set_reference(0);
    qkv_params_free(ps);
}

int main(void)
{
    CHECK_OK(qkv_arena_new(&A, 1 << 22));
    test_bool_mask();
    test_float_mask();
    test_causal();
    test_decode();
    test_mha();
    qkv_arena_free(A);
    return h_finish("test_nan");
}
