#define _POSIX_C_SOURCE 200809L /* mkdtemp */
/* test_train.c: losses, optimizers, clipping, schedules and checkpoints.
 *
 *  - finite-difference checks of mse_loss and cross_entropy (every
 *    reduction, ignore_index, label smoothing, every logits layout);
 *  - PyTorch parity through tools/train_oracle.py (run here; the test fails
 *    if it cannot run): losses (forward 1e-5, gradients 1e-4), 20 steps of
 *    each optimizer variant (parameters 1e-6 after every step), clipping,
 *    schedules against PyTorch's schedulers;
 *  - checkpoints: round trip, and a resumed run that matches a straight one
 *    bit for bit;
 *  - bad input for every public function, with the store left unchanged
 *    where a checkpoint load fails. */
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include "gradcheck.h"
#include "oracle.h"

/* ---- finite differences ------------------------------------------------- */

typedef struct {
    qkv_tensor *x, *t;      /* mse: input, target; ce: logits, - */
    qkv_tensor *y;          /* ce: I64 labels */
    int64_t ignore;
    double ls;
    qkv_reduction r;
} loss_args;

static qkv_status f_mse(qkv_ctx *c, void *u, qkv_tensor **out)
{
    loss_args *a = u;
    return qkv_mse_loss(c, a->x, a->t, a->r, out);
}

static qkv_status f_ce(qkv_ctx *c, void *u, qkv_tensor **out)
{
    loss_args *a = u;
    return qkv_cross_entropy(c, a->x, a->y, a->ignore, a->ls, a->r, out);
}

/* An I64 tensor of labels in [0,C), with about every third one ignore. */
static qkv_tensor *labels(qkv_arena *A, qkv_rng *r, int ndim, const int64_t *shape, int64_t C,
                          int64_t ignore)
{
    qkv_tensor *y = NULL;
    if (qkv_tensor_new(A, QKV_I64, ndim, shape, &y) != QKV_OK) return NULL;
    for (int64_t i = 0; i < qkv_tensor_numel(y); i++)
        y->idx[i] = (i % 3 == 1) ? ignore : (int64_t)(qkv_rng_next(r) % (uint64_t)C);
    return y;
}

static void test_gradcheck(qkv_arena *A, qkv_rng *r)
{
    static const char *red[3] = {"mean", "sum", "none"};
    for (int ri = 0; ri < 3; ri++) {
        loss_args a = {0};
        a.r = (qkv_reduction)ri;
        int64_t shape[3] = {3, 4, 2};
        a.x = h_input(A, r, 3, shape, 1);
        a.t = h_input(A, r, 3, shape, 1);
        qkv_tensor *in[2] = {a.x, a.t};
        double e = h_gradcheck(f_mse, &a, in, 2, 1e-2f, 1e-2);
        CHECK(e < 1e-2, "mse_loss gradcheck (%s): %g", red[ri], e);
    }
    /* logits layouts: (N,C), (N,C,d1), (N,C,d1,d2), (C) */
    const int nd[4] = {2, 3, 4, 1};
    const int64_t shapes[4][4] = {{5, 4}, {3, 5, 2}, {2, 3, 2, 2}, {6}};
    const double smooth[3] = {0.0, 0.25, 1.0};
    for (int li = 0; li < 4; li++)
        for (int ri = 0; ri < 3; ri++)
            for (int si = 0; si < 3; si++) {
                loss_args a = {0};
                a.r = (qkv_reduction)ri;
                a.ls = smooth[si];
                a.ignore = si == 1 ? 1 : -100; /* an ignore_index that is also a class */
                const int64_t *sh = shapes[li];
                int64_t C = nd[li] == 1 ? sh[0] : sh[1], tshape[3];
                int tnd = nd[li] - 1;
                if (tnd > 0) tshape[0] = sh[0];
                for (int k = 1; k < tnd; k++) tshape[k] = sh[k + 1];
                a.x = h_input(A, r, nd[li], sh, 2);
                a.y = labels(A, r, tnd, tshape, C, nd[li] == 1 ? -100 : a.ignore);
                double e = h_gradcheck(f_ce, &a, &a.x, 1, 1e-2f, 1e-2);
                CHECK(e < 1e-2, "cross_entropy gradcheck (layout %d, %s, smoothing %g): %g", li,
                      red[ri], a.ls, e);
            }
}

/* A mean cross entropy whose every target is ignored: 0 with a zero
 * gradient (PyTorch: NaN). Also sum and none: 0. */
