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
#include <strings.h>
#include <time.h>
#include <omp.h>
#include "cli/cli.h"
#include "qkv/plot.h"

typedef enum { PE_NONE = 0, PE_BINARY, PE_SINUSOIDAL } pe_kind;
static const char *pe_names[] = {"none", "binary", "sinusoidal"};
static const char *task_names[] = {"pairs", "positional"};
static const char *model_names[] = {"conv", "attention"};
static const char *format_names[] = {"png", "svg", "pdf"};

typedef struct {
    int64_t n_train, n_test, T, epochs, batch;
    uint64_t seed;
    int scaled, all;
    char plots[512];  /* the figures' prefix ("" for none) ... */
    int format;       /* ... and format: an index into format_names */
    FILE *log;
    int task, model, pe; /* run only these (-1: all) */
    int threads, zero1;  /* OpenMP threads per process (0: as set); ZeRO-1 */
    qkv_precision precision; /* of the matmuls (--precision) */
    int compare;         /* --compare-precision: every run in FP32, then in BF16 */
    qkv_dist *dist;      /* mpirun: data-parallel; else one process */
} toy_opts;

/* A training loss curve: the mean loss of every window of steps. */
typedef struct {
    double *x, *y; /* (n) epochs at the window's end, mean loss */
    int64_t n, cap, window;
    double sum;
    int64_t in_window;
} toy_curve;

