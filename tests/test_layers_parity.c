/* test_layers_parity.c: the layers of include/qkv/nn.h against PyTorch 1.13
 * (tools/layers_oracle.py, run through /usr/bin/python3 from the repo root;
 * the test fails if it cannot run): each functional op and each module
 * (Linear, Conv1d, LayerNorm, Embedding, a Sequential) loaded by state_dict
 * name, with the fast and the reference kernels: forward within 1e-5,
 * gradients within 1e-4, relative to each tensor's largest element. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <unistd.h>
#include "oracle.h"

/* ---- PyTorch parity --------------------------------------------------------- */

typedef struct {
    const char *op;
    double fwd, grad;
    int cases;
} op_worst;

static op_worst worst[] = {{.op = "relu"}, {.op = "tanh"}, {.op = "gelu"}, {.op = "add"},
                           {.op = "cat"}, {.op = "layer_norm"}, {.op = "embedding"},
                           {.op = "conv1d"}, {.op = "linear"}, {.op = "sequential"}};
#define N_OPS ((int)(sizeof worst / sizeof worst[0]))

static op_worst *worst_of(const char *op)
{
    for (int i = 0; i < N_OPS; i++)
        if (!strcmp(worst[i].op, op)) return &worst[i];
    return NULL;
}

/* One case: the file, its inputs, and (module variant) qkv's module. */
typedef struct {
    qkv_safetensors *st;
    const char *file, *op;
    qkv_arena *a;
    qkv_tensor *x, *ta, *tb, *ids, *weight, *bias; /* from the file */
    qkv_params *p;                                  /* the module's parameters */
    qkv_nn_linear lin;
    qkv_nn_conv1d conv[3];
    qkv_nn_layernorm ln;
    qkv_nn_embedding emb;
    qkv_nn_relu relu;
    qkv_nn_gelu gelu;
    qkv_nn_tanh tanh_m;
    qkv_sequential seq;
} pcase;

/* The tensor a name of the file's "inputs" list stands for. */
static qkv_tensor *bind(pcase *k, const char *name, int module)
{
    if (!strcmp(name, "x")) return k->x;
    if (!strcmp(name, "a")) return k->ta;
    if (!strcmp(name, "b")) return k->tb;
    if (module) return qkv_params_find(k->p, name);
    if (!strcmp(name, "weight")) return k->weight;
    if (!strcmp(name, "bias")) return k->bias;
    return NULL;
}

static qkv_status call_functional(qkv_ctx *c, pcase *k, qkv_tensor **y)
{
    qkv_safetensors *st = k->st;
    const char *op = k->op;
    if (!strcmp(op, "relu")) return qkv_relu(c, k->x, y);
    if (!strcmp(op, "tanh")) return qkv_tanh(c, k->x, y);
    if (!strcmp(op, "gelu")) return qkv_gelu(c, k->x, h_meta_int(st, "approximate") ? "tanh" : "none", y);
    if (!strcmp(op, "add")) return qkv_add(c, k->ta, k->tb, y);
    if (!strcmp(op, "cat")) return qkv_cat(c, k->ta, k->tb, (int)h_meta_int(st, "dim"), y);
    if (!strcmp(op, "layer_norm"))
        return qkv_layer_norm(c, k->x, k->weight, k->bias, (float)atof(qkv_safetensors_meta(st, "eps")), y);
    if (!strcmp(op, "embedding")) return qkv_embedding(c, k->weight, k->ids, h_meta_int(st, "padding_idx"), y);
    if (!strcmp(op, "conv1d"))
        return qkv_conv1d(c, k->x, k->weight, k->bias, h_meta_int(st, "stride"), h_meta_int(st, "padding"),
                          h_meta_int(st, "dilation"), y);
    if (!strcmp(op, "linear")) return qkv_linear(c, k->x, k->weight, k->bias, y);
    return QKV_ERR_NOTFOUND; /* sequential: a module only */
}

/* Builds qkv's version of the file's torch.nn module into k (parameters in
 * k->p) and loads the file's values into it by state_dict name. */
