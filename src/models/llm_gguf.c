/* llm_gguf.c: a Llama or Gemma 3 model from a GGUF file (qkv/llm.h): the
 * configuration from the architecture's metadata keys, the tensors by
 * llama.cpp's names, mapped in their stored types or dequantized to FP32. */
#include <stdio.h>
#include <string.h>
#include "models/llm_internal.h"

/* "<arch>.<key>" into k (n bytes); 1 when the file has it. */
static int meta_key(const qkv_gguf *g, const char *arch, const char *key, char *k, size_t n)
{
    snprintf(k, n, "%s.%s", arch, key);
    return qkv_gguf_meta_find(g, k) >= 0;
}

/* "<arch>.<key>" as an integer or a float; def when absent and def >= 0
 * (else the getter's error naming the missing key). */
static qkv_status meta_i64(const qkv_gguf *g, const char *arch, const char *key, int64_t def, int64_t *out)
{
    char k[160];
    if (!meta_key(g, arch, key, k, sizeof k) && def >= 0) return *out = def, QKV_OK;
    return qkv_gguf_get_i64(g, k, out);
}

static qkv_status meta_f32(const qkv_gguf *g, const char *arch, const char *key, float def, float *out)
{
    char k[160];
    if (!meta_key(g, arch, key, k, sizeof k) && def >= 0) return *out = def, QKV_OK;
    return qkv_gguf_get_f32(g, k, out);
}

static qkv_status config_body(const qkv_gguf *g, qkv_llm_config *c)
{
    const char *arch;
    QKV_TRY(qkv_gguf_get_str(g, "general.architecture", &arch, NULL));
    memset(c, 0, sizeof *c);
    if (!strcmp(arch, "llama")) c->arch = QKV_LLM_LLAMA;
    else if (!strcmp(arch, "gemma3")) c->arch = QKV_LLM_GEMMA3;
    else return qkv_fail(QKV_ERR_FORMAT, "general.architecture \"%s\" is not supported (llama, gemma3)", arch);
    int gem = c->arch == QKV_LLM_GEMMA3;
    QKV_TRY(meta_i64(g, arch, "block_count", -1, &c->n_layer));
    QKV_TRY(meta_i64(g, arch, "embedding_length", -1, &c->d_model));
    QKV_TRY(meta_i64(g, arch, "feed_forward_length", -1, &c->d_ff));
    QKV_TRY(meta_i64(g, arch, "attention.head_count", -1, &c->n_head));
    QKV_TRY(meta_i64(g, arch, "attention.head_count_kv", c->n_head, &c->n_head_kv));
    QKV_TRY(meta_i64(g, arch, "attention.key_length", c->n_head ? c->d_model / c->n_head : 0, &c->head_dim));
    QKV_TRY(meta_i64(g, arch, "context_length", 0, &c->max_pos));
    QKV_TRY(meta_f32(g, arch, "attention.layer_norm_rms_epsilon", -1, &c->eps));
    QKV_TRY(meta_f32(g, arch, "rope.freq_base", gem ? 1e6f : 1e4f, &c->rope_base));
    int64_t vd = c->head_dim;
    QKV_TRY(meta_i64(g, arch, "attention.value_length", c->head_dim, &vd));
    if (vd != c->head_dim)
        return qkv_fail(QKV_ERR_FORMAT, "%s.attention.value_length %lld differs from key_length %lld", arch,
                        (long long)vd, (long long)c->head_dim);
    int64_t rd;
    QKV_TRY(meta_i64(g, arch, "rope.dimension_count", c->head_dim, &rd));
    if (rd != c->head_dim)
        return qkv_fail(QKV_ERR_FORMAT, "%s.rope.dimension_count %lld: partial rotary dims are not supported "
                        "(head_dim %lld)", arch, (long long)rd, (long long)c->head_dim);
    if (qkv_gguf_tensor_find(g, "rope_freqs.weight") >= 0)
        return qkv_fail(QKV_ERR_FORMAT, "tensor rope_freqs.weight (Llama 3's frequency scaling) is not supported");
    char k[160];
    const char *sc = NULL;
    if (meta_key(g, arch, "rope.scaling.type", k, sizeof k)) QKV_TRY(qkv_gguf_get_str(g, k, &sc, NULL));
    if (sc && strcmp(sc, "none"))
        return qkv_fail(QKV_ERR_FORMAT, "%s \"%s\" is not supported (only none)", k, sc);
    /* the vocabulary: the embedding's rows */
    qkv_qtype t;
    int nd;
    int64_t dims[4];
    QKV_TRY(qkv_gguf_tensor_info(g, "token_embd.weight", &t, &nd, dims, NULL, NULL));
    c->vocab = nd == 2 ? dims[1] : 0;
    c->tied = qkv_gguf_tensor_find(g, "output.weight") < 0;
    if (gem) { /* llama.cpp's gemma3: local base 10000, every 6th layer global, 1/sqrt(head_dim) */
        c->rope_layout = QKV_ROPE_HALF;
        c->rope_base_local = 10000.0f;
        c->pattern = 6;
        QKV_TRY(meta_i64(g, arch, "attention.sliding_window", 0, &c->window));
        QKV_TRY(meta_f32(g, arch, "final_logit_softcapping", 0, &c->final_softcap));
    } else
        c->rope_layout = QKV_ROPE_INTERLEAVED; /* the converter's permuted q, k rows */
    return qkv_llm_config_check(c);
}

