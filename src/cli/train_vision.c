/* train_vision.c: `qkv train vit|cnn|mlp`, image classifiers on
 * Fashion-MNIST (tools/get_data.sh fashion-mnist): one trainer for the three
 * kinds, the kind a parameter. AdamW, linear warm-up then cosine decay,
 * gradient clipping; augmentation (RandomCrop with padding 2, horizontal
 * flips) on or off; the test accuracy after every epoch; checkpoints in
 * --out DIR with the model's configuration (vision.c) and the run's
 * options in their metadata, so `qkv eval`, `qkv classify` and --resume
 * need nothing else.
 *
 * Epoch e's order is a shuffle seeded by (seed, e) and step s's
 * augmentation draws from (seed, s), so a resumed run continues bit for bit
 * as if it had never stopped. docs/vision_cli.md has the commands and what
 * they measured.
 *
 * Under mpirun -np N (docs/distributed.md) each rank trains on its rows of
 * every global batch, qkv_train averages the gradients and sets
 * BatchNorm's running statistics to rank 0's after every step; the test
 * set is split between the ranks; rank 0 prints, saves and draws. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli/train_run.h"
#include "cli/vision.h"
#include "qkv/plot.h"

/* What shapes the data and the run, saved as vision.train and restored by --resume. */
typedef struct {
    int64_t epochs, batch, warmup, seed, augment, train_limit;
    double lr, min_lr, weight_decay, clip;
    char data[1024];
} run_opts;

typedef struct {
    run_opts r;
    vision_config g;
    const char *out, *plots;
    int64_t threads, test_limit, stop_after;
    int resume, zero1, sync_bn;
    qkv_precision precision; /* of the matmuls: --precision (on --resume the skeleton reads vision.precision) */
} vt_opts;

/* vision.train in the run format (run_format.h). */
static const rf_field run_fields[] = {
    RF_NUM(run_opts, epochs, RF_I64, 1, 1e15),       RF_NUM(run_opts, batch, RF_I64, 1, 1e15),
    RF_NUM(run_opts, warmup, RF_I64, 0, 1e15),       RF_NUM(run_opts, seed, RF_I64, 0, 9.2e18),
    RF_NUM(run_opts, augment, RF_I64, 0, 1),         RF_NUM(run_opts, train_limit, RF_I64, 0, 1e15),
    RF_NUM(run_opts, lr, RF_F64, 1e-300, 1e300),     RF_NUM(run_opts, min_lr, RF_F64, -1e300, 1e300),
    RF_NUM(run_opts, weight_decay, RF_F64, -1e300, 1e300), RF_NUM(run_opts, clip, RF_F64, -1e300, 1e300),
    RF_STRING(run_opts, data)};

/* The one-line vision.train of older runs: deprecated, read only. */
static int legacy_run_parse(const char *s, void *obj)
{
    run_opts *r = obj;
    long long e, b, w, sd, au, tl;
    int k = 0;
    if (sscanf(s, "epochs=%lld batch=%lld warmup=%lld seed=%lld augment=%lld train_limit=%lld lr=%lf min_lr=%lf "
               "weight_decay=%lf clip=%lf data=%n", &e, &b, &w, &sd, &au, &tl, &r->lr, &r->min_lr,
               &r->weight_decay, &r->clip, &k) != 10 || !k)
        return 0;
    if (e < 1 || b < 1 || w < 0 || sd < 0 || (au != 0 && au != 1) || tl < 0 || !(r->lr > 0)) return 0;
    r->epochs = e, r->batch = b, r->warmup = w, r->seed = sd, r->augment = au, r->train_limit = tl;
    snprintf(r->data, sizeof r->data, "%s", s + k);
    return 1;
}

/* ---- curves ------------------------------------------------------------------ */


/* ---- training ------------------------------------------------------------------- */

