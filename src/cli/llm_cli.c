/* llm_cli.c: GGUF models for the qkv command (run.c, chat.c,
 * perplexity.c): opening one with its tokenizer, sampling, and the
 * streaming generation loop; llm_cli.h says what each does. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli/llm_cli.h"

/* w requantized from FP32 to type t (a new buffer kept in lm->bufs). */
static qkv_status requantize(llm_cli_model *lm, qkv_llm_weight *w, qkv_qtype t)
{
    if (w->type != QKV_Q_F32 || w->cols % qkv_qtype_block_elems(t)) return QKV_OK; /* left in FP32 */
    void *dst = malloc(qkv_qtype_row_bytes(t, w->cols) * (size_t)w->rows);
    void **bufs = realloc(lm->bufs, (size_t)(lm->nbuf + 1) * sizeof *bufs);
    if (!dst || !bufs) {
        free(dst);
        if (bufs) lm->bufs = bufs;
        return qkv_cli_fail(QKV_ERR_NOMEM, "out of memory requantizing");
    }
    lm->bufs = bufs;
    lm->bufs[lm->nbuf++] = dst;
    QKV_CLI_TRY(qkv_quantize(t, w->data, dst, w->rows * w->cols));
    w->type = t, w->data = dst;
    return QKV_OK;
}

int llm_cli_open_weights(const char *cmd, const char *path, int weights, llm_cli_model *lm)
{
    if (weights == LLM_CLI_STORED) return llm_cli_open(cmd, path, lm);
    if (llm_cli_open(cmd, path, lm)) return 1;
    qkv_llm_free(&lm->m); /* again, every weight dequantized to FP32 */
    qkv_status s = qkv_llm_load_gguf(path, 1, &lm->m);
    for (int64_t i = 0; !s && weights != LLM_CLI_F32 && i < lm->m.cfg.n_layer; i++) {
        qkv_llm_layer *l = &lm->m.layers[i];
        qkv_llm_weight *ws[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down};
        for (int k = 0; !s && k < 7; k++) s = requantize(lm, ws[k], (qkv_qtype)weights);
    }
    if (!s && weights != LLM_CLI_F32) s = requantize(lm, &lm->m.output, (qkv_qtype)weights);
    if (s) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", qkv_cli_last_error());
        llm_cli_close(lm);
        return qkv_cli_report(cmd, "%s: %s", path, msg);
    }
    return 0;
}

int llm_cli_open(const char *cmd, const char *path, llm_cli_model *lm)
{
    memset(lm, 0, sizeof *lm);
    if (access(path, R_OK) != 0) return qkv_cli_report(cmd, "cannot open %s: %s", path, strerror(errno));
    qkv_gguf *g = NULL;
    /* the model first: an unsupported architecture is named before the tokenizer is read */
    qkv_status s = qkv_llm_load_gguf(path, 0, &lm->m);
    if (!s) s = qkv_gguf_open(path, &g);
    const char *t = NULL;
    size_t tl = 0;
    if (!s && qkv_gguf_meta_find(g, "tokenizer.chat_template") >= 0 &&
        qkv_gguf_get_str(g, "tokenizer.chat_template", &t, &tl) == QKV_OK && (lm->tmpl = malloc(tl + 1))) {
        memcpy(lm->tmpl, t, tl);
        lm->tmpl[tl] = 0;
    }
    if (!s) s = qkv_tokenizer_from_gguf(g, &lm->tok);
    if (g) qkv_gguf_close(g);
    if (s) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", qkv_last_error());
        llm_cli_close(lm);
        return qkv_cli_report(cmd, "%s: %s", path, msg);
    }
    lm->vocab = lm->m.cfg.vocab;
    return 0;
}

void llm_cli_close(llm_cli_model *lm)
{
    qkv_llm_free(&lm->m);
    qkv_tokenizer_free(lm->tok);
    free(lm->tmpl);
    for (int64_t i = 0; i < lm->nbuf; i++) free(lm->bufs[i]);
    free(lm->bufs);
    memset(lm, 0, sizeof *lm);
}

