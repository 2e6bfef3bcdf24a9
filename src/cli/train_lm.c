/* train_lm.c: `qkv train lm`, a GPT-style language model (pre-norm blocks,
 * causal self-attention, GELU feed-forward, final LayerNorm, learned
 * positions or rotary ones (--pos rotary), output layer tied to the token embedding) trained on a text
 * corpus, by default the King James Bible at character level
 * (tools/get_data.sh kjv). AdamW, linear warm-up then cosine decay,
 * gradient clipping; validation loss every --eval-every steps on the last
 * --val-fraction of the corpus's tokens; checkpoints in --out DIR with the
 * model's options, its tokenizer and the run's options in their metadata,
 * so `qkv generate DIR/lm.ckpt` and `--resume` need nothing else.
 *
 * Step s's batch depends only on (seed, s), and dropout's masks are seeded
 * from them too, so a resumed run continues bit for bit as if it had never
 * stopped. docs/lm.md has the commands and what they measured.
 *
 * Under mpirun -np N (docs/distributed.md) each rank takes its rows of
 * every global batch, qkv_train averages the gradients; the validation's
 * batches are split between the ranks; rank 0 prints, saves and draws. */
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli/cli.h"
#include "cli/lm_common.h"
#include "cli/train_run.h"
#include "qkv/plot.h"

/* What shapes the data and the run, saved as lm.train and restored by --resume. */
typedef struct {
    int64_t context, batch, steps, warmup, seed;
    double lr, min_lr, clip, weight_decay, val_fraction;
    char corpus[1024];
} run_opts;

typedef struct {
    run_opts r;
    const char *tokenizer, *out, *plots;
    int64_t layers, d_model, heads, ff, eval_every, eval_batches, save_every, threads, sample, stop_at;
    double dropout, time_limit;
    int untied, resume, rotary, zero1;
    qkv_precision precision; /* of the matmuls: --precision (on --resume the skeleton reads lm.precision) */
} lm_opts;

/* ---- lm.train ------------------------------------------------------------ */

/* lm.train in the run format (run_format.h). */
static const rf_field run_fields[] = {
    RF_NUM(run_opts, context, RF_I64, 1, 1e15),    RF_NUM(run_opts, batch, RF_I64, 1, 1e15),
    RF_NUM(run_opts, steps, RF_I64, 0, 1e15),      RF_NUM(run_opts, warmup, RF_I64, 0, 1e15),
    RF_NUM(run_opts, seed, RF_I64, 0, 9.2e18),     RF_NUM(run_opts, lr, RF_F64, -1e300, 1e300),
    RF_NUM(run_opts, min_lr, RF_F64, -1e300, 1e300), RF_NUM(run_opts, clip, RF_F64, -1e300, 1e300),
    RF_NUM(run_opts, weight_decay, RF_F64, -1e300, 1e300),
    RF_NUM(run_opts, val_fraction, RF_F64, 1e-300, 0.9999999999999999), RF_STRING(run_opts, corpus)};

/* The one-line lm.train of older runs: deprecated, read only. */
static int legacy_run_parse(const char *s, void *obj)
{
    run_opts *r = obj;
    long long c, b, st, w, sd;
    int k = 0;
    if (sscanf(s, "context=%lld batch=%lld steps=%lld warmup=%lld seed=%lld lr=%lf min_lr=%lf clip=%lf "
               "weight_decay=%lf val_fraction=%lf corpus=%n", &c, &b, &st, &w, &sd, &r->lr, &r->min_lr,
               &r->clip, &r->weight_decay, &r->val_fraction, &k) != 10 || !k)
        return 0;
    if (c < 1 || b < 1 || st < 0 || w < 0 || sd < 0 || !(r->val_fraction > 0 && r->val_fraction < 1))
        return 0;
    r->context = c, r->batch = b, r->steps = st, r->warmup = w, r->seed = sd;
    snprintf(r->corpus, sizeof r->corpus, "%s", s + k);
    return 1;
}

/* ---- data ------------------------------------------------------------------ */

typedef struct {
    int64_t *ids, n;  /* the corpus's tokens */
    int64_t n_train;  /* [0, n_train) train, [n_train, n) validation */
} corpus;

static qkv_status read_file(const char *path, char **text, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT && strstr(path, "data/kjv/kjv.txt"))
            return qkv_cli_fail(QKV_ERR_IO, "%s is missing: run tools/get_data.sh kjv from the repository's "
                            "root (or give --corpus FILE)", path);
        return qkv_cli_fail(QKV_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    }
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        char *b = realloc(buf, cap *= 2);
        if (!b) free(buf);
        buf = b;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf) return qkv_cli_fail(QKV_ERR_NOMEM, "out of memory reading %s", path);
    if (bad) return free(buf), qkv_cli_fail(QKV_ERR_IO, "cannot read %s", path);
    buf[n] = 0;
    *text = buf, *len = n;
    return QKV_OK;
}