static void test_all_ignored(qkv_arena *A, qkv_rng *r)
{
    for (int ri = 0; ri < 3; ri++) {
        qkv_ctx *c;
        CHECK_OK(qkv_ctx_new(&c));
        qkv_tensor *x = h_input(A, r, 2, (int64_t[]){3, 4}, 1);
        memset(x->grad, 0, 12 * sizeof(float));
        int64_t lab[3] = {-100, -100, -100};
        qkv_tensor *y, *loss;
        CHECK_OK(qkv_tensor_wrap_i64(A, lab, 1, (int64_t[]){3}, &y));
        CHECK_OK(qkv_cross_entropy(c, x, y, -100, 0.3, (qkv_reduction)ri, &loss));
        int64_t n = qkv_tensor_numel(loss);
        float dl[3] = {1, 1, 1};
        CHECK_OK(qkv_backward(c, loss, n == 1 ? NULL : dl));
        float zero[12] = {0};
        int ok = 1;
        for (int64_t i = 0; i < n; i++) ok &= loss->data[i] == 0.0f;
        CHECK(ok && !memcmp(x->grad, zero, sizeof zero),
              "all-ignored cross entropy (reduction %d): loss %g, want 0 and zero gradient", ri,
              loss->data[0]);
        qkv_ctx_free(c);
    }
}

/* An empty batch: MEAN gives 0 (PyTorch: NaN), SUM 0, NONE an empty loss. */
static void test_empty_batch(qkv_arena *A, qkv_rng *r)
{
    for (int ri = 0; ri < 3; ri++) {
        qkv_ctx *c;
        CHECK_OK(qkv_ctx_new(&c));
        qkv_tensor *x = h_input(A, r, 2, (int64_t[]){0, 5}, 1), *y, *loss = NULL;
        CHECK_OK(qkv_tensor_new(A, QKV_I64, 1, (int64_t[]){0}, &y));
        CHECK_OK(qkv_cross_entropy(c, x, y, -100, 0.1, (qkv_reduction)ri, &loss));
        int64_t n = loss ? qkv_tensor_numel(loss) : -1;
        CHECK(loss && (ri == 2 ? n == 0 : n == 1 && loss->data[0] == 0.0f),
              "empty batch cross entropy (reduction %d): %lld elements", ri, (long long)n);
        if (loss && n == 1) CHECK_OK(qkv_backward(c, loss, NULL));
        qkv_ctx_free(c);
    }
}

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
    qkv_optim_opts o = qkv_optim_sgd_default(meta_dbl(st, "lr"));
    if (kind && !strcmp(kind, "adam")) o = qkv_optim_adam_default();
    if (kind && !strcmp(kind, "adamw")) o = qkv_optim_adamw_default();
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
    char dir[] = "/tmp/qkv_train_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp failed");
        return;
    }
    char cmd[256], path[512];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/train_oracle.py --out %s --seed 1", dir);
    int rc = system(cmd);
    CHECK(rc == 0, "the PyTorch oracle failed (exit %d): %s", rc, cmd);
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
    CHECK(n_loss >= 90 && n_optim == 12, "parity ran %d loss cases and %d optimizer runs", n_loss,
          n_optim);
    printf("PyTorch parity: %d loss cases (worst forward %.3g, gradient %.3g), %d optimizer runs "
           "(worst parameter %.3g, total norm %.3g), schedules (worst %.3g)\n",
           n_loss, worst_loss_fwd, worst_loss_grad, n_optim, worst_optim, worst_norm, worst_sched);
}

/* ---- checkpoints ------------------------------------------------------------- */

/* A small classifier: y = x W^T + b over 6 features and 4 classes. */
static void model_make(qkv_params **p, uint64_t seed)
{
    qkv_rng r;
    qkv_rng_seed(&r, seed);
    qkv_tensor *w, *b;
    CHECK_OK(qkv_params_new(p));
    CHECK_OK(qkv_params_add(*p, "head.", "weight", 2, (int64_t[]){4, 6}, &w));
    CHECK_OK(qkv_params_add(*p, "head.", "bias", 1, (int64_t[]){4}, &b));
    CHECK_OK(qkv_init_linear_default(&r, w));
    CHECK_OK(qkv_init_uniform(&r, b, -0.4f, 0.4f));
}

/* Training steps that draw their batches from data; pos counts them. */
static void train(qkv_ctx *c, qkv_params *p, qkv_optim *o, qkv_rng *data, qkv_train_pos *pos,
                  int steps, const qkv_schedule *sc)
{
    qkv_arena *A = qkv_ctx_arena(c);
    qkv_tensor *w = qkv_params_find(p, "head.weight"), *b = qkv_params_find(p, "head.bias");
    for (int s = 0; s < steps; s++) {
        qkv_ctx_reset(c);
        qkv_tensor *x, *y, *logits, *loss;
        CHECK_OK(qkv_tensor_new(A, QKV_F32, 2, (int64_t[]){8, 6}, &x));
        CHECK_OK(qkv_tensor_new(A, QKV_I64, 1, (int64_t[]){8}, &y));
        qkv_rng_fill_normal(data, x->data, 48, 0, 1);
        for (int i = 0; i < 8; i++) y->idx[i] = (int64_t)(qkv_rng_next(data) % 4);
        CHECK_OK(qkv_linear(c, x, w, b, &logits));
        CHECK_OK(qkv_cross_entropy(c, logits, y, -100, 0.1, QKV_REDUCTION_MEAN, &loss));
        CHECK_OK(qkv_backward(c, loss, NULL));
        CHECK_OK(qkv_clip_grad_norm(p, 0.5f, NULL));
        CHECK_OK(qkv_optim_set_lr(o, qkv_schedule_lr_at(sc, pos->step)));
        CHECK_OK(qkv_optim_step(o));
        qkv_params_zero_grad(p);
        pos->step++;
        pos->batch = pos->step % 5;
        pos->epoch = pos->step / 5;
    }
}

