/* test_tokenizer.c: the tokenizers (bytes, chars, qkv's BPE, GPT-2's BPE)
 * and `qkv tokenizer`.
 *   - GPT-2: ids equal to the npm package gpt-3-encoder's encode(), run with
 *     node on the same texts (data/ from tools/get_data.sh gpt2; missing
 *     files are a failure that says how to fetch them, not a skip)
 *   - round trips on seeded random UTF-8 and on hostile input
 *   - BPE training: merges of small corpora worked out by hand, determinism,
 *     the vocabulary limit, save/load
 *   - bad files and bad arguments: errors that name the file and line
 *   - the command: --help, encode | decode through the binary, exit codes */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cli_run.h"
#include "parity.h"

static const char *GPT2_DIR = "data/gpt2";
static const char *GPT2_NPM = "data/npm/node_modules/gpt-3-encoder";
static char tmpdir[64], qkv_bin[4096];

/* tmpdir/name (tests/cli_run.h's cli_path: 16 buffers used in turn). */
static const char *path_in(const char *name) { return cli_path(tmpdir, name); }

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f) fwrite(data, 1, n, f), fclose(f);
}


/* encode then decode: 1 if the text comes back byte for byte */
static int round_trip(const qkv_tokenizer *t, const char *s, size_t n)
{
    int64_t *ids, m;
    char *back;
    size_t bl;
    if (qkv_tokenizer_encode(t, s, n, &ids, &m) != QKV_OK) return 0;
    int ok = qkv_tokenizer_decode(t, ids, m, &back, &bl) == QKV_OK && bl == n && !memcmp(back, s, n);
    for (int64_t i = 0; ok && i < m; i++) ok = ids[i] >= 0 && ids[i] < qkv_tokenizer_vocab_size(t);
    if (ok) free(back);
    free(ids);
    return ok;
}

/* ids of t on s, written "1 2 3" into out */
static void ids_text(const qkv_tokenizer *t, const char *s, char *out, size_t cap)
{
    int64_t *ids, m;
    out[0] = 0;
    if (qkv_tokenizer_encode(t, s, strlen(s), &ids, &m) != QKV_OK) {
        snprintf(out, cap, "error: %s", qkv_last_error());
        return;
    }
    size_t k = 0;
    for (int64_t i = 0; i < m && k < cap; i++) k += (size_t)snprintf(out + k, cap - k, i ? " %" PRId64 : "%" PRId64, ids[i]);
    free(ids);
}

/* ---- random UTF-8 ---- */

static uint64_t rng = 12345;
static uint32_t rnd(uint32_t n)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng >> 33) % n;
}

static int put_utf8(uint32_t c, char *o)
{
    if (c < 0x80) return o[0] = (char)c, 1;
    if (c < 0x800) return o[0] = (char)(0xC0 | c >> 6), o[1] = (char)(0x80 | (c & 63)), 2;
    if (c < 0x10000)
        return o[0] = (char)(0xE0 | c >> 12), o[1] = (char)(0x80 | (c >> 6 & 63)), o[2] = (char)(0x80 | (c & 63)), 3;
    o[0] = (char)(0xF0 | c >> 18), o[1] = (char)(0x80 | (c >> 12 & 63)), o[2] = (char)(0x80 | (c >> 6 & 63));
    o[3] = (char)(0x80 | (c & 63));
    return 4;
}

/* n characters from a mix: ASCII words and spaces, digits, apostrophes,
 * Latin-1, Greek, Cyrillic, CJK, emoji, other planes, control characters */
static size_t random_text(char *o, int n)
{
    static const uint32_t pool[][2] = {{'a', 'z'}, {' ', ' '}, {'0', '9'}, {'\'', '\''}, {'!', '/'},  {'\n', '\n'},
                                       {0xC0, 0xFF}, {0x391, 0x3C9}, {0x410, 0x44F}, {0x4E00, 0x4FFF}, {0x1F600, 0x1F64F},
                                       {0x80, 0x7FF}, {0xE000, 0xFFFD}, {0x10000, 0x10FFFF}, {1, 31}, {0x2000, 0x200A}};
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        const uint32_t *r = pool[rnd(sizeof pool / sizeof *pool)];
        uint32_t c = r[0] + rnd(r[1] - r[0] + 1);
        if (c >= 0xD800 && c <= 0xDFFF) c = 'x';
        k += (size_t)put_utf8(c, o + k);
    }
    return k;
}