typedef struct {
    qkv_toy_task task;
    qkv_toy_model model;
    pe_kind pe;
    qkv_precision precision;
    int64_t params;
    double train_mse, test_mse, seconds;
    toy_curve loss; /* training loss, every tenth of an epoch */
    toy_curve val;  /* test (validation) MSE after each epoch */
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
 * the mean loss of the last epoch. The test set is evaluated (on a ctx of
 * its own) before each epoch after the first, for the validation curve. */
typedef struct {
    const toy_opts *o;
    const toy_set *train, *test;
    qkv_toy_net *net;
    const float *pe;
    int64_t P;
    float mu, sd, *x, *t;
    double epoch_loss, last_epoch_loss;
    toy_curve *curve, *val;
    qkv_ctx *eval;
} toy_run;

static void curve_add(toy_curve *cv, double x, double y)
{
    if (cv->n >= cv->cap) return;
    cv->x[cv->n] = x;
    cv->y[cv->n++] = y;
}

/* Step s trains on batch s mod (n_train / batch), in order: epoch after epoch. */
static qkv_status toy_batch(qkv_ctx *c, void *user, int64_t step, qkv_tensor **loss, int64_t *units)
{
    toy_run *r = user;
    int64_t B = r->o->batch, T = r->o->T, nb = r->train->n / B, b = step % nb;
    if (b == 0 && step > 0) { /* epochs [0, step / nb) are done: the test MSE after them */
        double mse;
        QKV_CLI_TRY(evaluate(r->eval, r->net, r->test, r->o, r->mu, r->sd, r->pe, r->P, r->x, &mse, NULL));
        curve_add(r->val, (double)(step / nb), mse);
    }
    /* this rank's shard of the global batch (all of it on one process) */
    int64_t first, count;
    qkv_dist_shard(r->o->dist, B, &first, &count);
    B = count;
    make_batch(r->train, b * r->o->batch + first, B, T, r->mu, r->sd, r->pe, r->P, r->x, r->t);
    qkv_tensor *tx, *tt, *y;
    QKV_CLI_TRY(qkv_tensor_wrap(qkv_ctx_arena(c), r->x, 3, (int64_t[]){B, 1 + r->P, T}, &tx));
    QKV_CLI_TRY(qkv_tensor_wrap(qkv_ctx_arena(c), r->t, 3, (int64_t[]){B, 1, T}, &tt));
    QKV_CLI_TRY(qkv_module_forward(c, &r->net->seq.base, tx, &y));
    QKV_CLI_TRY(qkv_mse_loss(c, y, tt, QKV_REDUCTION_MEAN, loss));
    if (b == 0) r->epoch_loss = 0;
    r->epoch_loss += (*loss)->data[0] / (double)nb;
    if (b == nb - 1) r->last_epoch_loss = r->epoch_loss;
    toy_curve *cv = r->curve;
    cv->sum += (*loss)->data[0];
    if (++cv->in_window == cv->window) {
        curve_add(cv, (double)(step + 1) / (double)nb, cv->sum / (double)cv->window);
        cv->sum = 0, cv->in_window = 0;
    }
    *units = B;
    return QKV_OK;
}

/* Windows of a tenth of an epoch, or longer so that a curve keeps at most
 * 100,000 points; per_epoch 0 gives a point a step (the test curve: a
 * "step" is an epoch there). */
static qkv_status curve_init(toy_curve *cv, int64_t steps, int64_t per_epoch)
{
    int64_t w = per_epoch / 10 > 0 ? per_epoch / 10 : 1;
    if (steps / w > 100000) w = (steps + 99999) / 100000;
    *cv = (toy_curve){.window = w, .cap = steps / w};
    cv->x = malloc((size_t)(cv->cap > 0 ? cv->cap : 1) * sizeof(double));
    cv->y = malloc((size_t)(cv->cap > 0 ? cv->cap : 1) * sizeof(double));
    return cv->x && cv->y ? QKV_OK : QKV_ERR_NOMEM;
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
    toy_run run = {.o = o, .train = train, .test = test, .pe = pe, .P = P, .mu = (float)m,
                   .sd = (float)sqrt(v / (double)(train->n * T - 1)), .curve = &r->loss, .val = &r->val};
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
    if (!s) s = qkv_ctx_new(&run.eval);
    if (!s) s = qkv_ctx_set_precision(c, o->precision);
    if (!s) s = qkv_ctx_set_precision(run.eval, o->precision);
    if (!s) s = qkv_toy_net_init(&net, r->model, 1 + P, 64, 5, o->scaled, p, &rng);
    qkv_optim_opts oo = qkv_optim_adam_opts_default(); /* lr 1e-3 */
    if (!s) s = qkv_optim_new(&opt, p, &oo);
    r->params = qkv_params_numel(p);
    if (o->log && !s)
        fprintf(o->log, "%s network on the %s task, positional encoding: %s%s\n", model_names[r->model],
                task_names[r->task], pe_names[r->pe],
                !o->compare ? "" : o->precision == QKV_BF16 ? ", bf16" : ", fp32");
    int64_t saved = 0;
    if (!s && o->zero1) s = qkv_dist_zero1(o->dist, opt, &saved);
    if (o->log && !s && o->zero1)
        fprintf(o->log, "ZeRO-1: the optimizer state on each of %d ranks is %lld bytes smaller (%.0f%% "
                "of it)\n", qkv_dist_size(o->dist), (long long)saved,
                100.0 * (double)saved / (double)(2 * 4 * (r->params > 0 ? r->params : 1)));
    qkv_trainer tr = {.params = p, .optim = opt, .steps = o->epochs * (train->n / B),
                      .progress = o->log, .unit = "samples", .batch = toy_batch, .user = &run,
                      .dist = o->dist};
    qkv_train_pos pos = {0};
    double t0 = now();
    if (!s) s = qkv_train(c, &tr, &pos);
    r->seconds = now() - t0;
    r->train_mse = run.last_epoch_loss;
    if (!s) s = evaluate(c, &net, test, o, run.mu, run.sd, pe, P, run.x, &r->test_mse, pred);
    if (!s) curve_add(&r->val, (double)o->epochs, r->test_mse);
    qkv_optim_free(opt);
    qkv_ctx_free(run.eval);
    qkv_toy_net_free(&net);
    qkv_ctx_free(c);
    qkv_params_free(p);
    free(run.x);
    free(run.t);
    free(pe);
    return s;
}

/* A run's name in legends: "conv", "attention + binary positions", with
 * ", bf16" or ", fp32" after it when precision. */
static void run_name(char *buf, size_t cap, const toy_result *r, int precision)
{
    const char *p = !precision ? "" : r->precision == QKV_BF16 ? ", bf16" : ", fp32";
    if (r->pe == PE_NONE) snprintf(buf, cap, "%s%s", model_names[r->model], p);
    else snprintf(buf, cap, "%s + %s positions%s", model_names[r->model], pe_names[r->pe], p);
}

/* A task's figure: four test sequences as panels with axes: the input
 * (grey), the target (blue) and each run's prediction (red, green,
 * orange, purple); the legend in the first panel. */
static qkv_status plot_sequences(const char *path, int task, const toy_set *test, int64_t T, int nruns,
                                 float *const *preds, const toy_result *const *runs, int compare)
{
    enum { NPANEL = 4, MAXS = 6 };
    static const uint32_t colours[MAXS] = {0x9a9a9a, 0x1f5fbf, 0xd62728, 0x2ca02c, 0xff7f0e, 0x9467bd};
    int ns = 2 + nruns;
    qkv_line_plot panels[NPANEL];
    qkv_series series[NPANEL][MAXS];
    char names[MAXS][64] = {"input", "target"}, titles[NPANEL][32], title[96];
    double *ys = malloc((size_t)(NPANEL * ns * T) * sizeof(double)); /* (NPANEL, ns, T) */
    if (!ys) return QKV_ERR_NOMEM;
    for (int r = 0; r < nruns; r++) run_name(names[2 + r], sizeof names[0], runs[r], compare);
    for (int k = 0; k < NPANEL; k++) {
        for (int q = 0; q < ns; q++) {
            const float *src = q == 0   ? test->in + k * T
                               : q == 1 ? test->target + k * T
                                        : preds[q - 2] + k * T;
            double *y = ys + (k * ns + q) * T;
            for (int64_t i = 0; i < T; i++) y[i] = src[i];
            series[k][q] =
                (qkv_series){.label = k == 0 ? names[q] : NULL, .y = y, .n = T, .colour = colours[q]};
        }
        snprintf(titles[k], sizeof titles[0], "test sequence %d", k + 1);
        panels[k] = (qkv_line_plot){.series = series[k], .n_series = ns, .title = titles[k],
                                    .x_label = "position", .y_label = "height", .width = 560, .height = 280};
    }
    snprintf(title, sizeof title, "%s task: predictions on four test sequences", task_names[task]);
    qkv_status s = qkv_plot_lines_grid(path, panels, NPANEL, 2, title);
    free(ys);
    return s;
}

/* The runs' training loss (solid) and test MSE after each epoch (dashed,
 * the same colour) on a log scale: one panel per task, or with compare
 * (--compare-precision) one per task and network, FP32 and BF16 in it. */
static qkv_status plot_losses(const char *path, const toy_result *res, int nres, int compare)
{
    enum { MAXP = 6, MAXS = 8 };
    static const uint32_t colours[4] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728};
    qkv_line_plot panels[MAXP];
    qkv_series series[MAXP][MAXS];
    char names[12][64], vnames[12][72], titles[MAXP][96];
    int np = 0, lead[MAXP]; /* each panel's first run */
    for (int i = 0; i < nres && i < 12; i++) {
        const toy_result *r = &res[i];
        if (r->loss.n == 0) continue;
        int k = 0;
        while (k < np && !(res[lead[k]].task == r->task &&
                           (!compare || (res[lead[k]].model == r->model && res[lead[k]].pe == r->pe))))
            k++;
        if (k == np) {
            if (np == MAXP) continue;
            lead[np] = i;
            char net[64] = "";
            if (compare) run_name(net, sizeof net, r, 0);
            snprintf(titles[np], sizeof titles[0], "%s task%s%.63s", task_names[r->task], compare ? ", " : "", net);
            panels[np++] = (qkv_line_plot){.series = series[k], .title = titles[k], .x_label = "epoch",
                                           .y_label = "MSE", .log_y = 1, .width = 560, .height = 340};
        }
        int n = panels[k].n_series;
        if (n + 2 > MAXS) continue;
        /* with compare the panel's title names the network, the legend the precision */
        if (compare) snprintf(names[i], sizeof names[0], "%s", r->precision == QKV_BF16 ? "bf16" : "fp32");
        else run_name(names[i], sizeof names[0], r, 0);
        snprintf(vnames[i], sizeof vnames[0], "%.63s, test", names[i]);
        uint32_t col = colours[(n / 2) % 4];
        series[k][n] = (qkv_series){.label = names[i], .x = r->loss.x, .y = r->loss.y, .n = r->loss.n,
                                    .colour = col};
        series[k][n + 1] = (qkv_series){.label = vnames[i], .x = r->val.x, .y = r->val.y, .n = r->val.n,
                                        .colour = col, .dashed = 1};
        panels[k].n_series = n + 2;
    }
    if (!np) return QKV_OK;
    return qkv_plot_lines_grid(path, panels, np, np < 2 ? np : 2,
                               compare ? "FP32 and BF16, same seed: training loss, test MSE"
                                       : "training loss (each tenth of an epoch) and test MSE (each epoch)");
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
    "  -p, --plots PREFIX  draw predictions on four test sequences per task into\n"
    "                     PREFIX_pairs.png and PREFIX_positional.png, and the runs' training\n"
    "                     loss and test MSE curves into PREFIX_loss.png\n"
    "      --format png|svg|pdf  the figures' format (default: PREFIX's extension\n"
    "                     if it has one, else png)\n"
    "      --png PREFIX   the same as --plots PREFIX\n"
    "      --threads N    OpenMP threads of this process (under mpirun: per rank;\n"
    "                     ranks x threads = cores; default: OMP_NUM_THREADS or all)\n"
    "      --zero1        under mpirun: each rank keeps 1/N of Adam's moments (ZeRO-1)\n"
    "      --precision fp32|bf16  the matmuls' precision (default fp32; bf16: bf16\n"
    "                     inputs, FP32 sums, like PyTorch's autocast; docs/bf16.md)\n"
    "      --compare-precision  train every run in fp32, then again in bf16 (the same\n"
    "                     seed and data); the table and the loss figure show both\n"
    "  -h, --help         show this usage\n"
    "  Under mpirun -np N the batch of 100 is split between the N ranks\n"
    "  (data-parallel, docs/distributed.md); rank 0 prints and draws.\n"
    "  --train times --length, and --test times --length, are at most 2^28 (268435456).\n";

static void too_many(qkv_cli_args *a, const char *set, int64_t n, int64_t T)
{
    qkv_cli_error(a, "--%s %lld times --length %lld is over 2^28 values", set, (long long)n, (long long)T);
}

/* Fills o from the arguments; returns -1 to go on, else the exit status. */
static int parse(int argc, char **argv, toy_opts *o)
{
    enum { PE = 256, TEST, SCALED, FORMAT, PNG, THREADS, ZERO1, PRECISION, COMPARE }; /* the long-only options */
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
        {"plots", required_argument, NULL, 'p'},
        {"png", required_argument, NULL, PNG},
        {"format", required_argument, NULL, FORMAT},
        {"threads", required_argument, NULL, THREADS},
        {"zero1", no_argument, NULL, ZERO1},
        {"precision", required_argument, NULL, PRECISION},
        {"compare-precision", no_argument, NULL, COMPARE},
        QKV_CLI_HELP_OPTION};
    const char *plots = NULL;
    int format = -1, precision_set = 0;
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
        case 'p': case PNG: plots = a.value; break;
        case FORMAT: format = qkv_cli_choice(&a, format_names, 3); break;
        case THREADS: o->threads = (int)qkv_cli_int(&a, 1, 4096); break;
        case ZERO1: o->zero1 = 1; break;
        case PRECISION: o->precision = qkv_cli_precision(&a), precision_set = 1; break;
        case COMPARE: o->compare = 1; break;
        }
    }
    if (c < 0) return a.status;
    /* PREFIX's own extension, if any, picks the format and leaves the prefix */
    size_t len = plots ? strlen(plots) : 0;
    int ext = -1;
    for (int k = 0; k < 3 && len > 4; k++)
        if (plots[len - 4] == '.' && !strcasecmp(plots + len - 3, format_names[k])) ext = k;
    if (o->n_train * o->T > MAX_VALUES) too_many(&a, "train", o->n_train, o->T);
    else if (o->n_test * o->T > MAX_VALUES) too_many(&a, "test", o->n_test, o->T);
    else if (len > 400) qkv_cli_error(&a, "--plots: the prefix is longer than 400 characters");
    else if (format >= 0 && !plots) qkv_cli_error(&a, "--format needs --plots PREFIX");
    else if (precision_set && o->compare)
        qkv_cli_error(&a, "--compare-precision runs both precisions: leave out --precision");
    else if (ext >= 0 && format >= 0 && ext != format)
        qkv_cli_error(&a, "--format %s, but the prefix '%s' ends in .%s", format_names[format], plots,
                      format_names[ext]);
    else if (plots) {
        snprintf(o->plots, sizeof o->plots, "%.*s", (int)(ext >= 0 ? len - 4 : len), plots);
        o->format = ext >= 0 ? ext : format >= 0 ? format : 0;
    }
    return a.status;
}

