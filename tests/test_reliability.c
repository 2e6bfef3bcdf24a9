#define _POSIX_C_SOURCE 200809L /* mkdtemp, symlink */
/* test_reliability.c: regression tests for issue 14's items 6-8
 * (docs/reliability.md):
 *  - silent wrong results: sampling from all -inf logits, initialisers'
 *    bounds, sinusoidal positions past 2^53, backward on a consumed or
 *    stale graph;
 *  - checkpoints: metadata inside the checksum (a one-digit change of any
 *    field is refused), strict numbers, range checks, no checkpoint with
 *    non-finite parameters is saved or named as resumable;
 *  - atomic saves never write through a symlink planted at a temporary
 *    name, and leave no temporary file behind on failure. */
#include <dirent.h>
#include <float.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"
#include "train_helpers.h"

static char g_dir[64];

static char *path_in(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", g_dir, name);
    return buf;
}

/* Entries of g_dir, "." and ".." excluded. */
static int dir_entries(void)
{
    DIR *d = opendir(g_dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

/* ---- item 6: silent wrong results ------------------------------------------ */

static void test_sampling(void)
{
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_generate_opts o = qkv_generate_opts_default();
    o.kind = QKV_DECODE_SAMPLE;
    float logits[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, probs[4];
    qkv_rng r;
    qkv_rng_seed(&r, 1);
    int64_t tok = 7;
    CHECK_ERR(qkv_sample_probs(c, logits, 4, &o, probs), QKV_ERR_ARG, "every logit is -inf");
    CHECK_ERR(qkv_sample_token(c, logits, 4, &o, &r, &tok), QKV_ERR_ARG, "every logit is -inf");
    CHECK(tok == 7, "sample_token wrote a token on error");
    o.top_k = 2;
    CHECK_ERR(qkv_sample_token(c, logits, 4, &o, &r, &tok), QKV_ERR_ARG, "every logit is -inf");
    logits[2] = NAN;
    CHECK_ERR(qkv_sample_token(c, logits, 4, &o, &r, &tok), QKV_ERR_ARG, "logits[2] is nan");
    /* One finite logit: it gets all the probability. */
    logits[2] = -1e30f;
    o.top_k = 0;
    CHECK_OK(qkv_sample_probs(c, logits, 4, &o, probs));
    CHECK(probs[2] == 1.0f && probs[0] == 0.0f, "probs %g %g", probs[2], probs[0]);
    qkv_ctx_free(c);
}

static void test_init(void)
{
    qkv_arena *a;
    qkv_tensor *t;
    qkv_rng r;
    qkv_rng_seed(&r, 3);
    CHECK_OK(qkv_arena_new(&a, 1 << 16));
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 2, (int64_t[]){3, 4}, &t));
    for (int i = 0; i < 12; i++) t->data[i] = 5.0f;
    CHECK_ERR(qkv_init_uniform(&r, t, 1, 0), QKV_ERR_ARG, "init_uniform: low 1 > high 0");
    CHECK_ERR(qkv_init_uniform(&r, t, NAN, 0), QKV_ERR_ARG, "must be finite");
    CHECK_ERR(qkv_init_uniform(&r, t, 0, INFINITY), QKV_ERR_ARG, "must be finite");
    CHECK_ERR(qkv_init_uniform(&r, t, -FLT_MAX, FLT_MAX), QKV_ERR_ARG, "high - low");
    CHECK_ERR(qkv_init_xavier_uniform(&r, t, NAN), QKV_ERR_ARG, "gain nan");
    CHECK_ERR(qkv_init_xavier_normal(&r, t, INFINITY), QKV_ERR_ARG, "gain inf");
    CHECK_ERR(qkv_init_xavier_uniform(&r, t, -1), QKV_ERR_ARG, "gain -1");
    CHECK_ERR(qkv_init_constant(t, NAN), QKV_ERR_ARG, "value nan");
    int same = 1;
    for (int i = 0; i < 12; i++) same &= t->data[i] == 5.0f;
    CHECK(same, "a refused initialiser changed the tensor");
    CHECK_OK(qkv_init_uniform(&r, t, 0.5f, 0.5f)); /* low == high is fine, as in PyTorch */
    CHECK(t->data[0] == 0.5f, "uniform(0.5, 0.5) gave %g", t->data[0]);
    /* A zero-sized fan: xavier's bound would be inf. */
    qkv_tensor *z;
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 2, (int64_t[]){0, 0}, &z));
    CHECK_OK(qkv_init_xavier_uniform(&r, z, 1)); /* nothing to fill, as PyTorch */
    qkv_arena_free(a);
}

