/* cli.h: what the qkv command's files share: a command's row in the table
 * (main.c), exit statuses, and the option parsing every command uses
 * (args.c, on getopt_long). docs/cli.md has the commands and the recipe for
 * adding one. */
#ifndef QKV_CLI_H
#define QKV_CLI_H
#include <getopt.h>
#include "qkv.h"

#define QKV_CLI_TRY(expr)                                                        \
    do {                                                                         \
        qkv_status s_ = (expr);                                                  \
        if (s_ != QKV_OK) return s_;                                             \
    } while (0)

/* Every command's exit status. */
enum { QKV_EXIT_OK = 0, QKV_EXIT_FAILURE = 1, QKV_EXIT_USAGE = 2 };

/* `qkv NAME ...` calls run(argc, argv) with argv[0] = NAME and returns its
 * exit status; usage is what `qkv help NAME` and `qkv NAME --help` print. */
typedef struct {
    const char *name, *summary, *usage;
    int (*run)(int argc, char **argv);
} qkv_cli_command;

/* The last entries of a command's options array: --help (-h), which
 * qkv_cli_next answers itself, and the terminator. */
#define QKV_CLI_HELP_OPTION {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}

#ifdef __GNUC__
#define QKV_CLI_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define QKV_CLI_PRINTF(f, a)
/* The byte offset of the first invalid UTF-8 sequence in text[0, n)
 * (overlong forms, surrogates and code points above U+10FFFF included), or -1. */
int64_t qkv_cli_utf8_invalid(const char *text, size_t n);
#endif

/* A command's arguments as qkv_cli_next walks them. */
typedef struct {
    int argc;
    char **argv;             /* argv[0]: the command's name, for messages */
    const char *usage;
    const struct option *options;
    int min_operands, max_operands;
    char shortopts[64];
    const char *name;        /* the current option's long name ("epochs") */
    const char *value;       /* its value; NULL if it takes none */
    char **operands;         /* at the end: the arguments that are not options */
    int noperands;
    int status;              /* -1 while parsing goes on; then the exit status */
} qkv_cli_args;

/* Starts parsing argv[1..argc) against options (an array ending with
 * QKV_CLI_HELP_OPTION; NULL: --help only), expecting min to max operands.
 * An option with a short form has a character as val; a long-only one a
 * val of 256 or more. */
void qkv_cli_args_init(qkv_cli_args *a, int argc, char **argv, const char *usage,
                       const struct option *options, int min_operands, int max_operands);
/* The next option's val, with a->name and a->value set; 0 at the end, with
 * the operands in a->operands; -1 when the command must stop and return
 * a->status: after --help (usage printed, 0) or a usage error (2), an
 * unknown option, a missing value, a wrong operand count or a bad value
 * reported by the helpers below. Typical use:
 *     while ((c = qkv_cli_next(&a)) > 0) switch (c) { ... }
 *     if (c < 0) return a.status; */
int qkv_cli_next(qkv_cli_args *a);
/* Reports a usage error: "qkv CMD: MESSAGE (try: qkv CMD --help)" on stderr,
 * a->status = 2. */
void qkv_cli_error(qkv_cli_args *a, const char *fmt, ...) QKV_CLI_PRINTF(2, 3);
/* The current option's value as a whole number in [lo, hi] (base 10, the
 * whole text); else a usage error naming the option, and lo. */
int64_t qkv_cli_int(qkv_cli_args *a, int64_t lo, int64_t hi);
/* The current option's value as a number in [lo, hi], or (lo, hi] when
 * lo_open (strtod's syntax, the whole text, no leading space; never NaN,
 * nor out of double's range); else a usage error "--NAME: 'VALUE' is not a
 * number in [lo, hi]", and lo. */
double qkv_cli_double(qkv_cli_args *a, double lo, double hi, int lo_open);
/* The index of the current option's value in names[0..n); else a usage
 * error naming the option and the choices, and 0. */
int qkv_cli_choice(qkv_cli_args *a, const char *const *names, int n);
/* --precision fp32|bf16 (every training command; docs/bf16.md): the
 * current option's value as a qkv_precision; else a usage error naming the
 * choices, and QKV_FP32. */
