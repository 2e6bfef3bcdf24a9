/* vmath_avx512.c: vmath.h's loops built for AVX-512 (16 floats a vector;
 * the Makefile adds -mavx512f and 512-bit vectors on x86-64; elsewhere the
 * table is empty and rows.c keeps its own build). */
#include "kernels/ce_rows.h"
#include "kernels/vmath.h"
#if defined(__AVX512F__)
static void exp16(float *y, const float *x, int64_t n) { vm_exp(y, x, n); }
static void tanh16(float *y, const float *x, int64_t n) { vm_tanh(y, x, n); }
static void sigmoid16(float *y, const float *x, int64_t n) { vm_sigmoid(y, x, n); }
static void erf16(float *y, const float *x, int64_t n) { vm_erf(y, x, n); }
static void erfc16(float *y, const float *x, int64_t n) { vm_erfc(y, x, n); }
const qkv_vmath qkv_vmath_avx512 = {"avx512", exp16, tanh16, sigmoid16, erf16, erfc16};
const qkv_ce_rows qkv_ce_rows_avx512 = {ce_max, ce_bias_max, ce_exp_sum, ce_grad};
#else
const qkv_vmath qkv_vmath_avx512 = {"avx512", 0, 0, 0, 0, 0};
const qkv_ce_rows qkv_ce_rows_avx512 = {0, 0, 0, 0};
#endif
