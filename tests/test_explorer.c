/* test_explorer.c: the attention explorer (qkv_explorer_write) in a real
 * browser. Each page is opened in Debian's chromium, headless, at
 * file://...#selftest: the page checks itself through its own DOM (the
 * layers and heads in its selectors, the cells and lines drawn for every
 * view, every token shown as text, hovers in both views, "no value" for
 * NaN, nothing injected ran) and writes the results as JSON into
 * <pre id="selftest">, which --dump-dom prints and this test reads. The
 * dumped DOM is also searched for every token as serialised text. A
 * screenshot is saved (and copied to $QKV_EXPLORER_SCREENSHOT when set:
 * docs/img/explorer.png is made that way). Without chromium this test
 * fails: it is not skipped.
 *
 * The C side: argument errors, an unwritable path, and the bytes of the
 * written file (valid UTF-8, no raw "</script>" from a token, exactly the
 * page's own three scripts). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, stpcpy */
#include <dirent.h>
#include <unistd.h>
#include "parity.h"
#include "io/json.h"
#include "qkv/plot.h"

static char dir[] = "/tmp/qkv_explorer_XXXXXX";
static char chromium[512];
static int runs; /* chromium runs so far: each gets a fresh profile */


/* $QKV_CHROMIUM, or chromium / chromium-browser on PATH. */
static int find_chromium(void)
{
    const char *env = getenv("QKV_CHROMIUM");
    if (env && *env) {
        snprintf(chromium, sizeof chromium, "%s", env);
        return access(chromium, X_OK) == 0;
    }
    const char *path = getenv("PATH");
    const char *names[2] = {"chromium", "chromium-browser"};
    for (int k = 0; k < 2 && path; k++)
        for (const char *p = path; *p;) {
            size_t len = strcspn(p, ":");
            snprintf(chromium, sizeof chromium, "%.*s/%s", (int)len, p, names[k]);
            if (len && access(chromium, X_OK) == 0) return 1;
            p += len + (p[len] == ':');
        }
    return 0;
}

/* Runs headless chromium on file://page plus fragment with the extra
 * arguments, stdout into out (NULL: discarded); returns system()'s status. */
static int browse(const char *extra, const char *page, const char *fragment, const char *out)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "timeout 60 '%s' --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
             "--disable-background-networking --disable-component-update --disable-sync "
             "--hide-scrollbars --user-data-dir='%s/profile%d' --virtual-time-budget=5000 %s "
             "'file://%s%s' >'%s' 2>/dev/null",
             chromium, dir, runs++, extra, page, fragment, out ? out : "/dev/null");
    return system(cmd);
}

/* The self-check's JSON from a dumped DOM: the text of <pre id="selftest">
 * with the serialiser's entities decoded. NULL if absent or not JSON. */
static json_value *selftest_of(const char *dom)
{
    const char *open = "<pre id=\"selftest\">", *p = NULL;
    for (const char *s = dom; s && (s = strstr(s, open)) != NULL; s++) p = s; /* the last one */
    const char *end = p ? strstr(p, "</pre>") : NULL;
    if (!end) return NULL;
    p += strlen(open);
    char *text = malloc((size_t)(end - p) + 1), *q = text;
    static const char *const ent[3][2] = {{"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"}};
    while (text && p < end) {
        int k = 0;
        while (k < 3 && strncmp(p, ent[k][0], strlen(ent[k][0]))) k++;
        if (k < 3) *q++ = ent[k][1][0], p += strlen(ent[k][0]);
        else *q++ = *p++;
    }
    json_value *v = NULL;
    char err[128];
    if (text && json_parse(text, (size_t)(q - text), NULL, &v, NULL, err, sizeof err) != JSON_OK) {
        fprintf(stderr, "self-check is not JSON (%s): %.*s\n", err, (int)(q - text), text);
        v = NULL;
    }
    free(text);
    return v;
}

static const json_value *member(const json_value *o, const char *key)
{
    for (size_t i = 0; o && o->type == JSON_OBJECT && i < o->u.obj.n; i++)
        if (!strcmp(o->u.obj.items[i].key, key)) return &o->u.obj.items[i].val;
    return NULL;
}

