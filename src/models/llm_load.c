/* llm_load.c: a Llama or Gemma 3 model from a Hugging Face folder:
 * config.json by the transformers field names (and their defaults), the
 * weights from model.safetensors by the transformers tensor names, read
 * as FP32 (qkv/llm.h). */
#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "io/json.h"
#include "models/llm_internal.h"

/* ---- config.json ------------------------------------------------------- */

static const json_value *member(const json_value *obj, const char *key)
{
    for (size_t i = 0; i < obj->u.obj.n; i++)
        if (!strcmp(obj->u.obj.items[i].key, key)) return &obj->u.obj.items[i].val;
    return NULL;
}

/* A member that may be absent or null (then *present = 0). */
static const json_value *opt(const json_value *obj, const char *key)
{
    const json_value *v = member(obj, key);
    return v && v->type != JSON_NULL ? v : NULL;
}

/* An integer field into *out: required when req, else def when absent. */
static qkv_status get_int(const json_value *obj, const char *key, int req, int64_t def, int64_t *out)
{
    const json_value *v = opt(obj, key);
    if (!v) {
        if (req) return qkv_fail(QKV_ERR_FORMAT, "llm_config: config.json has no \"%s\"", key);
        *out = def;
        return QKV_OK;
    }
    if (v->type != JSON_NUMBER || !v->u.num.integral || v->u.num.big || v->u.num.neg ||
        v->u.num.mag > ((uint64_t)1 << 40))
        return qkv_fail(QKV_ERR_FORMAT, "llm_config: \"%s\" is not an integer in [0, 2^40]", key);
    *out = (int64_t)v->u.num.mag;
    return QKV_OK;
}

static qkv_status get_float(const char *text, const json_value *obj, const char *key, double def,
                            float *out)
{
    const json_value *v = opt(obj, key);
    if (!v) {
        *out = (float)def;
        return QKV_OK;
    }
    if (v->type != JSON_NUMBER)
        return qkv_fail(QKV_ERR_FORMAT, "llm_config: \"%s\" is %s, expected a number", key,
                        json_type_name(v->type));
    *out = (float)strtod(text + v->pos, NULL);
    return QKV_OK;
}

static qkv_status get_bool(const json_value *obj, const char *key, int def, int *out)
{
    const json_value *v = opt(obj, key);
    if (!v) *out = def;
    else if (v->type == JSON_TRUE || v->type == JSON_FALSE) *out = v->type == JSON_TRUE;
    else return qkv_fail(QKV_ERR_FORMAT, "llm_config: \"%s\" is %s, expected true or false", key,
                         json_type_name(v->type));
    return QKV_OK;
}

/* A string field that must equal one of two accepted values (b may be NULL) when present. */
static qkv_status want_str(const json_value *obj, const char *key, const char *a, const char *b)
{
    const json_value *v = opt(obj, key);
    if (!v) return QKV_OK;
    if (v->type != JSON_STRING || (strcmp(v->u.str.s, a) && (!b || strcmp(v->u.str.s, b))))
        return qkv_fail(QKV_ERR_FORMAT, "llm_config: \"%s\" %s%s%s is not supported (only \"%s\")", key,
                        v->type == JSON_STRING ? "\"" : "", v->type == JSON_STRING ? v->u.str.s : "",
                        v->type == JSON_STRING ? "\"" : "", a);
    return QKV_OK;
}

/* Gemma 3's layer kinds: layer_types ("sliding_attention" /
 * "full_attention", transformers >= 4.53) as a period, else
 * sliding_window_pattern (6 by default). */
static qkv_status gemma_pattern(const json_value *root, qkv_llm_config *g)
{
    const json_value *lt = opt(root, "layer_types");
    if (!lt) {
        int64_t p;
        QKV_TRY(get_int(root, "_sliding_window_pattern", 0, 6, &p));
        QKV_TRY(get_int(root, "sliding_window_pattern", 0, p, &g->pattern));
        return QKV_OK;
    }
    if (lt->type != JSON_ARRAY || (int64_t)lt->u.arr.n != g->n_layer)
        return qkv_fail(QKV_ERR_FORMAT, "llm_config: layer_types is not an array of %lld names",
                        (long long)g->n_layer);
    int64_t first_full = 0;
    while (first_full < g->n_layer) {
        const json_value *e = &lt->u.arr.items[first_full];
        if (e->type == JSON_STRING && !strcmp(e->u.str.s, "full_attention")) break;
        first_full++;
    }
    g->pattern = first_full < g->n_layer ? first_full + 1 : 0;
    if (!g->pattern) g->window = 0; /* no global layer: treated as all sliding below */
    for (int64_t i = 0; i < g->n_layer; i++) {
        const json_value *e = &lt->u.arr.items[i];
        int full = e->type == JSON_STRING && !strcmp(e->u.str.s, "full_attention");
        int slid = e->type == JSON_STRING && !strcmp(e->u.str.s, "sliding_attention");
        if ((!full && !slid) || (g->pattern && full != ((i + 1) % g->pattern == 0)))
            return qkv_fail(QKV_ERR_FORMAT, "llm_config: layer_types[%lld] breaks the periodic "
                            "sliding/full pattern qkv supports", (long long)i);
    }
    return QKV_OK;
}

