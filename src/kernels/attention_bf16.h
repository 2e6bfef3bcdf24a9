/* attention_bf16.h: the products of the fused attention kernels
 * (attention_simd.h) with bf16 operands, for the BF16 precision mode. Both
 * operands of every product (Q, K, V, the probabilities P, dO, dS) are
 * rounded to bf16 to nearest even; products and sums are FP32, and so is
 * everything between the products (softmax statistics, masks, dropout,
 * the fully-masked-row rules), which attention_simd.h keeps as it is.
 * Included by attention_simd.h when the including file defines ATTN_BF16:
 *   ATTN_BF16_DOT  (attention_bf16_avx512.c) AVX512-BF16: the operands are
 *                  packed into bf16 pairs along the summed index and
 *                  multiplied with vdpbf16ps (_mm512_dpbf16_ps: two products
 *                  per FP32 lane and instruction, twice the FMA rate);
 *   otherwise      (attention_bf16_avx2.c, _portable.c) the operands are
 *                  rounded into FP32 copies and tile_gemm_f32 multiplies
 *                  them: the same numbers up to the order of the sums.
 * The rounding is round-to-nearest-even in both; the instruction
 * (vcvtne2ps2bf16) flushes subnormal inputs (|x| < 2^-126) to zero, the
 * copies keep them (kernels/bf16.h): the only difference besides the order
 * of the sums. */
#include "kernels/bf16.h"

/* Pack scratch, in floats, the same for every bf16 build: an A copy of up
 * to 128 rows of P32 and a B copy of P32 rows of NP, where P32 bounds every
 * summed length (D, Dv, a key tile, a query block) rounded up to 32; then
 * the forward's query block as pairs (D32/2, BQ) and a tile's
 * probabilities as pairs (BK/2, BQ); then the backward's key tile as rows
 * (BK, D32/2) and as pairs (BK/2, D16), its values as rows (BK, Dv32/2). */
typedef struct {
    int64_t a, b, q, p, t, x; /* floats of each copy */
} pack_sizes;

static inline pack_sizes pack_sizes_of(const qkv_attn_desc *d)
{
    int64_t m = d->D > d->Dv ? d->D : d->Dv;
    if (m < BK) m = BK;
    if (m < BQ) m = BQ;
    int64_t p32 = round_up(m, 32), np = BQ, ma = BK > BQ ? BK : BQ;
    if (round_up(d->D, 16) > np) np = round_up(d->D, 16);
    if (round_up(d->Dv, 16) > np) np = round_up(d->Dv, 16);
    int64_t t = BK * (round_up(d->D, 32) / 2 + round_up(d->Dv, 32) / 2) + BK / 2 * round_up(d->D, 16);
    /* x: the AMX build's A operand turned from pairs into rows, (ma, P32/2) */
    return (pack_sizes){ma * p32, p32 * np, round_up(d->D, 32) / 2 * BQ, BK / 2 * BQ, t, ma * p32 / 2};
}

static inline size_t pack_scratch(const qkv_attn_desc *d)
{
    pack_sizes z = pack_sizes_of(d);
    return (size_t)(z.a + z.b + z.q + z.p + z.t + z.x);
}

static inline packs packs_make(const qkv_attn_desc *d, float *at)
{
    pack_sizes z = pack_sizes_of(d);
    float *q = at + z.a + z.b, *t = q + z.q + z.p;
    return (packs){.a = at, .b = at + z.a, .q = q, .p = q + z.q, .t = t, .x = t + z.t};
}

/* The forward's keys and values in bf16, packed once for every query
 * block (the dot-product build's fwd_pack_heads): per head, K as rows
 * of D32/2 pairs and V as pairs of keys (Sp/2, Dv16), Sp = S rounded up to
 * R with zero keys after S. In floats, for all N*H heads. */
static inline int64_t kv_keys(const qkv_attn_desc *d) { return round_up(d->S, R); }
static inline size_t fwd_shared(const qkv_attn_desc *d)
{
    return (size_t)(d->N * d->H * kv_keys(d) * (round_up(d->D, 32) / 2 + round_up(d->Dv, 16) / 2));
}

