/* cli_run.h: running the qkv binary from a test, without a shell: stdin
 * from a file (or /dev/null), stdout and stderr into files read back, the
 * process killed after a time limit. test_cli.c and test_translate_cli.c. */
#ifndef QKV_TEST_CLI_RUN_H
#define QKV_TEST_CLI_RUN_H
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"

extern char **environ;

typedef struct {
    int status; /* the exit status; -1 if qkv did not exit by itself */
    char *out, *err;
} cli_result;

/* The first 4 MiB of path (all of it for these tests), NUL-terminated; an
 * empty string when it cannot be read. len (may be NULL) gets its length. */
static inline char *cli_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = calloc(1, 1 << 22);
    size_t n = f && buf ? fread(buf, 1, (1 << 22) - 1, f) : 0;
    if (f) fclose(f);
    if (len) *len = n;
    return buf ? buf : calloc(1, 1);
}

/* dir/name, in one of 16 static buffers used in turn. */
static inline const char *cli_path(const char *dir, const char *name)
{
    static char buf[16][1024];
    static int k;
    k = (k + 1) % 16;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* Runs bin with args (NULL-terminated, at most 46); stdin from in (NULL:
 * /dev/null); stdout and stderr through the files out and err; killed
 * after timeout_s seconds. */
static inline cli_result cli_run(const char *bin, const char *in, const char *out, const char *err,
                          const char *const *args, int timeout_s)
{
    char *argv[48] = {(char *)bin};
    for (int i = 0; args[i] && i < 46; i++) argv[i + 1] = (char *)args[i];
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, in ? in : "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid;
    int st = 0, done = 0;
    if (posix_spawn(&pid, bin, &fa, NULL, argv, environ) == 0) {
        for (int ms = 0; ms < timeout_s * 1000 && !(done = waitpid(pid, &st, WNOHANG) == pid); ms++)
            nanosleep(&(struct timespec){0, 1000000}, NULL);
        if (!done) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
        }
    }
    posix_spawn_file_actions_destroy(&fa);
    return (cli_result){done && WIFEXITED(st) ? WEXITSTATUS(st) : -1, cli_slurp(out, NULL),
                        cli_slurp(err, NULL)};
}
/* The qkv binary beside the test's directory (build/tests/../qkv,
 * build-san/tests/../qkv) into bin; a new temporary directory made from
 * tmp (a mkdtemp template, changed in place); out and err: out.txt and
 * err.txt in it. 0, or -1 (a failed check) when there is no binary or no
 * directory. */
static inline int cli_setup(const char *argv0, char *bin, size_t bin_cap, char *tmp, char *out,
                     size_t out_cap, char *err, size_t err_cap)
{
    const char *slash = strrchr(argv0, '/');
    int dir_len = slash ? (int)(slash - argv0) : 1;
    snprintf(bin, bin_cap, "%.*s/../qkv", dir_len, slash ? argv0 : ".");
    if (access(bin, X_OK) != 0 || !mkdtemp(tmp)) {
        CHECK(0, "no qkv binary at %s (build it first) or no temporary directory", bin);
        return -1;
    }
    snprintf(out, out_cap, "%s/out.txt", tmp);
    snprintf(err, err_cap, "%s/err.txt", tmp);
    return 0;
}
#endif
