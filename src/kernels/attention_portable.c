/* attention_portable.c: the fused attention kernels (attention_simd.h) with
 * 4-float vectors, which every target of GCC and Clang lowers (SSE on
 * x86-64, NEON on ARM, scalar code elsewhere). Register blocks of 4 rows x
 * 2 vectors. */
#define VW 4
#define NV 2
#define ISA(x) x##_portable
#define ISA_NAME "portable"
#include "kernels/attention_simd.h"
