/* qkv/nn.h: layers, as torch.nn has them (included by qkv.h). */
#include "qkv.h" /* first: qkv.h includes every area header in order */
#ifndef QKV_NN_H
#define QKV_NN_H
#ifdef __cplusplus
extern "C" {
#endif

/* A layer with one input and one output: what qkv_sequential chains. Each
 * module struct (qkv_nn_linear, qkv_nn_conv1d, ...) starts with this base,
 * so a pointer to the struct is a pointer to its qkv_module. */
typedef struct qkv_module qkv_module;
struct qkv_module {
    const char *type; /* PyTorch's class name: "Linear", "Conv1d", ... */
    qkv_status (*forward)(qkv_ctx *c, qkv_module *m, qkv_tensor *x, qkv_tensor **y);
};

/* Runs a module: m->forward(c, m, x, y), after checking that m was set up
 * by its _init (a zeroed struct has no forward). */
QKV_API qkv_status qkv_module_forward(qkv_ctx *c, qkv_module *m, qkv_tensor *x, qkv_tensor **y);

/* ---- functional ops (torch.nn.functional), recorded on the tape --------
 * Inputs are F32 unless said otherwise; outputs come from the ctx's arena.
 * docs/layers.md has the shapes, the PyTorch equivalents and the backward. */

/* ---- activations: one enum for the functional ops, the modules
 * (nn.ReLU, nn.GELU, nn.Tanh) and the transformer's feed-forward.
 * QKV_ACTIVATIONS is the one list: X(NAME, name, module) per kind, in enum
 * order, with QKV_ACTIVATION_NAME, its name for qkv_activation_name and
 * parse, and PyTorch's class name for the module's base.type. A new
 * activation is a row here (at the end: the values are stored in
 * checkpoints) and its formulas in src/nn/activation.c. */
#define QKV_ACTIVATIONS(X)                                                          \
    X(RELU, "relu", "ReLU")           /* max(x, 0): F.relu (gradient 0 at x = 0, as PyTorch's) */ \
    X(GELU, "gelu", "GELU")           /* x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)): F.gelu */ \
    X(GELU_TANH, "gelu_tanh", "GELU") /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): \
                                       * F.gelu(approximate='tanh') */          \
    X(TANH, "tanh", "Tanh")           /* tanh(x): torch.tanh */

#define QKV_ACTIVATION_ENUM_(NAME, name, module) QKV_ACTIVATION_##NAME,
typedef enum { QKV_ACTIVATIONS(QKV_ACTIVATION_ENUM_) } qkv_activation; /* RELU = 0, GELU, GELU_TANH, TANH */
#undef QKV_ACTIVATION_ENUM_

/* y = act(x), elementwise, any shape. */
QKV_API qkv_status qkv_activation_apply(qkv_ctx *c, qkv_activation act, qkv_tensor *x,
                                        qkv_tensor **y);
/* y = relu(x W^T + b), F.relu(F.linear(x, w, b)) (shapes as qkv_linear):
 * the same values and gradients as qkv_linear then qkv_activation_apply
 * with QKV_ACTIVATION_RELU. Recording in the BF16 mode on oneDNN it is one
 * node, whose backward masks dy, converts it to bf16 and sums the bias
 * gradient in one pass (a transformer's feed-forward); elsewhere the two. */
QKV_API qkv_status qkv_linear_relu(qkv_ctx *c, qkv_tensor *x, qkv_tensor *w, qkv_tensor *b,
                                   qkv_tensor **y);
/* "relu", "gelu", "gelu_tanh", "tanh" (NULL for a value out of range), and back. */
QKV_API const char *qkv_activation_name(qkv_activation act);
QKV_API qkv_status qkv_activation_parse(const char *name, qkv_activation *act);

/* The functional forms, as torch.nn.functional names them: F.relu,
 * torch.tanh, and F.gelu(x, approximate) with PyTorch's string: "none"
 * (or NULL) for the exact erf form, "tanh" for the approximation. relu is
 * torch's bit for bit: x < 0 ? 0 : x (a NaN stays NaN and passes its
 * gradient, -0 stays -0). */
