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

/* sum_b dw_b dx_b (q . x)_b + OFF sum_b OW_b s_b over the 32-blocks, the
 * codes from CODES(i) (an __m256i of 32 unsigned bytes); two blocks a
 * step into two sets of sums (the multiply-adds' latency). */
#define DOT32_BLOCK(BT, CODES, OW, i, acc, corr)                                                  \
    do {                                                                                          \
        __m256i q = CODES(i);                                                                     \
        float d = h2f(b[i].d);                                                                    \
        __m256 p = _mm256_cvtepi32_ps(dot_u8s8(q, load32(a[i].qs)));                              \
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d * a[i].d), p, acc);                                \
        corr += (OW(i)) * a[i].s;                                                                 \
    } while (0)
#define DOT32(BT, CODES, OW, OFF)                                                                 \
    const BT *b = w;                                                                              \
    const qkv_act32 *a = xq;                                                                      \
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();                                \
    float corr0 = 0, corr1 = 0;                                                                   \
    int64_t i = 0;                                                                                \
    for (; i + 2 <= nb; i += 2) {                                                                 \
        DOT32_BLOCK(BT, CODES, OW, i, acc0, corr0);                                               \
        DOT32_BLOCK(BT, CODES, OW, i + 1, acc1, corr1);                                           \
    }                                                                                             \
    if (i < nb) DOT32_BLOCK(BT, CODES, OW, i, acc0, corr0);                                       \
    return hsum8(_mm256_add_ps(acc0, acc1)) + (OFF) * (corr0 + corr1);

#define CODES_Q4(i) nibbles32(b[i].qs)
#define CODES_Q5(i) _mm256_or_si256(nibbles32(b[i].qs), bit4_from_bits(b[i].qh))
#define OW_D(i) h2f(b[i].d)
#define OW_M(i) h2f(b[i].m)

static float qd_q4_0(const void *w, const void *xq, int64_t nb) { DOT32(qkv_blk_q4_0, CODES_Q4, OW_D, -8) }
static float qd_q4_1(const void *w, const void *xq, int64_t nb) { DOT32(qkv_blk_q4_1, CODES_Q4, OW_M, 1) }
static float qd_q5_0(const void *w, const void *xq, int64_t nb) { DOT32(qkv_blk_q5_0, CODES_Q5, OW_D, -16) }
static float qd_q5_1(const void *w, const void *xq, int64_t nb) { DOT32(qkv_blk_q5_1, CODES_Q5, OW_M, 1) }

static inline __m256 q8_0_block(const qkv_blk_q8_0 *b, const qkv_act32 *a, __m256 acc)
{
    __m256i q = load32(b->qs), x = load32(a->qs);
    __m256 p = _mm256_cvtepi32_ps(dot_u8s8(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q)));
    return _mm256_fmadd_ps(_mm256_set1_ps(h2f(b->d) * a->d), p, acc);
}

static float qd_q8_0(const void *w, const void *xq, int64_t nb)
{
    const qkv_blk_q8_0 *b = w;
    const qkv_act32 *a = xq;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        acc0 = q8_0_block(&b[i], &a[i], acc0);
        acc1 = q8_0_block(&b[i + 1], &a[i + 1], acc1);
    }
    if (i < nb) acc0 = q8_0_block(&b[i], &a[i], acc0);
    return hsum8(_mm256_add_ps(acc0, acc1));
}

/* Q4_K and Q5_K against Q8_K: sum_j sc_j (q . x)_j in 8 int32 lanes into
 * acc, and sum_j m_j (x's sums over sub-block j) in 4 into accm, each
 * scaled by its super-block factor. The 6-bit scales and minima unpacked
 * as llama.cpp does, 32 bits at a time: bytes 0..7 the scales, 8..15 the
 * minima. */
static inline void dot_k45(uint16_t d16, uint16_t dmin16, const uint8_t *scales, const uint8_t *qh,
                           const uint8_t *qs, const qkv_blk_q8_K *a, __m256 *acc, __m128 *accm)
{
    uint32_t u[4];
    memcpy(u, scales, 12);
    u[3] = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
    uint32_t m03 = u[1] & 0x3f3f3f3f;
    u[1] = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
    u[2] = m03;
    u[0] &= 0x3f3f3f3f;
    __m256i ms = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)u));
    __m256i sc2 = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(ms));
    __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)a->bsums), _mm_loadu_si128((const __m128i *)(a->bsums + 8)));
    __m128i pm = _mm_madd_epi16(_mm256_extracti128_si256(ms, 1), bs);
    const __m256i low = _mm256_set1_epi8(0xF), b4 = _mm256_set1_epi8(16);
    __m256i sumi = _mm256_setzero_si256(), hv = qh ? load32(qh) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i raw = load32(qs + 32 * c);
        __m256i lo = _mm256_and_si256(raw, low), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
        if (qh) {
            const __m256i m0 = _mm256_set1_epi8((char)(1 << (2 * c))), m1 = _mm256_set1_epi8((char)(2 << (2 * c)));
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hv, m0), m0), b4));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hv, m1), m1), b4));
        }
        __m256i plo = _mm256_maddubs_epi16(lo, load32(a->qs + 64 * c));
        __m256i phi = _mm256_maddubs_epi16(hi, load32(a->qs + 64 * c + 32));
        sumi = madd_acc(sumi, plo, word_bcast(sc2, 2 * c, 2 * c));
        sumi = madd_acc(sumi, phi, word_bcast(sc2, 2 * c + 1, 2 * c + 1));
    }
    *acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(d16) * a->d), _mm256_cvtepi32_ps(sumi), *acc);
    *accm = _mm_fmadd_ps(_mm_set1_ps(h2f(dmin16) * a->d), _mm_cvtepi32_ps(pm), *accm);
}

static inline float hsum4(__m128 s)
{
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

static float qd_q4_K(const void *w, const void *xq, int64_t nb)
{
    const qkv_blk_q4_K *b = w;
    const qkv_blk_q8_K *a = xq;
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) dot_k45(b[i].d, b[i].dmin, b[i].scales, NULL, b[i].qs, &a[i], &acc, &accm);
    return hsum8(acc) - hsum4(accm);
}

static float qd_q5_K(const void *w, const void *xq, int64_t nb)
{
    const qkv_blk_q5_K *b = w;
    const qkv_blk_q8_K *a = xq;
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) dot_k45(b[i].d, b[i].dmin, b[i].scales, b[i].qh, b[i].qs, &a[i], &acc, &accm);
    return hsum8(acc) - hsum4(accm);
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
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            /* scales 8h .. 8h+7 as int16 in both halves */
            __m256i sch = _mm256_broadcastsi128_si256(
                _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(b[i].scales + 8 * h))));
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
                sumi = madd_acc(sumi, p, word_bcast(sch, 2 * s, 2 * s + 1));
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
