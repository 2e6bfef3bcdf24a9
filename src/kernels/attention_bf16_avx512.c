/* attention_bf16_avx512.c: the fused attention kernels (attention_simd.h)
 * with bf16 operands multiplied by AVX512-BF16 dot products
 * (attention_bf16.h), for the BF16 precision mode. 16 floats a vector,
 * register blocks of 4 rows x 4 vectors. The Makefile builds this file with
 * -mavx512bf16 (and the AVX-512 flags of attention_avx512.c) on x86-64;
 * elsewhere, or with a compiler that lacks the set, it is empty. */
#include "kernels/attention.h"
#if defined(__AVX512F__) && defined(__AVX512BF16__) && defined(__AVX512BW__)
#define VW 16
#include <immintrin.h>
#define VFMA(a, b, c) ((vf)_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(c)))
#define NV 4
#define ATTN_BF16
#define ATTN_BF16_DOT
#define ISA(x) x##_bf16_avx512
#define ISA_NAME "bf16_avx512"
#include "kernels/attention_simd.h"
#else
const qkv_attn_simd qkv_attn_simd_bf16_avx512 = {"bf16_avx512", 0, 0, 0, 0};
#endif
