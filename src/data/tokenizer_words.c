/* tokenizer_words.c: the word-level tokenizer (the words kind): text split
 * at white space, optionally lower-cased and with punctuation as tokens of
 * its own; ids 0..3 are <pad> <bos> <eos> <unk>, then the words of a
 * training text seen at least min_freq times, the most frequent first.
 * docs/tokenizers.md and docs/translation_data.md; the "qkv-words 1" file. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/internal.h"
#include "data/tokenizer_internal.h"

static const char *const SPECIALS[4] = {"<pad>", "<bos>", "<eos>", "<unk>"};
enum { NSPECIAL = 4 };

uint32_t tok_lower_cp(uint32_t c)
{
    if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
    if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;        /* Latin-1: À..Þ but × */
    if (c >= 0x100 && c <= 0x137) return c | 1;                    /* Ā..ķ: pairs */
    if (c >= 0x139 && c <= 0x148) return c + (c & 1);              /* Ĺ..ň */
    if (c >= 0x14A && c <= 0x177) return c | 1;                    /* Ŋ..ŷ (Œ -> œ) */
    if (c == 0x178) return 0xFF;                                    /* Ÿ */
    if (c >= 0x179 && c <= 0x17E) return c + (c & 1);              /* Ź..ž */
    if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;     /* Greek */
    if (c >= 0x410 && c <= 0x42F) return c + 32;                   /* Cyrillic А..Я */
    if (c >= 0x400 && c <= 0x40F) return c + 80;                   /* Ѐ..Џ */
    return c;
}

static int is_apostrophe(int32_t cp) { return cp == '\'' || cp == 0x2019; }

qkv_status tok_words_split(const char *text, size_t len, int lower, int split_punct,
                           qkv_status (*fn)(const char *, size_t, void *), void *arg)
{
    /* the text lower-cased: never longer than 4 bytes per code point */
    const unsigned char *s = (const unsigned char *)text;
    unsigned char *low = NULL;
    size_t n = len;
    if (lower) {
        low = malloc(len + 1);
        if (!low) return qkv_fail(QKV_ERR_NOMEM, "tokenizer_words: out of memory for %zu bytes", len + 1);
        size_t k = 0;
        for (size_t i = 0, l; i < len; i += l) {
            int32_t cp = tok_utf8_decode(s + i, len - i, &l);
            unsigned char b[4];
            int m = cp < 0 ? 0 : tok_utf8_encode(tok_lower_cp((uint32_t)cp), b);
            if (m > 0 && (size_t)m <= l) memcpy(low + k, b, (size_t)m), k += (size_t)m;
            else memcpy(low + k, s + i, l), k += l; /* invalid bytes, or a longer lower case: as they are */
        }
        s = low, n = k;
    }
    qkv_status st = QKV_OK;
    size_t start = 0, i = 0, l;
    int32_t prev = -1; /* the previous code point within the current piece */
#define EMIT(a, b)                                                                     \
    do {                                                                               \
        if ((b) > (a) && st == QKV_OK) st = fn((const char *)s + (a), (b) - (a), arg); \
    } while (0)
    while (i < n && st == QKV_OK) {
        int32_t cp = tok_utf8_decode(s + i, n - i, &l);
        int c = tok_cp_class(cp);
        if (c == TOK_C_SPACE) {
            EMIT(start, i);
            start = i + l, prev = -1;
        } else if (split_punct && c == TOK_C_OTHER && cp >= 0) {
            size_t l2;
            int32_t next = i + l < n ? tok_utf8_decode(s + i + l, n - i - l, &l2) : -1;
            int pc = prev >= 0 ? tok_cp_class(prev) : TOK_C_SPACE, nc = next >= 0 ? tok_cp_class(next) : TOK_C_SPACE;
            int word_left = pc == TOK_C_LETTER || pc == TOK_C_NUMBER;
            int word_right = nc == TOK_C_LETTER || nc == TOK_C_NUMBER;
            if (is_apostrophe(cp) && pc == TOK_C_LETTER && nc == TOK_C_LETTER) {
                EMIT(start, i + l); /* l'|image, don'|t */
                start = i + l, prev = -1;
            } else if ((cp == '-' && word_left && word_right) ||
                       ((cp == '.' || cp == ',') && pc == TOK_C_NUMBER && nc == TOK_C_NUMBER)) {
                prev = cp; /* mots-clés, 3.14: inside the word */
            } else {
                EMIT(start, i);
                EMIT(i, i + l);
                start = i + l, prev = -1;
            }
        } else {
            prev = cp;
        }
        i += l;
    }
    EMIT(start, n);
#undef EMIT
    free(low);
    return st;
}

