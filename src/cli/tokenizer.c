/* tokenizer.c: qkv tokenizer train|encode|decode
 *   train   learns a byte-level BPE (or a character set) from a corpus and
 *           saves it (docs/tokenizers.md has the file formats)
 *   encode  text -> ids, one line of ids per line of text
 *   decode  ids -> text, one line of text per line of ids */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"

const char qkv_cli_tokenizer_usage[] =
    "usage: qkv tokenizer train [--type bpe|chars|words] [--vocab-size N] [--min-freq N] CORPUS -o FILE\n"
    "       qkv tokenizer encode --tokenizer SPEC [FILE]\n"
    "       qkv tokenizer encode --wordpiece VOCAB_OR_DIR [--bert] [--max-len N] [--masks] [FILE]\n"
    "       qkv tokenizer decode --tokenizer SPEC [FILE]\n"
    "  train: learns a tokenizer from CORPUS (UTF-8 text) and saves it to FILE\n"
    "    --type bpe|chars|words  byte-level BPE (default), the corpus's characters, or\n"
    "                          its words (lower-cased, punctuation split; <pad> <bos> <eos> <unk>)\n"
    "    --min-freq N          words: keep those seen N times or more (default 1)\n"
    "    -n, --vocab-size N    BPE's vocabulary: 256 bytes + merges + <|endoftext|>\n"
    "                          (257 to 16777216; default 1024; fewer if the corpus runs out of pairs)\n"
    "    -o, --output FILE     the tokenizer file to write\n"
    "  encode: each line of FILE (default or '-': stdin) as ids, one line of ids\n"
    "    separated by spaces per line of text (the line's newline is not encoded)\n"
    "  decode: each line of ids back to a line of text\n"
    "    -t, --tokenizer SPEC  bytes, chars:FILE, bpe:FILE, words:FILE, gpt2:DIR (DIR holds\n"
    "                          encoder.json and vocab.bpe: tools/get_data.sh gpt2) or\n"
    "                          gguf:FILE (a GGUF file's tokenizer, as llama.cpp's)\n"
    "    -w, --wordpiece VOCAB_OR_DIR  BERT's WordPiece (as BertTokenizerFast) from a\n"
    "                          vocab.txt or a model folder (vocab.txt, tokenizer_config.json,\n"
    "                          sentence_bert_config.json; tools/get_data.sh minilm): the\n"
    "                          same as --tokenizer wordpiece:VOCAB_OR_DIR\n"
    "    --bert                encode: BERT's input, [CLS] pieces [SEP], cut to the\n"
    "                          tokenizer's limit (a folder's max_seq_length; else 512)\n"
    "    --max-len N           --bert, cut to N ids (N >= 2) instead\n"
    "    --masks               --bert, and after each line of ids a line of its attention\n"
    "                          mask and a line of its token type ids\n"
    "  -h, --help   show this usage\n"
    "  exit status: 0 success, 1 a file or text that cannot be read or tokenized, 2 usage\n";

static int fail(const char *cmd)
{
    char name[64];
    snprintf(name, sizeof name, "tokenizer %s", cmd);
    return qkv_cli_report(name, "%s", qkv_last_error());
}

static int train(int argc, char **argv)
{
    static const struct option options[] = {{"type", required_argument, NULL, 256},
                                            {"vocab-size", required_argument, NULL, 'n'},
                                            {"output", required_argument, NULL, 'o'},
                                            {"min-freq", required_argument, NULL, 257},
                                            QKV_CLI_HELP_OPTION};
    static const char *const types[] = {"bpe", "chars", "words"};
    int64_t vocab = 1024, min_freq = 1;
    int type = 0;
    const char *out = NULL;
    qkv_cli_args a;
    qkv_cli_args_init(&a, argc, argv, qkv_cli_tokenizer_usage, options, 1, 1);
    int c;
    while ((c = qkv_cli_next(&a)) > 0) {
        if (c == 256) type = qkv_cli_choice(&a, types, 3);
        else if (c == 257) min_freq = qkv_cli_int(&a, 1, INT64_MAX);
        else if (c == 'n') vocab = qkv_cli_int(&a, 257, 1 << 24);
        else if (c == 'o') out = a.value;
    }
    if (c < 0) return a.status;
    if (!out) {
        qkv_cli_error(&a, "-o FILE is needed");
        return a.status;
    }
    size_t len;
    char *text = qkv_cli_read_all("tokenizer", a.operands[0], &len);
    if (!text) return QKV_EXIT_FAILURE;
    qkv_tokenizer *t = NULL;
    qkv_words_options wo = {.lower = 1, .split_punct = 1, .min_freq = min_freq, .max_size = 0};
    qkv_status s = type == 2 ? qkv_tokenizer_words_train(text, len, &wo, &t)
                   : type    ? qkv_tokenizer_chars_train(text, len, &t)
                             : qkv_tokenizer_bpe_train(text, len, vocab, &t);
    free(text);
    if (s == QKV_OK) s = qkv_tokenizer_save(t, out);
    if (s != QKV_OK) return qkv_tokenizer_free(t), fail("train");
    qkv_cli_report("tokenizer train",
                   "%s: %s, vocabulary %" PRId64, out, types[type], qkv_tokenizer_vocab_size(t));
    qkv_tokenizer_free(t);
    return QKV_EXIT_OK;
}

