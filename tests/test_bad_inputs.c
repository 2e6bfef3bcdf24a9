#define _DEFAULT_SOURCE /* mkdtemp, realpath */
/* test_bad_inputs.c: bad calls to the public API and bad command lines,
 * each refused with the status expected and a message that names the
 * function (or the command); nothing crashes, nothing returns OK. With
 * QKV_BAD_INPUTS_TABLE=FILE it also writes each case and the message qkv
 * gave as a markdown table: docs/bad_inputs.md is that table
 * (tools/bad_inputs_table.sh), so the page shows what qkv really says. */
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"

static FILE *g_table;
static char g_dir[64], g_qkv[512];

static const char *status_name(qkv_status s)
{
    static const char *n[] = {"OK", "ARG", "SHAPE", "DTYPE", "NOMEM", "IO", "FORMAT", "STATE", "NOTFOUND"};
    return (unsigned)s < sizeof n / sizeof *n ? n[s] : "?";
}

/* One row: `what` with a markdown-safe message (| and newlines escaped). */
static void table_row(const char *what, const char *result, const char *msg)
{
    if (!g_table) return;
    fprintf(g_table, "| `%s` | %s | ", what, result);
    for (const char *p = msg; *p; p++) {
        if (*p == '|') fputs("\\|", g_table);
        else if (*p == '\n') fputs(" ", g_table);
        else if (*p == '`') fputs("'", g_table);
        else fputc(*p, g_table);
    }
    fputs(" |\n", g_table);
}

/* The call's status must be `want`; its message must name fn. */
static void bad(const char *what, qkv_status want, const char *fn, qkv_status got)
{
    const char *msg = qkv_last_error();
    CHECK(got == want, "%s: status %s, expected %s (%s)", what, status_name(got), status_name(want), msg);
    CHECK(strstr(msg, fn) != NULL, "%s: the message does not name %s: %s", what, fn, msg);
    char res[32];
    snprintf(res, sizeof res, "QKV_ERR_%s", status_name(got));
    table_row(what, res, msg);
}
#define BAD(want, fn, call) bad(#call, want, fn, (call))

static void write_text(const char *name, const char *text)
{
    char p[160];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "wb");
    if (f) fputs(text, f), fclose(f);
}

static void write_bytes(const char *name, const char *data, size_t n)
{
    char p[160];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "wb");
    if (f) fwrite(data, 1, n, f), fclose(f);
}

