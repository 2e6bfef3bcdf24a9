/* translation_clean.c: one catalogue message made into plain text: format
 * placeholders, markup, accelerator marks and entities out, white space
 * collapsed. Each rule is a pass over the bytes that never makes the text
 * longer; docs/translation_data.md lists the rules with examples. */
#include <stdlib.h>
#include <string.h>
#include "core/internal.h"
#include "data/tokenizer_internal.h"

static int is_upper(unsigned char c) { return c >= 'A' && c <= 'Z'; }
static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static int is_alpha(unsigned char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }
static int is_ident(unsigned char c) { return is_alpha(c) || is_digit(c) || c == '_'; }

/* The length of the printf-style conversion at s[0] == '%' (C's, with
 * positional %N$, GCC's %q and %< %> quotes, gettext's %<PRIu64>), 0 if
 * none; *literal is set for %% (a percent sign). */
static size_t printf_len(const unsigned char *s, size_t n, int *literal)
{
    size_t j = 1;
    *literal = 0;
    if (j >= n) return 0;
    if (s[j] == '%') return *literal = 1, 2;
    if (s[j] == '<' || s[j] == '>') {
        /* GCC's quotes %< %>, but %<PRIu64> is a conversion */
        if (s[j] == '<' && j + 1 < n && is_upper(s[j + 1])) {
            size_t k = j + 1;
            while (k < n && is_ident(s[k])) k++;
            if (k < n && s[k] == '>') return k + 1;
        }
        return 2;
    }
    /* LibreOffice's %PRODUCTNAME, %MOD: two or more capitals */
    if (is_upper(s[j]) && j + 1 < n && (is_upper(s[j + 1]) || s[j + 1] == '_')) {
        while (j < n && (is_upper(s[j]) || is_digit(s[j]) || s[j] == '_')) j++;
        return j;
    }
    size_t k = j;
    while (k < n && is_digit(s[k])) k++;
    if (k > j && k < n && s[k] == '$') j = k + 1; /* %1$ */
    /* flags, and GCC's q before or among them (%q+#D) */
    for (size_t before = 0; before != j;) {
        before = j;
        while (j < n && s[j] && strchr("-+#0'I", s[j])) j++;
        if (j + 1 < n && s[j] == 'q' && (is_alpha(s[j + 1]) || strchr("-+#0'I", s[j + 1]))) j++;
    }
    if (j < n && s[j] == '*') {
        j++;
        k = j;
        while (k < n && is_digit(s[k])) k++;
        if (k > j && k < n && s[k] == '$') j = k + 1;
    }
    while (j < n && is_digit(s[j])) j++;
    if (j < n && s[j] == '.') {
        j++;
        if (j < n && s[j] == '*') j++;
        while (j < n && is_digit(s[j])) j++;
    }
    /* length modifiers, when a conversion letter follows (%L alone is GCC's locus) */
    while (j + 1 < n && s[j] && strchr("hlLqjztw", s[j]) && is_alpha(s[j + 1])) j++;
    if (j < n && is_alpha(s[j])) return j + 1;
    if (j + 1 < n && s[j] == '<' && is_upper(s[j + 1])) { /* %<PRIx64> after flags */
        size_t e = j + 1;
        while (e < n && is_ident(s[e])) e++;
        if (e < n && s[e] == '>') return e + 1;
    }
    /* Qt's and LibreOffice's %1: only digits */
    if (j > 1 && is_digit(s[j - 1])) {
        size_t d = 1;
        while (d < j && is_digit(s[d])) d++;
        if (d == j) return j;
    }
    return 0;
}

/* {0}, {name}, {}, $(ARG1), ${var}, $var$, $1, $name: the length at s[0], 0
 * if none. */
static size_t brace_len(const unsigned char *s, size_t n)
{
    size_t j;
    if (s[0] == '{') {
        for (j = 1; j < n && is_ident(s[j]); j++) {}
        return j < n && s[j] == '}' ? j + 1 : 0;
    }
    if (s[0] != '$' || n < 2) return 0;
    if (n >= 3 && (s[1] == '(' || s[1] == '{')) {
        for (j = 2; j < n && is_ident(s[j]); j++) {}
        return j > 2 && j < n && s[j] == (s[1] == '(' ? ')' : '}') ? j + 1 : 0;
    }
    for (j = 1; j < n && is_ident(s[j]); j++) {}
    if (j > 1 && j < n && s[j] == '$') return j + 1;
    return j > 1 && (is_alpha(s[1]) || s[1] == '_' || is_digit(s[1])) ? j : 0; /* $1, $name */
}

