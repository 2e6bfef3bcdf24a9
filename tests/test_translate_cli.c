/* test_translate_cli.c: `qkv train translation`, `qkv translate` and
 * `qkv eval` end to end on a tiny English/French set written here (verb x
 * noun phrases): tiny models trained for a few steps in a temporary
 * directory; the files a run leaves; resume continuing bit-exactly (the
 * checkpoint of 3 + 3 steps equals the one of 6 steps, byte for byte);
 * translations, the alignment table (each row sums to 1), the heat map
 * (PNG, SVG) and the explorer (HTML); eval's BLEU and perplexity; the
 * transformer, LSTM, bidirectional, location attention, no attention and
 * French to English; bad input
 * (empty and invalid UTF-8 lines, unknown words, a line longer than the
 * model's limit, a checkpoint of another kind, a corrupt checkpoint,
 * refused option combinations): messages, never a crash. The qkv binary is
 * build/tests/../qkv. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli_run.h"
#include "harness.h"
#include "made_up_data.h"
#include "old_layout.h"

static char qkv_bin[512], tmp[64], out_path[128], err_path[128], in_path[128], data[128];

typedef cli_result result;
#define slurp cli_slurp

/* Runs qkv with args (NULL-terminated); stdin from in_path when input. */
static result run_in(int input, const char *const *args)
{
    return cli_run(qkv_bin, input ? in_path : NULL, out_path, err_path, args, 120);
}

#define RUN(...) run_in(0, (const char *const[]){__VA_ARGS__, NULL})
#define RUN_IN(...) run_in(1, (const char *const[]){__VA_ARGS__, NULL})

static void done(result r) { free(r.out), free(r.err); }

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (f) fputs(text, f), fclose(f);
}

static int file_starts(const char *path, const char *prefix, size_t n)
{
    size_t len;
    char *b = slurp(path, &len);
    int ok = len >= n && !memcmp(b, prefix, n);
    free(b);
    return ok;
}

/* Metadata key of the run DIR's checkpoint, malloc'd ("" when missing). */
static char *meta_of(const char *dir, const char *key)
{
    char path[256], *v = NULL;
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", dir);
    if (qkv_checkpoint_read_meta(path, key, &v) != QKV_OK) v = strdup("");
    return v;
}

static int contains(const char *path, const char *needle)
{
    char *b = slurp(path, NULL);
    int ok = strstr(b, needle) != NULL;
    free(b);
    return ok;
}

/* A tiny model: 16-wide, batch 8, one thread (bit-exact runs). */
#define TINY "--data", data, "--hidden", "16", "--embed", "16", "--batch", "8", "--threads", "1"

static void test_train_files(const char *o1)
{
    char plots[256], path[256];
    snprintf(plots, sizeof plots, "%s/p", o1);
    result r = RUN("train", "translation", TINY, "--out", o1, "--steps", "6", "--eval-every", "3",
                   "--plots", plots);
    CHECK(r.status == 0, "train translation: exit %d, stderr: %s", r.status, r.err);
    CHECK(strstr(r.out, "validation loss") && strstr(r.out, "sentences/s") && strstr(r.out, "-> "),
          "train translation's output lacks the validation loss, the rate or the translations:\n%s", r.out);
    static const char *const files[] = {"checkpoint.safetensors", "words.src", "words.tgt", "log.tsv"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", o1, files[i]);
        CHECK(access(path, R_OK) == 0, "train translation left no %s", path);
    }
    /* the configuration is in the checkpoint's metadata, with its kind */
    char *kind = meta_of(o1, "kind"), *cfg = meta_of(o1, "translation.config");
    CHECK(!strcmp(kind, "translation") && !strncmp(cfg, "model=rnn\n", 10),
          "the checkpoint's kind '%s' or translation.config '%s'", kind, cfg);
    free(kind), free(cfg);
    snprintf(path, sizeof path, "%s/p_loss.png", o1);
    CHECK(file_starts(path, "\x89PNG", 4), "--plots wrote no PNG at %s", path);
    done(r);
    /* a second run into the same directory is refused without --resume */
    r = RUN("train", "translation", TINY, "--out", o1, "--steps", "6");
    CHECK(r.status == 2 && strstr(r.err, "--resume"), "training over a model: exit %d, %s", r.status, r.err);
    done(r);
}

/* The run folders whole (6 steps) and parts (3 + 3 resumed) hold the same
 * checkpoint.safetensors, more than 1000 bytes; what: the message's start. */
