/* bleu.c: qkv bleu HYP REF [REF...]: corpus BLEU-4 of two (or more) text
 * files, one sentence a line, as NLTK's corpus_bleu computes it
 * (qkv_bleu_corpus; docs/translation_data.md). */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"

const char qkv_cli_bleu_usage[] =
    "usage: qkv bleu [-v] [--compare HYP_B [--samples N] [--seed S]] HYP REF [REF...]\n"
    "  prints the corpus BLEU-4 of the hypotheses in HYP against the references\n"
    "  in REF (line i of each file is sentence i; several REF files give several\n"
    "  references per sentence), as NLTK's corpus_bleu with its defaults: weights\n"
    "  1/4, no smoothing, tokens separated by white space; a score in [0, 1]\n"
    "  printed with 17 significant digits. A final newline ends the last line\n"
    "  (it does not add an empty one); every file must have as many lines as HYP.\n"
    "  -v, --verbose  also print p1..p4 (matches/total), the brevity penalty and\n"
    "                 the hypothesis and reference lengths\n"
    "      --compare HYP_B  paired bootstrap resampling (Koehn 2004): also scores HYP_B\n"
    "                 against the same references, then draws N samples of the\n"
    "                 sentences with replacement, the same for both, and prints\n"
    "                 BLEU(HYP) - BLEU(HYP_B), its 95% interval over the samples and\n"
    "                 how often each system scored above the other\n"
    "      --samples N    bootstrap samples (default 1000)\n"
    "      --seed S       the samples' seed (default 1)\n"
    "  -h, --help     show this usage\n"
    "  exit status: 0 success, 1 a file that cannot be read or line counts that differ, 2 usage\n";

/* Splits text into lines in place: *lines gets pointers to each (NUL-terminated). */
static int64_t lines_of(char *text, size_t len, char ***lines)
{
    int64_t n = 0;
    for (size_t i = 0; i < len; i++) n += text[i] == '\n';
    if (len && text[len - 1] != '\n') n++;
    *lines = malloc((size_t)(n ? n : 1) * sizeof **lines);
    if (!*lines) return -1;
    char *p = text;
    for (int64_t k = 0; k < n; k++) {
        char *e = strchr(p, '\n');
        if (e) *e = 0;
        (*lines)[k] = p;
        p = e ? e + 1 : p + strlen(p);
    }
    return n;
}

/* The corpus BLEU of hyps, printed (-v: with its counts). */
static int bleu_print(const char *const *hyps, const char *const *refs, int64_t n, int64_t nrefs, int verbose)
{
    qkv_bleu_score sc;
    if (qkv_bleu_corpus(hyps, refs, n, nrefs, &sc) != QKV_OK) {
        return qkv_cli_report("bleu", "%s", qkv_last_error());
    }
    printf("%.17g\n", sc.bleu);
    if (verbose) {
        for (int k = 0; k < 4; k++)
            printf("p%d %" PRId64 "/%" PRId64 " = %.6f\n", k + 1, sc.matches[k], sc.totals[k], sc.precision[k]);
        printf("brevity penalty %.17g\nhypothesis length %" PRId64 "\nreference length %" PRId64 "\n",
               sc.brevity_penalty, sc.hyp_len, sc.ref_len);
    }
    return QKV_EXIT_OK;
}

