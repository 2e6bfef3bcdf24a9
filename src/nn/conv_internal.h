/* conv_internal.h: the convolution kernels Conv1d and Conv2d share. Internal.
 *
 * Both are one 2-D convolution (groups = 1, zero padding): Conv1d is the
 * case H = 1, kH = 1 with stride, padding and dilation 1, 0, 1 along h. */
#ifndef QKV_CONV_INTERNAL_H
#define QKV_CONV_INTERNAL_H
#include "nn/nn_check.h"

/* One convolution's sizes; index 0 is along h, 1 along w. */
typedef struct {
    int64_t N, Cin, H, W, Cout, kh, kw, Hout, Wout;
    int64_t stride[2], padding[2], dilation[2];
} qkv_conv_geom;

/* y = conv(x, w, b) with geometry g, as a tape op: y is a new tensor of
 * ndim dims and shape (the caller's view of (N,Cout,Hout,Wout): (N,Cout,L),
 * (Cout,Hout,Wout), ...). Arguments are checked by the caller. im2col +
 * qkv_gemm, or plain loops (double accumulation) under qkv_reference(). */
qkv_status qkv_conv_apply(qkv_ctx *c, const qkv_conv_geom *g, qkv_tensor *x, qkv_tensor *w,
                          qkv_tensor *b, int ndim, const int64_t *shape, qkv_tensor **y);

/* Output length along one axis, PyTorch's floor rule:
 * (in + 2 pad - dil (k - 1) - 1) / stride + 1 (may be <= 0: too small). */
static inline int64_t qkv_conv_out_len(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil)
{
    int64_t num = in + 2 * pad - dil * (k - 1) - 1;
    return num < 0 ? 0 : num / stride + 1;
}
#endif