typedef struct {
    const vt_opts *o;
    vision_model *model;
    const qkv_image_set *train, *test;
    int64_t spe; /* steps per epoch: whole batches only */
    int64_t *order, order_epoch;
    float *x;    // (B,C,H,W)
    int64_t *y;  // (B)
    const train_run *t; /* the skeleton's: its eval context */
    /* the epoch so far, and the curves */
    double loss_sum, window_sum;
    int64_t right, seen, window_n, window;
    qkv_cli_curve loss, train_acc, test_acc;
    double last_test, t_epoch;
    qkv_dist *dist; /* mpirun: data-parallel; else one process */
} vt_run;

static uint64_t mix(uint64_t seed, uint64_t k) { return seed * 0x9E3779B97F4A7C15ull + k + 1; }

static qkv_status vt_batch(qkv_ctx *c, void *user, int64_t step, qkv_tensor **loss, int64_t *units)
{
    vt_run *r = user;
    const vision_config *g = &r->model->cfg;
    int64_t B = r->o->r.batch, epoch = step / r->spe, b = step % r->spe;
    qkv_rng rng;
    if (epoch != r->order_epoch) { /* this epoch's order */
        for (int64_t i = 0; i < r->train->n; i++) r->order[i] = i;
        qkv_rng_seed(&rng, mix((uint64_t)r->o->r.seed, (uint64_t)epoch));
        QKV_CLI_TRY(qkv_shuffle_i64(&rng, r->order, r->train->n));
        r->order_epoch = epoch;
    }
    qkv_rng_seed(&rng, mix((uint64_t)r->o->r.seed + 1, (uint64_t)step));
    qkv_image_aug aug = {.crop_padding = r->o->r.augment ? 2 : 0, .flip_p = r->o->r.augment ? 0.5f : 0,
                         .mean = &g->mean, .std = &g->std};
    /* The whole global batch (the augmentation draws for all B images in
     * turn: a copy and a crop, little beside the forward), then this rank's
     * rows [first, first + n) (all of them on one process). */
    QKV_CLI_TRY(qkv_image_set_batch(r->train, r->order + b * B, B, &aug, &rng, r->x, r->y));
    int64_t first, n, per = g->channels * g->height * g->width;
    qkv_dist_shard(r->dist, B, &first, &n);
    float *x = r->x + first * per;
    int64_t *y = r->y + first;
    qkv_arena *a = qkv_ctx_arena(c);
    qkv_tensor *tx, *ty, *logits;
    QKV_CLI_TRY(qkv_tensor_wrap(a, x, 4, (int64_t[]){n, g->channels, g->height, g->width}, &tx));
    QKV_CLI_TRY(qkv_tensor_wrap_i64(a, y, 1, (int64_t[]){n}, &ty));
    QKV_CLI_TRY(vision_forward(c, r->model, tx, &logits));
    for (int64_t i = 0; i < n; i++) { /* the training accuracy, on the augmented batch */
        const float *row = logits->data + i * g->classes;
        int64_t best = 0;
        for (int64_t k = 1; k < g->classes; k++)
            if (row[k] > row[best]) best = k;
        r->right += best == y[i];
    }
    r->seen += n;
    *units = n;
    return qkv_cross_entropy(c, logits, ty, QKV_IGNORE_INDEX_DEFAULT, 0, QKV_REDUCTION_MEAN, loss);
}

/* After every step: the loss window; at an epoch's end the test accuracy. */
static qkv_status vt_after_step(qkv_ctx *c, void *user, const qkv_train_pos *pos, double loss)
{
    vt_run *r = user;
    double epochs = (double)pos->step / (double)r->spe;
    r->loss_sum += loss, r->window_sum += loss;
    if (++r->window_n == r->window) {
        qkv_cli_curve_add(&r->loss, epochs, r->window_sum / (double)r->window_n);
        r->window_sum = 0, r->window_n = 0;
    }
    if (pos->step % r->spe) return QKV_OK;
    double acc, counts[2] = {(double)r->right, (double)r->seen};
    QKV_CLI_TRY(vision_evaluate_split(r->t->eval, r->model, r->test, 256, r->dist, &acc));
    if (qkv_dist_size(r->dist) > 1) /* every rank's training images */
        QKV_CLI_TRY(qkv_dist_allreduce_f64(r->dist, counts, 2, QKV_DIST_SUM));
    double train_acc = counts[1] > 0 ? counts[0] / counts[1] : NAN;
    int64_t steps = (int64_t)counts[1] / r->o->r.batch;
    qkv_cli_curve_add(&r->train_acc, epochs, train_acc);
    qkv_cli_curve_add(&r->test_acc, epochs, acc);
    r->last_test = acc;
    if (isatty(fileno(stderr)) && qkv_dist_rank(r->dist) == 0) fputc('\n', stderr);
    double now = qkv_cli_now();
    printf("epoch %lld: train loss %.4f, train accuracy %.2f%%%s, test accuracy %.2f%% (%lld images), "
           "%.0f s\n", (long long)(pos->step / r->spe), steps ? r->loss_sum / (double)steps : NAN,
           100 * train_acc, r->o->r.augment ? " (augmented)" : "", 100 * acc, (long long)r->test->n,
           now - r->t_epoch);
    fflush(stdout);
    r->t_epoch = now;
    r->loss_sum = 0, r->right = 0, r->seen = 0;
    (void)c;
    return QKV_OK;
}

