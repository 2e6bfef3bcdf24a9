/* kvcache.c: the KV cache and the incremental (cached) forwards of the
 * decoder-only stack and of TransformerDecoder.
 *
 * The layers' forwards (transformer.c) call their attentions through a
 * tfm_attn hook; here the hook is the cached attention: project the new
 * positions' q, k, v (MultiheadAttention's own in-projection and head
 * split, mha_internal.h), append k and v to the layer's cache, attend to
 * the cache in place, and merge the heads through MultiheadAttention's
 * out-projection. The cache holds one (max_len, head_dim) block per
 * (layer, row, head), so positions [0,S) of one head are contiguous rows.
 * A step of a few new positions is one call of the decoding kernel per
 * layer (attention_decode.c: every (row, head, chunk of keys) a work item
 * on OpenMP's threads, causal bottom-right, in time linear in S); a longer
 * block of new positions is one qkv_sdpa call per (row, head).
 * Cross-attention keys and values (N,H,S,hd) of the memory are computed
 * once per sequence and read by one call per layer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "attention/mha_internal.h"
#include "kernels/attention_decode.h"
#include "kernels/half.h"
#include "models/transformer_internal.h"

/* ---- the cache ---------------------------------------------------------- */

static qkv_status cache_init(const char *fn, qkv_kv_cache *kc, int64_t num_layers, int64_t batch,
                             int64_t nhead, int64_t head_dim, int64_t max_len, qkv_kv_dtype dtype)
{
    QKV_NEED(kc, fn, "cache");
    *kc = (qkv_kv_cache){0};
    if (num_layers < 1 || batch < 1 || nhead < 1 || head_dim < 1 || max_len < 1)
        return qkv_fail(QKV_ERR_ARG, "%s: num_layers %lld, batch %lld, nhead %lld, head_dim %lld "
                        "and max_len %lld must all be >= 1", fn, (long long)num_layers,
                        (long long)batch, (long long)nhead, (long long)head_dim,
                        (long long)max_len);
    double n = (double)num_layers * batch * nhead * max_len * head_dim;
    if (n * sizeof(float) > 0.5 * (double)SIZE_MAX || n > 9e15)
        return qkv_fail(QKV_ERR_ARG, "%s: %g elements per tensor is too many", fn, n);
    int half = dtype != QKV_KV_F32; /* 16-bit elements */
    size_t bytes = (size_t)n * (half ? sizeof(uint16_t) : sizeof(float));
    if (half) {
        kc->k16 = malloc(bytes);
        kc->v16 = malloc(bytes);
    } else {
        kc->k = malloc(bytes);
        kc->v = malloc(bytes);
    }
    kc->pad = calloc((size_t)(batch * max_len), 1);
    kc->npad = calloc((size_t)batch, sizeof *kc->npad);
    if (!(half ? kc->k16 && kc->v16 : kc->k && kc->v) || !kc->pad || !kc->npad) {
        qkv_kv_cache_free(kc);
        return qkv_fail(QKV_ERR_NOMEM, "%s: cannot allocate 2 x %zu bytes", fn, bytes);
    }
    kc->dtype = dtype;
    kc->num_layers = num_layers;
    kc->batch = batch;
    kc->nhead = nhead;
    kc->head_dim = head_dim;
    kc->max_len = max_len;
    return QKV_OK;
}

qkv_status qkv_kv_cache_init(qkv_kv_cache *kc, int64_t num_layers, int64_t batch, int64_t nhead,
                             int64_t head_dim, int64_t max_len)
{
    return cache_init("kv_cache_init", kc, num_layers, batch, nhead, head_dim, max_len, QKV_KV_F32);
}

qkv_status qkv_kv_cache_init_half(qkv_kv_cache *kc, int64_t num_layers, int64_t batch,
                                  int64_t nhead, int64_t head_dim, int64_t max_len)
{
    return cache_init("kv_cache_init_half", kc, num_layers, batch, nhead, head_dim, max_len,
                      QKV_KV_F16);
}

qkv_status qkv_kv_cache_init_bf16(qkv_kv_cache *kc, int64_t num_layers, int64_t batch,
                                  int64_t nhead, int64_t head_dim, int64_t max_len)
{
    return cache_init("kv_cache_init_bf16", kc, num_layers, batch, nhead, head_dim, max_len,
                      QKV_KV_BF16);
}

void qkv_kv_cache_free(qkv_kv_cache *kc)
{
    if (!kc) return;
    free(kc->k);
    free(kc->v);
    free(kc->k16);
    free(kc->v16);
    free(kc->pad);
    free(kc->npad);
    free(kc->ck);
    free(kc->cv);
    free(kc->mem_pad);
    *kc = (qkv_kv_cache){0};
}