/* The backward's queries and output gradients in bf16, packed once per
 * call (the dot-product build's bwd_pack_heads) for every key tile: per
 * query block, Q^T and dO^T as pairs along D, Q and dO as pairs along the
 * queries. In floats (u32 pairs), for all N*H heads. */
static inline int64_t bwd_block_pairs(const qkv_attn_desc *d)
{
    return BQ * ((d->D + 1) / 2 + (d->Dv + 1) / 2) + BQ / 2 * (round_up(d->D, 16) + round_up(d->Dv, 16));
}
static inline size_t bwd_shared(const qkv_attn_desc *d)
{
    return (size_t)(d->N * d->H * ((d->L + BQ - 1) / BQ) * bwd_block_pairs(d));
}

#if defined(ATTN_BF16_DOT)
/* ---- AVX512-BF16 ---------------------------------------------------------- */
#include "kernels/bf16_avx512.h"

/* out (M, round_up(K,32)/2) pairs: row r holds row r of x (x[r*ldx + k],
 * k < K) in bf16, a zero after an odd K: pairs along k. */
static void pack_rows(const float *x, int64_t ldx, int64_t M, int64_t K, uint32_t *out)
{
    int64_t w = round_up(K, 32) / 2;
    for (int64_t r = 0; r < M; r++)
        for (int64_t c = 0; c < K; c += 32)
            _mm512_storeu_si512(out + r * w + c / 2, bf16_x32(x + r * ldx + c, K - c));
}

/* out (ceil(K/2), N) pairs: out[kk][c] = (x[2kk][c], x[2kk+1][c]) from
 * row-major x (K,N) with leading dimension ldx, N a multiple of 16; a zero
 * row after an odd K. */
static void pack_pairs(const float *x, int64_t ldx, int64_t K, int64_t N, uint32_t *out)
{
    for (int64_t kk = 0; kk < (K + 1) / 2; kk++) {
        const float *r0 = x + 2 * kk * ldx, *r1 = r0 + ldx;
        int odd = 2 * kk + 1 >= K;
        for (int64_t c = 0; c < N; c += 16) {
            __m512 lo = _mm512_loadu_ps(r0 + c);
            __m512 hi = odd ? _mm512_setzero_ps() : _mm512_loadu_ps(r1 + c);
            _mm512_storeu_si512(out + kk * N + c, bf16_pairs16(lo, hi));
        }
    }
}

/* Where the scores leave the registers (bf16_block_max): rows past `rows`
 * are padding keys (-inf); row r's first lims[r] columns are masked
 * queries (-inf: causal), none where lims is NULL. With lse (the
 * backward's, per column), the probabilities p = exp(s - lse) are stored
 * instead of the scores (0 where s is -inf). */
typedef struct {
    float scale;
    int64_t rows;
    const int64_t *lims;
    const float *lse;
} scores_out;

/* out (ceil(K/2), N) pairs of the transpose of x's first `rows` rows (K
 * floats each, ldx apart): out[kk][r] = (x[r][2kk], x[r][2kk+1]), zero
 * columns from rows to N (a multiple of 16). pack_pairs of rows_transpose's
 * result, the same bits, without transposing floats first: 16 rows at a
 * time become 16 vectors of pairs, transposed in registers. */
static void pack_pairs_t(const float *x, int64_t ldx, int64_t rows, int64_t K, int64_t N, uint32_t *out)
{
    int64_t K2 = (K + 1) / 2;
    for (int64_t r0 = 0; r0 < N; r0 += 16)
        for (int64_t c = 0; c < K; c += 32) {
            __m512i rw[16], t[16];
            for (int i = 0; i < 16; i++)
                rw[i] = r0 + i < rows ? bf16_x32(x + (r0 + i) * ldx + c, K - c) : _mm512_setzero_si512();
            transpose16(rw, t);
            for (int64_t kk = 0; kk < 16 && c / 2 + kk < K2; kk++)
                _mm512_storeu_si512(out + (c / 2 + kk) * N + r0, t[kk]);
        }
}

