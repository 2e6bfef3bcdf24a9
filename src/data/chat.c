/* chat.c: chat templates as llama.cpp applies them without Jinja
 * (llama-chat.cpp): a template's text is recognised by the substrings
 * llama.cpp's llm_chat_detect_template looks for, in its order; ChatML and
 * Gemma are formatted here, any other is refused by its name. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include "core/internal.h"
#include "qkv.h"

static int has(const char *t, const char *s) { return strstr(t, s) != NULL; }

/* The templates after the first branches, in llama.cpp's order: the name,
 * and one or two substrings that must all occur. */
static const struct {
    const char *name, *a, *b;
} simple[] = {
    {"phi3", "<|assistant|>", "<|end|>"},
    {"chatglm4", "[gMASK]<sop>", NULL},
    {NULL, "<|assistant|>", "<|user|>"}, /* falcon3 or glmedge: below */
    {"glmedge", "<|{{ item['role'] }}|>", "<|begin_of_image|>"},
    {"zephyr", "<|user|>", "<|endoftext|>"},
    {"monarch", "bos_token + message['role']", NULL},
    {"gemma", "<start_of_turn>", NULL},
    {"orion", "'\\n\\nAssistant: ' + eos_token", NULL},
    {"openchat", "GPT4 Correct ", NULL},
    {"vicuna", "USER: ", "ASSISTANT: "},
    {"deepseek", "### Instruction:", "<|EOT|>"},
    {"command-r", "<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>"},
    {"llama3", "<|start_header_id|>", "<|end_header_id|>"},
    {"chatglm3", "[gMASK]sop", NULL},
    {"minicpm", "<\xE7\x94\xA8\xE6\x88\xB7>", NULL},
    {"deepseek2", "'Assistant: ' + message['content'] + eos_token", NULL},
    {"deepseek3", "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>", "<\xEF\xBD\x9C" "User\xEF\xBD\x9C>"},
    {"exaone3", "[|system|]", "[|assistant|]"},
    {"rwkv-world", "rwkv-world", NULL},
    {"granite", "<|start_of_role|>", NULL},
    {"megrez", "<|role_start|>", NULL},
    {"llama4", "<|header_start|>", "<|header_end|>"},
    {"dots1", "<|endofuserprompt|>", NULL},
    {"hunyuan-moe", "<|extra_0|>", "<|extra_4|>"},
    {"gpt-oss", "<|start|>", "<|channel|>"},
    {"kimi-k2", "<|im_assistant|>assistant<|im_middle|>", NULL},
    {"seed_oss", "<seed:bos>", NULL},
};

/* llama.cpp's names of templates it formats (a template given by name). */
static const char *const names[] = {
    "chatml", "gemma", "phi3", "phi4", "llama2", "llama2-sys", "llama3", "mistral-v1", "mistral-v3", "mistral-v7",
    "zephyr", "monarch", "orion", "openchat", "vicuna", "deepseek", "command-r", "chatglm3", "chatglm4", "minicpm",
    "deepseek2", "deepseek3", "granite", "llama4", "falcon3", "smolvlm", "gpt-oss", NULL,
};

const char *qkv_chat_template_name(const char *t)
{
    if (!t) return "unknown";
    for (int i = 0; names[i]; i++)
        if (!strcmp(t, names[i])) return names[i];
    if (has(t, "<|im_start|>")) return has(t, "<|im_sep|>") ? "phi4" : has(t, "<end_of_utterance>") ? "smolvlm" : "chatml";
    if (!strncmp(t, "mistral", 7) || has(t, "[INST]")) {
        if (has(t, "[SYSTEM_PROMPT]")) return "mistral-v7";
        if (has(t, "' [INST] ' + system_message") || has(t, "[AVAILABLE_TOOLS]"))
            return has(t, " [INST]") ? "mistral-v1" : has(t, "\"[INST]\"") ? "mistral-v3-tekken" : "mistral-v3";
        return has(t, "content.strip()") ? "llama2-sys-strip" : has(t, "bos_token + '[INST]") ? "llama2-sys-bos"
               : has(t, "<<SYS>>")       ? "llama2-sys"
                                         : "llama2";
    }
    for (size_t i = 0; i < sizeof simple / sizeof *simple; i++)
        if (has(t, simple[i].a) && (!simple[i].b || has(t, simple[i].b)))
            return simple[i].name ? simple[i].name : has(t, "</s>") ? "falcon3" : "glmedge";
    return "unknown";
}

