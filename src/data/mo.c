/* mo.c: GNU gettext's compiled message catalogues (.mo files), read into
 * (msgid, msgstr) pairs of UTF-8 text.
 *
 * The format (gettext's manual, "The Format of GNU MO Files"): seven 32-bit
 * words in the file's byte order,
 *   magic 0x950412de (read as 0xde120495 in the other order), revision
 *   (major << 16 | minor), N the number of strings, O and T the offsets of
 *   the original and translated string tables, S and H the size and offset
 *   of the hash table (not used here);
 * each table has N (length, offset) pairs of 32-bit words; a string is
 * length bytes at offset (gettext adds a NUL after it, not counted).
 * A msgid "ctx\004id" has a context; a plural entry is "one\0many" in
 * msgid and "form0\0form1..." in msgstr. Minor revision 1 adds
 * system-dependent strings (<PRIu64> and the like) after the seven words;
 * only the static strings are read. docs/translation_data.md. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <iconv.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "core/internal.h"
#include "data/tokenizer_internal.h"

struct qkv_mo {
    int64_t n;      /* pairs kept (the header entry is not one) */
    char *text;     /* each pair's msgid and msgstr, NUL-terminated, back to back */
    size_t *off;    /* pair i: msgid at text + off[2i], msgstr at text + off[2i+1] */
    char charset[64];
};

static const char FN[] = "mo_parse";

static uint32_t rd32(const unsigned char *p, int swap)
{
    uint32_t v;
    memcpy(&v, p, 4);
    if (swap) v = (v >> 24) | ((v >> 8) & 0xff00) | ((v << 8) & 0xff0000) | (v << 24);
    return v;
}

/* String i of the table at tab: its bytes and length, checked against the
 * file's size (64-bit sums, so no overflow). */
static qkv_status mo_string(const unsigned char *d, size_t size, uint32_t tab, uint32_t i, int swap,
                            const char *name, const char *which, const unsigned char **s, uint32_t *len)
{
    uint64_t at = (uint64_t)tab + (uint64_t)i * 8;
    uint32_t l = rd32(d + at, swap), o = rd32(d + at + 4, swap);
    if ((uint64_t)o + l > size)
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s: %s string %" PRIu32 " (%" PRIu32 " bytes at offset %" PRIu32
                                        ") runs past the end of the file (%zu bytes)",
                        FN, name, which, i, l, o, size);
    *s = d + o, *len = l;
    return QKV_OK;
}

/* The charset named in the header's "Content-Type: ...; charset=NAME" line;
 * "" when absent. */
static void header_charset(const unsigned char *h, uint32_t len, char *cs, size_t cap)
{
    static const char key[] = "charset=";
    cs[0] = 0;
    for (uint32_t i = 0; i + sizeof key - 1 <= len; i++) {
        if (memcmp(h + i, key, sizeof key - 1)) continue;
        size_t k = 0;
        for (uint32_t j = i + sizeof key - 1; j < len && k + 1 < cap; j++) {
            unsigned char c = h[j];
            if (c <= ' ' || c == ';' || c >= 0x7f) break;
            cs[k++] = (char)c;
        }
        cs[k] = 0;
        return;
    }
}

static int is_utf8_name(const char *cs)
{
    return !*cs || !strcasecmp(cs, "UTF-8") || !strcasecmp(cs, "UTF8") || !strcasecmp(cs, "ASCII") ||
           !strcasecmp(cs, "US-ASCII") || !strcasecmp(cs, "CHARSET"); /* msginit's placeholder */
}

static int valid_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0, l; i < n; i += l)
        if (tok_utf8_decode(s + i, n - i, &l) < 0) return 0;
    return 1;
}

/* A growable byte buffer for the pairs' text. */
typedef struct {
    char *v;
    size_t n, cap;
} mo_buf;

static qkv_status buf_reserve(mo_buf *b, size_t more)
{
    if (more > SIZE_MAX / 2 - b->n) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", FN);
    if (b->n + more <= b->cap) return QKV_OK;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + more) cap *= 2;
    char *v = realloc(b->v, cap);
    if (!v) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for %zu bytes", FN, cap);
    b->v = v, b->cap = cap;
    return QKV_OK;
}

