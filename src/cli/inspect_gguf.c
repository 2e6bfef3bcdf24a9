/* inspect_gguf.c: qkv inspect FILE.gguf (inspect.c picks it by the magic)
 *   the version, key and tensor counts, alignment and data offset; every
 *   metadata key with its type and value (strings quoted and escaped, cut
 *   after 100 columns; arrays: element type, length and the first 8
 *   values); every tensor's name, type, ggml dims (dims[0] contiguous),
 *   elements, bytes and file offset; the totals. The file is read and
 *   validated by qkv_gguf_open; a malformed one prints the reader's message
 *   and exits 1. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"

enum { SHOWN_ELEMS = 8, SHOWN_COLS = 100 };

/* A string, quoted and escaped; cut (with its length) past SHOWN_COLS. */
static void put_str(const char *s, size_t len)
{
    size_t n = len;
    if (n > SHOWN_COLS) {
        n = SHOWN_COLS; /* back to a UTF-8 character boundary */
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
    }
    putchar('"');
    qkv_cli_put_escaped(s, n);
    putchar('"');
    if (n < len) printf("... (%zu bytes)", len);
}

/* A scalar value at key. */
static void put_scalar(const qkv_gguf *g, const char *key, qkv_gguf_vtype t)
{
    const char *s;
    size_t len;
    double d;
    uint64_t u;
    int64_t v;
    switch (t) {
    case QKV_GGUF_STRING:
        qkv_gguf_get_str(g, key, &s, &len);
        put_str(s, len);
        break;
    case QKV_GGUF_F32:
        qkv_gguf_get_f64(g, key, &d);
        printf("%.9g", d);
        break;
    case QKV_GGUF_F64:
        qkv_gguf_get_f64(g, key, &d);
        printf("%.17g", d);
        break;
    case QKV_GGUF_BOOL:
        qkv_gguf_get_i64(g, key, &v);
        printf(v ? "true" : "false");
        break;
    case QKV_GGUF_U64:
        qkv_gguf_get_u64(g, key, &u);
        printf("%" PRIu64, u);
        break;
    default:
        qkv_gguf_get_i64(g, key, &v);
        printf("%" PRId64, v);
        break;
    }
}

/* An array: "ARRAY of I32, 262144: 1, 2, 3, ..." */
static void put_array(const qkv_gguf *g, const char *key)
{
    qkv_gguf_vtype et;
    int64_t n, shown;
    qkv_gguf_get_array(g, key, &et, &n);
    printf("ARRAY of %s, %" PRId64, qkv_gguf_vtype_name(et), n);
    shown = n < SHOWN_ELEMS ? n : SHOWN_ELEMS;
    if (et == QKV_GGUF_ARRAY || n == 0) return; /* nested arrays: their length only */
    printf(": ");
    if (et == QKV_GGUF_STRING) {
        for (int64_t j = 0; j < shown; j++) {
            const char *s;
            size_t len;
            qkv_gguf_array_str(g, key, j, &s, &len);
            printf(j ? ", " : "");
            put_str(s, len < 40 ? len : 40);
        }
    } else {
        /* numbers: the first ones converted (ints as ints, floats as floats) */
        int fl = et == QKV_GGUF_F32 || et == QKV_GGUF_F64;
        float *fv = fl ? malloc((size_t)n * sizeof *fv) : NULL;
        int32_t *iv = fl ? NULL : malloc((size_t)n * sizeof *iv);
        qkv_status s = fl ? qkv_gguf_array_f32(g, key, fv, n) : qkv_gguf_array_i32(g, key, iv, n);
        for (int64_t j = 0; j < shown && s == QKV_OK; j++)
            printf(fl ? "%s%.9g" : "%s%.0f", j ? ", " : "", fl ? (double)fv[j] : (double)iv[j]);
        if (s != QKV_OK) printf("(values beyond int32/float: not shown)");
        free(fv);
        free(iv);
    }
    if (shown < n) printf(", ...");
}

