/* quant_dot_vnni.c: qkv_qmatvec's block dot products with AVX-512 VNNI's
 * byte and word dot products on 256-bit registers (built with -mavx2 -mfma
 * -mf16c -mavx512f -mavx512vl -mavx512bw -mavx512vnni on x86-64;
 * quant_dot_simd.h). */
#define QDOT_VNNI 1
#define QDOT_SET qkv_qdot_vnni
#define QDOT_NAME "avx512vnni"
#include "kernels/quant_dot_simd.h"
