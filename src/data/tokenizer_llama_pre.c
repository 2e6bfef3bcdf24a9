/* tokenizer_llama_pre.c: the pre-tokenizers of GGUF "gpt2" vocabularies as
 * llama.cpp runs them (its unicode_regex_split): the text as code points
 * (invalid UTF-8 bytes become U+FFFD, as llama.cpp reads them), split by a
 * list of expressions in turn, each one splitting the pieces the previous
 * left, with llama.cpp's code point classes (tokenizer_unicode.h). The
 * pieces come back as UTF-8. docs/tokenizers.md lists the names. */
#include <stdlib.h>
#include <string.h>
#include "core/internal.h"
#include "data/tokenizer_internal.h"
#include "data/tokenizer_unicode.h"

enum {
    F_NUMBER = 0x02,
    F_LETTER = 0x04,
    F_PUNCT = 0x20,
    F_WS = 0x100,
    F_OUT = 0 /* past a piece's end: no flags at all */
};

static unsigned cp_flags(uint32_t cp)
{
    size_t lo = 0, hi = sizeof tok_llama_flag_ranges / sizeof *tok_llama_flag_ranges;
    if (cp > 0x10FFFF) return 0x01; /* undefined */
    while (hi - lo > 1) { /* the last entry whose first <= cp */
        size_t mid = lo + (hi - lo) / 2;
        if (tok_llama_flag_ranges[mid][0] <= cp) lo = mid;
        else hi = mid;
    }
    return tok_llama_flag_ranges[lo][1];
}

/* llama.cpp's unicode_cpt_from_utf8: a lead byte and its continuation bytes
 * (overlong forms and surrogates accepted); anything else is one U+FFFD. */