static void print_metadata(const qkv_gguf *g)
{
    int64_t n = qkv_gguf_meta_count(g);
    int wkey = 3;
    for (int64_t i = 0; i < n; i++) {
        int w = qkv_cli_escaped_width(qkv_gguf_meta_key(g, i));
        if (w > wkey) wkey = w;
    }
    printf(n ? "metadata:\n" : "metadata: (none)\n");
    for (int64_t i = 0; i < n; i++) {
        const char *key = qkv_gguf_meta_key(g, i);
        qkv_gguf_vtype t = qkv_gguf_meta_type(g, i);
        printf("  ");
        printf("%*s", wkey - qkv_cli_put_escaped(key, strlen(key)), "");
        if (t == QKV_GGUF_ARRAY) {
            printf("  ");
            put_array(g, key);
        } else {
            printf("  %-6s ", qkv_gguf_vtype_name(t));
            put_scalar(g, key, t);
        }
        printf("\n");
    }
}

/* "[640, 262144]" */
static const char *dims_text(const int64_t *dims, int nd, char *buf, size_t cap)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < nd && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, d ? ", %" PRId64 : "%" PRId64, dims[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
    return buf;
}

static void print_tensors(const qkv_gguf *g, int64_t *numel_total, uint64_t *bytes_total)
{
    int64_t n = qkv_gguf_tensor_count(g);
    int wname = 4;
    for (int64_t i = 0; i < n; i++) {
        int w = qkv_cli_escaped_width(qkv_gguf_tensor_name(g, i));
        if (w > wname) wname = w;
    }
    printf("\n%-*s  %-5s %-26s %14s %14s %14s\n", wname, "name", "type", "dims (ggml order)",
           "elements", "bytes", "file offset");
    for (int64_t i = 0; i < n; i++) {
        const char *name = qkv_gguf_tensor_name(g, i);
        qkv_qtype type;
        int nd;
        int64_t dims[4], numel = 1;
        size_t nbytes;
        qkv_gguf_tensor_info(g, name, &type, &nd, dims, NULL, &nbytes);
        for (int d = 0; d < nd; d++) numel *= dims[d]; /* the reader refused overflows */
        char db[160];
        printf("%*s", wname - qkv_cli_put_escaped(name, strlen(name)), "");
        printf("  %-5s %-26s %14" PRId64 " %14zu %14" PRIu64 "\n", qkv_qtype_name(type),
               dims_text(dims, nd, db, sizeof db), numel, nbytes,
               qkv_gguf_data_offset(g) + qkv_gguf_tensor_offset(g, i));
        *numel_total += numel;
        *bytes_total += nbytes;
    }
}

int qkv_cli_inspect_gguf(const char *path)
{
    qkv_gguf *g;
    if (qkv_gguf_open(path, &g) != QKV_OK) {
        fprintf(stderr, "qkv: inspect: %s\n", qkv_last_error());
        return QKV_EXIT_FAILURE;
    }
    int64_t nk = qkv_gguf_meta_count(g), nt = qkv_gguf_tensor_count(g), numel = 0;
    uint64_t bytes = 0;
    printf("%s: GGUF version %d, %" PRId64 " key%s, %" PRId64 " tensor%s, alignment %" PRId64
           ", tensor data from offset %" PRIu64 "\n\n", path, qkv_gguf_version(g), nk,
           nk == 1 ? "" : "s", nt, nt == 1 ? "" : "s", qkv_gguf_alignment(g),
           qkv_gguf_data_offset(g));
    print_metadata(g);
    print_tensors(g, &numel, &bytes);
    char hb[32];
    printf("\ntotal: %" PRId64 " tensor%s, %" PRId64 " elements, %" PRIu64 " bytes (%s)\n", nt,
           nt == 1 ? "" : "s", numel, bytes, qkv_cli_human_bytes((double)bytes, hb, sizeof hb));
    qkv_gguf_close(g);
    return QKV_EXIT_OK;
}
