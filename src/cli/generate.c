/* generate.c: `qkv generate CHECKPOINT --prompt TEXT`: continues a text with
 * a language model trained by `qkv train lm`, streaming each token to stdout
 * as it is made (through the KV cache), the speed on stderr at the end, and
 * optionally the attention explorer of prompt + continuation (--html). */
#define _POSIX_C_SOURCE 200809L
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cli/cli.h"
#include "cli/lm_common.h"
#include "cli/run_format.h"
#include "qkv/plot.h"

const char qkv_cli_generate_usage[] =
    "usage: qkv generate CHECKPOINT --prompt TEXT [OPTIONS]\n"
    "  continues TEXT with the language model of CHECKPOINT (a file written by\n"
    "  `qkv train lm`, or its run folder), printing each token as it is made\n"
    "  -p, --prompt TEXT         the text to continue (UTF-8, not empty); longer than\n"
    "                            the model's context: its last tokens are kept (a note\n"
    "                            on stderr says how many)\n"
    "  -n, --max-new-tokens N    tokens to generate (default 200)\n"
    "  -t, --temperature T       0 for greedy (argmax), else sampling (default 0.8)\n"
    "  -k, --top-k K             sample among the K most likely tokens (default 0: all)\n"
    "      --top-p P             ... and the fewest whose probability reaches P (default 1)\n"
    "  -s, --seed S              the sampling's seed (default 1)\n"
    "      --html FILE           the attention explorer (every layer and head) of the\n"
    "                            prompt and its continuation (their last context tokens)\n"
    "  -j, --threads N           OpenMP threads (default: OMP_NUM_THREADS or all cores)\n"
    "      --cache fp32|fp16|bf16   the KV cache's precision (default fp32): 16 bits\n"
    "                            halve its memory and what a step over it reads\n"
    "      --weights fp32|bf16   bf16: the decoding steps use bf16 copies of the weights\n"
    "                            (half the bytes read per token; default fp32)\n"
    "  -h, --help                show this usage\n"
    "  the speed (tokens per second) goes to stderr at the end.\n"
    "  exit status: 0 success; 1 a checkpoint that cannot be read (missing, corrupt, not\n"
    "  a language model's), a prompt that is not UTF-8 or has characters outside the\n"
    "  model's vocabulary; 2 usage (no or empty prompt, a bad option)\n";

typedef struct {
    const char *ckpt, *prompt, *html;
    lm_sample_opts s;
    int64_t threads;
} gen_opts;

static int parse(int argc, char **argv, gen_opts *o)
{
    enum { TOPP = 256, HTML, CACHE, WEIGHTS };
    static const struct option options[] = {
        {"prompt", required_argument, NULL, 'p'}, {"max-new-tokens", required_argument, NULL, 'n'},
        {"temperature", required_argument, NULL, 't'}, {"top-k", required_argument, NULL, 'k'},
        {"top-p", required_argument, NULL, TOPP}, {"seed", required_argument, NULL, 's'},
        {"html", required_argument, NULL, HTML}, {"threads", required_argument, NULL, 'j'},
        {"cache", required_argument, NULL, CACHE}, {"weights", required_argument, NULL, WEIGHTS},
        QKV_CLI_HELP_OPTION};
    qkv_cli_args a;
    /* An empty --prompt "" must reach the check below, not "needs a value". */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--prompt=") || ((!strcmp(argv[i], "--prompt") || !strcmp(argv[i], "-p")) &&
                                              i + 1 < argc && !argv[i + 1][0])) {
            qkv_cli_report("generate",
                           "the prompt is empty: give at least one character (try: qkv generate --help)");
            return QKV_EXIT_USAGE;
        }
    qkv_cli_args_init(&a, argc, argv, qkv_cli_generate_usage, options, 1, 1);
    int c;
    while ((c = qkv_cli_next(&a)) > 0) {
        switch (c) {
        case 'p': o->prompt = a.value; break;
        case 'n': o->s.max_new_tokens = qkv_cli_int(&a, 1, (int64_t)1 << 30); break;
        case 'k': o->s.top_k = qkv_cli_int(&a, 0, (int64_t)1 << 30); break;
        case 's': o->s.seed = (uint64_t)qkv_cli_int(&a, 0, INT64_MAX); break;
        case 'j': o->threads = qkv_cli_int(&a, 1, 1024); break;
        case HTML: o->html = a.value; break;
        case 't': o->s.temperature = (float)qkv_cli_double(&a, 0, 100, 0); break;
        case TOPP: o->s.top_p = (float)qkv_cli_double(&a, 0, 1, 1); break;
        case CACHE:
            if (!strcmp(a.value, "fp32")) o->s.cache = QKV_KV_F32;
            else if (!strcmp(a.value, "fp16")) o->s.cache = QKV_KV_F16;
            else if (!strcmp(a.value, "bf16")) o->s.cache = QKV_KV_BF16;
            else qkv_cli_error(&a, "--cache %s: expected fp32, fp16 or bf16", a.value);
            break;
        case WEIGHTS:
            if (!strcmp(a.value, "fp32") || !strcmp(a.value, "bf16")) o->s.bf16_weights = a.value[0] == 'b';
            else qkv_cli_error(&a, "--weights %s: expected fp32 or bf16", a.value);
            break;
        }
    }
    if (c < 0) return a.status;
    o->ckpt = a.operands[0];
    if (!o->prompt) qkv_cli_error(&a, "--prompt TEXT is needed");
    return a.status;
}

/* With a chars tokenizer, id 0 is a character the model does not know:
 * names the first one (its text and byte offset in the prompt). */
