/* test_layers_errors.c: bad input to the layers of include/qkv/nn.h: every
 * functional op (activations, add, cat, layer_norm, embedding, dropout,
 * conv1d) and every module's _init and forward (Linear, Conv1d, LayerNorm,
 * Embedding, the parameterless ones, Sequential) with NULLs, wrong dtypes,
 * shapes and options, each failing with its status and message; the
 * activation enum's names round-trip. */
#include "layers_helpers.h"

/* ---- bad inputs --------------------------------------------------------------- */

static void test_bad_ops(qkv_arena *a)
{
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_tensor *y = NULL, *x, *xb, *xi, *x4, *x0, *x35, *t3, *t24;
    int64_t s3[3] = {2, 3, 4}, s4[4] = {1, 2, 3, 4}, s35[2] = {3, 5}, s24[3] = {2, 4, 4};
    qkv_tensor_new(a, QKV_F32, 3, s3, &x);
    qkv_tensor_new(a, QKV_BOOL, 3, s3, &xb);
    qkv_tensor_new(a, QKV_I64, 3, s3, &xi);
    qkv_tensor_new(a, QKV_F32, 4, s4, &x4);
    qkv_tensor_new(a, QKV_F32, 0, NULL, &x0);
    qkv_tensor_new(a, QKV_F32, 2, s35, &x35);
    qkv_tensor_new(a, QKV_F32, 3, s3, &t3);
    qkv_tensor_new(a, QKV_F32, 3, s24, &t24);

    /* activations */
    CHECK_ERR(qkv_relu(c, x, NULL), QKV_ERR_ARG, "relu: y is NULL");
    CHECK_ERR(qkv_relu(NULL, x, &y), QKV_ERR_ARG, "relu: ctx is NULL");
    CHECK_ERR(qkv_relu(c, NULL, &y), QKV_ERR_ARG, "relu: x is NULL");
    CHECK_ERR(qkv_relu(c, xb, &y), QKV_ERR_DTYPE, "relu: x is BOOL, expected F32");
    CHECK_ERR(qkv_tanh(c, NULL, &y), QKV_ERR_ARG, "tanh: x is NULL");
    CHECK_ERR(qkv_tanh(c, xi, &y), QKV_ERR_DTYPE, "tanh: x is I64, expected F32");
    CHECK_ERR(qkv_tanh(NULL, x, &y), QKV_ERR_ARG, "tanh: ctx is NULL");
    CHECK_ERR(qkv_gelu(c, x, "none", NULL), QKV_ERR_ARG, "gelu: y is NULL");
    CHECK_ERR(qkv_gelu(c, NULL, "tanh", &y), QKV_ERR_ARG, "gelu: x is NULL");
    CHECK_ERR(qkv_gelu(c, xb, NULL, &y), QKV_ERR_DTYPE, "gelu: x is BOOL");
    CHECK_ERR(qkv_gelu(c, x, "erf", &y), QKV_ERR_ARG, "gelu: approximate 'erf' is not 'none' or 'tanh'");
    CHECK_ERR(qkv_activation_apply(c, (qkv_activation)9, x, &y), QKV_ERR_ARG,
              "activation: 9 is not a qkv_activation value");
    CHECK(y == NULL, "a failed activation leaves y NULL");
    {
        /* The one enum names every activation, and the names parse back. */
        for (int a = 0; a < 4; a++) {
            qkv_activation back = (qkv_activation)-1;
            const char *nm = qkv_activation_name((qkv_activation)a);
            CHECK(nm && qkv_activation_parse(nm, &back) == QKV_OK && back == (qkv_activation)a,
                  "activation %d round-trips through its name", a);
        }
        qkv_activation back;
        CHECK_ERR(qkv_activation_parse("swish", &back), QKV_ERR_ARG, "'swish' is not");
        CHECK(qkv_activation_name((qkv_activation)4) == NULL, "no name past the last kind");
        /* apply(kind) is the functional op of that kind, bit for bit. */
        qkv_tensor *y1, *y2;
        CHECK_OK(qkv_activation_apply(c, QKV_ACTIVATION_GELU_TANH, x, &y1));
        CHECK_OK(qkv_gelu(c, x, "tanh", &y2));
        CHECK(y1 && y2 && !memcmp(y1->data, y2->data, qkv_tensor_numel(x) * sizeof(float)),
              "apply(GELU_TANH) == gelu(tanh)");
        CHECK_OK(qkv_activation_apply(c, QKV_ACTIVATION_TANH, x, &y1));
        CHECK_OK(qkv_tanh(c, x, &y2));
        CHECK(y1 && y2 && !memcmp(y1->data, y2->data, qkv_tensor_numel(x) * sizeof(float)),
              "apply(TANH) == tanh");
    }
    CHECK(y == NULL, "gelu: *y not cleared on failure");
    CHECK_OK(qkv_relu(c, x0, &y)); /* 0-dim is a tensor too */

    /* add */
    CHECK_ERR(qkv_add(c, x, x, NULL), QKV_ERR_ARG, "add: y is NULL");
    CHECK_ERR(qkv_add(NULL, x, x, &y), QKV_ERR_ARG, "add: ctx is NULL");
    CHECK_ERR(qkv_add(c, NULL, x, &y), QKV_ERR_ARG, "add: a is NULL");
    CHECK_ERR(qkv_add(c, x, NULL, &y), QKV_ERR_ARG, "add: b is NULL");
    CHECK_ERR(qkv_add(c, x, xb, &y), QKV_ERR_DTYPE, "add: b is BOOL, expected F32");
    CHECK_ERR(qkv_add(c, x, x35, &y), QKV_ERR_SHAPE,
              "add: a (2,3,4) and b (3,5) differ, and neither is the other's trailing dims");
    CHECK_ERR(qkv_add(c, x4, t24, &y), QKV_ERR_SHAPE, "add: a (1,2,3,4) and b (2,4,4) differ");
    CHECK_ERR(qkv_add(c, x35, x4, &y), QKV_ERR_SHAPE, "add: a (3,5) and b (1,2,3,4) differ");
    CHECK_OK(qkv_add(c, x4, x, &y)); /* (1,2,3,4) + (2,3,4) broadcasts */
    CHECK(y && y->ndim == 4, "add: broadcast result shape");
    y = NULL;
    CHECK_ERR(qkv_add(c, x, x35, &y), QKV_ERR_SHAPE, "add: a (2,3,4) and b (3,5)");
    CHECK(y == NULL, "add: *y not cleared on failure");

    /* cat */
    CHECK_ERR(qkv_cat(c, x, x, 0, NULL), QKV_ERR_ARG, "cat: y is NULL");
    CHECK_ERR(qkv_cat(NULL, x, x, 0, &y), QKV_ERR_ARG, "cat: ctx is NULL");
    CHECK_ERR(qkv_cat(c, NULL, x, 0, &y), QKV_ERR_ARG, "cat: a is NULL");
    CHECK_ERR(qkv_cat(c, x, NULL, 0, &y), QKV_ERR_ARG, "cat: b is NULL");
    CHECK_ERR(qkv_cat(c, xi, x, 0, &y), QKV_ERR_DTYPE, "cat: a is I64, expected F32");
    CHECK_ERR(qkv_cat(c, x, x4, 0, &y), QKV_ERR_SHAPE,
              "cat: a (2,3,4) and b (1,2,3,4) must have the same number of dims");
    CHECK_ERR(qkv_cat(c, x0, x0, 0, &y), QKV_ERR_SHAPE, "cat: a () and b ()");
    CHECK_ERR(qkv_cat(c, x, x, 3, &y), QKV_ERR_ARG, "cat: dim 3 out of range for 3-dim tensors (expected -3..2)");
    CHECK_ERR(qkv_cat(c, x, x, -4, &y), QKV_ERR_ARG, "cat: dim -4 out of range");
    CHECK_ERR(qkv_cat(c, x, t24, 2, &y), QKV_ERR_SHAPE,
              "cat: a (2,3,4) and b (2,4,4) differ in dim 1 (only dim 2 may differ)");
    CHECK_OK(qkv_cat(c, x, t24, -2, &y));

    /* layer_norm */
    qkv_tensor *w4, *w5, *w2d, *wb;
    int64_t s1_4[1] = {4}, s1_5[1] = {5}, s2_4[2] = {1, 4};
    qkv_tensor_new(a, QKV_F32, 1, s1_4, &w4);
    qkv_tensor_new(a, QKV_F32, 1, s1_5, &w5);
    qkv_tensor_new(a, QKV_F32, 2, s2_4, &w2d);
    qkv_tensor_new(a, QKV_BOOL, 1, s1_4, &wb);
    CHECK_ERR(qkv_layer_norm(c, x, w4, w4, 1e-5f, NULL), QKV_ERR_ARG, "layer_norm: y is NULL");
    CHECK_ERR(qkv_layer_norm(NULL, x, w4, w4, 1e-5f, &y), QKV_ERR_ARG, "layer_norm: ctx is NULL");
    CHECK_ERR(qkv_layer_norm(c, NULL, w4, w4, 1e-5f, &y), QKV_ERR_ARG, "layer_norm: x is NULL");
    CHECK_ERR(qkv_layer_norm(c, xb, w4, w4, 1e-5f, &y), QKV_ERR_DTYPE, "layer_norm: x is BOOL");
    CHECK_ERR(qkv_layer_norm(c, x, wb, NULL, 1e-5f, &y), QKV_ERR_DTYPE, "layer_norm: weight is BOOL");
    CHECK_ERR(qkv_layer_norm(c, x0, NULL, NULL, 1e-5f, &y), QKV_ERR_SHAPE,
              "layer_norm: x () has no last dim to normalise over");
    CHECK_ERR(qkv_layer_norm(c, x, w5, w4, 1e-5f, &y), QKV_ERR_SHAPE,
              "layer_norm: weight (5,) does not match x (2,3,4), expected (4,)");
    CHECK_ERR(qkv_layer_norm(c, x, w4, w2d, 1e-5f, &y), QKV_ERR_SHAPE,
              "layer_norm: bias (1,4) does not match x (2,3,4), expected (4,)");
    CHECK_ERR(qkv_layer_norm(c, x, w4, w4, 0.0f, &y), QKV_ERR_ARG, "layer_norm: eps 0 must be positive and finite");
    CHECK_ERR(qkv_layer_norm(c, x, w4, w4, -1e-5f, &y), QKV_ERR_ARG, "layer_norm: eps -1e-05 must be positive");
    CHECK_ERR(qkv_layer_norm(c, x, w4, w4, NAN, &y), QKV_ERR_ARG, "layer_norm: eps nan");
    CHECK_ERR(qkv_layer_norm(c, x, w4, w4, INFINITY, &y), QKV_ERR_ARG, "layer_norm: eps inf");

    /* embedding */
    static int64_t ids_ok[6] = {0, 1, 2, 3, 4, 0}, ids_bad[6] = {0, 1, 2, 3, 10, 0}, ids_neg[6] = {0, -1};
    int64_t sw[2] = {5, 3}, si[2] = {2, 3}, si4[4] = {1, 1, 2, 3};
    qkv_tensor *emb_w, *ids, *idsb, *idsn, *ids4;
    qkv_tensor_new(a, QKV_F32, 2, sw, &emb_w);
    qkv_tensor_wrap_i64(a, ids_ok, 2, si, &ids);
    qkv_tensor_wrap_i64(a, ids_bad, 2, si, &idsb);
    qkv_tensor_wrap_i64(a, ids_neg, 2, si, &idsn);
    qkv_tensor_wrap_i64(a, ids_ok, 4, si4, &ids4);
    CHECK_ERR(qkv_embedding(c, emb_w, ids, -1, NULL), QKV_ERR_ARG, "embedding: y is NULL");
    CHECK_ERR(qkv_embedding(NULL, emb_w, ids, -1, &y), QKV_ERR_ARG, "embedding: ctx is NULL");
    CHECK_ERR(qkv_embedding(c, NULL, ids, -1, &y), QKV_ERR_ARG, "embedding: weight is NULL");
    CHECK_ERR(qkv_embedding(c, emb_w, NULL, -1, &y), QKV_ERR_ARG, "embedding: ids is NULL");
    CHECK_ERR(qkv_embedding(c, emb_w, x, -1, &y), QKV_ERR_DTYPE, "embedding: ids is F32, expected I64");
    CHECK_ERR(qkv_embedding(c, xi, ids, -1, &y), QKV_ERR_DTYPE, "embedding: weight is I64, expected F32");
    CHECK_ERR(qkv_embedding(c, x, ids, -1, &y), QKV_ERR_SHAPE,
              "embedding: weight (2,3,4) has 3 dims, expected 2 (num_embeddings,embedding_dim)");
    CHECK_ERR(qkv_embedding(c, emb_w, ids4, -1, &y), QKV_ERR_SHAPE, "embedding: ids (1,1,2,3) has 4 dims, at most 3");
    CHECK_ERR(qkv_embedding(c, emb_w, ids, 5, &y), QKV_ERR_ARG,
              "embedding: padding_idx 5 out of range for weight (5,3) (0..4, or -1 for none)");
    CHECK_ERR(qkv_embedding(c, emb_w, ids, -2, &y), QKV_ERR_ARG, "embedding: padding_idx -2 out of range");
    CHECK_ERR(qkv_embedding(c, emb_w, idsb, -1, &y), QKV_ERR_ARG,
              "embedding: ids[1][1] = 10 is out of range for weight (5,3) (0..4)");
    CHECK_ERR(qkv_embedding(c, emb_w, idsn, -1, &y), QKV_ERR_ARG, "embedding: ids[0][1] = -1 is out of range");
    CHECK(y == NULL, "embedding: *y not cleared on failure");

    /* dropout */
    CHECK_ERR(qkv_dropout(c, x, 0.5f, NULL), QKV_ERR_ARG, "dropout: y is NULL");
    CHECK_ERR(qkv_dropout(NULL, x, 0.5f, &y), QKV_ERR_ARG, "dropout: ctx is NULL");
    CHECK_ERR(qkv_dropout(c, NULL, 0.5f, &y), QKV_ERR_ARG, "dropout: x is NULL");
    CHECK_ERR(qkv_dropout(c, xb, 0.5f, &y), QKV_ERR_DTYPE, "dropout: x is BOOL, expected F32");
    CHECK_ERR(qkv_dropout(c, x, -0.1f, &y), QKV_ERR_ARG, "dropout: p -0.1 must be in [0,1]");
    CHECK_ERR(qkv_dropout(c, x, 1.5f, &y), QKV_ERR_ARG, "dropout: p 1.5 must be in [0,1]");
    CHECK_ERR(qkv_dropout(c, x, NAN, &y), QKV_ERR_ARG, "dropout: p nan must be in [0,1]");

    /* conv1d */
    qkv_tensor *cx, *cw, *cwb, *cb, *cb2, *cx2, *cw2d, *cwk0;
    int64_t sx[3] = {100, 1, 64}, sww[3] = {64, 32, 5}, swg[3] = {64, 1, 5}, sb[1] = {64}, sb2[1] = {63};
    int64_t sw2d[2] = {64, 5}, swk0[3] = {64, 1, 0}, sx2[2] = {1, 64};
    qkv_tensor_new(a, QKV_F32, 3, sx, &cx);
    qkv_tensor_new(a, QKV_F32, 3, sww, &cwb);
    qkv_tensor_new(a, QKV_F32, 3, swg, &cw);
    qkv_tensor_new(a, QKV_F32, 1, sb, &cb);
    qkv_tensor_new(a, QKV_F32, 1, sb2, &cb2);
    qkv_tensor_new(a, QKV_F32, 2, sw2d, &cw2d);
    qkv_tensor_new(a, QKV_F32, 3, swk0, &cwk0);
    qkv_tensor_new(a, QKV_F32, 2, sx2, &cx2);
    CHECK_ERR(qkv_conv1d(c, cx, cw, cb, 1, 2, 1, NULL), QKV_ERR_ARG, "conv1d: y is NULL");
    CHECK_ERR(qkv_conv1d(NULL, cx, cw, cb, 1, 2, 1, &y), QKV_ERR_ARG, "conv1d: ctx is NULL");
    CHECK_ERR(qkv_conv1d(c, NULL, cw, cb, 1, 2, 1, &y), QKV_ERR_ARG, "conv1d: x is NULL");
    CHECK_ERR(qkv_conv1d(c, cx, NULL, cb, 1, 2, 1, &y), QKV_ERR_ARG, "conv1d: weight is NULL");
    CHECK_ERR(qkv_conv1d(c, xb, cw, cb, 1, 2, 1, &y), QKV_ERR_DTYPE, "conv1d: x is BOOL, expected F32");
    CHECK_ERR(qkv_conv1d(c, cx, xi, cb, 1, 2, 1, &y), QKV_ERR_DTYPE, "conv1d: weight is I64");
    CHECK_ERR(qkv_conv1d(c, cx, cw, wb, 1, 2, 1, &y), QKV_ERR_DTYPE, "conv1d: bias is BOOL");
    CHECK_ERR(qkv_conv1d(c, x4, cw, cb, 1, 2, 1, &y), QKV_ERR_SHAPE,
              "conv1d: x (1,2,3,4) has 4 dims, expected (N,Cin,L) or (Cin,L)");
    CHECK_ERR(qkv_conv1d(c, cx, cw2d, cb, 1, 2, 1, &y), QKV_ERR_SHAPE,
              "conv1d: weight (64,5) has 2 dims, expected 3 (out_channels,in_channels,kernel_size)");
    CHECK_ERR(qkv_conv1d(c, cx, cwb, cb, 1, 2, 1, &y), QKV_ERR_SHAPE,
              "conv1d: weight (64,32,5) in_channels 32 does not match x (100,1,64) channels 1");
    CHECK_ERR(qkv_conv1d(c, cx, cwk0, NULL, 1, 0, 1, &y), QKV_ERR_SHAPE, "conv1d: weight (64,1,0) has kernel_size 0");
    CHECK_ERR(qkv_conv1d(c, cx, cw, cb2, 1, 2, 1, &y), QKV_ERR_SHAPE,
              "conv1d: bias (63,) does not match weight (64,1,5), expected (64,)");
    CHECK_ERR(qkv_conv1d(c, cx, cw, cb, 0, 2, 1, &y), QKV_ERR_ARG, "conv1d: stride 0 must be >= 1");
    CHECK_ERR(qkv_conv1d(c, cx, cw, cb, 1, -1, 1, &y), QKV_ERR_ARG, "conv1d: padding -1 must be >= 0");
    CHECK_ERR(qkv_conv1d(c, cx, cw, cb, 1, 2, 0, &y), QKV_ERR_ARG, "conv1d: dilation 0 must be >= 1");
    CHECK_ERR(qkv_conv1d(c, cx, cw, cb, 1, 0, 20, &y), QKV_ERR_SHAPE,
              "conv1d: x (100,1,64) padded length 64 (padding 0) is shorter than the kernel 5 with dilation 20 (81)");
    CHECK(y == NULL, "conv1d: *y not cleared on failure");
    CHECK_OK(qkv_conv1d(c, cx2, cw, cb, 1, 2, 1, &y)); /* unbatched (Cin,L) */
    CHECK(y && y->ndim == 2 && y->shape[0] == 64 && y->shape[1] == 64, "conv1d: unbatched output shape");
    qkv_ctx_free(c);
}