qkv_precision qkv_cli_precision(qkv_cli_args *a);
/* "fp32" or "bf16", as a run's metadata keeps it; and back (0 when s is
 * neither). */
const char *qkv_cli_precision_name(qkv_precision p);
int qkv_cli_precision_parse(const char *s, qkv_precision *p);
/* The precision a run's checkpoint keeps under metadata key (absent: an
 * FP32 run); a malformed value is QKV_ERR_FORMAT naming the file. */
qkv_status qkv_cli_checkpoint_precision(const char *ckpt, const char *key, qkv_precision *p);
/* The whole of path ("-" or NULL: stdin), NUL-terminated, malloc'd, its
 * length in *len; NULL after a message "qkv CMD: cannot open/read ..." on
 * stderr. */
char *qkv_cli_read_all(const char *cmd, const char *path, size_t *len);
/* Seconds on a monotonic clock. */
double qkv_cli_now(void);
/* A command's own failure (the library's qkv_fail is internal): records
 * the message and returns s; qkv_cli_last_error() gives the latest
 * failure's message, the command's or the library's. */
qkv_status qkv_cli_fail(qkv_status s, const char *fmt, ...) QKV_CLI_PRINTF(2, 3);
const char *qkv_cli_last_error(void);
/* Every command's runtime failures and notes on stderr, in one form:
 * "qkv CMD: MESSAGE" and a newline (cmd "train lm", "eval", ...); returns
 * QKV_EXIT_FAILURE, so that a command can end with
 *     return qkv_cli_report("eval", "cannot open %s", path);
 * Usage errors go through qkv_cli_error (exit status 2). */
int qkv_cli_report(const char *cmd, const char *fmt, ...) QKV_CLI_PRINTF(2, 3);
/* Data-parallel training under mpirun (dist_cli.c, docs/distributed.md):
 * *d gets the engine (one process without mpirun); a note on stderr when
 * mpirun started a qkv built without MPI; the stdout of ranks other than 0
 * goes to /dev/null (rank 0 prints; every rank prints its own errors).
 * cmd ("train lm") names the command; a failure is printed. */
qkv_status qkv_cli_dist_start(const char *cmd, qkv_dist **d);
/* qkv_dist_agree with the command's own message for mine (a failed
 * rank's setup): QKV_OK on every rank, or on every rank a failure naming
 * the first failed rank and its message (qkv_cli_last_error). Every rank
 * calls it once before its first collective step. */
qkv_status qkv_cli_dist_agree(qkv_dist *d, qkv_status mine, const char *what);
/* --zero1's line on stdout: the optimizer state's bytes saved on each rank
 * (qkv_dist_zero1's saved), or that one process has nothing to shard. */
void qkv_cli_zero1_note(const qkv_dist *d, int64_t saved);
/* " per rank, data-parallel on N ranks" under mpirun, else "" (a static buffer). */
const char *qkv_cli_dist_ranks(const qkv_dist *d);
/* A curve of a training run (loss, accuracy), for the --plots figures:
 * points (x[i], y[i]), i < n; zero-initialised; free(x), free(y). */
typedef struct {
    double *x, *y;
    int64_t n, cap;
} qkv_cli_curve;
/* Appends (x, y); out of memory: the point is dropped (a figure with a
 * missing point beats a training stopped for it). */
void qkv_cli_curve_add(qkv_cli_curve *c, double x, double y);
/* qkv inspect's pieces (inspect.c), shared with inspect_gguf.c: s[0, n)
 * written with control characters and backslashes escaped (returns the
 * columns used), the columns a NUL-terminated s takes so, "1.5 KiB", and
 * the listing of a GGUF file (exit status). */
int qkv_cli_put_escaped(const char *s, size_t n);
int qkv_cli_escaped_width(const char *s);
const char *qkv_cli_human_bytes(double bytes, char *buf, size_t n);
int qkv_cli_inspect_gguf(const char *path);
/* The byte offset of the first invalid UTF-8 sequence in text[0, n)
 * (overlong forms, surrogates and code points above U+10FFFF included), or -1. */
int64_t qkv_cli_utf8_invalid(const char *text, size_t n);
#endif
