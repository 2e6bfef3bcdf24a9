/* train_translation.c: `qkv train translation`: a recurrent seq2seq with
 * attention (any score kind, location attention or none) or the
 * transformer encoder-decoder, trained on data/translation's pairs
 * (English→French or the reverse) with the words tokenizers; checkpoints,
 * resume, validation loss and greedy translations every --eval-every
 * steps, loss curves, on the trainers' skeleton (train_run.c). The
 * model's directory (--out) holds checkpoint.safetensors (its metadata:
 * kind, translation.config, translation.train in the run format),
 * words.src, words.tgt and log.tsv, which `qkv translate` and `qkv eval`
 * read. docs/translation.md.
 *
 * Under mpirun -np N (docs/distributed.md) each rank trains on its rows of
 * every batch (the loss's mean is per target token: the ranks' gradients
 * are weighted by their tokens); rank 0 alone writes the directory's
 * files, evaluates and prints, the others waiting for it at the next
 * step. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli/mt.h"
#include "attention/score.h"
#include "cli/train_run.h"
#include "qkv/plot.h"

const char qkv_cli_train_translation_usage[] =
    "usage: qkv train translation [OPTIONS]\n"
    "  trains a translation model on DIR/train.tsv (English TAB French pairs, from\n"
    "  `tools/get_data.sh translation`) with DIR/words.en and DIR/words.fr, saving it\n"
    "  into --out for `qkv translate` and `qkv eval`\n"
    "  -m, --model rnn|transformer   (default rnn)\n"
    "      --rnn gru|lstm            the recurrent layers (default gru)\n"
    "  -a, --attention KIND          none, dot, scaled, cosine, general, reduced (low-rank),\n"
    "                                additive (default), location\n"
    "      --bidirectional           a bidirectional encoder (not with dot, scaled, cosine)\n"
    "      --rank R                  reduced: the rank k of U_a, V_a (default hidden / 4);\n"
    "                                additive: the width of W_a, V_a (default hidden)\n"
    "      --layers N                recurrent or transformer layers (default 1; transformer 2)\n"
    "      --hidden N                RNN state size (default 256); transformer: feed-forward\n"
    "                                size (default 512)\n"
    "      --embed N, --d-model N    embedding size (default 256)\n"
    "      --heads N                 transformer heads (default 4)\n"
    "      --dropout P               (default 0.1)\n"
    "  -d, --direction en-fr|fr-en   (default en-fr)\n"
    "      --data DIR                the pairs and tokenizers (default data/translation)\n"
    "      --vocab N                 words a side: tokenizers of the N most frequent words\n"
    "                                of the training pairs (default 4000; 0: DIR/words.en\n"
    "                                and DIR/words.fr as they are)\n"
    "      --max-words N             keep pairs of at most N words a side (default 8)\n"
    "      --max-len N               tokens of a sentence, <eos> included (default 24, or\n"
    "                                3 x --max-words when that is not larger)\n"
    "  -b, --batch N                 sentences a step (default 64)\n"
    "  -n, --steps N                 steps in all (default 1500)\n"
    "  -e, --epochs E                instead of --steps: E passes over the training pairs\n"
    "      --lr LR                   Adam's learning rate (default 0.002)\n"
    "      --clip NORM               clip the gradient norm (default 1; 0: off)\n"
    "      --teacher-forcing R       feed the target with probability R (RNN; default 1)\n"
    "      --precision fp32|bf16     the matmuls' precision (default fp32; bf16: bf16 inputs,\n"
    "                                FP32 sums, like PyTorch's autocast; docs/bf16.md)\n"
    "  -s, --seed S                  (default 1)\n"
    "  -j, --threads N               OpenMP threads (default: all)\n"
    "  -o, --out DIR                 the model's directory (default runs/translation)\n"
    "      --resume                  continue the run in --out (its settings; --steps or\n"
    "                                --epochs give the new total)\n"
    "      --eval-every N            validation loss and a few greedy translations every N\n"
    "                                steps, with a checkpoint (default 250)\n"
    "  -p, --plots PREFIX            loss curves into PREFIX_loss.png\n"
    "      --zero1                   under mpirun: each rank keeps 1/N of Adam's moments\n"
    "  -h, --help                    show this usage\n"
    "  Under mpirun -np N every batch is split between the N ranks (data-parallel,\n"
    "  docs/distributed.md); rank 0 writes --out, evaluates and prints.\n";

enum {
    O_RNN = 256, O_BIDI, O_LAYERS, O_HIDDEN, O_EMBED, O_HEADS, O_DROPOUT, O_DATA, O_MAXW, O_MAXLEN,
    O_LR, O_CLIP, O_TF, O_RESUME, O_EVAL, O_VOCAB, O_ZERO1, O_PRECISION, O_RANK
};

static const struct option options[] = {
    {"model", required_argument, NULL, 'm'},     {"rnn", required_argument, NULL, O_RNN},
    {"attention", required_argument, NULL, 'a'}, {"bidirectional", no_argument, NULL, O_BIDI},
    {"layers", required_argument, NULL, O_LAYERS}, {"hidden", required_argument, NULL, O_HIDDEN},
    {"embed", required_argument, NULL, O_EMBED}, {"d-model", required_argument, NULL, O_EMBED},
    {"heads", required_argument, NULL, O_HEADS}, {"dropout", required_argument, NULL, O_DROPOUT},
    {"direction", required_argument, NULL, 'd'}, {"data", required_argument, NULL, O_DATA},
    {"vocab", required_argument, NULL, O_VOCAB}, {"max-words", required_argument, NULL, O_MAXW}, {"max-len", required_argument, NULL, O_MAXLEN},
    {"batch", required_argument, NULL, 'b'},     {"steps", required_argument, NULL, 'n'},
    {"epochs", required_argument, NULL, 'e'},    {"lr", required_argument, NULL, O_LR},
    {"clip", required_argument, NULL, O_CLIP},   {"teacher-forcing", required_argument, NULL, O_TF},
    {"seed", required_argument, NULL, 's'},      {"threads", required_argument, NULL, 'j'},
    {"out", required_argument, NULL, 'o'},       {"resume", no_argument, NULL, O_RESUME},
    {"eval-every", required_argument, NULL, O_EVAL}, {"plots", required_argument, NULL, 'p'},
    {"zero1", no_argument, NULL, O_ZERO1}, {"precision", required_argument, NULL, O_PRECISION},
    {"rank", required_argument, NULL, O_RANK},
    QKV_CLI_HELP_OPTION};

typedef struct {
    mt_config c;
    int64_t epochs, threads, eval_every, vocab;
    int resume, set_layers, set_hidden, steps_given, zero1;
    char out[512], plots[512];
} tr_opts;

static int parse(int argc, char **argv, tr_opts *o)
{
    static const char *const models[] = {"rnn", "transformer"}, *const rnns[] = {"gru", "lstm"},
                             *const dirs[] = {"en-fr", "fr-en"};
    qkv_cli_args a;
    qkv_cli_args_init(&a, argc, argv, qkv_cli_train_translation_usage, options, 0, 0);
    int ch;
    while ((ch = qkv_cli_next(&a)) > 0) switch (ch) {
        case 'm': o->c.model = qkv_cli_choice(&a, models, 2); break;
        case O_RNN: o->c.rnn = qkv_cli_choice(&a, rnns, 2) ? QKV_RNN_LSTM : QKV_RNN_GRU; break;
        case 'a': /* "reduced" is the CLI's short name of reduced_rank */
            if (qkv_rnn_attention_parse(strcmp(a.value, "reduced") ? a.value : "reduced_rank",
                                        &o->c.attention) != QKV_OK)
                qkv_cli_error(&a, "--attention: '%s' is not one of none, dot, scaled, cosine, "
                              "general, reduced, low-rank, additive, location", a.value);
            break;
        case O_BIDI: o->c.bidirectional = 1; break;
        case O_LAYERS: o->c.layers = qkv_cli_int(&a, 1, 16), o->set_layers = 1; break;
        case O_HIDDEN: o->c.hidden = qkv_cli_int(&a, 1, 8192), o->set_hidden = 1; break;
        case O_EMBED: o->c.embed = qkv_cli_int(&a, 1, 8192); break;
        case O_HEADS: o->c.heads = qkv_cli_int(&a, 1, 256); break;
        case O_DROPOUT: o->c.dropout = qkv_cli_double(&a, 0, 0.9, 0); break;
        case 'd': o->c.reverse = qkv_cli_choice(&a, dirs, 2); break;
        case O_DATA: snprintf(o->c.data, sizeof o->c.data, "%s", a.value); break;
        case O_VOCAB: o->vocab = qkv_cli_int(&a, 0, (int64_t)1 << 24); break;
        case O_MAXW: o->c.max_words = qkv_cli_int(&a, 1, 1000); break;
        case O_MAXLEN: o->c.max_len = qkv_cli_int(&a, 2, 1000); break;
        case 'b': o->c.batch = qkv_cli_int(&a, 1, 4096); break;
        case 'n': o->c.steps = qkv_cli_int(&a, 1, (int64_t)1 << 40), o->steps_given = 1, o->epochs = 0; break;
        case 'e': o->epochs = qkv_cli_int(&a, 1, 100000), o->steps_given = 1; break;
        case O_LR: o->c.lr = qkv_cli_double(&a, 1e-9, 10, 0); break;
        case O_CLIP: o->c.clip = qkv_cli_double(&a, 0, 1e9, 0); break;
        case O_TF: o->c.teacher_forcing = qkv_cli_double(&a, 0, 1, 0); break;
        case 's': o->c.seed = (uint64_t)qkv_cli_int(&a, 0, INT64_MAX); break;
        case 'j': o->threads = qkv_cli_int(&a, 1, 1024); break;
        case 'o': snprintf(o->out, sizeof o->out, "%s", a.value); break;
        case O_RESUME: o->resume = 1; break;
        case O_EVAL: o->eval_every = qkv_cli_int(&a, 1, (int64_t)1 << 40); break;
        case 'p': snprintf(o->plots, sizeof o->plots, "%s", a.value); break;
        case O_ZERO1: o->zero1 = 1; break;
        case O_PRECISION: o->c.precision = qkv_cli_precision(&a); break;
        case O_RANK: o->c.rank = qkv_cli_int(&a, 1, 8192); break;
        }
    if (ch < 0) return a.status;
    /* qkv_rnn_attention's first values are the score kinds' (score.h's predicates) */
    int ranked = qkv_score_kind_has_rank((int)o->c.attention);
    if (o->c.rank && (o->c.model != MT_RNN || !ranked)) {
        qkv_cli_error(&a, "--rank is for the recurrent model's reduced or additive attention");
        return a.status;
    }
    /* the notes' reduced rank: k much smaller than the states' size */
    if (!o->c.rank && o->c.model == MT_RNN && o->c.attention == QKV_RNN_ATTN_REDUCED_RANK)
        o->c.rank = o->c.hidden / 4 > 0 ? o->c.hidden / 4 : 1;
    if (o->c.model == MT_RNN && o->c.bidirectional && qkv_score_kind_same_dims((int)o->c.attention)) {
        qkv_cli_error(&a, "%s attention compares equal sizes and cannot read a bidirectional "
                      "encoder: use general, reduced, additive, location or none",
                      qkv_rnn_attention_name(o->c.attention));
        return a.status;
    }
    if (o->c.model == MT_TRANSFORMER && o->c.embed % o->c.heads) {
        qkv_cli_error(&a, "--embed %lld is not a multiple of --heads %lld", (long long)o->c.embed,
                      (long long)o->c.heads);
        return a.status;
    }
    if (o->c.max_words >= o->c.max_len) o->c.max_len = o->c.max_words * 3; /* room for punctuation */
    return -1;
}

