/* json.c: a small strict JSON reader; see json.h. A recursive-descent parser
 * over the RFC 8259 grammar, with a depth limit so hostile input cannot
 * exhaust the stack. */
#include "io/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const unsigned char *s;
    size_t len, pos;
    json_limits lim;
    char *err;
    size_t errlen;
    json_result result;
} json_parser;

/* Records the first error (later ones are consequences of it). */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int jp_fail(json_parser *p, size_t at, const char *fmt, ...)
{
    if (p->result != JSON_OK) return -1;
    p->result = JSON_ESYNTAX;
    if (p->err && p->errlen) {
        int k = snprintf(p->err, p->errlen, "at byte %zu: ", at);
        if (k >= 0 && (size_t)k < p->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(p->err + k, p->errlen - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return -1;
}

static int jp_nomem(json_parser *p)
{
    if (p->result == JSON_OK) {
        p->result = JSON_ENOMEM;
        if (p->err && p->errlen) snprintf(p->err, p->errlen, "out of memory");
    }
    return -1;
}

/* Names the byte at p->pos for "unexpected ..." messages. */
static int jp_unexpected(json_parser *p, const char *expected)
{
    if (p->pos >= p->len)
        return jp_fail(p, p->pos, "unexpected end of text, expected %s", expected);
    unsigned char c = p->s[p->pos];
    if (c > 0x20 && c < 0x7f)
        return jp_fail(p, p->pos, "unexpected '%c', expected %s", c, expected);
    return jp_fail(p, p->pos, "unexpected byte 0x%02x, expected %s", c, expected);
}

static void jp_skip_ws(json_parser *p)
{
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int jp_is_digit(json_parser *p)
{
    return p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9';
}

/* ---- UTF-8 ------------------------------------------------------------ */

/* Length of the well-formed UTF-8 sequence at s (n bytes left), 0 if bad.
 * The ranges are those of the Unicode standard's table 3-7. */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    unsigned lo = 0x80, hi = 0xBF;
    size_t k;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) k = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        k = 3;
        if (c == 0xE0) lo = 0xA0;      /* overlong */
        if (c == 0xED) hi = 0x9F;      /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        k = 4;
        if (c == 0xF0) lo = 0x90;      /* overlong */
        if (c == 0xF4) hi = 0x8F;      /* past U+10FFFF */
    } else {
        return 0;
    }
    if (n < k) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < k; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return k;
}

int json_utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t k = utf8_seq_len(u + i, n - i);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

static size_t utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- strings ---------------------------------------------------------- */

/* Four hex digits at p->pos into *v. */
static int jp_hex4(json_parser *p, uint32_t *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++, p->pos++) {
        if (p->pos >= p->len) return jp_fail(p, p->pos, "unterminated \\u escape");
        unsigned char c = p->s[p->pos];
        uint32_t d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return jp_fail(p, p->pos, "invalid escape: \\u needs four hex digits");
        *v = *v * 16 + d;
    }
    return 0;
}

/* A \uXXXX escape (p->pos at the 'u'), joining surrogate pairs. */
static int jp_unicode_escape(json_parser *p, char *out, size_t *n)
{
    size_t at = p->pos - 1;
    uint32_t cp, lo;
    p->pos++;
    if (jp_hex4(p, &cp)) return -1;
    if (cp >= 0xDC00 && cp <= 0xDFFF)
        return jp_fail(p, at, "invalid escape: lone low surrogate \\u%04X", (unsigned)cp);
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (p->pos + 1 >= p->len || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
            return jp_fail(p, at, "invalid escape: high surrogate \\u%04X without a low one",
                           (unsigned)cp);
        p->pos += 2;
        if (jp_hex4(p, &lo)) return -1;
        if (lo < 0xDC00 || lo > 0xDFFF)
            return jp_fail(p, at, "invalid escape: high surrogate \\u%04X without a low one",
                           (unsigned)cp);
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    *n += utf8_encode(cp, out + *n);
    return 0;
}

/* One backslash escape (p->pos at the backslash) appended to out. */
static int jp_escape(json_parser *p, char *out, size_t *n)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    p->pos++;
    if (p->pos >= p->len) return jp_fail(p, p->pos, "unterminated string");
    unsigned char c = p->s[p->pos];
    if (c == 'u') return jp_unicode_escape(p, out, n);
    const char *hit = c ? strchr(from, c) : NULL;
    if (!hit) {
        if (c > 0x20 && c < 0x7f)
            return jp_fail(p, p->pos - 1, "invalid escape '\\%c' in string", c);
        return jp_fail(p, p->pos - 1, "invalid escape (backslash then byte 0x%02x) in string", c);
    }
    out[(*n)++] = to[hit - from];
    p->pos++;
    return 0;
}

