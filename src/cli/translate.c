/* translate.c: `qkv translate CHECKPOINT [TEXT...]`: translates each TEXT
 * (or each line of stdin) with a model of `qkv train translation`, greedy
 * or by beam search, one output line per input; --show-attention prints
 * the alignment table, --png/--svg draw it as a heat map and --html
 * writes the attention explorer. A bad line (empty, invalid UTF-8) gets a
 * one-line message on stderr and the next line goes on; unknown words and
 * cut sentences get a note. docs/translation.md. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli/mt.h"
#include "qkv/plot.h"

const char qkv_cli_translate_usage[] =
    "usage: qkv translate CHECKPOINT [OPTIONS] [TEXT...]\n"
    "  translates each TEXT, or each line of stdin when there is none, with the model\n"
    "  that `qkv train translation` saved (CHECKPOINT: its --out directory or the\n"
    "  checkpoint.safetensors in it); one output line per input line\n"
    "  -k, --beam K          beam search with K beams (default 1: greedy)\n"
    "  -a, --show-attention  print each alignment as a table (rows: output words,\n"
    "                        columns: input words; transformer: the last layer's heads averaged)\n"
    "      --png FILE        draw the alignment as a heat map (PNG); with several\n"
    "      --svg FILE        sentences the k-th goes to FILE with -k before its extension\n"
    "      --html FILE       the attention explorer (every layer and head)\n"
    "  -h, --help            show this usage\n";

enum { O_PNG = 256, O_SVG, O_HTML };
static const struct option options[] = {
    {"beam", required_argument, NULL, 'k'}, {"show-attention", no_argument, NULL, 'a'},
    {"png", required_argument, NULL, O_PNG}, {"svg", required_argument, NULL, O_SVG},
    {"html", required_argument, NULL, O_HTML}, QKV_CLI_HELP_OPTION};

typedef struct {
    int64_t beam;
    int show;
    const char *png, *svg, *html;
    qkv_ctx *c;
    mt_model m;
    int64_t *tokens; // (max_len)
    int failures;
} tl_state;

static int utf8_valid(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char b = s[i];
        size_t l = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
        if (!l || i + l > n || (l == 2 && b < 0xc2) || (l == 4 && b > 0xf4)) return 0;
        for (size_t k = 1; k < l; k++)
            if ((s[i + k] & 0xc0) != 0x80) return 0;
        if (l == 3 && ((b == 0xe0 && s[i + 1] < 0xa0) || (b == 0xed && s[i + 1] >= 0xa0))) return 0;
        if (l == 4 && ((b == 0xf0 && s[i + 1] < 0x90) || (b == 0xf4 && s[i + 1] >= 0x90))) return 0;
        i += l;
    }
    return 1;
}

/* Display width of UTF-8 text: its code points. */
static int width(const char *s)
{
    int w = 0;
    for (; *s; s++) w += ((unsigned char)*s & 0xc0) != 0x80;
    return w;
}

/* Space-separated pieces of text into labels (malloc'd copies, n of them). */
static char **split_labels(char *text, int64_t *n)
{
    int64_t k = 1;
    for (char *p = text; *p; p++) k += *p == ' ';
    char **v = calloc((size_t)k + 1, sizeof *v);
    if (!v) return NULL;
    *n = 0;
    for (char *s = strtok(text, " "); s; s = strtok(NULL, " ")) v[(*n)++] = s;
    return v;
}

/* FILE for sentence k (k >= 2: "-k" before the extension). */
static void numbered(const char *path, int64_t k, char *out, size_t cap)
{
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (k < 2) snprintf(out, cap, "%s", path);
    else if (dot && (!slash || dot > slash))
        snprintf(out, cap, "%.*s-%lld%s", (int)(dot - path), path, (long long)k, dot);
    else snprintf(out, cap, "%s-%lld", path, (long long)k);
}

static void print_table(const float *w, int64_t L, int64_t S, char *const *rows, char *const *cols)
{
    int rw = 6;
    for (int64_t t = 0; t < L; t++)
        if (width(rows[t]) > rw) rw = width(rows[t]);
    printf("%*s", rw, "");
    for (int64_t j = 0; j < S; j++) printf("  %*s%s", width(cols[j]) < 4 ? 4 - width(cols[j]) : 0, "", cols[j]);
    printf("\n");
    for (int64_t t = 0; t < L; t++) {
        printf("%s%*s", rows[t], rw - width(rows[t]), "");
        for (int64_t j = 0; j < S; j++) {
            int cw = width(cols[j]) > 4 ? width(cols[j]) : 4;
            printf("  %*s%4.2f", cw - 4, "", (double)w[t * S + j]);
        }
        printf("\n");
    }
}