static size_t word_hash(const char *s, size_t n, size_t cap)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
    h ^= h >> 32;
    return (size_t)h & (cap - 1);
}

static int word_eq(const qkv_tokenizer *t, int64_t id, const char *s, size_t n)
{
    int64_t a = t->tok_off[id], b = t->tok_off[id + 1];
    return (size_t)(b - a) == n && !memcmp(t->tok_bytes + a, s, n);
}

int64_t tok_words_find(const qkv_tokenizer *t, const char *s, size_t n)
{
    if (!t->wmap_cap) return -1;
    for (size_t i = word_hash(s, n, t->wmap_cap);; i = (i + 1) & (t->wmap_cap - 1)) {
        int64_t id = t->wmap[i];
        if (id < 0) return -1;
        if (word_eq(t, id, s, n)) return id;
    }
}

/* Builds t's map from its V words in tok_bytes/tok_off; a word twice is an
 * error (*dup set to its id). */
static qkv_status words_index(qkv_tokenizer *t, int64_t *dup, const char *fn)
{
    size_t cap = 16;
    while (cap < (size_t)t->vocab_size * 2 + 16) cap *= 2;
    t->wmap = malloc(cap * sizeof *t->wmap);
    if (!t->wmap) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    for (size_t i = 0; i < cap; i++) t->wmap[i] = -1;
    t->wmap_cap = cap;
    *dup = -1;
    for (int64_t id = 0; id < t->vocab_size; id++) {
        const char *w = (const char *)t->tok_bytes + t->tok_off[id];
        size_t n = (size_t)(t->tok_off[id + 1] - t->tok_off[id]);
        if (tok_words_find(t, w, n) >= 0) {
            *dup = id;
            return qkv_fail(QKV_ERR_FORMAT, "%s: the word '%.*s' is there twice", fn, (int)(n < 64 ? n : 64), w);
        }
        size_t i = word_hash(w, n, cap);
        while (t->wmap[i] >= 0) i = (i + 1) & (cap - 1);
        t->wmap[i] = id;
    }
    return QKV_OK;
}

/* A tokenizer of the specials and the n words words[i] (each wlen[i] bytes). */
static qkv_status words_make(const char *const *words, const size_t *wlen, int64_t n, int lower, int punct,
                             qkv_tokenizer **out, const char *fn)
{
    qkv_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    t->kind = QKV_TOKENIZER_WORDS, t->eot = -1, t->lower = lower, t->split_punct = punct;
    t->vocab_size = n + NSPECIAL;
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) total += wlen[i];
    for (int k = 0; k < NSPECIAL; k++) total += strlen(SPECIALS[k]);
    t->tok_bytes = malloc(total + 1);
    t->tok_off = malloc((size_t)(t->vocab_size + 1) * sizeof *t->tok_off);
    if (!t->tok_bytes || !t->tok_off) return qkv_tokenizer_free(t), qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    int64_t o = 0;
    for (int64_t id = 0; id < t->vocab_size; id++) {
        const char *w = id < NSPECIAL ? SPECIALS[id] : words[id - NSPECIAL];
        size_t l = id < NSPECIAL ? strlen(w) : wlen[id - NSPECIAL];
        t->tok_off[id] = o;
        memcpy(t->tok_bytes + o, w, l), o += (int64_t)l;
    }
    t->tok_off[t->vocab_size] = o;
    int64_t dup;
    qkv_status s = words_index(t, &dup, fn);
    if (s != QKV_OK) return qkv_tokenizer_free(t), s;
    *out = t;
    return QKV_OK;
}