/* Byte-for-byte equality of two checkpoint files' tensors and metadata. */
static int same_files(const char *a, const char *b)
{
    qkv_safetensors *sa = NULL, *sb = NULL;
    int same = qkv_safetensors_open(a, &sa) == QKV_OK && qkv_safetensors_open(b, &sb) == QKV_OK &&
               qkv_safetensors_count(sa) == qkv_safetensors_count(sb);
    for (int i = 0; same && i < qkv_safetensors_count(sa); i++) {
        const char *name = qkv_safetensors_name(sa, i);
        const void *da, *db;
        size_t na, nb;
        same = qkv_safetensors_info(sa, name, NULL, NULL, NULL, &da, &na) == QKV_OK &&
               qkv_safetensors_info(sb, name, NULL, NULL, NULL, &db, &nb) == QKV_OK && na == nb &&
               !memcmp(da, db, na);
        if (!same) fprintf(stderr, "  checkpoint tensor %s differs\n", name);
    }
    const char *keys[] = {"optim.kind", "optim.step", "optim.lr", "optim.weight_decay",
                          "optim.beta1", "optim.amsgrad", "optim.momentum", "train.step",
                          "train.user3", "rng.s0", "rng.s3", "checksum"};
    for (int i = 0; same && i < (int)(sizeof keys / sizeof keys[0]); i++) {
        const char *va = qkv_safetensors_meta(sa, keys[i]), *vb = qkv_safetensors_meta(sb, keys[i]);
        same = (!va && !vb) || (va && vb && !strcmp(va, vb));
        if (!same) fprintf(stderr, "  checkpoint metadata %s differs\n", keys[i]);
    }
    qkv_safetensors_close(sa);
    qkv_safetensors_close(sb);
    return same;
}

/* N steps, save, load into a fresh store and optimizer, M more: equal bit
 * for bit to N + M steps straight. */
static void test_resume(const char *dir, qkv_optim_opts oo, const char *label)
{
    const int N = 7, M = 6;
    char ck[512], a_end[512], b_end[512];
    snprintf(ck, sizeof ck, "%s/resume.safetensors", dir);
    snprintf(a_end, sizeof a_end, "%s/a_end.safetensors", dir);
    snprintf(b_end, sizeof b_end, "%s/b_end.safetensors", dir);
    qkv_schedule sc = qkv_schedule_default(oo.lr);
    sc.warmup_steps = 3;
    sc.decay = QKV_SCHEDULE_COSINE;
    sc.total_steps = 11;
    sc.min_lr = oo.lr / 10;
    qkv_ctx *c;
    qkv_ctx_new(&c);

    qkv_params *pa;
    qkv_optim *oa = NULL;
    qkv_rng da;
    qkv_train_pos pos_a = {0};
    pos_a.user[2] = 42;
    model_make(&pa, 1);
    qkv_rng_seed(&da, 99);
    CHECK_OK(qkv_optim_new(&oa, pa, &oo));
    train(c, pa, oa, &da, &pos_a, N, &sc);
    CHECK_OK(qkv_checkpoint_save(ck, pa, oa, &pos_a, &da));
    train(c, pa, oa, &da, &pos_a, M, &sc);

    qkv_params *pb;
    qkv_optim *ob = NULL;
    qkv_rng db;
    qkv_train_pos pos_b = {0};
    model_make(&pb, 2); /* other weights: the load must replace them */
    qkv_rng_seed(&db, 7);
    qkv_optim_opts other = oo;
    other.lr *= 3;
    other.weight_decay = 0.5;
    CHECK_OK(qkv_optim_new(&ob, pb, &other));
    CHECK_OK(qkv_checkpoint_load(ck, pb, ob, &pos_b, &db));
    CHECK(pos_b.step == N && pos_b.user[2] == 42 && qkv_optim_steps(ob) == N &&
              qkv_optim_get_lr(ob) == qkv_schedule_lr_at(&sc, N - 1),
          "%s: restored position step %lld user[2] %lld, optimizer steps %lld lr %g", label,
          (long long)pos_b.step, (long long)pos_b.user[2], (long long)qkv_optim_steps(ob),
          qkv_optim_get_lr(ob));
    train(c, pb, ob, &db, &pos_b, M, &sc);

    int same = !memcmp(&pos_a, &pos_b, sizeof pos_a) && !memcmp(&da, &db, sizeof da);
    for (int i = 0; i < qkv_params_count(pa); i++) {
        qkv_tensor *ta = qkv_params_at(pa, i), *tb = qkv_params_at(pb, i);
        same &= !memcmp(ta->data, tb->data, (size_t)qkv_tensor_numel(ta) * sizeof(float));
    }
    CHECK(same, "%s: resumed run differs from the straight one (parameters, position or RNG)", label);
    CHECK_OK(qkv_checkpoint_save(a_end, pa, oa, &pos_a, &da));
    CHECK_OK(qkv_checkpoint_save(b_end, pb, ob, &pos_b, &db));
    CHECK(same_files(a_end, b_end), "%s: resumed optimizer state differs from the straight run's",
          label);
    unlink(ck);
    unlink(a_end);
    unlink(b_end);
    qkv_optim_free(oa);
    qkv_optim_free(ob);
    qkv_params_free(pa);
    qkv_params_free(pb);
    qkv_ctx_free(c);
}

