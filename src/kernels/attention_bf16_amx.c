/* attention_bf16_amx.c: the bf16 fused attention kernels (attention_simd.h,
 * attention_bf16.h) with their products on AMX tiles (tdpbf16ps: a 16x16
 * FP32 block from 16x32 by 32x16 bf16 in one instruction), the rest as in
 * attention_bf16_avx512.c: the softmax passes in AVX-512, the rows and
 * pairs outside whole tiles by vdpbf16ps. The Makefile builds this file
 * with -mamx-tile -mamx-bf16 and the flags of attention_bf16_avx512.c on
 * x86-64; elsewhere, or with a compiler that lacks them, it is empty.
 * attention_flash.c picks it where qkv_amx_usable() (the CPU has the
 * tiles, Linux lends them to the process). */
#include "kernels/attention.h"
#if defined(__AVX512F__) && defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AMX_TILE__) && \
    defined(__AMX_BF16__)
#define VW 16
#include <immintrin.h>
#define VFMA(a, b, c) ((vf)_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(c)))
#define NV 4
#define ATTN_BF16
#define ATTN_BF16_DOT
#define ATTN_BF16_AMX
#define ISA(x) x##_bf16_amx
#define ISA_NAME "bf16_amx"
#include "kernels/attention_simd.h"
#else
const qkv_attn_simd qkv_attn_simd_bf16_amx = {"bf16_amx", 0, 0, 0, 0};
#endif
