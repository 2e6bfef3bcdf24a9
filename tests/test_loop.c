/* test_loop.c: the training loop: resuming from a checkpoint gives the
 * same parameters bit for bit as training straight through; a NaN loss
 * stops training naming the step and leaves the last checkpoint as it was;
 * the after_step hook and the trainer's checkpoint metadata; progress
 * lines; bad input. */
#define _POSIX_C_SOURCE 200809L
#include <unistd.h>
#include "harness.h"

typedef struct {
    qkv_nn_linear l1, l2;
    qkv_nn_gelu act;
    qkv_sequential seq;
    int64_t nan_at; /* step whose loss is made NaN, or -1 */
} model;

static void model_init(model *m, qkv_params *p)
{
    qkv_rng r;
    qkv_rng_seed(&r, 5);
    qkv_nn_linear_init(&m->l1, 4, 16, 1, p, "0.", &r);
    qkv_nn_gelu_init(&m->act, "none");
    qkv_nn_linear_init(&m->l2, 16, 1, 1, p, "2.", &r);
    qkv_sequential_init(&m->seq);
    qkv_sequential_add(&m->seq, &m->l1.base);
    qkv_sequential_add(&m->seq, &m->act.base);
    qkv_sequential_add(&m->seq, &m->l2.base);
    m->nan_at = -1;
}

/* Batch of step s: 8 points of y = sin(sum x), drawn from a seed of s. */
static qkv_status batch(qkv_ctx *c, void *user, int64_t step, qkv_tensor **loss, int64_t *units)
{
    model *m = user;
    qkv_rng r;
    qkv_rng_seed(&r, 1000 + (uint64_t)step);
    qkv_tensor *x, *y, *t;
    qkv_status s = qkv_tensor_new(qkv_ctx_arena(c), QKV_F32, 2, (int64_t[]){8, 4}, &x);
    if (!s) s = qkv_tensor_new(qkv_ctx_arena(c), QKV_F32, 2, (int64_t[]){8, 1}, &t);
    if (s) return s;
    qkv_rng_fill_uniform(&r, x->data, 32, -1, 1);
    for (int i = 0; i < 8; i++)
        t->data[i] = sinf(x->data[4 * i] + x->data[4 * i + 1] + x->data[4 * i + 2] + x->data[4 * i + 3]);
    if (step == m->nan_at) t->data[3] = NAN;
    if ((s = qkv_module_forward(c, &m->seq.base, x, &y))) return s;
    *units = 8;
    return qkv_mse_loss(c, y, t, QKV_REDUCTION_MEAN, loss);
}

/* Trains a fresh model from `from` (a checkpoint, or NULL) up to `steps`;
 * copies the parameters out. */
static qkv_status run(const char *from, const char *ckpt, int64_t steps, int64_t nan_at,
                      float *params_out, FILE *progress)
{
    qkv_params *p;
    qkv_params_new(&p);
    model m;
    model_init(&m, p);
    m.nan_at = nan_at;
    qkv_optim *o;
    qkv_optim_opts oo = qkv_optim_adamw_opts_default();
    qkv_optim_new(&o, p, &oo);
    qkv_schedule sch = qkv_schedule_default(1e-2);
    sch.warmup_steps = 3;
    sch.decay = QKV_SCHEDULE_COSINE;
    sch.total_steps = 20;
    qkv_train_pos pos = {0};
    qkv_status s = from ? qkv_checkpoint_load(from, p, o, &pos, NULL) : QKV_OK;
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_trainer t = {.params = p, .optim = o, .schedule = &sch, .clip_norm = 1.0f, .steps = steps,
                     .checkpoint = ckpt, .checkpoint_every = 4, .progress = progress,
                     .batch = batch, .user = &m};
    if (!s) s = qkv_train(c, &t, &pos);
    int64_t k = 0;
    for (int i = 0; i < qkv_params_count(p); i++) {
        qkv_tensor *w = qkv_params_at(p, i);
        memcpy(params_out + k, w->data, (size_t)qkv_tensor_numel(w) * 4);
        k += qkv_tensor_numel(w);
    }
    qkv_ctx_free(c);
    qkv_optim_free(o);
    qkv_sequential_free(&m.seq);
    qkv_params_free(p);
    return s;
}

/* after_step: called once per step with the position reached, after the
 * step's checkpoint; an error from it stops training there. */
typedef struct {
    int64_t calls, last_step, stop_at;
    double last_loss;
} hook_log;

static hook_log the_log;

static qkv_status hook_count(qkv_ctx *c, void *user, const qkv_train_pos *pos, double loss)
{
    the_log.calls++;
    the_log.last_step = pos->step;
    the_log.last_loss = loss;
    return pos->step == the_log.stop_at ? QKV_ERR_STATE : QKV_OK;
}

