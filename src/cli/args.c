/* args.c: the option parsing every qkv command shares: a getopt_long loop
 * that answers --help and reports unknown options, missing values and wrong
 * operand counts the same way for all, and strict value parsers. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/cli.h"

void qkv_cli_args_init(qkv_cli_args *a, int argc, char **argv, const char *usage,
                       const struct option *options, int min_operands, int max_operands)
{
    static const struct option help_only[] = {QKV_CLI_HELP_OPTION};
    *a = (qkv_cli_args){.argc = argc, .argv = argv, .usage = usage,
                        .options = options ? options : help_only, .min_operands = min_operands,
                        .max_operands = max_operands, .status = -1};
    /* ':' first: a missing value comes back as ':', not '?'. */
    size_t k = 0;
    a->shortopts[k++] = ':';
    for (const struct option *o = a->options; o->name && k + 3 < sizeof a->shortopts; o++)
        if (o->val > 0 && o->val < 128) {
            a->shortopts[k++] = (char)o->val;
            if (o->has_arg == required_argument) a->shortopts[k++] = ':';
        }
    a->shortopts[k] = '\0';
    opterr = 0; /* the messages are ours */
    optind = 0; /* 0, not 1: glibc and musl then start over completely */
}

void qkv_cli_error(qkv_cli_args *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "qkv %s: ", a->argv[0]);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (try: qkv %s --help)\n", a->argv[0]);
    va_end(ap);
    a->status = QKV_EXIT_USAGE;
}

static const struct option *by_val(const qkv_cli_args *a, int val)
{
    for (const struct option *o = a->options; o->name; o++)
        if (o->val == val) return o;
    return NULL;
}

/* The end of the options: checks the operand count. */
static int operands(qkv_cli_args *a)
{
    a->operands = a->argv + optind;
    a->noperands = a->argc - optind;
    if (a->noperands >= a->min_operands && a->noperands <= a->max_operands) return 0;
    if (a->max_operands == 0)
        fprintf(stderr, "qkv %s: unexpected argument '%s'\n", a->argv[0], a->operands[0]);
    else if (a->min_operands == a->max_operands)
        fprintf(stderr, "qkv %s: expects %d argument%s, got %d\n", a->argv[0], a->max_operands,
                a->max_operands == 1 ? "" : "s", a->noperands);
    else
        fprintf(stderr, "qkv %s: expects %d to %d arguments, got %d\n", a->argv[0], a->min_operands,
                a->max_operands, a->noperands);
    fputs(a->usage, stderr);
    a->status = QKV_EXIT_USAGE;
    return -1;
}

int qkv_cli_next(qkv_cli_args *a)
{
    if (a->status >= 0) return -1; /* a helper reported a bad value */
    int c = getopt_long(a->argc, a->argv, a->shortopts, a->options, NULL);
    if (c == -1) return operands(a);
    if (c == 'h') {
        fputs(a->usage, stdout);
        a->status = QKV_EXIT_OK;
        return -1;
    }
    /* ':' (a value missing) and '?' (an unknown option, or a value given
     * to one that takes none) leave the option's val in optopt: 0 for an
     * unknown long option, the character for an unknown short one. */
    const struct option *o = by_val(a, c == ':' || c == '?' ? optopt : c);
    if (!o && optopt) {
        qkv_cli_error(a, "unknown option '-%c'", optopt);
    } else if (!o) {
        const char *arg = a->argv[optind - 1];
        qkv_cli_error(a, "unknown option '%.*s'", (int)strcspn(arg, "="), arg);
    } else if (c == '?') {
        qkv_cli_error(a, "option '--%s' takes no value", o->name);
    } else if (c == ':' || (o->has_arg == required_argument && !optarg[0])) {
        qkv_cli_error(a, "option '--%s' needs a value", o->name);
    } else {
        a->name = o->name;
        a->value = optarg;
        return c;
    }
    return -1;
}

int64_t qkv_cli_int(qkv_cli_args *a, int64_t lo, int64_t hi)
{
    const char *s = a->value, *d = s + (s[0] == '-' || s[0] == '+');
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!isdigit((unsigned char)*d) || *end) {
        qkv_cli_error(a, "--%s: '%s' is not a whole number", a->name, s);
        return lo;
    }
    if (errno == ERANGE || v < lo || v > hi) {
        qkv_cli_error(a, "--%s: %s is out of range (%lld to %lld)", a->name, s, (long long)lo,
                      (long long)hi);
        return lo;
    }
    return v;
}

