/* test_optim.c: the optimizers' and schedules' API (include/qkv/train.h):
 * bad options to qkv_optim_new (every field of SGD, Adam and AdamW),
 * set_lr/get_lr/get_opts/step/steps with bad arguments, a store that grew
 * after the optimizer was made, clip_grad_norm's arguments; schedule_check
 * of every bad field, lr_at of an invalid schedule or step (NaN), and the
 * schedule's values at its seams. Optimizer steps and schedules against
 * PyTorch: test_train_oracle.c. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "train_helpers.h"

static void test_bad_optim(void)
{
    qkv_params *p, *empty;
    model_make(&p, 1);
    qkv_params_new(&empty);
    qkv_optim *o = (qkv_optim *)1;
    qkv_optim_opts a = qkv_optim_adam_opts_default(), s = qkv_optim_sgd_opts_default(0.1);
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
    BAD(qkv_optim_adamw_opts_default(), beta1, NAN, "beta1 nan");
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

/* clip_grad_norm then an AdamW step over tensors big and small, at 1 and
 * 2 threads (the tensors share one parallel region, each split by `omp
 * for`; each norm is summed on one thread): the same bits. */
static void run_threads(int threads, float *out, float *norm)
{
    static const int64_t sizes[] = {100003, 70000, 10, 33000, 1};
    qkv_params *p;
    qkv_params_new(&p);
    uint64_t seed = 3;
    for (int i = 0; i < 5; i++) {
        qkv_tensor *t;
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        CHECK_OK(qkv_params_add(p, "", name, 1, &sizes[i], &t));
        for (int64_t j = 0; j < sizes[i]; j++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            t->data[j] = (float)((seed >> 40) % 2001) / 1000.0f - 1.0f;
            t->grad[j] = (float)((seed >> 20) % 2001) / 500.0f - 2.0f;
        }
    }
    qkv_optim *o;
    qkv_optim_opts a = qkv_optim_adamw_opts_default();
    CHECK_OK(qkv_optim_new(&o, p, &a));
    int nt = omp_get_max_threads();
    omp_set_num_threads(threads);
    CHECK_OK(qkv_clip_grad_norm(p, 1.0f, norm));
    CHECK_OK(qkv_optim_step(o));
    CHECK_OK(qkv_optim_step(o));
    omp_set_num_threads(nt);
    int64_t k = 0;
    for (int i = 0; i < 5; i++) {
        qkv_tensor *t = qkv_params_at(p, i);
        for (int64_t j = 0; j < sizes[i]; j++) out[k++] = t->data[j];
    }
    qkv_params_zero_grad(p);
    double g = 0;
    for (int i = 0; i < 5; i++)
        for (int64_t j = 0; j < sizes[i]; j++) g += fabs(qkv_params_at(p, i)->grad[j]);
    CHECK(g == 0, "zero_grad left gradients: sum |g| = %g", g);
    qkv_optim_free(o);
    qkv_params_free(p);
}

static void test_threads(void)
{
    enum { N = 100003 + 70000 + 10 + 33000 + 1 };
    static float one[N], two[N];
    float n1, n2;
    run_threads(1, one, &n1);
    run_threads(2, two, &n2);
    CHECK(n1 == n2 && n1 > 1, "clip_grad_norm: total norm %.9g at 1 thread, %.9g at 2", n1, n2);
    CHECK(!memcmp(one, two, sizeof one), "clip + AdamW: parameters differ between 1 and 2 threads");
}

int main(void)
{
    test_threads();
    test_bad_optim();
    test_bad_schedule();
    return h_finish("test_optim");
}
