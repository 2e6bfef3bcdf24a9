/* toy.c: `qkv toy`, the lecture's toy experiment (Fleuret, "13.2 Attention
 * mechanisms"): sequences of two triangles and two boxes whose target
 * averages the heights within each pair; a convolutional network against
 * the same network with a self-attention layer; then the positional variant
 * (average the two leftmost and the two rightmost shapes), where attention
 * alone cannot tell positions apart until a positional encoding is
 * concatenated to its input channels. Adam, lr 1e-3, batch 100, MSE on
 * standardised inputs, as in the lecture. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/cli.h"

typedef enum { PE_NONE = 0, PE_BINARY, PE_SINUSOIDAL } pe_kind;
static const char *pe_names[] = {"none", "binary", "sinusoidal"};
static const char *task_names[] = {"pairs", "positional"};
static const char *model_names[] = {"conv", "attention"};

typedef struct {
    int64_t n_train, n_test, T, epochs, batch;
    uint64_t seed;
    int scaled, all;
    const char *png;
    FILE *log;
    int task, model, pe; /* run only these (-1: all) */
} toy_opts;

typedef struct {
    qkv_toy_task task;
    qkv_toy_model model;
    pe_kind pe;
    int64_t params;
    double train_mse, test_mse, seconds;
} toy_result;

typedef struct {
    float *in, *target; // (n,1,T) each
    int64_t n;
} toy_set;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* Channels of the encoding for length T (0 for none). */
static int64_t pe_channels(pe_kind pe, int64_t T)
{
    return pe == PE_BINARY ? qkv_pos_binary_channels(T) : pe == PE_SINUSOIDAL ? 8 : 0;
}

/* x (B,1+P,T) = standardised input rows [b0, b0+B) with the encoding's P
 * channels after the signal, as the lecture's torch.cat((input, pe), 1). */
static void make_batch(const toy_set *s, int64_t b0, int64_t B, int64_t T, float mu, float sd,
                       const float *pe, int64_t P, float *x, float *t)
{
    for (int64_t b = 0; b < B; b++) {
        float *xb = x + b * (1 + P) * T;
        for (int64_t i = 0; i < T; i++) xb[i] = (s->in[(b0 + b) * T + i] - mu) / sd;
        if (P) memcpy(xb + T, pe, (size_t)(P * T) * sizeof(float));
        if (t) memcpy(t + b * T, s->target + (b0 + b) * T, (size_t)T * sizeof(float));
    }
}

/* Mean squared error over a set (eval mode, no tape); fills pred if given. */
static qkv_status evaluate(qkv_ctx *c, qkv_toy_net *net, const toy_set *s, const toy_opts *o,
                           float mu, float sd, const float *pe, int64_t P, float *x,
                           double *mse, float *pred)
{
    double sum = 0;
    qkv_ctx_set_training(c, 0);
    qkv_ctx_set_grad(c, 0);
    for (int64_t b0 = 0; b0 < s->n; b0 += o->batch) {
        int64_t B = s->n - b0 < o->batch ? s->n - b0 : o->batch;
        qkv_ctx_reset(c);
        make_batch(s, b0, B, o->T, mu, sd, pe, P, x, NULL);
        qkv_tensor *tx, *y;
        QKV_CLI_TRY(qkv_tensor_wrap(qkv_ctx_arena(c), x, 3, (int64_t[]){B, 1 + P, o->T}, &tx));
        QKV_CLI_TRY(qkv_module_forward(c, &net->seq.base, tx, &y));
        for (int64_t i = 0; i < B * o->T; i++) {
            double d = y->data[i] - s->target[b0 * o->T + i];
            sum += d * d;
        }
        if (pred) memcpy(pred + b0 * o->T, y->data, (size_t)(B * o->T) * sizeof(float));
    }
    qkv_ctx_set_grad(c, 1);
    *mse = sum / (double)(s->n * o->T);
    return QKV_OK;
}

/* What the batch function needs: the data, the model, the encoding; and
 * the mean loss of the last epoch. */