/* ---- the run ---------------------------------------------------------------- */

typedef struct {
    const tr_opts *o;
    mt_model *m;
    const mt_set *train, *valid;
    const mt_pairs *vpairs;
    int64_t nb, *perm, perm_epoch, start;
    const train_run *t; /* the skeleton's: its eval context */
    FILE *log; /* NULL on ranks other than 0 */
    double window_sum;
    int64_t window_n, window; /* the log's training loss: means of window steps */
    qkv_dist *dist;           /* mpirun: data-parallel; else one process */
} tr_run;

enum { LOG_WINDOW = 25, EVAL_PAIRS = 500, EVAL_SHOW = 3 };
/* LOG_WINDOW steps, or fewer in a short run: a curve of at least 20 points */

/* Validation loss (the first EVAL_PAIRS pairs) and EVAL_SHOW translations. */
static qkv_status evaluate(tr_run *r, int64_t step)
{
    double loss;
    QKV_CLI_TRY(mt_eval_loss(r->t->eval, r->m, r->valid, EVAL_PAIRS, &loss));
    int64_t n = r->valid->n < EVAL_PAIRS ? r->valid->n : EVAL_PAIRS;
    printf("step %lld: validation loss %.4f (perplexity %.1f) on %lld pairs\n", (long long)step,
           loss, exp(loss), (long long)n);
    fprintf(r->log, "valid\t%lld\t%.6f\n", (long long)step, loss);
    fflush(r->log);
    mt_set show = *r->valid;
    show.n = r->valid->n < EVAL_SHOW ? r->valid->n : EVAL_SHOW;
    char *hyps[EVAL_SHOW] = {0};
    QKV_CLI_TRY(mt_translate_all(r->t->eval, r->m, &show, 1, hyps));
    for (int64_t i = 0; i < show.n; i++) {
        int64_t k = show.index[i];
        printf("  %s\n  -> %s\n     (reference: %s)\n", r->vpairs->src[k], hyps[i], r->vpairs->tgt[k]);
        free(hyps[i]);
    }
    fflush(stdout);
    return QKV_OK;
}

