/* test_wordpiece.c: BERT's WordPiece tokenizer against BertTokenizerFast.
 *   tools/wordpiece_oracle.py (transformers' BertTokenizerFast from
 *   data/minilm, as sentence-transformers loads it) tokenizes texts qkv was
 *   never tuned on: Debian's package descriptions (apt-cache dumpavail),
 *   its licence texts, the Greek, Russian, Chinese, Japanese, Arabic, ...
 *   translations of libc-l10n and iso-codes, hand-written accents, emoji,
 *   control characters, long words, empty lines, invalid UTF-8, and real
 *   lines with bytes put in; also with other normalizer switches. qkv must
 *   give the same ids (whole, and cut to 256 and 512 with their attention
 *   masks and type ids) and the same decode. Needs data/ from
 *   tools/get_data.sh minilm, bertref and l10n (a failure names the missing
 *   one). Also: the options, the folder's settings, special tokens. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdint.h>
#include <unistd.h>
#include "harness.h"

static const char *PY = "data/venv/bin/python";
#define NV 5

/* Reads n bytes and then the "\n" after them. */
static char *read_bytes(FILE *f, size_t n)
{
    char *b = malloc(n + 1);
    if (!b || fread(b, 1, n, f) != n || fgetc(f) != '\n') return free(b), NULL;
    b[n] = 0;
    return b;
}

/* One line of n numbers. */
static int64_t *read_ids(FILE *f, int64_t n)
{
    int64_t *v = malloc((size_t)(n + 1) * sizeof *v);
    for (int64_t i = 0; v && i < n; i++)
        if (fscanf(f, "%" SCNd64, &v[i]) != 1) free(v), v = NULL;
    if (v && fgetc(f) != '\n') free(v), v = NULL;
    return v;
}

typedef struct {
    int64_t lines, tokens, bad, cut_bad, dec_bad, pieces_bad, over[2];
    int shown;
} counts;

static void show(const char *what, const int64_t *v, int64_t n, int64_t at)
{
    fprintf(stderr, "    %s (%" PRId64 "):", what, n);
    for (int64_t i = at > 4 ? at - 4 : 0; i < n && i < at + 8; i++) fprintf(stderr, " %" PRId64, v[i]);
    fputc('\n', stderr);
}

static int64_t first_diff(const int64_t *a, int64_t na, const int64_t *b, int64_t nb)
{
    int64_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i == na && i == nb ? -1 : i;
}

