/* mha.c: torch.nn.MultiheadAttention: options, parameters with PyTorch's
 * names and initialisation, and the forward written once as ops (the tape
 * gives the backward). The steps follow F.multi_head_attention_forward:
 * in-projection, head split, (qkv's rotary positions,) bias_k/bias_v,
 * zero attention, attention, head merge, out-projection. The in-projection
 * with its head split, the rotation, and the head merge with the out-projection, are also what the KV cache's
 * attention runs (mha_internal.h, src/models/kvcache.c). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "attention/mha_internal.h"

qkv_mha_opts qkv_mha_opts_default(int64_t embed_dim, int64_t num_heads)
{
    qkv_mha_opts o = {0};
    o.embed_dim = embed_dim;
    o.num_heads = num_heads;
    o.bias = 1;
    return o;
}

qkv_mha_args qkv_mha_args_default(void)
{
    qkv_mha_args a = {0};
    a.need_weights = 1;
    a.average_attn_weights = 1;
    a.window = -1;
    return a;
}

static qkv_status mha_check_opts(const qkv_mha_opts *o)
{
    if (o->embed_dim <= 0 || o->num_heads <= 0)
        return qkv_fail(QKV_ERR_ARG, "mha_init: embed_dim %lld and num_heads %lld must be positive",
                        (long long)o->embed_dim, (long long)o->num_heads);
    if (o->embed_dim % o->num_heads)
        return qkv_fail(QKV_ERR_ARG, "mha_init: embed_dim %lld not divisible by num_heads %lld",
                        (long long)o->embed_dim, (long long)o->num_heads);
    if (o->kdim < 0 || o->vdim < 0)
        return qkv_fail(QKV_ERR_ARG, "mha_init: kdim %lld and vdim %lld must not be negative",
                        (long long)o->kdim, (long long)o->vdim);
    if (!(o->dropout >= 0.0f && o->dropout <= 1.0f))
        return qkv_fail(QKV_ERR_ARG, "mha_init: dropout %g outside [0,1]", o->dropout);
    if (o->rotary && (o->embed_dim / o->num_heads) % 2)
        return qkv_fail(QKV_ERR_ARG, "mha_init: rotary positions need an even head_dim, not %lld "
                        "(embed_dim %lld / num_heads %lld)", (long long)(o->embed_dim / o->num_heads),
                        (long long)o->embed_dim, (long long)o->num_heads);
    if (o->rotary && !(o->rotary_base >= 0.0f && isfinite(o->rotary_base)))
        return qkv_fail(QKV_ERR_ARG, "mha_init: rotary_base %g must be positive and finite (0: 10000)",
                        (double)o->rotary_base);
    return QKV_OK;
}

qkv_status qkv_mha_init(qkv_mha *m, const qkv_mha_opts *o, qkv_params *p, const char *prefix,
                        qkv_rng *rng)
{
    QKV_NEED(m, "mha_init", "m");
    QKV_NEED(o, "mha_init", "opts");
    QKV_NEED(p, "mha_init", "params");
    QKV_NEED(rng, "mha_init", "rng");
    QKV_TRY(mha_check_opts(o));
    *m = (qkv_mha){0};
    m->o = *o;
    int64_t E = o->embed_dim;
    if (!m->o.kdim) m->o.kdim = E;
    if (!m->o.vdim) m->o.vdim = E;
    m->head_dim = E / o->num_heads;
    m->packed = m->o.kdim == E && m->o.vdim == E;
    /* Registration order and initialisers of nn.MultiheadAttention. */
    if (m->packed) {
        QKV_TRY(qkv_params_add(p, prefix, "in_proj_weight", 2, (int64_t[]){3 * E, E}, &m->in_proj_weight));
        QKV_TRY(qkv_init_xavier_uniform(rng, m->in_proj_weight, 1.0f));
    } else {
        QKV_TRY(qkv_params_add(p, prefix, "q_proj_weight", 2, (int64_t[]){E, E}, &m->q_proj_weight));
        QKV_TRY(qkv_params_add(p, prefix, "k_proj_weight", 2, (int64_t[]){E, m->o.kdim}, &m->k_proj_weight));
        QKV_TRY(qkv_params_add(p, prefix, "v_proj_weight", 2, (int64_t[]){E, m->o.vdim}, &m->v_proj_weight));
        QKV_TRY(qkv_init_xavier_uniform(rng, m->q_proj_weight, 1.0f));
        QKV_TRY(qkv_init_xavier_uniform(rng, m->k_proj_weight, 1.0f));
        QKV_TRY(qkv_init_xavier_uniform(rng, m->v_proj_weight, 1.0f));
    }
    if (o->bias) /* zeros */
        QKV_TRY(qkv_params_add(p, prefix, "in_proj_bias", 1, (int64_t[]){3 * E}, &m->in_proj_bias));
    if (o->add_bias_kv) {
        QKV_TRY(qkv_params_add(p, prefix, "bias_k", 3, (int64_t[]){1, 1, E}, &m->bias_k));
        QKV_TRY(qkv_params_add(p, prefix, "bias_v", 3, (int64_t[]){1, 1, E}, &m->bias_v));
        QKV_TRY(qkv_init_xavier_normal(rng, m->bias_k, 1.0f));
        QKV_TRY(qkv_init_xavier_normal(rng, m->bias_v, 1.0f));
    }
    QKV_TRY(qkv_params_add(p, prefix, "out_proj.weight", 2, (int64_t[]){E, E}, &m->out_proj_weight));
    QKV_TRY(qkv_init_linear_default(rng, m->out_proj_weight));
    if (o->bias) /* zeros: _reset_parameters overrides Linear's bias init */
        QKV_TRY(qkv_params_add(p, prefix, "out_proj.bias", 1, (int64_t[]){E}, &m->out_proj_bias));
    return QKV_OK;
}

