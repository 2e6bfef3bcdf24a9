/* mt.c: the translation commands' shared pieces (mt.h): configuration,
 * models, pairs, batches, loss, decoding and attention. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cli/mt.h"


const char *mt_direction(const mt_config *c) { return c->reverse ? "fr-en" : "en-fr"; }

const char *mt_model_name(const mt_config *c)
{
    static char buf[96];
    if (c->model == MT_TRANSFORMER) return "transformer";
    snprintf(buf, sizeof buf, "%s%s, %s attention", c->bidirectional ? "bidirectional " : "",
             c->rnn == QKV_RNN_LSTM ? "LSTM" : "GRU", qkv_rnn_attention_name(c->attention));
    return buf;
}

/* ---- models ------------------------------------------------------------------ */

qkv_status mt_model_init(mt_model *m, const mt_config *c, qkv_tokenizer *src, qkv_tokenizer *tgt)
{
    memset(m, 0, sizeof *m);
    m->cfg = *c;
    m->src_tok = src, m->tgt_tok = tgt;
    m->cfg.src_vocab = qkv_tokenizer_vocab_size(src);
    m->cfg.tgt_vocab = qkv_tokenizer_vocab_size(tgt);
    qkv_rng rng;
    qkv_rng_seed(&rng, c->seed * 7919 + 13);
    QKV_CLI_TRY(qkv_params_new(&m->p));
    if (c->model == MT_RNN) {
        qkv_seq2seq_rnn_opts o = qkv_seq2seq_rnn_opts_default(m->cfg.src_vocab, m->cfg.tgt_vocab,
                                                              c->embed, c->hidden);
        o.num_layers = c->layers, o.rnn = c->rnn, o.bidirectional = c->bidirectional;
        o.attention = c->attention, o.max_length = c->max_len, o.dropout = (float)c->dropout;
        o.attn_rank = c->rank;
        o.padding_idx = MT_PAD;
        return qkv_seq2seq_rnn_init(&m->rnn, &o, m->p, "", &rng);
    }
    qkv_seq2seq_opts o = qkv_seq2seq_opts_default(m->cfg.src_vocab, m->cfg.tgt_vocab, c->embed,
                                                  c->heads, c->layers, c->layers, c->max_len + 2);
    o.t.layer.dim_feedforward = c->hidden;
    o.t.layer.dropout = (float)c->dropout;
    return qkv_seq2seq_init(&m->tfm, &o, m->p, "", &rng);
}

void mt_model_free(mt_model *m)
{
    if (m->cfg.model == MT_RNN) qkv_seq2seq_rnn_free(&m->rnn);
    else qkv_seq2seq_free(&m->tfm);
    qkv_params_free(m->p);
    qkv_tokenizer_free(m->src_tok);
    qkv_tokenizer_free(m->tgt_tok);
    memset(m, 0, sizeof *m);
}

int64_t mt_model_params(const mt_model *m) { return qkv_params_numel(m->p); }

static int open_words(const char *cmd, const char *dir, const char *name, int64_t vocab,
                      qkv_tokenizer **t)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (qkv_tokenizer_load(path, t) != QKV_OK) {
        return qkv_cli_report(cmd, "%s", qkv_cli_last_error());
    }
    if (qkv_tokenizer_kind_of(*t) != QKV_TOKENIZER_WORDS || qkv_tokenizer_vocab_size(*t) != vocab) {
        qkv_cli_report(cmd, "%s is not the words tokenizer of %lld ids that the run's configuration names",
                path, (long long)vocab);
        qkv_tokenizer_free(*t);
        *t = NULL;
        return 1;
    }
    return 0;
}

int mt_model_open(const char *cmd, const char *arg, mt_model *m)
{
    char dir[1024], ckpt[1100];
    memset(m, 0, sizeof *m);
    mt_config c;
    if (mt_config_open(cmd, arg, dir, sizeof dir, ckpt, sizeof ckpt, &c)) return 1;
    qkv_tokenizer *src = NULL, *tgt = NULL;
    if (open_words(cmd, dir, MT_SRC_WORDS, c.src_vocab, &src)) return 1;
    if (open_words(cmd, dir, MT_TGT_WORDS, c.tgt_vocab, &tgt)) {
        qkv_tokenizer_free(src);
        return 1;
    }
    if (mt_model_init(m, &c, src, tgt) != QKV_OK ||
        qkv_checkpoint_load(ckpt, m->p, NULL, NULL, NULL) != QKV_OK) {
        qkv_cli_report(cmd, "%s", qkv_cli_last_error());
        mt_model_free(m);
        return 1;
    }
    return 0;
}

