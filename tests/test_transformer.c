/* test_transformer.c: qkv's transformers (include/qkv/transformer.h)
 * against PyTorch.
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
 * If the oracle fails to run, the test fails. Names, initialisation,
 * masks, modules, dropout and finite differences:
 * test_transformer_modules.c; bad input: test_transformer_errors.c. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <unistd.h>
#include "oracle.h"
#include "transformer_helpers.h"

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
    qkv_optim_opts oo = qkv_optim_adam_opts_default();
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

int main(void)
{
    tf_setup();
    test_parity();
    test_trained_model_loads_in_pytorch();
    return tf_finish("test_transformer");
}