/* A copy of every parameter's elements, to check that nothing changed. */
static float *snapshot(qkv_params *p)
{
    float *s = malloc((size_t)qkv_params_numel(p) * sizeof *s), *at = s;
    for (int i = 0; s && i < qkv_params_count(p); i++) {
        qkv_tensor *t = qkv_params_at(p, i);
        memcpy(at, t->data, (size_t)qkv_tensor_numel(t) * sizeof *at);
        at += qkv_tensor_numel(t);
    }
    return s;
}

static int unchanged(qkv_params *p, const float *s)
{
    for (int i = 0; i < qkv_params_count(p); i++) {
        qkv_tensor *t = qkv_params_at(p, i);
        if (memcmp(s, t->data, (size_t)qkv_tensor_numel(t) * sizeof *s)) return 0;
        s += qkv_tensor_numel(t);
    }
    return 1;
}

static int write_bytes(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(b, 1, n, f) == n;
    return (fclose(f) == 0) && ok;
}

static void *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *b = malloc(len > 0 ? (size_t)len : 1);
    *n = b && len > 0 ? fread(b, 1, (size_t)len, f) : 0;
    fclose(f);
    return b;
}

static char g_dir[64]; /* the test's temporary directory */

/* The optimizer's state and hyper-parameters as a checkpoint file (of its
 * own store), for comparisons. */
static void optim_state_file(qkv_params *p, qkv_optim *o, const char *name, char *path)
{
    snprintf(path, 600, "%s/%s.safetensors", g_dir, name);
    CHECK_OK(qkv_checkpoint_save(path, p, o, NULL, NULL));
}

/* A failed load leaves the store, optimizer (state, step and
 * hyper-parameters), position and RNG as they were. */
#define LOAD_FAILS(path, p, o, pos, rng, want, needle)                                    \
    do {                                                                                   \
        float *snap_ = snapshot(p);                                                        \
        char before_[600], after_[600];                                                    \
        if (o) optim_state_file(p, o, "before", before_);           \
        qkv_train_pos pos0_ = *(pos);                                                      \
        qkv_rng rng0_ = *(rng);                                                            \
        CHECK_ERR(qkv_checkpoint_load(path, p, o, pos, rng), want, needle);                \
        if (o) optim_state_file(p, o, "after", after_);             \
        CHECK(unchanged(p, snap_) && (!(o) || same_files(before_, after_)) &&              \
                  !memcmp(&pos0_, pos, sizeof pos0_) && !memcmp(&rng0_, rng, sizeof rng0_), \
              "a failed load (%s) changed the store, optimizer, position or RNG", needle); \
        if (o) {                                                                           \
            unlink(before_);                                                               \
            unlink(after_);                                                                \
        }                                                                                  \
        free(snap_);                                                                       \
    } while (0)

