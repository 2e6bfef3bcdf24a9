/* attention_bf16_avx2.c: the fused attention kernels (attention_simd.h)
 * with bf16-rounded operands and FP32 arithmetic (attention_bf16.h), for
 * the BF16 precision mode on CPUs without AVX512-BF16: the same numbers as
 * attention_bf16_avx512.c up to the order of the sums, not faster than
 * FP32. Built with -mavx2 -mfma on x86-64; elsewhere it is empty. */
#include "kernels/attention.h"
#if defined(__AVX2__) && defined(__FMA__)
#define VW 8
#include <immintrin.h>
#define VFMA(a, b, c) ((vf)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#define NV 2
#define ATTN_BF16
#define ISA(x) x##_bf16_avx2
#define ISA_NAME "bf16_avx2"
#include "kernels/attention_simd.h"
#else
const qkv_attn_simd qkv_attn_simd_bf16_avx2 = {"bf16_avx2", 0, 0, 0, 0};
#endif