/* The alignment of one translation: table, figures. */
static qkv_status show_attention(tl_state *st, int64_t k, const int64_t *src, int64_t S,
                                 const int64_t *out, int64_t L, const char *text, int64_t cut)
{
    mt_model *m = &st->m;
    float *w = NULL;
    int64_t layers, heads;
    QKV_CLI_TRY(mt_attention(st->c, m, src, S, out, L, &w, &layers, &heads));
    char *spieces = NULL, *tpieces = NULL;
    char **cols = NULL, **rows = NULL;
    float *mean = malloc((size_t)(L * S) * sizeof *mean);
    qkv_status s = mean ? QKV_OK : QKV_ERR_NOMEM;
    int64_t ns = 0;
    if (s == QKV_OK) s = qkv_tokenizer_words_split(m->src_tok, text, strlen(text), &spieces, NULL, NULL);
    if (s == QKV_OK) {
        cols = split_labels(spieces, &ns); /* the pieces, cut as the source was, then <eos> */
        rows = calloc((size_t)L, sizeof *rows);
        if (!cols || !rows) s = QKV_ERR_NOMEM;
    }
    if (s == QKV_OK) {
        ns -= cut;
        if (ns != S - 1) s = qkv_cli_fail(QKV_ERR_STATE, "attention: %lld words for %lld positions", (long long)ns, (long long)S);
        cols[S - 1] = "<eos>";
    }
    for (int64_t t = 0; t < L && s == QKV_OK; t++) {
        size_t len;
        if (out[t] == MT_EOS) rows[t] = strdup("<eos>");
        else s = qkv_tokenizer_decode(m->tgt_tok, out + t, 1, &rows[t], &len);
        if (s == QKV_OK && !rows[t]) s = QKV_ERR_NOMEM;
    }
    if (s == QKV_OK) { /* the last layer's heads, averaged */
        const float *last = w + (layers - 1) * heads * L * S;
        for (int64_t i = 0; i < L * S; i++) {
            double a = 0;
            for (int64_t h = 0; h < heads; h++) a += last[h * L * S + i];
            mean[i] = (float)(a / (double)heads);
        }
        if (st->show) {
            printf("attention%s (rows: output words, columns: input words):\n",
                   m->cfg.model == MT_TRANSFORMER ? " of the last decoder layer, heads averaged" : "");
            print_table(mean, L, S, rows, cols);
        }
    }
    char path[1100], title[256];
    snprintf(title, sizeof title, "%s (%s)", mt_model_name(&m->cfg), mt_direction(&m->cfg));
    const char *figs[2] = {st->png, st->svg};
    for (int f = 0; f < 2 && s == QKV_OK; f++) {
        if (!figs[f]) continue;
        numbered(figs[f], k, path, sizeof path);
        qkv_heatmap h = qkv_heatmap_default();
        h.weights = mean, h.heads = 1, h.rows = L, h.cols = S;
        h.row_labels = (const char *const *)rows, h.col_labels = (const char *const *)cols;
        h.title = title, h.row_axis = "output", h.col_axis = "input";
        s = qkv_plot_heatmap(path, &h);
        if (s == QKV_OK) qkv_cli_report("translate", "wrote %s", path);
    }
    if (s == QKV_OK && st->html) {
        numbered(st->html, k, path, sizeof path);
        qkv_explorer e = {w, layers, heads, L, S, (const char *const *)rows, (const char *const *)cols, title};
        s = qkv_explorer_write(path, &e);
        if (s == QKV_OK) qkv_cli_report("translate", "wrote %s", path);
    }
    for (int64_t t = 0; rows && t < L; t++) free(rows[t]);
    free(rows), free(cols), free(spieces), free(tpieces), free(mean), free(w);
    return s;
}

