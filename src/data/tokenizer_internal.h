/* tokenizer_internal.h: what src/data/tokenizer*.c share (private).
 * docs/tokenizers.md describes the tokenizers and their file formats. */
#ifndef QKV_DATA_TOKENIZER_INTERNAL_H
#define QKV_DATA_TOKENIZER_INTERNAL_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "qkv.h"

/* A growable array of int64 ids. */
typedef struct {
    int64_t *v;
    int64_t n, cap;
} tok_ids;
qkv_status tok_ids_push(tok_ids *a, int64_t id, const char *fn);

/* One bigram merge: (left, right) -> merged, at rank = its index. */
typedef struct {
    int64_t left, right, merged;
} tok_merge;

/* An open-addressing map from a (left, right) pair to a rank. */
typedef struct {
    uint64_t *keys; /* (left << 32 | right) + 1; 0 = empty */
    int64_t *vals;
    size_t cap;
} tok_pairmap;
qkv_status tok_pairmap_init(tok_pairmap *m, size_t n, const char *fn);
void tok_pairmap_free(tok_pairmap *m);
qkv_status tok_pairmap_put(tok_pairmap *m, int64_t left, int64_t right, int64_t val);
int64_t tok_pairmap_get(const tok_pairmap *m, int64_t left, int64_t right); /* -1 if absent */

/* An open-addressing map from byte strings to ids, the strings being
 * bytes[off[id] .. off[id + 1]) of some table (cap a power of two, at most
 * half full, -1 empty). tok_strmap_slot: the slot holding s[0, n)'s id, or
 * the empty slot where it would go. */
typedef struct {
    int64_t *slot;
    size_t cap;
} tok_strmap;
qkv_status tok_strmap_init(tok_strmap *m, int64_t n, const char *fn);
int64_t *tok_strmap_slot(const tok_strmap *m, const unsigned char *bytes, const int64_t *off, const unsigned char *s,
                         size_t n);

struct qkv_tokenizer {
    qkv_tokenizer_kind kind;
    int64_t vocab_size;
    /* bytes: ids are the bytes. chars: id 0 unknown, 1..nchars the sorted
     * code points, then <|endoftext|>. */
    uint32_t *chars;
    int64_t nchars;
    /* bpe and gpt2: the byte -> id of each byte, the merges in rank order,
     * the pair -> rank map, and each id's bytes (tok_bytes[off[i]..off[i+1])). */
    int64_t byte_id[256];
    tok_merge *merges;
    int64_t nmerges;
    tok_pairmap ranks;
    unsigned char *tok_bytes;
    int64_t *tok_off;
    int64_t eot; /* <|endoftext|>'s id, -1 if none */
    /* words: ids 0..3 <pad> <bos> <eos> <unk>, then the words; each id's
     * text in tok_bytes/tok_off as above; a map from a word to its id
     * (open addressing, wmap_cap a power of two, -1 empty); the options. */
    int64_t *wmap;
    size_t wmap_cap;
    int lower, split_punct;
    /* gguf_gpt2 and gguf_llama (tokenizer_vocab.c, tokenizer_gguf.c): each
     * id's text as the file stores it (raw/raw_off; tok_bytes/tok_off hold
     * what it decodes to), a map from that text to the id (the last id of a
     * text wins, as in llama.cpp), llama.cpp's token attributes (TOK_A_*),
     * the scores (llama), the ids split out of text before the rest
     * (control, user-defined, unknown: the longest first), the
     * pre-tokenizer (gpt2) and the specials. byte_id[b] is the id of byte
     * b (gpt2: its GPT-2 character; llama: <0xXX>), -1 if none. */
    unsigned char *raw;
    int64_t *raw_off;
    tok_strmap rmap;
    unsigned char *attr;
    float *scores;
    int64_t *specials, nspecials;
    int pre, ignore_merges, add_bos, add_eos, add_space_prefix;
    int64_t bos, eos, unk, pad;
    /* wordpiece (tokenizer_wordpiece.c): each id's token in tok_bytes/tok_off,
     * rmap from a token to its id, the options (max_len resolved), the
     * specials [CLS], [SEP], [MASK] (unk and pad above). */
    qkv_wordpiece_opts wp;
    int64_t cls, sep, mask;
};

/* llama.cpp's token attributes (llama_token_attr) from the file's types. */
enum {
    TOK_A_UNDEFINED = 0,
    TOK_A_UNKNOWN = 1,
    TOK_A_UNUSED = 2,
    TOK_A_NORMAL = 4,
    TOK_A_CONTROL = 8,
    TOK_A_USER = 16,
    TOK_A_BYTE = 32,
    TOK_A_EOG = 64 /* not llama.cpp's: the token ends generation (qkv_tokenizer_is_eog) */
};

