/* lm_common.c: language model checkpoints and streaming generation for the
 * qkv command (train_lm.c, generate.c); lm_common.h says what each does. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/lm_common.h"


void lm_model_free(lm_model *m)
{
    if (!m) return;
    qkv_lm_free(&m->m);
    qkv_params_free(m->p);
    qkv_tokenizer_free(m->tok);
    free(m->tok_spec);
    free(m->tok_text);
    *m = (lm_model){0};
}

qkv_status lm_model_init(lm_model *m, const qkv_lm_opts *o, qkv_tokenizer *tok, char *tok_spec,
                         char *tok_text, qkv_rng *rng)
{
    *m = (lm_model){.o = *o, .tok = tok, .tok_spec = tok_spec, .tok_text = tok_text};
    qkv_status s = qkv_params_new(&m->p);
    if (!s) s = qkv_lm_init(&m->m, o, m->p, "", rng);
    if (s) lm_model_free(m);
    return s;
}

/* The tokenizer a checkpoint names: *tok, with its spec and text copied. */
static qkv_status load_tokenizer(const char *path, char **spec, char **text, qkv_tokenizer **tok)
{
    QKV_CLI_TRY(qkv_checkpoint_read_meta(path, "lm.tokenizer", spec));
    if (!strcmp(*spec, "bytes")) return qkv_tokenizer_bytes_new(tok);
    if (!strncmp(*spec, "gpt2:", 5)) return qkv_tokenizer_gpt2_load(*spec + 5, tok);
    if (strcmp(*spec, "chars") && strcmp(*spec, "bpe"))
        return qkv_cli_fail(QKV_ERR_FORMAT, "%s: lm.tokenizer '%.40s' is not bytes, chars, bpe or gpt2:DIR",
                        path, *spec);
    QKV_CLI_TRY(qkv_checkpoint_read_meta(path, "lm.tokenizer_file", text));
    QKV_CLI_TRY(qkv_tokenizer_load_text(*text, strlen(*text), tok));
    if (strcmp(*spec, qkv_tokenizer_kind_of(*tok) == QKV_TOKENIZER_CHARS ? "chars" : "bpe"))
        return qkv_cli_fail(QKV_ERR_FORMAT, "%s: lm.tokenizer says %s, its file is another kind", path, *spec);
    return QKV_OK;
}

qkv_status lm_model_load(lm_model *m, const char *path)
{
    *m = (lm_model){0};
    char *cfg = NULL;
    qkv_status s = qkv_checkpoint_read_meta(path, "lm.config", &cfg);
    if (s == QKV_ERR_NOTFOUND)
        s = qkv_cli_fail(s, "%s is a qkv checkpoint, but not of a language model (no lm.config)", path);
    if (!s) s = qkv_lm_opts_parse(cfg, &m->o);
    free(cfg);
    if (!s) s = load_tokenizer(path, &m->tok_spec, &m->tok_text, &m->tok);
    if (!s && qkv_tokenizer_vocab_size(m->tok) != m->o.vocab_size)
        s = qkv_cli_fail(QKV_ERR_FORMAT, "%s: the tokenizer has %lld ids, the model %lld", path,
                     (long long)qkv_tokenizer_vocab_size(m->tok), (long long)m->o.vocab_size);
    qkv_rng rng;
    qkv_rng_seed(&rng, 1);
    if (!s) s = qkv_params_new(&m->p);
    if (!s) s = qkv_lm_init(&m->m, &m->o, m->p, "", &rng);
    if (!s) s = qkv_checkpoint_load(path, m->p, NULL, NULL, NULL);
    if (s) {
        char msg[600];
        snprintf(msg, sizeof msg, "%s", qkv_cli_last_error());
        lm_model_free(m);
        qkv_cli_fail(s, "%s", msg);
    }
    return s;
}

/* Writes token id's text to out, flushed. */
static qkv_status emit(const qkv_tokenizer *tok, int64_t id, FILE *out)
{
    if (!out) return QKV_OK;
    char *text;
    size_t len;
    QKV_CLI_TRY(qkv_tokenizer_decode(tok, &id, 1, &text, &len));
    fwrite(text, 1, len, out);
    fflush(out);
    free(text);
    return QKV_OK;
}

