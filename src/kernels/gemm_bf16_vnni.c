/* gemm_bf16_vnni.c: C = A B + beta C for a few rows of A against a bf16 B
 * packed once in pairs along K (gemm_bf16_vnni.h), by AVX512-BF16 dot
 * products. Register blocks of up to 6 rows x 4 vectors of 16 columns
 * (24 accumulators); each thread takes a contiguous share of A's rows and
 * rounds them to bf16 six at a time. Every element of C is one thread's sum
 * over k in a fixed order (pairs 0, 1, ... of K), so the result does not
 * depend on the thread count. The Makefile builds this file with
 * -mavx512bf16 on x86-64; elsewhere, or with a compiler that lacks the set,
 * the kernel reports itself unavailable and callers keep their product.
 * Everything here runs only where qkv_gemm_bf16_vnni_usable (gemm_bf16.c,
 * built for the baseline target) said yes. */
#include <omp.h>
#include <string.h>
#include "core/internal.h"
#include "kernels/bf16.h"
#include "kernels/gemm_bf16_vnni.h"

void qkv_bf16_vnni_pack(int tb, int64_t K, int64_t N, const float *B, uint16_t *P)
{
    int64_t K2 = (K + 1) / 2;
    int par = K2 * N * 2 >= 4 * QKV_PAR_MIN;
    if (!tb) { /* rows 2 kk and 2 kk + 1 of B (K,N) interleaved into P's row kk */
        QKV_PAR_FOR(par, for (int64_t kk = 0; kk < K2; kk++) {
            const float *b0 = B + 2 * kk * N, *b1 = 2 * kk + 1 < K ? b0 + N : NULL; // (N), (N) or none
            uint16_t *p = P + kk * N * 2;                                           // (N,2)
            for (int64_t n = 0; n < N; n++) {
                p[2 * n] = qkv_bf16_from_float(b0[n]);
                p[2 * n + 1] = b1 ? qkv_bf16_from_float(b1[n]) : 0;
            }
        });
        return;
    }
    /* B (N,K) used as B^T: a transpose of pairs, 16 rows of B at a time so
     * that their cache lines serve 8 pairs each */
    QKV_PAR_FOR(par, for (int64_t n0 = 0; n0 < N; n0 += 16) {
        int64_t n1 = n0 + 16 < N ? n0 + 16 : N;
        for (int64_t kk = 0; kk < K2; kk++)
            for (int64_t n = n0; n < n1; n++) {
                const float *b = B + n * K + 2 * kk; // op(B)[2 kk][n], then [2 kk + 1][n]
                uint16_t *p = P + (kk * N + n) * 2;
                p[0] = qkv_bf16_from_float(b[0]);
                p[1] = 2 * kk + 1 < K ? qkv_bf16_from_float(b[1]) : 0;
            }
    });
}

int64_t qkv_bf16_blocked_len(int64_t K, int64_t N) { return (K + 31) / 32 * 32 * ((N + 63) / 64 * 64); }

/* Offset of op(B)[k][n] in the blocked layout, Kp = K padded to 32. */
static inline int64_t blocked_at(int64_t Kp, int64_t k, int64_t n)
{
    return n / 64 * Kp * 64 + k / 32 * 2048 + k % 32 / 2 * 128 + n % 64 * 2 + k % 2;
}

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BF16__)
#include <immintrin.h>
#include "kernels/bf16_avx512.h"

/* A lane mask of the first n of 16 lanes (none for n <= 0). */
static inline __mmask16 lanes(int64_t n) { return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }
/* The same for 32 lanes (16-bit elements). */
static inline __mmask32 lanes32(int64_t n) { return n >= 32 ? 0xffffffffu : n <= 0 ? 0 : (__mmask32)((1u << n) - 1); }

/* rows[2i] and rows[2i + 1] (32 bf16 each, columns c..c+31) as pairs along
 * the two rows, stored at o (columns c..c+15) and o + 32 (c+16..c+31): a
 * pair of rows' stretch of the blocked layout. */
static inline void store_row_pairs(uint16_t *o, __m512i a, __m512i b)
{
    static const uint16_t idx[2][32] = {
        {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39, 8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47},
        {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
         24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63}};
    _mm512_storeu_si512(o, _mm512_permutex2var_epi16(a, _mm512_loadu_si512(idx[0]), b));
    _mm512_storeu_si512(o + 32, _mm512_permutex2var_epi16(a, _mm512_loadu_si512(idx[1]), b));
}