/* One register block: C[r][c] (+)= sum_kk A(r,kk) . B[kk][c] over pairs,
 * A(r,kk) = A[r*rs + kk*ks] a bf16 pair broadcast to every lane. With mx
 * or o.lse (scores, not accumulating, nv == NV): each row is taken times
 * o.scale, -inf where o masks it; then with mx stored and taken into the
 * running max mx[v] (-inf changes no max), with o.lse made p and stored. */
static inline __attribute__((always_inline)) void
bf16_block_max(const int nv, int64_t K2, const uint32_t *A, int64_t rs, int64_t ks, const uint32_t *B,
               int64_t ldb, float *C, int64_t ldc, int accumulate, scores_out o, vf *mx)
{
    __m512 acc[R][NV];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++)
            acc[r][v] = accumulate ? _mm512_loadu_ps(C + r * ldc + v * 16) : _mm512_setzero_ps();
    for (int64_t kk = 0; kk < K2; kk++) {
        __m512i b[NV];
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++) {
            b[v] = _mm512_loadu_si512(B + kk * ldb + v * 16);
            KEEP_IN_REGISTER(b[v]);
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m512bh a = (__m512bh)_mm512_set1_epi32((int)A[r * rs + kk * ks]);
#pragma GCC unroll 8
            for (int v = 0; v < nv; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, (__m512bh)b[v]);
        }
    }
    if (mx || o.lse) {
        const vi lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            int64_t lim = o.lims ? o.lims[r] : 0;
#pragma GCC unroll 8
            for (int v = 0; v < nv; v++) {
                vf sv = r < o.rows ? (vf)acc[r][v] * o.scale : vsplat(-INFINITY);
                if (lim > v * 16) sv = vselect(lane < (int32_t)(lim - v * 16), vsplat(-INFINITY), sv);
                if (o.lse) /* the backward's loop after scores_finish, on the same numbers */
                    sv = vselect(sv == -INFINITY, vsplat(0), vexp_p(sv - vload(o.lse + v * 16)));
                vstore(C + r * ldc + v * 16, sv);
                /* vmax in one instruction: vrangeps (max) returns a NaN
                 * operand, so the running max stays NaN once it is */
                if (mx) mx[v] = (vf)_mm512_range_ps((__m512)mx[v], (__m512)sv, 0x05);
            }
        }
        return;
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++) _mm512_storeu_ps(C + r * ldc + v * 16, acc[r][v]);
}

static inline __attribute__((always_inline)) void
bf16_block(const int nv, int64_t K2, const uint32_t *A, int64_t rs, int64_t ks, const uint32_t *B,
           int64_t ldb, float *C, int64_t ldc, int accumulate)
{
    bf16_block_max(nv, K2, A, rs, ks, B, ldb, C, ldc, accumulate, (scores_out){1.0f, 0, NULL, NULL}, NULL);
}

/* C (M,N) (+)= A B over K2 pairs, both operands packed: A(r,kk) =
 * A[r*ars + kk*aks], B (K2,N) pairs. M a multiple of R, N of 16. */
static void dot_gemm_vnni(int64_t M, int64_t N, int64_t K2, const uint32_t *A, int64_t ars,
                          int64_t aks, const uint32_t *B, float *C, int64_t ldc, int accumulate)
{
    int64_t nvec = N / 16, c = 0;
    for (; c + NV <= nvec; c += NV)
        for (int64_t r = 0; r < M; r += R)
            bf16_block(NV, K2, A + r * ars, ars, aks, B + c * 16, N, C + r * ldc + c * 16, ldc,
                       accumulate);
    for (; c < nvec; c++)
        for (int64_t r = 0; r < M; r += R)
            bf16_block(1, K2, A + r * ars, ars, aks, B + c * 16, N, C + r * ldc + c * 16, ldc,
                       accumulate);
}

#if defined(ATTN_BF16_AMX)
/* ---- AMX tiles (kernels/amx.h) ---------------------------------------------
 * Set up once per thread and kernel call (tiles_begin, attention_simd.h's
 * hook); the products go through dot_gemm below. */