QKV_API qkv_status qkv_relu(qkv_ctx *c, qkv_tensor *x, qkv_tensor **y);
QKV_API qkv_status qkv_tanh(qkv_ctx *c, qkv_tensor *x, qkv_tensor **y);
QKV_API qkv_status qkv_gelu(qkv_ctx *c, qkv_tensor *x, const char *approximate, qkv_tensor **y);

/* y = a + b. Same shapes, or one broadcast over the other's leading dims:
 * b's shape equal to a's trailing dims (a (N,T,C) + b (T,C) or (C)), or the
 * other way round. y has the larger shape; the smaller one's gradient is
 * summed over the broadcast dims. */
QKV_API qkv_status qkv_add(qkv_ctx *c, qkv_tensor *a, qkv_tensor *b, qkv_tensor **y);

/* torch.cat((a, b), dim): a and b of equal rank and equal sizes except in
 * dim; dim may be negative (counted from the end). */
QKV_API qkv_status qkv_cat(qkv_ctx *c, qkv_tensor *a, qkv_tensor *b, int dim, qkv_tensor **y);

/* F.layer_norm(x, (C,), weight, bias, eps) over the last dim:
 * y = (x - mean) / sqrt(var + eps) * weight + bias, biased variance.
 * x (...,C), weight (C) or NULL, bias (C) or NULL -> y like x. eps > 0. */
QKV_API qkv_status qkv_layer_norm(qkv_ctx *c, qkv_tensor *x, qkv_tensor *weight, qkv_tensor *bias,
                                  float eps, qkv_tensor **y);

/* F.rms_norm(x, (C,), weight, eps) over the last dim (PyTorch 2.4):
 * y = x / sqrt(mean(x^2) + eps) * weight. x (...,C), weight (C) or NULL
 * -> y like x. eps >= 0, or NAN for PyTorch's eps=None (FLT_EPSILON,
 * torch.finfo(torch.float32).eps). */
QKV_API qkv_status qkv_rms_norm(qkv_ctx *c, qkv_tensor *x, qkv_tensor *weight, float eps,
                                qkv_tensor **y);

/* F.embedding(ids, weight, padding_idx): y[...] = weight[ids[...]].
 * weight (num,dim), ids an I64 tensor of 0..3 dims -> y (ids.shape...,dim).
 * padding_idx in [0,num) gets no gradient; -1 means none (PyTorch's
 * negative padding_idx, counted from the end, is num + padding_idx here).
 * An id outside [0,num) is QKV_ERR_ARG naming it and its position. */
QKV_API qkv_status qkv_embedding(qkv_ctx *c, qkv_tensor *weight, qkv_tensor *ids,
                                 int64_t padding_idx, qkv_tensor **y);

/* F.dropout(x, p, training=qkv_ctx_training(c)). Outside training mode, or
 * with p == 0, *y is x itself (as PyTorch returns its input) and nothing is
 * recorded. In training each element is kept with probability 1 - p and
 * scaled by 1/(1-p); p == 1 gives zeros. The mask comes from a
 * counter-based hash of (qkv_ctx_next_seed(c), element index), so the
 * backward recomputes it; the draws differ from PyTorch's. p in [0,1]. */
QKV_API qkv_status qkv_dropout(qkv_ctx *c, qkv_tensor *x, float p, qkv_tensor **y);

/* F.conv1d(x, w, b, stride, padding, dilation), groups = 1:
 * x (N,Cin,L) (or (Cin,L) unbatched), w (Cout,Cin,K), b (Cout) or NULL ->
 * y (N,Cout,Lout) (or (Cout,Lout)), Lout = (L + 2 padding - dilation (K-1) - 1)
 * / stride + 1, which must be >= 1. stride >= 1, padding >= 0 (zeros),
 * dilation >= 1. im2col + gemm; a plain loop under qkv_reference(). */
QKV_API qkv_status qkv_conv1d(qkv_ctx *c, qkv_tensor *x, qkv_tensor *w, qkv_tensor *b,
                              int64_t stride, int64_t padding, int64_t dilation, qkv_tensor **y);

