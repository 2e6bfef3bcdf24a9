/* tokenizer.c: the tokenizer interface (encode, decode, specials, files)
 * and the bytes and chars tokenizers. BPE and GPT-2 are in
 * tokenizer_bpe.c, GPT-2's pre-tokenisation in tokenizer_pretok.c;
 * docs/tokenizers.md describes them and their file formats. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/internal.h"
#include "data/tokenizer_internal.h"

static const char EOT[] = "<|endoftext|>";

qkv_status tok_ids_push(tok_ids *a, int64_t id, const char *fn)
{
    if (a->n == a->cap) {
        int64_t cap = a->cap ? a->cap * 2 : 64;
        int64_t *v = realloc(a->v, (size_t)cap * sizeof *v);
        if (!v) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for %" PRId64 " ids", fn, cap);
        a->v = v, a->cap = cap;
    }
    a->v[a->n++] = id;
    return QKV_OK;
}

static uint64_t pair_key(int64_t l, int64_t r) { return ((uint64_t)l << 32 | (uint64_t)r) + 1; }
static size_t pair_hash(uint64_t k, size_t cap)
{
    k ^= k >> 33, k *= 0xff51afd7ed558ccdULL, k ^= k >> 33;
    return (size_t)k & (cap - 1);
}

qkv_status tok_pairmap_init(tok_pairmap *m, size_t n, const char *fn)
{
    size_t cap = 16;
    while (cap < 2 * n + 16) cap *= 2;
    m->keys = calloc(cap, sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    m->cap = cap;
    if (!m->keys || !m->vals) {
        tok_pairmap_free(m);
        return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for a map of %zu pairs", fn, n);
    }
    return QKV_OK;
}

void tok_pairmap_free(tok_pairmap *m)
{
    free(m->keys), free(m->vals);
    m->keys = NULL, m->vals = NULL, m->cap = 0;
}

/* The caller sized the map for every pair it puts (at most half full). */
qkv_status tok_pairmap_put(tok_pairmap *m, int64_t l, int64_t r, int64_t val)
{
    uint64_t k = pair_key(l, r);
    for (size_t i = pair_hash(k, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == 0 || m->keys[i] == k) {
            m->keys[i] = k, m->vals[i] = val; /* a pair put again keeps the last value */
            return QKV_OK;
        }
    }
}

int64_t tok_pairmap_get(const tok_pairmap *m, int64_t l, int64_t r)
{
    if (!m->cap || l < 0 || r < 0) return -1;
    uint64_t k = pair_key(l, r);
    for (size_t i = pair_hash(k, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == k) return m->vals[i];
        if (m->keys[i] == 0) return -1;
    }
}

static uint64_t str_hash(const unsigned char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ULL;
    return h;
}

qkv_status tok_strmap_init(tok_strmap *m, int64_t n, const char *fn)
{
    m->cap = 16;
    while (m->cap < 2 * (size_t)n) m->cap *= 2;
    m->slot = malloc(m->cap * sizeof *m->slot);
    if (!m->slot) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for a map of %" PRId64 " strings", fn, n);
    memset(m->slot, 0xff, m->cap * sizeof *m->slot);
    return QKV_OK;
}

int64_t *tok_strmap_slot(const tok_strmap *m, const unsigned char *bytes, const int64_t *off, const unsigned char *s,
                         size_t n)
{
    for (size_t h = (size_t)str_hash(s, n);; h++) {
        int64_t *e = &m->slot[h & (m->cap - 1)];
        if (*e < 0) return e;
        size_t l = (size_t)(off[*e + 1] - off[*e]);
        if (l == n && !memcmp(bytes + off[*e], s, n)) return e;
    }
}

qkv_status tok_read_file(const char *path, char **text, size_t *len, const char *fn)
{
    FILE *f = fopen(path, "rb");
    if (!f) return qkv_fail(QKV_ERR_IO, "%s: cannot open %s: %s", fn, path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fclose(f);
            return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory reading %s", fn, path);
        }
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        char *b = realloc(buf, cap * 2);
        if (!b) free(buf);
        buf = b, cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return qkv_fail(QKV_ERR_IO, "%s: cannot read %s", fn, path);
    }
    buf[n] = 0;
    *text = buf, *len = n;
    return QKV_OK;
}