#include "kernels/amx.h"
#define ATTN_TILES
static inline void tiles_begin(void) { amx_begin(); }
static inline void tiles_end(void) { amx_end(); }

/* A (K2,M) pairs (A(r,kk) = A[kk*aks + r], M a multiple of 16) as rows of
 * pairs in xs (M, round_up(K2,16)), zero pairs after K2: 16x16 blocks
 * transposed in registers. */
static const uint32_t *amx_rows(const uint32_t *A, int64_t aks, int64_t M, int64_t K2, uint32_t *xs)
{
    int64_t w = round_up(K2, 16);
    for (int64_t r0 = 0; r0 < M; r0 += 16)
        for (int64_t k0 = 0; k0 < w; k0 += 16) {
            __m512i rw[16], t[16];
            for (int i = 0; i < 16; i++)
                rw[i] = k0 + i < K2 ? _mm512_loadu_si512(A + (k0 + i) * aks + r0) : _mm512_setzero_si512();
            transpose16(rw, t);
            for (int i = 0; i < 16; i++) _mm512_storeu_si512(xs + (r0 + i) * w + k0, t[i]);
        }
    return xs;
}

/* dot_gemm_vnni's product on the tiles: the rows and pairs in whole tiles
 * there (an A in pairs turned into rows first, in xs), the rest of the
 * rows and pairs by vdpbf16ps. */
static void dot_gemm(int64_t M, int64_t N, int64_t K2, const uint32_t *A, int64_t ars, int64_t aks,
                     const uint32_t *B, float *C, int64_t ldc, int accumulate, uint32_t *xs)
{
    int64_t M16 = M / 16 * 16, K16 = K2 / 16 * 16;
    if (aks != 1 && ars == 1 && M % 16 == 0 && K16) {
        A = amx_rows(A, aks, M, K2, xs);
        ars = round_up(K2, 16);
        aks = 1;
    }
    if (aks != 1 || !M16 || !K16) {
        dot_gemm_vnni(M, N, K2, A, ars, aks, B, C, ldc, accumulate);
        return;
    }
    amx_gemm(M16, N, K16, A, ars, B, N, C, ldc, accumulate);
    if (K16 < K2) dot_gemm_vnni(M16, N, K2 - K16, A + K16, ars, 1, B + K16 * N, C, ldc, 1);
    if (M16 < M) dot_gemm_vnni(M - M16, N, K2, A + M16 * ars, ars, 1, B, C + M16 * ldc, ldc, accumulate);
}
enum { AMX = 1 };
#else
static inline void dot_gemm(int64_t M, int64_t N, int64_t K2, const uint32_t *A, int64_t ars, int64_t aks,
                            const uint32_t *B, float *C, int64_t ldc, int accumulate, uint32_t *xs)
{
    (void)xs;
    dot_gemm_vnni(M, N, K2, A, ars, aks, B, C, ldc, accumulate);
}
enum { AMX = 0 };
#endif

/* tile_gemm_f32's product with both operands packed into bf16 pairs along
 * K. A is packed by rows where its K runs contiguously (ks == 1: K, V,
 * P and dS as left factors), by pairs of its memory rows where M does
 * (rs == 1: P^T and dS^T); B by pairs of rows. */