/* The permutation of epoch e: Fisher-Yates from a generator seeded by
 * (seed, e), so a resumed run sees the same batches. */
static void shuffle(tr_run *r, int64_t epoch)
{
    qkv_rng g;
    qkv_rng_seed(&g, r->o->c.seed * 1000003u + (uint64_t)epoch);
    int64_t n = r->train->n;
    for (int64_t i = 0; i < n; i++) r->perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(qkv_rng_next(&g) % (uint64_t)(i + 1)), t = r->perm[i];
        r->perm[i] = r->perm[j], r->perm[j] = t;
    }
    r->perm_epoch = epoch;
}

static qkv_status tr_batch(qkv_ctx *c, void *user, int64_t step, qkv_tensor **loss, int64_t *units)
{
    tr_run *r = user;
    const mt_config *cf = &r->m->cfg;
    int root = qkv_dist_rank(r->dist) == 0;
    /* rank 0 evaluates; the others wait for it at this step's agreement */
    if (root && step > r->start && step % r->o->eval_every == 0) QKV_CLI_TRY(evaluate(r, step));
    int64_t e = step / r->nb, b = step % r->nb, B = cf->batch;
    if (e != r->perm_epoch) shuffle(r, e);
    int64_t N = r->train->n - b * B < B ? r->train->n - b * B : B, first, n;
    /* this rank's rows of the batch (all of them on one process); a rank
     * left without one (an epoch's last batch, smaller than the ranks)
     * runs the batch's first row with weight 0: units 0 */
    qkv_dist_shard(r->dist, N, &first, &n);
    int none = n == 0;
    if (none) first = 0, n = 1;
    /* dropout's masks and teacher forcing's draws: each rank its own
     * (rank 0: one process's) */
    uint64_t rk = 0x632BE59BD9B4E019ull * (uint64_t)qkv_dist_rank(r->dist);
    qkv_ctx_set_seed(c, cf->seed * 1000003u + (uint64_t)step + rk);
    mt_batch bt;
    QKV_CLI_TRY(mt_batch_make(c, r->train, r->perm + b * B + first, n, &bt));
    QKV_CLI_TRY(mt_loss(c, r->m, &bt, cf->teacher_forcing, cf->seed + (uint64_t)step + rk, loss));
    /* the mean is per target token: under mpirun the ranks' gradients are
     * weighted by their tokens (the progress line counts target tokens) */
    *units = qkv_dist_size(r->dist) > 1 ? (none ? 0 : bt.tokens) : N;
    return QKV_OK;
}