/* ---- GPT-2 against gpt-3-encoder ---- */

static const char *const gpt2_texts[] = {
    "In the beginning God created the heaven and the earth.",
    "And the earth was without form, and void; and darkness was upon the face of the deep.\n\n",
    "It's, I'm, you're, we've, they'll, he'd, don't, IT'S, O'Neill's 'quoted' '''",
    "3.14159 + 2,718 = 5.85959; 1234567890 and 12th, 2nd, 1st; x86_64 0xFF",
    "punctuation!!! ... ?!? --- (parens) [brackets] {braces} @#$%^&*~`|\\/",
    "runs   of    spaces     and\ttabs\t\tand trailing   ",
    "   leading spaces",
    "\n\n\nnewlines\r\nwindows\n \n  \n",
    "Café naïve façade résumé Ångström Zoë über straße, ÀÉÎÕÜ ąčęėįšųūž",
    "Ελληνικά: Ἐν ἀρχῇ ἦν ὁ λόγος, καὶ ὁ λόγος ἦν πρὸς τὸν θεόν",
    "Русский текст: В начале сотворил Бог небо и землю.",
    "中文：起初，神创造天地。日本語のテキスト、カタカナ。한국어 텍스트",
    "emoji 😀😃 👍🏽 👨‍👩‍👧 🇫🇷 and ☃ snow ★",
    "int main(void) { return printf(\"%d\\n\", 42) == 3 ? 0 : 1; }\n    if (x) {\n        y++;\n    }\n",
    "<|endoftext|> is text here, not a special token",
    "Mixed123abc ΑΒΓ123 ١٢٣ Ⅻ ½ ² ①",
    "\u00a0non-breaking\u00a0spaces\u2003em\u3000ideographic",
    "a",
    " ",
    "",
    "'s",
    "  'll  ",
};

/* Writes texts as a JSON array of strings. */
static void write_json_texts(const char *path, const char *const *texts, int n, const char *extra, size_t extra_len)
{
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fputc('[', f);
    for (int i = 0; i <= n; i++) {
        const char *s = i < n ? texts[i] : extra;
        size_t len = i < n ? strlen(s) : extra_len;
        if (i == n && !extra) break;
        fputs(i ? ",\"" : "\"", f);
        for (size_t j = 0; j < len; j++) {
            unsigned char c = (unsigned char)s[j];
            if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
            else if (c < 0x20) fprintf(f, "\\u%04x", c);
            else fputc(c, f);
        }
        fputc('"', f);
    }
    fputs("]\n", f);
    fclose(f);
}

static void test_gpt2_parity(const qkv_tokenizer *g)
{
    /* a long text of random words (every class, spaces and newlines), as a
     * stand-in corpus beside the fixed texts */
    char *big = malloc(1 << 20);
    size_t bl = random_text(big, 20000);
    int n = (int)(sizeof gpt2_texts / sizeof *gpt2_texts);
    write_json_texts(path_in("texts.json"), gpt2_texts, n, big, bl);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "node -e 'const e = require(require(\"path\").resolve(process.argv[1])); "
             "for (const t of JSON.parse(require(\"fs\").readFileSync(process.argv[2], \"utf8\"))) "
             "console.log(e.encode(t).join(\" \"))' %s %s > %s 2> %s",
             GPT2_NPM, path_in("texts.json"), path_in("node.out"), path_in("node.err"));
    int rc = system(cmd);
    CHECK(rc == 0, "node with gpt-3-encoder failed (exit %d; node and npm installed? tools/get_data.sh gpt2): %s", rc,
          h_slurp(path_in("node.err"), NULL));
    if (rc != 0) return free(big);
    char *out = h_slurp(path_in("node.out"), NULL), *line = out;
    char *mine = malloc(1 << 22);
    for (int i = 0; i <= n && line && *line; i++) {
        char *e = strchr(line, '\n');
        if (e) *e = 0;
        if (i < n) ids_text(g, gpt2_texts[i], mine, 1 << 22);
        else {
            char *s = malloc(bl + 1);
            memcpy(s, big, bl), s[bl] = 0;
            ids_text(g, s, mine, 1 << 22);
            free(s);
        }
        CHECK(!strcmp(mine, line), "GPT-2 ids differ from gpt-3-encoder's on text %d (%.60s):\n qkv:  %.300s\n node: %.300s", i,
              i < n ? gpt2_texts[i] : "(random)", mine, line);
        line = e ? e + 1 : NULL;
    }
    CHECK(line && !*line, "node printed a different number of lines than texts (%d)", n + 1);
    free(out), free(mine), free(big);

    /* a known case, independent of node: ids of GPT-2's vocabulary */
    char ids[256];
    ids_text(g, "Hello world", ids, sizeof ids);
    CHECK(!strcmp(ids, "15496 995"), "\"Hello world\" -> %s, GPT-2's ids are 15496 995", ids);
    int64_t eot;
    CHECK_OK(qkv_tokenizer_special(g, "<|endoftext|>", &eot));
    CHECK(eot == 50256 && qkv_tokenizer_vocab_size(g) == 50257, "eot %" PRId64 ", vocab %" PRId64, eot,
          qkv_tokenizer_vocab_size(g));
    char *txt;
    size_t tl;
    CHECK_OK(qkv_tokenizer_decode(g, &eot, 1, &txt, &tl));
    CHECK(tl == 13 && !strcmp(txt, "<|endoftext|>"), "decode(50256) = '%s'", txt);
    free(txt);
}