static void check_same_checkpoint(const char *whole, const char *parts, const char *what)
{
    char a[256], b[256];
    snprintf(a, sizeof a, "%s/checkpoint.safetensors", whole);
    snprintf(b, sizeof b, "%s/checkpoint.safetensors", parts);
    size_t la, lb;
    char *x = slurp(a, &la), *y = slurp(b, &lb);
    CHECK(la > 1000 && la == lb && !memcmp(x, y, la), "%s3 + 3 resumed steps differ from 6 steps (%zu and %zu bytes)",
          what, la, lb);
    free(x), free(y);
}

static void test_resume(const char *o1)
{
    char o2[128];
    snprintf(o2, sizeof o2, "%s/resume", tmp);
    result r = RUN("train", "translation", TINY, "--out", o2, "--steps", "3", "--eval-every", "3");
    CHECK(r.status == 0, "train 3 steps: exit %d, %s", r.status, r.err);
    done(r);
    r = RUN("train", "translation", "--out", o2, "--resume", "--steps", "6", "--eval-every", "3", "--threads", "1");
    CHECK(r.status == 0 && strstr(r.out, "resuming at step 3"), "resume: exit %d, %s%s", r.status, r.out, r.err);
    done(r);
    check_same_checkpoint(o1, o2, "");
}

/* The same in the BF16 mode: the metadata keeps the precision, --resume takes
 * it from there and ends bit for bit where 6 straight steps end. */
static void test_resume_bf16(void)
{
    char o3[128], o4[128], a[256];
    snprintf(o3, sizeof o3, "%s/bf16", tmp);
    snprintf(o4, sizeof o4, "%s/bf16_resume", tmp);
    result r = RUN("train", "translation", TINY, "--out", o3, "--steps", "6", "--eval-every", "3", "--precision", "bf16");
    CHECK(r.status == 0, "train --precision bf16: exit %d, %s", r.status, r.err);
    done(r);
    r = RUN("train", "translation", TINY, "--out", o4, "--steps", "3", "--eval-every", "3", "--precision", "bf16");
    CHECK(r.status == 0, "train 3 steps --precision bf16: exit %d, %s", r.status, r.err);
    done(r);
    r = RUN("train", "translation", "--out", o4, "--resume", "--steps", "6", "--eval-every", "3", "--threads", "1");
    CHECK(r.status == 0 && strstr(r.out, "resuming at step 3"), "resume (bf16): exit %d, %s%s", r.status, r.out, r.err);
    done(r);
    char *prec = meta_of(o4, "translation.precision");
    CHECK(!strcmp(prec, "bf16"), "the checkpoint does not keep the precision: '%s'", prec);
    free(prec);
    (void)a;
    check_same_checkpoint(o3, o4, "bf16: ");
}

/* Each row of the alignment table after the header sums to 1 (two decimals). */
static int check_table(const char *out, int *rows)
{
    const char *t = strstr(out, "columns: input words):\n");
    if (!t) return 0;
    t = strchr(t, '\n') + 1;
    t = strchr(t, '\n'); /* the header of input words */
    *rows = 0;
    while (t && t[1] && t[1] != '\n') {
        const char *line = t + 1, *end = strchr(line, '\n');
        if (!end) break;
        double sum = 0;
        int n = 0;
        for (const char *p = line; p < end; p++)
            if (p[0] == '0' && p[1] == '.' && (p == line || p[-1] == ' ')) sum += strtod(p, NULL), n++;
            else if (p[0] == '1' && p[1] == '.' && p[-1] == ' ') sum += strtod(p, NULL), n++;
        if (!n) break;
        if (fabs(sum - 1) > 0.005 * n + 1e-9) return 0;
        (*rows)++;
        t = end;
    }
    return *rows > 0;
}

