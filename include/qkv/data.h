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
QKV_API qkv_status qkv_toy_generate(qkv_rng *r, qkv_toy_task task, int64_t n, int64_t T,
                                    float noise, float *input, float *target);

/* ---- tokenizers (src/data/tokenizer*.c, docs/tokenizers.md) ----------- */

/* Text is UTF-8 bytes in, int64 ids out. Five kinds behind one interface:
 *   bytes  256 ids, one per byte; any input, invalid UTF-8 included.
 *   chars  the code points of a training text (sorted), id 0 for an unknown
 *          one, the last id <|endoftext|>; invalid UTF-8 is an error.
 *   bpe    byte-level BPE trained by qkv (GPT-2's pre-tokenisation, merges
 *          by pair frequency); ids 0..255 the bytes, then one per merge,
 *          the last id <|endoftext|>.
 *   gpt2   GPT-2's byte-level BPE from encoder.json and vocab.bpe.
 *   words  whole words of a training text (docs/translation_data.md):
 *          <pad>=0 <bos>=1 <eos>=2 <unk>=3, then the words seen at least
 *          min_freq times, the most frequent first (ties: byte order).
 *          Text is split at white space (\s), optionally lower-cased
 *          (ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic capitals) and
 *          with each punctuation character a token (an apostrophe between
 *          letters ends the word it follows: "l'", "image"; a hyphen
 *          between letters or digits and a '.' or ',' between digits stay
 *          inside). A word it does not know encodes to <unk>; decode joins
 *          the words with single spaces.
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
    QKV_TOKENIZER_GPT2,
    QKV_TOKENIZER_WORDS,
    QKV_TOKENIZER_GGUF_GPT2, /* a GGUF file's "gpt2" vocabulary (below) */
    QKV_TOKENIZER_GGUF_LLAMA, /* a GGUF file's "llama" vocabulary (below) */
    QKV_TOKENIZER_WORDPIECE   /* BERT's WordPiece from a vocab.txt (below) */
} qkv_tokenizer_kind;

typedef struct qkv_tokenizer qkv_tokenizer;

QKV_API qkv_status qkv_tokenizer_bytes_new(qkv_tokenizer **out);
/* Deprecated alias (docs/core.md, "Names"). */
QKV_API QKV_DEPRECATED("qkv_tokenizer_bytes_new") qkv_status qkv_tokenizer_bytes_init(qkv_tokenizer **out);
/* The code points of text[0, len) (valid UTF-8, at least one). */
QKV_API qkv_status qkv_tokenizer_chars_train(const char *text, size_t len, qkv_tokenizer **out);
/* Byte-level BPE with vocab_size ids in all (257 to 2^24): 256 bytes, up to
 * vocab_size - 257 merges, <|endoftext|>. Each merge joins the adjacent pair
 * counted most often over text's GPT-2 pieces (ties: the smallest left id,
 * then the smallest right id); training stops early when no pair occurs
 * twice, so the vocabulary may come out smaller. Deterministic. */
QKV_API qkv_status qkv_tokenizer_bpe_train(const char *text, size_t len, int64_t vocab_size,
                                           qkv_tokenizer **out);
/* A words tokenizer from text[0, len) (valid UTF-8; lines or not). */
typedef struct {
    int lower;        /* lower-case before splitting */
    int split_punct;  /* punctuation characters as tokens of their own */
    int64_t min_freq; /* keep words seen at least this often (>= 1) */
    int64_t max_size; /* at most this many ids, specials included (0: no limit; else > 4) */
} qkv_words_options;
QKV_API qkv_status qkv_tokenizer_words_train(const char *text, size_t len,
                                             const qkv_words_options *opt, qkv_tokenizer **out);
/* A words tokenizer's pieces of text[0, len), as encode splits them
 * (lower-cased when t lower-cases), joined by single spaces, known or not:
 * what BLEU compares and what attention maps label. unknown (may be NULL)
 * gets how many pieces encode would map to <unk>. *out is malloc'd and
 * NUL-terminated (free() it), *out_len its length (may be NULL). */
QKV_API qkv_status qkv_tokenizer_words_split(const qkv_tokenizer *t, const char *text, size_t len,
                                             char **out, size_t *out_len, int64_t *unknown);
/* GPT-2's tokenizer from DIR/encoder.json and DIR/vocab.bpe. */
QKV_API qkv_status qkv_tokenizer_gpt2_load(const char *dir, qkv_tokenizer **out);
/* A chars, bpe or words tokenizer to/from its text file (formats in
 * docs/tokenizers.md); saving bytes or gpt2 is an error. */