/* The tokenizer --tokenizer names: bytes, chars (trained on the corpus),
 * chars:FILE, bpe:FILE, gpt2 (data/gpt2) or gpt2:DIR; spec and text as
 * lm_model keeps them. */
static qkv_status make_tokenizer(const char *arg, const char *text, size_t len, qkv_tokenizer **tok,
                                 char **spec, char **file)
{
    *tok = NULL, *spec = NULL, *file = NULL;
    qkv_status s;
    if (!strcmp(arg, "chars")) s = qkv_tokenizer_chars_train(text, len, tok);
    else if (!strcmp(arg, "gpt2")) s = qkv_tokenizer_open("gpt2:data/gpt2", tok);
    else s = qkv_tokenizer_open(arg, tok);
    if (s) return s;
    qkv_tokenizer_kind k = qkv_tokenizer_kind_of(*tok);
    if (k == QKV_TOKENIZER_WORDPIECE) {
        qkv_tokenizer_free(*tok), *tok = NULL;
        return qkv_cli_fail(QKV_ERR_ARG, "--tokenizer %s: a WordPiece tokenizer is for BERT encoders (qkv embed), not language models", arg);
    }
    const char *name = k == QKV_TOKENIZER_BYTES ? "bytes" : k == QKV_TOKENIZER_CHARS ? "chars" : "bpe";
    char buf[4200];
    if (k == QKV_TOKENIZER_GPT2) { /* the folder as an absolute path: generate may run elsewhere */
        char *dir = realpath(!strcmp(arg, "gpt2") ? "data/gpt2" : arg + 5, NULL);
        snprintf(buf, sizeof buf, "gpt2:%s", dir ? dir : arg + 5);
        free(dir);
    } else {
        snprintf(buf, sizeof buf, "%s", name);
    }
    *spec = strdup(buf);
    size_t fl;
    if (*spec && (k == QKV_TOKENIZER_CHARS || k == QKV_TOKENIZER_BPE))
        s = qkv_tokenizer_save_text(*tok, file, &fl);
    if (!s && !*spec) s = qkv_cli_fail(QKV_ERR_NOMEM, "out of memory");
    return s;
}

/* The corpus's tokens and split; text is the file's, path names it. */
static qkv_status split_corpus(const char *path, const char *text, size_t len, const qkv_tokenizer *tok,
                               double val_fraction, int64_t context, corpus *cp)
{
    QKV_CLI_TRY(qkv_tokenizer_encode(tok, text, len, &cp->ids, &cp->n));
    int64_t n_val = (int64_t)floor((double)cp->n * val_fraction);
    cp->n_train = cp->n - n_val;
    if (cp->n_train < context + 1 || n_val < context + 1)
        return qkv_cli_fail(QKV_ERR_ARG, "%s: %lld tokens give %lld for training and %lld for validation; each "
                        "needs more than the context (%lld)", path, (long long)cp->n, (long long)cp->n_train,
                        (long long)n_val, (long long)context);
    return QKV_OK;
}

/* ---- training ---------------------------------------------------------------- */

/* Loss curves: the training loss's mean over windows of steps, and the
 * validation loss at each evaluation. */

typedef struct {
    const lm_opts *o;
    lm_model *model;
    const corpus *cp;
    int64_t *x, *y; // (B,T) each
    train_run *t;   /* the skeleton's: the eval context, the checkpoint's parts */
    qkv_cli_curve train, val;
    double window_sum;
    int64_t window_n, window;
    double last_val;
    /* --time-limit: the clock's start and what a stop saves. */
    double t0;
    qkv_dist *dist; /* mpirun: data-parallel; else one process */
} lm_run;

/* Rows [first, first + n) of a batch of B windows of T tokens of [lo, hi)
 * at offsets drawn from rng (all B drawn, so that every rank's rows are
 * those of one process's batch) into rows [0, n) of x and y (y the next
 * tokens). */
static void fill_batch(const corpus *cp, qkv_rng *rng, int64_t lo, int64_t hi, int64_t B, int64_t first,
                       int64_t n, int64_t T, int64_t *x, int64_t *y)
{
    uint64_t span = (uint64_t)(hi - lo - T);
    for (int64_t b = 0; b < B; b++) {
        int64_t off = lo + (int64_t)(qkv_rng_next(rng) % span);
        if (b < first || b >= first + n) continue;
        memcpy(x + (b - first) * T, cp->ids + off, (size_t)T * sizeof *x);
        memcpy(y + (b - first) * T, cp->ids + off + 1, (size_t)T * sizeof *y);
    }
}

