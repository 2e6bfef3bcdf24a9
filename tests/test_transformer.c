/* test_transformer.c: qkv's transformers (include/qkv/transformer.h).
 *
 *  - PyTorch parity: tools/transformer_oracle.py writes random
 *    TransformerEncoderLayer, TransformerDecoderLayer, TransformerEncoder,
 *    TransformerDecoder, Transformer and decoder-only cases (every option,
 *    every mask); each is loaded here by state_dict name (strictly: every
 *    name both ways) and run with the fast and the reference kernels:
 *    outputs within 1e-5, gradients of every input and parameter within
 *    1e-4 (norm-wise relative, h_rel_err).
 *  - A Transformer trained here for a few Adam steps is saved under its
 *    state_dict names and loaded by the oracle into nn.Transformer
 *    (load_state_dict(strict=True)), which must give qkv's output.
 *  - Finite differences through one encoder and one decoder layer.
 *  - Names, clone semantics and initialisation; the square subsequent mask
 *    and the causal flag; modules; dropout; fully masked rows.
 *  - Bad input to every public function.
 * If the oracle fails to run, the test fails. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <unistd.h>
#include "gradcheck.h"
#include "oracle.h"

static qkv_arena *A;
static qkv_rng R;

/* ---- loading the oracle's files ------------------------------------------- */

/* ---- PyTorch parity ---------------------------------------------------- */

enum { K_ENC_LAYER, K_DEC_LAYER, K_ENC, K_DEC, K_TRANSFORMER, K_DEC_ONLY, K_COUNT };
static const char *kind_names[K_COUNT] = {"encoder_layer", "decoder_layer", "encoder",
                                          "decoder", "transformer", "decoder_only"};
static double worst_fwd[K_COUNT], worst_grad[K_COUNT];
static int kind_cases[K_COUNT], n_cases;

/* One case's module (only the one of its kind is set up). */
typedef struct {
    int kind;
    qkv_transformer_encoder_layer el;
    qkv_transformer_decoder_layer dl;
    qkv_transformer_encoder enc;
    qkv_transformer_decoder dec;
    qkv_transformer tf;
    qkv_transformer_decoder_only gpt;
    qkv_tensor *src, *tgt, *memory;
    qkv_transformer_masks masks;
} pcase;

static qkv_transformer_layer_opts file_layer_opts(qkv_safetensors *st)
{
    qkv_transformer_layer_opts o =
        qkv_transformer_layer_opts_default(h_meta_int(st, "d_model"), h_meta_int(st, "nhead"));
    o.dim_feedforward = h_meta_int(st, "dim_feedforward");
    o.dropout = (float)h_meta_float(st, "dropout");
    o.activation = (qkv_activation)h_meta_int(st, "activation");
    o.layer_norm_eps = (float)h_meta_float(st, "layer_norm_eps");
    o.batch_first = h_meta_int(st, "batch_first");
    o.norm_first = h_meta_int(st, "norm_first");
    o.bias = h_meta_int(st, "bias");
    return o;
}

static qkv_status pcase_init(pcase *k, qkv_safetensors *st, qkv_params *p)
{
    qkv_transformer_layer_opts o = file_layer_opts(st);
    int layers = h_meta_int(st, "num_layers");
    float norm_eps = h_meta_int(st, "norm") ? (float)h_meta_float(st, "norm_eps") : 0.0f;
    switch (k->kind) {
    case K_ENC_LAYER: return qkv_transformer_encoder_layer_init(&k->el, &o, p, "", &R);
    case K_DEC_LAYER: return qkv_transformer_decoder_layer_init(&k->dl, &o, p, "", &R);
    case K_ENC: return qkv_transformer_encoder_init(&k->enc, &o, layers, norm_eps, p, "", &R);
    case K_DEC: return qkv_transformer_decoder_init(&k->dec, &o, layers, norm_eps, p, "", &R);
    case K_DEC_ONLY: return qkv_transformer_decoder_only_init(&k->gpt, &o, layers, norm_eps, p, "", &R);
    default: break;
    }
    /* nn.Transformer takes the layers' options as they are. */
    qkv_transformer_opts to = {o, h_meta_int(st, "num_encoder_layers"),
                               h_meta_int(st, "num_decoder_layers")};
    return qkv_transformer_init(&k->tf, &to, p, "", &R);
}