/* Shapes of one forward call, batch-first or not, batched or not. */
typedef struct {
    int batched;
    int64_t N, L, S;
} mha_dims;

/* An argument with one entry per position of len (key_padding_mask: S,
 * positions: L): (N,len) batched, (len) unbatched ("(S) = " in the
 * message names it). */
static qkv_status check_per_position(const qkv_tensor *t, const char *arg, const mha_dims *dm, int64_t len,
                                     const char *unbatched)
{
    int ok = dm->batched ? t->ndim == 2 && t->shape[0] == dm->N && t->shape[1] == len
                         : t->ndim == 1 && t->shape[0] == len;
    if (ok) return QKV_OK;
    char b[64];
    return qkv_fail(QKV_ERR_SHAPE, "mha_forward: %s %s, expected %s(%lld,%lld)", arg,
                    qkv_shape_str(t, b, sizeof b), dm->batched ? "" : unbatched,
                    (long long)(dm->batched ? dm->N : len), (long long)len);
}

static qkv_status mha_check_inputs(const qkv_mha *m, const qkv_tensor *q, const qkv_tensor *k,
                                   const qkv_tensor *v, const qkv_mha_args *a, mha_dims *dm)
{
    char bq[64], bk[64], bv[64], b[64];
    const qkv_tensor *t[3] = {q, k, v};
    const char *nm[3] = {"query", "key", "value"};
    for (int i = 0; i < 3; i++) {
        if (t[i]->dtype != QKV_F32) return qkv_fail(QKV_ERR_DTYPE, "mha_forward: %s is not F32", nm[i]);
        if (t[i]->ndim != 2 && t[i]->ndim != 3)
            return qkv_fail(QKV_ERR_SHAPE, "mha_forward: %s %s has %d dims, expected 2 or 3", nm[i],
                            qkv_shape_str(t[i], b, sizeof b), t[i]->ndim);
    }
    qkv_shape_str(q, bq, sizeof bq);
    qkv_shape_str(k, bk, sizeof bk);
    qkv_shape_str(v, bv, sizeof bv);
    if (k->ndim != q->ndim || v->ndim != q->ndim)
        return qkv_fail(QKV_ERR_SHAPE, "mha_forward: query %s, key %s and value %s must all be "
                        "batched (3 dims) or all unbatched (2 dims)", bq, bk, bv);
    dm->batched = q->ndim == 3;
    int bf = dm->batched && m->o.batch_first;
    int ld = bf ? 1 : 0, nd = bf ? 0 : 1; /* dim of the sequence, of the batch */
    dm->L = q->shape[ld];
    dm->S = k->shape[ld];
    dm->N = dm->batched ? q->shape[nd] : 1;
    int last = q->ndim - 1;
    if (q->shape[last] != m->o.embed_dim)
        return qkv_fail(QKV_ERR_SHAPE, "mha_forward: query %s last dim is not embed_dim %lld", bq,
                        (long long)m->o.embed_dim);
    if (k->shape[last] != m->o.kdim)
        return qkv_fail(QKV_ERR_SHAPE, "mha_forward: key %s last dim is not kdim %lld", bk,
                        (long long)m->o.kdim);
    if (v->shape[last] != m->o.vdim)
        return qkv_fail(QKV_ERR_SHAPE, "mha_forward: value %s last dim is not vdim %lld", bv,
                        (long long)m->o.vdim);
    if (v->shape[ld] != dm->S || (dm->batched && (k->shape[nd] != dm->N || v->shape[nd] != dm->N)))
        return qkv_fail(QKV_ERR_SHAPE, "mha_forward: query %s, key %s, value %s: batch sizes or "
                        "key/value lengths differ", bq, bk, bv);
    const qkv_tensor *kp = a->key_padding_mask, *am = a->attn_mask;
    if (kp) {
        if (kp->dtype != QKV_BOOL && kp->dtype != QKV_F32)
            return qkv_fail(QKV_ERR_DTYPE, "mha_forward: key_padding_mask must be BOOL or F32");
        QKV_TRY(check_per_position(kp, "key_padding_mask", dm, dm->S, "(S) = "));
    }
    if (am) {
        if (am->dtype != QKV_BOOL && am->dtype != QKV_F32)
            return qkv_fail(QKV_ERR_DTYPE, "mha_forward: attn_mask must be BOOL or F32");
        int64_t NH = dm->N * m->o.num_heads;
        int ok = (am->ndim == 2 && am->shape[0] == dm->L && am->shape[1] == dm->S) ||
                 (am->ndim == 3 && am->shape[0] == NH && am->shape[1] == dm->L && am->shape[2] == dm->S);
        if (!ok)
            return qkv_fail(QKV_ERR_SHAPE, "mha_forward: attn_mask %s, expected (L,S) = (%lld,%lld) or "
                            "(N*num_heads,L,S) = (%lld,%lld,%lld)", qkv_shape_str(am, b, sizeof b),
                            (long long)dm->L, (long long)dm->S, (long long)NH, (long long)dm->L,
                            (long long)dm->S);
    }
    const qkv_tensor *pos = a->positions;
    if (pos && !m->o.rotary)
        return qkv_fail(QKV_ERR_ARG, "mha_forward: positions given to a module without rotary positions");
    if (m->o.rotary && dm->S != dm->L)
        return qkv_fail(QKV_ERR_SHAPE, "mha_forward: rotary positions are for self-attention: key %s "
                        "has %lld positions, query %s %lld", bk, (long long)dm->S, bq, (long long)dm->L);
    if (pos) {
        if (pos->dtype != QKV_I64 || !pos->idx)
            return qkv_fail(QKV_ERR_DTYPE, "mha_forward: positions must be I64");
        QKV_TRY(check_per_position(pos, "positions", dm, dm->L, "(L) = "));
    }
    if (a->causal != QKV_CAUSAL_NONE && a->causal != QKV_CAUSAL_TOP_LEFT &&
        a->causal != QKV_CAUSAL_BOTTOM_RIGHT)
        return qkv_fail(QKV_ERR_ARG, "mha_forward: causal is %d, not a qkv_causal value", (int)a->causal);
    return QKV_OK;
}

