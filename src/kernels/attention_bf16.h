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
 * summed length (D, Dv, a key tile, a query block) rounded up to 32. */
static inline size_t pack_scratch(const qkv_attn_desc *d)
{
    int64_t m = d->D > d->Dv ? d->D : d->Dv;
    if (m < BK) m = BK;
    if (m < BQ) m = BQ;
    int64_t p32 = round_up(m, 32), np = BQ;
    if (round_up(d->D, 16) > np) np = round_up(d->D, 16);
    if (round_up(d->Dv, 16) > np) np = round_up(d->Dv, 16);
    int64_t ma = BK > BQ ? BK : BQ;
    return (size_t)(ma * p32 + p32 * np);
}

static inline packs packs_make(const qkv_attn_desc *d, float *at)
{
    int64_t m = d->D > d->Dv ? d->D : d->Dv;
    if (m < BK) m = BK;
    if (m < BQ) m = BQ;
    int64_t ma = BK > BQ ? BK : BQ;
    return (packs){at, at + ma * round_up(m, 32)};
}

#if defined(ATTN_BF16_DOT)
/* ---- AVX512-BF16 ---------------------------------------------------------- */

/* 32 floats from x, the first n of them (the rest read as 0), as 32 bf16 in
 * order. Masked-off lanes are not read. */
static inline __m512i bf16_x32(const float *x, int64_t n)
{
    __mmask16 m0 = n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
    int64_t n1 = n - 16;
    __mmask16 m1 = n1 >= 16 ? (__mmask16)0xffff : n1 <= 0 ? 0 : (__mmask16)((1u << n1) - 1);
    __m512 lo = _mm512_maskz_loadu_ps(m0, x), hi = _mm512_maskz_loadu_ps(m1, x + 16);
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

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
    /* vcvtne2ps2bf16 gives row 2kk's 16 values then row 2kk+1's; this
     * interleaves them into 16 pairs */
    static const uint16_t inter[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    __m512i idx = _mm512_loadu_si512(inter);
    for (int64_t kk = 0; kk < (K + 1) / 2; kk++) {
        const float *r0 = x + 2 * kk * ldx, *r1 = r0 + ldx;
        int odd = 2 * kk + 1 >= K;
        for (int64_t c = 0; c < N; c += 16) {
            __m512 lo = _mm512_loadu_ps(r0 + c);
            __m512 hi = odd ? _mm512_setzero_ps() : _mm512_loadu_ps(r1 + c);
            __m512i t = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
            _mm512_storeu_si512(out + kk * N + c, _mm512_permutexvar_epi16(idx, t));
        }
    }
}

/* One register block: C[r][c] (+)= sum_kk A(r,kk) . B[kk][c] over pairs,
 * A(r,kk) = A[r*rs + kk*ks] a bf16 pair broadcast to every lane. */
static inline __attribute__((always_inline)) void
bf16_block(const int nv, int64_t K2, const uint32_t *A, int64_t rs, int64_t ks, const uint32_t *B,
           int64_t ldb, float *C, int64_t ldc, int accumulate)
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
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++) _mm512_storeu_ps(C + r * ldc + v * 16, acc[r][v]);
}

/* tile_gemm_f32's product with both operands packed into bf16 pairs along
 * K. A is packed by rows where its K runs contiguously (ks == 1: K, V,
 * P and dS as left factors), by pairs of its memory rows where M does
 * (rs == 1: P^T and dS^T); B by pairs of rows. */
static void tile_gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t rs, int64_t ks,
                      const float *B, int64_t ldb, float *C, int64_t ldc, int accumulate, packs pk)
{
    uint32_t *ap = (uint32_t *)pk.a, *bp = (uint32_t *)pk.b;
    int64_t K2 = (K + 1) / 2, ars, aks;
    if (ks == 1) {
        pack_rows(A, rs, M, K, ap);
        ars = round_up(K, 32) / 2;
        aks = 1;
    } else if (rs == 1 && M % 16 == 0) {
        pack_pairs(A, ks, K, M, ap);
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
    pack_pairs(B, ldb, K, N, bp);
    int64_t nvec = N / 16, c = 0;
    for (; c + NV <= nvec; c += NV)
        for (int64_t r = 0; r < M; r += R)
            bf16_block(NV, K2, ap + r * ars, ars, aks, bp + c * 16, N, C + r * ldc + c * 16, ldc,
                       accumulate);
    for (; c < nvec; c++)
        for (int64_t r = 0; r < M; r += R)
            bf16_block(1, K2, ap + r * ars, ars, aks, bp + c * 16, N, C + r * ldc + c * 16, ldc,
                       accumulate);
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
            a[r * K + k] = qkv_bf16_to_float(qkv_bf16_from_float(A[r * rs + k * ks]));
    for (int64_t k = 0; k < K; k++) qkv_bf16_round_floats(B + k * ldb, b + k * N, N);
    tile_gemm_f32(M, N, K, a, K, 1, b, N, C, ldc, accumulate);
}
#endif
