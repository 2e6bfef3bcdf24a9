/* test_translation.c: the English/French data (src/data/translation*.c),
 * the words tokenizer (src/data/tokenizer_words.c) and `qkv data
 * translation`.
 *   - cleaning: each rule on messages written by hand, with the expected
 *     text written by hand
 *   - filters and their counts; the split: by the English side only, the
 *     same whatever order the pairs came in, about 90/5/5; duplicates
 *   - words: pieces (apostrophes, hyphens, numbers, punctuation), the
 *     vocabulary's order, min_freq, max_size, <unk>, save/load, bad files
 *   - the command on .mo files made by msgfmt, with a broken one */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cli_run.h"
#include "parity.h"

static char tmpdir[64], qkv_bin[1024];

/* tmpdir/name (tests/cli_run.h's cli_path: 16 buffers used in turn). */
static const char *path_in(const char *name) { return cli_path(tmpdir, name); }

static int sh(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}


static void test_clean(void)
{
    static const char *const cases[][2] = {
        /* printf and friends */
        {"%s", ""},
        {"Cannot open %s: %s", "Cannot open :"},
        {"%1$d of %2$d", "of"},
        {"[%-10s|%.250s]", "[ | ]"},
        {"size %zu, %lu bytes", "size , bytes"},
        {"100%% done", "100% done"},
        {"%<asm%> statement at %L", "asm statement at"},
        {"%q+#D declared here, %qs used", "declared here, used"},
        {"wrote %<PRIu64> bytes", "wrote bytes"},
        {"Welcome to %PRODUCTNAME %PRODUCTVERSION!", "Welcome to !"},
        {"Page %1 of %2", "Page of"},
        {"50% off", "50% off"},
        /* braces and dollars */
        {"{0} files in {name}", "files in"},
        {"Value $(ARG1) is invalid", "Value is invalid"},
        {"cannot convert $string$ with ${enc}", "cannot convert with"},
        {"There is $1 in $2.", "There is in ."},
        {"Permit '$' in names", "Permit '$' in names"},
        /* accelerators */
        {"&File", "File"},
        {"_Open", "Open"},
        {"~Save", "Save"},
        {"Save _As\xe2\x80\xa6", "Save As\xe2\x80\xa6"},
        {"Sa_ve", "Save"},
        {"Line _2:", "Line 2:"},
        {"\xc3\x89_diter", "\xc3\x89" "diter"},
        {"_\xc3\x89" "diter", "\xc3\x89" "diter"},
        {"foo_bar_baz", "foo_bar_baz"},
        {"Fish && Chips", "Fish && Chips"},
        {"~2 MB", "~2 MB"},
        /* markup and entities */
        {"<b>Bold</b> text", "Bold text"},
        {"<a href=\"https://x.org/?a=1&b=2\">link</a> here", "link here"},
        {"line<br/>break", "line break"},
        {"-o <file>", "-o"},
        {"a < b and c > d", "a < b and c > d"},
        {"AT&amp;T &lt;b&gt; &#233;t&#xE9;", "AT&T <b> \xc3\xa9t\xc3\xa9"},
        /* white space and empty pairs */
        {"  line one\nline two\t end  ", "line one line two end"},
        {"value\\n", "value"},
        {"narrow\xe2\x80\xaf" "nbsp\xc2\xa0here", "narrow nbsp here"},
        {"'%s' not found", "not found"},
        {"Fichier \xc2\xab\xc2\xa0%s\xc2\xa0\xc2\xbb introuvable", "Fichier introuvable"},
        {"\xe2\x80\x9c%s\xe2\x80\x9d (%d)", ""},
        {"<%s>", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *o = NULL;
        CHECK_OK(qkv_translation_clean(cases[i][0], &o));
        CHECK(o && !strcmp(o, cases[i][1]), "clean('%s') = '%s', want '%s'", cases[i][0], o ? o : "?", cases[i][1]);
        free(o);
    }
    char *o;
    CHECK_ERR(qkv_translation_clean(NULL, &o), QKV_ERR_ARG, "text is NULL");
    CHECK_ERR(qkv_translation_clean("x", NULL), QKV_ERR_ARG, "out is NULL");
}

/* The lines of DIR/NAME.tsv, split at the tab: English of each in en[]. */
static int read_split(const char *name, char **text, char **en, char **fr, int max)
{
    *text = h_slurp(path_in(name), NULL);
    int n = 0;
    for (char *p = *text; p && *p && n < max;) {
        char *e = strchr(p, '\n'), *t = strchr(p, '\t');
        if (!e || !t || t > e) return -1;
        *e = 0, *t = 0;
        en[n] = p, fr[n] = t + 1, n++;
        p = e + 1;
    }
    return n;
}

static void test_set(void)
{
    qkv_translation_set *s = NULL;
    qkv_translation_counts c = {0};
    CHECK_OK(qkv_translation_set_new(4, &s));
    CHECK_OK(qkv_translation_add_pair(s, "%s", "x", &c));                /* empty English */
    CHECK_OK(qkv_translation_add_pair(s, "Open", "<b></b>", &c));       /* empty French */
    CHECK_OK(qkv_translation_add_pair(s, "a\x01" "b", "c", &c));        /* control */
    CHECK_OK(qkv_translation_add_pair(s, "ok", "bad \xff", &c));        /* invalid UTF-8 */
    CHECK_OK(qkv_translation_add_pair(s, "File", "file", &c));          /* untranslated */
    CHECK_OK(qkv_translation_add_pair(s, "\xc3\x89t\xc3\xa9", "\xc3\xa9T\xc3\x89", &c)); /* Été / éTÉ */
    CHECK_OK(qkv_translation_add_pair(s, "one two three four five", "un", &c));          /* too long */
    CHECK_OK(qkv_translation_add_pair(s, "yes", "un deux trois quatre cinq", &c));
    CHECK_OK(qkv_translation_add_pair(s, "one two three four", "un deux trois quatre", &c)); /* 4: kept */
    CHECK(c.read == 9 && c.empty == 2 && c.control == 2 && c.untranslated == 2 && c.too_long == 2 && c.kept == 1,
          "counts: read %lld empty %lld control %lld untranslated %lld too long %lld kept %lld", (long long)c.read,
          (long long)c.empty, (long long)c.control, (long long)c.untranslated, (long long)c.too_long, (long long)c.kept);
    qkv_translation_set_free(s);
    CHECK_ERR(qkv_translation_set_new(0, &s), QKV_ERR_ARG, "max_words is 0");

    /* the split: many pairs, added in two orders, with repeats */
    enum { N = 4000 };
    char dirs[2][512];
    for (int order = 0; order < 2; order++) {
        qkv_translation_counts k = {0};
        CHECK_OK(qkv_translation_set_new(12, &s));
        for (int j = 0; j < N; j++) {
            int i = order ? N - 1 - j : j;
            char en[64], fr[64];
            snprintf(en, sizeof en, "message number %d", i / 2); /* each English twice: ... */
            snprintf(fr, sizeof fr, "message num\xc3\xa9ro %d%s", i / 2, i % 4 == 1 ? " bis" : ""); /* ... one French twice */
            CHECK_OK(qkv_translation_add_pair(s, en, fr, &k));
            if (i % 4 == 0) CHECK_OK(qkv_translation_add_pair(s, en, fr, &k)); /* a repeat */
        }
        snprintf(dirs[order], sizeof dirs[order], "%s/split%d", tmpdir, order);
        char cmd[1100];
        snprintf(cmd, sizeof cmd, "mkdir -p %s", dirs[order]);
        CHECK(sh(cmd) == 0, "mkdir");
        CHECK_OK(qkv_translation_write(s, dirs[order], &k));
        qkv_translation_set_free(s);
        /* pairs i and i+1 (i even) share the English; i % 4 == 1 has " bis": so
         * N/2 English sentences; every i % 4 == 0 pair was added twice, and the
         * pairs i % 4 == 2, 3 have the same French: N/4 repeats that way too */
        int64_t total = k.split[0] + k.split[1] + k.split[2];
        CHECK(k.kept == N + N / 4 && k.duplicates == N / 4 + N / 4 && total == N - N / 4,
              "kept %lld, duplicates %lld, written %lld", (long long)k.kept, (long long)k.duplicates, (long long)total);
        CHECK(fabs(k.split[0] / (double)total - 0.90) < 0.03 && fabs(k.split[1] / (double)total - 0.05) < 0.02 &&
                  fabs(k.split[2] / (double)total - 0.05) < 0.02,
              "split %lld/%lld/%lld is not about 90/5/5", (long long)k.split[0], (long long)k.split[1],
              (long long)k.split[2]);
    }
    /* the same files whatever the order; each English in the split its hash names */
    static const char *const names[3] = {"train.tsv", "valid.tsv", "test.tsv"};
    int bad = 0, lines = 0;
    for (int f = 0; f < 3; f++) {
        char a[64], b[64];
        snprintf(a, sizeof a, "split0/%s", names[f]), snprintf(b, sizeof b, "split1/%s", names[f]);
        char *ta = h_slurp(path_in(a), NULL), *tb = h_slurp(path_in(b), NULL);
        CHECK(ta && tb && !strcmp(ta, tb), "%s differs between the two orders", names[f]);
        free(ta), free(tb);
        char *text, **en = malloc(N * sizeof *en), **fr = malloc(N * sizeof *fr);
        int n = read_split(a, &text, en, fr, N);
        CHECK(n >= 0, "%s: a line without a tab", a);
        for (int i = 0; i < n; i++, lines++) bad += qkv_translation_split(en[i]) != f;
        free(text), free(en), free(fr);
    }
    CHECK(bad == 0 && lines == N - N / 4, "%d of %d lines in a split their English does not hash to", bad, lines);
    /* the split function itself: a fixed English text always gives the same split */
    CHECK(qkv_translation_split("Open file") == qkv_translation_split("Open file"), "split is not a function");
    CHECK_ERR(qkv_translation_write(NULL, "x", NULL), QKV_ERR_ARG, "s is NULL");
    CHECK_OK(qkv_translation_set_new(3, &s));
    qkv_translation_counts k = {0};
    CHECK_ERR(qkv_translation_write(s, "/nonexistent/dir", &k), QKV_ERR_IO, "/nonexistent/dir/train.tsv");
    CHECK_ERR(qkv_translation_add_mo(s, "/nonexistent.mo", &k), QKV_ERR_IO, "/nonexistent.mo");
    qkv_translation_set_free(s);
}

/* encode then decode: the pieces joined by spaces */
static void check_pieces(qkv_tokenizer *t, const char *text, const char *want)
{
    int64_t *ids = NULL, n = 0;
    char *out = NULL;
    size_t len = 0;
    CHECK_OK(qkv_tokenizer_encode(t, text, strlen(text), &ids, &n));
    CHECK_OK(qkv_tokenizer_decode(t, ids, n, &out, &len));
    CHECK(out && !strcmp(out, want), "'%s' -> '%s', want '%s'", text, out ? out : "?", want);
    free(ids), free(out);
}

static void test_words(void)
{
    const char *corpus = "L'image est l\xc3\xa0. Mots-cl\xc3\xa9s: 3.14, fin!\n\xc3\x89T\xc3\x89 don't -x- \xc2\xab ok \xc2\xbb\n";
    qkv_words_options o = {.lower = 1, .split_punct = 1, .min_freq = 1, .max_size = 0};
    qkv_tokenizer *t = NULL;
    CHECK_OK(qkv_tokenizer_words_train(corpus, strlen(corpus), &o, &t));
    CHECK(qkv_tokenizer_kind_of(t) == QKV_TOKENIZER_WORDS, "kind");
    check_pieces(t, corpus,
                 "l' image est l\xc3\xa0 . mots-cl\xc3\xa9s : 3.14 , fin ! \xc3\xa9t\xc3\xa9 don' t - x - \xc2\xab ok \xc2\xbb");
    check_pieces(t, "inconnu", "<unk>");
    static const char *const sp[] = {"<pad>", "<bos>", "<eos>", "<unk>"};
    for (int64_t k = 0; k < 4; k++) {
        int64_t id = -1;
        CHECK(qkv_tokenizer_special(t, sp[k], &id) == QKV_OK && id == k, "%s is %lld", sp[k], (long long)id);
    }
    int64_t id;
    CHECK_ERR(qkv_tokenizer_special(t, "<|endoftext|>", &id), QKV_ERR_NOTFOUND, "no special token");
    /* special tokens' text is unknown, not the special */
    int64_t *ids = NULL, n = 0;
    CHECK_OK(qkv_tokenizer_encode(t, "<bos>", 5, &ids, &n));
    CHECK(n >= 1 && ids[0] != 1, "'<bos>' in text encoded as <bos>");
    free(ids);
    qkv_tokenizer_free(t);

    /* the order: most frequent first, ties in byte order; min_freq; max_size */
    const char *c2 = "b a b c b a d";
    o = (qkv_words_options){.lower = 0, .split_punct = 0, .min_freq = 1, .max_size = 0};
    CHECK_OK(qkv_tokenizer_words_train(c2, strlen(c2), &o, &t));
    int64_t *v = NULL;
    CHECK_OK(qkv_tokenizer_encode(t, "b a c d e", 9, &v, &n));
    CHECK(n == 5 && v[0] == 4 && v[1] == 5 && v[2] == 6 && v[3] == 7 && v[4] == 3, "ids %lld %lld %lld %lld %lld",
          (long long)v[0], (long long)v[1], (long long)v[2], (long long)v[3], (long long)v[4]);
    free(v);
    CHECK(qkv_tokenizer_vocab_size(t) == 8, "vocab %lld", (long long)qkv_tokenizer_vocab_size(t));
    /* save, load, the same ids */
    CHECK_OK(qkv_tokenizer_save(t, path_in("w.txt")));
    qkv_tokenizer *u = NULL;
    char spec[600];
    snprintf(spec, sizeof spec, "words:%s", path_in("w.txt"));
    CHECK_OK(qkv_tokenizer_open(spec, &u));
    CHECK_OK(qkv_tokenizer_encode(u, "b a c d e", 9, &v, &n));
    CHECK(u && n == 5 && v[0] == 4 && v[3] == 7 && v[4] == 3 && qkv_tokenizer_vocab_size(u) == 8, "loaded ids differ");
    free(v);
    char *file = h_slurp(path_in("w.txt"), NULL);
    CHECK(file && !strcmp(file, "qkv-words 1\nlower 0\npunct 0\n4\nb\na\nc\nd\n"), "the file: '%s'", file ? file : "?");
    free(file);
    snprintf(spec, sizeof spec, "bpe:%s", path_in("w.txt"));
    qkv_tokenizer *x = NULL;
    CHECK_ERR(qkv_tokenizer_open(spec, &x), QKV_ERR_FORMAT, "is a words tokenizer file, not bpe");
    qkv_tokenizer_free(u), qkv_tokenizer_free(t);
    o.min_freq = 2;
    CHECK_OK(qkv_tokenizer_words_train(c2, strlen(c2), &o, &t));
    CHECK(qkv_tokenizer_vocab_size(t) == 6, "min_freq 2: vocab %lld, want 6 (b a)", (long long)qkv_tokenizer_vocab_size(t));
    qkv_tokenizer_free(t);
    o.min_freq = 1, o.max_size = 5;
    CHECK_OK(qkv_tokenizer_words_train(c2, strlen(c2), &o, &t));
    CHECK(qkv_tokenizer_vocab_size(t) == 5, "max_size 5: vocab %lld", (long long)qkv_tokenizer_vocab_size(t));
    qkv_tokenizer_free(t);
    /* case kept when lower is 0 */
    o = (qkv_words_options){.lower = 0, .split_punct = 0, .min_freq = 1, .max_size = 0};
    CHECK_OK(qkv_tokenizer_words_train("The the", 7, &o, &t));
    CHECK(qkv_tokenizer_vocab_size(t) == 6, "'The the' without lower-casing: vocab %lld", (long long)qkv_tokenizer_vocab_size(t));
    qkv_tokenizer_free(t);
    /* bad arguments and files */
    o.min_freq = 0;
    CHECK_ERR(qkv_tokenizer_words_train("a", 1, &o, &t), QKV_ERR_ARG, "min_freq is 0");
    o.min_freq = 1, o.max_size = 3;
    CHECK_ERR(qkv_tokenizer_words_train("a", 1, &o, &t), QKV_ERR_ARG, "max_size is 3");
    o.max_size = 0;
    CHECK_ERR(qkv_tokenizer_words_train("a\xff", 2, &o, &t), QKV_ERR_ARG, "invalid UTF-8");
    static const char *const bad[][2] = {{"qkv-words 1\nlower 2\npunct 0\n0\n", "line 2"},
                                         {"qkv-words 1\nlower 0\npunct 0\n2\na\na\n", "'a' is there twice"},
                                         {"qkv-words 1\nlower 0\npunct 0\n1\na b\n", "line 5"},
                                         {"qkv-words 1\nlower 0\npunct 0\n2\na\n", "line 6"},
                                         {"qkv-words 1\nlower 0\npunct 0\n1\na\nextra\n", "text after the last word"},
                                         {"qkv-words 1\nlower 0\npunct 0\n1\n<unk>\n", "'<unk>' is there twice"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        FILE *f = fopen(path_in("bad.txt"), "wb");
        if (f) fputs(bad[i][0], f), fclose(f);
        CHECK_ERR(qkv_tokenizer_load(path_in("bad.txt"), &t), QKV_ERR_FORMAT, bad[i][1]);
        CHECK(strstr(qkv_last_error(), "bad.txt") != NULL, "the message does not name the file: %s", qkv_last_error());
    }
}

static void test_cli(void)
{
    static const char po_a[] = "msgid \"\"\nmsgstr \"Content-Type: text/plain; charset=UTF-8\\n\"\n\n"
                               "msgid \"_Open file\"\nmsgstr \"_Ouvrir le fichier\"\n\n"
                               "msgid \"Cannot read %s\"\nmsgstr \"Impossible de lire %s\"\n\n"
                               "msgid \"OK\"\nmsgstr \"OK\"\n";
    static const char po_b[] = "msgid \"\"\nmsgstr \"Content-Type: text/plain; charset=ISO-8859-1\\n\"\n\n"
                               "msgid \"Open file\"\nmsgstr \"Ouvrir le fichier\"\n\n"
                               "msgid \"Delete\"\nmsgstr \"Supprimer\"\n";
    FILE *f = fopen(path_in("a.po"), "w");
    if (f) fputs(po_a, f), fclose(f);
    f = fopen(path_in("b.po"), "w");
    if (f) fputs(po_b, f), fclose(f);
    f = fopen(path_in("broken.mo"), "w");
    if (f) fputs("this is not a gettext catalogue at all", f), fclose(f);
    f = fopen(path_in("list"), "w");
    if (f) fprintf(f, "pa\t%s\npb\t%s\npb\t%s\n", path_in("a.mo"), path_in("b.mo"), path_in("broken.mo")), fclose(f);
    char cmd[16384];
    snprintf(cmd, sizeof cmd,
             "msgfmt -o %s %s && msgfmt -o %s %s && mkdir -p %s && %s data translation -o %s %s > %s 2> %s", path_in("a.mo"),
             path_in("a.po"), path_in("b.mo"), path_in("b.po"), path_in("out"), qkv_bin, path_in("out"), path_in("list"),
             path_in("counts.md"), path_in("err"));
    CHECK(sh(cmd) == 0, "qkv data translation failed: %s", cmd);
    char *counts = h_slurp(path_in("counts.md"), NULL), *err = h_slurp(path_in("err"), NULL);
    CHECK(counts && strstr(counts, "| pa | 1 | 0 | 3 | 2 |") && strstr(counts, "| pb | 2 | 1 | 2 | 2 |"),
          "per-package counts: %s", counts ? counts : "?");
    CHECK(counts && strstr(counts, "| untranslated (equal ignoring case) | 1 | 4 |") &&
              strstr(counts, "| duplicates | 1 | 3 |"),
          "step counts: %s", counts ? counts : "?");
    CHECK(err && strstr(err, "broken.mo") && strstr(err, "not a .mo file"), "the broken file is not reported: %s",
          err ? err : "?");
    free(counts), free(err);
    /* the three pairs across the splits, as cleaned */
    char *all = NULL;
    size_t total = 0;
    static const char *const names[3] = {"out/train.tsv", "out/valid.tsv", "out/test.tsv"};
    for (int k = 0; k < 3; k++) {
        char *t = h_slurp(path_in(names[k]), NULL);
        CHECK(t != NULL, "%s missing", names[k]);
        size_t l = t ? strlen(t) : 0;
        char *b = realloc(all, total + l + 1);
        if (b) memcpy(b + total, t ? t : "", l + 1), all = b, total += l;
        free(t);
    }
    CHECK(all && strstr(all, "Open file\tOuvrir le fichier\n") && strstr(all, "Cannot read\tImpossible de lire\n") &&
              strstr(all, "Delete\tSupprimer\n") && total == strlen("Open file\tOuvrir le fichier\n") +
                                                                strlen("Cannot read\tImpossible de lire\n") +
                                                                strlen("Delete\tSupprimer\n"),
          "the pairs: '%s'", all ? all : "?");
    free(all);
    CHECK(access(path_in("out/words.en"), R_OK) == 0 && access(path_in("out/words.fr"), R_OK) == 0, "no tokenizers");
    snprintf(cmd, sizeof cmd, "%s data frob 2> /dev/null", qkv_bin);
    CHECK(sh(cmd) == 2, "qkv data frob: not exit 2");
    snprintf(cmd, sizeof cmd, "printf 'no tab here\\n' | %s data translation -o %s - 2> /dev/null", qkv_bin, path_in("out"));
    CHECK(sh(cmd) == 1, "a bad list line: not exit 1");
    snprintf(cmd, sizeof cmd, "%s data --help | grep -q LIST", qkv_bin);
    CHECK(sh(cmd) == 0, "qkv data --help");
}

int main(int argc, char **argv)
{
    (void)argc;
    const char *slash = strrchr(argv[0], '/');
    snprintf(qkv_bin, sizeof qkv_bin, "%.*s/../qkv", slash ? (int)(slash - argv[0]) : 1, slash ? argv[0] : ".");
    snprintf(tmpdir, sizeof tmpdir, "/tmp/qkv_tr_XXXXXX");
    if (!mkdtemp(tmpdir)) return fprintf(stderr, "cannot make a temporary folder\n"), 1;
    test_clean();
    test_set();
    test_words();
    test_cli();
    h_tmpdir_remove(tmpdir);
    return h_finish("test_translation");
}