static void test_bad_modules(qkv_rng *r)
{
    qkv_params *p;
    CHECK_OK(qkv_params_new(&p));
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_tensor *y = NULL, *x;
    int64_t s3[3] = {2, 3, 4};
    qkv_tensor_new(qkv_ctx_arena(c), QKV_F32, 3, s3, &x);

    /* module_forward */
    qkv_module blank = {0};
    qkv_nn_relu relu;
    CHECK_OK(qkv_nn_relu_init(&relu));
    CHECK_ERR(qkv_module_forward(c, &relu.base, x, NULL), QKV_ERR_ARG, "module_forward: y is NULL");
    CHECK_ERR(qkv_module_forward(NULL, &relu.base, x, &y), QKV_ERR_ARG, "module_forward: ctx is NULL");
    CHECK_ERR(qkv_module_forward(c, NULL, x, &y), QKV_ERR_ARG, "module_forward: module is NULL");
    CHECK_ERR(qkv_module_forward(c, &blank, x, &y), QKV_ERR_STATE,
              "module_forward: module has no forward (was its _init called?)");
    CHECK_ERR(qkv_module_forward(c, &relu.base, NULL, &y), QKV_ERR_ARG, "relu: x is NULL");

    /* Linear */
    qkv_nn_linear lin;
    CHECK_ERR(qkv_nn_linear_init(NULL, 4, 3, 1, p, "", r), QKV_ERR_ARG, "nn_linear_init: module is NULL");
    CHECK_ERR(qkv_nn_linear_init(&lin, 4, 3, 1, NULL, "", r), QKV_ERR_ARG, "nn_linear_init: params is NULL");
    CHECK_ERR(qkv_nn_linear_init(&lin, 4, 3, 1, p, "", NULL), QKV_ERR_ARG, "nn_linear_init: rng is NULL");
    CHECK_ERR(qkv_nn_linear_init(&lin, 0, 3, 1, p, "", r), QKV_ERR_ARG,
              "nn_linear_init: in_features 0 and out_features 3 must be positive");
    CHECK_ERR(qkv_nn_linear_init(&lin, 4, -3, 1, p, "", r), QKV_ERR_ARG, "out_features -3 must be positive");
    CHECK(qkv_params_count(p) == 0, "nn_linear_init added parameters before failing its checks");
    CHECK_OK(qkv_nn_linear_init(&lin, 4, 3, 1, p, "fc.", r));
    CHECK_ERR(qkv_nn_linear_init(&lin, 4, 3, 1, p, "fc.", r), QKV_ERR_ARG, "parameter 'fc.weight' already exists");
    /* a failed _init leaves the module without a forward */
    CHECK_ERR(qkv_module_forward(c, &lin.base, x, &y), QKV_ERR_STATE, "module has no forward");
    CHECK_OK(qkv_nn_linear_init(&lin, 4, 3, 1, p, "fc2.", r));
    CHECK_OK(qkv_module_forward(c, &lin.base, x, &y));
    CHECK(y && y->ndim == 3 && y->shape[2] == 3 && !strcmp(lin.base.type, "Linear"), "Linear(4,3): y shape");

    /* Conv1d */
    qkv_nn_conv1d conv;
    qkv_conv1d_opts o = qkv_conv1d_opts_default(4, 8, 3);
    CHECK(o.stride == 1 && o.padding == 0 && o.dilation == 1 && o.bias == 1, "conv1d_opts_default");
    CHECK_ERR(qkv_nn_conv1d_init(NULL, &o, p, "", r), QKV_ERR_ARG, "nn_conv1d_init: module is NULL");
    CHECK_ERR(qkv_nn_conv1d_init(&conv, NULL, p, "", r), QKV_ERR_ARG, "nn_conv1d_init: opts is NULL");
    CHECK_ERR(qkv_nn_conv1d_init(&conv, &o, NULL, "", r), QKV_ERR_ARG, "nn_conv1d_init: params is NULL");
    CHECK_ERR(qkv_nn_conv1d_init(&conv, &o, p, "", NULL), QKV_ERR_ARG, "nn_conv1d_init: rng is NULL");
    o.kernel_size = 0;
    CHECK_ERR(qkv_nn_conv1d_init(&conv, &o, p, "", r), QKV_ERR_ARG,
              "nn_conv1d_init: in_channels 4, out_channels 8 and kernel_size 0 must be positive");
    o = qkv_conv1d_opts_default(4, 8, 3);
    o.padding = -2;
    CHECK_ERR(qkv_nn_conv1d_init(&conv, &o, p, "", r), QKV_ERR_ARG,
              "nn_conv1d_init: stride 1, padding -2, dilation 1: expected stride >= 1, padding >= 0, dilation >= 1");
    o.padding = 0;
    o.stride = 0;
    CHECK_ERR(qkv_nn_conv1d_init(&conv, &o, p, "", r), QKV_ERR_ARG, "stride 0, padding 0");
    o.stride = 1;
    o.dilation = 0;
    CHECK_ERR(qkv_nn_conv1d_init(&conv, &o, p, "", r), QKV_ERR_ARG, "dilation 0: expected");
    o.dilation = 1;
    o.bias = 0;
    CHECK_OK(qkv_nn_conv1d_init(&conv, &o, p, "conv.", r));
    CHECK(conv.bias == NULL && !qkv_params_find(p, "conv.bias"), "Conv1d(bias=False) has a bias");
    CHECK_ERR(qkv_module_forward(c, &conv.base, x, &y), QKV_ERR_SHAPE,
              "conv1d: weight (8,4,3) in_channels 4 does not match x (2,3,4) channels 3");

    /* LayerNorm */
    qkv_nn_layernorm ln;
    CHECK_ERR(qkv_nn_layernorm_init(NULL, 4, 1e-5f, 1, p, ""), QKV_ERR_ARG, "nn_layernorm_init: module is NULL");
    CHECK_ERR(qkv_nn_layernorm_init(&ln, 4, 1e-5f, 1, NULL, ""), QKV_ERR_ARG, "nn_layernorm_init: params is NULL");
    CHECK_ERR(qkv_nn_layernorm_init(&ln, 0, 1e-5f, 1, p, ""), QKV_ERR_ARG,
              "nn_layernorm_init: normalized_shape 0 must be positive");
    CHECK_ERR(qkv_nn_layernorm_init(&ln, 4, 0.0f, 1, p, ""), QKV_ERR_ARG,
              "nn_layernorm_init: eps 0 must be positive and finite");
    CHECK_OK(qkv_nn_layernorm_init(&ln, 5, 1e-5f, 1, p, "ln."));
    CHECK_ERR(qkv_module_forward(c, &ln.base, x, &y), QKV_ERR_SHAPE,
              "layer_norm: x (2,3,4) last dim does not match normalized_shape (5,)");

    /* Embedding */
    qkv_nn_embedding emb;
    CHECK_ERR(qkv_nn_embedding_init(NULL, 10, 4, -1, p, "", r), QKV_ERR_ARG, "nn_embedding_init: module is NULL");
    CHECK_ERR(qkv_nn_embedding_init(&emb, 10, 4, -1, NULL, "", r), QKV_ERR_ARG, "nn_embedding_init: params is NULL");
    CHECK_ERR(qkv_nn_embedding_init(&emb, 10, 4, -1, p, "", NULL), QKV_ERR_ARG, "nn_embedding_init: rng is NULL");
    CHECK_ERR(qkv_nn_embedding_init(&emb, 0, 4, -1, p, "", r), QKV_ERR_ARG,
              "nn_embedding_init: num_embeddings 0 and embedding_dim 4 must be positive");
    CHECK_ERR(qkv_nn_embedding_init(&emb, 10, 4, 10, p, "", r), QKV_ERR_ARG,
              "nn_embedding_init: padding_idx 10 out of range (0..9, or -1 for none)");
    CHECK_ERR(qkv_nn_embedding_init(&emb, 10, 4, -3, p, "", r), QKV_ERR_ARG, "padding_idx -3 out of range");
    CHECK_OK(qkv_nn_embedding_init(&emb, 10, 4, -1, p, "emb.", r));
    CHECK_ERR(qkv_module_forward(c, &emb.base, x, &y), QKV_ERR_DTYPE, "embedding: ids is F32, expected I64");

    /* parameterless */
    qkv_nn_gelu gelu;
    qkv_nn_dropout drop;
    CHECK_ERR(qkv_nn_relu_init(NULL), QKV_ERR_ARG, "nn_relu_init: module is NULL");
    CHECK_ERR(qkv_nn_tanh_init(NULL), QKV_ERR_ARG, "nn_tanh_init: module is NULL");
    CHECK_ERR(qkv_nn_gelu_init(NULL, "none"), QKV_ERR_ARG, "nn_gelu_init: module is NULL");
    CHECK_ERR(qkv_nn_gelu_init(&gelu, "Tanh"), QKV_ERR_ARG,
              "nn_gelu_init: approximate 'Tanh' is not 'none' or 'tanh'");
    CHECK_ERR(qkv_nn_activation_init(&gelu, (qkv_activation)-1), QKV_ERR_ARG,
              "nn_activation_init: kind -1 is not a qkv_activation value");
    CHECK_ERR(qkv_nn_dropout_init(NULL, 0.1f), QKV_ERR_ARG, "nn_dropout_init: module is NULL");
    CHECK_ERR(qkv_nn_dropout_init(&drop, 1.01f), QKV_ERR_ARG, "nn_dropout_init: p 1.01 must be in [0,1]");
    CHECK_ERR(qkv_nn_dropout_init(&drop, NAN), QKV_ERR_ARG, "nn_dropout_init: p nan must be in [0,1]");
    CHECK_OK(qkv_nn_gelu_init(&gelu, "tanh"));
    CHECK_OK(qkv_nn_dropout_init(&drop, 0.0f));
    CHECK(!strcmp(gelu.base.type, "GELU") && !strcmp(drop.base.type, "Dropout"), "GELU/Dropout type names");

    /* Sequential */
    qkv_sequential seq, raw;
    memset(&raw, 0, sizeof raw);
    CHECK_ERR(qkv_sequential_init(NULL), QKV_ERR_ARG, "sequential_init: s is NULL");
    CHECK_ERR(qkv_sequential_add(NULL, &relu.base), QKV_ERR_ARG, "sequential_add: s is NULL");
    CHECK_ERR(qkv_sequential_add(&raw, &relu.base), QKV_ERR_STATE,
              "sequential_add: s is not initialised (call qkv_sequential_init)");
    CHECK_OK(qkv_sequential_init(&seq));
    CHECK_ERR(qkv_sequential_add(&seq, NULL), QKV_ERR_ARG, "sequential_add: module is NULL");
    CHECK_ERR(qkv_sequential_add(&seq, &blank), QKV_ERR_ARG,
              "sequential_add: module has no forward (was its _init called?)");
    CHECK_ERR(qkv_sequential_add(&seq, &seq.base), QKV_ERR_ARG, "sequential_add: cannot add a Sequential to itself");
    /* empty: the identity; then relu, gelu, and a LayerNorm(5) that fails on (..,4) */
    CHECK_OK(qkv_module_forward(c, &seq.base, x, &y));
    CHECK(y == x, "empty Sequential is not the identity");
    for (int i = 0; i < 10; i++) CHECK_OK(qkv_sequential_add(&seq, i % 2 ? &gelu.base : &relu.base));
    CHECK(seq.n == 10 && seq.cap >= 10, "sequential_add: %d layers", seq.n);
    CHECK_OK(qkv_module_forward(c, &seq.base, x, &y));
    CHECK_OK(qkv_sequential_add(&seq, &ln.base));
    CHECK_ERR(qkv_module_forward(c, &seq.base, x, &y), QKV_ERR_SHAPE,
              "sequential: layer 10 (LayerNorm): layer_norm: x (2,3,4) last dim does not match normalized_shape (5,)");
    qkv_sequential_free(&seq);
    qkv_sequential_free(&seq); /* twice is harmless */
    qkv_sequential_free(NULL);
    CHECK(seq.n == 0 && seq.layers == NULL, "sequential_free left layers behind");
    qkv_ctx_free(c);
    qkv_params_free(p);
}

