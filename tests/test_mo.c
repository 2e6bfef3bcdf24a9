/* test_mo.c: the .mo reader (src/data/mo.c).
 *   - files written by tools/mo_oracle.py (Python's struct, from gettext's
 *     description of the format): both byte orders, revisions 0 and 1,
 *     UTF-8 and ISO-8859-1, plurals, contexts, with and without a header
 *     or hash table; the pairs must be the oracle's
 *   - files written by GNU msgfmt (both --endianness) from a .po written
 *     here, against pairs written by hand
 *   - bad files: too short, bad magic, unknown revision, tables and strings
 *     past the end (lengths and offsets near 2^32), an unknown charset,
 *     invalid UTF-8; every truncation and many byte flips of a good file:
 *     an error naming the file, never a crash */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cli_run.h"
#include "harness.h"

static char tmpdir[64];

/* tmpdir/name (tests/cli_run.h's cli_path: 16 buffers used in turn). */
static const char *path_in(const char *name) { return cli_path(tmpdir, name); }

static int write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    size_t w = fwrite(data, 1, n, f);
    return fclose(f) == 0 && w == n;
}

static int unhex(const char *h, size_t n, char *out)
{
    if (n % 2) return 0;
    for (size_t i = 0; i < n / 2; i++) {
        unsigned v;
        if (sscanf(h + 2 * i, "%2x", &v) != 1) return 0;
        out[i] = (char)v;
    }
    out[n / 2] = 0;
    return 1;
}

static void test_oracle(void)
{
    char dir[] = "/tmp/qkv_mo_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp failed");
        return;
    }
    enum { CASES = 60 };
    char cmd[256];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/mo_oracle.py --out %s --seed 1 --cases %d", dir, CASES);
    int rc = system(cmd);
    CHECK(rc == 0, "the oracle failed (exit %d): %s (run the test from the repo root)", rc, cmd);
    int files = 0, pairs = 0;
    for (int k = 0; rc == 0 && k < CASES; k++) {
        char mo_path[600], txt_path[600];
        snprintf(mo_path, sizeof mo_path, "%s/case_%04d.mo", dir, k);
        snprintf(txt_path, sizeof txt_path, "%s/case_%04d.txt", dir, k);
        qkv_mo *mo = NULL;
        qkv_status s = qkv_mo_read(mo_path, &mo);
        CHECK(s == QKV_OK, "case %d: %s", k, qkv_last_error());
        FILE *f = fopen(txt_path, "r");
        CHECK(f != NULL, "case %d: no expected pairs", k);
        if (s != QKV_OK || !f) {
            if (f) fclose(f);
            qkv_mo_free(mo);
            continue;
        }
        char line[8192], want_id[4096], want_str[4096];
        int64_t i = 0;
        while (fgets(line, sizeof line, f)) {
            char *sp = strchr(line, ' '), *nl = strchr(line, '\n');
            const char *id = NULL, *str = NULL;
            int ok = sp && nl && unhex(line, (size_t)(sp - line), want_id) &&
                     unhex(sp + 1, (size_t)(nl - sp - 1), want_str) && qkv_mo_get(mo, i, &id, &str) == QKV_OK;
            CHECK(ok && !strcmp(id, want_id) && !strcmp(str, want_str), "case %d pair %lld: got '%s' -> '%s', want '%s' -> '%s'",
                  k, (long long)i, ok ? id : "?", ok ? str : "?", want_id, want_str);
            i++, pairs++;
        }
        fclose(f);
        CHECK(qkv_mo_count(mo) == i, "case %d: %lld pairs, the oracle has %lld", k, (long long)qkv_mo_count(mo),
              (long long)i);
        files++;
        qkv_mo_free(mo);
        remove(mo_path), remove(txt_path);
    }
    rmdir(dir);
    CHECK(files == CASES, "only %d of %d oracle files checked", files, CASES);
    printf("test_mo: %d oracle files, %d pairs equal\n", files, pairs);
}

/* ---- msgfmt ---- */