typedef struct {
    const toy_opts *o;
    const toy_set *train;
    qkv_toy_net *net;
    const float *pe;
    int64_t P;
    float mu, sd, *x, *t;
    double epoch_loss, last_epoch_loss;
} toy_run;

/* Step s trains on batch s mod (n_train / batch), in order: epoch after epoch. */
static qkv_status toy_batch(qkv_ctx *c, void *user, int64_t step, qkv_tensor **loss, int64_t *units)
{
    toy_run *r = user;
    int64_t B = r->o->batch, T = r->o->T, nb = r->train->n / B, b = step % nb;
    make_batch(r->train, b * B, B, T, r->mu, r->sd, r->pe, r->P, r->x, r->t);
    qkv_tensor *tx, *tt, *y;
    QKV_CLI_TRY(qkv_tensor_wrap(qkv_ctx_arena(c), r->x, 3, (int64_t[]){B, 1 + r->P, T}, &tx));
    QKV_CLI_TRY(qkv_tensor_wrap(qkv_ctx_arena(c), r->t, 3, (int64_t[]){B, 1, T}, &tt));
    QKV_CLI_TRY(qkv_module_forward(c, &r->net->seq.base, tx, &y));
    QKV_CLI_TRY(qkv_mse_loss(c, y, tt, QKV_REDUCTION_MEAN, loss));
    if (b == 0) r->epoch_loss = 0;
    r->epoch_loss += (*loss)->data[0] / (double)nb;
    if (b == nb - 1) r->last_epoch_loss = r->epoch_loss;
    *units = B;
    return QKV_OK;
}

static qkv_status run_one(const toy_opts *o, const toy_set *train, const toy_set *test,
                          toy_result *r, float *pred)
{
    int64_t T = o->T, P = pe_channels(r->pe, T), B = o->batch;
    float *pe = P ? malloc((size_t)(P * T) * sizeof(float)) : NULL;
    if (r->pe == PE_BINARY) qkv_pos_binary(T, pe);
    if (r->pe == PE_SINUSOIDAL) qkv_pos_sinusoidal(T, P, pe);
    /* The lecture standardises with the training inputs' mean and std. */
    double m = 0, v = 0;
    for (int64_t i = 0; i < train->n * T; i++) m += train->in[i];
    m /= (double)(train->n * T);
    for (int64_t i = 0; i < train->n * T; i++) v += (train->in[i] - m) * (train->in[i] - m);
    toy_run run = {.o = o, .train = train, .pe = pe, .P = P, .mu = (float)m,
                   .sd = (float)sqrt(v / (double)(train->n * T - 1))};
    run.x = malloc((size_t)(B * (1 + P) * T) * sizeof(float));
    run.t = malloc((size_t)(B * T) * sizeof(float));

    qkv_params *p = NULL;
    qkv_ctx *c = NULL;
    qkv_optim *opt = NULL;
    qkv_toy_net net = {0};
    run.net = &net;
    qkv_rng rng;
    qkv_rng_seed(&rng, o->seed + 17);
    qkv_status s = qkv_params_new(&p);
    if (!s) s = qkv_ctx_new(&c);
    if (!s) s = qkv_toy_net_init(&net, r->model, 1 + P, 64, 5, o->scaled, p, &rng);
    qkv_optim_opts oo = qkv_optim_adam_default(); /* lr 1e-3 */
    if (!s) s = qkv_optim_new(&opt, p, &oo);
    r->params = qkv_params_numel(p);
    if (o->log && !s)
        fprintf(o->log, "%s network on the %s task, positional encoding: %s\n", model_names[r->model],
                task_names[r->task], pe_names[r->pe]);
    qkv_trainer tr = {.params = p, .optim = opt, .steps = o->epochs * (train->n / B),
                      .progress = o->log, .unit = "samples", .batch = toy_batch, .user = &run};
    qkv_train_pos pos = {0};
    double t0 = now();
    if (!s) s = qkv_train(c, &tr, &pos);
    r->seconds = now() - t0;
    r->train_mse = run.last_epoch_loss;
    if (!s) s = evaluate(c, &net, test, o, run.mu, run.sd, pe, P, run.x, &r->test_mse, pred);
    qkv_optim_free(opt);
    qkv_toy_net_free(&net);
    qkv_ctx_free(c);
    qkv_params_free(p);
    free(run.x);
    free(run.t);
    free(pe);
    return s;
}