/* ---- training: count the pieces, keep the frequent ones ---- */

typedef struct {
    const char **w;
    size_t *len;
    int64_t *count;
    int64_t n, cap;
    int64_t *map; /* index into w, -1 empty */
    size_t mcap;
} word_counts;

static qkv_status count_piece(const char *s, size_t n, void *arg)
{
    word_counts *c = arg;
    size_t i = word_hash(s, n, c->mcap);
    for (; c->map[i] >= 0; i = (i + 1) & (c->mcap - 1)) {
        int64_t k = c->map[i];
        if (c->len[k] == n && !memcmp(c->w[k], s, n)) return c->count[k]++, QKV_OK;
    }
    if (c->n == c->cap) return qkv_fail(QKV_ERR_STATE, "tokenizer_words_train: internal: more words than pieces");
    c->w[c->n] = s, c->len[c->n] = n, c->count[c->n] = 1;
    c->map[i] = c->n++;
    return QKV_OK;
}

/* Counts the pieces (to size the tables before counting words). */
static qkv_status count_bound(const char *s, size_t n, void *arg)
{
    (void)s, (void)n;
    ++*(int64_t *)arg;
    return QKV_OK;
}

static const word_counts *sort_counts;
static int cmp_freq(const void *pa, const void *pb)
{
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    const word_counts *c = sort_counts;
    if (c->count[a] != c->count[b]) return c->count[a] > c->count[b] ? -1 : 1;
    size_t m = c->len[a] < c->len[b] ? c->len[a] : c->len[b];
    int r = memcmp(c->w[a], c->w[b], m);
    if (r) return r;
    return (c->len[a] > c->len[b]) - (c->len[a] < c->len[b]);
}

/* Copies each piece and a space to *(char **)arg: tok_words_split frees its
 * lower-cased text on return, and count_piece keeps pointers into the copy. */
static qkv_status copy_piece(const char *s, size_t n, void *arg)
{
    char **o = arg;
    memcpy(*o, s, n), (*o)[n] = ' ', *o += n + 1;
    return QKV_OK;
}

