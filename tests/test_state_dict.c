/* Tests of the state_dict loader and saver (src/io/state_dict.c) on files
 * that PyTorch wrote (tools/state_dict_oracle.py, run with Debian's
 * /usr/bin/python3): MultiheadAttention and TransformerEncoder state_dicts
 * load by their PyTorch names and give PyTorch's outputs; a transposed
 * weight, a BOOL where a parameter belongs, missing and unexpected names
 * are refused (or, not strict, reported) and leave the store unchanged; a
 * prefix selects one layer of a whole model's file; a store saved by qkv
 * loads strictly into PyTorch and gives its outputs. Run from the repo root. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <unistd.h>

#include "harness.h"
#include "oracle.h"

static char dir[64];    /* the oracle's files */
static qkv_safetensors *io; /* io.safetensors: inputs and PyTorch's outputs */

static const char *path_of(const char *name)
{
    static char buf[4][256];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 256, "%s/%s", dir, name);
    return p;
}

/* Every parameter's bytes, in store order (malloc'd): before/after. */
static float *snapshot(qkv_params *p)
{
    float *s = malloc((size_t)(qkv_params_numel(p) + 1) * sizeof *s), *at = s;
    for (int i = 0; s && i < qkv_params_count(p); i++) {
        qkv_tensor *t = qkv_params_at(p, i);
        memcpy(at, t->data, (size_t)qkv_tensor_numel(t) * sizeof *at);
        at += qkv_tensor_numel(t);
    }
    return s;
}

static int unchanged(qkv_params *p, const float *before)
{
    float *now = snapshot(p);
    int same = now && before &&
               !memcmp(now, before, (size_t)qkv_params_numel(p) * sizeof *now);
    free(now);
    return same;
}

static qkv_transformer_layer_opts layer_opts(void)
{
    qkv_transformer_layer_opts o = qkv_transformer_layer_opts_default(16, 4);
    o.dim_feedforward = 32;
    o.dropout = 0;
    return o;
}

/* ---- MultiheadAttention: PyTorch's state_dict gives PyTorch's output --- */

/* Forward of m on io's <what>.query/key/value; relative error against
 * io's <want> (inf when the forward fails). */
static double mha_err(const qkv_mha *m, const char *what, const char *want)
{
    char n[3][64];
    const char *in[3] = {"query", "key", "value"};
    for (int i = 0; i < 3; i++) snprintf(n[i], sizeof n[i], "%s.%s", what, in[i]);
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_ctx_set_grad(c, 0);
    qkv_arena *a = qkv_ctx_arena(c);
    qkv_tensor *q = h_load(io, a, n[0], 0), *k = h_load(io, a, n[1], 0), *v = h_load(io, a, n[2], 0);
    qkv_tensor *w = h_load(io, a, want, 0), *out = NULL;
    qkv_mha_args args = qkv_mha_args_default();
    double e = INFINITY;
    if (q && k && v && w && qkv_mha_forward(c, m, q, k, v, &args, &out, NULL) == QKV_OK &&
        qkv_tensor_numel(out) == qkv_tensor_numel(w))
        e = h_rel_err(out->data, w->data, qkv_tensor_numel(w));
    qkv_ctx_free(c);
    return e;
}

static void test_mha(const char *file, const char *what, int64_t kdim, int64_t vdim,
                     const char *want)
{
    qkv_params *p;
    qkv_rng r;
    qkv_mha m;
    qkv_rng_seed(&r, 5);
    CHECK_OK(qkv_params_new(&p));
    qkv_mha_opts o = qkv_mha_opts_default(16, 4);
    o.kdim = kdim, o.vdim = vdim;
    CHECK_OK(qkv_mha_init(&m, &o, p, "", &r));
    /* Before the load qkv's own init is far from PyTorch's weights. */
    double before = mha_err(&m, what, want);
    CHECK(before > 1e-2, "%s: qkv's init already gives PyTorch's output (%g)", file, before);
    qkv_state_dict_report rep;
    CHECK_OK(qkv_params_load_safetensors(p, path_of(file), NULL, 1, &rep));
    CHECK(rep.n_loaded == qkv_params_count(p) && rep.n_missing == 0 && rep.n_unexpected == 0 &&
              rep.n_ignored == 0, "%s: loaded %d of %d, missing %d, unexpected %d", file,
          rep.n_loaded, qkv_params_count(p), rep.n_missing, rep.n_unexpected);
    qkv_state_dict_report_free(&rep);
    double e = mha_err(&m, what, want);
    CHECK(e <= 1e-5, "%s: output relative error %g after the load", file, e);
    qkv_params_free(p);
}

