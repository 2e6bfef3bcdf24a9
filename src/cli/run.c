/* run.c: `qkv run MODEL.gguf -p PROMPT`: continues a prompt with a
 * pretrained GGUF model (Llama, Gemma 3), streaming each token to stdout
 * as it is made, the speed on stderr at the end. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include "cli/llm_cli.h"

const char qkv_cli_run_usage[] =
    "usage: qkv run MODEL.gguf --prompt TEXT [OPTIONS]\n"
    "  continues TEXT with a pretrained model of a GGUF file (architectures llama and\n"
    "  gemma3, the weights in their stored types), printing each token as it is made\n"
    "  -p, --prompt TEXT         the text to continue (UTF-8, not empty), tokenized with\n"
    "                            BOS when the model adds it and special tokens read as\n"
    "                            such; more tokens than --ctx-size - 1 is refused\n"
    "      --chat                wrap TEXT as one user message in the model's chat\n"
    "                            template (answered as `qkv chat` would)\n"
    LLM_CLI_SAMPLING_USAGE
    "  -h, --help                show this usage\n"
    "  the speed (tokens per second of the prompt and of generation) goes to stderr.\n"
    "  exit status: 0 success; 1 a model that cannot be read (missing, not GGUF, an\n"
    "  unsupported architecture or type), a prompt that is not UTF-8 or too long for\n"
    "  the context; 2 usage (no or empty prompt, a bad option)\n";

typedef struct {
    const char *model, *prompt;
    int chat;
    llm_cli_sampling s;
} run_opts;

static int parse(int argc, char **argv, run_opts *o)
{
    enum { CHAT = 256 };
    struct option options[24];
    int n = 0;
    options[n++] = (struct option){"prompt", required_argument, NULL, 'p'};
    options[n++] = (struct option){"chat", no_argument, NULL, CHAT};
    for (const struct option *p = llm_cli_sampling_options; p->name; p++) options[n++] = *p;
    options[n++] = (struct option){"help", no_argument, NULL, 'h'};
    options[n] = (struct option){NULL, 0, NULL, 0};
    qkv_cli_args a;
    qkv_cli_args_init(&a, argc, argv, qkv_cli_run_usage, options, 1, 1);
    int c;
    while ((c = qkv_cli_next(&a)) > 0) {
        if (c == 'p') o->prompt = a.value;
        else if (c == CHAT) o->chat = 1;
        else llm_cli_sampling_option(&a, c, &o->s);
    }
    if (c < 0) return a.status;
    o->model = a.operands[0];
    if (!o->prompt) qkv_cli_error(&a, "--prompt TEXT is needed");
    else if (!o->prompt[0]) qkv_cli_error(&a, "the prompt is empty: give at least one character");
    return a.status;
}

/* The prompt's ids: TEXT itself or its chat form; *text the text encoded
 * (malloc'd). */
static qkv_status prompt_ids(const llm_cli_model *lm, const run_opts *o, int64_t **ids, int64_t *n)
{
    char *text = NULL;
    size_t len = strlen(o->prompt);
    if (o->chat) {
        qkv_chat_message msg = {"user", o->prompt};
        QKV_CLI_TRY(qkv_chat_apply(lm->tmpl ? lm->tmpl : "chatml", &msg, 1, 1, &text, &len));
    }
    qkv_status s = qkv_tokenizer_encode_special(lm->tok, text ? text : o->prompt, len, 1, 1, ids, n);
    free(text);
    return s;
}

int qkv_cli_run(int argc, char **argv)
{
    run_opts o = {.s = llm_cli_sampling_default()};
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;
    int64_t bad = qkv_cli_utf8_invalid(o.prompt, strlen(o.prompt));
    if (bad >= 0) return qkv_cli_report("run", "the prompt is not valid UTF-8 (byte %lld)", (long long)bad);
    llm_cli_model lm;
    if (llm_cli_open("run", o.model, &lm)) return QKV_EXIT_FAILURE;
    int64_t *ids = NULL, n = 0, made = 0;
    llm_cli_gen g = {0};
    rc = QKV_EXIT_FAILURE;
    if (prompt_ids(&lm, &o, &ids, &n)) {
        qkv_cli_report("run", "the prompt: %s", qkv_cli_last_error());
        goto done;
    }
    if (n >= o.s.ctx_size) {
        qkv_cli_report("run", "the prompt has %lld tokens, the context %lld (--ctx-size): refused, nothing "
                       "generated (a shorter prompt or a larger --ctx-size)", (long long)n, (long long)o.s.ctx_size);
        goto done;
    }
    int full = 0;
    double t0 = qkv_cli_now(), sec = 0;
    qkv_status s = llm_cli_gen_init(&g, &lm, &o.s);
    if (!s) s = llm_cli_gen_set(&g, ids, n);
    double tp = qkv_cli_now() - t0;
    if (!s) {
        if (!o.chat) fputs(o.prompt, stdout);
        s = llm_cli_gen_run(&g, stdout, &made, &full, &sec);
        printf("\n");
    }
    if (s) {
        qkv_cli_report("run", "%s", qkv_cli_last_error());
        goto done;
    }
    if (full) qkv_cli_report("run", "note: the context (%lld tokens) is full: generation stopped", (long long)o.s.ctx_size);
    qkv_cli_report("run", "prompt %lld tokens in %.3f s (%.1f tokens/s); %lld generated in %.3f s (%.1f tokens/s, %s)",
                   (long long)n, tp, tp > 0 ? n / tp : 0, (long long)made, sec, sec > 0 ? made / sec : 0,
                   o.s.temperature > 0 ? "sampled" : "greedy");
    rc = QKV_EXIT_OK;
done:
    llm_cli_gen_free(&g);
    free(ids);
    llm_cli_close(&lm);
    return rc;
}