/* Feeds ids[0, n) at the cache's next positions; *last gets the last
 * position's logits (V), copied. */
static qkv_status feed(qkv_ctx *c, lm_model *m, qkv_kv_cache *kc, int64_t *ids, int64_t n, float *last)
{
    qkv_ctx_reset(c);
    qkv_tensor *x, *logits;
    QKV_CLI_TRY(qkv_tensor_wrap_i64(qkv_ctx_arena(c), ids, 2, (int64_t[]){1, n}, &x));
    QKV_CLI_TRY(qkv_lm_forward_cached(c, &m->m, kc, x, NULL, &logits));
    int64_t V = m->o.vocab_size;
    memcpy(last, logits->data + (n - 1) * V, (size_t)V * sizeof *last);
    return QKV_OK;
}

static int64_t argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

qkv_status lm_generate_stream(lm_model *m, const int64_t *ids, int64_t n, const lm_sample_opts *o,
                              FILE *out, int64_t **all, int64_t *n_all, double *seconds)
{
    int64_t L = m->o.max_len, V = m->o.vocab_size, total = n + o->max_new_tokens;
    *all = NULL, *n_all = 0, *seconds = 0;
    if (n < 1 || n > L) return qkv_cli_fail(QKV_ERR_ARG, "generate: prompt of %lld tokens (1 to %lld)", (long long)n, (long long)L);
    int64_t *seq = malloc((size_t)total * sizeof *seq);
    float *logits = malloc((size_t)V * sizeof *logits);
    qkv_ctx *c = NULL;
    qkv_kv_cache kc = {0};
    qkv_bf16_weights w16 = {0};
    qkv_status s = seq && logits ? QKV_OK : qkv_cli_fail(QKV_ERR_NOMEM, "generate: out of memory");
    if (!s) s = qkv_ctx_new(&c);
    int64_t NL = m->o.num_layers, H = m->o.layer.nhead, hd = m->o.layer.d_model / H;
    if (!s && o->cache == QKV_KV_F16) s = qkv_kv_cache_init_half(&kc, NL, 1, H, hd, L);
    else if (!s && o->cache == QKV_KV_BF16) s = qkv_kv_cache_init_bf16(&kc, NL, 1, H, hd, L);
    else if (!s) s = qkv_lm_cache_init(&kc, &m->m, 1, L);
    if (!s && o->bf16_weights) {
        s = qkv_bf16_weights_init(&w16, m->p);
        kc.weights = &w16;
    }
    if (!s) {
        memcpy(seq, ids, (size_t)n * sizeof *seq);
        qkv_ctx_set_grad(c, 0);
        s = feed(c, m, &kc, seq, n, logits);
    }
    qkv_generate_opts go = qkv_generate_opts_default();
    go.kind = QKV_DECODE_SAMPLE;
    go.temperature = o->temperature > 0 ? o->temperature : 1;
    go.top_k = o->top_k;
    go.top_p = o->top_p;
    qkv_rng rng;
    qkv_rng_seed(&rng, o->seed);
    int64_t len = n;
    double t0 = qkv_cli_now();
    while (!s && len < total) {
        int64_t id;
        if (o->temperature > 0) {
            qkv_ctx_reset(c);
            s = qkv_sample_token(c, logits, V, &go, &rng, &id);
        } else {
            id = argmax(logits, V);
        }
        if (s) break;
        seq[len++] = id;
        if ((s = emit(m->tok, id, out)) || len == total) break;
        if (kc.len < L) {
            s = feed(c, m, &kc, seq + len - 1, 1, logits);
        } else { /* the context is full: restart from its last half */
            int64_t keep = L / 2 > 0 ? L / 2 : 1;
            qkv_kv_cache_reset(&kc);
            s = feed(c, m, &kc, seq + len - keep, keep, logits);
        }
    }
    *seconds = qkv_cli_now() - t0;
    qkv_kv_cache_free(&kc);
    qkv_bf16_weights_free(&w16);
    qkv_ctx_free(c);
    free(logits);
    if (s) {
        free(seq);
        return s;
    }
    *all = seq, *n_all = len;
    return QKV_OK;
}