static void test_translate(const char *o1)
{
    char png[256], svg[256], html[256], png2[256];
    snprintf(png, sizeof png, "%s/a.png", tmp);
    snprintf(png2, sizeof png2, "%s/a-2.png", tmp);
    snprintf(svg, sizeof svg, "%s/a.svg", tmp);
    snprintf(html, sizeof html, "%s/a.html", tmp);
    result r = RUN("translate", o1, "open the file", "save image", "--show-attention", "--png", png,
                   "--svg", svg, "--html", html);
    CHECK(r.status == 0, "translate: exit %d, %s", r.status, r.err);
    int rows = 0;
    CHECK(check_table(r.out, &rows), "the alignment table is missing or a row does not sum to 1:\n%s", r.out);
    CHECK(strstr(r.out, "open") && strstr(r.out, "<eos>"), "the table lacks the input words:\n%s", r.out);
    CHECK(file_starts(png, "\x89PNG", 4) && file_starts(png2, "\x89PNG", 4), "--png wrote no %s or %s", png, png2);
    CHECK(contains(svg, "<svg") && contains(svg, "open"), "--svg wrote no SVG with the words");
    CHECK(contains(html, "<html") || contains(html, "<!DOCTYPE"), "--html wrote no page");
    done(r);
    /* the checkpoint file itself works too; beam search */
    char ck[256];
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", o1);
    r = RUN("translate", ck, "--beam", "3", "copy the page");
    CHECK(r.status == 0 && strchr(r.out, '\n'), "translate --beam 3: exit %d, %s", r.status, r.err);
    done(r);
}

static void test_bad_lines(const char *o1)
{
    /* empty, invalid UTF-8, unknown words, too long (the model's limit is 24 tokens) */
    write_file(in_path, "open the file\n\n  \n\xff\xfe broken\nfrobnicate the widget\n"
                        "open the file open the file open the file open the file open the file "
                        "open the file open the file open the file\n");
    result r = RUN_IN("translate", o1);
    CHECK(r.status == 0, "translate with bad lines: exit %d (it must go on), %s", r.status, r.err);
    int lines = 0;
    for (const char *p = r.out; *p; p++) lines += *p == '\n';
    CHECK(lines == 6, "6 input lines gave %d output lines", lines);
    CHECK(strstr(r.err, "line 2 is empty") && strstr(r.err, "line 3 is empty") &&
          strstr(r.err, "line 4 is not valid UTF-8") && strstr(r.err, "line 5: 2 words") &&
          strstr(r.err, "<unk>") && strstr(r.err, "line 6 has") && strstr(r.err, "first 23"),
          "the messages for bad lines are not all there:\n%s", r.err);
    done(r);
}

static void test_eval(const char *o1)
{
    result r = RUN("eval", o1, "--split", "test");
    CHECK(r.status == 0, "eval: exit %d, %s", r.status, r.err);
    double bleu = -1, ppl = -1;
    const char *b = strstr(r.out, "BLEU "), *p = strstr(r.out, "perplexity ");
    if (b) bleu = strtod(b + 5, NULL);
    if (p) ppl = strtod(p + 11, NULL);
    CHECK(bleu >= 0 && bleu <= 100 && ppl >= 1 && isfinite(ppl) && strstr(r.out, "exact match"),
          "eval's output lacks BLEU in [0,100] or a perplexity >= 1:\n%s", r.out);
    done(r);
    r = RUN("eval", "--split", "valid", o1, "--limit", "2");
    CHECK(r.status == 0 && strstr(r.out, "2 pairs"), "eval with options first: exit %d, %s%s", r.status, r.out, r.err);
    done(r);
}