/* Rows [i*E, (i+1)*E) of the packed in-projection weight or bias. */
static qkv_status mha_chunk(qkv_ctx *c, qkv_tensor *t, int i, int64_t E, qkv_tensor **out)
{
    *out = NULL;
    if (!t) return QKV_OK;
    return qkv_tensor_narrow(qkv_ctx_arena(c), t, i * E, E, out);
}

qkv_status mha_project_heads(qkv_ctx *c, const qkv_mha *m, mha_which which, qkv_tensor *x,
                             int bf, qkv_tensor **out)
{
    int64_t E = m->o.embed_dim, H = m->o.num_heads, hd = m->head_dim;
    qkv_tensor *sep[3] = {m->q_proj_weight, m->k_proj_weight, m->v_proj_weight};
    qkv_tensor *w = sep[which], *b, *y, *y4; // (E,E_x), (E), (A,B,E), (A,B,H,hd); x (A,B,E_x)
    if (m->packed) QKV_TRY(mha_chunk(c, m->in_proj_weight, which, E, &w));
    QKV_TRY(mha_chunk(c, m->in_proj_bias, which, E, &b));
    QKV_TRY(qkv_linear(c, x, w, b, &y));
    QKV_TRY(qkv_reshape(c, y, 4, (int64_t[]){x->shape[0], x->shape[1], H, hd}, &y4));
    return qkv_permute(c, y4, bf ? (int[]){0, 2, 1, 3} : (int[]){1, 2, 0, 3}, out);
}

