/* tokenizer_wordpiece.c: BERT's WordPiece tokenizer as BertTokenizerFast
 * (Hugging Face tokenizers' BertNormalizer, BertPreTokenizer and WordPiece
 * model) does it, from a vocab.txt (docs/bert.md, "Tokenizer").
 *
 * The Unicode data (categories, canonical decompositions and their
 * combining classes, lower-case mappings) comes from utf8proc. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>
#include "core/internal.h"
#include "data/tokenizer_internal.h"
#include "io/json.h"

void qkv_wordpiece_opts_default(qkv_wordpiece_opts *o)
{
    if (!o) return;
    o->lowercase = 1;
    o->strip_accents = -1;
    o->split_cjk = 1;
    o->clean_text = 1;
    o->max_chars_per_word = 100;
    o->max_len = 512;
}

/* ---- character classes, as tokenizers' bert normalizer/pre-tokenizer ---- */

/* Rust's char::is_whitespace (the White_Space property): \t..\r, U+0085 and Z*. */
static int wp_is_space(int32_t c)
{
    if (c == ' ' || (c >= 0x09 && c <= 0x0D) || c == 0x85) return 1;
    if (c < 0x80) return 0;
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

/* Control and format characters (Cc, Cf, Co) but \t, \n and \r. */
static int wp_is_control(int32_t c)
{
    if (c == '\t' || c == '\n' || c == '\r') return 0;
    if (c >= 0x20 && c < 0x7F) return 0;
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CO ||
           k == UTF8PROC_CATEGORY_CS;
}

/* ASCII punctuation (33-47, 58-64, 91-96, 123-126) and Unicode's P*. */
static int wp_is_punct(int32_t c)
{
    if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return 1;
    if (c < 0x80) return 0;
    utf8proc_category_t k = utf8proc_category(c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

/* The CJK blocks BERT puts spaces around (tokenizers' is_chinese_char). */
static int wp_is_cjk(int32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* ---- growable code point arrays (one set per encode call) ---- */

typedef struct {
    int32_t *v;
    size_t n, cap;
} wp_cps;

static int wp_push(wp_cps *a, int32_t c)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 256;
        int32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) return -1;
        a->v = v, a->cap = cap;
    }
    a->v[a->n++] = c;
    return 0;
}

static int wp_reserve(wp_cps *a, size_t n)
{
    if (a->cap >= n) return 0;
    int32_t *v = realloc(a->v, n * sizeof *v);
    if (!v) return -1;
    a->v = v, a->cap = n;
    return 0;
}

typedef struct {
    wp_cps a, b;            /* the normalised text, a scratch */
    unsigned char *word;    /* one word's UTF-8 */
    size_t *coff;           /* its characters' byte offsets (n + 1) */
    unsigned char *key;     /* "##" + a piece */
    size_t word_cap;        /* characters word/coff/key hold */
} wp_work;

static void wp_work_free(wp_work *w)
{
    free(w->a.v), free(w->b.v), free(w->word), free(w->coff), free(w->key);
}

/* The normalised code points of text[0, len) into w->a: BertNormalizer's
 * clean_text, handle_chinese_chars, strip_accents (NFD, Mn dropped),
 * lowercase, in that order. */
static int wp_normalize(const qkv_tokenizer *t, const unsigned char *s, size_t len, wp_work *w)
{
    const qkv_wordpiece_opts *o = &t->wp;
    int strip = o->strip_accents < 0 ? o->lowercase : o->strip_accents;
    wp_cps *a = &w->a;
    a->n = 0;
    if (wp_reserve(a, len + 16)) return -1;
    for (size_t i = 0, l; i < len; i += l) {
        int32_t c = tok_utf8_decode(s + i, len - i, &l);
        if (c < 0) c = 0xFFFD; /* an invalid byte: Python's errors="replace" */
        if (o->clean_text) {
            if (c == 0 || c == 0xFFFD || wp_is_control(c)) continue;
            if (wp_is_space(c)) c = ' ';
        }
        if (o->split_cjk && wp_is_cjk(c)) {
            if (wp_push(a, ' ') || wp_push(a, c) || wp_push(a, ' ')) return -1;
        } else if (wp_push(a, c))
            return -1;
    }
    if (strip) {
        /* NFD: each code point's canonical decomposition, then the
         * canonical ordering of each run of combining marks (stable by
         * combining class); then the nonspacing marks go. */
        wp_cps *b = &w->b;
        b->n = 0;
        for (size_t i = 0; i < a->n; i++) {
            int32_t c = a->v[i];
            if (c < 0xC0) {
                if (wp_push(b, c)) return -1;
                continue;
            }
            int32_t d[32];
            utf8proc_ssize_t k = utf8proc_decompose_char(c, d, 32, UTF8PROC_DECOMPOSE, NULL);
            if (k < 1 || k > 32) d[0] = c, k = 1;
            for (utf8proc_ssize_t j = 0; j < k; j++)
                if (wp_push(b, d[j])) return -1;
        }
        for (size_t i = 1; i < b->n; i++) {
            int32_t c = b->v[i];
            int cc = utf8proc_get_property(c)->combining_class;
            if (!cc) continue;
            size_t j = i;
            while (j > 0) {
                int pc = utf8proc_get_property(b->v[j - 1])->combining_class;
                if (pc <= cc) break;
                b->v[j] = b->v[j - 1], j--;
            }
            b->v[j] = c;
        }
        if (wp_reserve(a, b->n)) return -1;
        a->n = 0;
        for (size_t i = 0; i < b->n; i++)
            if (utf8proc_category(b->v[i]) != UTF8PROC_CATEGORY_MN) a->v[a->n++] = b->v[i];
    }
    if (o->lowercase) {
        wp_cps *b = &w->b;
        b->n = 0;
        for (size_t i = 0; i < a->n; i++) {
            int32_t c = a->v[i];
            if (c == 0x130) { /* SpecialCasing: U+0130 lower-cases to i + U+0307 */
                if (wp_push(b, 'i') || wp_push(b, 0x307)) return -1;
            } else if (wp_push(b, c < 0x80 ? (c >= 'A' && c <= 'Z' ? c + 32 : c) : utf8proc_tolower(c)))
                return -1;
        }
        wp_cps tmp = *a;
        *a = *b, *b = tmp;
    }
    return 0;
}

static int64_t wp_find(const qkv_tokenizer *t, const unsigned char *s, size_t n)
{
    return *tok_strmap_slot(&t->rmap, t->tok_bytes, t->tok_off, s, n);
}

/* One word c[0, n) into pieces (or [UNK]) appended to ids. */
static qkv_status wp_word(const qkv_tokenizer *t, const int32_t *c, size_t n, wp_work *w, tok_ids *ids,
                          const char *fn)
{
    if ((int64_t)n > t->wp.max_chars_per_word) return tok_ids_push(ids, t->unk, fn);
    if (n > w->word_cap) {
        size_t cap = n > 2 * w->word_cap ? n : 2 * w->word_cap;
        free(w->word), free(w->coff), free(w->key);
        w->word = malloc(cap * 4), w->coff = malloc((cap + 1) * sizeof *w->coff), w->key = malloc(cap * 4 + 2);
        w->word_cap = w->word && w->coff && w->key ? cap : 0;
        if (!w->word_cap) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    }
    size_t nb = 0;
    for (size_t i = 0; i < n; i++) w->coff[i] = nb, nb += (size_t)tok_utf8_encode((uint32_t)c[i], w->word + nb);
    w->coff[n] = nb;
    int64_t start_n = ids->n;
    w->key[0] = '#', w->key[1] = '#';
    for (size_t start = 0; start < n;) {
        int64_t id = -1;
        size_t end = n;
        for (; end > start; end--) {
            size_t l = w->coff[end] - w->coff[start];
            if (start == 0) {
                id = wp_find(t, w->word, l);
            } else {
                memcpy(w->key + 2, w->word + w->coff[start], l);
                id = wp_find(t, w->key, l + 2);
            }
            if (id >= 0) break;
        }
        if (id < 0) { /* no piece: the whole word is [UNK] */
            ids->n = start_n;
            return tok_ids_push(ids, t->unk, fn);
        }
        QKV_TRY(tok_ids_push(ids, id, fn));
        start = end;
    }
    return QKV_OK;
}

/* text[0, len) without special tokens: normalise, split, word pieces. */
static qkv_status wp_segment(const qkv_tokenizer *t, const unsigned char *s, size_t len, wp_work *w, tok_ids *ids,
                             const char *fn)
{
    if (!len) return QKV_OK;
    if (wp_normalize(t, s, len, w)) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for %zu bytes of text", fn, len);
    const int32_t *c = w->a.v;
    size_t n = w->a.n;
    for (size_t i = 0; i < n;) {
        if (wp_is_space(c[i])) {
            i++;
            continue;
        }
        if (wp_is_punct(c[i])) {
            QKV_TRY(wp_word(t, c + i, 1, w, ids, fn));
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && !wp_is_space(c[j]) && !wp_is_punct(c[j])) j++;
        QKV_TRY(wp_word(t, c + i, j - i, w, ids, fn));
        i = j;
    }
    return QKV_OK;
}

/* The special token written at s[0, n) (it starts with '['): its id and
 * length, or -1. */
static int64_t wp_special_at(const qkv_tokenizer *t, const unsigned char *s, size_t n, size_t *len)
{
    static const char *const names[] = {"[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"};
    for (int k = 0; k < 5; k++) {
        size_t l = strlen(names[k]);
        if (l <= n && !memcmp(s, names[k], l)) {
            int64_t id = tok_wp_special(t, names[k]);
            if (id >= 0) return *len = l, id;
        }
    }
    return -1;
}

qkv_status tok_wp_encode(const qkv_tokenizer *t, const char *text, size_t len, tok_ids *ids)
{
    static const char fn[] = "tokenizer_encode";
    const unsigned char *s = (const unsigned char *)text;
    wp_work w = {0};
    qkv_status st = QKV_OK;
    size_t seg = 0;
    for (size_t i = 0; i < len && st == QKV_OK;) {
        size_t l;
        int64_t id;
        if (s[i] == '[' && (id = wp_special_at(t, s + i, len - i, &l)) >= 0) {
            st = wp_segment(t, s + seg, i - seg, &w, ids, fn);
            if (st == QKV_OK) st = tok_ids_push(ids, id, fn);
            i += l, seg = i;
        } else
            i++;
    }
    if (st == QKV_OK) st = wp_segment(t, s + seg, len - seg, &w, ids, fn);
    wp_work_free(&w);
    return st;
}

int64_t tok_wp_special(const qkv_tokenizer *t, const char *name)
{
    if (!strcmp(name, "[CLS]")) return t->cls;
    if (!strcmp(name, "[SEP]")) return t->sep;
    if (!strcmp(name, "[PAD]")) return t->pad;
    if (!strcmp(name, "[UNK]")) return t->unk;
    if (!strcmp(name, "[MASK]")) return t->mask;
    return -1;
}

/* Replaces every from (left to right, not overlapping) by to (no longer) in s[0, *n). */
static void wp_replace(char *s, size_t *n, const char *from, const char *to)
{
    size_t lf = strlen(from), lt = strlen(to), r = 0, o = 0;
    while (r < *n) {
        if (r + lf <= *n && !memcmp(s + r, from, lf)) {
            memcpy(s + o, to, lt), o += lt, r += lf;
        } else
            s[o++] = s[r++];
    }
    *n = o;
}

/* transformers' clean_up_tokenization (the decoder's cleanup has the same
 * pairs, " do not" -> " don't" besides). */
static void wp_cleanup(char *s, size_t *n, int decoder)
{
    static const char *const pairs[][2] = {{" .", "."},   {" ?", "?"},     {" !", "!"},   {" ,", ","},
                                           {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"}, {" do not", " don't"},
                                           {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        if (!decoder && k == 7) continue;
        wp_replace(s, n, pairs[k][0], pairs[k][1]);
    }
}

qkv_status tok_wp_decode(const qkv_tokenizer *t, const int64_t *ids, int64_t n, char **text, size_t *len)
{
    static const char fn[] = "tokenizer_decode";
    size_t total = 1;
    for (int64_t i = 0; i < n; i++) total += (size_t)(t->tok_off[ids[i] + 1] - t->tok_off[ids[i]]) + 1;
    char *o = malloc(total);
    if (!o) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for %zu bytes", fn, total);
    size_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *p = (const char *)t->tok_bytes + t->tok_off[ids[i]];
        size_t l = (size_t)(t->tok_off[ids[i] + 1] - t->tok_off[ids[i]]), start = k;
        if (i > 0) {
            if (l >= 2 && p[0] == '#' && p[1] == '#') p += 2, l -= 2;
            else o[k++] = ' ';
        }
        memcpy(o + k, p, l), k += l;
        size_t m = k - start; /* the decoder's cleanup, token by token */
        wp_cleanup(o + start, &m, 1);
        k = start + m;
    }
    wp_cleanup(o, &k, 0);
    o[k] = 0;
    *text = o, *len = k;
    return QKV_OK;
}

/* ---- loading ---- */

/* The tokenizer of vocab.txt's text[0, len) (path for messages), options o. */
static qkv_status wp_from_text(const char *path, const char *text, size_t len, const qkv_wordpiece_opts *o,
                               qkv_tokenizer **out, const char *fn)
{
    if (len == 0) return qkv_fail(QKV_ERR_FORMAT, "%s: %s is empty (a vocab.txt has one token a line)", fn, path);
    const void *nul = memchr(text, 0, len);
    if (nul) {
        size_t at = (size_t)((const char *)nul - text), line = 1;
        for (size_t i = 0; i < at; i++) line += text[i] == '\n';
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s: line %zu has a NUL byte", fn, path, line);
    }
    int64_t n = 0;
    for (size_t i = 0; i < len; i++) n += text[i] == '\n';
    if (text[len - 1] != '\n') n++;
    if (n > INT32_MAX) return qkv_fail(QKV_ERR_FORMAT, "%s: %s has %" PRId64 " lines, too many", fn, path, n);
    qkv_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    t->kind = QKV_TOKENIZER_WORDPIECE, t->eot = -1, t->vocab_size = n;
    t->wp = *o;
    t->tok_bytes = malloc(len + 1), t->tok_off = malloc(((size_t)n + 1) * sizeof *t->tok_off);
    qkv_status st = QKV_OK;
    if (!t->tok_bytes || !t->tok_off) st = qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for %s", fn, path);
    if (st == QKV_OK) st = tok_strmap_init(&t->rmap, n, fn);
    size_t pos = 0, nb = 0;
    for (int64_t id = 0; id < n && st == QKV_OK; id++) {
        const char *e = memchr(text + pos, '\n', len - pos);
        size_t l = (e ? (size_t)(e - text) : len) - pos, next = pos + l + 1;
        if (l && text[pos + l - 1] == '\r') l--; /* a vocab.txt with CRLF line ends */
        if (!json_utf8_valid(text + pos, l)) {
            st = qkv_fail(QKV_ERR_FORMAT, "%s: %s: line %" PRId64 " is not valid UTF-8", fn, path, id + 1);
            break;
        }
        t->tok_off[id] = (int64_t)nb;
        memcpy(t->tok_bytes + nb, text + pos, l), nb += l;
        t->tok_off[id + 1] = (int64_t)nb;
        int64_t *slot = tok_strmap_slot(&t->rmap, t->tok_bytes, t->tok_off, t->tok_bytes + t->tok_off[id], l);
        if (*slot >= 0) {
            st = qkv_fail(QKV_ERR_FORMAT, "%s: %s: line %" PRId64 " repeats the token '%.*s' of line %" PRId64, fn,
                          path, id + 1, (int)(l > 64 ? 64 : l), text + pos, *slot + 1);
            break;
        }
        *slot = id;
        pos = next;
    }
    if (st == QKV_OK) {
        static const char *const need[] = {"[UNK]", "[CLS]", "[SEP]", "[PAD]"};
        int64_t got[4];
        for (int k = 0; k < 4 && st == QKV_OK; k++) {
            got[k] = wp_find(t, (const unsigned char *)need[k], strlen(need[k]));
            if (got[k] < 0)
                st = qkv_fail(QKV_ERR_FORMAT, "%s: %s has no %s token (a BERT vocab.txt has [UNK], [CLS], [SEP], [PAD])",
                              fn, path, need[k]);
        }
        if (st == QKV_OK) {
            t->unk = got[0], t->cls = got[1], t->sep = got[2], t->pad = got[3];
            t->mask = wp_find(t, (const unsigned char *)"[MASK]", 6);
            t->bos = t->eos = -1;
        }
    }
    if (st != QKV_OK) return qkv_tokenizer_free(t), st;
    *out = t;
    return QKV_OK;
}

static qkv_status wp_check_opts(const qkv_wordpiece_opts *o, const char *fn)
{
    if (o->strip_accents < -1 || o->strip_accents > 1)
        return qkv_fail(QKV_ERR_ARG, "%s: strip_accents is %d, expected -1, 0 or 1", fn, o->strip_accents);
    if (o->max_chars_per_word < 1)
        return qkv_fail(QKV_ERR_ARG, "%s: max_chars_per_word is %" PRId64 ", expected >= 1", fn, o->max_chars_per_word);
    if (o->max_len < 2)
        return qkv_fail(QKV_ERR_ARG, "%s: max_len is %" PRId64 ", expected >= 2 ([CLS] and [SEP])", fn, o->max_len);
    return QKV_OK;
}

static qkv_status wp_load(const char *vocab_path, const qkv_wordpiece_opts *o, qkv_tokenizer **out, const char *fn)
{
    QKV_TRY(wp_check_opts(o, fn));
    struct stat sb;
    if (stat(vocab_path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return qkv_fail(QKV_ERR_ARG, "%s: %s is a folder (a vocab.txt is expected; qkv_tokenizer_wordpiece_open_dir reads a model folder)",
                        fn, vocab_path);
    char *text = NULL;
    size_t len = 0;
    QKV_TRY(tok_read_file(vocab_path, &text, &len, fn));
    qkv_status st = wp_from_text(vocab_path, text, len, o, out, fn);
    free(text);
    return st;
}

qkv_status qkv_tokenizer_wordpiece_load(const char *vocab_path, const qkv_wordpiece_opts *o, qkv_tokenizer **out)
{
    static const char fn[] = "tokenizer_wordpiece_load";
    QKV_NEED(out, fn, "out");
    *out = NULL;
    QKV_NEED(vocab_path, fn, "vocab_path");
    qkv_wordpiece_opts d;
    qkv_wordpiece_opts_default(&d);
    return wp_load(vocab_path, o ? o : &d, out, fn);
}

/* A JSON file's top object (NULL, QKV_OK when the file is absent). */
static qkv_status wp_json(const char *path, json_value **root, const char *fn)
{
    *root = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) return QKV_OK;
        return qkv_fail(QKV_ERR_IO, "%s: cannot open %s: %s", fn, path, strerror(errno));
    }
    fclose(f);
    char *text = NULL, err[160];
    size_t len = 0;
    QKV_TRY(tok_read_file(path, &text, &len, fn));
    json_limits lim = {64, 0};
    json_result r = json_parse(text, len, &lim, root, NULL, err, sizeof err);
    free(text);
    if (r == JSON_ENOMEM) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory reading %s", fn, path);
    if (r != JSON_OK) return qkv_fail(QKV_ERR_FORMAT, "%s: %s is not JSON: %s", fn, path, err);
    if ((*root)->type != JSON_OBJECT) {
        json_free(*root), *root = NULL;
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s is not a JSON object", fn, path);
    }
    return QKV_OK;
}

static const json_value *wp_member(const json_value *obj, const char *key)
{
    const json_value *hit = NULL;
    for (size_t i = 0; obj && i < obj->u.obj.n; i++)
        if (!strcmp(obj->u.obj.items[i].key, key)) hit = &obj->u.obj.items[i].val; /* the last wins, as Python's json */
    return hit;
}

/* A boolean member into *v (absent or null: unchanged; null_value >= -1: what null sets). */
static qkv_status wp_bool(const json_value *obj, const char *key, int *v, int null_value, const char *path,
                          const char *fn)
{
    const json_value *m = wp_member(obj, key);
    if (!m) return QKV_OK;
    if (m->type == JSON_TRUE) *v = 1;
    else if (m->type == JSON_FALSE) *v = 0;
    else if (m->type == JSON_NULL) {
        if (null_value >= -1) *v = null_value;
    } else
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s: %s is %s, expected true or false", fn, path, key,
                        json_type_name(m->type));
    return QKV_OK;
}

/* A positive integer member into *v (absent, null or beyond 2^31: unchanged, as
 * transformers' "very large" model_max_length means no limit). */
static qkv_status wp_int(const json_value *obj, const char *key, int64_t *v, const char *path, const char *fn)
{
    const json_value *m = wp_member(obj, key);
    if (!m || m->type == JSON_NULL) return QKV_OK;
    if (m->type != JSON_NUMBER || m->u.num.neg)
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s: %s is %s, expected a positive integer", fn, path, key,
                        json_type_name(m->type));
    if (m->u.num.big || !m->u.num.integral || m->u.num.mag > INT32_MAX) return QKV_OK;
    if (m->u.num.mag < 2)
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s: %s is %" PRIu64 ", expected >= 2", fn, path, key, m->u.num.mag);
    *v = (int64_t)m->u.num.mag;
    return QKV_OK;
}