void qkv_kv_cache_reset(qkv_kv_cache *kc)
{
    if (!kc || !tfm_cache_ready(kc)) return;
    kc->len = 0;
    memset(kc->pad, 0, (size_t)(kc->batch * kc->max_len));
    memset(kc->npad, 0, (size_t)kc->batch * sizeof *kc->npad);
    kc->mem_len = 0;
    kc->mem_has_pad = 0;
}

static qkv_status check_cache(const char *fn, const qkv_kv_cache *kc)
{
    QKV_NEED(kc, fn, "cache");
    if (!tfm_cache_ready(kc) || kc->batch < 1)
        return qkv_fail(QKV_ERR_STATE, "%s: cache is not initialised (call qkv_kv_cache_init)", fn);
    return QKV_OK;
}

qkv_status qkv_kv_cache_truncate(qkv_kv_cache *kc, int64_t len)
{
    QKV_TRY(check_cache("kv_cache_truncate", kc));
    if (len < 0 || len > kc->len)
        return qkv_fail(QKV_ERR_ARG, "kv_cache_truncate: len %lld outside [0, %lld] (the cache's len)",
                        (long long)len, (long long)kc->len);
    for (int64_t n = 0; n < kc->batch; n++) {
        uint8_t *p = kc->pad + n * kc->max_len; // (max_len)
        for (int64_t t = len; t < kc->len; t++) {
            kc->npad[n] -= p[t];
            p[t] = 0;
        }
    }
    kc->len = len;
    return QKV_OK;
}

/* blocks (B, blk) bytes, stride apart: block n becomes old block rows[n];
 * scratch (B*blk). */
static void gather_blocks(unsigned char *blocks, int64_t B, int64_t stride, int64_t blk,
                          const int64_t *rows, unsigned char *scratch)
{
    for (int64_t n = 0; n < B; n++) memcpy(scratch + n * blk, blocks + n * stride, (size_t)blk);
    for (int64_t n = 0; n < B; n++)
        if (rows[n] != n) memcpy(blocks + n * stride, scratch + rows[n] * blk, (size_t)blk);
}

/* k or v (num_layers, batch, H, len_cap, hd) of elem-byte elements (floats,
 * fp16 or bf16): rows reordered over [0,len). */
static void reorder_kv(void *kv, size_t elem, const qkv_kv_cache *kc, int64_t len_cap,
                       int64_t len, const int64_t *rows, void *scratch)
{
    int64_t H = kc->nhead, hd = kc->head_dim, B = kc->batch, e = (int64_t)elem;
    for (int64_t l = 0; l < kc->num_layers; l++)
        for (int64_t h = 0; h < H; h++) {
            unsigned char *base = (unsigned char *)kv + ((l * B) * H + h) * len_cap * hd * e;
            gather_blocks(base, B, H * len_cap * hd * e, len * hd * e, rows, scratch);
        }
}

/* pad (B, w) bytes: row n becomes old row rows[n]; scratch (B*w). */
static void reorder_bytes(uint8_t *pad, int64_t B, int64_t w, const int64_t *rows, uint8_t *scratch)
{
    memcpy(scratch, pad, (size_t)(B * w));
    for (int64_t n = 0; n < B; n++) memcpy(pad + n * w, scratch + rows[n] * w, (size_t)w);
}

qkv_status tfm_cache_reorder(qkv_ctx *c, qkv_kv_cache *kc, const int64_t *rows, int cross)
{
    const char *fn = "kv_cache_reorder";
    QKV_NEED(c, fn, "ctx");
    QKV_TRY(check_cache(fn, kc));
    QKV_NEED(rows, fn, "rows");
    int64_t B = kc->batch;
    for (int64_t n = 0; n < B; n++)
        if (rows[n] < 0 || rows[n] >= B)
            return qkv_fail(QKV_ERR_ARG, "%s: rows[%lld] = %lld outside [0, batch %lld)", fn,
                            (long long)n, (long long)rows[n], (long long)B);
    cross = cross && kc->mem_len > 0;
    int64_t len = cross && kc->mem_len > kc->len ? kc->mem_len : kc->len;
    int64_t bytes = B * (len * kc->head_dim * (int64_t)sizeof(float) + kc->max_len + 8);
    qkv_arena *a = qkv_ctx_arena(c);
    qkv_arena_mark mark = qkv_arena_get_mark(a);
    float *scratch = qkv_arena_alloc(a, (size_t)bytes); // (B, len, hd), or bytes for the masks
    if (!scratch) return QKV_ERR_NOMEM;
    if (kc->k16) {
        reorder_kv(kc->k16, sizeof(uint16_t), kc, kc->max_len, kc->len, rows, scratch);
        reorder_kv(kc->v16, sizeof(uint16_t), kc, kc->max_len, kc->len, rows, scratch);
    } else {
        reorder_kv(kc->k, sizeof(float), kc, kc->max_len, kc->len, rows, scratch);
        reorder_kv(kc->v, sizeof(float), kc, kc->max_len, kc->len, rows, scratch);
    }
    if (cross) {
        reorder_kv(kc->ck, sizeof(float), kc, kc->mem_len, kc->mem_len, rows, scratch);
        reorder_kv(kc->cv, sizeof(float), kc, kc->mem_len, kc->mem_len, rows, scratch);
        reorder_bytes(kc->mem_pad, B, kc->mem_len, rows, (uint8_t *)scratch);
    }
    reorder_bytes(kc->pad, B, kc->max_len, rows, (uint8_t *)scratch);
    int64_t *np = (int64_t *)scratch; // (B)
    memcpy(np, kc->npad, (size_t)B * sizeof *np);
    for (int64_t n = 0; n < B; n++) kc->npad[n] = np[rows[n]];
    qkv_arena_release(a, mark);
    return QKV_OK;
}