/* ---- round trips ---- */

static const char hostile[][16] = {"", " ", "    ", "\xff", "\xc0\x80", "\xed\xa0\x80", "a\xf0\x9f\x98", "\xfe\xff 's",
                                   "'", "\n", "\t \n ", "\x80\x80\x80"};

static void test_round_trips(qkv_tokenizer *const *toks, int nt)
{
    char *buf = malloc(1 << 16);
    for (int k = 0; k < nt; k++) {
        const qkv_tokenizer *t = toks[k];
        if (!t) continue;
        int bad = 0;
        for (int i = 0; i < 200; i++) {
            size_t n = random_text(buf, (int)rnd(120));
            bad += !round_trip(t, buf, n);
        }
        CHECK(bad == 0, "tokenizer %d (kind %d): %d of 200 random texts did not round trip", k, qkv_tokenizer_kind_of(t), bad);
        if (qkv_tokenizer_kind_of(t) == QKV_TOKENIZER_CHARS) continue;
        for (size_t h = 0; h < sizeof hostile / sizeof *hostile; h++)
            CHECK(round_trip(t, hostile[h], strlen(hostile[h])), "tokenizer %d: hostile text %zu does not round trip", k, h);
        /* random bytes, valid or not */
        for (int i = 0; i < 50; i++) {
            size_t n = rnd(200);
            for (size_t j = 0; j < n; j++) buf[j] = (char)rnd(256);
            bad += !round_trip(t, buf, n);
        }
        CHECK(bad == 0, "tokenizer %d: %d of 50 random byte strings did not round trip", k, bad);
    }
    free(buf);
}

/* ---- BPE training, worked by hand ---- */

static void expect_merges(const qkv_tokenizer *t, const char *want, const char *what)
{
    CHECK_OK(qkv_tokenizer_save(t, path_in("m.bpe")));
    char *got = h_slurp(path_in("m.bpe"), NULL);
    CHECK(got && !strcmp(got, want), "%s: merges file\n%s\nexpected\n%s", what, got ? got : "(none)", want);
    free(got);
}