/* Decodes the string at p->pos (at its opening quote) into *out. The decoded
 * form is never longer than the source, so one allocation of the source's
 * length is enough. */
static int jp_string(json_parser *p, char **out, size_t *out_len)
{
    size_t start = p->pos++, end = p->pos;
    while (end < p->len && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->len) return jp_fail(p, start, "unterminated string");
    char *buf = malloc(end - p->pos + 1);
    if (!buf) return jp_nomem(p);
    size_t n = 0;
    while (p->s[p->pos] != '"') {
        unsigned char c = p->s[p->pos];
        size_t k;
        if (c < 0x20) {
            jp_fail(p, p->pos, "control character 0x%02x in string (must be escaped)", c);
            goto fail;
        }
        if (c == '\\') {
            if (jp_escape(p, buf, &n)) goto fail;
            continue;
        }
        k = utf8_seq_len(p->s + p->pos, p->len - p->pos);
        if (!k) {
            jp_fail(p, p->pos, "invalid UTF-8 in string");
            goto fail;
        }
        memcpy(buf + n, p->s + p->pos, k);
        n += k;
        p->pos += k;
    }
    p->pos++;
    buf[n] = '\0';
    *out = buf;
    *out_len = n;
    return 0;
fail:
    free(buf);
    return -1;
}

/* ---- numbers and literals --------------------------------------------- */

static int jp_number(json_parser *p, json_value *v)
{
    v->type = JSON_NUMBER;
    v->u.num.integral = 1;
    if (p->s[p->pos] == '-') {
        v->u.num.neg = 1;
        p->pos++;
    }
    if (!jp_is_digit(p)) return jp_unexpected(p, "a digit");
    if (p->s[p->pos] == '0') {
        p->pos++;
        if (jp_is_digit(p)) return jp_fail(p, p->pos - 1, "number with a leading zero");
    }
    for (; jp_is_digit(p); p->pos++) {
        unsigned d = p->s[p->pos] - '0';
        if (v->u.num.mag > (UINT64_C(0x7fffffffffffffff) - d) / 10) v->u.num.big = 1;
        if (!v->u.num.big) v->u.num.mag = v->u.num.mag * 10 + d;
    }
    if (p->pos < p->len && p->s[p->pos] == '.') {
        v->u.num.integral = 0;
        p->pos++;
        if (!jp_is_digit(p)) return jp_unexpected(p, "a digit after '.'");
        while (jp_is_digit(p)) p->pos++;
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        v->u.num.integral = 0;
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (!jp_is_digit(p)) return jp_unexpected(p, "a digit in the exponent");
        while (jp_is_digit(p)) p->pos++;
    }
    return 0;
}

static int jp_literal(json_parser *p, json_value *v, const char *word, json_type t)
{
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return jp_unexpected(p, "a value");
    p->pos += n;
    v->type = t;
    return 0;
}

/* ---- arrays and objects ----------------------------------------------- */

static int jp_value(json_parser *p, int depth, json_value *v);

/* Grows *items (of elem bytes each) so that one more fits; the new slot is
 * zeroed, which makes it a JSON_NULL that json_free can skip. */
static int jp_grow(json_parser *p, void **items, size_t n, size_t *cap, size_t elem)
{
    if (n == *cap) {
        size_t c = *cap ? *cap * 2 : 4;
        void *q = realloc(*items, c * elem);
        if (!q) return jp_nomem(p);
        *items = q;
        *cap = c;
    }
    memset((char *)*items + n * elem, 0, elem);
    return 0;
}

/* At c (after blanks): consumes it, 1; otherwise 0. */
static int jp_eat(json_parser *p, char c)
{
    jp_skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == c) {
        p->pos++;
        return 1;
    }
    return 0;
}

/* After an array's item or an object's member: ',' (1: another follows),
 * close (0: the end) or an error (-1) saying what was expected. */
static int jp_after_item(json_parser *p, char close, const char *expected)
{
    if (jp_eat(p, ',')) return 1;
    if (jp_eat(p, close)) return 0;
    return jp_unexpected(p, expected);
}