static void test_hook_and_meta(const char *ck)
{
    qkv_params *p;
    qkv_params_new(&p);
    model m;
    model_init(&m, p);
    qkv_optim *o;
    qkv_optim_opts oo = qkv_optim_adamw_opts_default();
    qkv_optim_new(&o, p, &oo);
    qkv_ctx *c;
    qkv_ctx_new(&c);
    const char *keys[] = {"run.name"}, *vals[] = {"hook test"};
    qkv_checkpoint_meta meta = {1, keys, vals};
    qkv_trainer t = {.params = p, .optim = o, .steps = 6, .checkpoint = ck, .checkpoint_every = 2,
                     .batch = batch, .user = &m, .meta = &meta, .after_step = hook_count};
    qkv_train_pos pos = {0};
    the_log = (hook_log){.stop_at = 5};
    qkv_status s = qkv_train(c, &t, &pos);
    CHECK(s == QKV_ERR_STATE && pos.step == 5 && the_log.calls == 5 && the_log.last_step == 5 &&
              isfinite(the_log.last_loss) && the_log.last_loss > 0,
          "after_step: status %d, step %lld, %lld calls, last step %lld, loss %g", (int)s, (long long)pos.step,
          (long long)the_log.calls, (long long)the_log.last_step, the_log.last_loss);
    char *v = NULL;
    qkv_train_pos back = {0};
    CHECK_OK(qkv_checkpoint_read_meta(ck, "run.name", &v));
    CHECK(v && !strcmp(v, "hook test"), "the loop's checkpoint keeps the trainer's metadata: '%s'", v ? v : "");
    CHECK_OK(qkv_checkpoint_load(ck, p, o, &back, NULL));
    CHECK(back.step == 4, "the last checkpoint before the stop is step 4's (got %lld)", (long long)back.step);
    free(v);
    qkv_ctx_free(c);
    qkv_optim_free(o);
    qkv_sequential_free(&m.seq);
    qkv_params_free(p);
}

int main(void)
{
    char dir[] = "/tmp/qkv_loop_XXXXXX", ck[128], log[128];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(ck, sizeof ck, "%s/ck.safetensors", dir);
    snprintf(log, sizeof log, "%s/log.txt", dir);
    float straight[128] = {0}, resumed[128] = {0}, stopped[128] = {0}, saved[128] = {0};
    /* 20 steps straight; then 8 steps (checkpoint at 8), resume to 20. */
    CHECK_OK(run(NULL, NULL, 20, -1, straight, NULL));
    CHECK_OK(run(NULL, ck, 8, -1, saved, NULL));
    CHECK_OK(run(ck, NULL, 20, -1, resumed, NULL));
    CHECK(!memcmp(straight, resumed, sizeof straight), "8 steps + checkpoint + 12 resumed == 20 straight, bit for bit");
    CHECK(memcmp(straight, saved, sizeof straight) != 0, "and training changed the parameters");
    /* A NaN at step 10: stops with the step named, the checkpoint of step
     * 8 stays. */
    qkv_status s = run(NULL, ck, 20, 10, stopped, NULL);
    CHECK(s == QKV_ERR_STATE && strstr(qkv_last_error(), "loss is nan at step 10") &&
              strstr(qkv_last_error(), "at step 8, is kept"),
          "NaN loss: %s", qkv_last_error());
    qkv_params *p;
    qkv_params_new(&p);
    model m;
    model_init(&m, p);
    qkv_train_pos pos = {0};
    CHECK_OK(qkv_checkpoint_load(ck, p, NULL, &pos, NULL));
    CHECK(pos.step == 8, "the checkpoint on disk is step 8's (got %lld)", (long long)pos.step);
    int same = 1;
    for (int i = 0, k = 0; i < qkv_params_count(p); k += (int)qkv_tensor_numel(qkv_params_at(p, i)), i++)
        same &= !memcmp(qkv_params_at(p, i)->data, saved + k, (size_t)qkv_tensor_numel(qkv_params_at(p, i)) * 4);
    CHECK(same, "and holds step 8's parameters");
    test_hook_and_meta(ck);
    /* Progress: plain lines when not a terminal. */
    FILE *f = fopen(log, "w+");
    CHECK_OK(run(NULL, NULL, 20, -1, stopped, f));
    rewind(f);
    char line[256];
    int lines = 0, good = 0;
    while (fgets(line, sizeof line, f)) {
        lines++;
        good += strstr(line, "step ") && strstr(line, "loss ") && strstr(line, "lr ") && strstr(line, "samples/s");
    }
    fclose(f);
    CHECK(lines == 20 && good == 20, "20 progress lines with step, loss, lr, samples/s (%d, %d)", lines, good);
    /* Bad input. */
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_trainer t = {0};
    CHECK_ERR(qkv_train(c, &t, &pos), QKV_ERR_ARG, "trainer->params is NULL");
    CHECK_ERR(qkv_train(c, NULL, &pos), QKV_ERR_ARG, "trainer is NULL");
    qkv_optim *o;
    qkv_optim_opts oo = qkv_optim_adam_opts_default();
    qkv_optim_new(&o, p, &oo);
    t = (qkv_trainer){.params = p, .optim = o, .batch = batch, .user = &m, .steps = 5, .checkpoint = ck};
    CHECK_ERR(qkv_train(c, &t, &pos), QKV_ERR_ARG, "checkpoint_every 0");
    qkv_optim_free(o);
    qkv_ctx_free(c);
    qkv_sequential_free(&m.seq);
    qkv_params_free(p);
    unlink(ck);
    unlink(log);
    rmdir(dir);
    return h_finish("test_loop");
}