/* ---- the packed in-projection's three chunks, heads split ----------------
 * y (A,B,3E), the product x in_proj_weight^T + in_proj_bias of
 * self-attention (PyTorch's _in_projection_packed: one product, then
 * chunk(3)), with (A,B) = (N,L) when bf, else (L,N) -> q, k, v (N,H,L,hd),
 * each compact. One pass and one parallel region for all three (three
 * permutes before); the backward writes dy from dq, dk and dv. */
typedef struct {
    qkv_tensor *y, *out[3];
    int64_t N, L, H, hd;
    int bf;
} split3_saved;

/* mode 0: y -> q,k,v; 1: dq,dk,dv added into dy; 2: written into a new dy */
static void split3_walk(const split3_saved *s, float *y, float *const o[3], int mode)
{
    const int64_t N = s->N, L = s->L, H = s->H, hd = s->hd, E = H * hd;
    QKV_PAR_FOR_WITH(3 * N * L * E >= QKV_PAR_MIN, collapse(3),
        for (int t = 0; t < 3; t++)
            for (int64_t n = 0; n < N; n++)
                for (int64_t h = 0; h < H; h++)
                    for (int64_t l = 0; l < L; l++) {
                        float *yr = y + (s->bf ? n * L + l : l * N + n) * 3 * E + t * E + h * hd; // (hd)
                        float *orow = o[t] + ((n * H + h) * L + l) * hd;                           // (hd)
                        if (mode == 0)
                            for (int64_t d = 0; d < hd; d++) orow[d] = yr[d];
                        else if (mode == 1)
                            for (int64_t d = 0; d < hd; d++) yr[d] += orow[d];
                        else
                            for (int64_t d = 0; d < hd; d++) yr[d] = orow[d];
                    });
}

