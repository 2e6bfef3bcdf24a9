/* test_gguf_tokenizer.c: GGUF files' tokenizers against llama.cpp itself.
 *   tools/gguf_tokenizer_oracle.py (llama-cpp-python, vocab_only) tokenizes
 *   texts qkv never tuned on (a sample of the KJV, Debian's licence texts
 *   and package descriptions, this repository's C sources, accents, CJK,
 *   emoji, white space, special tokens) with add_special/parse_special off
 *   and on, detokenizes, and formats chat prompts with
 *   llama_chat_apply_template; qkv must give the same ids, bytes and
 *   prompts. Needs data/ from tools/get_data.sh smollm2, gemma3, kjv and
 *   oracle (a failure names the missing one). Also: decode(encode(x)) == x,
 *   an in-memory vocabulary, and the refusals. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdint.h>
#include <unistd.h>
#include "harness.h"

static const char *PY = "data/venv/bin/python";
static const char *MODELS[2] = {"data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "data/gemma3/gemma-3-270m-q4_k_m.gguf"};
static const char *TAGS[2] = {"smollm2", "gemma3"};
/* SmolLM2's vocabulary again with these tokenizer.ggml.pre (the oracle writes the copies). */
#define NPRE 3
static const char *PRES[NPRE] = {"gpt-2", "llama3", "default"};
/* ... and Gemma's with tokenizer.ggml.add_space_prefix on, the last one. */
#define NVAR (NPRE + 1)

/* Reads n bytes and then the "\n" after them. */
static char *read_bytes(FILE *f, size_t n)
{
    char *b = malloc(n + 1);
    if (!b || fread(b, 1, n, f) != n || fgetc(f) != '\n') return free(b), NULL;
    b[n] = 0;
    return b;
}

typedef struct {
    int64_t cases, id_bad, dec_bad, trip, trip_bad;
    int shown;
} counts;

static void show_ids(const char *what, const int64_t *v, int64_t n, int64_t at)
{
    fprintf(stderr, "    %s (%" PRId64 "):", what, n);
    for (int64_t i = at > 4 ? at - 4 : 0; i < n && i < at + 8; i++) fprintf(stderr, " %" PRId64, v[i]);
    fputc('\n', stderr);
}