static void pcase_free(pcase *k)
{
    qkv_transformer_encoder_free(&k->enc);
    qkv_transformer_decoder_free(&k->dec);
    qkv_transformer_free(&k->tf);
    qkv_transformer_decoder_only_free(&k->gpt);
}

static qkv_status pcase_forward(qkv_ctx *c, pcase *k, qkv_tensor **out)
{
    const qkv_transformer_masks *m = &k->masks;
    switch (k->kind) {
    case K_ENC_LAYER: return qkv_transformer_encoder_layer_forward(c, &k->el, k->src, m, out);
    case K_DEC_LAYER: return qkv_transformer_decoder_layer_forward(c, &k->dl, k->tgt, k->memory, m, out);
    case K_ENC: return qkv_transformer_encoder_forward(c, &k->enc, k->src, m, out);
    case K_DEC: return qkv_transformer_decoder_forward(c, &k->dec, k->tgt, k->memory, m, out);
    case K_TRANSFORMER: return qkv_transformer_forward(c, &k->tf, k->src, k->tgt, m, out);
    default: return qkv_transformer_decoder_only_forward(c, &k->gpt, k->src, m->src_key_padding_mask, out);
    }
}

/* Parameters by state_dict name (the names with a dot, not "grad."): every
 * one of the file must exist in qkv with its shape, and the other way round. */
static void load_params(qkv_safetensors *st, qkv_params *p, const char *file)
{
    int n = 0;
    for (int i = 0; i < qkv_safetensors_count(st); i++) {
        const char *name = qkv_safetensors_name(st, i);
        if (!strchr(name, '.') || !strncmp(name, "grad.", 5)) continue;
        qkv_tensor *t = qkv_params_find(p, name);
        CHECK(t != NULL, "%s: PyTorch parameter %s missing in qkv", file, name);
        if (!t) continue;
        n++;
        CHECK_OK(qkv_safetensors_read_f32(st, name, t->data, qkv_tensor_numel(t)));
    }
    CHECK(n == qkv_params_count(p), "%s: qkv has %d parameters, PyTorch %d", file,
          qkv_params_count(p), n);
}

static void run_pass(pcase *k, qkv_safetensors *st, qkv_params *p, qkv_arena *a, const char *file)
{
    qkv_params_zero_grad(p);
    qkv_tensor *in[3] = {k->src, k->tgt, k->memory};
    const char *in_names[3] = {"grad.src", "grad.tgt", "grad.memory"};
    for (int i = 0; i < 3; i++)
        if (in[i]) memset(in[i]->grad, 0, (size_t)qkv_tensor_numel(in[i]) * sizeof(float));
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_ctx_set_training(c, h_meta_int(st, "training"));
    qkv_tensor *out = NULL, *want = h_load(st, a, "out", 0), *dout = h_load(st, a, "dout", 0);
    qkv_status s = pcase_forward(c, k, &out);
    CHECK(s == QKV_OK, "%s: forward: %s", file, qkv_last_error());
    if (s == QKV_OK && want && dout) {
        char b1[64], b2[64];
        CHECK(out->ndim == want->ndim && !memcmp(out->shape, want->shape, sizeof(int64_t) * out->ndim),
              "%s: out %s, PyTorch %s", file, qkv_shape_str(out, b1, 64), qkv_shape_str(want, b2, 64));
        h_compare(file, "out", out->data, want, 1e-5, &worst_fwd[k->kind]);
        CHECK_OK(qkv_backward(c, out, dout->data));
        for (int i = 0; i < 3; i++)
            if (in[i]) h_compare(file, in_names[i], in[i]->grad, h_load(st, a, in_names[i], 0), 1e-4, &worst_grad[k->kind]);
        char gname[160];
        for (int i = 0; i < qkv_params_count(p); i++) {
            qkv_tensor *t = qkv_params_at(p, i);
            snprintf(gname, sizeof gname, "grad.%s", t->name);
            h_compare(file, gname, t->grad, h_load(st, a, gname, 0), 1e-4, &worst_grad[k->kind]);
        }
    }
    qkv_ctx_free(c);
}