qkv_status qkv_kv_cache_reorder(qkv_ctx *c, qkv_kv_cache *kc, const int64_t *rows)
{
    return tfm_cache_reorder(c, kc, rows, 1);
}

/* ---- inference mode ------------------------------------------------------ */

/* Whether the ctx records (grad mode on): a probe that requires a gradient. */
static int grad_mode(qkv_ctx *c)
{
    qkv_tensor probe = {0};
    probe.requires_grad = 1;
    qkv_tensor *in[1] = {&probe};
    return qkv_ctx_recording(c, in, 1);
}

/* Cached forwards are inference only: no training mode; grad off while
 * they run (the caller's mode is given back in *was). */
qkv_status tfm_infer_begin(const char *fn, qkv_ctx *c, int *was)
{
    QKV_NEED(c, fn, "ctx");
    if (qkv_ctx_training(c))
        return qkv_fail(QKV_ERR_STATE, "%s: inference only: the ctx is in training mode (call "
                        "qkv_ctx_set_training(c, 0))", fn);
    *was = grad_mode(c);
    qkv_ctx_set_grad(c, 0);
    return QKV_OK;
}

/* ---- the cached attention ----------------------------------------------- */

typedef struct {
    qkv_kv_cache *kc;
    int64_t layer;
    int batch_first;
} cache_arg;

/* Copies t (N,H,T,hd) into positions [len, len+T) of one layer's blocks
 * (N,H,max_len,hd) of the keys (or the values), which start `lay`
 * elements in; rounded to fp16 or bf16 in a 16-bit cache. */
static void cache_append(qkv_kv_cache *kc, int values, int64_t lay, const qkv_tensor *t)
{
    int64_t NH = t->shape[0] * t->shape[1], T = t->shape[2], hd = t->shape[3];
    for (int64_t nh = 0; nh < NH; nh++) {
        int64_t at = lay + (nh * kc->max_len + kc->len) * hd;
        const float *src = t->data + nh * T * hd; // (T,hd)
        if (kc->dtype == QKV_KV_F16)
            qkv_half_from_floats(src, (values ? kc->v16 : kc->k16) + at, T * hd);
        else if (kc->dtype == QKV_KV_BF16)
            qkv_bf16_from_floats(src, (values ? kc->v16 : kc->k16) + at, T * hd);
        else
            memcpy((values ? kc->v : kc->k) + at, src, (size_t)(T * hd) * sizeof(float));
    }
}

/* Up to this many new queries per row, attention over the cache runs on
 * the decoding kernel (attention_decode.c: split over the cache length
 * across threads); a longer block of new positions (a prompt) goes to
 * qkv_sdpa, whose fused kernel works on blocks of queries, and so does
 * every step under qkv_reference() (its reference kernel). Measured with 8
 * heads of 64 over 1000 and 4096 keys on 2 cores: the decoding kernel is
 * 12-15x faster than the per-(row, head) qkv_sdpa calls at 1 query,
 * 1.7-1.9x at 16, even at 32, 2x slower at 64. */
enum { DECODE_QUERIES = 32 };

static int use_decode_kernel(int64_t T)
{
    return T <= DECODE_QUERIES && !qkv_reference();
}

/* One (row, head) of the cached self-attention through qkv_sdpa: q (T,hd)
 * of the new positions over the S = len + T cached keys, causal
 * bottom-right, the row's padding masked; the result (T,hd) into out. */
