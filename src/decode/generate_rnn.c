/* generate_rnn.c: greedy decoding, sampling and beam search of the
 * recurrent encoder-decoder (qkv_seq2seq_rnn) through the loops of
 * greedy.c and beam.c. The model has no KV cache: its decoding state is
 * the encoder's outputs (computed once) and the decoder's states, kept in
 * malloc'd buffers across the loops' ctx resets; each token is one
 * decoder step (s2r_decode with T = 1), the step the training forward
 * takes when it feeds the model its own argmax. */
#include <stdlib.h>
#include <string.h>
#include "decode/decode_internal.h"
#include "models/seq2seq_rnn_internal.h"

/* R = N * B rows (B = num_beams for beam search, else 1); row n*B + b
 * decodes input n. */
typedef struct {
    const qkv_seq2seq_rnn *m;
    int64_t R, S, K, nl, H;
    float *enc;    // (R,S,K) encoder outputs
    uint8_t *pad;  // (R,S) source padding, or NULL
    float *last;   // (R,K) the last encoder state (NONE's context)
    float *h, *cs; // (nl,R,H) decoder states; cs NULL for GRU
    float *tmp;    // (nl,R,H) scratch for the reordering
} rnn_gen;

static void rnn_gen_free(rnn_gen *s)
{
    free(s->enc), free(s->pad), free(s->last), free(s->h), free(s->cs), free(s->tmp);
}

/* x (N,row...) into dst (N*B,row...), row n*B + b a copy of row n. */
static void repeat_rows(void *dst, const void *src, int64_t N, int64_t B, size_t row)
{
    for (int64_t r = 0; r < N * B; r++)
        memcpy((char *)dst + (size_t)r * row, (const char *)src + (size_t)(r / B) * row, row);
}

/* (nl,N,H) into (nl,N*B,H), rows repeated within each layer. */
static void repeat_states(float *dst, const float *src, int64_t nl, int64_t N, int64_t B, int64_t H)
{
    for (int64_t l = 0; l < nl; l++)
        repeat_rows(dst + l * N * B * H, src + l * N * H, N, B, (size_t)H * sizeof(float));
}

/* Encodes src (N,S) and keeps the state for R = N * B rows. */
static qkv_status rnn_gen_begin(const char *fn, qkv_ctx *c, rnn_gen *s, qkv_tensor *src,
                                const int64_t *lengths, int64_t B)
{
    const qkv_seq2seq_rnn *m = s->m;
    s2r_state st;
    QKV_TRY(s2r_encode(c, m, src, lengths, &st));
    int64_t N = src->shape[0];
    s->S = src->shape[1], s->K = st.enc->shape[2], s->nl = m->o.num_layers, s->H = m->o.hidden_size;
    s->R = N * B;
    size_t ns = (size_t)(s->nl * s->R * s->H) * sizeof(float);
    s->enc = malloc((size_t)(s->R * s->S * s->K) * sizeof(float));
    s->last = malloc((size_t)(s->R * s->K) * sizeof(float));
    s->h = malloc(ns), s->tmp = malloc(ns);
    s->pad = st.pad ? malloc((size_t)(s->R * s->S)) : NULL;
    s->cs = st.cs ? malloc(ns) : NULL;
    if (!s->enc || !s->last || !s->h || !s->tmp || (st.pad && !s->pad) || (st.cs && !s->cs))
        return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for the decoding state", fn);
    repeat_rows(s->enc, st.enc->data, N, B, (size_t)(s->S * s->K) * sizeof(float));
    repeat_rows(s->last, st.last->data, N, B, (size_t)s->K * sizeof(float));
    if (st.pad) repeat_rows(s->pad, st.pad->mask, N, B, (size_t)s->S);
    repeat_states(s->h, st.h->data, s->nl, N, B, s->H);
    if (st.cs) repeat_states(s->cs, st.cs->data, s->nl, N, B, s->H);
    return QKV_OK;
}

/* One decoder step of every row from the kept state: next (R) -> out (R,V). */
static qkv_status rnn_feed(const char *fn, qkv_ctx *c, const dec_model *g, const int64_t *next,
                           float *out)
{
    rnn_gen *s = g->state;
    qkv_arena *a = qkv_ctx_arena(c);
    int64_t R = s->R, S = s->S, K = s->K, nl = s->nl, H = s->H;
    s2r_state st = {0};
    qkv_tensor *ids, *logits, *w;
    QKV_TRY(qkv_tensor_wrap(a, s->enc, 3, (int64_t[]){R, S, K}, &st.enc));
    QKV_TRY(qkv_tensor_wrap(a, s->last, 3, (int64_t[]){R, 1, K}, &st.last));
    QKV_TRY(qkv_tensor_wrap(a, s->h, 3, (int64_t[]){nl, R, H}, &st.h));
    if (s->pad) QKV_TRY(qkv_tensor_wrap_bool(a, s->pad, 2, (int64_t[]){R, S}, &st.pad));
    if (s->cs) QKV_TRY(qkv_tensor_wrap(a, s->cs, 3, (int64_t[]){nl, R, H}, &st.cs));
    QKV_TRY(qkv_tensor_new(a, QKV_I64, 2, (int64_t[]){R, 1}, &ids));
    memcpy(ids->idx, next, (size_t)R * sizeof *next);
    QKV_TRY(s2r_decode(c, s->m, &st, ids, &logits, &w)); // (R,1,V)
    memcpy(out, logits->data, (size_t)(R * g->V) * sizeof(float));
    memcpy(s->h, st.h->data, (size_t)(nl * R * H) * sizeof(float));
    if (s->cs) memcpy(s->cs, st.cs->data, (size_t)(nl * R * H) * sizeof(float));
    return QKV_OK;
}

