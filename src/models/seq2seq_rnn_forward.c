/* seq2seq_rnn_forward.c: the recurrent encoder-decoder's forward, as tape
 * ops: the encoder with the bridge to the decoder's initial state, the
 * Luong decoder (the RNN over T steps, then every step's attention at
 * once) and the location decoder (one step: attention from the previous
 * state, then the RNN), and the training forward that runs them with
 * teacher forcing. The equations are in include/qkv/generate.h and
 * docs/seq2seq.md. */
#include <string.h>
#include "models/seq2seq_rnn_internal.h"

/* ---- stacking the steps ----------------------------------------------------
 * y[:, t] = x_t: parts x_t (N,1,C) (or (N,C)), t < T -> y (N,T,C). */

typedef struct {
    qkv_tensor **x, *y;
    int64_t T, N, C;
} stack_saved;

/* Differentiates y[n,t,:] = x_t[n,:]: dx_t[n,:] += dy[n,t,:]. */
static qkv_status stack_backward(qkv_ctx *c, void *p)
{
    stack_saved *s = p;
    const float *dy = s->y->grad; // (N,T,C)
    if (!dy) return QKV_OK;
    int64_t T = s->T, C = s->C;
    for (int64_t t = 0; t < T; t++) {
        if (!s->x[t]->requires_grad) continue;
        float *dx = qkv_tensor_grad(qkv_ctx_arena(c), s->x[t]); // (N,C)
        if (!dx) return QKV_ERR_NOMEM;
        for (int64_t n = 0; n < s->N; n++)
            for (int64_t j = 0; j < C; j++) dx[n * C + j] += dy[(n * T + t) * C + j];
    }
    return QKV_OK;
}

static qkv_status stack_steps(qkv_ctx *c, qkv_tensor **x, int64_t T, qkv_tensor **y)
{
    int64_t N = x[0]->shape[0], C = x[0]->shape[x[0]->ndim - 1];
    int rec = qkv_ctx_recording(c, x, (int)T);
    QKV_TRY(qkv_ctx_tensor(c, 3, (int64_t[]){N, T, C}, rec, y));
    float *yd = (*y)->data; // (N,T,C)
    for (int64_t t = 0; t < T; t++)
        for (int64_t n = 0; n < N; n++)
            memcpy(yd + (n * T + t) * C, x[t]->data + n * C, (size_t)C * sizeof(float));
    if (!rec) return QKV_OK;
    stack_saved *s = qkv_ctx_alloc(c, sizeof *s);
    qkv_tensor **xs = qkv_ctx_alloc(c, (size_t)T * sizeof *xs);
    if (!s || !xs) return QKV_ERR_NOMEM;
    memcpy(xs, x, (size_t)T * sizeof *xs);
    *s = (stack_saved){xs, *y, T, N, C};
    return qkv_ctx_record(c, stack_backward, s);
}

/* ---- the encoder ------------------------------------------------------------ */

static qkv_status run_rnn(qkv_ctx *c, const qkv_nn_rnn *r, qkv_tensor *x, qkv_tensor *h0,
                          qkv_tensor *c0, const int64_t *lengths, qkv_tensor **y, qkv_tensor **hn,
                          qkv_tensor **cn)
{
    qkv_nn_rnn *rm = (qkv_nn_rnn *)r; /* the forwards take a non-const module; they do not change it */
    if (r->mode == QKV_RNN_LSTM) return qkv_nn_lstm_forward(c, rm, x, h0, c0, lengths, y, hn, cn);
    return qkv_nn_gru_forward(c, rm, x, h0, lengths, y, hn);
}

/* The per-layer final states as (nl,N,K): h_n (nl*D,N,H) rows [fwd; bwd]
 * of each layer side by side (D = 2), or h_n itself (D = 1). */
static qkv_status layer_states(qkv_ctx *c, qkv_tensor *hn, int64_t nl, int64_t D, qkv_tensor **y)
{
    if (D == 1) return *y = hn, QKV_OK;
    int64_t N = hn->shape[1], H = hn->shape[2];
    qkv_tensor *v, *p;
    QKV_TRY(qkv_reshape(c, hn, 4, (int64_t[]){nl, 2, N, H}, &v));
    QKV_TRY(qkv_permute(c, v, (const int[]){0, 2, 1, 3}, &p)); // (nl,N,2,H)
    return qkv_reshape(c, p, 3, (int64_t[]){nl, N, 2 * H}, y);
}

