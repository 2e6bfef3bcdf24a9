/* test_train_parity.c: training in qkv follows training in PyTorch.
 * tools/train_parity_oracle.py initialises the lecture's toy attention
 * network and an MLP with LayerNorm in PyTorch and trains each for 20 steps
 * with Adam and with AdamW on fixed batches; this test starts the same
 * models from the same parameters, trains on the same batches, and checks
 * every step's loss (relative 1e-4) and the final parameters (1e-4,
 * norm-wise per tensor). */
#define _POSIX_C_SOURCE 200809L
#include <unistd.h>
#include "oracle.h"

typedef struct {
    qkv_toy_net toy;
    qkv_nn_linear l0, l3, l5;
    qkv_nn_layernorm ln;
    qkv_nn_gelu gelu;
    qkv_nn_tanh tanh_;
    qkv_sequential mlp;
    qkv_module *net;
    int is_toy;
} model;

static void model_init(model *m, int toy, qkv_params *p)
{
    qkv_rng r;
    qkv_rng_seed(&r, 1);
    m->is_toy = toy;
    if (toy) {
        CHECK_OK(qkv_toy_net_init(&m->toy, QKV_TOY_ATTENTION, 1, 8, 5, 0, p, &r));
        m->net = &m->toy.seq.base;
        return;
    }
    CHECK_OK(qkv_nn_linear_init(&m->l0, 6, 16, 1, p, "0.", &r));
    CHECK_OK(qkv_nn_layernorm_init(&m->ln, 16, 1e-5f, 1, p, "1."));
    CHECK_OK(qkv_nn_gelu_init(&m->gelu, "none"));
    CHECK_OK(qkv_nn_linear_init(&m->l3, 16, 16, 1, p, "3.", &r));
    CHECK_OK(qkv_nn_tanh_init(&m->tanh_));
    CHECK_OK(qkv_nn_linear_init(&m->l5, 16, 5, 1, p, "5.", &r));
    qkv_sequential_init(&m->mlp);
    qkv_module *layers[6] = {&m->l0.base, &m->ln.base, &m->gelu.base, &m->l3.base, &m->tanh_.base, &m->l5.base};
    for (int i = 0; i < 6; i++) qkv_sequential_add(&m->mlp, layers[i]);
    m->net = &m->mlp.base;
}

static void model_free(model *m)
{
    if (m->is_toy) qkv_toy_net_free(&m->toy);
    else qkv_sequential_free(&m->mlp);
}

static void run_file(const char *path, const char *label, double *worst_loss, double *worst_param)
{
    qkv_safetensors *st = NULL;
    CHECK_OK(qkv_safetensors_open(path, &st));
    if (!st) return;
    int toy = !strcmp(qkv_safetensors_meta(st, "model"), "toy");
    int adamw = !strcmp(qkv_safetensors_meta(st, "optimizer"), "adamw");
    int steps = atoi(qkv_safetensors_meta(st, "steps"));
    qkv_params *p;
    qkv_params_new(&p);
    model m = {0};
    model_init(&m, toy, p);
    char name[128];
    for (int i = 0; i < qkv_params_count(p); i++) {
        qkv_tensor *w = qkv_params_at(p, i);
        snprintf(name, sizeof name, "init.%s", w->name);
        CHECK_OK(qkv_safetensors_read_f32(st, name, w->data, qkv_tensor_numel(w)));
    }
    qkv_optim_opts oo = adamw ? qkv_optim_adamw_opts_default() : qkv_optim_adam_opts_default();
    oo.lr = atof(qkv_safetensors_meta(st, "lr"));
    oo.weight_decay = atof(qkv_safetensors_meta(st, "weight_decay"));
    qkv_optim *o;
    CHECK_OK(qkv_optim_new(&o, p, &oo));
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_ctx_set_training(c, 1);
    qkv_arena *a;
    qkv_arena_new(&a, 0);
    qkv_tensor *losses = h_load(st, a, "losses", 0);
    for (int s = 0; s < steps && losses; s++) {
        qkv_ctx_reset(c);
        snprintf(name, sizeof name, "x.%d", s);
        qkv_tensor *x = h_load(st, qkv_ctx_arena(c), name, 0), *y, *loss;
        snprintf(name, sizeof name, "y.%d", s);
        qkv_tensor *t = h_load(st, qkv_ctx_arena(c), name, 0);
        CHECK_OK(qkv_module_forward(c, m.net, x, &y));
        if (toy) CHECK_OK(qkv_mse_loss(c, y, t, QKV_REDUCTION_MEAN, &loss));
        else CHECK_OK(qkv_cross_entropy(c, y, t, QKV_IGNORE_INDEX_DEFAULT, 0.0, QKV_REDUCTION_MEAN, &loss));
        double e = fabs((double)loss->data[0] - losses->data[s]) / fabs((double)losses->data[s]);
        CHECK(e <= 1e-4, "%s step %d: loss %.7g, PyTorch %.7g (rel %.2g)", label, s, loss->data[0], losses->data[s], e);
        *worst_loss = fmax(*worst_loss, e);
        CHECK_OK(qkv_backward(c, loss, NULL));
        CHECK_OK(qkv_optim_step(o));
        qkv_params_zero_grad(p);
    }
    for (int i = 0; i < qkv_params_count(p); i++) {
        qkv_tensor *w = qkv_params_at(p, i);
        snprintf(name, sizeof name, "final.%s", w->name);
        qkv_tensor *want = h_load(st, a, name, 0);
        double e = want ? h_rel_err(w->data, want->data, qkv_tensor_numel(w)) : INFINITY;
        CHECK(e <= 1e-4, "%s: final %s differs from PyTorch's by %.3g", label, w->name, e);
        *worst_param = fmax(*worst_param, e);
    }
    printf("%s: %d steps, worst step loss rel err %.3g, worst final parameter rel err %.3g\n", label,
           steps, *worst_loss, *worst_param);
    qkv_arena_free(a);
    qkv_ctx_free(c);
    qkv_optim_free(o);
    model_free(&m);
    qkv_params_free(p);
    qkv_safetensors_close(st);
}

int main(void)
{
    char dir[] = "/tmp/qkv_train_parity_XXXXXX", cmd[256], path[256];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/train_parity_oracle.py %s", dir);
    int rc = system(cmd);
    CHECK(rc == 0, "the PyTorch oracle failed (exit %d): %s", rc, cmd);
    const char *runs[4] = {"toy_adam", "toy_adamw", "mlp_adam", "mlp_adamw"};
    for (int i = 0; rc == 0 && i < 4; i++) {
        double wl = 0, wp = 0;
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, runs[i]);
        run_file(path, runs[i], &wl, &wp);
        unlink(path);
    }
    rmdir(dir);
    return h_finish("test_train_parity");
}
