/* sdpa.c: the scaled dot-product attention op: argument checks, the mask
 * description, the choice of kernel, and the tape entry. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include "attention/mha_internal.h"
#include "kernels/attention.h"

qkv_sdpa_opts qkv_sdpa_opts_default(void)
{
    qkv_sdpa_opts o = {0};
    o.scale = NAN;
    o.window = -1;
    return o;
}

typedef struct {
    qkv_attn_desc d;
    qkv_tensor *q, *k, *v, *out; /* packed: q = k = v = the projection (A,B,3E) */
    float *lse;                  // (N,H,L)
    int64_t E;                   /* packed: k and v from columns E and 2E on; else 0 */
} sdpa_saved;

/* The packed projection's gradient: written (grads_unset) when new. */
static qkv_status sdpa_packed_grads(qkv_arena *a, sdpa_saved *s, qkv_attn_desc *d, float *g[3])
{
    if (!s->q->requires_grad) return QKV_OK;
    int fresh;
    float *dy = qkv_tensor_grad_fresh(a, s->q, &fresh); // (A,B,3E)
    if (!dy) return QKV_ERR_NOMEM;
    d->grads_unset = fresh;
    g[0] = dy, g[1] = dy + s->E, g[2] = dy + 2 * s->E;
    return QKV_OK;
}

static qkv_status sdpa_backward(qkv_ctx *c, void *p)
{
    sdpa_saved *s = p;
    const float *dout = s->out->grad; // (N,H,L,Dv)
    if (!dout) return QKV_OK;
    qkv_arena *a = qkv_ctx_arena(c);
    float *g[3] = {NULL, NULL, NULL};
    qkv_tensor *in[3] = {s->q, s->k, s->v};
    qkv_attn_desc d = s->d;
    if (s->E) { /* the packed projection's gradient */
        QKV_TRY(sdpa_packed_grads(a, s, &d, g));
    } else {
        /* Three tensors of their own whose gradients are met here first (q,
         * k and v of a multi-head attention's split): the fast kernels zero
         * them head by head as they go. Otherwise (shared or viewed inputs,
         * the reference) they are zeroed here and added into. */
        d.grads_unset = !qkv_reference() && in[0] != in[1] && in[1] != in[2] && in[0] != in[2];
        for (int i = 0; i < 3; i++)
            d.grads_unset &= !in[i]->base && !in[i]->grad;
        for (int i = 0; i < 3; i++) {
            int fresh = 0;
            if (!in[i]->requires_grad) continue;
            g[i] = d.grads_unset ? qkv_tensor_grad_fresh(a, in[i], &fresh) : qkv_tensor_grad(a, in[i]);
            if (!g[i]) return QKV_ERR_NOMEM;
        }
    }
    /* Kernel scratch comes after the gradients and goes back at the end. */
    qkv_arena_mark mark = qkv_arena_get_mark(a);
    int threads = omp_get_max_threads();
    if (qkv_reference() && !s->E) { /* (a packed forward ran the fast kernels) */
        double *scratch = qkv_arena_alloc(a, qkv_attn_ref_scratch(&s->d) * sizeof(double));
        if (!scratch) return QKV_ERR_NOMEM;
        qkv_attn_backward_ref(&s->d, s->q->data, s->k->data, s->v->data, s->out->data, s->lse,
                              dout, g[0], g[1], g[2], scratch);
    } else {
        /* not zeroed: the kernels set what they read (the dq buffers too) */
        float *scratch = qkv_arena_alloc_uninit(a, qkv_attn_backward_scratch(&d, threads) * sizeof(float));
        if (!scratch) return QKV_ERR_NOMEM;
        qkv_attn_backward_flash(&d, s->q->data, s->k->data + s->E, s->v->data + 2 * s->E, s->out->data,
                                s->lse, dout, g[0], g[1], g[2], scratch, threads);
    }
    qkv_arena_release(a, mark);
    return QKV_OK;
}

/* ---- grouped-query attention: key/value heads repeated ------------------ */

typedef struct {
    qkv_tensor *x, *y; /* x (N,Hkv,S,D), y (N,H,S,D) */
    int64_t N, Hkv, g, rows;   /* rows = S*D floats per head */
} repeat_saved;