static void run_case(const char *path, const char *file)
{
    qkv_safetensors *st = NULL;
    CHECK_OK(qkv_safetensors_open(path, &st));
    if (!st) return;
    pcase *k = calloc(1, sizeof *k);
    const char *kind = qkv_safetensors_meta(st, "kind");
    k->kind = -1;
    for (int i = 0; kind && i < K_COUNT; i++)
        if (!strcmp(kind, kind_names[i])) k->kind = i;
    CHECK(k->kind >= 0, "%s: unknown kind %s", file, kind ? kind : "(none)");
    qkv_params *p;
    qkv_params_new(&p);
    qkv_arena *a;
    qkv_arena_new(&a, 0);
    if (k->kind >= 0) {
        qkv_status s = pcase_init(k, st, p);
        CHECK(s == QKV_OK, "%s: init: %s", file, qkv_last_error());
        if (s == QKV_OK) {
            load_params(st, p, file);
            k->src = h_load(st, a, "src", 1);
            k->tgt = h_load(st, a, "tgt", 1);
            k->memory = h_load(st, a, "memory", 1);
            qkv_transformer_masks *m = &k->masks;
            m->src_mask = h_load(st, a, "src_mask", 0);
            m->tgt_mask = h_load(st, a, "tgt_mask", 0);
            m->memory_mask = h_load(st, a, "memory_mask", 0);
            m->src_key_padding_mask = h_load(st, a, "src_key_padding_mask", 0);
            m->tgt_key_padding_mask = h_load(st, a, "tgt_key_padding_mask", 0);
            m->memory_key_padding_mask = h_load(st, a, "memory_key_padding_mask", 0);
            m->src_causal = h_meta_int(st, "src_causal") ? QKV_CAUSAL_TOP_LEFT : QKV_CAUSAL_NONE;
            m->tgt_causal = h_meta_int(st, "tgt_causal") ? QKV_CAUSAL_TOP_LEFT : QKV_CAUSAL_NONE;
            for (int ref = 0; ref < 2; ref++) {
                qkv_set_reference(ref);
                run_pass(k, st, p, a, file);
            }
            qkv_set_reference(0);
            kind_cases[k->kind]++;
            n_cases++;
        }
    }
    pcase_free(k);
    free(k);
    qkv_arena_free(a);
    qkv_params_free(p);
    qkv_safetensors_close(st);
}

static void test_parity(void)
{
    int cases = 120;
    h_oracle_cases("transformer_oracle.py", cases, run_case);
    printf("Transformer parity with PyTorch 1.13: %d cases, fast and reference kernels\n", n_cases);
    for (int i = 0; i < K_COUNT; i++)
        printf("  %-14s %3d cases: worst forward %.3g, worst gradient %.3g\n", kind_names[i],
               kind_cases[i], worst_fwd[i], worst_grad[i]);
    CHECK(n_cases == cases, "ran %d of %d cases", n_cases, cases);
}

/* ---- a model trained in qkv, loaded into PyTorch -------------------------- */

static qkv_tensor *new_f32(int ndim, const int64_t *shape, float scale)
{
    qkv_tensor *t = NULL;
    qkv_tensor_new(A, QKV_F32, ndim, shape, &t);
    if (t && scale > 0) qkv_rng_fill_uniform(&R, t->data, qkv_tensor_numel(t), -scale, scale);
    return t;
}

static qkv_tensor *new_bool(int ndim, const int64_t *shape)
{
    qkv_tensor *t = NULL;
    qkv_tensor_new(A, QKV_BOOL, ndim, shape, &t);
    return t;
}

