/* qkv/transformer.h: torch.nn's transformer family with PyTorch 1.13's
 * semantics, defaults and state_dict names: TransformerEncoderLayer,
 * TransformerDecoderLayer, TransformerEncoder, TransformerDecoder,
 * Transformer, generate_square_subsequent_mask, and a decoder-only stack
 * (TransformerEncoder with a causal mask, as GPT-style models use it).
 *
 * Every forward is written once as ops (linear, layer_norm, relu/gelu,
 * dropout, add, multi-head attention), so the tape gives the backward.
 * Shapes are PyTorch's: a sequence is (L,N,E), (N,L,E) with batch_first, or
 * (L,E) unbatched. docs/transformer.md has the details and an example. */
#include "qkv.h" /* first: qkv.h includes every area header in order */
#ifndef QKV_TRANSFORMER_H
#define QKV_TRANSFORMER_H
#ifdef __cplusplus
extern "C" {
#endif

/* The options of TransformerEncoderLayer and TransformerDecoderLayer.
 * qkv_transformer_layer_opts_default(d_model, nhead) gives PyTorch's
 * defaults: dim_feedforward 2048, dropout 0.1, relu, layer_norm_eps 1e-5,
 * batch_first 0, norm_first 0, bias 1. bias = 0 is PyTorch 2.1's
 * bias=False: no in_proj_bias, out_proj.bias, linear1/2.bias, norm*.bias. */
typedef struct {
    int64_t d_model, nhead;
    int64_t dim_feedforward;
    float dropout;
    qkv_activation activation; /* nn.h's: relu (default), gelu, gelu_tanh, tanh */
    float layer_norm_eps;
    int batch_first;
    int norm_first;
    int bias;
    /* qkv's addition: rotary positions in the self-attentions (qkv_mha_opts'
     * rotary, rotary_base; cross-attention is left alone): d_model / nhead
     * even. Default 0; base 0 means 10000. */
    int rotary;
    float rotary_base;
} qkv_transformer_layer_opts;

QKV_API qkv_transformer_layer_opts qkv_transformer_layer_opts_default(int64_t d_model,
                                                                      int64_t nhead);

/* The masks of a forward call, named as nn.Transformer.forward's arguments.
 * A NULL pointer (or a NULL qkv_transformer_masks *) means none. Each
 * forward reads only the fields of the attentions it has: an encoder reads
 * src_*, a decoder tgt_* and memory_*.
 *
 *   src_mask    (S,S) or (N*nhead,S,S)  encoder self-attention
 *   tgt_mask    (T,T) or (N*nhead,T,T)  decoder self-attention
 *   memory_mask (T,S) or (N*nhead,T,S)  decoder cross-attention
 *   *_key_padding_mask  (N,S) / (N,T) / (N,S), or (S) / (T) / (S) unbatched
 *
 * Masks are BOOL (true = may not attend) or F32 (added to the scores).
 * src_causal, tgt_causal, memory_causal are qkv's additions: a causal mask
 * without a tensor, QKV_CAUSAL_TOP_LEFT being exactly
 * generate_square_subsequent_mask, in O(L) memory (the (L,L) matrix is never
 * built); they combine with the tensors. */
typedef struct {
    const qkv_tensor *src_mask, *tgt_mask, *memory_mask;
    const qkv_tensor *src_key_padding_mask, *tgt_key_padding_mask, *memory_key_padding_mask;
    qkv_causal src_causal, tgt_causal, memory_causal;
} qkv_transformer_masks;

/* No masks (a zeroed struct is the same). */
QKV_API qkv_transformer_masks qkv_transformer_masks_default(void);

/* Transformer.generate_square_subsequent_mask(sz) into mask, a (sz,sz)
 * tensor the caller made: F32 gets -inf above the diagonal and 0 elsewhere,
 * BOOL gets true above the diagonal (the same mask). */
QKV_API qkv_status qkv_transformer_square_subsequent_mask(qkv_tensor *mask);

/* ---- TransformerEncoderLayer -------------------------------------------
 * Parameters (under prefix): self_attn.in_proj_weight (3E,E),
 * self_attn.in_proj_bias (3E), self_attn.out_proj.weight (E,E),
 * self_attn.out_proj.bias (E), linear1.weight (F,E), linear1.bias (F),
 * linear2.weight (E,F), linear2.bias (E), norm1.weight/bias (E),
 * norm2.weight/bias (E), initialised as PyTorch's submodules do.
 * forward: post-norm  x = norm1(x + dropout1(sa(x))); x = norm2(x + dropout2(ff(x)))
 *          pre-norm   x = x + dropout1(sa(norm1(x)));  x = x + dropout2(ff(norm2(x)))
 * with ff(x) = linear2(dropout(act(linear1(x)))) and the attention's own
 * dropout on its weights. Dropout is active only in training mode. */
typedef struct {
    qkv_module base; /* as a module: the forward without masks */
    qkv_transformer_layer_opts o;
    qkv_mha self_attn;
    qkv_nn_linear linear1, linear2;
    qkv_nn_layernorm norm1, norm2;
} qkv_transformer_encoder_layer;

QKV_API qkv_status qkv_transformer_encoder_layer_init(qkv_transformer_encoder_layer *m,
                                                      const qkv_transformer_layer_opts *o,
                                                      qkv_params *p, const char *prefix,
                                                      qkv_rng *rng);
/* src (S,N,E) ((N,S,E) batch_first, (S,E) unbatched) -> out like src.
 * Reads masks->src_mask, src_key_padding_mask, src_causal. */
QKV_API qkv_status qkv_transformer_encoder_layer_forward(qkv_ctx *c,
                                                         const qkv_transformer_encoder_layer *m,
                                                         qkv_tensor *src,
                                                         const qkv_transformer_masks *masks,
                                                         qkv_tensor **out);

/* ---- TransformerDecoderLayer -------------------------------------------
 * Parameters: self_attn.*, multihead_attn.* (as above), linear1.*,
 * linear2.*, norm1.*, norm2.*, norm3.*.
 * forward: post-norm  x = norm1(x + sa(x)); x = norm2(x + mha(x, memory)); x = norm3(x + ff(x))
 *          pre-norm   x = x + sa(norm1(x)); x = x + mha(norm2(x), memory); x = x + ff(norm3(x))
 * each block followed by its dropout (dropout1, dropout2, dropout3). */
typedef struct {
    /* As a module: its type name; the one-input forward fails with a
     * message (a decoder needs memory: call the _forward below). */
    qkv_module base;
    qkv_transformer_layer_opts o;
    qkv_mha self_attn, multihead_attn;
    qkv_nn_linear linear1, linear2;
    qkv_nn_layernorm norm1, norm2, norm3;
} qkv_transformer_decoder_layer;

QKV_API qkv_status qkv_transformer_decoder_layer_init(qkv_transformer_decoder_layer *m,
                                                      const qkv_transformer_layer_opts *o,
                                                      qkv_params *p, const char *prefix,
                                                      qkv_rng *rng);
/* tgt (T,N,E), memory (S,N,E) (batch_first: (N,T,E), (N,S,E); unbatched:
 * (T,E), (S,E)) -> out like tgt. Reads masks->tgt_*, memory_*. */
QKV_API qkv_status qkv_transformer_decoder_layer_forward(qkv_ctx *c,
                                                         const qkv_transformer_decoder_layer *m,
                                                         qkv_tensor *tgt, qkv_tensor *memory,
                                                         const qkv_transformer_masks *masks,
                                                         qkv_tensor **out);

/* ---- TransformerEncoder, TransformerDecoder ----------------------------
 * num_layers layers named "layers.<i>." and, when norm_eps > 0, a final
 * LayerNorm(d_model, eps=norm_eps) "norm.weight", "norm.bias": the
 * norm=nn.LayerNorm(d_model, eps) argument of TransformerEncoder(layer,
 * num_layers, norm), its eps its own (0: norm=None; PyTorch's LayerNorm
 * default is 1e-5; an eps >= 1, such as the 1 of the flag this argument
 * replaced, is refused). As
 * PyTorch's _get_clones deep-copies one layer, every layer starts with the
 * same values (layer 0's; the caller's rng advances by one layer's draws).
 * num_layers may be 0 (then only the norm, if any, is applied). The layers
 * array is allocated here: call _free (the parameters stay in p). */
typedef struct {
    qkv_module base; /* as a module: the forward without masks */
    qkv_transformer_layer_opts o;
    int64_t num_layers;
    qkv_transformer_encoder_layer *layers; /* (num_layers) */
    int has_norm;
    qkv_nn_layernorm norm; /* when has_norm */
} qkv_transformer_encoder;

QKV_API qkv_status qkv_transformer_encoder_init(qkv_transformer_encoder *m,
                                                const qkv_transformer_layer_opts *o,
                                                int64_t num_layers, float norm_eps, qkv_params *p,
                                                const char *prefix, qkv_rng *rng);
QKV_API void qkv_transformer_encoder_free(qkv_transformer_encoder *m);
/* TransformerEncoder.forward(src, mask=src_mask, src_key_padding_mask). */
QKV_API qkv_status qkv_transformer_encoder_forward(qkv_ctx *c, const qkv_transformer_encoder *m,
                                                   qkv_tensor *src,
                                                   const qkv_transformer_masks *masks,
                                                   qkv_tensor **out);

typedef struct {
    qkv_module base; /* as the decoder layer's: the type, no one-input forward */
    qkv_transformer_layer_opts o;
    int64_t num_layers;
    qkv_transformer_decoder_layer *layers; /* (num_layers) */
    int has_norm;
    qkv_nn_layernorm norm;
} qkv_transformer_decoder;

QKV_API qkv_status qkv_transformer_decoder_init(qkv_transformer_decoder *m,
                                                const qkv_transformer_layer_opts *o,
                                                int64_t num_layers, float norm_eps, qkv_params *p,
                                                const char *prefix, qkv_rng *rng);
QKV_API void qkv_transformer_decoder_free(qkv_transformer_decoder *m);
/* TransformerDecoder.forward(tgt, memory, tgt_mask, memory_mask,
 * tgt_key_padding_mask, memory_key_padding_mask). */
QKV_API qkv_status qkv_transformer_decoder_forward(qkv_ctx *c, const qkv_transformer_decoder *m,
                                                   qkv_tensor *tgt, qkv_tensor *memory,
                                                   const qkv_transformer_masks *masks,
                                                   qkv_tensor **out);

/* ---- Transformer --------------------------------------------------------
 * nn.Transformer(d_model, nhead, num_encoder_layers, num_decoder_layers,
 * dim_feedforward, dropout, activation, layer_norm_eps, batch_first,
 * norm_first, bias): the layers' options (every layer gets them, as
 * nn.Transformer passes its arguments on) and the two layer counts.
 * qkv_transformer_opts_default() is nn.Transformer(): layer =
 * qkv_transformer_layer_opts_default(512, 8), 6 and 6 layers. */
typedef struct {
    qkv_transformer_layer_opts layer;
    int64_t num_encoder_layers, num_decoder_layers;
} qkv_transformer_opts;

QKV_API qkv_transformer_opts qkv_transformer_opts_default(void);

/* "encoder.layers.<i>.", "encoder.norm.", "decoder.layers.<i>.",
 * "decoder.norm." (nn.Transformer always has both final norms, with
 * layer.layer_norm_eps). After the
 * submodules' initialisation, _reset_parameters: xavier_uniform_ on every
 * parameter with more than one dim (this replaces MultiheadAttention's
 * out_proj and the Linear layers' weight init; biases keep theirs). */
typedef struct {
    qkv_transformer_opts o;
    qkv_transformer_encoder encoder;
    qkv_transformer_decoder decoder;
} qkv_transformer;

QKV_API qkv_status qkv_transformer_init(qkv_transformer *m, const qkv_transformer_opts *o,
                                        qkv_params *p, const char *prefix, qkv_rng *rng);
QKV_API void qkv_transformer_free(qkv_transformer *m);
/* Transformer.forward: memory = encoder(src, src_mask, src_key_padding_mask);
 * out = decoder(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
 * memory_key_padding_mask). src (S,N,E), tgt (T,N,E) (batch_first (N,S,E),
 * (N,T,E); unbatched (S,E), (T,E)) -> out like tgt. */
QKV_API qkv_status qkv_transformer_forward(qkv_ctx *c, const qkv_transformer *m, qkv_tensor *src,
                                           qkv_tensor *tgt, const qkv_transformer_masks *masks,
                                           qkv_tensor **out);

/* ---- decoder-only (GPT-style) -------------------------------------------
 * A stack of TransformerEncoderLayers with causal self-attention and no
 * cross-attention: what PyTorch's GPT-style models build from
 * nn.TransformerEncoder(layer, num_layers, norm) and
 * generate_square_subsequent_mask. Names are TransformerEncoder's
 * ("layers.<i>.", "norm."), so its state_dict loads into that. */
typedef struct {
    qkv_module base; /* as a module: the causal forward without padding */
    qkv_transformer_encoder stack;
} qkv_transformer_decoder_only;

QKV_API qkv_status qkv_transformer_decoder_only_init(qkv_transformer_decoder_only *m,
                                                     const qkv_transformer_layer_opts *o,
                                                     int64_t num_layers, float norm_eps,
                                                     qkv_params *p, const char *prefix,
                                                     qkv_rng *rng);
QKV_API void qkv_transformer_decoder_only_free(qkv_transformer_decoder_only *m);
/* x (L,N,E) ((N,L,E) batch_first, (L,E) unbatched) -> out like x, position i
 * attending to positions <= i (qkv's causal flag: no (L,L) mask is built).
 * key_padding_mask: NULL, or BOOL/F32 (N,L) ((L) unbatched). For other
 * masks as well, call qkv_transformer_encoder_forward on m->stack. */
QKV_API qkv_status qkv_transformer_decoder_only_forward(qkv_ctx *c,
                                                        const qkv_transformer_decoder_only *m,
                                                        qkv_tensor *x,
                                                        const qkv_tensor *key_padding_mask,
                                                        qkv_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
