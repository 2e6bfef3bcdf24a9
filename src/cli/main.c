/* main.c: the qkv command: the table of commands, dispatch and help.
 *   qkv [COMMAND [OPTIONS] [ARGUMENTS]]   no command: qkv demo
 *   qkv help [COMMAND], qkv --help, qkv --version
 * docs/cli.md has the commands, their options and exit statuses. */
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"

/* The commands, in the order `qkv help` lists them. Command NAME is the file
 * src/cli/NAME.c, which defines qkv_cli_NAME_usage[] and qkv_cli_NAME();
 * adding one is that file and its X(NAME, summary) row here. */
#define QKV_CLI_COMMANDS(X)                                                                    \
    X(demo, "the lecture's worked example and multi-head attention weights, as tables")       \
    X(toy, "the lecture's toy experiment: convolution vs attention, positional encodings")   \
    X(inspect, "list a safetensors or GGUF file's tensors, totals and metadata")              \
    X(tokenizer, "train a BPE tokenizer; encode text to token ids and decode them back")      \
    X(train, "train a model of a kind (toy, lm, ...) with built-in defaults")                 \
    X(generate, "continue a text with a language model trained by qkv train lm")             \
    X(run, "continue a prompt with a pretrained GGUF model (Llama, Gemma 3)")                 \
    X(chat, "chat with a pretrained GGUF model in its chat template")                         \
    X(perplexity, "perplexity of a GGUF model on a text file, as llama-perplexity computes it") \
    X(eval, "score a trained model: BLEU for translation, accuracy for vit/cnn/mlp")          \
    X(classify, "the top classes of PNG images by a vit/cnn/mlp; the ViT's attention drawn")   \
    X(data, "build a data set from Debian's files (translation: English/French pairs)")      \
    X(bleu, "corpus BLEU-4 of a hypothesis file against reference files (NLTK's)")           \
    X(translate, "translate sentences with a trained model; show its attention")              \
    X(help, "list the commands, or show one command's usage")

#define DECLARE(name, summary)                                                                 \
    extern const char qkv_cli_##name##_usage[];                                                \
    int qkv_cli_##name(int argc, char **argv);
QKV_CLI_COMMANDS(DECLARE)
#define ROW(name, summary) {#name, summary, qkv_cli_##name##_usage, qkv_cli_##name},
static const qkv_cli_command commands[] = {QKV_CLI_COMMANDS(ROW)};
enum { NCOMMANDS = (int)(sizeof commands / sizeof *commands) };

static const qkv_cli_command *find(const char *name)
{
    for (int i = 0; i < NCOMMANDS; i++)
        if (!strcmp(commands[i].name, name)) return &commands[i];
    return NULL;
}

static int unknown(const char *what, const char *name)
{
    fprintf(stderr, "qkv: unknown %s '%s' (try: qkv help)\n", what, name);
    return QKV_EXIT_USAGE;
}

static int list_commands(void)
{
    printf("usage: qkv COMMAND [OPTIONS] [ARGUMENTS]\n"
           "       qkv                 the same as qkv demo\n"
           "       qkv --version       print the version\n"
           "\ncommands:\n");
    for (int i = 0; i < NCOMMANDS; i++) printf("  %-9s %s\n", commands[i].name, commands[i].summary);
    printf("\n`qkv help COMMAND` or `qkv COMMAND --help` shows a command's options.\n"
           "exit status: 0 success, 1 runtime error, 2 usage error\n");
    return QKV_EXIT_OK;
}

const char qkv_cli_help_usage[] =
    "usage: qkv help [COMMAND]\n"
    "  lists the commands with a line on each, or prints COMMAND's usage (as\n"
    "  `qkv COMMAND --help` does); `qkv --help` is `qkv help`\n"
    "  -h, --help   show this usage\n";

int qkv_cli_help(int argc, char **argv)
{
    qkv_cli_args a;
    qkv_cli_args_init(&a, argc, argv, qkv_cli_help_usage, NULL, 0, 1);
    if (qkv_cli_next(&a) < 0) return a.status;
    if (a.noperands == 0) return list_commands();
    const qkv_cli_command *c = find(a.operands[0]);
    if (!c) return unknown("command", a.operands[0]);
    fputs(c->usage, stdout);
    return QKV_EXIT_OK;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        char name[] = "demo", *args[] = {name, NULL};
        return qkv_cli_demo(1, args);
    }
    const char *first = argv[1];
    if (first[0] == '-') { /* qkv's own options */
        int help = !strcmp(first, "--help") || !strcmp(first, "-h");
        if (!help && strcmp(first, "--version")) return unknown("option", first);
        if (argc > 2) {
            fprintf(stderr, "qkv: %s takes no arguments (try: qkv help)\n", first);
            return QKV_EXIT_USAGE;
        }
        if (help) return list_commands();
        printf("qkv %s\n", qkv_version());
        return QKV_EXIT_OK;
    }
    const qkv_cli_command *c = find(first);
    if (!c) return unknown("command", first);
    return c->run(argc - 1, argv + 1);
}