static void test_sinusoidal(void)
{
    float pe[8];
    const int64_t lim = (int64_t)1 << 53;
    CHECK_ERR(qkv_sinusoidal_fill(INT64_MAX, 2, 4, pe), QKV_ERR_ARG, "2^53");
    CHECK_ERR(qkv_sinusoidal_fill(INT64_MAX - 1, 2, 4, pe), QKV_ERR_ARG, "2^53");
    CHECK_ERR(qkv_sinusoidal_fill(lim, 1, 4, pe), QKV_ERR_ARG, "2^53");
    CHECK_ERR(qkv_sinusoidal_fill(0, INT64_MAX, 4, pe), QKV_ERR_ARG, "2^53");
    CHECK_OK(qkv_sinusoidal_fill(lim - 2, 2, 4, pe)); /* the last positions held exactly */
    CHECK(isfinite(pe[0]) && isfinite(pe[7]), "sinusoidal at 2^53 - 1 is not finite");
}

static void test_backward_twice(void)
{
    qkv_params *p;
    qkv_ctx *c;
    model_make(&p, 1);
    CHECK_OK(qkv_ctx_new(&c));
    qkv_arena *A = qkv_ctx_arena(c);
    qkv_tensor *w = qkv_params_find(p, "head.weight"), *b = qkv_params_find(p, "head.bias");
    qkv_tensor *x, *y, *loss, *loss2;
    CHECK_OK(qkv_tensor_new(A, QKV_F32, 2, (int64_t[]){2, 6}, &x));
    for (int i = 0; i < 12; i++) x->data[i] = 0.1f * (float)i;
    CHECK_OK(qkv_linear(c, x, w, b, &y));
    CHECK_OK(qkv_mse_loss(c, y, y, QKV_REDUCTION_SUM, &loss));
    CHECK_OK(qkv_backward(c, loss, NULL));
    CHECK_ERR(qkv_backward(c, loss, NULL), QKV_ERR_STATE, "backward through the graph a second time");
    /* The same after a reset: loss2's graph is gone. */
    CHECK_OK(qkv_linear(c, x, w, b, &y));
    CHECK_OK(qkv_mse_loss(c, y, y, QKV_REDUCTION_SUM, &loss2));
    qkv_ctx_reset(c);
    CHECK_ERR(qkv_backward(c, loss2, NULL), QKV_ERR_STATE, "qkv_ctx_reset");
    /* A fresh forward after a backward is fine; so is a parameter (a leaf). */
    CHECK_OK(qkv_tensor_new(A, QKV_F32, 2, (int64_t[]){2, 6}, &x));
    CHECK_OK(qkv_linear(c, x, w, b, &y));
    CHECK_OK(qkv_mse_loss(c, y, y, QKV_REDUCTION_SUM, &loss));
    CHECK_OK(qkv_backward(c, loss, NULL));
    float ones[4] = {1, 1, 1, 1};
    CHECK_OK(qkv_backward(c, b, ones));
    qkv_ctx_free(c);
    qkv_params_free(p);
}

/* ---- item 7: checkpoint metadata ------------------------------------------- */

/* dst: src's tensors and metadata with key set to val (the checksum kept). */
static int rewrite(const char *src, const char *dst, const char *key, const char *val)
{
    qkv_safetensors *st;
    if (qkv_safetensors_open(src, &st)) return 0;
    int n = qkv_safetensors_count(st), nm = qkv_safetensors_meta_count(st);
    const char *names[16], *keys[48], *vals[48];
    qkv_tensor ts[16];
    const qkv_tensor *tp[16];
    if (n > 16 || nm > 48) return 0;
    for (int i = 0; i < n; i++) {
        const void *data;
        qkv_st_dtype dt;
        names[i] = qkv_safetensors_name(st, i);
        ts[i] = (qkv_tensor){0};
        ts[i].dtype = QKV_F32;
        qkv_safetensors_info(st, names[i], &dt, &ts[i].ndim, ts[i].shape, &data, NULL);
        ts[i].data = (float *)data;
        tp[i] = &ts[i];
    }
    for (int i = 0; i < nm; i++) {
        keys[i] = qkv_safetensors_meta_key(st, i);
        vals[i] = strcmp(keys[i], key) ? qkv_safetensors_meta(st, keys[i]) : val;
    }
    int ok = qkv_safetensors_save(dst, n, names, tp, nm, keys, vals) == QKV_OK;
    qkv_safetensors_close(st);
    return ok;
}