static void test_checkpoint(const char *dir)
{
    char ck[512], bad[512];
    snprintf(ck, sizeof ck, "%s/ck.safetensors", dir);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
    qkv_params *p, *q;
    model_make(&p, 3);
    model_make(&q, 4);
    qkv_optim_opts oo = qkv_optim_adam_default();
    oo.amsgrad = 1;
    qkv_optim *o = NULL, *oq = NULL;
    CHECK_OK(qkv_optim_new(&o, p, &oo));
    CHECK_OK(qkv_optim_new(&oq, q, &oo));
    for (int i = 0; i < qkv_params_count(p); i++) {
        qkv_tensor *t = qkv_params_at(p, i);
        for (int64_t j = 0; j < qkv_tensor_numel(t); j++) t->grad[j] = 0.1f * (float)(j + i);
    }
    CHECK_OK(qkv_optim_step(o));
    CHECK_OK(qkv_optim_step(o));
    qkv_train_pos pos = {5, 2, 1, {7, 8, 9, -10}}, pos2 = {0};
    qkv_rng r, r2;
    qkv_rng_seed(&r, 11);
    qkv_rng_seed(&r2, 12);
    CHECK_OK(qkv_checkpoint_save(ck, p, o, &pos, &r));
    /* Round trip into another store of the same model. */
    CHECK_OK(qkv_checkpoint_load(ck, q, oq, &pos2, &r2));
    CHECK(!memcmp(&pos, &pos2, sizeof pos) && !memcmp(&r, &r2, sizeof r) &&
              qkv_optim_steps(oq) == 2,
          "checkpoint round trip: position, RNG or optimizer step differs");
    float *snap = snapshot(p);
    CHECK(unchanged(q, snap), "checkpoint round trip: parameters differ");
    free(snap);
    /* Parameters only, into a store without an optimizer. */
    qkv_params *q2;
    model_make(&q2, 5);
    CHECK_OK(qkv_checkpoint_load(ck, q2, NULL, NULL, NULL));
    snap = snapshot(p);
    CHECK(unchanged(q2, snap), "parameters-only load differs");
    free(snap);
    qkv_params_free(q2);

    /* A checkpoint of another model: a shape, a missing and an extra name. */
    qkv_params *m1, *m2, *m3;
    qkv_tensor *t;
    qkv_params_new(&m1);
    qkv_params_add(m1, "head.", "weight", 2, (int64_t[]){5, 6}, &t);
    qkv_params_add(m1, "head.", "bias", 1, (int64_t[]){4}, &t);
    qkv_rng_fill_uniform(&r, qkv_params_at(m1, 0)->data, 30, -1, 1);
    qkv_train_pos pz = {0};
    qkv_rng rz = r;
    LOAD_FAILS(ck, m1, NULL, &pz, &rz, QKV_ERR_SHAPE,
               "'param/head.weight' is (4,6) in the checkpoint, (5,6) in the store");
    qkv_params_new(&m2);
    qkv_params_add(m2, "head.", "weight", 2, (int64_t[]){4, 6}, &t);
    LOAD_FAILS(ck, m2, NULL, &pz, &rz, QKV_ERR_ARG, "parameter 'head.bias', which the store lacks");
    qkv_params_new(&m3);
    qkv_params_add(m3, "head.", "weight", 2, (int64_t[]){4, 6}, &t);
    qkv_params_add(m3, "head.", "bias", 1, (int64_t[]){4}, &t);
    qkv_params_add(m3, "", "extra", 1, (int64_t[]){4}, &t);
    LOAD_FAILS(ck, m3, NULL, &pz, &rz, QKV_ERR_ARG, "'param/extra' is missing");
    qkv_params_free(m1);
    qkv_params_free(m2);
    qkv_params_free(m3);

    /* Another optimizer kind, or amsgrad off: refused, nothing changed. */
    qkv_optim *osgd = NULL, *oplain = NULL;
    qkv_optim_opts sgd = qkv_optim_sgd_default(0.1), plain = qkv_optim_adam_default();
    sgd.momentum = 0.9;
    CHECK_OK(qkv_optim_new(&osgd, q, &sgd));
    CHECK_OK(qkv_optim_new(&oplain, q, &plain));
    LOAD_FAILS(ck, q, osgd, &pz, &rz, QKV_ERR_ARG, "optimizer is adam, this one is sgd");
    LOAD_FAILS(ck, q, oplain, &pz, &rz, QKV_ERR_ARG, "3 state buffers per parameter");
    CHECK_ERR(qkv_checkpoint_load(ck, p, oq, NULL, NULL), QKV_ERR_ARG, "another parameter store");
    qkv_optim_free(osgd);
    qkv_optim_free(oplain);

    /* Truncated and corrupt files. */
    size_t n = 0;
    uint8_t *bytes = read_bytes(ck, &n);
    CHECK(bytes && n > 100, "cannot read back %s", ck);
    if (bytes && n > 100) {
        CHECK(write_bytes(bad, bytes, n / 2), "cannot write %s", bad);
        LOAD_FAILS(bad, q, oq, &pz, &rz, QKV_ERR_FORMAT, "safetensors_open");
        CHECK(write_bytes(bad, bytes, 5), "cannot write %s", bad);
        LOAD_FAILS(bad, q, oq, &pz, &rz, QKV_ERR_FORMAT, "safetensors_open");
        bytes[n - 3] ^= 0x40; /* a flipped bit in the optimizer state or a parameter */
        CHECK(write_bytes(bad, bytes, n), "cannot write %s", bad);
        LOAD_FAILS(bad, q, oq, &pz, &rz, QKV_ERR_FORMAT, "the file is corrupt");
        bytes[n - 3] ^= 0x40;
        bytes[8] = '#'; /* the JSON header's opening brace */
        CHECK(write_bytes(bad, bytes, n), "cannot write %s", bad);
        LOAD_FAILS(bad, q, oq, &pz, &rz, QKV_ERR_FORMAT, "safetensors_open");
    }
    free(bytes);
    LOAD_FAILS("/nonexistent/dir/ck.safetensors", q, oq, &pz, &rz, QKV_ERR_IO, "nonexistent");
    /* A safetensors file that is not a checkpoint; one without RNG state. */
    const qkv_tensor *w0 = qkv_params_at(p, 0);
    const char *nm = "param/head.weight";
    CHECK_OK(qkv_safetensors_save(bad, 1, &nm, &w0, 0, NULL, NULL));
    LOAD_FAILS(bad, q, oq, &pz, &rz, QKV_ERR_FORMAT, "not a qkv checkpoint");
    CHECK_OK(qkv_checkpoint_save(bad, p, o, NULL, NULL));
    LOAD_FAILS(bad, q, oq, &pz, &rz, QKV_ERR_FORMAT, "'train.step' is missing");
    CHECK_ERR(qkv_checkpoint_load(bad, q, oq, NULL, &rz), QKV_ERR_FORMAT, "'rng.s0' is missing");
    CHECK_OK(qkv_checkpoint_load(bad, q, oq, NULL, NULL)); /* what the file has */
    CHECK_OK(qkv_checkpoint_save(bad, p, NULL, &pos, &r));
    LOAD_FAILS(bad, q, oq, &pz, &rz, QKV_ERR_FORMAT, "'optim.kind' is missing");

    /* Arguments. */
    CHECK_ERR(qkv_checkpoint_save(NULL, p, o, NULL, NULL), QKV_ERR_ARG, "path is NULL");
    CHECK_ERR(qkv_checkpoint_save(ck, NULL, o, NULL, NULL), QKV_ERR_ARG, "params is NULL");
    CHECK_ERR(qkv_checkpoint_save(ck, q, o, NULL, NULL), QKV_ERR_ARG, "another parameter store");
    CHECK_ERR(qkv_checkpoint_save("/nonexistent/dir/x.safetensors", p, o, NULL, NULL), QKV_ERR_IO,
              "cannot create");
    CHECK_ERR(qkv_checkpoint_load(NULL, p, o, NULL, NULL), QKV_ERR_ARG, "path is NULL");
    CHECK_ERR(qkv_checkpoint_load(ck, NULL, o, NULL, NULL), QKV_ERR_ARG, "params is NULL");
    unlink(ck);
    unlink(bad);
    qkv_optim_free(o);
    qkv_optim_free(oq);
    qkv_params_free(p);
    qkv_params_free(q);
}

