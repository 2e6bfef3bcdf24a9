/* test_cli.c: the qkv command's line: `qkv help`, `qkv help CMD`,
 * `qkv CMD --help` and -h for every command, --version, unknown commands
 * and options (exit 2, named on stderr), bad option values, --opt=value and
 * --opt value, a runtime error (exit 1), and the demo's worked example with
 * and without the command name, and its figures (--png, --svg, --pdf). Trains nothing: toy only gets --help and
 * arguments it must refuse. The qkv binary is found beside the test's
 * directory (build/tests/../qkv, build-san/tests/../qkv); each run is
 * killed after 60 s. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, posix_spawn, nanosleep */
#include <unistd.h>
#include "cli_run.h"
#include "harness.h"

static char qkv_bin[512], tmpdir[64], out_path[128], err_path[128];

static const char *const commands[] = {"demo", "toy", "inspect", "train", "generate", "translate", "eval", "help"};
enum { NCOMMANDS = (int)(sizeof commands / sizeof *commands) };

typedef cli_result result;

static char *slurp(const char *path) { return cli_slurp(path, NULL); }

/* Runs qkv with args (NULL-terminated), without a shell. */
static result run(const char *const *args)
{
    return cli_run(qkv_bin, NULL, out_path, err_path, args, 60);
}

#define RUN(...) run((const char *const[]){__VA_ARGS__, NULL})

static void done(result r)
{
    free(r.out);
    free(r.err);
}

/* Every command's --help, -h and `qkv help CMD`: its usage on stdout, exit 0;
 * the usage names the command's options. */
static void test_command_help(void)
{
    const char *const mentions[NCOMMANDS][16] = {
        {"-p, --png FILE", "--svg FILE", "--pdf FILE", "--html FILE"},
        {"-t, --task", "-m, --model", "--pe", "-n, --train", "--test", "-l, --length", "-e, --epochs",
         "-s, --seed", "--scaled", "-a, --all", "-p, --plots PREFIX", "--format png|svg|pdf", "--png PREFIX"},
        {"FILE.safetensors"},
        {"KIND", "toy", "lm", "translation"},
        {"CHECKPOINT", "-p, --prompt TEXT", "-n, --max-new-tokens N", "-t, --temperature T", "-k, --top-k K",
         "--top-p P", "-s, --seed S", "--html FILE", "-j, --threads N"},
        {"CHECKPOINT", "-k, --beam K", "-a, --show-attention", "--png FILE", "--svg FILE", "--html FILE"},
        {"CHECKPOINT", "translation", "--split train|valid|test", "-k, --beam K", "-n, --limit N"},
        {"[COMMAND]"}};
    for (int i = 0; i < NCOMMANDS; i++) {
        const char *cmd = commands[i];
        char head[64];
        snprintf(head, sizeof head, "usage: qkv %s", cmd);
        result r = RUN(cmd, "--help"), h = RUN(cmd, "-h"), via = RUN("help", cmd);
        CHECK(r.status == 0 && !strncmp(r.out, head, strlen(head)) && !r.err[0],
              "qkv %s --help: exit %d, stdout:\n%s\nstderr: %s", cmd, r.status, r.out, r.err);
        CHECK(strstr(r.out, "-h, --help"), "qkv %s --help does not list --help:\n%s", cmd, r.out);
        for (int k = 0; k < 16 && mentions[i][k]; k++)
            CHECK(strstr(r.out, mentions[i][k]), "qkv %s --help does not mention %s:\n%s", cmd,
                  mentions[i][k], r.out);
        CHECK(h.status == 0 && !strcmp(h.out, r.out) && !h.err[0], "qkv %s -h: exit %d:\n%s%s", cmd,
              h.status, h.out, h.err);
        CHECK(via.status == 0 && !strcmp(via.out, r.out) && !via.err[0], "qkv help %s: exit %d:\n%s%s",
              cmd, via.status, via.out, via.err);
        done(r), done(h), done(via);
    }
}

