/* demo.c: `qkv demo [--png FILE] [--svg FILE] [--pdf FILE] [--html FILE]`
 * (and `qkv` alone): the lecture's worked example, then multi-head
 * attention on a built-in sentence, printing the attention weights as
 * tables (and drawing them as labelled heat maps, one per head, or as the
 * interactive explorer page, with the options). */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include "cli/cli.h"
#include "qkv/plot.h"

const char qkv_cli_demo_usage[] =
    "usage: qkv demo [--png FILE] [--svg FILE] [--pdf FILE] [--html FILE]\n"
    "  prints the lecture's worked example (three 4-d inputs, unscaled dot-product\n"
    "  self-attention: keys, queries, values, scores, weights, outputs), then causal\n"
    "  multi-head self-attention over \"the cat sat on the mat\", as tables;\n"
    "  `qkv` with no command runs it too\n"
    "  -p, --png FILE   also draw the heads' attention weights into FILE, a PNG: one\n"
    "                   heat map per head, the sentence's words on both axes\n"
    "      --svg FILE   the same as an SVG (the words as text)\n"
    "      --pdf FILE   the same as a PDF\n"
    "      --html FILE  the interactive attention explorer: one self-contained page\n"
    "                   (matrix and head views; hover a token or a cell)\n"
    "  FILE must end in the option's extension (.png, .svg, .pdf, .html)\n"
    "  -h, --help       show this usage\n";

/* The output formats, in the order of the options. */
enum { NFORMATS = 4, HTML = 3 };
static const char *const formats[NFORMATS] = {"png", "svg", "pdf", "html"};

static int fail(const char *what)
{
    fprintf(stderr, "qkv: %s: %s\n", what, qkv_last_error());
    return QKV_EXIT_FAILURE;
}

/* Prints a (rows, cols) matrix with row and column labels. */
static void print_table(const char *title, const char *const *rows, const char *const *cols,
                        int nr, int nc, const float *m)
{
    printf("\n%s\n%10s", title, "");
    for (int j = 0; j < nc; j++) printf(" %8s", cols[j]);
    printf("\n");
    for (int i = 0; i < nr; i++) {
        printf("%10s", rows[i]);
        for (int j = 0; j < nc; j++) printf(" %8.4f", m[i * nc + j]);
        printf("\n");
    }
}

/* The worked example of the lecture notes: three 4-d inputs, key, query and
 * value matrices (4,3), unscaled dot-product attention. */
static int demo_worked_example(qkv_ctx *c)
{
    static float x[3][4] = {{1, 0, 1, 0}, {0, 2, 0, 2}, {1, 1, 1, 1}};
    static float wk[3][4] = {{0, 1, 0, 1}, {0, 1, 1, 1}, {1, 0, 0, 0}}; /* W_key^T */
    static float wq[3][4] = {{1, 1, 0, 0}, {0, 0, 0, 1}, {1, 0, 1, 1}}; /* W_query^T */
    static float wv[3][4] = {{0, 0, 1, 1}, {2, 3, 0, 1}, {0, 0, 3, 0}}; /* W_value^T */
    qkv_arena *a = qkv_ctx_arena(c);
    qkv_tensor *tx, *tk, *tq, *tv, *k, *q, *v, *out, *w;
    if (qkv_tensor_wrap(a, &x[0][0], 3, (int64_t[]){1, 3, 4}, &tx) ||
        qkv_tensor_wrap(a, &wk[0][0], 2, (int64_t[]){3, 4}, &tk) ||
        qkv_tensor_wrap(a, &wq[0][0], 2, (int64_t[]){3, 4}, &tq) ||
        qkv_tensor_wrap(a, &wv[0][0], 2, (int64_t[]){3, 4}, &tv))
        return fail("worked example");
    /* qkv_linear computes x W^T, so the (4,3) matrices are stored transposed. */
    if (qkv_linear(c, tx, tk, NULL, &k) || qkv_linear(c, tx, tq, NULL, &q) ||
        qkv_linear(c, tx, tv, NULL, &v))
        return fail("worked example: projections");
    qkv_sdpa_opts o = qkv_sdpa_opts_default();
    o.scale = 1.0f; /* the notes take the softmax of the raw scores */
    o.need_weights = 1;
    if (qkv_sdpa(c, q, k, v, &o, &out, &w)) return fail("worked example: attention");
    const char *in[3] = {"input 1", "input 2", "input 3"};
    const char *dims[3] = {"d0", "d1", "d2"};
    printf("The worked example of the lecture notes (unscaled dot-product self-attention)\n");
    print_table("keys", in, dims, 3, 3, k->data);
    print_table("queries", in, dims, 3, 3, q->data);
    print_table("values", in, dims, 3, 3, v->data);
    float scores[9];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            scores[i * 3 + j] = 0;
            for (int d = 0; d < 3; d++) scores[i * 3 + j] += q->data[i * 3 + d] * k->data[j * 3 + d];
        }
    print_table("scores q_i . k_j (input 1: [2, 4, 4])", in, in, 3, 3, scores);
    print_table("attention weights softmax(scores), rows: queries, columns: keys", in, in, 3, 3, w->data);
    print_table("outputs (input 1: [1.94, 6.68, 1.60], the notes round it to [2, 7, 1.5])", in,
                dims, 3, 3, out->data);
    return 0;
}

