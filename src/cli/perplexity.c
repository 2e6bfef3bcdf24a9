/* perplexity.c: `qkv perplexity MODEL.gguf FILE`: the perplexity of a GGUF
 * model on a text, computed as llama.cpp's llama-perplexity computes it
 * (tools/perplexity/perplexity.cpp): the whole text tokenized at once
 * (BOS first when the model adds it), cut into chunks of --ctx-size
 * tokens, each chunk's first token replaced by BOS when the model adds
 * one and evaluated from an empty cache, and only the second half of each
 * chunk scored: positions ctx/2 .. ctx-2 predicting the next token. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "cli/llm_cli.h"

const char qkv_cli_perplexity_usage[] =
    "usage: qkv perplexity MODEL.gguf FILE [OPTIONS]\n"
    "  the perplexity of the GGUF model on the text FILE (UTF-8) as llama.cpp's\n"
    "  llama-perplexity computes it: chunks of --ctx-size tokens, BOS at each chunk's\n"
    "  start when the model adds one, the second half of each chunk scored; prints\n"
    "  the running estimate [1]x,[2]y,... and `Final estimate: PPL = P +/- E`\n"
    "  -c, --ctx-size N          tokens per chunk (default 512; 4 to 1048576)\n"
    "      --chunks N            score at most the first N chunks (default 0: all)\n"
    "      --from F              start at fraction F of FILE's bytes (default 0), moved\n"
    "                            to the next line's start\n"
    "      --to T                end at fraction T of FILE's bytes (default 1), the same\n"
    "                            (--from 0.95: the last 5% of the file)\n"
    "  -j, --threads N           OpenMP threads (default: OMP_NUM_THREADS or all cores)\n"
    "      --weights stored|f32|q8_0|q4_1|q4_0   the weights as the file stores them\n"
    "                            (default), dequantized to FP32, or dequantized and\n"
    "                            requantized by qkv (llama.cpp's reference quantizer)\n"
    "  -h, --help                show this usage\n"
    "  exit status: 0 success; 1 a model or file that cannot be read, a text that is not\n"
    "  UTF-8 or shorter than one chunk; 2 usage\n";

typedef struct {
    const char *model, *file;
    int64_t ctx, chunks, threads;
    int weights;
    double from, to;
} ppl_opts;

static int parse(int argc, char **argv, ppl_opts *o)
{
    enum { CHUNKS = 256, FROM, TO, WEIGHTS };
    static const struct option options[] = {
        {"ctx-size", required_argument, NULL, 'c'}, {"chunks", required_argument, NULL, CHUNKS},
        {"from", required_argument, NULL, FROM},   {"to", required_argument, NULL, TO},
        {"threads", required_argument, NULL, 'j'}, {"weights", required_argument, NULL, WEIGHTS},
        QKV_CLI_HELP_OPTION};
    static const char *const wnames[] = {"stored", "f32", "q8_0", "q4_1", "q4_0"};
    static const int wvals[] = {LLM_CLI_STORED, LLM_CLI_F32, QKV_Q_Q8_0, QKV_Q_Q4_1, QKV_Q_Q4_0};
    qkv_cli_args a;
    qkv_cli_args_init(&a, argc, argv, qkv_cli_perplexity_usage, options, 2, 2);
    int c;
    while ((c = qkv_cli_next(&a)) > 0) {
        switch (c) {
        case 'c': o->ctx = qkv_cli_int(&a, 4, (int64_t)1 << 20); break;
        case CHUNKS: o->chunks = qkv_cli_int(&a, 0, (int64_t)1 << 30); break;
        case FROM: o->from = qkv_cli_double(&a, 0, 1, 0); break;
        case TO: o->to = qkv_cli_double(&a, 0, 1, 0); break;
        case 'j': o->threads = qkv_cli_int(&a, 1, 1024); break;
        case WEIGHTS: o->weights = wvals[qkv_cli_choice(&a, wnames, 5)]; break;
        }
    }
    if (c < 0) return a.status;
    o->model = a.operands[0], o->file = a.operands[1];
    if (o->from >= o->to) qkv_cli_error(&a, "--from %g must be below --to %g", o->from, o->to);
    return a.status;
}

/* The byte where fraction f of text[0, n) falls, moved to the next line's start. */
static size_t cut(const char *text, size_t n, double f)
{
    size_t at = (size_t)((double)n * f);
    if (at == 0 || at >= n) return at >= n ? n : 0;
    const char *nl = memchr(text + at, '\n', n - at);
    return nl ? (size_t)(nl - text) + 1 : n;
}