/* Row r of the decoder states becomes row rows[r]. The encoder's rows need
 * no reordering: beam search only moves rows among one input's beams,
 * which share its encoding. */
static qkv_status rnn_reorder(qkv_ctx *c, const dec_model *g, const int64_t *rows)
{
    rnn_gen *s = g->state;
    int64_t R = s->R, H = s->H;
    float *st[2] = {s->h, s->cs};
    for (int i = 0; i < 2 && st[i]; i++) {
        for (int64_t l = 0; l < s->nl; l++)
            for (int64_t r = 0; r < R; r++)
                memcpy(s->tmp + (l * R + r) * H, st[i] + (l * R + rows[r]) * H, (size_t)H * sizeof(float));
        memcpy(st[i], s->tmp, (size_t)(s->nl * R * H) * sizeof(float));
    }
    return QKV_OK;
}

static qkv_status rnn_generate_run(const char *fn, qkv_ctx *c, const qkv_seq2seq_rnn *m,
                                   qkv_tensor *src, const int64_t *src_lengths, int64_t bos,
                                   const qkv_generate_opts *o, int64_t *tokens, int64_t *lengths,
                                   float *scores)
{
    int64_t B = o->kind == QKV_DECODE_BEAM ? o->num_beams : 1, N = src->shape[0], R = N * B;
    rnn_gen s = {m, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL};
    dec_model g = {m, NULL, NULL, m->o.tgt_vocab, rnn_feed, rnn_reorder, &s, R};
    float *logits = malloc((size_t)(R * g.V) * sizeof(float)); // (R,V)
    int64_t *first = malloc((size_t)R * sizeof *first);       // (R) bos
    qkv_status st = logits && first ? QKV_OK : qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    for (int64_t r = 0; st == QKV_OK && r < R; r++) first[r] = bos;
    if (st == QKV_OK) st = rnn_gen_begin(fn, c, &s, src, src_lengths, B);
    if (st == QKV_OK) st = dec_feed_tokens(fn, c, &g, NULL, o, first, logits);
    if (st == QKV_OK) st = dec_run(fn, c, &g, NULL, o, N, logits, tokens, lengths, scores);
    rnn_gen_free(&s);
    free(logits);
    free(first);
    return st;
}

qkv_status qkv_seq2seq_rnn_generate(qkv_ctx *c, const qkv_seq2seq_rnn *m, qkv_tensor *src,
                                    const int64_t *src_lengths, int64_t bos_id,
                                    const qkv_generate_opts *o, int64_t *tokens,
                                    int64_t *lengths, float *scores)
{
    const char *fn = "seq2seq_rnn_generate";
    QKV_NEED(c, fn, "ctx");
    QKV_NEED(o, fn, "opts");
    QKV_NEED(tokens, fn, "tokens");
    QKV_NEED(lengths, fn, "lengths");
    QKV_TRY(s2r_ready(fn, m));
    QKV_TRY(s2r_check_src(fn, m, src, src_lengths));
    QKV_TRY(dec_check_generate_opts(fn, o, m->o.tgt_vocab));
    if (bos_id < 0 || bos_id >= m->o.tgt_vocab)
        return qkv_fail(QKV_ERR_ARG, "%s: bos_id %lld outside [0, tgt_vocab %lld)", fn,
                        (long long)bos_id, (long long)m->o.tgt_vocab);
    if (m->o.attention == QKV_RNN_ATTN_LOCATION && o->max_new_tokens > m->o.max_length)
        return qkv_fail(QKV_ERR_SHAPE, "%s: max_new_tokens %lld is more than location attention's "
                        "max_length %lld", fn, (long long)o->max_new_tokens,
                        (long long)m->o.max_length);
    int was;
    QKV_TRY(tfm_infer_begin(fn, c, &was));
    qkv_status s = rnn_generate_run(fn, c, m, src, src_lengths, bos_id, o, tokens, lengths, scores);
    qkv_ctx_set_grad(c, was);
    return s;
}