qkv_status qkv_tokenizer_words_train(const char *text, size_t len, const qkv_words_options *opt,
                                     qkv_tokenizer **out)
{
    static const char fn[] = "tokenizer_words_train";
    QKV_NEED(out, fn, "out");
    *out = NULL;
    QKV_NEED(opt, fn, "opt");
    if (len) QKV_NEED(text, fn, "text");
    if (opt->min_freq < 1) return qkv_fail(QKV_ERR_ARG, "%s: min_freq is %" PRId64 ", expected >= 1", fn, opt->min_freq);
    if (opt->max_size < 0 || (opt->max_size > 0 && opt->max_size <= NSPECIAL))
        return qkv_fail(QKV_ERR_ARG, "%s: max_size is %" PRId64 ", expected 0 (no limit) or > %d", fn, opt->max_size,
                        NSPECIAL);
    const unsigned char *u = (const unsigned char *)text;
    for (size_t i = 0, l; i < len; i += l)
        if (tok_utf8_decode(u + i, len - i, &l) < 0) return qkv_fail(QKV_ERR_ARG, "%s: invalid UTF-8 at byte %zu", fn, i);
    /* the pieces, copied out once (lower-cased, separated by spaces) */
    int64_t npieces = 0;
    QKV_TRY(tok_words_split(text, len, opt->lower, opt->split_punct, count_bound, &npieces));
    char *copy = malloc(len * 2 + 2), *w = copy; /* a piece and its space: at most 2 bytes a byte */
    word_counts c = {0};
    c.cap = npieces;
    for (c.mcap = 16; c.mcap < (size_t)npieces * 2 + 16;) c.mcap *= 2;
    c.w = malloc((size_t)(npieces + 1) * sizeof *c.w);
    c.len = malloc((size_t)(npieces + 1) * sizeof *c.len);
    c.count = malloc((size_t)(npieces + 1) * sizeof *c.count);
    c.map = malloc(c.mcap * sizeof *c.map);
    int64_t *order = malloc((size_t)(npieces + 1) * sizeof *order);
    qkv_status st = (copy && c.w && c.len && c.count && c.map && order) ? QKV_OK
                                                                        : qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    if (st == QKV_OK) st = tok_words_split(text, len, opt->lower, opt->split_punct, copy_piece, &w);
    if (st == QKV_OK) {
        for (size_t i = 0; i < c.mcap; i++) c.map[i] = -1;
        /* the copy's pieces are separated by single spaces: split again, no lower-casing */
        st = tok_words_split(copy, (size_t)(w - copy), 0, 0, count_piece, &c);
    }
    if (st == QKV_OK) {
        int64_t k = 0;
        for (int64_t i = 0; i < c.n; i++)
            if (c.count[i] >= opt->min_freq) order[k++] = i;
        sort_counts = &c;
        if (k) qsort(order, (size_t)k, sizeof *order, cmp_freq);
        if (opt->max_size && k > opt->max_size - NSPECIAL) k = opt->max_size - NSPECIAL;
        const char **ws = malloc((size_t)(k + 1) * sizeof *ws);
        size_t *ls = malloc((size_t)(k + 1) * sizeof *ls);
        if (!ws || !ls) st = qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
        for (int64_t i = 0; i < k && st == QKV_OK; i++) ws[i] = c.w[order[i]], ls[i] = c.len[order[i]];
        if (st == QKV_OK) st = words_make(ws, ls, k, opt->lower, opt->split_punct, out, fn);
        free(ws), free(ls);
    }
    free(copy), free(c.w), free(c.len), free(c.count), free(c.map), free(order);
    return st;
}

/* ---- the "qkv-words 1" file ---- */

qkv_status tok_words_save(const qkv_tokenizer *t, FILE *f)
{
    fprintf(f, "qkv-words 1\nlower %d\npunct %d\n%" PRId64 "\n", t->lower, t->split_punct, t->vocab_size - NSPECIAL);
    for (int64_t id = NSPECIAL; id < t->vocab_size; id++) {
        fwrite(t->tok_bytes + t->tok_off[id], 1, (size_t)(t->tok_off[id + 1] - t->tok_off[id]), f);
        fputc('\n', f);
    }
    return QKV_OK;
}

int tok_parse_line_int(char **p, int hex, int64_t lo, int64_t hi, int64_t *v);

qkv_status tok_words_parse(const char *path, char *text, qkv_tokenizer **out)
{
    static const char fn[] = "tokenizer_load";
    char *p = text + strlen("qkv-words 1\n");
    int64_t lower, punct, n;
    if (strncmp(p, "lower ", 6) || (p += 6, !tok_parse_line_int(&p, 0, 0, 1, &lower)) || *p++ != '\n')
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s: line 2: expected 'lower 0' or 'lower 1'", fn, path);
    if (strncmp(p, "punct ", 6) || (p += 6, !tok_parse_line_int(&p, 0, 0, 1, &punct)) || *p++ != '\n')
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s: line 3: expected 'punct 0' or 'punct 1'", fn, path);
    if (!tok_parse_line_int(&p, 0, 0, (int64_t)1 << 30, &n) || *p++ != '\n')
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s: line 4: expected the count of words", fn, path);
    const char **ws = malloc((size_t)(n + 1) * sizeof *ws);
    size_t *ls = malloc((size_t)(n + 1) * sizeof *ls);
    if (!ws || !ls) return free(ws), free(ls), qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    qkv_status st = QKV_OK;
    for (int64_t i = 0; i < n && st == QKV_OK; i++) {
        char *e = strchr(p, '\n');
        size_t l = e ? (size_t)(e - p) : 0, k;
        int ok = e && l > 0;
        for (size_t j = 0; ok && j < l; j += k) {
            int32_t cp = tok_utf8_decode((unsigned char *)p + j, l - j, &k);
            ok = cp >= 0 && tok_cp_class(cp) != TOK_C_SPACE && cp >= 0x20;
        }
        if (!ok)
            st = qkv_fail(QKV_ERR_FORMAT, "%s: %s: line %" PRId64 ": expected a word (valid UTF-8, no white space)",
                          fn, path, i + 5);
        else ws[i] = p, ls[i] = l, p = e + 1;
    }
    if (st == QKV_OK && *p) st = qkv_fail(QKV_ERR_FORMAT, "%s: %s: text after the last word", fn, path);
    if (st == QKV_OK) {
        st = words_make(ws, ls, n, (int)lower, (int)punct, out, fn);
        if (st != QKV_OK) { /* the message again, with the file's name */
            char why[256];
            snprintf(why, sizeof why, "%s", qkv_last_error() + strlen(fn) + 2);
            qkv_fail(st, "%s: %s: %s", fn, path, why);
        }
    }
    free(ws), free(ls);
    return st;
}