static void test_api(void)
{
    qkv_arena *A;
    qkv_ctx *c;
    CHECK_OK(qkv_arena_new(&A, 1 << 20));
    CHECK_OK(qkv_ctx_new(&c));
    qkv_tensor *x, *w, *ids, *t = NULL, *y = NULL;
    CHECK_OK(qkv_tensor_new(A, QKV_F32, 2, (int64_t[]){2, 3}, &x)); // x is (2,3)
    CHECK_OK(qkv_tensor_new(A, QKV_F32, 2, (int64_t[]){4, 5}, &w)); // w is (4,5)
    CHECK_OK(qkv_tensor_new(A, QKV_I64, 1, (int64_t[]){2}, &ids));  // ids is (2)
    ids->idx[0] = 1, ids->idx[1] = 9;
    static float buf[16];
    qkv_rng r;
    qkv_rng_seed(&r, 1);

    BAD(QKV_ERR_SHAPE, "tensor_new", qkv_tensor_new(A, QKV_F32, 2, (int64_t[]){1LL << 40, 1LL << 40}, &t));
    BAD(QKV_ERR_SHAPE, "tensor_new", qkv_tensor_new(A, QKV_F32, 5, (int64_t[]){1, 1, 1, 1, 1}, &t));
    BAD(QKV_ERR_SHAPE, "tensor_new", qkv_tensor_new(A, QKV_F32, 2, (int64_t[]){-1, 3}, &t));
    BAD(QKV_ERR_SHAPE, "tensor_narrow", qkv_tensor_narrow(A, x, INT64_MAX, 2, &t));
    BAD(QKV_ERR_ARG, "linear", qkv_linear(c, NULL, w, NULL, &y));
    BAD(QKV_ERR_SHAPE, "linear", qkv_linear(c, x, w, NULL, &y));
    BAD(QKV_ERR_DTYPE, "linear", qkv_linear(c, ids, w, NULL, &y));
    BAD(QKV_ERR_ARG, "linear_relu", qkv_linear_relu(c, NULL, w, NULL, &y));
    BAD(QKV_ERR_SHAPE, "linear_relu", qkv_linear_relu(c, x, w, NULL, &y));
    BAD(QKV_ERR_DTYPE, "linear_relu", qkv_linear_relu(c, ids, w, NULL, &y));
    BAD(QKV_ERR_ARG, "embedding", qkv_embedding(c, w, ids, -1, &y));
    BAD(QKV_ERR_ARG, "cross_entropy", qkv_cross_entropy(c, x, ids, -100, 0.0, QKV_REDUCTION_MEAN, &y));
    BAD(QKV_ERR_ARG, "cross_entropy", qkv_cross_entropy(c, x, ids, -100, 2.0, QKV_REDUCTION_MEAN, &y));
    BAD(QKV_ERR_SHAPE, "sdpa", qkv_sdpa(c, x, w, w, NULL, &y, NULL));
    BAD(QKV_ERR_ARG, "alibi_bias", qkv_alibi_bias_fill(1 << 20, 1 << 20, 1 << 20, 1 << 20, 0, buf));
    BAD(QKV_ERR_SHAPE, "positions", qkv_positions(c, w, INT64_MAX, 2, &y));
    BAD(QKV_ERR_ARG, "sinusoidal", qkv_sinusoidal_fill(INT64_MAX - 1, 4, 4, buf));
    BAD(QKV_ERR_ARG, "init_uniform", qkv_init_uniform(&r, x, 1.0f, 0.0f));
    BAD(QKV_ERR_ARG, "init_uniform", qkv_init_uniform(&r, x, NAN, 1.0f));
    float logits[3] = {-INFINITY, -INFINITY, -INFINITY};
    int64_t tok = -1;
    qkv_generate_opts go = qkv_generate_opts_default();
    BAD(QKV_ERR_ARG, "sample", qkv_sample_token(c, logits, 3, &go, &r, &tok));
    logits[1] = NAN;
    BAD(QKV_ERR_ARG, "sample", qkv_sample_token(c, logits, 3, &go, &r, &tok));

    qkv_params *p;
    CHECK_OK(qkv_params_new(&p));
    qkv_tensor *pw;
    CHECK_OK(qkv_params_add(p, "", "w", 1, (int64_t[]){3}, &pw));
    qkv_optim *o = NULL;
    qkv_optim_opts oo = qkv_optim_adam_opts_default();
    oo.beta2 = 1.0;
    BAD(QKV_ERR_ARG, "optim", qkv_optim_new(&o, p, &oo));
    oo = qkv_optim_sgd_opts_default(-0.1);
    BAD(QKV_ERR_ARG, "optim", qkv_optim_new(&o, p, &oo));
    BAD(QKV_ERR_STATE, "backward", qkv_backward(c, x, NULL));

    /* files: relative names, the current folder is g_dir */
    qkv_safetensors *st = NULL;
    BAD(QKV_ERR_IO, "safetensors_open", qkv_safetensors_open("missing.safetensors", &st));
    write_text("text.safetensors", "hello, this is not a safetensors file\n");
    BAD(QKV_ERR_FORMAT, "safetensors_open", qkv_safetensors_open("text.safetensors", &st));
    BAD(QKV_ERR_FORMAT, "checkpoint_load", qkv_checkpoint_load("text.safetensors", p, NULL, NULL, NULL));
    qkv_tokenizer *tk = NULL;
    write_text("bad.bpe", "qkv-bpe 1\n2\n97 98\n300 1\n");
    BAD(QKV_ERR_FORMAT, "tokenizer_load", qkv_tokenizer_load("bad.bpe", &tk));
    BAD(QKV_ERR_ARG, "tokenizer_open", qkv_tokenizer_open("unigram:x", &tk));
    /* WordPiece vocabularies (vocab.txt) and model folders */
    write_text("nounk.txt", "[PAD]\n[CLS]\n[SEP]\nhello\n");
    write_text("empty.txt", "");
    write_text("dup.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nworld\nhello\n");
    write_bytes("nul.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhel\0lo\n", sizeof "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhel\0lo\n" - 1);
    write_bytes("latin1.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\ncaf\xe9\n", sizeof "[PAD]\n[UNK]\n[CLS]\n[SEP]\ncaf\xe9\n" - 1);
    write_text("vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n");
    BAD(QKV_ERR_FORMAT, "tokenizer_wordpiece_load", qkv_tokenizer_wordpiece_load("nounk.txt", NULL, &tk));
    BAD(QKV_ERR_FORMAT, "tokenizer_wordpiece_load", qkv_tokenizer_wordpiece_load("empty.txt", NULL, &tk));
    BAD(QKV_ERR_FORMAT, "tokenizer_wordpiece_load", qkv_tokenizer_wordpiece_load("dup.txt", NULL, &tk));
    BAD(QKV_ERR_FORMAT, "tokenizer_wordpiece_load", qkv_tokenizer_wordpiece_load("nul.txt", NULL, &tk));
    BAD(QKV_ERR_FORMAT, "tokenizer_wordpiece_load", qkv_tokenizer_wordpiece_load("latin1.txt", NULL, &tk));
    BAD(QKV_ERR_IO, "tokenizer_wordpiece_load", qkv_tokenizer_wordpiece_load("missing.txt", NULL, &tk));
    BAD(QKV_ERR_ARG, "tokenizer_wordpiece_load", qkv_tokenizer_wordpiece_load(".", NULL, &tk));
    qkv_wordpiece_opts wo;
    qkv_wordpiece_opts_default(&wo);
    wo.strip_accents = 2;
    BAD(QKV_ERR_ARG, "tokenizer_wordpiece_load", qkv_tokenizer_wordpiece_load("vocab.txt", &wo, &tk));
    qkv_wordpiece_opts_default(&wo);
    wo.max_len = 1;
    BAD(QKV_ERR_ARG, "tokenizer_wordpiece_load", qkv_tokenizer_wordpiece_load("vocab.txt", &wo, &tk));
    BAD(QKV_ERR_IO, "tokenizer_wordpiece_open_dir", qkv_tokenizer_wordpiece_open_dir("missing_model", &tk));
    BAD(QKV_ERR_ARG, "tokenizer_wordpiece_open_dir", qkv_tokenizer_wordpiece_open_dir("vocab.txt", &tk));
    if (mkdir("model_novocab", 0755) == 0 && mkdir("model_badcfg", 0755) == 0 && mkdir("model_badtype", 0755) == 0) {
        write_text("model_badcfg/tokenizer_config.json", "{\"do_lower_case\": true,}");
        write_text("model_badcfg/vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n");
        write_text("model_badtype/sentence_bert_config.json", "{\"max_seq_length\": \"256\"}");
        write_text("model_badtype/vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n");
    }
    BAD(QKV_ERR_IO, "tokenizer_wordpiece_open_dir", qkv_tokenizer_wordpiece_open_dir("model_novocab", &tk));
    BAD(QKV_ERR_FORMAT, "tokenizer_wordpiece_open_dir", qkv_tokenizer_wordpiece_open_dir("model_badcfg", &tk));
    BAD(QKV_ERR_FORMAT, "tokenizer_wordpiece_open_dir", qkv_tokenizer_wordpiece_open_dir("model_badtype", &tk));
    int64_t *wids = NULL, wn = 0;
    if (qkv_tokenizer_bytes_new(&tk) == QKV_OK) {
        BAD(QKV_ERR_ARG, "tokenizer_encode_bert", qkv_tokenizer_encode_bert(tk, "hi", 2, 0, &wids, &wn, NULL));
        qkv_tokenizer_free(tk), tk = NULL;
    }
    if (qkv_tokenizer_wordpiece_load("vocab.txt", NULL, &tk) == QKV_OK) {
        BAD(QKV_ERR_ARG, "tokenizer_encode_bert", qkv_tokenizer_encode_bert(tk, "hi", 2, 1, &wids, &wn, NULL));
        BAD(QKV_ERR_NOTFOUND, "tokenizer_special", qkv_tokenizer_special(tk, "[MASK]", &wn));
        BAD(QKV_ERR_ARG, "tokenizer_save", qkv_tokenizer_save(tk, "vocab.bpe"));
        qkv_tokenizer_free(tk), tk = NULL;
    }
    CHECK(tk == NULL && wids == NULL, "refused WordPiece calls leave their outputs NULL");
    qkv_params_free(p);
    qkv_ctx_free(c);
    qkv_arena_free(A);
}