/* The log's training loss (the global batch's, every rank's): means of
 * window steps. */
static qkv_status tr_after_step(qkv_ctx *c, void *user, const qkv_train_pos *pos, double loss)
{
    tr_run *r = user;
    r->window_sum += loss;
    if (++r->window_n == r->window) {
        if (r->log)
            fprintf(r->log, "train\t%lld\t%.6f\n", (long long)pos->step, r->window_sum / (double)r->window);
        r->window_sum = 0, r->window_n = 0;
    }
    (void)c;
    return QKV_OK;
}

/* Keeps the log's lines up to step (a resumed run rewrites what follows). */
static int log_open(const tr_opts *o, int64_t step, FILE **f)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", o->out, MT_LOG);
    char *keep = NULL;
    size_t len = 0, k = 0;
    if (step > 0) {
        FILE *old = fopen(path, "rb");
        if (old) {
            fclose(old);
            keep = qkv_cli_read_all("train translation", path, &len);
        }
        for (char *s = keep; s && *s;) {
            char *nl = strchr(s, '\n');
            size_t n = nl ? (size_t)(nl - s + 1) : strlen(s);
            char *tab = strchr(s, '\t');
            if (tab && tab < s + n && strtoll(tab + 1, NULL, 10) <= step) memmove(keep + k, s, n), k += n;
            s += n;
        }
    }
    *f = fopen(path, "w");
    if (!*f) {
        qkv_cli_report("train translation", "cannot write %s: %s", path, strerror(errno));
        free(keep);
        return 1;
    }
    if (k) fwrite(keep, 1, k, *f);
    free(keep);
    return 0;
}