static uint32_t next_cp(const unsigned char *s, size_t n, size_t *len)
{
    unsigned c = s[0];
    int k = c < 0x80 ? 0 : c < 0xC0 ? -1 : c < 0xE0 ? 1 : c < 0xF0 ? 2 : c < 0xF8 ? 3 : -1;
    *len = 1;
    if (k == 0) return c;
    if (k < 0 || (size_t)k >= n) return 0xFFFD;
    uint32_t cp = c & (0x3Fu >> k);
    for (int i = 1; i <= k; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0xFFFD;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    *len = (size_t)k + 1;
    return cp;
}

/* The pre-tokenizers by the name in tokenizer.ggml.pre. */
typedef enum { PRE_DEFAULT, PRE_GPT2, PRE_SMOLLM, PRE_LLAMA3 } pre_kind;

static const struct {
    const char *name;
    pre_kind kind;
} pre_names[] = {
    {"default", PRE_DEFAULT},   {"gpt-2", PRE_GPT2},
    {"phi-2", PRE_GPT2},        {"mpt", PRE_GPT2},           {"olmo", PRE_GPT2},
    {"jais", PRE_GPT2},         {"trillion", PRE_GPT2},      {"smollm", PRE_SMOLLM},
    {"starcoder", PRE_SMOLLM},  {"refact", PRE_SMOLLM},      {"command-r", PRE_SMOLLM},
    {"codeshell", PRE_SMOLLM},  {"exaone", PRE_SMOLLM},      {"minerva-7b", PRE_SMOLLM},
    {"llama3", PRE_LLAMA3},     {"llama-v3", PRE_LLAMA3},    {"llama-bpe", PRE_LLAMA3},
    {"falcon3", PRE_LLAMA3},    {"dbrx", PRE_LLAMA3},        {"smaug-bpe", PRE_LLAMA3},
};

int tok_llama_pre_find(const char *name, int *ignore_merges, int *add_bos)
{
    if (!name || !*name) name = "default"; /* llama.cpp: a missing name is the default, with a warning */
    for (size_t i = 0; i < sizeof pre_names / sizeof *pre_names; i++)
        if (!strcmp(name, pre_names[i].name)) {
            *ignore_merges = pre_names[i].kind == PRE_LLAMA3;
            *add_bos = pre_names[i].kind == PRE_LLAMA3;
            return (int)pre_names[i].kind;
        }
    return -1;
}

const char *tok_llama_pre_names(void)
{
    return "default, gpt-2 (phi-2, mpt, olmo, jais, trillion), smollm (starcoder, refact, command-r, "
           "codeshell, exaone, minerva-7b), llama3 (llama-v3, llama-bpe, falcon3, dbrx, smaug-bpe)";
}

/* The text as code points with their flags, and the split so far: piece
 * boundaries as a list of lengths in code points. */
typedef struct {
    uint32_t *cp;
    unsigned *fl;
    size_t n;
    size_t *len, nlen; /* piece lengths, their sum n */
    size_t *out, nout; /* the next split being built */
} split;

static unsigned fl_at(const split *s, size_t lo, size_t hi, size_t i) { return i >= lo && i < hi ? s->fl[i] : F_OUT; }
static uint32_t cp_at(const split *s, size_t lo, size_t hi, size_t i)
{
    return i >= lo && i < hi ? s->cp[i] : 0xFFFFFFFFu;
}

static void emit(split *s, size_t *prev, size_t end)
{
    if (end > *prev) s->out[s->nout++] = end - *prev;
    *prev = end;
}

/* 's|'t|'re|'ve|'m|'ll|'d (llama3: either case): the contraction's length at
 * i, or 0. */
static size_t contraction(const split *s, size_t lo, size_t hi, size_t i, int any_case)
{
    if (s->cp[i] != '\'' || i + 1 >= hi) return 0;
    uint32_t a = cp_at(s, lo, hi, i + 1), b = i + 2 < hi ? cp_at(s, lo, hi, i + 2) : 0;
    if (any_case) a = a < 128 && a >= 'A' && a <= 'Z' ? a + 32 : a, b = b < 128 && b >= 'A' && b <= 'Z' ? b + 32 : b;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

static int is_nl(uint32_t c) { return c == '\r' || c == '\n'; }
static int other(unsigned f) { return !(f & (F_WS | F_LETTER | F_NUMBER)) && f; }

/* Where the white-space alternatives end a piece that starts at i (one past
 * it): with nl (Llama 3's \s*[\r\n]+ first), after the run's last \r or \n;
 * \s+(?!\S): a run of more than one before more text, less its last one;
 * \s+: the run; no white space at all: the one code point. */
static size_t space_end(const split *s, size_t lo, size_t hi, size_t i, int nl)
{
    size_t k = 0, nl_end = 0;
    while (fl_at(s, lo, hi, i + k) & F_WS) {
        if (is_nl(s->cp[i + k])) nl_end = i + k + 1;
        k++;
    }
    if (nl && nl_end) return nl_end;
    if (k > 1 && i + k < hi) return i + k - 1;
    return i + (k > 0 ? k : 1);
}

/* GPT-2's expression: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
 * ?[^\s\p{L}\p{N}]+|\s+(?!\S) (llama.cpp's unicode_regex_split_custom_gpt2):
 * the end of the piece that starts at pos. */
static size_t piece_gpt2(const split *s, size_t lo, size_t hi, size_t pos)
{
    size_t c = contraction(s, lo, hi, pos, 0);
    if (c) return pos + c;
    uint32_t cp = s->cp[pos];
    unsigned f2 = cp == ' ' ? fl_at(s, lo, hi, pos + 1) : s->fl[pos];
    unsigned want = f2 & F_LETTER ? F_LETTER : f2 & F_NUMBER ? F_NUMBER : 0;
    if (!want && !other(f2)) return space_end(s, lo, hi, pos, 0);
    pos += cp == ' ';
    if (want)
        while (fl_at(s, lo, hi, pos) & want) pos++;
    else
        while (other(fl_at(s, lo, hi, pos))) pos++;
    return pos;
}

/* Llama 3's: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 * ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ (unicode_regex_split_custom_llama3). */
static size_t piece_llama3(const split *s, size_t lo, size_t hi, size_t pos)
{
    size_t c = contraction(s, lo, hi, pos, 1);
    if (c) return pos + c;
    uint32_t cp = s->cp[pos];
    unsigned f = s->fl[pos];
    if (!(is_nl(cp) || (f & F_NUMBER)) && ((f & F_LETTER) || (fl_at(s, lo, hi, pos + 1) & F_LETTER))) {
        pos++;
        while (fl_at(s, lo, hi, pos) & F_LETTER) pos++;
        return pos;
    }
    if (f & F_NUMBER) { /* at most three: the next piece takes the rest */
        size_t e = pos;
        while (e - pos < 3 && (fl_at(s, lo, hi, e) & F_NUMBER)) e++;
        return e;
    }
    unsigned f2 = cp == ' ' ? fl_at(s, lo, hi, pos + 1) : f;
    if (!(other(f2) && f)) return space_end(s, lo, hi, pos, 1);
    pos += cp == ' ';
    while (other(fl_at(s, lo, hi, pos))) pos++;
    while (is_nl(cp_at(s, lo, hi, pos))) pos++;
    return pos;
}

static void split_pieces(split *s, size_t lo, size_t hi, size_t (*piece)(const split *, size_t, size_t, size_t))
{
    size_t prev = lo;
    for (size_t pos = lo; pos < hi;) {
        pos = piece(s, lo, hi, pos);
        emit(s, &prev, pos);
    }
}

/* The class tests of llama.cpp's "collapsed" expressions: a code point
 * below 128 as itself, another as its category (white space first). */
static int is_digit_n(const split *s, size_t i) /* \p{N} */
{
    uint32_t c = s->cp[i];
    return c < 128 ? c >= '0' && c <= '9' : !(s->fl[i] & F_WS) && (s->fl[i] & 0xFF) == F_NUMBER;
}
static int is_ascii_digit(const split *s, size_t i) { return s->cp[i] >= '0' && s->cp[i] <= '9'; }
static int is_punct_default(const split *s, size_t i) /* [\p{P}\$\+<=>\^~\|] */
{
    uint32_t c = s->cp[i];
    if (c < 128) return c > ' ' && c < 127 && !(c >= '0' && c <= '9') && !((c | 32) >= 'a' && (c | 32) <= 'z') && c != '`';
    return !(s->fl[i] & F_WS) && (s->fl[i] & 0xFF) == F_PUNCT;
}

/* Matches of a one-class expression: each run of class members (run != 0:
 * "[...]+"), each single member (run == 0, group 1: "\p{N}"), or groups of
 * exactly `group` members ("[0-9][0-9][0-9]") become pieces; the rest stays
 * as pieces between them (llama.cpp's std::regex path, unicode_regex_split_stl). */
static void split_class(split *s, size_t lo, size_t hi, int (*in)(const split *, size_t), int run, size_t group)
{
    size_t prev = lo;
    for (size_t pos = lo; pos < hi;) {
        if (!in(s, pos)) {
            pos++;
            continue;
        }
        size_t e = pos + 1;
        if (run) {
            while (e < hi && in(s, e)) e++;
        } else {
            while (e < hi && e - pos < group && in(s, e)) e++;
            if (e - pos < group) {
                pos = e;
                continue;
            }
        }
        emit(s, &prev, pos), emit(s, &prev, e);
        pos = e;
    }
    emit(s, &prev, hi);
}

enum { X_GPT2, X_LLAMA3, X_DIGIT, X_DIGITS, X_PUNCTS, X_DIGIT3 };

static void run_expr(split *s, int x)
{
    s->nout = 0;
    for (size_t p = 0, lo = 0; p < s->nlen; lo += s->len[p++]) {
        size_t hi = lo + s->len[p];
        if (x == X_GPT2) split_pieces(s, lo, hi, piece_gpt2);
        else if (x == X_LLAMA3) split_pieces(s, lo, hi, piece_llama3);
        else if (x == X_DIGIT) split_class(s, lo, hi, is_digit_n, 0, 1);
        else if (x == X_DIGITS) split_class(s, lo, hi, is_digit_n, 1, 0);
        else if (x == X_PUNCTS) split_class(s, lo, hi, is_punct_default, 1, 0);
        else split_class(s, lo, hi, is_ascii_digit, 0, 3);
    }
    size_t *t = s->len;
    s->len = s->out, s->nlen = s->nout, s->out = t;
}

qkv_status tok_llama_pre_split(int pre, const char *text, size_t len,
                               qkv_status (*fn)(const unsigned char *, size_t, void *), void *arg)
{
    static const char fnn[] = "tokenizer_encode";
    split s = {0};
    qkv_status st = QKV_OK;
    size_t cap = len ? len : 1;
    s.cp = malloc(cap * sizeof *s.cp), s.fl = malloc(cap * sizeof *s.fl);
    s.len = malloc(cap * sizeof *s.len), s.out = malloc(cap * sizeof *s.out);
    unsigned char *buf = malloc(4 * cap);
    if (!s.cp || !s.fl || !s.len || !s.out || !buf) {
        st = qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for a text of %zu bytes", fnn, len);
        goto done;
    }
    for (size_t i = 0, l; i < len; i += l) {
        s.cp[s.n] = next_cp((const unsigned char *)text + i, len - i, &l);
        s.fl[s.n] = cp_flags(s.cp[s.n]);
        s.n++;
    }
    if (!s.n) goto done;
    s.len[0] = s.n, s.nlen = 1;
    static const int exprs[][5] = {
        [PRE_DEFAULT] = {X_PUNCTS, X_GPT2, X_DIGITS, X_DIGIT3, -1},
        [PRE_GPT2] = {X_GPT2, -1},
        [PRE_SMOLLM] = {X_DIGIT, X_GPT2, -1},
        [PRE_LLAMA3] = {X_LLAMA3, -1},
    };
    for (int k = 0; k < 5 && exprs[pre][k] >= 0; k++) run_expr(&s, exprs[pre][k]);
    for (size_t p = 0, lo = 0; p < s.nlen && st == QKV_OK; lo += s.len[p++]) {
        size_t m = 0;
        for (size_t i = lo; i < lo + s.len[p]; i++) m += (size_t)tok_utf8_encode(s.cp[i], buf + m);
        st = fn(buf, m, arg);
    }
done:
    free(s.cp), free(s.fl), free(s.len), free(s.out), free(buf);
    return st;
}