static qkv_status new_tok(qkv_tokenizer_kind kind, qkv_tokenizer **out, const char *fn)
{
    qkv_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    t->kind = kind, t->eot = -1;
    *out = t;
    return QKV_OK;
}

void qkv_tokenizer_free(qkv_tokenizer *t)
{
    if (!t) return;
    free(t->chars), free(t->merges), free(t->tok_bytes), free(t->tok_off), free(t->wmap);
    free(t->raw), free(t->raw_off), free(t->rmap.slot), free(t->attr), free(t->scores), free(t->specials);
    tok_pairmap_free(&t->ranks);
    free(t);
}

qkv_status qkv_tokenizer_bytes_new(qkv_tokenizer **out)
{
    QKV_NEED(out, "tokenizer_bytes_new", "out");
    *out = NULL;
    QKV_TRY(new_tok(QKV_TOKENIZER_BYTES, out, "tokenizer_bytes_new"));
    (*out)->vocab_size = 256;
    return QKV_OK;
}

/* the deprecated name (docs/core.md, "Names") */
qkv_status qkv_tokenizer_bytes_init(qkv_tokenizer **out) { return qkv_tokenizer_bytes_new(out); }

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Makes a chars tokenizer of the sorted, distinct code points cps[0..n). */
static qkv_status chars_make(uint32_t *cps, int64_t n, qkv_tokenizer **out, const char *fn)
{
    qkv_status s = new_tok(QKV_TOKENIZER_CHARS, out, fn);
    if (s != QKV_OK) return free(cps), s;
    (*out)->chars = cps, (*out)->nchars = n;
    (*out)->vocab_size = n + 2, (*out)->eot = n + 1;
    return QKV_OK;
}

qkv_status qkv_tokenizer_chars_train(const char *text, size_t len, qkv_tokenizer **out)
{
    static const char fn[] = "tokenizer_chars_train";
    QKV_NEED(out, fn, "out");
    *out = NULL;
    QKV_NEED(text, fn, "text");
    if (len == 0) return qkv_fail(QKV_ERR_ARG, "%s: the text is empty", fn);
    /* a bitmap of the code points seen */
    uint8_t *seen = calloc(0x110000 / 8, 1);
    if (!seen) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    const unsigned char *s = (const unsigned char *)text;
    int64_t n = 0;
    for (size_t i = 0, l; i < len; i += l) {
        int32_t cp = tok_utf8_decode(s + i, len - i, &l);
        if (cp < 0) {
            free(seen);
            return qkv_fail(QKV_ERR_ARG, "%s: invalid UTF-8 at byte %zu", fn, i);
        }
        if (!(seen[cp >> 3] & (1 << (cp & 7)))) seen[cp >> 3] |= (uint8_t)(1 << (cp & 7)), n++;
    }
    uint32_t *cps = malloc((size_t)n * sizeof *cps);
    if (!cps) return free(seen), qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    int64_t k = 0;
    for (uint32_t c = 0; c < 0x110000; c++)
        if (seen[c >> 3] & (1 << (c & 7))) cps[k++] = c;
    free(seen);
    return chars_make(cps, n, out, fn);
}

qkv_tokenizer_kind qkv_tokenizer_kind_of(const qkv_tokenizer *t) { return t ? t->kind : QKV_TOKENIZER_BYTES; }
int64_t qkv_tokenizer_vocab_size(const qkv_tokenizer *t) { return t ? t->vocab_size : 0; }