/* Eval-mode MSE of the model on (src, tgt) against target. */
static double eval_loss(qkv_transformer *m, qkv_tensor *src, qkv_tensor *tgt, qkv_tensor *target,
                        const qkv_transformer_masks *mk, qkv_tensor **out_copy)
{
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_ctx_set_grad(c, 0);
    qkv_tensor *out = NULL;
    double l = NAN;
    if (qkv_transformer_forward(c, m, src, tgt, mk, &out) == QKV_OK) {
        l = 0;
        int64_t n = qkv_tensor_numel(out);
        for (int64_t i = 0; i < n; i++) l += (double)(out->data[i] - target->data[i]) * (out->data[i] - target->data[i]);
        l /= (double)n;
        if (out_copy) memcpy((*out_copy)->data, out->data, (size_t)n * sizeof(float));
    }
    qkv_ctx_free(c);
    return l;
}

static void test_trained_model_loads_in_pytorch(void)
{
    qkv_transformer_opts o = qkv_transformer_opts_default();
    o.layer = qkv_transformer_layer_opts_default(8, 2);
    o.num_encoder_layers = 2;
    o.num_decoder_layers = 2;
    o.layer.dim_feedforward = 16;
    o.layer.activation = QKV_ACTIVATION_GELU;
    o.layer.batch_first = 1;
    qkv_params *p;
    qkv_params_new(&p);
    qkv_transformer m;
    CHECK_OK(qkv_transformer_init(&m, &o, p, "", &R));
    const int64_t N = 3, S = 6, T = 5, E = 8;
    qkv_tensor *src = new_f32(3, (int64_t[]){N, S, E}, 1), *tgt = new_f32(3, (int64_t[]){N, T, E}, 1);
    qkv_tensor *target = new_f32(3, (int64_t[]){N, T, E}, 1);
    /* Right padding (as PyTorch's nested-tensor fast path wants it). */
    qkv_tensor *kpm = new_bool(2, (int64_t[]){N, S});
    kpm->mask[1 * S + 5] = kpm->mask[1 * S + 4] = kpm->mask[2 * S + 5] = 1;
    qkv_tensor *tgt_mask = new_f32(2, (int64_t[]){T, T}, 0);
    CHECK_OK(qkv_transformer_square_subsequent_mask(tgt_mask));
    qkv_transformer_masks mk = qkv_transformer_masks_default();
    mk.src_key_padding_mask = kpm;
    mk.memory_key_padding_mask = kpm;
    mk.tgt_causal = QKV_CAUSAL_TOP_LEFT; /* PyTorch gets tgt_mask: the same mask */

    double before = eval_loss(&m, src, tgt, target, &mk, NULL);
    qkv_optim_opts oo = qkv_optim_adam_default();
    oo.lr = 1e-2;
    qkv_optim *opt = NULL;
    CHECK_OK(qkv_optim_new(&opt, p, &oo));
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_ctx_set_training(c, 1);
    qkv_ctx_set_seed(c, 5);
    for (int step = 0; step < 8 && opt; step++) {
        qkv_ctx_reset(c);
        qkv_tensor *out, *loss;
        CHECK_OK(qkv_transformer_forward(c, &m, src, tgt, &mk, &out));
        CHECK_OK(qkv_mse_loss(c, out, target, QKV_REDUCTION_MEAN, &loss));
        CHECK_OK(qkv_backward(c, loss, NULL));
        CHECK_OK(qkv_optim_step(opt));
        qkv_params_zero_grad(p);
    }
    qkv_ctx_free(c);
    qkv_optim_free(opt);
    qkv_tensor *out = new_f32(3, (int64_t[]){N, T, E}, 0);
    double after = eval_loss(&m, src, tgt, target, &mk, &out);
    CHECK(after < before, "8 Adam steps lower the loss: %g -> %g", before, after);

    char dir[] = "/tmp/qkv_transformer_trained_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp failed");
        qkv_transformer_free(&m);
        qkv_params_free(p);
        return;
    }
    char path[600];
    int n = qkv_params_count(p);
    const char **names = malloc((size_t)n * sizeof *names);
    const qkv_tensor **ts = malloc((size_t)n * sizeof *ts);
    for (int i = 0; i < n; i++) {
        ts[i] = qkv_params_at(p, i);
        names[i] = ts[i]->name;
    }
    char v[10][32];
    snprintf(v[0], 32, "%lld", (long long)o.layer.d_model);
    snprintf(v[1], 32, "%lld", (long long)o.layer.nhead);
    snprintf(v[2], 32, "%lld", (long long)o.num_encoder_layers);
    snprintf(v[3], 32, "%lld", (long long)o.num_decoder_layers);
    snprintf(v[4], 32, "%lld", (long long)o.layer.dim_feedforward);
    snprintf(v[5], 32, "%.9g", (double)o.layer.dropout);
    snprintf(v[6], 32, "%d", (int)o.layer.activation);
    snprintf(v[7], 32, "%.9g", (double)o.layer.layer_norm_eps);
    snprintf(v[8], 32, "%d", o.layer.batch_first);
    snprintf(v[9], 32, "%d", o.layer.norm_first);
    const char *keys[10] = {"d_model", "nhead", "num_encoder_layers", "num_decoder_layers",
                            "dim_feedforward", "dropout", "activation", "layer_norm_eps",
                            "batch_first", "norm_first"};
    const char *vals[10];
    for (int i = 0; i < 10; i++) vals[i] = v[i];
    snprintf(path, sizeof path, "%s/params.safetensors", dir);
    CHECK_OK(qkv_safetensors_save(path, n, names, ts, 10, keys, vals));
    const char *io_names[6] = {"src", "tgt", "tgt_mask", "src_key_padding_mask",
                               "memory_key_padding_mask", "out"};
    const qkv_tensor *io[6] = {src, tgt, tgt_mask, kpm, kpm, out};
    snprintf(path, sizeof path, "%s/io.safetensors", dir);
    CHECK_OK(qkv_safetensors_save(path, 6, io_names, io, 0, NULL, NULL));
    free(names);
    free(ts);

    char cmd[700];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/transformer_oracle.py --check-trained %s", dir);
    int rc = system(cmd);
    CHECK(rc == 0, "nn.Transformer with qkv's trained parameters disagrees with qkv or failed to "
          "load them (exit %d): %s", rc, cmd);
    snprintf(path, sizeof path, "%s/params.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/io.safetensors", dir);
    unlink(path);
    rmdir(dir);
    qkv_transformer_free(&m);
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

