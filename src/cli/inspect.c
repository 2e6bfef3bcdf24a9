/* inspect.c: qkv inspect FILE (.safetensors or .gguf, told apart by the
 *   GGUF magic, not the name)
 *   safetensors: lists every tensor (name, dtype, shape, element count,
 *   bytes), the totals, and the __metadata__ entries. The file is read and
 *   validated by qkv_safetensors_open; a malformed one prints the reader's
 *   message and exits 1. No file argument, or more than one: usage, exit 2.
 *   GGUF files are listed by inspect_gguf.c. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"

static const char *const dtype_names[] = {"F32", "F16", "BF16", "F64", "I64",
                                          "I32", "I16", "I8",   "U8",  "BOOL"};

const char qkv_cli_inspect_usage[] =
    "usage: qkv inspect FILE.safetensors|FILE.gguf\n"
    "  safetensors: each tensor's name, dtype, shape, element count and bytes, the\n"
    "  totals, and the file's __metadata__; GGUF (told by its magic): the version,\n"
    "  every metadata key with its type and value (arrays: type, length, the first\n"
    "  values), and each tensor's name, type, ggml dims, elements, bytes and file\n"
    "  offset; a file that cannot be read exits 1\n"
    "  -h, --help   show this usage\n";

/* Writes s[0, n) with control characters and backslashes escaped, so that
 * a name or value cannot break the listing; returns the columns used
 * (UTF-8 continuation bytes take none). */
int qkv_cli_put_escaped(const char *s, size_t n)
{
    int cols = 0;
    for (const unsigned char *p = (const unsigned char *)s, *e = p + n; p < e; p++) {
        if (*p == '\\') cols += printf("\\\\");
        else if (*p == '\n') cols += printf("\\n");
        else if (*p == '\t') cols += printf("\\t");
        else if (*p < 0x20 || *p == 0x7f) cols += printf("\\x%02x", *p);
        else {
            putchar(*p);
            cols += (*p & 0xC0) != 0x80;
        }
    }
    return cols;
}

static int put_escaped(const char *s) { return qkv_cli_put_escaped(s, strlen(s)); }

int qkv_cli_escaped_width(const char *s)
{
    int cols = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '\\' || *p == '\n' || *p == '\t') cols += 2;
        else if (*p < 0x20 || *p == 0x7f) cols += 4;
        else cols += (*p & 0xC0) != 0x80;
    }
    return cols;
}

/* "(2,3)", "(5,)", "()" */
static const char *shape_text(const int64_t *shape, int ndim, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (ndim == 1 && k < n) k += (size_t)snprintf(buf + k, n - k, ",");
    if (k < n) snprintf(buf + k, n - k, ")");
    return buf;
}

/* "1.5 KiB": bytes in the largest unit that keeps the number >= 1. */
const char *qkv_cli_human_bytes(double bytes, char *buf, size_t n)
{
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}

typedef struct {
    int64_t numel, bytes;
} totals;

static void print_tensors(const qkv_safetensors *st, totals *tot)
{
    int n = qkv_safetensors_count(st), wname = 4;
    for (int i = 0; i < n; i++) {
        int w = qkv_cli_escaped_width(qkv_safetensors_name(st, i));
        if (w > wname) wname = w;
    }
    printf("%-*s  %-5s %-20s %14s %14s\n", wname, "name", "dtype", "shape", "elements", "bytes");
    for (int i = 0; i < n; i++) {
        const char *name = qkv_safetensors_name(st, i);
        qkv_st_dtype dt;
        int ndim;
        int64_t shape[8], numel = 1;
        size_t nbytes;
        qkv_safetensors_info(st, name, &dt, &ndim, shape, NULL, &nbytes);
        /* A zero dim first: the others may then be anything up to 2^63
         * (a valid [2^40, 2^40, 0] would overflow the product); without
         * one, the product is bounded by the tensor's bytes. */
        for (int d = 0; d < ndim; d++)
            if (shape[d] == 0) numel = 0;
        for (int d = 0; d < ndim && numel; d++) numel *= shape[d];
        char sb[200];
        printf("%*s", wname - put_escaped(name), "");
        printf("  %-5s %-20s %14lld %14zu\n", dtype_names[dt], shape_text(shape, ndim, sb, sizeof sb),
               (long long)numel, nbytes);
        tot->numel += numel;
        tot->bytes += (int64_t)nbytes;
    }
}

/* Prints the __metadata__ entries, sorted by key. */
static void print_metadata(const qkv_safetensors *st)
{
    int n = qkv_safetensors_meta_count(st);
    printf(n ? "__metadata__:\n" : "__metadata__: (none)\n");
    for (int i = 0; i < n; i++) {
        const char *k = qkv_safetensors_meta_key(st, i);
        printf("  ");
        put_escaped(k);
        printf(" = ");
        put_escaped(qkv_safetensors_meta(st, k));
        printf("\n");
    }
}

int qkv_cli_inspect(int argc, char **argv)
{
    qkv_cli_args a;
    qkv_cli_args_init(&a, argc, argv, qkv_cli_inspect_usage, NULL, 1, 1);
    if (qkv_cli_next(&a) < 0) return a.status;
    const char *path = a.operands[0];
    FILE *f = fopen(path, "rb");
    char magic[4] = {0};
    size_t got = f ? fread(magic, 1, 4, f) : 0;
    if (f) fclose(f);
    if (got == 4 && memcmp(magic, "GGUF", 4) == 0) return qkv_cli_inspect_gguf(path);
    qkv_safetensors *st;
    if (qkv_safetensors_open(path, &st) != QKV_OK) {
        fprintf(stderr, "qkv: inspect: %s\n", qkv_last_error());
        return QKV_EXIT_FAILURE;
    }
    int n = qkv_safetensors_count(st);
    printf("%s: %d tensor%s\n\n", path, n, n == 1 ? "" : "s");
    totals tot = {0, 0};
    print_tensors(st, &tot);
    char hb[32];
    printf("\ntotal: %d tensor%s, %lld parameters (elements), %lld bytes (%s)\n", n, n == 1 ? "" : "s",
           (long long)tot.numel, (long long)tot.bytes, qkv_cli_human_bytes((double)tot.bytes, hb, sizeof hb));
    print_metadata(st);
    qkv_safetensors_close(st);
    return QKV_EXIT_OK;
}