enum { O_TOPP = 300, O_MINP, O_RPEN, O_RLAST };
const struct option llm_cli_sampling_options[] = {
    {"max-new-tokens", required_argument, NULL, 'n'}, {"temperature", required_argument, NULL, 't'},
    {"top-k", required_argument, NULL, 'k'},          {"top-p", required_argument, NULL, O_TOPP},
    {"min-p", required_argument, NULL, O_MINP},       {"repeat-penalty", required_argument, NULL, O_RPEN},
    {"repeat-last-n", required_argument, NULL, O_RLAST}, {"seed", required_argument, NULL, 's'},
    {"ctx-size", required_argument, NULL, 'c'},       {"threads", required_argument, NULL, 'j'},
    {NULL, 0, NULL, 0}};

llm_cli_sampling llm_cli_sampling_default(void)
{
    return (llm_cli_sampling){.max_new_tokens = 256, .top_k = 40, .repeat_last_n = 64, .ctx_size = 2048,
                              .temperature = 0.8f, .top_p = 0.95f, .min_p = 0.05f, .repeat_penalty = 1.1f,
                              .seed = 1};
}

int llm_cli_sampling_option(qkv_cli_args *a, int c, llm_cli_sampling *s)
{
    switch (c) {
    case 'n': s->max_new_tokens = qkv_cli_int(a, 1, (int64_t)1 << 30); break;
    case 't': s->temperature = (float)qkv_cli_double(a, 0, 100, 0); break;
    case 'k': s->top_k = qkv_cli_int(a, 0, (int64_t)1 << 30); break;
    case O_TOPP: s->top_p = (float)qkv_cli_double(a, 0, 1, 1); break;
    case O_MINP: s->min_p = (float)qkv_cli_double(a, 0, 1, 0); break;
    case O_RPEN: s->repeat_penalty = (float)qkv_cli_double(a, 0, 100, 1); break;
    case O_RLAST: s->repeat_last_n = qkv_cli_int(a, 0, (int64_t)1 << 30); break;
    case 's': s->seed = (uint64_t)qkv_cli_int(a, 0, INT64_MAX); break;
    case 'c': s->ctx_size = qkv_cli_int(a, 2, (int64_t)1 << 20); break;
    case 'j': s->threads = qkv_cli_int(a, 1, 1024); break;
    default: return 0;
    }
    return 1;
}

qkv_status llm_cli_gen_init(llm_cli_gen *g, const llm_cli_model *lm, const llm_cli_sampling *s)
{
    memset(g, 0, sizeof *g);
    g->lm = lm, g->s = *s, g->cap = s->ctx_size + 1;
    if (s->threads > 0) omp_set_num_threads((int)s->threads);
    qkv_rng_seed(&g->rng, s->seed);
    g->seq = malloc((size_t)g->cap * sizeof *g->seq);
    g->logits = malloc((size_t)lm->vocab * sizeof *g->logits);
    g->work = malloc((size_t)lm->vocab * sizeof *g->work);
    if (!g->seq || !g->logits || !g->work) return qkv_cli_fail(QKV_ERR_NOMEM, "out of memory");
    QKV_CLI_TRY(qkv_ctx_new(&g->c));
    qkv_ctx_set_grad(g->c, 0);
    return qkv_llm_cache_init(&g->kc, &lm->m, s->ctx_size);
}

void llm_cli_gen_free(llm_cli_gen *g)
{
    qkv_kv_cache_free(&g->kc);
    qkv_ctx_free(g->c);
    free(g->seq);
    free(g->logits);
    free(g->work);
    memset(g, 0, sizeof *g);
}