static const char PO[] =
    "msgid \"\"\n"
    "msgstr \"\"\n"
    "\"Content-Type: text/plain; charset=UTF-8\\n\"\n"
    "\"Plural-Forms: nplurals=2; plural=(n > 1);\\n\"\n"
    "\n"
    "msgid \"Open file\"\n"
    "msgstr \"Ouvrir le fichier\"\n"
    "\n"
    "msgctxt \"menu\"\n"
    "msgid \"_Save\"\n"
    "msgstr \"_Enregistrer\"\n"
    "\n"
    "msgid \"%d file\"\n"
    "msgid_plural \"%d files\"\n"
    "msgstr[0] \"%d fichier\"\n"
    "msgstr[1] \"%d fichiers\"\n"
    "\n"
    "#, fuzzy\n"
    "msgid \"Fuzzy one\"\n"
    "msgstr \"Pas sûr\"\n"
    "\n"
    "msgid \"Two\\nlines\"\n"
    "msgstr \"Deux\\nlignes\"\n";

/* What msgfmt keeps (no fuzzy entry), in its order (msgids sorted bytewise,
 * the context's "menu\004_Save" after "Two..."). */
static const char *const PO_PAIRS[][2] = {{"%d file", "%d fichier"},
                                          {"Open file", "Ouvrir le fichier"},
                                          {"Two\nlines", "Deux\nlignes"},
                                          {"_Save", "_Enregistrer"}};

static void test_msgfmt(void)
{
    const char *po = path_in("t.po");
    CHECK(write_file(po, PO, sizeof PO - 1), "cannot write %s", po);
    for (int big = 0; big < 2; big++) {
        char cmd[1200];
        const char *mo = path_in(big ? "big.mo" : "little.mo");
        snprintf(cmd, sizeof cmd, "msgfmt --endianness=%s -o %s %s", big ? "big" : "little", mo, po);
        int rc = system(cmd);
        CHECK(rc == 0, "msgfmt failed (is gettext installed? tools/setup.sh --test): %s", cmd);
        if (rc) continue;
        qkv_mo *m = NULL;
        CHECK_OK(qkv_mo_read(mo, &m));
        int64_t n = qkv_mo_count(m), want = sizeof PO_PAIRS / sizeof *PO_PAIRS;
        CHECK(n == want, "%s: %lld pairs, want %lld", mo, (long long)n, (long long)want);
        for (int64_t i = 0; i < n && i < want; i++) {
            const char *id, *str;
            CHECK_OK(qkv_mo_get(m, i, &id, &str));
            CHECK(!strcmp(id, PO_PAIRS[i][0]) && !strcmp(str, PO_PAIRS[i][1]), "%s pair %lld: '%s' -> '%s'", mo,
                  (long long)i, id, str);
        }
        CHECK(m && !strcmp(qkv_mo_charset(m), "UTF-8"), "charset %s", m ? qkv_mo_charset(m) : "?");
        const char *id, *str;
        CHECK_ERR(qkv_mo_get(m, n, &id, &str), QKV_ERR_ARG, "out of range");
        qkv_mo_free(m);
    }
}

/* ---- bad files, built by hand ---- */

static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); } /* little-endian hosts */

/* A good little-endian file: header entry + one pair ("a" -> "b"). */
static size_t good_file(unsigned char *b, const char *header)
{
    size_t hl = strlen(header);
    memset(b, 0, 512);
    put32(b, 0x950412de), put32(b + 4, 0), put32(b + 8, 2), put32(b + 12, 28), put32(b + 16, 44);
    put32(b + 20, 0), put32(b + 24, 60);
    uint32_t d = 60;
    put32(b + 28, 0), put32(b + 32, d);          /* "" */
    put32(b + 36, 1), put32(b + 40, d + 1);      /* "a" */
    put32(b + 44, (uint32_t)hl), put32(b + 48, d + 3);
    put32(b + 52, 1), put32(b + 56, d + 4 + (uint32_t)hl);
    b[d] = 0, b[d + 1] = 'a', b[d + 2] = 0;
    memcpy(b + d + 3, header, hl + 1);
    b[d + 4 + hl] = 'b', b[d + 5 + hl] = 0;
    return d + 6 + hl;
}

