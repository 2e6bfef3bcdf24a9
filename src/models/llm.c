/* llm.c: the Llama and Gemma 3 models' configuration checks, their weight
 * interface (products and rows of a qkv_llm_weight) and what they own
 * (qkv/llm.h). Loading is llm_load.c, the forward llm_forward.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/gemm.h"
#include "models/llm_internal.h"

const char *qkv_llm_arch_name(qkv_llm_arch a)
{
    return a == QKV_LLM_LLAMA ? "llama" : a == QKV_LLM_GEMMA3 ? "gemma3" : NULL;
}

int qkv_llm_layer_is_local(const qkv_llm_config *cfg, int64_t i)
{
    return cfg && cfg->window > 0 && cfg->pattern > 0 && (i + 1) % cfg->pattern != 0;
}

qkv_status qkv_llm_config_check(const qkv_llm_config *g)
{
    const char *fn = "llm_config_check";
    QKV_NEED(g, fn, "config");
    if (!qkv_llm_arch_name(g->arch))
        return qkv_fail(QKV_ERR_ARG, "%s: unknown architecture %d", fn, (int)g->arch);
    struct { const char *name; int64_t v; } sizes[] = {
        {"n_layer", g->n_layer}, {"d_model", g->d_model}, {"n_head", g->n_head},
        {"n_head_kv", g->n_head_kv}, {"head_dim", g->head_dim}, {"d_ff", g->d_ff}, {"vocab", g->vocab}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].v < 1 || sizes[i].v > ((int64_t)1 << 31))
            return qkv_fail(QKV_ERR_ARG, "%s: %s %lld must be in [1, 2^31]", fn, sizes[i].name,
                            (long long)sizes[i].v);
    if (g->n_head % g->n_head_kv)
        return qkv_fail(QKV_ERR_ARG, "%s: n_head %lld is not a multiple of n_head_kv %lld", fn,
                        (long long)g->n_head, (long long)g->n_head_kv);
    if (g->head_dim % 2)
        return qkv_fail(QKV_ERR_ARG, "%s: head_dim %lld must be even (RoPE pairs)", fn, (long long)g->head_dim);
    if (!(g->rope_base > 0) || isinf(g->rope_base) ||
        (g->arch == QKV_LLM_GEMMA3 && (!(g->rope_base_local > 0) || isinf(g->rope_base_local))))
        return qkv_fail(QKV_ERR_ARG, "%s: rope bases %g, %g must be positive and finite", fn,
                        (double)g->rope_base, (double)g->rope_base_local);
    if (g->rope_layout != QKV_ROPE_HALF && g->rope_layout != QKV_ROPE_INTERLEAVED)
        return qkv_fail(QKV_ERR_ARG, "%s: rope_layout %d unknown", fn, (int)g->rope_layout);
    if (!(g->eps >= 0) || isinf(g->eps))
        return qkv_fail(QKV_ERR_ARG, "%s: eps %g must be >= 0 and finite", fn, (double)g->eps);
    if (g->window < 0 || g->pattern < 0)
        return qkv_fail(QKV_ERR_ARG, "%s: window %lld and pattern %lld must be >= 0", fn,
                        (long long)g->window, (long long)g->pattern);
    if (!(g->attn_scale >= 0) || isinf(g->attn_scale) || !(g->final_softcap >= 0) || isinf(g->final_softcap))
        return qkv_fail(QKV_ERR_ARG, "%s: attn_scale %g and final_softcap %g must be >= 0 and finite", fn,
                        (double)g->attn_scale, (double)g->final_softcap);
    return QKV_OK;
}

/* ---- the weight interface ---------------------------------------------- */

qkv_status qkv_llm_weight_matmul(const qkv_llm_weight *w, int64_t M, const float *x, float *y)
{
    QKV_NEED(w, "llm_weight_matmul", "weight");
    QKV_NEED(w->data, "llm_weight_matmul", "weight data");
    QKV_NEED(x, "llm_weight_matmul", "x");
    QKV_NEED(y, "llm_weight_matmul", "y");
    if (M < 1 || w->rows < 1 || w->cols < 1)
        return qkv_fail(QKV_ERR_SHAPE, "llm_weight_matmul: M %lld, weight (%lld,%lld)", (long long)M,
                        (long long)w->rows, (long long)w->cols);
    if (w->type == QKV_Q_F32) { // y (M,rows) = x (M,cols) W^T, W (rows,cols)
        qkv_gemm(0, 1, M, w->rows, w->cols, 1.0f, x, w->cols, w->data, w->cols, 0.0f, y, w->rows);
        return QKV_OK;
    } /* the quantized blocks read as they are (src/kernels/quant_*.c) */
    return qkv_fail_in("llm_weight_matmul", qkv_qmatmul(w->type, w->data, w->rows, w->cols, x, M, y));
}

qkv_status qkv_llm_weight_row(const qkv_llm_weight *w, int64_t r, float *out)
{
    QKV_NEED(w, "llm_weight_row", "weight");
    QKV_NEED(w->data, "llm_weight_row", "weight data");
    QKV_NEED(out, "llm_weight_row", "out");
    if (r < 0 || r >= w->rows)
        return qkv_fail(QKV_ERR_ARG, "llm_weight_row: row %lld outside [0,%lld)", (long long)r,
                        (long long)w->rows);
    if (w->type == QKV_Q_F32) {
        memcpy(out, (const float *)w->data + r * w->cols, (size_t)w->cols * sizeof(float));
        return QKV_OK;
    }
    size_t rb = qkv_qtype_row_bytes(w->type, w->cols);
    if (!rb) return qkv_fail_in("llm_weight_row", QKV_ERR_SHAPE);
    return qkv_fail_in("llm_weight_row", qkv_dequantize(w->type, (const char *)w->data + (size_t)r * rb, out, w->cols));
}

/* ---- what a model owns ------------------------------------------------- */

void *llm_alloc(qkv_llm *m, size_t n)
{
    llm_owned *o = m->owned;
    if (!o && !(o = m->owned = calloc(1, sizeof *o))) goto nomem;
    if (o->nbuf == o->cap) {
        int cap = o->cap ? 2 * o->cap : 64;
        void **b = realloc(o->bufs, (size_t)cap * sizeof *b);
        if (!b) goto nomem;
        o->bufs = b;
        o->cap = cap;
    }
    void *p = calloc(1, n ? n : 1);
    if (!p) goto nomem;
    o->bufs[o->nbuf++] = p;
    return p;
nomem:
    qkv_fail(QKV_ERR_NOMEM, "llm: cannot allocate %zu bytes", n);
    return NULL;
}

void qkv_llm_free(qkv_llm *m)
{
    if (!m) return;
    llm_owned *o = m->owned;
    if (o) {
        for (int i = 0; i < o->nbuf; i++) free(o->bufs[i]);
        free(o->bufs);
        if (o->gguf) qkv_gguf_close(o->gguf);
        free(o);
    }
    memset(m, 0, sizeof *m);
}

qkv_status qkv_llm_cache_init(qkv_kv_cache *kc, const qkv_llm *m, int64_t max_len)
{
    QKV_NEED(kc, "llm_cache_init", "cache");
    QKV_NEED(m, "llm_cache_init", "model");
    return qkv_fail_in("llm_cache_init", qkv_kv_cache_init(kc, m->cfg.n_layer, 1, m->cfg.n_head_kv,
                                                           m->cfg.head_dim, max_len));
}
