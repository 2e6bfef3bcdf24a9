/* quant_dot_simd.h: the block dot products of qkv_qmatvec in 256-bit
 * integer SIMD, included once per instruction set: quant_dot_avx2.c
 * (unsigned x signed byte products by vpmaddubsw + vpmaddwd) and
 * quant_dot_vnni.c (QDOT_VNNI: vpdpbusd and vpdpwssd of AVX-512 VNNI on
 * 256-bit registers). The integer sums are exact and the same as the
 * portable ones (quant_dot.c); the float scaling runs in 8 lanes, so a
 * row's result differs from the portable one by float rounding only.
 * Weight values are taken unsigned (the 4/5/6-bit codes, Q8_0's magnitude
 * with x's sign moved over) and the codes' offsets (-8, -16, -32) and the
 * blocks' minima enter through x's block sums. Defines QDOT_SET (a
 * qkv_qdot_set); all NULL where the compiler lacks the set. */
#include <string.h>
#include "kernels/quant_blocks.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) &&                      \
    (!defined(QDOT_VNNI) || (defined(__AVX512VNNI__) && defined(__AVX512VL__)))
#include <immintrin.h>

static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* 8 int32 sums of 4 products each of u8 a and s8 b. */
static inline __m256i dot_u8s8(__m256i a, __m256i b)
{
#ifdef QDOT_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
#endif
}

/* acc + pairwise products of int16 a and b summed into int32 (vpmaddwd
 * and an add in both builds: VNNI's vpdpwssd would chain its 5-cycle
 * latency through acc). */
static inline __m256i madd_acc(__m256i acc, __m256i a, __m256i b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }

/* The int16 lane j of a 128-bit half of v, in all 8 lanes of each half
 * (v's two halves the same 8 values: lane j of both). */
static inline __m256i word_bcast(__m256i v, int lo_j, int hi_j)
{
    return _mm256_shuffle_epi8(v, _mm256_set_m128i(_mm_set1_epi16((short)(0x0100 * (2 * hi_j + 1) + 2 * hi_j)),
                                                   _mm_set1_epi16((short)(0x0100 * (2 * lo_j + 1) + 2 * lo_j))));
}

static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* A 32-block's 4-bit codes: the low nibbles of qs (elements 0..15), then the high. */
static inline __m256i nibbles32(const uint8_t *qs)
{
    __m128i q = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0xF));
}

/* 16 in byte j where bit j of the 32 bits at p is set, else 0. */
static inline __m256i bit4_from_bits(const uint8_t *p)
{
    uint32_t x;
    memcpy(&x, p, 4);
    const __m256i pick = _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)x), pick), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(16));
}

static inline __m256i load32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

#define AI static inline __attribute__((always_inline))

/* Every kernel below runs R rows of x (1, or 4 for qkv_qmatmul: the
 * weight blocks decoded once for the 4) against one weight row; row r's
 * activation blocks start xs bytes after row r-1's. A row's operations are
 * the same, in the same order, whatever R, so qkv_qmatmul's results are
 * qkv_qmatvec's bits. */

/* A decoded 32-block: unsigned codes q (Q8_0: its magnitudes, sgn its
 * values, whose signs go over to x), scale d, factor ow of x's block sum. */
typedef struct {
    __m256i q, sgn;
    float d, ow;
} blk32;

AI blk32 decode32(qkv_qtype t, const uint8_t *p)
{
    blk32 r;
    uint16_t h[2];
    memcpy(h, p, 4);
    r.d = h2f(h[0]);
    r.sgn = _mm256_setzero_si256();
    switch (t) {
    case QKV_Q_Q4_0: r.q = nibbles32(p + 2), r.ow = r.d; break;
    case QKV_Q_Q4_1: r.q = nibbles32(p + 4), r.ow = h2f(h[1]); break;
    case QKV_Q_Q5_0: r.q = _mm256_or_si256(nibbles32(p + 6), bit4_from_bits(p + 2)), r.ow = r.d; break;
    case QKV_Q_Q5_1: r.q = _mm256_or_si256(nibbles32(p + 8), bit4_from_bits(p + 4)), r.ow = h2f(h[1]); break;
    default: r.sgn = load32(p + 2), r.q = _mm256_sign_epi8(r.sgn, r.sgn), r.ow = 0; break; /* Q8_0 */
    }
    return r;
}

/* Block i of the R rows into acc / corr. */
AI void step32(qkv_qtype t, int R, const blk32 *q, const void *xq, size_t xs, int64_t i, __m256 *acc, float *corr)
{
    for (int r = 0; r < R; r++) {
        const qkv_act32 *a = (const qkv_act32 *)((const uint8_t *)xq + r * xs) + i;
        __m256i x = load32(a->qs);
        if (t == QKV_Q_Q8_0) x = _mm256_sign_epi8(x, q->sgn);
        __m256 p = _mm256_cvtepi32_ps(dot_u8s8(q->q, x));
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(q->d * a->d), p, acc[r]);
        if (t != QKV_Q_Q8_0) corr[r] += q->ow * a->s;
    }
}