/* A count from the self-check (-1 if missing or not an integer). */
static int64_t count(const json_value *o, const char *key)
{
    const json_value *v = member(o, key);
    if (!v || v->type != JSON_NUMBER || !v->u.num.integral || v->u.num.big) return -1;
    return v->u.num.neg ? -(int64_t)v->u.num.mag : (int64_t)v->u.num.mag;
}

static int is_true(const json_value *o, const char *key)
{
    const json_value *v = member(o, key);
    return v && v->type == JSON_TRUE;
}

/* Whether the dumped DOM holds token t as the text of an SVG <text>
 * element, as the serialiser writes text (&, <, > as entities). */
static int shown_as_text(const char *dom, const char *t)
{
    char *want = malloc(strlen(t) * 5 + 16), *q = want;
    if (!want) return 0;
    *q++ = '>';
    for (; *t; t++) {
        const char *ent = *t == '&' ? "&amp;" : *t == '<' ? "&lt;" : *t == '>' ? "&gt;" : NULL;
        if (ent) q = stpcpy(q, ent);
        else *q++ = *t;
    }
    strcpy(q, "</text>");
    int found = strstr(dom, want) != NULL;
    free(want);
    return found;
}

/* Files in folder d named prefix.something (a temporary file left behind). */
static int leftovers(const char *d, const char *prefix)
{
    DIR *dd = opendir(d);
    int n = 0;
    size_t len = strlen(prefix);
    for (struct dirent *x; dd && (x = readdir(dd)) != NULL;)
        n += !strncmp(x->d_name, prefix, len) && x->d_name[len] == '.';
    if (dd) closedir(dd);
    return n;
}

static int occurrences(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}

/* Whether the JSON array a holds exactly the strings toks (a token that is
 * not UTF-8 must come back as valid UTF-8 with U+FFFD in it). */
static int same_tokens(const json_value *a, const char *const *toks, int64_t n)
{
    if (!a || a->type != JSON_ARRAY || a->u.arr.n != (size_t)n) return 0;
    for (int64_t i = 0; i < n; i++) {
        const json_value *v = &a->u.arr.items[i];
        int valid = json_utf8_valid(toks[i], strlen(toks[i]));
        if (v->type != JSON_STRING || (valid ? strcmp(v->u.str.s, toks[i]) != 0
                                             : strstr(v->u.str.s, "\xef\xbf\xbd") == NULL))
            return 0;
    }
    return 1;
}

/* The data inside the page, read back with qkv's strict JSON reader: the
 * sizes, the tokens and every weight (null where it is not finite). */
static void check_data(const char *name, const char *html, const qkv_explorer *e)
{
    const char *open = "<script type=\"application/json\" id=\"qkv-data\">";
    const char *p = strstr(html, open), *end = p ? strstr(p, "</script>") : NULL;
    json_value *d = NULL;
    char err[128] = "no data script";
    if (end) {
        p += strlen(open);
        if (json_parse(p, (size_t)(end - p), NULL, &d, NULL, err, sizeof err) != JSON_OK) d = NULL;
    }
    CHECK(d != NULL, "%s: the page's data is strict JSON (%s)", name, d ? "" : err);
    if (!d) return;
    CHECK(count(d, "layers") == e->layers && count(d, "heads") == e->heads, "%s: sizes in the data", name);
    CHECK(same_tokens(member(d, "queries"), e->query_tokens, e->queries) &&
              same_tokens(member(d, "keys"), e->key_tokens, e->keys),
          "%s: the tokens read back as written", name);
    const json_value *w = member(d, "weights");
    int64_t n = e->layers * e->heads * e->queries * e->keys, bad = 0;
    CHECK(w && w->type == JSON_ARRAY && w->u.arr.n == (size_t)n, "%s: %lld weights in the data", name, (long long)n);
    for (int64_t i = 0; w && w->type == JSON_ARRAY && i < n && (size_t)i < w->u.arr.n; i++) {
        const json_value *v = &w->u.arr.items[i];
        if (!isfinite(e->weights[i])) bad += v->type != JSON_NULL;
        else if (v->type != JSON_NUMBER) bad++;
        else {
            char num[64];
            snprintf(num, sizeof num, "%.*s", (int)sizeof num - 1, p + v->pos);
            bad += fabs(strtod(num, NULL) - e->weights[i]) > 1e-6;
        }
    }
    CHECK(bad == 0, "%s: every weight reads back (%lld differ; null for NaN and infinity)", name, (long long)bad);
    json_free(d);
}

