/* qkv/posenc.h: positional encodings (included by qkv.h): sinusoidal,
 * learned, scaled token embeddings, index channels, rotary (RoPE) and ALiBi.
 * docs/positional.md has the formulas, the shapes and the PyTorch / paper
 * equivalents. Ops follow qkv.h's conventions: context first, output last,
 * recorded on the tape when an input needs a gradient. */
#include "qkv.h" /* first: qkv.h includes every area header in order */
#ifndef QKV_POSENC_H
#define QKV_POSENC_H
#ifdef __cplusplus
extern "C" {
#endif

/* ---- sinusoidal ("Attention is all you need") ------------------------- */

/* pe (T,d), position p = offset + t:
 *   pe[t,2i] = sin(p / 10000^(2i/d)), pe[t,2i+1] = cos(p / 10000^(2i/d)),
 * the PyTorch tutorial's PositionalEncoding table (computed in double, so
 * exact to float32 rounding; the tutorial's float32 arithmetic drifts by
 * about p * 1e-7). d even and positive, T >= 0, offset >= 0. */
QKV_API qkv_status qkv_sinusoidal_fill(int64_t offset, int64_t T, int64_t d, float *pe);
/* The same table as a constant tensor (T,d) from the ctx's arena. */
QKV_API qkv_status qkv_sinusoidal(qkv_ctx *c, int64_t offset, int64_t T, int64_t d,
                                  qkv_tensor **pe);

/* y = x + pe[offset + t] at every batch entry: a position table added to
 * embeddings in either layout.
 * x (N,T,d) when batch_first, (T,N,d) when not, or (T,d) unbatched;
 * pe (P,d) with offset + T <= P -> y like x.
 * Gradients: dx += dy; dpe[offset+t] += sum over the batch of dy at t (when
 * pe requires one: a learned table). For batch_first, qkv_add(x, pe (T,d))
 * is the same thing. */
QKV_API qkv_status qkv_add_positional(qkv_ctx *c, qkv_tensor *x, qkv_tensor *pe, int64_t offset,
                                      int batch_first, qkv_tensor **y);

/* y = weight[offset : offset+T], recorded (the rows get the gradient):
 * nn.Embedding applied to arange(offset, offset+T). weight (P,d) -> y (T,d). */
QKV_API qkv_status qkv_positions(qkv_ctx *c, qkv_tensor *weight, int64_t offset, int64_t T,
                                 qkv_tensor **y);

/* y = alpha * x (any shape): dx += alpha dy. alpha finite. */
QKV_API qkv_status qkv_scale(qkv_ctx *c, qkv_tensor *x, float alpha, qkv_tensor **y);

/* ---- binary (the lecture's positional channels) ----------------------- */

/* The lecture's binary positional encoding: channel k of position t is bit k
 * of t, for k < ceil(log2(T)). pe is (channels, T), as Conv1d channels.
 * qkv_pos_binary_channels(T) gives channels (0 for T <= 1). */
QKV_API int64_t qkv_pos_binary_channels(int64_t T);
QKV_API qkv_status qkv_pos_binary(int64_t T, float *pe);
/* qkv_sinusoidal_fill's table (offset 0) transposed to channels, for
 * Conv1d-layout inputs: pe[2i][t] = sin(t / 10000^(2i/d)),
 * pe[2i+1][t] = cos(t / 10000^(2i/d)); pe is (d, T), d even, T >= 1. */
QKV_API qkv_status qkv_pos_sinusoidal(int64_t T, int64_t d, float *pe);

/* ---- index concatenation (the lecture's positional channel) ----------- */

typedef enum {
    QKV_POSIDX_UNIT = 0, /* t / T, in [0,1) */
    QKV_POSIDX_RAW       /* t */
} qkv_posidx;

/* Appends a channel holding each position's index:
 *   channels_first = 0: x (N,T,C) or (T,C) -> y (N,T,C+1) or (T,C+1);
 *   channels_first = 1: x (N,C,T) or (C,T) -> y (N,C+1,T) or (C+1,T)
 *     (Conv1d's layout, as the lecture's toy model).
 * dx += dy without the new channel. */
QKV_API qkv_status qkv_cat_position(qkv_ctx *c, qkv_tensor *x, qkv_posidx kind, int channels_first,
                                    qkv_tensor **y);

/* ---- rotary position embedding (RoPE, RoFormer) ----------------------- */

typedef enum {
    /* pairs (x[2i], x[2i+1]): RoFormer, GPT-J, Meta's LLaMA code */
    QKV_ROPE_INTERLEAVED = 0,
    /* pairs (x[i], x[i+r/2]): rotate_half of GPT-NeoX and HF LLaMA */
    QKV_ROPE_HALF
} qkv_rope_layout;

typedef struct {
    qkv_rope_layout layout; /* default QKV_ROPE_INTERLEAVED */
    float base;             /* default 10000; > 0 */
    int64_t offset;         /* position of row 0 (decoding with a cache); >= 0 */
    int64_t rot_dim;        /* rotate the first rot_dim dims (even); 0 (default): all */
    /* NULL (default): row t is at position offset + t. Else I64 (N,T), the
     * position of step t of batch entry n (x's first dim; N = 1 for (T,hd)),
     * each >= 0, with offset 0: left-padded rows, cached decoding. */
    const qkv_tensor *positions;
} qkv_rope_opts;

QKV_API qkv_rope_opts qkv_rope_opts_default(void);

/* Rotates each pair i < r/2 (r = rot_dim) of row t by the angle
 * p * base^(-2i/r), p = offset + t (or positions[n,t]):
 *   (a, b) -> (a cos - b sin, a sin + b cos);
 * dims from r on pass through. x (N,H,T,hd), (B,T,hd) or (T,hd) with hd
 * (or r) even -> y like x. The backward is the inverse rotation. opts NULL
 * means the defaults. Apply it to q and to k before qkv_sdpa. */
QKV_API qkv_status qkv_rope(qkv_ctx *c, qkv_tensor *x, const qkv_rope_opts *opts, qkv_tensor **y);

/* ---- ALiBi (Press et al., "Train short, test long") ------------------- */

/* The per-head slopes of the ALiBi reference code (get_slopes): for H a
 * power of two, 2^(-8/H), 2^(-16/H), ..., 2^(-8); otherwise those of the
 * closest smaller power of two P followed by every other slope of 2P.
 * slopes (H), H >= 1. */
QKV_API qkv_status qkv_alibi_slopes(int64_t num_heads, float *slopes);

typedef enum {
    /* -m_h (i' - j): the paper's bias for causal attention. Keys after i'
     * get a positive bias: mask them (qkv_sdpa's causal). Equal, row by
     * row up to a constant, to the reference code's m_h * j, so the same
     * softmax. */
    QKV_ALIBI_CAUSAL = 0,
    /* -m_h |i' - j|: the common bidirectional (encoder) variant. */
    QKV_ALIBI_SYMMETRIC
} qkv_alibi_kind;

/* bias (N*H,L,S), the same for each of the N batch entries:
 * bias[n*H+h, i, j] per kind, with i' = i + (S - L) (queries are the last L
 * of S positions, as with a cache; i' = i when L == S). Usable as qkv_sdpa's
 * F32 attn_mask (N*H,L,S) or, with N = 1, MultiheadAttention's. N, H, L,
 * S >= 1. */
QKV_API qkv_status qkv_alibi_bias_fill(int64_t N, int64_t H, int64_t L, int64_t S,
                                       qkv_alibi_kind kind, float *bias);
/* The same as a constant tensor (N*H,L,S) from the ctx's arena. */
QKV_API qkv_status qkv_alibi_bias(qkv_ctx *c, int64_t N, int64_t H, int64_t L, int64_t S,
                                  qkv_alibi_kind kind, qkv_tensor **bias);

/* ---- modules ----------------------------------------------------------- */

/* The PyTorch tutorial's PositionalEncoding(d_model, dropout, max_len):
 * y = dropout(x + pe[offset : offset+T]), pe the sinusoidal table; no
 * parameters (the tutorial's "pe" buffer is recomputed, not stored).
 * x (T,N,d) (the tutorial's layout), (N,T,d) with batch_first, or (T,d);
 * offset + T <= max_len. offset is 0 after _init; set it to decode. */
typedef struct {
    qkv_module base;
    int64_t d_model, max_len, offset;
    float dropout;
    int batch_first;
} qkv_nn_sinusoidal;
QKV_API qkv_status qkv_nn_sinusoidal_init(qkv_nn_sinusoidal *m, int64_t d_model, float dropout,
                                          int64_t max_len, int batch_first);

/* A learned absolute position embedding (BERT, GPT-2's wpe):
 * "weight" (max_len,d_model) N(0,1) as nn.Embedding;
 * y = x + weight[offset : offset+T], x as for qkv_nn_sinusoidal.
 * qkv_positions(c, m.weight, offset, T, &pos) gives the rows alone. */
typedef struct {
    qkv_module base;
    int64_t max_len, d_model, offset;
    int batch_first;
    qkv_tensor *weight; /* (max_len,d_model) */
} qkv_nn_learned_pos;
QKV_API qkv_status qkv_nn_learned_pos_init(qkv_nn_learned_pos *m, int64_t max_len, int64_t d_model,
                                           int batch_first, qkv_params *p, const char *prefix,
                                           qkv_rng *rng);

/* The tutorial's TokenEmbedding: y = embedding(ids) * sqrt(d_model) when
 * scaled (else * 1). "weight" (num,d_model) N(0,1) as nn.Embedding (the
 * tutorial names it "embedding.weight": give prefix "...embedding.").
 * The forward's x is the I64 ids tensor. */
typedef struct {
    qkv_module base;
    qkv_nn_embedding emb;
    float scale; /* sqrt(d_model) or 1 */
} qkv_nn_token_embedding;
QKV_API qkv_status qkv_nn_token_embedding_init(qkv_nn_token_embedding *m, int64_t num_embeddings,
                                               int64_t d_model, int64_t padding_idx, int scaled,
                                               qkv_params *p, const char *prefix, qkv_rng *rng);

#ifdef __cplusplus
}
#endif
#endif
