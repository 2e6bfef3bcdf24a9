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

typedef struct dec_model dec_model;
/* A model without a KV cache (the recurrent seq2seq, generate_rnn.c):
 * feeds one token per row, next (R), and leaves the logits (R,V) in out;
 * reorder makes row r what row rows[r] was (beam search). */
typedef qkv_status (*dec_feed_fn)(const char *fn, qkv_ctx *c, const dec_model *g,
                                  const int64_t *next, float *out);
typedef qkv_status (*dec_reorder_fn)(qkv_ctx *c, const dec_model *g, const int64_t *rows);

/* One model as the decoding loops see it: a cached transformer (hidden,
 * logits, and the loops' kc), or a model with its own state (feed,
 * reorder, state, rows; the loops' kc is NULL). */
struct dec_model {
    const void *m;        /* the qkv_lm, qkv_seq2seq or qkv_seq2seq_rnn */
    dec_hidden_fn hidden;
    dec_logits_fn logits;
    int64_t V;            /* vocabulary (of the target) */
    dec_feed_fn feed;
    dec_reorder_fn reorder;
    void *state;
    int64_t rows;         /* R without a cache */
};

/* generate.c: feeds ids (R,T) through the cached forward; the last
 * position's logits into out (R,V). Only that position goes through the
 * output layer. */
qkv_status dec_model_step(const char *fn, qkv_ctx *c, const dec_model *g, qkv_kv_cache *kc,
                          qkv_tensor *ids, const qkv_tensor *pad, float *out);
/* generate.c: resets the ctx and feeds one token per row, next (R),
 * through g->feed or the cache kc; the logits (R,V) in out, o's
 * suppressed ids at -inf. */
qkv_status dec_feed_tokens(const char *fn, qkv_ctx *c, const dec_model *g, qkv_kv_cache *kc,
                           const qkv_generate_opts *o, int64_t *next, float *out);
/* generate.c: o's suppressed ids of logits (R,V) set to -inf. */
void dec_suppress(const qkv_generate_opts *o, int64_t R, int64_t V, float *logits);

/* generate.c: the checks of o shared by every generate call (V: the
 * vocabulary), and the decoding after the first logits (R,V): tokens,
 * lengths filled with pad_id and 0, then greedy, sampling or beam search. */
qkv_status dec_check_generate_opts(const char *fn, const qkv_generate_opts *o, int64_t V);
qkv_status dec_run(const char *fn, qkv_ctx *c, const dec_model *g, qkv_kv_cache *kc,
                   const qkv_generate_opts *o, int64_t N, float *logits, int64_t *tokens,
                   int64_t *lengths, float *scores);

/* sample.c: temperature, top_k, top_p in range. */
qkv_status dec_check_sampling(const char *fn, const qkv_generate_opts *o);

/* The loops, after the prefill left the first logits (R,V) in logits
 * (overwritten step by step). tokens (N,M) and lengths (N) come in filled
 * with pad_id and 0; scores (N) or NULL. The cache (or g->rows) has R rows:
 * N for greedy and sampling (greedy.c), N * num_beams for beam search
 * (beam.c). */
qkv_status dec_greedy(const char *fn, qkv_ctx *c, const dec_model *g, qkv_kv_cache *kc,
                      const qkv_generate_opts *o, float *logits, int64_t *tokens,
                      int64_t *lengths, float *scores);
qkv_status dec_beam(const char *fn, qkv_ctx *c, const dec_model *g, qkv_kv_cache *kc,
                    const qkv_generate_opts *o, float *logits, int64_t *tokens,
                    int64_t *lengths, float *scores);

#endif
