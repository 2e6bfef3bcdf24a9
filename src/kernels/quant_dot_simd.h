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

/* acc + pairwise products of int16 a and b summed into int32. */
static inline __m256i madd_acc(__m256i acc, __m256i a, __m256i b)
{
#ifdef QDOT_VNNI
    return _mm256_dpwssd_epi32(acc, a, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
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

/* sum_b dw_b dx_b (q . x)_b + off_scale sum_b ow_b s_b over the 32-blocks,
 * the codes from CODES(i) (an __m256i of 32 unsigned bytes). */
#define DOT32(BT, CODES, OW, OFF)                                                                 \
    const BT *b = w;                                                                              \
    const qkv_act32 *a = xq;                                                                      \
    __m256 acc = _mm256_setzero_ps();                                                             \
    float corr = 0;                                                                               \
    for (int64_t i = 0; i < nb; i++) {                                                            \
        __m256i q = CODES;                                                                        \
        float d = h2f(b[i].d);                                                                    \
        __m256 p = _mm256_cvtepi32_ps(dot_u8s8(q, load32(a[i].qs)));                              \
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d * a[i].d), p, acc);                                \
        corr += (OW) * a[i].s;                                                                    \
    }                                                                                             \
    return hsum8(acc) + (OFF) * corr;

static float qd_q4_0(const void *w, const void *xq, int64_t nb) { DOT32(qkv_blk_q4_0, nibbles32(b[i].qs), d, -8) }
static float qd_q4_1(const void *w, const void *xq, int64_t nb)
{
    DOT32(qkv_blk_q4_1, nibbles32(b[i].qs), h2f(b[i].m), 1)
}
static float qd_q5_0(const void *w, const void *xq, int64_t nb)
{
    DOT32(qkv_blk_q5_0, _mm256_or_si256(nibbles32(b[i].qs), bit4_from_bits(b[i].qh)), d, -16)
}
static float qd_q5_1(const void *w, const void *xq, int64_t nb)
{
    DOT32(qkv_blk_q5_1, _mm256_or_si256(nibbles32(b[i].qs), bit4_from_bits(b[i].qh)), h2f(b[i].m), 1)
}

static float qd_q8_0(const void *w, const void *xq, int64_t nb)
{
    const qkv_blk_q8_0 *b = w;
    const qkv_act32 *a = xq;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m256i q = load32(b[i].qs), x = load32(a[i].qs);
        __m256 p = _mm256_cvtepi32_ps(dot_u8s8(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q)));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(b[i].d) * a[i].d), p, acc);
    }
    return hsum8(acc);
}

/* Q4_K and Q5_K against Q8_K: sum_j sc_j (q . x)_j in 8 int32 lanes,
 * minus dmin sum_j m_j (x's sums over sub-block j). */
static inline float dot_k45(const uint16_t d16, const uint16_t dmin16, const uint8_t *scales, const uint8_t *qh,
                            const uint8_t *qs, const qkv_blk_q8_K *a, __m256 *acc)
{
    uint8_t sc[8], mn[8];
    qkv_k_scale_min(scales, sc, mn);
    const __m256i low = _mm256_set1_epi8(0xF);
    __m256i sumi = _mm256_setzero_si256(), hv = qh ? load32(qh) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i raw = load32(qs + 32 * c);
        __m256i lo = _mm256_and_si256(raw, low), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
        if (qh) {
            const __m256i m0 = _mm256_set1_epi8((char)(1 << (2 * c))), m1 = _mm256_set1_epi8((char)(2 << (2 * c)));
            const __m256i b4 = _mm256_set1_epi8(16);
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hv, m0), m0), b4));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hv, m1), m1), b4));
        }
        __m256i plo = _mm256_maddubs_epi16(lo, load32(a->qs + 64 * c));
        __m256i phi = _mm256_maddubs_epi16(hi, load32(a->qs + 64 * c + 32));
        sumi = madd_acc(sumi, plo, _mm256_set1_epi16(sc[2 * c]));
        sumi = madd_acc(sumi, phi, _mm256_set1_epi16(sc[2 * c + 1]));
    }
    int summ = 0;
    for (int j = 0; j < 8; j++) summ += mn[j] * (a->bsums[2 * j] + a->bsums[2 * j + 1]);
    *acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(d16) * a->d), _mm256_cvtepi32_ps(sumi), *acc);
    return h2f(dmin16) * a->d * (float)summ;
}

static float qd_q4_K(const void *w, const void *xq, int64_t nb)
{
    const qkv_blk_q4_K *b = w;
    const qkv_blk_q8_K *a = xq;
    __m256 acc = _mm256_setzero_ps();
    float corr = 0;
    for (int64_t i = 0; i < nb; i++) corr += dot_k45(b[i].d, b[i].dmin, b[i].scales, NULL, b[i].qs, &a[i], &acc);
    return hsum8(acc) - corr;
}

static float qd_q5_K(const void *w, const void *xq, int64_t nb)
{
    const qkv_blk_q5_K *b = w;
    const qkv_blk_q8_K *a = xq;
    __m256 acc = _mm256_setzero_ps();
    float corr = 0;
    for (int64_t i = 0; i < nb; i++) corr += dot_k45(b[i].d, b[i].dmin, b[i].scales, b[i].qh, b[i].qs, &a[i], &acc);
    return hsum8(acc) - corr;
}

/* Q6_K: codes 0..63 (value - 32) in 16 sub-blocks of 16, int8 scales;
 * the -32 enters as 32 sum_k sc_k bsums_k. */
static float qd_q6_K(const void *w, const void *xq, int64_t nb)
{
    const qkv_blk_q6_K *b = w;
    const qkv_blk_q8_K *a = xq;
    const __m256i low = _mm256_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b[i].scales));
        const int8_t *sc = b[i].scales;
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i ql0 = load32(b[i].ql + 64 * h), ql1 = load32(b[i].ql + 64 * h + 32), hv = load32(b[i].qh + 32 * h);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(ql0, low),
                                   _mm256_slli_epi16(_mm256_and_si256(hv, _mm256_set1_epi8(0x03)), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(ql1, low),
                                   _mm256_slli_epi16(_mm256_and_si256(hv, _mm256_set1_epi8(0x0C)), 2));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low),
                                   _mm256_and_si256(hv, _mm256_set1_epi8(0x30)));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low),
                                   _mm256_srli_epi16(_mm256_and_si256(hv, _mm256_set1_epi8((char)0xC0)), 2));
            for (int s = 0; s < 4; s++) { /* sub-blocks 8h + 2s and 8h + 2s + 1 */
                __m256i p = _mm256_maddubs_epi16(q[s], load32(a[i].qs + 128 * h + 32 * s));
                __m256i sv = _mm256_set_m128i(_mm_set1_epi16(sc[8 * h + 2 * s + 1]), _mm_set1_epi16(sc[8 * h + 2 * s]));
                sumi = madd_acc(sumi, p, sv);
            }
        }
        /* minus 32 sum_k sc_k bsums_k */
        __m256i off = _mm256_madd_epi16(load32(a[i].bsums), sc16);
        sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(off, 5));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(b[i].d) * a[i].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum8(acc);
}

const qkv_qdot_set QDOT_SET = {QDOT_NAME, qd_q4_0, qd_q4_1, qd_q5_0, qd_q5_1, qd_q8_0, qd_q4_K, qd_q5_K, qd_q6_K};
#else
const qkv_qdot_set QDOT_SET = {QDOT_NAME, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
#endif