static void test_bpe_train(void)
{
    qkv_tokenizer *t = NULL;
    /* "ab ab ab abc" -> pieces "ab" x1, " ab" x2, " abc" x1.
     * pairs: (a,b) 1+2+1 = 4, (' ',a) 3, (b,c) 1  -> 256 = a b (97 98)
     * then: (' ',256) 3, (256,c) 1                  -> 257 = ' ' 256 (32 256)
     * then: (257,c) 1 < 2: stop; vocab 256 + 2 + <|endoftext|> = 259 */
    const char *c1 = "ab ab ab abc";
    CHECK_OK(qkv_tokenizer_bpe_train(c1, strlen(c1), 1000, &t));
    expect_merges(t, "qkv-bpe 1\n2\n97 98\n32 256\n", "corpus 1");
    CHECK(qkv_tokenizer_vocab_size(t) == 259, "corpus 1: vocab %" PRId64 ", expected 259", qkv_tokenizer_vocab_size(t));
    char ids[256];
    ids_text(t, "ab abc", ids, sizeof ids);
    CHECK(!strcmp(ids, "256 257 99"), "corpus 1: 'ab abc' -> %s, expected 256 257 99", ids);
    qkv_tokenizer_free(t);

    /* "cd cd ab ab" -> "cd" x1, " cd" x1, " ab" x2.
     * pairs: (c,d) 2, (' ',c) 1, (' ',a) 2, (a,b) 2: three tie at 2, the
     *   smallest left id wins: (32,97) = ' a' -> 256
     * then: (c,d) 2, (' ',c) 1, (256,b) 2: tie, left 99 < 256 -> 257 = c d
     * then: (' ',257) 1, (256,b) 2 -> 258 = 256 98 (' ab')
     * then: (' ',257) 1: stop */
    const char *c2 = "cd cd ab ab";
    CHECK_OK(qkv_tokenizer_bpe_train(c2, strlen(c2), 1000, &t));
    expect_merges(t, "qkv-bpe 1\n3\n32 97\n99 100\n256 98\n", "corpus 2");
    /* the ranks, not the longest match: "ab" has no merge of its own */
    ids_text(t, "ab ab cd", ids, sizeof ids);
    CHECK(!strcmp(ids, "97 98 258 32 257"), "corpus 2: 'ab ab cd' -> %s, expected 97 98 258 32 257", ids);
    int64_t eot;
    CHECK_OK(qkv_tokenizer_special(t, "<|endoftext|>", &eot));
    CHECK(eot == 259, "corpus 2: <|endoftext|> is %" PRId64 ", expected 259", eot);
    qkv_tokenizer_free(t);
    /* the vocabulary limit: 258 ids leave room for one merge */
    CHECK_OK(qkv_tokenizer_bpe_train(c2, strlen(c2), 258, &t));
    expect_merges(t, "qkv-bpe 1\n1\n32 97\n", "corpus 2, vocab 258");
    qkv_tokenizer_free(t);

    /* determinism, and a save/load round trip, on a larger corpus */
    char *corpus = malloc(1 << 18);
    size_t n = 0;
    for (int i = 0; i < 300; i++)
        n += (size_t)sprintf(corpus + n, "%s the %s of %d, ", i % 3 ? "and" : "And", i % 2 ? "earth" : "heaven", i % 17);
    n += random_text(corpus + n, 3000);
    qkv_tokenizer *a = NULL, *b = NULL, *l = NULL;
    CHECK_OK(qkv_tokenizer_bpe_train(corpus, n, 600, &a));
    CHECK_OK(qkv_tokenizer_bpe_train(corpus, n, 600, &b));
    CHECK_OK(qkv_tokenizer_save(a, path_in("a.bpe")));
    CHECK_OK(qkv_tokenizer_save(b, path_in("b.bpe")));
    char *fa = h_slurp(path_in("a.bpe"), NULL), *fb = h_slurp(path_in("b.bpe"), NULL);
    CHECK(fa && fb && !strcmp(fa, fb), "two trainings on one corpus differ");
    CHECK(qkv_tokenizer_vocab_size(a) > 300, "the larger corpus learned only %" PRId64 " ids", qkv_tokenizer_vocab_size(a));
    CHECK_OK(qkv_tokenizer_load(path_in("a.bpe"), &l));
    CHECK(l && qkv_tokenizer_kind_of(l) == QKV_TOKENIZER_BPE && qkv_tokenizer_vocab_size(l) == qkv_tokenizer_vocab_size(a),
          "loaded bpe: wrong kind or size");
    int64_t *ia = NULL, *il = NULL, na = 0, nl = 0;
    CHECK_OK(qkv_tokenizer_encode(a, corpus, n, &ia, &na));
    if (l) CHECK_OK(qkv_tokenizer_encode(l, corpus, n, &il, &nl));
    CHECK(na == nl && na > 0 && !memcmp(ia, il, (size_t)na * sizeof *ia), "loaded bpe encodes differently");
    CHECK(na < (int64_t)n / 2, "bpe compresses the corpus only to %" PRId64 " ids from %zu bytes", na, n);
    if (l) CHECK_OK(qkv_tokenizer_save(l, path_in("c.bpe")));
    char *fc = h_slurp(path_in("c.bpe"), NULL);
    CHECK(fa && fc && !strcmp(fa, fc), "save(load(file)) differs from the file");
    free(ia), free(il), free(fa), free(fb), free(fc), free(corpus);
    qkv_tokenizer_free(a), qkv_tokenizer_free(b), qkv_tokenizer_free(l);
}