/* `qkv help`, `qkv --help` and `qkv -h`: the same list, a line per command. */
static void test_list(void)
{
    result r = RUN("help"), l = RUN("--help"), s = RUN("-h");
    CHECK(r.status == 0 && !r.err[0] && strstr(r.out, "usage: qkv COMMAND"), "qkv help: exit %d:\n%s%s",
          r.status, r.out, r.err);
    for (int i = 0; i < NCOMMANDS; i++) {
        char line[32];
        snprintf(line, sizeof line, "\n  %s ", commands[i]);
        const char *p = strstr(r.out, line);
        if (p) p += strlen(line) + strspn(p + strlen(line), " ");
        CHECK(p && *p > ' ', "qkv help: no line with a summary for %s:\n%s", commands[i], r.out);
    }
    CHECK(strstr(r.out, "--version"), "qkv help does not mention --version:\n%s", r.out);
    CHECK(l.status == 0 && !strcmp(l.out, r.out), "qkv --help: exit %d:\n%s", l.status, l.out);
    CHECK(s.status == 0 && !strcmp(s.out, r.out), "qkv -h: exit %d:\n%s", s.status, s.out);
    done(r), done(l), done(s);
}

static void test_version(void)
{
    result r = RUN("--version");
    char want[64];
    snprintf(want, sizeof want, "qkv %s\n", qkv_version());
    CHECK(r.status == 0 && !strcmp(r.out, want) && !strcmp(want, "qkv " QKV_VERSION "\n") && !r.err[0],
          "qkv --version: exit %d, '%s' (want '%s')", r.status, r.out, want);
    done(r);
}

/* A usage error: exit 2, nothing on stdout, want on stderr. */
static void check_usage_error(result r, const char *what, const char *want)
{
    CHECK(r.status == 2 && !r.out[0] && strstr(r.err, want),
          "%s: exit %d (want 2), stderr '%s' (want '%s'), stdout:\n%.300s", what, r.status, r.err, want,
          r.out);
    done(r);
}

static void test_unknown(void)
{
    for (int i = 0; i < NCOMMANDS; i++) {
        const char *cmd = commands[i];
        char want[64];
        snprintf(want, sizeof want, "qkv %s: unknown option '--bogus'", cmd);
        check_usage_error(RUN(cmd, "--bogus"), cmd, want);
        snprintf(want, sizeof want, "qkv %s: unknown option '-Z'", cmd);
        check_usage_error(RUN(cmd, "-Z"), cmd, want);
    }
    check_usage_error(RUN("toy", "--bogus=3"), "toy --bogus=3", "unknown option '--bogus'");
    check_usage_error(RUN("bogus"), "qkv bogus", "unknown command 'bogus'");
    check_usage_error(RUN("help", "bogus"), "qkv help bogus", "unknown command 'bogus'");
    check_usage_error(RUN("--bogus"), "qkv --bogus", "unknown option '--bogus'");
    check_usage_error(RUN("--version", "x"), "qkv --version x", "--version");
    check_usage_error(RUN("train"), "qkv train", "qkv train: which kind of model?");
    check_usage_error(RUN("train", "bogus"), "qkv train bogus", "qkv train: unknown kind 'bogus'");
    /* a kind's own errors name it */
    check_usage_error(RUN("train", "toy", "--epochs", "x"), "qkv train toy --epochs x",
                      "qkv train toy: --epochs: 'x' is not a whole number");
    check_usage_error(RUN("train", "lm", "--steps", "x"), "qkv train lm --steps x",
                      "qkv train lm: --steps: 'x' is not a whole number");
    /* --precision, every trainer's (the same helper, src/cli/args.c) */
    static const char *const kinds[] = {"toy", "lm", "translation", "vit", "cnn", "mlp"};
    for (int i = 0; i < 6; i++) {
        char what[64], want[96];
        snprintf(what, sizeof what, "qkv train %s --precision fp16", kinds[i]);
        snprintf(want, sizeof want, "qkv train %s: --precision: 'fp16' is not one of fp32, bf16", kinds[i]);
        check_usage_error(RUN("train", kinds[i], "--precision", "fp16"), what, want);
        result h = RUN("train", kinds[i], "--help");
        CHECK(h.status == 0 && strstr(h.out, "--precision"), "qkv train %s --help does not list --precision", kinds[i]);
        done(h);
    }
}