/* Mean cross-entropy of logits(x) against y. */
static qkv_status batch_loss(qkv_ctx *c, const qkv_lm *m, int64_t *x, int64_t *y, int64_t B, int64_t T,
                             qkv_tensor **loss)
{
    qkv_arena *a = qkv_ctx_arena(c);
    qkv_tensor *tx, *ty, *logits, *flat;
    QKV_CLI_TRY(qkv_tensor_wrap_i64(a, x, 2, (int64_t[]){B, T}, &tx));
    QKV_CLI_TRY(qkv_tensor_wrap_i64(a, y, 1, (int64_t[]){B * T}, &ty));
    QKV_CLI_TRY(qkv_lm_forward(c, m, tx, NULL, &logits));
    QKV_CLI_TRY(qkv_reshape(c, logits, 2, (int64_t[]){B * T, m->o.vocab_size}, &flat));
    return qkv_cross_entropy(c, flat, ty, QKV_IGNORE_INDEX_DEFAULT, 0, QKV_REDUCTION_MEAN, loss);
}

static uint64_t mix(uint64_t seed, uint64_t step) { return seed * 0x9E3779B97F4A7C15ull + step + 1; }

static qkv_status lm_batch(qkv_ctx *c, void *user, int64_t step, qkv_tensor **loss, int64_t *units)
{
    lm_run *r = user;
    int64_t B = r->o->r.batch, T = r->o->r.context, first, n;
    qkv_dist_shard(r->dist, B, &first, &n); /* this rank's rows (all of them on one process) */
    qkv_rng rng;
    qkv_rng_seed(&rng, mix((uint64_t)r->o->r.seed, (uint64_t)step));
    fill_batch(r->cp, &rng, 0, r->cp->n_train, B, first, n, T, r->x, r->y);
    /* dropout's masks: each rank its own (rank 0: one process's) */
    qkv_ctx_set_seed(c, mix((uint64_t)r->o->r.seed + 1, (uint64_t)step) +
                            0x632BE59BD9B4E019ull * (uint64_t)qkv_dist_rank(r->dist));
    *units = n * T;
    return batch_loss(c, &r->model->m, r->x, r->y, n, T, loss);
}

/* Validation loss: the same eval_batches batches every time (drawn from a
 * fixed seed over the validation tokens), in eval mode without a tape.
 * Under mpirun rank r computes batches r, r + N, ...; every batch's loss
 * goes to every rank (a sum with zeros, exact) and the mean is taken in
 * batch order: the bits of one process. The loss goes to r->last_val and
 * to the validation curve at step. */
static qkv_status validate(lm_run *r, int64_t step)
{
    int64_t B = r->o->r.batch, T = r->o->r.context, nb = r->o->eval_batches;
    int rank = qkv_dist_rank(r->dist), size = qkv_dist_size(r->dist);
    double *losses = calloc((size_t)nb, sizeof *losses);
    if (!losses) return qkv_cli_fail(QKV_ERR_NOMEM, "out of memory for the validation");
    qkv_rng rng;
    qkv_rng_seed(&rng, mix((uint64_t)r->o->r.seed + 2, 0));
    qkv_ctx_set_training(r->t->eval, 0);
    qkv_ctx_set_grad(r->t->eval, 0);
    qkv_status s = QKV_OK;
    for (int64_t i = 0; i < nb && !s; i++) {
        qkv_ctx_reset(r->t->eval);
        fill_batch(r->cp, &rng, r->cp->n_train, r->cp->n, B, 0, i % size == rank ? B : 0, T, r->x, r->y);
        qkv_tensor *loss;
        if (i % size == rank && !(s = batch_loss(r->t->eval, &r->model->m, r->x, r->y, B, T, &loss)))
            losses[i] = loss->data[0];
    }
    if (size > 1) s = qkv_cli_dist_agree(r->dist, s, "validation");
    if (!s && size > 1) s = qkv_dist_allreduce_f64(r->dist, losses, nb, QKV_DIST_SUM);
    double sum = 0;
    for (int64_t i = 0; i < nb; i++) sum += losses[i];
    free(losses);
    if (s) return s;
    r->last_val = sum / (double)nb;
    qkv_cli_curve_add(&r->val, (double)step, r->last_val);
    return QKV_OK;
}

/* At the time limit: a checkpoint and a validation at this step (unless the
 * step made them already), then a stop that the command reports as done. */
static qkv_status time_up(lm_run *r, const qkv_train_pos *pos, int saved, int validated)
{
    train_run *t = r->t;
    if (!saved) QKV_CLI_TRY(qkv_dist_checkpoint_save(r->dist, t->ckpt, r->model->p, t->opt, pos, &t->rng, &t->meta));
    if (!validated) QKV_CLI_TRY(validate(r, pos->step));
    if (qkv_dist_rank(r->dist) == 0) {
        if (isatty(fileno(stderr))) fputc('\n', stderr);
        fprintf(stderr, "step %lld: the time limit (%g minutes) is reached: stopped, validation loss %.4f\n",
                (long long)pos->step, r->o->time_limit, r->last_val);
    }
    t->stopped = 1;
    return qkv_cli_fail(QKV_ERR_STATE, "stopped at the time limit");
}

