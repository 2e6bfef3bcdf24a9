#define _POSIX_C_SOURCE 200809L /* mkdtemp */
/* test_train_oracle.c: training's building blocks against PyTorch, through
 * tools/train_oracle.py (run here, once: it writes every case; the test
 * fails if it cannot run):
 *  - losses: mse_loss and cross_entropy, forward within 1e-5, gradients
 *    within 1e-4;
 *  - 20 steps of each optimizer variant (SGD, Adam, AdamW with their
 *    options; parameters within 1e-6 after every step), with gradient
 *    clipping (total norm within 1e-6) and learning-rate schedules;
 *  - the schedules against PyTorch's schedulers (within 1e-12). */
#include <stdint.h>
#include <unistd.h>
#include "oracle.h"

/* ---- PyTorch parity: reading the oracle's files ------------------------- */

static double meta_dbl(qkv_safetensors *st, const char *key)
{
    const char *v = qkv_safetensors_meta(st, key);
    return v && *v ? strtod(v, NULL) : NAN;
}

/* An F64 file tensor's elements, exactly. */
static double *load_f64(qkv_safetensors *st, const char *name, int64_t *n)
{
    qkv_st_dtype dt;
    const void *data;
    size_t nbytes;
    if (qkv_safetensors_info(st, name, &dt, NULL, NULL, &data, &nbytes) != QKV_OK ||
        dt != QKV_ST_F64)
        return NULL;
    *n = (int64_t)(nbytes / 8);
    double *x = malloc(nbytes ? nbytes : 1);
    if (x) memcpy(x, data, nbytes); /* little-endian hosts */
    return x;
}

static int n_lce; /* qkv_linear_cross_entropy cases run */
static double worst_loss_fwd, worst_loss_grad, worst_optim, worst_norm, worst_sched;

static void note(double e, double *worst) { *worst = isnan(e) ? INFINITY : fmax(*worst, e); }

