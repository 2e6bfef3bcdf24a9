/* qkv/models.h: models built from the library's layers: the lecture's
 * toy networks (included by qkv.h). */
#include "qkv.h" /* first: qkv.h includes every area header in order */
#ifndef QKV_MODELS_H
#define QKV_MODELS_H
#ifdef __cplusplus
extern "C" {
#endif

/* The lecture's SelfAttentionLayer on (N,C,T) tensors: Q, K, V from
 * kernel-1 Conv1d layers without bias ("conv_Q.weight", ...), then
 * y = softmax(Q^T K) V^T transposed back to (N,out_dim,T). Single head; the
 * lecture leaves out 1/sqrt(key_dim), scaled = 1 puts it in. */
typedef struct {
    qkv_module base;
    qkv_nn_conv1d conv_Q, conv_K, conv_V;
    int64_t key_dim;
    int scaled;
} qkv_toy_attention;

QKV_API qkv_status qkv_toy_attention_init(qkv_toy_attention *m, int64_t in_dim, int64_t out_dim,
                                          int64_t key_dim, int scaled, qkv_params *p,
                                          const char *prefix, qkv_rng *rng);

/* The lecture's two networks, as nn.Sequential with its parameter names:
 * QKV_TOY_CONV: Conv1d(in,C,K) ReLU Conv1d(C,C,K) ReLU x3 ... Conv1d(C,1,K)
 *   (five convolutions, padding K/2: 62,337 parameters for in=1, C=64, K=5);
 * QKV_TOY_ATTENTION: the same with the middle convolution pair replaced by a
 *   SelfAttentionLayer(C,C,C) (54,081 parameters). */
typedef enum { QKV_TOY_CONV = 0, QKV_TOY_ATTENTION } qkv_toy_model;

typedef struct {
    qkv_sequential seq;
    qkv_nn_conv1d conv[5];
    qkv_nn_relu relu[4];
    qkv_toy_attention attn;
} qkv_toy_net;

QKV_API qkv_status qkv_toy_net_init(qkv_toy_net *net, qkv_toy_model model, int64_t in_channels,
                                    int64_t channels, int64_t kernel, int scaled, qkv_params *p,
                                    qkv_rng *rng);
QKV_API void qkv_toy_net_free(qkv_toy_net *net);

#ifdef __cplusplus
}
#endif
#endif