static void test_chars(void)
{
    qkv_tokenizer *t = NULL, *l = NULL;
    const char *text = "héllo wörld ✓\n";
    CHECK_OK(qkv_tokenizer_chars_train(text, strlen(text), &t));
    /* distinct, sorted: \n ' ' d h l o r w é ö ✓ = ids 1..11; 0 unknown, 12 <|endoftext|> */
    CHECK(qkv_tokenizer_vocab_size(t) == 13, "chars vocab %" PRId64 ", expected 13", qkv_tokenizer_vocab_size(t));
    CHECK(round_trip(t, text, strlen(text)), "chars: the training text does not round trip");
    char ids[256];
    ids_text(t, "\nhé", ids, sizeof ids);
    CHECK(!strcmp(ids, "1 4 9"), "chars: '\\nhé' -> %s, expected 1 4 9", ids);
    ids_text(t, "hzé", ids, sizeof ids);
    CHECK(!strcmp(ids, "4 0 9"), "chars: unknown 'z' -> %s, expected 4 0 9", ids);
    int64_t bad[] = {4, 0}, *v, n;
    char *s;
    size_t sl;
    CHECK_OK(qkv_tokenizer_decode(t, bad, 2, &s, &sl));
    CHECK(sl == 4 && !memcmp(s, "h\xef\xbf\xbd", 4), "chars: unknown decodes to '%s', expected U+FFFD", s);
    free(s);
    CHECK_ERR(qkv_tokenizer_encode(t, "ab\xff", 3, &v, &n), QKV_ERR_ARG, "invalid UTF-8 at byte 2");
    CHECK_ERR(qkv_tokenizer_chars_train("a\xc3", 2, &l), QKV_ERR_ARG, "invalid UTF-8 at byte 1");
    CHECK_OK(qkv_tokenizer_save(t, path_in("c.chars")));
    CHECK_ERR(qkv_tokenizer_open("chars:", &l), QKV_ERR_ARG, "needs a file");
    char spec[600];
    snprintf(spec, sizeof spec, "chars:%s", path_in("c.chars"));
    CHECK_OK(qkv_tokenizer_open(spec, &l));
    CHECK(l && qkv_tokenizer_vocab_size(l) == 13 && round_trip(l, text, strlen(text)), "chars: load round trip");
    snprintf(spec, sizeof spec, "bpe:%s", path_in("c.chars"));
    qkv_tokenizer *w = NULL;
    CHECK_ERR(qkv_tokenizer_open(spec, &w), QKV_ERR_FORMAT, "is a chars tokenizer file, not bpe");
    qkv_tokenizer_free(t), qkv_tokenizer_free(l);
}

/* ---- bad files and arguments ---- */