/* ---- modules (torch.nn) ------------------------------------------------
 * Each _init creates the module's parameters in p under prefix with
 * PyTorch's state_dict names ("weight", "bias"; prefix "" or "encoder.0."),
 * initialises them as PyTorch does (the random streams differ: load a
 * state_dict to get PyTorch's values), and sets base.type and base.forward.
 * Run one with qkv_module_forward(c, &m.base, x, &y). The module structs
 * hold no memory of their own (the parameters belong to p). */

/* nn.Linear(in_features, out_features, bias): "weight" (out,in), "bias" (out),
 * both U(-1/sqrt(in), 1/sqrt(in)). x (...,in) -> y (...,out). */
typedef struct {
    qkv_module base;
    int64_t in_features, out_features;
    qkv_tensor *weight, *bias; /* (out,in); (out) or NULL */
} qkv_nn_linear;
QKV_API qkv_status qkv_nn_linear_init(qkv_nn_linear *m, int64_t in_features, int64_t out_features,
                                      int bias, qkv_params *p, const char *prefix, qkv_rng *rng);

/* bf16 weights for inference (src/nn/linear_bf16.c, docs/bf16_decode.md):
 * a bf16 copy (round to nearest even, as .to(torch.bfloat16)) of every 2-D
 * F32 parameter of a store, made once. Set on a KV cache (kc.weights,
 * qkv/generate.h), the cached forwards through it run their qkv_linear
 * calls on these copies: y = x W16^T + b with FP32 activations, FP32
 * accumulation and the bias in FP32; a few rows at a time (a decoding
 * step) read the bf16 weights directly (AVX-512, AVX2 or portable loops,
 * split over OpenMP's threads), more rows (a prompt) multiply by the
 * copies widened back to floats. The weights are then W rounded to bf16
 * (relative error up to 2^-9 each), a model run with bf16 weights.
 * The copies are of the values at _init: after the parameters change
 * (training, loading), _free and _init again. Forwards that record
 * (training) never use them. */
typedef struct qkv_bf16_weights {
    int64_t count;           /* parameters copied */
    const float **f32;       /* (count) each one's FP32 data, in address order */
    int64_t *numel;          /* (count) its elements */
    uint16_t **bf16;         /* (count) its bf16 copy, in data */
    uint16_t *data;          /* every copy, one block */
} qkv_bf16_weights;
QKV_API qkv_status qkv_bf16_weights_init(qkv_bf16_weights *w, qkv_params *p);
QKV_API void qkv_bf16_weights_free(qkv_bf16_weights *w);

/* nn.Conv1d's options: qkv_conv1d_opts_default(in, out, kernel_size) gives
 * stride 1, padding 0, dilation 1, bias 1 (groups and padding_mode are
 * always 1 and 'zeros'). */
typedef struct {
    int64_t in_channels, out_channels, kernel_size;
    int64_t stride, padding, dilation;
    int bias;
} qkv_conv1d_opts;
QKV_API qkv_conv1d_opts qkv_conv1d_opts_default(int64_t in_channels, int64_t out_channels,
                                                int64_t kernel_size);

/* nn.Conv1d: "weight" (Cout,Cin,K), "bias" (Cout), both
 * U(-1/sqrt(Cin*K), 1/sqrt(Cin*K)). x (N,Cin,L) or (Cin,L) -> y (N,Cout,Lout). */
typedef struct {
    qkv_module base;
    qkv_conv1d_opts o;
    qkv_tensor *weight, *bias; /* (Cout,Cin,K); (Cout) or NULL */
} qkv_nn_conv1d;
QKV_API qkv_status qkv_nn_conv1d_init(qkv_nn_conv1d *m, const qkv_conv1d_opts *o, qkv_params *p,
                                      const char *prefix, qkv_rng *rng);

/* nn.LayerNorm(C, eps, elementwise_affine): "weight" (C) ones, "bias" (C)
 * zeros when elementwise_affine. PyTorch's default eps is 1e-5. x (...,C). */
typedef struct {
    qkv_module base;
    int64_t normalized_shape;
    float eps;
    int elementwise_affine;
    qkv_tensor *weight, *bias; /* (C) each, or NULL */
} qkv_nn_layernorm;
QKV_API qkv_status qkv_nn_layernorm_init(qkv_nn_layernorm *m, int64_t normalized_shape, float eps,
                                         int elementwise_affine, qkv_params *p, const char *prefix);