/* ---- pairs and sets -------------------------------------------------------------- */

int mt_pairs_read(const char *cmd, const char *path, int reverse, mt_pairs *p)
{
    memset(p, 0, sizeof *p);
    size_t len;
    p->text = qkv_cli_read_all(cmd, path, &len);
    if (!p->text) return 1;
    int64_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += p->text[i] == '\n';
    p->src = malloc((size_t)lines * sizeof *p->src);
    p->tgt = malloc((size_t)lines * sizeof *p->tgt);
    if (!p->src || !p->tgt) {
        qkv_cli_report(cmd, "out of memory reading %s", path);
        mt_pairs_free(p);
        return 1;
    }
    for (char *s = p->text; *s;) {
        char *nl = strchr(s, '\n'), *next = nl ? nl + 1 : s + strlen(s);
        if (nl) *nl = '\0';
        char *tab = strchr(s, '\t');
        if (tab) {
            *tab = '\0';
            p->src[p->n] = reverse ? tab + 1 : s;
            p->tgt[p->n++] = reverse ? s : tab + 1;
        }
        s = next;
    }
    return 0;
}

void mt_pairs_free(mt_pairs *p)
{
    free(p->src), free(p->tgt), free(p->text);
    memset(p, 0, sizeof *p);
}

static int64_t count_words(const char *s)
{
    int64_t n = 0;
    for (int in = 0; *s; s++) {
        int sp = *s == ' ' || *s == '\t';
        n += !sp && !in;
        in = !sp;
    }
    return n;
}

void mt_set_free(mt_set *s)
{
    free(s->ids), free(s->src_off), free(s->src_len), free(s->tgt_off), free(s->tgt_len), free(s->index);
    memset(s, 0, sizeof *s);
}

qkv_status mt_set_build(const mt_model *m, const mt_pairs *p, int64_t max_words, mt_set *s)
{
    memset(s, 0, sizeof *s);
    size_t n = (size_t)(p->n ? p->n : 1), cap = 1 << 16, used = 0;
    s->ids = malloc(cap * sizeof *s->ids);
    s->src_off = malloc(n * sizeof(int64_t)), s->src_len = malloc(n * sizeof(int64_t));
    s->tgt_off = malloc(n * sizeof(int64_t)), s->tgt_len = malloc(n * sizeof(int64_t));
    s->index = malloc(n * sizeof(int64_t));
    if (!s->ids || !s->src_off || !s->src_len || !s->tgt_off || !s->tgt_len || !s->index) {
        mt_set_free(s);
        return qkv_cli_fail(QKV_ERR_NOMEM, "translation set: out of memory");
    }
    int64_t L = m->cfg.max_len - 1; /* room for <eos> */
    for (int64_t i = 0; i < p->n; i++) {
        if (count_words(p->src[i]) > max_words || count_words(p->tgt[i]) > max_words) {
            s->dropped++;
            continue;
        }
        int64_t *a = NULL, *b = NULL, na = 0, nb = 0;
        qkv_status st = qkv_tokenizer_encode(m->src_tok, p->src[i], strlen(p->src[i]), &a, &na);
        if (st == QKV_OK) st = qkv_tokenizer_encode(m->tgt_tok, p->tgt[i], strlen(p->tgt[i]), &b, &nb);
        if (st != QKV_OK || na < 1 || nb < 1 || na > L || nb > L) {
            free(a), free(b);
            s->dropped++;
            if (st != QKV_OK) {
                mt_set_free(s);
                return st;
            }
            continue;
        }
        if (used + (size_t)(na + nb) > cap) {
            while (used + (size_t)(na + nb) > cap) cap *= 2;
            int64_t *g = realloc(s->ids, cap * sizeof *s->ids);
            if (!g) {
                free(a), free(b);
                mt_set_free(s);
                return qkv_cli_fail(QKV_ERR_NOMEM, "translation set: out of memory");
            }
            s->ids = g;
        }
        s->src_off[s->n] = (int64_t)used, s->src_len[s->n] = na;
        memcpy(s->ids + used, a, (size_t)na * sizeof *a), used += (size_t)na;
        s->tgt_off[s->n] = (int64_t)used, s->tgt_len[s->n] = nb;
        memcpy(s->ids + used, b, (size_t)nb * sizeof *b), used += (size_t)nb;
        s->index[s->n++] = i;
        free(a), free(b);
    }
    return QKV_OK;
}

/* ---- batches and the loss -------------------------------------------------------- */

