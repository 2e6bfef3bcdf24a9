/* qkv/decode.h: autoregressive decoding of the models of qkv/generate.h
 * (src/decode/): greedy decoding, beam search and sampling (temperature,
 * top-k, top-p), for a batch of prompts of different lengths, through the
 * KV cache. docs/generation.md has the formulas and the rules.
 *
 * Inference only: the generate calls run as under torch.no_grad() and
 * fail in training mode. */
#include "qkv.h" /* first: qkv.h includes every area header in order */
#ifndef QKV_DECODE_H
#define QKV_DECODE_H
#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    QKV_DECODE_GREEDY = 0, /* argmax (the lowest id on ties) */
    QKV_DECODE_SAMPLE,     /* temperature, top-k, top-p, seeded */
    QKV_DECODE_BEAM        /* beam search */
} qkv_decode_kind;

typedef enum {
    QKV_LENGTH_PENALTY_GNMT = 0, /* lp(len) = ((5 + len) / 6)^alpha (Wu et al. 2016) */
    QKV_LENGTH_PENALTY_POWER     /* lp(len) = len^alpha (Hugging Face's) */
} qkv_length_penalty;

typedef struct {
    qkv_decode_kind kind;          /* default greedy */
    int64_t max_new_tokens;        /* >= 1; default 20 */
    int64_t end_id;                /* the end token, -1 (default) for none */
    int64_t pad_id;                /* written after a row's end; default 0 */
    /* sampling: p ~ softmax(logits / temperature), keep the top_k largest
     * (0: all), then the smallest set of most likely tokens whose
     * probability reaches top_p (1: all), renormalised. */
    float temperature;             /* > 0; default 1 */
    int64_t top_k;                 /* >= 0; default 0 */
    float top_p;                   /* in (0,1]; default 1 */
    uint64_t seed;                 /* row n draws from qkv_rng seeded seed + n; default 0 */
    /* beam search: hypotheses scored sum(log p) / lp(len), len = tokens
     * generated (the end token included). */
    int64_t num_beams;             /* >= 1; default 4 */
    float length_penalty;          /* alpha, finite; default 0.6 */
    qkv_length_penalty length_penalty_kind; /* default GNMT */
    /* ids never generated (Hugging Face's suppress_tokens): their logits
     * are -inf before every choice, e.g. the padding and start tokens of a
     * translation model, whose logits training never pushed down. */
    const int64_t *suppress_ids;   /* (n_suppress) in [0,V), or NULL; default NULL */
    int64_t n_suppress;            /* >= 0, not every id; default 0 */
} qkv_generate_opts;

QKV_API qkv_generate_opts qkv_generate_opts_default(void);

/* Generates up to o->max_new_tokens tokens for each of the N rows.
 * Output (caller's memory): tokens (N, max_new_tokens), row n's first
 * lengths[n] entries generated (the end token included when reached), the
 * rest pad_id; scores (N) or NULL: the sum of log-softmax(logits) of the
 * tokens generated (temperature 1, unfiltered), divided by lp(len) for
 * beam search. The ctx is reset before every token (tensors from it do not
 * survive the call); grad mode is restored on return.
 * The cache kc needs batch N (greedy, sampling) or N * num_beams (beam)
 * and room for the prompt + max_new_tokens - 1 positions; it is emptied
 * first and holds the sequences after.
 *
 * Language model: prompt (N,P) ids, left-padded: prompt_padding_mask NULL
 * or BOOL (N,P) with every row's last position not padding. */
QKV_API qkv_status qkv_lm_generate(qkv_ctx *c, const qkv_lm *m, qkv_kv_cache *kc,
                                   qkv_tensor *prompt, const qkv_tensor *prompt_padding_mask,
                                   const qkv_generate_opts *o, int64_t *tokens, int64_t *lengths,
                                   float *scores);
/* Encoder-decoder: src (N,S) ids with src_padding_mask NULL or BOOL (N,S)
 * (any padding); decoding starts from bos_id, which is not in tokens. */
QKV_API qkv_status qkv_seq2seq_generate(qkv_ctx *c, const qkv_seq2seq *m, qkv_kv_cache *kc,
                                        qkv_tensor *src, const qkv_tensor *src_padding_mask,
                                        int64_t bos_id, const qkv_generate_opts *o, int64_t *tokens,
                                        int64_t *lengths, float *scores);

/* The recurrent encoder-decoder (qkv_seq2seq_rnn): src (N,S) ids with
 * src_lengths NULL or (N) in [1,S] (as its forward); decoding starts from
 * bos_id, which is not in tokens. No cache: the model's state (the
 * encoder's outputs, the decoder's states) is kept for N rows (greedy,
 * sampling) or N * num_beams (beam). Location attention needs
 * max_new_tokens <= max_length. The attention weights of a decoded output
 * are those of qkv_seq2seq_rnn_forward run with it as tgt_in (bos then the
 * tokens), in eval mode. */
QKV_API qkv_status qkv_seq2seq_rnn_generate(qkv_ctx *c, const qkv_seq2seq_rnn *m, qkv_tensor *src,
                                            const int64_t *src_lengths, int64_t bos_id,
                                            const qkv_generate_opts *o, int64_t *tokens,
                                            int64_t *lengths, float *scores);

/* The sampling distribution of one logits vector (V) under o's
 * temperature, top_k and top_p: probs (V), zero outside the kept set. Ties
 * at the top-k or top-p cut keep the lower ids. Scratch from the ctx's
 * arena, released before returning. */
QKV_API qkv_status qkv_sample_probs(qkv_ctx *c, const float *logits, int64_t V,
                                    const qkv_generate_opts *o, float *probs);
/* One draw from that distribution: u = qkv_rng_uniform(rng), the first id
 * whose cumulative probability exceeds u * total. */
QKV_API qkv_status qkv_sample_token(qkv_ctx *c, const float *logits, int64_t V,
                                    const qkv_generate_opts *o, qkv_rng *rng, int64_t *token);

#ifdef __cplusplus
}
#endif
#endif
