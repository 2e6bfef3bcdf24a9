/* decode_internal.h: what the decoding files share. generate.c has the
 * entry points (qkv_lm_generate, qkv_seq2seq_generate), their checks and
 * one decoding step of a model; greedy.c greedy decoding and sampling;
 * beam.c beam search; sample.c the sampling distribution.
 *
 * The loops see a model only through dec_model: the cached stack's output
 * and the output layer of the language model or of the encoder-decoder
 * (src/models/seq_internal.h), so one loop serves both. Decoding sits on
 * the models' floor, never the other way round. */
#ifndef QKV_DECODE_INTERNAL_H
#define QKV_DECODE_INTERNAL_H
#include "models/seq_internal.h"

/* h (R,T,E): the cached stack's output for the new tokens ids (R,T). */
typedef qkv_status (*dec_hidden_fn)(const char *fn, qkv_ctx *c, const void *m,
                                    qkv_kv_cache *kc, qkv_tensor *ids, const qkv_tensor *pad,
                                    qkv_tensor **h);
/* logits (...,V) of h (...,E). */
typedef qkv_status (*dec_logits_fn)(qkv_ctx *c, const void *m, qkv_tensor *h,
                                    qkv_tensor **logits);

/* One model as the decoding loops see it. */
typedef struct {
    const void *m;        /* the qkv_lm or qkv_seq2seq */
    dec_hidden_fn hidden;
    dec_logits_fn logits;
    int64_t V;            /* vocabulary (of the target) */
} dec_model;

/* generate.c: feeds ids (R,T) through the cached forward; the last
 * position's logits into out (R,V). Only that position goes through the
 * output layer. */
qkv_status dec_model_step(const char *fn, qkv_ctx *c, const dec_model *g, qkv_kv_cache *kc,
                          qkv_tensor *ids, const qkv_tensor *pad, float *out);
/* generate.c: resets the ctx and feeds one token per row, next (R). */
qkv_status dec_feed_tokens(const char *fn, qkv_ctx *c, const dec_model *g, qkv_kv_cache *kc,
                           int64_t *next, float *out);

/* sample.c: temperature, top_k, top_p in range. */
qkv_status dec_check_sampling(const char *fn, const qkv_generate_opts *o);

/* The loops, after the prefill left the first logits (R,V) in logits
 * (overwritten step by step). tokens (N,M) and lengths (N) come in filled
 * with pad_id and 0; scores (N) or NULL. The cache has R = kc->batch rows:
 * N for greedy and sampling (greedy.c), N * num_beams for beam search
 * (beam.c). */
qkv_status dec_greedy(const char *fn, qkv_ctx *c, const dec_model *g, qkv_kv_cache *kc,
                      const qkv_generate_opts *o, float *logits, int64_t *tokens,
                      int64_t *lengths, float *scores);
qkv_status dec_beam(const char *fn, qkv_ctx *c, const dec_model *g, qkv_kv_cache *kc,
                    const qkv_generate_opts *o, float *logits, int64_t *tokens,
                    int64_t *lengths, float *scores);

#endif