/* The fields every family shares. */
static qkv_status common_fields(const char *text, const json_value *root, qkv_llm_config *g, int gemma)
{
    QKV_TRY(get_int(root, "num_hidden_layers", 1, 0, &g->n_layer));
    QKV_TRY(get_int(root, "hidden_size", 1, 0, &g->d_model));
    QKV_TRY(get_int(root, "num_attention_heads", 1, 0, &g->n_head));
    QKV_TRY(get_int(root, "num_key_value_heads", 0, g->n_head, &g->n_head_kv));
    QKV_TRY(get_int(root, "head_dim", 0, gemma ? 256 : (g->n_head ? g->d_model / g->n_head : 0), &g->head_dim));
    QKV_TRY(get_int(root, "intermediate_size", 1, 0, &g->d_ff));
    QKV_TRY(get_int(root, "vocab_size", 1, 0, &g->vocab));
    QKV_TRY(get_int(root, "max_position_embeddings", 0, gemma ? 131072 : 2048, &g->max_pos));
    QKV_TRY(get_float(text, root, "rms_norm_eps", 1e-6, &g->eps));
    QKV_TRY(get_float(text, root, "rope_theta", gemma ? 1e6 : 1e4, &g->rope_base));
    QKV_TRY(get_bool(root, "tie_word_embeddings", gemma, &g->tied));
    int bias;
    QKV_TRY(get_bool(root, "attention_bias", 0, &bias));
    if (bias) return qkv_fail(QKV_ERR_FORMAT, "llm_config: attention_bias true is not supported");
    QKV_TRY(get_bool(root, "mlp_bias", 0, &bias));
    if (bias) return qkv_fail(QKV_ERR_FORMAT, "llm_config: mlp_bias true is not supported");
    if (opt(root, "rope_scaling"))
        return qkv_fail(QKV_ERR_FORMAT, "llm_config: rope_scaling is not supported (only null)");
    g->rope_layout = QKV_ROPE_HALF;
    return QKV_OK;
}

static qkv_status config_body(const char *text, const json_value *root, qkv_llm_config *g)
{
    if (root->type != JSON_OBJECT) return qkv_fail(QKV_ERR_FORMAT, "llm_config: config.json is not an object");
    const json_value *ar = opt(root, "architectures");
    if (!ar || ar->type != JSON_ARRAY || ar->u.arr.n < 1 || ar->u.arr.items[0].type != JSON_STRING)
        return qkv_fail(QKV_ERR_FORMAT, "llm_config: config.json has no \"architectures\" list of names");
    const char *name = ar->u.arr.items[0].u.str.s;
    memset(g, 0, sizeof *g);
    if (!strcmp(name, "LlamaForCausalLM")) {
        g->arch = QKV_LLM_LLAMA;
        QKV_TRY(common_fields(text, root, g, 0));
        QKV_TRY(want_str(root, "hidden_act", "silu", NULL));
    } else if (!strcmp(name, "Gemma3ForCausalLM")) {
        g->arch = QKV_LLM_GEMMA3;
        QKV_TRY(common_fields(text, root, g, 1));
        QKV_TRY(want_str(root, "hidden_activation", "gelu_pytorch_tanh", NULL));
        QKV_TRY(get_float(text, root, "rope_local_base_freq", 1e4, &g->rope_base_local));
        QKV_TRY(get_int(root, "sliding_window", 0, 4096, &g->window));
        QKV_TRY(gemma_pattern(root, g));
        float qs;
        QKV_TRY(get_float(text, root, "query_pre_attn_scalar", 256, &qs));
        if (!(qs > 0)) return qkv_fail(QKV_ERR_FORMAT, "llm_config: query_pre_attn_scalar %g must be > 0", (double)qs);
        g->attn_scale = (float)(1.0 / sqrt((double)qs));
        QKV_TRY(get_float(text, root, "final_logit_softcapping", 0, &g->final_softcap));
        if (opt(root, "attn_logit_softcapping"))
            return qkv_fail(QKV_ERR_FORMAT, "llm_config: attn_logit_softcapping is not supported (only null)");
    } else
        return qkv_fail(QKV_ERR_FORMAT, "llm_config: architecture \"%s\" is not supported "
                        "(LlamaForCausalLM, Gemma3ForCausalLM)", name);
    return qkv_llm_config_check(g);
}