/* The log's training (solid) and validation (dashed) curves into PREFIX_loss.png. */
static int plot_log(const tr_opts *o)
{
    char path[600], out[600];
    snprintf(path, sizeof path, "%s/%s", o->out, MT_LOG);
    size_t len;
    char *text = qkv_cli_read_all("train translation", path, &len);
    if (!text) return 1;
    int64_t n = 0;
    for (size_t i = 0; i < len; i++) n += text[i] == '\n';
    double *x = malloc((size_t)(2 * n + 2) * sizeof *x), *y = malloc((size_t)(2 * n + 2) * sizeof *y);
    int64_t nt = 0, nv = 0;
    if (!x || !y) {
        free(text), free(x), free(y);
        return qkv_cli_report("train translation", "out of memory");
    }
    double *vx = x + n + 1, *vy = y + n + 1;
    for (char *s = strtok(text, "\n"); s; s = strtok(NULL, "\n")) {
        char kind[8];
        long long st;
        double l;
        if (sscanf(s, "%7s %lld %lf", kind, &st, &l) != 3) continue;
        if (!strcmp(kind, "train")) x[nt] = (double)st, y[nt++] = l;
        else vx[nv] = (double)st, vy[nv++] = l;
    }
    qkv_series s[2] = {{.label = "training loss", .x = x, .y = y, .n = nt, .colour = 0x1f77b4},
                       {.label = "validation loss", .x = vx, .y = vy, .n = nv, .colour = 0xd62728, .dashed = 1}};
    qkv_line_plot p = {.series = s, .n_series = nv ? 2 : 1, .title = "qkv train translation",
                       .x_label = "step", .y_label = "cross-entropy per token"};
    snprintf(out, sizeof out, "%s_loss.png", o->plots);
    int rc = 0;
    if (qkv_plot_lines(out, &p) != QKV_OK) {
        qkv_cli_report("train translation", "%s", qkv_last_error());
        rc = 1;
    } else {
        printf("wrote %s: training and validation loss\n", out);
    }
    free(text), free(x), free(y);
    return rc;
}

/* Loads the tokenizers: from the data (a new run, then saved into --out)
 * or from --out (resume). */
