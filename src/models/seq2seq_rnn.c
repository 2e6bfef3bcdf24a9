/* seq2seq_rnn.c: the recurrent encoder-decoder with attention (the
 * lecture's seq2seq RNN): its options, attention names, parameters and
 * their checks. The forward is seq2seq_rnn_forward.c; decoding is
 * src/decode/generate_rnn.c. docs/seq2seq.md has the equations. */
#include <string.h>
#include "attention/score.h"
#include "models/seq2seq_rnn_internal.h"

#define ATTN_NAME(NAME, name, same_dims, rank, params) name,
#define ATTN_LISTED(NAME, name, same_dims, rank, params) name ", "
static const char *const attn_names[] = {QKV_SCORE_KINDS(ATTN_NAME) "location", "none"};
#define N_ATTN ((int)(sizeof attn_names / sizeof attn_names[0]))

const char *qkv_rnn_attention_name(qkv_rnn_attention a)
{
    return (int)a >= 0 && (int)a < N_ATTN ? attn_names[a] : NULL;
}

qkv_status qkv_rnn_attention_parse(const char *name, qkv_rnn_attention *a)
{
    QKV_NEED(name, "rnn_attention_parse", "name");
    QKV_NEED(a, "rnn_attention_parse", "a");
    static const struct { const char *alias; qkv_rnn_attention kind; } aliases[] = {
        {"scaled", QKV_RNN_ATTN_SCALED_DOT},     {"low-rank", QKV_RNN_ATTN_REDUCED_RANK},
        {"low_rank", QKV_RNN_ATTN_REDUCED_RANK}, {"reduced-rank", QKV_RNN_ATTN_REDUCED_RANK},
        {"bahdanau", QKV_RNN_ATTN_ADDITIVE}};
    for (int i = 0; i < N_ATTN; i++)
        if (!strcmp(name, attn_names[i])) return *a = (qkv_rnn_attention)i, QKV_OK;
    for (size_t i = 0; i < sizeof aliases / sizeof *aliases; i++)
        if (!strcmp(name, aliases[i].alias)) return *a = aliases[i].kind, QKV_OK;
    return qkv_fail(QKV_ERR_ARG, "rnn_attention_parse: unknown attention '%s' ("
                    QKV_SCORE_KINDS(ATTN_LISTED) "location, none)", name);
}

qkv_seq2seq_rnn_opts qkv_seq2seq_rnn_opts_default(int64_t src_vocab, int64_t tgt_vocab,
                                                  int64_t embed_dim, int64_t hidden_size)
{
    qkv_seq2seq_rnn_opts o = {0};
    o.src_vocab = src_vocab;
    o.tgt_vocab = tgt_vocab;
    o.embed_dim = embed_dim;
    o.hidden_size = hidden_size;
    o.num_layers = 1;
    o.rnn = QKV_RNN_GRU;
    o.attention = QKV_RNN_ATTN_ADDITIVE;
    o.padding_idx = -1;
    return o;
}

/* One of the qkv_score_kind values (the same numbers). */
static int is_score(qkv_rnn_attention a) { return qkv_score_kind_name((int)a) != NULL; }

static qkv_status check_opts(const char *fn, const qkv_seq2seq_rnn_opts *o)
{
    if (o->src_vocab < 1 || o->tgt_vocab < 1 || o->embed_dim < 1 || o->hidden_size < 1 ||
        o->num_layers < 1)
        return qkv_fail(QKV_ERR_ARG, "%s: src_vocab %lld, tgt_vocab %lld, embed_dim %lld, "
                        "hidden_size %lld and num_layers %lld must be >= 1", fn,
                        (long long)o->src_vocab, (long long)o->tgt_vocab, (long long)o->embed_dim,
                        (long long)o->hidden_size, (long long)o->num_layers);
    if (o->rnn != QKV_RNN_GRU && o->rnn != QKV_RNN_LSTM)
        return qkv_fail(QKV_ERR_ARG, "%s: rnn %d is not a qkv_rnn_mode (GRU or LSTM)", fn, (int)o->rnn);
    const char *an = qkv_rnn_attention_name(o->attention);
    if (!an)
        return qkv_fail(QKV_ERR_ARG, "%s: attention %d is not a qkv_rnn_attention (0..%d)", fn,
                        (int)o->attention, N_ATTN - 1);
    int64_t K = (o->bidirectional ? 2 : 1) * o->hidden_size;
    if (is_score(o->attention) && qkv_score_kind_same_dims((int)o->attention) && o->bidirectional)
        return qkv_fail(QKV_ERR_SHAPE, "%s: %s attention compares the decoder state (hidden_size %lld) "
                        "with the encoder outputs (2*hidden_size = %lld with a bidirectional encoder) "
                        "and needs equal sizes: use general, reduced_rank or additive (which project "
                        "them), location or none, or a unidirectional encoder", fn, an,
                        (long long)o->hidden_size, (long long)K);
    if (o->attn_rank < 0)
        return qkv_fail(QKV_ERR_ARG, "%s: attn_rank %lld must be >= 0 (0: hidden_size)", fn,
                        (long long)o->attn_rank);
    if (o->attention == QKV_RNN_ATTN_LOCATION && o->max_length < 1)
        return qkv_fail(QKV_ERR_ARG, "%s: location attention needs max_length >= 1 (the longest "
                        "source it attends over), got %lld", fn, (long long)o->max_length);
    if (!(o->dropout >= 0.0f && o->dropout <= 1.0f))
        return qkv_fail(QKV_ERR_ARG, "%s: dropout %g is not in [0,1]", fn, (double)o->dropout);
    int64_t pmax = o->src_vocab < o->tgt_vocab ? o->src_vocab : o->tgt_vocab;
    if (o->padding_idx < -1 || o->padding_idx >= pmax)
        return qkv_fail(QKV_ERR_ARG, "%s: padding_idx %lld outside [-1, %lld) (both vocabularies)",
                        fn, (long long)o->padding_idx, (long long)pmax);
    return QKV_OK;
}