/* Row i of x (R,N,C) as (N,1,C): a view. */
static qkv_status row_of(qkv_ctx *c, qkv_tensor *x, int64_t i, qkv_tensor **y)
{
    qkv_tensor *r;
    QKV_TRY(qkv_tensor_narrow(qkv_ctx_arena(c), x, i, 1, &r));
    return qkv_reshape(c, r, 3, (int64_t[]){x->shape[1], 1, x->shape[2]}, y);
}

qkv_status s2r_encode(qkv_ctx *c, const qkv_seq2seq_rnn *m, qkv_tensor *src,
                      const int64_t *lengths, s2r_state *st)
{
    const qkv_seq2seq_rnn_opts *o = &m->o;
    int64_t N = src->shape[0], S = src->shape[1], nl = o->num_layers, D = o->bidirectional ? 2 : 1;
    memset(st, 0, sizeof *st);
    qkv_tensor *x, *hn, *cn = NULL, *hl, *cl;
    QKV_TRY(qkv_embedding(c, m->src_emb.weight, src, o->padding_idx, &x)); // (N,S,E)
    QKV_TRY(qkv_dropout(c, x, o->dropout, &x));
    QKV_TRY(run_rnn(c, &m->encoder, x, NULL, NULL, lengths, &st->enc, &hn, &cn)); // (N,S,K)
    QKV_TRY(layer_states(c, hn, nl, D, &hl)); // (nl,N,K)
    QKV_TRY(row_of(c, hl, nl - 1, &st->last)); // (N,1,K)
    if (D == 1) {
        st->h = hn, st->cs = cn;
    } else { /* the bridge: h0 = tanh(bridge([h_fwd; h_bwd])), c0 = bridge_c([c_fwd; c_bwd]) */
        QKV_TRY(qkv_linear(c, hl, m->bridge.weight, m->bridge.bias, &st->h));
        QKV_TRY(qkv_tanh(c, st->h, &st->h));
        if (cn) {
            QKV_TRY(layer_states(c, cn, nl, D, &cl));
            QKV_TRY(qkv_linear(c, cl, m->bridge_c.weight, m->bridge_c.bias, &st->cs));
        }
    }
    int padded = 0;
    for (int64_t n = 0; lengths && n < N; n++) padded |= lengths[n] < S;
    if (!padded) return QKV_OK;
    QKV_TRY(qkv_tensor_new(qkv_ctx_arena(c), QKV_BOOL, 2, (int64_t[]){N, S}, &st->pad));
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = lengths[n]; j < S; j++) st->pad->mask[n * S + j] = 1;
    return QKV_OK;
}

/* ---- the decoders -------------------------------------------------------------- */

/* Luong: y = RNN(emb(ids), state) (N,T,H); a = softmax(score(y, H^E)),
 * ctx = a H^E (or the last encoder state), h~ = tanh(concat([ctx; y])),
 * logits = out(h~); luong_hidden stops at h~ (N,T,H). */
static qkv_status luong_hidden(qkv_ctx *c, const qkv_seq2seq_rnn *m, s2r_state *st, qkv_tensor *x,
                               qkv_tensor **ht, qkv_tensor **weights)
{
    int64_t N = x->shape[0], T = x->shape[1];
    qkv_tensor *y, *ctx, *cat;
    QKV_TRY(run_rnn(c, &m->decoder, x, st->h, st->cs, NULL, &y, &st->h, &st->cs)); // (N,T,H)
    if (m->o.attention == QKV_RNN_ATTN_NONE) {
        qkv_tensor *ones; // (N,T,1): ctx[n,t] = last[n]
        QKV_TRY(qkv_tensor_new(qkv_ctx_arena(c), QKV_F32, 3, (int64_t[]){N, T, 1}, &ones));
        for (int64_t i = 0; i < N * T; i++) ones->data[i] = 1.0f;
        QKV_TRY(qkv_bmm(c, ones, st->last, &ctx)); // (N,T,K)
        *weights = NULL;
    } else {
        qkv_tensor *scores;
        QKV_TRY(qkv_score_forward(c, &m->score, y, st->enc, &scores)); // (N,T,S)
        QKV_TRY(qkv_softmax(c, scores, st->pad, weights));
        QKV_TRY(qkv_bmm(c, *weights, st->enc, &ctx)); // (N,T,K)
    }
    QKV_TRY(qkv_cat(c, ctx, y, -1, &cat)); // (N,T,K+H)
    QKV_TRY(qkv_linear(c, cat, m->concat.weight, m->concat.bias, ht));
    return qkv_tanh(c, *ht, ht); // (N,T,H)
}