static void test_other_models(void)
{
    char o[128];
    static const char *const kinds[][8] = {
        {"--model", "transformer", "--heads", "2", "--layers", "1", NULL},
        {"--rnn", "lstm", "--bidirectional", "--attention", "reduced", "--layers", "2", NULL},
        {"--attention", "location", NULL},
        {"--attention", "none", NULL},
        {"--direction", "fr-en", NULL}};
    for (int k = 0; k < 5; k++) {
        snprintf(o, sizeof o, "%s/model%d", tmp, k);
        const char *args[40] = {"train", "translation", TINY, "--out", o, "--steps", "3", "--eval-every", "3"};
        int n = 0;
        while (args[n]) n++;
        for (int i = 0; kinds[k][i]; i++) args[n++] = kinds[k][i];
        args[n] = NULL;
        result r = run_in(0, args);
        CHECK(r.status == 0, "train %s: exit %d, %s", kinds[k][1], r.status, r.err);
        done(r);
        r = RUN("translate", o, "--show-attention", k == 4 ? "fermer le dossier" : "close the folder");
        int rows = 0;
        if (strcmp(kinds[k][1], "none"))
            CHECK(r.status == 0 && check_table(r.out, &rows), "translate --show-attention (%s): exit %d\n%s%s",
                  kinds[k][1], r.status, r.out, r.err);
        else
            CHECK(r.status == 0 && strstr(r.err, "no attention"), "--attention none's table: exit %d, %s",
                  r.status, r.err);
        done(r);
        r = RUN("translate", o, "--beam", "3", "open the file", "save");
        CHECK(r.status == 0, "translate --beam 3 (%s): exit %d, %s", kinds[k][1], r.status, r.err);
        done(r);
        r = RUN("eval", o, "--limit", "3");
        CHECK(r.status == 0 && strstr(r.out, "BLEU"), "eval (%s): exit %d, %s", kinds[k][1], r.status, r.err);
        done(r);
    }
    /* reduced rank: k = hidden / 4 by default (16 / 4), kept in the metadata, or --rank */
    snprintf(o, sizeof o, "%s/model1", tmp);
    char *cfg = meta_of(o, "translation.config");
    CHECK(strstr(cfg, "\nrank=4\n"), "the reduced-rank model's translation.config lacks 'rank=4': %s", cfg);
    free(cfg);
    snprintf(o, sizeof o, "%s/rank3", tmp);
    result r = RUN("train", "translation", TINY, "--out", o, "--steps", "1", "--eval-every", "1", "--attention",
                   "reduced", "--rank", "3");
    /* parameters: dot's, plus U_a and V_a of 3 x 16 each */
    int64_t p3 = -1, pdot = -1;
    const char *q = strstr(r.out, " parameters");
    if (q) {
        while (q > r.out && q[-1] >= '0' && q[-1] <= '9') q--;
        p3 = strtoll(q, NULL, 10);
    }
    CHECK(r.status == 0, "--rank 3: exit %d, %s", r.status, r.err);
    done(r);
    snprintf(o, sizeof o, "%s/dot", tmp);
    r = RUN("train", "translation", TINY, "--out", o, "--steps", "1", "--eval-every", "1", "--attention", "dot");
    q = strstr(r.out, " parameters");
    if (q) {
        while (q > r.out && q[-1] >= '0' && q[-1] <= '9') q--;
        pdot = strtoll(q, NULL, 10);
    }
    CHECK(r.status == 0 && p3 == pdot + 2 * 3 * 16, "--rank 3: %lld parameters, dot %lld (expected + 96)",
          (long long)p3, (long long)pdot);
    done(r);
    r = RUN("train", "translation", TINY, "--out", o, "--attention", "dot", "--rank", "3");
    CHECK(r.status == 2 && strstr(r.err, "--rank is for"), "--rank with dot: exit %d, %s", r.status, r.err);
    done(r);
}

/* The tokenizers of the run from into the folder to. */
static void copy_words(const char *from, const char *to)
{
    static const char *const files[] = {"words.src", "words.tgt"};
    char path[256];
    for (int i = 0; i < 2; i++) {
        size_t len;
        snprintf(path, sizeof path, "%s/%s", from, files[i]);
        char *b = slurp(path, &len);
        snprintf(path, sizeof path, "%s/%s", to, files[i]);
        FILE *f = fopen(path, "wb");
        if (f && b) fwrite(b, 1, len, f);
        if (f) fclose(f);
        free(b);
    }
}

