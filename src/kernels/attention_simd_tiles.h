/* attention_simd_tiles.h: the pieces attention_simd.h's forward and
 * backward are built from, included by it once (after VW, NV, ISA and the
 * includes): the vector type and its exp, the tile product tile_gemm, the
 * operands' row copies, which keys a query block visits, and the defaults
 * that attention_bf16.h replaces in the BF16 builds. */
enum { BQ = QKV_ATTN_BQ, BK = QKV_ATTN_BK, R = 4 };

typedef float vf __attribute__((vector_size(VW * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(VW * sizeof(int32_t))));

static inline vf vload(const float *p)
{
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void vstore(float *p, vf v) { memcpy(p, &v, sizeof v); }

/* a in every lane (a - 0 is exactly a, so this folds to one broadcast;
 * 0 + a would not, for a = -0). */
static inline vf vsplat(float a) { return a - (vf){0}; }

static inline vf vselect(vi mask, vf a, vf b) /* mask ? a : b, lane by lane */
{
    return (vf)(((vi)a & mask) | ((vi)b & ~mask));
}

/* max(a, b) lane by lane, NaN if either is: a NaN score makes its query's
 * running max NaN for good, and with it the row's output and lse. */
static inline vf vmax(vf a, vf b) { return vselect((a > b) | (a != a), a, b); }

/* a*b + c, rounded once where the target has a fused multiply-add (the
 * including file may define VFMA as its intrinsic), rounded twice where it
 * has none; SFMA the same for one float. Written out rather than left to
 * the compiler's contraction, which depends on the optimisation level and
 * on how it vectorises a loop, so that row_dot below and tile_block sum
 * alike under any flags. */
#if defined(__FP_FAST_FMAF)
#define SFMA(a, b, c) fmaf(a, b, c)
#else
#define SFMA(a, b, c) ((a) * (b) + (c))
#endif
#ifndef VFMA
static inline vf vfma_lanes(vf a, vf b, vf c)
{
    for (int i = 0; i < VW; i++) c[i] = SFMA(a[i], b[i], c[i]);
    return c;
}
#define VFMA vfma_lanes
#endif

/* exp(x) lane by lane: x = n ln2 + r with |r| <= ln2/2, a degree-7
 * polynomial for exp(r) (Cephes' expf coefficients, about 1 ulp; degree 4
 * with short_poly: 6.6e-6 relative), times 2^n. x <= 88; NaN stays NaN.
 * The generic code puts 2^n in the exponent bits and gives 0 below -87.3
 * (and at -inf); AVX-512 scales by 2^n with vscalefps (the same bits where
 * exp(x) is normal, subnormal results between -103.3 and -87.3, 0 below),
 * six instructions fewer. */
static inline __attribute__((always_inline)) vf vexp_poly(vf x, int short_poly)
{
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
#if VW == 16 && defined(__AVX512F__)
    /* clamped to [-150, 88], NaN kept (min/max return their second operand
     * when either is NaN); at -150 the scaling underflows to 0 */
    x = (vf)_mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(_mm512_set1_ps(-150.0f), (__m512)x));
#else
    vi tiny = x < -87.3f;
    x = vselect(x > 88.0f, vsplat(88.0f), vselect(tiny, vsplat(0.0f), x));
#endif
    vf t = x * 1.44269504088896341f + magic;
    vf n = t - magic;
    vf r = x - n * 0.693359375f + n * 2.12194440e-4f;
    vf p;
    if (short_poly) { /* degree 4 (a minimax fit): relative error 6.6e-6 */
        p = vsplat(4.1658710688e-2f);
        p = p * r + 1.6753476858e-1f;
        p = p * r + 5.0001144409e-1f;
    } else {
        p = vsplat(1.9875691500e-4f);
        p = p * r + 1.3981999507e-3f;
        p = p * r + 8.3334519073e-3f;
        p = p * r + 4.1665795894e-2f;
        p = p * r + 1.6666665459e-1f;
        p = p * r + 5.0000001201e-1f;
    }
    p = p * (r * r) + r + 1.0f;
#if VW == 16 && defined(__AVX512F__)
    return (vf)_mm512_scalef_ps((__m512)p, (__m512)n);
#else
    vi e = ((vi)t - (vi)vsplat(magic) + 127) << 23;
    return vselect(tiny, vsplat(0.0f), p * (vf)e);
#endif
}

static inline vf vexp(vf x) { return vexp_poly(x, 0); }

/* The probabilities p = exp(s - m) of the forward and the backward: in
 * the bf16 builds, which round p (and dS = p (dP - D)) to 8 bits for the
 * products (2^-9 relative), from the degree-4 polynomial, whose 6.6e-6 is
 * 600 times finer (the forward's row sums l and log-sum-exp take the
 * same p); vexp's 1 ulp in the FP32 builds and for the rescaling. */
#if defined(ATTN_BF16)
static inline vf vexp_p(vf x) { return vexp_poly(x, 1); }
#else
static inline vf vexp_p(vf x) { return vexp_poly(x, 0); }
#endif

/* GCC folds each use of b[v] into its FMA as a memory operand, which loads
 * it R times instead of once; an empty asm that takes the vector in a
 * register stops that (x86: constraint "v", any SIMD register). */
#if defined(__x86_64__) && defined(__GNUC__)
#define KEEP_IN_REGISTER(x) __asm__("" : "+v"(x))
#else
#define KEEP_IN_REGISTER(x) (void)0
#endif

/* One register block: C[r][c] (+)= sum_k A(r,k) B[k][c] for R rows and nv
 * vectors of columns, accumulators in registers. A(r,k) = A[r*rs + k*ks]. */
static inline __attribute__((always_inline)) void
tile_block(const int nv, int64_t K, const float *A, int64_t rs, int64_t ks, const float *B,
           int64_t ldb, float *C, int64_t ldc, int accumulate)
{
    vf acc[R][NV];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++) acc[r][v] = accumulate ? vload(C + r * ldc + v * VW) : vsplat(0);
    for (int64_t k = 0; k < K; k++) {
        vf b[NV];
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++) {
            b[v] = vload(B + k * ldb + v * VW);
            KEEP_IN_REGISTER(b[v]);
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            vf a = vsplat(A[r * rs + k * ks]);
#pragma GCC unroll 8
            for (int v = 0; v < nv; v++) acc[r][v] = VFMA(a, b[v], acc[r][v]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++) vstore(C + r * ldc + v * VW, acc[r][v]);
}

static inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Scratch for the bf16 builds' operand copies (attention_bf16.h); unused
 * by the FP32 builds. */
typedef struct {
    float *a, *b, *q, *p, *t, *x;
    const uint32_t *ready_a, *ready_b; /* an operand packed before, or NULL */
} packs;

/* pk with operands packed before (NULL: tile_gemm packs it). */
static inline packs packs_ready(packs pk, const uint32_t *a, const uint32_t *b)
{
    pk.ready_a = a;
    pk.ready_b = b;
    return pk;
}

/* The backward's key tile packed once for its query blocks (the bf16
 * dot-product build's bwd_tile_packs); NULL in the others. */
typedef struct {
    const uint32_t *k_rows, *v_rows, *k_pairs;
} tile_packs;

/* The backward's query block packed once per call (bwd_block_packs): Q^T
 * and dO^T as pairs along D, Q and dO as pairs along the queries; NULL in
 * the builds that do not. */
typedef struct {
    const uint32_t *qt, *dot, *qb, *dob;
} block_packs;

/* One head's keys and values packed for the forward (attention_bf16.h's
 * dot-product build); NULL in the others. */
typedef struct {
    const uint32_t *k, *v;
} kv_packed;

/* C (M,N) (+)= A (M,K) B (K,N), A(r,k) = A[r*rs + k*ks], B and C row-major
 * with leading dimensions ldb, ldc. M is a multiple of R, N of VW. Columns
 * go in chunks of NV vectors (a chunk of B, K x NV*VW, stays in L1 while
 * every row block passes over it), the remainder a vector at a time. */
static __attribute__((unused)) void tile_gemm_f32(int64_t M, int64_t N, int64_t K, const float *A, int64_t rs, int64_t ks,
                          const float *B, int64_t ldb, float *C, int64_t ldc, int accumulate)
{
    int64_t nvec = N / VW, c = 0;
    for (; c + NV <= nvec; c += NV)
        for (int64_t r = 0; r < M; r += R)
            tile_block(NV, K, A + r * rs, rs, ks, B + c * VW, ldb, C + r * ldc + c * VW, ldc,
                       accumulate);
    for (; c < nvec; c++)
        for (int64_t r = 0; r < M; r += R)
            tile_block(1, K, A + r * rs, rs, ks, B + c * VW, ldb, C + r * ldc + c * VW, ldc,
                       accumulate);
}

/* ---- operands ------------------------------------------------------------ */

/* y = x, or 0 (x NULL), over w floats: vector moves, not a call to
 * memcpy or memset per row (a ViT head's rows are 16 floats). */
static inline void row_set(float *y, const float *x, int64_t w)
{
    int64_t c = 0;
    for (; c + VW <= w; c += VW) vstore(y + c, x ? vload(x + c) : vsplat(0));
    for (; c < w; c++) y[c] = x ? x[c] : 0.0f;
}

/* Rows [r0,r1) of a head, rows ld apart, set to 0 (w floats each). */
static void rows_zero(float *x, int64_t ld, int64_t w, int64_t r0, int64_t r1)
{
    for (int64_t r = r0; r < r1; r++) row_set(x + r * ld, NULL, w);
}

/* Rows [r0,r1) of x (rows of w floats, ld apart) as a block of `rows`
 * rows, wp >= w floats apart: x itself when the block is whole and
 * ld == w == wp, otherwise a zero-padded copy in buf (rows, wp). */
static const float *rows_block(const float *x, int64_t ld, int64_t w, int64_t r0, int64_t r1,
                               int64_t rows, int64_t wp, float *buf)
{
    if (r1 - r0 == rows && w == wp && ld == w) return x + r0 * w;
    /* row copies and zero fills, no test per element (at a ViT's head size
     * 16 these copies cost about what the tile's products do); rows that
     * need no padding (w == wp: a ViT's 50 keys of 16 worked as 52) in one
     * copy, not one call of 64 bytes per row */
    if (w == wp && ld == w)
        memcpy(buf, x + r0 * w, (size_t)((r1 - r0) * w) * sizeof(float));
    else
        for (int64_t r = 0; r < r1 - r0; r++) {
            row_set(buf + r * wp, x + (r0 + r) * ld, w);
            row_set(buf + r * wp + w, NULL, wp - w);
        }
    memset(buf + (r1 - r0) * wp, 0, (size_t)((rows - (r1 - r0)) * wp) * sizeof(float));
    return buf;
}

/* rows_block for readers that take a row stride: the rows themselves
 * (*ldy = ld, strided or not) where the block needs no padding (whole, and
 * w == wp), else rows_block's padded copy (*ldy = wp). */
static __attribute__((unused)) const float *rows_strided(const float *x, int64_t ld, int64_t w, int64_t r0,
                                                         int64_t r1, int64_t rows, int64_t wp, float *buf,
                                                         int64_t *ldy)
{
    if (r1 - r0 == rows && w == wp) {
        *ldy = ld;
        return x + r0 * ld;
    }
    *ldy = wp;
    return rows_block(x, ld, w, r0, r1, rows, wp, buf);
}

/* xt (w, rows) = rows [r0,r1) of x (rows of w floats, ld apart)
 * transposed, zero columns past r1 - r0. */
static void rows_transpose(const float *x, int64_t ld, int64_t w, int64_t r0, int64_t r1, int64_t rows,
                           float *xt)
{
    for (int64_t r = 0; r < r1 - r0; r++)
        for (int64_t c = 0; c < w; c++) xt[c * rows + r] = x[(r0 + r) * ld + c];
    for (int64_t c = 0; c < w; c++)
        for (int64_t r = r1 - r0; r < rows; r++) xt[c * rows + r] = 0.0f;
}

/* ---- which keys a query block visits -------------------------------------- */

/* Keys [*lo, *hi) among the masked keys that rows [i0, i1) can see; keys at
 * index >= mask_keys are always visible and are walked after them. */
static void key_range(const qkv_attn_desc *d, int64_t i0, int64_t i1, int64_t *lo, int64_t *hi)
{
    int64_t a = 0, b = d->mask_keys;
    int64_t first = i0 + d->diag, last = i1 - 1 + d->diag;
    if (d->causal != QKV_CAUSAL_NONE && last + 1 < b) b = last + 1;
    if (d->window >= 0) {
        if (last + d->window + 1 < b) b = last + d->window + 1;
        if (first - d->window > a) a = first - d->window;
    }
    if (b <= a) a = b = d->mask_keys; /* no masked key visible: straight to the extras */
    *lo = a;
    *hi = b;
}

/* The tiles of key indices rows [i0,i1) visit: [lo,hi) then [mk,S). */
typedef struct {
    int64_t lo, hi, mk, S;
} key_walk;

static key_walk key_walk_make(const qkv_attn_desc *d, int64_t i0, int64_t i1)
{
    key_walk w;
    key_range(d, i0, i1, &w.lo, &w.hi);
    w.mk = d->mask_keys;
    w.S = d->S;
    return w;
}

/* Next tile start at or after j0 (tiles of BK); -1 when done. */
static int64_t key_walk_next(const key_walk *w, int64_t j0, int64_t *j1)
{
    if (j0 < w->lo) j0 = w->lo;
    if (j0 >= w->hi && j0 < w->mk) j0 = w->mk;
    if (j0 >= w->S) return -1;
    int64_t end = j0 < w->hi ? w->hi : w->S;
    *j1 = j0 + BK < end ? j0 + BK : end;
    return j0;
}

/* Does the (queries [i0,i1), keys [j0,j1)) tile need the per-element mask
 * term? Not when no mask is set, when its keys are past mask_keys, or when
 * a causal/local band is the only mask and covers the whole tile. */
static int tile_masked(const qkv_attn_desc *d, int64_t i0, int64_t i1, int64_t j0, int64_t j1)
{
    if (!qkv_attn_has_mask(d) || j0 >= d->mask_keys) return 0;
    if (d->bmask || d->fmask || d->kpm || d->kpm_f || d->alibi) return 1;
    int64_t first = i0 + d->diag, last = i1 - 1 + d->diag;
    if (d->causal != QKV_CAUSAL_NONE && j1 - 1 > first) return 1;
    if (d->window >= 0 && (j1 - 1 > first + d->window || j0 < last - d->window)) return 1;
    return 0;
}

/* Is the causal mask d's only mask? */
static int causal_only(const qkv_attn_desc *d)
{
    return d->causal != QKV_CAUSAL_NONE && d->window < 0 && !d->bmask && !d->fmask && !d->kpm &&
           !d->kpm_f && !d->alibi;
}

/* The products of the kernels below: FP32 as above, or with bf16 operands
 * in the bf16 builds (attention_bf16.h: pack scratch in pk). */
#if defined(ATTN_BF16)
#include "kernels/attention_bf16.h"
#else
static inline size_t pack_scratch(const qkv_attn_desc *d) { (void)d; return 0; }
static inline size_t fwd_shared(const qkv_attn_desc *d) { (void)d; return 0; }
static inline size_t bwd_shared(const qkv_attn_desc *d) { (void)d; return 0; }
static inline packs packs_make(const qkv_attn_desc *d, float *at)
{
    (void)d;
    return (packs){at, at, at, at, at, at, NULL, NULL};
}
static inline void tile_gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t rs,
                             int64_t ks, const float *B, int64_t ldb, float *C, int64_t ldc,
                             int accumulate, packs pk)
{
    (void)pk;
    tile_gemm_f32(M, N, K, A, rs, ks, B, ldb, C, ldc, accumulate);
}
#endif

