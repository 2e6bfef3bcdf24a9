/* eval_translation.c: `qkv eval` for a `qkv train translation` run:
 * corpus BLEU-4, exact match, loss and perplexity on a split of its pairs
 * (docs/translation.md). src/cli/eval.c dispatches here. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/mt.h"

extern const char qkv_cli_eval_usage[];

enum { O_SPLIT = 256, O_DATA, O_REFERENCES };
static const struct option options[] = {
    {"split", required_argument, NULL, O_SPLIT}, {"data", required_argument, NULL, O_DATA},
    {"beam", required_argument, NULL, 'k'},      {"limit", required_argument, NULL, 'n'},
    {"output", required_argument, NULL, 'o'},    {"references", required_argument, NULL, O_REFERENCES},
    QKV_CLI_HELP_OPTION};

/* lines[0, n) into path, one a line; 1 after a message. */
static int write_lines(const char *path, const char *const *lines, int64_t n)
{
    FILE *f = fopen(path, "w");
    for (int64_t i = 0; f && i < n; i++) fprintf(f, "%s\n", lines[i]);
    if (!f || fclose(f)) {
        return qkv_cli_report("eval", "cannot write %s", path);
    }
    return 0;
}

/* The references of the set's pairs split as the tokenizer splits
 * (lower-cased, marks apart), as the outputs are: refs[i] (pointers into
 * the malloc'd array returned; NULL after a message); *exact counts the
 * outputs equal to their reference. */
static char **split_references(const mt_model *m, const mt_pairs *p, const mt_set *s, char *const *hyps,
                               const char **refs, int64_t *exact)
{
    char **pieces = calloc((size_t)s->n, sizeof *pieces);
    for (int64_t i = 0; pieces && i < s->n; i++) {
        const char *ref = p->tgt[s->index[i]];
        if (qkv_tokenizer_words_split(m->tgt_tok, ref, strlen(ref), &pieces[i], NULL, NULL) != QKV_OK) {
            qkv_cli_report("eval", "%s", qkv_last_error());
            for (int64_t j = 0; j < i; j++) free(pieces[j]);
            free(pieces);
            return NULL;
        }
        refs[i] = pieces[i];
        *exact += !strcmp(hyps[i], pieces[i]);
    }
    if (!pieces) qkv_cli_report("eval", "out of memory");
    return pieces;
}

static void print_scores(const qkv_bleu_score *b, int64_t exact, int64_t n, double loss)
{
    printf("BLEU %.2f (p1..p4 %.1f/%.1f/%.1f/%.1f, brevity penalty %.3f, %lld/%lld words)\n",
           100 * b->bleu, 100 * b->precision[0], 100 * b->precision[1], 100 * b->precision[2],
           100 * b->precision[3], b->brevity_penalty, (long long)b->hyp_len, (long long)b->ref_len);
    printf("exact match %.2f%% (%lld of %lld)\n", 100.0 * (double)exact / (double)n, (long long)exact,
           (long long)n);
    printf("loss %.4f per token, perplexity %.2f\n", loss, exp(loss));
}

int qkv_cli_eval_translation(int argc, char **argv)
{
    static const char *const splits[] = {"train", "valid", "test"};
    int split = 2;
    int64_t beam = 1, limit = 0;
    const char *data = NULL, *output = NULL, *references = NULL;
    qkv_cli_args a;
    qkv_cli_args_init(&a, argc, argv, qkv_cli_eval_usage, options, 1, 1);
    int ch;
    while ((ch = qkv_cli_next(&a)) > 0) switch (ch) {
        case O_SPLIT: split = qkv_cli_choice(&a, splits, 3); break;
        case O_DATA: data = a.value; break;
        case 'k': beam = qkv_cli_int(&a, 1, 64); break;
        case 'n': limit = qkv_cli_int(&a, 1, (int64_t)1 << 40); break;
        case 'o': output = a.value; break;
        case O_REFERENCES: references = a.value; break;
        }
    if (ch < 0) return a.status;
    mt_model m;
    if (mt_model_open("eval", a.operands[0], &m)) return QKV_EXIT_FAILURE;
    char path[1100];
    snprintf(path, sizeof path, "%s/%s.tsv", data ? data : m.cfg.data, splits[split]);
    mt_pairs p = {0};
    mt_set s = {0};
    qkv_ctx *c = NULL;
    char **hyps = NULL;
    const char **refs = NULL;
    int rc = QKV_EXIT_FAILURE;
    if (mt_pairs_read("eval", path, m.cfg.reverse, &p)) goto done;
    if (mt_set_build(&m, &p, m.cfg.max_words, &s) != QKV_OK || qkv_ctx_new(&c) != QKV_OK) {
        qkv_cli_report("eval", "%s", qkv_cli_last_error());
        goto done;
    }
    if (limit && limit < s.n) s.n = limit;
    if (s.n == 0) {
        qkv_cli_report("eval", "%s has no pair of at most %lld words a side", path,
                (long long)m.cfg.max_words);
        goto done;
    }
    double loss;
    hyps = calloc((size_t)s.n, sizeof *hyps);
    refs = calloc((size_t)s.n, sizeof *refs);
    if (!hyps || !refs || mt_eval_loss(c, &m, &s, 0, &loss) != QKV_OK ||
        mt_translate_all(c, &m, &s, beam, hyps) != QKV_OK) {
        qkv_cli_report("eval", "%s", hyps && refs ? qkv_cli_last_error() : "out of memory");
        goto done;
    }
    int64_t exact = 0;
    char **pieces = split_references(&m, &p, &s, hyps, refs, &exact);
    if (!pieces) goto done;
    qkv_bleu_score b;
    qkv_status bs = qkv_bleu_corpus((const char *const *)hyps, refs, s.n, 1, &b);
    if (bs == QKV_OK) {
        printf("%s, %s, %lld parameters: %s split of %s, %lld pairs (of at most %lld words a side), %s\n",
               mt_model_name(&m.cfg), mt_direction(&m.cfg), (long long)mt_model_params(&m),
               splits[split], path, (long long)s.n, (long long)m.cfg.max_words,
               beam > 1 ? "beam search" : "greedy");
        print_scores(&b, exact, s.n, loss);
        rc = QKV_EXIT_OK;
    } else {
        qkv_cli_report("eval", "%s", qkv_last_error());
    }
    if (rc == QKV_EXIT_OK && output && write_lines(output, (const char *const *)hyps, s.n)) rc = QKV_EXIT_FAILURE;
    if (rc == QKV_EXIT_OK && references && write_lines(references, refs, s.n)) rc = QKV_EXIT_FAILURE;
    for (int64_t i = 0; i < s.n; i++) free(pieces[i]);
    free(pieces);
done:
    for (int64_t i = 0; hyps && i < s.n; i++) free(hyps[i]);
    free(hyps), free(refs);
    qkv_ctx_free(c);
    mt_set_free(&s);
    mt_pairs_free(&p);
    mt_model_free(&m);
    return rc;
}