static qkv_status attend_row_head(qkv_ctx *c, qkv_kv_cache *kc, int64_t l, int64_t n, int64_t h,
                                  float *q, int64_t T, float *out)
{
    qkv_arena *a = qkv_ctx_arena(c);
    int64_t hd = kc->head_dim, S = kc->len + T;
    int64_t blk = ((l * kc->batch + n) * kc->nhead + h) * kc->max_len * hd;
    qkv_tensor *qt, *kt, *vt, *pm = NULL, *o;
    /* Everything below is scratch (inference: nothing is recorded), given
     * back once the result is copied out; a 16-bit cache's float copies of
     * the block are S x hd each. */
    qkv_arena_mark mark = qkv_arena_get_mark(a);
    QKV_TRY(qkv_tensor_wrap(a, q, 3, (int64_t[]){1, T, hd}, &qt));
    if (kc->k16) { /* 16-bit cache: the block's keys and values as floats */
        void (*widen)(const uint16_t *, float *, int64_t) =
            kc->dtype == QKV_KV_BF16 ? qkv_bf16_to_floats : qkv_half_to_floats;
        QKV_TRY(qkv_tensor_new(a, QKV_F32, 3, (int64_t[]){1, S, hd}, &kt));
        QKV_TRY(qkv_tensor_new(a, QKV_F32, 3, (int64_t[]){1, S, hd}, &vt));
        widen(kc->k16 + blk, kt->data, S * hd);
        widen(kc->v16 + blk, vt->data, S * hd);
    } else {
        QKV_TRY(qkv_tensor_wrap(a, kc->k + blk, 3, (int64_t[]){1, S, hd}, &kt)); // view (1,S,hd)
        QKV_TRY(qkv_tensor_wrap(a, kc->v + blk, 3, (int64_t[]){1, S, hd}, &vt));
    }
    qkv_sdpa_opts so = qkv_sdpa_opts_default();
    so.causal = QKV_CAUSAL_BOTTOM_RIGHT;
    if (kc->npad[n]) {
        QKV_TRY(qkv_tensor_wrap_bool(a, kc->pad + n * kc->max_len, 2, (int64_t[]){1, S}, &pm));
        so.key_padding_mask = pm;
    }
    QKV_TRY(qkv_sdpa(c, qt, kt, vt, &so, &o, NULL)); // (1,T,hd)
    memcpy(out, o->data, (size_t)(T * hd) * sizeof(float));
    qkv_arena_release(a, mark);
    return QKV_OK;
}

/* The decoding kernel's description of T new queries per (row, head) over
 * S keys in blocks kv_stride floats apart, scaled as qkv_sdpa's default. */
static qkv_decode_desc decode_desc(const qkv_kv_cache *kc, int64_t T, int64_t S,
                                   int64_t kv_stride)
{
    qkv_decode_desc d = {0};
    d.N = kc->batch;
    d.H = kc->nhead;
    d.T = T;
    d.S = S;
    d.D = kc->head_dim;
    d.kv_stride = kv_stride;
    d.scale = 1.0f / sqrtf((float)kc->head_dim);
    return d;
}

/* The rotary positions I64 (N,T) of the T new positions: the non-padding
 * positions before each in its row (seq_embed.c's and mha_forward's
 * rule). kc->pad and npad already count the new positions' padding. */
static qkv_status cached_positions(qkv_ctx *c, const qkv_kv_cache *kc, int64_t T, qkv_tensor **pos)
{
    QKV_TRY(qkv_tensor_new(qkv_ctx_arena(c), QKV_I64, 2, (int64_t[]){kc->batch, T}, pos));
    for (int64_t n = 0; n < kc->batch; n++) {
        const uint8_t *pad = kc->pad + n * kc->max_len + kc->len; // (T): the new positions'
        int64_t p = kc->len - kc->npad[n];
        for (int64_t t = 0; t < T; t++) p += pad[t]; /* npad[n] counted them */
        for (int64_t t = 0; t < T; t++) {
            (*pos)->idx[n * T + t] = p;
            p += !pad[t];
        }
    }
    return QKV_OK;
}

/* Self-attention of the new positions x over the layer's cache; a rotary
 * module's q and k are rotated to their positions first, so the cache
 * keeps rotated keys. */
static qkv_status cached_self_attn(qkv_ctx *c, const qkv_mha *m, const cache_arg *ca,
                                   qkv_tensor *x, qkv_tensor **y)
{
    qkv_kv_cache *kc = ca->kc;
    int bf = ca->batch_first;
    qkv_arena *a = qkv_ctx_arena(c);
    qkv_tensor *q, *k, *v; // (N,H,T,hd) each
    QKV_TRY(mha_project_qkv(c, m, x, x, x, bf, &q, &k, &v));
    int64_t N = q->shape[0], H = q->shape[1], T = q->shape[2], hd = q->shape[3];
    if (m->o.rotary) {
        qkv_tensor *pos; // (N,T)
        QKV_TRY(cached_positions(c, kc, T, &pos));
        QKV_TRY(mha_rotate(c, m, pos, q, &q));
        QKV_TRY(mha_rotate(c, m, pos, k, &k));
    }
    int64_t lay = ca->layer * N * H * kc->max_len * hd;
    cache_append(kc, 0, lay, k);
    cache_append(kc, 1, lay, v);
    qkv_tensor *o; // (N,H,T,hd)
    QKV_TRY(qkv_tensor_new(a, QKV_F32, 4, q->shape, &o));
    if (use_decode_kernel(T)) {
        qkv_decode_desc d = decode_desc(kc, T, kc->len + T, kc->max_len * hd);
        d.causal = 1;
        for (int64_t n = 0; n < N; n++)
            if (kc->npad[n]) d.kpm = kc->pad; // (N,max_len)
        d.kpm_stride = kc->max_len;
        if (kc->dtype == QKV_KV_F16)
            QKV_TRY(qkv_decode_attend_half(a, &d, q->data, kc->k16 + lay, kc->v16 + lay, o->data));
        else if (kc->dtype == QKV_KV_BF16)
            QKV_TRY(qkv_decode_attend_bf16(a, &d, q->data, kc->k16 + lay, kc->v16 + lay, o->data));
        else
            QKV_TRY(qkv_decode_attend(a, &d, q->data, kc->k + lay, kc->v + lay, o->data));
        return mha_merge_heads(c, m, o, bf, y);
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < H; h++) {
            int64_t off = (n * H + h) * T * hd;
            QKV_TRY(attend_row_head(c, kc, ca->layer, n, h, q->data + off, T, o->data + off));
        }
    return mha_merge_heads(c, m, o, bf, y);
}

