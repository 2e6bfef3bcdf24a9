/* eval.c: `qkv eval CHECKPOINT [OPTIONS]`: scores a trained model. The
 * kind of model is read from the run: "kind" in the checkpoint's metadata
 * (a translation run of an older version: the first line of the config.txt
 * beside it, "kind translation"). Kind NAME is the function in
 * its row of the table below, which gets the whole command line (argv[0]
 * = "eval") and parses its own options. A run's folder (--out DIR of qkv
 * train) may stand for the checkpoint in it. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli/mt.h"
#include "cli/run_format.h"

/* The kinds: X(kind, function, summary). */
#define QKV_CLI_EVAL_KINDS(X)                                                                  \
    X(translation, qkv_cli_eval_translation, "corpus BLEU-4, exact match, loss and perplexity") \
    X(vit, qkv_cli_eval_vision, "accuracy, per-class accuracy, confusion matrix")              \
    X(cnn, qkv_cli_eval_vision, "the same as vit")                                             \
    X(mlp, qkv_cli_eval_vision, "the same as vit")

int qkv_cli_eval_vision(int argc, char **argv);
int qkv_cli_eval_translation(int argc, char **argv);
#define ROW(kind, fn, summary) {#kind, fn},
static const struct {
    const char *kind;
    int (*run)(int argc, char **argv);
} kinds[] = {QKV_CLI_EVAL_KINDS(ROW)};
enum { NKINDS = (int)(sizeof kinds / sizeof *kinds) };

const char qkv_cli_eval_usage[] =
    "usage: qkv eval CHECKPOINT [OPTIONS]\n"
    "  scores the model saved by `qkv train KIND` (CHECKPOINT: the checkpoint, or the\n"
    "  run's --out folder) on its data; the kind is read from the run. Kinds:\n"
#define USAGE_ROW(kind, fn, summary) "    " #kind "  " summary "\n"
    QKV_CLI_EVAL_KINDS(USAGE_ROW)
    "  -h, --help   show this usage\n"
    "  the options of each kind:\n"
    "  translation (qkv train translation): corpus BLEU-4, exact match, loss and perplexity\n"
    "      --split train|valid|test  (default test)\n"
    "      --data DIR         the pairs (default: the directory the model was trained on)\n"
    "  -k, --beam K           beam search with K beams (default 1: greedy)\n"
    "  -n, --limit N          only the first N pairs of the split (default: all)\n"
    "  -o, --output FILE      write the translations there, one a line\n"
    "      --references FILE  write the references there as they were scored (split as\n"
    "                         the tokenizer splits), one a line: with --output, the\n"
    "                         files for qkv bleu --compare (docs/translation.md)\n"
    "  vit, cnn, mlp (qkv train vit|cnn|mlp): accuracy, per-class accuracy, confusion matrix\n"
    "      --data DIR         Fashion-MNIST's files (default: the run's)\n"
    "      --test-limit N     only the first N test images (default: all 10000)\n"
    "      --batch B          images per forward (default 256)\n"
    "      --png FILE, --svg FILE  draw the confusion matrix (a heat map with class names)\n"
    "  -j, --threads N        OpenMP threads\n";

/* The options (of any kind) that take a separate value, for finding CHECKPOINT. */
static int takes_value(const char *arg)
{
    static const char *const with[] = {"--data", "--test-limit", "--batch", "--png", "--svg",
                                       "--threads", "-j", "--split", "--beam", "-k",
                                       "--limit", "-n", "--output", "-o", "--references"};
    for (size_t i = 0; i < sizeof with / sizeof *with; i++)
        if (!strcmp(arg, with[i])) return 1;
    return 0;
}

/* The kind an older translation run's DIR/config.txt names ("kind
 * translation", its first line; deprecated, read only) into kind
 * (malloc'd); 1 after a message. */
static int legacy_kind(const char *dir, char **kind)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, MT_CONFIG);
    size_t len;
    char *text = qkv_cli_read_all("eval", path, &len);
    if (!text) return 1;
    size_t k = strncmp(text, "kind ", 5) ? 0 : strcspn(text + 5, "\n");
    if (k) *kind = strndup(text + 5, k);
    free(text);
    if (!k) return qkv_cli_report("eval", "%s names no kind (a first line such as 'kind translation')", path);
    return *kind ? 0 : qkv_cli_report("eval", "out of memory");
}

/* The kind of the run at arg (a run's folder or its checkpoint: metadata
 * "kind") into kind (malloc'd); 1 after a message. */
static int run_kind(const char *arg, char **kind)
{
    char dir[1024], path[1200], cfg[1200];
    if (mt_config_dir("eval", arg, dir, sizeof dir)) return 1;
    rf_run_checkpoint(arg, "model.ckpt", path, sizeof path);
    snprintf(cfg, sizeof cfg, "%s/%s", dir, MT_CONFIG);
    qkv_status s = access(path, F_OK) == 0 ? qkv_checkpoint_read_meta(path, "kind", kind) : QKV_ERR_IO;
    if (s != QKV_OK && access(cfg, F_OK) == 0) return legacy_kind(dir, kind); /* a run of an older version */
    if (s == QKV_ERR_IO) s = qkv_checkpoint_read_meta(path, "kind", kind); /* its message */
    if (s == QKV_OK) return 0;
    if (s == QKV_ERR_NOTFOUND)
        return qkv_cli_report("eval",
                              "%s is a qkv checkpoint without a kind: qkv eval cannot score it", path);
    return qkv_cli_report("eval", "%s", qkv_last_error());
}

int qkv_cli_eval(int argc, char **argv)
{
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(qkv_cli_eval_usage, stdout);
            return QKV_EXIT_OK;
        }
        if (takes_value(argv[i])) i++;
    }
    if (i >= argc) { /* no CHECKPOINT: the parser says what is wrong (an option, the count) */
        static const struct option any[] = {
            {"data", required_argument, NULL, 256},       {"test-limit", required_argument, NULL, 257},
            {"batch", required_argument, NULL, 258},      {"png", required_argument, NULL, 259},
            {"svg", required_argument, NULL, 260},        {"threads", required_argument, NULL, 'j'},
            {"split", required_argument, NULL, 261},      {"beam", required_argument, NULL, 'k'},
            {"limit", required_argument, NULL, 'n'},      {"output", required_argument, NULL, 'o'},
            {"references", required_argument, NULL, 262}, QKV_CLI_HELP_OPTION};
        qkv_cli_args a;
        qkv_cli_args_init(&a, argc, argv, qkv_cli_eval_usage, any, 1, 1);
        while (qkv_cli_next(&a) > 0) continue;
        return a.status >= 0 ? a.status : QKV_EXIT_USAGE;
    }
    char *kind = NULL;
    if (run_kind(argv[i], &kind)) return QKV_EXIT_FAILURE;
    for (int k = 0; k < NKINDS; k++)
        if (!strcmp(kinds[k].kind, kind)) {
            free(kind);
            return kinds[k].run(argc, argv);
        }
    qkv_cli_report("eval", "%s holds a model of kind '%.40s', which qkv eval cannot score yet", argv[i],
            kind);
    free(kind);
    return QKV_EXIT_FAILURE;
}