static void test_bad_files(void)
{
    qkv_tokenizer *t = (qkv_tokenizer *)1;
    struct {
        const char *text, *needle;
    } bad[] = {
        {"qkv-bpe 1\n2\n97 98\n300 1\n", "bad.tok: line 4: expected a merge"},
        {"qkv-bpe 1\n2\n97 98\n", "bad.tok: line 4: expected a merge"},
        {"qkv-bpe 1\n1\n97 98", "bad.tok: line 3"},
        {"qkv-bpe 1\n-1\n", "bad.tok: line 2"},
        {"qkv-bpe 1\n1\n97 98\nextra\n", "text after the last merge"},
        {"qkv-chars 1\n2\n61\n41\n", "bad.tok: line 4"},
        {"qkv-chars 1\n1\nD800\n", "bad.tok: line 3"},
        {"qkv-chars 1\n99999999999999999999\n", "bad.tok: line 2"},
        {"{\"not\": 1}", "is not a qkv tokenizer file"},
        {"", "is not a qkv tokenizer file"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_file(path_in("bad.tok"), bad[i].text, strlen(bad[i].text));
        CHECK_ERR(qkv_tokenizer_load(path_in("bad.tok"), &t), QKV_ERR_FORMAT, bad[i].needle);
        CHECK(t == NULL, "a failed load left *out set");
    }
    CHECK_ERR(qkv_tokenizer_load(path_in("missing.tok"), &t), QKV_ERR_IO, "missing.tok");

    /* GPT-2's files, damaged */
    size_t ne, nv;
    char *enc = h_slurp("data/gpt2/encoder.json", &ne), *voc = h_slurp("data/gpt2/vocab.bpe", &nv);
    if (!enc || !voc) return free(enc), free(voc);
    mkdir(path_in("g"), 0700);
    write_file(path_in("g/vocab.bpe"), voc, nv);
    write_file(path_in("g/encoder.json"), enc, ne / 2);
    CHECK_ERR(qkv_tokenizer_gpt2_load(path_in("g"), &t), QKV_ERR_FORMAT, "encoder.json is not valid JSON");
    write_file(path_in("g/encoder.json"), "{\"a\": 0}", 8);
    CHECK_ERR(qkv_tokenizer_gpt2_load(path_in("g"), &t), QKV_ERR_FORMAT, "encoder.json: expected an object of 256");
    write_file(path_in("g/encoder.json"), enc, ne);
    const char *line2 = strchr(voc, '\n') + 1;
    char *v2 = malloc(nv + 16);
    size_t h = (size_t)(line2 - voc);
    memcpy(v2, voc, h);
    memcpy(v2 + h, "\xc4\xa0t-t\n", 6); /* "Ġt-t": one token, no space */
    memcpy(v2 + h + 6, line2, nv - h);
    write_file(path_in("g/vocab.bpe"), v2, nv + 6);
    CHECK_ERR(qkv_tokenizer_gpt2_load(path_in("g"), &t), QKV_ERR_FORMAT, "vocab.bpe: line 2: expected 'A B'");
    memcpy(v2 + h, "zz\xe2\x82\xacq q\n", 8); /* a character outside GPT-2's byte alphabet */
    memcpy(v2 + h + 8, line2, nv - h);
    write_file(path_in("g/vocab.bpe"), v2, nv + 8);
    CHECK_ERR(qkv_tokenizer_gpt2_load(path_in("g"), &t), QKV_ERR_FORMAT, "vocab.bpe: line 2");
    write_file(path_in("g/vocab.bpe"), voc, nv - 3); /* truncated: no newline at the end */
    CHECK_ERR(qkv_tokenizer_gpt2_load(path_in("g"), &t), QKV_ERR_FORMAT, "vocab.bpe: expected a first line");
    CHECK_ERR(qkv_tokenizer_gpt2_load(path_in("nothere"), &t), QKV_ERR_IO, "nothere/encoder.json");
    free(v2), free(enc), free(voc);
}

/* GPT-2's format on a small vocabulary (tests/fuzz/corpus/fuzz_gpt2/small:
 * encoder.json, a NUL, vocab.bpe; the 256 byte tokens and 4 merges), so it
 * runs without data/gpt2. A merge line whose left token is outside the
 * byte alphabet and whose right one is in it used to read the byte before
 * the line's buffer (found by tests/fuzz/fuzz_gpt2.c; ASan saw it). */
static void test_gpt2_small(void)
{
    size_t n;
    char *all = h_slurp("tests/fuzz/corpus/fuzz_gpt2/small", &n);
    CHECK(all != NULL, "tests/fuzz/corpus/fuzz_gpt2/small is missing");
    if (!all) return;
    size_t ne = strlen(all);
    mkdir(path_in("s"), 0700);
    write_file(path_in("s/encoder.json"), all, ne);
    write_file(path_in("s/vocab.bpe"), all + ne + 1, n - ne - 1);
    qkv_tokenizer *t = NULL;
    CHECK_OK(qkv_tokenizer_gpt2_load(path_in("s"), &t));
    int64_t *ids = NULL, k = 0;
    if (t) CHECK_OK(qkv_tokenizer_encode(t, " the", 4, &ids, &k));
    CHECK(k == 1 && ids && ids[0] == 258, "' the' is not the one merged token 258 (%lld ids)", (long long)k);
    free(ids), qkv_tokenizer_free(t);
    const char *bad[] = {"#version: 0.2\nzz\xe2\x82\xacq q\n", "#version: 0.2\n\xc4\xa0 \xe2\x82\xac\n",
                         "#version: 0.2\n\xe2\x82\xac \xe2\x82\xac\n"};
    for (int i = 0; i < 3; i++) {
        write_file(path_in("s/vocab.bpe"), bad[i], strlen(bad[i]));
        t = (qkv_tokenizer *)1;
        CHECK_ERR(qkv_tokenizer_gpt2_load(path_in("s"), &t), QKV_ERR_FORMAT, "vocab.bpe: line 2: expected 'A B'");
        CHECK(t == NULL, "a failed load left *out set");
    }
    free(all);
}

static void test_bad_args(const qkv_tokenizer *g)
{
    qkv_tokenizer *t = NULL;
    int64_t *ids, n, id = 0;
    char *s;
    size_t sl;
    CHECK_ERR(qkv_tokenizer_bytes_new(NULL), QKV_ERR_ARG, "out is NULL");
    CHECK_ERR(qkv_tokenizer_bpe_train("ab", 2, 256, &t), QKV_ERR_ARG, "vocab_size is 256");
    CHECK_ERR(qkv_tokenizer_chars_train("", 0, &t), QKV_ERR_ARG, "the text is empty");
    CHECK_ERR(qkv_tokenizer_encode(NULL, "a", 1, &ids, &n), QKV_ERR_ARG, "t is NULL");
    CHECK_ERR(qkv_tokenizer_open("sentencepiece:x", &t), QKV_ERR_ARG, "is not bytes, chars:FILE");
    CHECK_ERR(qkv_tokenizer_open("bpe:", &t), QKV_ERR_ARG, "needs a file");
    CHECK_OK(qkv_tokenizer_bytes_new(&t));
    CHECK_ERR(qkv_tokenizer_special(t, "<|endoftext|>", &id), QKV_ERR_NOTFOUND, "no special token");
    int64_t out_of_range[] = {65, 256};
    CHECK_ERR(qkv_tokenizer_decode(t, out_of_range, 2, &s, &sl), QKV_ERR_ARG, "ids[1] = 256 is out of range (vocab size 256)");
    int64_t neg = -1;
    CHECK_ERR(qkv_tokenizer_decode(t, &neg, 1, &s, &sl), QKV_ERR_ARG, "ids[0] = -1");
    CHECK_ERR(qkv_tokenizer_save(t, path_in("x")), QKV_ERR_ARG, "only chars, bpe and words");
    CHECK_OK(qkv_tokenizer_encode(t, NULL, 0, &ids, &n));
    CHECK(n == 0 && ids == NULL, "empty text: %" PRId64 " ids", n);
    qkv_tokenizer_free(t);
    qkv_tokenizer_free(NULL);
    if (g) {
        int64_t big = 50257;
        CHECK_ERR(qkv_tokenizer_decode(g, &big, 1, &s, &sl), QKV_ERR_ARG, "out of range (vocab size 50257)");
    }
}

/* ---- the command ---- */

static int sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_cli(int have_gpt2)
{
    const char *q = qkv_bin;
    char out[512], err[512];
    snprintf(out, sizeof out, "%s", path_in("cli.out"));
    snprintf(err, sizeof err, "%s", path_in("cli.err"));
    CHECK(sh("%s tokenizer --help > %s 2> %s", q, out, err) == 0, "qkv tokenizer --help: not exit 0");
    char *o = h_slurp(out, NULL);
    CHECK(o && strstr(o, "usage: qkv tokenizer train") && strstr(o, "gpt2:DIR") && strstr(o, "-h, --help"),
          "qkv tokenizer --help: %s", o ? o : "");
    free(o);
    CHECK(sh("%s help tokenizer > %s 2> %s", q, out, err) == 0, "qkv help tokenizer: not exit 0");
    CHECK(sh("%s tokenizer frob > %s 2> %s", q, out, err) == 2, "qkv tokenizer frob: not exit 2");
    CHECK(sh("%s tokenizer encode > %s 2> %s", q, out, err) == 2, "encode without --tokenizer: not exit 2");
    o = h_slurp(err, NULL);
    CHECK(o && strstr(o, "--tokenizer SPEC is needed"), "encode without --tokenizer: %s", o ? o : "");
    free(o);
    CHECK(sh("%s tokenizer train --vocab-size 12 %s -o %s > %s 2> %s", q, out, path_in("x.bpe"), out, err) == 2,
          "--vocab-size 12: not exit 2");
    CHECK(sh("%s tokenizer encode -t bpe:%s < /dev/null > %s 2> %s", q, path_in("nothere"), out, err) == 1,
          "a missing tokenizer file: not exit 1");

    /* train, encode, decode: the text comes back */
    char text[1 << 14];
    size_t n = 0;
    for (int i = 0; i < 40; i++) n += (size_t)sprintf(text + n, "line %d: In the beginning, ünïcödé ✓ 'tis\n", i);
    n += (size_t)sprintf(text + n, "\n   \nthe end\n");
    write_file(path_in("corpus.txt"), text, n);
    CHECK(sh("%s tokenizer train --vocab-size 300 %s -o %s 2> %s", q, path_in("corpus.txt"), path_in("c.bpe"), err) == 0,
          "qkv tokenizer train: not exit 0");
    CHECK(sh("%s tokenizer train --type chars %s -o %s 2> %s", q, path_in("corpus.txt"), path_in("c.chars"), err) == 0,
          "qkv tokenizer train --type chars: not exit 0");
    char specs[4][600];
    snprintf(specs[0], 600, "bytes");
    snprintf(specs[1], 600, "bpe:%s", path_in("c.bpe"));
    snprintf(specs[2], 600, "chars:%s", path_in("c.chars"));
    snprintf(specs[3], 600, "gpt2:%s", GPT2_DIR);
    for (int k = 0; k < (have_gpt2 ? 4 : 3); k++) {
        int rc = sh("%s tokenizer encode --tokenizer %s %s > %s 2> %s && %s tokenizer decode --tokenizer %s < %s > %s 2>> %s", q,
                    specs[k], path_in("corpus.txt"), path_in("ids.txt"), err, q, specs[k], path_in("ids.txt"),
                    path_in("back.txt"), err);
        size_t bl;
        char *back = h_slurp(path_in("back.txt"), &bl), *e = h_slurp(err, NULL);
        CHECK(rc == 0 && back && bl == n && !memcmp(back, text, n), "qkv tokenizer encode|decode with %s: exit %d, %s",
              specs[k], rc, e ? e : "");
        free(back), free(e);
    }
    /* ids the line count of the text, and bad ids refused */
    write_file(path_in("bad.ids"), "1 2 x\n", 6);
    CHECK(sh("%s tokenizer decode -t bytes %s > %s 2> %s", q, path_in("bad.ids"), out, err) == 1, "bad ids: not exit 1");
    o = h_slurp(err, NULL);
    CHECK(o && strstr(o, "line 1: expected ids"), "bad ids: %s", o ? o : "");
    free(o);
    write_file(path_in("bad.ids"), "1 2\n300\n", 8);
    CHECK(sh("%s tokenizer decode -t bytes %s > %s 2> %s", q, path_in("bad.ids"), out, err) == 1, "id 300: not exit 1");
    o = h_slurp(err, NULL);
    CHECK(o && strstr(o, "line 2:") && strstr(o, "out of range"), "id 300: %s", o ? o : "");
    free(o);
}

int main(int argc, char **argv)
{
    (void)argc;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/qkv_tok_XXXXXX");
    if (!mkdtemp(tmpdir)) return fprintf(stderr, "cannot make a temporary folder\n"), 1;
    const char *slash = strrchr(argv[0], '/');
    snprintf(qkv_bin, sizeof qkv_bin, "%.*s/../qkv", slash ? (int)(slash - argv[0]) : 1, slash ? argv[0] : ".");

    qkv_tokenizer *g = NULL;
    char probe[512];
    snprintf(probe, sizeof probe, "%s/Encoder.js", GPT2_NPM);
    int have = access("data/gpt2/encoder.json", R_OK) == 0 && access("data/gpt2/vocab.bpe", R_OK) == 0 &&
               access(probe, R_OK) == 0;
    CHECK(have, "GPT-2's files are missing (data/gpt2/encoder.json, vocab.bpe and %s): run tools/get_data.sh gpt2 "
                "(tools/setup.sh --test does) from the repository's root", GPT2_NPM);
    if (have) {
        CHECK_OK(qkv_tokenizer_gpt2_load(GPT2_DIR, &g));
        if (g) test_gpt2_parity(g);
    }

    qkv_tokenizer *toks[4] = {NULL, NULL, NULL, g};
    CHECK_OK(qkv_tokenizer_bytes_new(&toks[0]));
    char *corpus = malloc(1 << 16);
    size_t n = random_text(corpus, 3000);
    CHECK_OK(qkv_tokenizer_bpe_train(corpus, n, 400, &toks[1]));
    free(corpus);
    /* chars over every code point (but NUL), so random texts are known */
    char *all = malloc(5 << 20);
    size_t m = 0;
    for (uint32_t c = 1; c < 0x110000; c++)
        if (!(c >= 0xD800 && c <= 0xDFFF)) m += (size_t)put_utf8(c, all + m);
    CHECK_OK(qkv_tokenizer_chars_train(all, m, &toks[2]));
    free(all);
    test_round_trips(toks, 4);
    test_bpe_train();
    test_chars();
    test_bad_files();
    test_gpt2_small();
    test_bad_args(g);
    test_cli(have);
    for (int k = 0; k < 4; k++) qkv_tokenizer_free(toks[k]);
    sh("rm -rf %s", tmpdir);
    return h_finish("test_tokenizer");
}
