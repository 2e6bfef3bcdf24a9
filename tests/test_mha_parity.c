#define _POSIX_C_SOURCE 200809L
/* test_mha_parity.c: qkv's MultiheadAttention against PyTorch's.
 * tools/mha_oracle.py writes random modules, inputs, outputs and gradients
 * (240 configurations covering every option); this test loads each, runs
 * qkv's forward and backward with both the fast and the reference kernels,
 * and compares: forward (out, weights) within 1e-5, gradients within 1e-4,
 * relative to each tensor's largest element (h_rel_err). */
#include <stdint.h>
#include <unistd.h>
#include "oracle.h"

static double worst_fwd, worst_grad;
static int n_cases, n_nan_cases;

static void run_case(const char *path, const char *file)
{
    qkv_safetensors *st = NULL;
    CHECK_OK(qkv_safetensors_open(path, &st));
    if (!st) return;
    qkv_mha_opts o = qkv_mha_opts_default(h_meta_int(st, "embed_dim"), h_meta_int(st, "num_heads"));
    o.bias = h_meta_int(st, "bias");
    o.add_bias_kv = h_meta_int(st, "add_bias_kv");
    o.add_zero_attn = h_meta_int(st, "add_zero_attn");
    o.kdim = h_meta_int(st, "kdim");
    o.vdim = h_meta_int(st, "vdim");
    o.batch_first = h_meta_int(st, "batch_first");
    o.dropout = (float)atof(qkv_safetensors_meta(st, "dropout"));
    int self = h_meta_int(st, "self");
    n_nan_cases += h_meta_int(st, "nan_rows");

    qkv_params *p;
    qkv_rng rng;
    qkv_rng_seed(&rng, 1);
    qkv_mha m;
    CHECK_OK(qkv_params_new(&p));
    CHECK_OK(qkv_mha_init(&m, &o, p, "", &rng));
    qkv_arena *a;
    qkv_arena_new(&a, 0);
    /* Parameters by state_dict name: every one the file has must exist here,
     * and the other way round. */
    int nparam = 0;
    for (int i = 0; i < qkv_safetensors_count(st); i++) {
        const char *name = qkv_safetensors_name(st, i);
        if (!strncmp(name, "grad.", 5)) continue;
        qkv_tensor *t = qkv_params_find(p, name);
        if (!strcmp(name, "query") || !strcmp(name, "key") || !strcmp(name, "value") ||
            !strcmp(name, "out") || !strcmp(name, "weights") || !strcmp(name, "dout") ||
            !strcmp(name, "attn_mask") || !strcmp(name, "key_padding_mask"))
            continue;
        CHECK(t != NULL, "%s: PyTorch parameter %s missing in qkv", file, name);
        if (!t) continue;
        nparam++;
        CHECK_OK(qkv_safetensors_read_f32(st, name, t->data, qkv_tensor_numel(t)));
    }
    CHECK(nparam == qkv_params_count(p), "%s: qkv has %d parameters, PyTorch %d", file,
          qkv_params_count(p), nparam);

    qkv_tensor *q = h_load(st, a, "query", 1);
    qkv_tensor *k = self ? q : h_load(st, a, "key", 1);
    qkv_tensor *v = self ? q : h_load(st, a, "value", 1);
    qkv_mha_args args = qkv_mha_args_default();
    args.attn_mask = h_load(st, a, "attn_mask", 0);
    args.key_padding_mask = h_load(st, a, "key_padding_mask", 0);
    args.need_weights = h_meta_int(st, "need_weights");
    args.average_attn_weights = h_meta_int(st, "average_attn_weights");
    args.causal = (qkv_causal)h_meta_int(st, "causal");
    args.window = h_meta_int(st, "window");
    qkv_tensor *want_out = h_load(st, a, "out", 0), *want_w = h_load(st, a, "weights", 0);
    qkv_tensor *dout = h_load(st, a, "dout", 0);

    for (int ref = 0; ref < 2 && q && k && v && dout; ref++) {
        qkv_set_reference(ref);
        qkv_params_zero_grad(p);
        for (int i = 0; i < 3; i++) {
            qkv_tensor *t = i == 0 ? q : i == 1 ? k : v;
            memset(t->grad, 0, (size_t)qkv_tensor_numel(t) * sizeof(float));
        }
        qkv_ctx *c;
        qkv_ctx_new(&c);
        qkv_ctx_set_training(c, h_meta_int(st, "training"));
        qkv_tensor *out = NULL, *w = NULL;
        qkv_status s = qkv_mha_forward(c, &m, q, k, v, &args, &out, args.need_weights ? &w : NULL);
        CHECK(s == QKV_OK, "%s: mha_forward: %s", file, qkv_last_error());
        if (s == QKV_OK) {
            char b1[64], b2[64];
            CHECK(out->ndim == want_out->ndim && !memcmp(out->shape, want_out->shape, sizeof(int64_t) * out->ndim),
                  "%s: out %s, PyTorch %s", file, qkv_shape_str(out, b1, 64), qkv_shape_str(want_out, b2, 64));
            h_compare(file, "out", out->data, want_out, 1e-5, &worst_fwd);
            if (args.need_weights) {
                CHECK(w && want_w && w->ndim == want_w->ndim &&
                          !memcmp(w->shape, want_w->shape, sizeof(int64_t) * w->ndim),
                      "%s: weights %s, PyTorch %s", file, qkv_shape_str(w, b1, 64),
                      qkv_shape_str(want_w, b2, 64));
                if (w) h_compare(file, "weights", w->data, want_w, 1e-5, &worst_fwd);
            }
            CHECK_OK(qkv_backward(c, out, dout->data));
            char gname[128];
            const char *in[3] = {"query", "key", "value"};
            for (int i = 0; i < (self ? 1 : 3); i++) {
                snprintf(gname, sizeof gname, "grad.%s", in[i]);
                h_compare(file, gname, (i == 0 ? q : i == 1 ? k : v)->grad, h_load(st, a, gname, 0), 1e-4, &worst_grad);
            }
            for (int i = 0; i < qkv_params_count(p); i++) {
                qkv_tensor *t = qkv_params_at(p, i);
                snprintf(gname, sizeof gname, "grad.%s", t->name);
                h_compare(file, gname, t->grad, h_load(st, a, gname, 0), 1e-4, &worst_grad);
            }
        }
        qkv_ctx_free(c);
    }
    qkv_set_reference(0);
    n_cases++;
    qkv_arena_free(a);
    qkv_params_free(p);
    qkv_safetensors_close(st);
}

int main(int argc, char **argv)
{
    int cases = argc > 1 ? atoi(argv[1]) : 240;
    h_oracle_cases("mha_oracle.py", cases, run_case);
    printf("MultiheadAttention parity: %d cases (%d with rows PyTorch makes NaN), fast and "
           "reference kernels: worst forward %.3g, worst gradient %.3g\n",
           n_cases, n_nan_cases, worst_fwd, worst_grad);
    CHECK(n_cases == cases, "ran %d of %d cases", n_cases, cases);
    return h_finish("test_mha_parity");
}