double qkv_cli_double(qkv_cli_args *a, double lo, double hi, int lo_open)
{
    const char *s = a->value;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    /* strtod skips leading white space; the value must be the number alone
     * (and not NaN: it fails both comparisons) */
    if (end == s || *end || errno == ERANGE || isspace((unsigned char)s[0]) || !(lo_open ? v > lo : v >= lo) ||
        !(v <= hi)) {
        qkv_cli_error(a, "--%s: '%s' is not a number in %c%g, %g]", a->name, s, lo_open ? '(' : '[', lo, hi);
        return lo;
    }
    return v;
}

int qkv_cli_choice(qkv_cli_args *a, const char *const *names, int n)
{
    char list[256] = "";
    for (int i = 0; i < n; i++) {
        if (!strcmp(a->value, names[i])) return i;
        size_t k = strlen(list);
        snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "", names[i]);
    }
    qkv_cli_error(a, "--%s: '%s' is not one of %s", a->name, a->value, list);
    return 0;
}

static const char *const precision_names[] = {"fp32", "bf16"};

qkv_precision qkv_cli_precision(qkv_cli_args *a)
{
    return qkv_cli_choice(a, precision_names, 2) == 1 ? QKV_BF16 : QKV_FP32;
}

const char *qkv_cli_precision_name(qkv_precision p) { return p == QKV_BF16 ? "bf16" : "fp32"; }

int qkv_cli_precision_parse(const char *s, qkv_precision *p)
{
    for (int i = 0; i < 2; i++)
        if (s && !strcmp(s, precision_names[i])) {
            *p = i ? QKV_BF16 : QKV_FP32;
            return 1;
        }
    return 0;
}

qkv_status qkv_cli_checkpoint_precision(const char *ckpt, const char *key, qkv_precision *p)
{
    char *v = NULL;
    qkv_status s = qkv_checkpoint_read_meta(ckpt, key, &v);
    if (s == QKV_ERR_NOTFOUND) *p = QKV_FP32, s = QKV_OK;
    else if (!s && !qkv_cli_precision_parse(v, p))
        s = qkv_cli_fail(QKV_ERR_FORMAT, "%s: metadata %s is malformed", ckpt, key);
    free(v);
    return s;
}

/* Under LeakSanitizer (make sanitize): fontconfig, which Cairo asks for
 * the figures' font, keeps its configuration and font patterns until the
 * process ends, and leaks a pattern while parsing its own configuration
 * files; neither is ours to free. Only allocations made inside fontconfig
 * are passed over: a Cairo object the command forgot is still reported.
 * An ordinary build never calls this. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libfontconfig.so\n"; }

char *qkv_cli_read_all(const char *cmd, const char *path, size_t *len)
{
    FILE *f = (!path || !strcmp(path, "-")) ? stdin : fopen(path, "rb");
    if (!f) {
        qkv_cli_report(cmd, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        char *b = realloc(buf, cap * 2);
        if (!b) free(buf);
        buf = b, cap *= 2;
    }
    int bad = !buf || ferror(f);
    if (f != stdin) fclose(f);
    if (bad) {
        free(buf);
        qkv_cli_report(cmd, "cannot read %s", path ? path : "stdin");
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

double qkv_cli_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static char fail_msg[1024], fail_lib[1024];

qkv_status qkv_cli_fail(qkv_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fail_msg, sizeof fail_msg, fmt, ap);
    va_end(ap);
    snprintf(fail_lib, sizeof fail_lib, "%s", qkv_last_error());
    return s;
}

/* Ours while the library has not failed since (its message is unchanged). */
const char *qkv_cli_last_error(void)
{
    return fail_msg[0] && !strcmp(fail_lib, qkv_last_error()) ? fail_msg : qkv_last_error();
}

int qkv_cli_report(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "qkv %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return QKV_EXIT_FAILURE;
}

void qkv_cli_curve_add(qkv_cli_curve *c, double x, double y)
{
    if (c->n >= c->cap) {
        int64_t cap = c->cap ? 2 * c->cap : 64;
        double *nx = realloc(c->x, (size_t)cap * sizeof *nx);
        if (!nx) return;
        c->x = nx;
        double *ny = realloc(c->y, (size_t)cap * sizeof *ny);
        if (!ny) return;
        c->y = ny, c->cap = cap;
    }
    c->x[c->n] = x, c->y[c->n++] = y;
}

int64_t qkv_cli_utf8_invalid(const char *text, size_t n)
{
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < n;) {
        unsigned char b = s[i];
        size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n) return (int64_t)i;
        uint32_t cp = len == 1 ? b : (uint32_t)(b & (0x7F >> len));
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return (int64_t)i;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return (int64_t)i;
        i += len;
    }
    return -1;
}
