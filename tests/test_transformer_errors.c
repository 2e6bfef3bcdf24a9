/* test_transformer_errors.c: bad input to every public function of
 * include/qkv/transformer.h: bad options to every _init (sizes, dropout,
 * activation, eps, layer counts, prefixes, NULLs), adding no parameter;
 * the square subsequent mask's shape and dtype; and to every forward
 * (NULLs, modules not initialised, dtypes, shapes, batch sizes, every
 * mask's shape and dtype, causal flags), each failing with its status and
 * message. */
#include <stdint.h>
#include "transformer_helpers.h"

/* ---- bad input ---------------------------------------------------------- */

static void test_bad_opts(void)
{
    qkv_params *p;
    qkv_params_new(&p);
    qkv_transformer_encoder_layer el;
    qkv_transformer_decoder_layer dl;
    qkv_transformer_encoder enc;
    qkv_transformer_decoder dec;
    qkv_transformer_decoder_only gpt;
    qkv_transformer tf;
    qkv_transformer_layer_opts o = qkv_transformer_layer_opts_default(8, 2), b;
    CHECK_ERR(qkv_transformer_encoder_layer_init(NULL, &o, p, "", &R), QKV_ERR_ARG, "transformer_encoder_layer_init: module is NULL");
    CHECK_ERR(qkv_transformer_encoder_layer_init(&el, NULL, p, "", &R), QKV_ERR_ARG, "transformer_encoder_layer_init: opts is NULL");
    CHECK_ERR(qkv_transformer_encoder_layer_init(&el, &o, NULL, "", &R), QKV_ERR_ARG, "params is NULL");
    CHECK_ERR(qkv_transformer_encoder_layer_init(&el, &o, p, "", NULL), QKV_ERR_ARG, "rng is NULL");
    b = o, b.d_model = 0;
    CHECK_ERR(qkv_transformer_encoder_layer_init(&el, &b, p, "", &R), QKV_ERR_ARG, "d_model 0 and nhead 2 must be positive");
    b = o, b.nhead = -1;
    CHECK_ERR(qkv_transformer_encoder_layer_init(&el, &b, p, "", &R), QKV_ERR_ARG, "must be positive");
    b = o, b.nhead = 3;
    CHECK_ERR(qkv_transformer_encoder_layer_init(&el, &b, p, "", &R), QKV_ERR_ARG, "transformer_encoder_layer_init: d_model 8 is not divisible by nhead 3");
    b = o, b.dim_feedforward = 0;
    CHECK_ERR(qkv_transformer_encoder_layer_init(&el, &b, p, "", &R), QKV_ERR_ARG, "dim_feedforward 0 must be positive");
    b = o, b.dropout = 1.5f;
    CHECK_ERR(qkv_transformer_encoder_layer_init(&el, &b, p, "", &R), QKV_ERR_ARG, "dropout 1.5 outside [0,1]");
    b = o, b.dropout = NAN;
    CHECK_ERR(qkv_transformer_encoder_layer_init(&el, &b, p, "", &R), QKV_ERR_ARG, "outside [0,1]");
    b = o, b.activation = (qkv_activation)7;
    CHECK_ERR(qkv_transformer_encoder_layer_init(&el, &b, p, "", &R), QKV_ERR_ARG, "activation 7 is not a qkv_activation value");
    b = o, b.layer_norm_eps = 0;
    CHECK_ERR(qkv_transformer_encoder_layer_init(&el, &b, p, "", &R), QKV_ERR_ARG, "layer_norm_eps 0 must be positive and finite");
    b = o, b.layer_norm_eps = INFINITY;
    CHECK_ERR(qkv_transformer_encoder_layer_init(&el, &b, p, "", &R), QKV_ERR_ARG, "layer_norm_eps inf");
    CHECK(qkv_params_count(p) == 0, "bad options add no parameter (%d)", qkv_params_count(p));
    char longp[400];
    memset(longp, 'x', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    CHECK_ERR(qkv_transformer_encoder_layer_init(&el, &o, p, longp, &R), QKV_ERR_ARG,
              "transformer_encoder_layer_init: prefix of 399 characters is too long (at most 256)");
    CHECK_ERR(qkv_transformer_decoder_layer_init(&dl, &o, p, longp, &R), QKV_ERR_ARG, "transformer_decoder_layer_init: prefix of 399");
    CHECK_ERR(qkv_transformer_encoder_init(&enc, &o, 2, 1e-5f, p, longp, &R), QKV_ERR_ARG, "transformer_encoder_init: prefix of 399");
    CHECK_ERR(qkv_transformer_decoder_init(&dec, &o, 2, 1e-5f, p, longp, &R), QKV_ERR_ARG, "transformer_decoder_init: prefix of 399");
    CHECK_ERR(qkv_transformer_decoder_only_init(&gpt, &o, 2, 1e-5f, p, longp, &R), QKV_ERR_ARG, "transformer_decoder_only_init: prefix of 399");

    b = o, b.nhead = 5;
    CHECK_ERR(qkv_transformer_decoder_layer_init(NULL, &o, p, "", &R), QKV_ERR_ARG, "transformer_decoder_layer_init: module is NULL");
    CHECK_ERR(qkv_transformer_decoder_layer_init(&dl, NULL, p, "", &R), QKV_ERR_ARG, "transformer_decoder_layer_init: opts is NULL");
    CHECK_ERR(qkv_transformer_decoder_layer_init(&dl, &b, p, "", &R), QKV_ERR_ARG, "transformer_decoder_layer_init: d_model 8 is not divisible by nhead 5");
    CHECK_ERR(qkv_transformer_decoder_layer_init(&dl, &o, p, "", NULL), QKV_ERR_ARG, "transformer_decoder_layer_init: rng is NULL");

    CHECK_ERR(qkv_transformer_encoder_init(NULL, &o, 2, 1e-5f, p, "", &R), QKV_ERR_ARG, "transformer_encoder_init: module is NULL");
    CHECK_ERR(qkv_transformer_encoder_init(&enc, &o, -1, 1e-5f, p, "", &R), QKV_ERR_ARG, "transformer_encoder_init: num_layers -1 outside");
    CHECK_ERR(qkv_transformer_encoder_init(&enc, &o, 2, 1.0f, p, "", &R), QKV_ERR_ARG,
              "transformer_encoder_init: norm_eps 1 is not 0 (no final norm) or the final LayerNorm's eps");
    CHECK_ERR(qkv_transformer_decoder_init(&dec, &o, 2, NAN, p, "", &R), QKV_ERR_ARG,
              "transformer_decoder_init: norm_eps nan");
    CHECK_ERR(qkv_transformer_encoder_init(&enc, &b, 2, 1e-5f, p, "", &R), QKV_ERR_ARG, "transformer_encoder_init: d_model 8 is not divisible by nhead 5");
    CHECK_ERR(qkv_transformer_encoder_init(&enc, &o, 2, 1e-5f, NULL, "", &R), QKV_ERR_ARG, "transformer_encoder_init: params is NULL");
    CHECK_ERR(qkv_transformer_decoder_init(NULL, &o, 2, 1e-5f, p, "", &R), QKV_ERR_ARG, "transformer_decoder_init: module is NULL");
    CHECK_ERR(qkv_transformer_decoder_init(&dec, &o, -3, 1e-5f, p, "", &R), QKV_ERR_ARG, "transformer_decoder_init: num_layers -3 outside");
    CHECK_ERR(qkv_transformer_decoder_init(&dec, &o, 1, 1e-5f, p, "", NULL), QKV_ERR_ARG, "transformer_decoder_init: rng is NULL");
    CHECK_ERR(qkv_transformer_decoder_init(&dec, &b, 1, 1e-5f, p, "", &R), QKV_ERR_ARG, "transformer_decoder_init: d_model 8 is not divisible by nhead 5");
    CHECK_ERR(qkv_transformer_decoder_init(&dec, NULL, 1, 1e-5f, p, "", &R), QKV_ERR_ARG, "transformer_decoder_init: opts is NULL");
    CHECK_ERR(qkv_transformer_encoder_init(&enc, &o, 1, 1e-5f, p, "", NULL), QKV_ERR_ARG, "transformer_encoder_init: rng is NULL");
    CHECK_ERR(qkv_transformer_decoder_only_init(&gpt, &o, 1, 1e-5f, NULL, "", &R), QKV_ERR_ARG, "transformer_decoder_only_init: params is NULL");
    CHECK_ERR(qkv_transformer_decoder_only_init(NULL, &o, 2, 1e-5f, p, "", &R), QKV_ERR_ARG, "transformer_decoder_only_init: module is NULL");
    CHECK_ERR(qkv_transformer_decoder_only_init(&gpt, &b, 2, 1e-5f, p, "", &R), QKV_ERR_ARG, "transformer_decoder_only_init: d_model 8 is not divisible by nhead 5");
    CHECK_ERR(qkv_transformer_decoder_only_init(&gpt, &o, -1, 1e-5f, p, "", &R), QKV_ERR_ARG, "transformer_decoder_only_init: num_layers -1");

    qkv_transformer_opts t = qkv_transformer_opts_default(), tb;
    t.layer.d_model = 8, t.layer.nhead = 2, t.layer.dim_feedforward = 4;
    tb = t, tb.layer.nhead = 3;
    CHECK_ERR(qkv_transformer_init(NULL, &t, p, "", &R), QKV_ERR_ARG, "transformer_init: module is NULL");
    CHECK_ERR(qkv_transformer_init(&tf, NULL, p, "", &R), QKV_ERR_ARG, "transformer_init: opts is NULL");
    CHECK_ERR(qkv_transformer_init(&tf, &tb, p, "", &R), QKV_ERR_ARG, "transformer_init: d_model 8 is not divisible by nhead 3");
    tb = t, tb.num_decoder_layers = -1;
    CHECK_ERR(qkv_transformer_init(&tf, &tb, p, "", &R), QKV_ERR_ARG, "transformer_init: num_encoder_layers 6 and num_decoder_layers -1 must not be negative");
    tb = t, tb.layer.layer_norm_eps = -1;
    CHECK_ERR(qkv_transformer_init(&tf, &tb, p, "", &R), QKV_ERR_ARG, "transformer_init: layer_norm_eps -1");
    CHECK_ERR(qkv_transformer_init(&tf, &t, p, "", NULL), QKV_ERR_ARG, "transformer_init: rng is NULL");
    CHECK_ERR(qkv_transformer_init(&tf, &t, p, longp, &R), QKV_ERR_ARG, "transformer_init: prefix of 399");
    CHECK(qkv_params_count(p) == 0, "bad options add no parameter (%d)", qkv_params_count(p));

    CHECK_ERR(qkv_transformer_square_subsequent_mask(NULL), QKV_ERR_ARG, "transformer_square_subsequent_mask: mask is NULL");
    CHECK_ERR(qkv_transformer_square_subsequent_mask(new_f32(2, (int64_t[]){3, 4}, 0)), QKV_ERR_SHAPE,
              "transformer_square_subsequent_mask: mask (3,4) is not square (sz,sz)");
    CHECK_ERR(qkv_transformer_square_subsequent_mask(new_f32(3, (int64_t[]){1, 3, 3}, 0)), QKV_ERR_SHAPE, "mask (1,3,3) is not square");
    qkv_tensor *i64 = NULL;
    qkv_tensor_new(A, QKV_I64, 2, (int64_t[]){3, 3}, &i64);
    CHECK_ERR(qkv_transformer_square_subsequent_mask(i64), QKV_ERR_DTYPE, "mask must be F32 or BOOL");

    /* _free of NULL or of a zeroed module is harmless. */
    qkv_transformer_encoder_free(NULL);
    qkv_transformer_decoder_free(NULL);
    qkv_transformer_free(NULL);
    qkv_transformer_decoder_only_free(NULL);
    qkv_params_free(p);
}

static void test_bad_forward(void)
{
    qkv_params *p;
    qkv_params_new(&p);
    qkv_transformer_layer_opts o = qkv_transformer_layer_opts_default(8, 2);
    o.dim_feedforward = 4;
    qkv_transformer_encoder_layer el, el0 = {0};
    qkv_transformer_decoder_layer dl, dl0 = {0};
    qkv_transformer_encoder enc, enc0 = {0};
    qkv_transformer_decoder dec, dec0 = {0};
    qkv_transformer_decoder_only gpt, gpt0 = {0};
    qkv_transformer tf, tf0 = {0};
    CHECK_OK(qkv_transformer_encoder_layer_init(&el, &o, p, "el.", &R));
    CHECK_OK(qkv_transformer_decoder_layer_init(&dl, &o, p, "dl.", &R));
    CHECK_OK(qkv_transformer_encoder_init(&enc, &o, 1, 0, p, "enc.", &R));
    CHECK_OK(qkv_transformer_decoder_init(&dec, &o, 1, 0, p, "dec.", &R));
    CHECK_OK(qkv_transformer_decoder_only_init(&gpt, &o, 1, 1e-5f, p, "gpt.", &R));
    qkv_transformer_opts to = qkv_transformer_opts_default();
    to.layer = qkv_transformer_layer_opts_default(8, 2);
    to.num_encoder_layers = 1, to.num_decoder_layers = 1, to.layer.dim_feedforward = 4;
    CHECK_OK(qkv_transformer_init(&tf, &to, p, "tf.", &R));
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_tensor *y;
    qkv_tensor *src = new_f32(3, (int64_t[]){5, 2, 8}, 1), *tgt = new_f32(3, (int64_t[]){4, 2, 8}, 1);
    qkv_tensor *src1 = new_f32(2, (int64_t[]){5, 8}, 1), *src3 = new_f32(3, (int64_t[]){5, 3, 8}, 1);
    qkv_tensor *wide = new_f32(3, (int64_t[]){5, 2, 7}, 1), *four = new_f32(4, (int64_t[]){5, 2, 1, 8}, 1);
    qkv_tensor *bsrc = new_bool(3, (int64_t[]){5, 2, 8});
    qkv_transformer_masks m = qkv_transformer_masks_default();

    /* Encoder layer. */
    CHECK_ERR(qkv_transformer_encoder_layer_forward(c, &el, src, NULL, NULL), QKV_ERR_ARG, "transformer_encoder_layer_forward: out is NULL");
    CHECK_ERR(qkv_transformer_encoder_layer_forward(NULL, &el, src, NULL, &y), QKV_ERR_ARG, "transformer_encoder_layer_forward: ctx is NULL");
    CHECK(y == NULL, "*out is NULL after a failure");
    CHECK_ERR(qkv_transformer_encoder_layer_forward(c, NULL, src, NULL, &y), QKV_ERR_ARG, "transformer_encoder_layer_forward: module is NULL");
    CHECK_ERR(qkv_transformer_encoder_layer_forward(c, &el, NULL, NULL, &y), QKV_ERR_ARG, "transformer_encoder_layer_forward: src is NULL");
    CHECK_ERR(qkv_transformer_encoder_layer_forward(c, &el0, src, NULL, &y), QKV_ERR_STATE, "transformer_encoder_layer_forward: module is not initialised");
    CHECK_ERR(qkv_module_forward(c, &el0.base, src, &y), QKV_ERR_STATE, "module_forward: module has no forward");
    CHECK_ERR(qkv_transformer_encoder_layer_forward(c, &el, bsrc, NULL, &y), QKV_ERR_DTYPE, "transformer_encoder_layer_forward: src is not F32");
    CHECK_ERR(qkv_transformer_encoder_layer_forward(c, &el, four, NULL, &y), QKV_ERR_SHAPE,
              "transformer_encoder_layer_forward: src (5,2,1,8) has 4 dims, expected 3 (L,N,E) or 2 (unbatched)");
    CHECK_ERR(qkv_transformer_encoder_layer_forward(c, &el, wide, NULL, &y), QKV_ERR_SHAPE,
              "transformer_encoder_layer_forward: src (5,2,7) last dim is not d_model 8");
    m = qkv_transformer_masks_default(), m.src_mask = new_f32(2, (int64_t[]){5, 4}, 0);
    CHECK_ERR(qkv_transformer_encoder_layer_forward(c, &el, src, &m, &y), QKV_ERR_SHAPE,
              "transformer_encoder_layer_forward: src_mask (5,4), expected (S,S) = (5,5) or (N*nhead,S,S) = (4,5,5)");
    m.src_mask = new_bool(3, (int64_t[]){2, 5, 5});
    CHECK_ERR(qkv_transformer_encoder_layer_forward(c, &el, src, &m, &y), QKV_ERR_SHAPE, "src_mask (2,5,5), expected");
    qkv_tensor *i64m = NULL;
    qkv_tensor_new(A, QKV_I64, 2, (int64_t[]){5, 5}, &i64m);
    m.src_mask = i64m;
    CHECK_ERR(qkv_transformer_encoder_layer_forward(c, &el, src, &m, &y), QKV_ERR_DTYPE, "transformer_encoder_layer_forward: src_mask must be BOOL or F32");
    m = qkv_transformer_masks_default(), m.src_key_padding_mask = new_bool(2, (int64_t[]){5, 2});
    CHECK_ERR(qkv_transformer_encoder_layer_forward(c, &el, src, &m, &y), QKV_ERR_SHAPE,
              "transformer_encoder_layer_forward: src_key_padding_mask (5,2), expected (N,S) = (2,5)");
    CHECK_ERR(qkv_transformer_encoder_layer_forward(c, &el, src1, &m, &y), QKV_ERR_SHAPE,
              "transformer_encoder_layer_forward: src_key_padding_mask (5,2), expected (S) = (5) for unbatched input");
    m = qkv_transformer_masks_default(), m.src_causal = (qkv_causal)9;
    CHECK_ERR(qkv_transformer_encoder_layer_forward(c, &el, src, &m, &y), QKV_ERR_ARG,
              "transformer_encoder_layer_forward: src_causal is 9, not a qkv_causal value");
    m = qkv_transformer_masks_default(), m.tgt_mask = new_bool(2, (int64_t[]){1, 1});
    CHECK_OK(qkv_transformer_encoder_layer_forward(c, &el, src, &m, &y)); /* an encoder reads src_* only */

    /* Decoder layer. */
    CHECK_ERR(qkv_transformer_decoder_layer_forward(c, &dl, tgt, src, NULL, NULL), QKV_ERR_ARG, "transformer_decoder_layer_forward: out is NULL");
    CHECK_ERR(qkv_transformer_decoder_layer_forward(c, &dl, NULL, src, NULL, &y), QKV_ERR_ARG, "transformer_decoder_layer_forward: tgt is NULL");
    CHECK_ERR(qkv_transformer_decoder_layer_forward(c, &dl, tgt, NULL, NULL, &y), QKV_ERR_ARG, "transformer_decoder_layer_forward: memory is NULL");
    CHECK_ERR(qkv_transformer_decoder_layer_forward(c, &dl0, tgt, src, NULL, &y), QKV_ERR_STATE, "transformer_decoder_layer_forward: module is not initialised");
    CHECK_ERR(qkv_transformer_decoder_layer_forward(NULL, &dl, tgt, src, NULL, &y), QKV_ERR_ARG, "transformer_decoder_layer_forward: ctx is NULL");
    CHECK_ERR(qkv_transformer_decoder_layer_forward(c, NULL, tgt, src, NULL, &y), QKV_ERR_ARG, "transformer_decoder_layer_forward: module is NULL");
    CHECK_ERR(qkv_transformer_decoder_layer_forward(c, &dl, tgt, wide, NULL, &y), QKV_ERR_SHAPE,
              "transformer_decoder_layer_forward: memory (5,2,7) last dim is not d_model 8");
    CHECK_ERR(qkv_transformer_decoder_layer_forward(c, &dl, tgt, src1, NULL, &y), QKV_ERR_SHAPE,
              "transformer_decoder_layer_forward: tgt (4,2,8) and memory (5,8) must both be batched (3 dims) or both unbatched (2 dims)");
    CHECK_ERR(qkv_transformer_decoder_layer_forward(c, &dl, tgt, src3, NULL, &y), QKV_ERR_SHAPE,
              "transformer_decoder_layer_forward: tgt (4,2,8) and memory (5,3,8) have different batch sizes 2 and 3");
    m = qkv_transformer_masks_default(), m.memory_mask = new_f32(2, (int64_t[]){5, 4}, 0);
    CHECK_ERR(qkv_transformer_decoder_layer_forward(c, &dl, tgt, src, &m, &y), QKV_ERR_SHAPE,
              "transformer_decoder_layer_forward: memory_mask (5,4), expected (T,S) = (4,5) or (N*nhead,T,S) = (4,4,5)");
    m = qkv_transformer_masks_default(), m.tgt_mask = new_f32(2, (int64_t[]){5, 5}, 0);
    CHECK_ERR(qkv_transformer_decoder_layer_forward(c, &dl, tgt, src, &m, &y), QKV_ERR_SHAPE,
              "transformer_decoder_layer_forward: tgt_mask (5,5), expected (T,T) = (4,4)");
    m = qkv_transformer_masks_default(), m.tgt_key_padding_mask = new_bool(2, (int64_t[]){2, 5});
    CHECK_ERR(qkv_transformer_decoder_layer_forward(c, &dl, tgt, src, &m, &y), QKV_ERR_SHAPE,
              "transformer_decoder_layer_forward: tgt_key_padding_mask (2,5), expected (N,T) = (2,4)");
    m = qkv_transformer_masks_default(), m.memory_key_padding_mask = new_bool(2, (int64_t[]){2, 4});
    CHECK_ERR(qkv_transformer_decoder_layer_forward(c, &dl, tgt, src, &m, &y), QKV_ERR_SHAPE,
              "transformer_decoder_layer_forward: memory_key_padding_mask (2,4), expected (N,S) = (2,5)");
    m = qkv_transformer_masks_default(), m.memory_causal = (qkv_causal)-1;
    CHECK_ERR(qkv_transformer_decoder_layer_forward(c, &dl, tgt, src, &m, &y), QKV_ERR_ARG,
              "transformer_decoder_layer_forward: memory_causal is -1, not a qkv_causal value");

    /* Stacks. */
    CHECK_ERR(qkv_transformer_encoder_forward(c, &enc0, src, NULL, &y), QKV_ERR_STATE, "transformer_encoder_forward: module is not initialised");
    CHECK_ERR(qkv_transformer_encoder_forward(c, NULL, src, NULL, &y), QKV_ERR_ARG, "transformer_encoder_forward: module is NULL");
    CHECK_ERR(qkv_transformer_encoder_forward(c, &enc, src, NULL, NULL), QKV_ERR_ARG, "transformer_encoder_forward: out is NULL");
    CHECK_ERR(qkv_transformer_encoder_forward(NULL, &enc, src, NULL, &y), QKV_ERR_ARG, "transformer_encoder_forward: ctx is NULL");
    CHECK_ERR(qkv_transformer_encoder_forward(c, &enc, NULL, NULL, &y), QKV_ERR_ARG, "transformer_encoder_forward: src is NULL");
    CHECK_ERR(qkv_transformer_encoder_forward(c, &enc, wide, NULL, &y), QKV_ERR_SHAPE, "transformer_encoder_forward: src (5,2,7) last dim is not d_model 8");
    m = qkv_transformer_masks_default(), m.src_key_padding_mask = new_bool(1, (int64_t[]){5});
    CHECK_ERR(qkv_transformer_encoder_forward(c, &enc, src, &m, &y), QKV_ERR_SHAPE,
              "transformer_encoder_forward: src_key_padding_mask (5,), expected (N,S) = (2,5)");
    CHECK_OK(qkv_transformer_encoder_forward(c, &enc, src1, &m, &y)); /* unbatched: (S) */
    CHECK_ERR(qkv_transformer_decoder_forward(c, &dec0, tgt, src, NULL, &y), QKV_ERR_STATE, "transformer_decoder_forward: module is not initialised");
    CHECK_ERR(qkv_transformer_decoder_forward(c, &dec, tgt, NULL, NULL, &y), QKV_ERR_ARG, "transformer_decoder_forward: memory is NULL");
    CHECK_ERR(qkv_transformer_decoder_forward(NULL, &dec, tgt, src, NULL, &y), QKV_ERR_ARG, "transformer_decoder_forward: ctx is NULL");
    CHECK_ERR(qkv_transformer_decoder_forward(c, &dec, tgt, src, NULL, NULL), QKV_ERR_ARG, "transformer_decoder_forward: out is NULL");
    CHECK_ERR(qkv_transformer_decoder_forward(c, NULL, tgt, src, NULL, &y), QKV_ERR_ARG, "transformer_decoder_forward: module is NULL");
    CHECK_ERR(qkv_transformer_decoder_forward(c, &dec, NULL, src, NULL, &y), QKV_ERR_ARG, "transformer_decoder_forward: tgt is NULL");
    CHECK_ERR(qkv_transformer_decoder_forward(c, &dec, tgt, src3, NULL, &y), QKV_ERR_SHAPE, "transformer_decoder_forward: tgt (4,2,8) and memory (5,3,8) have different batch sizes");
    m = qkv_transformer_masks_default(), m.memory_mask = new_bool(3, (int64_t[]){2, 4, 5});
    CHECK_ERR(qkv_transformer_decoder_forward(c, &dec, tgt, src, &m, &y), QKV_ERR_SHAPE,
              "transformer_decoder_forward: memory_mask (2,4,5), expected (T,S) = (4,5) or (N*nhead,T,S) = (4,4,5)");

    /* Decoder-only. */
    CHECK_ERR(qkv_transformer_decoder_only_forward(c, &gpt, NULL, NULL, &y), QKV_ERR_ARG, "transformer_decoder_only_forward: x is NULL");
    CHECK_ERR(qkv_transformer_decoder_only_forward(c, &gpt0, src, NULL, &y), QKV_ERR_STATE, "transformer_decoder_only_forward: module is not initialised");
    CHECK_ERR(qkv_transformer_decoder_only_forward(c, &gpt, src, new_bool(2, (int64_t[]){5, 2}), &y), QKV_ERR_SHAPE,
              "transformer_decoder_only_forward: key_padding_mask (5,2), expected (N,L) = (2,5)");
    CHECK_ERR(qkv_transformer_decoder_only_forward(c, &gpt, wide, NULL, &y), QKV_ERR_SHAPE,
              "transformer_decoder_only_forward: x (5,2,7) last dim is not d_model 8");
    CHECK_ERR(qkv_transformer_decoder_only_forward(NULL, &gpt, src, NULL, &y), QKV_ERR_ARG, "transformer_decoder_only_forward: ctx is NULL");
    CHECK_ERR(qkv_transformer_decoder_only_forward(c, &gpt, src, NULL, NULL), QKV_ERR_ARG, "transformer_decoder_only_forward: out is NULL");
    CHECK_ERR(qkv_transformer_decoder_only_forward(c, NULL, src, NULL, &y), QKV_ERR_ARG, "transformer_decoder_only_forward: module is NULL");

    /* Transformer. */
    CHECK_ERR(qkv_transformer_forward(c, &tf0, src, tgt, NULL, &y), QKV_ERR_STATE, "transformer_forward: module is not initialised");
    CHECK_ERR(qkv_transformer_forward(c, &tf, src, NULL, NULL, &y), QKV_ERR_ARG, "transformer_forward: tgt is NULL");
    CHECK_ERR(qkv_transformer_forward(c, &tf, NULL, tgt, NULL, &y), QKV_ERR_ARG, "transformer_forward: src is NULL");
    CHECK_ERR(qkv_transformer_forward(NULL, &tf, src, tgt, NULL, &y), QKV_ERR_ARG, "transformer_forward: ctx is NULL");
    CHECK_ERR(qkv_transformer_forward(c, NULL, src, tgt, NULL, &y), QKV_ERR_ARG, "transformer_forward: module is NULL");
    CHECK_ERR(qkv_transformer_forward(c, &tf, bsrc, tgt, NULL, &y), QKV_ERR_DTYPE, "transformer_forward: src is not F32");
    CHECK_ERR(qkv_transformer_forward(c, &tf, src, tgt, NULL, NULL), QKV_ERR_ARG, "transformer_forward: out is NULL");
    CHECK_ERR(qkv_transformer_forward(c, &tf, src3, tgt, NULL, &y), QKV_ERR_SHAPE,
              "transformer_forward: src (5,3,8) and tgt (4,2,8) have different batch sizes 3 and 2");
    CHECK_ERR(qkv_transformer_forward(c, &tf, src, new_f32(2, (int64_t[]){4, 8}, 1), NULL, &y), QKV_ERR_SHAPE,
              "transformer_forward: src (5,2,8) and tgt (4,8) must both be batched");
    CHECK_ERR(qkv_transformer_forward(c, &tf, src, new_f32(3, (int64_t[]){4, 2, 6}, 1), NULL, &y), QKV_ERR_SHAPE,
              "transformer_forward: tgt (4,2,6) last dim is not d_model 8");
    m = qkv_transformer_masks_default(), m.memory_mask = new_f32(2, (int64_t[]){5, 4}, 0);
    CHECK_ERR(qkv_transformer_forward(c, &tf, src, tgt, &m, &y), QKV_ERR_SHAPE,
              "transformer_forward: memory_mask (5,4), expected (T,S) = (4,5)");
    m = qkv_transformer_masks_default(), m.src_mask = new_f32(2, (int64_t[]){4, 4}, 0);
    CHECK_ERR(qkv_transformer_forward(c, &tf, src, tgt, &m, &y), QKV_ERR_SHAPE,
              "transformer_forward: src_mask (4,4), expected (S,S) = (5,5)");
    m = qkv_transformer_masks_default(), m.tgt_causal = (qkv_causal)3;
    CHECK_ERR(qkv_transformer_forward(c, &tf, src, tgt, &m, &y), QKV_ERR_ARG, "transformer_forward: tgt_causal is 3");
    m = qkv_transformer_masks_default(), m.memory_key_padding_mask = new_f32(2, (int64_t[]){2, 4}, 0);
    CHECK_ERR(qkv_transformer_forward(c, &tf, src, tgt, &m, &y), QKV_ERR_SHAPE,
              "transformer_forward: memory_key_padding_mask (2,4), expected (N,S) = (2,5)");
    CHECK_OK(qkv_transformer_forward(c, &tf, src, tgt, NULL, &y));
    CHECK(y && y->ndim == 3 && y->shape[0] == 4 && y->shape[1] == 2 && y->shape[2] == 8, "out is like tgt");

    qkv_ctx_free(c);
    qkv_transformer_encoder_free(&enc);
    qkv_transformer_decoder_free(&dec);
    qkv_transformer_decoder_only_free(&gpt);
    qkv_transformer_free(&tf);
    qkv_params_free(p);
}

int main(void)
{
    tf_setup();
    test_bad_opts();
    test_bad_forward();
    return tf_finish("test_transformer_errors");
}
