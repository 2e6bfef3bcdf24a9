/* qkv/generate.h: the models that generate text. A KV cache with
 * incremental (cached) forwards of the decoder-only stack and of
 * nn.Transformer's decoder (src/models/kvcache.c); a decoder-only language
 * model (lm.c) and an encoder-decoder (seq2seq) model (seq2seq.c) around
 * them, each with a full forward and a cached one. Decoding them (greedy,
 * beam search, sampling) is qkv/decode.h. docs/generation.md has the
 * formulas, the cache layout and its cost.
 *
 * Inference only: the cached forwards run as under torch.no_grad() (they
 * record nothing, whatever qkv_ctx_set_grad says) and fail in training
 * mode. */
#include "qkv.h" /* first: qkv.h includes every area header in order */
#ifndef QKV_GENERATE_H
#define QKV_GENERATE_H
#ifdef __cplusplus
extern "C" {
#endif

/* ---- the KV cache ------------------------------------------------------
 * Per layer, the keys and values of the positions seen so far, allocated
 * once for max_len positions, and (for an encoder-decoder) the
 * cross-attention keys and values of the encoder memory, computed once per
 * sequence. Layout: one (max_len, head_dim) block per (layer, row, head),
 *   k, v    (num_layers, batch, nhead, max_len, head_dim)
 * so positions [0,S) of one (layer, row, head) are contiguous and the
 * attention of a new token reads them in place (a view), in time linear in
 * S. pad marks the positions that are padding (masked as keys). A cache
 * row is one sequence; rows advance together (one len for all).
 * qkv_kv_cache_init_half keeps k and v in IEEE half precision instead (k16,
 * v16; k and v NULL): half the memory, and a decoding step over a long
 * cache reads half the bytes; attention then sees keys and values rounded
 * to fp16 (relative error up to 2^-11), as a model run in half precision. */
typedef struct {
    int64_t num_layers, batch, nhead, head_dim, max_len;
    int64_t len;     /* positions filled: [0, len) */
    float *k, *v;    /* (num_layers, batch, nhead, max_len, head_dim); NULL in half precision */
    uint16_t *k16, *v16; /* the same in fp16 (qkv_kv_cache_init_half), else NULL */
    uint8_t *pad;    /* (batch, max_len): 1 = padding (never attended to) */
    int64_t *npad;   /* (batch): padding positions among [0, len) */
    /* Cross-attention (encoder-decoder), set by qkv_transformer_decoder_set_memory. */
    int64_t mem_len;    /* S; 0 when no memory is set */
    int64_t mem_cap;    /* floats allocated in ck and cv */
    float *ck, *cv;     /* (num_layers, batch, nhead, mem_len, head_dim) */
    uint8_t *mem_pad;   /* (batch, mem_len), 1 = padding; NULL when no memory */
    int mem_has_pad;
} qkv_kv_cache;

/* Allocates an empty cache (len 0). All sizes >= 1. Free with _free. */
qkv_status qkv_kv_cache_init(qkv_kv_cache *kc, int64_t num_layers, int64_t batch, int64_t nhead,
                             int64_t head_dim, int64_t max_len);
/* The same with keys and values stored in fp16 (k16, v16). */
qkv_status qkv_kv_cache_init_half(qkv_kv_cache *kc, int64_t num_layers, int64_t batch,
                                  int64_t nhead, int64_t head_dim, int64_t max_len);
void qkv_kv_cache_free(qkv_kv_cache *kc);
/* Empties the cache (len 0, no padding, no memory); keeps the allocation. */
void qkv_kv_cache_reset(qkv_kv_cache *kc);
/* Drops positions [len, kc->len): the next token goes to position len.
 * 0 <= len <= kc->len. */
qkv_status qkv_kv_cache_truncate(qkv_kv_cache *kc, int64_t len);
/* Row n of the cache becomes what row rows[n] was (for every layer, the
 * positions [0,len), the padding and the memory's keys and values):
 * beam search's reordering. rows (batch), each in [0,batch), repeats
 * allowed. Scratch from the ctx's arena, released before returning. */
qkv_status qkv_kv_cache_reorder(qkv_ctx *c, qkv_kv_cache *kc, const int64_t *rows);

/* ---- cached forwards of the stacks --------------------------------------
 * x holds only the new positions [kc->len, kc->len + T) of each row, in the
 * stack's layout: (T,N,E), (N,T,E) with batch_first, (T,E) unbatched (then
 * the cache's batch is 1); N == kc->batch, kc->len + T <= kc->max_len.
 * Each layer appends the new keys and values to its cache and attends to
 * positions [0, kc->len + T) with the causal mask aligned bottom-right (new
 * token i sees positions <= kc->len + i), so the output equals the
 * full-sequence forward's last T positions. key_padding_mask: NULL or BOOL
 * (N,T) (true = padding) for the new positions; it is kept in the cache and
 * masks those positions as keys from then on. Then kc->len += T. */

/* The decoder-only stack (qkv_transformer_decoder_only_forward's
 * TransformerEncoder with causal self-attention). The cache needs
 * num_layers, nhead and head_dim = d_model / nhead of m. */
qkv_status qkv_transformer_decoder_only_forward_cached(qkv_ctx *c,
                                                       const qkv_transformer_decoder_only *m,
                                                       qkv_kv_cache *kc, qkv_tensor *x,
                                                       const qkv_tensor *key_padding_mask,
                                                       qkv_tensor **out);

/* nn.TransformerDecoder: begins a sequence. Empties the cache, then
 * computes each layer's cross-attention keys and values of memory once and
 * keeps them, with memory_key_padding_mask (NULL or BOOL (N,S)).
 * memory (S,N,E), (N,S,E) with batch_first, (S,E) unbatched. */
qkv_status qkv_transformer_decoder_set_memory(qkv_ctx *c, const qkv_transformer_decoder *m,
                                              qkv_kv_cache *kc, qkv_tensor *memory,
                                              const qkv_tensor *memory_key_padding_mask);
/* nn.TransformerDecoder with causal self-attention (tgt_causal top-left)
 * on the new positions tgt, cross-attending to the memory set above. */
qkv_status qkv_transformer_decoder_forward_cached(qkv_ctx *c, const qkv_transformer_decoder *m,
                                                  qkv_kv_cache *kc, qkv_tensor *tgt,
                                                  const qkv_tensor *tgt_key_padding_mask,
                                                  qkv_tensor **out);

/* ---- models -------------------------------------------------------------
 * Token ids are I64 tensors (N,T), batch first; logits are (N,T,V).
 * Padding masks are BOOL (N,T), true = padding. A token's position (for the
 * positional encoding) is the number of non-padding tokens before it in its
 * row, so a left-padded prompt gets positions 0, 1, ... from its first real
 * token, as it would alone. */

typedef enum {
    QKV_POSENC_NONE = 0,
    QKV_POSENC_SINUSOIDAL, /* qkv_sinusoidal_fill's table (d_model even) */
    QKV_POSENC_LEARNED     /* a (max_len, d_model) table, N(0,1) as nn.Embedding */
} qkv_posenc_kind;

/* A decoder-only (GPT-style) language model:
 *   logits = lm_head(blocks(tok_emb(ids) * s + pos(positions)))
 * s = sqrt(d_model) when scale_embedding, else 1. Parameters under prefix:
 *   tok_emb.weight (V,E)        N(0,1) (padding_idx row zero)
 *   pos_emb.weight (max_len,E)  when posenc is learned
 *   blocks.layers.<i>.*, blocks.norm.*  (qkv_transformer_decoder_only)
 *   lm_head.weight (V,E)        no bias; absent when tie_weights (then
 *                               logits = h tok_emb.weight^T) */
typedef struct {
    int64_t vocab_size, max_len, num_layers;
    qkv_transformer_layer_opts layer; /* d_model, nhead, ...; batch_first is ignored (always 1) */
    int final_norm;                   /* LayerNorm after the stack; default 1 */
    qkv_posenc_kind posenc;           /* default learned */
    int scale_embedding;              /* default 0 */
    int tie_weights;                  /* default 0 */
    int64_t padding_idx;              /* the token embedding's; default -1 (none) */
} qkv_lm_opts;

/* PyTorch's layer defaults (qkv_transformer_layer_opts_default) plus the
 * defaults above. */
qkv_lm_opts qkv_lm_opts_default(int64_t vocab_size, int64_t d_model, int64_t nhead,
                                int64_t num_layers, int64_t max_len);

/* The options as one line of "key=value" words (src/models/lm_config.c),
 * what qkv's LM checkpoints keep as metadata "lm.config":
 *   vocab_size=V max_len=L num_layers=N d_model=E nhead=H dim_feedforward=F
 *   dropout=P activation=gelu layer_norm_eps=1e-05 norm_first=1 bias=1
 *   final_norm=1 posenc=learned scale_embedding=0 tie_weights=1 padding_idx=-1
 * _format needs about 320 bytes; _parse wants exactly these keys in this
 * order, with values in range (QKV_ERR_FORMAT naming the first bad one). */
qkv_status qkv_lm_opts_format(const qkv_lm_opts *o, char *buf, size_t n);
qkv_status qkv_lm_opts_parse(const char *text, qkv_lm_opts *o);

typedef struct {
    qkv_lm_opts o;
    qkv_nn_token_embedding tok;
    qkv_nn_learned_pos pos;               /* when posenc is learned */
    qkv_transformer_decoder_only blocks;
    qkv_nn_linear lm_head;                /* unless tie_weights */
} qkv_lm;

qkv_status qkv_lm_init(qkv_lm *m, const qkv_lm_opts *o, qkv_params *p, const char *prefix,
                       qkv_rng *rng);
void qkv_lm_free(qkv_lm *m);
/* Full sequence (training): ids (N,T) -> logits (N,T,V); position t sees
 * positions <= t; key_padding_mask NULL or BOOL (N,T). Positions < max_len. */
qkv_status qkv_lm_forward(qkv_ctx *c, const qkv_lm *m, qkv_tensor *ids,
                          const qkv_tensor *key_padding_mask, qkv_tensor **logits);
/* A cache for m: batch rows of max_len positions. */
qkv_status qkv_lm_cache_init(qkv_kv_cache *kc, const qkv_lm *m, int64_t batch, int64_t max_len);
/* Incremental: ids (N,T) are the new tokens at positions [kc->len,
 * kc->len + T) -> their logits (N,T,V), as qkv_lm_forward gives them for
 * the whole sequence so far. */
qkv_status qkv_lm_forward_cached(qkv_ctx *c, const qkv_lm *m, qkv_kv_cache *kc, qkv_tensor *ids,
                                 const qkv_tensor *key_padding_mask, qkv_tensor **logits);

/* An encoder-decoder (the PyTorch translation tutorial's Seq2SeqTransformer):
 *   memory = transformer.encoder(src_emb(src) * s + pos)
 *   logits = generator(transformer.decoder(tgt_emb(tgt) * s + pos, memory))
 * with causal decoder self-attention and memory_key_padding_mask = the
 * source padding mask. Parameters under prefix, in the tutorial's order:
 *   transformer.*                       (qkv_transformer, batch_first)
 *   generator.weight (V_tgt,E), generator.bias (V_tgt)
 *   src_tok_emb.embedding.weight (V_src,E), tgt_tok_emb.embedding.weight (V_tgt,E)
 *   src_pos_emb.weight, tgt_pos_emb.weight (max_len,E) when posenc is learned
 * (the tutorial's sinusoidal PositionalEncoding has no parameters). */
typedef struct {
    int64_t src_vocab, tgt_vocab, max_len;
    qkv_transformer_opts t;   /* batch_first is ignored (always 1) */
    qkv_posenc_kind posenc;   /* default sinusoidal */
    int scale_embedding;      /* default 1 (the tutorial's TokenEmbedding) */
} qkv_seq2seq_opts;

qkv_seq2seq_opts qkv_seq2seq_opts_default(int64_t src_vocab, int64_t tgt_vocab, int64_t d_model,
                                          int64_t nhead, int64_t num_encoder_layers,
                                          int64_t num_decoder_layers, int64_t max_len);

typedef struct {
    qkv_seq2seq_opts o;
    qkv_transformer transformer;
    qkv_nn_linear generator;
    qkv_nn_token_embedding src_tok, tgt_tok;
    qkv_nn_learned_pos src_pos, tgt_pos; /* when posenc is learned */
} qkv_seq2seq;

qkv_status qkv_seq2seq_init(qkv_seq2seq *m, const qkv_seq2seq_opts *o, qkv_params *p,
                            const char *prefix, qkv_rng *rng);
void qkv_seq2seq_free(qkv_seq2seq *m);
/* Full (training): src (N,S), tgt (N,T) -> logits (N,T,V_tgt). Padding
 * masks NULL or BOOL (N,S), (N,T). */
qkv_status qkv_seq2seq_forward(qkv_ctx *c, const qkv_seq2seq *m, qkv_tensor *src,
                               qkv_tensor *tgt, const qkv_tensor *src_padding_mask,
                               const qkv_tensor *tgt_padding_mask, qkv_tensor **logits);
/* The encoder alone: src (N,S) -> memory (N,S,E). */
qkv_status qkv_seq2seq_encode(qkv_ctx *c, const qkv_seq2seq *m, qkv_tensor *src,
                              const qkv_tensor *src_padding_mask, qkv_tensor **memory);
qkv_status qkv_seq2seq_cache_init(qkv_kv_cache *kc, const qkv_seq2seq *m, int64_t batch,
                                  int64_t max_len);
/* Begins decoding: encodes src (N,S) (N = kc->batch) and keeps the
 * cross-attention keys and values of the memory in kc (emptied first). */
qkv_status qkv_seq2seq_start(qkv_ctx *c, const qkv_seq2seq *m, qkv_kv_cache *kc,
                             qkv_tensor *src, const qkv_tensor *src_padding_mask);
/* Incremental: tgt (N,T) new target tokens -> logits (N,T,V_tgt). */
qkv_status qkv_seq2seq_forward_cached(qkv_ctx *c, const qkv_seq2seq *m, qkv_kv_cache *kc,
                                      qkv_tensor *tgt, const qkv_tensor *tgt_padding_mask,
                                      qkv_tensor **logits);

#ifdef __cplusplus
}
#endif
#endif