/* <b>, </b>, <a href="...">, <br/>: a tag's length at s[0] == '<', 0 if none. */
static size_t tag_len(const unsigned char *s, size_t n)
{
    size_t j = 1;
    if (j < n && s[j] == '/') j++;
    if (j >= n || !is_alpha(s[j])) return 0;
    for (; j < n && s[j] != '>'; j++)
        if (s[j] == '<' || s[j] == '\n') return 0;
    return j < n ? j + 1 : 0;
}

/* An entity at s[0] == '&': its length, the code point in *cp (0 if none). */
static size_t entity_len(const unsigned char *s, size_t n, uint32_t *cp)
{
    static const struct { const char *name; uint32_t cp; } names[] = {
        {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}, {"nbsp", ' '}};
    *cp = 0;
    size_t j = 1;
    if (j < n && s[j] == '#') {
        int hex = j + 1 < n && (s[j + 1] == 'x' || s[j + 1] == 'X');
        uint32_t v = 0;
        size_t k = j + 1 + (size_t)hex, start = k;
        for (; k < n && k - start < 7; k++) {
            unsigned c = s[k];
            if (is_digit((unsigned char)c)) v = v * (hex ? 16 : 10) + (c - '0');
            else if (hex && (c | 0x20) >= 'a' && (c | 0x20) <= 'f') v = v * 16 + ((c | 0x20) - 'a' + 10);
            else break;
        }
        if (k == start || k >= n || s[k] != ';' || v == 0 || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
            return 0;
        *cp = v;
        return k + 1;
    }
    for (size_t e = 0; e < sizeof names / sizeof *names; e++) {
        size_t l = strlen(names[e].name);
        if (n > l + 1 && !memcmp(s + 1, names[e].name, l) && s[l + 1] == ';') return *cp = names[e].cp, l + 2;
    }
    return 0;
}

/* Is s[i] an accelerator mark (m followed by a letter, not doubled, and for
 * '&' not an entity)? */
static int is_mark(const unsigned char *s, size_t n, size_t i, unsigned char m)
{
    if (s[i] != m || i + 1 >= n || (i > 0 && s[i - 1] == m)) return 0;
    size_t l;
    int k = tok_cp_class(tok_utf8_decode(s + i + 1, n - i - 1, &l));
    if (k != TOK_C_LETTER && !(m == '_' && k == TOK_C_NUMBER)) return 0;
    uint32_t cp;
    return m != '&' || entity_len(s + i, n - i, &cp) == 0;
}

/* The passes: each reads s[0, n) and writes o (at most n bytes); returns
 * the new length. */
static size_t pass_placeholders(const unsigned char *s, size_t n, unsigned char *o)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        int lit;
        size_t l = s[i] == '%' ? printf_len(s + i, n - i, &lit) : 0;
        if (l) {
            o[k++] = lit ? '%' : ' ', i += l; /* a space: "%s%s" must not glue words */
            continue;
        }
        o[k++] = s[i++];
    }
    return k;
}

static size_t pass_braces(const unsigned char *s, size_t n, unsigned char *o)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t l = (s[i] == '{' || s[i] == '$') ? brace_len(s + i, n - i) : 0;
        if (l) o[k++] = ' ', i += l;
        else o[k++] = s[i++];
    }
    return k;
}

static size_t pass_markup(const unsigned char *s, size_t n, unsigned char *o)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t l = s[i] == '<' ? tag_len(s + i, n - i) : 0;
        if (l) o[k++] = ' ', i += l;
        else o[k++] = s[i++];
    }
    return k;
}