/* ---- bad input ------------------------------------------------------------------- */

static void test_bad_losses(qkv_arena *A, qkv_rng *r)
{
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_tensor *x = h_input(A, r, 2, (int64_t[]){3, 5}, 1), *t = h_input(A, r, 2, (int64_t[]){3, 5}, 1);
    qkv_tensor *t2 = h_input(A, r, 2, (int64_t[]){5, 3}, 1), *loss = (qkv_tensor *)1;
    const qkv_reduction M = QKV_REDUCTION_MEAN;
    CHECK_ERR(qkv_mse_loss(c, x, t, M, NULL), QKV_ERR_ARG, "loss is NULL");
    CHECK_ERR(qkv_mse_loss(NULL, x, t, M, &loss), QKV_ERR_ARG, "ctx is NULL");
    CHECK(loss == NULL, "mse_loss: *loss not cleared on error");
    CHECK_ERR(qkv_mse_loss(c, NULL, t, M, &loss), QKV_ERR_ARG, "input is NULL");
    CHECK_ERR(qkv_mse_loss(c, x, NULL, M, &loss), QKV_ERR_ARG, "target is NULL");
    CHECK_ERR(qkv_mse_loss(c, x, t2, M, &loss), QKV_ERR_SHAPE, "target (5,3), expected the shape of input (3,5)");
    CHECK_ERR(qkv_mse_loss(c, x, t, (qkv_reduction)7, &loss), QKV_ERR_ARG, "reduction 7");
    int64_t lab[3] = {0, 4, 2}, lab2[6] = {0};
    qkv_tensor *y, *y_bad, *y23;
    qkv_tensor_wrap_i64(A, lab, 1, (int64_t[]){3}, &y);
    qkv_tensor_wrap_i64(A, lab2, 1, (int64_t[]){4}, &y_bad);
    qkv_tensor_wrap_i64(A, lab2, 2, (int64_t[]){2, 3}, &y23);
    CHECK_ERR(qkv_mse_loss(c, x, y, M, &loss), QKV_ERR_DTYPE, "must be F32");
    CHECK_ERR(qkv_cross_entropy(c, x, y, -100, 0, M, NULL), QKV_ERR_ARG, "loss is NULL");
    CHECK_ERR(qkv_cross_entropy(NULL, x, y, -100, 0, M, &loss), QKV_ERR_ARG, "ctx is NULL");
    CHECK_ERR(qkv_cross_entropy(c, NULL, y, -100, 0, M, &loss), QKV_ERR_ARG, "logits is NULL");
    CHECK_ERR(qkv_cross_entropy(c, x, NULL, -100, 0, M, &loss), QKV_ERR_ARG, "target is NULL");
    CHECK_ERR(qkv_cross_entropy(c, x, t, -100, 0, M, &loss), QKV_ERR_DTYPE, "target must be QKV_I64");
    CHECK_ERR(qkv_cross_entropy(c, y, y, -100, 0, M, &loss), QKV_ERR_DTYPE, "logits must be F32");
    CHECK_ERR(qkv_cross_entropy(c, x, y_bad, -100, 0, M, &loss), QKV_ERR_SHAPE, "logits (3,5) and target (4,)");
    CHECK_ERR(qkv_cross_entropy(c, x, y23, -100, 0, M, &loss), QKV_ERR_SHAPE, "target (2,3)");
    CHECK_ERR(qkv_cross_entropy(c, x, y, -100, -0.1, M, &loss), QKV_ERR_ARG, "label_smoothing -0.1");
    CHECK_ERR(qkv_cross_entropy(c, x, y, -100, 1.5, M, &loss), QKV_ERR_ARG, "label_smoothing 1.5");
    CHECK_ERR(qkv_cross_entropy(c, x, y, -100, NAN, M, &loss), QKV_ERR_ARG, "label_smoothing nan");
    CHECK_ERR(qkv_cross_entropy(c, x, y, -100, 0, (qkv_reduction)-1, &loss), QKV_ERR_ARG, "reduction -1");
    lab[1] = 5;
    CHECK_ERR(qkv_cross_entropy(c, x, y, -100, 0, M, &loss), QKV_ERR_ARG,
              "target[1] = 5 is not a class in [0,5) nor ignore_index -100");
    lab[1] = -1;
    CHECK_ERR(qkv_cross_entropy(c, x, y, -100, 0, M, &loss), QKV_ERR_ARG, "target[1] = -1");
    CHECK_OK(qkv_cross_entropy(c, x, y, -1, 0, M, &loss)); /* now it is the ignore_index */
    /* (N,C,d1): the position is named in full. */
    qkv_tensor *x3 = h_input(A, r, 3, (int64_t[]){2, 3, 3}, 1);
    lab2[4] = 3;
    CHECK_ERR(qkv_cross_entropy(c, x3, y23, -100, 0, M, &loss), QKV_ERR_ARG, "target[1][1] = 3");
    lab2[4] = 0;
    qkv_tensor *x0 = h_input(A, r, 2, (int64_t[]){2, 0}, 1);
    qkv_tensor *y2;
    qkv_tensor_wrap_i64(A, lab2, 1, (int64_t[]){2}, &y2);
    CHECK_ERR(qkv_cross_entropy(c, x0, y2, -100, 0, M, &loss), QKV_ERR_SHAPE, "has no classes");
    qkv_ctx_free(c);
}