/* Cross-attention of the new positions x over the memory's cached keys. */
static qkv_status cached_cross_attn(qkv_ctx *c, const qkv_mha *m, const cache_arg *ca,
                                    qkv_tensor *x, qkv_tensor **y)
{
    qkv_kv_cache *kc = ca->kc;
    qkv_arena *a = qkv_ctx_arena(c);
    qkv_tensor *q; // (N,H,T,hd)
    QKV_TRY(mha_project_heads(c, m, MHA_Q, x, ca->batch_first, &q));
    int64_t N = kc->batch, H = kc->nhead, T = q->shape[2], S = kc->mem_len, hd = kc->head_dim;
    int64_t shape[4] = {N, H, S, hd}, lay = ca->layer * N * H * S * hd;
    qkv_tensor *kt, *vt, *pm, *o;
    if (use_decode_kernel(T)) {
        qkv_decode_desc d = decode_desc(kc, T, S, S * hd);
        d.kpm = kc->mem_has_pad ? kc->mem_pad : NULL; // (N,S)
        d.kpm_stride = S;
        QKV_TRY(qkv_tensor_new(a, QKV_F32, 4, q->shape, &o));
        QKV_TRY(qkv_decode_attend(a, &d, q->data, kc->ck + lay, kc->cv + lay, o->data));
        return mha_merge_heads(c, m, o, ca->batch_first, y);
    }
    QKV_TRY(qkv_tensor_wrap(a, kc->ck + lay, 4, shape, &kt)); // (N,H,S,hd)
    QKV_TRY(qkv_tensor_wrap(a, kc->cv + lay, 4, shape, &vt));
    qkv_sdpa_opts so = qkv_sdpa_opts_default();
    if (kc->mem_has_pad) {
        QKV_TRY(qkv_tensor_wrap_bool(a, kc->mem_pad, 2, (int64_t[]){N, S}, &pm));
        so.key_padding_mask = pm;
    }
    QKV_TRY(qkv_sdpa(c, q, kt, vt, &so, &o, NULL)); // (N,H,T,hd)
    return mha_merge_heads(c, m, o, ca->batch_first, y);
}

/* The tfm_attn hook: the cached attentions in place of the masked ones. */
static qkv_status cached_attn(qkv_ctx *c, const qkv_mha *m, tfm_attn_kind kind, qkv_tensor *x,
                              void *arg, qkv_tensor **y)
{
    if (kind == TFM_ATTN_CROSS) return cached_cross_attn(c, m, arg, x, y);
    return cached_self_attn(c, m, arg, x, y);
}

/* ---- checks -------------------------------------------------------------- */

/* The cache fits a stack of num_layers layers with options o. */
static qkv_status check_cache_fits(const char *fn, const qkv_kv_cache *kc,
                                   const qkv_transformer_layer_opts *o, int64_t num_layers)
{
    QKV_TRY(check_cache(fn, kc));
    int64_t hd = o->d_model / o->nhead;
    if (kc->num_layers != num_layers || kc->nhead != o->nhead || kc->head_dim != hd)
        return qkv_fail(QKV_ERR_SHAPE, "%s: cache of %lld layers, %lld heads of %lld dims does not "
                        "fit the model's %lld layers, %lld heads of %lld dims", fn,
                        (long long)kc->num_layers, (long long)kc->nhead, (long long)kc->head_dim,
                        (long long)num_layers, (long long)o->nhead, (long long)hd);
    return QKV_OK;
}

/* The packed, plain attentions the layers build (no bias_k, zero attention). */
static qkv_status check_mha(const char *fn, const qkv_mha *m)
{
    if (!m->packed || !m->in_proj_weight || m->bias_k || m->o.add_zero_attn)
        return qkv_fail(QKV_ERR_STATE, "%s: attention is not a layer's packed attention", fn);
    return QKV_OK;
}

/* x: the new positions, in the layout of o, fitting the cache: N ==
 * batch, len + T <= max_len; kpm NULL or BOOL (N,T). */