static void test_checkpoint_meta(void)
{
    char ck[128], bad[128];
    path_in(ck, sizeof ck, "ck.safetensors");
    path_in(bad, sizeof bad, "bad.safetensors");
    qkv_params *p;
    qkv_optim *o;
    model_make(&p, 2);
    qkv_optim_opts ao = qkv_optim_adamw_opts_default();
    CHECK_OK(qkv_optim_new(&o, p, &ao));
    qkv_train_pos pos = {.step = 12, .epoch = 3, .batch = 4};
    qkv_rng r;
    qkv_rng_seed(&r, 9);
    CHECK_OK(qkv_checkpoint_save(ck, p, o, &pos, &r));
    CHECK_OK(qkv_checkpoint_load(ck, p, o, &pos, &r));
    /* The same file rewritten with the old checksum is still valid. */
    CHECK(rewrite(ck, bad, "nothing", ""), "rewrite failed");
    CHECK_OK(qkv_checkpoint_load(bad, p, o, &pos, &r));
    /* One digit changed in any field: refused by the checksum. */
    static const char *fields[][2] = {
        {"train.step", "13"},           {"train.epoch", "2"},       {"train.user1", "1"},
        {"optim.step", "1"},            {"optim.lr", "0.002"},      {"optim.beta2", "0.998"},
        {"optim.weight_decay", "0.02"}, {"rng.s0", NULL},           {"params", "3"},
        {"optim.kind", "adam"},
    };
    qkv_train_pos pz = {0};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
        char v[40];
        const char *val = fields[i][1];
        if (!val) { /* flip the rng word's first hex digit */
            snprintf(v, sizeof v, "%016llx", (unsigned long long)(r.s[0] ^ (1ull << 60)));
            val = v;
        }
        CHECK(rewrite(ck, bad, fields[i][0], val), "rewrite failed");
        qkv_status s = qkv_checkpoint_load(bad, p, o, &pz, &r);
        CHECK(s == QKV_ERR_FORMAT && strstr(qkv_last_error(), "checksum"),
              "%s = %s: %s \"%s\"", fields[i][0], val, qkv_status_name(s), qkv_last_error());
        CHECK(pz.step == 0, "a refused load changed the position");
    }
    /* A version-1 file (metadata outside the checksum) is refused by name. */
    CHECK(rewrite(ck, bad, "format_version", "1"), "rewrite failed");
    CHECK_ERR(qkv_checkpoint_load(bad, p, o, &pz, &r), QKV_ERR_FORMAT,
              "predates the metadata checksum");

    /* Non-canonical numbers and out-of-range fields, even with a right
     * checksum (written by qkv_checkpoint_save itself where it can be). */
    qkv_train_pos big = pos;
    big.step = INT64_MAX;
    CHECK_ERR(qkv_checkpoint_save(bad, p, o, &big, &r), QKV_ERR_ARG, "train.step");
    big = pos;
    big.epoch = -1;
    CHECK_ERR(qkv_checkpoint_save(bad, p, o, &big, &r), QKV_ERR_ARG, "train.epoch");

    /* Non-finite parameters: never saved, never loaded. */
    float keep = qkv_params_at(p, 1)->data[2];
    qkv_params_at(p, 1)->data[2] = NAN;
    unlink(bad);
    CHECK_ERR(qkv_checkpoint_save(bad, p, o, &pos, &r), QKV_ERR_ARG,
              "'head.bias' has a non-finite value (nan at element 2)");
    CHECK(access(bad, F_OK) != 0, "a refused save left a file");
    qkv_params_at(p, 1)->data[2] = keep;
    qkv_optim_free(o);
    qkv_params_free(p);
    unlink(ck);
    unlink(bad);
}

/* The loop: a step that makes a parameter infinite stops training with the
 * step and the last good checkpoint named; that checkpoint is unchanged. */
typedef struct {
    qkv_params *p;
    qkv_optim *o;
    int64_t blow_at;
} loop_data;

static qkv_status loop_batch(qkv_ctx *c, void *user, int64_t step, qkv_tensor **loss,
                             int64_t *units)
{
    loop_data *d = user;
    qkv_tensor *x, *y, *out;
    qkv_arena *A = qkv_ctx_arena(c);
    TRY(qkv_tensor_new(A, QKV_F32, 2, (int64_t[]){2, 6}, &x));
    TRY(qkv_tensor_new(A, QKV_F32, 2, (int64_t[]){2, 4}, &y));
    for (int i = 0; i < 12; i++) x->data[i] = 0.01f * (float)(i + step);
    TRY(qkv_linear(c, x, qkv_params_find(d->p, "head.weight"),
                       qkv_params_find(d->p, "head.bias"), &out));
    TRY(qkv_mse_loss(c, out, y, QKV_REDUCTION_MEAN, loss));
    /* A finite loss and gradient, but an update that overflows: the lr,
     * rounded to float in the update, is inf. */
    if (step == d->blow_at) TRY(qkv_optim_set_lr(d->o, 1e300));
    *units = 2;
    return QKV_OK;
}