static qkv_status after_step(qkv_ctx *c, void *user, const qkv_train_pos *pos, double loss)
{
    lm_run *r = user;
    int64_t every = r->o->save_every > 0 ? r->o->save_every : r->o->eval_every;
    int last = pos->step == r->o->r.steps || pos->step == r->o->stop_at;
    int over = r->o->time_limit > 0 && qkv_cli_now() - r->t0 > 60 * r->o->time_limit && !last;
    if (r->o->time_limit > 0 && qkv_dist_size(r->dist) > 1) /* rank 0's clock decides for all */
        QKV_CLI_TRY(qkv_dist_broadcast(r->dist, &over, sizeof over, 0));
    r->window_sum += loss;
    if (++r->window_n == r->window || pos->step == r->o->r.steps || pos->step == r->o->stop_at) {
        qkv_cli_curve_add(&r->train, (double)pos->step, r->window_sum / (double)r->window_n);
        r->window_sum = 0, r->window_n = 0;
    }
    if (pos->step % r->o->eval_every && !last)
        return over ? time_up(r, pos, pos->step % every == 0, 0) : QKV_OK;
    QKV_CLI_TRY(validate(r, pos->step));
    double v = r->last_val;
    if (qkv_dist_rank(r->dist) == 0) {
        if (isatty(fileno(stderr))) fputc('\n', stderr);
        fprintf(stderr, "step %lld: validation loss %.4f (train %.4f)\n", (long long)pos->step, v, loss);
    }
    return over ? time_up(r, pos, pos->step % every == 0, 1) : QKV_OK;
}

static qkv_status plot_losses(const char *prefix, const lm_run *r, const char *title)
{
    char path[1100];
    const char *dot = strrchr(prefix, '.'), *slash = strrchr(prefix, '/');
    int has_ext = dot && (!slash || dot > slash);
    snprintf(path, sizeof path, has_ext ? "%s" : "%s_loss.png", prefix);
    qkv_series s[2] = {
        {.label = "training (window mean)", .x = r->train.x, .y = r->train.y, .n = r->train.n, .colour = 0x1f77b4},
        {.label = "validation", .x = r->val.x, .y = r->val.y, .n = r->val.n, .colour = 0xd62728, .dashed = 1}};
    qkv_line_plot p = {.series = s, .n_series = 2, .title = title, .x_label = "step",
                       .y_label = "cross-entropy (nats per token)", .width = 800, .height = 480};
    QKV_CLI_TRY(qkv_plot_lines(path, &p));
    fprintf(stderr, "wrote %s\n", path);
    return QKV_OK;
}

/* ---- options --------------------------------------------------------------------- */

const char qkv_cli_train_lm_usage[] =
    "usage: qkv train lm [OPTIONS]\n"
    "  trains a GPT-style language model (pre-norm blocks, causal self-attention, GELU,\n"
    "  final LayerNorm, learned or rotary positions, output layer tied to the token embedding)\n"
    "  on a text corpus; by default the King James Bible at character level\n"
    "  (tools/get_data.sh kjv), readable text in a few minutes on two cores\n"
    "      --corpus FILE      UTF-8 text (default data/kjv/kjv.txt)\n"
    "      --tokenizer SPEC   chars (default: the corpus's characters), bytes, chars:FILE,\n"
    "                         bpe:FILE (qkv tokenizer train), gpt2 (data/gpt2) or gpt2:DIR\n"
    "      --val-fraction F   the last F of the corpus's tokens for validation (default 0.05)\n"
    "      --layers N         blocks (default 4)\n"
    "      --d-model E        width (default 128)\n"
    "      --heads H          attention heads (default 4)\n"
    "      --ff F             feed-forward width (default 4 * E)\n"
    "      --dropout P        (default 0)\n"
    "      --untied           an output layer of its own (default: tied to the embedding)\n"
    "      --pos KIND         positions: learned (a table added to the embedding, default)\n"
    "                         or rotary (RoPE on every head's q and k, base 10000)\n"
    "      --context T        tokens per sequence, the model's max length (default 128)\n"
    "      --batch B          sequences per step (default 32)\n"
    "      --steps N          optimizer steps (default 1500)\n"
    "      --lr LR            peak learning rate, AdamW (default 3e-3)\n"
    "      --min-lr LR        the cosine's end (default LR / 10)\n"
    "      --warmup N         linear warm-up steps (default 100)\n"
    "      --weight-decay W   AdamW's (default 0.01)\n"
    "      --clip C           gradient norm clipping, 0 for none (default 1)\n"
    "      --eval-every N     validation loss every N steps (default 250)\n"
    "      --eval-batches N   batches in a validation (default 8)\n"
    "      --save-every N     checkpoint every N steps (default: --eval-every), and at the end\n"
    "  -o, --out DIR          the run's folder: DIR/lm.ckpt (default lm-run)\n"
    "      --stop-at N        stop (with a checkpoint) at step N < --steps; the schedule\n"
    "                         stays --steps' (a run in pieces, each continued by --resume)\n"
    "      --time-limit MIN   stop (with a checkpoint and a validation) after the step\n"
    "                         that passes MIN minutes of training\n"
    "      --resume           continue the run in --out DIR from its checkpoint (bit-exact);\n"
    "                         its options come from there: only --steps, --stop-at,\n"
    "                         --time-limit,\n"
    "                         --eval-every, --eval-batches, --save-every, --plots,\n"
    "                         --sample, --threads, --zero1\n"
    "      --plots PREFIX     the loss curves into PREFIX_loss.png (or PREFIX if it has an\n"
    "                         extension: .png, .svg, .pdf)\n"
    "      --sample N         tokens of a sample printed at the end (default 300; 0: none)\n"
    TRAIN_RUN_USAGE_COMMON
    "  -h, --help             show this usage\n"
    "  Under mpirun -np N every batch is split between the N ranks (data-parallel,\n"
    "  docs/distributed.md); rank 0 prints and writes.\n"
    "  exit status: 0 success, 1 runtime error (data, files, a diverging run), 2 usage\n";