qkv_status qkv_llm_config_from_hf_json(const char *text, size_t len, qkv_llm_config *cfg)
{
    QKV_NEED(text, "llm_config_from_hf_json", "text");
    QKV_NEED(cfg, "llm_config_from_hf_json", "config");
    json_limits lim = {64, 0};
    json_value *root = NULL;
    char err[200];
    if (json_parse(text, len, &lim, &root, NULL, err, sizeof err) != JSON_OK)
        return qkv_fail(QKV_ERR_FORMAT, "llm_config_from_hf_json: config.json is not JSON: %s", err);
    qkv_status s = config_body(text, root, cfg);
    json_free(root);
    return qkv_fail_in("llm_config_from_hf_json", s);
}

/* ---- model.safetensors --------------------------------------------------- */

/* Tensor name (printf-style) as FP32 of exactly the shape (rows[,cols])
 * (cols 0: a vector), owned by m; add (Gemma's norm offset) added to each. */
static qkv_status load_f32(qkv_llm *m, const qkv_safetensors *st, float add, int64_t rows, int64_t cols,
                           float **out, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static qkv_status load_f32(qkv_llm *m, const qkv_safetensors *st, float add, int64_t rows, int64_t cols,
                           float **out, const char *fmt, ...)
{
    char name[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int ndim;
    int64_t shape[8];
    if (qkv_safetensors_info(st, name, NULL, &ndim, shape, NULL, NULL) != QKV_OK)
        return qkv_fail(QKV_ERR_FORMAT, "llm_load: tensor %s is missing", name);
    int want = cols ? 2 : 1;
    if (ndim != want || shape[0] != rows || (cols && shape[1] != cols))
        return qkv_fail(QKV_ERR_SHAPE, "llm_load: tensor %s has %d dims (%lld,%lld), expected (%lld%s%lld)",
                        name, ndim, (long long)shape[0], ndim > 1 ? (long long)shape[1] : 0LL,
                        (long long)rows, cols ? "," : "", (long long)cols);
    int64_t n = rows * (cols ? cols : 1);
    float *buf = llm_alloc(m, (size_t)n * sizeof(float));
    if (!buf) return QKV_ERR_NOMEM;
    QKV_TRY(qkv_safetensors_read_f32(st, name, buf, n));
    if (add != 0)
        for (int64_t i = 0; i < n; i++) buf[i] += add;
    *out = buf;
    return QKV_OK;
}

static qkv_status load_w(qkv_llm *m, const qkv_safetensors *st, int64_t rows, int64_t cols,
                         qkv_llm_weight *w, const char *name, int64_t layer)
{
    float *buf;
    if (layer >= 0) QKV_TRY(load_f32(m, st, 0, rows, cols, &buf, "model.layers.%lld.%s", (long long)layer, name));
    else QKV_TRY(load_f32(m, st, 0, rows, cols, &buf, "%s", name));
    *w = (qkv_llm_weight){QKV_Q_F32, buf, rows, cols};
    return QKV_OK;
}

static qkv_status load_layer(qkv_llm *m, const qkv_safetensors *st, int64_t i)
{
    const qkv_llm_config *g = &m->cfg;
    qkv_llm_layer *L = &m->layers[i];
    int64_t E = g->d_model, qd = g->n_head * g->head_dim, kd = g->n_head_kv * g->head_dim, F = g->d_ff;
    int gem = g->arch == QKV_LLM_GEMMA3;
    float add = gem ? 1.0f : 0.0f; /* Gemma's RMSNorm multiplies by 1 + w */
    long long li = (long long)i;
    float *p;
    QKV_TRY(load_w(m, st, qd, E, &L->wq, "self_attn.q_proj.weight", i));
    QKV_TRY(load_w(m, st, kd, E, &L->wk, "self_attn.k_proj.weight", i));
    QKV_TRY(load_w(m, st, kd, E, &L->wv, "self_attn.v_proj.weight", i));
    QKV_TRY(load_w(m, st, E, qd, &L->wo, "self_attn.o_proj.weight", i));
    QKV_TRY(load_w(m, st, F, E, &L->w_gate, "mlp.gate_proj.weight", i));
    QKV_TRY(load_w(m, st, F, E, &L->w_up, "mlp.up_proj.weight", i));
    QKV_TRY(load_w(m, st, E, F, &L->w_down, "mlp.down_proj.weight", i));
    QKV_TRY(load_f32(m, st, add, E, 0, &p, "model.layers.%lld.input_layernorm.weight", li));
    L->attn_norm = p;
    if (!gem) {
        QKV_TRY(load_f32(m, st, 0, E, 0, &p, "model.layers.%lld.post_attention_layernorm.weight", li));
        L->ffn_norm = p;
        return QKV_OK;
    }
    QKV_TRY(load_f32(m, st, add, E, 0, &p, "model.layers.%lld.post_attention_layernorm.weight", li));
    L->post_attn_norm = p;
    QKV_TRY(load_f32(m, st, add, E, 0, &p, "model.layers.%lld.pre_feedforward_layernorm.weight", li));
    L->ffn_norm = p;
    QKV_TRY(load_f32(m, st, add, E, 0, &p, "model.layers.%lld.post_feedforward_layernorm.weight", li));
    L->post_ffn_norm = p;
    QKV_TRY(load_f32(m, st, add, g->head_dim, 0, &p, "model.layers.%lld.self_attn.q_norm.weight", li));
    L->q_norm = p;
    QKV_TRY(load_f32(m, st, add, g->head_dim, 0, &p, "model.layers.%lld.self_attn.k_norm.weight", li));
    L->k_norm = p;
    return QKV_OK;
}

static qkv_status from_st_body(const qkv_llm_config *cfg, const qkv_safetensors *st, qkv_llm *m)
{
    QKV_TRY(qkv_llm_config_check(cfg));
    m->cfg = *cfg;
    const qkv_llm_config *g = &m->cfg;
    if (!(m->layers = llm_alloc(m, (size_t)g->n_layer * sizeof *m->layers))) return QKV_ERR_NOMEM;
    QKV_TRY(load_w(m, st, g->vocab, g->d_model, &m->tok_emb, "model.embed_tokens.weight", -1));
    float *p;
    QKV_TRY(load_f32(m, st, g->arch == QKV_LLM_GEMMA3 ? 1.0f : 0.0f, g->d_model, 0, &p, "model.norm.weight"));
    m->out_norm = p;
    if (g->tied) m->output = m->tok_emb;
    else QKV_TRY(load_w(m, st, g->vocab, g->d_model, &m->output, "lm_head.weight", -1));
    for (int64_t i = 0; i < g->n_layer; i++) QKV_TRY(load_layer(m, st, i));
    return QKV_OK;
}

qkv_status qkv_llm_from_safetensors(const qkv_llm_config *cfg, const qkv_safetensors *st, qkv_llm *m)
{
    QKV_NEED(m, "llm_from_safetensors", "model");
    memset(m, 0, sizeof *m);
    QKV_NEED(cfg, "llm_from_safetensors", "config");
    QKV_NEED(st, "llm_from_safetensors", "safetensors");
    qkv_status s = from_st_body(cfg, st, m);
    if (s != QKV_OK) qkv_llm_free(m);
    return qkv_fail_in("llm_from_safetensors", s);
}

/* The whole of path into a new NUL-terminated buffer. */
static qkv_status read_text(const char *path, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return qkv_fail(QKV_ERR_IO, "llm_load: cannot open %s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 8192;
            char *b = cap > ((size_t)64 << 20) ? NULL : realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                return qkv_fail(QKV_ERR_FORMAT, "llm_load: %s is too large for a config (or out of memory)", path);
            }
            buf = b;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return qkv_fail(QKV_ERR_IO, "llm_load: cannot read %s", path);
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return QKV_OK;
}

qkv_status qkv_llm_load_hf(const char *dir, qkv_llm *m)
{
    QKV_NEED(m, "llm_load_hf", "model");
    memset(m, 0, sizeof *m);
    QKV_NEED(dir, "llm_load_hf", "dir");
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = NULL;
    size_t len = 0;
    QKV_TRY(qkv_fail_in("llm_load_hf", read_text(path, &text, &len)));
    qkv_llm_config cfg;
    qkv_status s = qkv_llm_config_from_hf_json(text, len, &cfg);
    free(text);
    if (s != QKV_OK) return qkv_fail_in("llm_load_hf", s);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    qkv_safetensors *st;
    QKV_TRY(qkv_fail_in("llm_load_hf", qkv_safetensors_open(path, &st)));
    s = qkv_llm_from_safetensors(&cfg, st, m);
    qkv_safetensors_close(st); /* the weights were copied out as FP32 */
    return qkv_fail_in("llm_load_hf", s);
}