static void expect_bad(const unsigned char *b, size_t n, const char *name, const char *needle)
{
    const char *p = path_in(name);
    CHECK(write_file(p, b, n), "cannot write %s", p);
    qkv_mo *m = (qkv_mo *)1;
    qkv_status s = qkv_mo_read(p, &m);
    CHECK(s == QKV_ERR_FORMAT && m == NULL && strstr(qkv_last_error(), p) && strstr(qkv_last_error(), needle),
          "%s: got %s \"%s\", wanted QKV_ERR_FORMAT naming the file and \"%s\"", name, qkv_status_name(s),
          qkv_last_error(), needle);
}

static void test_bad(void)
{
    unsigned char b[512], c[512];
    const char *hdr = "Content-Type: text/plain; charset=UTF-8\n";
    size_t n = good_file(b, hdr);
    {
        const char *p = path_in("good.mo");
        qkv_mo *m = NULL;
        CHECK(write_file(p, b, n), "write");
        CHECK_OK(qkv_mo_read(p, &m));
        const char *id = "", *str = "";
        CHECK(qkv_mo_count(m) == 1 && qkv_mo_get(m, 0, &id, &str) == QKV_OK && !strcmp(id, "a") && !strcmp(str, "b"),
              "the hand-made file: %lld pairs, '%s' -> '%s'", (long long)qkv_mo_count(m), id, str);
        qkv_mo_free(m);
    }
    expect_bad(b, 10, "short.mo", "too short");
    memcpy(c, b, n), put32(c, 0x12345678);
    expect_bad(c, n, "magic.mo", "not a .mo file");
    memcpy(c, b, n), put32(c + 4, 0x00020000);
    expect_bad(c, n, "rev.mo", "revision 2.0");
    memcpy(c, b, n), put32(c + 4, 0x00000002);
    expect_bad(c, n, "minor.mo", "revision 0.2");
    memcpy(c, b, n), put32(c + 8, 0x20000000);
    expect_bad(c, n, "count.mo", "run past the end");
    memcpy(c, b, n), put32(c + 16, 0xFFFFFFF8u);
    expect_bad(c, n, "table.mo", "run past the end");
    memcpy(c, b, n), put32(c + 36, 0xFFFFFFFFu); /* msgid's length near 2^32 */
    expect_bad(c, n, "len.mo", "runs past the end");
    memcpy(c, b, n), put32(c + 40, 0xFFFFFFFFu); /* its offset */
    expect_bad(c, n, "off.mo", "runs past the end");
    memcpy(c, b, n), put32(c + 36, 0x7FFFFFFFu), put32(c + 40, 0x80000002u); /* sum = 2^32 + 1 */
    expect_bad(c, n, "wrap.mo", "runs past the end");
    n = good_file(c, "Content-Type: text/plain; charset=NO-SUCH-CHARSET-42\n");
    expect_bad(c, n, "charset.mo", "charset 'NO-SUCH-CHARSET-42' cannot be converted");
    n = good_file(c, hdr), c[61] = 0xE9; /* "a" -> Latin-1 é in a UTF-8 file */
    expect_bad(c, n, "utf8.mo", "not valid UTF-8");
    /* Latin-1 is converted */
    n = good_file(c, "Content-Type: text/plain; charset=ISO-8859-1\n"), c[61] = 0xE9;
    {
        const char *p = path_in("latin1.mo");
        qkv_mo *m = NULL;
        CHECK(write_file(p, c, n), "write");
        CHECK_OK(qkv_mo_read(p, &m));
        const char *id = "", *str = "";
        CHECK(qkv_mo_get(m, 0, &id, &str) == QKV_OK && !strcmp(id, "\xc3\xa9") && !strcmp(qkv_mo_charset(m), "ISO-8859-1"),
              "Latin-1 'é' read as '%s'", id);
        qkv_mo_free(m);
    }
    /* a msgid that converts to nothing (UTF-7's "++": a shift into base64
     * and no character) is no pair: left out, as the header entry is
     * (found by fuzz_mo: it came back as a pair with an empty msgid) */
    n = good_file(c, "Content-Type: text/plain; charset=UTF-7\n");
    put32(c + 36, 2), c[61] = '+', c[62] = '+'; /* "a" -> "++" (no NUL needed) */
    {
        qkv_mo *m = NULL;
        CHECK_OK(qkv_mo_parse(c, n, "utf7.mo", &m));
        const char *id = "", *str = "";
        CHECK(m && qkv_mo_count(m) == 0, "UTF-7 '+' as the msgid: %lld pairs (the first '%s')",
              m ? (long long)qkv_mo_count(m) : -1LL, m && qkv_mo_get(m, 0, &id, &str) == QKV_OK ? id : "");
        qkv_mo_free(m);
        c[61] = 'a', c[62] = 'b'; /* the same file with "ab": one pair */
        CHECK_OK(qkv_mo_parse(c, n, "utf7a.mo", &m));
        CHECK(m && qkv_mo_count(m) == 1 && qkv_mo_get(m, 0, &id, &str) == QKV_OK && !strcmp(id, "ab"),
              "UTF-7 'ab' as the msgid: %lld pairs", m ? (long long)qkv_mo_count(m) : -1LL);
        qkv_mo_free(m);
    }
    /* every truncation, and byte flips: an error (or a good read), never a crash */
    n = good_file(b, hdr);
    int errors = 0;
    for (size_t k = 0; k < n; k++) {
        qkv_mo *m = NULL;
        qkv_status s = qkv_mo_parse(b, k, "cut.mo", &m);
        errors += s != QKV_OK;
        CHECK(s != QKV_OK ? (m == NULL && strstr(qkv_last_error(), "cut.mo") != NULL) : m != NULL,
              "truncated at %zu: %s", k, qkv_last_error());
        qkv_mo_free(m);
    }
    CHECK(errors == (int)n - 1, "%d of %zu truncations refused (all but the last byte's, the NUL after 'b')", errors, n);
    uint32_t x = 12345;
    for (int t = 0; t < 20000; t++) {
        memcpy(c, b, n);
        for (int f = 0; f < 3; f++) {
            x = x * 1103515245u + 12345u;
            c[(x >> 8) % n] ^= (unsigned char)(1u << ((x >> 4) & 7));
        }
        qkv_mo *m = NULL;
        qkv_status s = qkv_mo_parse(c, n, "flip.mo", &m);
        if (s != QKV_OK) CHECK(m == NULL && qkv_last_error()[0], "flip %d: an error without a message", t);
        for (int64_t i = 0; i < qkv_mo_count(m); i++) {
            const char *id, *str;
            if (qkv_mo_get(m, i, &id, &str) != QKV_OK || strlen(id) > n || strlen(str) > n) CHECK(0, "flip %d: bad pair", t);
        }
        qkv_mo_free(m);
    }
    /* arguments */
    qkv_mo *m = NULL;
    CHECK_ERR(qkv_mo_read(path_in("nothere.mo"), &m), QKV_ERR_IO, "nothere.mo");
    CHECK_ERR(qkv_mo_read(NULL, &m), QKV_ERR_ARG, "path is NULL");
    CHECK_ERR(qkv_mo_read("x", NULL), QKV_ERR_ARG, "out is NULL");
    CHECK_ERR(qkv_mo_parse(NULL, 5, "x", &m), QKV_ERR_ARG, "data is NULL");
    CHECK(qkv_mo_count(NULL) == 0, "count of NULL");
    qkv_mo_free(NULL);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/qkv_motest_XXXXXX");
    if (!mkdtemp(tmpdir)) return fprintf(stderr, "cannot make a temporary folder\n"), 1;
    test_oracle();
    test_msgfmt();
    test_bad();
    h_tmpdir_remove(tmpdir);
    return h_finish("test_mo");
}
