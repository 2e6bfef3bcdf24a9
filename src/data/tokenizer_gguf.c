/* tokenizer_gguf.c: a GGUF file's tokenizer: the tokenizer.ggml.* keys into
 * a qkv_vocab_spec (qkv_tokenizer_from_vocab), with llama.cpp's defaults
 * where a key is absent. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "core/internal.h"
#include "data/tokenizer_internal.h"
#include "qkv/gguf.h"

/* The strings of array key: *s and *lens malloc'd (free() them), *n their count. */
static qkv_status read_strs(const qkv_gguf *g, const char *key, const char ***s, size_t **lens, int64_t *n,
                            const char *fn)
{
    qkv_gguf_vtype et;
    *s = NULL, *lens = NULL;
    QKV_TRY(qkv_gguf_get_array(g, key, &et, n));
    if (et != QKV_GGUF_STRING)
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s is an array of %s, expected STRING", fn, key, qkv_gguf_vtype_name(et));
    *s = malloc((size_t)(*n ? *n : 1) * sizeof **s), *lens = malloc((size_t)(*n ? *n : 1) * sizeof **lens);
    if (!*s || !*lens) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for %" PRId64 " strings", fn, *n);
    for (int64_t i = 0; i < *n; i++) QKV_TRY(qkv_gguf_array_str(g, key, i, &(*s)[i], &(*lens)[i]));
    return QKV_OK;
}

/* An optional id (key absent: def) and an optional switch (absent: -1). */
static qkv_status opt_id(const qkv_gguf *g, const char *key, int64_t def, int64_t *v)
{
    *v = def;
    if (qkv_gguf_meta_find(g, key) < 0) return QKV_OK;
    return qkv_gguf_get_i64(g, key, v);
}

static qkv_status opt_bool(const qkv_gguf *g, const char *key, int *v)
{
    *v = -1;
    if (qkv_gguf_meta_find(g, key) < 0) return QKV_OK;
    return qkv_gguf_get_bool(g, key, v);
}

/* Array key's n numbers, or NULL when the key is absent. */
static qkv_status opt_array(const qkv_gguf *g, const char *key, int64_t n, int f32, void **out, const char *fn)
{
    *out = NULL;
    if (qkv_gguf_meta_find(g, key) < 0) return QKV_OK;
    int64_t m;
    QKV_TRY(qkv_gguf_get_array(g, key, NULL, &m));
    if (m != n)
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s has %" PRId64 " values for %" PRId64 " tokens", fn, key, m, n);
    *out = malloc((size_t)(n ? n : 1) * 4);
    if (!*out) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    return f32 ? qkv_gguf_array_f32(g, key, *out, n) : qkv_gguf_array_i32(g, key, *out, n);
}

static qkv_status from_gguf(const qkv_gguf *g, qkv_vocab_spec *v, const char *fn)
{
    QKV_TRY(qkv_gguf_get_str(g, "tokenizer.ggml.model", &v->model, NULL));
    int llama = !strcmp(v->model, "llama");
    if (qkv_gguf_meta_find(g, "tokenizer.ggml.pre") >= 0) QKV_TRY(qkv_gguf_get_str(g, "tokenizer.ggml.pre", &v->pre, NULL));
    QKV_TRY(read_strs(g, "tokenizer.ggml.tokens", (const char ***)&v->tokens, (size_t **)&v->token_lens, &v->n_tokens,
                      fn));
    QKV_TRY(opt_array(g, "tokenizer.ggml.scores", v->n_tokens, 1, (void **)&v->scores, fn));
    QKV_TRY(opt_array(g, "tokenizer.ggml.token_type", v->n_tokens, 0, (void **)&v->types, fn));
    if (!llama && qkv_gguf_meta_find(g, "tokenizer.ggml.merges") >= 0)
        QKV_TRY(read_strs(g, "tokenizer.ggml.merges", (const char ***)&v->merges, (size_t **)&v->merge_lens,
                          &v->n_merges, fn));
    /* llama.cpp's defaults: llama bos 1, eos 2, unk 0; gpt2 bos = eos = 11 */
    QKV_TRY(opt_id(g, "tokenizer.ggml.bos_token_id", llama ? 1 : 11, &v->bos));
    QKV_TRY(opt_id(g, "tokenizer.ggml.eos_token_id", llama ? 2 : 11, &v->eos));
    QKV_TRY(opt_id(g, "tokenizer.ggml.unknown_token_id", llama ? 0 : -1, &v->unk));
    QKV_TRY(opt_id(g, "tokenizer.ggml.padding_token_id", -1, &v->pad));
    QKV_TRY(opt_id(g, "tokenizer.ggml.eot_token_id", -1, &v->eot));
    QKV_TRY(opt_bool(g, "tokenizer.ggml.add_bos_token", &v->add_bos));
    QKV_TRY(opt_bool(g, "tokenizer.ggml.add_eos_token", &v->add_eos));
    QKV_TRY(opt_bool(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix));
    /* an id outside the vocabulary is no token (llama.cpp ignores it too) */
    int64_t *ids[] = {&v->bos, &v->eos, &v->unk, &v->pad, &v->eot};
    for (int i = 0; i < 5; i++)
        if (*ids[i] < -1 || *ids[i] >= v->n_tokens) *ids[i] = -1;
    return QKV_OK;
}

qkv_status qkv_tokenizer_from_gguf(const qkv_gguf *g, qkv_tokenizer **out)
{
    static const char fn[] = "tokenizer_from_gguf";
    QKV_NEED(out, fn, "out");
    *out = NULL;
    QKV_NEED(g, fn, "g");
    qkv_vocab_spec v = {0};
    v.bos = v.eos = v.unk = v.pad = v.eot = -1;
    v.add_bos = v.add_eos = v.add_space_prefix = -1;
    qkv_status st = from_gguf(g, &v, fn);
    if (st == QKV_OK) st = qkv_tokenizer_from_vocab(&v, out);
    free((void *)v.tokens), free((void *)v.token_lens), free((void *)v.scores), free((void *)v.types);
    free((void *)v.merges), free((void *)v.merge_lens);
    return qkv_fail_in(fn, st);
}