qkv_status mt_batch_make(qkv_ctx *c, const mt_set *s, const int64_t *rows, int64_t N, mt_batch *b)
{
    qkv_arena *a = qkv_ctx_arena(c);
    int64_t S = 1, T = 1;
    for (int64_t i = 0; i < N; i++) {
        if (s->src_len[rows[i]] + 1 > S) S = s->src_len[rows[i]] + 1;
        if (s->tgt_len[rows[i]] + 1 > T) T = s->tgt_len[rows[i]] + 1;
    }
    QKV_CLI_TRY(qkv_tensor_new(a, QKV_I64, 2, (int64_t[]){N, S}, &b->src));
    QKV_CLI_TRY(qkv_tensor_new(a, QKV_I64, 2, (int64_t[]){N, T}, &b->tgt_in));
    QKV_CLI_TRY(qkv_tensor_new(a, QKV_I64, 2, (int64_t[]){N, T}, &b->tgt_out));
    b->lengths = qkv_arena_alloc(a, (size_t)N * sizeof *b->lengths);
    if (!b->lengths) return QKV_ERR_NOMEM;
    b->tokens = 0;
    for (int64_t i = 0; i < N; i++) {
        int64_t r = rows[i], ns = s->src_len[r], nt = s->tgt_len[r];
        const int64_t *x = s->ids + s->src_off[r], *y = s->ids + s->tgt_off[r];
        int64_t *src = b->src->idx + i * S, *tin = b->tgt_in->idx + i * T, *tout = b->tgt_out->idx + i * T;
        for (int64_t j = 0; j < S; j++) src[j] = j < ns ? x[j] : j == ns ? MT_EOS : MT_PAD;
        for (int64_t j = 0; j < T; j++) {
            tin[j] = j == 0 ? MT_BOS : j <= nt ? y[j - 1] : MT_PAD;
            tout[j] = j < nt ? y[j] : j == nt ? MT_EOS : QKV_IGNORE_INDEX_DEFAULT;
        }
        b->lengths[i] = ns + 1;
        b->tokens += nt + 1;
    }
    return QKV_OK;
}

/* BOOL (N,L) padding masks from lengths (true past each row's length). */
static qkv_status pad_mask(qkv_ctx *c, int64_t N, int64_t L, const int64_t *lengths,
                           const qkv_tensor *ids, qkv_tensor **mask)
{
    QKV_CLI_TRY(qkv_tensor_new(qkv_ctx_arena(c), QKV_BOOL, 2, (int64_t[]){N, L}, mask));
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < L; j++)
            (*mask)->mask[n * L + j] = lengths ? j >= lengths[n] : ids->idx[n * L + j] == MT_PAD && j > 0;
    return QKV_OK;
}

qkv_status mt_loss(qkv_ctx *c, const mt_model *m, const mt_batch *b, double teacher_forcing,
                   uint64_t seed, qkv_tensor **loss)
{
    qkv_tensor *logits;
    if (m->cfg.model == MT_RNN) {
        qkv_seq2seq_rnn_args args = qkv_seq2seq_rnn_args_default();
        args.teacher_forcing = (float)teacher_forcing, args.seed = seed;
        return qkv_seq2seq_rnn_forward_loss(c, &m->rnn, b->src, b->lengths, b->tgt_in, b->tgt_out,
                                            QKV_IGNORE_INDEX_DEFAULT, &args, loss, NULL);
    } else {
        int64_t N = b->src->shape[0], S = b->src->shape[1], T = b->tgt_in->shape[1];
        qkv_tensor *sm, *tm;
        QKV_CLI_TRY(pad_mask(c, N, S, b->lengths, NULL, &sm));
        QKV_CLI_TRY(pad_mask(c, N, T, NULL, b->tgt_in, &tm));
        QKV_CLI_TRY(qkv_seq2seq_forward(c, &m->tfm, b->src, b->tgt_in, sm, tm, &logits));
    }
    return qkv_seq2seq_rnn_loss(c, logits, b->tgt_out, QKV_IGNORE_INDEX_DEFAULT, loss);
}

qkv_status mt_eval_loss(qkv_ctx *c, const mt_model *m, const mt_set *s, int64_t limit, double *loss)
{
    int64_t n = limit > 0 && limit < s->n ? limit : s->n, B = 64, rows[64];
    double sum = 0, tokens = 0;
    qkv_ctx_set_training(c, 0);
    qkv_ctx_set_grad(c, 0);
    qkv_status st = QKV_OK;
    for (int64_t i0 = 0; i0 < n && st == QKV_OK; i0 += B) {
        int64_t N = n - i0 < B ? n - i0 : B;
        for (int64_t i = 0; i < N; i++) rows[i] = i0 + i;
        qkv_ctx_reset(c);
        mt_batch b;
        qkv_tensor *l;
        st = mt_batch_make(c, s, rows, N, &b);
        if (st == QKV_OK) st = mt_loss(c, m, &b, 1.0, 0, &l);
        if (st == QKV_OK) sum += (double)l->data[0] * (double)b.tokens, tokens += (double)b.tokens;
    }
    qkv_ctx_reset(c);
    qkv_ctx_set_grad(c, 1);
    *loss = tokens > 0 ? sum / tokens : NAN;
    return st;
}