static qkv_status split3_backward(qkv_ctx *c, void *p)
{
    split3_saved *s = p;
    if (!s->y->requires_grad) return QKV_OK;
    qkv_arena *a = qkv_ctx_arena(c);
    float *g[3];
    for (int t = 0; t < 3; t++) { /* a chunk that got no gradient reads as zeros */
        g[t] = s->out[t]->grad ? s->out[t]->grad : qkv_tensor_grad(a, s->out[t]);
        if (!g[t]) return QKV_ERR_NOMEM;
    }
    int fresh;
    float *dy = qkv_tensor_grad_fresh(a, s->y, &fresh);
    if (!dy) return QKV_ERR_NOMEM;
    split3_walk(s, dy, g, fresh ? 2 : 1);
    return QKV_OK;
}

static qkv_status mha_split3(qkv_ctx *c, qkv_tensor *y, int bf, int64_t H, qkv_tensor *out[3])
{
    int64_t A = y->shape[0], B = y->shape[1], hd = y->shape[2] / 3 / H;
    split3_saved s = {y, {NULL, NULL, NULL}, bf ? A : B, bf ? B : A, H, hd, bf};
    qkv_tensor *in[1] = {y};
    int rec = qkv_ctx_recording(c, in, 1);
    float *o[3];
    for (int t = 0; t < 3; t++) {
        QKV_TRY(qkv_ctx_tensor_uninit(c, 4, (int64_t[]){s.N, H, s.L, hd}, rec, &out[t])); /* all written */
        o[t] = out[t]->data;
    }
    memcpy(s.out, (qkv_tensor *[]){out[0], out[1], out[2]}, sizeof s.out);
    split3_walk(&s, y->data, o, 0);
    if (!rec) return QKV_OK;
    split3_saved *sv = qkv_ctx_alloc(c, sizeof *sv);
    if (!sv) return QKV_ERR_NOMEM;
    *sv = s;
    return qkv_ctx_record(c, split3_backward, sv);
}

qkv_status mha_project_qkv(qkv_ctx *c, const qkv_mha *m, qkv_tensor *query, qkv_tensor *key,
                           qkv_tensor *value, int bf, qkv_tensor **q, qkv_tensor **k, qkv_tensor **v)
{
    if (!m->packed || query != key || key != value) {
        QKV_TRY(mha_project_heads(c, m, MHA_Q, query, bf, q));
        QKV_TRY(mha_project_heads(c, m, MHA_K, key, bf, k));
        return mha_project_heads(c, m, MHA_V, value, bf, v);
    }
    qkv_tensor *y, *out[3]; // (A,B,3E); (N,H,L,hd) each
    QKV_TRY(qkv_linear(c, query, m->in_proj_weight, m->in_proj_bias, &y));
    QKV_TRY(mha_split3(c, y, bf, m->o.num_heads, out));
    *q = out[0], *k = out[1], *v = out[2];
    return QKV_OK;
}

qkv_status mha_rotate(qkv_ctx *c, const qkv_mha *m, const qkv_tensor *positions, qkv_tensor *x,
                      qkv_tensor **y)
{
    qkv_rope_opts ro = qkv_rope_opts_default();
    ro.layout = QKV_ROPE_HALF;
    ro.base = m->o.rotary_base > 0.0f ? m->o.rotary_base : 10000.0f;
    ro.positions = positions;
    return qkv_rope(c, x, &ro, y);
}

/* The rotary positions (N,L) of a forward: args->positions as (N,L), or
 * counted from the key padding mask (padding: BOOL true, F32 -inf), or
 * NULL (0..L-1) without one. */
static qkv_status mha_positions(qkv_ctx *c, const qkv_mha_args *a, const mha_dims *dm,
                                qkv_tensor **pos)
{
    qkv_arena *ar = qkv_ctx_arena(c);
    int64_t N = dm->N, L = dm->L;
    *pos = NULL;
    if (a->positions)
        return qkv_tensor_view(ar, (qkv_tensor *)a->positions, 2, (int64_t[]){N, L}, pos);
    const qkv_tensor *kp = a->key_padding_mask; // (N,L) or (L)
    if (!kp) return QKV_OK;
    QKV_TRY(qkv_tensor_new(ar, QKV_I64, 2, (int64_t[]){N, L}, pos));
    for (int64_t n = 0; n < N; n++) {
        int64_t p = 0;
        for (int64_t t = 0; t < L; t++) {
            int64_t i = n * L + t;
            (*pos)->idx[i] = p;
            p += kp->dtype == QKV_BOOL ? !kp->mask[i] : !(isinf(kp->data[i]) && kp->data[i] < 0);
        }
    }
    return QKV_OK;
}