/* Appends s[0, len) converted from the catalogue's charset (cd; (iconv_t)-1:
 * already UTF-8) and a NUL; the result must be valid UTF-8 without NULs. */
static qkv_status buf_put(mo_buf *b, const unsigned char *s, size_t len, iconv_t cd, const char *name,
                          const char *which, uint32_t i)
{
    size_t start = b->n;
    if (cd == (iconv_t)-1) {
        QKV_TRY(buf_reserve(b, len + 1));
        memcpy(b->v + b->n, s, len), b->n += len;
    } else {
        iconv(cd, NULL, NULL, NULL, NULL);
        char *in = (char *)s;
        size_t inleft = len;
        for (;;) {
            QKV_TRY(buf_reserve(b, inleft * 4 + 16));
            char *o = b->v + b->n;
            size_t oleft = b->cap - b->n - 1;
            size_t r = iconv(cd, &in, &inleft, &o, &oleft);
            b->n = (size_t)(o - b->v);
            if (r != (size_t)-1) {
                o = b->v + b->n, oleft = b->cap - b->n - 1;
                if (iconv(cd, NULL, NULL, &o, &oleft) == (size_t)-1 && errno != E2BIG) r = (size_t)-1;
                else {
                    b->n = (size_t)(o - b->v);
                    break;
                }
            }
            if (errno != E2BIG) {
                b->n = start;
                return qkv_fail(QKV_ERR_FORMAT, "%s: %s: %s string %" PRIu32 " is not valid in the catalogue's charset",
                                FN, name, which, i);
            }
        }
        QKV_TRY(buf_reserve(b, 1));
    }
    if (memchr(b->v + start, 0, b->n - start) || !valid_utf8((unsigned char *)b->v + start, b->n - start)) {
        b->n = start;
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s: %s string %" PRIu32 " is not valid UTF-8%s", FN, name, which, i,
                        cd == (iconv_t)-1 ? " (the header names no other charset)" : " after conversion");
    }
    b->v[b->n++] = 0;
    return QKV_OK;
}

