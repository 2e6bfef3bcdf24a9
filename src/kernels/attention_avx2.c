/* attention_avx2.c: the fused attention kernels (attention_simd.h) for AVX2
 * with FMA: 8 floats a vector, register blocks of 4 rows x 2 vectors. The
 * Makefile builds this file with -mavx2 -mfma on x86-64; elsewhere it is empty. */
#include "kernels/attention.h"
#if defined(__AVX2__) && defined(__FMA__)
#define VW 8
#include <immintrin.h>
#define VFMA(a, b, c) ((vf)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#define NV 2
#define ISA(x) x##_avx2
#define ISA_NAME "avx2"
#include "kernels/attention_simd.h"
#else
const qkv_attn_simd qkv_attn_simd_avx2 = {"avx2", 0, 0, 0, 0};
#endif
