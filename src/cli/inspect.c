/* inspect.c: qkv inspect FILE.safetensors
 *   lists every tensor (name, dtype, shape, element count, bytes), the
 *   totals, and the __metadata__ entries. The file is read and validated by
 *   qkv_safetensors_open; a malformed one prints the reader's message and
 *   exits 1. No file argument: usage, exit 2. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "io/json.h"

static const char *const dtype_names[] = {"F32", "F16", "BF16", "F64", "I64",
                                          "I32", "I16", "I8",   "U8",  "BOOL"};

static int usage(FILE *f, int rc)
{
    fprintf(f, "usage: qkv inspect FILE.safetensors\n"
               "  lists each tensor's name, dtype, shape, element count and bytes, the totals,\n"
               "  and the file's __metadata__\n");
    return rc;
}

/* Writes s with control characters and backslashes escaped, so that a
 * name or value cannot break the listing; returns the columns used (UTF-8
 * continuation bytes take none). */
static int put_escaped(const char *s)
{
    int cols = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
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

static int escaped_width(const char *s)
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
static const char *human(double bytes, char *buf, size_t n)
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
        int w = escaped_width(qkv_safetensors_name(st, i));
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
        for (int d = 0; d < ndim; d++) numel *= shape[d];
        char sb[200];
        printf("%*s", wname - put_escaped(name), "");
        printf("  %-5s %-20s %14lld %14zu\n", dtype_names[dt], shape_text(shape, ndim, sb, sizeof sb),
               (long long)numel, nbytes);
        tot->numel += numel;
        tot->bytes += (int64_t)nbytes;
    }
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The file's header JSON (8-byte length, then the text); NULL on failure.
 * The file has passed qkv_safetensors_open, so the length is sane. */
static char *read_header(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    unsigned char pre[8];
    char *text = NULL;
    if (f && fread(pre, 1, 8, f) == 8) {
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--) n = n << 8 | pre[i];
        text = malloc((size_t)n + 1);
        if (text && fread(text, 1, (size_t)n, f) != (size_t)n) {
            free(text);
            text = NULL;
        }
        *len = (size_t)n;
    }
    if (f) fclose(f);
    return text;
}

/* Prints the __metadata__ entries sorted by key, their values through the
 * reader (qkv_safetensors_meta); the keys come from the header's JSON,
 * which the public API does not enumerate. Returns the entry count, or -1. */
static int print_metadata(const char *path, const qkv_safetensors *st)
{
    size_t len = 0;
    char *text = read_header(path, &len), err[128];
    json_value *root = NULL;
    size_t end;
    const json_limits lim = {16, 64};
    if (!text || json_parse(text, len, &lim, &root, &end, err, sizeof err) != JSON_OK) {
        free(text);
        return -1;
    }
    const json_value *meta = NULL;
    for (size_t i = 0; root->type == JSON_OBJECT && i < root->u.obj.n; i++)
        if (!strcmp(root->u.obj.items[i].key, "__metadata__")) meta = &root->u.obj.items[i].val;
    size_t n = meta && meta->type == JSON_OBJECT ? meta->u.obj.n : 0;
    const char **keys = malloc((n ? n : 1) * sizeof *keys);
    for (size_t i = 0; keys && i < n; i++) keys[i] = meta->u.obj.items[i].key;
    if (keys) qsort(keys, n, sizeof *keys, cmp_str);
    printf(n ? "__metadata__:\n" : "__metadata__: (none)\n");
    for (size_t i = 0; keys && i < n; i++) {
        const char *v = qkv_safetensors_meta(st, keys[i]);
        printf("  ");
        put_escaped(keys[i]);
        printf(" = ");
        put_escaped(v ? v : "");
        printf("\n");
    }
    free(keys);
    json_free(root);
    free(text);
    return (int)n;
}

int qkv_cli_inspect(int argc, char **argv)
{
    if (argc == 3 && (!strcmp(argv[2], "-h") || !strcmp(argv[2], "--help"))) return usage(stdout, 0);
    if (argc != 3) return usage(stderr, 2);
    const char *path = argv[2];
    qkv_safetensors *st;
    if (qkv_safetensors_open(path, &st) != QKV_OK) {
        fprintf(stderr, "qkv: inspect: %s\n", qkv_last_error());
        return 1;
    }
    int n = qkv_safetensors_count(st);
    printf("%s: %d tensor%s\n\n", path, n, n == 1 ? "" : "s");
    totals tot = {0, 0};
    print_tensors(st, &tot);
    char hb[32];
    printf("\ntotal: %d tensor%s, %lld parameters (elements), %lld bytes (%s)\n", n, n == 1 ? "" : "s",
           (long long)tot.numel, (long long)tot.bytes, human((double)tot.bytes, hb, sizeof hb));
    int rc = print_metadata(path, st) < 0 ? 1 : 0;
    if (rc) fprintf(stderr, "qkv: inspect: %s: cannot read the header's metadata again\n", path);
    qkv_safetensors_close(st);
    return rc;
}