static qkv_status check_new(const char *fn, const char *name, const qkv_kv_cache *kc,
                            const qkv_transformer_layer_opts *o, qkv_tensor *x,
                            const qkv_tensor *kpm, tfm_seq *d)
{
    char b[64];
    QKV_NEED(x, fn, name);
    QKV_TRY(tfm_check_seq(fn, name, x, o, d));
    if (d->N != kc->batch)
        return qkv_fail(QKV_ERR_SHAPE, "%s: %s %s has batch %lld, the cache %lld", fn, name,
                        qkv_shape_str(x, b, sizeof b), (long long)d->N, (long long)kc->batch);
    if (d->L < 1)
        return qkv_fail(QKV_ERR_SHAPE, "%s: %s %s has no new positions", fn, name,
                        qkv_shape_str(x, b, sizeof b));
    if (kc->len + d->L > kc->max_len)
        return qkv_fail(QKV_ERR_SHAPE, "%s: %s %s: %lld new positions after the cache's %lld "
                        "exceed its max_len %lld", fn, name,
                        qkv_shape_str(x, b, sizeof b), (long long)d->L, (long long)kc->len,
                        (long long)kc->max_len);
    if (kpm && (kpm->dtype != QKV_BOOL || !kpm->mask))
        return qkv_fail(QKV_ERR_DTYPE, "%s: key_padding_mask must be BOOL (true = padding)", fn);
    if (kpm && (kpm->ndim != 2 || kpm->shape[0] != d->N || kpm->shape[1] != d->L))
        return qkv_fail(QKV_ERR_SHAPE, "%s: key_padding_mask %s, expected (N,T) = (%lld,%lld)", fn,
                        qkv_shape_str(kpm, b, sizeof b), (long long)d->N, (long long)d->L);
    return QKV_OK;
}

/* Records the new positions' padding: pad[n][len + t] and npad. */
static void cache_set_pad(qkv_kv_cache *kc, int64_t T, const qkv_tensor *kpm)
{
    for (int64_t n = 0; n < kc->batch; n++)
        for (int64_t t = 0; t < T; t++) {
            uint8_t p = kpm ? kpm->mask[n * T + t] != 0 : 0;
            kc->pad[n * kc->max_len + kc->len + t] = p;
            kc->npad[n] += p;
        }
}

/* Unbatched (T,E) as batched with N = 1 in the layout of o. */
static qkv_status as_batched(qkv_ctx *c, const qkv_transformer_layer_opts *o, qkv_tensor *x,
                             qkv_tensor **y)
{
    int64_t T = x->shape[0], E = x->shape[1];
    return qkv_reshape(c, x, 3, o->batch_first ? (int64_t[]){1, T, E} : (int64_t[]){T, 1, E}, y);
}

/* ---- the cached stacks ------------------------------------------------------ */

/* Runs layer i of a stack's layers with the attentions at. */
typedef qkv_status (*layer_run_fn)(qkv_ctx *c, const void *layers, int64_t i, qkv_tensor *x,
                                   const tfm_attn *at, qkv_tensor **y);

static qkv_status encoder_layer_run(qkv_ctx *c, const void *layers, int64_t i, qkv_tensor *x,
                                    const tfm_attn *at, qkv_tensor **y)
{
    const qkv_transformer_encoder_layer *l = layers;
    return tfm_encoder_layer_run_attn(c, l + i, x, at, y);
}

static qkv_status decoder_layer_run(qkv_ctx *c, const void *layers, int64_t i, qkv_tensor *x,
                                    const tfm_attn *at, qkv_tensor **y)
{
    const qkv_transformer_decoder_layer *l = layers;
    return tfm_decoder_layer_run_attn(c, l + i, x, at, y);
}

/* A stack as its cached forward runs it: the layers, then the final norm. */
typedef struct {
    const qkv_transformer_layer_opts *o;
    const void *layers;           /* (num_layers) encoder or decoder layers */
    layer_run_fn run;
    int64_t num_layers;
    const qkv_nn_layernorm *norm; /* NULL: none */
} cached_stack;

/* The layers over the batched new positions x, each attention through the
 * cache, then the norm. */
static qkv_status stack_run(qkv_ctx *c, const cached_stack *st, qkv_kv_cache *kc, qkv_tensor *x,
                            qkv_tensor **out)
{
    cache_arg ca = {kc, 0, st->o->batch_first};
    tfm_attn at = {cached_attn, &ca};
    for (int64_t i = 0; i < st->num_layers; i++) {
        ca.layer = i;
        QKV_TRY(st->run(c, st->layers, i, x, &at, &x));
    }
    if (st->norm) return tfm_norm_run(c, st->norm, x, out);
    *out = x;
    return QKV_OK;
}

/* Padding recorded, layers run, len advanced (or the new positions
 * forgotten on failure), unbatched output reshaped back. */