void qkv_bf16_blocked_pack(int tb, int64_t K, int64_t N, const float *B, int64_t ldb, uint16_t *P)
{
    int64_t Kp = (K + 31) / 32 * 32, Np = (N + 63) / 64 * 64;
    int par = Kp * Np >= 4 * QKV_PAR_MIN;
    if (tb) { /* W (N,K): 16 rows of W x 32 of K become 16 vectors of pairs, transposed in registers */
        QKV_PAR_FOR(par, for (int64_t n0 = 0; n0 < Np; n0 += 16) {
            for (int64_t k0 = 0; k0 < Kp; k0 += 32) {
                __m512i rw[16], t[16];
                for (int i = 0; i < 16; i++)
                    rw[i] = n0 + i < N ? bf16_x32(B + (n0 + i) * ldb + k0, K - k0) : _mm512_setzero_si512();
                transpose16(rw, t);
                uint16_t *o = P + blocked_at(Kp, k0, n0); // pair p of the 16 columns at o + p 128
                for (int p = 0; p < 16; p++) _mm512_storeu_si512(o + p * 128, t[p]);
            }
        });
        return;
    }
    /* B (K,N): rows 2kk and 2kk + 1 as pairs, 16 columns at a time */
    QKV_PAR_FOR(par, for (int64_t kk = 0; kk < Kp / 2; kk++) {
        const float *r0 = B + 2 * kk * ldb, *r1 = r0 + ldb;
        int64_t has0 = 2 * kk < K, has1 = 2 * kk + 1 < K;
        for (int64_t n0 = 0; n0 < Np; n0 += 16) {
            __mmask16 m = lanes(N - n0);
            __m512 lo = _mm512_maskz_loadu_ps(has0 ? m : 0, r0 + n0);
            __m512 hi = _mm512_maskz_loadu_ps(has1 ? m : 0, r1 + n0);
            _mm512_storeu_si512(P + blocked_at(Kp, 2 * kk, n0), bf16_pairs16(lo, hi));
        }
    });
}

void qkv_bf16_blocked_pack16(int64_t K, int64_t N, const uint16_t *B16, uint16_t *P)
{
    int64_t Kp = (K + 31) / 32 * 32, Np = (N + 63) / 64 * 64;
    QKV_PAR_FOR(Kp * Np >= 4 * QKV_PAR_MIN, for (int64_t kk = 0; kk < Kp / 2; kk++) {
        const uint16_t *r0 = B16 + 2 * kk * N, *r1 = r0 + N;
        int64_t has0 = 2 * kk < K, has1 = 2 * kk + 1 < K;
        for (int64_t n0 = 0; n0 < Np; n0 += 32) {
            __mmask32 m = lanes32(N - n0);
            __m512i a = _mm512_maskz_loadu_epi16(has0 ? m : 0, r0 + n0);
            __m512i b = _mm512_maskz_loadu_epi16(has1 ? m : 0, r1 + n0);
            store_row_pairs(P + blocked_at(Kp, 2 * kk, n0), a, b);
        }
    });
}

void qkv_bf16_blocked_pack2(int64_t K, int64_t N, const float *W, int64_t ldw, uint16_t *Pt, uint16_t *Pn)
{
    /* Pt: op(B) = W^T (K,N), Kp x Np; Pn: op(B) = W (N,K), Knp x Nnp */
    int64_t Kp = (K + 31) / 32 * 32, Np = (N + 63) / 64 * 64, Knp = (N + 31) / 32 * 32;
    QKV_PAR_FOR(Kp * Np >= 4 * QKV_PAR_MIN, for (int64_t n0 = 0; n0 < Np; n0 += 16) {
        for (int64_t k0 = 0; k0 < Kp; k0 += 32) {
            __m512i rw[16], t[16]; /* rows n0.. of W, columns k0..k0+31, in bf16 */
            for (int i = 0; i < 16; i++)
                rw[i] = n0 + i < N ? bf16_x32(W + (n0 + i) * ldw + k0, K - k0) : _mm512_setzero_si512();
            if (Pt) {
                transpose16(rw, t);
                uint16_t *o = Pt + blocked_at(Kp, k0, n0); // pair p of the 16 columns at o + p 128
                for (int p = 0; p < 16; p++) _mm512_storeu_si512(o + p * 128, t[p]);
            }
            if (!Pn || n0 >= Knp) continue; /* rows past Pn's padded K are not in it */
            for (int i = 0; i < 16; i += 2) {
                uint16_t *o = Pn + blocked_at(Knp, n0 + i, k0);
                store_row_pairs(o, rw[i], rw[i + 1]);
                if (k0 + 32 == Kp && Kp % 64) { /* Pn's columns Kp.. (padding to 64): zeros */
                    _mm512_storeu_si512(o + 64, _mm512_setzero_si512());
                    _mm512_storeu_si512(o + 96, _mm512_setzero_si512());
                }
            }
        }
    });
}