static void tile_gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t rs, int64_t ks,
                      const float *B, int64_t ldb, float *C, int64_t ldc, int accumulate, packs pk)
{
    uint32_t *ap = (uint32_t *)pk.a, *bp = (uint32_t *)pk.b;
    int64_t K2 = (K + 1) / 2, ars, aks;
    if (ks == 1) { /* pk.ready_a: these rows, packed before */
        if (!pk.ready_a) pack_rows(A, rs, M, K, ap);
        ars = round_up(K, 32) / 2;
        aks = 1;
    } else if (rs == 1 && M % 16 == 0) {
        if (!pk.ready_a) pack_pairs(A, ks, K, M, ap);
        ars = 1;
        aks = M;
    } else { /* not used by the kernels; kept general */
        for (int64_t r = 0; r < M; r++)
            for (int64_t kk = 0; kk < K2; kk++) {
                uint32_t lo = qkv_bf16_from_float(A[r * rs + 2 * kk * ks]);
                uint32_t hi = 2 * kk + 1 < K ? qkv_bf16_from_float(A[r * rs + (2 * kk + 1) * ks]) : 0;
                ap[r * K2 + kk] = lo | hi << 16;
            }
        ars = K2;
        aks = 1;
    }
    if (!pk.ready_b) pack_pairs(B, ldb, K, N, bp);
    dot_gemm(M, N, K2, pk.ready_a ? pk.ready_a : ap, ars, aks, pk.ready_b ? pk.ready_b : bp, C, ldc,
             accumulate, (uint32_t *)pk.x);
}

/* ---- operands packed once -------------------------------------------------
 * The kernels multiply the same key tile with every query block and the
 * same query block with every key tile; tile_gemm packs both operands of
 * every product, which cost about a sixth of the bf16 forward and more of
 * the backward. The functions below replace attention_simd.h's defaults
 * (which give NULL packs): the forward packs K and V once per call
 * (fwd_pack_heads, before any query block), a block's Q^T once per block,
 * and its softmax pass writes the probabilities as bf16 pairs (p_put);
 * the backward packs Q and dO once per call (bwd_pack_heads) and a key
 * tile's K and V once per tile (bwd_tile_packs). */
#define ATTN_PACKED

/* The backward's st (njp,BQ) = p = exp(scale K Q^T - lse), lb (BQ) the
 * block's lse (+inf for rows without keys), where the tile has no mask
 * term and its operands are packed: scores_finish and the exp pass done
 * as the products leave the registers. Returns whether it did. */
static int bwd_probs(const qkv_attn_desc *d, tile_packs tp, block_packs bp, int masked, int64_t nj, int64_t njp,
                     const float *lb, float *st)
{
    if (AMX || masked || !tp.k_rows || !bp.qt || BQ != NV * 16) return 0; /* AMX: no fused end */
    int64_t kw = round_up(d->D, 32) / 2, K2 = (d->D + 1) / 2;
    for (int64_t r = 0; r < njp; r += R)
        bf16_block_max(NV, K2, tp.k_rows + r * kw, kw, 1, bp.qt, BQ, st + r * BQ, BQ, 0,
                       (scores_out){d->scale, nj - r, NULL, lb}, NULL);
    return 1;
}

/* Floats of one head's packed query blocks (bwd_shared holds N*H of them). */
static inline size_t bwd_head_floats(const qkv_attn_desc *d)
{
    return (size_t)((d->L + BQ - 1) / BQ * bwd_block_pairs(d));
}

/* Block b of a head's packed queries and output gradients, hp the head's
 * packs (bwd_head_floats of them), NULL where the call packs none. */
static block_packs bwd_block_packs(const qkv_attn_desc *d, const float *hp, int64_t b)
{
    if (!hp) return (block_packs){NULL, NULL, NULL, NULL};
    const uint32_t *qt = (const uint32_t *)hp + b * bwd_block_pairs(d);
    const uint32_t *dot = qt + BQ * ((d->D + 1) / 2), *qb = dot + BQ * ((d->Dv + 1) / 2);
    return (block_packs){qt, dot, qb, qb + BQ / 2 * round_up(d->D, 16)};
}

/* Query block b of head nh into hp, the head's packs (bwd_block_packs'
 * layout); buf a thread's backward scratch, whose (BQ,Dp) and (BQ,Dvp)
 * buffers after the first two take the block's padded rows. */