/* The figures: a task's predictions, then the loss curves. */
static int plot_all(const toy_opts *o, const toy_set *test, const toy_result *res, int nres,
                    float *const *preds)
{
    char path[600];
    const char *ext = format_names[o->format];
    for (int k = 0; k < 2; k++) {
        float *pk[4];
        const toy_result *rk[4];
        int n = 0;
        for (int i = 0; i < nres && n < 4; i++)
            if ((int)res[i].task == k) rk[n] = &res[i], pk[n++] = preds[i];
        if (!n) continue;
        snprintf(path, sizeof path, "%s_%s.%s", o->plots, task_names[k], ext);
        if (plot_sequences(path, k, &test[k], o->T, n, pk, rk, o->compare)) {
            return qkv_cli_report("toy", "%s", qkv_last_error());
        }
        printf("wrote %s: four test sequences, input grey, target blue, predictions in run order: red, "
               "green, orange, purple\n", path);
    }
    snprintf(path, sizeof path, "%s_loss.%s", o->plots, ext);
    if (plot_losses(path, res, nres, o->compare)) {
        return qkv_cli_report("toy", "%s", qkv_last_error());
    }
    printf("wrote %s: the runs' training loss and test MSE curves\n", path);
    return QKV_EXIT_OK;
}

static int toy_main(const toy_opts *op);