/* `qkv ARGS` must exit with `want` and say something on stderr that
 * contains needle. */
static void bad_cli(const char *args, int want, const char *needle)
{
    char cmd[1024], errf[160], msg[2048] = "";
    snprintf(errf, sizeof errf, "%s/err.txt", g_dir);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s >/dev/null 2>'%s' </dev/null", g_dir, g_qkv, args, errf);
    int rc = system(cmd);
    rc = rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    FILE *f = fopen(errf, "r");
    size_t n = f ? fread(msg, 1, sizeof msg - 1, f) : 0;
    msg[n] = '\0';
    if (f) fclose(f);
    char *nl = strchr(msg, '\n'); /* the first line: the message (usage follows) */
    if (nl) *nl = '\0';
    CHECK(rc == want && strstr(msg, needle), "qkv %s: exit %d (expected %d), stderr %s", args, rc, want, msg);
    char what[600], res[32];
    snprintf(what, sizeof what, "qkv %s", args);
    snprintf(res, sizeof res, "exit %d", rc);
    table_row(what, res, msg);
}

static void test_cli(void)
{
    if (access(g_qkv, X_OK) != 0) {
        CHECK(0, "no qkv binary at %s (build it first)", g_qkv);
        return;
    }
    write_text("corpus.txt", "the cat sat on the mat\n");
    write_text("huge.safetensors", "\xff\xff\xff\xff\xff\xff\xff\x7f{}");
    bad_cli("frobnicate", 2, "frobnicate");
    bad_cli("toy --length 7", 2, "--length");
    bad_cli("toy --length 281474976710656 --train 16384", 2, "--length");
    bad_cli("toy --train 12abc", 2, "--train");
    bad_cli("toy --seed -1", 2, "--seed");
    bad_cli("toy --epochs 0", 2, "--epochs");
    bad_cli("toy --task sorting", 2, "--task");
    bad_cli("inspect missing.safetensors", 1, "missing.safetensors");
    bad_cli("inspect corpus.txt", 1, "corpus.txt");
    bad_cli("inspect huge.safetensors", 1, "huge.safetensors");
    /* GGUF files, told by their magic: cut in the header, version 1, big-endian */
    write_bytes("cut.gguf", "GGUF\x03\0\0\0\x01\0", 10);
    write_bytes("v1.gguf", "GGUF\x01\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 24);
    write_bytes("big.gguf", "GGUF\0\0\0\x03\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 24);
    bad_cli("inspect cut.gguf", 1, "cut.gguf: truncated: the tensor and key counts");
    bad_cli("inspect v1.gguf", 1, "GGUF version 1");
    bad_cli("inspect big.gguf", 1, "big-endian");
    bad_cli("tokenizer train --vocab-size 100 corpus.txt -o t.bpe", 2, "--vocab-size");
    bad_cli("tokenizer encode --tokenizer bpe:corpus.txt corpus.txt", 1, "corpus.txt");
    bad_cli("tokenizer encode --tokenizer gpt2:nowhere corpus.txt", 1, "nowhere");
    bad_cli("tokenizer encode --wordpiece nowhere corpus.txt", 1, "nowhere");
    bad_cli("tokenizer encode --wordpiece corpus.txt corpus.txt", 1, "no [UNK] token");
    bad_cli("tokenizer encode --tokenizer bytes --bert corpus.txt", 2, "WordPiece");
    bad_cli("tokenizer encode --wordpiece vocab.txt --max-len 1 corpus.txt", 2, "--max-len");
    bad_cli("tokenizer decode --wordpiece vocab.txt --masks corpus.txt", 2, "for encode");
    bad_cli("train resnet", 2, "resnet");
}

/* A GGUF file (version 3, no tensors) whose general.architecture is arch. */
static void write_gguf_arch(const char *name, const char *arch)
{
    char p[160];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) return;
    const char *key = "general.architecture";
    uint32_t v = 3, type = 8;
    uint64_t nt = 0, nkv = 1, kl = strlen(key), al = strlen(arch);
    fwrite("GGUF", 1, 4, f), fwrite(&v, 4, 1, f), fwrite(&nt, 8, 1, f), fwrite(&nkv, 8, 1, f);
    fwrite(&kl, 8, 1, f), fwrite(key, 1, kl, f), fwrite(&type, 4, 1, f), fwrite(&al, 8, 1, f);
    fwrite(arch, 1, al, f);
    fclose(f);
}

/* qkv run / chat / perplexity on bad files and prompts; the prompt cases
 * need SmolLM2 from data/ (tools/get_data.sh smollm2). */
static void test_cli_llm(void)
{
    write_gguf_arch("gpt2.gguf", "gpt2");
    bad_cli("run missing.gguf -p hi", 1, "missing.gguf");
    bad_cli("run corpus.txt -p hi", 1, "corpus.txt");
    bad_cli("run gpt2.gguf -p hi", 1, "gpt2");
    bad_cli("chat missing.gguf", 1, "missing.gguf");
    bad_cli("perplexity gpt2.gguf corpus.txt", 1, "gpt2");
    bad_cli("run gpt2.gguf -p ''", 2, "--prompt");
    char model[700], args[1024], root[600]; /* g_qkv is ROOT/build/qkv */
    snprintf(root, sizeof root, "%.*s", (int)(strrchr(g_qkv, '/') - g_qkv), g_qkv);
    char *r = strrchr(root, '/');
    if (r) *r = 0;
    snprintf(model, sizeof model, "%s/data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", root);
    if (access(model, R_OK) != 0) {
        CHECK(0, "%s is missing: run tools/get_data.sh smollm2", model);
        return;
    }
    snprintf(args, sizeof args, "run '%s' --ctx-size 8 -p 'one two three four five six seven eight nine'", model);
    bad_cli(args, 1, "refused");
    snprintf(args, sizeof args, "run '%s' -p \"$(printf 'caf\\351')\"", model);
    bad_cli(args, 1, "not valid UTF-8");
    snprintf(args, sizeof args, "perplexity '%s' corpus.txt", model);
    bad_cli(args, 1, "fewer than one chunk");
}

int main(int argc, char **argv)
{
    (void)argc;
    const char *slash = strrchr(argv[0], '/');
    char rel[512];
    snprintf(rel, sizeof rel, "%.*s/../qkv", slash ? (int)(slash - argv[0]) : 1, slash ? argv[0] : ".");
    if (!realpath(rel, g_qkv)) snprintf(g_qkv, sizeof g_qkv, "%s", rel);
    char dir[] = "/tmp/qkv_bad_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp failed");
        return h_finish("test_bad_inputs");
    }
    snprintf(g_dir, sizeof g_dir, "%s", dir);
    const char *tp = getenv("QKV_BAD_INPUTS_TABLE");
    if (tp && !(g_table = fopen(tp, "w"))) CHECK(0, "cannot write %s", tp);
    if (chdir(g_dir) != 0) CHECK(0, "cannot enter %s", g_dir); /* messages name relative paths */
    if (g_table) fputs("| call | result | message |\n|---|---|---|\n", g_table);
    test_api();
    if (g_table) fputs("\n| command line | result | message (first line of stderr) |\n|---|---|---|\n", g_table);
    test_cli();
    test_cli_llm();
    if (g_table) fclose(g_table);
    char cmd[128];
    if (chdir("/") != 0) fprintf(stderr, "cannot leave %s\n", dir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return h_finish("test_bad_inputs");
}