/* The heads' (T,T) weight maps as a labelled grid of heat maps, the words
 * on both axes, into each figure asked for (files[k] in formats[k]), and
 * as the explorer page (one layer) for --html. */
static int save_maps(const char *const *files, const float *w, int heads, int T, const char *const *words)
{
    qkv_heatmap h = qkv_heatmap_default();
    h.weights = w; /* (heads, T, T) */
    h.heads = heads, h.rows = T, h.cols = T;
    h.row_labels = words, h.col_labels = words;
    h.title = "causal self-attention weights, \"the cat sat on the mat\"";
    const char *gap = "\n";
    for (int k = 0; k < HTML; k++) {
        if (!files[k]) continue;
        if (qkv_plot_heatmap(files[k], &h)) return fail(formats[k]);
        printf("%swrote %s: the heads' weights as heat maps (rows: queries, columns: keys; dark 0, "
               "yellow 1)\n", gap, files[k]);
        gap = "";
    }
    if (!files[HTML]) return 0;
    qkv_explorer e = {w, 1, heads, T, T, words, words, "The cat sat on the mat: causal self-attention"};
    if (qkv_explorer_write(files[HTML], &e)) return fail("html");
    printf("%swrote %s: the attention explorer (open it in a browser)\n", gap, files[HTML]);
    return 0;
}

/* Causal multi-head self-attention over a built-in sentence with seeded
 * random embeddings and PyTorch's default initialisation. */
static int demo_multihead(qkv_ctx *c, const char *const *files)
{
    const char *words[6] = {"the", "cat", "sat", "on", "the", "mat"};
    enum { T = 6, E = 8, H = 2 };
    qkv_params *p;
    qkv_rng rng;
    qkv_rng_seed(&rng, 2026);
    qkv_mha m;
    qkv_mha_opts o = qkv_mha_opts_default(E, H);
    o.batch_first = 1;
    if (qkv_params_new(&p) || qkv_mha_init(&m, &o, p, "", &rng)) return fail("multi-head demo");
    /* One embedding per distinct word: both "the" share theirs. */
    float emb[T * E], table[5][E];
    qkv_rng_fill_normal(&rng, &table[0][0], 5 * E, 0, 1);
    int id[T] = {0, 1, 2, 3, 0, 4};
    for (int t = 0; t < T; t++) memcpy(emb + t * E, table[id[t]], sizeof table[0]);
    qkv_tensor *x, *out, *w;
    if (qkv_tensor_wrap(qkv_ctx_arena(c), emb, 3, (int64_t[]){1, T, E}, &x)) return fail("demo");
    qkv_mha_args args = qkv_mha_args_default();
    args.causal = QKV_CAUSAL_TOP_LEFT;
    args.average_attn_weights = 0;
    if (qkv_mha_forward(c, &m, x, x, x, &args, &out, &w)) {
        qkv_params_free(p);
        return fail("multi-head demo: forward");
    }
    printf("\n\nMultiheadAttention(embed_dim=%d, num_heads=%d, batch_first=True), causal, on \"the "
           "cat sat on the mat\"\n(random embeddings and weights, seed 2026)\n", E, H);
    for (int h = 0; h < H; h++) {
        char title[64];
        snprintf(title, sizeof title, "head %d attention weights (rows attend to columns)", h);
        print_table(title, words, words, T, T, w->data + h * T * T);
    }
    int rc = save_maps(files, w->data, H, T, words);
    qkv_params_free(p);
    return rc;
}

int qkv_cli_demo(int argc, char **argv)
{
    enum { SVG = 256, PDF, OPT_HTML };
    static const struct option options[] = {{"png", required_argument, NULL, 'p'},
                                            {"svg", required_argument, NULL, SVG},
                                            {"pdf", required_argument, NULL, PDF},
                                            {"html", required_argument, NULL, OPT_HTML},
                                            QKV_CLI_HELP_OPTION};
    const char *files[NFORMATS] = {NULL, NULL, NULL, NULL}; /* png, svg, pdf, html */
    qkv_cli_args a;
    qkv_cli_args_init(&a, argc, argv, qkv_cli_demo_usage, options, 0, 0);
    int opt;
    while ((opt = qkv_cli_next(&a)) > 0) {
        int k = opt == 'p' ? 0 : opt == SVG ? 1 : opt == PDF ? 2 : HTML;
        const char *dot = strrchr(a.value, '.');
        if (!dot || strchr(dot, '/') || strcasecmp(dot + 1, formats[k]))
            qkv_cli_error(&a, "--%s: '%s' does not end in .%s", formats[k], a.value, formats[k]);
        files[k] = a.value;
    }
    if (opt < 0) return a.status;
    qkv_ctx *c;
    if (qkv_ctx_new(&c)) return fail("start");
    qkv_ctx_set_grad(c, 0);
    int rc = demo_worked_example(c);
    if (!rc) rc = demo_multihead(c, files);
    qkv_ctx_free(c);
    return rc;
}
