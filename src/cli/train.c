/* train.c: `qkv train KIND [OPTIONS]`: one trainer per kind of model.
 * Kind NAME is the function qkv_cli_train_NAME(argc, argv), which answers
 * its own --help (in src/cli/train_NAME.c, or the command that already
 * trains it); adding a kind is that file and its row below. It gets argv[0]
 * = "train NAME", for its messages. */
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"

#define QKV_CLI_TRAIN_KINDS(X)                                                                 \
    X(toy, "the lecture's toy experiment (the same as qkv toy)")                                \
    X(lm, "a GPT-style language model on a text corpus (default: the KJV, characters)")       \
    X(translation, "English/French translation: RNN seq2seq with attention, or transformer")   \
    X(vit, "a vision transformer on Fashion-MNIST")                                            \
    X(cnn, "the CNN baseline on Fashion-MNIST")                                                \
    X(mlp, "the MLP baseline on Fashion-MNIST")

#define DECLARE(name, summary) int qkv_cli_train_##name(int argc, char **argv);
QKV_CLI_TRAIN_KINDS(DECLARE)
#define ROW(name, summary) {#name, summary, NULL, qkv_cli_train_##name},
static const qkv_cli_command kinds[] = {QKV_CLI_TRAIN_KINDS(ROW)};
enum { NKINDS = (int)(sizeof kinds / sizeof *kinds) };

const char qkv_cli_train_usage[] =
    "usage: qkv train KIND [OPTIONS]\n"
    "  trains a model of KIND with built-in defaults; `qkv train KIND --help`\n"
    "  lists KIND's options. Kinds:\n"
#define USAGE_ROW(name, summary) "    " #name "  " summary "\n"
    QKV_CLI_TRAIN_KINDS(USAGE_ROW)
    "  -h, --help   show this usage\n";

/* `qkv toy` trains the toy experiment; `qkv train toy` is the same. */
int qkv_cli_toy(int argc, char **argv);
int qkv_cli_train_toy(int argc, char **argv) { return qkv_cli_toy(argc, argv); }

int qkv_cli_train(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "qkv train: which kind of model? (try: qkv train --help)\n%s", qkv_cli_train_usage);
        return QKV_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(qkv_cli_train_usage, stdout);
        return QKV_EXIT_OK;
    }
    if (argv[1][0] == '-') {
        qkv_cli_report("train", "unknown option '%s' (try: qkv train --help)", argv[1]);
        return QKV_EXIT_USAGE;
    }
    for (int i = 0; i < NKINDS; i++)
        if (!strcmp(kinds[i].name, argv[1])) {
            char name[64];
            snprintf(name, sizeof name, "train %s", kinds[i].name);
            argv[1] = name;
            return kinds[i].run(argc - 1, argv + 1);
        }
    qkv_cli_report("train", "unknown kind '%s' (try: qkv train --help)", argv[1]);
    return QKV_EXIT_USAGE;
}
