/* transformer_internal.h: what transformer.c (options, checks, layers) and
 * transformer_stack.c (encoder, decoder, Transformer, decoder-only) share. */
#ifndef QKV_TRANSFORMER_INTERNAL_H
#define QKV_TRANSFORMER_INTERNAL_H
#include "core/internal.h"
#include "qkv/transformer.h"
#include "qkv.h"

/* The dims of one sequence argument: batched or not, batch size N (1 when
 * unbatched) and length L. */
typedef struct {
    int batched;
    int64_t N, L;
} tfm_seq;

/* Options: positive sizes, d_model % nhead == 0, dropout in [0,1], a known
 * activation, finite eps > 0. fn names the calling function. */
qkv_status tfm_check_opts(const char *fn, const qkv_transformer_layer_opts *o);
/* Parameter name prefixes are at most TFM_MAX_PREFIX characters, so that
 * every name built under one fits TFM_NAME_BUF ("encoder.layers.<i>." and
 * "multihead_attn.out_proj.weight" included). */
#define TFM_MAX_PREFIX 256
#define TFM_NAME_BUF 512
qkv_status tfm_check_prefix(const char *fn, const char *prefix);
/* What every layer and stack _init checks after zeroing its module: opts,
 * params and rng present, tfm_check_opts, tfm_check_prefix. */
qkv_status tfm_check_init(const char *fn, const qkv_transformer_layer_opts *o, const qkv_params *p,
                          const char *prefix, const qkv_rng *rng);
/* prefix + name into buf (n bytes); fails naming fn if it does not fit. */
qkv_status tfm_join(const char *fn, char *buf, size_t n, const char *prefix, const char *name);

/* Checks of forward arguments; messages name fn and the argument. */
qkv_status tfm_check_seq(const char *fn, const char *name, const qkv_tensor *x,
                         const qkv_transformer_layer_opts *o, tfm_seq *d);
/* b is batched like a and has its batch size. */
qkv_status tfm_check_pair(const char *fn, const char *an, const qkv_tensor *a, const tfm_seq *da,
                          const char *bn, const qkv_tensor *b, const tfm_seq *db, int batch_first);
/* The masks of the encoder's self-attention over src (s): src_mask,
 * src_key_padding_mask, src_causal, named in messages with pre ("src_", or
 * "" for the decoder-only stack) and the length as sym ("S", "L"). */
qkv_status tfm_check_src_masks(const char *fn, const qkv_transformer_layer_opts *o,
                               const qkv_transformer_masks *mk, const tfm_seq *s, const char *pre,
                               const char *sym);
/* The masks of the decoder's attentions: tgt (t) over itself, over memory (s). */
qkv_status tfm_check_tgt_masks(const char *fn, const qkv_transformer_layer_opts *o,
                               const qkv_transformer_masks *mk, const tfm_seq *t,
                               const tfm_seq *s);

/* The attention of a layer's attention block (before the block's dropout),
 * which the layers' forwards call for each attention. The plain forwards
 * use tfm_attn_masked (MultiheadAttention with the masks); the KV cache's
 * incremental forward (kvcache.c) supplies one that reads and appends to
 * the cache. x is the block's input, like the layer's; y like x. */
typedef enum {
    TFM_ATTN_ENCODER_SELF = 0, /* an encoder layer's self_attn (src_* masks) */
    TFM_ATTN_DECODER_SELF,     /* a decoder layer's self_attn (tgt_* masks) */
    TFM_ATTN_CROSS             /* a decoder layer's multihead_attn over memory (memory_*) */
} tfm_attn_kind;
typedef qkv_status (*tfm_attn_fn)(qkv_ctx *c, const qkv_mha *m, tfm_attn_kind kind,
                                  qkv_tensor *x, void *arg, qkv_tensor **y);
typedef struct {
    tfm_attn_fn fn;
    void *arg;
} tfm_attn;
/* tfm_attn_masked's arg: the masks, and memory for the cross-attention. */
typedef struct {
    const qkv_transformer_masks *masks;
    qkv_tensor *memory;
} tfm_mask_arg;
qkv_status tfm_attn_masked(qkv_ctx *c, const qkv_mha *m, tfm_attn_kind kind, qkv_tensor *x,
                           void *arg, qkv_tensor **y);

/* Unchecked forwards of one layer with the attentions given. */
qkv_status tfm_encoder_layer_run_attn(qkv_ctx *c, const qkv_transformer_encoder_layer *m,
                                      qkv_tensor *x, const tfm_attn *at, qkv_tensor **out);
qkv_status tfm_decoder_layer_run_attn(qkv_ctx *c, const qkv_transformer_decoder_layer *m,
                                      qkv_tensor *x, const tfm_attn *at, qkv_tensor **out);

/* Unchecked forwards of one layer (the public functions check first). */
qkv_status tfm_encoder_layer_run(qkv_ctx *c, const qkv_transformer_encoder_layer *m,
                                 qkv_tensor *x, const qkv_transformer_masks *mk,
                                 qkv_tensor **out);
qkv_status tfm_decoder_layer_run(qkv_ctx *c, const qkv_transformer_decoder_layer *m,
                                 qkv_tensor *x, qkv_tensor *memory,
                                 const qkv_transformer_masks *mk, qkv_tensor **out);
/* LayerNorm(d_model, eps) named prefix+name ("norm1.", "norm."): weight
 * ones, bias zeros (no bias when o->bias is 0). */
qkv_status tfm_norm_init(qkv_nn_layernorm *n, const qkv_transformer_layer_opts *o, qkv_params *p,
                         const char *prefix, const char *name);
qkv_status tfm_norm_run(qkv_ctx *c, const qkv_nn_layernorm *n, qkv_tensor *x, qkv_tensor **y);
/* The one-input module forward of the decoders: fails, naming the calls
 * that take memory. */
qkv_status tfm_module_needs_memory(qkv_ctx *c, qkv_module *base, qkv_tensor *x, qkv_tensor **y);

/* ---- generation (kvcache.c; used by src/models/lm.c, seq2seq.c and src/decode/) ---- */
/* qkv_kv_cache_reorder, with the memory's keys and values left in place
 * when cross is 0 (beam search: the beams of one source share them). */
/* True when the cache was initialised (in fp32 or fp16). */
static inline int tfm_cache_ready(const qkv_kv_cache *kc) { return kc->k || kc->k16; }
qkv_status tfm_cache_reorder(qkv_ctx *c, qkv_kv_cache *kc, const int64_t *rows, int cross);
/* Inference mode for fn: fails in training mode; turns grad off and gives
 * the caller's grad mode in *was (restore it with qkv_ctx_set_grad). */
qkv_status tfm_infer_begin(const char *fn, qkv_ctx *c, int *was);

/* The checks shared by the decoder layer's and the decoder stack's
 * forwards: pointers, initialisation (init names the init function), tgt
 * and memory shapes, masks; fills mk with masks or the defaults. o may be
 * NULL only when m is (then the NULL check reports it). */
qkv_status tfm_check_decoder_call(const char *fn, const char *init, qkv_ctx *c, const void *m,
                                  const qkv_transformer_layer_opts *o, qkv_tensor *tgt,
                                  qkv_tensor *memory, const qkv_transformer_masks *masks,
                                  qkv_transformer_masks *mk, qkv_tensor **out);

#endif