static void test_bad_checkpoints(const char *o1)
{
    char dir[128], path[256], ck[256];
    /* another kind */
    snprintf(dir, sizeof dir, "%s/vision", tmp);
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/config.txt", dir);
    write_file(path, "kind vision\n");
    result r = RUN("eval", dir);
    CHECK(r.status == 1 && strstr(r.err, "kind 'vision'"), "eval of another kind: exit %d, %s", r.status, r.err);
    done(r);
    r = RUN("translate", dir, "open the file");
    CHECK(r.status == 1 && strstr(r.err, "not a translation model"), "translate with another kind: exit %d, %s",
          r.status, r.err);
    done(r);
    /* no config: not a checkpoint directory */
    r = RUN("translate", tmp, "x");
    CHECK(r.status == 1 && strstr(r.err, "config.txt"), "translate of a plain directory: exit %d, %s", r.status, r.err);
    done(r);
    /* a truncated checkpoint beside a good config */
    snprintf(dir, sizeof dir, "%s/cut", tmp);
    mkdir(dir, 0700);
    copy_words(o1, dir);
    size_t len;
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", o1);
    char *b = slurp(path, &len);
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", dir);
    FILE *f = fopen(ck, "wb");
    if (f) fwrite(b, 1, len / 2, f), fclose(f);
    free(b);
    r = RUN("translate", dir, "open the file");
    CHECK(r.status == 1 && strstr(r.err, "qkv translate:"), "a truncated checkpoint: exit %d, %s", r.status, r.err);
    done(r);
    r = RUN("eval", dir);
    CHECK(r.status == 1, "eval of a truncated checkpoint: exit %d, %s", r.status, r.err);
    done(r);
    /* option combinations refused before training */
    r = RUN("train", "translation", "--attention", "dot", "--bidirectional", "--out", dir);
    CHECK(r.status == 2 && strstr(r.err, "bidirectional"), "dot + bidirectional: exit %d, %s", r.status, r.err);
    done(r);
    r = RUN("train", "translation", "--attention", "sideways");
    CHECK(r.status == 2 && strstr(r.err, "sideways"), "an unknown attention: exit %d, %s", r.status, r.err);
    done(r);
    snprintf(path, sizeof path, "%s/nodata", tmp);
    r = RUN("train", "translation", "--data", path, "--out", path);
    CHECK(r.status == 1 && strstr(r.err, "get_data.sh"), "training without data: exit %d, %s", r.status, r.err);
    done(r);
    r = RUN("translate");
    CHECK(r.status == 2, "translate with no checkpoint: exit %d", r.status);
    done(r);
    r = RUN("eval", "--split");
    CHECK(r.status == 2 && strstr(r.err, "needs a value"), "eval --split: exit %d, %s", r.status, r.err);
    done(r);
    r = RUN("eval", "--split", "test");
    CHECK(r.status == 2 && strstr(r.err, "expects 1 argument"), "eval with no checkpoint: exit %d, %s", r.status, r.err);
    done(r);
}

/* A run of an older version: a checkpoint without the configuration in
 * its metadata (made here from o1's parameters) and a config.txt beside it
 * ("key value" lines, written from o1's metadata as those versions wrote
 * them). translate and eval still open it, and translate as o1 does. */
static void test_old_layout(const char *o1)
{
    char dir[128], path[256];
    snprintf(dir, sizeof dir, "%s/old", tmp);
    mkdir(dir, 0700);
    char ck[256];
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", o1);
    snprintf(ck, sizeof ck, "%s/checkpoint.safetensors", dir);
    old_layout_save(path, ck, qkv_optim_adam_opts_default(), NULL, NULL, 0);
    char *cfg = meta_of(o1, "translation.config"), *train = meta_of(o1, "translation.train");
    char text[4096];
    int n = snprintf(text, sizeof text, "kind translation\n%s%ssrc_tokenizer words.src\ntgt_tokenizer words.tgt\n",
                     cfg, train);
    for (int i = 0; i < n; i++)
        if (text[i] == '=') text[i] = ' ';
    free(cfg), free(train);
    snprintf(path, sizeof path, "%s/config.txt", dir);
    write_file(path, text);
    copy_words(o1, dir);
    result a = RUN("translate", o1, "open the file"), b = RUN("translate", dir, "open the file");
    CHECK(a.status == 0 && b.status == 0 && !strcmp(a.out, b.out),
          "translate of the older layout: exit %d, %s%s (the run's own: %s)", b.status, b.out, b.err, a.out);
    done(a), done(b);
    b = RUN("eval", dir, "--limit", "3");
    CHECK(b.status == 0 && strstr(b.out, "BLEU"), "eval of the older layout: exit %d, %s", b.status, b.err);
    done(b);
}

int main(int argc, char **argv)
{
    (void)argc;
    snprintf(tmp, sizeof tmp, "/tmp/qkv_mt_XXXXXX");
    if (cli_setup(argv[0], qkv_bin, sizeof qkv_bin, tmp, out_path, sizeof out_path, err_path,
                  sizeof err_path))
        return h_finish("test_translate_cli");
    snprintf(in_path, sizeof in_path, "%s/in.txt", tmp);
    snprintf(data, sizeof data, "%s/data", tmp);
    write_pairs(data);
    char o1[128];
    snprintf(o1, sizeof o1, "%s/six", tmp);
    test_train_files(o1);
    test_resume(o1);
    test_resume_bf16();
    test_translate(o1);
    test_bad_lines(o1);
    test_eval(o1);
    test_other_models();
    test_bad_checkpoints(o1);
    test_old_layout(o1);
    h_tmpdir_remove(tmp);
    return h_finish("test_translate_cli");
}