/* GPT-2's pre-tokenisation: the length in bytes of the piece that starts at
 * s[0] (n > 0 bytes left); never 0. */
size_t tok_pretok_next(const unsigned char *s, size_t n);
/* The code point at s[0] and its length; an invalid byte gives -1, length 1. */
int32_t tok_utf8_decode(const unsigned char *s, size_t n, size_t *len);
/* JavaScript's classes, as GPT-2's pre-tokenisation uses them: \p{L},
 * \p{N}, \s, anything else (an invalid code point, cp < 0, included). */
enum { TOK_C_LETTER, TOK_C_NUMBER, TOK_C_SPACE, TOK_C_OTHER };
int tok_cp_class(int32_t cp);
/* The lower-case of cp for ASCII, Latin-1, Latin Extended-A and Greek and
 * Cyrillic capitals (simple one-to-one mappings); other code points as they are. */
uint32_t tok_lower_cp(uint32_t cp);
/* Writes cp's UTF-8 (1..4 bytes) into out; returns its length. */
int tok_utf8_encode(uint32_t cp, unsigned char *out);

/* GPT-2's byte alphabet: enc[b] is byte b's character, dec[c] the byte of
 * character c (-1 if none). tok_gpt2_text_bytes: text in that alphabet back
 * to bytes in o (never longer); -1 if a character is outside it. */
void tok_gpt2_bytes(uint32_t enc[256], int dec[0x144]);
int64_t tok_gpt2_text_bytes(const char *text, size_t len, const int dec[0x144], unsigned char *o);

/* GGUF "gpt2" pre-tokenizers (tokenizer_llama_pre.c): the kind named name
 * (NULL or "": "default"), or -1; *ignore_merges and *add_bos get what
 * llama.cpp sets for it. tok_llama_pre_split calls fn on each piece of
 * text[0, len) in order (UTF-8, invalid bytes as U+FFFD); stops at fn's
 * first error. */
int tok_llama_pre_find(const char *name, int *ignore_merges, int *add_bos);
const char *tok_llama_pre_names(void);
qkv_status tok_llama_pre_split(int pre, const char *text, size_t len,
                               qkv_status (*fn)(const unsigned char *, size_t, void *), void *arg);
/* GGUF tokenizers' encode (tokenizer_vocab.c). */
qkv_status tok_vocab_encode(const qkv_tokenizer *t, const char *text, size_t len, int add_special, int parse_special,
                            tok_ids *ids);
/* A GGUF tokenizer's special id by name (qkv_tokenizer_special), or -1. */
int64_t tok_vocab_special(const qkv_tokenizer *t, const char *name);
/* SentencePiece's merges on one fragment (tokenizer_spm.c): text[0, len)
 * with spaces already as U+2581. */
qkv_status tok_spm_encode(const qkv_tokenizer *t, const unsigned char *text, size_t len, tok_ids *ids);

/* The BPE merge loop on one piece: ids[0..*n) are its symbols; merges the
 * lowest-ranked adjacent pair, all its occurrences left to right, until no
 * pair has a rank. */
void tok_bpe_apply(const qkv_tokenizer *t, int64_t *ids, int64_t *n);
/* words: the id of word s[0, n) (-1 if unknown). */
int64_t tok_words_find(const qkv_tokenizer *t, const char *s, size_t n);
/* words: the pieces of text[0, len) (lower-cased first when t->lower):
 * fn(piece, its length, arg) on each in order; stops at fn's first error. */
qkv_status tok_words_split(const char *text, size_t len, int lower, int split_punct,
                           qkv_status (*fn)(const char *, size_t, void *), void *arg);
qkv_status tok_words_encode(const qkv_tokenizer *t, const char *text, size_t len, tok_ids *ids);
int64_t tok_words_special(const char *name); /* <pad> <bos> <eos> <unk>: 0..3; else -1 */
qkv_status tok_words_save(const qkv_tokenizer *t, FILE *f);
qkv_status tok_words_parse(const char *path, char *text, qkv_tokenizer **out);
/* wordpiece (tokenizer_wordpiece.c): encode's pieces (no [CLS]/[SEP]),
 * decode as BERT's, a special's id by name (-1 if none). */
qkv_status tok_wp_encode(const qkv_tokenizer *t, const char *text, size_t len, tok_ids *ids);
qkv_status tok_wp_decode(const qkv_tokenizer *t, const int64_t *ids, int64_t n, char **text, size_t *len);
int64_t tok_wp_special(const qkv_tokenizer *t, const char *name);
qkv_status tok_read_file(const char *path, char **text, size_t *len, const char *fn);
#endif