/* Differentiates y[:, h] = x[:, h / g]: dx[:, j] += sum of dy over its g heads. */
static qkv_status repeat_backward(qkv_ctx *c, void *p)
{
    repeat_saved *s = p;
    const float *dy = s->y->grad; // (N,H,S,D)
    if (!dy || !s->x->requires_grad) return QKV_OK;
    float *dx = qkv_tensor_grad(qkv_ctx_arena(c), s->x); // (N,Hkv,S,D)
    if (!dx) return QKV_ERR_NOMEM;
    for (int64_t nj = 0; nj < s->N * s->Hkv; nj++)
        for (int64_t r = 0; r < s->g; r++) {
            const float *src = dy + (nj * s->g + r) * s->rows;
            float *dst = dx + nj * s->rows;
            for (int64_t i = 0; i < s->rows; i++) dst[i] += src[i];
        }
    return QKV_OK;
}

/* x (N,Hkv,S,D) -> *y (N,H,S,D) with y[:, h] = x[:, h / (H/Hkv)]
 * (torch.repeat_interleave(x, H/Hkv, dim=1)), recorded. */
static qkv_status repeat_heads(qkv_ctx *c, qkv_tensor *x, int64_t H, qkv_tensor **y)
{
    int64_t N = x->shape[0], Hkv = x->shape[1], g = H / Hkv, rows = x->shape[2] * x->shape[3];
    int rec = qkv_ctx_recording(c, &x, 1);
    QKV_TRY(qkv_ctx_tensor_uninit(c, 4, (int64_t[]){N, H, x->shape[2], x->shape[3]}, rec, y));
    for (int64_t nj = 0; nj < N * Hkv; nj++)
        for (int64_t r = 0; r < g; r++)
            memcpy((*y)->data + (nj * g + r) * rows, x->data + nj * rows, (size_t)rows * sizeof(float));
    if (!rec) return QKV_OK;
    repeat_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (repeat_saved){x, *y, N, Hkv, g, rows};
    return qkv_ctx_record(c, repeat_backward, s);
}

/* With enable_gqa and 4-D inputs whose k, v have fewer heads than q (a
 * divisibility error otherwise): when recording, the repeated k and v in
 * place of *k and *v (the backward kernels want H heads); else *group =
 * H/Hkv for the forward kernels, which read each key/value head in place. */
static qkv_status sdpa_gqa(qkv_ctx *c, const qkv_tensor *q, int rec, qkv_tensor **k, qkv_tensor **v,
                           int64_t *group)
{
    if (q->ndim != 4 || (*k)->ndim != 4 || (*v)->ndim != 4 || (*k)->dtype != QKV_F32 || (*v)->dtype != QKV_F32)
        return QKV_OK;
    int64_t H = q->shape[1], Hk = (*k)->shape[1], Hv = (*v)->shape[1];
    if (Hk == H && Hv == H) return QKV_OK;
    if (Hk != Hv || Hk < 1 || H % Hk)
        return qkv_fail(QKV_ERR_SHAPE, "sdpa: enable_gqa needs key and value heads (%lld, %lld) equal and "
                        "dividing the query's %lld", (long long)Hk, (long long)Hv, (long long)H);
    if (!rec) {
        *group = H / Hk;
        return QKV_OK;
    }
    QKV_TRY(repeat_heads(c, *k, H, k));
    return repeat_heads(c, *v, H, v);
}

