/* llm_forward.c: inference of the Llama and Gemma 3 models (qkv/llm.h):
 * T new tokens through every layer, their keys and values appended to the
 * KV cache, attention over the cache (grouped-query: n_head query heads
 * share n_head_kv cached heads), logits out. Plain buffers from the ctx's
 * arena; nothing is recorded. Attention: a few queries go through the
 * decoding kernel (attention_decode.c, split over the cache), longer
 * prefills through the fused kernels (attention_flash.c: online softmax,
 * causal bottom-right with the window, masked tiles skipped); both read
 * the grouped key/value heads in place from the cache. Under
 * qkv_reference(), qkv_sdpa's reference kernel per query head instead. */
#include <math.h>
#include <omp.h>
#include <string.h>
#include "kernels/attention.h"
#include "kernels/attention_decode.h"
#include "kernels/rows.h"
#include "models/llm_internal.h"

/* Up to this many new queries per call take the decoding kernel. */
enum { LLM_DECODE_QUERIES = 4 };

typedef struct {
    qkv_ctx *c;
    const qkv_llm *m;
    qkv_kv_cache *kc;
    int64_t T, p0, S; /* new tokens, the first one's position, keys after them */
} llm_step;

static qkv_status scratch(qkv_ctx *c, int64_t n, float **out)
{
    *out = qkv_arena_alloc_uninit(qkv_ctx_arena(c), (size_t)n * sizeof(float));
    return *out ? QKV_OK : qkv_fail(QKV_ERR_NOMEM, "llm_forward: cannot allocate %lld floats", (long long)n);
}

/* x (T, H*hd) -> y (H,T,hd), and back. */
static void split_heads(const float *x, int64_t T, int64_t H, int64_t hd, float *y)
{
    for (int64_t h = 0; h < H; h++)
        for (int64_t t = 0; t < T; t++) memcpy(y + (h * T + t) * hd, x + (t * H + h) * hd, (size_t)hd * sizeof(float));
}

static void merge_heads(const float *y, int64_t T, int64_t H, int64_t hd, float *x)
{
    for (int64_t h = 0; h < H; h++)
        for (int64_t t = 0; t < T; t++) memcpy(x + (t * H + h) * hd, y + (h * T + t) * hd, (size_t)hd * sizeof(float));
}

/* x (H,T,hd) rotated in place to positions p0 .. p0+T-1 with base (qkv_rope). */
static qkv_status rotate(const llm_step *s, float *x, int64_t H, float base)
{
    qkv_arena *a = qkv_ctx_arena(s->c);
    int64_t hd = s->m->cfg.head_dim;
    qkv_tensor *xt, *yt;
    QKV_TRY(qkv_tensor_wrap(a, x, 3, (int64_t[]){H, s->T, hd}, &xt));
    qkv_rope_opts ro = qkv_rope_opts_default();
    ro.layout = s->m->cfg.rope_layout;
    ro.base = base;
    ro.offset = s->p0;
    QKV_TRY(qkv_rope(s->c, xt, &ro, &yt));
    memcpy(x, yt->data, (size_t)(H * s->T * hd) * sizeof(float));
    return QKV_OK;
}