QKV_API qkv_status qkv_tokenizer_save(const qkv_tokenizer *t, const char *path);
QKV_API qkv_status qkv_tokenizer_load(const char *path, qkv_tokenizer **out);
/* The same file's text in memory: *text malloc'd (free() it), len bytes;
 * and a tokenizer from such a text (messages name it "(text)"). */
QKV_API qkv_status qkv_tokenizer_save_text(const qkv_tokenizer *t, char **text, size_t *len);
QKV_API qkv_status qkv_tokenizer_load_text(const char *text, size_t len, qkv_tokenizer **out);
/* "bytes", "chars:FILE", "bpe:FILE", "words:FILE", "gpt2:DIR" or "gguf:FILE" (a
 * GGUF file's tokenizer, qkv_tokenizer_from_gguf) (the CLI's --tokenizer). */
QKV_API qkv_status qkv_tokenizer_open(const char *spec, qkv_tokenizer **out);
QKV_API void qkv_tokenizer_free(qkv_tokenizer *t);

QKV_API qkv_tokenizer_kind qkv_tokenizer_kind_of(const qkv_tokenizer *t);
QKV_API int64_t qkv_tokenizer_vocab_size(const qkv_tokenizer *t); /* 0 if t is NULL */
/* A special token's id ("<|endoftext|>"; words: "<pad>", "<bos>", "<eos>",
 * "<unk>"); an error if t has none. */
QKV_API qkv_status qkv_tokenizer_special(const qkv_tokenizer *t, const char *name, int64_t *id);
/* *ids gets a malloc'd array of *n ids (free() it; NULL when *n is 0). */
QKV_API qkv_status qkv_tokenizer_encode(const qkv_tokenizer *t, const char *text, size_t len,
                                        int64_t **ids, int64_t *n);
/* *text gets a malloc'd, NUL-terminated text of *len bytes (free() it).
 * An id outside [0, vocab size) is an error; chars' unknown id decodes to
 * U+FFFD. Byte-level ids cut inside a character give its bytes as they are. */
QKV_API qkv_status qkv_tokenizer_decode(const qkv_tokenizer *t, const int64_t *ids, int64_t n,
                                        char **text, size_t *len);

/* ---- BERT's WordPiece (src/data/tokenizer_wordpiece.c, docs/bert.md) ----
 * As BertTokenizerFast does it: clean-up (NUL, U+FFFD and control/format
 * characters dropped, white space to ' '), CJK ideographs split off,
 * accents stripped (NFD, marks Mn dropped) and lower-casing (utf8proc's
 * Unicode data), split at white space and at each punctuation character,
 * then each word greedily longest-match-first into vocabulary pieces
 * ("##" before a piece that continues a word); a word with a piece the
 * vocabulary lacks, or longer than max_chars_per_word characters, is
 * [UNK]. "[CLS]", "[SEP]", "[PAD]", "[UNK]" and "[MASK]" written in the
 * text are those tokens (as BertTokenizerFast's added tokens). Invalid
 * UTF-8 bytes are read as U+FFFD (dropped by the clean-up). qkv_tokenizer_encode
 * gives the pieces without [CLS]/[SEP]; qkv_tokenizer_special knows "[CLS]",
 * "[SEP]", "[PAD]", "[UNK]" and "[MASK]"; decode joins the pieces as BERT's
 * decode does (" " between words, "##" pieces glued, " ." -> "." and the
 * like). Saving one with qkv_tokenizer_save is refused (vocab.txt is its file). */
typedef struct {
    int lowercase;              /* BertTokenizer do_lower_case (default 1) */
    int strip_accents;          /* -1: same as lowercase (BERT's default), 0 or 1 */
    int split_cjk;              /* tokenize_chinese_chars (default 1) */
    int clean_text;             /* default 1 */
    int64_t max_chars_per_word; /* default 100: longer words become [UNK] */
    int64_t max_len;            /* truncation limit incl. [CLS]/[SEP] (default 512) */
} qkv_wordpiece_opts;
QKV_API void qkv_wordpiece_opts_default(qkv_wordpiece_opts *o);
/* vocab.txt: one token a line, id = line number; needs [UNK], [CLS], [SEP], [PAD]. o NULL: defaults. */
QKV_API qkv_status qkv_tokenizer_wordpiece_load(const char *vocab_path, const qkv_wordpiece_opts *o,
                                                qkv_tokenizer **out);