/* nn.RMSNorm(C, eps, elementwise_affine): "weight" (C) ones when
 * elementwise_affine. eps NAN (PyTorch's default None) means FLT_EPSILON. */
typedef struct {
    qkv_module base;
    int64_t normalized_shape;
    float eps;
    int elementwise_affine;
    qkv_tensor *weight; /* (C) or NULL */
} qkv_nn_rmsnorm;
QKV_API qkv_status qkv_nn_rmsnorm_init(qkv_nn_rmsnorm *m, int64_t normalized_shape, float eps,
                                       int elementwise_affine, qkv_params *p, const char *prefix);

/* nn.Embedding(num_embeddings, embedding_dim, padding_idx): "weight"
 * (num,dim) N(0,1), the padding_idx row zeroed (-1: none). The forward's x is
 * the I64 ids tensor. */
typedef struct {
    qkv_module base;
    int64_t num_embeddings, embedding_dim, padding_idx;
    qkv_tensor *weight; /* (num,dim) */
} qkv_nn_embedding;
QKV_API qkv_status qkv_nn_embedding_init(qkv_nn_embedding *m, int64_t num_embeddings,
                                         int64_t embedding_dim, int64_t padding_idx, qkv_params *p,
                                         const char *prefix, qkv_rng *rng);

/* Activation modules: nn.ReLU(), nn.Tanh(), nn.GELU(approximate) are one
 * struct with the activation's kind (base.type is PyTorch's class name);
 * qkv_nn_activation_init takes any kind. nn.Dropout(p) (p in [0,1]; active
 * only in training mode). */
typedef struct { qkv_module base; qkv_activation kind; } qkv_nn_activation;
typedef qkv_nn_activation qkv_nn_relu;
typedef qkv_nn_activation qkv_nn_tanh;
typedef qkv_nn_activation qkv_nn_gelu;
typedef struct { qkv_module base; float p; } qkv_nn_dropout;
QKV_API qkv_status qkv_nn_activation_init(qkv_nn_activation *m, qkv_activation kind);
QKV_API qkv_status qkv_nn_relu_init(qkv_nn_relu *m);
QKV_API qkv_status qkv_nn_tanh_init(qkv_nn_tanh *m);
/* approximate: "none" (or NULL) or "tanh", as nn.GELU's. */
QKV_API qkv_status qkv_nn_gelu_init(qkv_nn_gelu *m, const char *approximate);
QKV_API qkv_status qkv_nn_dropout_init(qkv_nn_dropout *m, float p);

/* nn.Sequential: runs its layers in order, each one's output the next one's
 * input. It holds pointers to modules it does not own (they must outlive
 * it); qkv_sequential_free frees only its array. A Sequential is a module,
 * so they nest. Parameter names follow PyTorch when the caller gives layer i
 * the prefix "<prefix>i." at its _init ("0.", "2.", ... counting the
 * parameterless layers too): Sequential(Conv1d, ReLU, Conv1d) has
 * "0.weight", "0.bias", "2.weight", "2.bias". */
typedef struct {
    qkv_module base;
    qkv_module **layers; /* (n), not owned */
    int n, cap;
} qkv_sequential;
QKV_API qkv_status qkv_sequential_init(qkv_sequential *s);
QKV_API qkv_status qkv_sequential_add(qkv_sequential *s, qkv_module *m);
QKV_API void qkv_sequential_free(qkv_sequential *s);

/* ---- recurrent layers (torch.nn.GRU, torch.nn.LSTM) ---------------------
 * docs/rnn.md has the equations, the shapes and how lengths work. */

/* The options nn.GRU and nn.LSTM share; qkv_rnn_opts_default(input_size,
 * hidden_size) gives PyTorch's defaults: num_layers 1, bias 1,
 * batch_first 0, dropout 0, bidirectional 0. */
typedef struct {
    int64_t input_size, hidden_size, num_layers;
    int bias, batch_first, bidirectional;
    float dropout; /* on each layer's output but the last, training only; [0,1] */
} qkv_rnn_opts;
QKV_API qkv_rnn_opts qkv_rnn_opts_default(int64_t input_size, int64_t hidden_size);