qkv_status qkv_tokenizer_wordpiece_open_dir(const char *dir, qkv_tokenizer **out)
{
    static const char fn[] = "tokenizer_wordpiece_open_dir";
    QKV_NEED(out, fn, "out");
    *out = NULL;
    QKV_NEED(dir, fn, "dir");
    size_t dl = strlen(dir);
    if (dl > 4000) return qkv_fail(QKV_ERR_ARG, "%s: the folder's name is %zu bytes long", fn, dl);
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return qkv_fail(QKV_ERR_IO, "%s: cannot open %s: %s (tools/get_data.sh minilm fetches all-MiniLM-L6-v2 into data/minilm)",
                        fn, dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return qkv_fail(QKV_ERR_ARG, "%s: %s is not a folder", fn, dir);
    char path[4096 + 64];
    qkv_wordpiece_opts o;
    qkv_wordpiece_opts_default(&o);
    json_value *cfg = NULL;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    QKV_TRY(wp_json(path, &cfg, fn));
    qkv_status st = wp_bool(cfg, "do_lower_case", &o.lowercase, -2, path, fn);
    if (st == QKV_OK) st = wp_bool(cfg, "strip_accents", &o.strip_accents, -1, path, fn);
    if (st == QKV_OK) st = wp_bool(cfg, "tokenize_chinese_chars", &o.split_cjk, -2, path, fn);
    if (st == QKV_OK) st = wp_int(cfg, "model_max_length", &o.max_len, path, fn);
    json_free(cfg);
    QKV_TRY(st);
    snprintf(path, sizeof path, "%s/sentence_bert_config.json", dir);
    QKV_TRY(wp_json(path, &cfg, fn));
    int sbert_lower = 0;
    st = wp_int(cfg, "max_seq_length", &o.max_len, path, fn);
    if (st == QKV_OK) st = wp_bool(cfg, "do_lower_case", &sbert_lower, -2, path, fn);
    json_free(cfg);
    QKV_TRY(st);
    if (sbert_lower) o.lowercase = 1;
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    return wp_load(path, &o, out, fn);
}

qkv_status qkv_tokenizer_encode_bert(const qkv_tokenizer *t, const char *text, size_t len, int64_t max_len,
                                     int64_t **ids, int64_t *n, int64_t *n_full)
{
    static const char fn[] = "tokenizer_encode_bert";
    QKV_NEED(ids, fn, "ids");
    QKV_NEED(n, fn, "n");
    *ids = NULL, *n = 0;
    if (n_full) *n_full = 0;
    QKV_NEED(t, fn, "t");
    if (len) QKV_NEED(text, fn, "text");
    if (t->kind != QKV_TOKENIZER_WORDPIECE)
        return qkv_fail(QKV_ERR_ARG, "%s: t is not a WordPiece tokenizer (qkv_tokenizer_wordpiece_load)", fn);
    int64_t lim = max_len > 0 ? max_len : t->wp.max_len;
    if (lim < 2) return qkv_fail(QKV_ERR_ARG, "%s: max_len is %" PRId64 ", expected >= 2 ([CLS] and [SEP])", fn, lim);
    tok_ids a = {0};
    qkv_status st = tok_ids_push(&a, t->cls, fn);
    if (st == QKV_OK) st = qkv_fail_in(fn, tok_wp_encode(t, text, len, &a));
    if (st == QKV_OK) st = tok_ids_push(&a, t->sep, fn);
    if (st != QKV_OK) return free(a.v), st;
    if (n_full) *n_full = a.n;
    if (a.n > lim) a.v[lim - 1] = t->sep, a.n = lim;
    *ids = a.v, *n = a.n;
    return QKV_OK;
}