static qkv_module *build_module(pcase *k, qkv_rng *r)
{
    qkv_safetensors *st = k->st;
    const char *mod = qkv_safetensors_meta(st, "module");
    qkv_module *m = NULL;
    if (!strcmp(mod, "Linear")) {
        CHECK_OK(qkv_nn_linear_init(&k->lin, h_meta_int(st, "in_features"), h_meta_int(st, "out_features"),
                                    (int)h_meta_int(st, "bias"), k->p, "", r));
        m = &k->lin.base;
    } else if (!strcmp(mod, "Conv1d")) {
        qkv_conv1d_opts o = qkv_conv1d_opts_default(h_meta_int(st, "in_channels"), h_meta_int(st, "out_channels"),
                                                    h_meta_int(st, "kernel_size"));
        o.stride = h_meta_int(st, "stride");
        o.padding = h_meta_int(st, "padding");
        o.dilation = h_meta_int(st, "dilation");
        o.bias = (int)h_meta_int(st, "bias");
        CHECK_OK(qkv_nn_conv1d_init(&k->conv[0], &o, k->p, "", r));
        m = &k->conv[0].base;
    } else if (!strcmp(mod, "LayerNorm")) {
        CHECK_OK(qkv_nn_layernorm_init(&k->ln, k->x->shape[k->x->ndim - 1],
                                       (float)atof(qkv_safetensors_meta(st, "eps")), 1, k->p, ""));
        m = &k->ln.base;
    } else if (!strcmp(mod, "Embedding")) {
        CHECK_OK(qkv_nn_embedding_init(&k->emb, k->weight->shape[0], k->weight->shape[1],
                                       h_meta_int(st, "padding_idx"), k->p, "", r));
        m = &k->emb.base;
    } else if (!strcmp(mod, "Sequential")) {
        /* Sequential(Conv1d(1,C,5,padding=2), ReLU(), Conv1d(C,C,5,padding=2),
         * GELU(approximate), Conv1d(C,1,1), Tanh()) */
        int64_t C = h_meta_int(st, "channels"), cin[3] = {1, C, C}, cout[3] = {C, C, 1}, ks[3] = {5, 5, 1};
        const char *prefix[3] = {"0.", "2.", "4."};
        CHECK_OK(qkv_sequential_init(&k->seq));
        CHECK_OK(qkv_nn_relu_init(&k->relu));
        CHECK_OK(qkv_nn_gelu_init(&k->gelu, h_meta_int(st, "approximate") ? "tanh" : "none"));
        CHECK_OK(qkv_nn_tanh_init(&k->tanh_m));
        qkv_module *act[3] = {&k->relu.base, &k->gelu.base, &k->tanh_m.base};
        for (int i = 0; i < 3; i++) {
            qkv_conv1d_opts o = qkv_conv1d_opts_default(cin[i], cout[i], ks[i]);
            o.padding = ks[i] / 2;
            CHECK_OK(qkv_nn_conv1d_init(&k->conv[i], &o, k->p, prefix[i], r));
            CHECK_OK(qkv_sequential_add(&k->seq, &k->conv[i].base));
            CHECK_OK(qkv_sequential_add(&k->seq, act[i]));
        }
        m = &k->seq.base;
    }
    CHECK(m != NULL, "%s: unknown module %s", k->file, mod);
    /* Every file tensor that is not an input or a result is a parameter. */
    int n = 0;
    for (int i = 0; i < qkv_safetensors_count(st); i++) {
        const char *name = qkv_safetensors_name(st, i);
        if (!strncmp(name, "grad.", 5) || !strcmp(name, "y") || !strcmp(name, "dout") || !strcmp(name, "x") ||
            !strcmp(name, "a") || !strcmp(name, "b") || !strcmp(name, "ids"))
            continue;
        qkv_tensor *t = qkv_params_find(k->p, name);
        CHECK(t != NULL, "%s: PyTorch parameter %s missing in qkv's %s", k->file, name, mod);
        if (!t) continue;
        n++;
        CHECK_OK(qkv_safetensors_read_f32(st, name, t->data, qkv_tensor_numel(t)));
    }
    CHECK(n == qkv_params_count(k->p), "%s: qkv's %s has %d parameters, PyTorch %d", k->file, mod,
          qkv_params_count(k->p), n);
    return m;
}

static void compare(pcase *k, const char *what, const float *got, const char *want_name, double tol,
                    double *worst_e)
{
    qkv_tensor *want = h_load(k->st, k->a, want_name, 1);
    CHECK(want != NULL, "%s: reference tensor %s missing", k->file, want_name);
    if (!want || !got) {
        CHECK(got != NULL, "%s: %s has no value/gradient", k->file, what);
        return;
    }
    double e = h_rel_err(got, want->data, qkv_tensor_numel(want));
    CHECK(e <= tol, "%s (%s): %s relative error %.3g > %.0e", k->file, k->op, what, e, tol);
    *worst_e = fmax(*worst_e, isnan(e) ? INFINITY : e);
}

/* One forward + backward of the functional op (module 0) or of qkv's
 * module (module 1), compared with the file. */