/* A thread's set-up of the tile registers before it runs a kernel's
 * products, and their release after (attention_bf16.h's AMX build);
 * nothing in the others. */
#if !defined(ATTN_TILES)
static inline void tiles_begin(void) {}
static inline void tiles_end(void) {}
#endif

/* Operands packed once per call, block or tile, where the build does
 * (attention_bf16.h's dot-product build defines ATTN_PACKED); elsewhere
 * these give NULL packs and tile_gemm takes the operands as they are. */
#if !defined(ATTN_PACKED)
static inline size_t bwd_head_floats(const qkv_attn_desc *d) { (void)d; return 0; }
static void bwd_pack_heads(const qkv_attn_desc *d, const float *q, const float *dout, float *shared,
                           float *buf)
{
    (void)d, (void)q, (void)dout, (void)shared, (void)buf;
}
static void bwd_pack_head(const qkv_attn_desc *d, const float *q, const float *dout, int64_t nh, float *hp,
                          float *buf)
{
    (void)d, (void)q, (void)dout, (void)nh, (void)hp, (void)buf;
}
static block_packs bwd_block_packs(const qkv_attn_desc *d, const float *hp, int64_t b)
{
    (void)d, (void)hp, (void)b;
    return (block_packs){NULL, NULL, NULL, NULL};
}
static tile_packs bwd_tile_packs(const qkv_attn_desc *d, const float *kt, int64_t Dp, const float *vt,
                                 int64_t njp, packs pk)
{
    (void)d, (void)kt, (void)Dp, (void)vt, (void)njp, (void)pk;
    return (tile_packs){NULL, NULL, NULL};
}
static int bwd_probs(const qkv_attn_desc *d, tile_packs tp, block_packs bp, int masked, int64_t nj, int64_t njp,
                     const float *lb, float *st)
{
    (void)d, (void)tp, (void)bp, (void)masked, (void)nj, (void)njp, (void)lb, (void)st;
    return 0;
}
static inline size_t fwd_head_floats(const qkv_attn_desc *d) { (void)d; return 0; }
static void fwd_pack_heads(const qkv_attn_desc *d, const float *k, const float *v, float *shared,
                           float *kbuf, float *vbuf)
{
    (void)d, (void)k, (void)v, (void)shared, (void)kbuf, (void)vbuf;
}
static void fwd_pack_head(const qkv_attn_desc *d, const float *k, const float *v, int64_t nh, float *hp,
                          float *kbuf, float *vbuf)
{
    (void)d, (void)k, (void)v, (void)nh, (void)hp, (void)kbuf, (void)vbuf;
}
static kv_packed fwd_head_packs(const qkv_attn_desc *d, const float *hp)
{
    (void)d, (void)hp;
    return (kv_packed){NULL, NULL};
}
static int fwd_block_begin(const qkv_attn_desc *d, const float *q, int64_t ldq, int64_t i0, int64_t i1,
                           packs pk)
{
    (void)d, (void)q, (void)ldq, (void)i0, (void)i1, (void)pk;
    return 0;
}
static int fwd_tile_packed(const qkv_attn_desc *d, kv_packed kv, int64_t j0, int64_t nj)
{
    (void)d, (void)kv, (void)j0, (void)nj;
    return 0;
}
static int fwd_scores(const qkv_attn_desc *d, kv_packed kv, int64_t i0, int64_t i1, int64_t j0, int packed,
                      int64_t nj, int64_t njp, const float *kt, const float *qt, float *st, packs pk, vf *mt)
{
    (void)kv, (void)i0, (void)i1, (void)j0, (void)packed, (void)nj, (void)mt;
    tile_gemm(njp, BQ, d->D, kt, d->D, 1, qt, BQ, st, BQ, 0, pk); /* st = K Q^T */
    return 0;
}
static inline void p_put(float *st, packs pk, int pairs, int64_t j, int64_t i, vf p0, vf p1)
{
    (void)pk, (void)pairs;
    vstore(st + j * BQ + i, p0);
    vstore(st + (j + 1) * BQ + i, p1);
}
static void fwd_pv(kv_packed kv, int64_t j0, int packed, int64_t njp, const float *st, int pairs,
                   const float *vt, int64_t Dvp, float *ob, packs pk)
{
    (void)kv, (void)j0, (void)packed, (void)pairs;
    tile_gemm(BQ, Dvp, njp, st, 1, BQ, vt, Dvp, ob, Dvp, 1, pk); /* O += P V */
}
#endif