static void bwd_pack_block(const qkv_attn_desc *d, const float *q, const float *dout, int64_t nh, int64_t b,
                           float *hp, float *buf)
{
    int64_t H = d->H, L = d->L, D = d->D, Dv = d->Dv, n = nh / H, h = nh % H;
    int64_t i0 = b * BQ, i1 = i0 + BQ < L ? i0 + BQ : L;
    int64_t Dp = round_up(D, 16), Dvp = round_up(Dv, 16);
    int64_t ldq = qkv_attn_ld(&d->q_rows, D), ldo = qkv_attn_ld(&d->o_rows, Dv);
    float *qbuf = buf + (Dp + Dvp) * BQ, *dobuf = qbuf + Dp * BQ;
    const float *qh = q + qkv_attn_head(&d->q_rows, H, n, h, L, D);
    const float *oh = dout + qkv_attn_head(&d->o_rows, H, n, h, L, Dv);
    block_packs bp = bwd_block_packs(d, hp, b);
    pack_pairs_t(qh + i0 * ldq, ldq, i1 - i0, D, BQ, (uint32_t *)bp.qt);
    pack_pairs_t(oh + i0 * ldo, ldo, i1 - i0, Dv, BQ, (uint32_t *)bp.dot);
    int64_t lq, lo; /* as rows: from q and dout themselves where no padding is needed */
    const float *qb = rows_strided(qh, ldq, D, i0, i1, BQ, Dp, qbuf, &lq);
    const float *ob = rows_strided(oh, ldo, Dv, i0, i1, BQ, Dvp, dobuf, &lo);
    pack_pairs(qb, lq, BQ, Dp, (uint32_t *)bp.qb);
    pack_pairs(ob, lo, BQ, Dvp, (uint32_t *)bp.dob);
}

/* Every head's query blocks into shared (N*H heads' packs), split over the
 * calling team's threads (every thread calls it). */
static void bwd_pack_heads(const qkv_attn_desc *d, const float *q, const float *dout, float *shared,
                           float *buf)
{
    int64_t nb = (d->L + BQ - 1) / BQ;
#pragma omp for
    for (int64_t t = 0; t < d->N * d->H * nb; t++)
        bwd_pack_block(d, q, dout, t / nb, t % nb, shared + (size_t)(t / nb) * bwd_head_floats(d), buf);
}

/* Head nh's query blocks into hp, on the calling thread. */
static void bwd_pack_head(const qkv_attn_desc *d, const float *q, const float *dout, int64_t nh, float *hp,
                          float *buf)
{
    for (int64_t b = 0; b < (d->L + BQ - 1) / BQ; b++) bwd_pack_block(d, q, dout, nh, b, hp, buf);
}

/* The backward's operands that every query block of a key tile shares,
 * packed once per tile into pk.t: the keys kt (njp,Dp) as rows for K Q^T
 * and as pairs for dS^T K, the values vt (njp,Dv) as rows for V dO^T. */
static tile_packs bwd_tile_packs(const qkv_attn_desc *d, const float *kt, int64_t Dp, const float *vt,
                                 int64_t njp, packs pk)
{
    uint32_t *kr = (uint32_t *)pk.t, *vr = kr + BK * (round_up(d->D, 32) / 2);
    uint32_t *kp = vr + BK * (round_up(d->Dv, 32) / 2);
    pack_rows(kt, Dp, njp, d->D, kr);
    pack_rows(vt, d->Dv, njp, d->Dv, vr);
    pack_pairs(kt, Dp, njp, Dp, kp);
    return (tile_packs){kr, vr, kp};
}

/* Floats of one head's packed K rows and V pairs (fwd_shared holds N*H). */
static inline size_t fwd_head_floats(const qkv_attn_desc *d)
{
    return (size_t)(kv_keys(d) * (round_up(d->D, 32) / 2 + round_up(d->Dv, 16) / 2));
}

/* Key tile [j0, j0 + BK) of head nh, its K rows and V pairs, into hp, the
 * head's packs; kbuf (BK,D), vbuf (BK,Dv16) a thread's copies of a short
 * last tile, zero-padded. */