static qkv_status plot_curves(const char *prefix, const vt_run *r, const char *title)
{
    char path[1100];
    qkv_series sl = {.label = "training loss (window mean)", .x = r->loss.x, .y = r->loss.y, .n = r->loss.n,
                     .colour = 0x1f77b4};
    qkv_line_plot pl = {.series = &sl, .n_series = 1, .title = title, .x_label = "epoch",
                        .y_label = "cross-entropy", .width = 800, .height = 480};
    snprintf(path, sizeof path, "%s_loss.png", prefix);
    QKV_CLI_TRY(qkv_plot_lines(path, &pl));
    printf("wrote %s\n", path);
    qkv_series sa[2] = {
        {.label = r->o->r.augment ? "training (augmented batches)" : "training", .x = r->train_acc.x, .y = r->train_acc.y, .n = r->train_acc.n,
         .colour = 0x1f77b4},
        {.label = "test", .x = r->test_acc.x, .y = r->test_acc.y, .n = r->test_acc.n, .colour = 0xd62728,
         .dashed = 1}};
    qkv_line_plot pa = {.series = sa, .n_series = 2, .title = title, .x_label = "epoch",
                        .y_label = "accuracy", .width = 800, .height = 480};
    snprintf(path, sizeof path, "%s_accuracy.png", prefix);
    QKV_CLI_TRY(qkv_plot_lines(path, &pa));
    printf("wrote %s\n", path);
    return QKV_OK;
}

/* ---- options ------------------------------------------------------------------------ */

static const char usage_head[] =
    "  trains an image classifier on Fashion-MNIST (tools/get_data.sh fashion-mnist);\n"
    "  the test accuracy after every epoch; the model in --out DIR/model.ckpt for\n"
    "  qkv eval and qkv classify\n"
    "      --data DIR         Fashion-MNIST's files (default data/fashion-mnist)\n"
    "      --epochs N         (default: vit 28, cnn 5, mlp 10)\n"
    "      --batch B          images per step (default 128)\n"
    "      --lr LR            peak learning rate, AdamW (default 1e-3)\n"
    "      --min-lr LR        the cosine's end (default LR / 100)\n"
    "      --warmup N         linear warm-up steps (default: a tenth of the steps, at most 500)\n"
    "      --weight-decay W   AdamW's (default: vit 0.05, cnn and mlp 0.01)\n"
    "      --clip C           gradient norm clipping, 0 for none (default 1)\n"
    "      --augment on|off   RandomCrop(28, padding=2) and horizontal flips (default on)\n"
    "      --train-limit N    only the first N training images (default: all 60000)\n"
    "      --test-limit N     only the first N test images (default: all 10000)\n"
    "  -o, --out DIR          the run's folder: DIR/model.ckpt (default KIND-run)\n"
    "      --stop-after E     stop (with a checkpoint) after epoch E < --epochs; the\n"
    "                         schedule stays --epochs' (continue with --resume)\n"
    "      --resume           continue the run in --out DIR from its checkpoint (bit-exact);\n"
    "                         its options come from there: only --stop-after, --test-limit,\n"
    "                         --plots, --threads, --zero1, --sync-bn may be given\n"
    "      --plots PREFIX     PREFIX_loss.png and PREFIX_accuracy.png (the curves)\n"
    TRAIN_RUN_USAGE_COMMON
    "      --sync-bn          under mpirun (cnn): BatchNorm's statistics over every rank's\n"
    "                         images (SyncBatchNorm), not each rank's own\n"
    "  Under mpirun -np N every batch is split between the N ranks (data-parallel,\n"
    "  docs/distributed.md); rank 0 prints and writes.\n";

