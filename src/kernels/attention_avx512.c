/* attention_avx512.c: the fused attention kernels (attention_simd.h) for
 * AVX-512: 16 floats a vector, register blocks of 4 rows x 4 vectors. The
 * Makefile builds this file with -mavx512f on x86-64; elsewhere it is empty. */
#include "kernels/attention.h"
#if defined(__AVX512F__)
#define VW 16
#include <immintrin.h>
#define VFMA(a, b, c) ((vf)_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(c)))
#define NV 4
#define ISA(x) x##_avx512
#define ISA_NAME "avx512"
#include "kernels/attention_simd.h"
#else
const qkv_attn_simd qkv_attn_simd_avx512 = {"avx512", 0, 0, 0, 0};
#endif