static void fwd_pack_tile(const qkv_attn_desc *d, const float *k, const float *v, int64_t nh, int64_t j0,
                          float *hp, float *kbuf, float *vbuf)
{
    int64_t H = d->H, S = d->S, D = d->D, Dv = d->Dv, Sp = kv_keys(d), n = nh / H, h = nh % H;
    int64_t kw = round_up(D, 32) / 2, Dvp = round_up(Dv, 16);
    int64_t ldk = qkv_attn_ld(&d->k_rows, D), ldv = qkv_attn_ld(&d->v_rows, Dv);
    int64_t jp = j0 + BK < Sp ? j0 + BK : Sp, j1 = j0 + BK < S ? j0 + BK : S;
    uint32_t *kc = (uint32_t *)hp, *vc = kc + Sp * kw;
    const float *kh = k + qkv_attn_kv_head(d, &d->k_rows, n, h, D);
    const float *vh = v + qkv_attn_kv_head(d, &d->v_rows, n, h, Dv);
    int64_t lk, lv; /* from k and v themselves where no padding is needed */
    const float *kt = rows_strided(kh, ldk, D, j0, j1, jp - j0, D, kbuf, &lk);
    const float *vt = rows_strided(vh, ldv, Dv, j0, j1, jp - j0, Dvp, vbuf, &lv);
    pack_rows(kt, lk, jp - j0, D, kc + j0 * kw);
    pack_pairs(vt, lv, jp - j0, Dvp, vc + j0 / 2 * Dvp);
}

/* Every head's K rows and V pairs into shared (N*H heads' packs), split
 * over the calling team's threads (every thread calls it). */
static void fwd_pack_heads(const qkv_attn_desc *d, const float *k, const float *v, float *shared,
                           float *kbuf, float *vbuf)
{
    int64_t nt = (kv_keys(d) + BK - 1) / BK;
#pragma omp for
    for (int64_t t = 0; t < d->N * d->H * nt; t++)
        fwd_pack_tile(d, k, v, t / nt, t % nt * BK, shared + (size_t)(t / nt) * fwd_head_floats(d), kbuf, vbuf);
}

/* Head nh's K rows and V pairs into hp, on the calling thread. */
static void fwd_pack_head(const qkv_attn_desc *d, const float *k, const float *v, int64_t nh, float *hp,
                          float *kbuf, float *vbuf)
{
    for (int64_t j0 = 0; j0 < kv_keys(d); j0 += BK) fwd_pack_tile(d, k, v, nh, j0, hp, kbuf, vbuf);
}

/* A head's packed K rows (Sp, D32/2) and V pairs (Sp/2, Dv16), from hp, its
 * packs (NULL where the call packs none). */
static kv_packed fwd_head_packs(const qkv_attn_desc *d, const float *hp)
{
    if (!hp) return (kv_packed){NULL, NULL};
    const uint32_t *kc = (const uint32_t *)hp;
    return (kv_packed){kc, kc + kv_keys(d) * (round_up(d->D, 32) / 2)};
}

/* The query block, rows [i0,i1) of q (ldq apart), as pairs of Q^T, for
 * every key tile's scores; returns 1: forward_block needs no transpose. */
static int fwd_block_begin(const qkv_attn_desc *d, const float *q, int64_t ldq, int64_t i0, int64_t i1,
                           packs pk)
{
    pack_pairs_t(q + i0 * ldq, ldq, i1 - i0, d->D, BQ, (uint32_t *)pk.q);
    return 1;
}

/* Can tile [j0, j0+nj) use the packed K and V? Pairs start at even keys,
 * and the rows worked past nj (up to njp) must be zero keys (after S),
 * not the next keys, which may be masked and hold NaN. */
static int fwd_tile_packed(const qkv_attn_desc *d, kv_packed kv, int64_t j0, int64_t nj)
{
    return kv.k && j0 % 2 == 0 && (nj % R == 0 || j0 + nj == d->S);
}

/* st (njp,BQ) = K_tile Q_blk^T for queries [i0,i1) and keys [j0,j0+nj);
 * kt the tile's keys (njp,D) when unpacked. Where the tile has no mask
 * term, or the causal mask alone: scores_finish_max's work, done as the
 * products leave the registers (the same numbers); returns whether it did
 * (then mt holds the running max). */