static void run_variant(pcase *k, int module, qkv_module *m, op_worst *w)
{
    qkv_tensor *ins[5] = {k->x, k->ta, k->tb, k->weight, k->bias};
    for (int i = 0; i < 5; i++)
        if (ins[i]) memset(ins[i]->grad, 0, (size_t)qkv_tensor_numel(ins[i]) * sizeof(float));
    qkv_params_zero_grad(k->p);
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_tensor *y = NULL;
    qkv_status s = module ? qkv_module_forward(c, m, !strcmp(k->op, "embedding") ? k->ids : k->x, &y)
                          : call_functional(c, k, &y);
    CHECK(s == QKV_OK, "%s (%s, %s): %s", k->file, k->op, module ? "module" : "functional", qkv_last_error());
    qkv_tensor *want = h_load(k->st, k->a, "y", 1), *dout = h_load(k->st, k->a, "dout", 1);
    if (s == QKV_OK && want && dout) {
        char b1[64], b2[64];
        int same = y->ndim == want->ndim && !memcmp(y->shape, want->shape, sizeof(int64_t) * (size_t)y->ndim);
        CHECK(same, "%s: y %s, PyTorch %s", k->file, qkv_shape_str(y, b1, 64), qkv_shape_str(want, b2, 64));
        if (same) {
            compare(k, "y", y->data, "y", 1e-5, &w->fwd);
            CHECK_OK(qkv_backward(c, y, dout->data));
            char list[256], gname[160];
            snprintf(list, sizeof list, "%s", qkv_safetensors_meta(k->st, "inputs"));
            for (char *save = NULL, *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
                qkv_tensor *t = bind(k, name, module);
                CHECK(t != NULL, "%s: no qkv tensor for input %s", k->file, name);
                snprintf(gname, sizeof gname, "grad.%s", name);
                if (t) compare(k, gname, t->grad, gname, 1e-4, &w->grad);
            }
        }
    }
    qkv_ctx_free(c);
}

static void run_case(const char *path, const char *file, qkv_rng *r)
{
    pcase k;
    memset(&k, 0, sizeof k);
    k.file = file;
    CHECK_OK(qkv_safetensors_open(path, &k.st));
    if (!k.st) return;
    k.op = qkv_safetensors_meta(k.st, "op");
    op_worst *w = k.op ? worst_of(k.op) : NULL;
    CHECK(w != NULL, "%s: unknown op %s", file, k.op ? k.op : "(none)");
    if (w) {
        w->cases++;
        qkv_arena_new(&k.a, 0);
        qkv_params_new(&k.p);
        k.x = h_load(k.st, k.a, "x", 1);
        k.ta = h_load(k.st, k.a, "a", 1);
        k.tb = h_load(k.st, k.a, "b", 1);
        k.ids = h_load(k.st, k.a, "ids", 1);
        k.weight = h_load(k.st, k.a, "weight", 1);
        k.bias = h_load(k.st, k.a, "bias", 1);
        qkv_module *m = qkv_safetensors_meta(k.st, "module") ? build_module(&k, r) : NULL;
        for (int ref = 0; ref < 2; ref++) {
            qkv_set_reference(ref);
            if (strcmp(k.op, "sequential")) run_variant(&k, 0, NULL, w);
            if (m) run_variant(&k, 1, m, w);
        }
        qkv_set_reference(0);
        qkv_sequential_free(&k.seq);
        qkv_params_free(k.p);
        qkv_arena_free(k.a);
    }
    qkv_safetensors_close(k.st);
}

static void test_parity(qkv_rng *r)
{
    char dir[] = "/tmp/qkv_layers_parity_XXXXXX", path[320];
    int rc = h_oracle_run("layers_oracle.py", dir, NULL) ? 0 : 1;
    int cases = 0;
    snprintf(path, sizeof path, "%s/count", dir);
    FILE *f = rc == 0 ? fopen(path, "r") : NULL;
    if (f) {
        if (fscanf(f, "%d", &cases) != 1) cases = 0;
        fclose(f);
    }
    unlink(path);
    CHECK(rc != 0 || cases > 0, "the oracle wrote no cases");
    for (int i = 0; i < cases; i++) {
        char file[32];
        snprintf(file, sizeof file, "case_%04d", i);
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, file);
        run_case(path, file, r);
        unlink(path);
    }
    rmdir(dir);
    int total = 0;
    for (int i = 0; i < N_OPS; i++) {
        total += worst[i].cases;
        CHECK(rc != 0 || worst[i].cases > 0, "parity: no case for %s", worst[i].op);
        printf("parity %-10s %2d cases: worst forward %.3g, worst gradient %.3g\n", worst[i].op,
               worst[i].cases, worst[i].fwd, worst[i].grad);
    }
    CHECK(total == cases, "parity: ran %d of %d cases", total, cases);
}

int main(void)
{
    qkv_rng r;
    qkv_rng_seed(&r, 42);
    test_parity(&r);
    return h_finish("test_layers_parity");
}
