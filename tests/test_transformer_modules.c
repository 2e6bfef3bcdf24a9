/* test_transformer_modules.c: qkv's transformers (include/qkv/transformer.h)
 * as modules:
 *  - nn.Transformer's and the layers' defaults; parameter names in
 *    PyTorch's order, clone semantics and initialisation (xavier, the final
 *    norm's own eps);
 *  - the square subsequent mask and the causal flag; the layers and stacks
 *    as qkv_modules; dropout only in training and drawn from the seed;
 *    fully masked rows; unbatched input;
 *  - finite differences through one encoder and one decoder layer, every
 *    input and parameter.
 * PyTorch parity: test_transformer.c; bad input: test_transformer_errors.c. */
#include <stdint.h>
#include "gradcheck.h"
#include "transformer_helpers.h"

/* ---- names, initialisation, masks, modules ------------------------------- */

static int all_equal(const qkv_tensor *t, float v)
{
    for (int64_t i = 0; i < qkv_tensor_numel(t); i++)
        if (t->data[i] != v) return 0;
    return 1;
}

static int same_values(const qkv_tensor *a, const qkv_tensor *b)
{
    return a && b && qkv_tensor_numel(a) == qkv_tensor_numel(b) &&
           !memcmp(a->data, b->data, (size_t)qkv_tensor_numel(a) * sizeof(float));
}

static int within(const qkv_tensor *t, double bound)
{
    for (int64_t i = 0; i < qkv_tensor_numel(t); i++)
        if (fabs(t->data[i]) > bound) return 0;
    return 1;
}

