/* quant_dot_avx2.c: qkv_qmatvec's block dot products for AVX2 (built with
 * -mavx2 -mfma -mf16c on x86-64; quant_dot_simd.h). */
#define QDOT_SET qkv_qdot_avx2
#define QDOT_NAME "avx2"
#include "kernels/quant_dot_simd.h"