qkv_status qkv_tokenizer_special(const qkv_tokenizer *t, const char *name, int64_t *id)
{
    static const char fn[] = "tokenizer_special";
    QKV_NEED(t, fn, "t");
    QKV_NEED(name, fn, "name");
    QKV_NEED(id, fn, "id");
    if (t->kind == QKV_TOKENIZER_WORDS && tok_words_special(name) >= 0) return *id = tok_words_special(name), QKV_OK;
    if (t->kind == QKV_TOKENIZER_WORDPIECE) {
        *id = tok_wp_special(t, name);
        if (*id < 0)
            return qkv_fail(QKV_ERR_NOTFOUND, "%s: this WordPiece tokenizer has no special token '%.64s' ([CLS], [SEP], [PAD], [UNK], [MASK])", fn, name);
        return QKV_OK;
    }
    if (t->kind == QKV_TOKENIZER_GGUF_GPT2 || t->kind == QKV_TOKENIZER_GGUF_LLAMA) {
        *id = tok_vocab_special(t, name);
        if (*id < 0) return qkv_fail(QKV_ERR_NOTFOUND, "%s: this tokenizer has no special token '%.64s'", fn, name);
        return QKV_OK;
    }
    if (strcmp(name, EOT) || t->eot < 0)
        return qkv_fail(QKV_ERR_NOTFOUND, "%s: this tokenizer has no special token '%.64s'", fn, name);
    *id = t->eot;
    return QKV_OK;
}

static qkv_status encode_body(const qkv_tokenizer *t, const char *text, size_t len, int add_special,
                              int parse_special, int64_t **ids, int64_t *n);

qkv_status qkv_tokenizer_encode(const qkv_tokenizer *t, const char *text, size_t len, int64_t **ids,
                                int64_t *n)
{
    return encode_body(t, text, len, 0, 0, ids, n);
}

qkv_status qkv_tokenizer_encode_special(const qkv_tokenizer *t, const char *text, size_t len, int add_special,
                                        int parse_special, int64_t **ids, int64_t *n)
{
    return qkv_fail_in("tokenizer_encode_special", encode_body(t, text, len, add_special, parse_special, ids, n));
}

/* Both encodes: their messages start "tokenizer_encode:". */
static qkv_status encode_body(const qkv_tokenizer *t, const char *text, size_t len, int add_special,
                              int parse_special, int64_t **ids, int64_t *n)
{
    static const char fn[] = "tokenizer_encode";
    QKV_NEED(ids, fn, "ids");
    QKV_NEED(n, fn, "n");
    *ids = NULL, *n = 0;
    QKV_NEED(t, fn, "t");
    if (len) QKV_NEED(text, fn, "text");
    const unsigned char *s = (const unsigned char *)text;
    tok_ids a = {0};
    qkv_status st = QKV_OK;
    if ((add_special || parse_special) && t->kind != QKV_TOKENIZER_GGUF_GPT2 && t->kind != QKV_TOKENIZER_GGUF_LLAMA)
        return qkv_fail(QKV_ERR_ARG, "%s: add_special and parse_special are for GGUF vocabularies' tokenizers", fn);
    if (t->kind == QKV_TOKENIZER_BYTES) {
        for (size_t i = 0; i < len && st == QKV_OK; i++) st = tok_ids_push(&a, s[i], fn);
    } else if (t->kind == QKV_TOKENIZER_CHARS) {
        for (size_t i = 0, l; i < len && st == QKV_OK; i += l) {
            int32_t cp = tok_utf8_decode(s + i, len - i, &l);
            if (cp < 0) {
                st = qkv_fail(QKV_ERR_ARG, "%s: invalid UTF-8 at byte %zu", fn, i);
                break;
            }
            uint32_t c = (uint32_t)cp, *hit = bsearch(&c, t->chars, (size_t)t->nchars, sizeof c, cmp_u32);
            st = tok_ids_push(&a, hit ? hit - t->chars + 1 : 0, fn);
        }
    } else if (t->kind == QKV_TOKENIZER_WORDS) {
        st = tok_words_encode(t, text, len, &a);
    } else if (t->kind == QKV_TOKENIZER_GGUF_GPT2 || t->kind == QKV_TOKENIZER_GGUF_LLAMA) {
        st = tok_vocab_encode(t, text, len, add_special, parse_special, &a);
    } else if (t->kind == QKV_TOKENIZER_WORDPIECE) {
        st = tok_wp_encode(t, text, len, &a);
    } else {
        for (size_t i = 0; i < len && st == QKV_OK;) {
            size_t l = tok_pretok_next(s + i, len - i);
            int64_t start = a.n;
            for (size_t j = 0; j < l && st == QKV_OK; j++) st = tok_ids_push(&a, t->byte_id[s[i + j]], fn);
            if (st != QKV_OK) break;
            int64_t m = a.n - start;
            tok_bpe_apply(t, a.v + start, &m);
            a.n = start + m;
            i += l;
        }
    }
    if (st != QKV_OK) return free(a.v), st;
    *ids = a.v, *n = a.n;
    if (a.n == 0) free(a.v), *ids = NULL;
    return QKV_OK;
}