/* 16 floats to bf16 as qkv_bf16_from_float rounds them (subnormals kept,
 * NaN as 0x7fc0), the first n of them (the rest read as 0). */
static inline __m256i bf16_soft16(const float *x, int64_t n)
{
    __mmask16 m = lanes(n);
    __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, x));
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7fc0)));
}

void qkv_bf16_copy_blocked(int64_t M, int64_t K, const float *x, uint16_t *x16, uint16_t *xb)
{
    int64_t Mp = (M + 31) / 32 * 32, Np = (K + 63) / 64 * 64;
    QKV_PAR_FOR(Mp * Np >= 4 * QKV_PAR_MIN, for (int64_t kk = 0; kk < Mp / 2; kk++) {
        for (int64_t n0 = 0; n0 < Np; n0 += 32) {
            __m512i v[2]; /* rows 2 kk and 2 kk + 1, columns n0..n0+31, in bf16 */
            for (int h = 0; h < 2; h++) {
                int64_t row = 2 * kk + h, left = row < M ? K - n0 : 0;
                const float *xr = row < M ? x + row * K + n0 : x; // (left floats read)
                v[h] = _mm512_inserti64x4(_mm512_castsi256_si512(bf16_soft16(xr, left)), bf16_soft16(xr + 16, left - 16), 1);
                if (left > 0) _mm512_mask_storeu_epi16(x16 + row * K + n0, lanes32(left), v[h]);
            }
            store_row_pairs(xb + blocked_at(Mp, 2 * kk, n0), v[0], v[1]);
        }
    });
}
#else
void qkv_bf16_blocked_pack16(int64_t K, int64_t N, const uint16_t *B16, uint16_t *P)
{
    int64_t Kp = (K + 31) / 32 * 32, Np = (N + 63) / 64 * 64;
    for (int64_t k = 0; k < Kp; k++)
        for (int64_t n = 0; n < Np; n++) P[blocked_at(Kp, k, n)] = k < K && n < N ? B16[k * N + n] : 0;
}

void qkv_bf16_blocked_pack(int tb, int64_t K, int64_t N, const float *B, int64_t ldb, uint16_t *P)
{
    int64_t Kp = (K + 31) / 32 * 32, Np = (N + 63) / 64 * 64;
    for (int64_t k = 0; k < Kp; k++)
        for (int64_t n = 0; n < Np; n++)
            P[blocked_at(Kp, k, n)] =
                k < K && n < N ? qkv_bf16_from_float(tb ? B[n * ldb + k] : B[k * ldb + n]) : 0;
}

void qkv_bf16_blocked_pack2(int64_t K, int64_t N, const float *W, int64_t ldw, uint16_t *Pt, uint16_t *Pn)
{
    if (Pt) qkv_bf16_blocked_pack(1, K, N, W, ldw, Pt);
    if (Pn) qkv_bf16_blocked_pack(0, N, K, W, ldw, Pn);
}

void qkv_bf16_copy_blocked(int64_t M, int64_t K, const float *x, uint16_t *x16, uint16_t *xb)
{
    qkv_bf16_from_floats(x, x16, M * K);
    qkv_bf16_blocked_pack16(M, K, x16, xb);
}
#endif

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BF16__)

enum { MR = 6, NVEC = 4, KMAX = 8192 };

/* C[0..mr) x [0..16 nv) (ldc) = A2 (mr rows of lda2 pairs of bf16) times
 * P's columns from col (N a row of pairs) + beta C. mr and nv are constants
 * where this is inlined, so the accumulators stay in registers. */