/* A model folder: vocab.txt + tokenizer_config.json (do_lower_case, strip_accents,
 * tokenize_chinese_chars, model_max_length) and sentence_bert_config.json's
 * max_seq_length when present (it wins, as sentence-transformers does). */
QKV_API qkv_status qkv_tokenizer_wordpiece_open_dir(const char *dir, qkv_tokenizer **out);
/* BERT's input for one text: [CLS] pieces [SEP], cut to max_len ids (max_len <= 0: the
 * tokenizer's own limit) the way BertTokenizerFast(truncation=True, max_length=...) cuts;
 * *n_full gets the length before the cut (NULL allowed). Attention mask: n ones; type ids: 0. */
QKV_API qkv_status qkv_tokenizer_encode_bert(const qkv_tokenizer *t, const char *text, size_t len,
                                             int64_t max_len, int64_t **ids, int64_t *n,
                                             int64_t *n_full);

/* ---- tokenizers of GGUF files, as llama.cpp's (src/data/tokenizer_vocab.c,
 * tokenizer_spm.c, tokenizer_llama_pre.c, tokenizer_gguf.c) ------------------
 * tokenizer.ggml.model "gpt2": byte-level BPE with the file's tokens and
 * merges after the pre-tokenizer tokenizer.ggml.pre names (default, gpt2,
 * smollm, llama3 and their aliases; another name is refused, named);
 * "llama": SentencePiece's BPE with the file's scores, spaces as U+2581, a
 * space put first when add_space_prefix says so, and bytes as <0xXX> tokens
 * where no token covers a piece. Token types (tokenizer.ggml.token_type):
 * control, user-defined and unknown tokens are cut out of the text before
 * the rest, the longest first; with parse_special 0 only the user-defined
 * ones are. decode writes what llama.cpp's token_to_piece writes with
 * special on (control tokens' texts included), so decode(encode(x)) == x
 * for valid UTF-8 x (a "llama" vocabulary with add_space_prefix adds the
 * space in front); gpt2 reads invalid UTF-8 bytes as U+FFFD, as llama.cpp. */
typedef struct qkv_gguf qkv_gguf;
/* A vocabulary in memory: what the GGUF keys tokenizer.ggml.* hold. */
typedef struct {
    const char *model;             /* "gpt2" or "llama" */
    const char *pre;               /* gpt2's pre-tokenizer (NULL or "": "default") */
    int64_t n_tokens;              /* 1 to 2^24 */
    const char *const *tokens;     /* the texts as the file has them */
    const size_t *token_lens;      /* their lengths (NULL: NUL-terminated) */
    const float *scores;           /* llama: n_tokens scores (NULL: all 0) */
    const int32_t *types;          /* 1 normal 2 unknown 3 control 4 user-defined 5 unused 6 byte (NULL: all 1) */
    int64_t n_merges;              /* gpt2: merges "A B", in rank order */
    const char *const *merges;
    const size_t *merge_lens;      /* NULL: NUL-terminated */
    int64_t bos, eos, unk, pad, eot; /* ids, -1 for none (eot -1: found by name as llama.cpp does) */
    int add_bos, add_eos, add_space_prefix; /* 0 or 1; -1: llama.cpp's default for the model */
} qkv_vocab_spec;
QKV_API qkv_status qkv_tokenizer_from_vocab(const qkv_vocab_spec *v, qkv_tokenizer **out);
/* The tokenizer of a GGUF file's metadata (tokenizer.ggml.*; ids absent from
 * it take llama.cpp's defaults). */
QKV_API qkv_status qkv_tokenizer_from_gguf(const qkv_gguf *g, qkv_tokenizer **out);
/* encode with llama.cpp's two switches: add_special puts BOS (and EOS) where
 * the vocabulary adds them; parse_special reads control tokens' texts in
 * text as those tokens. qkv_tokenizer_encode is this with both 0. Other
 * kinds take only 0, 0. */
QKV_API qkv_status qkv_tokenizer_encode_special(const qkv_tokenizer *t, const char *text, size_t len,
                                                int add_special, int parse_special, int64_t **ids,
                                                int64_t *n);
/* A GGUF tokenizer's special ids (-1: none) and switches. qkv_tokenizer_special
 * also takes "bos", "eos", "eot", "unk", "pad" or a special token's text. */