qkv_status llm_cli_gen_set(llm_cli_gen *g, const int64_t *ids, int64_t n)
{
    if (n < 1 || n > g->s.ctx_size)
        return qkv_cli_fail(QKV_ERR_ARG, "%lld tokens do not fit the context of %lld", (long long)n,
                            (long long)g->s.ctx_size);
    int64_t keep = 0;
    while (keep < g->kc.len && keep < n - 1 && g->seq[keep] == ids[keep]) keep++;
    QKV_CLI_TRY(qkv_kv_cache_truncate(&g->kc, keep));
    memcpy(g->seq, ids, (size_t)n * sizeof *ids);
    g->n = n;
    qkv_status s = qkv_llm_forward(g->c, &g->lm->m, &g->kc, ids + keep, n - keep, 0, g->logits);
    qkv_ctx_reset(g->c);
    return s;
}

/* The repetition penalty over the last repeat_last_n ids of the sequence
 * (each id once), applied to logits in place. */
static void penalize(const llm_cli_gen *g, float *x)
{
    float p = g->s.repeat_penalty;
    int64_t from = g->n - g->s.repeat_last_n;
    if (p == 1 || g->s.repeat_last_n == 0) return;
    for (int64_t i = from < 0 ? 0 : from; i < g->n; i++) {
        int64_t id = g->seq[i];
        int seen = 0;
        for (int64_t j = from < 0 ? 0 : from; j < i && !seen; j++) seen = g->seq[j] == id;
        if (!seen) x[id] = x[id] > 0 ? x[id] / p : x[id] * p;
    }
}

/* The next id from the last logits: penalty, then greedy or min-p with
 * qkv_sample_token's top-k, top-p and temperature. */
static qkv_status choose(llm_cli_gen *g, int64_t *id)
{
    int64_t V = g->lm->vocab, best = 0;
    float *x = g->work;
    memcpy(x, g->logits, (size_t)V * sizeof *x);
    penalize(g, x);
    for (int64_t i = 1; i < V; i++)
        if (x[i] > x[best]) best = i;
    if (g->s.temperature == 0) {
        *id = best;
        return QKV_OK;
    }
    /* min-p on the unscaled distribution: p_i >= min_p p_max <=> x_i >= x_max + log(min_p) */
    if (g->s.min_p > 0) {
        float cut = x[best] + logf(g->s.min_p);
        for (int64_t i = 0; i < V; i++)
            if (x[i] < cut) x[i] = -INFINITY;
    }
    qkv_generate_opts o = qkv_generate_opts_default();
    o.kind = QKV_DECODE_SAMPLE;
    o.temperature = g->s.temperature, o.top_k = g->s.top_k, o.top_p = g->s.top_p;
    qkv_status s = qkv_sample_token(g->c, x, V, &o, &g->rng, id);
    qkv_ctx_reset(g->c);
    return s;
}

qkv_status llm_cli_gen_run(llm_cli_gen *g, FILE *out, int64_t *made, int *full, double *seconds)
{
    *made = 0, *full = 0;
    double t0 = qkv_cli_now();
    qkv_status s = QKV_OK;
    while (*made < g->s.max_new_tokens) {
        int64_t id;
        if ((s = choose(g, &id))) break;
        if (qkv_tokenizer_is_eog(g->lm->tok, id)) break;
        char *text;
        size_t len;
        if ((s = qkv_tokenizer_decode(g->lm->tok, &id, 1, &text, &len))) break;
        if (out) {
            fwrite(text, 1, len, out);
            fflush(out);
        }
        free(text);
        g->seq[g->n++] = id;
        ++*made;
        if (g->kc.len >= g->s.ctx_size) {
            *full = 1;
            break;
        }
        if (*made == g->s.max_new_tokens) break;
        s = qkv_llm_forward(g->c, &g->lm->m, &g->kc, &id, 1, 0, g->logits);
        qkv_ctx_reset(g->c);
        if (s) break;
    }
    *seconds = qkv_cli_now() - t0;
    return s;
}
