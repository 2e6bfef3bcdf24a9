/* qkv/cnn.h: convolutional layers and the image baselines the vision
 * transformer is measured against: F.conv2d / nn.Conv2d, F.max_pool2d /
 * nn.MaxPool2d, F.batch_norm / nn.BatchNorm2d, and a small CNN and an MLP
 * for 28x28 grey images (included by qkv.h). docs/cnn.md has the shapes,
 * the PyTorch equivalents, the backward and the measured parity. */
#include "qkv.h" /* first: qkv.h includes every area header in order */
#ifndef QKV_CNN_H
#define QKV_CNN_H
#ifdef __cplusplus
extern "C" {
#endif

/* ---- functional ops, recorded on the tape --------------------------------
 * Pairs (stride, padding, ...) are {h, w}; NULL gives PyTorch's default on
 * both axes. */

/* F.conv2d(x, w, b, stride, padding, dilation), groups = 1, zero padding:
 * x (N,Cin,H,W) (or (Cin,H,W) unbatched), w (Cout,Cin,kH,kW), b (Cout) or
 * NULL -> y (N,Cout,Hout,Wout), Hout = (H + 2 padding_h - dilation_h (kH-1)
 * - 1) / stride_h + 1 (likewise Wout). stride >= 1 (default 1), padding >= 0
 * (default 0), dilation >= 1 (default 1); the padded input must hold the
 * dilated kernel. im2col + one gemm; plain loops under qkv_reference(). */
QKV_API qkv_status qkv_conv2d(qkv_ctx *c, qkv_tensor *x, qkv_tensor *w, qkv_tensor *b,
                              const int64_t *stride, const int64_t *padding,
                              const int64_t *dilation, qkv_tensor **y);

/* F.max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode):
 * x (N,C,H,W) or (C,H,W) -> y (N,C,Hout,Wout), Hout = (H + 2 padding_h -
 * dilation_h (kH-1) - 1 [+ stride_h - 1 with ceil_mode]) / stride_h + 1,
 * less one with ceil_mode when the last window would start in the right
 * padding. kernel >= 1; stride NULL = kernel; padding (implicit -inf)
 * <= kernel / 2; dilation >= 1. Each output is its window's first maximum
 * in row-major order (a NaN wins, the last NaN), and the backward routes
 * dy to that element only, as PyTorch's CPU kernel does. */
QKV_API qkv_status qkv_max_pool2d(qkv_ctx *c, qkv_tensor *x, const int64_t *kernel_size,
                                  const int64_t *stride, const int64_t *padding,
                                  const int64_t *dilation, int ceil_mode, qkv_tensor **y);

/* F.batch_norm(x, running_mean, running_var, weight, bias, training,
 * momentum, eps) over dim 1: x (N,C), (N,C,L) or (N,C,H,W); every other
 * argument (C) or NULL. y = (x - mean) / sqrt(var + eps) * weight + bias.
 * training: mean and the biased var of the batch (over N and the spatial
 * dims, more than one value per channel); when given, running_mean and
 * running_var are updated in place: r = (1 - momentum) r + momentum s, with
 * the unbiased variance for running_var (no gradient flows into them).
 * Not training: running_mean and running_var (both needed) are used.
 * eps > 0, momentum finite. */
QKV_API qkv_status qkv_batch_norm(qkv_ctx *c, qkv_tensor *x, qkv_tensor *running_mean,
                                  qkv_tensor *running_var, qkv_tensor *weight, qkv_tensor *bias,
                                  int training, float momentum, float eps, qkv_tensor **y);

/* ---- modules (torch.nn), run with qkv_module_forward ------------------------ */

/* nn.Conv2d's options: qkv_conv2d_opts_default(in, out, k) gives a k x k
 * kernel, stride 1, padding 0, dilation 1, bias 1 (groups 1, padding_mode
 * 'zeros' always). */
typedef struct {
    int64_t in_channels, out_channels;
    int64_t kernel_size[2], stride[2], padding[2], dilation[2];
    int bias;
} qkv_conv2d_opts;
QKV_API qkv_conv2d_opts qkv_conv2d_opts_default(int64_t in_channels, int64_t out_channels,
                                                int64_t kernel_size);

/* nn.Conv2d: "weight" (Cout,Cin,kH,kW) kaiming_uniform_(a=sqrt(5)), i.e.
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and "bias" (Cout) the same bound,
 * fan_in = Cin*kH*kW. x (N,Cin,H,W) or (Cin,H,W). */
typedef struct {
    qkv_module base;
    qkv_conv2d_opts o;
    qkv_tensor *weight, *bias; /* (Cout,Cin,kH,kW); (Cout) or NULL */
} qkv_nn_conv2d;
QKV_API qkv_status qkv_nn_conv2d_init(qkv_nn_conv2d *m, const qkv_conv2d_opts *o, qkv_params *p,
                                      const char *prefix, qkv_rng *rng);

/* nn.MaxPool2d(kernel_size, stride, padding, dilation, ceil_mode); stride
 * {0, 0} means "= kernel_size", PyTorch's default. No parameters. */
typedef struct {
    qkv_module base;
    int64_t kernel_size[2], stride[2], padding[2], dilation[2];
    int ceil_mode;
} qkv_nn_maxpool2d;
QKV_API qkv_status qkv_nn_maxpool2d_init(qkv_nn_maxpool2d *m, int64_t kernel_size, int64_t stride,
                                         int64_t padding);

/* nn.BatchNorm2d's options: qkv_batchnorm_opts_default(C) gives eps 1e-5,
 * momentum 0.1, affine 1, track_running_stats 1. momentum NAN is PyTorch's
 * momentum=None: a cumulative average, factor 1 / num_batches_tracked. */
typedef struct {
    int64_t num_features;
    float eps, momentum;
    int affine, track_running_stats;
} qkv_batchnorm_opts;
QKV_API qkv_batchnorm_opts qkv_batchnorm_opts_default(int64_t num_features);

/* nn.BatchNorm2d: parameters "weight" (C) ones and "bias" (C) zeros when
 * affine; buffers (qkv_params_add_buffer) "running_mean" (C) zeros,
 * "running_var" (C) ones and "num_batches_tracked" (a 0-dim scalar, F32
 * here, int64 in PyTorch) when track_running_stats. x (N,C,H,W). In
 * training mode (qkv_ctx_set_training) it normalises with the batch's
 * statistics, adds 1 to num_batches_tracked and updates the running ones;
 * in eval mode it uses the running ones (the batch's without them). */
typedef struct {
    qkv_module base;
    qkv_batchnorm_opts o;
    qkv_tensor *weight, *bias;                /* (C) each, or NULL */
    qkv_tensor *running_mean, *running_var;   /* (C) each, or NULL */
    qkv_tensor *num_batches_tracked;          /* () or NULL */
} qkv_nn_batchnorm2d;
QKV_API qkv_status qkv_nn_batchnorm2d_init(qkv_nn_batchnorm2d *m, const qkv_batchnorm_opts *o,
                                           qkv_params *p, const char *prefix);

/* nn.Flatten(start_dim=1): (N,...) -> (N,prod(...)), a view; x needs >= 2 dims. */
typedef struct { qkv_module base; } qkv_nn_flatten;
QKV_API qkv_status qkv_nn_flatten_init(qkv_nn_flatten *m);

/* ---- image classifiers (src/models/cnn.c) -----------------------------------
 * Both take x (N,C,H,W) images and give logits (N,num_classes); both are
 * nn.Sequential with PyTorch's names, so a state_dict moves either way. */

/* The CNN baseline: per block b (index i = 4 b in the Sequential)
 *   i: Conv2d(c_b, channels[b], 3, padding=1), i+1: BatchNorm2d,
 *   i+2: ReLU, i+3: MaxPool2d(2)
 * then Flatten, Linear(channels[last] * (H/2^blocks) * (W/2^blocks), hidden),
 * ReLU, Linear(hidden, num_classes). Default (qkv_cnn_opts_default): 1x28x28
 * input, blocks 32 and 64, hidden 128, 10 classes: "0.weight" (32,1,3,3),
 * "1.running_mean", "4.weight" (64,32,3,3), "9.weight" (128,3136),
 * "11.weight" (10,128); 421,834 parameters (and 6 buffers, 3 per BatchNorm2d). */
#define QKV_CNN_MAX_BLOCKS 4
typedef struct {
    int64_t in_channels, height, width, num_classes, hidden;
    int blocks;
    int64_t channels[QKV_CNN_MAX_BLOCKS];
} qkv_cnn_opts;
QKV_API qkv_cnn_opts qkv_cnn_opts_default(void);

typedef struct {
    qkv_sequential seq; /* run it: qkv_module_forward(c, &net.seq.base, x, &logits) */
    qkv_cnn_opts o;
    qkv_nn_conv2d conv[QKV_CNN_MAX_BLOCKS];
    qkv_nn_batchnorm2d bn[QKV_CNN_MAX_BLOCKS];
    qkv_nn_activation relu[QKV_CNN_MAX_BLOCKS + 1];
    qkv_nn_maxpool2d pool[QKV_CNN_MAX_BLOCKS];
    qkv_nn_flatten flatten;
    qkv_nn_linear fc1, fc2;
} qkv_cnn;
QKV_API qkv_status qkv_cnn_init(qkv_cnn *net, const qkv_cnn_opts *o, qkv_params *p,
                                const char *prefix, qkv_rng *rng);
QKV_API void qkv_cnn_free(qkv_cnn *net);

/* The MLP baseline: Flatten, then Linear(C*H*W, hidden[0]), ReLU, ...,
 * Linear(hidden[last], num_classes), as nn.Sequential (indices 0 Flatten,
 * 1 Linear, 2 ReLU, 3 Linear, ...). Default (qkv_mlp_opts_default):
 * 784-256-128-10, "1.weight" (256,784), "3.weight" (128,256), "5.weight"
 * (10,128); 235,146 parameters. */
#define QKV_MLP_MAX_HIDDEN 4
typedef struct {
    int64_t in_features, num_classes;
    int layers; /* hidden layers, 0..QKV_MLP_MAX_HIDDEN */
    int64_t hidden[QKV_MLP_MAX_HIDDEN];
} qkv_mlp_opts;
QKV_API qkv_mlp_opts qkv_mlp_opts_default(void);

typedef struct {
    qkv_sequential seq;
    qkv_mlp_opts o;
    qkv_nn_flatten flatten;
    qkv_nn_linear fc[QKV_MLP_MAX_HIDDEN + 1];
    qkv_nn_activation relu[QKV_MLP_MAX_HIDDEN];
} qkv_mlp;
QKV_API qkv_status qkv_mlp_init(qkv_mlp *net, const qkv_mlp_opts *o, qkv_params *p,
                                const char *prefix, qkv_rng *rng);
QKV_API void qkv_mlp_free(qkv_mlp *net);

#ifdef __cplusplus
}
#endif
#endif
