/* data.c: qkv data translation: English/French pairs from the French .mo
 * catalogues that tools/get_data.sh translation unpacked: read, cleaned,
 * filtered, deduplicated, split into train/valid/test TSV files, and a
 * words tokenizer for each language from the training split; the counts
 * as Markdown tables on stdout (docs/translation_data.md shows them). */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"

const char qkv_cli_data_usage[] =
    "usage: qkv data translation [-o DIR] [--max-words N] [--min-freq N] LIST\n"
    "  LIST (a file, or - for stdin) has a line 'PACKAGE<TAB>PATH' for each .mo file\n"
    "  (tools/get_data.sh translation writes it and runs this command). Each pair\n"
    "  is cleaned and filtered; the pairs are deduplicated and split 90/5/5 by a\n"
    "  hash of the English side into DIR/train.tsv, valid.tsv and test.tsv\n"
    "  (English<TAB>French lines); DIR/words.en and DIR/words.fr are words\n"
    "  tokenizers (lower-cased, punctuation split) of the training split.\n"
    "  A .mo file that cannot be read is reported and left out.\n"
    "  -o, --output DIR    where to write (default data/translation)\n"
    "  -w, --max-words N   drop pairs with more than N words on a side (default 12)\n"
    "  --min-freq N        the tokenizers keep words seen N times or more (default 2)\n"
    "  -h, --help          show this usage\n"
    "  exit status: 0 success, 1 a file that cannot be read or written, 2 usage\n";

typedef struct {
    char name[128];
    int64_t files, refused;
    qkv_translation_counts c;
} package;

static void add_counts(qkv_translation_counts *t, const qkv_translation_counts *c)
{
    t->read += c->read, t->empty += c->empty, t->control += c->control;
    t->untranslated += c->untranslated, t->too_long += c->too_long, t->kept += c->kept;
}

