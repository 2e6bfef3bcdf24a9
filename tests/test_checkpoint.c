#define _POSIX_C_SOURCE 200809L /* mkdtemp */
/* test_checkpoint.c: training checkpoints (include/qkv/train.h):
 *  - a run of N steps, saved, loaded into a fresh store and optimizer and
 *    continued for M steps, matches N + M steps straight bit for bit
 *    (parameters, optimizer state, position, RNG), with AdamW (amsgrad) and
 *    SGD (nesterov);
 *  - round trip, parameters-only load;
 *  - loads that must fail (another model's shapes and names, another
 *    optimizer kind, truncated and corrupt files, files that are not
 *    checkpoints, bad arguments), each leaving the store, optimizer,
 *    position and RNG unchanged. */
#include <stdint.h>
#include <unistd.h>
#include "harness.h"
#include "train_helpers.h"

/* ---- checkpoints ------------------------------------------------------------- */

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
    qkv_optim_opts oo = qkv_optim_adam_opts_default();
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
    qkv_optim_opts sgd = qkv_optim_sgd_opts_default(0.1), plain = qkv_optim_adam_opts_default();
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

int main(void)
{
    char dir[] = "/tmp/qkv_ckpt_XXXXXX";
    if (mkdtemp(dir)) {
        snprintf(g_dir, sizeof g_dir, "%s", dir);
        qkv_optim_opts adamw = qkv_optim_adamw_opts_default();
        adamw.lr = 0.05;
        adamw.amsgrad = 1;
        test_resume(dir, adamw, "AdamW (amsgrad)");
        qkv_optim_opts sgd = qkv_optim_sgd_opts_default(0.1);
        sgd.momentum = 0.9;
        sgd.nesterov = 1;
        sgd.weight_decay = 1e-3;
        test_resume(dir, sgd, "SGD (nesterov)");
        test_checkpoint(dir);
        rmdir(dir);
    } else {
        CHECK(0, "mkdtemp failed");
    }
    return h_finish("test_checkpoint");
}