/* Panels of test sequences: input (grey), target (blue), each run's
 * prediction in its own colour. */
static qkv_status plot(const char *path, const toy_set *test, int64_t T, int nruns,
                       float *const *preds, const uint32_t *colours)
{
    enum { PW = 480, PH = 160, PAD = 12, NPANEL = 4 };
    qkv_canvas cv;
    QKV_CLI_TRY(qkv_canvas_new(&cv, PAD + 2 * (PW + PAD), PAD + (NPANEL / 2) * (PH + PAD), 0xffffff));
    for (int k = 0; k < NPANEL; k++) {
        double x0 = PAD + (k % 2) * (PW + PAD), y0 = PAD + (k / 2) * (PH + PAD);
        qkv_canvas_rect(&cv, x0, y0, x0 + PW, y0 + PH, 0xf4f4f4);
        const float *series[8];
        uint32_t col[8];
        int ns = 0;
        series[ns] = test->in + k * T, col[ns++] = 0xa0a0a0;
        series[ns] = test->target + k * T, col[ns++] = 0x1f5fbf;
        for (int r = 0; r < nruns && ns < 8; r++) series[ns] = preds[r] + k * T, col[ns++] = colours[r];
        for (int q = 0; q < ns; q++)
            for (int64_t i = 1; i < T; i++) {
                double xa = x0 + (double)(i - 1) * PW / (double)(T - 1), xb = x0 + (double)i * PW / (double)(T - 1);
                double ya = y0 + PH - 4 - series[q][i - 1] * (PH - 8) / 27.0;
                double yb = y0 + PH - 4 - series[q][i] * (PH - 8) / 27.0;
                qkv_canvas_line(&cv, xa, ya, xb, yb, col[q]);
            }
    }
    qkv_status s = qkv_canvas_save(&cv, path);
    qkv_canvas_free(&cv);
    return s;
}

/* The sizes' bounds: a set holds at most MAX_VALUES floats (1 GiB), so
 * products of sizes stay far from overflowing. */
#define MAX_LENGTH (1 << 20)
#define MAX_VALUES ((int64_t)1 << 28)
#define MAX_EPOCHS 1000000

const char qkv_cli_toy_usage[] =
    "usage: qkv toy [OPTIONS]\n"
    "  the lecture's toy experiment: a convolutional network against the same network\n"
    "  with a self-attention layer on the pairs task, then attention without and with\n"
    "  binary positions on the positional task; prints a table of the runs' errors\n"
    "  -t, --task pairs|positional      only this task's runs\n"
    "  -m, --model conv|attention       only this network's runs\n"
    "      --pe none|binary|sinusoidal  only runs with this positional encoding\n"
    "                                   (these filters pick from all runs, --all's too)\n"
    "  -a, --all          also convolution on the positional task, and sinusoidal positions\n"
    "  -n, --train N      training sequences (default 10000; at least 100, the batch)\n"
    "      --test N       test sequences (default 1000; at least 4)\n"
    "  -l, --length T     sequence length (default 64; 40 to 1048576)\n"
    "  -e, --epochs E     epochs (default 10; the positional task trains 3E; 1 to 1000000)\n"
    "  -s, --seed S       random seed (default 1; 0 to 2^63-1)\n"
    "      --scaled       scale the attention scores by 1/sqrt(D)\n"
    "  -p, --png PREFIX   draw predictions on four test sequences into PREFIX_pairs.png\n"
    "                     and PREFIX_positional.png\n"
    "  -h, --help         show this usage\n"
    "  --train times --length, and --test times --length, are at most 2^28 (268435456).\n";

static void too_many(qkv_cli_args *a, const char *set, int64_t n, int64_t T)
{
    qkv_cli_error(a, "--%s %lld times --length %lld is over 2^28 values", set, (long long)n, (long long)T);
}