qkv_status qkv_llm_config_from_gguf(const qkv_gguf *g, qkv_llm_config *cfg)
{
    QKV_NEED(g, "llm_config_from_gguf", "gguf");
    QKV_NEED(cfg, "llm_config_from_gguf", "config");
    return qkv_fail_in("llm_config_from_gguf", config_body(g, cfg));
}

/* Tensor name of shape (rows, cols) (cols 0: a vector of rows) into w:
 * mapped, or dequantized into a buffer m owns when deq (vectors always). */
static qkv_status tensor(qkv_llm *m, const qkv_gguf *g, const char *name, int64_t rows, int64_t cols, int deq,
                         qkv_llm_weight *w)
{
    qkv_qtype t;
    int nd;
    int64_t dims[4];
    const void *data;
    QKV_TRY(qkv_gguf_tensor_info(g, name, &t, &nd, dims, &data, NULL));
    int ok = cols ? nd == 2 && dims[0] == cols && dims[1] == rows : nd == 1 && dims[0] == rows;
    if (!ok)
        return qkv_fail(QKV_ERR_SHAPE, "tensor %s has %d dims [%lld,%lld], expected [%lld%s%lld] (ggml order)",
                        name, nd, (long long)dims[0], nd > 1 ? (long long)dims[1] : 0LL,
                        (long long)(cols ? cols : rows), cols ? "," : "", (long long)(cols ? rows : 0));
    int64_t cw = cols ? cols : rows, rw = cols ? rows : 1;
    if (!qkv_qtype_can_dequantize(t))
        return qkv_fail(QKV_ERR_DTYPE, "tensor %s has type %s, which qkv does not read", name, qkv_qtype_name(t));
    if (!deq && cols) {
        *w = (qkv_llm_weight){t, data, rows, cols};
        return QKV_OK;
    }
    float *buf = llm_alloc(m, (size_t)(rw * cw) * sizeof(float));
    if (!buf) return QKV_ERR_NOMEM;
    QKV_TRY(qkv_dequantize(t, data, buf, rw * cw));
    *w = (qkv_llm_weight){QKV_Q_F32, buf, rows, cols ? cols : 1};
    return QKV_OK;
}

/* A norm vector: FP32 (dequantized if stored otherwise). */
static qkv_status norm(qkv_llm *m, const qkv_gguf *g, const char *name, int64_t n, const float **out)
{
    qkv_llm_weight w;
    QKV_TRY(tensor(m, g, name, n, 0, 1, &w));
    *out = w.data;
    return QKV_OK;
}