static const char qkv_cli_train_vit_usage[] =
    "usage: qkv train vit [OPTIONS]\n"
    "  a vision transformer (patches, class token, pre-norm encoder, GELU)\n";
static const char vit_options[] =
    "  ViT options (defaults: a model for about 30 minutes on two cores, docs/vision_cli.md):\n"
    "      --patch P          patch side, dividing 28 (default 4: 49 patches)\n"
    "      --d-model D        width (default 64)\n"
    "      --layers L         encoder layers (default 4)\n"
    "      --heads H          attention heads (default 4)\n"
    "      --mlp-dim F        feed-forward width (default 256)\n"
    "      --pool cls|mean    the head reads the class token, or the mean (default cls)\n"
    "      --pos learned|sincos  positions (default learned)\n";
static const char usage_tail[] =
    "  -h, --help             show this usage\n"
    "  exit status: 0 success, 1 runtime error (data, files, a diverging run), 2 usage\n";

static int print_usage(vision_kind kind, FILE *f)
{
    static const char *lines[3] = {
        "usage: qkv train vit [OPTIONS]\n  a vision transformer (patches, class token, pre-norm encoder, GELU)\n",
        "usage: qkv train cnn [OPTIONS]\n  the CNN baseline (conv 32, conv 64, each BatchNorm, ReLU, max-pool; 128 hidden)\n",
        "usage: qkv train mlp [OPTIONS]\n  the MLP baseline (784-256-128-10, ReLU)\n"};
    fputs(lines[kind], f);
    fputs(usage_head, f);
    if (kind == VISION_VIT) fputs(vit_options, f);
    fputs(usage_tail, f);
    return QKV_EXIT_OK;
}

/* What the options say together: a usage error, or -1 to go on. */
static int check(qkv_cli_args *a, const vt_opts *o, vision_kind kind, int run_opt, const char *run_name)
{
    if (o->resume && run_opt)
        qkv_cli_error(a, "--resume takes the run's options from its checkpoint: --%s cannot be given", run_name);
    else if (!o->resume && kind == VISION_VIT && (28 % o->g.patch))
        qkv_cli_error(a, "--patch %lld does not divide 28", (long long)o->g.patch);
    else if (!o->resume && kind == VISION_VIT && o->g.d_model % o->g.heads)
        qkv_cli_error(a, "--d-model %lld is not a multiple of --heads %lld", (long long)o->g.d_model,
                      (long long)o->g.heads);
    else if (!o->resume && kind == VISION_VIT && o->g.pos == QKV_VIT_POS_SINCOS && o->g.d_model % 4)
        qkv_cli_error(a, "--pos sincos needs --d-model a multiple of 4");
    else if (strlen(o->out) > 900)
        qkv_cli_error(a, "--out: the folder's name is longer than 900 characters");
    else if (o->plots && strlen(o->plots) > 900)
        qkv_cli_error(a, "--plots: the prefix is longer than 900 characters");
    return a->status;
}

