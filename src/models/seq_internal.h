/* seq_internal.h: what the token models share (seq_embed.c: the checks of
 * token ids and padding masks, the embedding with positions) and what the
 * decoding loops (src/decode/) call of them: the cached stacks' output and
 * the output layer, separately, so that a decoding step runs the output
 * layer on the last position only. lm.c is the decoder-only language model,
 * seq2seq.c the encoder-decoder; their cache is kvcache.c's. */
#ifndef QKV_SEQ_INTERNAL_H
#define QKV_SEQ_INTERNAL_H
#include "models/transformer_internal.h"

/* ---- checks (seq_embed.c) ---- */

/* What both models' _init check first: the module m present, then zeroed
 * (size bytes), and opts, params and rng present. */
qkv_status seq_init_begin(const char *fn, void *m, size_t size, const void *opts,
                          const qkv_params *p, const qkv_rng *rng);

/* ids: I64 (N,T) with T >= 1. */
qkv_status seq_check_ids(const char *fn, const char *name, const qkv_tensor *ids);
/* mask: NULL or BOOL shaped like ids. */
qkv_status seq_check_pad(const char *fn, const char *name, const qkv_tensor *mask,
                         const qkv_tensor *ids);
/* A known qkv_posenc_kind; sinusoidal needs an even d_model. */
qkv_status seq_check_posenc(const char *fn, qkv_posenc_kind k, int64_t d_model);

/* ---- embedding with positions (seq_embed.c) ---- */

/* The embedding of token ids at their positions: tok(ids) + table(pos),
 * the table learned (rows of learned->weight) or sinusoidal; none with
 * QKV_POSENC_NONE or QKV_POSENC_ROTARY (the attentions rotate). */
typedef struct {
    const qkv_nn_token_embedding *tok;
    const qkv_nn_learned_pos *learned;
    qkv_posenc_kind kind;
    int64_t max_len;
} seq_embed_spec;

/* x (N,T,E) for ids (N,T) (checked by the caller) with padding pad (NULL
 * or BOOL (N,T)): a token's position is the number of non-padding tokens
 * before it in its row, counted from 0. Positions must be < max_len. */
qkv_status seq_embed(const char *fn, qkv_ctx *c, const seq_embed_spec *es, qkv_tensor *ids,
                     const qkv_tensor *pad, qkv_tensor **x);
/* The same for new tokens ids (N,T) after the cache's positions: checks
 * ids (named name) and pad (named pad_name) and that N is the cache's
 * batch; counts positions from each row's non-padding positions already
 * in the cache. */
qkv_status seq_embed_cached(const char *fn, qkv_ctx *c, const seq_embed_spec *es,
                            const qkv_kv_cache *kc, const char *name, qkv_tensor *ids,
                            const char *pad_name, const qkv_tensor *pad, qkv_tensor **x);

/* Rows of a (N,...) tensor (F32, I64 or BOOL) repeated B times each:
 * (N*B,...), row n*B + b a copy of row n (beam search's beams). */
qkv_status seq_repeat_rows(qkv_ctx *c, const qkv_tensor *x, int64_t B, qkv_tensor **y);

/* ---- the models' pieces for decoding (lm.c, seq2seq.c) ----
 * *_ready: m is present and initialised. *_hidden_cached: the cached
 * stack's output h (N,T,E) for the new tokens ids (N,T) with padding pad
 * (checked; the caller is in inference mode). *_logits: the output layer,
 * h (...,E) -> logits (...,V). */
qkv_status lm_ready(const char *fn, const qkv_lm *m);
qkv_status lm_hidden_cached(const char *fn, qkv_ctx *c, const qkv_lm *m, qkv_kv_cache *kc,
                            qkv_tensor *ids, const qkv_tensor *pad, qkv_tensor **h);
qkv_status lm_logits(qkv_ctx *c, const qkv_lm *m, qkv_tensor *h, qkv_tensor **logits);

qkv_status s2s_ready(const char *fn, const qkv_seq2seq *m);
qkv_status s2s_hidden_cached(const char *fn, qkv_ctx *c, const qkv_seq2seq *m,
                             qkv_kv_cache *kc, qkv_tensor *tgt, const qkv_tensor *pad,
                             qkv_tensor **h);
qkv_status s2s_logits(qkv_ctx *c, const qkv_seq2seq *m, qkv_tensor *h, qkv_tensor **logits);
/* qkv_lm_forward_cached (lm given) or qkv_seq2seq_forward_cached (s2s
 * given, lm NULL): logits and the model checked, then in inference mode
 * the hidden states of ids over the cache and the output layer, with the
 * cache's bf16 weights too, if set. */
qkv_status seq_forward_cached(const char *fn, qkv_ctx *c, const qkv_lm *lm, const qkv_seq2seq *s2s,
                              qkv_kv_cache *kc, qkv_tensor *ids, const qkv_tensor *pad,
                              qkv_tensor **logits);
/* Encodes src (N,S) (checked) and sets the cache's memory (emptying the
 * cache), each row repeated B times (beam search; B = 1 otherwise). */
qkv_status s2s_begin(const char *fn, qkv_ctx *c, const qkv_seq2seq *m, qkv_kv_cache *kc,
                     qkv_tensor *src, const qkv_tensor *src_pad, int64_t B);

#endif