/* Writes e as name.html, checks its bytes, opens it in chromium and checks
 * what the page reports about itself. Returns the page's path. */
static const char *check_page(const char *name, const qkv_explorer *e, int has_nan)
{
    static char page[256];
    char out[256];
    snprintf(page, sizeof page, "%s/%s.html", dir, name);
    snprintf(out, sizeof out, "%s/%s.dom", dir, name);
    CHECK_OK(qkv_explorer_write(page, e));
    CHECK(leftovers(dir, strrchr(page, '/') + 1) == 0, "%s: no temporary file left", name);
    size_t len = 0;
    char *html = h_slurp(page, &len);
    CHECK(html && len > 1000, "%s: the page was written", name);
    if (!html) return page;
    CHECK(json_utf8_valid(html, len), "%s: the page is valid UTF-8", name);
    CHECK(occurrences(html, "<script") == 3 && occurrences(html, "</script") == 3,
          "%s: only the page's own three scripts (%d opened, %d closed)", name,
          occurrences(html, "<script"), occurrences(html, "</script"));
    CHECK(!strstr(html, "<img") && !strstr(html, "<link") && !strstr(html, "<iframe") &&
              strstr(html, "Content-Security-Policy\" content=\"default-src 'none';"),
          "%s: no markup from the data; the page may fetch nothing", name);
    check_data(name, html, e);
    free(html);

    if (!*chromium) return page;
    CHECK(browse("--dump-dom", page, "#selftest", out) == 0, "%s: chromium ran (%s)", name, chromium);
    char *dom = h_slurp(out, NULL);
    json_value *r = selftest_of(dom);
    CHECK(r != NULL, "%s: the page wrote its self-check (dump in %s)", name, out);
    if (r) {
        const json_value *errors = member(r, "errors");
        CHECK(errors && errors->type == JSON_ARRAY && errors->u.arr.n == 0, "%s: the self-check raised no error%s%s",
              name, errors && errors->u.arr.n ? ": " : "",
              errors && errors->u.arr.n && errors->u.arr.items[0].type == JSON_STRING ? errors->u.arr.items[0].u.str.s : "");
        CHECK(count(r, "layers") == e->layers, "%s: %lld layers in the selector, %lld in the data", name,
              (long long)count(r, "layers"), (long long)e->layers);
        CHECK(count(r, "heads") == e->heads && is_true(r, "average"),
              "%s: %lld heads and the average in the selector, %lld in the data", name,
              (long long)count(r, "heads"), (long long)e->heads);
        CHECK(count(r, "views") == e->layers * (e->heads + 1), "%s: every layer and head viewed (%lld)", name,
              (long long)count(r, "views"));
        CHECK(is_true(r, "cells_ok") && is_true(r, "lines_ok"),
              "%s: every view draws queries x keys cells and lines", name);
        CHECK(is_true(r, "tokens_ok"), "%s: every token label present as text, in order, in both views", name);
        CHECK(count(r, "hover_lines") == e->keys && is_true(r, "hover_ok"),
              "%s: hovering a query keeps exactly its %lld lines, highlighted (got %lld)", name,
              (long long)e->keys, (long long)count(r, "hover_lines"));
        CHECK(is_true(r, "restore_ok"), "%s: leaving the token brings every line back", name);
        CHECK(is_true(r, "key_hover_ok"), "%s: hovering a key keeps exactly its lines", name);
        CHECK(is_true(r, "tooltip_ok"), "%s: hovering a cell shows both tokens and the weight", name);
        CHECK(count(r, "alerts") == 0 && count(r, "foreign") == 0 && count(r, "scripts") == 3,
              "%s: nothing injected ran (%lld alert calls, %lld foreign elements, %lld scripts)", name,
              (long long)count(r, "alerts"), (long long)count(r, "foreign"), (long long)count(r, "scripts"));
        if (has_nan)
            CHECK(count(r, "nan_cells") > 0 && is_true(r, "nan_tooltip_ok") && is_true(r, "nan_note_ok"),
                  "%s: a NaN weight is drawn hatched with a note, its tooltip says \"no value\"", name);
        else
            CHECK(count(r, "nan_cells") == 0, "%s: no cell without a value", name);
        int all = 1;
        for (int s = 0; s < 2; s++)
            for (int64_t i = 0; i < (s ? e->keys : e->queries); i++) {
                const char *t = (s ? e->key_tokens : e->query_tokens)[i];
                if (json_utf8_valid(t, strlen(t)) && !shown_as_text(dom, t)) {
                    fprintf(stderr, "%s: token \"%s\" is not in the DOM as text\n", name, t);
                    all = 0;
                }
            }
        CHECK(all, "%s: the dumped DOM holds every token as text", name);
        json_free(r);
    }
    free(dom);
    return page;
}