static qkv_status luong(qkv_ctx *c, const qkv_seq2seq_rnn *m, s2r_state *st, qkv_tensor *x,
                        qkv_tensor **logits, qkv_tensor **weights)
{
    qkv_tensor *ht; // (N,T,H)
    QKV_TRY(luong_hidden(c, m, st, x, &ht, weights));
    return qkv_linear(c, ht, m->out.weight, m->out.bias, logits);
}

/* Location (one step): a = softmax(attn([x~; h_top])) over the first S
 * positions (attn's first S rows), ctx = a H^E,
 * z = relu(attn_combine([x~; ctx])), y = RNN(z, state), logits = out(y). */
static qkv_status location(qkv_ctx *c, const qkv_seq2seq_rnn *m, s2r_state *st, qkv_tensor *x,
                           qkv_tensor **logits, qkv_tensor **weights)
{
    qkv_arena *a = qkv_ctx_arena(c);
    int64_t S = st->enc->shape[1];
    qkv_tensor *top, *q, *w, *b, *scores, *ctx, *z, *y;
    QKV_TRY(row_of(c, st->h, m->o.num_layers - 1, &top)); // (N,1,H) h_{t-1} of the top layer
    QKV_TRY(qkv_cat(c, x, top, -1, &q));                  // (N,1,E+H)
    QKV_TRY(qkv_tensor_narrow(a, m->attn.weight, 0, S, &w)); // (S,E+H)
    QKV_TRY(qkv_tensor_narrow(a, m->attn.bias, 0, S, &b));   // (S)
    QKV_TRY(qkv_linear(c, q, w, b, &scores));                // (N,1,S)
    QKV_TRY(qkv_softmax(c, scores, st->pad, weights));
    QKV_TRY(qkv_bmm(c, *weights, st->enc, &ctx)); // (N,1,K)
    QKV_TRY(qkv_cat(c, x, ctx, -1, &z));          // (N,1,E+K)
    QKV_TRY(qkv_linear(c, z, m->attn_combine.weight, m->attn_combine.bias, &z));
    QKV_TRY(qkv_relu(c, z, &z)); // (N,1,E)
    QKV_TRY(run_rnn(c, &m->decoder, z, st->h, st->cs, NULL, &y, &st->h, &st->cs)); // (N,1,H)
    return qkv_linear(c, y, m->out.weight, m->out.bias, logits);
}

/* The decoder's input x (N,T,E): the target embedding of ids, dropped out. */
static qkv_status tgt_embed(qkv_ctx *c, const qkv_seq2seq_rnn *m, qkv_tensor *ids, qkv_tensor **x)
{
    QKV_TRY(qkv_embedding(c, m->tgt_emb.weight, ids, m->o.padding_idx, x));
    return qkv_dropout(c, *x, m->o.dropout, x);
}

qkv_status s2r_decode(qkv_ctx *c, const qkv_seq2seq_rnn *m, s2r_state *st, qkv_tensor *ids,
                      qkv_tensor **logits, qkv_tensor **weights)
{
    qkv_tensor *x; // (N,T,E)
    QKV_TRY(tgt_embed(c, m, ids, &x));
    if (m->o.attention == QKV_RNN_ATTN_LOCATION) return location(c, m, st, x, logits, weights);
    return luong(c, m, st, x, logits, weights);
}

/* ---- the training forward ------------------------------------------------------ */

qkv_seq2seq_rnn_args qkv_seq2seq_rnn_args_default(void)
{
    return (qkv_seq2seq_rnn_args){1.0f, 0, 0};
}

static int64_t argmax_row(const float *row, int64_t V)
{
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (row[i] > row[best]) best = i;
    return best;
}

/* One step at a time: step t's input is tgt_in[:,t] when forced[t], else
 * the argmax of step t-1's logits; the steps' logits and weights stacked. */
