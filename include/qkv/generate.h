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
 * to fp16 (relative error up to 2^-11), as a model run in half precision.
 * qkv_kv_cache_init_bf16 keeps them in bfloat16 (k16, v16 hold bf16 bits):
 * the same memory as fp16, fp32's range (no overflow past 65504), a
 * coarser rounding (relative error up to 2^-9), as torch's
 * .to(torch.bfloat16). docs/bf16_decode.md.
 *
 * weights: NULL (the default), or bf16 copies of the model's weights
 * (qkv_bf16_weights_init, qkv/nn.h) that every cached forward through this
 * cache then uses in its linear layers (a decoding step reads half the
 * weight bytes); the caller keeps them alive while set. */
typedef enum {
    QKV_KV_F32 = 0, /* k, v */
    QKV_KV_F16,     /* k16, v16 in IEEE half precision */
    QKV_KV_BF16     /* k16, v16 in bfloat16 */
} qkv_kv_dtype;

typedef struct {
    int64_t num_layers, batch, nhead, head_dim, max_len;
    int64_t len;     /* positions filled: [0, len) */
    qkv_kv_dtype dtype;
    float *k, *v;    /* (num_layers, batch, nhead, max_len, head_dim); NULL in 16 bits */
    uint16_t *k16, *v16; /* the same in fp16 or bf16 (dtype), else NULL */
    const qkv_bf16_weights *weights; /* NULL: the model's FP32 weights */
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
QKV_API qkv_status qkv_kv_cache_init(qkv_kv_cache *kc, int64_t num_layers, int64_t batch,
                                     int64_t nhead, int64_t head_dim, int64_t max_len);
/* The same with keys and values stored in fp16 (k16, v16). */
QKV_API qkv_status qkv_kv_cache_init_half(qkv_kv_cache *kc, int64_t num_layers, int64_t batch,
                                          int64_t nhead, int64_t head_dim, int64_t max_len);
/* The same with keys and values stored in bf16 (k16, v16). */
QKV_API qkv_status qkv_kv_cache_init_bf16(qkv_kv_cache *kc, int64_t num_layers, int64_t batch,
                                          int64_t nhead, int64_t head_dim, int64_t max_len);
QKV_API void qkv_kv_cache_free(qkv_kv_cache *kc);
/* Empties the cache (len 0, no padding, no memory); keeps the allocation. */
QKV_API void qkv_kv_cache_reset(qkv_kv_cache *kc);
/* Drops positions [len, kc->len): the next token goes to position len.
 * 0 <= len <= kc->len. */
QKV_API qkv_status qkv_kv_cache_truncate(qkv_kv_cache *kc, int64_t len);
/* Row n of the cache becomes what row rows[n] was (for every layer, the
 * positions [0,len), the padding and the memory's keys and values):
 * beam search's reordering. rows (batch), each in [0,batch), repeats
 * allowed. Scratch from the ctx's arena, released before returning. */
QKV_API qkv_status qkv_kv_cache_reorder(qkv_ctx *c, qkv_kv_cache *kc, const int64_t *rows);

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
QKV_API qkv_status qkv_transformer_decoder_only_forward_cached(
    qkv_ctx *c, const qkv_transformer_decoder_only *m, qkv_kv_cache *kc, qkv_tensor *x,
    const qkv_tensor *key_padding_mask, qkv_tensor **out);

/* nn.TransformerDecoder: begins a sequence. Empties the cache, then
 * computes each layer's cross-attention keys and values of memory once and
 * keeps them, with memory_key_padding_mask (NULL or BOOL (N,S)).
 * memory (S,N,E), (N,S,E) with batch_first, (S,E) unbatched. */
QKV_API qkv_status qkv_transformer_decoder_set_memory(qkv_ctx *c, const qkv_transformer_decoder *m,
                                                      qkv_kv_cache *kc, qkv_tensor *memory,
                                                      const qkv_tensor *memory_key_padding_mask);
/* nn.TransformerDecoder with causal self-attention (tgt_causal top-left)
 * on the new positions tgt, cross-attending to the memory set above. */
QKV_API qkv_status qkv_transformer_decoder_forward_cached(qkv_ctx *c,
                                                          const qkv_transformer_decoder *m,
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
    QKV_POSENC_LEARNED,    /* a (max_len, d_model) table, N(0,1) as nn.Embedding */
    /* no table: rotary positions (RoPE, rotate_half) on q and k in every
     * self-attention (qkv_transformer_layer_opts' rotary, set from this);
     * the language model only */
    QKV_POSENC_ROTARY
} qkv_posenc_kind;

/* A decoder-only (GPT-style) language model:
 *   logits = lm_head(blocks(tok_emb(ids) * s + pos(positions)))
 * s = sqrt(d_model) when scale_embedding, else 1; with rotary positions
 * no pos term: the blocks' self-attentions rotate q and k to the same
 * positions (layer.rotary follows posenc, base layer.rotary_base, 0 for
 * 10000). Parameters under prefix:
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
QKV_API qkv_lm_opts qkv_lm_opts_default(int64_t vocab_size, int64_t d_model, int64_t nhead,
                                        int64_t num_layers, int64_t max_len);

/* The options as one line of "key=value" words (src/models/lm_config.c),
 * what qkv's LM checkpoints keep as metadata "lm.config":
 *   vocab_size=V max_len=L num_layers=N d_model=E nhead=H dim_feedforward=F
 *   dropout=P activation=gelu layer_norm_eps=1e-05 norm_first=1 bias=1
 *   final_norm=1 posenc=learned scale_embedding=0 tie_weights=1 padding_idx=-1
 * and, with posenc=rotary only, a last word rotary_base=10000 (a whole
 * base as such, others as the floats above).
 * _format needs about 340 bytes; _parse wants exactly these keys in this
 * order, with values in range (QKV_ERR_FORMAT naming the first bad one). */
QKV_API qkv_status qkv_lm_opts_format(const qkv_lm_opts *o, char *buf, size_t n);
QKV_API qkv_status qkv_lm_opts_parse(const char *text, qkv_lm_opts *o);

typedef struct {
    qkv_lm_opts o;
    qkv_nn_token_embedding tok;
    qkv_nn_learned_pos pos;               /* when posenc is learned */
    qkv_transformer_decoder_only blocks;
    qkv_nn_linear lm_head;                /* unless tie_weights */
} qkv_lm;

QKV_API qkv_status qkv_lm_init(qkv_lm *m, const qkv_lm_opts *o, qkv_params *p, const char *prefix,
                               qkv_rng *rng);
QKV_API void qkv_lm_free(qkv_lm *m);
/* Full sequence (training): ids (N,T) -> logits (N,T,V); position t sees
 * positions <= t; key_padding_mask NULL or BOOL (N,T). Positions < max_len. */
QKV_API qkv_status qkv_lm_forward(qkv_ctx *c, const qkv_lm *m, qkv_tensor *ids,
                                  const qkv_tensor *key_padding_mask, qkv_tensor **logits);
/* A cache for m: batch rows of max_len positions. */
QKV_API qkv_status qkv_lm_cache_init(qkv_kv_cache *kc, const qkv_lm *m, int64_t batch,
                                     int64_t max_len);
/* Incremental: ids (N,T) are the new tokens at positions [kc->len,
 * kc->len + T) -> their logits (N,T,V), as qkv_lm_forward gives them for
 * the whole sequence so far. */
QKV_API qkv_status qkv_lm_forward_cached(qkv_ctx *c, const qkv_lm *m, qkv_kv_cache *kc,
                                         qkv_tensor *ids, const qkv_tensor *key_padding_mask,
                                         qkv_tensor **logits);

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

QKV_API qkv_seq2seq_opts qkv_seq2seq_opts_default(int64_t src_vocab, int64_t tgt_vocab,
                                                  int64_t d_model, int64_t nhead,
                                                  int64_t num_encoder_layers,
                                                  int64_t num_decoder_layers, int64_t max_len);

typedef struct {
    qkv_seq2seq_opts o;
    qkv_transformer transformer;
    qkv_nn_linear generator;
    qkv_nn_token_embedding src_tok, tgt_tok;
    qkv_nn_learned_pos src_pos, tgt_pos; /* when posenc is learned */
} qkv_seq2seq;

QKV_API qkv_status qkv_seq2seq_init(qkv_seq2seq *m, const qkv_seq2seq_opts *o, qkv_params *p,
                                    const char *prefix, qkv_rng *rng);
QKV_API void qkv_seq2seq_free(qkv_seq2seq *m);
/* Full (training): src (N,S), tgt (N,T) -> logits (N,T,V_tgt). Padding
 * masks NULL or BOOL (N,S), (N,T). */
QKV_API qkv_status qkv_seq2seq_forward(qkv_ctx *c, const qkv_seq2seq *m, qkv_tensor *src,
                                       qkv_tensor *tgt, const qkv_tensor *src_padding_mask,
                                       const qkv_tensor *tgt_padding_mask, qkv_tensor **logits);
/* The encoder alone: src (N,S) -> memory (N,S,E). */
QKV_API qkv_status qkv_seq2seq_encode(qkv_ctx *c, const qkv_seq2seq *m, qkv_tensor *src,
                                      const qkv_tensor *src_padding_mask, qkv_tensor **memory);
QKV_API qkv_status qkv_seq2seq_cache_init(qkv_kv_cache *kc, const qkv_seq2seq *m, int64_t batch,
                                          int64_t max_len);
/* Begins decoding: encodes src (N,S) (N = kc->batch) and keeps the
 * cross-attention keys and values of the memory in kc (emptied first). */
QKV_API qkv_status qkv_seq2seq_start(qkv_ctx *c, const qkv_seq2seq *m, qkv_kv_cache *kc,
                                     qkv_tensor *src, const qkv_tensor *src_padding_mask);
/* Incremental: tgt (N,T) new target tokens -> logits (N,T,V_tgt). */
QKV_API qkv_status qkv_seq2seq_forward_cached(qkv_ctx *c, const qkv_seq2seq *m, qkv_kv_cache *kc,
                                              qkv_tensor *tgt, const qkv_tensor *tgt_padding_mask,
                                              qkv_tensor **logits);

/* ---- the recurrent encoder-decoder with attention (seq2seq_rnn.c) -------
 * The lecture's seq2seq RNN (seed 000's score functions, seed 004's
 * location attention). docs/seq2seq.md has the equations and the names.
 *
 * Encoder: src ids (N,S) -> embedding (E) -> GRU or LSTM (num_layers,
 * optionally bidirectional, batch_first), source lengths as packed
 * sequences -> outputs H^E (N,S,K), K = D*hidden_size, and final states.
 * Decoder (hidden_size H, num_layers as the encoder), started from the
 * encoder's final states (D = 1) or from the bridge (D = 2):
 *   h0 = tanh(bridge([h_fwd; h_bwd])) per layer (an LSTM's c0 = bridge_c(..)).
 * Luong's attention (the six score kinds) and the baseline, at step t:
 *   h_t = RNN(emb(y_{t-1}), h_{t-1})
 *   a_t = softmax(score(h_t, H^E)) over the source (padding gets 0)
 *   c_t = a_t H^E                     (baseline NONE: c_t = the last encoder
 *                                      state of the top layer, [fwd; bwd])
 *   h~_t = tanh(concat([c_t; h_t])),  logits_t = out(h~_t)
 * Location attention (PyTorch's translation tutorial, AttnDecoderRNN):
 *   x~ = emb(y_{t-1}), a_t = softmax(attn([x~; h_{t-1}])) over the first S
 *   of max_length positions, c_t = a_t H^E,
 *   z_t = relu(attn_combine([x~; c_t])), h_t = RNN(z_t, h_{t-1}),
 *   logits_t = out(h_t). */
#define QKV_RNN_ATTN_ENUM_(NAME, name, same_dims, rank, params) QKV_RNN_ATTN_##NAME,
typedef enum {
    QKV_SCORE_KINDS(QKV_RNN_ATTN_ENUM_) /* the qkv_score_kind values first, the same numbers */
    QKV_RNN_ATTN_LOCATION,     /* seed 004 / the tutorial's AttnDecoderRNN */
    QKV_RNN_ATTN_NONE          /* the baseline: the context is the last encoder state */
} qkv_rnn_attention;
#undef QKV_RNN_ATTN_ENUM_

/* "dot", "scaled_dot", "cosine", "general", "reduced_rank", "additive",
 * "location", "none" (NULL out of range); parse also takes the CLI's
 * "scaled", "low-rank", "low_rank", "reduced-rank", "bahdanau". */
QKV_API const char *qkv_rnn_attention_name(qkv_rnn_attention a);
QKV_API qkv_status qkv_rnn_attention_parse(const char *name, qkv_rnn_attention *a);

typedef struct {
    int64_t src_vocab, tgt_vocab;
    int64_t embed_dim;         /* E, both embeddings */
    int64_t hidden_size;       /* H, encoder (per direction) and decoder */
    int64_t num_layers;        /* encoder and decoder alike; default 1 */
    qkv_rnn_mode rnn;          /* GRU (default) or LSTM, both sides */
    int bidirectional;         /* the encoder; default 0 */
    qkv_rnn_attention attention; /* default additive */
    int64_t attn_rank;         /* r of reduced-rank and additive; 0 (default): H */
    int64_t max_length;        /* location attention's L_max: longest source and target */
    float dropout;             /* on both embeddings and between RNN layers, training only */
    int64_t padding_idx;       /* both embeddings' padding_idx; -1 (default): none */
} qkv_seq2seq_rnn_opts;

/* GRU, additive attention, one layer, unidirectional, max_length 0
 * (set it for location attention), no dropout, no padding_idx. */
QKV_API qkv_seq2seq_rnn_opts qkv_seq2seq_rnn_opts_default(int64_t src_vocab, int64_t tgt_vocab,
                                                          int64_t embed_dim, int64_t hidden_size);

/* Parameters under prefix (PyTorch-style names; K = D*H):
 *   encoder.embedding.weight (V_src,E), encoder.rnn.{weight,bias}_{ih,hh}_l<k>[_reverse]
 *   bridge.weight (H,2H), bridge.bias; bridge_c.* (LSTM)   when bidirectional
 *   decoder.embedding.weight (V_tgt,E), decoder.rnn.*  (input E, hidden H)
 *   decoder.attn.W_a / U_a / V_a / v_a                     the score's (qkv_score_init)
 *   decoder.attn.weight (max_length,E+H), decoder.attn.bias   location
 *   decoder.attn_combine.weight (E,E+K), .bias                location
 *   decoder.concat.weight (H,K+H), decoder.concat.bias     all but location
 *   decoder.out.weight (V_tgt,H), decoder.out.bias
 * dot, scaled dot and cosine need K == H, so a unidirectional encoder:
 * with a bidirectional one they are refused (general, reduced-rank and
 * additive project K to the query's H; location and none take any K). */
typedef struct {
    qkv_seq2seq_rnn_opts o;
    qkv_nn_embedding src_emb, tgt_emb;
    qkv_nn_rnn encoder, decoder;        /* batch_first */
    qkv_nn_linear bridge, bridge_c;     /* when bidirectional (bridge_c: LSTM) */
    qkv_score score;                    /* the six score kinds */
    qkv_nn_linear attn, attn_combine;   /* location */
    qkv_nn_linear concat;               /* all but location */
    qkv_nn_linear out;
} qkv_seq2seq_rnn;

QKV_API qkv_status qkv_seq2seq_rnn_init(qkv_seq2seq_rnn *m, const qkv_seq2seq_rnn_opts *o,
                                        qkv_params *p, const char *prefix, qkv_rng *rng);
QKV_API void qkv_seq2seq_rnn_free(qkv_seq2seq_rnn *m);

/* Teacher forcing: step 0 is fed tgt_in[:,0] (the begin token); each later
 * step t is fed tgt_in[:,t] with probability teacher_forcing (one draw per
 * step for the whole batch, from a qkv_rng seeded with seed), else the
 * argmax of the model's own logits at t-1. 1 (the default) always feeds
 * the target: the Luong kinds then run the decoder RNN over all T steps
 * at once. stepwise = 1 runs them one step at a time anyway (the same
 * numbers; for tests). */
typedef struct {
    float teacher_forcing; /* [0,1]; default 1 */
    uint64_t seed;         /* default 0 */
    int stepwise;          /* default 0 */
} qkv_seq2seq_rnn_args;
QKV_API qkv_seq2seq_rnn_args qkv_seq2seq_rnn_args_default(void);

/* Training forward: src (N,S) ids, src_lengths (N) in [1,S] or NULL (all
 * S; padding is whatever follows a row's length), tgt_in (N,T) the
 * decoder's inputs (<bos> y_1 .. y_{T-1}) -> logits (N,T,V_tgt);
 * weights (may be NULL) gets the attention weights (N,T,S) (row (n,t) sums
 * to 1 over the first src_lengths[n] positions, 0 after), NULL for NONE.
 * args NULL: the defaults. Location attention needs S and T <= max_length. */
QKV_API qkv_status qkv_seq2seq_rnn_forward(qkv_ctx *c, const qkv_seq2seq_rnn *m, qkv_tensor *src,
                                           const int64_t *src_lengths, qkv_tensor *tgt_in,
                                           const qkv_seq2seq_rnn_args *args, qkv_tensor **logits,
                                           qkv_tensor **weights);
/* The mean cross-entropy of logits (N,T,V) against tgt_out (N,T) I64 (the
 * next tokens, y_1 .. y_T), positions equal to ignore_index left out:
 * F.cross_entropy(logits.reshape(-1,V), tgt_out.reshape(-1), ignore_index). */
QKV_API qkv_status qkv_seq2seq_rnn_loss(qkv_ctx *c, qkv_tensor *logits, qkv_tensor *tgt_out,
                                        int64_t ignore_index, qkv_tensor **loss);
/* qkv_seq2seq_rnn_forward then qkv_seq2seq_rnn_loss, for training: the same
 * loss (and weights), without the logits. When every step is fed its target
 * by a Luong decoder (teacher_forcing 1, not stepwise, not location), the
 * output layer and the loss run as one op (qkv_linear_cross_entropy), which
 * never writes the (N,T,V) logits; otherwise it is the two calls. */
QKV_API qkv_status qkv_seq2seq_rnn_forward_loss(qkv_ctx *c, const qkv_seq2seq_rnn *m,
                                                qkv_tensor *src, const int64_t *src_lengths,
                                                qkv_tensor *tgt_in, qkv_tensor *tgt_out,
                                                int64_t ignore_index,
                                                const qkv_seq2seq_rnn_args *args, qkv_tensor **loss,
                                                qkv_tensor **weights);

#ifdef __cplusplus
}
#endif
#endif