/* ---- decoding ----------------------------------------------------------------- */

qkv_status mt_encode_source(const mt_model *m, const char *text, int64_t **ids, int64_t *n,
                            int64_t *unknown, int64_t *cut)
{
    int64_t *a = NULL, na = 0;
    char *pieces = NULL;
    *ids = NULL, *n = 0, *cut = 0;
    QKV_CLI_TRY(qkv_tokenizer_words_split(m->src_tok, text, strlen(text), &pieces, NULL, unknown));
    free(pieces);
    QKV_CLI_TRY(qkv_tokenizer_encode(m->src_tok, text, strlen(text), &a, &na));
    int64_t keep = na < m->cfg.max_len - 1 ? na : m->cfg.max_len - 1;
    *cut = na - keep;
    int64_t *out = malloc((size_t)(keep + 1) * sizeof *out);
    if (!out) {
        free(a);
        return qkv_cli_fail(QKV_ERR_NOMEM, "translate: out of memory");
    }
    if (keep) memcpy(out, a, (size_t)keep * sizeof *a);
    out[keep] = MT_EOS;
    free(a);
    *ids = out, *n = keep + 1;
    return QKV_OK;
}

qkv_status mt_decode(qkv_ctx *c, const mt_model *m, qkv_tensor *src, const int64_t *lengths,
                     int64_t beam, int64_t *tokens, int64_t *out_len)
{
    qkv_generate_opts o = qkv_generate_opts_default();
    o.max_new_tokens = m->cfg.max_len, o.end_id = MT_EOS, o.pad_id = MT_PAD;
    /* training ignores padding targets and never predicts bos: their
     * logits are untrained, so they are never generated */
    static const int64_t never[] = {MT_PAD, MT_BOS};
    o.suppress_ids = never, o.n_suppress = 2;
    if (beam > 1) o.kind = QKV_DECODE_BEAM, o.num_beams = beam;
    qkv_ctx_set_training(c, 0);
    if (m->cfg.model == MT_RNN)
        return qkv_seq2seq_rnn_generate(c, &m->rnn, src, lengths, MT_BOS, &o, tokens, out_len, NULL);
    int64_t N = src->shape[0], S = src->shape[1];
    qkv_tensor *sm;
    QKV_CLI_TRY(pad_mask(c, N, S, lengths, src, &sm));
    /* generate resets c: keep the mask and src outside its arena */
    uint8_t *mask = malloc((size_t)(N * S));
    int64_t *ids = malloc((size_t)(N * S) * sizeof *ids);
    qkv_kv_cache kc;
    qkv_status st = mask && ids ? QKV_OK : qkv_cli_fail(QKV_ERR_NOMEM, "translate: out of memory");
    if (st == QKV_OK) {
        memcpy(mask, sm->mask, (size_t)(N * S));
        memcpy(ids, src->idx, (size_t)(N * S) * sizeof *ids);
        st = qkv_seq2seq_cache_init(&kc, &m->tfm, N * (beam > 1 ? beam : 1), m->cfg.max_len + 1);
        if (st == QKV_OK) {
            qkv_tensor *s2, *m2;
            qkv_ctx_reset(c);
            st = qkv_tensor_new(qkv_ctx_arena(c), QKV_I64, 2, (int64_t[]){N, S}, &s2);
            if (st == QKV_OK) st = qkv_tensor_wrap_bool(qkv_ctx_arena(c), mask, 2, (int64_t[]){N, S}, &m2);
            if (st == QKV_OK) {
                memcpy(s2->idx, ids, (size_t)(N * S) * sizeof *ids);
                st = qkv_seq2seq_generate(c, &m->tfm, &kc, s2, m2, MT_BOS, &o, tokens, out_len, NULL);
            }
            qkv_kv_cache_free(&kc);
        }
    }
    free(mask), free(ids);
    return st;
}