static qkv_status stepwise(qkv_ctx *c, const qkv_seq2seq_rnn *m, s2r_state *st, qkv_tensor *tgt,
                           const uint8_t *forced, qkv_tensor **logits, qkv_tensor **weights)
{
    int64_t N = tgt->shape[0], T = tgt->shape[1], V = m->o.tgt_vocab;
    qkv_tensor **lg = qkv_ctx_alloc(c, (size_t)T * sizeof *lg), **wt = qkv_ctx_alloc(c, (size_t)T * sizeof *wt);
    if (!lg || !wt) return QKV_ERR_NOMEM;
    for (int64_t t = 0; t < T; t++) {
        qkv_tensor *ids; // (N,1)
        QKV_TRY(qkv_tensor_new(qkv_ctx_arena(c), QKV_I64, 2, (int64_t[]){N, 1}, &ids));
        for (int64_t n = 0; n < N; n++)
            ids->idx[n] = forced[t] ? tgt->idx[n * T + t] : argmax_row(lg[t - 1]->data + n * V, V);
        QKV_TRY(s2r_decode(c, m, st, ids, &lg[t], &wt[t]));
    }
    QKV_TRY(stack_steps(c, lg, T, logits));
    return wt[0] ? stack_steps(c, wt, T, weights) : (*weights = NULL, QKV_OK);
}

static qkv_status check_tgt(const char *fn, const qkv_seq2seq_rnn *m, const qkv_tensor *src,
                            const qkv_tensor *tgt, const qkv_seq2seq_rnn_args *a)
{
    char b1[64], b2[64];
    QKV_TRY(seq_check_ids(fn, "tgt_in", tgt));
    if (tgt->shape[0] != src->shape[0])
        return qkv_fail(QKV_ERR_SHAPE, "%s: tgt_in %s and src %s have different batch sizes", fn,
                        qkv_shape_str(tgt, b1, sizeof b1), qkv_shape_str(src, b2, sizeof b2));
    if (m->o.attention == QKV_RNN_ATTN_LOCATION && tgt->shape[1] > m->o.max_length)
        return qkv_fail(QKV_ERR_SHAPE, "%s: tgt_in has %lld steps, more than location attention's "
                        "max_length %lld (it bounds sources and targets, as the tutorial's "
                        "MAX_LENGTH does)", fn, (long long)tgt->shape[1], (long long)m->o.max_length);
    if (!(a->teacher_forcing >= 0.0f && a->teacher_forcing <= 1.0f))
        return qkv_fail(QKV_ERR_ARG, "%s: teacher_forcing %g is not in [0,1]", fn,
                        (double)a->teacher_forcing);
    return QKV_OK;
}

/* The training forward (fn names it in errors): logits (N,T,V), or with
 * tgt_out given and every step fed its target by Luong's decoder, the loss
 * through qkv_linear_cross_entropy instead (then *logits stays NULL). */
static qkv_status s2r_train(const char *fn, qkv_ctx *c, const qkv_seq2seq_rnn *m, qkv_tensor *src,
                            const int64_t *src_lengths, qkv_tensor *tgt_in, const qkv_tensor *tgt_out,
                            int64_t ignore_index, const qkv_seq2seq_rnn_args *args, qkv_tensor **logits,
                            qkv_tensor **loss, qkv_tensor **weights)
{
    QKV_TRY(s2r_ready(fn, m));
    qkv_seq2seq_rnn_args a = args ? *args : qkv_seq2seq_rnn_args_default();
    QKV_TRY(s2r_check_src(fn, m, src, src_lengths));
    QKV_TRY(check_tgt(fn, m, src, tgt_in, &a));
    int64_t T = tgt_in->shape[1];
    uint8_t *forced = qkv_ctx_alloc(c, (size_t)T); // (T) step t fed the target
    if (!forced) return QKV_ERR_NOMEM;
    qkv_rng rng;
    qkv_rng_seed(&rng, a.seed);
    int all = 1;
    for (int64_t t = 0; t < T; t++) {
        forced[t] = t == 0 || a.teacher_forcing >= 1.0f || qkv_rng_uniform(&rng) < a.teacher_forcing;
        all &= forced[t];
    }
    s2r_state st;
    qkv_tensor *w = NULL;
    QKV_TRY(s2r_encode(c, m, src, src_lengths, &st));
    int at_once = all && !a.stepwise && m->o.attention != QKV_RNN_ATTN_LOCATION; /* every step in one call */
    if (at_once && tgt_out) {
        qkv_tensor *x, *ht; // (N,T,E), (N,T,H)
        QKV_TRY(tgt_embed(c, m, tgt_in, &x));
        QKV_TRY(luong_hidden(c, m, &st, x, &ht, &w));
        QKV_TRY(qkv_linear_cross_entropy(c, ht, m->out.weight, m->out.bias, tgt_out, ignore_index, 0.0,
                                         QKV_REDUCTION_MEAN, loss));
    } else if (at_once)
        QKV_TRY(s2r_decode(c, m, &st, tgt_in, logits, &w));
    else
        QKV_TRY(stepwise(c, m, &st, tgt_in, forced, logits, &w));
    if (weights) *weights = w;
    return QKV_OK;
}