typedef enum { QKV_RNN_GRU = 0, QKV_RNN_LSTM } qkv_rnn_mode;

/* nn.GRU / nn.LSTM. Parameters, per layer k and direction (suffix "" or
 * "_reverse"), in PyTorch's order and gate order (GRU r,z,n: G = 3; LSTM
 * i,f,g,o: G = 4), all U(-1/sqrt(H), 1/sqrt(H)):
 *   weight_ih_l{k}{suffix} (G*H, in_k), in_0 = input_size, in_k = D*H after;
 *   weight_hh_l{k}{suffix} (G*H, H); bias_ih_l{k}{suffix}, bias_hh_l{k}{suffix}
 *   (G*H) when bias. D = 2 if bidirectional, else 1.
 * weights holds them in that order: weights[4*(k*D + d) + j], j = 0..3 for
 * weight_ih, weight_hh, bias_ih, bias_hh (NULL without bias). The struct's
 * base runs the module in a Sequential (x -> output, no states). */
typedef struct {
    qkv_module base;
    qkv_rnn_mode mode;
    qkv_rnn_opts o;
    qkv_tensor **weights; /* (4*num_layers*D), malloc'd: qkv_nn_gru_free / _lstm_free */
} qkv_nn_rnn;
typedef qkv_nn_rnn qkv_nn_gru;
typedef qkv_nn_rnn qkv_nn_lstm;

QKV_API qkv_status qkv_nn_gru_init(qkv_nn_gru *m, const qkv_rnn_opts *o, qkv_params *p,
                                   const char *prefix, qkv_rng *rng);
QKV_API qkv_status qkv_nn_lstm_init(qkv_nn_lstm *m, const qkv_rnn_opts *o, qkv_params *p,
                                    const char *prefix, qkv_rng *rng);
QKV_API void qkv_nn_gru_free(qkv_nn_gru *m);
QKV_API void qkv_nn_lstm_free(qkv_nn_lstm *m);

/* output, h_n = gru(x, h0); output, (h_n, c_n) = lstm(x, (h0, c0)).
 *   x      (L,N,input_size), (N,L,input_size) when batch_first, or (L,input_size) unbatched
 *   h0, c0 (D*num_layers,N,H) ((D*num_layers,H) unbatched), or NULL for zeros
 *   lengths (N) in [1,L], or NULL for all L: as pack_padded_sequence(x, lengths,
 *          enforce_sorted=False): steps t >= lengths[n] leave sequence n's
 *          state unchanged and give output 0 there, so h_n (and c_n) hold each
 *          sequence's state at its own end and the reverse direction starts
 *          at its own last step (pad_packed_sequence(total_length=L))
 *   output (L,N,D*H) ((N,L,D*H) batch_first, (L,D*H) unbatched)
 *   h_n, c_n (D*num_layers,N,H) ((D*num_layers,H) unbatched); h_n, c_n may
 *          be NULL when not wanted. */
QKV_API qkv_status qkv_nn_gru_forward(qkv_ctx *c, qkv_nn_gru *m, qkv_tensor *x, qkv_tensor *h0,
                                      const int64_t *lengths, qkv_tensor **output,
                                      qkv_tensor **h_n);
QKV_API qkv_status qkv_nn_lstm_forward(qkv_ctx *c, qkv_nn_lstm *m, qkv_tensor *x, qkv_tensor *h0,
                                       qkv_tensor *c0, const int64_t *lengths, qkv_tensor **output,
                                       qkv_tensor **h_n, qkv_tensor **c_n);
/* The masks form of lengths: padding_mask BOOL (N,L), true = padding (as
 * key_padding_mask), each row right-padded (real steps, then padding only,
 * at least one real step); lengths (N, caller's memory) gets each row's
 * real steps, for the forwards above. Masks that are not right-padded are
 * an error naming the row. */
QKV_API qkv_status qkv_rnn_lengths_from_mask(const qkv_tensor *padding_mask, int64_t *lengths);

#ifdef __cplusplus
}
#endif
#endif
