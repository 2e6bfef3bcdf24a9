/* qkv/data.h: data sets and readers (included by qkv.h). */
#include "qkv.h" /* first: qkv.h includes every area header in order */
#ifndef QKV_DATA_H
#define QKV_DATA_H
#ifdef __cplusplus
extern "C" {
#endif

/* ---- the lecture's toy sequence task (Fleuret, "13.2 Attention
 * mechanisms") ----------------------------------------------------------- */

typedef enum {
    QKV_TOY_PAIRS = 0,   /* average the heights of the two triangles, and of the two boxes */
    QKV_TOY_POSITIONAL   /* average the two leftmost shapes, and the two rightmost */
} qkv_toy_task;

/* n sequences of length T, each two triangles and two boxes at random,
 * non-overlapping places, heights in [1,25], widths in [5,11] scaled by
 * T/100, plus uniform noise of amplitude noise (the lecture: 0.3); as in
 * the lecture's generator, only draws whose two pair averages differ by
 * more than 4 are kept, so that getting the pairs wrong costs.
 * input and target are (n,1,T) (Conv1d's (N,C,L)); target is noise-free. */
qkv_status qkv_toy_generate(qkv_rng *r, qkv_toy_task task, int64_t n, int64_t T, float noise,
                            float *input, float *target);

/* ---- tokenizers (src/data/tokenizer*.c, docs/tokenizers.md) ----------- */

/* Text is UTF-8 bytes in, int64 ids out. Four kinds behind one interface:
 *   bytes  256 ids, one per byte; any input, invalid UTF-8 included.
 *   chars  the code points of a training text (sorted), id 0 for an unknown
 *          one, the last id <|endoftext|>; invalid UTF-8 is an error.
 *   bpe    byte-level BPE trained by qkv (GPT-2's pre-tokenisation, merges
 *          by pair frequency); ids 0..255 the bytes, then one per merge,
 *          the last id <|endoftext|>.
 *   gpt2   GPT-2's byte-level BPE from encoder.json and vocab.bpe.
 * For bytes, bpe and gpt2, decode(encode(x)) == x for any bytes x (an
 * invalid UTF-8 byte is a piece of its own, kept as a byte); chars round
 * trips text made of the code points it knows. Special tokens are never
 * read from text (encode treats "<|endoftext|>" as ordinary text, as
 * gpt-3-encoder's encode() does); qkv_tokenizer_special gives their ids,
 * and decode writes their text. */
typedef enum {
    QKV_TOKENIZER_BYTES = 0,
    QKV_TOKENIZER_CHARS,
    QKV_TOKENIZER_BPE,
    QKV_TOKENIZER_GPT2
} qkv_tokenizer_kind;

typedef struct qkv_tokenizer qkv_tokenizer;

qkv_status qkv_tokenizer_bytes_init(qkv_tokenizer **out);
/* The code points of text[0, len) (valid UTF-8, at least one). */
qkv_status qkv_tokenizer_chars_train(const char *text, size_t len, qkv_tokenizer **out);
/* Byte-level BPE with vocab_size ids in all (257 to 2^24): 256 bytes, up to
 * vocab_size - 257 merges, <|endoftext|>. Each merge joins the adjacent pair
 * counted most often over text's GPT-2 pieces (ties: the smallest left id,
 * then the smallest right id); training stops early when no pair occurs
 * twice, so the vocabulary may come out smaller. Deterministic. */
qkv_status qkv_tokenizer_bpe_train(const char *text, size_t len, int64_t vocab_size,
                                   qkv_tokenizer **out);
/* GPT-2's tokenizer from DIR/encoder.json and DIR/vocab.bpe. */
qkv_status qkv_tokenizer_gpt2_load(const char *dir, qkv_tokenizer **out);
/* A chars or bpe tokenizer to/from its text file (formats in
 * docs/tokenizers.md); saving bytes or gpt2 is an error. */
qkv_status qkv_tokenizer_save(const qkv_tokenizer *t, const char *path);
qkv_status qkv_tokenizer_load(const char *path, qkv_tokenizer **out);
/* The same file's text in memory: *text malloc'd (free() it), len bytes;
 * and a tokenizer from such a text (messages name it "(text)"). */
qkv_status qkv_tokenizer_save_text(const qkv_tokenizer *t, char **text, size_t *len);
qkv_status qkv_tokenizer_load_text(const char *text, size_t len, qkv_tokenizer **out);
/* "bytes", "chars:FILE", "bpe:FILE" or "gpt2:DIR" (the CLI's --tokenizer). */
qkv_status qkv_tokenizer_open(const char *spec, qkv_tokenizer **out);
void qkv_tokenizer_free(qkv_tokenizer *t);

qkv_tokenizer_kind qkv_tokenizer_kind_of(const qkv_tokenizer *t);
int64_t qkv_tokenizer_vocab_size(const qkv_tokenizer *t); /* 0 if t is NULL */
/* A special token's id ("<|endoftext|>"); an error if t has none. */
qkv_status qkv_tokenizer_special(const qkv_tokenizer *t, const char *name, int64_t *id);
/* *ids gets a malloc'd array of *n ids (free() it; NULL when *n is 0). */
qkv_status qkv_tokenizer_encode(const qkv_tokenizer *t, const char *text, size_t len,
                                int64_t **ids, int64_t *n);
/* *text gets a malloc'd, NUL-terminated text of *len bytes (free() it).
 * An id outside [0, vocab size) is an error; chars' unknown id decodes to
 * U+FFFD. Byte-level ids cut inside a character give its bytes as they are. */
qkv_status qkv_tokenizer_decode(const qkv_tokenizer *t, const int64_t *ids, int64_t n,
                                char **text, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