/* Column col (0 English, 1 French) of the TSV file's lines, one per line. */
static char *column(const char *tsv, size_t len, int col, size_t *out_len)
{
    char *o = malloc(len + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (const char *p = tsv; p < tsv + len;) {
        const char *e = memchr(p, '\n', (size_t)(tsv + len - p)), *t = memchr(p, '\t', (size_t)(tsv + len - p));
        if (!e) e = tsv + len;
        if (t && t < e) {
            const char *a = col ? t + 1 : p, *b = col ? e : t;
            memcpy(o + k, a, (size_t)(b - a)), k += (size_t)(b - a);
            o[k++] = '\n';
        }
        p = e + 1;
    }
    o[k] = 0;
    *out_len = k;
    return o;
}

static int tokenizers(const char *dir, int64_t min_freq)
{
    char path[4096];
    size_t len;
    snprintf(path, sizeof path, "%s/train.tsv", dir);
    char *tsv = qkv_cli_read_all("data translation", path, &len);
    if (!tsv) return QKV_EXIT_FAILURE;
    static const char *const lang[2] = {"en", "fr"};
    int status = QKV_EXIT_OK;
    printf("\n| tokenizer | file | ids (4 specials + words seen >= %" PRId64 " times) |\n|---|---|---:|\n", min_freq);
    for (int col = 0; col < 2 && status == QKV_EXIT_OK; col++) {
        size_t n;
        char *text = column(tsv, len, col, &n);
        qkv_words_options opt = {.lower = 1, .split_punct = 1, .min_freq = min_freq, .max_size = 0};
        qkv_tokenizer *t = NULL;
        snprintf(path, sizeof path, "%s/words.%s", dir, lang[col]);
        if (!text || qkv_tokenizer_words_train(text, n, &opt, &t) != QKV_OK || qkv_tokenizer_save(t, path) != QKV_OK) {
            qkv_cli_report("data translation", "%s: %s", path, text ? qkv_last_error() : "out of memory");
            status = QKV_EXIT_FAILURE;
        } else {
            printf("| %s | %s | %" PRId64 " |\n", lang[col], path, qkv_tokenizer_vocab_size(t));
        }
        qkv_tokenizer_free(t);
        free(text);
    }
    free(tsv);
    return status;
}

/* The cleaning's steps and the splits' sizes, as tables. */
static void print_steps(const qkv_translation_counts *total, int64_t max_words, int64_t files)
{
    int64_t left = total->read;
    printf("\n| step (max %" PRId64 " words) | pairs dropped | pairs left |\n|---|---:|---:|\n"
           "| read from %" PRId64 " files | | %" PRId64 " |\n", max_words, files, left);
    const char *what[] = {"a side empty once cleaned", "a control character left", "untranslated (equal ignoring case)",
                          "too long", "duplicates"};
    int64_t drop[] = {total->empty, total->control, total->untranslated, total->too_long, total->duplicates};
    for (int i = 0; i < 5; i++) printf("| %s | %" PRId64 " | %" PRId64 " |\n", what[i], drop[i], left -= drop[i]);
    printf("\n| split | pairs |\n|---|---:|\n| train | %" PRId64 " |\n| valid | %" PRId64 " |\n| test | %" PRId64
           " |\n",
           total->split[0], total->split[1], total->split[2]);
}

static int translation(int argc, char **argv)
{
    static const struct option options[] = {{"output", required_argument, NULL, 'o'},
                                            {"max-words", required_argument, NULL, 'w'},
                                            {"min-freq", required_argument, NULL, 256},
                                            QKV_CLI_HELP_OPTION};
    const char *dir = "data/translation";
    int64_t max_words = 12, min_freq = 2;
    qkv_cli_args a;
    qkv_cli_args_init(&a, argc, argv, qkv_cli_data_usage, options, 1, 1);
    int c;
    while ((c = qkv_cli_next(&a)) > 0) {
        if (c == 'o') dir = a.value;
        else if (c == 'w') max_words = qkv_cli_int(&a, 1, 1000000);
        else if (c == 256) min_freq = qkv_cli_int(&a, 1, 1000000000);
    }
    if (c < 0) return a.status;
    size_t len;
    char *list = qkv_cli_read_all("data translation", a.operands[0], &len);
    if (!list) return QKV_EXIT_FAILURE;
    qkv_translation_set *set = NULL;
    if (qkv_translation_set_new(max_words, &set) != QKV_OK) {
        qkv_cli_report("data translation", "%s", qkv_last_error());
        return free(list), QKV_EXIT_FAILURE;
    }
    package *pk = NULL;
    int64_t npk = 0, line = 0, files = 0;
    int status = QKV_EXIT_OK;
    for (char *p = list; p < list + len && status == QKV_EXIT_OK;) {
        char *e = memchr(p, '\n', (size_t)(list + len - p));
        if (e) *e = 0;
        line++;
        char *tab = strchr(p, '\t');
        if (*p && (!tab || tab == p || !tab[1] || tab - p >= 128)) {
            qkv_cli_report("data translation",
                           "%s: line %" PRId64 ": expected PACKAGE<TAB>PATH", a.operands[0], line);
            status = QKV_EXIT_FAILURE;
        } else if (*p) {
            *tab = 0;
            if (npk == 0 || strcmp(pk[npk - 1].name, p)) {
                package *q = realloc(pk, (size_t)(npk + 1) * sizeof *q);
                if (!q) {
                    status = QKV_EXIT_FAILURE;
                    break;
                }
                pk = q, memset(&pk[npk], 0, sizeof *pk);
                snprintf(pk[npk++].name, sizeof pk->name, "%s", p);
            }
            package *k = &pk[npk - 1];
            k->files++, files++;
            if (qkv_translation_add_mo(set, tab + 1, &k->c) != QKV_OK) {
                qkv_cli_report("data translation", "left out: %s", qkv_last_error());
                k->refused++;
            }
        }
        p = e ? e + 1 : list + len;
    }
    qkv_translation_counts total = {0};
    if (status == QKV_EXIT_OK) {
        printf("| package | .mo files | refused | pairs read | kept after cleaning and filters |\n"
               "|---|---:|---:|---:|---:|\n");
        for (int64_t i = 0; i < npk; i++) {
            printf("| %s | %" PRId64 " | %" PRId64 " | %" PRId64 " | %" PRId64 " |\n", pk[i].name, pk[i].files,
                   pk[i].refused, pk[i].c.read, pk[i].c.kept);
            add_counts(&total, &pk[i].c);
        }
        if (qkv_translation_write(set, dir, &total) != QKV_OK) {
            qkv_cli_report("data translation", "%s", qkv_last_error());
            status = QKV_EXIT_FAILURE;
        }
    }
    if (status == QKV_EXIT_OK) {
        print_steps(&total, max_words, files);
        status = tokenizers(dir, min_freq);
    }
    qkv_translation_set_free(set);
    free(pk), free(list);
    if (fflush(stdout) != 0) status = QKV_EXIT_FAILURE;
    return status;
}

int qkv_cli_data(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(qkv_cli_data_usage, stdout);
        return QKV_EXIT_OK;
    }
    if (argc < 2 || strcmp(argv[1], "translation")) {
        qkv_cli_report("data", "expected a data set name: translation (try: qkv data --help)");
        return QKV_EXIT_USAGE;
    }
    char name[] = "data translation";
    argv[1] = name;
    return translation(argc - 1, argv + 1);
}
