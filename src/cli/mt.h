/* mt.h: what `qkv train translation`, `qkv translate` and `qkv eval` share
 * (mt.c, mt_config.c): a translation model's configuration (in the
 * checkpoint's metadata; DIR/config.txt in runs of older versions), building
 * and opening one (the checkpoint DIR/checkpoint.safetensors with its
 * tokenizers DIR/words.src, DIR/words.tgt), sentence pairs, batches, the
 * loss, decoding and the attention of a decoded sentence. Both model kinds,
 * the recurrent seq2seq (qkv_seq2seq_rnn) and the transformer
 * (qkv_seq2seq), behind one set of calls. docs/translation.md. */
#ifndef QKV_CLI_MT_H
#define QKV_CLI_MT_H
#include "cli/cli.h"

/* The words tokenizer's specials (docs/translation_data.md). */
enum { MT_PAD = 0, MT_BOS = 1, MT_EOS = 2, MT_UNK = 3 };
enum { MT_RNN = 0, MT_TRANSFORMER = 1 };

#define MT_CONFIG "config.txt" /* runs of older versions: the configuration beside the checkpoint */
#define MT_CHECKPOINT "checkpoint.safetensors"
#define MT_SRC_WORDS "words.src"
#define MT_TGT_WORDS "words.tgt"
#define MT_LOG "log.tsv"

/* A model and how it was trained (translation.config and
 * translation.train in the checkpoint's metadata). */
typedef struct {
    int model;                   /* MT_RNN or MT_TRANSFORMER */
    qkv_rnn_mode rnn;            /* GRU or LSTM */
    qkv_rnn_attention attention;
    int bidirectional;
    int64_t layers, embed, hidden; /* transformer: embed = d_model, hidden = feed-forward */
    int64_t heads;               /* transformer */
    int64_t rank;                /* r of reduced-rank and additive attention, 0: hidden
                                  * (absent from an older config.txt: 0) */
    int64_t max_len;             /* tokens of a source or output sentence, <eos> included */
    double dropout;
    int reverse;                 /* 0: en-fr, 1: fr-en */
    int64_t src_vocab, tgt_vocab;
    /* training */
    char data[512];
    int64_t max_words, batch, steps;
    double lr, clip, teacher_forcing;
    uint64_t seed;
    qkv_precision precision;     /* of the matmuls (--precision; absent from config.txt: fp32) */
} mt_config;

typedef struct {
    mt_config cfg;
    qkv_params *p;
    qkv_seq2seq_rnn rnn;
    qkv_seq2seq tfm;
    qkv_tokenizer *src_tok, *tgt_tok;
} mt_model;


const char *mt_model_name(const mt_config *c); /* "GRU, additive attention", "transformer" */
const char *mt_direction(const mt_config *c);  /* "en-fr" or "fr-en" */

/* translation.config (the model) and translation.train (its training) in
 * the run format (run_format.h), as the checkpoint's metadata keeps them
 * (mt_config.c), with translation.precision when not fp32. */
qkv_status mt_config_format(const mt_config *c, char *config, size_t nc, char *train, size_t nt);
/* The configuration of the run at arg (its folder, or its checkpoint
 * file): the checkpoint's metadata, or for runs of older versions the
 * DIR/config.txt beside it ("key value" lines: deprecated, read only);
 * dir and ckpt get the run's folder and checkpoint. 0, or a message naming
 * what is wrong (another kind, no run there) and 1. */
int mt_config_open(const char *cmd, const char *arg, char *dir, size_t nd, char *ckpt, size_t nk, mt_config *c);
/* The folder of a run given as arg (DIR, or a file in it) into dir; 1
 * after a message when arg does not exist. */
int mt_config_dir(const char *cmd, const char *arg, char *dir, size_t cap);

/* Builds m from c (vocabularies set) with fresh parameters seeded by
 * c->seed; takes the tokenizers (freed by mt_model_free). */
