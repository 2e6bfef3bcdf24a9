/* eval.c: `qkv eval CHECKPOINT [OPTIONS]`: scores a trained model on a
 * split of its data. The checkpoint's directory names its kind (the first
 * line of config.txt, "kind NAME"); kind NAME is the function
 * qkv_cli_eval_NAME(argc, argv, dir), one row of the table below (another
 * kind adds its row and function). docs/cli.md, docs/translation.md. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/mt.h"

#define QKV_CLI_EVAL_KINDS(X) X(translation, "corpus BLEU-4, exact match, loss and perplexity")

typedef int (*eval_fn)(int argc, char **argv, const char *dir);
#define DECLARE(name, summary) static int eval_##name(int argc, char **argv, const char *dir);
QKV_CLI_EVAL_KINDS(DECLARE)
#define ROW(name, summary) {#name, eval_##name},
static const struct { const char *name; eval_fn run; } kinds[] = {QKV_CLI_EVAL_KINDS(ROW)};
enum { NKINDS = (int)(sizeof kinds / sizeof *kinds) };

const char qkv_cli_eval_usage[] =
    "usage: qkv eval CHECKPOINT [OPTIONS]\n"
    "  scores the model saved by `qkv train KIND` (CHECKPOINT: its --out directory or\n"
    "  the checkpoint in it) on a split of its data; the kind is read from the\n"
    "  directory's config.txt. Kinds:\n"
#define USAGE_ROW(name, summary) "    " #name "  " summary "\n"
    QKV_CLI_EVAL_KINDS(USAGE_ROW)
    "  translation's options:\n"
    "      --split train|valid|test  (default test)\n"
    "      --data DIR        the pairs (default: the directory the model was trained on)\n"
    "  -k, --beam K          beam search with K beams (default 1: greedy)\n"
    "  -n, --limit N         only the first N pairs of the split (default: all)\n"
    "  -o, --output FILE     write the translations there, one a line\n"
    "  -h, --help            show this usage\n";

enum { O_SPLIT = 256, O_DATA };
static const struct option options[] = {
    {"split", required_argument, NULL, O_SPLIT}, {"data", required_argument, NULL, O_DATA},
    {"beam", required_argument, NULL, 'k'},      {"limit", required_argument, NULL, 'n'},
    {"output", required_argument, NULL, 'o'},    QKV_CLI_HELP_OPTION};

static int eval_translation(int argc, char **argv, const char *dir)
{
    static const char *const splits[] = {"train", "valid", "test"};
    int split = 2;
    int64_t beam = 1, limit = 0;
    const char *data = NULL, *output = NULL;
    qkv_cli_args a;
    qkv_cli_args_init(&a, argc, argv, qkv_cli_eval_usage, options, 1, 1);
    int ch;
    while ((ch = qkv_cli_next(&a)) > 0) switch (ch) {
        case O_SPLIT: split = qkv_cli_choice(&a, splits, 3); break;
        case O_DATA: data = a.value; break;
        case 'k': beam = qkv_cli_int(&a, 1, 64); break;
        case 'n': limit = qkv_cli_int(&a, 1, (int64_t)1 << 40); break;
        case 'o': output = a.value; break;
        }
    if (ch < 0) return a.status;
    (void)dir;
    mt_model m;
    if (mt_model_open("eval", a.operands[0], &m)) return QKV_EXIT_FAILURE;
    char path[1100];
    snprintf(path, sizeof path, "%s/%s.tsv", data ? data : m.cfg.data, splits[split]);
    mt_pairs p = {0};
    mt_set s = {0};
    qkv_ctx *c = NULL;
    char **hyps = NULL;
    const char **refs = NULL;
    int rc = QKV_EXIT_FAILURE;
    if (mt_pairs_read("eval", path, m.cfg.reverse, &p)) goto done;
    if (mt_set_build(&m, &p, m.cfg.max_words, &s) != QKV_OK || qkv_ctx_new(&c) != QKV_OK) {
        fprintf(stderr, "qkv eval: %s\n", mt_last_error());
        goto done;
    }
    if (limit && limit < s.n) s.n = limit;
    if (s.n == 0) {
        fprintf(stderr, "qkv eval: %s has no pair of at most %lld words a side\n", path,
                (long long)m.cfg.max_words);
        goto done;
    }
    double loss;
    hyps = calloc((size_t)s.n, sizeof *hyps);
    refs = calloc((size_t)s.n, sizeof *refs);
    if (!hyps || !refs || mt_eval_loss(c, &m, &s, 0, &loss) != QKV_OK ||
        mt_translate_all(c, &m, &s, beam, hyps) != QKV_OK) {
        fprintf(stderr, "qkv eval: %s\n", hyps && refs ? mt_last_error() : "out of memory");
        goto done;
    }
    /* references split as the tokenizer splits (lower-cased, marks apart), as the outputs are */
    char **pieces = calloc((size_t)s.n, sizeof *pieces);
    int64_t exact = 0;
    for (int64_t i = 0; pieces && i < s.n; i++) {
        const char *ref = p.tgt[s.index[i]];
        if (qkv_tokenizer_words_split(m.tgt_tok, ref, strlen(ref), &pieces[i], NULL, NULL) != QKV_OK) {
            fprintf(stderr, "qkv eval: %s\n", qkv_last_error());
            for (int64_t j = 0; j < i; j++) free(pieces[j]);
            free(pieces);
            goto done;
        }
        refs[i] = pieces[i];
        exact += !strcmp(hyps[i], pieces[i]);
    }
    if (!pieces) goto done;
    qkv_bleu_score b;
    qkv_status bs = qkv_bleu_corpus((const char *const *)hyps, refs, s.n, 1, &b);
    if (bs == QKV_OK) {
        printf("%s, %s, %lld parameters: %s split of %s, %lld pairs (of at most %lld words a side), %s\n",
               mt_model_name(&m.cfg), mt_direction(&m.cfg), (long long)mt_model_params(&m),
               splits[split], path, (long long)s.n, (long long)m.cfg.max_words,
               beam > 1 ? "beam search" : "greedy");
        printf("BLEU %.2f (p1..p4 %.1f/%.1f/%.1f/%.1f, brevity penalty %.3f, %lld/%lld words)\n",
               100 * b.bleu, 100 * b.precision[0], 100 * b.precision[1], 100 * b.precision[2],
               100 * b.precision[3], b.brevity_penalty, (long long)b.hyp_len, (long long)b.ref_len);
        printf("exact match %.2f%% (%lld of %lld)\n", 100.0 * (double)exact / (double)s.n,
               (long long)exact, (long long)s.n);
        printf("loss %.4f per token, perplexity %.2f\n", loss, exp(loss));
        rc = QKV_EXIT_OK;
    } else {
        fprintf(stderr, "qkv eval: %s\n", qkv_last_error());
    }
    if (rc == QKV_EXIT_OK && output) {
        FILE *f = fopen(output, "w");
        for (int64_t i = 0; f && i < s.n; i++) fprintf(f, "%s\n", hyps[i]);
        if (!f || fclose(f)) {
            fprintf(stderr, "qkv eval: cannot write %s\n", output);
            rc = QKV_EXIT_FAILURE;
        }
    }
    for (int64_t i = 0; i < s.n; i++) free(pieces[i]);
    free(pieces);
