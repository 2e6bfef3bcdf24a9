/* qkv/nn.h: layers, as torch.nn has them (included by qkv.h). */
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

#ifdef __cplusplus
}
#endif
#endif