/* Parses one line of ids into *ids (grown as needed); 0 on a bad id. */
static int parse_ids(char *p, char *end, int64_t **ids, int64_t *n, int64_t *cap)
{
    *n = 0;
    while (p < end) {
        if (*p == ' ' || *p == '\t' || *p == '\r') {
            p++;
            continue;
        }
        if (*p < '0' || *p > '9') return 0;
        char *e;
        errno = 0;
        long long v = strtoll(p, &e, 10);
        if (errno || e > end || (e < end && *e != ' ' && *e != '\t' && *e != '\r')) return 0;
        if (*n == *cap) {
            int64_t c2 = *cap ? *cap * 2 : 256, *b = realloc(*ids, (size_t)c2 * sizeof *b);
            if (!b) return 0;
            *ids = b, *cap = c2;
        }
        (*ids)[(*n)++] = v;
        p = e;
    }
    return 1;
}

/* Decodes one line of ids [p, e) and prints its text; 0 after a report. */
static int decode_line(const qkv_tokenizer *t, char *p, char *e, int64_t line, int64_t **ids,
                       int64_t *n, int64_t *cap)
{
    char *out;
    size_t olen;
    if (!parse_ids(p, e, ids, n, cap)) {
        qkv_cli_report("tokenizer decode", "line %" PRId64 ": expected ids (whole numbers) separated by spaces", line);
        return 0;
    }
    if (qkv_tokenizer_decode(t, *ids, *n, &out, &olen) != QKV_OK) {
        qkv_cli_report("tokenizer decode", "line %" PRId64 ": %s", line, qkv_last_error());
        return 0;
    }
    fwrite(out, 1, olen, stdout);
    putchar('\n');
    free(out);
    return 1;
}

/* Encodes one line [p, e) and prints its ids (bert: BERT's input cut to
 * max_len; masks: then its attention mask and token type ids); 0 after a
 * report. */
static int encode_line(const qkv_tokenizer *t, const char *p, const char *e, int64_t line, int bert,
                       int64_t max_len, int masks)
{
    int64_t *v, m, full = 0;
    qkv_status st = bert ? qkv_tokenizer_encode_bert(t, p, (size_t)(e - p), max_len, &v, &m, &full)
                         : qkv_tokenizer_encode(t, p, (size_t)(e - p), &v, &m);
    if (st != QKV_OK) {
        qkv_cli_report("tokenizer encode", "line %" PRId64 ": %s", line, qkv_last_error());
        return 0;
    }
    for (int64_t i = 0; i < m; i++) printf(i ? " %" PRId64 : "%" PRId64, v[i]);
    putchar('\n');
    if (masks) { /* BERT's attention mask (all ones) and token type ids (all zeros) */
        for (int64_t i = 0; i < m; i++) fputs(i ? " 1" : "1", stdout);
        putchar('\n');
        for (int64_t i = 0; i < m; i++) fputs(i ? " 0" : "0", stdout);
        putchar('\n');
    }
    if (bert && full > m)
        fprintf(stderr, "qkv tokenizer encode: line %" PRId64 ": %" PRId64 " ids cut to %" PRId64 "\n", line, full, m);
    free(v);
    return 1;
}