done:
    for (int64_t i = 0; hyps && i < s.n; i++) free(hyps[i]);
    free(hyps), free(refs);
    qkv_ctx_free(c);
    mt_set_free(&s);
    mt_pairs_free(&p);
    mt_model_free(&m);
    return rc;
}

int qkv_cli_eval(int argc, char **argv)
{
    qkv_cli_args a;
    /* the first pass only finds CHECKPOINT (and answers --help) */
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(qkv_cli_eval_usage, stdout);
            return QKV_EXIT_OK;
        }
        for (const struct option *o = options; o->name; o++) /* skip an option's separate value */
            if (o->has_arg == required_argument &&
                ((!strncmp(argv[i], "--", 2) && !strcmp(argv[i] + 2, o->name)) ||
                 (o->val < 128 && argv[i][1] == o->val && !argv[i][2]))) {
                i++;
                break;
            }
    }
    if (i >= argc) { /* no CHECKPOINT: the parser reports an unknown option or the count */
        qkv_cli_args_init(&a, argc, argv, qkv_cli_eval_usage, options, 1, 1);
        while (qkv_cli_next(&a) > 0) continue;
        return a.status >= 0 ? a.status : QKV_EXIT_USAGE;
    }
    char dir[1024], kind[64];
    if (mt_checkpoint_dir("eval", argv[i], dir, sizeof dir) ||
        mt_checkpoint_kind("eval", dir, kind, sizeof kind))
        return QKV_EXIT_FAILURE;
    for (int k = 0; k < NKINDS; k++)
        if (!strcmp(kinds[k].name, kind)) return kinds[k].run(argc, argv, dir);
    fprintf(stderr, "qkv eval: %s holds a model of kind '%s', which qkv eval cannot score yet\n",
            dir, kind);
    return QKV_EXIT_FAILURE;
}
