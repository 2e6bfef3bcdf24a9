/* qkv/attention.h: scaled dot-product attention with every mask,
 * torch.nn.MultiheadAttention, and the lecture notes' score functions
 * (included by qkv.h). */
#include "qkv.h" /* first: qkv.h includes every area header in order */
#ifndef QKV_ATTENTION_H
#define QKV_ATTENTION_H
#ifdef __cplusplus
extern "C" {
#endif

/* ---- scaled dot-product attention ------------------------------------- */

typedef enum {
    QKV_CAUSAL_NONE = 0,
    QKV_CAUSAL_TOP_LEFT,     /* key j masked when j > i (PyTorch's is_causal) */
    QKV_CAUSAL_BOTTOM_RIGHT  /* key j masked when j > i + (S - L): decoding with a cache */
} qkv_causal;

typedef struct {
    float scale;        /* NAN (the default) means 1/sqrt(head_dim) */
    /* attn_mask: BOOL (true = masked out) or F32 (added to the scores);
     * shape (L,S), (N*H,L,S) or (N,H,L,S). NULL for none. */
    const qkv_tensor *attn_mask;
    /* key_padding_mask: BOOL (true = padding, masked) or F32 (added); (N,S). */
    const qkv_tensor *key_padding_mask;
    qkv_causal causal;
    /* Local attention: key j masked when |i' - j| > window, where i' is i
     * aligned as causal says (bottom-right when causal is BOTTOM_RIGHT).
     * Negative (the default) means no window. */
    int64_t window;
    float dropout_p;    /* on the weights, only in training mode */
    int need_weights;   /* also return the (N,H,L,S) weights (O(L*S) memory) */
    /* Keys at index >= mask_keys are never masked: MultiheadAttention's
     * bias_k and zero-attention keys. 0 (the default) means all S keys are
     * covered by the masks. */
    int64_t mask_keys;
    /* ALiBi: H slopes; score (h,i,j) gets -slopes[h] * |i' - j| added (i'
     * aligned as causal says), computed on the fly in O(L) memory. NULL for
     * none. */
    const float *alibi_slopes;
    /* Grouped-query attention (PyTorch 2.5's enable_gqa): 4-D k and v may
     * have Hkv heads where q has H, H a multiple of Hkv; query head h
     * attends with key/value head h / (H/Hkv), as if k and v were
     * repeat_interleave'd H/Hkv times over dim 1 (the gradients of a key
     * head sum over its group). Default 0: heads must match. */
    int enable_gqa;
} qkv_sdpa_opts;

QKV_API qkv_sdpa_opts qkv_sdpa_opts_default(void);

/* out = softmax(q k^T * scale + mask) v, rows with every key masked give 0.
 * q (N,H,L,D), k (N,H,S,D), v (N,H,S,Dv) -> out (N,H,L,Dv),
 * weights (N,H,L,S) when opts->need_weights and weights is not NULL (a NULL
 * weights means "don't compute them"; else *weights = NULL; weights may
 * be NULL). 3-D inputs (B,L,D) are taken as H = 1. */
QKV_API qkv_status qkv_sdpa(qkv_ctx *c, qkv_tensor *q, qkv_tensor *k, qkv_tensor *v,
                            const qkv_sdpa_opts *opts, qkv_tensor **out, qkv_tensor **weights);

/* ---- multi-head attention (torch.nn.MultiheadAttention) --------------- */

typedef struct {
    int64_t embed_dim, num_heads;
    float dropout;      /* default 0 */
    int bias;           /* default 1 */
    int add_bias_kv;    /* default 0 */
    int add_zero_attn;  /* default 0 */
    int64_t kdim, vdim; /* 0 (default) means embed_dim */
    int batch_first;    /* default 0: (L,N,E) */
    /* qkv's addition: rotary positions (RoPE, GPT-NeoX's rotate_half) on the
     * query and key of every head after the in-projection and head split,
     * before the scores (qkv_rope, QKV_ROPE_HALF); values untouched. For
     * self-attention (S == L); head_dim even. Default 0. */
    int rotary;
    float rotary_base;  /* the rotation's base; 0 (default) means 10000 */
} qkv_mha_opts;

QKV_API qkv_mha_opts qkv_mha_opts_default(int64_t embed_dim, int64_t num_heads);

typedef struct {
    qkv_mha_opts o;
    int64_t head_dim;
    int packed;  /* kdim == vdim == embed_dim: one in_proj_weight */
    /* Parameters (state_dict names); NULL where the options leave them out. */
    qkv_tensor *in_proj_weight;  /* (3E,E) when packed */
    qkv_tensor *q_proj_weight;   /* (E,E) when not packed */
    qkv_tensor *k_proj_weight;   /* (E,kdim) */
    qkv_tensor *v_proj_weight;   /* (E,vdim) */
    qkv_tensor *in_proj_bias;    /* (3E) when bias */
    qkv_tensor *bias_k, *bias_v; /* (1,1,E) when add_bias_kv */
    qkv_tensor *out_proj_weight; /* "out_proj.weight" (E,E) */
    qkv_tensor *out_proj_bias;   /* "out_proj.bias" (E) when bias */
} qkv_mha;

/* Creates the parameters in p under prefix (e.g. "layers.0.self_attn.", or
 * "" ) and initialises them as PyTorch does, drawing from rng. */
QKV_API qkv_status qkv_mha_init(qkv_mha *m, const qkv_mha_opts *o, qkv_params *p,
                                const char *prefix, qkv_rng *rng);

typedef struct {
    const qkv_tensor *key_padding_mask; /* BOOL or F32, (N,S) or (S) unbatched */
    int need_weights;                   /* default 1 */
    /* BOOL or F32: (L,S), or (N*H,L,S) batched, or (H,L,S) when the inputs
     * are unbatched (PyTorch's unbatched 3-D mask, one (L,S) per head). */
    const qkv_tensor *attn_mask;
    int average_attn_weights;           /* default 1 */
    qkv_causal causal;                  /* qkv's addition: a causal mask without a tensor */
    int64_t window;                     /* qkv's addition: local attention; -1 = none */
    const float *alibi_slopes;          /* qkv's addition: ALiBi, num_heads slopes, or NULL */
    /* Rotary modules only: I64 (N,L) ((L) unbatched), the position of each
     * query (and key) row, >= 0. NULL (default): a row's position is the
     * number of non-padding keys before it in key_padding_mask (BOOL true,
     * or F32 -inf, is padding), 0..L-1 without one: a left-padded row
     * starts at 0, as it would alone. */
    const qkv_tensor *positions;
} qkv_mha_args;

QKV_API qkv_mha_args qkv_mha_args_default(void);

/* query (L,N,E) ((N,L,E) with batch_first, (L,E) unbatched), key (S,N,kdim),
 * value (S,N,vdim) -> out like query; weights (N,L,S') averaged or
 * (N,H,L,S') per head (S' = S plus the bias_k and zero-attention keys),
 * unbatched without N; *weights is NULL when need_weights is 0.
 * weights may be NULL: the weights are then not computed, whatever
 * need_weights says (its default is PyTorch's True). */
QKV_API qkv_status qkv_mha_forward(qkv_ctx *c, const qkv_mha *m, qkv_tensor *query, qkv_tensor *key,
                                   qkv_tensor *value, const qkv_mha_args *args, qkv_tensor **out,
                                   qkv_tensor **weights);


/* ---- score functions (the lecture's seq2seq attention) ----------------- */

/* QKV_SCORE_KINDS is the one list of score functions: X(NAME, name,
 * same_dims, rank, params) per kind, in enum order, with QKV_SCORE_NAME
 * (and QKV_RNN_ATTN_NAME, generate.h), its name ("dot", ..., also
 * qkv_rnn_attention_name's), and whether it needs query_dim == key_dim,
 * uses the rank r and has parameters. A new kind is a row here (at the
 * end: the values are stored in checkpoints) and its cases in
 * src/attention/score.c; docs/score_functions.md has the steps. */
#define QKV_SCORE_KINDS(X)                                                         \
    X(DOT, "dot", 1, 0, 0)                   /* s . h */                          \
    X(SCALED_DOT, "scaled_dot", 1, 0, 0)     /* s . h / sqrt(dim) */              \
    X(COSINE, "cosine", 1, 0, 0)             /* s . h / (|s| |h|) */              \
    X(GENERAL, "general", 0, 0, 1)           /* s^T W_a h,             W_a (Dq,Dk) */ \
    X(REDUCED_RANK, "reduced_rank", 0, 1, 1) /* (U_a s)^T (V_a h),     U_a (r,Dq), V_a (r,Dk) */ \
    X(ADDITIVE, "additive", 0, 1, 1)         /* v_a^T tanh(W_a h + V_a s), W_a (r,Dk), V_a (r,Dq), v_a (r) */

#define QKV_SCORE_ENUM_(NAME, name, same_dims, rank, params) QKV_SCORE_##NAME,
typedef enum { QKV_SCORE_KINDS(QKV_SCORE_ENUM_) } qkv_score_kind; /* DOT = 0, ..., ADDITIVE */
#undef QKV_SCORE_ENUM_

typedef struct {
    qkv_score_kind kind;
    int64_t query_dim, key_dim, rank; /* rank: r for reduced-rank and additive */
    qkv_tensor *W_a, *U_a, *V_a, *v_a; /* parameters "W_a" "U_a" "V_a" "v_a"; NULL if unused */
} qkv_score;

/* dot, scaled dot and cosine need query_dim == key_dim and have no
 * parameters; rank is ignored except by reduced-rank and additive.
 * Weights are initialised like nn.Linear's (U(-1/sqrt(fan_in), ..)). */
QKV_API qkv_status qkv_score_init(qkv_score *sc, qkv_score_kind kind, int64_t query_dim,
                                  int64_t key_dim, int64_t rank, qkv_params *p, const char *prefix,
                                  qkv_rng *rng);
/* query (N,T,Dq) (or (N,Dq)), keys (N,S,Dk) -> scores (N,T,S) (or (N,S)). */
QKV_API qkv_status qkv_score_forward(qkv_ctx *c, const qkv_score *sc, qkv_tensor *query,
                                     qkv_tensor *keys, qkv_tensor **scores);
/* Softmax over the last dim. key_padding_mask: NULL or BOOL (N,S) with
 * true = masked, for x (N,S) or (N,T,S). A row with every entry masked
 * gives zeros. */
QKV_API qkv_status qkv_softmax(qkv_ctx *c, qkv_tensor *x, const qkv_tensor *key_padding_mask,
                               qkv_tensor **y);
/* Batched matrix product: a (B,M,K), b (B,K,P) -> y (B,M,P); 2-D a (B,K)
 * with 3-D b gives (B,P) (weights times values). */
QKV_API qkv_status qkv_bmm(qkv_ctx *c, qkv_tensor *a, qkv_tensor *b, qkv_tensor **y);

#ifdef __cplusplus
}
#endif
#endif