static void test_loop_nonfinite(void)
{
    char ck[128];
    path_in(ck, sizeof ck, "loop.safetensors");
    qkv_params *p;
    qkv_optim *o;
    qkv_ctx *c;
    model_make(&p, 4);
    qkv_optim_opts so = qkv_optim_sgd_opts_default(0.1);
    so.momentum = 0.9;
    CHECK_OK(qkv_optim_new(&o, p, &so));
    CHECK_OK(qkv_ctx_new(&c));
    loop_data d = {p, o, 5};
    qkv_trainer t = {.params = p, .optim = o, .steps = 10, .checkpoint = ck,
                     .checkpoint_every = 2, .batch = loop_batch, .user = &d};
    qkv_train_pos pos = {0};
    CHECK_ERR(qkv_train(c, &t, &pos), QKV_ERR_STATE,
              "after the update at step 5: not saved");
    CHECK(strstr(qkv_last_error(), "at step 4, is kept") != NULL, "%s", qkv_last_error());
    CHECK(strstr(qkv_last_error(), "parameter 'head.") != NULL, "%s", qkv_last_error());
    qkv_train_pos back = {0};
    CHECK_OK(qkv_checkpoint_load(ck, p, o, &back, NULL));
    CHECK(back.step == 4, "the kept checkpoint is at step %lld", (long long)back.step);
    qkv_ctx_free(c);
    qkv_optim_free(o);
    qkv_params_free(p);
    unlink(ck);
}

/* ---- item 8: temporary files ----------------------------------------------- */

static void test_symlink_tmp(void)
{
    char target[128], out[128], link_at[160];
    path_in(target, sizeof target, "victim.txt");
    path_in(out, sizeof out, "out.safetensors");
    snprintf(link_at, sizeof link_at, "%s.tmp", out);
    FILE *f = fopen(target, "w");
    CHECK(f != NULL, "cannot create %s", target);
    if (!f) return;
    fputs("precious", f);
    fclose(f);
    CHECK(symlink(target, link_at) == 0, "cannot plant a symlink at %s", link_at);
    qkv_params *p;
    model_make(&p, 1);
    CHECK_OK(qkv_checkpoint_save(out, p, NULL, NULL, NULL));
    char buf[32] = {0};
    f = fopen(target, "r");
    CHECK(f && fread(buf, 1, sizeof buf - 1, f) == 8 && !strcmp(buf, "precious"),
          "the symlink's target was overwritten: '%.20s'", buf);
    if (f) fclose(f);
    struct stat sb;
    CHECK(lstat(link_at, &sb) == 0 && S_ISLNK(sb.st_mode), "the planted symlink was replaced");
    CHECK(lstat(out, &sb) == 0 && S_ISREG(sb.st_mode), "%s is not a regular file", out);
    CHECK_OK(qkv_checkpoint_load(out, p, NULL, NULL, NULL));
    /* Files written by a save are 0666 & ~umask, as fopen makes them. */
    mode_t um = umask(022);
    umask(um);
    CHECK(stat(out, &sb) == 0 && (sb.st_mode & 0777) == (0666 & ~um), "mode %o",
          (unsigned)(sb.st_mode & 0777));
    unlink(link_at);
    unlink(target);
    unlink(out);
    /* A save that fails at the rename (path is a directory) leaves no
     * temporary file. */
    char sub[128];
    path_in(sub, sizeof sub, "adir");
    CHECK(mkdir(sub, 0700) == 0, "mkdir %s", sub);
    int before = dir_entries();
    CHECK_ERR(qkv_checkpoint_save(sub, p, NULL, NULL, NULL), QKV_ERR_IO, "rename");
    CHECK(dir_entries() == before, "a failed save left %d files behind", dir_entries() - before);
    rmdir(sub);
    qkv_params_free(p);
}

int main(void)
{
    char dir[] = "/tmp/qkv_rel_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp failed");
        return h_finish("test_reliability");
    }
    snprintf(g_dir, sizeof g_dir, "%s", dir);
    test_sampling();
    test_init();
    test_sinusoidal();
    test_backward_twice();
    test_checkpoint_meta();
    test_loop_nonfinite();
    test_symlink_tmp();
    CHECK(dir_entries() == 0, "files left in %s", g_dir);
    rmdir(dir);
    return h_finish("test_reliability");
}