/* Strict UTF-8: no overlong forms, surrogates or code points past U+10FFFF. */
static int valid_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        int k = c < 0x80 ? 0 : c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : -1;
        if (k < 0 || i + (size_t)k >= n + (k == 0)) return 0;
        uint32_t cp = k ? c & (0x3Fu >> k) : c;
        for (int j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if ((k == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += (size_t)k + 1;
    }
    return 1;
}

/* One T record: qkv's ids, its decoding of llama.cpp's ids, the round trip. */
static void one_text(qkv_tokenizer *t, const char *text, size_t len, int add, int special, const int64_t *want,
                     int64_t nwant, const char *det, size_t ndet, counts *c, const char *tag)
{
    int64_t *ids = NULL, n = 0;
    qkv_status s = qkv_tokenizer_encode_special(t, text, len, add, special, &ids, &n);
    c->cases++;
    int64_t at = 0;
    while (s == QKV_OK && at < n && at < nwant && ids[at] == want[at]) at++;
    if (s != QKV_OK || n != nwant || at < n) {
        if (c->id_bad++ == 0) {
            fprintf(stderr, "  %s: first mismatch (add_special %d, parse_special %d) at id %" PRId64 "%s%s\n    text: \"%.*s\"\n",
                    tag, add, special, at, s != QKV_OK ? ": " : "", s != QKV_OK ? qkv_last_error() : "",
                    (int)(len > 300 ? 300 : len), text);
            show_ids("llama.cpp", want, nwant, at), show_ids("qkv", ids, n, at);
        }
    }
    char *out = NULL;
    size_t nout = 0;
    s = qkv_tokenizer_decode(t, want, nwant, &out, &nout);
    if (s != QKV_OK || nout != ndet || memcmp(out, det, ndet)) {
        if (c->dec_bad++ == 0)
            fprintf(stderr, "  %s: first decode mismatch: llama.cpp \"%.*s\", qkv \"%.*s\"\n", tag,
                    (int)(ndet > 200 ? 200 : ndet), det, (int)(nout > 200 ? 200 : nout), out ? out : "");
    }
    free(out);
    qkv_tokenizer_info in;
    int prefix = qkv_tokenizer_info_of(t, &in) == QKV_OK && in.add_space_prefix;
    if (!add && !special && !prefix) { /* decode(encode(x)) == x for valid UTF-8 (a space prefix adds spaces) */
        if (valid_utf8((const unsigned char *)text, len)) {
            /* a "llama" vocabulary reads U+2581 in text as the space it stands for */
            char *want_text = malloc(len + 1);
            size_t wl = 0;
            int spm = qkv_tokenizer_kind_of(t) == QKV_TOKENIZER_GGUF_LLAMA;
            for (size_t i = 0; want_text && i < len;)
                if (spm && len - i >= 3 && !memcmp(text + i, "\xE2\x96\x81", 3)) want_text[wl++] = ' ', i += 3;
                else want_text[wl++] = text[i++];
            c->trip++;
            s = qkv_tokenizer_decode(t, ids, n, &out, &nout);
            if (s != QKV_OK || !want_text || nout != wl || memcmp(out, want_text, wl)) {
                if (c->trip_bad++ == 0) fprintf(stderr, "  %s: round trip fails on \"%.*s\"\n", tag, (int)len, text);
            }
            free(out), free(want_text);
        }
    }
    free(ids);
}

static int read_messages(FILE *f, int nm, qkv_chat_message *m, char **keep)
{
    for (int i = 0; i < nm; i++) {
        size_t lr, lc;
        if (fscanf(f, "%zu %zu", &lr, &lc) != 2 || fgetc(f) != '\n') return 0;
        char *b = malloc(lr + lc + 2);
        if (!b || fread(b, 1, lr + lc, f) != lr + lc || fgetc(f) != '\n') return free(b), 0;
        memmove(b + lr + 1, b + lr, lc), b[lr] = 0, b[lr + 1 + lc] = 0;
        m[i] = (qkv_chat_message){b, b + lr + 1}, keep[i] = b;
    }
    return 1;
}

/* One C record: qkv_chat_apply against llama_chat_apply_template. */
static void one_chat(FILE *f, size_t ntmpl, int add, int nm, size_t nout, int64_t *chats, int64_t *bad)
{
    char *tmpl = read_bytes(f, ntmpl), *keep[16] = {0};
    qkv_chat_message m[16];
    int ok = tmpl && nm <= 16 && read_messages(f, nm, m, keep);
    char *want = ok ? read_bytes(f, nout) : NULL, *got = NULL;
    size_t ng = 0;
    CHECK(want != NULL, "oracle file: a chat record is cut short");
    if (want) {
        qkv_status s = qkv_chat_apply(tmpl, m, nm, add, &got, &ng);
        (*chats)++;
        if (s != QKV_OK || ng != nout || memcmp(got, want, nout)) {
            if ((*bad)++ == 0)
                fprintf(stderr, "  chat (%s, add %d): llama.cpp \"%s\"\n    qkv \"%s\" %s\n", qkv_chat_template_name(tmpl),
                        add, want, got ? got : "", s != QKV_OK ? qkv_last_error() : "");
        }
    }
    for (int i = 0; i < nm && i < 16; i++) free(keep[i]);
    free(tmpl), free(want), free(got);
}

/* The oracle's copy k: SmolLM2 with pre-tokenizer PRES[k], or (k == NPRE)
 * Gemma with the space prefix; tokenizer k + 2. */
static qkv_tokenizer *variant(const char *path, int k)
{
    char p[600];
    snprintf(p, sizeof p, "%s.%s.gguf", path, k < NPRE ? PRES[k] : "space");
    qkv_gguf *g = NULL;
    qkv_tokenizer *t = NULL;
    CHECK_OK(qkv_gguf_open(p, &g));
    if (g) CHECK_OK(qkv_tokenizer_from_gguf(g, &t));
    qkv_gguf_close(g);
    unlink(p);
    return t;
}

static void against_llama_cpp(qkv_tokenizer *base[2])
{
    char path[] = "/tmp/qkv_gguf_tok_XXXXXX", cmd[1024];
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    close(fd);
    snprintf(cmd, sizeof cmd, "%s tools/gguf_tokenizer_oracle.py %s --pre %s,%s,%s --space-prefix %s %s", PY, path,
             PRES[0], PRES[1], PRES[2], MODELS[0], MODELS[1]);
    int rc = system(cmd);
    CHECK(rc == 0, "the llama.cpp oracle failed (exit %d): %s (tools/get_data.sh oracle and kjv provide it)", rc, cmd);
    FILE *f = rc == 0 ? fopen(path, "rb") : NULL;
    qkv_tokenizer *tk[2 + NVAR] = {base[0], base[1]};
    char tags[2 + NVAR][64];
    for (int k = 0; k < 2 + NVAR; k++) {
        if (k >= 2 && f) tk[k] = variant(path, k - 2);
        if (k < 2) snprintf(tags[k], sizeof tags[k], "%s", TAGS[k]);
        else if (k < 2 + NPRE) snprintf(tags[k], sizeof tags[k], "smollm2 as pre %s", PRES[k - 2]);
        else snprintf(tags[k], sizeof tags[k], "gemma3 with add_space_prefix");
    }
    counts c[2 + NVAR] = {{0}};
    int64_t chats = 0, chat_bad = 0;
    char kind;
    while (f && fscanf(f, "%c", &kind) == 1) {
        if (kind == 'T') {
            int mi, add, sp;
            size_t nt, nd;
            int64_t ni;
            if (fscanf(f, " %d %d %d %zu %" SCNd64 " %zu", &mi, &add, &sp, &nt, &ni, &nd) != 6 || fgetc(f) != '\n' ||
                mi < 0 || mi >= 2 + NVAR)
                break;
            char *text = read_bytes(f, nt);
            int64_t *want = malloc((size_t)(ni + 1) * sizeof *want);
            for (int64_t i = 0; want && i < ni; i++)
                if (fscanf(f, "%" SCNd64, &want[i]) != 1) free(want), want = NULL;
            char *det = want && fgetc(f) == '\n' ? read_bytes(f, nd) : NULL;
            if (!text || !det) {
                free(text), free(want), free(det);
                CHECK(0, "oracle file: a text record is cut short");
                break;
            }
            if (tk[mi]) one_text(tk[mi], text, nt, add, sp, want, ni, det, nd, &c[mi], tags[mi]);
            free(text), free(want), free(det);
        } else if (kind == 'E') {
            int mi;
            int64_t ne, same = 0, id, prev = -1;
            if (fscanf(f, " %d %" SCNd64, &mi, &ne) != 2 || mi < 0 || mi > 1 || !tk[mi]) break;
            for (int64_t i = 0; i < ne && fscanf(f, "%" SCNd64, &id) == 1; i++) {
                for (int64_t j = prev + 1; j < id; j++) same -= qkv_tokenizer_is_eog(tk[mi], j); /* not EOG there */
                same += qkv_tokenizer_is_eog(tk[mi], id), prev = id;
            }
            for (int64_t j = prev + 1; j < qkv_tokenizer_vocab_size(tk[mi]); j++) same -= qkv_tokenizer_is_eog(tk[mi], j);
            fgetc(f);
            printf("  %s: %" PRId64 " end-of-generation ids in llama.cpp, qkv agrees on %" PRId64 "\n", tags[mi], ne, same);
            CHECK(ne > 0 && same == ne, "%s: end-of-generation ids differ from llama.cpp's", tags[mi]);
        } else if (kind == 'C') {
            int add, nm;
            size_t ntm, no;
            if (fscanf(f, " %zu %d %d %zu", &ntm, &add, &nm, &no) != 4 || fgetc(f) != '\n') break;
            one_chat(f, ntm, add, nm, no, &chats, &chat_bad);
        } else {
            CHECK(0, "oracle file: unexpected record '%c'", kind);
            break;
        }
    }
    if (f) fclose(f);
    unlink(path);
    for (int m = 0; m < 2 + NVAR; m++) {
        printf("  %s: %" PRId64 " texts compared with llama.cpp, %" PRId64 " id mismatches, %" PRId64
               " decode mismatches; %" PRId64 " round trips, %" PRId64 " fail\n",
               tags[m], c[m].cases, c[m].id_bad, c[m].dec_bad, c[m].trip, c[m].trip_bad);
        CHECK(c[m].cases > (m < 2 ? 8000 : 2000) && c[m].id_bad == 0, "%s: %" PRId64 " of %" PRId64
              " tokenizations differ", tags[m], c[m].id_bad, c[m].cases);
        CHECK(c[m].dec_bad == 0, "%s: %" PRId64 " decodings differ", tags[m], c[m].dec_bad);
        CHECK(c[m].trip > (m < 2 ? 5000 : m < 2 + NPRE ? 2000 : -1) && c[m].trip_bad == 0, "%s: %" PRId64 " round trips fail", tags[m], c[m].trip_bad);
        if (m >= 2) qkv_tokenizer_free(tk[m]);
    }
    printf("  chat: %" PRId64 " prompts compared with llama_chat_apply_template, %" PRId64 " differ\n", chats, chat_bad);
    CHECK(chats >= 30 && chat_bad == 0, "%" PRId64 " of %" PRId64 " chat prompts differ", chat_bad, chats);
}

/* The file's own template, specials and switches. */
static void metadata(qkv_gguf *g[2], qkv_tokenizer *tk[2])
{
    const char *tmpl = NULL;
    if (g[0]) CHECK_OK(qkv_gguf_get_str(g[0], "tokenizer.chat_template", &tmpl, NULL));
    if (tmpl) CHECK(!strcmp(qkv_chat_template_name(tmpl), "chatml"), "SmolLM2's template is %s", qkv_chat_template_name(tmpl));
    qkv_tokenizer_info in;
    if (tk[0] && qkv_tokenizer_info_of(tk[0], &in) == QKV_OK) {
        CHECK(in.bos == 1 && in.eos == 2 && !in.add_bos, "SmolLM2: bos %" PRId64 " eos %" PRId64 " add_bos %d", in.bos,
              in.eos, in.add_bos);
        int64_t id = -1;
        CHECK_OK(qkv_tokenizer_special(tk[0], "<|im_end|>", &id));
        CHECK(id == 2 && qkv_tokenizer_is_eog(tk[0], id) && !qkv_tokenizer_is_eog(tk[0], 1), "SmolLM2 <|im_end|> %" PRId64, id);
    }
    if (tk[1] && qkv_tokenizer_info_of(tk[1], &in) == QKV_OK) {
        CHECK(in.bos == 2 && in.eos == 1 && in.add_bos && !in.add_space_prefix, "Gemma: bos %" PRId64 " eos %" PRId64,
              in.bos, in.eos);
        int64_t id = -1;
        CHECK_OK(qkv_tokenizer_special(tk[1], "<end_of_turn>", &id));
        CHECK(qkv_tokenizer_is_eog(tk[1], id) && qkv_tokenizer_vocab_size(tk[1]) == 262144, "Gemma <end_of_turn> %" PRId64, id);
    }
}

/* A small "llama" vocabulary in memory: merges by score, byte fallback,
 * the space prefix; and a "gpt2" one with an unknown pre-tokenizer. */
static void in_memory(void)
{
    const char *tok[] = {"<unk>", "<s>", "</s>", "<0x41>", "<0x62>", "\xE2\x96\x81", "a", "b", "ab", "\xE2\x96\x81" "ab", "<ctl>"};
    int32_t ty[] = {2, 3, 3, 6, 6, 1, 1, 1, 1, 1, 3};
    float sc[] = {0, 0, 0, 0, 0, -1, -2, -2, -1, -0.5f, 0};
    qkv_vocab_spec v = {.model = "llama", .n_tokens = 11, .tokens = tok, .scores = sc, .types = ty,
                        .bos = 1, .eos = 2, .unk = 0, .pad = -1, .eot = -1, .add_bos = 1, .add_eos = 0,
                        .add_space_prefix = 1};
    qkv_tokenizer *t = NULL;
    CHECK_OK(qkv_tokenizer_from_vocab(&v, &t));
    int64_t *ids = NULL, n = 0;
    CHECK_OK(qkv_tokenizer_encode_special(t, "ab Ab<ctl>b", 11, 1, 1, &ids, &n));
    /* <s>, then " ab Ab" as "▁ab" "▁" <0x41> "b" (A has no token: its byte),
     * <ctl>, and " b" (a space again after a special) as "▁" "b" */
    const int64_t want[] = {1, 9, 5, 3, 7, 10, 5, 7};
    CHECK(n == 8 && !memcmp(ids, want, sizeof want), "in-memory llama vocabulary: %" PRId64 " ids", n);
    char *s = NULL;
    size_t len = 0;
    CHECK_OK(qkv_tokenizer_decode(t, ids, n, &s, &len));
    CHECK(s && !strcmp(s, "<s> ab Ab<ctl> b"), "decode: '%s'", s ? s : "");
    free(ids), free(s);
    CHECK_ERR(qkv_tokenizer_encode_special(t, "\xC3\xA9", 2, 0, 0, &ids, &n), QKV_ERR_FORMAT, "byte 0xC3 has no token");
    qkv_tokenizer_free(t);
    const char *tok2[] = {"a", "b", "ab"}, *merges[] = {"a b"};
    qkv_vocab_spec w = {.model = "gpt2", .pre = "qwen2", .n_tokens = 3, .tokens = tok2, .n_merges = 1, .merges = merges,
                        .bos = -1, .eos = -1, .unk = -1, .pad = -1, .eot = -1, .add_bos = -1, .add_eos = -1,
                        .add_space_prefix = -1};
    CHECK_ERR(qkv_tokenizer_from_vocab(&w, &t), QKV_ERR_FORMAT, "pre-tokenizer 'qwen2' is not supported");
    w.model = "bert";
    CHECK_ERR(qkv_tokenizer_from_vocab(&w, &t), QKV_ERR_FORMAT, "tokenizer model 'bert' is not supported");
    w.model = "gpt2", w.pre = "gpt-2";
    w.n_tokens = 0;
    CHECK_ERR(qkv_tokenizer_from_vocab(&w, &t), QKV_ERR_ARG, "0 tokens, expected 1 to");
    w.n_tokens = 3, w.eos = 3;
    CHECK_ERR(qkv_tokenizer_from_vocab(&w, &t), QKV_ERR_FORMAT, "special token id 3 is outside the 3 tokens");
    const char *bad_merge[] = {"ab"};
    w.eos = -1, w.merges = bad_merge;
    CHECK_ERR(qkv_tokenizer_from_vocab(&w, &t), QKV_ERR_FORMAT, "merge 0 ('ab') has no space");
    w.merges = merges, w.add_eos = 1;
    CHECK_ERR(qkv_tokenizer_from_vocab(&w, &t), QKV_ERR_FORMAT, "adds an EOS token but has none");
    w.add_eos = -1;
    CHECK(t == NULL, "a refused vocabulary leaves *out NULL");
    CHECK_OK(qkv_tokenizer_from_vocab(&w, &t));
    CHECK_OK(qkv_tokenizer_encode(t, "ab", 2, &ids, &n));
    CHECK(n == 1 && ids[0] == 2, "gpt2 in memory: 'ab' is %" PRId64 " ids", n);
    free(ids), qkv_tokenizer_free(t);
}

static void refusals(void)
{
    qkv_tokenizer *none = NULL;
    CHECK_ERR(qkv_tokenizer_from_gguf(NULL, &none), QKV_ERR_ARG, "g is NULL");
    /* a GGUF file whose metadata has no tokenizer: version 3, no tensors, one key */
    unsigned char buf[128];
    size_t k = 0;
    uint32_t u32;
    uint64_t u64;
#define PUT(v) (memcpy(buf + k, &(v), sizeof(v)), k += sizeof(v))
#define PUTS(str) (u64 = strlen(str), PUT(u64), memcpy(buf + k, str, strlen(str)), k += strlen(str))
    memcpy(buf, "GGUF", 4), k = 4;
    u32 = 3, PUT(u32);
    u64 = 0, PUT(u64);
    u64 = 1, PUT(u64);
    PUTS("general.architecture");
    u32 = 8, PUT(u32);
    PUTS("llama");
#undef PUT
#undef PUTS
    qkv_gguf *g = NULL;
    CHECK_OK(qkv_gguf_open_memory(buf, k, "(no tokenizer)", &g));
    if (g) CHECK_ERR(qkv_tokenizer_from_gguf(g, &none), QKV_ERR_NOTFOUND, "tokenizer.ggml.model");
    CHECK(none == NULL, "no tokenizer: *out stays NULL");
    qkv_gguf_close(g);
    qkv_chat_message m[] = {{"user", "hi"}};
    char *out = NULL;
    CHECK_ERR(qkv_chat_apply("{{ '<|start_header_id|>' + role + '<|end_header_id|>' }}", m, 1, 1, &out, NULL),
              QKV_ERR_ARG, "llama.cpp's 'llama3', not supported");
    CHECK_ERR(qkv_chat_apply("{{ messages }}", m, 1, 1, &out, NULL), QKV_ERR_ARG, "none llama.cpp recognises");
    CHECK(out == NULL, "a refused template leaves *out NULL");
    qkv_tokenizer *t = NULL;
    CHECK_OK(qkv_tokenizer_bytes_init(&t));
    int64_t *ids = NULL, n = 0;
    CHECK_ERR(qkv_tokenizer_encode_special(t, "x", 1, 0, 1, &ids, &n), QKV_ERR_ARG, "GGUF vocabularies");
    qkv_tokenizer_free(t);
}

int main(void)
{
    qkv_gguf *g[2] = {0};
    qkv_tokenizer *tk[2] = {0};
    for (int m = 0; m < 2; m++) {
        qkv_status s = qkv_gguf_open(MODELS[m], &g[m]);
        CHECK(s == QKV_OK, "%s: %s (run tools/get_data.sh %s)", MODELS[m], qkv_last_error(), TAGS[m]);
        if (s == QKV_OK) CHECK_OK(qkv_tokenizer_from_gguf(g[m], &tk[m]));
    }
    char cmd[256];
    snprintf(cmd, sizeof cmd, "%s -c 'import llama_cpp' 2>/dev/null", PY);
    int have = system(cmd) == 0;
    CHECK(have, "llama-cpp-python is missing: run tools/get_data.sh oracle");
    CHECK(access("data/kjv/kjv.txt", R_OK) == 0, "data/kjv/kjv.txt is missing: run tools/get_data.sh kjv");
    if (have && tk[0] && tk[1]) against_llama_cpp(tk);
    metadata(g, tk);
    qkv_tokenizer *o = NULL;
    char spec[200];
    snprintf(spec, sizeof spec, "gguf:%s", MODELS[0]);
    CHECK_OK(qkv_tokenizer_open(spec, &o));
    int64_t *a = NULL, *b = NULL, na = 0, nb = 0;
    if (o && tk[0]) {
        CHECK_OK(qkv_tokenizer_encode(o, "Hello, world 2024!", 18, &a, &na));
        CHECK_OK(qkv_tokenizer_encode(tk[0], "Hello, world 2024!", 18, &b, &nb));
        CHECK(na == nb && na > 5 && !memcmp(a, b, (size_t)na * sizeof *a), "gguf:FILE gives the file's tokenizer");
    }
    free(a), free(b), qkv_tokenizer_free(o);
    CHECK_ERR(qkv_tokenizer_open("gguf:/nonexistent.gguf", &o), QKV_ERR_NOTFOUND, "/nonexistent.gguf");
    in_memory();
    refusals();
    for (int m = 0; m < 2; m++) qkv_tokenizer_free(tk[m]), qkv_gguf_close(g[m]);
    printf("test_gguf_tokenizer: %d passed, %d failed\n", h_pass, h_fail);
    return h_fail != 0;
}
