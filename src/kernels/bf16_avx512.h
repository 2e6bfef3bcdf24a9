/* bf16_avx512.h: conversions to bf16 pairs in AVX-512 registers, shared by
 * the files built with -mavx512bf16 (the bf16 attention kernels'
 * packs, attention_bf16.h; the GEMM weights' packs, gemm_bf16_vnni.c).
 * Include only where __AVX512BF16__ is defined. */
#ifndef QKV_BF16_AVX512_H
#define QKV_BF16_AVX512_H
#include <immintrin.h>
#include <stdint.h>

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

/* t[c] = column c of the 16x16 matrix of 32-bit words whose rows are
 * r[0..15] (the classic four rounds of interleaves). */
static inline void transpose16(const __m512i r[16], __m512i t[16])
{
    __m512i a[16], b[16];
    for (int i = 0; i < 16; i += 2) {
        a[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        a[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        b[i] = _mm512_unpacklo_epi64(a[i], a[i + 2]);
        b[i + 1] = _mm512_unpackhi_epi64(a[i], a[i + 2]);
        b[i + 2] = _mm512_unpacklo_epi64(a[i + 1], a[i + 3]);
        b[i + 3] = _mm512_unpackhi_epi64(a[i + 1], a[i + 3]);
    }
    /* b[4g + k] holds, in 128-bit lane l, word k of rows 4g..4g+3 at
     * columns 4l..4l+3; gather the lanes */
    for (int k = 0; k < 4; k++) {
        a[k] = _mm512_shuffle_i32x4(b[k], b[4 + k], 0x88);      /* lanes 0,2 of rows 0-7 */
        a[4 + k] = _mm512_shuffle_i32x4(b[k], b[4 + k], 0xdd);  /* lanes 1,3 */
        a[8 + k] = _mm512_shuffle_i32x4(b[8 + k], b[12 + k], 0x88);
        a[12 + k] = _mm512_shuffle_i32x4(b[8 + k], b[12 + k], 0xdd);
    }
    for (int k = 0; k < 4; k++) {
        t[k] = _mm512_shuffle_i32x4(a[k], a[8 + k], 0x88);          /* column k: lane 0 */
        t[8 + k] = _mm512_shuffle_i32x4(a[k], a[8 + k], 0xdd);      /* lane 2 */
        t[4 + k] = _mm512_shuffle_i32x4(a[4 + k], a[12 + k], 0x88); /* lane 1 */
        t[12 + k] = _mm512_shuffle_i32x4(a[4 + k], a[12 + k], 0xdd); /* lane 3 */
    }
}

/* 16 pairs (lo[i], hi[i]) in bf16, lo's in the low half of each 32-bit
 * lane: two rows of 16 values as pairs along the rows. vcvtne2ps2bf16
 * gives lo's 16 values then hi's; the permute interleaves them. */
static inline __m512i bf16_pairs16(__m512 lo, __m512 hi)
{
    static const uint16_t inter[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    return _mm512_permutexvar_epi16(_mm512_loadu_si512(inter), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

#endif