qkv_status mha_merge_heads(qkv_ctx *c, const qkv_mha *m, qkv_tensor *o, int bf, qkv_tensor **y)
{
    int64_t N = o->shape[0], L = o->shape[2], E = m->o.embed_dim;
    qkv_tensor *om, *o3; // (N,L,H,hd) or (L,N,H,hd), then (N,L,E) or (L,N,E)
    QKV_TRY(qkv_permute(c, o, bf ? (int[]){0, 2, 1, 3} : (int[]){2, 0, 1, 3}, &om));
    QKV_TRY(qkv_reshape(c, om, 3, bf ? (int64_t[]){N, L, E} : (int64_t[]){L, N, E}, &o3));
    return qkv_linear(c, o3, m->out_proj_weight, m->out_proj_bias, y);
}

/* weights (N,H,L,S') -> averaged (N,L,S') (sum / H, as PyTorch), and
 * without N when unbatched. Not differentiable. */
static qkv_status mha_weights(qkv_ctx *c, const qkv_mha *m, const qkv_mha_args *a,
                              const mha_dims *dm, qkv_tensor *w, qkv_tensor **out)
{
    int64_t N = w->shape[0], H = w->shape[1], L = w->shape[2], S = w->shape[3];
    qkv_tensor *r = w;
    if (a->average_attn_weights) {
        QKV_TRY(qkv_tensor_new(qkv_ctx_arena(c), QKV_F32, 3, (int64_t[]){N, L, S}, &r));
        for (int64_t n = 0; n < N; n++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < L * S; i++) r->data[n * L * S + i] += w->data[(n * H + h) * L * S + i];
        for (int64_t i = 0; i < N * L * S; i++) r->data[i] /= (float)H;
    }
    r->requires_grad = 0;
    if (!dm->batched) /* drop N = 1 */
        return qkv_tensor_view(qkv_ctx_arena(c), r, r->ndim - 1, r->shape + 1, out);
    *out = r;
    return QKV_OK;
}