/* Fills o from the arguments; returns -1 to go on, else the exit status. */
static int parse(int argc, char **argv, toy_opts *o)
{
    enum { PE = 256, TEST, SCALED }; /* the long-only options */
    static const struct option options[] = {
        {"task", required_argument, NULL, 't'},
        {"model", required_argument, NULL, 'm'},
        {"pe", required_argument, NULL, PE},
        {"all", no_argument, NULL, 'a'},
        {"train", required_argument, NULL, 'n'},
        {"test", required_argument, NULL, TEST},
        {"length", required_argument, NULL, 'l'},
        {"epochs", required_argument, NULL, 'e'},
        {"seed", required_argument, NULL, 's'},
        {"scaled", no_argument, NULL, SCALED},
        {"png", required_argument, NULL, 'p'},
        QKV_CLI_HELP_OPTION};
    qkv_cli_args a;
    qkv_cli_args_init(&a, argc, argv, qkv_cli_toy_usage, options, 0, 0);
    int c;
    while ((c = qkv_cli_next(&a)) > 0) {
        switch (c) {
        case 't': o->task = qkv_cli_choice(&a, task_names, 2); break;
        case 'm': o->model = qkv_cli_choice(&a, model_names, 2); break;
        case PE: o->pe = qkv_cli_choice(&a, pe_names, 3); break;
        case 'a': o->all = 1; break;
        case 'n': o->n_train = qkv_cli_int(&a, o->batch, MAX_VALUES); break;
        case TEST: o->n_test = qkv_cli_int(&a, 4, MAX_VALUES); break;
        case 'l': o->T = qkv_cli_int(&a, 40, MAX_LENGTH); break;
        case 'e': o->epochs = qkv_cli_int(&a, 1, MAX_EPOCHS); break;
        case 's': o->seed = (uint64_t)qkv_cli_int(&a, 0, INT64_MAX); break;
        case SCALED: o->scaled = 1; break;
        case 'p': o->png = a.value; break;
        }
    }
    if (c < 0) return a.status;
    if (o->n_train * o->T > MAX_VALUES) too_many(&a, "train", o->n_train, o->T);
    else if (o->n_test * o->T > MAX_VALUES) too_many(&a, "test", o->n_test, o->T);
    else if (o->png && strlen(o->png) > 400)
        qkv_cli_error(&a, "--png: the prefix is longer than 400 characters");
    return a.status;
}