static void one(qkv_tokenizer *t, int v, const char *text, size_t len, const int64_t *full, int64_t nfull,
                int64_t *const cut[2][3], const int64_t ncut[2], const char *dec, size_t ndec, counts *c)
{
    c->lines++, c->tokens += nfull;
    int64_t *ids = NULL, n = 0, nf = 0;
    qkv_status s = qkv_tokenizer_encode_bert(t, text, len, INT64_C(1) << 40, &ids, &n, &nf);
    int64_t at = s == QKV_OK ? first_diff(ids, n, full, nfull) : 0;
    if (s != QKV_OK || at >= 0 || nf != n) {
        if (c->bad++ < 3) {
            fprintf(stderr, "  variant %d: mismatch at id %" PRId64 "%s%s\n    text (%zu bytes): \"%.*s\"\n", v, at,
                    s ? ": " : "", s ? qkv_last_error() : "", len, (int)(len > 300 ? 300 : len), text);
            show("BertTokenizerFast", full, nfull, at), show("qkv", ids, n, at);
        }
    }
    free(ids);
    /* the pieces alone: qkv_tokenizer_encode */
    s = qkv_tokenizer_encode(t, text, len, &ids, &n);
    if (s != QKV_OK || nfull < 2 || first_diff(ids, n, full + 1, nfull - 2) >= 0) c->pieces_bad++;
    free(ids);
    if (v == 0) {
        static const int64_t lim[2] = {256, 512};
        for (int k = 0; k < 2; k++) {
            int bad = 0;
            c->over[k] += nfull > lim[k];
            for (int pass = 0; pass < 1 + (k == 0); pass++) { /* 256 also as the folder's own limit (max_len 0) */
                s = qkv_tokenizer_encode_bert(t, text, len, pass ? 0 : lim[k], &ids, &n, &nf);
                if (s != QKV_OK || first_diff(ids, n, cut[k][0], ncut[k]) >= 0 || nf != nfull) bad = 1;
                for (int64_t i = 0; !bad && i < n; i++)
                    if (cut[k][1][i] != 1 || cut[k][2][i] != 0) bad = 1; /* qkv's mask: n ones; type ids: 0 */
                free(ids);
            }
            if (bad && c->cut_bad++ < 3)
                fprintf(stderr, "  cut to %" PRId64 ": mismatch, text \"%.*s\"\n", lim[k], (int)(len > 200 ? 200 : len), text);
        }
    }
    char *o = NULL;
    size_t no = 0;
    s = qkv_tokenizer_decode(t, full, nfull, &o, &no);
    if (s != QKV_OK || no != ndec || memcmp(o, dec, no)) {
        if (c->dec_bad++ < 3)
            fprintf(stderr, "  variant %d: decode differs:\n    BertTokenizerFast: \"%.*s\"\n    qkv:               \"%.*s\"\n",
                    v, (int)(ndec > 200 ? 200 : ndec), dec, (int)(no > 200 ? 200 : no), o ? o : "");
    }
    free(o);
}

static void against_hf(qkv_tokenizer *tk[NV])
{
    char path[] = "/tmp/qkv_wordpiece_XXXXXX", cmd[512];
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    close(fd);
    snprintf(cmd, sizeof cmd, "%s tools/wordpiece_oracle.py %s", PY, path);
    int rc = system(cmd);
    CHECK(rc == 0, "the BertTokenizerFast oracle failed (exit %d): %s (tools/get_data.sh minilm, bertref and l10n provide it)",
          rc, cmd);
    FILE *f = rc == 0 ? fopen(path, "rb") : NULL;
    counts c[NV] = {{0}};
    int broken = 0;
    char kind;
    while (f && fscanf(f, "%c", &kind) == 1) {
        int v;
        size_t nt, nd;
        int64_t nfull, ncut[2];
        if (kind != 'T' || fscanf(f, " %d %zu %" SCNd64 " %" SCNd64 " %" SCNd64 " %zu", &v, &nt, &nfull, &ncut[0],
                                  &ncut[1], &nd) != 6 ||
            fgetc(f) != '\n' || v < 0 || v >= NV) {
            broken = 1;
            break;
        }
        char *text = read_bytes(f, nt), *dec = NULL;
        int64_t *full = text ? read_ids(f, nfull) : NULL, *cut[2][3] = {{0}};
        int ok = full != NULL;
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 3; j++) ok = ok && (cut[k][j] = read_ids(f, ncut[k])) != NULL;
        if (ok) dec = read_bytes(f, nd);
        if (!dec) broken = 1;
        else if (tk[v]) one(tk[v], v, text, nt, full, nfull, cut, ncut, dec, nd, &c[v]);
        free(text), free(full), free(dec);
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 3; j++) free(cut[k][j]);
        if (broken) break;
    }
    if (f) fclose(f);
    unlink(path);
    CHECK(!broken, "the oracle's output could not be read");
    static const char *const names[NV] = {"folder (lowercase, strip accents, CJK, clean-up)", "lowercase off",
                                          "lowercase on, strip_accents off", "lowercase off, strip_accents on",
                                          "clean-up off, CJK not split"};
    int64_t all = 0, bad = 0;
    for (int v = 0; v < NV; v++) {
        printf("  %-50s lines %7" PRId64 "  tokens %9" PRId64 "  id mismatches %" PRId64 "  pieces %" PRId64
               "  cut 256/512 %" PRId64 "  decode %" PRId64 "\n",
               names[v], c[v].lines, c[v].tokens, c[v].bad, c[v].pieces_bad, c[v].cut_bad, c[v].dec_bad);
        all += c[v].lines, bad += c[v].bad + c[v].pieces_bad + c[v].cut_bad + c[v].dec_bad;
        CHECK(c[v].bad == 0, "%s: %" PRId64 " of %" PRId64 " lines' ids differ from BertTokenizerFast's", names[v],
              c[v].bad, c[v].lines);
        CHECK(c[v].pieces_bad == 0, "%s: qkv_tokenizer_encode differs on %" PRId64 " lines", names[v], c[v].pieces_bad);
        CHECK(c[v].dec_bad == 0, "%s: decode differs on %" PRId64 " lines", names[v], c[v].dec_bad);
        CHECK(v == 0 || c[v].lines >= 500, "%s: only %" PRId64 " lines", names[v], c[v].lines);
    }
    printf("  lines longer than 256 ids: %" PRId64 ", than 512: %" PRId64 " (cut, with their masks and type ids)\n",
           c[0].over[0], c[0].over[1]);
    CHECK(c[0].over[1] >= 100, "only %" PRId64 " lines longer than 512 ids", c[0].over[1]);
    CHECK(c[0].cut_bad == 0, "cut to 256/512: %" PRId64 " lines differ", c[0].cut_bad);
    CHECK(c[0].lines >= 20000, "only %" PRId64 " lines compared, wanted >= 20000", c[0].lines);
    printf("  in all: %" PRId64 " lines, %" PRId64 " mismatches\n", all, bad);
}