/* Query heads q (H,T,hd) over layer l's cache (keys [0,S)) -> o (H,T,hd). */
static qkv_status attend(const llm_step *s, int64_t l, const float *q, float *o)
{
    const qkv_llm_config *g = &s->m->cfg;
    qkv_kv_cache *kc = s->kc;
    qkv_arena *a = qkv_ctx_arena(s->c);
    int64_t H = g->n_head, Hkv = g->n_head_kv, hd = g->head_dim, T = s->T, S = s->S;
    int64_t lay = l * Hkv * kc->max_len * hd, span = qkv_llm_layer_is_local(g, l) ? g->window : 0;
    float scale = g->attn_scale > 0 ? g->attn_scale : 1.0f / sqrtf((float)hd);
    if (T <= LLM_DECODE_QUERIES && !qkv_reference()) {
        qkv_decode_desc d = {0};
        d.N = 1;
        d.H = H;
        d.T = T;
        d.S = S;
        d.D = hd;
        d.kv_stride = kc->max_len * hd;
        d.scale = scale;
        d.causal = 1;
        d.group = H / Hkv;
        d.span = span;
        return qkv_decode_attend(a, &d, q, kc->k + lay, kc->v + lay, o);
    }
    if (!qkv_reference()) { /* the fused kernels, grouped heads read in place from the cache */
        qkv_attn_desc d = {0};
        d.N = 1;
        d.H = H;
        d.L = T;
        d.S = d.mask_keys = S;
        d.D = d.Dv = hd;
        d.scale = scale;
        d.causal = QKV_CAUSAL_BOTTOM_RIGHT;
        d.diag = S - T;
        d.window = span > 0 && span - 1 < S ? span - 1 : -1; /* |i' - j| <= span - 1 with j <= i' */
        d.group = H / Hkv;
        d.k_rows = d.v_rows = (qkv_attn_rows){Hkv * kc->max_len * hd, kc->max_len * hd, hd};
        int threads = omp_get_max_threads();
        qkv_arena_mark mark = qkv_arena_get_mark(a);
        float *lse = qkv_arena_alloc_uninit(a, (size_t)(H * T) * sizeof(float)); // (H,T)
        float *sc = qkv_arena_alloc_uninit(a, qkv_attn_forward_scratch(&d, threads) * sizeof(float));
        if (!lse || !sc) return qkv_fail(QKV_ERR_NOMEM, "llm_forward: no memory for attention scratch");
        qkv_attn_forward_flash(&d, q, kc->k + lay, kc->v + lay, o, lse, sc, threads);
        qkv_arena_release(a, mark);
        return QKV_OK;
    }
    /* the reference: qkv_sdpa per query head over its key/value head's block */
    qkv_sdpa_opts so = qkv_sdpa_opts_default();
    so.causal = QKV_CAUSAL_BOTTOM_RIGHT;
    so.scale = scale;
    if (span > 0) so.window = span - 1;
    for (int64_t h = 0; h < H; h++) {
        qkv_arena_mark mark = qkv_arena_get_mark(a);
        int64_t blk = lay + (h / (H / Hkv)) * kc->max_len * hd; // its key/value head's block
        qkv_tensor *qt, *kt, *vt, *ot;
        QKV_TRY(qkv_tensor_wrap(a, (float *)q + h * T * hd, 3, (int64_t[]){1, T, hd}, &qt));
        QKV_TRY(qkv_tensor_wrap(a, kc->k + blk, 3, (int64_t[]){1, S, hd}, &kt)); // view (1,S,hd)
        QKV_TRY(qkv_tensor_wrap(a, kc->v + blk, 3, (int64_t[]){1, S, hd}, &vt));
        QKV_TRY(qkv_sdpa(s->c, qt, kt, vt, &so, &ot, NULL)); // (1,T,hd)
        memcpy(o + h * T * hd, ot->data, (size_t)(T * hd) * sizeof(float));
        qkv_arena_release(a, mark);
    }
    return QKV_OK;
}

/* The attention block of layer l: h (T,E) normed input -> y (T,E), the
 * new keys and values appended to the cache. */