/* sum_b d_b dx_b (q . x)_b + off sum_b ow_b s_b (off -8, -16 or 1 for the
 * codes' offsets or the minima); two blocks a step into two sets of sums
 * (the multiply-adds' latency). */
AI void dot32(qkv_qtype t, int R, const void *w, const void *xq, size_t xs, int64_t nb, float *out)
{
    const int bytes = t == QKV_Q_Q4_0 ? 18 : t == QKV_Q_Q4_1 ? 20 : t == QKV_Q_Q5_0 ? 22 : t == QKV_Q_Q5_1 ? 24 : 34;
    const float off = t == QKV_Q_Q4_0 ? -8 : t == QKV_Q_Q5_0 ? -16 : 1;
    const uint8_t *b = w;
    __m256 acc0[4], acc1[4];
    float corr0[4] = {0}, corr1[4] = {0};
    for (int r = 0; r < R; r++) acc0[r] = acc1[r] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        blk32 q0 = decode32(t, b + i * bytes), q1 = decode32(t, b + (i + 1) * bytes);
        step32(t, R, &q0, xq, xs, i, acc0, corr0);
        step32(t, R, &q1, xq, xs, i + 1, acc1, corr1);
    }
    if (i < nb) {
        blk32 q0 = decode32(t, b + i * bytes);
        step32(t, R, &q0, xq, xs, i, acc0, corr0);
    }
    for (int r = 0; r < R; r++)
        out[r] = hsum8(_mm256_add_ps(acc0[r], acc1[r])) + (t == QKV_Q_Q8_0 ? 0 : off * (corr0[r] + corr1[r]));
}

static inline float hsum4(__m128 s)
{
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* Q4_K (qh5 0) and Q5_K (1) against Q8_K: per super-block sum_j sc_j
 * (q . x)_j in 8 int32 lanes into acc, sum_j m_j (x's sums over sub-block
 * j) in 4 into accm, each scaled by its factor. The 6-bit scales and
 * minima unpacked as llama.cpp does, 32 bits at a time: bytes 0..7 the
 * scales, 8..15 the minima; the scales broadcast by byte shuffles. */
AI void dot_k45(int qh5, int R, const void *w, const void *xq, size_t xs, int64_t nb, float *out)
{
    const int bytes = qh5 ? 176 : 144;
    const __m256i low = _mm256_set1_epi8(0xF), b4 = _mm256_set1_epi8(16);
    __m256 acc[4];
    __m128 accm[4];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps(), accm[r] = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *p = (const uint8_t *)w + i * bytes, *qs = p + (qh5 ? 48 : 16);
        uint16_t dd[2];
        uint32_t u[4];
        memcpy(dd, p, 4);
        memcpy(u, p + 4, 12);
        u[3] = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
        uint32_t m03 = u[1] & 0x3f3f3f3f;
        u[1] = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
        u[2] = m03;
        u[0] &= 0x3f3f3f3f;
        __m256i ms = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)u));
        __m256i sc2 = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(ms));
        __m128i mins = _mm256_extracti128_si256(ms, 1);
        __m256i lo[4], hi[4], hv = qh5 ? load32(p + 16) : _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i raw = load32(qs + 32 * c);
            lo[c] = _mm256_and_si256(raw, low), hi[c] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
            if (qh5) {
                const __m256i m0 = _mm256_set1_epi8((char)(1 << (2 * c))), m1 = _mm256_set1_epi8((char)(2 << (2 * c)));
                lo[c] = _mm256_or_si256(lo[c], _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hv, m0), m0), b4));
                hi[c] = _mm256_or_si256(hi[c], _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hv, m1), m1), b4));
            }
        }
        float d = h2f(dd[0]), dmin = h2f(dd[1]);
        for (int r = 0; r < R; r++) {
            const qkv_blk_q8_K *a = (const qkv_blk_q8_K *)((const uint8_t *)xq + r * xs) + i;
            __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)a->bsums),
                                        _mm_loadu_si128((const __m128i *)(a->bsums + 8)));
            __m256i sumi = _mm256_setzero_si256();
            for (int c = 0; c < 4; c++) {
                __m256i plo = _mm256_maddubs_epi16(lo[c], load32(a->qs + 64 * c));
                __m256i phi = _mm256_maddubs_epi16(hi[c], load32(a->qs + 64 * c + 32));
                sumi = madd_acc(sumi, plo, word_bcast(sc2, 2 * c, 2 * c));
                sumi = madd_acc(sumi, phi, word_bcast(sc2, 2 * c + 1, 2 * c + 1));
            }
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * a->d), _mm256_cvtepi32_ps(sumi), acc[r]);
            accm[r] = _mm_fmadd_ps(_mm_set1_ps(dmin * a->d), _mm_cvtepi32_ps(_mm_madd_epi16(mins, bs)), accm[r]);
        }
    }
    for (int r = 0; r < R; r++) out[r] = hsum8(acc[r]) - hsum4(accm[r]);
}