/* Checks q, k, v and reads N, H, L, S, D, Dv into d. */
static qkv_status sdpa_shapes(const qkv_tensor *q, const qkv_tensor *k, const qkv_tensor *v,
                              qkv_attn_desc *d)
{
    char bq[64], bk[64], bv[64];
    const qkv_tensor *t[3] = {q, k, v};
    const char *nm[3] = {"query", "key", "value"};
    for (int i = 0; i < 3; i++) {
        if (t[i]->dtype != QKV_F32) return qkv_fail(QKV_ERR_DTYPE, "sdpa: %s is not F32", nm[i]);
        if (t[i]->ndim != 3 && t[i]->ndim != 4)
            return qkv_fail(QKV_ERR_SHAPE, "sdpa: %s %s has %d dims, expected 4 (N,H,L,D) or 3 (N,L,D)",
                            nm[i], qkv_shape_str(t[i], bq, sizeof bq), t[i]->ndim);
    }
    qkv_shape_str(q, bq, sizeof bq);
    qkv_shape_str(k, bk, sizeof bk);
    qkv_shape_str(v, bv, sizeof bv);
    if (k->ndim != q->ndim || v->ndim != q->ndim)
        return qkv_fail(QKV_ERR_SHAPE, "sdpa: query %s, key %s and value %s must have the same rank",
                        bq, bk, bv);
    int h = q->ndim == 4;
    d->N = q->shape[0];
    d->H = h ? q->shape[1] : 1;
    d->L = q->shape[1 + h];
    d->D = q->shape[2 + h];
    d->S = k->shape[1 + h];
    d->Dv = v->shape[2 + h];
    int64_t Hkv = d->group > 1 ? d->H / d->group : d->H; /* k and v's heads */
    if (k->shape[0] != d->N || v->shape[0] != d->N || (h && (k->shape[1] != Hkv || v->shape[1] != Hkv)))
        return qkv_fail(QKV_ERR_SHAPE, "sdpa: batch/head dims of query %s, key %s, value %s differ",
                        bq, bk, bv);
    if (k->shape[2 + h] != d->D)
        return qkv_fail(QKV_ERR_SHAPE, "sdpa: key %s last dim differs from query %s's %lld", bk, bq,
                        (long long)d->D);
    if (v->shape[1 + h] != d->S)
        return qkv_fail(QKV_ERR_SHAPE, "sdpa: value %s has %lld keys, key %s has %lld", bv,
                        (long long)v->shape[1 + h], bk, (long long)d->S);
    return QKV_OK;
}

/* Fills d's masks from opts; shapes follow MultiheadAttention's rules. */
static qkv_status sdpa_masks(const qkv_sdpa_opts *o, qkv_attn_desc *d)
{
    char b[64];
    d->mask_keys = o->mask_keys ? o->mask_keys : d->S;
    if (o->mask_keys < 0 || o->mask_keys > d->S)
        return qkv_fail(QKV_ERR_ARG, "sdpa: mask_keys %lld outside 0..%lld", (long long)o->mask_keys,
                        (long long)d->S);
    int64_t mk = d->mask_keys;
    if (o->causal != QKV_CAUSAL_NONE && o->causal != QKV_CAUSAL_TOP_LEFT &&
        o->causal != QKV_CAUSAL_BOTTOM_RIGHT)
        return qkv_fail(QKV_ERR_ARG, "sdpa: causal is %d, not a qkv_causal value", (int)o->causal);
    d->causal = o->causal;
    d->diag = o->causal == QKV_CAUSAL_BOTTOM_RIGHT ? mk - d->L : 0;
    /* A window at least as wide as every |i + diag - j| is no window (and
     * i + diag + window must not overflow in the kernels). */
    int64_t widest = d->L + mk + (d->diag < 0 ? -d->diag : d->diag);
    d->window = o->window < 0 || o->window >= widest ? -1 : o->window;
    const qkv_tensor *m = o->attn_mask;
    if (m) {
        if (m->dtype != QKV_BOOL && m->dtype != QKV_F32)
            return qkv_fail(QKV_ERR_DTYPE, "sdpa: attn_mask must be BOOL or F32");
        int ok = 0;
        if (m->ndim == 2) {
            ok = m->shape[0] == d->L && m->shape[1] == mk;
            d->mask_nh_stride = 0;
        } else if (m->ndim == 3) {
            ok = m->shape[0] == d->N * d->H && m->shape[1] == d->L && m->shape[2] == mk;
            d->mask_nh_stride = d->L * mk;
        } else if (m->ndim == 4) {
            ok = m->shape[0] == d->N && m->shape[1] == d->H && m->shape[2] == d->L && m->shape[3] == mk;
            d->mask_nh_stride = d->L * mk;
        }
        if (!ok)
            return qkv_fail(QKV_ERR_SHAPE,
                            "sdpa: attn_mask %s, expected (L,S) = (%lld,%lld), (N*H,L,S) = "
                            "(%lld,%lld,%lld) or (N,H,L,S)",
                            qkv_shape_str(m, b, sizeof b), (long long)d->L, (long long)mk,
                            (long long)(d->N * d->H), (long long)d->L, (long long)mk);
        d->bmask = m->mask;
        d->fmask = m->data;
    }
    d->alibi = o->alibi_slopes;
    for (int64_t h = 0; d->alibi && h < d->H; h++)
        if (!isfinite(d->alibi[h]))
            return qkv_fail(QKV_ERR_ARG, "sdpa: alibi_slopes[%lld] is %g, not finite", (long long)h,
                            d->alibi[h]);
    const qkv_tensor *kp = o->key_padding_mask;
    if (kp) {
        if (kp->dtype != QKV_BOOL && kp->dtype != QKV_F32)
            return qkv_fail(QKV_ERR_DTYPE, "sdpa: key_padding_mask must be BOOL or F32");
        if (kp->ndim != 2 || kp->shape[0] != d->N || kp->shape[1] != mk)
            return qkv_fail(QKV_ERR_SHAPE, "sdpa: key_padding_mask %s, expected (N,S) = (%lld,%lld)",
                            qkv_shape_str(kp, b, sizeof b), (long long)d->N, (long long)mk);
        d->kpm = kp->mask;
        d->kpm_f = kp->data;
    }
    return QKV_OK;
}