static qkv_status layer(qkv_llm *m, const qkv_gguf *g, int64_t i, int deq)
{
    const qkv_llm_config *c = &m->cfg;
    qkv_llm_layer *L = &m->layers[i];
    int64_t E = c->d_model, qd = c->n_head * c->head_dim, kd = c->n_head_kv * c->head_dim, F = c->d_ff;
    char nm[128];
#define T_(suffix, r, cl, w) (snprintf(nm, sizeof nm, "blk.%lld." suffix, (long long)i), tensor(m, g, nm, r, cl, deq, w))
#define N_(suffix, n, p) (snprintf(nm, sizeof nm, "blk.%lld." suffix, (long long)i), norm(m, g, nm, n, p))
    QKV_TRY(T_("attn_q.weight", qd, E, &L->wq));
    QKV_TRY(T_("attn_k.weight", kd, E, &L->wk));
    QKV_TRY(T_("attn_v.weight", kd, E, &L->wv));
    QKV_TRY(T_("attn_output.weight", E, qd, &L->wo));
    QKV_TRY(T_("ffn_gate.weight", F, E, &L->w_gate));
    QKV_TRY(T_("ffn_up.weight", F, E, &L->w_up));
    QKV_TRY(T_("ffn_down.weight", E, F, &L->w_down));
    QKV_TRY(N_("attn_norm.weight", E, &L->attn_norm));
    QKV_TRY(N_("ffn_norm.weight", E, &L->ffn_norm));
    if (c->arch == QKV_LLM_GEMMA3) {
        QKV_TRY(N_("post_attention_norm.weight", E, &L->post_attn_norm));
        QKV_TRY(N_("post_ffw_norm.weight", E, &L->post_ffn_norm));
        QKV_TRY(N_("attn_q_norm.weight", c->head_dim, &L->q_norm));
        QKV_TRY(N_("attn_k_norm.weight", c->head_dim, &L->k_norm));
    }
#undef T_
#undef N_
    return QKV_OK;
}

static qkv_status load_body(const char *path, int deq, qkv_llm *m)
{
    qkv_gguf *g;
    QKV_TRY(qkv_gguf_open(path, &g));
    llm_owned *o;
    if (!llm_alloc(m, 1)) { /* makes m->owned, which then holds the file */
        qkv_gguf_close(g);
        return QKV_ERR_NOMEM;
    }
    o = m->owned;
    o->gguf = g;
    QKV_TRY(config_body(g, &m->cfg));
    const qkv_llm_config *c = &m->cfg;
    if (!(m->layers = llm_alloc(m, (size_t)c->n_layer * sizeof *m->layers))) return QKV_ERR_NOMEM;
    QKV_TRY(tensor(m, g, "token_embd.weight", c->vocab, c->d_model, deq, &m->tok_emb));
    QKV_TRY(norm(m, g, "output_norm.weight", c->d_model, &m->out_norm));
    if (c->tied) m->output = m->tok_emb;
    else QKV_TRY(tensor(m, g, "output.weight", c->vocab, c->d_model, deq, &m->output));
    for (int64_t i = 0; i < c->n_layer; i++) QKV_TRY(layer(m, g, i, deq));
    if (deq) { /* every weight is a copy now */
        qkv_gguf_close(g);
        o->gguf = NULL;
    }
    return QKV_OK;
}

qkv_status qkv_llm_load_gguf(const char *path, int dequantize, qkv_llm *m)
{
    QKV_NEED(m, "llm_load_gguf", "model");
    memset(m, 0, sizeof *m);
    QKV_NEED(path, "llm_load_gguf", "path");
    qkv_status s = load_body(path, dequantize, m);
    if (s != QKV_OK) qkv_llm_free(m);
    return qkv_fail_in("llm_load_gguf", s);
}