qkv_status qkv_tokenizer_decode(const qkv_tokenizer *t, const int64_t *ids, int64_t n, char **text,
                                size_t *len)
{
    static const char fn[] = "tokenizer_decode";
    QKV_NEED(text, fn, "text");
    QKV_NEED(len, fn, "len");
    *text = NULL, *len = 0;
    QKV_NEED(t, fn, "t");
    if (n < 0) return qkv_fail(QKV_ERR_ARG, "%s: n is %" PRId64 ", expected >= 0", fn, n);
    if (n) QKV_NEED(ids, fn, "ids");
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t id = ids[i];
        if (id < 0 || id >= t->vocab_size)
            return qkv_fail(QKV_ERR_ARG, "%s: ids[%" PRId64 "] = %" PRId64 " is out of range (vocab size %" PRId64 ")",
                            fn, i, id, t->vocab_size);
        if (t->kind == QKV_TOKENIZER_WORDPIECE) continue;
        if (t->kind == QKV_TOKENIZER_BYTES) total += 1;
        else if (t->kind == QKV_TOKENIZER_CHARS) total += id == t->eot ? sizeof EOT - 1 : 4;
        else if (t->kind == QKV_TOKENIZER_WORDS) total += (size_t)(t->tok_off[id + 1] - t->tok_off[id]) + 1;
        else total += (size_t)(t->tok_off[id + 1] - t->tok_off[id]);
    }
    if (t->kind == QKV_TOKENIZER_WORDPIECE) return tok_wp_decode(t, ids, n, text, len);
    unsigned char *o = malloc(total + 1);
    if (!o) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for %zu bytes", fn, total + 1);
    size_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t id = ids[i];
        if (t->kind == QKV_TOKENIZER_BYTES) o[k++] = (unsigned char)id;
        else if (t->kind == QKV_TOKENIZER_CHARS) {
            if (id == t->eot) memcpy(o + k, EOT, sizeof EOT - 1), k += sizeof EOT - 1;
            else k += (size_t)tok_utf8_encode(id == 0 ? 0xFFFD : t->chars[id - 1], o + k);
        } else {
            size_t l = (size_t)(t->tok_off[id + 1] - t->tok_off[id]);
            if (t->kind == QKV_TOKENIZER_WORDS && i > 0) o[k++] = ' '; /* words: joined by spaces */
            memcpy(o + k, t->tok_bytes + t->tok_off[id], l), k += l;
        }
    }
    o[k] = 0;
    *text = (char *)o, *len = k;
    return QKV_OK;
}

/* ---- files: "qkv-chars 1", "qkv-bpe 1", "qkv-words 1" (docs/tokenizers.md) ---- */

qkv_status tok_bpe_save(const qkv_tokenizer *t, FILE *f);
qkv_status tok_bpe_parse(const char *path, char *text, qkv_tokenizer **out);

static qkv_status check_savable(const qkv_tokenizer *t, const char *fn)
{
    QKV_NEED(t, fn, "t");
    if (t->kind != QKV_TOKENIZER_CHARS && t->kind != QKV_TOKENIZER_BPE && t->kind != QKV_TOKENIZER_WORDS)
        return qkv_fail(QKV_ERR_ARG, "%s: only chars, bpe and words tokenizers are saved (bytes needs no file; gpt2, GGUF and WordPiece tokenizers have their own files)", fn);
    return QKV_OK;
}

static void write_file(const qkv_tokenizer *t, FILE *f)
{
    if (t->kind == QKV_TOKENIZER_CHARS) {
        fprintf(f, "qkv-chars 1\n%" PRId64 "\n", t->nchars);
        for (int64_t i = 0; i < t->nchars; i++) fprintf(f, "%" PRIX32 "\n", t->chars[i]);
    } else if (t->kind == QKV_TOKENIZER_WORDS) {
        tok_words_save(t, f);
    } else if (t->kind == QKV_TOKENIZER_WORDS) {
        tok_words_save(t, f);
    } else {
        tok_bpe_save(t, f);
    }
}