/* ---- TransformerEncoder: a prefix picks a layer ----------------------- */

/* Forward of one encoder layer (or the stack when layer is NULL) on enc.x;
 * relative error against io's want. */
static double enc_err(const qkv_transformer_encoder_layer *layer,
                      const qkv_transformer_encoder *stack, const char *want)
{
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_ctx_set_grad(c, 0);
    qkv_arena *a = qkv_ctx_arena(c);
    qkv_tensor *x = h_load(io, a, "enc.x", 0), *w = h_load(io, a, want, 0), *out = NULL;
    double e = INFINITY;
    qkv_status s = !x ? QKV_ERR_NOTFOUND
                   : layer ? qkv_transformer_encoder_layer_forward(c, layer, x, NULL, &out)
                           : qkv_transformer_encoder_forward(c, stack, x, NULL, &out);
    if (!s && w && qkv_tensor_numel(out) == qkv_tensor_numel(w))
        e = h_rel_err(out->data, w->data, qkv_tensor_numel(w));
    qkv_ctx_free(c);
    return e;
}

/* A fresh store holding one encoder layer under prefix "" (qkv's init). */
static qkv_params *new_layer(qkv_transformer_encoder_layer *m)
{
    qkv_params *p = NULL;
    qkv_rng r;
    qkv_rng_seed(&r, 9);
    qkv_transformer_layer_opts o = layer_opts();
    CHECK_OK(qkv_params_new(&p));
    CHECK_OK(qkv_transformer_encoder_layer_init(m, &o, p, "", &r));
    return p;
}

static void test_encoder(void)
{
    /* The whole stack, strictly, by PyTorch's names. */
    qkv_params *p;
    qkv_rng r;
    qkv_rng_seed(&r, 7);
    qkv_transformer_layer_opts o = layer_opts();
    qkv_transformer_encoder enc;
    CHECK_OK(qkv_params_new(&p));
    CHECK_OK(qkv_transformer_encoder_init(&enc, &o, 2, 0, p, "", &r));
    CHECK(enc_err(NULL, &enc, "enc.out") > 1e-2, "qkv's init already gives PyTorch's output");
    CHECK_OK(qkv_params_load_safetensors(p, path_of("enc.safetensors"), "", 1, NULL));
    double e = enc_err(NULL, &enc, "enc.out");
    CHECK(e <= 1e-5, "encoder stack: relative error %g after the load", e);

    /* qkv -> PyTorch: the store saved under "encoder." loads strictly into
     * a fresh nn.TransformerEncoder and gives PyTorch's output. */
    CHECK_OK(qkv_params_save_safetensors(p, path_of("qkv_enc.safetensors"), "encoder."));
    char cmd[512];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/state_dict_oracle.py --check-encoder %s", dir);
    CHECK(system(cmd) == 0, "%s failed (see its message above)", cmd);
    /* ... and back into qkv, bit for bit, through the same prefix. */
    float *saved = snapshot(p);
    qkv_params *p2;
    qkv_transformer_encoder enc2;
    CHECK_OK(qkv_params_new(&p2));
    CHECK_OK(qkv_transformer_encoder_init(&enc2, &o, 2, 0, p2, "", &r));
    qkv_state_dict_report rep;
    CHECK_OK(qkv_params_load_safetensors(p2, path_of("qkv_enc.safetensors"), "encoder.", 1, &rep));
    CHECK(rep.n_loaded == qkv_params_count(p2) && unchanged(p2, saved), "save/load round trip");
    qkv_state_dict_report_free(&rep);
    qkv_safetensors *st = NULL;
    CHECK_OK(qkv_safetensors_open(path_of("qkv_enc.safetensors"), &st));
    const char *fmt = qkv_safetensors_meta(st, "format");
    CHECK(fmt && !strcmp(fmt, "pt"), "saved metadata format '%s'", fmt ? fmt : "(none)");
    CHECK(qkv_safetensors_info(st, "encoder.layers.1.linear1.weight", NULL, NULL, NULL, NULL,
                               NULL) == QKV_OK, "saved key encoder.layers.1.linear1.weight");
    qkv_safetensors_close(st);
    free(saved);
    qkv_transformer_encoder_free(&enc2);
    qkv_params_free(p2);
    qkv_transformer_encoder_free(&enc);
    qkv_params_free(p);

    /* One layer out of the whole model's file: "layers.1." is stripped and
     * layers.0.* is ignored, not unexpected. */
    qkv_transformer_encoder_layer m;
    p = new_layer(&m);
    CHECK(enc_err(&m, NULL, "enc.out1") > 1e-2, "qkv's init already gives layer 1's output");
    CHECK_OK(qkv_params_load_safetensors(p, path_of("enc.safetensors"), "layers.1.", 1, &rep));
    CHECK(rep.n_loaded == 12 && rep.n_missing == 0 && rep.n_unexpected == 0 && rep.n_ignored == 12,
          "layers.1.: loaded %d missing %d unexpected %d ignored %d", rep.n_loaded, rep.n_missing,
          rep.n_unexpected, rep.n_ignored);
    qkv_state_dict_report_free(&rep);
    e = enc_err(&m, NULL, "enc.out1");
    CHECK(e <= 1e-5, "layers.1. alone: relative error %g", e);

    /* A prefix without its dot matches no parameter name: strict says so,
     * not strict loads nothing and reports every name. */
    float *before = snapshot(p);
    CHECK_ERR(qkv_params_load_safetensors(p, path_of("enc.safetensors"), "layers.1", 1, NULL),
              QKV_ERR_NOTFOUND, "prefix 'layers.1'");
    CHECK_OK(qkv_params_load_safetensors(p, path_of("enc.safetensors"), "layers.1", 0, &rep));
    CHECK(rep.n_loaded == 0 && rep.n_missing == 12 && rep.n_unexpected == 12 &&
              rep.unexpected[0][0] == '.', "prefix without its dot: loaded %d missing %d",
          rep.n_loaded, rep.n_missing);
    CHECK(unchanged(p, before), "a load that matched nothing changed the store");
    qkv_state_dict_report_free(&rep);
    free(before);
    qkv_params_free(p);
}

