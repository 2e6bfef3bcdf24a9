/* mha_internal.h: the pieces of MultiheadAttention's forward (mha.c) that
 * the KV cache's attention (src/models/kvcache.c) runs too, so that both
 * project and split heads with one piece of code: a change to the
 * projections or the head layout (grouped-query attention, say) is made
 * here once. All are ops on the tape (differentiable), unchecked: the
 * callers check shapes. */
#ifndef QKV_MHA_INTERNAL_H
#define QKV_MHA_INTERNAL_H
#include "core/internal.h"

/* An attention's first checks: out (then *out and *weights, which may be
 * NULL, cleared) and the context. */
static inline qkv_status attn_out_args(const char *fn, qkv_ctx *c, qkv_tensor **out, qkv_tensor **weights)
{
    QKV_NEED(out, fn, "out");
    *out = NULL;
    if (weights) *weights = NULL;
    QKV_NEED(c, fn, "ctx");
    return QKV_OK;
}

/* Its query, key and value, in that order. */
static inline qkv_status attn_qkv_args(const char *fn, const qkv_tensor *q, const qkv_tensor *k,
                                       const qkv_tensor *v)
{
    QKV_NEED(q, fn, "query");
    QKV_NEED(k, fn, "key");
    QKV_NEED(v, fn, "value");
    return QKV_OK;
}

/* Which in-projection: the query's, the key's or the value's. */
typedef enum { MHA_Q = 0, MHA_K = 1, MHA_V = 2 } mha_which;

/* The in-projection of one of q, k, v, heads split: x (L,N,E_x), or
 * (N,L,E_x) when bf, with E_x = embed_dim, kdim or vdim -> x W^T + b
 * reshaped and permuted to (N,H,L,hd). W is the packed in_proj_weight's
 * row block (rows [which*E, (which+1)*E)) or the separate q/k/v weight; b
 * the in_proj_bias's chunk, none without bias. */
qkv_status mha_project_heads(qkv_ctx *c, const qkv_mha *m, mha_which which, qkv_tensor *x,
                             int bf, qkv_tensor **out);

/* The in-projections of query, key and value, heads split (N,H,L,hd)
 * each: for self-attention (the same tensor three times) with the packed
 * in_proj_weight one product (A,B,3E) and one split (PyTorch's
 * _in_projection_packed), else mha_project_heads three times. */
qkv_status mha_project_qkv(qkv_ctx *c, const qkv_mha *m, qkv_tensor *query, qkv_tensor *key,
                           qkv_tensor *value, int bf, qkv_tensor **q, qkv_tensor **k, qkv_tensor **v);

/* The rotary module's rotation of q or k (N,H,L,hd) at positions, I64
 * (N,L) or NULL for 0..L-1 (qkv_rope, rotate_half, m->o.rotary_base). */
qkv_status mha_rotate(qkv_ctx *c, const qkv_mha *m, const qkv_tensor *positions, qkv_tensor *x,
                      qkv_tensor **y);

/* Self-attention on the packed in-projection y (A,B,3E) = (N,L,3E) when
 * bf, else (L,N,3E), H heads: q, k and v read where they lie in y (no head
 * split), the output written as (A,B,E) (no merge), o's masks, dropout
 * and scale as qkv_sdpa's, with the fast kernels (callers take the split
 * path under qkv_reference()); the backward writes y's gradient. */
qkv_status mha_attend_packed(qkv_ctx *c, qkv_tensor *y, int bf, int64_t H, const qkv_sdpa_opts *o,
                             qkv_tensor **out);

/* The heads merged and the out-projection: o (N,H,L,hd) -> (L,N,E), or
 * (N,L,E) when bf -> out_proj (y like the merged tensor). */
qkv_status mha_merge_heads(qkv_ctx *c, const qkv_mha *m, qkv_tensor *o, int bf, qkv_tensor **y);

#endif