/* prefix + name, then the module's _init result. */
#define JOIN(name) QKV_TRY(tfm_join(fn, buf, sizeof buf, prefix, name))

static qkv_status build(qkv_seq2seq_rnn *m, qkv_params *p, const char *prefix, qkv_rng *rng)
{
    const char *fn = "seq2seq_rnn_init";
    const qkv_seq2seq_rnn_opts *o = &m->o;
    char buf[TFM_NAME_BUF];
    int64_t E = o->embed_dim, H = o->hidden_size, D = o->bidirectional ? 2 : 1, K = D * H;
    int lstm = o->rnn == QKV_RNN_LSTM;
    qkv_rnn_opts ro = qkv_rnn_opts_default(E, H);
    ro.num_layers = o->num_layers, ro.batch_first = 1, ro.dropout = o->dropout;

    JOIN("encoder.embedding.");
    QKV_TRY(qkv_nn_embedding_init(&m->src_emb, o->src_vocab, E, o->padding_idx, p, buf, rng));
    JOIN("encoder.rnn.");
    ro.bidirectional = o->bidirectional;
    QKV_TRY(lstm ? qkv_nn_lstm_init(&m->encoder, &ro, p, buf, rng)
                 : qkv_nn_gru_init(&m->encoder, &ro, p, buf, rng));
    if (D == 2) {
        JOIN("bridge.");
        QKV_TRY(qkv_nn_linear_init(&m->bridge, K, H, 1, p, buf, rng));
        if (lstm) {
            JOIN("bridge_c.");
            QKV_TRY(qkv_nn_linear_init(&m->bridge_c, K, H, 1, p, buf, rng));
        }
    }
    JOIN("decoder.embedding.");
    QKV_TRY(qkv_nn_embedding_init(&m->tgt_emb, o->tgt_vocab, E, o->padding_idx, p, buf, rng));
    JOIN("decoder.rnn.");
    ro.bidirectional = 0;
    QKV_TRY(lstm ? qkv_nn_lstm_init(&m->decoder, &ro, p, buf, rng)
                 : qkv_nn_gru_init(&m->decoder, &ro, p, buf, rng));
    JOIN("decoder.attn.");
    if (is_score(o->attention)) {
        QKV_TRY(qkv_score_init(&m->score, (qkv_score_kind)o->attention, H, K,
                               o->attn_rank ? o->attn_rank : H, p, buf, rng));
    } else if (o->attention == QKV_RNN_ATTN_LOCATION) {
        QKV_TRY(qkv_nn_linear_init(&m->attn, E + H, o->max_length, 1, p, buf, rng));
        JOIN("decoder.attn_combine.");
        QKV_TRY(qkv_nn_linear_init(&m->attn_combine, E + K, E, 1, p, buf, rng));
    }
    if (o->attention != QKV_RNN_ATTN_LOCATION) {
        JOIN("decoder.concat.");
        QKV_TRY(qkv_nn_linear_init(&m->concat, K + H, H, 1, p, buf, rng));
    }
    JOIN("decoder.out.");
    return qkv_nn_linear_init(&m->out, H, o->tgt_vocab, 1, p, buf, rng);
}

qkv_status qkv_seq2seq_rnn_init(qkv_seq2seq_rnn *m, const qkv_seq2seq_rnn_opts *o,
                                qkv_params *p, const char *prefix, qkv_rng *rng)
{
    const char *fn = "seq2seq_rnn_init";
    QKV_TRY(seq_init_begin(fn, m, sizeof *m, o, p, rng));
    QKV_TRY(check_opts(fn, o));
    QKV_TRY(tfm_check_prefix(fn, prefix));
    m->o = *o;
    m->o.bidirectional = o->bidirectional != 0;
    qkv_status s = build(m, p, prefix, rng);
    if (s != QKV_OK) qkv_seq2seq_rnn_free(m);
    return s;
}

void qkv_seq2seq_rnn_free(qkv_seq2seq_rnn *m)
{
    if (!m) return;
    qkv_nn_gru_free(&m->encoder);
    qkv_nn_gru_free(&m->decoder);
    m->out.weight = NULL;
}

qkv_status s2r_ready(const char *fn, const qkv_seq2seq_rnn *m)
{
    QKV_NEED(m, fn, "module");
    if (!m->out.weight || !m->encoder.weights || !m->decoder.weights)
        return qkv_fail(QKV_ERR_STATE, "%s: module is not initialised (call qkv_seq2seq_rnn_init)", fn);
    return QKV_OK;
}

qkv_status s2r_check_src(const char *fn, const qkv_seq2seq_rnn *m, const qkv_tensor *src,
                         const int64_t *lengths)
{
    QKV_TRY(seq_check_ids(fn, "src", src));
    int64_t N = src->shape[0], S = src->shape[1];
    for (int64_t n = 0; lengths && n < N; n++)
        if (lengths[n] < 1 || lengths[n] > S)
            return qkv_fail(QKV_ERR_ARG, "%s: src_lengths[%lld] = %lld is not in [1,%lld] (S)", fn,
                            (long long)n, (long long)lengths[n], (long long)S);
    if (m->o.attention == QKV_RNN_ATTN_LOCATION && S > m->o.max_length)
        return qkv_fail(QKV_ERR_SHAPE, "%s: src has %lld positions, more than location attention's "
                        "max_length %lld", fn, (long long)S, (long long)m->o.max_length);
    return QKV_OK;
}