static qkv_tokenizer *with(int lower, int strip, int cjk, int clean)
{
    qkv_wordpiece_opts o;
    qkv_wordpiece_opts_default(&o);
    o.lowercase = lower, o.strip_accents = strip, o.split_cjk = cjk, o.clean_text = clean;
    qkv_tokenizer *t = NULL;
    CHECK_OK(qkv_tokenizer_wordpiece_load("data/minilm/vocab.txt", &o, &t));
    return t;
}

/* Hand-derived cases on the real vocabulary (ids read from vocab.txt's lines). */
static void basics(qkv_tokenizer *t)
{
    int64_t id = -1;
    CHECK(qkv_tokenizer_kind_of(t) == QKV_TOKENIZER_WORDPIECE, "kind");
    CHECK(qkv_tokenizer_vocab_size(t) == 30522, "vocab size %" PRId64, qkv_tokenizer_vocab_size(t));
    static const char *const sp[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    static const int64_t want[] = {0, 100, 101, 102, 103};
    for (int k = 0; k < 5; k++) {
        CHECK_OK(qkv_tokenizer_special(t, sp[k], &id));
        CHECK(id == want[k], "%s is %" PRId64, sp[k], id);
    }
    CHECK_ERR(qkv_tokenizer_special(t, "<|endoftext|>", &id), QKV_ERR_NOTFOUND, "no special token");
    int64_t *ids = NULL, n = 0, nf = 0;
    /* vocab.txt: "hello" is line 7593 (id 7592), "," 1010, "world" 2088, "!" 999 */
    CHECK_OK(qkv_tokenizer_encode(t, "HeLLo,WORLD!", 12, &ids, &n));
    CHECK(n == 4 && ids[0] == 7592 && ids[1] == 1010 && ids[2] == 2088 && ids[3] == 999, "hello , world !");
    free(ids);
    CHECK_OK(qkv_tokenizer_encode(t, "", 0, &ids, &n));
    CHECK(n == 0 && ids == NULL, "empty text: no pieces");
    CHECK_OK(qkv_tokenizer_encode_bert(t, "", 0, 0, &ids, &n, &nf));
    CHECK(n == 2 && ids[0] == 101 && ids[1] == 102 && nf == 2, "empty text: [CLS] [SEP]");
    free(ids);
    CHECK_OK(qkv_tokenizer_encode_bert(t, "hello world hello", 17, 3, &ids, &n, &nf));
    CHECK(n == 3 && ids[0] == 101 && ids[1] == 7592 && ids[2] == 102 && nf == 5, "cut to 3: [CLS] hello [SEP], 5 before");
    free(ids);
    CHECK_ERR(qkv_tokenizer_encode_bert(t, "x", 1, 1, &ids, &n, NULL), QKV_ERR_ARG, "max_len is 1");
    /* a 1 MB line: cut to the folder's 256 ids */
    size_t big = 1 << 20;
    char *s = malloc(big);
    for (size_t i = 0; s && i < big; i++) s[i] = "hello world "[i % 12];
    if (s) {
        CHECK_OK(qkv_tokenizer_encode_bert(t, s, big, 0, &ids, &n, &nf));
        CHECK(n == 256 && ids[255] == 102 && nf == 2 + (int64_t)(big / 12) * 2 + 1, "1 MB: 256 ids of %" PRId64, nf);
        free(ids);
    }
    free(s);
    /* U+2E52 (Po since Unicode 13): split off as punctuation, by utf8proc's
     * Unicode 15 (BertTokenizerFast's Unicode 8 tables keep "a\u2e52b" one word) */
    CHECK_OK(qkv_tokenizer_encode(t, "a\xe2\xb9\x92" "b", 5, &ids, &n));
    CHECK(n == 3 && ids[0] == 1037 && ids[1] == 100 && ids[2] == 1038, "a U+2E52 b: a [UNK] b");
    free(ids);
    char *o = NULL;
    size_t no = 0;
    int64_t d[] = {101, 7592, 1010, 2088, 999, 102};
    CHECK_OK(qkv_tokenizer_decode(t, d, 6, &o, &no));
    CHECK(o && !strcmp(o, "[CLS] hello, world! [SEP]"), "decode: '%s'", o ? o : "");
    free(o);
    CHECK_ERR(qkv_tokenizer_save(t, "/tmp/qkv_wp_never"), QKV_ERR_ARG, "WordPiece");
    qkv_tokenizer *u = NULL;
    CHECK_OK(qkv_tokenizer_open("wordpiece:data/minilm", &u));
    if (u) {
        CHECK_OK(qkv_tokenizer_encode_bert(u, s ? "x" : "x", 1, 0, &ids, &n, NULL));
        free(ids);
    }
    qkv_tokenizer_free(u), u = NULL;
    CHECK_OK(qkv_tokenizer_open("wordpiece:data/minilm/vocab.txt", &u));
    qkv_tokenizer_free(u);
}

int main(void)
{
    qkv_tokenizer *tk[NV] = {0};
    qkv_status s = qkv_tokenizer_wordpiece_open_dir("data/minilm", &tk[0]);
    CHECK(s == QKV_OK, "data/minilm: %s (run tools/get_data.sh minilm)", qkv_last_error());
    char cmd[256];
    snprintf(cmd, sizeof cmd, "%s -c 'import transformers, tokenizers' 2>/dev/null", PY);
    int have = system(cmd) == 0;
    CHECK(have, "transformers is missing from data/venv: run tools/get_data.sh bertref");
    CHECK(access("data/l10n/root/usr/share/locale", R_OK) == 0, "data/l10n is missing: run tools/get_data.sh l10n");
    if (tk[0]) {
        tk[1] = with(0, -1, 1, 1), tk[2] = with(1, 0, 1, 1), tk[3] = with(0, 1, 1, 1), tk[4] = with(1, -1, 0, 0);
        basics(tk[0]);
        if (have) against_hf(tk);
    }
    for (int v = 0; v < NV; v++) qkv_tokenizer_free(tk[v]);
    return h_finish("test_wordpiece");
}