static int jp_array(json_parser *p, int depth, json_value *v)
{
    size_t cap = 0;
    v->type = JSON_ARRAY;
    p->pos++;
    if (jp_eat(p, ']')) return 0;
    for (;;) {
        if (p->lim.max_array && v->u.arr.n == p->lim.max_array)
            return jp_fail(p, v->pos, "array with more than %zu items", p->lim.max_array);
        if (jp_grow(p, (void **)&v->u.arr.items, v->u.arr.n, &cap, sizeof(json_value)))
            return -1;
        /* Counted before parsing so that json_free sees a partial item. */
        if (jp_value(p, depth + 1, &v->u.arr.items[v->u.arr.n++])) return -1;
        int more = jp_after_item(p, ']', "',' or ']' in array");
        if (more <= 0) return more;
    }
}

static int jp_member(json_parser *p, int depth, json_member *m)
{
    jp_skip_ws(p);
    if (p->pos >= p->len || p->s[p->pos] != '"') return jp_unexpected(p, "a string key");
    if (jp_string(p, &m->key, &m->key_len)) return -1;
    jp_skip_ws(p);
    if (p->pos >= p->len || p->s[p->pos] != ':') return jp_unexpected(p, "':' after key");
    p->pos++;
    return jp_value(p, depth + 1, &m->val);
}

static int jp_object(json_parser *p, int depth, json_value *v)
{
    size_t cap = 0;
    v->type = JSON_OBJECT;
    p->pos++;
    if (jp_eat(p, '}')) return 0;
    for (;;) {
        if (jp_grow(p, (void **)&v->u.obj.items, v->u.obj.n, &cap, sizeof(json_member)))
            return -1;
        if (jp_member(p, depth, &v->u.obj.items[v->u.obj.n++])) return -1;
        int more = jp_after_item(p, '}', "',' or '}' in object");
        if (more <= 0) return more;
    }
}

static int jp_value(json_parser *p, int depth, json_value *v)
{
    jp_skip_ws(p);
    v->pos = p->pos;
    if (p->pos >= p->len) return jp_unexpected(p, "a value");
    unsigned char c = p->s[p->pos];
    if ((c == '[' || c == '{') && depth >= p->lim.max_depth)
        return jp_fail(p, p->pos, "nested deeper than %d levels", p->lim.max_depth);
    switch (c) {
    case '[': return jp_array(p, depth, v);
    case '{': return jp_object(p, depth, v);
    case '"':
        v->type = JSON_STRING;
        return jp_string(p, &v->u.str.s, &v->u.str.len);
    case 't': return jp_literal(p, v, "true", JSON_TRUE);
    case 'f': return jp_literal(p, v, "false", JSON_FALSE);
    case 'n': return jp_literal(p, v, "null", JSON_NULL);
    default:
        if (c == '-' || (c >= '0' && c <= '9')) return jp_number(p, v);
        return jp_unexpected(p, "a value");
    }
}

/* ---- public ----------------------------------------------------------- */

static void json_free_children(json_value *v)
{
    size_t i;
    switch (v->type) {
    case JSON_STRING:
        free(v->u.str.s);
        break;
    case JSON_ARRAY:
        for (i = 0; i < v->u.arr.n; i++) json_free_children(&v->u.arr.items[i]);
        free(v->u.arr.items);
        break;
    case JSON_OBJECT:
        for (i = 0; i < v->u.obj.n; i++) {
            free(v->u.obj.items[i].key);
            json_free_children(&v->u.obj.items[i].val);
        }
        free(v->u.obj.items);
        break;
    default:
        break;
    }
}

void json_free(json_value *v)
{
    if (!v) return;
    json_free_children(v);
    free(v);
}

json_result json_parse(const char *text, size_t len, const json_limits *lim, json_value **out,
                       size_t *end, char *err, size_t errlen)
{
    json_parser p = {(const unsigned char *)text, len, 0, {64, 0}, err, errlen, JSON_OK};
    if (lim) p.lim = *lim;
    if (err && errlen) err[0] = '\0';
    *out = NULL;
    json_value *v = calloc(1, sizeof *v);
    if (!v) {
        jp_nomem(&p);
        return p.result;
    }
    if (jp_value(&p, 0, v) == 0) {
        if (end) {
            *end = p.pos;
        } else {
            jp_skip_ws(&p);
            if (p.pos < p.len) jp_unexpected(&p, "end of text after the value");
        }
    }
    if (p.result != JSON_OK) {
        json_free(v);
        return p.result;
    }
    *out = v;
    return JSON_OK;
}

const char *json_type_name(json_type t)
{
    static const char *names[] = {"null", "false", "true", "a number", "a string",
                                  "an array", "an object"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}