/* d's scale, dropout and precision from o and c (after sdpa_masks). */
static qkv_status sdpa_setup(qkv_ctx *c, const qkv_sdpa_opts *o, qkv_attn_desc *d)
{
    float scale = isnan(o->scale) ? (d->D > 0 ? 1.0f / sqrtf((float)d->D) : 1.0f) : o->scale;
    if (!isfinite(scale)) return qkv_fail(QKV_ERR_ARG, "sdpa: scale %g is not finite", scale);
    d->scale = scale;
    if (!(o->dropout_p >= 0.0f && o->dropout_p <= 1.0f))
        return qkv_fail(QKV_ERR_ARG, "sdpa: dropout_p %g outside [0,1]", o->dropout_p);
    d->dropout_p = qkv_ctx_training(c) ? o->dropout_p : 0.0f;
    if (d->dropout_p > 0) d->dropout_seed = qkv_ctx_next_seed(c);
    /* The ctx's BF16 mode: the fast path's products with bf16 operands
     * (kernels/attention_bf16.h); the reference kernel stays FP32. */
    d->bf16 = qkv_ctx_precision(c) == QKV_BF16;
    return QKV_OK;
}

/* The fast kernels' forward into out and lse, their scratch taken from
 * the arena and given back. */
static qkv_status sdpa_flash(qkv_ctx *c, const qkv_attn_desc *d, const float *q, const float *k,
                             const float *v, float *out, float *lse)
{
    qkv_arena *ar = qkv_ctx_arena(c);
    qkv_arena_mark mark = qkv_arena_get_mark(ar);
    int threads = omp_get_max_threads();
    float *scratch = qkv_arena_alloc_uninit(ar, qkv_attn_forward_scratch(d, threads) * sizeof(float));
    if (!scratch) return QKV_ERR_NOMEM;
    qkv_attn_forward_flash(d, q, k, v, out, lse, scratch, threads);
    qkv_arena_release(ar, mark);
    return QKV_OK;
}

/* The tape entry of either forward. */
static qkv_status sdpa_record(qkv_ctx *c, sdpa_saved saved)
{
    sdpa_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = saved;
    return qkv_ctx_record(c, sdpa_backward, s);
}