static void test_bad_optim(void)
{
    qkv_params *p, *empty;
    model_make(&p, 1);
    qkv_params_new(&empty);
    qkv_optim *o = (qkv_optim *)1;
    qkv_optim_opts a = qkv_optim_adam_default(), s = qkv_optim_sgd_default(0.1);
    CHECK_ERR(qkv_optim_new(NULL, p, &a), QKV_ERR_ARG, "out is NULL");
    CHECK_ERR(qkv_optim_new(&o, NULL, &a), QKV_ERR_ARG, "params is NULL");
    CHECK(o == NULL, "optim_new: *out not cleared on error");
    CHECK_ERR(qkv_optim_new(&o, p, NULL), QKV_ERR_ARG, "opts is NULL");
    CHECK_ERR(qkv_optim_new(&o, empty, &a), QKV_ERR_ARG, "store is empty");
    typedef struct {
        qkv_optim_opts o;
        const char *needle;
    } bad_opts;
    bad_opts bad[16];
    int nb = 0;
#define BAD(base, field, value, msg)                                                     \
    do {                                                                                 \
        bad[nb].o = base;                                                                \
        bad[nb].o.field = value;                                                         \
        bad[nb++].needle = msg;                                                          \
    } while (0)
    BAD(a, lr, -1e-3, "learning rate -0.001");
    BAD(a, lr, NAN, "learning rate nan");
    BAD(a, beta1, 1.0, "beta1 1 outside [0,1)");
    BAD(a, beta2, -0.1, "beta2 -0.1 outside [0,1)");
    BAD(a, eps, -1e-8, "eps -1e-08");
    BAD(a, weight_decay, -0.1, "weight_decay -0.1");
    BAD(a, kind, (qkv_optim_kind)9, "kind 9");
    BAD(s, lr, -0.1, "learning rate -0.1");
    BAD(s, momentum, -0.5, "momentum -0.5");
    BAD(s, nesterov, 1, "nesterov needs momentum > 0 and dampening 0");
    BAD(s, weight_decay, INFINITY, "weight_decay inf");
    bad[nb] = (bad_opts){s, "nesterov needs"};
    bad[nb].o.momentum = 0.9;
    bad[nb].o.dampening = 0.1;
    bad[nb++].o.nesterov = 1;
    BAD(qkv_optim_adamw_default(), beta1, NAN, "beta1 nan");
#undef BAD
    for (int i = 0; i < nb; i++) CHECK_ERR(qkv_optim_new(&o, p, &bad[i].o), QKV_ERR_ARG, bad[i].needle);
    CHECK_OK(qkv_optim_new(&o, p, &a));
    CHECK_ERR(qkv_optim_set_lr(o, -1), QKV_ERR_ARG, "learning rate -1");
    CHECK_ERR(qkv_optim_set_lr(NULL, 1), QKV_ERR_ARG, "optim is NULL");
    CHECK(qkv_optim_get_lr(o) == 1e-3 && isnan(qkv_optim_get_lr(NULL)), "optim_get_lr");
    qkv_optim_opts got;
    CHECK_ERR(qkv_optim_get_opts(NULL, &got), QKV_ERR_ARG, "optim is NULL");
    CHECK_ERR(qkv_optim_get_opts(o, NULL), QKV_ERR_ARG, "opts is NULL");
    CHECK_ERR(qkv_optim_step(NULL), QKV_ERR_ARG, "optim is NULL");
    CHECK(qkv_optim_steps(o) == 0 && qkv_optim_steps(NULL) == 0, "optim_steps");
    qkv_tensor *t;
    qkv_params_add(p, "", "late", 1, (int64_t[]){2}, &t);
    CHECK_ERR(qkv_optim_step(o), QKV_ERR_STATE, "the store has 3 parameters, the optimizer was made for 2");
    CHECK_ERR(qkv_clip_grad_norm(NULL, 1, NULL), QKV_ERR_ARG, "params is NULL");
    CHECK_ERR(qkv_clip_grad_norm(p, -1, NULL), QKV_ERR_ARG, "max_norm -1");
    CHECK_ERR(qkv_clip_grad_norm(p, NAN, NULL), QKV_ERR_ARG, "max_norm nan");
    qkv_optim_free(o);
    qkv_optim_free(NULL);
    qkv_params_free(p);
    qkv_params_free(empty);
}