qkv_status qkv_mha_forward(qkv_ctx *c, const qkv_mha *m, qkv_tensor *query, qkv_tensor *key,
                           qkv_tensor *value, const qkv_mha_args *args, qkv_tensor **out,
                           qkv_tensor **weights)
{
    QKV_TRY(attn_out_args("mha_forward", c, out, weights));
    QKV_NEED(m, "mha_forward", "module");
    QKV_TRY(attn_qkv_args("mha_forward", query, key, value));
    if (!m->out_proj_weight || m->head_dim <= 0)
        return qkv_fail(QKV_ERR_STATE, "mha_forward: module is not initialised (call qkv_mha_init)");
    qkv_mha_args a = args ? *args : qkv_mha_args_default();
    /* A NULL weights pointer means "don't compute them", whatever
     * need_weights says (its default stays PyTorch's True). */
    if (!weights) a.need_weights = 0;
    mha_dims dm = {0};
    QKV_TRY(mha_check_inputs(m, query, key, value, &a, &dm));
    int64_t E = m->o.embed_dim;
    qkv_arena *ar = qkv_ctx_arena(c);

    int self = query == key && key == value;
    /* Unbatched inputs become batched with N = 1 ((L,E) -> (L,1,E)). */
    if (!dm.batched) {
        QKV_TRY(qkv_reshape(c, query, 3, (int64_t[]){dm.L, 1, E}, &query));
        QKV_TRY(qkv_reshape(c, key, 3, (int64_t[]){dm.S, 1, m->o.kdim}, &key));
        QKV_TRY(qkv_reshape(c, value, 3, (int64_t[]){dm.S, 1, m->o.vdim}, &value));
    }
    qkv_sdpa_opts so = qkv_sdpa_opts_default();
    so.attn_mask = a.attn_mask;
    so.key_padding_mask = a.key_padding_mask;
    if (so.key_padding_mask && !dm.batched) {
        qkv_tensor *kp;
        QKV_TRY(qkv_tensor_view(ar, (qkv_tensor *)a.key_padding_mask, 2, (int64_t[]){1, dm.S}, &kp));
        so.key_padding_mask = kp;
    }
    so.causal = a.causal;
    so.window = a.window;
    so.alibi_slopes = a.alibi_slopes;
    so.dropout_p = m->o.dropout;
    int capture = qkv_ctx_capturing(c); /* the weights for figures, asked for or not */
    so.need_weights = a.need_weights || capture;
    so.mask_keys = dm.S;
    int bf = dm.batched && m->o.batch_first;
    /* Self-attention with the packed weight, nothing between the
     * projection and the attention, no weights asked for: one product, the
     * heads read and written in place (no split, no merge), the
     * out-projection. The same numbers as the path below. */
    if (self && m->packed && !m->o.rotary && !m->bias_k && !m->o.add_zero_attn && !so.need_weights &&
        !qkv_reference() && dm.N > 0 && dm.L > 0) {
        qkv_tensor *y, *o3; // (A,B,3E), (A,B,E)
        QKV_TRY(qkv_linear(c, query, m->in_proj_weight, m->in_proj_bias, &y));
        QKV_TRY(mha_attend_packed(c, y, bf, m->o.num_heads, &so, &o3));
        QKV_TRY(qkv_linear(c, o3, m->out_proj_weight, m->out_proj_bias, out));
        if (!dm.batched) QKV_TRY(qkv_reshape(c, *out, 2, (int64_t[]){dm.L, E}, out));
        return QKV_OK;
    }
    /* In-projection (the packed weight's row blocks, or the three weights),
     * heads split. */
    qkv_tensor *q, *k, *v; // (N,H,L,hd), (N,H,S,hd), (N,H,S,hd)
    QKV_TRY(mha_project_qkv(c, m, query, key, value, bf, &q, &k, &v));
    if (m->o.rotary) { /* q and k rotated to their positions */
        qkv_tensor *pos; // (N,L) I64 or NULL
        QKV_TRY(mha_positions(c, &a, &dm, &pos));
        QKV_TRY(mha_rotate(c, m, pos, q, &q));
        QKV_TRY(mha_rotate(c, m, pos, k, &k));
    }
    /* Extra keys the masks never cover: bias_k/bias_v, then a zero key. */
    if (m->bias_k) {
        QKV_TRY(qkv_append_row(c, k, m->bias_k, &k));
        QKV_TRY(qkv_append_row(c, v, m->bias_v, &v));
    }
    if (m->o.add_zero_attn) {
        QKV_TRY(qkv_append_row(c, k, NULL, &k));
        QKV_TRY(qkv_append_row(c, v, NULL, &v));
    }
    qkv_tensor *o, *w = NULL; // (N,H,L,hd), (N,H,L,S')
    QKV_TRY(qkv_sdpa(c, q, k, v, &so, &o, so.need_weights ? &w : NULL));
    if (capture) QKV_TRY(qkv_ctx_capture_add(c, w));
    /* Merge heads back to the input layout, then the out-projection. */
    QKV_TRY(mha_merge_heads(c, m, o, bf, out));
    if (!dm.batched) QKV_TRY(qkv_reshape(c, *out, 2, (int64_t[]){dm.L, E}, out));
    if (a.need_weights) QKV_TRY(mha_weights(c, m, &a, &dm, w, weights));
    return QKV_OK;
}