static qkv_status cached_step(qkv_ctx *c, const cached_stack *st, qkv_kv_cache *kc, qkv_tensor *x,
                              const tfm_seq *d, const qkv_tensor *kpm, qkv_tensor **out)
{
    int64_t len0 = kc->len;
    if (!d->batched) QKV_TRY(as_batched(c, st->o, x, &x));
    cache_set_pad(kc, d->L, kpm);
    qkv_status s = stack_run(c, st, kc, x, out);
    if (s != QKV_OK) { /* forget the new positions */
        kc->len = len0 + d->L;
        qkv_kv_cache_truncate(kc, len0);
        return s;
    }
    kc->len = len0 + d->L;
    if (!d->batched) return qkv_reshape(c, *out, 2, (int64_t[]){d->L, st->o->d_model}, out);
    return QKV_OK;
}

/* Both cached stack forwards after their module checks: the new
 * positions x (named name) checked, then the step in inference mode. */
static qkv_status cached_forward(const char *fn, const char *name, qkv_ctx *c,
                                 const cached_stack *st, qkv_kv_cache *kc, qkv_tensor *x,
                                 const qkv_tensor *kpm, qkv_tensor **out)
{
    tfm_seq d;
    QKV_TRY(check_new(fn, name, kc, st->o, x, kpm, &d));
    int was = 0; /* set by tfm_infer_begin; 0 only quiets -Wmaybe-uninitialized */
    QKV_TRY(tfm_infer_begin(fn, c, &was));
    const qkv_bf16_weights *w0 = qkv_ctx_set_bf16_weights(c, kc->weights);
    qkv_status s = cached_step(c, st, kc, x, &d, kpm, out);
    qkv_ctx_set_bf16_weights(c, w0);
    qkv_ctx_set_grad(c, was);
    return s;
}

/* ---- decoder-only --------------------------------------------------------- */

static qkv_status check_decoder_only(const char *fn, const qkv_transformer_decoder_only *m,
                                     const qkv_kv_cache *kc)
{
    QKV_NEED(m, fn, "module");
    const qkv_transformer_encoder *s = &m->stack;
    if (s->o.d_model <= 0)
        return qkv_fail(QKV_ERR_STATE, "%s: module is not initialised (call its _init)", fn);
    QKV_TRY(check_cache_fits(fn, kc, &s->o, s->num_layers));
    for (int64_t i = 0; i < s->num_layers; i++) QKV_TRY(check_mha(fn, &s->layers[i].self_attn));
    return QKV_OK;
}

qkv_status qkv_transformer_decoder_only_forward_cached(qkv_ctx *c,
                                                       const qkv_transformer_decoder_only *m,
                                                       qkv_kv_cache *kc, qkv_tensor *x,
                                                       const qkv_tensor *key_padding_mask,
                                                       qkv_tensor **out)
{
    const char *fn = "transformer_decoder_only_forward_cached";
    QKV_NEED_OUT_CTX(out, c, fn, "out");
    QKV_TRY(check_decoder_only(fn, m, kc));
    const qkv_transformer_encoder *s = &m->stack;
    cached_stack st = {&s->o, s->layers, encoder_layer_run, s->num_layers,
                       s->has_norm ? &s->norm : NULL};
    return cached_forward(fn, "x", c, &st, kc, x, key_padding_mask, out);
}

/* ---- TransformerDecoder ----------------------------------------------------- */

/* Room for the memory's keys and values: (num_layers, batch, H, S, hd) each. */
static qkv_status memory_alloc(const char *fn, qkv_kv_cache *kc, int64_t S)
{
    int64_t need = kc->num_layers * kc->batch * kc->nhead * S * kc->head_dim;
    if (need > kc->mem_cap) {
        free(kc->ck);
        free(kc->cv);
        free(kc->mem_pad);
        kc->mem_cap = 0;
        kc->ck = malloc((size_t)need * sizeof(float));
        kc->cv = malloc((size_t)need * sizeof(float));
        kc->mem_pad = malloc((size_t)(kc->batch * S));
        if (!kc->ck || !kc->cv || !kc->mem_pad)
            return qkv_fail(QKV_ERR_NOMEM, "%s: cannot allocate the memory's keys and values (2 x "
                            "%lld floats)", fn, (long long)need);
        kc->mem_cap = need; /* mem_pad has room for batch * S bytes while need <= mem_cap */
    }
    return QKV_OK;
}

/* Each layer's cross-attention keys and values of memory (batched, in the
 * decoder's layout) into the cache. */