/* What the options say together: a usage error, or -1 to go on. */
static int check(qkv_cli_args *a, const lm_opts *o, int run_opt, const char *run_name)
{
    if (o->resume && run_opt)
        qkv_cli_error(a, "--resume takes the run's options from its checkpoint: --%s cannot be given", run_name);
    else if (!o->resume && o->d_model % o->heads)
        qkv_cli_error(a, "--d-model %lld is not a multiple of --heads %lld", (long long)o->d_model,
                      (long long)o->heads);
    else if (!o->resume && o->rotary == 1 && (o->d_model / o->heads) % 2)
        qkv_cli_error(a, "--pos rotary needs an even head size: --d-model %lld / --heads %lld is %lld",
                      (long long)o->d_model, (long long)o->heads, (long long)(o->d_model / o->heads));
    else if (strlen(o->out) > 900)
        qkv_cli_error(a, "--out: the folder's name is longer than 900 characters");
    else if (o->plots && strlen(o->plots) > 900)
        qkv_cli_error(a, "--plots: the prefix is longer than 900 characters");
    return a->status;
}

static int parse(int argc, char **argv, lm_opts *o)
{
    enum { CORPUS = 256, TOKENIZER, VALF, LAYERS, DMODEL, HEADS, FF, DROPOUT, UNTIED, CONTEXT, BATCH,
           STEPS, LR, MINLR, WARMUP, WD, CLIP, EVAL, EVALB, SAVE, RESUME, PLOTS, SAMPLE, STOP, TLIMIT,
           POS, ZERO1, PRECISION };
    static const char *const pos_names[] = {"learned", "rotary"};
    static const struct option options[] = {
        {"corpus", required_argument, NULL, CORPUS}, {"tokenizer", required_argument, NULL, TOKENIZER},
        {"val-fraction", required_argument, NULL, VALF}, {"layers", required_argument, NULL, LAYERS},
        {"d-model", required_argument, NULL, DMODEL}, {"heads", required_argument, NULL, HEADS},
        {"ff", required_argument, NULL, FF}, {"dropout", required_argument, NULL, DROPOUT},
        {"untied", no_argument, NULL, UNTIED}, {"context", required_argument, NULL, CONTEXT},
        {"pos", required_argument, NULL, POS},
        {"batch", required_argument, NULL, BATCH}, {"steps", required_argument, NULL, STEPS},
        {"lr", required_argument, NULL, LR}, {"min-lr", required_argument, NULL, MINLR},
        {"warmup", required_argument, NULL, WARMUP}, {"weight-decay", required_argument, NULL, WD},
        {"clip", required_argument, NULL, CLIP}, {"eval-every", required_argument, NULL, EVAL},
        {"eval-batches", required_argument, NULL, EVALB}, {"save-every", required_argument, NULL, SAVE},
        {"out", required_argument, NULL, 'o'}, {"resume", no_argument, NULL, RESUME},
        {"plots", required_argument, NULL, PLOTS}, {"stop-at", required_argument, NULL, STOP},
        {"time-limit", required_argument, NULL, TLIMIT}, {"sample", required_argument, NULL, SAMPLE},
        {"seed", required_argument, NULL, 's'}, {"threads", required_argument, NULL, 'j'},
        {"zero1", no_argument, NULL, ZERO1}, {"precision", required_argument, NULL, PRECISION},
        QKV_CLI_HELP_OPTION};
    qkv_cli_args a;
    qkv_cli_args_init(&a, argc, argv, qkv_cli_train_lm_usage, options, 0, 0);
    int c, run_opt = 0; /* an option --resume takes from the checkpoint */
    const char *run_name = NULL;
    double *dv = NULL, lo = 0, hi = 0;
    while ((c = qkv_cli_next(&a)) > 0) {
        dv = NULL;
        switch (c) {
        case CORPUS: snprintf(o->r.corpus, sizeof o->r.corpus, "%s", a.value); break;
        case TOKENIZER: o->tokenizer = a.value; break;
        case VALF: dv = &o->r.val_fraction, lo = 1e-6, hi = 0.5; break;
        case LAYERS: o->layers = qkv_cli_int(&a, 1, 256); break;
        case DMODEL: o->d_model = qkv_cli_int(&a, 1, 16384); break;
        case HEADS: o->heads = qkv_cli_int(&a, 1, 1024); break;
        case FF: o->ff = qkv_cli_int(&a, 1, 65536); break;
        case DROPOUT: dv = &o->dropout, lo = 0, hi = 0.9; break;
        case TLIMIT: dv = &o->time_limit, lo = 1e-3, hi = 1e6; break;
        case UNTIED: o->untied = 1; break;
        case POS: o->rotary = qkv_cli_choice(&a, pos_names, 2); break;
        case CONTEXT: o->r.context = qkv_cli_int(&a, 2, 1 << 16); break;
        case BATCH: o->r.batch = qkv_cli_int(&a, 1, 1 << 16); break;
        case STEPS: o->r.steps = qkv_cli_int(&a, 1, (int64_t)1 << 40); break;
        case LR: dv = &o->r.lr, lo = 1e-9, hi = 10; break;
        case MINLR: dv = &o->r.min_lr, lo = 0, hi = 10; break;
        case WARMUP: o->r.warmup = qkv_cli_int(&a, 0, (int64_t)1 << 40); break;
        case WD: dv = &o->r.weight_decay, lo = 0, hi = 10; break;
        case CLIP: dv = &o->r.clip, lo = 0, hi = 1e9; break;
        case EVAL: o->eval_every = qkv_cli_int(&a, 1, (int64_t)1 << 40); break;
        case EVALB: o->eval_batches = qkv_cli_int(&a, 1, 100000); break;
        case SAVE: o->save_every = qkv_cli_int(&a, 1, (int64_t)1 << 40); break;
        case 'o': o->out = a.value; break;
        case RESUME: o->resume = 1; break;
        case PLOTS: o->plots = a.value; break;
        case SAMPLE: o->sample = qkv_cli_int(&a, 0, 1 << 20); break;
        case STOP: o->stop_at = qkv_cli_int(&a, 1, (int64_t)1 << 40); break;
        case 's': o->r.seed = qkv_cli_int(&a, 0, INT64_MAX); break;
        case 'j': o->threads = qkv_cli_int(&a, 1, 1024); break;
        case ZERO1: o->zero1 = 1; break;
        case PRECISION: o->precision = qkv_cli_precision(&a); break;
        }
        if (dv) *dv = qkv_cli_double(&a, lo, hi, 0);
        if (c != STEPS && c != EVAL && c != EVALB && c != SAVE && c != 'o' && c != RESUME && c != PLOTS &&
            c != SAMPLE && c != STOP && c != TLIMIT && c != 'j' && c != ZERO1)
            run_opt = 1, run_name = a.name;
    }
    if (c < 0) return a.status;
    return check(&a, o, run_opt, run_name);
}