/* A words tokenizer (lower-cased, marks apart, as tools/get_data.sh
 * builds them) of at most vocab ids from one side of the training pairs. */
static qkv_status train_words(char *const *side, int64_t n, int64_t vocab, qkv_tokenizer **t)
{
    size_t len = 0;
    for (int64_t i = 0; i < n; i++) len += strlen(side[i]) + 1;
    char *text = malloc(len + 1), *q = text;
    if (!text) return qkv_cli_fail(QKV_ERR_NOMEM, "out of memory for the tokenizer's text");
    for (int64_t i = 0; i < n; i++) {
        size_t l = strlen(side[i]);
        memcpy(q, side[i], l), q += l, *q++ = '\n';
    }
    qkv_words_options wo = {.lower = 1, .split_punct = 1, .min_freq = 1, .max_size = vocab};
    qkv_status s = qkv_tokenizer_words_train(text, len, &wo, t);
    free(text);
    return s;
}

static int tokenizers(const tr_opts *o, const mt_pairs *tp, int root, qkv_tokenizer **src, qkv_tokenizer **tgt)
{
    char ps[1100], pt[1100];
    if (!o->resume && o->vocab > 0) {
        if (train_words(tp->src, tp->n, o->vocab, src) != QKV_OK ||
            train_words(tp->tgt, tp->n, o->vocab, tgt) != QKV_OK) {
            return qkv_cli_report("train translation", "the tokenizers: %s", qkv_cli_last_error());
        }
    } else if (o->resume) {
        snprintf(ps, sizeof ps, "%s/%s", o->out, MT_SRC_WORDS);
        snprintf(pt, sizeof pt, "%s/%s", o->out, MT_TGT_WORDS);
    } else {
        snprintf(ps, sizeof ps, "%s/words.%s", o->c.data, o->c.reverse ? "fr" : "en");
        snprintf(pt, sizeof pt, "%s/words.%s", o->c.data, o->c.reverse ? "en" : "fr");
    }
    if (!*src && (qkv_tokenizer_load(ps, src) != QKV_OK || qkv_tokenizer_load(pt, tgt) != QKV_OK)) {
        return qkv_cli_report("train translation", "%s%s", qkv_last_error(),
                o->resume ? "" : " (run tools/get_data.sh translation first, or give --data DIR)");
    }
    if (qkv_tokenizer_kind_of(*src) != QKV_TOKENIZER_WORDS || qkv_tokenizer_kind_of(*tgt) != QKV_TOKENIZER_WORDS) {
        return qkv_cli_report("train translation", "%s and %s must be words tokenizers", ps, pt);
    }
    if (o->resume || !root) return 0;
    snprintf(ps, sizeof ps, "%s/%s", o->out, MT_SRC_WORDS);
    snprintf(pt, sizeof pt, "%s/%s", o->out, MT_TGT_WORDS);
    if (qkv_tokenizer_save(*src, ps) != QKV_OK || qkv_tokenizer_save(*tgt, pt) != QKV_OK) {
        return qkv_cli_report("train translation", "%s", qkv_last_error());
    }
    return 0;
}

typedef struct {
    train_run t; /* the skeleton's part (train_run.h) */
    tr_opts o;
    mt_pairs tp, vp;
    mt_model m;
    int have_model;
    mt_set ts, vs;
    tr_run r;
} tr_state;

static void tr_free(train_run *t)
{
    tr_state *st = t->user;
    if (st->r.log) fclose(st->r.log);
    free(st->r.perm);
    mt_set_free(&st->ts), mt_set_free(&st->vs);
    mt_pairs_free(&st->tp), mt_pairs_free(&st->vp);
    if (st->have_model) mt_model_free(&st->m);
}

/* The configuration resumed, the pairs, the tokenizers and the model; a
 * failure's message is printed here (t->reported). */