qkv_status mt_tokens_text(const mt_model *m, const int64_t *tokens, int64_t n, char **text)
{
    int64_t k = 0;
    while (k < n && tokens[k] != MT_EOS) k++;
    size_t len;
    if (k == 0) {
        *text = calloc(1, 1);
        return *text ? QKV_OK : QKV_ERR_NOMEM;
    }
    return qkv_tokenizer_decode(m->tgt_tok, tokens, k, text, &len);
}

qkv_status mt_attention(qkv_ctx *c, const mt_model *m, const int64_t *src, int64_t S,
                        const int64_t *out, int64_t L, float **w, int64_t *layers, int64_t *heads)
{
    *w = NULL;
    qkv_arena *a = qkv_ctx_arena(c);
    qkv_ctx_reset(c);
    qkv_ctx_set_training(c, 0);
    qkv_ctx_set_grad(c, 0);
    qkv_tensor *ts, *tin, *logits, *wt = NULL;
    qkv_status st = qkv_tensor_new(a, QKV_I64, 2, (int64_t[]){1, S}, &ts);
    if (st == QKV_OK) st = qkv_tensor_new(a, QKV_I64, 2, (int64_t[]){1, L}, &tin);
    if (st != QKV_OK) goto done;
    memcpy(ts->idx, src, (size_t)S * sizeof *src);
    tin->idx[0] = MT_BOS;
    for (int64_t t = 1; t < L; t++) tin->idx[t] = out[t - 1];
    if (m->cfg.model == MT_RNN) {
        if (m->cfg.attention == QKV_RNN_ATTN_NONE) {
            st = qkv_cli_fail(QKV_ERR_ARG, "the model has no attention (--attention none): there is "
                          "no alignment to show");
            goto done;
        }
        st = qkv_seq2seq_rnn_forward(c, &m->rnn, ts, NULL, tin, NULL, &logits, &wt); // (1,L,S)
        if (st != QKV_OK) goto done;
        *layers = 1, *heads = 1;
        *w = malloc((size_t)(L * S) * sizeof **w);
        if (!*w) st = QKV_ERR_NOMEM;
        else memcpy(*w, wt->data, (size_t)(L * S) * sizeof **w);
        goto done;
    }
    qkv_ctx_set_capture(c, 1);
    st = qkv_seq2seq_forward(c, &m->tfm, ts, tin, NULL, NULL, &logits);
    qkv_ctx_set_capture(c, 0);
    if (st != QKV_OK) goto done;
    /* captured in running order: the encoder's self-attention, then each
     * decoder layer's self- and cross-attention */
    int64_t nl = m->cfg.layers, H = m->cfg.heads;
    if (qkv_ctx_captured_count(c) < (int)(3 * nl)) {
        st = qkv_cli_fail(QKV_ERR_STATE, "attention: %d weights captured, expected %lld",
                      qkv_ctx_captured_count(c), (long long)(3 * nl));
        goto done;
    }
    *layers = nl, *heads = H;
    *w = malloc((size_t)(nl * H * L * S) * sizeof **w);
    if (!*w) {
        st = QKV_ERR_NOMEM;
        goto done;
    }
    for (int64_t l = 0; l < nl; l++) {
        qkv_tensor *x = qkv_ctx_captured(c, (int)(nl + 2 * l + 1)); // (1,H,L,S)
        memcpy(*w + l * H * L * S, x->data, (size_t)(H * L * S) * sizeof **w);
    }
done:
    qkv_ctx_reset(c);
    qkv_ctx_set_grad(c, 1);
    if (st != QKV_OK) free(*w), *w = NULL;
    return st;
}

qkv_status mt_translate_all(qkv_ctx *c, const mt_model *m, const mt_set *s, int64_t beam,
                            char **hyps)
{
    int64_t B = 32, L = m->cfg.max_len;
    int64_t *tokens = malloc((size_t)(B * L) * sizeof *tokens), lens[32], rows[32];
    if (!tokens) return qkv_cli_fail(QKV_ERR_NOMEM, "translate: out of memory");
    qkv_status st = QKV_OK;
    for (int64_t i0 = 0; i0 < s->n && st == QKV_OK; i0 += B) {
        int64_t N = s->n - i0 < B ? s->n - i0 : B;
        for (int64_t i = 0; i < N; i++) rows[i] = i0 + i;
        qkv_ctx_reset(c);
        mt_batch b;
        st = mt_batch_make(c, s, rows, N, &b);
        if (st == QKV_OK) st = mt_decode(c, m, b.src, b.lengths, beam, tokens, lens);
        for (int64_t i = 0; i < N && st == QKV_OK; i++)
            st = mt_tokens_text(m, tokens + i * L, lens[i], &hyps[i0 + i]);
    }
    qkv_ctx_reset(c);
    free(tokens);
    return st;
}