static int code(int argc, char **argv, int decode)
{
    static const struct option options[] = {{"tokenizer", required_argument, NULL, 't'},
                                            {"wordpiece", required_argument, NULL, 'w'},
                                            {"bert", no_argument, NULL, 256},
                                            {"max-len", required_argument, NULL, 257},
                                            {"masks", no_argument, NULL, 258},
                                            QKV_CLI_HELP_OPTION};
    const char *spec = NULL, *wp = NULL, *cmd = decode ? "decode" : "encode";
    int bert = 0, masks = 0;
    int64_t max_len = 0;
    qkv_cli_args a;
    qkv_cli_args_init(&a, argc, argv, qkv_cli_tokenizer_usage, options, 0, 1);
    int c;
    while ((c = qkv_cli_next(&a)) > 0) {
        if (c == 't') spec = a.value;
        else if (c == 'w') wp = a.value;
        else if (c == 256) bert = 1;
        else if (c == 257) max_len = qkv_cli_int(&a, 2, INT64_MAX), bert = 1;
        else if (c == 258) masks = 1, bert = 1;
    }
    if (c < 0) return a.status;
    if (spec && wp) {
        qkv_cli_error(&a, "--tokenizer and --wordpiece name two tokenizers; give one");
        return a.status;
    }
    if (!spec && !wp) {
        qkv_cli_error(&a, "--tokenizer SPEC is needed (bytes, chars:FILE, bpe:FILE, words:FILE, gpt2:DIR, gguf:FILE or wordpiece:VOCAB_OR_DIR), or --wordpiece VOCAB_OR_DIR");
        return a.status;
    }
    if (bert && decode) {
        qkv_cli_error(&a, "--bert, --max-len and --masks are for encode");
        return a.status;
    }
    char wspec[4200];
    if (wp) {
        snprintf(wspec, sizeof wspec, "wordpiece:%s", wp);
        spec = wspec;
    }
    qkv_tokenizer *t;
    if (qkv_tokenizer_open(spec, &t) != QKV_OK) return fail(cmd);
    if (bert && qkv_tokenizer_kind_of(t) != QKV_TOKENIZER_WORDPIECE) {
        qkv_tokenizer_free(t);
        qkv_cli_error(&a, "--bert, --max-len and --masks need a WordPiece tokenizer (--wordpiece)");
        return a.status;
    }
    size_t len;
    char *text = qkv_cli_read_all("tokenizer", a.noperands ? a.operands[0] : NULL, &len);
    if (!text) return qkv_tokenizer_free(t), QKV_EXIT_FAILURE;
    int status = QKV_EXIT_OK;
    int64_t *ids = NULL, n = 0, cap = 0, line = 1;
    for (char *p = text; p < text + len; line++) {
        char *e = memchr(p, '\n', (size_t)(text + len - p));
        if (!e) e = text + len;
        int ok = decode ? decode_line(t, p, e, line, &ids, &n, &cap) : encode_line(t, p, e, line, bert, max_len, masks);
        if (!ok) {
            status = QKV_EXIT_FAILURE;
            break;
        }
        p = e + 1;
    }
    free(ids), free(text);
    qkv_tokenizer_free(t);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "qkv tokenizer %s: cannot write the output\n", cmd);
        status = QKV_EXIT_FAILURE;
    }
    return status;
}

int qkv_cli_tokenizer(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(qkv_cli_tokenizer_usage, stdout);
        return QKV_EXIT_OK;
    }
    static const char *const subs[] = {"train", "encode", "decode"};
    int which = -1;
    for (int i = 0; i < 3 && argc >= 2; i++)
        if (!strcmp(argv[1], subs[i])) which = i;
    if (which < 0) {
        if (argc < 2) qkv_cli_report("tokenizer",
                                     "expected train, encode or decode (try: qkv tokenizer --help)");
        else qkv_cli_report("tokenizer",
                            "unknown subcommand '%s', expected train, encode or decode (try: qkv tokenizer --help)", argv[1]);
        return QKV_EXIT_USAGE;
    }
    /* the subcommand's arguments, named "tokenizer SUB" in messages */
    char name[32];
    snprintf(name, sizeof name, "tokenizer %s", subs[which]);
    char **args = malloc((size_t)argc * sizeof *args);
    if (!args) return qkv_cli_report("tokenizer", "out of memory"), QKV_EXIT_FAILURE;
    args[0] = name;
    for (int i = 2; i < argc; i++) args[i - 1] = argv[i];
    int status = which == 0 ? train(argc - 1, args) : code(argc - 1, args, which == 2);
    free(args);
    return status;
}