static void test_defaults_and_names(void)
{
    qkv_transformer_opts d = qkv_transformer_opts_default();
    CHECK(d.layer.d_model == 512 && d.layer.nhead == 8 && d.num_encoder_layers == 6 &&
              d.num_decoder_layers == 6 && d.layer.dim_feedforward == 2048 &&
              d.layer.dropout == 0.1f && d.layer.activation == QKV_ACTIVATION_RELU &&
              d.layer.layer_norm_eps == 1e-5f && !d.layer.batch_first && !d.layer.norm_first &&
              d.layer.bias,
          "nn.Transformer's defaults");
    qkv_transformer_layer_opts l = qkv_transformer_layer_opts_default(16, 4);
    CHECK(l.d_model == 16 && l.nhead == 4 && l.dim_feedforward == 2048 && l.dropout == 0.1f &&
              l.activation == QKV_ACTIVATION_RELU && l.layer_norm_eps == 1e-5f && !l.batch_first &&
              !l.norm_first && l.bias,
          "TransformerEncoderLayer's defaults");

    const char *enc_names =
        "self_attn.in_proj_weight self_attn.in_proj_bias self_attn.out_proj.weight "
        "self_attn.out_proj.bias linear1.weight linear1.bias linear2.weight linear2.bias "
        "norm1.weight norm1.bias norm2.weight norm2.bias ";
    const char *dec_names =
        "self_attn.in_proj_weight self_attn.in_proj_bias self_attn.out_proj.weight "
        "self_attn.out_proj.bias multihead_attn.in_proj_weight multihead_attn.in_proj_bias "
        "multihead_attn.out_proj.weight multihead_attn.out_proj.bias linear1.weight linear1.bias "
        "linear2.weight linear2.bias norm1.weight norm1.bias norm2.weight norm2.bias "
        "norm3.weight norm3.bias ";
    const char *nobias_names = "self_attn.in_proj_weight self_attn.out_proj.weight linear1.weight "
                               "linear2.weight norm1.weight norm2.weight ";
    for (int i = 0; i < 3; i++) {
        qkv_params *p;
        qkv_params_new(&p);
        qkv_transformer_layer_opts o = qkv_transformer_layer_opts_default(8, 2);
        o.dim_feedforward = 12;
        o.bias = i != 2;
        qkv_transformer_encoder_layer el;
        qkv_transformer_decoder_layer dl;
        if (i == 1) CHECK_OK(qkv_transformer_decoder_layer_init(&dl, &o, p, "", &R));
        else CHECK_OK(qkv_transformer_encoder_layer_init(&el, &o, p, "", &R));
        if (i == 1) {
            /* The decoder layer has a module base like the encoder layer's:
             * its type, and a one-input forward that says what it needs. */
            CHECK(dl.base.type && !strcmp(dl.base.type, "TransformerDecoderLayer"),
                  "decoder layer's base.type");
            qkv_ctx *c;
            qkv_ctx_new(&c);
            qkv_tensor *x, *y = (qkv_tensor *)1;
            qkv_tensor_new(qkv_ctx_arena(c), QKV_F32, 2, (int64_t[]){3, 8}, &x);
            CHECK_ERR(qkv_module_forward(c, &dl.base, x, &y), QKV_ERR_STATE,
                      "TransformerDecoderLayer: a decoder's forward needs memory");
            CHECK(y == NULL, "no output from the failed module forward");
            qkv_ctx_free(c);
        }
        char got[1024] = "";
        for (int j = 0; j < qkv_params_count(p); j++) {
            strcat(got, qkv_params_at(p, j)->name);
            strcat(got, " ");
        }
        const char *want = i == 0 ? enc_names : i == 1 ? dec_names : nobias_names;
        CHECK(!strcmp(got, want), "parameter names in PyTorch's order: got '%s', expected '%s'", got, want);
        qkv_tensor *w1 = qkv_params_find(p, "linear1.weight");
        CHECK(w1 && w1->shape[0] == 12 && w1->shape[1] == 8 && within(w1, 1 / sqrt(8.0)),
              "linear1.weight (F,E) as nn.Linear");
        qkv_tensor *n1 = qkv_params_find(p, "norm1.weight");
        CHECK(n1 && all_equal(n1, 1.0f), "norm1.weight ones");
        qkv_params_free(p);
    }

    /* TransformerEncoder: layers are clones of one layer; the final norm. */
    qkv_params *p;
    qkv_params_new(&p);
    qkv_transformer_layer_opts o = qkv_transformer_layer_opts_default(8, 2);
    o.dim_feedforward = 12;
    qkv_transformer_encoder enc;
    CHECK_OK(qkv_transformer_encoder_init(&enc, &o, 3, 1e-3f, p, "enc.", &R));
    CHECK(qkv_params_count(p) == 3 * 12 + 2, "3 encoder layers and a norm: %d parameters",
          qkv_params_count(p));
    CHECK(enc.has_norm && enc.norm.eps == 1e-3f && enc.layers[0].norm1.eps == 1e-5f,
          "the final norm has its own eps (%g), the layers theirs (%g)", (double)enc.norm.eps,
          (double)enc.layers[0].norm1.eps);
    int clones = 1;
    for (int j = 0; j < 12; j++)
        for (int i = 1; i < 3; i++)
            clones &= same_values(qkv_params_at(p, j), qkv_params_at(p, 12 * i + j));
    CHECK(clones, "TransformerEncoder's layers start equal (_get_clones deep-copies one layer)");
    CHECK(qkv_params_find(p, "enc.layers.2.linear2.bias") && qkv_params_find(p, "enc.norm.weight") &&
              qkv_params_find(p, "enc.norm.bias"),
          "encoder names: <prefix>layers.<i>.<name>, <prefix>norm.*");
    qkv_transformer_encoder_free(&enc);
    qkv_transformer_encoder_free(&enc); /* twice is harmless */
    qkv_params_free(p);

    /* Transformer: names, _reset_parameters (xavier on every matrix). */
    qkv_params_new(&p);
    qkv_transformer_opts to = qkv_transformer_opts_default();
    to.layer = qkv_transformer_layer_opts_default(8, 2);
    to.num_encoder_layers = 2;
    to.num_decoder_layers = 3;
    to.layer.dim_feedforward = 12;
    qkv_transformer tf;
    CHECK_OK(qkv_transformer_init(&tf, &to, p, "", &R));
    CHECK(qkv_params_count(p) == 2 * 12 + 2 + 3 * 18 + 2, "Transformer parameter count %d",
          qkv_params_count(p));
    const char *some[] = {"encoder.layers.1.self_attn.in_proj_weight", "encoder.norm.weight",
                          "encoder.norm.bias", "decoder.layers.2.multihead_attn.out_proj.bias",
                          "decoder.layers.0.norm3.weight", "decoder.norm.weight", "decoder.norm.bias"};
    for (int i = 0; i < 7; i++) CHECK(qkv_params_find(p, some[i]), "Transformer has %s", some[i]);
    int xavier = 1, redrawn = 1;
    for (int i = 0; i < qkv_params_count(p); i++) {
        qkv_tensor *t = qkv_params_at(p, i);
        if (t->ndim < 2) continue;
        double bound = sqrt(6.0 / (double)(t->shape[0] + t->shape[1]));
        xavier &= within(t, bound * 1.000001) && !within(t, bound * 0.8);
    }
    CHECK(xavier, "every matrix of the Transformer is xavier_uniform_");
    redrawn = !same_values(qkv_params_find(p, "decoder.layers.0.linear1.weight"),
                           qkv_params_find(p, "decoder.layers.1.linear1.weight"));
    CHECK(redrawn, "_reset_parameters draws each layer's matrices anew");
    CHECK(same_values(qkv_params_find(p, "decoder.layers.0.linear1.bias"),
                      qkv_params_find(p, "decoder.layers.2.linear1.bias")) &&
              within(qkv_params_find(p, "decoder.layers.0.linear1.bias"), 1 / sqrt(8.0)) &&
              !all_equal(qkv_params_find(p, "decoder.layers.0.linear1.bias"), 0.0f),
          "biases keep Linear's init and the clones' values");
    CHECK(all_equal(qkv_params_find(p, "encoder.layers.1.self_attn.in_proj_bias"), 0.0f) &&
              all_equal(qkv_params_find(p, "decoder.layers.0.multihead_attn.out_proj.bias"), 0.0f) &&
              all_equal(qkv_params_find(p, "decoder.norm.weight"), 1.0f) &&
              all_equal(qkv_params_find(p, "encoder.norm.bias"), 0.0f),
          "attention biases zero, norms ones and zeros");
    qkv_transformer_free(&tf);
    qkv_params_free(p);
}