qkv_status qkv_tokenizer_save(const qkv_tokenizer *t, const char *path)
{
    static const char fn[] = "tokenizer_save";
    QKV_TRY(check_savable(t, fn));
    QKV_NEED(path, fn, "path");
    FILE *f = fopen(path, "wb");
    if (!f) return qkv_fail(QKV_ERR_IO, "%s: cannot create %s: %s", fn, path, strerror(errno));
    write_file(t, f);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return qkv_fail(QKV_ERR_IO, "%s: cannot write %s", fn, path);
    return QKV_OK;
}

qkv_status qkv_tokenizer_save_text(const qkv_tokenizer *t, char **text, size_t *len)
{
    static const char fn[] = "tokenizer_save_text";
    QKV_NEED(text, fn, "text");
    QKV_NEED(len, fn, "len");
    *text = NULL, *len = 0;
    QKV_TRY(check_savable(t, fn));
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    write_file(t, f);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad || !buf) {
        free(buf);
        return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    }
    *text = buf, *len = n;
    return QKV_OK;
}

/* Reads a whole number in [lo, hi] at *p (decimal, or hex when hex), then
 * the end of the line; 0 if malformed. */
int tok_parse_line_int(char **p, int hex, int64_t lo, int64_t hi, int64_t *v)
{
    char *s = *p, *end;
    if (!((*s >= '0' && *s <= '9') || (hex && ((*s >= 'A' && *s <= 'F')))))
        return 0;
    errno = 0;
    long long x = strtoll(s, &end, hex ? 16 : 10);
    if (errno || x < lo || x > hi) return 0;
    *v = x, *p = end;
    return 1;
}

static qkv_status chars_parse(const char *path, char *text, qkv_tokenizer **out)
{
    static const char fn[] = "tokenizer_load";
    char *p = text + strlen("qkv-chars 1\n");
    int64_t n, prev = -1;
    if (!tok_parse_line_int(&p, 0, 1, 0x110000, &n) || *p++ != '\n')
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s: line 2: expected the count of characters", fn, path);
    uint32_t *cps = malloc((size_t)n * sizeof *cps);
    if (!cps) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    for (int64_t i = 0; i < n; i++) {
        int64_t c;
        if (!tok_parse_line_int(&p, 1, 0, 0x10FFFF, &c) || *p++ != '\n' || c <= prev ||
            (c >= 0xD800 && c <= 0xDFFF)) {
            free(cps);
            return qkv_fail(QKV_ERR_FORMAT,
                            "%s: %s: line %" PRId64 ": expected a code point in upper-case hex, above the previous one",
                            fn, path, i + 3);
        }
        cps[i] = (uint32_t)c, prev = c;
    }
    if (*p) return free(cps), qkv_fail(QKV_ERR_FORMAT, "%s: %s: text after the last character", fn, path);
    return chars_make(cps, n, out, fn);
}

/* text: a NUL-terminated copy of a file's len bytes, named path in messages. */
static qkv_status parse_file(const char *path, char *text, size_t len, qkv_tokenizer **out)
{
    static const char fn[] = "tokenizer_load";
    if (strlen(text) != len) return qkv_fail(QKV_ERR_FORMAT, "%s: %s: a NUL byte in the file", fn, path);
    if (!strncmp(text, "qkv-chars 1\n", 12)) return chars_parse(path, text, out);
    if (!strncmp(text, "qkv-bpe 1\n", 10)) return tok_bpe_parse(path, text, out);
    if (!strncmp(text, "qkv-words 1\n", 12)) return tok_words_parse(path, text, out);
    return qkv_fail(QKV_ERR_FORMAT,
                    "%s: %s is not a qkv tokenizer file (its first line is not 'qkv-chars 1', 'qkv-bpe 1' or 'qkv-words 1')",
                    fn, path);
}

qkv_status qkv_tokenizer_load(const char *path, qkv_tokenizer **out)
{
    static const char fn[] = "tokenizer_load";
    QKV_NEED(out, fn, "out");
    *out = NULL;
    QKV_NEED(path, fn, "path");
    char *text;
    size_t len;
    QKV_TRY(tok_read_file(path, &text, &len, fn));
    qkv_status s = parse_file(path, text, len, out);
    free(text);
    return s;
}