/* ---- the command ------------------------------------------------------------------ */

typedef struct {
    train_run t; /* the skeleton's part (train_run.h) */
    lm_opts o;
    lm_model model;
    corpus cp;
    lm_run run;
} lm_state;

static void lm_free(train_run *t)
{
    lm_state *st = t->user;
    lm_model_free(&st->model);
    free(st->cp.ids);
    free(st->run.x);
    free(st->run.y);
    free(st->run.train.x), free(st->run.train.y), free(st->run.val.x), free(st->run.val.y);
}

/* The model and data of the run being resumed. */
static qkv_status setup_resumed(train_run *t, lm_state *st)
{
    lm_opts *o = &st->o;
    QKV_CLI_TRY(lm_model_load(&st->model, t->ckpt));
    int64_t steps = o->r.steps;
    QKV_CLI_TRY(train_run_read_train(t, run_fields, RF_COUNT(run_fields), &o->r, sizeof o->r, legacy_run_parse));
    if (steps > 0) o->r.steps = steps;
    char *text;
    size_t len;
    QKV_CLI_TRY(read_file(o->r.corpus, &text, &len));
    qkv_status s = split_corpus(o->r.corpus, text, len, st->model.tok, o->r.val_fraction, o->r.context, &st->cp);
    free(text);
    return s;
}