/* One input line: translated, or a message and the next line. */
static void translate_line(tl_state *st, int64_t k, const char *where, char *text)
{
    mt_model *m = &st->m;
    size_t n = strlen(text);
    while (n && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' ' || text[n - 1] == '\t')) text[--n] = '\0';
    while (*text == ' ' || *text == '\t') text++;
    if (!*text) {
        qkv_cli_report("translate", "%s is empty: skipped", where);
        printf("\n");
        return;
    }
    if (!utf8_valid((const unsigned char *)text, strlen(text))) {
        qkv_cli_report("translate", "%s is not valid UTF-8: skipped", where);
        printf("\n");
        return;
    }
    int64_t *src = NULL, S, unknown, cut, len = 0;
    qkv_tensor *ts;
    qkv_status s = mt_encode_source(m, text, &src, &S, &unknown, &cut);
    if (s == QKV_OK && unknown)
        qkv_cli_report("translate", "%s: %lld word%s the model does not know, read as <unk>", where,
                (long long)unknown, unknown == 1 ? "" : "s");
    if (s == QKV_OK && cut)
        qkv_cli_report("translate", "%s has %lld words and marks, more than the model's %lld: "
                "the first %lld are translated", where, (long long)(S - 1 + cut),
                (long long)m->cfg.max_len - 1, (long long)(S - 1));
    if (s == QKV_OK) {
        qkv_ctx_reset(st->c);
        s = qkv_tensor_new(qkv_ctx_arena(st->c), QKV_I64, 2, (int64_t[]){1, S}, &ts);
    }
    if (s == QKV_OK) {
        memcpy(ts->idx, src, (size_t)S * sizeof *src);
        s = mt_decode(st->c, m, ts, NULL, st->beam, st->tokens, &len);
    }
    char *out = NULL;
    if (s == QKV_OK) s = mt_tokens_text(m, st->tokens, len, &out);
    if (s == QKV_OK) {
        printf("%s\n", out);
        fflush(stdout);
    }
    free(out);
    if (s == QKV_OK && (st->show || st->png || st->svg || st->html)) {
        if (m->cfg.model == MT_RNN && m->cfg.attention == QKV_RNN_ATTN_NONE)
            qkv_cli_report("translate",
                           "the model has no attention (--attention none): no alignment to show");
        else s = show_attention(st, k, src, S, st->tokens, len, text, cut);
    }
    if (s != QKV_OK) {
        qkv_cli_report("translate", "%s: %s", where, qkv_cli_last_error());
        st->failures++;
    }
    free(src);
    fflush(stdout);
}

int qkv_cli_translate(int argc, char **argv)
{
    tl_state st = {.beam = 1};
    qkv_cli_args a;
    qkv_cli_args_init(&a, argc, argv, qkv_cli_translate_usage, options, 1, 1 << 20);
    int ch;
    while ((ch = qkv_cli_next(&a)) > 0) switch (ch) {
        case 'k': st.beam = qkv_cli_int(&a, 1, 64); break;
        case 'a': st.show = 1; break;
        case O_PNG: st.png = a.value; break;
        case O_SVG: st.svg = a.value; break;
        case O_HTML: st.html = a.value; break;
        }
    if (ch < 0) return a.status;
    if (mt_model_open("translate", a.operands[0], &st.m)) return QKV_EXIT_FAILURE;
    st.tokens = malloc((size_t)st.m.cfg.max_len * sizeof *st.tokens);
    if (!st.tokens || qkv_ctx_new(&st.c) != QKV_OK) {
        qkv_cli_report("translate", "out of memory");
        mt_model_free(&st.m);
        free(st.tokens);
        return QKV_EXIT_FAILURE;
    }
    char where[64];
    int64_t k = 0;
    if (a.noperands > 1) {
        for (int i = 1; i < a.noperands; i++) {
            snprintf(where, sizeof where, "argument %d", i);
            translate_line(&st, ++k, where, a.operands[i]);
        }
    } else {
        if (isatty(0)) qkv_cli_report("translate", "%s, %s; type a sentence and Enter, Ctrl-D to end",
                               mt_model_name(&st.m.cfg), mt_direction(&st.m.cfg));
        char *line = NULL;
        size_t cap = 0;
        while (getline(&line, &cap, stdin) >= 0) {
            snprintf(where, sizeof where, "line %lld", (long long)++k);
            translate_line(&st, k, where, line);
        }
        free(line);
    }
    qkv_ctx_free(st.c);
    free(st.tokens);
    mt_model_free(&st.m);
    return st.failures ? QKV_EXIT_FAILURE : QKV_EXIT_OK;
}