static qkv_status tokenizer_load_text_body(const char *text, size_t len, qkv_tokenizer **out)
{
    static const char fn[] = "tokenizer_load";
    QKV_NEED(out, fn, "out");
    *out = NULL;
    if (len) QKV_NEED(text, fn, "text");
    char *copy = malloc(len + 1);
    if (!copy) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    if (len) memcpy(copy, text, len);
    copy[len] = 0;
    qkv_status s = parse_file("(text)", copy, len, out);
    free(copy);
    return s;
}

qkv_status qkv_tokenizer_load_text(const char *text, size_t len, qkv_tokenizer **out)
{
    return qkv_fail_in("tokenizer_load_text", tokenizer_load_text_body(text, len, out));
}

/* The tokenizer of GGUF file path (the file is closed after: the tokenizer keeps copies). */
static qkv_status tok_open_gguf(const char *path, qkv_tokenizer **out)
{
    if (!*path) return qkv_fail(QKV_ERR_ARG, "tokenizer_open: gguf: needs a file");
    qkv_gguf *g = NULL;
    QKV_TRY(qkv_gguf_open(path, &g));
    qkv_status s = qkv_tokenizer_from_gguf(g, out);
    qkv_gguf_close(g);
    return s;
}

/* A WordPiece tokenizer from a vocab.txt or a model folder. */
static qkv_status tok_open_wordpiece(const char *path, qkv_tokenizer **out)
{
    if (!*path) return qkv_fail(QKV_ERR_ARG, "tokenizer_open: wordpiece: needs a vocab.txt or a model folder");
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return qkv_fail_in("tokenizer_open", qkv_tokenizer_wordpiece_open_dir(path, out));
    return qkv_fail_in("tokenizer_open", qkv_tokenizer_wordpiece_load(path, NULL, out));
}

qkv_status qkv_tokenizer_open(const char *spec, qkv_tokenizer **out)
{
    static const char fn[] = "tokenizer_open";
    QKV_NEED(out, fn, "out");
    *out = NULL;
    QKV_NEED(spec, fn, "spec");
    if (!strcmp(spec, "bytes")) return qkv_tokenizer_bytes_new(out);
    qkv_tokenizer_kind want;
    const char *arg;
    if (!strncmp(spec, "chars:", 6)) want = QKV_TOKENIZER_CHARS, arg = spec + 6;
    else if (!strncmp(spec, "bpe:", 4)) want = QKV_TOKENIZER_BPE, arg = spec + 4;
    else if (!strncmp(spec, "words:", 6)) want = QKV_TOKENIZER_WORDS, arg = spec + 6;
    else if (!strncmp(spec, "gpt2:", 5)) return *spec && spec[5] ? qkv_tokenizer_gpt2_load(spec + 5, out)
                                                                  : qkv_fail(QKV_ERR_ARG, "%s: gpt2: needs a folder", fn);
    else if (!strncmp(spec, "gguf:", 5)) return tok_open_gguf(spec + 5, out);
    else if (!strncmp(spec, "wordpiece:", 10)) return tok_open_wordpiece(spec + 10, out);
    else return qkv_fail(QKV_ERR_ARG, "%s: '%.200s' is not bytes, chars:FILE, bpe:FILE, words:FILE, gpt2:DIR, gguf:FILE or wordpiece:VOCAB_OR_DIR",
                         fn, spec);
    if (!*arg) return qkv_fail(QKV_ERR_ARG, "%s: '%s' needs a file", fn, spec);
    QKV_TRY(qkv_tokenizer_load(arg, out));
    if ((*out)->kind != want) {
        static const char *const kinds[] = {"bytes", "chars", "bpe", "gpt2", "words", "gguf", "gguf", "wordpiece"};
        qkv_tokenizer_kind got = (*out)->kind;
        qkv_tokenizer_free(*out), *out = NULL;
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s is a %s tokenizer file, not %s", fn, arg, kinds[got], kinds[want]);
    }
    return QKV_OK;
}