static qkv_status setup_model(train_run *t, tr_state *st)
{
    tr_opts *o = &st->o;
    char path[1100], dir[1024], ckpt[1100];
    if (o->resume) {
        int64_t steps = o->c.steps;
        if (mt_config_open(t->cmd, o->out, dir, sizeof dir, ckpt, sizeof ckpt, &o->c))
            return t->reported = 1, qkv_cli_fail(QKV_ERR_FORMAT, "no configuration");
        if (o->steps_given && !o->epochs) o->c.steps = steps;
    }
    t->precision = o->c.precision, t->precision_read = 1;
    snprintf(path, sizeof path, "%s/train.tsv", o->c.data);
    if (access(path, F_OK) != 0)
        return qkv_cli_fail(QKV_ERR_IO, "no %s: run tools/get_data.sh translation first, or give --data DIR", path);
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s.tsv", o->c.data, i ? "valid" : "train");
        if (mt_pairs_read(t->cmd, path, o->c.reverse, i ? &st->vp : &st->tp))
            return t->reported = 1, qkv_cli_fail(QKV_ERR_IO, "cannot read %s", path);
    }
    qkv_tokenizer *src = NULL, *tgt = NULL;
    if (tokenizers(o, &st->tp, qkv_dist_rank(t->dist) == 0, &src, &tgt))
        return t->reported = 1, qkv_tokenizer_free(src), qkv_tokenizer_free(tgt),
               qkv_cli_fail(QKV_ERR_IO, "the tokenizers");
    if (mt_model_init(&st->m, &o->c, src, tgt) != QKV_OK) {
        qkv_cli_report(t->cmd, "the model: %s", qkv_cli_last_error());
        return t->reported = 1, QKV_ERR_ARG;
    }
    st->have_model = 1;
    return QKV_OK;
}

/* The model and the pairs, then the permutation's buffer, Adam's options
 * and the metadata. */
static qkv_status tr_setup(train_run *t)
{
    tr_state *st = t->user;
    tr_opts *o = &st->o;
    QKV_CLI_TRY(setup_model(t, st));
    mt_model *m = &st->m;
    if (mt_set_build(m, &st->tp, m->cfg.max_words, &st->ts) != QKV_OK ||
        mt_set_build(m, &st->vp, m->cfg.max_words, &st->vs) != QKV_OK) {
        qkv_cli_report(t->cmd, "the pairs: %s", qkv_cli_last_error());
        return t->reported = 1, QKV_ERR_ARG;
    }
    if (st->ts.n == 0 || st->vs.n == 0) {
        qkv_cli_report(t->cmd, "no pair of %s/train.tsv or valid.tsv has at most %lld words a side "
                "and %lld tokens", m->cfg.data, (long long)m->cfg.max_words, (long long)m->cfg.max_len - 1);
        return t->reported = 1, QKV_ERR_ARG;
    }
    int64_t nb = (st->ts.n + m->cfg.batch - 1) / m->cfg.batch;
    if (o->epochs) m->cfg.steps = o->epochs * nb;
    QKV_CLI_TRY(mt_config_format(&m->cfg, t->config, sizeof t->config, t->train, sizeof t->train));
    t->params = m->p;
    t->optim = qkv_optim_adam_opts_default();
    t->optim.lr = m->cfg.lr;
    int64_t window = m->cfg.steps / 20 < LOG_WINDOW ? m->cfg.steps / 20 : LOG_WINDOW;
    st->r = (tr_run){o, m, &st->ts, &st->vs, &st->vp, nb, NULL, -1, 0, t, NULL, 0, 0, window > 0 ? window : 1,
                     t->dist};
    st->r.perm = malloc((size_t)st->ts.n * sizeof *st->r.perm);
    if (!st->r.perm) return qkv_cli_fail(QKV_ERR_NOMEM, "out of memory");
    t->tr = (qkv_trainer){.clip_norm = (float)m->cfg.clip, .steps = m->cfg.steps, .checkpoint_every = o->eval_every,
                          .progress = stdout, .unit = qkv_dist_size(t->dist) > 1 ? "target tokens" : "sentences",
                          .batch = tr_batch, .user = &st->r, .after_step = tr_after_step};
    return QKV_OK;
}

static qkv_status tr_resumed(train_run *t)
{
    ((tr_state *)t->user)->r.start = t->pos.step;
    return QKV_OK;
}