qkv_status mt_model_init(mt_model *m, const mt_config *c, qkv_tokenizer *src, qkv_tokenizer *tgt);
/* The model of a checkpoint argument: config, tokenizers, parameters. 0,
 * or a message and 1. */
int mt_model_open(const char *cmd, const char *arg, mt_model *m);
void mt_model_free(mt_model *m);
int64_t mt_model_params(const mt_model *m);

/* Sentence pairs of a tsv file (English TAB French), sides swapped for
 * fr-en; lines with no tab are skipped. */
typedef struct {
    char **src, **tgt; // (n)
    int64_t n;
    char *text;
} mt_pairs;
int mt_pairs_read(const char *cmd, const char *path, int reverse, mt_pairs *p);
void mt_pairs_free(mt_pairs *p);

/* Encoded pairs: the kept ones (at most max_words words a side, both sides
 * fitting in max_len tokens with <eos>); src ids of pair i at
 * ids[src_off[i]..src_off[i] + src_len[i]), tgt likewise; index[i] its
 * line in the mt_pairs. */
typedef struct {
    int64_t *ids, *src_off, *src_len, *tgt_off, *tgt_len, *index;
    int64_t n, dropped;
} mt_set;
qkv_status mt_set_build(const mt_model *m, const mt_pairs *p, int64_t max_words, mt_set *s);
void mt_set_free(mt_set *s);

/* The batch of pairs rows[0..N) of s, in c's arena: src (N,S) I64 (the
 * words, <eos>, then <pad>), lengths (N), tgt_in (N,T) (<bos> and the
 * words, <pad> after), tgt_out (N,T) (the words and <eos>, -100 after). */
typedef struct {
    qkv_tensor *src, *tgt_in, *tgt_out;
    int64_t *lengths;
    int64_t tokens; /* target tokens counted by the loss */
} mt_batch;
qkv_status mt_batch_make(qkv_ctx *c, const mt_set *s, const int64_t *rows, int64_t N, mt_batch *b);
/* The mean cross-entropy of the batch (training or eval, as c is set);
 * teacher forcing (RNN) with a draw seeded by seed. */
qkv_status mt_loss(qkv_ctx *c, const mt_model *m, const mt_batch *b, double teacher_forcing,
                   uint64_t seed, qkv_tensor **loss);
/* The mean loss per target token over the whole set (eval mode, no grad). */
qkv_status mt_eval_loss(qkv_ctx *c, const mt_model *m, const mt_set *s, int64_t limit,
                        double *loss);

/* Source ids for text: the pieces encoded, cut to max_len - 1, then <eos>.
 * *ids malloc'd (n ids); *unknown pieces became <unk>; *cut pieces were
 * dropped. */
qkv_status mt_encode_source(const mt_model *m, const char *text, int64_t **ids, int64_t *n,
                            int64_t *unknown, int64_t *cut);
/* Decodes N sources (N,S) with lengths: greedy (beam <= 1) or beam search
 * of beam beams; tokens (N, max_len) with out_len (N) tokens each, <eos>
 * included when reached. */
qkv_status mt_decode(qkv_ctx *c, const mt_model *m, qkv_tensor *src, const int64_t *lengths,
                     int64_t beam, int64_t *tokens, int64_t *out_len);
/* Text of tokens (up to <eos>, not included), malloc'd. */
qkv_status mt_tokens_text(const mt_model *m, const int64_t *tokens, int64_t n, char **text);
/* The attention of output tokens (L) decoded from src ids (S): a malloc'd
 * (layers, heads, L, S) array (RNN: 1 layer, 1 head; transformer: every
 * decoder layer's cross-attention heads). */
qkv_status mt_attention(qkv_ctx *c, const mt_model *m, const int64_t *src, int64_t S,
                        const int64_t *out, int64_t L, float **w, int64_t *layers, int64_t *heads);

/* Translates text (pairs of a split) in batches: hyps[i] malloc'd. */
qkv_status mt_translate_all(qkv_ctx *c, const mt_model *m, const mt_set *s, int64_t beam,
                            char **hyps);
#endif