/* The model and data of a new run. */
static qkv_status setup_new(train_run *t, lm_state *st)
{
    lm_opts *o = &st->o;
    char *text, *spec, *file;
    size_t len;
    qkv_tokenizer *tok;
    QKV_CLI_TRY(read_file(o->r.corpus, &text, &len));
    qkv_status s = make_tokenizer(o->tokenizer, text, len, &tok, &spec, &file);
    if (s) return free(text), qkv_tokenizer_free(tok), free(spec), free(file), s;
    qkv_lm_opts mo = qkv_lm_opts_default(qkv_tokenizer_vocab_size(tok), o->d_model, o->heads, o->layers,
                                         o->r.context);
    mo.layer.activation = QKV_ACTIVATION_GELU;
    mo.layer.norm_first = 1;
    mo.layer.dim_feedforward = o->ff > 0 ? o->ff : 4 * o->d_model;
    mo.layer.dropout = (float)o->dropout;
    mo.tie_weights = !o->untied;
    mo.posenc = o->rotary == 1 ? QKV_POSENC_ROTARY : QKV_POSENC_LEARNED;
    qkv_rng_seed(&t->rng, (uint64_t)o->r.seed);
    if ((s = lm_model_init(&st->model, &mo, tok, spec, file, &t->rng))) return free(text), s;
    /* GPT-2's embedding init, N(0, 0.02), instead of nn.Embedding's N(0, 1):
     * with the output layer tied to it, N(0, 1) rows make logits of
     * standard deviation about sqrt(d_model) and a first loss near 60. */
    qkv_tensor *emb[2] = {st->model.m.tok.emb.weight,
                          mo.posenc == QKV_POSENC_LEARNED ? st->model.m.pos.weight : NULL};
    for (int i = 0; i < 2; i++)
        if (emb[i]) qkv_rng_fill_normal(&t->rng, emb[i]->data, qkv_tensor_numel(emb[i]), 0, 0.02f);
    s = split_corpus(o->r.corpus, text, len, tok, o->r.val_fraction, o->r.context, &st->cp);
    free(text);
    return s;
}

/* The model and data, then the batches' buffers, the optimizer's options,
 * the schedule and the metadata (lm.config: qkv_lm_opts_format's line). */
static qkv_status lm_setup(train_run *t)
{
    lm_state *st = t->user;
    lm_opts *o = &st->o;
    QKV_CLI_TRY(o->resume ? setup_resumed(t, st) : setup_new(t, st));
    lm_run *r = &st->run;
    *r = (lm_run){.o = o, .model = &st->model, .cp = &st->cp, .last_val = NAN, .t = t, .dist = t->dist};
    r->window = o->r.steps / 200 > 10 ? o->r.steps / 200 : 10;
    r->x = malloc((size_t)(o->r.batch * o->r.context) * sizeof *r->x);
    r->y = malloc((size_t)(o->r.batch * o->r.context) * sizeof *r->y);
    if (!r->x || !r->y) return qkv_cli_fail(QKV_ERR_NOMEM, "out of memory");
    t->params = st->model.p;
    t->optim = qkv_optim_adamw_opts_default();
    t->optim.lr = o->r.lr;
    t->optim.weight_decay = o->r.weight_decay;
    t->sched = (qkv_schedule){.base_lr = o->r.lr, .warmup_steps = o->r.warmup, .decay = QKV_SCHEDULE_COSINE,
                              .total_steps = o->r.steps > o->r.warmup ? o->r.steps : o->r.warmup + 1,
                              .min_lr = o->r.min_lr};
    t->has_schedule = 1;
    QKV_CLI_TRY(qkv_lm_opts_format(&st->model.o, t->config, sizeof t->config));
    QKV_CLI_TRY(rf_write(run_fields, RF_COUNT(run_fields), &o->r, t->train, sizeof t->train));
    QKV_CLI_TRY(train_run_meta(t, "lm.tokenizer", st->model.tok_spec));
    if (st->model.tok_text) QKV_CLI_TRY(train_run_meta(t, "lm.tokenizer_file", st->model.tok_text));
    t->tr = (qkv_trainer){.clip_norm = (float)o->r.clip,
                          .steps = o->stop_at > 0 && o->stop_at < o->r.steps ? o->stop_at : o->r.steps,
                          .checkpoint_every = o->save_every > 0 ? o->save_every : o->eval_every,
                          .progress = stderr, .unit = "tokens", .batch = lm_batch, .user = r,
                          .after_step = after_step};
    return QKV_OK;
}

static qkv_status lm_resumed(train_run *t)
{
    lm_state *st = t->user;
    if (t->pos.step >= st->o.r.steps)
        return qkv_cli_fail(QKV_ERR_ARG, "%s is at step %lld already (--steps %lld)", t->ckpt,
                            (long long)t->pos.step, (long long)st->o.r.steps);
    return QKV_OK;
}