/* ---- refusals: nothing changes ---------------------------------------- */

/* Loading file under prefix into a fresh layer fails with want and a
 * message holding needle, strict or not, and the store is unchanged. */
static void expect_refused(const char *file, const char *prefix, qkv_status want,
                           const char *needle)
{
    qkv_transformer_encoder_layer m;
    qkv_params *p = new_layer(&m);
    float *before = snapshot(p);
    for (int strict = 0; strict < 2; strict++) {
        CHECK_ERR(qkv_params_load_safetensors(p, path_of(file), prefix, strict, NULL), want,
                  needle);
        CHECK(unchanged(p, before), "%s strict %d: a refused load changed the store", file, strict);
    }
    free(before);
    qkv_params_free(p);
}

static void test_transposed(void)
{
    expect_refused("transposed.safetensors", "layers.1.", QKV_ERR_SHAPE,
                   "size mismatch for 'layers.1.linear1.weight': (16,32) in the file, (32,16) in "
                   "the store");
    /* The other layer of that file is fine. */
    qkv_transformer_encoder_layer m;
    qkv_params *p = new_layer(&m);
    CHECK_OK(qkv_params_load_safetensors(p, path_of("transposed.safetensors"), "layers.0.", 1, NULL));
    qkv_params_free(p);
}

static void test_missing_unexpected(void)
{
    qkv_transformer_encoder_layer m;
    qkv_params *p = new_layer(&m);
    float *before = snapshot(p);
    qkv_state_dict_report rep;
    /* Strict: refused, naming the missing and the unexpected names. */
    CHECK_ERR(qkv_params_load_safetensors(p, path_of("keys.safetensors"), NULL, 1, &rep),
              QKV_ERR_NOTFOUND, "1 missing (in the store, not in the file): 'norm2.bias'");
    CHECK(strstr(qkv_last_error(), "2 unexpected (in the file, not in the store): "
                                   "'extra.num_batches_tracked', 'extra.running_mean'"),
          "message: %s", qkv_last_error());
    CHECK(rep.n_missing == 1 && rep.n_unexpected == 2 && rep.n_loaded == 0 &&
              !strcmp(rep.missing[0], "norm2.bias") &&
              !strcmp(rep.unexpected[0], "extra.num_batches_tracked") &&
              !strcmp(rep.unexpected[1], "extra.running_mean"),
          "strict report: missing %d unexpected %d", rep.n_missing, rep.n_unexpected);
    CHECK(unchanged(p, before), "a refused strict load changed the store");
    qkv_state_dict_report_free(&rep);
    CHECK(rep.missing == NULL && rep.n_missing == 0, "report_free clears the report");

    /* Not strict: the 11 others load, norm2.bias keeps its value, and the
     * same names are reported. */
    CHECK_OK(qkv_params_load_safetensors(p, path_of("keys.safetensors"), NULL, 0, &rep));
    CHECK(rep.n_loaded == 11 && rep.n_missing == 1 && rep.n_unexpected == 2 &&
              !strcmp(rep.missing[0], "norm2.bias"),
          "non-strict report: loaded %d missing %d unexpected %d", rep.n_loaded, rep.n_missing,
          rep.n_unexpected);
    qkv_state_dict_report_free(&rep);
    qkv_safetensors *st = NULL;
    qkv_arena *a = NULL;
    CHECK_OK(qkv_safetensors_open(path_of("keys.safetensors"), &st));
    CHECK_OK(qkv_arena_new(&a, 0));
    int64_t at = 0;
    for (int i = 0; st && i < qkv_params_count(p); i++) {
        qkv_tensor *t = qkv_params_at(p, i), *f = NULL;
        int64_t n = qkv_tensor_numel(t);
        if (!strcmp(t->name, "norm2.bias"))
            CHECK(!memcmp(t->data, before + at, (size_t)n * sizeof(float)), "norm2.bias changed");
        else if (qkv_safetensors_load_tensor(st, t->name, a, &f) == QKV_OK)
            CHECK(!memcmp(t->data, f->data, (size_t)n * sizeof(float)), "%s not the file's", t->name);
        else
            CHECK(0, "%s: %s", t->name, qkv_last_error());
        at += n;
    }
    qkv_arena_free(a);
    qkv_safetensors_close(st);
    free(before);
    qkv_params_free(p);
}