/* Q6_K: codes 0..63 (value - 32) in 16 sub-blocks of 16, int8 scales;
 * the -32 enters as 32 sum_k sc_k bsums_k. */
AI void dot_q6_K(int R, const void *w, const void *xq, size_t xs, int64_t nb, float *out)
{
    const qkv_blk_q6_K *b = w;
    const __m256i low = _mm256_set1_epi8(0xF);
    __m256 acc[4];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b[i].scales));
        __m256i q[8], sv[8];
        for (int h = 0; h < 2; h++) {
            /* scales 8h .. 8h+7 as int16 in both halves */
            __m256i sch = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(b[i].scales + 8 * h))));
            __m256i ql0 = load32(b[i].ql + 64 * h), ql1 = load32(b[i].ql + 64 * h + 32), hv = load32(b[i].qh + 32 * h);
            q[4 * h] = _mm256_or_si256(_mm256_and_si256(ql0, low),
                                       _mm256_slli_epi16(_mm256_and_si256(hv, _mm256_set1_epi8(0x03)), 4));
            q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(ql1, low),
                                           _mm256_slli_epi16(_mm256_and_si256(hv, _mm256_set1_epi8(0x0C)), 2));
            q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low),
                                           _mm256_and_si256(hv, _mm256_set1_epi8(0x30)));
            q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low),
                                           _mm256_srli_epi16(_mm256_and_si256(hv, _mm256_set1_epi8((char)0xC0)), 2));
            for (int s = 0; s < 4; s++) sv[4 * h + s] = word_bcast(sch, 2 * s, 2 * s + 1); /* sub-blocks 8h+2s, +1 */
        }
        float d = h2f(b[i].d);
        for (int r = 0; r < R; r++) {
            const qkv_blk_q8_K *a = (const qkv_blk_q8_K *)((const uint8_t *)xq + r * xs) + i;
            __m256i sumi = _mm256_setzero_si256();
            for (int k = 0; k < 8; k++) sumi = madd_acc(sumi, _mm256_maddubs_epi16(q[k], load32(a->qs + 32 * k)), sv[k]);
            __m256i off = _mm256_madd_epi16(load32(a->bsums), sc16); /* minus 32 sum_k sc_k bsums_k */
            sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(off, 5));
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * a->d), _mm256_cvtepi32_ps(sumi), acc[r]);
        }
    }
    for (int r = 0; r < R; r++) out[r] = hsum8(acc[r]);
}

/* One row (qkv_qdot_fn) and four rows (qkv_qdot4_fn) of each type. */
#define QDOT_PAIR(name, call1, call4)                                                             \
    static float qd_##name(const void *w, const void *xq, int64_t nb)                             \
    {                                                                                             \
        float o;                                                                                  \
        call1;                                                                                    \
        return o;                                                                                 \
    }                                                                                             \
    static void qd4_##name(const void *w, const void *xq, size_t xs, int64_t nb, float *out) { call4; }
QDOT_PAIR(q4_0, dot32(QKV_Q_Q4_0, 1, w, xq, 0, nb, &o), dot32(QKV_Q_Q4_0, 4, w, xq, xs, nb, out))
QDOT_PAIR(q4_1, dot32(QKV_Q_Q4_1, 1, w, xq, 0, nb, &o), dot32(QKV_Q_Q4_1, 4, w, xq, xs, nb, out))
QDOT_PAIR(q5_0, dot32(QKV_Q_Q5_0, 1, w, xq, 0, nb, &o), dot32(QKV_Q_Q5_0, 4, w, xq, xs, nb, out))
QDOT_PAIR(q5_1, dot32(QKV_Q_Q5_1, 1, w, xq, 0, nb, &o), dot32(QKV_Q_Q5_1, 4, w, xq, xs, nb, out))
QDOT_PAIR(q8_0, dot32(QKV_Q_Q8_0, 1, w, xq, 0, nb, &o), dot32(QKV_Q_Q8_0, 4, w, xq, xs, nb, out))
QDOT_PAIR(q4_K, dot_k45(0, 1, w, xq, 0, nb, &o), dot_k45(0, 4, w, xq, xs, nb, out))
QDOT_PAIR(q5_K, dot_k45(1, 1, w, xq, 0, nb, &o), dot_k45(1, 4, w, xq, xs, nb, out))
QDOT_PAIR(q6_K, dot_q6_K(1, w, xq, 0, nb, &o), dot_q6_K(4, w, xq, xs, nb, out))

const qkv_qdot_set QDOT_SET = {QDOT_NAME,
                               {qd_q4_0, qd_q4_1, qd_q5_0, qd_q5_1, qd_q8_0, qd_q4_K, qd_q5_K, qd_q6_K},
                               {qd4_q4_0, qd4_q4_1, qd4_q5_0, qd4_q5_1, qd4_q8_0, qd4_q4_K, qd4_q5_K, qd4_q6_K}};
#else
const qkv_qdot_set QDOT_SET = {QDOT_NAME, {NULL}, {NULL}};
#endif
