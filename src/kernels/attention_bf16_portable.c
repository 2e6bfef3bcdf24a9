/* attention_bf16_portable.c: the fused attention kernels (attention_simd.h)
 * with bf16-rounded operands and FP32 arithmetic (attention_bf16.h) in
 * 4-float vectors, for the BF16 precision mode on any CPU (and the
 * portable build): correct, not faster than FP32. */
#define VW 4
#define NV 2
#define ATTN_BF16
#define ISA(x) x##_bf16_portable
#define ISA_NAME "bf16_portable"
#include "kernels/attention_simd.h"