/* ---- encode and decode ---- */

typedef struct {
    const qkv_tokenizer *t;
    tok_ids *ids;
} encode_arg;

static qkv_status encode_piece(const char *s, size_t n, void *arg)
{
    encode_arg *e = arg;
    int64_t id = tok_words_find(e->t, s, n);
    return tok_ids_push(e->ids, id < NSPECIAL ? 3 : id, "tokenizer_encode"); /* specials' text is unknown */
}

qkv_status tok_words_encode(const qkv_tokenizer *t, const char *text, size_t len, tok_ids *ids)
{
    encode_arg e = {t, ids};
    return tok_words_split(text, len, t->lower, t->split_punct, encode_piece, &e);
}

int64_t tok_words_special(const char *name)
{
    for (int k = 0; k < NSPECIAL; k++)
        if (!strcmp(name, SPECIALS[k])) return k;
    return -1;
}

/* ---- the pieces as text (qkv_tokenizer_words_split) ---------------------- */

typedef struct {
    const qkv_tokenizer *t;
    char *buf;
    size_t n, cap;
    int64_t unknown;
} split_arg;

static qkv_status join_piece(const char *s, size_t n, void *arg)
{
    split_arg *a = arg;
    if (a->n + n + 2 > a->cap) {
        size_t cap = (a->n + n + 2) * 2;
        char *b = realloc(a->buf, cap);
        if (!b) return qkv_fail(QKV_ERR_NOMEM, "tokenizer_words_split: out of memory for %zu bytes", cap);
        a->buf = b, a->cap = cap;
    }
    if (a->n) a->buf[a->n++] = ' ';
    memcpy(a->buf + a->n, s, n);
    a->n += n;
    a->buf[a->n] = '\0';
    if (tok_words_find(a->t, s, n) < NSPECIAL) a->unknown++; /* as encode_piece maps it */
    return QKV_OK;
}

qkv_status qkv_tokenizer_words_split(const qkv_tokenizer *t, const char *text, size_t len,
                                     char **out, size_t *out_len, int64_t *unknown)
{
    static const char fn[] = "tokenizer_words_split";
    QKV_NEED(out, fn, "out");
    *out = NULL;
    if (out_len) *out_len = 0;
    if (unknown) *unknown = 0;
    QKV_NEED(t, fn, "t");
    if (len) QKV_NEED(text, fn, "text");
    if (t->kind != QKV_TOKENIZER_WORDS)
        return qkv_fail(QKV_ERR_ARG, "%s: the tokenizer is not a words tokenizer", fn);
    split_arg a = {t, malloc(1), 0, 1, 0};
    if (!a.buf) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    a.buf[0] = '\0';
    qkv_status s = tok_words_split(text, len, t->lower, t->split_punct, join_piece, &a);
    if (s != QKV_OK) {
        free(a.buf);
        return s;
    }
    *out = a.buf;
    if (out_len) *out_len = a.n;
    if (unknown) *unknown = a.unknown;
    return QKV_OK;
}