static qkv_status memory_fill(qkv_ctx *c, const qkv_transformer_decoder *m, qkv_kv_cache *kc,
                              qkv_tensor *memory, int64_t S)
{
    int64_t per = kc->batch * kc->nhead * S * kc->head_dim;
    for (int64_t i = 0; i < m->num_layers; i++) {
        const qkv_mha *a = &m->layers[i].multihead_attn;
        qkv_tensor *k, *v; // (N,H,S,hd)
        QKV_TRY(mha_project_heads(c, a, MHA_K, memory, m->o.batch_first, &k));
        QKV_TRY(mha_project_heads(c, a, MHA_V, memory, m->o.batch_first, &v));
        memcpy(kc->ck + i * per, k->data, (size_t)per * sizeof(float));
        memcpy(kc->cv + i * per, v->data, (size_t)per * sizeof(float));
    }
    return QKV_OK;
}

static qkv_status check_decoder(const char *fn, const qkv_transformer_decoder *m,
                                const qkv_kv_cache *kc)
{
    QKV_NEED(m, fn, "module");
    if (m->o.d_model <= 0)
        return qkv_fail(QKV_ERR_STATE, "%s: module is not initialised (call "
                        "qkv_transformer_decoder_init)", fn);
    QKV_TRY(check_cache_fits(fn, kc, &m->o, m->num_layers));
    for (int64_t i = 0; i < m->num_layers; i++) {
        QKV_TRY(check_mha(fn, &m->layers[i].self_attn));
        QKV_TRY(check_mha(fn, &m->layers[i].multihead_attn));
    }
    return QKV_OK;
}

static qkv_status check_memory(const char *fn, const qkv_transformer_decoder *m,
                               const qkv_kv_cache *kc, qkv_tensor *memory, const qkv_tensor *kpm,
                               tfm_seq *s)
{
    char b[64];
    QKV_NEED(memory, fn, "memory");
    QKV_TRY(tfm_check_seq(fn, "memory", memory, &m->o, s));
    if (s->N != kc->batch || s->L < 1)
        return qkv_fail(QKV_ERR_SHAPE, "%s: memory %s has batch %lld, the cache %lld (or no "
                        "positions)", fn, qkv_shape_str(memory, b, sizeof b), (long long)s->N,
                        (long long)kc->batch);
    if (kpm && (kpm->dtype != QKV_BOOL || !kpm->mask))
        return qkv_fail(QKV_ERR_DTYPE, "%s: memory_key_padding_mask must be BOOL (true = padding)", fn);
    if (kpm && (kpm->ndim != 2 || kpm->shape[0] != s->N || kpm->shape[1] != s->L))
        return qkv_fail(QKV_ERR_SHAPE, "%s: memory_key_padding_mask %s, expected (N,S) = "
                        "(%lld,%lld)", fn, qkv_shape_str(kpm, b, sizeof b), (long long)s->N,
                        (long long)s->L);
    return QKV_OK;
}

qkv_status qkv_transformer_decoder_set_memory(qkv_ctx *c, const qkv_transformer_decoder *m,
                                              qkv_kv_cache *kc, qkv_tensor *memory,
                                              const qkv_tensor *memory_key_padding_mask)
{
    const char *fn = "transformer_decoder_set_memory";
    QKV_NEED(c, fn, "ctx");
    QKV_TRY(check_decoder(fn, m, kc));
    const qkv_tensor *kpm = memory_key_padding_mask;
    tfm_seq s;
    QKV_TRY(check_memory(fn, m, kc, memory, kpm, &s));
    int was = 0;
    QKV_TRY(tfm_infer_begin(fn, c, &was));
    qkv_kv_cache_reset(kc);
    qkv_status st = memory_alloc(fn, kc, s.L);
    if (st == QKV_OK && !s.batched) st = as_batched(c, &m->o, memory, &memory);
    if (st == QKV_OK) st = memory_fill(c, m, kc, memory, s.L);
    qkv_ctx_set_grad(c, was);
    if (st != QKV_OK) return st;
    int64_t NS = kc->batch * s.L;
    kc->mem_has_pad = 0;
    for (int64_t i = 0; i < NS; i++) {
        kc->mem_pad[i] = kpm ? kpm->mask[i] != 0 : 0;
        kc->mem_has_pad |= kc->mem_pad[i];
    }
    kc->mem_len = s.L;
    return QKV_OK;
}

qkv_status qkv_transformer_decoder_forward_cached(qkv_ctx *c, const qkv_transformer_decoder *m,
                                                  qkv_kv_cache *kc, qkv_tensor *tgt,
                                                  const qkv_tensor *tgt_key_padding_mask,
                                                  qkv_tensor **out)
{
    const char *fn = "transformer_decoder_forward_cached";
    QKV_NEED_OUT_CTX(out, c, fn, "out");
    QKV_TRY(check_decoder(fn, m, kc));
    if (kc->mem_len < 1)
        return qkv_fail(QKV_ERR_STATE, "%s: no memory in the cache (call "
                        "qkv_transformer_decoder_set_memory first)", fn);
    cached_stack st = {&m->o, m->layers, decoder_layer_run, m->num_layers,
                       m->has_norm ? &m->norm : NULL};
    return cached_forward(fn, "tgt", c, &st, kc, tgt, tgt_key_padding_mask, out);
}