qkv_status qkv_seq2seq_rnn_forward(qkv_ctx *c, const qkv_seq2seq_rnn *m, qkv_tensor *src,
                                   const int64_t *src_lengths, qkv_tensor *tgt_in,
                                   const qkv_seq2seq_rnn_args *args, qkv_tensor **logits,
                                   qkv_tensor **weights)
{
    const char *fn = "seq2seq_rnn_forward";
    QKV_NEED(logits, fn, "logits");
    *logits = NULL;
    if (weights) *weights = NULL;
    QKV_NEED(c, fn, "ctx");
    return s2r_train(fn, c, m, src, src_lengths, tgt_in, NULL, 0, args, logits, NULL, weights);
}

/* tgt_out (N,T) I64 beside `like` (N,T,...), named like_name, of like_ndim
 * dims: the logits (N,T,V) or tgt_in (N,T). */
static qkv_status check_tgt_out(const char *fn, const qkv_tensor *like, const char *like_name, int like_ndim,
                                const qkv_tensor *tgt_out)
{
    char b1[64], b2[64];
    QKV_TRY(seq_check_ids(fn, "tgt_out", tgt_out));
    if (like->ndim != like_ndim || like->shape[0] != tgt_out->shape[0] || like->shape[1] != tgt_out->shape[1])
        return qkv_fail(QKV_ERR_SHAPE, "%s: %s %s do not match tgt_out %s, expected (N,T%s) and (N,T)", fn,
                        like_name, qkv_shape_str(like, b1, sizeof b1), qkv_shape_str(tgt_out, b2, sizeof b2),
                        like_ndim == 3 ? ",V" : "");
    return QKV_OK;
}

qkv_status qkv_seq2seq_rnn_forward_loss(qkv_ctx *c, const qkv_seq2seq_rnn *m, qkv_tensor *src,
                                        const int64_t *src_lengths, qkv_tensor *tgt_in, qkv_tensor *tgt_out,
                                        int64_t ignore_index, const qkv_seq2seq_rnn_args *args,
                                        qkv_tensor **loss, qkv_tensor **weights)
{
    const char *fn = "seq2seq_rnn_forward_loss";
    QKV_NEED(loss, fn, "loss");
    *loss = NULL;
    if (weights) *weights = NULL;
    QKV_NEED(c, fn, "ctx");
    QKV_TRY(seq_check_ids(fn, "tgt_in", tgt_in));
    QKV_TRY(check_tgt_out(fn, tgt_in, "tgt_in", 2, tgt_out));
    qkv_tensor *logits = NULL;
    QKV_TRY(s2r_train(fn, c, m, src, src_lengths, tgt_in, tgt_out, ignore_index, args, &logits, loss, weights));
    if (*loss) return QKV_OK;
    return qkv_seq2seq_rnn_loss(c, logits, tgt_out, ignore_index, loss);
}

qkv_status qkv_seq2seq_rnn_loss(qkv_ctx *c, qkv_tensor *logits, qkv_tensor *tgt_out,
                                int64_t ignore_index, qkv_tensor **loss)
{
    const char *fn = "seq2seq_rnn_loss";
    QKV_NEED_OUT_CTX(loss, c, fn, "loss");
    QKV_NEED(logits, fn, "logits");
    QKV_TRY(check_tgt_out(fn, logits, "logits", 3, tgt_out));
    int64_t NT = logits->shape[0] * logits->shape[1];
    qkv_tensor *l2, *t1;
    QKV_TRY(qkv_reshape(c, logits, 2, (int64_t[]){NT, logits->shape[2]}, &l2));
    QKV_TRY(qkv_tensor_view(qkv_ctx_arena(c), tgt_out, 1, &NT, &t1));
    return qkv_cross_entropy(c, l2, t1, ignore_index, 0.0, QKV_REDUCTION_MEAN, loss);
}