/* QKV_ACTIVATIONS is the one list: each row's value has the row's name
 * (and back) and the row's module class, and no value past the last row
 * has a name. */
static void test_activation_list(void)
{
    int n = 0;
#define ROW(NAME, name, module)                                                            \
    do {                                                                                   \
        qkv_activation k = QKV_ACTIVATION_##NAME, back = (qkv_activation)-1;               \
        qkv_nn_activation m;                                                               \
        const char *nm = qkv_activation_name(k);                                           \
        CHECK((int)k == n && nm && !strcmp(nm, name), #NAME " is value %d named %s", n, nm); \
        CHECK(qkv_activation_parse(name, &back) == QKV_OK && back == k, name " parses back"); \
        CHECK(qkv_nn_activation_init(&m, k) == QKV_OK && !strcmp(m.base.type, module),     \
              #NAME "'s module is " module);                                               \
        n++;                                                                               \
    } while (0);
    QKV_ACTIVATIONS(ROW)
#undef ROW
    CHECK(n == 4 && qkv_activation_name((qkv_activation)n) == NULL, "%d kinds, none past them", n);
    qkv_activation back;
    CHECK_ERR(qkv_activation_parse("swish", &back), QKV_ERR_ARG,
              "activation_parse: 'swish' is not relu, gelu, gelu_tanh or tanh");
}

int main(void)
{
    if (!layers_setup()) return 1;
    test_bad_ops(A);
    test_bad_modules(&R);
    test_activation_list();
    return layers_finish("test_layers_errors");
}