/* A growable text. */
typedef struct {
    char *s;
    size_t n, cap;
    int failed;
} text;

static void put(text *o, const char *s, size_t n)
{
    if (o->failed) return;
    if (o->n + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap < o->n + n + 1) cap *= 2;
        char *p = realloc(o->s, cap);
        if (!p) {
            o->failed = 1;
            return;
        }
        o->s = p, o->cap = cap;
    }
    memcpy(o->s + o->n, s, n), o->n += n, o->s[o->n] = 0;
}
static void puts_(text *o, const char *s) { put(o, s, strlen(s)); }

/* s without the white space (isspace) at both ends, as llama.cpp's trim. */
static void put_trimmed(text *o, const char *s)
{
    size_t a = 0, b = strlen(s);
    while (a < b && isspace((unsigned char)s[a])) a++;
    while (b > a && isspace((unsigned char)s[b - 1])) b--;
    put(o, s + a, b - a);
}

static void chatml(text *o, const qkv_chat_message *m, int64_t n, int add)
{
    for (int64_t i = 0; i < n; i++) {
        puts_(o, "<|im_start|>"), puts_(o, m[i].role), puts_(o, "\n");
        puts_(o, m[i].content), puts_(o, "<|im_end|>\n");
    }
    if (add) puts_(o, "<|im_start|>assistant\n");
}

/* Gemma has no system turn: system messages (trimmed, joined) go in front
 * of the next user turn's text; "assistant" is "model"; contents trimmed. */
static void gemma(text *o, const qkv_chat_message *m, int64_t n, int add)
{
    text sys = {0};
    for (int64_t i = 0; i < n; i++) {
        if (!strcmp(m[i].role, "system")) {
            put_trimmed(&sys, m[i].content);
            continue;
        }
        const char *role = strcmp(m[i].role, "assistant") ? m[i].role : "model";
        puts_(o, "<start_of_turn>"), puts_(o, role), puts_(o, "\n");
        if (sys.n && strcmp(role, "model")) put(o, sys.s, sys.n), puts_(o, "\n\n"), sys.n = 0;
        put_trimmed(o, m[i].content), puts_(o, "<end_of_turn>\n");
    }
    if (add) puts_(o, "<start_of_turn>model\n");
    o->failed |= sys.failed;
    free(sys.s);
}

qkv_status qkv_chat_apply(const char *tmpl, const qkv_chat_message *messages, int64_t n, int add_assistant,
                          char **out, size_t *out_len)
{
    static const char fn[] = "chat_apply";
    QKV_NEED(out, fn, "out");
    *out = NULL;
    if (out_len) *out_len = 0;
    QKV_NEED(tmpl, fn, "tmpl");
    if (n < 0) return qkv_fail(QKV_ERR_ARG, "%s: n is %lld, expected >= 0", fn, (long long)n);
    if (n) QKV_NEED(messages, fn, "messages");
    for (int64_t i = 0; i < n; i++)
        if (!messages[i].role || !messages[i].content)
            return qkv_fail(QKV_ERR_ARG, "%s: message %lld has no %s", fn, (long long)i,
                            messages[i].role ? "content" : "role");
    const char *name = qkv_chat_template_name(tmpl);
    text o = {0};
    if (!strcmp(name, "chatml")) chatml(&o, messages, n, add_assistant);
    else if (!strcmp(name, "gemma")) gemma(&o, messages, n, add_assistant);
    else if (!strcmp(name, "unknown"))
        return qkv_fail(QKV_ERR_ARG, "%s: the chat template is none llama.cpp recognises (supported: chatml, gemma)", fn);
    else
        return qkv_fail(QKV_ERR_ARG, "%s: the chat template is llama.cpp's '%s', not supported (chatml, gemma)", fn,
                        name);
    puts_(&o, ""); /* an empty conversation still gets its NUL */
    if (o.failed) return free(o.s), qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    *out = o.s;
    if (out_len) *out_len = o.n;
    return QKV_OK;
}