static inline __attribute__((always_inline)) void tile(const int mr, const int nv, int64_t K2, const uint16_t *A2,
                                                       int64_t lda2, const uint16_t *P, int64_t N, int64_t col,
                                                       float beta, float *C, int64_t ldc)
{
    __m512 acc[MR][NVEC];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nv; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t kk = 0; kk < K2; kk++) {
        const uint16_t *pk = P + (kk * N + col) * 2;
        __m512bh b[NVEC];
        for (int j = 0; j < nv; j++) b[j] = (__m512bh)_mm512_loadu_si512(pk + 32 * j);
        for (int i = 0; i < mr; i++) {
            int32_t pair; /* A's k = 2 kk and 2 kk + 1, broadcast to every lane */
            memcpy(&pair, A2 + 2 * (i * lda2 + kk), sizeof pair);
            __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
            for (int j = 0; j < nv; j++) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], a, b[j]);
        }
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nv; j++) {
            float *c = C + i * ldc + 16 * j;
            __m512 r = acc[i][j];
            if (beta != 0.0f) r = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_loadu_ps(c), r);
            _mm512_storeu_ps(c, r);
        }
}

#define TILE_CASE(m, n) \
    case m * 8 + n: tile(m, n, K2, A2, lda2, P, N, col, beta, C, ldc); break;

static void tile_any(int mr, int nv, int64_t K2, const uint16_t *A2, int64_t lda2, const uint16_t *P, int64_t N,
                     int64_t col, float beta, float *C, int64_t ldc)
{
    switch (mr * 8 + nv) {
        TILE_CASE(1, 1) TILE_CASE(1, 2) TILE_CASE(1, 3) TILE_CASE(1, 4)
        TILE_CASE(2, 1) TILE_CASE(2, 2) TILE_CASE(2, 3) TILE_CASE(2, 4)
        TILE_CASE(3, 1) TILE_CASE(3, 2) TILE_CASE(3, 3) TILE_CASE(3, 4)
        TILE_CASE(4, 1) TILE_CASE(4, 2) TILE_CASE(4, 3) TILE_CASE(4, 4)
        TILE_CASE(5, 1) TILE_CASE(5, 2) TILE_CASE(5, 3) TILE_CASE(5, 4)
        TILE_CASE(6, 1) TILE_CASE(6, 2) TILE_CASE(6, 3) TILE_CASE(6, 4)
    }
}

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#include "kernels/amx.h"
/* ---- the same product on AMX tiles ------------------------------------------
 * P's layout (pairs of k, N of them a row) is a tile's B operand as it
 * is: 16 rows of pairs by 16 columns, rows N pairs apart. A's rows go to
 * bf16 32 at a time, then amx_gemm (kernels/amx.h). Where a CPU has the
 * tiles (qkv_amx_usable), vdpbf16ps may run at half the FMA rate (the
 * Xeon of 2026-11-29): the tiles are then the only bf16 path faster than
 * FP32. For K a multiple of 32 and beta 0 or 1;
 * each element's sum is the same whatever the rows' split (a short last
 * block is worked on zero rows through a buffer, not by another kernel). */
enum { AMX_KMAX = 2048 }; /* A2's 128 KiB on a thread's stack */
static int amx_fits(int64_t K, float beta)
{
    return K % 32 == 0 && K <= AMX_KMAX && (beta == 0.0f || beta == 1.0f) && qkv_amx_usable();
}

