/* half.h: 16-bit float storage: IEEE 754 half precision (fp16) and
 * bfloat16 (bf16: fp32's sign and 8-bit exponent, 7 stored mantissa bits),
 * for the KV cache's 16-bit modes and bf16 inference weights. Conversions
 * round to nearest even, as x86's F16C instructions (used when the build
 * has them), torch.Tensor.half() and .to(torch.bfloat16) do. */
#ifndef QKV_KERNELS_HALF_H
#define QKV_KERNELS_HALF_H
#include <stdint.h>

/* One value, in portable C. */
uint16_t qkv_half_from_float(float x);
float qkv_half_to_float(uint16_t h);
/* n values: y (n) from x (n); F16C's vector instructions where built with them. */
void qkv_half_from_floats(const float *x, uint16_t *y, int64_t n);
void qkv_half_to_floats(const uint16_t *x, float *y, int64_t n);

/* bf16 <-> float: kernels/bf16.h (the precision mode's and the cache's one
 * set of conversions). */
#include "kernels/bf16.h"
#endif