/* Row-stochastic weights with a pattern per head: scores softmaxed. */
static void attention(float *w, int64_t layers, int64_t heads, int64_t q, int64_t k)
{
    for (int64_t l = 0; l < layers; l++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < q; i++) {
                float *row = w + ((l * heads + h) * q + i) * k;
                double sum = 0;
                for (int64_t j = 0; j < k; j++) {
                    int64_t jj = (h + l) % 3 == 0 ? i - 1 : (h + l) % 3 == 1 ? i : 0; /* previous, same, first */
                    double s = (j == jj ? 3.0 : 0.0) + 0.6 * sin((double)(7 * i + 3 * j + 5 * h + 11 * l));
                    row[j] = (float)exp(s);
                    sum += row[j];
                }
                for (int64_t j = 0; j < k; j++) row[j] = (float)(row[j] / sum);
            }
}

static void copy_file(const char *from, const char *to)
{
    size_t n = 0;
    char *b = h_slurp(from, &n);
    FILE *f = b ? fopen(to, "wb") : NULL;
    CHECK(f && fwrite(b, 1, n, f) == n && fclose(f) == 0, "screenshot copied to %s", to);
    free(b);
}

int main(void)
{
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    if (!find_chromium()) {
        *chromium = '\0';
        CHECK(0, "chromium not found: run tools/setup.sh --test (the explorer is tested in a browser)");
    }

    /* A sentence: 2 layers x 3 heads of self-attention. */
    const char *sent[6] = {"the", "cat", "sat", "on", "the", "mat"};
    float w[2 * 3 * 6 * 6];
    attention(w, 2, 3, 6, 6);
    qkv_explorer e = {w, 2, 3, 6, 6, sent, sent, "The cat sat on the mat"};
    const char *page = check_page("self", &e, 0);

    /* A screenshot of it, as the README shows it. */
    char shot[300], arg[400];
    snprintf(shot, sizeof shot, "%s/explorer.png", dir);
    snprintf(arg, sizeof arg, "--screenshot='%s' --window-size=1200,620", shot);
    if (*chromium) {
        CHECK(browse(arg, page, "", NULL) == 0, "chromium took a screenshot");
        size_t n = 0;
        char *png = h_slurp(shot, &n);
        CHECK(png && n > 10000 && !memcmp(png, "\x89PNG\r\n\x1a\n", 8), "the screenshot is a PNG (%zu bytes)", n);
        free(png);
        const char *keep = getenv("QKV_EXPLORER_SCREENSHOT");
        if (keep && *keep) copy_file(shot, keep);
    }

    /* Cross-attention, the notes' alignment: French queries over English keys. */
    const char *fr[4] = {"il", "a", "m'", "entarté"}, *en[6] = {"he", "hit", "me", "with", "a", "pie"};
    float wx[1 * 2 * 4 * 6];
    attention(wx, 1, 2, 4, 6);
    qkv_explorer x = {wx, 1, 2, 4, 6, fr, en, NULL};
    check_page("cross", &x, 0);

    /* Hostile and unusual tokens, a bad byte, and weights without a value. */
    const char *bad[7] = {"</script><script>alert(1)</script>", "\"><img src=x onerror=alert(1)>",
                          "é", "中文", "🙂", "a\xe2\x80\xa8" "b<!--", "caf\xff\xfe"};
    float wb[1 * 2 * 7 * 7];
    attention(wb, 1, 2, 7, 7);
    wb[3] = NAN;
    wb[7 * 7 + 10] = INFINITY;
    qkv_explorer b = {wb, 1, 2, 7, 7, bad, bad, "<b>bold?</b> & \"quoted\""};
    page = check_page("hostile", &b, 1);
    char *html = h_slurp(page, NULL);
    CHECK(html && !strstr(html, "</script><script>alert") && strstr(html, "\\u003c/script\\u003e\\u003cscript\\u003e"),
          "a token's </script> is escaped inside the data");
    CHECK(html && !strstr(html, "\xe2\x80\xa8") && strstr(html, "\\u2028"), "U+2028 is escaped");
    CHECK(html && strstr(html, "\"caf\\ufffd\\ufffd\""), "bytes that are not UTF-8 become U+FFFD");
    free(html);

    /* Bad arguments: each names what is wrong. */
    char path[300];
    snprintf(path, sizeof path, "%s/bad.html", dir);
    qkv_explorer t = e;
    CHECK_ERR(qkv_explorer_write(NULL, &e), QKV_ERR_ARG, "qkv_explorer_write: path is NULL");
    CHECK_ERR(qkv_explorer_write(path, NULL), QKV_ERR_ARG, "qkv_explorer_write: e is NULL");
    CHECK_ERR(qkv_explorer_write("", &e), QKV_ERR_ARG, "path is empty");
    t.weights = NULL;
    CHECK_ERR(qkv_explorer_write(path, &t), QKV_ERR_ARG, "weights is NULL");
    t = e, t.layers = 0;
    CHECK_ERR(qkv_explorer_write(path, &t), QKV_ERR_ARG, "qkv_explorer_write: layers is 0, expected 1 to 4096");
    t = e, t.heads = -3;
    CHECK_ERR(qkv_explorer_write(path, &t), QKV_ERR_ARG, "heads is -3");
    t = e, t.keys = (int64_t)1 << 40;
    CHECK_ERR(qkv_explorer_write(path, &t), QKV_ERR_ARG, "keys is 1099511627776, expected 1 to 4096");
    t = e, t.layers = t.heads = t.queries = t.keys = 4096;
    CHECK_ERR(qkv_explorer_write(path, &t), QKV_ERR_ARG, "layers x heads x queries x keys: more than 16777216 values");
    t = e, t.query_tokens = NULL;
    CHECK_ERR(qkv_explorer_write(path, &t), QKV_ERR_ARG, "query_tokens is NULL");
    const char *holes[6] = {"a", "b", NULL, "d", "e", "f"};
    t = e, t.key_tokens = holes;
    CHECK_ERR(qkv_explorer_write(path, &t), QKV_ERR_ARG, "key_tokens[2] is NULL");
    CHECK(access(path, F_OK) != 0, "nothing written on a bad argument");
    CHECK_ERR(qkv_explorer_write("/nonexistent-dir/x.html", &e), QKV_ERR_IO,
              "cannot write /nonexistent-dir/x.html");
    char want[300];
    snprintf(want, sizeof want, "cannot write %s: Is a directory", dir);
    CHECK_ERR(qkv_explorer_write(dir, &e), QKV_ERR_IO, want);
    CHECK(leftovers("/tmp", dir + 5) == 0, "no temporary file left after a failed rename");

    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (!getenv("QKV_KEEP_TMP") && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return h_finish("test_explorer");
}