static void test_bool_param(void)
{
    expect_refused("bool.safetensors", NULL, QKV_ERR_DTYPE, "'norm1.weight' is BOOL in the file");
}

/* ---- arguments -------------------------------------------------------- */

static void test_args(void)
{
    qkv_params *p;
    qkv_tensor *t;
    qkv_safetensors *st = NULL;
    qkv_state_dict_report rep = {.n_missing = 5};
    int64_t shape[1] = {4};
    CHECK_OK(qkv_params_new(&p));
    CHECK_OK(qkv_params_add(p, "", "w", 1, shape, &t));
    CHECK_ERR(qkv_params_load_safetensors(NULL, path_of("mha.safetensors"), NULL, 1, &rep),
              QKV_ERR_ARG, "params");
    CHECK(rep.n_missing == 0 && rep.missing == NULL, "report not cleared on an argument error");
    CHECK_ERR(qkv_params_load_safetensors(p, NULL, NULL, 1, NULL), QKV_ERR_ARG, "path");
    CHECK_ERR(qkv_params_load_safetensors(p, path_of("none.safetensors"), NULL, 1, &rep),
              QKV_ERR_IO, "none.safetensors");
    CHECK_ERR(qkv_params_load_state_dict(p, NULL, NULL, 1, NULL), QKV_ERR_ARG, "st");
    CHECK_OK(qkv_safetensors_open(path_of("mha.safetensors"), &st));
    CHECK_ERR(qkv_params_load_state_dict(NULL, st, NULL, 1, NULL), QKV_ERR_ARG, "params");
    /* From an open file: not strict, "w" is missing and all 4 unexpected. */
    CHECK_OK(qkv_params_load_state_dict(p, st, NULL, 0, &rep));
    CHECK(rep.n_loaded == 0 && rep.n_missing == 1 && rep.n_unexpected == 4 &&
              !strcmp(rep.unexpected[0], "in_proj_bias"), "open-file report");
    qkv_state_dict_report_free(&rep);
    qkv_state_dict_report_free(NULL);
    qkv_safetensors_close(st);
    CHECK_ERR(qkv_params_save_safetensors(NULL, path_of("x.safetensors"), ""), QKV_ERR_ARG, "params");
    CHECK_ERR(qkv_params_save_safetensors(p, NULL, ""), QKV_ERR_ARG, "path");
    CHECK_ERR(qkv_params_save_safetensors(p, path_of("no/such/dir.safetensors"), ""), QKV_ERR_IO,
              "cannot create");
    qkv_params_free(p);
}

int main(void)
{
    strcpy(dir, "/tmp/qkv_sd_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char cmd[512];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/state_dict_oracle.py --out %s --seed 1", dir);
    int rc = system(cmd);
    CHECK(rc == 0, "the PyTorch oracle failed (exit %d): %s", rc, cmd);
    if (rc == 0 && qkv_safetensors_open(path_of("io.safetensors"), &io) == QKV_OK) {
        test_mha("mha.safetensors", "mha", 0, 0, "mha.out");
        test_mha("mha_kv.safetensors", "mha_kv", 8, 12, "mha_kv.out");
        test_mha("mha_f16.safetensors", "mha", 0, 0, "mha_f16.out");
        test_encoder();
        test_transposed();
        test_missing_unexpected();
        test_bool_param();
        test_args();
        qkv_safetensors_close(io);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return h_finish("test_state_dict");
}