/* One mark of each kind (_ & ~) is removed when it is the only one. */
static size_t pass_accelerators(const unsigned char *s, size_t n, unsigned char *o)
{
    static const unsigned char marks[] = "_&~";
    size_t only[3] = {0, 0, 0};
    int count[3] = {0, 0, 0};
    for (size_t i = 0; i < n; i++)
        for (int m = 0; m < 3; m++)
            if (is_mark(s, n, i, marks[m])) count[m]++, only[m] = i;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int drop = 0;
        for (int m = 0; m < 3; m++) drop |= count[m] == 1 && only[m] == i;
        if (!drop) o[k++] = s[i];
    }
    return k;
}

static size_t pass_entities(const unsigned char *s, size_t n, unsigned char *o)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp = 0;
        size_t l = s[i] == '&' ? entity_len(s + i, n - i, &cp) : 0;
        if (l) k += (size_t)tok_utf8_encode(cp, o + k), i += l; /* never longer than l */
        else o[k++] = s[i++];
    }
    return k;
}

/* Runs of white space (\s: NBSP and the narrow NBSP included, and the
 * escapes \n \t \r written out) become one space; none at either end.
 * Invalid UTF-8 bytes are kept as they are. */
static size_t pass_space(const unsigned char *s, size_t n, unsigned char *o)
{
    size_t k = 0;
    int pending = 0;
    for (size_t i = 0, l; i < n; i += l) {
        int32_t cp = tok_utf8_decode(s + i, n - i, &l);
        int escape = cp == '\\' && i + 1 < n && (s[i + 1] == 'n' || s[i + 1] == 't' || s[i + 1] == 'r');
        if (escape || (cp >= 0 && tok_cp_class(cp) == TOK_C_SPACE)) {
            pending = k > 0;
            l += (size_t)escape; /* a backslash escape \n \t \r left in the text */
            continue;
        }
        if (pending) o[k++] = ' ', pending = 0;
        memcpy(o + k, s + i, l), k += l;
    }
    return k;
}

/* Quotes and brackets left empty by the passes above: '' "" `' ‘’ “” «» ()
 * [] <> with at most white space inside. */
static size_t pass_empty_pairs(const unsigned char *s, size_t n, unsigned char *o)
{
    static const char *const pairs[][2] = {{"'", "'"}, {"\"", "\""}, {"`", "'"}, {"\xe2\x80\x98", "\xe2\x80\x99"},
                                           {"\xe2\x80\x9c", "\xe2\x80\x9d"}, {"\xc2\xab", "\xc2\xbb"},
                                           {"(", ")"}, {"[", "]"}, {"<", ">"}};
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t skip = 0;
        for (size_t p = 0; p < sizeof pairs / sizeof *pairs && !skip; p++) {
            size_t lo = strlen(pairs[p][0]), lc = strlen(pairs[p][1]);
            if (n - i < lo || memcmp(s + i, pairs[p][0], lo)) continue;
            size_t j = i + lo, l;
            while (j < n && tok_cp_class(tok_utf8_decode(s + j, n - j, &l)) == TOK_C_SPACE) j += l;
            if (n - j >= lc && !memcmp(s + j, pairs[p][1], lc)) skip = j + lc - i;
        }
        if (skip) o[k++] = ' ', i += skip;
        else o[k++] = s[i++];
    }
    return k;
}

qkv_status qkv_translation_clean(const char *text, char **out)
{
    static const char fn[] = "translation_clean";
    QKV_NEED(out, fn, "out");
    *out = NULL;
    QKV_NEED(text, fn, "text");
    size_t n = strlen(text);
    unsigned char *a = malloc(n + 1), *b = malloc(n + 1);
    if (!a || !b) {
        free(a), free(b);
        return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for %zu bytes", fn, n + 1);
    }
    size_t (*const passes[])(const unsigned char *, size_t, unsigned char *) = {
        pass_placeholders, pass_braces, pass_markup, pass_accelerators, pass_entities,
        pass_space,        pass_empty_pairs, pass_space};
    memcpy(a, text, n);
    for (size_t p = 0; p < sizeof passes / sizeof *passes; p++) {
        n = passes[p](a, n, b);
        unsigned char *t = a;
        a = b, b = t;
    }
    free(b);
    a[n] = 0;
    *out = (char *)a;
    return QKV_OK;
}