static int unknown_char(const lm_model *m, const char *prompt, const int64_t *ids, int64_t n)
{
    if (qkv_tokenizer_kind_of(m->tok) != QKV_TOKENIZER_CHARS) return 0;
    size_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)prompt[at];
        size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : 4;
        if (ids[i] == 0) {
            return qkv_cli_report("generate",
                                  "the prompt's character '%.*s' (byte %zu) is not in the model's "
                    "vocabulary (%lld characters, those of its training text)", (int)len, prompt + at, at,
                    (long long)m->o.vocab_size - 2);
        }
        at += len;
    }
    return 0;
}

/* The explorer of the last (at most max_len) tokens of seq: a forward
 * with attention capture, the tokens' texts as labels. */
static qkv_status write_html(lm_model *m, const int64_t *seq, int64_t n, const char *path)
{
    int64_t L = n < m->o.max_len ? n : m->o.max_len, NL = m->o.num_layers, H = m->o.layer.nhead;
    const int64_t *ids = seq + n - L;
    qkv_ctx *c;
    QKV_CLI_TRY(qkv_ctx_new(&c));
    qkv_ctx_set_grad(c, 0);
    qkv_ctx_set_capture(c, 1);
    float *w = malloc((size_t)(NL * H * L * L) * sizeof *w); // (layers,heads,L,L)
    char **toks = calloc((size_t)L, sizeof *toks);
    qkv_tensor *x, *logits;
    qkv_status s = w && toks ? QKV_OK : qkv_cli_fail(QKV_ERR_NOMEM, "--html: out of memory");
    if (!s) s = qkv_tensor_wrap_i64(qkv_ctx_arena(c), (int64_t *)ids, 2, (int64_t[]){1, L}, &x);
    if (!s) s = qkv_lm_forward(c, &m->m, x, NULL, &logits);
    if (!s && qkv_ctx_captured_count(c) != NL)
        s = qkv_cli_fail(QKV_ERR_STATE, "--html: %d attention maps captured, expected %lld", qkv_ctx_captured_count(c),
                    (long long)NL);
    for (int64_t l = 0; !s && l < NL; l++)
        memcpy(w + l * H * L * L, qkv_ctx_captured(c, (int)l)->data, (size_t)(H * L * L) * sizeof *w);
    for (int64_t i = 0; !s && i < L; i++) {
        size_t len;
        s = qkv_tokenizer_decode(m->tok, ids + i, 1, &toks[i], &len);
    }
    if (!s) {
        qkv_explorer e = {.weights = w, .layers = NL, .heads = H, .queries = L, .keys = L,
                          .query_tokens = (const char *const *)toks, .key_tokens = (const char *const *)toks,
                          .title = "qkv generate: prompt and continuation"};
        s = qkv_explorer_write(path, &e);
    }
    for (int64_t i = 0; toks && i < L; i++) free(toks[i]);
    free(toks);
    free(w);
    qkv_ctx_free(c);
    return s;
}

int qkv_cli_generate(int argc, char **argv)
{
    gen_opts o = {.s = {.max_new_tokens = 200, .temperature = 0.8f, .top_p = 1, .seed = 1}};
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;
    if (o.threads > 0) omp_set_num_threads((int)o.threads);
    char path[4096];
    rf_run_checkpoint(o.ckpt, LM_CKPT_NAME, path, sizeof path);
    size_t plen = strlen(o.prompt);
    int64_t bad = qkv_cli_utf8_invalid(o.prompt, plen);
    if (bad >= 0) {
        return qkv_cli_report("generate", "the prompt is not valid UTF-8 (byte %lld)", (long long)bad);
    }
    lm_model m;
    if (lm_model_load(&m, path)) {
        return qkv_cli_report("generate", "%s", qkv_cli_last_error());
    }
    int64_t *ids = NULL, n = 0, *all = NULL, n_all = 0;
    double sec = 0;
    rc = QKV_EXIT_FAILURE;
    if (qkv_tokenizer_encode(m.tok, o.prompt, plen, &ids, &n)) {
        qkv_cli_report("generate", "the prompt: %s", qkv_last_error());
        goto done;
    }
    if (unknown_char(&m, o.prompt, ids, n)) goto done;
    int64_t start = 0, L = m.o.max_len;
    if (n > L) {
        start = n - L;
        qkv_cli_report("generate", "note: the prompt has %lld tokens, the model's context %lld: the first "
                "%lld are dropped", (long long)n, (long long)L, (long long)start);
    }
    fwrite(o.prompt, 1, plen, stdout);
    fflush(stdout);
    if (lm_generate_stream(&m, ids + start, n - start, &o.s, stdout, &all, &n_all, &sec)) {
        fprintf(stderr, "\nqkv generate: %s\n", qkv_cli_last_error());
        goto done;
    }
    printf("\n");
    fflush(stdout);
    int64_t made = n_all - (n - start);
    static const char *const cache_name[] = {"fp32", "fp16", "bf16"};
    qkv_cli_report("generate", "%lld tokens in %.3f s: %.1f tokens/s (prompt %lld tokens, %s, %s cache, %s "
            "weights)", (long long)made, sec, sec > 0 ? (double)made / sec : 0, (long long)(n - start),
            o.s.temperature > 0 ? "sampled" : "greedy", cache_name[o.s.cache], o.s.bf16_weights ? "bf16" : "fp32");
    if (o.html) {
        if (write_html(&m, all, n_all, o.html)) {
            qkv_cli_report("generate", "%s", qkv_cli_last_error());
            goto done;
        }
        qkv_cli_report("generate", "wrote %s", o.html);
    }
    rc = QKV_EXIT_OK;
done:
    free(ids);
    free(all);
    lm_model_free(&m);
    return rc;
}
