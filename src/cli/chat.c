/* chat.c: `qkv chat [MODEL.gguf]`: an interactive chat with a pretrained
 * GGUF model: each line read is a user message, the whole conversation is
 * formatted with the model's chat template (as llama.cpp formats it) and
 * the answer streamed; the KV cache keeps what the conversation shares
 * with the previous turn, so a turn feeds only its new tokens. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli/llm_cli.h"

const char qkv_cli_chat_usage[] =
    "usage: qkv chat [MODEL.gguf] [OPTIONS]\n"
    "  an interactive chat with a pretrained GGUF model in its chat template; each line\n"
    "  on stdin is a message, the answer is streamed; /reset forgets the conversation,\n"
    "  /exit or Ctrl-D (end of input) ends it. MODEL defaults to\n"
    "  " LLM_CLI_DEFAULT_MODEL " (tools/get_data.sh smollm2)\n"
    "      --system TEXT         a system message first\n"
    LLM_CLI_SAMPLING_USAGE
    "  -h, --help                show this usage\n"
    "  a message that is not UTF-8 is refused; a conversation that outgrows the context\n"
    "  is said and the message dropped (/reset, or a larger --ctx-size).\n"
    "  exit status: 0 success; 1 a model that cannot be read; 2 usage\n";

typedef struct {
    const char *model, *system;
    llm_cli_sampling s;
} chat_opts;

static int parse(int argc, char **argv, chat_opts *o)
{
    enum { SYSTEM = 256 };
    struct option options[24];
    int n = 0;
    options[n++] = (struct option){"system", required_argument, NULL, SYSTEM};
    for (const struct option *p = llm_cli_sampling_options; p->name; p++) options[n++] = *p;
    options[n++] = (struct option){"help", no_argument, NULL, 'h'};
    options[n] = (struct option){NULL, 0, NULL, 0};
    qkv_cli_args a;
    qkv_cli_args_init(&a, argc, argv, qkv_cli_chat_usage, options, 0, 1);
    int c;
    while ((c = qkv_cli_next(&a)) > 0) {
        if (c == SYSTEM) o->system = a.value;
        else llm_cli_sampling_option(&a, c, &o->s);
    }
    if (c < 0) return a.status;
    o->model = a.noperands ? a.operands[0] : LLM_CLI_DEFAULT_MODEL;
    return a.status;
}

/* The conversation: messages (role, content) with their texts owned. */
typedef struct {
    qkv_chat_message *m;
    int64_t n, cap, keep; /* keep: the system message, kept by /reset */
} chat_history;

static int history_add(chat_history *h, const char *role, const char *text, size_t len)
{
    if (h->n == h->cap) {
        int64_t cap = h->cap ? 2 * h->cap : 16;
        qkv_chat_message *m = realloc(h->m, (size_t)cap * sizeof *m);
        if (!m) return 1;
        h->m = m, h->cap = cap;
    }
    char *c = malloc(len + 1);
    if (!c) return 1;
    memcpy(c, text, len);
    c[len] = 0;
    h->m[h->n++] = (qkv_chat_message){role, c};
    return 0;
}

static void history_drop(chat_history *h, int64_t to)
{
    while (h->n > to) free((char *)h->m[--h->n].content);
}

/* One turn: the conversation with the new message, formatted, fed and
 * answered; the answer joins the history. */
static qkv_status turn(llm_cli_gen *g, chat_history *h)
{
    char *text = NULL, *answer = NULL;
    size_t len = 0, alen = 0;
    int64_t *ids = NULL, n = 0, made = 0, start;
    int full = 0;
    double sec;
    const char *tmpl = g->lm->tmpl ? g->lm->tmpl : "chatml";
    qkv_status s = qkv_chat_apply(tmpl, h->m, h->n, 1, &text, &len);
    if (!s) s = qkv_tokenizer_encode_special(g->lm->tok, text, len, 1, 1, &ids, &n);
    free(text);
    if (!s && n >= g->s.ctx_size) {
        free(ids);
        return qkv_cli_fail(QKV_ERR_ARG, "the conversation has %lld tokens, the context %lld (--ctx-size): the "
                            "message is dropped (/reset starts afresh)", (long long)n, (long long)g->s.ctx_size);
    }
    if (!s) s = llm_cli_gen_set(g, ids, n);
    free(ids);
    start = g->n;
    if (!s) s = llm_cli_gen_run(g, stdout, &made, &full, &sec);
    printf("\n");
    if (!s) s = qkv_tokenizer_decode(g->lm->tok, g->seq + start, made, &answer, &alen);
    if (!s && history_add(h, "assistant", answer, alen)) s = qkv_cli_fail(QKV_ERR_NOMEM, "out of memory");
    free(answer);
    if (!s && full) fprintf(stderr, "qkv chat: note: the context is full: the answer was cut (/reset)\n");
    return s;
}

/* Reads the messages, one per line, until /exit or the end of input. */
static int loop(llm_cli_gen *g, chat_history *h)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int tty = isatty(STDIN_FILENO);
    for (;;) {
        printf("> ");
        fflush(stdout);
        if ((len = getline(&line, &cap, stdin)) < 0) break;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (!tty) printf("%s\n", line); /* the message echoed when it comes from a pipe */
        if (!strcmp(line, "/exit")) break;
        if (!strcmp(line, "/reset")) {
            history_drop(h, h->keep);
            printf("(the conversation is forgotten)\n");
            continue;
        }
        if (!len) continue;
        int64_t bad = qkv_cli_utf8_invalid(line, (size_t)len);
        if (bad >= 0) {
            fprintf(stderr, "qkv chat: the message is not valid UTF-8 (byte %lld): dropped\n", (long long)bad);
            continue;
        }
        if (history_add(h, "user", line, (size_t)len)) break;
        if (turn(g, h)) {
            fprintf(stderr, "qkv chat: %s\n", qkv_cli_last_error());
            history_drop(h, h->n - 1);
        }
    }
    if (len < 0) printf("\n");
    free(line);
    return QKV_EXIT_OK;
}

int qkv_cli_chat(int argc, char **argv)
{
    chat_opts o = {.s = llm_cli_sampling_default()};
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;
    if (access(o.model, R_OK) != 0 && !strcmp(o.model, LLM_CLI_DEFAULT_MODEL))
        return qkv_cli_report("chat", "%s is missing: run tools/get_data.sh smollm2 (or give a MODEL.gguf)", o.model);
    llm_cli_model lm;
    if (llm_cli_open("chat", o.model, &lm)) return QKV_EXIT_FAILURE;
    chat_history h = {0};
    llm_cli_gen g;
    rc = QKV_EXIT_FAILURE;
    if (llm_cli_gen_init(&g, &lm, &o.s)) {
        qkv_cli_report("chat", "%s", qkv_cli_last_error());
    } else if (o.system && history_add(&h, "system", o.system, strlen(o.system))) {
        qkv_cli_report("chat", "out of memory");
    } else {
        h.keep = h.n;
        fprintf(stderr, "qkv chat: %s (%s, template %s); /reset forgets, /exit or Ctrl-D ends\n", o.model,
                qkv_llm_arch_name(lm.m.cfg.arch), qkv_chat_template_name(lm.tmpl ? lm.tmpl : "chatml"));
        rc = loop(&g, &h);
    }
    history_drop(&h, 0);
    free(h.m);
    llm_cli_gen_free(&g);
    llm_cli_close(&lm);
    return rc;
}
