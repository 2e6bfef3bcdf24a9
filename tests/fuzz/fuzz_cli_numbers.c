/* libFuzzer target for the command line's numbers (src/cli/args.c:
 * qkv_cli_int, qkv_cli_double), through qkv_cli_next as a command meets
 * them: the input's first byte picks an option (a whole number or a real
 * one, with the ranges the commands use) and a form (--opt=VALUE or
 * --opt VALUE), the rest is the value (up to its first NUL). The result
 * must be a value in range and no error, or a usage error (status 2)
 * whose message names the option; never a crash or undefined behaviour.
 *
 *   make fuzz && tests/fuzz/run.sh 600 fuzz_cli_numbers
 * The CLI is not in libqkv: the Makefile links src/cli/args.c into
 * build-fuzz/fuzz/fuzz_cli_*. The messages go to stderr, which the target
 * points at a buffer while it parses (glibc: stderr is assignable;
 * libFuzzer and the sanitizers keep their own handle and descriptor). */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

typedef struct {
    const char *name;
    int real, lo_open;
    double lo, hi; /* whole numbers: exact within 2^53, or the int64 ends */
} number_opt;

/* Ranges the commands use (train_lm.c, generate.c, toy.c), and the ends
 * of int64. */
static const number_opt opts[] = {
    {"steps", 0, 0, 1, 1099511627776.0},
    {"seed", 0, 0, 0, 9223372036854775807.0},
    {"any", 0, 0, -9223372036854775807.0 - 1, 9223372036854775807.0},
    {"threads", 0, 0, 1, 1024},
    {"lr", 1, 0, 1e-9, 10},
    {"clip", 1, 0, 0, 1e9},
    {"top-p", 1, 1, 0, 1},
    {"temperature", 1, 0, 0, 100},
};
enum { NOPTS = sizeof opts / sizeof opts[0] };

static int64_t int_end(double v)
{
    return v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 4096) return 0;
    const number_opt *o = &opts[data[0] % NOPTS];
    int joined = (data[0] / NOPTS) & 1;
    char *value = strndup((const char *)data + 1, size - 1);
    char *arg = malloc(strlen(o->name) + strlen(value) + 4);
    if (!value || !arg) abort();
    sprintf(arg, "--%s%s%s", o->name, joined ? "=" : "", joined ? value : "");
    char *argv[] = {"fuzz", arg, joined ? NULL : value, NULL};
    int argc = joined ? 2 : 3;
    struct option options[] = {{o->name, required_argument, NULL, 256}, QKV_CLI_HELP_OPTION};

    static char msg[8192];
    memset(msg, 0, sizeof msg);
    FILE *mem = fmemopen(msg, sizeof msg - 1, "w"), *saved = stderr;
    if (!mem) abort();
    stderr = mem;
    qkv_cli_args a;
    qkv_cli_args_init(&a, argc, argv, "usage: fuzz [--NAME VALUE]\n", options, 0, 0);
    int c, got = 0;
    double v = 0;
    int64_t i = 0;
    while ((c = qkv_cli_next(&a)) > 0) {
        got++;
        if (o->real) v = qkv_cli_double(&a, o->lo, o->hi, o->lo_open);
        else i = qkv_cli_int(&a, int_end(o->lo), int_end(o->hi));
    }
    fclose(mem);
    stderr = saved;

    if (c == 0) {
        /* accepted: the value in range */
        if (got != 1 || a.status != -1) abort();
        if (o->real && !(isfinite(v) && (o->lo_open ? v > o->lo : v >= o->lo) && v <= o->hi)) abort();
        if (!o->real && (i < int_end(o->lo) || i > int_end(o->hi))) abort();
        /* a whole number is a sign and digits only */
        if (!o->real && value[strspn(value + (*value == '-' || *value == '+'), "0123456789") +
                             (*value == '-' || *value == '+')] != '\0')
            abort();
    } else {
        /* refused (an empty value: "needs a value"; a bad one: named) */
        char want[64];
        snprintf(want, sizeof want, "qkv fuzz: --%s", o->name);
        if (a.status != QKV_EXIT_USAGE || strstr(msg, "qkv fuzz: ") != msg) abort();
        if (got == 1 && strstr(msg, want) != msg) abort();
    }
    free(value);
    free(arg);
    return 0;
}