static qkv_status attention(const llm_step *s, int64_t l, const float *h, float *y)
{
    const qkv_llm_config *g = &s->m->cfg;
    const qkv_llm_layer *L = &s->m->layers[l];
    qkv_kv_cache *kc = s->kc;
    int64_t H = g->n_head, Hkv = g->n_head_kv, hd = g->head_dim, T = s->T;
    float *q, *k, *v, *qh, *kh, *vh, *oh;
    QKV_TRY(scratch(s->c, T * H * hd, &q));   // (T,H*hd)
    QKV_TRY(scratch(s->c, T * Hkv * hd, &k)); // (T,Hkv*hd)
    QKV_TRY(scratch(s->c, T * Hkv * hd, &v));
    QKV_TRY(scratch(s->c, T * H * hd, &qh));  // (H,T,hd)
    QKV_TRY(scratch(s->c, T * Hkv * hd, &kh)); // (Hkv,T,hd)
    QKV_TRY(scratch(s->c, T * Hkv * hd, &vh));
    QKV_TRY(scratch(s->c, T * H * hd, &oh));  // (H,T,hd)
    QKV_TRY(qkv_llm_weight_matmul(&L->wq, T, h, q));
    QKV_TRY(qkv_llm_weight_matmul(&L->wk, T, h, k));
    QKV_TRY(qkv_llm_weight_matmul(&L->wv, T, h, v));
    if (L->q_norm) qkv_rows_rms_norm(q, L->q_norm, g->eps, q, NULL, T * H, hd);
    if (L->k_norm) qkv_rows_rms_norm(k, L->k_norm, g->eps, k, NULL, T * Hkv, hd);
    split_heads(q, T, H, hd, qh);
    split_heads(k, T, Hkv, hd, kh);
    split_heads(v, T, Hkv, hd, vh);
    float base = qkv_llm_layer_is_local(g, l) && g->arch == QKV_LLM_GEMMA3 ? g->rope_base_local : g->rope_base;
    QKV_TRY(rotate(s, qh, H, base));
    QKV_TRY(rotate(s, kh, Hkv, base));
    for (int64_t j = 0; j < Hkv; j++) { /* append: block (l, 0, j), rows [p0, p0+T) */
        size_t off = (size_t)(((l * Hkv + j) * kc->max_len + s->p0) * hd), n = (size_t)(T * hd);
        memcpy(kc->k + off, kh + j * T * hd, n * sizeof(float));
        memcpy(kc->v + off, vh + j * T * hd, n * sizeof(float));
    }
    QKV_TRY(attend(s, l, qh, oh));
    merge_heads(oh, T, H, hd, q); /* q reused as (T,H*hd) */
    QKV_TRY(qkv_llm_weight_matmul(&L->wo, T, q, y));
    if (L->post_attn_norm) qkv_rows_rms_norm(y, L->post_attn_norm, g->eps, y, NULL, T, g->d_model);
    return QKV_OK;
}

/* The MLP of layer l: h (T,E) normed input -> y (T,E):
 * down(act(gate h) * up h), act SiLU (Llama) or tanh-approximated GELU (Gemma). */
static qkv_status mlp(const llm_step *s, int64_t l, const float *h, float *y)
{
    const qkv_llm_config *g = &s->m->cfg;
    const qkv_llm_layer *L = &s->m->layers[l];
    int64_t T = s->T, F = g->d_ff;
    float *a, *b;
    QKV_TRY(scratch(s->c, T * F, &a)); // (T,F)
    QKV_TRY(scratch(s->c, T * F, &b));
    QKV_TRY(qkv_llm_weight_matmul(&L->w_gate, T, h, a));
    QKV_TRY(qkv_llm_weight_matmul(&L->w_up, T, h, b));
    int gelu = g->arch == QKV_LLM_GEMMA3;
    QKV_PAR_FOR(T * F >= QKV_PAR_MIN,
        for (int64_t i = 0; i < T * F; i++) {
            float x = a[i];
            float act = gelu ? 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)))
                             : x / (1.0f + expf(-x));
            a[i] = act * b[i];
        });
    QKV_TRY(qkv_llm_weight_matmul(&L->w_down, T, a, y));
    if (L->post_ffn_norm) qkv_rows_rms_norm(y, L->post_ffn_norm, g->eps, y, NULL, T, g->d_model);
    return QKV_OK;
}