int qkv_cli_toy(int argc, char **argv)
{
    toy_opts o = {.n_train = 10000, .n_test = 1000, .T = 64, .epochs = 10, .batch = 100, .seed = 1,
                  .log = stdout, .task = -1, .model = -1, .pe = -1};
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;
    if (o.threads > 0) omp_set_num_threads(o.threads);
    if (qkv_cli_dist_start("toy", &o.dist)) return QKV_EXIT_FAILURE;
    /* rank 0 prints, logs and draws; the others train silently */
    if (qkv_dist_rank(o.dist) != 0) o.log = NULL, o.plots[0] = 0;
    if (o.batch % qkv_dist_size(o.dist) != 0 && qkv_dist_rank(o.dist) == 0)
        qkv_cli_report("toy", "note: the batch of %lld is split unevenly between %d ranks",
                (long long)o.batch, qkv_dist_size(o.dist));
    rc = toy_main(&o);
    qkv_dist_free(o.dist);
    return rc;
}

static int toy_main(const toy_opts *op)
{
    toy_opts o = *op;
    int rc;
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
    toy_result res[12];
    toy_set train[2], test[2];
    qkv_rng rng;
    float *preds[12] = {0};
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
            return qkv_cli_report("toy", "%s", qkv_last_error());
        }
    }
    int nres = 0;
    for (int i = 0; i < nplan * (o.compare ? 2 : 1); i++) {
        int ip = o.compare ? i / 2 : i; /* with compare: each run in FP32, then in BF16 */
        qkv_precision prec = !o.compare ? o.precision : i % 2 ? QKV_BF16 : QKV_FP32;
        int chosen = o.task >= 0 || o.model >= 0 || o.pe >= 0; /* filters pick from all runs */
        if ((plan[ip].extra && !o.all && !chosen) || (o.task >= 0 && (int)plan[ip].task != o.task) ||
            (o.model >= 0 && (int)plan[ip].model != o.model) || (o.pe >= 0 && (int)plan[ip].pe != o.pe))
            continue;
        toy_result *r = &res[nres];
        *r = (toy_result){.task = plan[ip].task, .model = plan[ip].model, .pe = plan[ip].pe, .precision = prec};
        preds[nres] = malloc((size_t)(o.n_test * o.T) * 4);
        toy_opts oi = o;
        oi.epochs = o.epochs * task_epochs[r->task];
        oi.precision = prec;
        if (!preds[nres] || curve_init(&r->loss, oi.epochs * (o.n_train / o.batch), o.n_train / o.batch) ||
            curve_init(&r->val, oi.epochs, 0)) {
            return qkv_cli_report("toy", "out of memory");
        }
        if (run_one(&oi, &train[r->task], &test[r->task], r, preds[nres])) {
            return qkv_cli_report("toy", "%s", qkv_last_error());
        }
        nres++;
    }
    /* with compare, a precision column and a digit more, to set the two side by side */
    printf("\n| task | model | positional encoding |%s parameters | steps | train MSE | test MSE | seconds |\n"
           "|---|---|---|%s---|---|---|---|---|\n", o.compare ? " precision |" : "", o.compare ? "---|" : "");
    for (int i = 0; i < nres; i++)
        printf("| %s | %s | %s |%s %lld | %lld | %.*f | %.*f | %.0f |\n", task_names[res[i].task],
               model_names[res[i].model], pe_names[res[i].pe],
               !o.compare ? "" : res[i].precision == QKV_BF16 ? " bf16 |" : " fp32 |", (long long)res[i].params,
               (long long)(o.epochs * task_epochs[res[i].task] * (o.n_train / o.batch)), 3 + o.compare,
               res[i].train_mse, 3 + o.compare, res[i].test_mse, res[i].seconds);
    rc = o.plots[0] ? plot_all(&o, test, res, nres, preds) : QKV_EXIT_OK;
    for (int i = 0; i < nres; i++)
        free(preds[i]), free(res[i].loss.x), free(res[i].loss.y), free(res[i].val.x), free(res[i].val.y);
    for (int k = 0; k < 2; k++) free(train[k].in), free(train[k].target), free(test[k].in), free(test[k].target);
    return rc;
}