static int same_shape(const qkv_tensor *a, const qkv_tensor *b)
{
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

static void compare(const char *file, const char *what, const qkv_tensor *got,
                    const float *got_data, const qkv_tensor *want, double tol, double *worst)
{
    if (!want || !got_data) {
        CHECK(0, "%s: %s missing", file, what);
        return;
    }
    if (got && !same_shape(got, want)) {
        char b1[64], b2[64];
        CHECK(0, "%s: %s is %s, PyTorch's %s", file, what, qkv_shape_str(got, b1, 64),
              qkv_shape_str(want, b2, 64));
        return;
    }
    double e = h_rel_err(got_data, want->data, qkv_tensor_numel(want));
    CHECK(e <= tol, "%s: %s relative error %.3g > %.0e", file, what, e, tol);
    note(e, worst);
}

/* A qkv_linear_cross_entropy case (kind "lce") against F.cross_entropy(F.linear(x, W, b)). */
static void parity_lce(qkv_safetensors *st, qkv_arena *A, qkv_ctx *c, const char *file)
{
    int has_bias = qkv_safetensors_info(st, "bias", NULL, NULL, NULL, NULL, NULL) == QKV_OK;
    qkv_tensor *x = h_load(st, A, "x", 1), *w = h_load(st, A, "weight", 1), *b = has_bias ? h_load(st, A, "bias", 1) : NULL;
    qkv_tensor *y = h_load(st, A, "target", 0), *want = h_load(st, A, "loss", 0), *dl = h_load(st, A, "dloss", 0);
    qkv_tensor *loss = NULL;
    if (!x || !w || (has_bias && !b) || !y || !want || !dl) {
        CHECK(0, "%s: oracle file lacks tensors", file);
        return;
    }
    qkv_status s = qkv_linear_cross_entropy(c, x, w, b, y, h_meta_int(st, "ignore_index"),
                                            meta_dbl(st, "label_smoothing"),
                                            (qkv_reduction)h_meta_int(st, "reduction"), &loss);
    CHECK(s == QKV_OK, "%s: %s", file, qkv_last_error());
    if (s != QKV_OK) return;
    compare(file, "loss", loss, loss->data, want, 1e-5, &worst_loss_fwd);
    CHECK_OK(qkv_backward(c, loss, dl->data));
    compare(file, "grad.x", x, x->grad, h_load(st, A, "grad.x", 0), 1e-4, &worst_loss_grad);
    compare(file, "grad.weight", w, w->grad, h_load(st, A, "grad.weight", 0), 1e-4, &worst_loss_grad);
    if (b) compare(file, "grad.bias", b, b->grad, h_load(st, A, "grad.bias", 0), 1e-4, &worst_loss_grad);
    n_lce++;
}

static void parity_loss(const char *path, const char *file)
{
    qkv_safetensors *st = NULL;
    CHECK_OK(qkv_safetensors_open(path, &st));
    if (!st) return;
    qkv_arena *A;
    qkv_ctx *c;
    qkv_arena_new(&A, 0);
    qkv_ctx_new(&c);
    const char *kind = qkv_safetensors_meta(st, "kind");
    qkv_reduction r = (qkv_reduction)h_meta_int(st, "reduction");
    int ce = kind && !strcmp(kind, "ce");
    if (kind && !strcmp(kind, "lce")) {
        parity_lce(st, A, c, file);
        qkv_ctx_free(c);
        qkv_arena_free(A);
        qkv_safetensors_close(st);
        return;
    }
    qkv_tensor *x = h_load(st, A, ce ? "logits" : "input", 1), *loss = NULL;
    qkv_tensor *t = ce ? NULL : h_load(st, A, "target", h_meta_int(st, "target_grad"));
    qkv_tensor *y = ce ? h_load(st, A, "target", 0) : NULL;
    qkv_tensor *want = h_load(st, A, "loss", 0), *dl = h_load(st, A, "dloss", 0);
    if (x && want && dl && (ce ? y != NULL : t != NULL)) {
        qkv_status s = ce ? qkv_cross_entropy(c, x, y, h_meta_int(st, "ignore_index"),
                                              meta_dbl(st, "label_smoothing"), r, &loss)
                          : qkv_mse_loss(c, x, t, r, &loss);
        CHECK(s == QKV_OK, "%s: %s", file, qkv_last_error());
        if (s == QKV_OK) {
            compare(file, "loss", loss, loss->data, want, 1e-5, &worst_loss_fwd);
            CHECK_OK(qkv_backward(c, loss, dl->data));
            compare(file, "grad", x, x->grad, h_load(st, A, ce ? "grad.logits" : "grad.input", 0),
                    1e-4, &worst_loss_grad);
            if (t && t->requires_grad)
                compare(file, "grad.target", t, t->grad, h_load(st, A, "grad.target", 0), 1e-4,
                        &worst_loss_grad);
        }
    } else {
        CHECK(0, "%s: oracle file lacks tensors", file);
    }
    qkv_ctx_free(c);
    qkv_arena_free(A);
    qkv_safetensors_close(st);
}

static qkv_optim_opts opts_from_meta(qkv_safetensors *st)
{
    const char *kind = qkv_safetensors_meta(st, "kind");
    qkv_optim_opts o = qkv_optim_sgd_opts_default(meta_dbl(st, "lr"));
    if (kind && !strcmp(kind, "adam")) o = qkv_optim_adam_opts_default();
    if (kind && !strcmp(kind, "adamw")) o = qkv_optim_adamw_opts_default();
    o.lr = meta_dbl(st, "lr");
    o.weight_decay = meta_dbl(st, "weight_decay");
    o.maximize = h_meta_int(st, "maximize");
    if (o.kind == QKV_OPTIM_SGD) {
        o.momentum = meta_dbl(st, "momentum");
        o.dampening = meta_dbl(st, "dampening");
        o.nesterov = h_meta_int(st, "nesterov");
    } else {
        o.beta1 = meta_dbl(st, "beta1");
        o.beta2 = meta_dbl(st, "beta2");
        o.eps = meta_dbl(st, "eps");
        o.amsgrad = h_meta_int(st, "amsgrad");
    }
    return o;
}

/* "base W start decay total min_lr" as train_oracle.py's sched_str writes. */
static int parse_schedule(const char *s, qkv_schedule *sc)
{
    long long W, total;
    int decay;
    *sc = qkv_schedule_default(0);
    if (!s || sscanf(s, "%lf %lld %lf %d %lld %lf", &sc->base_lr, &W, &sc->warmup_start_factor,
                     &decay, &total, &sc->min_lr) != 6)
        return 0;
    sc->warmup_steps = W;
    sc->total_steps = total;
    sc->decay = (qkv_schedule_decay)decay;
    return 1;
}

static void parity_optim(const char *path, const char *name)
{
    qkv_safetensors *st = NULL;
    CHECK_OK(qkv_safetensors_open(path, &st));
    if (!st) return;
    qkv_arena *A;
    qkv_arena_new(&A, 0);
    qkv_params *p;
    CHECK_OK(qkv_params_new(&p));
    int np = h_meta_int(st, "nparams"), steps = h_meta_int(st, "steps");
    double clip = meta_dbl(st, "clip");
    qkv_schedule sc;
    int sched = parse_schedule(qkv_safetensors_meta(st, "schedule"), &sc);
    char key[64], what[96];
    for (int k = 0; k < np; k++) {
        snprintf(key, sizeof key, "p%d", k);
        qkv_tensor *init = h_load(st, A, key, 0), *t = NULL;
        if (!init) break;
        CHECK_OK(qkv_params_add(p, "", key, init->ndim, init->shape, &t));
        if (t) memcpy(t->data, init->data, (size_t)qkv_tensor_numel(t) * sizeof(float));
    }
    qkv_optim_opts oo = opts_from_meta(st);
    qkv_optim *o = NULL;
    CHECK_OK(qkv_optim_new(&o, p, &oo));
    double worst = 0;
    for (int s = 0; o && s < steps && qkv_params_count(p) == np; s++) {
        for (int k = 0; k < np; k++) {
            snprintf(key, sizeof key, "g%d.%d", s, k);
            qkv_tensor *g = h_load(st, A, key, 0), *t = qkv_params_at(p, k);
            if (g) memcpy(t->grad, g->data, (size_t)qkv_tensor_numel(t) * sizeof(float));
        }
        if (!isnan(clip)) {
            float norm;
            CHECK_OK(qkv_clip_grad_norm(p, (float)clip, &norm));
            snprintf(key, sizeof key, "norm%d", s);
            qkv_tensor *want = h_load(st, A, key, 0);
            double e = want ? fabs(norm - want->data[0]) / want->data[0] : INFINITY;
            CHECK(e <= 1e-6, "optim %s step %d: total norm %.9g, PyTorch %.9g", name, s, norm,
                  want ? want->data[0] : NAN);
            note(e, &worst_norm);
        }
        if (sched) CHECK_OK(qkv_optim_set_lr(o, qkv_schedule_lr_at(&sc, s)));
        CHECK_OK(qkv_optim_step(o));
        for (int k = 0; k < np; k++) {
            snprintf(key, sizeof key, "p%d.%d", s, k);
            snprintf(what, sizeof what, "step %d parameter %d", s, k);
            qkv_tensor *t = qkv_params_at(p, k);
            compare(name, what, t, t->data, h_load(st, A, key, 0), 1e-6, &worst);
        }
    }
    note(worst, &worst_optim);
    printf("  optimizer %-20s worst parameter error over %d steps: %.3g\n", name, steps, worst);
    qkv_optim_free(o);
    qkv_params_free(p);
    qkv_arena_free(A);
    qkv_safetensors_close(st);
}

static void parity_schedules(const char *path)
{
    qkv_safetensors *st = NULL;
    CHECK_OK(qkv_safetensors_open(path, &st));
    if (!st) return;
    int n = h_meta_int(st, "count");
    for (int i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof key, "sched.%d", i);
        qkv_schedule sc;
        CHECK(parse_schedule(qkv_safetensors_meta(st, key), &sc), "schedule %d unreadable", i);
        CHECK_OK(qkv_schedule_check(&sc));
        snprintf(key, sizeof key, "lr.%d", i);
        int64_t steps = 0;
        double *lrs = load_f64(st, key, &steps), worst = 0;
        CHECK(lrs != NULL, "schedule %d: no learning rates", i);
        for (int64_t s = 0; lrs && s < steps; s++)
            worst = fmax(worst, fabs(qkv_schedule_lr_at(&sc, s) - lrs[s]) / sc.base_lr);
        snprintf(key, sizeof key, "ref.%d", i);
        CHECK(worst <= 1e-12, "schedule %d vs %s: relative error %.3g", i,
              qkv_safetensors_meta(st, key), worst);
        note(worst, &worst_sched);
        free(lrs);
    }
    CHECK(n == 9, "the oracle wrote %d schedules, expected 9", n);
    qkv_safetensors_close(st);
}

