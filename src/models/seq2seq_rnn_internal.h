/* seq2seq_rnn_internal.h: the recurrent encoder-decoder's pieces that its
 * training forward (seq2seq_rnn_forward.c) and its decoding
 * (src/decode/generate_rnn.c) share: the encoder with the decoder's initial
 * state, and one decoder block (T steps of a Luong decoder, or one step of
 * the location decoder). seq2seq_rnn.c has the options, the names and init. */
#ifndef QKV_SEQ2SEQ_RNN_INTERNAL_H
#define QKV_SEQ2SEQ_RNN_INTERNAL_H
#include "models/seq_internal.h"

/* What the decoder reads and carries. */
typedef struct {
    qkv_tensor *enc;  // (N,S,K) encoder outputs H^E (0 past each row's length)
    qkv_tensor *pad;  // BOOL (N,S), true = padding; NULL when no row is padded
    qkv_tensor *last; // (N,1,K) the top layer's final encoder state [fwd; bwd] (NONE's context)
    qkv_tensor *h;    // (nl,N,H) the decoder's state
    qkv_tensor *cs;   // (nl,N,H) the decoder's LSTM cell; NULL for GRU
} s2r_state;

qkv_status s2r_ready(const char *fn, const qkv_seq2seq_rnn *m);
/* src (N,S) I64 ids in the source vocabulary, lengths NULL or (N) in [1,S];
 * location attention: S <= max_length. */
qkv_status s2r_check_src(const char *fn, const qkv_seq2seq_rnn *m, const qkv_tensor *src,
                         const int64_t *lengths);
/* Runs the encoder on src (checked) and sets every field of st. */
qkv_status s2r_encode(qkv_ctx *c, const qkv_seq2seq_rnn *m, qkv_tensor *src,
                      const int64_t *lengths, s2r_state *st);
/* The decoder on ids (N,T) (checked; location: T == 1) from st->h, st->cs,
 * which it replaces by the states after the last step: logits (N,T,V),
 * weights (N,T,S) (NULL for NONE). */
qkv_status s2r_decode(qkv_ctx *c, const qkv_seq2seq_rnn *m, s2r_state *st, qkv_tensor *ids,
                      qkv_tensor **logits, qkv_tensor **weights);

#endif