/* --compare: the paired bootstrap of HYP (a) against HYP_B (b), printed. */
static int bleu_compare(const char *const *a, const char *const *b, const char *const *refs, int64_t n,
                        int64_t nrefs, int64_t samples, uint64_t seed, const char *name_a, const char *name_b)
{
    qkv_bleu_bootstrap bs;
    if (qkv_bleu_paired_bootstrap(a, b, refs, n, nrefs, samples, seed, &bs) != QKV_OK) {
        return qkv_cli_report("bleu", "%s", qkv_last_error());
    }
    printf("A %.17g (%s)\nB %.17g (%s)\n", bs.a.bleu, name_a, bs.b.bleu, name_b);
    printf("A - B %.6f, 95%% interval [%.6f, %.6f] over %" PRId64 " paired bootstrap samples of %" PRId64
           " sentences (seed %" PRIu64 ")\n",
           bs.diff, bs.diff_lo, bs.diff_hi, bs.samples, n, seed);
    printf("A above B in %" PRId64 " samples, B above A in %" PRId64 ", tied in %" PRId64 "\n", bs.a_wins,
           bs.b_wins, bs.samples - bs.a_wins - bs.b_wins);
    return QKV_EXIT_OK;
}

int qkv_cli_bleu(int argc, char **argv)
{
    enum { OPT_COMPARE = 1000, OPT_SAMPLES, OPT_SEED };
    static const struct option options[] = {{"verbose", no_argument, NULL, 'v'},
                                            {"compare", required_argument, NULL, OPT_COMPARE},
                                            {"samples", required_argument, NULL, OPT_SAMPLES},
                                            {"seed", required_argument, NULL, OPT_SEED},
                                            QKV_CLI_HELP_OPTION};
    int verbose = 0;
    const char *compare = NULL;
    int64_t samples = 1000, seed = 1;
    qkv_cli_args a;
    qkv_cli_args_init(&a, argc, argv, qkv_cli_bleu_usage, options, 2, 65);
    int c;
    while ((c = qkv_cli_next(&a)) > 0) {
        if (c == 'v') verbose = 1;
        else if (c == OPT_COMPARE) compare = a.value;
        else if (c == OPT_SAMPLES) samples = qkv_cli_int(&a, 1, 1000000);
        else if (c == OPT_SEED) seed = qkv_cli_int(&a, 0, INT64_MAX);
    }
    if (c < 0) return a.status;
    /* files: the operands, then HYP_B last (text[nf]) */
    int nf = a.noperands, status = QKV_EXIT_OK;
    char *text[66] = {0}, **lines[66] = {0};
    int64_t n[66] = {0};
    const char **refs = NULL;
    for (int f = 0; f < nf + (compare != NULL) && status == QKV_EXIT_OK; f++) {
        const char *path = f < nf ? a.operands[f] : compare;
        size_t len;
        if (!(text[f] = qkv_cli_read_all("bleu", path, &len))) status = QKV_EXIT_FAILURE;
        else if ((n[f] = lines_of(text[f], len, &lines[f])) < 0)
            qkv_cli_report("bleu", "out of memory"), status = QKV_EXIT_FAILURE;
        else if (n[f] != n[0])
            qkv_cli_report("bleu", "%s has %" PRId64 " lines but %s has %" PRId64, a.operands[0], n[0], path,
                           n[f]),
                status = QKV_EXIT_FAILURE;
    }
    if (status == QKV_EXIT_OK) {
        refs = malloc((size_t)(n[0] * (nf - 1) + 1) * sizeof *refs);
        if (!refs) qkv_cli_report("bleu", "out of memory"), status = QKV_EXIT_FAILURE;
    }
    if (status == QKV_EXIT_OK) {
        for (int f = 1; f < nf; f++)
            for (int64_t i = 0; i < n[0]; i++) refs[(f - 1) * n[0] + i] = lines[f][i];
        const char *const *hyps = (const char *const *)lines[0];
        status = compare ? bleu_compare(hyps, (const char *const *)lines[nf], refs, n[0], nf - 1, samples,
                                        (uint64_t)seed, a.operands[0], compare)
                         : bleu_print(hyps, refs, n[0], nf - 1, verbose);
    }
    if (status == QKV_EXIT_OK && fflush(stdout) != 0)
        qkv_cli_report("bleu", "cannot write the output"), status = QKV_EXIT_FAILURE;
    for (int f = 0; f <= nf; f++) free(text[f]), free(lines[f]);
    free(refs);
    return status;
}