static qkv_status forward_check(qkv_ctx *c, const qkv_llm *m, const qkv_kv_cache *kc, const int64_t *ids,
                                int64_t T, const float *logits)
{
    const char *fn = "llm_forward";
    QKV_NEED(c, fn, "ctx");
    QKV_NEED(m, fn, "model");
    QKV_NEED(m->layers, fn, "model layers");
    QKV_NEED(kc, fn, "cache");
    QKV_NEED(ids, fn, "ids");
    QKV_NEED(logits, fn, "logits");
    const qkv_llm_config *g = &m->cfg;
    if (qkv_ctx_training(c))
        return qkv_fail(QKV_ERR_STATE, "%s: inference only; the ctx is in training mode", fn);
    if (kc->dtype != QKV_KV_F32 || !kc->k)
        return qkv_fail(QKV_ERR_ARG, "%s: the cache must hold FP32 keys and values", fn);
    if (kc->batch != 1 || kc->num_layers != g->n_layer || kc->nhead != g->n_head_kv || kc->head_dim != g->head_dim)
        return qkv_fail(QKV_ERR_SHAPE, "%s: cache of %lld layers, batch %lld, %lld heads of %lld; the model "
                        "needs 1 row, %lld layers, %lld heads of %lld (qkv_llm_cache_init)", fn,
                        (long long)kc->num_layers, (long long)kc->batch, (long long)kc->nhead,
                        (long long)kc->head_dim, (long long)g->n_layer, (long long)g->n_head_kv,
                        (long long)g->head_dim);
    if (T < 1 || kc->len + T > kc->max_len)
        return qkv_fail(QKV_ERR_SHAPE, "%s: %lld new tokens after %lld cached exceed the cache's %lld positions",
                        fn, (long long)T, (long long)kc->len, (long long)kc->max_len);
    for (int64_t t = 0; t < T; t++)
        if (ids[t] < 0 || ids[t] >= g->vocab)
            return qkv_fail(QKV_ERR_ARG, "%s: token id %lld at position %lld is outside [0,%lld)", fn,
                            (long long)ids[t], (long long)t, (long long)g->vocab);
    return QKV_OK;
}

static qkv_status forward_body(const llm_step *s, const int64_t *ids, int all, float *logits)
{
    const qkv_llm *m = s->m;
    const qkv_llm_config *g = &m->cfg;
    int64_t T = s->T, E = g->d_model;
    float *x, *h, *y;
    QKV_TRY(scratch(s->c, T * E, &x)); // (T,E) the residual stream
    QKV_TRY(scratch(s->c, T * E, &h));
    QKV_TRY(scratch(s->c, T * E, &y));
    for (int64_t t = 0; t < T; t++) QKV_TRY(qkv_llm_weight_row(&m->tok_emb, ids[t], x + t * E));
    if (g->arch == QKV_LLM_GEMMA3) { /* HF: the embedding times sqrt(E), rounded to the dtype */
        float sc = (float)sqrt((double)E);
        for (int64_t i = 0; i < T * E; i++) x[i] *= sc;
    }
    for (int64_t l = 0; l < g->n_layer; l++) {
        const qkv_llm_layer *L = &m->layers[l];
        qkv_arena_mark mark = qkv_arena_get_mark(qkv_ctx_arena(s->c));
        qkv_rows_rms_norm(x, L->attn_norm, g->eps, h, NULL, T, E);
        QKV_TRY(attention(s, l, h, y));
        for (int64_t i = 0; i < T * E; i++) x[i] += y[i];
        qkv_rows_rms_norm(x, L->ffn_norm, g->eps, h, NULL, T, E);
        QKV_TRY(mlp(s, l, h, y));
        for (int64_t i = 0; i < T * E; i++) x[i] += y[i];
        qkv_arena_release(qkv_ctx_arena(s->c), mark);
    }
    int64_t R = all ? T : 1; /* rows of logits */
    const float *xr = x + (T - R) * E;
    qkv_rows_rms_norm(xr, m->out_norm, g->eps, h, NULL, R, E);
    QKV_TRY(qkv_llm_weight_matmul(&m->output, R, h, logits));
    if (g->final_softcap > 0) {
        float cap = g->final_softcap;
        for (int64_t i = 0; i < R * g->vocab; i++) logits[i] = tanhf(logits[i] / cap) * cap;
    }
    return QKV_OK;
}

qkv_status qkv_llm_forward(qkv_ctx *c, const qkv_llm *m, qkv_kv_cache *kc, const int64_t *ids, int64_t T,
                           int all_logits, float *logits)
{
    QKV_TRY(forward_check(c, m, kc, ids, T, logits));
    llm_step s = {c, m, kc, T, kc->len, kc->len + T};
    qkv_arena *a = qkv_ctx_arena(c);
    qkv_arena_mark mark = qkv_arena_get_mark(a);
    qkv_status st = forward_body(&s, ids, all_logits, logits);
    qkv_arena_release(a, mark);
    if (st != QKV_OK) return qkv_fail_in("llm_forward", st);
    kc->len += T;
    return QKV_OK;
}