static int parse(int argc, char **argv, vt_opts *o, vision_kind kind)
{
    enum { DATA = 256, EPOCHS, BATCH, LR, MINLR, WARMUP, WD, CLIP, AUGMENT, TRAINL, TESTL, STOP, RESUME,
           PLOTS, PATCH, DMODEL, LAYERS, HEADS, MLPDIM, POOL, POS, ZERO1, SYNCBN, PRECISION };
    static const struct option options[] = {
        {"data", required_argument, NULL, DATA}, {"epochs", required_argument, NULL, EPOCHS},
        {"batch", required_argument, NULL, BATCH}, {"lr", required_argument, NULL, LR},
        {"min-lr", required_argument, NULL, MINLR}, {"warmup", required_argument, NULL, WARMUP},
        {"weight-decay", required_argument, NULL, WD}, {"clip", required_argument, NULL, CLIP},
        {"augment", required_argument, NULL, AUGMENT}, {"train-limit", required_argument, NULL, TRAINL},
        {"test-limit", required_argument, NULL, TESTL}, {"out", required_argument, NULL, 'o'},
        {"stop-after", required_argument, NULL, STOP}, {"resume", no_argument, NULL, RESUME},
        {"plots", required_argument, NULL, PLOTS}, {"seed", required_argument, NULL, 's'},
        {"threads", required_argument, NULL, 'j'}, {"patch", required_argument, NULL, PATCH},
        {"d-model", required_argument, NULL, DMODEL}, {"layers", required_argument, NULL, LAYERS},
        {"heads", required_argument, NULL, HEADS}, {"mlp-dim", required_argument, NULL, MLPDIM},
        {"pool", required_argument, NULL, POOL}, {"pos", required_argument, NULL, POS},
        {"zero1", no_argument, NULL, ZERO1}, {"sync-bn", no_argument, NULL, SYNCBN},
        {"precision", required_argument, NULL, PRECISION}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    static const char *const onoff[] = {"off", "on"}, *const pools[] = {"cls", "mean"},
                             *const poss[] = {"learned", "sincos"};
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return print_usage(kind, stdout);
    qkv_cli_args a;
    qkv_cli_args_init(&a, argc, argv, qkv_cli_train_vit_usage, options, 0, 0);
    int c, run_opt = 0;
    const char *run_name = NULL;
    double *dv = NULL, lo = 0, hi = 0;
    while ((c = qkv_cli_next(&a)) > 0) {
        dv = NULL;
        if (c >= PATCH && c < ZERO1 && kind != VISION_VIT) {
            qkv_cli_error(&a, "--%s is a ViT option (qkv train vit)", a.name);
            break;
        }
        switch (c) {
        case DATA: snprintf(o->r.data, sizeof o->r.data, "%s", a.value); break;
        case EPOCHS: o->r.epochs = qkv_cli_int(&a, 1, 100000); break;
        case BATCH: o->r.batch = qkv_cli_int(&a, 1, 1 << 16); break;
        case LR: dv = &o->r.lr, lo = 1e-9, hi = 10; break;
        case MINLR: dv = &o->r.min_lr, lo = 0, hi = 10; break;
        case WARMUP: o->r.warmup = qkv_cli_int(&a, 0, (int64_t)1 << 40); break;
        case WD: dv = &o->r.weight_decay, lo = 0, hi = 10; break;
        case CLIP: dv = &o->r.clip, lo = 0, hi = 1e9; break;
        case AUGMENT: o->r.augment = qkv_cli_choice(&a, onoff, 2); break;
        case TRAINL: o->r.train_limit = qkv_cli_int(&a, 1, (int64_t)1 << 40); break;
        case TESTL: o->test_limit = qkv_cli_int(&a, 1, (int64_t)1 << 40); break;
        case 'o': o->out = a.value; break;
        case STOP: o->stop_after = qkv_cli_int(&a, 1, 100000); break;
        case RESUME: o->resume = 1; break;
        case PLOTS: o->plots = a.value; break;
        case 's': o->r.seed = qkv_cli_int(&a, 0, INT64_MAX); break;
        case 'j': o->threads = qkv_cli_int(&a, 1, 1024); break;
        case PRECISION: o->precision = qkv_cli_precision(&a); break;
        case PATCH: o->g.patch = qkv_cli_int(&a, 1, 28); break;
        case DMODEL: o->g.d_model = qkv_cli_int(&a, 1, 16384); break;
        case LAYERS: o->g.layers = qkv_cli_int(&a, 1, 256); break;
        case HEADS: o->g.heads = qkv_cli_int(&a, 1, 1024); break;
        case MLPDIM: o->g.mlp_dim = qkv_cli_int(&a, 1, 65536); break;
        case POOL: o->g.pool = (qkv_vit_pool)qkv_cli_choice(&a, pools, 2); break;
        case POS: o->g.pos = qkv_cli_choice(&a, poss, 2) ? QKV_VIT_POS_SINCOS : QKV_VIT_POS_LEARNED; break;
        case ZERO1: o->zero1 = 1; break;
        case SYNCBN: o->sync_bn = 1; break;
        }
        if (dv) *dv = qkv_cli_double(&a, lo, hi, 0);
        if (c != STOP && c != TESTL && c != 'o' && c != RESUME && c != PLOTS && c != 'j' && c != ZERO1 &&
            c != SYNCBN)
            run_opt = 1, run_name = a.name;
    }
    if (c < 0 || a.status >= 0) return a.status;
    return check(&a, o, kind, run_opt, run_name);
}

/* ---- the command --------------------------------------------------------------------- */

typedef struct {
    train_run t; /* the skeleton's part (train_run.h) */
    vt_opts o;
    vision_kind kind;
    vision_model model;
    qkv_image_set *train, *test;
    vt_run run;
} vt_state;

static void vt_free(train_run *t)
{
    vt_state *st = t->user;
    vision_model_free(&st->model);
    qkv_image_set_free(st->train);
    qkv_image_set_free(st->test);
    free(st->run.x), free(st->run.y), free(st->run.order);
    qkv_cli_curve *cv[3] = {&st->run.loss, &st->run.train_acc, &st->run.test_acc};
    for (int i = 0; i < 3; i++) free(cv[i]->x), free(cv[i]->y);
}

/* The model of a new run (the training set's mean and std into its
 * configuration), or of the run being resumed. */
static qkv_status setup_model(train_run *t, vt_state *st)
{
    vt_opts *o = &st->o;
    if (o->resume) {
        QKV_CLI_TRY(vision_model_load(&st->model, t->ckpt, NULL, 0));
        if (st->model.cfg.kind != st->kind)
            return qkv_cli_fail(QKV_ERR_ARG, "%s holds a %s, not a %s: resume it with qkv train %s", t->ckpt,
                               vision_kind_names[st->model.cfg.kind], vision_kind_names[st->kind],
                               vision_kind_names[st->model.cfg.kind]);
        QKV_CLI_TRY(train_run_read_train(t, run_fields, RF_COUNT(run_fields), &o->r, sizeof o->r, legacy_run_parse));
        o->g = st->model.cfg;
        QKV_CLI_TRY(vision_load_set(o->r.data, 1, o->r.train_limit, &st->train));
        return vision_load_set(o->r.data, 0, o->test_limit, &st->test);
    }
    QKV_CLI_TRY(vision_load_set(o->r.data, 1, o->r.train_limit, &st->train));
    QKV_CLI_TRY(vision_load_set(o->r.data, 0, o->test_limit, &st->test));
    o->g.channels = st->train->channels, o->g.height = st->train->height, o->g.width = st->train->width;
    o->g.classes = st->train->classes;
    QKV_CLI_TRY(qkv_image_set_stats(st->train, &o->g.mean, &o->g.std));
    qkv_rng_seed(&t->rng, (uint64_t)o->r.seed);
    return vision_model_init(&st->model, &o->g, &t->rng);
}

/* The model and data, then the schedule, the batches' buffers and the
 * metadata. */
static qkv_status vt_setup(train_run *t)
{
    vt_state *st = t->user;
    vt_opts *o = &st->o;
    QKV_CLI_TRY(setup_model(t, st));
    vt_run *r = &st->run;
    int64_t B = o->r.batch, spe = st->train->n / B;
    if (spe < 1)
        return qkv_cli_fail(QKV_ERR_ARG, "%lld training images make no whole batch of %lld", (long long)st->train->n,
                            (long long)B);
    int64_t total = o->r.epochs * spe;
    if (!o->resume) {
        if (o->r.warmup < 0) o->r.warmup = total / 10 < 500 ? total / 10 : 500;
        if (o->r.min_lr < 0) o->r.min_lr = o->r.lr / 100;
    }
    *r = (vt_run){.o = o, .t = t, .model = &st->model, .train = st->train, .test = st->test, .spe = spe,
                  .order_epoch = -1, .last_test = NAN, .dist = t->dist};
    r->window = spe / 10 > 1 ? spe / 10 : 1;
    int64_t per = o->g.channels * o->g.height * o->g.width;
    r->x = malloc((size_t)(B * per) * sizeof *r->x);
    r->y = malloc((size_t)B * sizeof *r->y);
    r->order = malloc((size_t)st->train->n * sizeof *r->order);
    if (!r->x || !r->y || !r->order) return qkv_cli_fail(QKV_ERR_NOMEM, "out of memory");
    t->params = st->model.p;
    t->optim = qkv_optim_adamw_opts_default();
    t->optim.lr = o->r.lr;
    t->optim.weight_decay = o->r.weight_decay;
    t->sched = (qkv_schedule){.base_lr = o->r.lr, .warmup_steps = o->r.warmup, .decay = QKV_SCHEDULE_COSINE,
                              .total_steps = total > o->r.warmup ? total : o->r.warmup + 1, .min_lr = o->r.min_lr};
    t->has_schedule = 1;
    QKV_CLI_TRY(vision_config_format(&st->model.cfg, t->config, sizeof t->config));
    QKV_CLI_TRY(rf_write(run_fields, RF_COUNT(run_fields), &o->r, t->train, sizeof t->train));
    int64_t stop = o->stop_after > 0 && o->stop_after * spe < total ? o->stop_after * spe : total;
    t->tr = (qkv_trainer){.clip_norm = (float)o->r.clip, .steps = stop, .checkpoint_every = spe,
                          .progress = stderr, .unit = "images", .batch = vt_batch, .user = r,
                          .after_step = vt_after_step, .sync_batchnorm = o->sync_bn};
    return QKV_OK;
}

static qkv_status vt_resumed(train_run *t)
{
    vt_state *st = t->user;
    if (t->pos.step >= st->o.r.epochs * st->run.spe)
        return qkv_cli_fail(QKV_ERR_ARG, "%s is at epoch %lld already (--epochs %lld)", t->ckpt,
                            (long long)(t->pos.step / st->run.spe), (long long)st->o.r.epochs);
    return QKV_OK;
}

static void describe(const vision_config *g, char *buf, size_t n)
{
    if (g->kind == VISION_VIT)
        snprintf(buf, n, "ViT: patch %lld (%lld patches and a class token), d_model %lld, %lld layers, %lld heads, "
                 "mlp %lld, pool %s, %s positions", (long long)g->patch,
                 (long long)((g->height / g->patch) * (g->width / g->patch)), (long long)g->d_model,
                 (long long)g->layers, (long long)g->heads, (long long)g->mlp_dim,
                 g->pool == QKV_VIT_POOL_CLS ? "cls" : "mean", g->pos == QKV_VIT_POS_SINCOS ? "sincos" : "learned");
    else
        snprintf(buf, n, "%s", g->kind == VISION_CNN ? "CNN: conv 32, conv 64 (BatchNorm, ReLU, max-pool), 128 hidden"
                                                     : "MLP: 784-256-128-10");
}

static void vt_describe(train_run *t)
{
    vt_state *st = t->user;
    const vt_opts *o = &st->o;
    int64_t spe = st->run.spe;
    char desc[300];
    describe(&st->model.cfg, desc, sizeof desc);
    printf("qkv %s: Fashion-MNIST from %s: %lld training images, %lld test images; normalised by mean %.4f, "
           "std %.4f\n", t->cmd, o->r.data, (long long)st->train->n, (long long)st->test->n, st->model.cfg.mean,
           st->model.cfg.std);
    printf("model: %s: %lld parameters\n", desc, (long long)qkv_params_numel_trainable(st->model.p));
    printf("training: %s%lld epochs of %lld steps of %lld images, AdamW lr %g (warm-up %lld steps, cosine to %g), "
           "weight decay %g, clip %g, augmentation %s, %d threads%s; checkpoints in %s\n",
           o->resume ? "resumed, " : "", (long long)o->r.epochs, (long long)spe, (long long)o->r.batch, o->r.lr,
           (long long)o->r.warmup, o->r.min_lr, o->r.weight_decay, o->r.clip,
           o->r.augment ? "crop (padding 2) and flip" : "off", omp_get_max_threads(), qkv_cli_dist_ranks(t->dist),
           t->ckpt);
    if (o->resume)
        printf("resuming at epoch %lld (step %lld)\n", (long long)(t->pos.step / spe), (long long)t->pos.step);
}

static void vt_describe_more(train_run *t)
{
    vt_state *st = t->user;
    if (st->kind == VISION_CNN && qkv_dist_size(t->dist) > 1)
        printf("BatchNorm: %s\n", st->o.sync_bn ? "the statistics of every rank's images (--sync-bn)"
                                                : "each rank's own statistics; rank 0's running statistics "
                                                  "to every rank after each step");
}

static int vt_finish(train_run *t, int64_t first, double sec)
{
    vt_state *st = t->user;
    int64_t images = (t->pos.step - first) * st->o.r.batch;
    printf("done: epoch %lld, test accuracy %.2f%%, %lld images trained on in %.0f s (%.0f images/s), checkpoint %s\n",
           (long long)(t->pos.step / st->run.spe), 100 * st->run.last_test, (long long)images, sec,
           (double)images / sec, t->ckpt);
    if (st->o.plots && qkv_dist_rank(t->dist) == 0) {
        char title[200];
        snprintf(title, sizeof title, "qkv %s on Fashion-MNIST, %lld parameters", t->cmd,
                 (long long)qkv_params_numel_trainable(st->model.p));
        if (plot_curves(st->o.plots, &st->run, title)) return train_run_fail(t, "plots");
    }
    return QKV_EXIT_OK;
}

static const train_hooks vt_hooks = {.setup = vt_setup, .resumed = vt_resumed, .describe = vt_describe,
                                     .describe_more = vt_describe_more, .finish = vt_finish, .free = vt_free};

int qkv_cli_train_vision(int argc, char **argv, vision_kind kind)
{
    const char *cmd = argv[0];
    vt_opts o = {.r = {.epochs = kind == VISION_VIT ? 28 : kind == VISION_CNN ? 5 : 10, .batch = 128, .warmup = -1,
                       .seed = 1, .augment = 1, .lr = 1e-3, .min_lr = -1,
                       .weight_decay = kind == VISION_VIT ? 0.05 : 0.01, .clip = 1, .data = "data/fashion-mnist"},
                 .g = {.kind = kind, .patch = 4, .d_model = 64, .layers = 4, .heads = 4, .mlp_dim = 256}};
    static const char *const outs[3] = {"vit-run", "cnn-run", "mlp-run"};
    o.out = outs[kind];
    int rc = parse(argc, argv, &o, kind);
    if (rc >= 0) return rc;
    if (o.threads > 0) omp_set_num_threads((int)o.threads);
    vt_state *st = calloc(1, sizeof *st);
    if (!st) return qkv_cli_report(cmd, "out of memory");
    if (qkv_cli_dist_start(cmd, &st->t.dist)) return free(st), QKV_EXIT_FAILURE;
    st->o = o, st->kind = kind;
    train_run *t = &st->t;
    t->cmd = cmd, t->family = "vision", t->kind = vision_kind_names[kind], t->out = st->o.out;
    t->ckpt_name = VISION_CKPT_NAME, t->resume = o.resume, t->zero1 = o.zero1, t->batch = o.r.batch;
    t->keep_rng = 1, t->precision = o.precision, t->hooks = &vt_hooks, t->user = st;
    rc = train_run_main(t);
    qkv_dist_free(t->dist);
    free(st);
    return rc;
}

int qkv_cli_train_vit(int argc, char **argv) { return qkv_cli_train_vision(argc, argv, VISION_VIT); }
int qkv_cli_train_cnn(int argc, char **argv) { return qkv_cli_train_vision(argc, argv, VISION_CNN); }
int qkv_cli_train_mlp(int argc, char **argv) { return qkv_cli_train_vision(argc, argv, VISION_MLP); }