static void test_square_mask(void)
{
    qkv_tensor *f = new_f32(2, (int64_t[]){4, 4}, 1.0f), *b = new_bool(2, (int64_t[]){4, 4});
    CHECK_OK(qkv_transformer_square_subsequent_mask(f));
    CHECK_OK(qkv_transformer_square_subsequent_mask(b));
    int ok = 1;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            float v = f->data[i * 4 + j];
            ok &= j > i ? (isinf(v) && v < 0 && b->mask[i * 4 + j] == 1) : (v == 0.0f && b->mask[i * 4 + j] == 0);
        }
    CHECK(ok, "generate_square_subsequent_mask: -inf (true) above the diagonal, 0 (false) elsewhere");
}

/* After a forward that returned s into *out: copies the output into dst
 * and resets the ctx. (out is read after the call, hence a pointer.) */
static qkv_status fwd_copy(qkv_ctx *c, qkv_status s, qkv_tensor **out, float *dst)
{
    if (s == QKV_OK) memcpy(dst, (*out)->data, (size_t)qkv_tensor_numel(*out) * sizeof(float));
    qkv_ctx_reset(c);
    return s;
}

static void test_masks_modules_dropout(void)
{
    qkv_params *p;
    qkv_params_new(&p);
    qkv_transformer_layer_opts o = qkv_transformer_layer_opts_default(8, 2);
    o.dim_feedforward = 16;
    o.dropout = 0.25f;
    qkv_transformer_encoder_layer el;
    CHECK_OK(qkv_transformer_encoder_layer_init(&el, &o, p, "", &R));
    qkv_transformer_decoder_only gpt;
    CHECK_OK(qkv_transformer_decoder_only_init(&gpt, &o, 2, 1e-5f, p, "gpt.", &R));
    randomize(p);
    const int64_t L = 7, N = 2, E = 8, n = L * N * E;
    qkv_tensor *x = new_f32(3, (int64_t[]){L, N, E}, 1.0f);
    qkv_tensor *mask = new_f32(2, (int64_t[]){L, L}, 0);
    qkv_transformer_square_subsequent_mask(mask);
    float *a = calloc((size_t)n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_tensor *y = NULL;
    qkv_transformer_masks m1 = qkv_transformer_masks_default(), m2 = m1;
    m1.src_mask = mask;
    m2.src_causal = QKV_CAUSAL_TOP_LEFT;
    CHECK_OK(fwd_copy(c, qkv_transformer_encoder_layer_forward(c, &el, x, &m1, &y), &y, a));
    CHECK_OK(fwd_copy(c, qkv_transformer_encoder_layer_forward(c, &el, x, &m2, &y), &y, b));
    CHECK(h_rel_err(b, a, n) < 1e-6, "src_causal gives generate_square_subsequent_mask's result: %g",
          h_rel_err(b, a, n));
    CHECK_OK(fwd_copy(c, qkv_transformer_encoder_forward(c, &gpt.stack, x, &m1, &y), &y, a));
    CHECK_OK(fwd_copy(c, qkv_transformer_decoder_only_forward(c, &gpt, x, NULL, &y), &y, b));
    CHECK(h_rel_err(b, a, n) < 1e-6, "decoder-only = TransformerEncoder with the causal mask: %g",
          h_rel_err(b, a, n));
    CHECK_OK(fwd_copy(c, qkv_module_forward(c, &gpt.base, x, &y), &y, a));
    CHECK(h_rel_err(a, b, n) == 0, "decoder-only as a qkv_module");
    CHECK_OK(fwd_copy(c, qkv_transformer_encoder_layer_forward(c, &el, x, NULL, &y), &y, a));
    CHECK_OK(fwd_copy(c, qkv_module_forward(c, &el.base, x, &y), &y, b));
    CHECK(h_rel_err(b, a, n) == 0, "encoder layer as a qkv_module (no masks)");
    CHECK_OK(fwd_copy(c, qkv_module_forward(c, &gpt.stack.base, x, &y), &y, b));
    CHECK_OK(fwd_copy(c, qkv_transformer_encoder_forward(c, &gpt.stack, x, NULL, &y), &y, a));
    CHECK(h_rel_err(b, a, n) == 0, "encoder as a qkv_module (no masks)");

    /* Dropout: on only in training, the same seed the same draws. */
    float *d = calloc((size_t)n, sizeof *d);
    CHECK_OK(fwd_copy(c, qkv_transformer_encoder_layer_forward(c, &el, x, NULL, &y), &y, a));
    qkv_ctx_set_training(c, 1);
    qkv_ctx_set_seed(c, 9);
    CHECK_OK(fwd_copy(c, qkv_transformer_encoder_layer_forward(c, &el, x, NULL, &y), &y, b));
    qkv_ctx_set_seed(c, 9);
    CHECK_OK(fwd_copy(c, qkv_transformer_encoder_layer_forward(c, &el, x, NULL, &y), &y, d));
    CHECK(h_rel_err(b, a, n) > 1e-3, "training mode applies dropout");
    CHECK(h_rel_err(d, b, n) == 0, "the same seed draws the same dropout masks");
    qkv_ctx_set_training(c, 0);

    /* A fully padded sequence: qkv gives numbers where PyTorch 1.13 gives NaN. */
    qkv_tensor *kpm = new_bool(2, (int64_t[]){N, L});
    for (int64_t j = 0; j < L; j++) kpm->mask[1 * L + j] = 1;
    CHECK_OK(fwd_copy(c, qkv_transformer_decoder_only_forward(c, &gpt, x, kpm, &y), &y, a));
    int finite = 1;
    for (int64_t i = 0; i < n; i++) finite &= isfinite(a[i]);
    CHECK(finite, "fully masked rows give finite outputs");

    /* Unbatched (L,E) = batched with N = 1. */
    qkv_tensor *x1 = new_f32(2, (int64_t[]){L, E}, 1.0f), *x1b;
    qkv_tensor_view(A, x1, 3, (int64_t[]){L, 1, E}, &x1b);
    CHECK_OK(fwd_copy(c, qkv_transformer_decoder_only_forward(c, &gpt, x1, NULL, &y), &y, a));
    CHECK_OK(fwd_copy(c, qkv_transformer_decoder_only_forward(c, &gpt, x1b, NULL, &y), &y, b));
    CHECK(h_rel_err(a, b, L * E) < 1e-6, "unbatched input = batch of one");
    qkv_ctx_free(c);
    free(a);
    free(b);
    free(d);
    qkv_transformer_decoder_only_free(&gpt);
    qkv_params_free(p);
}

/* ---- finite differences ------------------------------------------------ */

typedef struct {
    qkv_transformer_encoder_layer el;
    qkv_transformer_decoder_layer dl;
    qkv_tensor *x, *memory;
    qkv_transformer_masks masks;
} gc_case;

static qkv_status gc_encoder(qkv_ctx *c, void *u, qkv_tensor **out)
{
    gc_case *g = u;
    return qkv_transformer_encoder_layer_forward(c, &g->el, g->x, &g->masks, out);
}

static qkv_status gc_decoder(qkv_ctx *c, void *u, qkv_tensor **out)
{
    gc_case *g = u;
    return qkv_transformer_decoder_layer_forward(c, &g->dl, g->x, g->memory, &g->masks, out);
}

/* Every parameter of p plus the given inputs. */
static int gc_inputs(qkv_params *p, qkv_tensor **in, qkv_tensor *a, qkv_tensor *b)
{
    int n = 0;
    in[n++] = a;
    if (b) in[n++] = b;
    for (int i = 0; i < qkv_params_count(p); i++) in[n++] = qkv_params_at(p, i);
    return n;
}

static void test_gradcheck(void)
{
    gc_case *g = calloc(1, sizeof *g);
    qkv_tensor *in[64];
    /* Encoder layer: post-norm, gelu, a bool mask and key padding, dropout in training. */
    qkv_params *p;
    qkv_params_new(&p);
    qkv_transformer_layer_opts o = qkv_transformer_layer_opts_default(6, 2);
    o.dim_feedforward = 8;
    o.activation = QKV_ACTIVATION_GELU;
    o.dropout = 0.2f;
    CHECK_OK(qkv_transformer_encoder_layer_init(&g->el, &o, p, "", &R));
    randomize(p);
    g->x = h_input(A, &R, 3, (int64_t[]){4, 2, 6}, 1.0f);
    qkv_tensor *am = new_bool(2, (int64_t[]){4, 4}), *kp = new_bool(2, (int64_t[]){2, 4});
    am->mask[0 * 4 + 2] = am->mask[3 * 4 + 1] = 1;
    kp->mask[1 * 4 + 3] = 1;
    g->masks = qkv_transformer_masks_default();
    g->masks.src_mask = am;
    g->masks.src_key_padding_mask = kp;
    int n = gc_inputs(p, in, g->x, NULL);
    h_training = 1;
    double e = h_gradcheck(gc_encoder, g, in, n, 2e-2f, 1e-2);
    CHECK(e < 1e-2, "TransformerEncoderLayer gradcheck (post-norm, gelu, masks, dropout), every "
          "input and parameter: %g", e);
    h_training = 0;
    qkv_params_free(p);

    /* Decoder layer: pre-norm, tanh-gelu, causal flag, float memory padding. */
    qkv_params_new(&p);
    o = qkv_transformer_layer_opts_default(4, 2);
    o.dim_feedforward = 5;
    o.activation = QKV_ACTIVATION_GELU_TANH;
    o.norm_first = 1;
    o.batch_first = 1;
    CHECK_OK(qkv_transformer_decoder_layer_init(&g->dl, &o, p, "", &R));
    randomize(p);
    g->x = h_input(A, &R, 3, (int64_t[]){2, 3, 4}, 1.0f);
    g->memory = h_input(A, &R, 3, (int64_t[]){2, 5, 4}, 1.0f);
    qkv_tensor *mk = new_f32(2, (int64_t[]){2, 5}, 1.0f);
    g->masks = qkv_transformer_masks_default();
    g->masks.tgt_causal = QKV_CAUSAL_TOP_LEFT;
    g->masks.memory_key_padding_mask = mk;
    n = gc_inputs(p, in, g->x, g->memory);
    e = h_gradcheck(gc_decoder, g, in, n, 2e-2f, 1e-2);
    CHECK(e < 1e-2, "TransformerDecoderLayer gradcheck (pre-norm, tanh-gelu, causal, float "
          "memory padding), every input and parameter: %g", e);
    qkv_params_free(p);
    free(g);
}

int main(void)
{
    tf_setup();
    /* The finite differences are Richardson-extrapolated at step 2e-2
     * (tests/gradcheck.h): over 13 seeds of R the worst errors were 0.0076
     * (encoder layer) and 0.0068 (decoder layer) against 1e-2, so the order
     * of the tests, which decides R's draws, no longer matters much. */
    test_defaults_and_names();
    test_square_mask();
    test_masks_modules_dropout();
    test_gradcheck();
    return tf_finish("test_transformer_modules");
}