/* Rank 0's log, its lines up to the step resumed kept. */
static qkv_status tr_before_agree(train_run *t)
{
    tr_state *st = t->user;
    if (log_open(&st->o, t->pos.step, &st->r.log)) return t->reported = 1, qkv_cli_fail(QKV_ERR_IO, "the log");
    return QKV_OK;
}

static void tr_describe(train_run *t)
{
    tr_state *st = t->user;
    const mt_model *m = &st->m;
    printf("qkv train translation: %s, %s, %lld parameters; %lld training pairs (%lld left out: "
           "over %lld words or %lld tokens), %lld validation pairs; batch %lld, %lld steps (%.2f "
           "epochs)%s, Adam lr %g%s -> %s\n",
           mt_model_name(&m->cfg), mt_direction(&m->cfg), (long long)mt_model_params(m), (long long)st->ts.n,
           (long long)st->ts.dropped, (long long)m->cfg.max_words, (long long)m->cfg.max_len - 1,
           (long long)st->vs.n, (long long)m->cfg.batch, (long long)m->cfg.steps,
           (double)m->cfg.steps / (double)st->r.nb, t->pos.step ? ", resumed" : "", m->cfg.lr,
           m->cfg.clip > 0 ? ", clipped" : "", st->o.out);
    if (qkv_dist_size(t->dist) > 1)
        printf("data-parallel on %d ranks, %d threads each: each takes its rows of every batch\n",
               qkv_dist_size(t->dist), omp_get_max_threads());
    if (t->pos.step) printf("resuming at step %lld\n", (long long)t->pos.step);
}

static int tr_finish(train_run *t, int64_t first, double sec)
{
    tr_state *st = t->user;
    if (qkv_dist_rank(t->dist) == 0 && t->pos.step > first && evaluate(&st->r, t->pos.step) != QKV_OK)
        return train_run_fail(t, "evaluating");
    if (st->r.log) fclose(st->r.log);
    st->r.log = NULL;
    printf("saved %s (step %lld)\n", t->ckpt, (long long)t->pos.step);
    return st->o.plots[0] && qkv_dist_rank(t->dist) == 0 ? plot_log(&st->o) : QKV_EXIT_OK;
}

static const train_hooks tr_hooks = {.setup = tr_setup, .resumed = tr_resumed, .before_agree = tr_before_agree,
                                     .describe = tr_describe, .finish = tr_finish, .free = tr_free};

int qkv_cli_train_translation(int argc, char **argv)
{
    tr_opts o = {.c = {.model = MT_RNN, .rnn = QKV_RNN_GRU, .attention = QKV_RNN_ATTN_ADDITIVE,
                       .layers = 1, .embed = 256, .hidden = 256, .heads = 4, .max_len = 24,
                       .dropout = 0.1, .data = "data/translation", .max_words = 8, .batch = 64,
                       .steps = 1500, .lr = 2e-3, .clip = 1, .teacher_forcing = 1, .seed = 1},
                 .eval_every = 250, .vocab = 4000, .out = "runs/translation"};
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;
    if (o.c.model == MT_TRANSFORMER) {
        if (!o.set_layers) o.c.layers = 2;
        if (!o.set_hidden) o.c.hidden = 512;
    }
    if (o.threads > 0) omp_set_num_threads((int)o.threads);
    tr_state *st = calloc(1, sizeof *st);
    if (!st) return qkv_cli_report("train translation", "out of memory");
    if (qkv_cli_dist_start("train translation", &st->t.dist)) return free(st), QKV_EXIT_FAILURE;
    st->o = o;
    train_run *t = &st->t;
    t->cmd = "train translation", t->family = "translation", t->kind = "translation", t->out = st->o.out;
    t->ckpt_name = MT_CHECKPOINT, t->resume = o.resume, t->zero1 = o.zero1, t->exists_is_usage = 1;
    t->training_what = "training", t->hooks = &tr_hooks, t->user = st;
    rc = train_run_main(t);
    qkv_dist_free(t->dist);
    free(st);
    return rc;
}
