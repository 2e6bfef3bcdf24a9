/* eval.c: `qkv eval CHECKPOINT [OPTIONS]`: scores a trained model. The
 * checkpoint's metadata "kind" names the kind of model; kind NAME is the
 * function in its row of the table below, which gets the whole command
 * line (argv[0] = "eval") and parses its own options. A run's folder
 * (--out DIR of qkv train) may stand for the checkpoint in it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cli/cli.h"

/* The kinds: X(kind, function, summary). */
#define QKV_CLI_EVAL_KINDS(X)                                                                  \
    X(vit, qkv_cli_eval_vision, "accuracy, per-class accuracy, confusion matrix")              \
    X(cnn, qkv_cli_eval_vision, "the same as vit")                                             \
    X(mlp, qkv_cli_eval_vision, "the same as vit")

int qkv_cli_eval_vision(int argc, char **argv);
extern const char qkv_cli_eval_vision_usage[];
#define ROW(kind, fn, summary) {#kind, fn},
static const struct {
    const char *kind;
    int (*run)(int argc, char **argv);
} kinds[] = {QKV_CLI_EVAL_KINDS(ROW)};
enum { NKINDS = (int)(sizeof kinds / sizeof *kinds) };

const char qkv_cli_eval_usage[] =
    "usage: qkv eval CHECKPOINT [OPTIONS]\n"
    "  scores the model saved by `qkv train KIND` (CHECKPOINT: the checkpoint, or the\n"
    "  run's --out folder) on its test data; the kind is in the checkpoint. Kinds:\n"
#define USAGE_ROW(kind, fn, summary) "    " #kind "  " summary "\n"
    QKV_CLI_EVAL_KINDS(USAGE_ROW)
    "  -h, --help   show this usage\n"
    "  the options of each kind:\n";

/* The options (of any kind) that take a separate value, for finding CHECKPOINT. */
static int takes_value(const char *arg)
{
    static const char *const with[] = {"--data", "--test-limit", "--batch", "--png", "--svg", "--threads", "-j"};
    for (size_t i = 0; i < sizeof with / sizeof *with; i++)
        if (!strcmp(arg, with[i])) return 1;
    return 0;
}

int qkv_cli_eval(int argc, char **argv)
{
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(qkv_cli_eval_usage, stdout);
            fputs(qkv_cli_eval_vision_usage, stdout);
            return QKV_EXIT_OK;
        }
        if (takes_value(argv[i])) i++;
    }
    if (i >= argc) {
        fprintf(stderr, "qkv eval: expects a CHECKPOINT (try: qkv eval --help)\n");
        return QKV_EXIT_USAGE;
    }
    char file[1200], *kind = NULL;
    struct stat st;
    if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) snprintf(file, sizeof file, "%s/model.ckpt", argv[i]);
    else snprintf(file, sizeof file, "%s", argv[i]);
    qkv_status s = qkv_checkpoint_read_meta(file, "kind", &kind);
    if (s) {
        if (s == QKV_ERR_NOTFOUND)
            fprintf(stderr, "qkv eval: %s is a qkv checkpoint without a kind: qkv eval cannot score it\n", file);
        else
            fprintf(stderr, "qkv eval: %s\n", qkv_last_error());
        return QKV_EXIT_FAILURE;
    }
    for (int k = 0; k < NKINDS; k++)
        if (!strcmp(kinds[k].kind, kind)) {
            free(kind);
            return kinds[k].run(argc, argv);
        }
    fprintf(stderr, "qkv eval: %s holds a model of kind '%.40s', which qkv eval cannot score yet\n", file, kind);
    free(kind);
    return QKV_EXIT_FAILURE;
}
