/* cli_shell.h: running "qkv ARGS" through the shell in a test's temporary
 * folder (test_lm_cli.c, test_vision_cli.c), and the check that a run
 * stopped and resumed ends bit for bit where the uninterrupted run ends,
 * and commands that must be refused.
 * The test calls cli_shell_setup first and cli_shell_cleanup last. */
#ifndef QKV_TEST_CLI_SHELL_H
#define QKV_TEST_CLI_SHELL_H
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cli_run.h"
#include "harness.h"

static char qkv_bin[512], tmpdir[64];

#define slurp cli_slurp /* tests/cli_run.h */

/* Runs "qkv ARGS" through the shell in tmpdir's folder; stdout and stderr
 * into *out and *err (malloc'd); the exit status, -1 if killed. */
static int qkv(char **out, char **err, const char *fmt, ...)
{
    char args[4096], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "cd '%s' && OMP_NUM_THREADS=1 timeout 120 '%s' %s > out.txt 2> err.txt", tmpdir,
             qkv_bin, args);
    int st = system(cmd);
    char p[128];
    snprintf(p, sizeof p, "%s/out.txt", tmpdir);
    *out = slurp(p, NULL);
    snprintf(p, sizeof p, "%s/err.txt", tmpdir);
    *err = slurp(p, NULL);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* tmpdir/name (tests/cli_run.h's cli_path: 16 buffers used in turn). */
static const char *path_in(const char *name) { return cli_path(tmpdir, name); }

/* qkv_bin: the absolute path of the qkv binary beside the test's
 * directory (build/tests/../qkv); tmpdir: a new folder made from
 * template (a mkdtemp template). 0, or -1 (a failed CHECK) when either
 * is missing. */
static int cli_shell_setup(const char *argv0, const char *template)
{
    const char *slash = strrchr(argv0, '/');
    snprintf(qkv_bin, sizeof qkv_bin, "%.*s/../qkv", slash ? (int)(slash - argv0) : 1, slash ? argv0 : ".");
    char *abs = realpath(qkv_bin, NULL);
    snprintf(tmpdir, sizeof tmpdir, "%s", template);
    if (!abs || access(abs, X_OK) != 0 || !mkdtemp(tmpdir)) {
        CHECK(0, "no qkv binary at %s (build it first) or no temporary directory", qkv_bin);
        free(abs);
        return -1;
    }
    snprintf(qkv_bin, sizeof qkv_bin, "%s", abs);
    free(abs);
    return 0;
}

/* Removes tmpdir and all in it. */
static void cli_shell_cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
}

/* Commands that must fail: "qkv CMD ARGS" exits with status, needle on stderr. */
typedef struct {
    const char *args, *needle;
    int status;
} refusal;

/* Each of t[0..n) refused as it says; cmd ("" for none) goes before its args. */
static void check_refusals(const char *cmd, const refusal *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char *o, *e;
        int rc = qkv(&o, &e, "%s%s%s", cmd, *cmd ? " " : "", t[i].args);
        CHECK(rc == t[i].status && strstr(e, t[i].needle), "qkv %s%s%s: exit %d (wanted %d): '%s' (wanted '%s')",
              cmd, *cmd ? " " : "", t[i].args, rc, t[i].status, e, t[i].needle);
        free(o), free(e);
    }
}

/* "qkv ARGS" exits 0. */
static void run_ok(const char *args)
{
    char *o, *e;
    int rc = qkv(&o, &e, "%s", args);
    CHECK(rc == 0, "%s: exit %d: %s", args, rc, e);
    free(o), free(e);
}

/* "qkv RESUME" exits 0 with says and also (NULL: no second) on stdout; then the checkpoints
 * whole and parts (in tmpdir) hold the same bytes, more than 1000 of them. */
static void check_resumed(const char *resume, const char *says, const char *also, const char *whole,
                          const char *parts)
{
    char *o, *e;
    int rc = qkv(&o, &e, "%s", resume);
    CHECK(rc == 0 && strstr(o, says) && (!also || strstr(o, also)), "%s: exit %d (wanted 0, '%s' and '%s'): %s %s",
          resume, rc, says, also ? also : "", o, e);
    free(o), free(e);
    size_t n1, n2;
    char *a = slurp(path_in(whole), &n1), *b = slurp(path_in(parts), &n2);
    CHECK(n1 > 1000 && n1 == n2 && !memcmp(a, b, n1), "the resumed run's checkpoint %s (%zu bytes) differs from "
          "the uninterrupted run's %s (%zu bytes)", parts, n2, whole, n1);
    free(a), free(b);
}
#endif