typedef struct {
    int64_t bos, eos, eot, unk, pad;
    int add_bos, add_eos, add_space_prefix;
} qkv_tokenizer_info;
QKV_API qkv_status qkv_tokenizer_info_of(const qkv_tokenizer *t, qkv_tokenizer_info *info);
/* 1 if id ends generation (llama.cpp's special_eog_ids: EOS, EOT, and the
 * tokens named as its end-of-turn and fill-in-the-middle pad, repository
 * and separator tokens, such as <|im_end|>, <end_of_turn>, <reponame>);
 * 0 otherwise and for other kinds. */
QKV_API int qkv_tokenizer_is_eog(const qkv_tokenizer *t, int64_t id);

/* ---- chat templates (src/data/chat.c) ----------------------------------
 * llama.cpp's C formatting of known templates (llm_chat_apply_template):
 * tmpl is a template's name ("chatml", "gemma") or a GGUF file's
 * tokenizer.chat_template text, recognised by the substrings llama.cpp
 * looks for (<|im_start|>: chatml; <start_of_turn>: gemma); a template
 * recognised as another of llama.cpp's, or none, is QKV_ERR_ARG naming
 * it. add_assistant ends the prompt with the assistant's opening.
 * *out is malloc'd and NUL-terminated (free() it), *out_len its length. */
typedef struct {
    const char *role;    /* "system", "user", "assistant" */
    const char *content;
} qkv_chat_message;
QKV_API qkv_status qkv_chat_apply(const char *tmpl, const qkv_chat_message *messages, int64_t n,
                                  int add_assistant, char **out, size_t *out_len);
/* The name of the template tmpl is recognised as ("chatml", "gemma", or
 * another of llama.cpp's names; "unknown" if none). */
QKV_API const char *qkv_chat_template_name(const char *tmpl);

/* ---- GNU gettext catalogues (src/data/mo.c, docs/translation_data.md) --- */

/* A .mo file's (msgid, msgstr) pairs as UTF-8 text: both byte orders,
 * revisions 0.0 and 0.1 (the static strings), plural entries as their first
 * form (msgid's singular, msgstr[0]), a msgid's context ("ctx\004id")
 * removed, the header entry (empty msgid) left out, and so is an entry
 * whose msgid is empty once its context and plural are cut off. The header's charset
 * is converted to UTF-8 with iconv; a charset iconv does not know, or a
 * string that is not valid in it (or not valid UTF-8, or holding a NUL
 * after conversion), is QKV_ERR_FORMAT naming the file and the string.
 * Every offset and length is checked against the file's size. */
typedef struct qkv_mo qkv_mo;
QKV_API qkv_status qkv_mo_read(const char *path, qkv_mo **out);
/* The same from size bytes in memory; name is used in messages. */
QKV_API qkv_status qkv_mo_parse(const void *data, size_t size, const char *name, qkv_mo **out);
QKV_API int64_t qkv_mo_count(const qkv_mo *mo); /* 0 if mo is NULL */
/* Pair i's texts (valid until qkv_mo_free); i in [0, count). */
QKV_API qkv_status qkv_mo_get(const qkv_mo *mo, int64_t i, const char **msgid, const char **msgstr);
/* The header's charset ("UTF-8" when the header names none). */
QKV_API const char *qkv_mo_charset(const qkv_mo *mo);
QKV_API void qkv_mo_free(qkv_mo *mo);

/* ---- English/French pairs from catalogues (src/data/translation*.c) ---- */

/* One message made plain (the rules, with examples, in
 * docs/translation_data.md): printf conversions (%s, %1$d, %-10s, %qs,
 * %<PRIu64>, GCC's %< %>), %% as '%', Qt's %1, LibreOffice's %PRODUCTNAME,
 * {0} {name} {}, $(ARG1) ${var} $var$, markup tags (<b>, </a>, <br/>,
 * <file>) removed; an accelerator mark (_ & ~ before a letter) removed when
 * it is the only one of its kind in the message; entities (&amp; &lt; &gt;
 * &quot; &apos; &nbsp; &#N; &#xN;) decoded; quotes and brackets left empty
 * removed; white space (\s, NBSP included) collapsed to single spaces, none
 * at the ends. *out is malloc'd. */
QKV_API qkv_status qkv_translation_clean(const char *text, char **out);