static int fwd_scores(const qkv_attn_desc *d, kv_packed kv, int64_t i0, int64_t i1, int64_t j0, int packed,
                      int64_t nj, int64_t njp, const float *kt, const float *qt, float *st, packs pk, vf *mt)
{
    (void)qt;
    int64_t kw = round_up(d->D, 32) / 2, K2 = (d->D + 1) / 2;
    const uint32_t *kp = kv.k + j0 * kw;
    if (!packed) {
        pack_rows(kt, d->D, njp, d->D, (uint32_t *)pk.a);
        kp = (const uint32_t *)pk.a;
    }
    int masked = tile_masked(d, i0, i1, j0, j0 + nj);
    if (AMX || (masked && !causal_only(d)) || BQ != NV * 16) { /* AMX: no fused end */
        dot_gemm(njp, BQ, K2, kp, kw, 1, (const uint32_t *)pk.q, st, BQ, 0, (uint32_t *)pk.x);
        return 0;
    }
    for (int64_t r = 0; r < njp; r += R) {
        int64_t lims[R]; /* scores_finish's causal rule: key j masked for queries i < j - diag */
        for (int x = 0; x < R; x++) {
            int64_t j = j0 + r + x, lim = j - d->diag - i0;
            lims[x] = !masked || j >= d->mask_keys ? 0 : lim < i1 - i0 ? lim : i1 - i0;
        }
        bf16_block_max(NV, K2, kp + r * kw, kw, 1, (const uint32_t *)pk.q, BQ, st + r * BQ, BQ, 0,
                       (scores_out){d->scale, nj - r, lims, NULL}, mt);
    }
    return 1;
}

/* Probabilities of key rows j and j+1 for queries [i, i+16): as a bf16
 * pair row of pk.p when pairs is set, else into st (FP32). */
static inline void p_put(float *st, packs pk, int pairs, int64_t j, int64_t i, vf p0, vf p1)
{
    if (!pairs) {
        vstore(st + j * BQ + i, p0);
        vstore(st + (j + 1) * BQ + i, p1);
        return;
    }
    _mm512_storeu_si512((uint32_t *)pk.p + j / 2 * BQ + i, bf16_pairs16((__m512)p0, (__m512)p1));
}

/* ob (BQ,Dvp) += P V: P as pairs in pk.p (p_put's) when pairs is set,
 * else from st (BK,BQ); vt the tile's values (njp,Dvp) when unpacked. */
static void fwd_pv(kv_packed kv, int64_t j0, int packed, int64_t njp, const float *st, int pairs,
                   const float *vt, int64_t Dvp, float *ob, packs pk)
{
    if (!pairs) pack_pairs(st, BQ, njp, BQ, (uint32_t *)pk.p);
    const uint32_t *vp = kv.v + j0 / 2 * Dvp;
    if (!packed) {
        pack_pairs(vt, Dvp, njp, Dvp, (uint32_t *)pk.b);
        vp = (const uint32_t *)pk.b;
    }
    dot_gemm(BQ, Dvp, njp / 2, (const uint32_t *)pk.p, 1, BQ, vp, ob, Dvp, 1, (uint32_t *)pk.x);
}

#else
/* ---- bf16 operands, FP32 arithmetic ---------------------------------------- */

/* A (M,K) and B (K,N) rounded to bf16 into dense FP32 copies, then the FP32
 * product: a product of two bf16 is exact in FP32, so only the order of
 * the sums differs from the dot-product build. */
static void tile_gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t rs, int64_t ks,
                      const float *B, int64_t ldb, float *C, int64_t ldc, int accumulate, packs pk)
{
    float *a = pk.a, *b = pk.b;
    for (int64_t r = 0; r < M; r++)
        for (int64_t k = 0; k < K; k++)
            a[r * K + k] = qkv_bf16_round(A[r * rs + k * ks]);
    for (int64_t k = 0; k < K; k++) qkv_bf16_round_floats(B + k * ldb, b + k * N, N);
    tile_gemm_f32(M, N, K, a, K, 1, b, N, C, ldc, accumulate);
}
#endif