/* Values toy must refuse, each before any training starts. */
static void test_bad_values(void)
{
    static const struct {
        const char *args[5], *want;
    } cases[] = {
        {{"--epochs", "abc"}, "--epochs: 'abc' is not a whole number"},
        {{"--epochs=abc"}, "--epochs: 'abc' is not a whole number"},
        {{"-e", "abc"}, "--epochs: 'abc'"},
        {{"--epochs", "5x"}, "--epochs: '5x'"},
        {{"--epochs", "1.5"}, "--epochs: '1.5'"},
        {{"--epochs", " 5"}, "--epochs: ' 5'"},
        {{"--epochs"}, "option '--epochs' needs a value"},
        {{"--epochs="}, "option '--epochs' needs a value"},
        {{"--epochs", "-3"}, "--epochs: -3 is out of range"},
        {{"--epochs", "0"}, "--epochs: 0 is out of range"},
        {{"--epochs", "99999999999999999999"}, "--epochs: 99999999999999999999 is out of range"},
        {{"--length", "39"}, "--length: 39 is out of range"},
        {{"--length", "1048577"}, "--length: 1048577 is out of range"},
        {{"--train", "99"}, "--train: 99 is out of range"},
        {{"--test", "3"}, "--test: 3 is out of range"},
        {{"--seed", "-1"}, "--seed: -1 is out of range"},
        {{"--seed", "9223372036854775808"}, "--seed: 9223372036854775808 is out of range"},
        {{"--train", "1000000", "--length", "1000"}, "--train 1000000 times --length 1000"},
        {{"--test", "300000", "--length", "1000"}, "--test 300000 times --length 1000"},
        {{"--task", "bogus"}, "--task: 'bogus' is not one of pairs, positional"},
        {{"--model=rnn"}, "--model: 'rnn'"},
        {{"--pe", "x"}, "--pe: 'x' is not one of none, binary, sinusoidal"},
        {{"--scaled=1"}, "option '--scaled' takes no value"},
        {{"--png"}, "option '--png' needs a value"},
        {{"--plots"}, "option '--plots' needs a value"},
        {{"--format", "jpg", "--plots", "x"}, "--format: 'jpg' is not one of png, svg, pdf"},
        {{"--format", "svg"}, "--format needs --plots PREFIX"},
        {{"--plots", "x.PNG", "--format", "svg"}, "--format svg, but the prefix 'x.PNG' ends in .png"},
        {{"extra"}, "unexpected argument 'extra'"},
        {{"--compare-precision", "--precision", "bf16"}, "--compare-precision runs both precisions"},
        {{"--compare-precision=1"}, "option '--compare-precision' takes no value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *const *a = cases[i].args;
        char what[128];
        snprintf(what, sizeof what, "qkv toy %s %s %s %s", a[0], a[1] ? a[1] : "", a[2] ? a[2] : "",
                 a[3] ? a[3] : "");
        check_usage_error(RUN("toy", a[0], a[1], a[2], a[3], a[4]), what, cases[i].want);
    }
    /* Good values in both forms get past the parser: the error is the last option's. */
    check_usage_error(RUN("toy", "--seed=7", "-e", "3", "--length", "40", "--task=pairs", "-mconv", "--pe",
                          "binary", "-a", "--scaled", "--train=100", "--test", "4", "--png", "x", "--plots", "y.svg",
                          "--format=svg", "--bogus"),
                      "toy with good options, then --bogus", "qkv toy: unknown option '--bogus'");
    check_usage_error(RUN("demo", "--png"), "demo --png", "qkv demo: option '--png' needs a value");
    check_usage_error(RUN("demo", "--svg"), "demo --svg", "qkv demo: option '--svg' needs a value");
    check_usage_error(RUN("demo", "--png", "maps.svg"), "demo --png maps.svg", "qkv demo: --png: 'maps.svg' does not end in .png");
    check_usage_error(RUN("demo", "--pdf=maps"), "demo --pdf=maps", "qkv demo: --pdf: 'maps' does not end in .pdf");
    check_usage_error(RUN("demo", "--svg", "a.svg/b"), "demo --svg a.svg/b", "does not end in .svg");
    check_usage_error(RUN("demo", "extra"), "demo extra", "qkv demo: unexpected argument 'extra'");
    check_usage_error(RUN("inspect"), "inspect", "qkv inspect: expects 1 argument, got 0");
}

/* The worked example's attention weights, as the lecture notes give them. */
static const char weights[] = "attention weights softmax(scores), rows: queries, columns: keys\n"
                              "            input 1  input 2  input 3\n"
                              "   input 1   0.0634   0.4683   0.4683\n";

static void test_demo(void)
{
    result r = RUN("demo"), bare = run((const char *const[]){NULL});
    CHECK(r.status == 0 && strstr(r.out, weights) && strstr(r.out, "head 1 attention weights") && !r.err[0],
          "qkv demo: exit %d, stdout:\n%s\nstderr: %s", r.status, r.out, r.err);
    CHECK(bare.status == 0 && !strcmp(bare.out, r.out), "qkv alone: exit %d, not the demo:\n%s", bare.status,
          bare.out);
    done(r), done(bare);
    /* --png=FILE, --png FILE and -p FILE each write a PNG; --svg and --pdf
     * (any case of the extension) an SVG with the words as text and a PDF */
    static const struct {
        const char *opt, *name, *magic;
    } forms[] = {{"--png=", "a.png", "\x89PNG\r\n\x1a\n"}, {"--png", "b.png", "\x89PNG\r\n\x1a\n"},
                 {"-p", "c.png", "\x89PNG\r\n\x1a\n"},      {"--svg", "d.svg", "<?xml version=\"1.0\""},
                 {"--pdf", "e.PDF", "%PDF-"}, {"--html", "f.html", "<!DOCTYPE html>"}};
    for (int i = 0; i < 6; i++) {
        char path[128], joined[160];
        snprintf(path, sizeof path, "%s/%s", tmpdir, forms[i].name);
        snprintf(joined, sizeof joined, "--png=%s", path);
        r = i ? RUN("demo", forms[i].opt, path) : RUN("demo", joined);
        char *body = slurp(path);
        char wrote[160];
        snprintf(wrote, sizeof wrote, "wrote %s:", path);
        CHECK(r.status == 0 && !memcmp(body, forms[i].magic, strlen(forms[i].magic)) && strstr(r.out, wrote) &&
                  strstr(r.out, weights),
              "qkv demo %s %s: exit %d, stderr %s", forms[i].opt, path, r.status, r.err);
        if (i == 3)
            CHECK(strstr(body, "<svg") && strstr(body, ">cat</text>") && strstr(body, ">mat</text>") &&
                      strstr(body, ">head 1</text>"),
                  "the demo's SVG lacks the words or head titles as text");
        if (i == 5) /* the explorer page: its data holds the sentence, 1 layer of 2 heads */
            CHECK(body && strstr(body, "\"queries\":[\"the\",\"cat\",\"sat\",\"on\",\"the\",\"mat\"]") &&
                      strstr(body, "\"layers\":1") && strstr(body, "\"heads\":2"),
                  "the demo's explorer page lacks its tokens or sizes");
        free(body);
        unlink(path);
        done(r);
    }
    /* all three at once */
    char p1[128], p2[128], p3[128];
    snprintf(p1, sizeof p1, "%s/all.png", tmpdir), snprintf(p2, sizeof p2, "%s/all.svg", tmpdir);
    snprintf(p3, sizeof p3, "%s/all.pdf", tmpdir);
    r = RUN("demo", "--pdf", p3, "--png", p1, "--svg", p2);
    CHECK(r.status == 0 && access(p1, F_OK) == 0 && access(p2, F_OK) == 0 && access(p3, F_OK) == 0,
          "demo with all three: exit %d, %s", r.status, r.err);
    unlink(p1), unlink(p2), unlink(p3);
    done(r);
    /* a runtime error: exit 1 */
    char path[128];
    snprintf(path, sizeof path, "%s/no/such/dir.png", tmpdir);
    r = RUN("demo", "--png", path);
    CHECK(r.status == 1 && strstr(r.err, "qkv: png:") && strstr(r.err, path) && strstr(r.err, "No such file"),
          "demo --png into a missing folder: exit %d, stderr %s", r.status, r.err);
    done(r);
}

int main(int argc, char **argv)
{
    (void)argc;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/qkv_cli_XXXXXX");
    if (cli_setup(argv[0], qkv_bin, sizeof qkv_bin, tmpdir, out_path, sizeof out_path, err_path,
                  sizeof err_path))
        return h_finish("test_cli");
    test_command_help();
    test_list();
    test_version();
    test_unknown();
    test_bad_values();
    test_demo();
    unlink(out_path);
    unlink(err_path);
    if (rmdir(tmpdir) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return h_finish("test_cli");
}