static void rows_run_amx(int64_t r0, int64_t r1, int64_t N, int64_t K, const float *A, const uint16_t *P,
                         float beta, float *C)
{
    uint16_t A2[32 * AMX_KMAX]; // (32, K) up to 32 rows of A in bf16, zero rows past the block's
    float cb[32 * 32];          // (32, 32) a short block's C
    int64_t K2 = K / 2;
    const uint32_t *a2 = (const uint32_t *)A2, *p = (const uint32_t *)P; /* pairs */
    amx_begin();
    for (int64_t r = r0; r < r1; r += 32) {
        int64_t m = r1 - r < 32 ? r1 - r : 32, mt = m > 16 ? 32 : 16; /* rows, rows worked */
        for (int64_t i = 0; i < m * K; i++) A2[i] = qkv_bf16_from_float(A[r * K + i]);
        if (m == mt) {
            amx_gemm(m, N, K2, a2, K2, p, N, C + r * N, N, beta != 0.0f);
            continue;
        }
        memset(A2 + m * K, 0, (size_t)((mt - m) * K) * sizeof *A2);
        for (int64_t col = 0; col < N; col += 32) {
            size_t w = (size_t)(N - col < 32 ? N - col : 32) * sizeof *cb;
            memset(cb, 0, sizeof cb);
            for (int64_t i = 0; i < m && beta != 0.0f; i++) memcpy(cb + i * 32, C + (r + i) * N + col, w);
            amx_gemm(mt, (int64_t)(w / sizeof *cb), K2, a2, K2, p + col, N, cb, 32, beta != 0.0f);
            for (int64_t i = 0; i < m; i++) memcpy(C + (r + i) * N + col, cb + i * 32, w);
        }
    }
    amx_end();
}
#else
static int amx_fits(int64_t K, float beta) { return (void)K, (void)beta, 0; }
static void rows_run_amx(int64_t r0, int64_t r1, int64_t N, int64_t K, const float *A, const uint16_t *P,
                         float beta, float *C)
{
    (void)r0, (void)r1, (void)N, (void)K, (void)A, (void)P, (void)beta, (void)C;
}
#endif

/* Rows [r0, r1) of C, in blocks of at most MR rows as even as they go
 * (32 rows: 6, 6, 5, 5, 5, 5, not five of 6 and one of 2); on the AMX
 * tiles where they fit. */
static void rows_run(int64_t r0, int64_t r1, int64_t N, int64_t K, const float *A, const uint16_t *P, float beta,
                     float *C)
{
    if (amx_fits(K, beta)) {
        rows_run_amx(r0, r1, N, K, A, P, beta, C);
        return;
    }
    int64_t K2 = (K + 1) / 2;
    uint16_t A2[MR * KMAX]; // (MR, 2 K2) MR rows of A in bf16, 0 past K
    for (int64_t r = r0, left = (r1 - r0 + MR - 1) / MR; r < r1; left--) {
        int mr = (int)((r1 - r + left - 1) / left);
        for (int i = 0; i < mr; i++) {
            const float *a = A + (r + i) * K; // (K)
            uint16_t *d = A2 + i * 2 * K2;
            for (int64_t k = 0; k < K; k++) d[k] = qkv_bf16_from_float(a[k]);
            if (K % 2) d[K] = 0;
        }
        for (int64_t col = 0; col < N; col += 16 * NVEC) {
            int nv = (int)((N - col) / 16 < NVEC ? (N - col) / 16 : NVEC);
            tile_any(mr, nv, K2, A2, K2, P, N, col, beta, C + r * N + col, N);
        }
        r += mr;
    }
}

const int qkv_gemm_bf16_vnni_kmax = KMAX;

void qkv_gemm_bf16_vnni_rows(int64_t M, int64_t N, int64_t K, const float *A, const uint16_t *P, float beta,
                             float *C)
{
    rows_run(0, M, N, K, A, P, beta, C);
}

void qkv_gemm_bf16_vnni(int64_t M, int64_t N, int64_t K, const float *A, const uint16_t *P, float beta, float *C)
{
    int big = 2.0 * (double)M * (double)N * (double)K >= 1e6;
#pragma omp parallel if (big)
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        int64_t per = (M + nt - 1) / nt, r0 = t * per < M ? t * per : M, r1 = r0 + per < M ? r0 + per : M;
        if (r0 < r1) rows_run(r0, r1, N, K, A, P, beta, C);
    }
}
#else
const int qkv_gemm_bf16_vnni_kmax = 0; /* not built */

void qkv_gemm_bf16_vnni(int64_t M, int64_t N, int64_t K, const float *A, const uint16_t *P, float beta, float *C)
{
    (void)M, (void)N, (void)K, (void)A, (void)P, (void)beta, (void)C;
}

void qkv_gemm_bf16_vnni_rows(int64_t M, int64_t N, int64_t K, const float *A, const uint16_t *P, float beta,
                             float *C)
{
    (void)M, (void)N, (void)K, (void)A, (void)P, (void)beta, (void)C;
}
#endif