static void test_bad_schedule(void)
{
    qkv_schedule ok = qkv_schedule_default(0.1);
    ok.warmup_steps = 5;
    ok.decay = QKV_SCHEDULE_COSINE;
    ok.total_steps = 20;
    CHECK_OK(qkv_schedule_check(&ok));
    struct {
        qkv_schedule s;
        const char *needle;
    } bad[7];
    for (int i = 0; i < 7; i++) bad[i].s = ok;
    bad[0].s.base_lr = -1;
    bad[0].needle = "base_lr -1";
    bad[1].s.warmup_steps = -2;
    bad[1].needle = "warmup_steps -2";
    bad[2].s.warmup_start_factor = 1.5;
    bad[2].needle = "warmup_start_factor 1.5";
    bad[3].s.decay = (qkv_schedule_decay)5;
    bad[3].needle = "decay 5";
    bad[4].s.total_steps = 5;
    bad[4].needle = "total_steps 5, expected more than warmup_steps 5";
    bad[5].s.min_lr = -0.01;
    bad[5].needle = "min_lr -0.01";
    bad[6].s.base_lr = NAN;
    bad[6].needle = "base_lr nan";
    for (int i = 0; i < 7; i++) {
        CHECK_ERR(qkv_schedule_check(&bad[i].s), QKV_ERR_ARG, bad[i].needle);
        CHECK(isnan(qkv_schedule_lr_at(&bad[i].s, 3)), "lr_at of an invalid schedule (%s) is not NaN",
              bad[i].needle);
    }
    CHECK_ERR(qkv_schedule_check(NULL), QKV_ERR_ARG, "schedule is NULL");
    CHECK(isnan(qkv_schedule_lr_at(NULL, 0)) && isnan(qkv_schedule_lr_at(&ok, -1)),
          "lr_at(NULL) and lr_at(step -1) must be NaN");
    /* Values at the seams: warm-up from 0, base at W, min_lr from total on. */
    CHECK(qkv_schedule_lr_at(&ok, 0) == 0 && qkv_schedule_lr_at(&ok, 5) == 0.1 &&
              qkv_schedule_lr_at(&ok, 20) == 0 && qkv_schedule_lr_at(&ok, 1000) == 0,
          "schedule seams: %g %g %g", qkv_schedule_lr_at(&ok, 0), qkv_schedule_lr_at(&ok, 5),
          qkv_schedule_lr_at(&ok, 20));
}

int main(void)
{
    qkv_arena *A;
    qkv_arena_new(&A, 0);
    qkv_rng r;
    qkv_rng_seed(&r, 2024);
    test_gradcheck(A, &r);
    test_all_ignored(A, &r);
    test_empty_batch(A, &r);
    test_parity();
    char dir[] = "/tmp/qkv_ckpt_XXXXXX";
    if (mkdtemp(dir)) {
        snprintf(g_dir, sizeof g_dir, "%s", dir);
        qkv_optim_opts adamw = qkv_optim_adamw_default();
        adamw.lr = 0.05;
        adamw.amsgrad = 1;
        test_resume(dir, adamw, "AdamW (amsgrad)");
        qkv_optim_opts sgd = qkv_optim_sgd_default(0.1);
        sgd.momentum = 0.9;
        sgd.nesterov = 1;
        sgd.weight_decay = 1e-3;
        test_resume(dir, sgd, "SGD (nesterov)");
        test_checkpoint(dir);
        rmdir(dir);
    } else {
        CHECK(0, "mkdtemp failed");
    }
    test_bad_losses(A, &r);
    test_bad_optim();
    test_bad_schedule();
    qkv_arena_free(A);
    return h_finish("test_train");
}
