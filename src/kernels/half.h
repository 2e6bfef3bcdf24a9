/* half.h: IEEE 754 half precision (fp16) storage, for the KV cache's
 * optional half-precision mode. Conversions round to nearest even, as
 * x86's F16C instructions (used when the build has them) and
 * torch.Tensor.half() do. */
#ifndef QKV_KERNELS_HALF_H
#define QKV_KERNELS_HALF_H
#include <stdint.h>

/* One value, in portable C. */
uint16_t qkv_half_from_float(float x);
float qkv_half_to_float(uint16_t h);
/* n values: y (n) from x (n); F16C's vector instructions where built with them. */
void qkv_half_from_floats(const float *x, uint16_t *y, int64_t n);
void qkv_half_to_floats(const uint16_t *x, float *y, int64_t n);
#endif