static void lm_describe(train_run *t)
{
    lm_state *st = t->user;
    const lm_opts *o = &st->o;
    const lm_model *m = &st->model;
    printf("qkv train lm: %s, %lld tokens (%s tokenizer, %lld ids): %lld train, %lld validation (the last %g)\n",
           o->r.corpus, (long long)st->cp.n, m->tok_spec, (long long)m->o.vocab_size,
           (long long)st->cp.n_train, (long long)(st->cp.n - st->cp.n_train), o->r.val_fraction);
    printf("model: %lld layers, d_model %lld, %lld heads, feed-forward %lld, context %lld, %s output layer: "
           "%lld parameters\n", (long long)m->o.num_layers, (long long)m->o.layer.d_model,
           (long long)m->o.layer.nhead, (long long)m->o.layer.dim_feedforward,
           (long long)m->o.max_len, m->o.tie_weights ? "tied" : "separate",
           (long long)qkv_params_numel(m->p));
    printf("training: %s%lld steps of %lld x %lld tokens, AdamW lr %g (warm-up %lld, cosine to %g), clip %g, "
           "%d threads%s; checkpoints in %s\n", o->resume ? "resumed, " : "", (long long)o->r.steps,
           (long long)o->r.batch, (long long)o->r.context, o->r.lr, (long long)o->r.warmup, o->r.min_lr, o->r.clip,
           omp_get_max_threads(), qkv_cli_dist_ranks(t->dist), t->ckpt);
    if (o->resume) printf("resuming at step %lld\n", (long long)t->pos.step);
    st->run.t0 = qkv_cli_now(); /* --time-limit's clock */
}

/* A sample at temperature 0.8, continuing the validation text's first
 * context/4 tokens. */
static void print_sample(lm_state *st, int64_t chars)
{
    lm_sample_opts so = {.max_new_tokens = chars, .temperature = 0.8f, .top_p = 1, .seed = 1};
    int64_t start = st->cp.n_train, n = st->o.r.context / 4 > 0 ? st->o.r.context / 4 : 1;
    int64_t *all, n_all;
    double sec;
    printf("\nsample (temperature 0.8) after the validation text's first %lld tokens:\n", (long long)n);
    char *text;
    size_t len;
    if (!qkv_tokenizer_decode(st->model.tok, st->cp.ids + start, n, &text, &len)) {
        fwrite(text, 1, len, stdout);
        free(text);
    }
    if (lm_generate_stream(&st->model, st->cp.ids + start, n, &so, stdout, &all, &n_all, &sec) == QKV_OK)
        free(all);
    printf("\n");
}

static int lm_finish(train_run *t, int64_t first, double sec)
{
    lm_state *st = t->user;
    const lm_opts *o = &st->o;
    int root = qkv_dist_rank(t->dist) == 0;
    int64_t tokens = (t->pos.step - first) * o->r.batch * o->r.context;
    printf("done: step %lld, validation loss %.4f nats per token, %lld tokens trained on in %.0f s (%.0f tokens/s), "
           "checkpoint %s\n", (long long)t->pos.step, st->run.last_val, (long long)tokens, sec,
           (double)tokens / sec, t->ckpt);
    if (o->plots && root) {
        char title[200];
        snprintf(title, sizeof title, "qkv train lm: %.120s, %lld parameters", o->r.corpus,
                 (long long)qkv_params_numel(st->model.p));
        if (plot_losses(o->plots, &st->run, title)) return train_run_fail(t, "plots");
    }
    if (o->sample > 0 && root) print_sample(st, o->sample);
    return QKV_EXIT_OK;
}

static const train_hooks lm_hooks = {.setup = lm_setup, .resumed = lm_resumed, .describe = lm_describe,
                                     .finish = lm_finish, .free = lm_free};

int qkv_cli_train_lm(int argc, char **argv)
{
    lm_opts o = {.r = {.context = 128, .batch = 32, .steps = 0, .warmup = 100, .seed = 1, .lr = 3e-3,
                       .min_lr = -1, .clip = 1, .weight_decay = 0.01, .val_fraction = 0.05,
                       .corpus = "data/kjv/kjv.txt"},
                 .tokenizer = "chars", .out = "lm-run", .layers = 4, .d_model = 128, .heads = 4,
                 .eval_every = 250, .eval_batches = 8, .sample = 300};
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;
    if (o.threads > 0) omp_set_num_threads((int)o.threads);
    if (!o.resume) {
        if (o.r.steps == 0) o.r.steps = 1500;
        if (o.r.min_lr < 0) o.r.min_lr = o.r.lr / 10;
    }
    lm_state *st = calloc(1, sizeof *st);
    if (!st) return qkv_cli_report("train lm", "out of memory");
    if (qkv_cli_dist_start("train lm", &st->t.dist)) return free(st), QKV_EXIT_FAILURE;
    st->o = o;
    train_run *t = &st->t;
    t->cmd = "train lm", t->family = "lm", t->kind = "lm", t->out = st->o.out, t->ckpt_name = LM_CKPT_NAME;
    t->resume = o.resume, t->zero1 = o.zero1, t->batch = o.r.batch, t->keep_rng = 1;
    t->precision = o.precision, t->hooks = &lm_hooks, t->user = st;
    rc = train_run_main(t);
    qkv_dist_free(t->dist);
    free(st);
    return rc;
}