/* What became of the pairs: each add adds its counts; write sets the rest. */
typedef struct {
    int64_t read;         /* pairs given */
    int64_t empty;        /* dropped: a side empty once cleaned */
    int64_t control;      /* dropped: a control character (C0, DEL, C1) or invalid UTF-8 left */
    int64_t untranslated; /* dropped: French equal to English, ignoring case */
    int64_t too_long;     /* dropped: a side of more than max_words words */
    int64_t kept;         /* kept (before duplicates) */
    int64_t duplicates;   /* dropped by write: the same (English, French) again */
    int64_t split[3];     /* written to train, valid, test */
} qkv_translation_counts;

typedef struct qkv_translation_set qkv_translation_set;
QKV_API qkv_status qkv_translation_set_new(int64_t max_words, qkv_translation_set **out);
/* Deprecated alias (docs/core.md, "Names"). */
QKV_API QKV_DEPRECATED("qkv_translation_set_new") qkv_status qkv_translation_set_init(int64_t max_words,
                                                                                qkv_translation_set **out);
QKV_API void qkv_translation_set_free(qkv_translation_set *s);
/* Cleans and filters one pair (in that order: empty, control, untranslated,
 * too long), keeping it if it passes. */
QKV_API qkv_status qkv_translation_add_pair(qkv_translation_set *s, const char *en, const char *fr,
                                            qkv_translation_counts *c);
/* Every pair of a .mo file (qkv_mo_read), as add_pair. */
QKV_API qkv_status qkv_translation_add_mo(qkv_translation_set *s, const char *path,
                                          qkv_translation_counts *c);
/* Sorts the pairs by (hash of English, English, French), drops repeats and
 * writes DIR/train.tsv, valid.tsv, test.tsv ("English\tFrench\n" lines) by
 * qkv_translation_split of the English side. */
QKV_API qkv_status qkv_translation_write(qkv_translation_set *s, const char *dir,
                                         qkv_translation_counts *c);
/* 0 (train, 90%), 1 (valid, 5%) or 2 (test, 5%): a 64-bit hash of the
 * English text (FNV-1a, then splitmix64's finaliser) mod 100. */
QKV_API int qkv_translation_split(const char *english);

/* ---- BLEU (src/data/bleu.c, docs/translation_data.md) ------------------ */

/* Corpus BLEU-4 as NLTK's corpus_bleu with its defaults (weights 1/4 each,
 * no smoothing): hyps[i] is a sentence and refs[r * n + i] its reference
 * number r (nrefs references each), tokens separated by white space as
 * Python's str.split(). Clipped n-gram counts summed over the corpus;
 * p_n = matches/total where each sentence's total is at least 1; brevity
 * penalty exp(1 - r/c) from the summed hypothesis lengths c and closest
 * reference lengths r (ties: the shorter); 0 when no unigram matches; a
 * higher order with no match counts as p_n = DBL_MIN (NLTK's method0: a
 * score near 1e-77 rather than 0). */
typedef struct {
    double bleu;
    double precision[4];   /* p_1..p_4 as fractions (0 when total is 0) */
    int64_t matches[4], totals[4];
    double brevity_penalty;
    int64_t hyp_len, ref_len;
} qkv_bleu_score;
QKV_API qkv_status qkv_bleu_corpus(const char *const *hyps, const char *const *refs, int64_t n,
                                   int64_t nrefs, qkv_bleu_score *out);

/* Paired bootstrap resampling (Koehn 2004, "Statistical significance tests
 * for machine translation evaluation"): is system A's BLEU above system B's
 * on the same n sentences beyond what the choice of sentences explains?
 * Each of `samples` draws picks n sentence indices with replacement (a
 * qkv_rng seeded `seed`), the same for A and B, and scores both on them
 * (qkv_bleu_corpus's counts, summed). hyps_a, hyps_b and refs as in
 * qkv_bleu_corpus; n >= 1, samples in [1, 1e6]. */
typedef struct {
    qkv_bleu_score a, b;      /* both systems on all n sentences */
    double diff;              /* a.bleu - b.bleu */
    double diff_lo, diff_hi;  /* the 2.5% and 97.5% quantiles of the samples' differences */
    int64_t a_wins, b_wins;   /* samples where A scored above B, and B above A (ties: neither) */
    int64_t samples;
} qkv_bleu_bootstrap;
QKV_API qkv_status qkv_bleu_paired_bootstrap(const char *const *hyps_a, const char *const *hyps_b,
                                             const char *const *refs, int64_t n, int64_t nrefs,
                                             int64_t samples, uint64_t seed,
                                             qkv_bleu_bootstrap *out);

#ifdef __cplusplus
}
#endif
#endif