/* Adds chunk k's scored NLLs (from its logits) to *nll, *nll2, *count. */
static qkv_status score_chunk(llm_cli_gen *g, const int64_t *ids, int64_t k, int add_bos, int64_t bos,
                              float *logits, double *nll, double *nll2, int64_t *count)
{
    int64_t C = g->s.ctx_size, V = g->lm->vocab, first = C / 2;
    int64_t *chunk = g->seq;
    memcpy(chunk, ids + k * C, (size_t)C * sizeof *chunk);
    if (add_bos) chunk[0] = bos;
    qkv_kv_cache_reset(&g->kc);
    QKV_CLI_TRY(qkv_llm_forward(g->c, &g->lm->m, &g->kc, chunk, C, 1, logits));
    qkv_ctx_reset(g->c);
    for (int64_t j = first; j < C - 1; j++) {
        const float *x = logits + j * V;
        double mx = x[0], sum = 0;
        for (int64_t v = 1; v < V; v++) mx = x[v] > mx ? x[v] : mx;
        for (int64_t v = 0; v < V; v++) sum += exp((double)x[v] - mx);
        double e = -((double)x[ids[k * C + j + 1]] - mx - log(sum));
        *nll += e, *nll2 += e * e, ++*count;
    }
    return QKV_OK;
}

static int report(const char *what)
{
    return qkv_cli_report("perplexity", "%s: %s", what, qkv_cli_last_error());
}

int qkv_cli_perplexity(int argc, char **argv)
{
    ppl_opts o = {.ctx = 512, .to = 1, .weights = LLM_CLI_STORED};
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;
    size_t len;
    char *text = qkv_cli_read_all("perplexity", o.file, &len);
    if (!text) return QKV_EXIT_FAILURE;
    size_t lo = cut(text, len, o.from), hi = cut(text, len, o.to);
    int64_t bad = qkv_cli_utf8_invalid(text + lo, hi - lo), *ids = NULL, n = 0;
    llm_cli_model lm = {0};
    llm_cli_gen g = {0};
    float *logits = NULL;
    rc = QKV_EXIT_FAILURE;
    if (bad >= 0) {
        qkv_cli_report("perplexity", "%s is not valid UTF-8 (byte %lld)", o.file, (long long)(lo + bad));
        goto done;
    }
    if (llm_cli_open_weights("perplexity", o.model, o.weights, &lm)) goto done;
    qkv_tokenizer_info info;
    if (qkv_tokenizer_info_of(lm.tok, &info) || qkv_tokenizer_encode_special(lm.tok, text + lo, hi - lo, 1, 0, &ids, &n)) {
        report(o.file);
        goto done;
    }
    int64_t nchunk = n / o.ctx;
    if (o.chunks > 0 && o.chunks < nchunk) nchunk = o.chunks;
    if (nchunk < 1) {
        qkv_cli_report("perplexity", "%s has %lld tokens: fewer than one chunk of %lld (--ctx-size)", o.file,
                       (long long)n, (long long)o.ctx);
        goto done;
    }
    fprintf(stderr, "qkv perplexity: %lld tokens, %lld chunks of %lld\n", (long long)n, (long long)(n / o.ctx),
            (long long)o.ctx);
    llm_cli_sampling s = llm_cli_sampling_default();
    s.ctx_size = o.ctx, s.threads = o.threads;
    logits = malloc((size_t)(o.ctx * lm.vocab) * sizeof *logits);
    if (!logits || llm_cli_gen_init(&g, &lm, &s)) {
        report("setup");
        goto done;
    }
    double nll = 0, nll2 = 0, t0 = qkv_cli_now();
    int64_t count = 0;
    for (int64_t k = 0; k < nchunk; k++) {
        if (score_chunk(&g, ids, k, info.add_bos && info.bos >= 0, info.bos, logits, &nll, &nll2, &count)) {
            report("forward");
            goto done;
        }
        printf("[%lld]%.4f,", (long long)k + 1, exp(nll / (double)count));
        fflush(stdout);
    }
    double mean = nll / (double)count, var = nll2 / (double)count - mean * mean;
    printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", exp(mean), var > 0 ? sqrt(var / (double)(count - 1)) * exp(mean) : 0);
    fprintf(stderr, "qkv perplexity: %lld tokens scored in %.1f s\n", (long long)count, qkv_cli_now() - t0);
    rc = QKV_EXIT_OK;
done:
    llm_cli_gen_free(&g);
    llm_cli_close(&lm);
    free(logits);
    free(ids);
    free(text);
    return rc;
}