/* Random non-default values: ones and zeros would hide mistakes. */
static void randomize(qkv_params *p)
{
    for (int i = 0; i < qkv_params_count(p); i++) {
        qkv_tensor *t = qkv_params_at(p, i);
        qkv_rng_fill_uniform(&R, t->data, qkv_tensor_numel(t), -0.6f, 0.6f);
        if (strstr(t->name, "norm") && strstr(t->name, "weight"))
            for (int64_t j = 0; j < qkv_tensor_numel(t); j++) t->data[j] += 1.0f;
    }
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
    double e = h_gradcheck(gc_encoder, g, in, n, 1e-2f, 1e-2);
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
    e = h_gradcheck(gc_decoder, g, in, n, 1e-2f, 1e-2);
    CHECK(e < 1e-2, "TransformerDecoderLayer gradcheck (pre-norm, tanh-gelu, causal, float "
          "memory padding), every input and parameter: %g", e);
    qkv_params_free(p);
    free(g);
}

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
    qkv_arena_new(&A, 0);
    qkv_rng_seed(&R, 42);
    test_defaults_and_names();
    test_square_mask();
    test_masks_modules_dropout();
    test_gradcheck();
    test_bad_opts();
    test_bad_forward();
    test_parity();
    test_trained_model_loads_in_pytorch();
    qkv_arena_free(A);
    return h_finish("test_transformer");
}