static void test_parity(void)
{
    char dir[] = "/tmp/qkv_train_XXXXXX", path[512];
    int rc = h_oracle_run("train_oracle.py", dir, NULL) ? 0 : 1;
    int n_loss = 0, n_optim = 0;
    snprintf(path, sizeof path, "%s/index.txt", dir);
    FILE *f = rc == 0 ? fopen(path, "r") : NULL;
    CHECK(rc != 0 || f, "the oracle wrote no index");
    char line[128], name[64];
    while (f && fgets(line, sizeof line, f)) {
        int n;
        if (sscanf(line, "losses %d", &n) == 1) {
            for (int i = 0; i < n; i++) {
                snprintf(name, sizeof name, "loss_%03d", i);
                snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
                parity_loss(path, name);
                unlink(path);
                n_loss++;
            }
        } else if (sscanf(line, "optim %63s", name) == 1) {
            snprintf(path, sizeof path, "%s/optim_%s.safetensors", dir, name);
            parity_optim(path, name);
            unlink(path);
            n_optim++;
        }
    }
    if (f) fclose(f);
    snprintf(path, sizeof path, "%s/sched.safetensors", dir);
    if (rc == 0) parity_schedules(path);
    unlink(path);
    snprintf(path, sizeof path, "%s/index.txt", dir);
    unlink(path);
    rmdir(dir);
    CHECK(n_loss >= 120 && n_lce >= 30 && n_optim == 12,
          "parity ran %d loss cases (%d of linear_cross_entropy) and %d optimizer runs", n_loss, n_lce, n_optim);
    printf("PyTorch parity: %d loss cases, %d of them linear_cross_entropy (worst forward %.3g, gradient %.3g), %d optimizer runs "
           "(worst parameter %.3g, total norm %.3g), schedules (worst %.3g)\n",
           n_loss, n_lce, worst_loss_fwd, worst_loss_grad, n_optim, worst_optim, worst_norm, worst_sched);
}

int main(void)
{
    test_parity();
    return h_finish("test_train_oracle");
}
