/* explorer.c: the interactive attention explorer, one self-contained HTML
 * page (include/qkv/plot.h, qkv_explorer_write).
 *
 * The page (explorer_page.h) is fixed text; the only thing written from the
 * caller's data is one JSON object inside
 * <script type="application/json" id="qkv-data">, which the page's script
 * reads with JSON.parse and draws with text nodes only. So the safety of the
 * page rests on two things done here:
 *  - the JSON can never end the script element or open a comment: '<', '>'
 *    and '&' are written as \u003c, \u003e, \u0026 (so "</script>" in a
 *    token stays inside the string), and U+2028/U+2029 as \u2028/\u2029;
 *  - the file is valid UTF-8 whatever the caller's bytes: a byte that does
 *    not start a well-formed sequence becomes U+FFFD.
 * NaN and infinite weights are written as null (JSON has no NaN); the page
 * shows them as "no value".
 *
 * Numbers are printed with "%.6g": enough for a weight on screen. A caller
 * may have set a locale whose decimal point is a comma; it is put back to
 * '.', which JSON requires. */
#include <errno.h>
#include <math.h>
#include "plot/explorer_page.h"
#include "plot/plot_internal.h"

static const char *FN = "qkv_explorer_write";

/* Sizes beyond these are a mistake, not a sentence: the browser would have
 * to draw every weight of a view as an element. */
#define EXPLORER_MAX_DIM 4096          /* layers, heads, tokens per side */
#define EXPLORER_MAX_VALUES (1 << 24)  /* layers x heads x queries x keys */

/* ---- JSON text --------------------------------------------------------- */

/* The length of the well-formed UTF-8 sequence at s (1 to 4; no overlongs,
 * surrogates or code points past U+10FFFF), its code point in *cp; 0 if s
 * does not start one. Stops at the terminating NUL, which is no
 * continuation byte. */
static int utf8_seq(const unsigned char *s, unsigned *cp)
{
    unsigned c = s[0], min;
    int n;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) n = 2, c &= 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef) n = 3, c &= 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4) n = 4, c &= 0x07, min = 0x10000;
    else return 0;
    for (int k = 1; k < n; k++) {
        if ((s[k] & 0xc0) != 0x80) return 0;
        c = c << 6 | (s[k] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
    *cp = c;
    return n;
}

/* s as a JSON string that is safe inside a <script> element; each byte
 * that is not part of well-formed UTF-8 written as U+FFFD. */
static void put_string(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    putc('"', f);
    while (*p) {
        unsigned cp;
        int n = utf8_seq(p, &cp);
        if (n == 0) {
            fputs("\\ufffd", f);
            p++;
            continue;
        }
        if (cp == '"' || cp == '\\') fprintf(f, "\\%c", (int)cp);
        else if (cp < 0x20 || cp == 0x7f || cp == '<' || cp == '>' || cp == '&' || cp == 0x2028 ||
                 cp == 0x2029)
            fprintf(f, "\\u%04x", cp);
        else fwrite(p, 1, (size_t)n, f);
        p += n;
    }
    putc('"', f);
}

/* A weight: a JSON number, or null for NaN and infinities. */
static void put_weight(FILE *f, float w)
{
    char b[32];
    if (!isfinite(w)) {
        fputs("null", f);
        return;
    }
    snprintf(b, sizeof b, "%.6g", (double)w);
    for (char *c = b; *c; c++)
        if (*c == ',') *c = '.';
    fputs(b, f);
}

static void put_tokens(FILE *f, const char *key, const char *const *toks, int64_t n)
{
    fprintf(f, ",\n\"%s\":[", key);
    for (int64_t i = 0; i < n; i++) {
        if (i) putc(',', f);
        put_string(f, toks[i]);
    }
    putc(']', f);
}

static void put_lines(FILE *f, const char *const *lines)
{
    for (; *lines; lines++) {
        fputs(*lines, f);
        putc('\n', f);
    }
}

/* The whole page; the caller checks the stream for errors. */
static void put_page(FILE *f, const qkv_explorer *e, int64_t n)
{
    put_lines(f, explorer_page_head);
    fputs("{\"title\":", f);
    put_string(f, e->title ? e->title : "Attention weights");
    fprintf(f, ",\n\"layers\":%lld,\"heads\":%lld", (long long)e->layers, (long long)e->heads);
    put_tokens(f, "queries", e->query_tokens, e->queries);
    put_tokens(f, "keys", e->key_tokens, e->keys);
    fputs(",\n\"weights\":[", f);
    for (int64_t i = 0; i < n; i++) {
        if (i) fputs(i % e->keys ? "," : ",\n", f); /* a line per query row */
        put_weight(f, e->weights[i]);
    }
    fputs("]}\n", f);
    put_lines(f, explorer_page_tail);
}

/* ---- arguments ---------------------------------------------------------- */

static qkv_status check_tokens(const char *what, const char *const *toks, int64_t n)
{
    QKV_NEED(toks, FN, what);
    for (int64_t i = 0; i < n; i++)
        if (!toks[i]) return qkv_fail(QKV_ERR_ARG, "%s: %s[%lld] is NULL", FN, what, (long long)i);
    return QKV_OK;
}

/* Checks e and sets *n to its number of weights. */
static qkv_status check_explorer(const char *path, const qkv_explorer *e, int64_t *n)
{
    QKV_NEED(path, FN, "path");
    QKV_NEED(e, FN, "e");
    QKV_NEED(e->weights, FN, "weights");
    if (!*path) return qkv_fail(QKV_ERR_ARG, "%s: path is empty", FN);
    const char *names[4] = {"layers", "heads", "queries", "keys"};
    const int64_t dims[4] = {e->layers, e->heads, e->queries, e->keys};
    for (int d = 0; d < 4; d++) QKV_TRY(qkv_plot_check_size(FN, names[d], dims[d], EXPLORER_MAX_DIM));
    QKV_TRY(qkv_plot_check_product(FN, "layers x heads x queries x keys", 4, dims, EXPLORER_MAX_VALUES));
    *n = dims[0] * dims[1] * dims[2] * dims[3];
    QKV_TRY(check_tokens("query_tokens", e->query_tokens, e->queries));
    return check_tokens("key_tokens", e->key_tokens, e->keys);
}

/* ---- the file ----------------------------------------------------------- */

qkv_status qkv_explorer_write(const char *path, const qkv_explorer *e)
{
    int64_t n = 0;
    QKV_TRY(check_explorer(path, e, &n));
    /* Written beside path and renamed over it (plot_internal.h): a reader
     * sees the old page or the new one, never half of one. */
    char *tmp;
    FILE *f;
    QKV_TRY(qkv_plot_tmp_open(FN, path, &tmp, &f));
    put_page(f, e, n);
    return qkv_plot_tmp_commit(FN, path, tmp, f, ferror(f) != 0, errno);
}