qkv_status qkv_sdpa(qkv_ctx *c, qkv_tensor *q, qkv_tensor *k, qkv_tensor *v,
                    const qkv_sdpa_opts *opts, qkv_tensor **out, qkv_tensor **weights)
{
    QKV_NEED(out, "sdpa", "out");
    *out = NULL;
    if (weights) *weights = NULL;
    QKV_NEED(c, "sdpa", "ctx");
    QKV_NEED(q, "sdpa", "query");
    QKV_NEED(k, "sdpa", "key");
    QKV_NEED(v, "sdpa", "value");
    qkv_sdpa_opts o = opts ? *opts : qkv_sdpa_opts_default();
    if (!weights) o.need_weights = 0; /* NULL: don't compute them */
    qkv_attn_desc d = {0};
    qkv_tensor *in[3] = {q, k, v};
    int rec = qkv_ctx_recording(c, in, 3);
    if (o.enable_gqa) QKV_TRY(sdpa_gqa(c, q, rec, &k, &v, &d.group));
    QKV_TRY(sdpa_shapes(q, k, v, &d));
    QKV_TRY(sdpa_masks(&o, &d));
    QKV_TRY(sdpa_setup(c, &o, &d));
    int h = q->ndim == 4;
    int64_t oshape[4] = {d.N, d.H, d.L, d.Dv};
    /* out and lse: every element written by either kernel */
    QKV_TRY(qkv_ctx_tensor_uninit(c, q->ndim, h ? oshape : (int64_t[]){d.N, d.L, d.Dv}, rec, out));
    float *lse = qkv_ctx_alloc_uninit(c, (size_t)(d.N * d.H * d.L) * sizeof(float)); // (N,H,L)
    float *w = NULL;
    if (!lse) return QKV_ERR_NOMEM;
    if (o.need_weights) {
        int64_t wshape[4] = {d.N, d.H, d.L, d.S};
        QKV_TRY(qkv_tensor_new(qkv_ctx_arena(c), QKV_F32, h ? 4 : 3,
                               h ? wshape : (int64_t[]){d.N, d.L, d.S}, weights));
        w = (*weights)->data;
    }
    if (qkv_reference()) {
        qkv_arena *ar = qkv_ctx_arena(c);
        qkv_arena_mark mark = qkv_arena_get_mark(ar); /* kernel scratch, released below */
        double *scratch = qkv_arena_alloc(ar, qkv_attn_ref_scratch(&d) * sizeof(double));
        if (!scratch) return QKV_ERR_NOMEM;
        qkv_attn_forward_ref(&d, q->data, k->data, v->data, (*out)->data, lse, w, scratch);
        qkv_arena_release(ar, mark);
    } else {
        QKV_TRY(sdpa_flash(c, &d, q->data, k->data, v->data, (*out)->data, lse));
        if (w) qkv_attn_weights(&d, q->data, k->data, lse, w);
    }
    return rec ? sdpa_record(c, (sdpa_saved){d, q, k, v, *out, lse, 0}) : QKV_OK;
}

qkv_status mha_attend_packed(qkv_ctx *c, qkv_tensor *y, int bf, int64_t H, const qkv_sdpa_opts *o,
                             qkv_tensor **out)
{
    int64_t A = y->shape[0], B = y->shape[1], E = y->shape[2] / 3, hd = E / H;
    int64_t N = bf ? A : B, L = bf ? B : A;
    qkv_attn_desc d = {.N = N, .H = H, .L = L, .S = L, .D = hd, .Dv = hd};
    /* row (n, l) of y at (n L + l) 3E when bf, else (l N + n) 3E; head h
     * from column h hd of each third */
    d.q_rows = d.k_rows = d.v_rows = bf ? (qkv_attn_rows){L * 3 * E, hd, 3 * E} : (qkv_attn_rows){3 * E, hd, N * 3 * E};
    d.o_rows = bf ? (qkv_attn_rows){L * E, hd, E} : (qkv_attn_rows){E, hd, N * E};
    QKV_TRY(sdpa_masks(o, &d));
    QKV_TRY(sdpa_setup(c, o, &d));
    qkv_tensor *in[1] = {y};
    int rec = qkv_ctx_recording(c, in, 1);
    QKV_TRY(qkv_ctx_tensor_uninit(c, 3, (int64_t[]){A, B, E}, rec, out)); /* every element written */
    float *lse = qkv_ctx_alloc_uninit(c, (size_t)(N * H * L) * sizeof(float)); // (N,H,L)
    if (!lse) return QKV_ERR_NOMEM;
    QKV_TRY(sdpa_flash(c, &d, y->data, y->data + E, y->data + 2 * E, (*out)->data, lse));
    return rec ? sdpa_record(c, (sdpa_saved){d, y, y, y, *out, lse, E}) : QKV_OK;
}