qkv_status qkv_mo_parse(const void *data, size_t size, const char *name, qkv_mo **out)
{
    QKV_NEED(out, FN, "out");
    *out = NULL;
    if (!name) name = "(memory)";
    if (size && !data) return qkv_fail(QKV_ERR_ARG, "%s: data is NULL", FN);
    const unsigned char *d = data;
    if (size < 28)
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s: %zu bytes, too short for a .mo header (28)", FN, name, size);
    int swap;
    uint32_t magic = rd32(d, 0);
    if (magic == 0x950412deu) swap = 0;
    else if (magic == 0xde120495u) swap = 1;
    else
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s is not a .mo file (magic 0x%08" PRIx32 ", expected 0x950412de)",
                        FN, name, magic);
    uint32_t rev = rd32(d + 4, swap), n = rd32(d + 8, swap), O = rd32(d + 12, swap), T = rd32(d + 16, swap);
    if (rev >> 16 != 0 || (rev & 0xffff) > 1)
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s: revision %" PRIu32 ".%" PRIu32 " is not supported (0.0 and 0.1 are)",
                        FN, name, rev >> 16, rev & 0xffff);
    if ((uint64_t)O + (uint64_t)n * 8 > size || (uint64_t)T + (uint64_t)n * 8 > size)
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s: the string tables (%" PRIu32 " strings at offsets %" PRIu32 " and %" PRIu32
                                        ") run past the end of the file (%zu bytes)",
                        FN, name, n, O, T, size);
    /* The header entry (empty msgid) gives the charset; gettext sorts it first. */
    char cs[64] = "";
    for (uint32_t i = 0; i < n; i++) {
        const unsigned char *s, *t;
        uint32_t ls, lt;
        QKV_TRY(mo_string(d, size, O, i, swap, name, "original", &s, &ls));
        if (ls) continue;
        QKV_TRY(mo_string(d, size, T, i, swap, name, "translated", &t, &lt));
        header_charset(t, lt, cs, sizeof cs);
        break;
    }
    iconv_t cd = (iconv_t)-1;
    if (!is_utf8_name(cs)) {
        cd = iconv_open("UTF-8", cs);
        if (cd == (iconv_t)-1)
            return qkv_fail(QKV_ERR_FORMAT, "%s: %s: charset '%s' cannot be converted to UTF-8", FN, name, cs);
    }
    qkv_mo *mo = calloc(1, sizeof *mo);
    mo_buf b = {0};
    qkv_status st = mo ? QKV_OK : qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", FN);
    if (st == QKV_OK) {
        snprintf(mo->charset, sizeof mo->charset, "%s", *cs ? cs : "UTF-8");
        mo->off = malloc(((size_t)n ? (size_t)n : 1) * 2 * sizeof *mo->off);
        if (!mo->off) st = qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for %" PRIu32 " strings", FN, n);
    }
    for (uint32_t i = 0; i < n && st == QKV_OK; i++) {
        const unsigned char *s, *t;
        uint32_t ls, lt;
        st = mo_string(d, size, O, i, swap, name, "original", &s, &ls);
        if (st == QKV_OK) st = mo_string(d, size, T, i, swap, name, "translated", &t, &lt);
        if (st != QKV_OK || ls == 0) continue; /* the header entry */
        /* the first plural form of each; the msgid without its context */
        const unsigned char *z = memchr(s, 0, ls), *e = memchr(t, 0, lt);
        if (z) ls = (uint32_t)(z - s);
        if (e) lt = (uint32_t)(e - t);
        const unsigned char *ctx = memchr(s, 4, ls);
        if (ctx) ls -= (uint32_t)(ctx + 1 - s), s = ctx + 1;
        if (ls == 0) continue; /* nothing left of the msgid: not a pair either */
        size_t a = b.n;
        st = buf_put(&b, s, ls, cd, name, "original", i);
        if (st == QKV_OK && b.v[a] == 0) { /* converted to nothing (UTF-7's "+"): not a pair */
            b.n = a;
            continue;
        }
        if (st == QKV_OK) st = buf_put(&b, t, lt, cd, name, "translated", i);
        if (st == QKV_OK) mo->off[2 * mo->n] = a, mo->off[2 * mo->n + 1] = a + strlen(b.v + a) + 1, mo->n++;
    }
    if (cd != (iconv_t)-1) iconv_close(cd);
    if (st != QKV_OK) {
        free(b.v);
        if (mo) free(mo->off), free(mo);
        return st;
    }
    mo->text = b.v;
    *out = mo;
    return QKV_OK;
}

qkv_status qkv_mo_read(const char *path, qkv_mo **out)
{
    QKV_NEED(out, "mo_read", "out");
    *out = NULL;
    QKV_NEED(path, "mo_read", "path");
    char *data;
    size_t len;
    QKV_TRY(tok_read_file(path, &data, &len, "mo_read"));
    qkv_status s = qkv_mo_parse(data, len, path, out);
    free(data);
    return s;
}

int64_t qkv_mo_count(const qkv_mo *mo) { return mo ? mo->n : 0; }
const char *qkv_mo_charset(const qkv_mo *mo) { return mo ? mo->charset : NULL; }

qkv_status qkv_mo_get(const qkv_mo *mo, int64_t i, const char **msgid, const char **msgstr)
{
    static const char fn[] = "mo_get";
    QKV_NEED(mo, fn, "mo");
    QKV_NEED(msgid, fn, "msgid");
    QKV_NEED(msgstr, fn, "msgstr");
    if (i < 0 || i >= mo->n)
        return qkv_fail(QKV_ERR_ARG, "%s: pair %" PRId64 " is out of range (the catalogue has %" PRId64 ")", fn, i,
                        mo->n);
    *msgid = mo->text + mo->off[2 * i], *msgstr = mo->text + mo->off[2 * i + 1];
    return QKV_OK;
}

void qkv_mo_free(qkv_mo *mo)
{
    if (!mo) return;
    free(mo->text), free(mo->off), free(mo);
}