int qkv_cli_toy(int argc, char **argv)
{
    toy_opts o = {.n_train = 10000, .n_test = 1000, .T = 64, .epochs = 10, .batch = 100, .seed = 1,
                  .log = stdout, .task = -1, .model = -1, .pe = -1};
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;
    /* The runs: the lecture's first task with both networks, then the
     * positional task with attention, without and with the lecture's binary
     * positions; --all adds convolution and sinusoidal positions there. */
    struct { qkv_toy_task task; qkv_toy_model model; pe_kind pe; int extra; } plan[] = {
        {QKV_TOY_PAIRS, QKV_TOY_CONV, PE_NONE, 0},
        {QKV_TOY_PAIRS, QKV_TOY_ATTENTION, PE_NONE, 0},
        {QKV_TOY_POSITIONAL, QKV_TOY_CONV, PE_NONE, 1},
        {QKV_TOY_POSITIONAL, QKV_TOY_ATTENTION, PE_NONE, 0},
        {QKV_TOY_POSITIONAL, QKV_TOY_ATTENTION, PE_BINARY, 0},
        {QKV_TOY_POSITIONAL, QKV_TOY_ATTENTION, PE_SINUSOIDAL, 1},
    };
    /* Learning to use positions takes longer than learning the pairs: the
     * positional task trains for three times the epochs (measured: with the
     * binary encoding the test MSE is 1.51 after 1,000 steps, 0.75 after
     * 4,000, while without it stays near 2). */
    const int64_t task_epochs[2] = {1, 3};
    int nplan = (int)(sizeof plan / sizeof *plan);
    toy_result res[8];
    toy_set train[2], test[2];
    qkv_rng rng;
    float *preds[8] = {0};
    printf("qkv toy: %lld training and %lld test sequences of length %lld, %lld epochs (%lld on the "
           "positional task), batch %lld, Adam lr 1e-3, MSE%s\n", (long long)o.n_train, (long long)o.n_test,
           (long long)o.T, (long long)o.epochs, (long long)(3 * o.epochs), (long long)o.batch,
           o.scaled ? ", attention scaled by 1/sqrt(D)" : "");
    for (int k = 0; k < 2; k++) {
        qkv_rng_seed(&rng, o.seed * 1000 + (uint64_t)k);
        train[k] = (toy_set){malloc((size_t)(o.n_train * o.T) * 4), malloc((size_t)(o.n_train * o.T) * 4), o.n_train};
        test[k] = (toy_set){malloc((size_t)(o.n_test * o.T) * 4), malloc((size_t)(o.n_test * o.T) * 4), o.n_test};
        if (qkv_toy_generate(&rng, (qkv_toy_task)k, o.n_train, o.T, 0.3f, train[k].in, train[k].target) ||
            qkv_toy_generate(&rng, (qkv_toy_task)k, o.n_test, o.T, 0.3f, test[k].in, test[k].target)) {
            fprintf(stderr, "qkv toy: %s\n", qkv_last_error());
            return QKV_EXIT_FAILURE;
        }
    }
    int nres = 0;
    for (int i = 0; i < nplan; i++) {
        int chosen = o.task >= 0 || o.model >= 0 || o.pe >= 0; /* filters pick from all runs */
        if ((plan[i].extra && !o.all && !chosen) || (o.task >= 0 && (int)plan[i].task != o.task) ||
            (o.model >= 0 && (int)plan[i].model != o.model) || (o.pe >= 0 && (int)plan[i].pe != o.pe))
            continue;
        toy_result *r = &res[nres];
        *r = (toy_result){plan[i].task, plan[i].model, plan[i].pe, 0, 0, 0, 0};
        preds[nres] = malloc((size_t)(o.n_test * o.T) * 4);
        toy_opts oi = o;
        oi.epochs = o.epochs * task_epochs[r->task];
        if (run_one(&oi, &train[r->task], &test[r->task], r, preds[nres])) {
            fprintf(stderr, "qkv toy: %s\n", qkv_last_error());
            return QKV_EXIT_FAILURE;
        }
        nres++;
    }
    printf("\n| task | model | positional encoding | parameters | steps | train MSE | test MSE | seconds |\n"
           "|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nres; i++)
        printf("| %s | %s | %s | %lld | %lld | %.3f | %.3f | %.0f |\n", task_names[res[i].task],
               model_names[res[i].model], pe_names[res[i].pe], (long long)res[i].params,
               (long long)(o.epochs * task_epochs[res[i].task] * (o.n_train / o.batch)),
               res[i].train_mse, res[i].test_mse, res[i].seconds);
    if (o.png) {
        /* One picture per task: its runs' predictions on four test sequences. */
        static const uint32_t colours[4] = {0xd62728, 0x2ca02c, 0xff7f0e, 0x9467bd};
        for (int k = 0; k < 2; k++) {
            float *pk[4];
            int n = 0;
            char path[512];
            for (int i = 0; i < nres && n < 4; i++)
                if ((int)res[i].task == k) pk[n++] = preds[i];
            if (!n) continue;
            snprintf(path, sizeof path, "%s_%s.png", o.png, task_names[k]);
            if (plot(path, &test[k], o.T, n, pk, colours)) {
                fprintf(stderr, "qkv toy: %s\n", qkv_last_error());
                return QKV_EXIT_FAILURE;
            }
            printf("wrote %s: grey input, blue target, predictions in run order: red, green, orange, purple\n", path);
        }
    }
    for (int i = 0; i < nres; i++) free(preds[i]);
    for (int k = 0; k < 2; k++) free(train[k].in), free(train[k].target), free(test[k].in), free(test[k].target);
    return QKV_EXIT_OK;
}
