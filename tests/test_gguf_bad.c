/* test_gguf_bad.c: the GGUF reader on bad files, each refused with a
 * clear message (QKV_ERR_FORMAT naming the key or tensor), *out left
 * NULL, never a crash: a small valid file (written here byte by byte, as
 * docs/gguf.md "The format" lays it out) truncated at every length, and
 * one file for each rule of "What the reader checks" (wrong magic, v1,
 * big-endian, unknown value and tensor type ids, overlapping tensors, a
 * misaligned offset, dims that overflow, huge counts and lengths, strings
 * past the end, duplicates, bad bools, nesting too deep, ...); then 20,000
 * seeded random corruptions of the valid file (run under the sanitizers
 * this is a small fuzz: tests/fuzz/fuzz_gguf.c is the libFuzzer target).
 * Also the files the rules must still accept (nested arrays, an empty
 * array, no tensors), and opening a path that is missing, empty or a
 * directory. QKV_GGUF_WRITE_SEEDS=DIR also writes two seeds of the fuzz
 * corpus. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"

/* ---- a byte-level GGUF writer ------------------------------------------------ */

typedef struct {
    uint8_t *b;
    size_t n, cap;
} gb;

static void put(gb *g, const void *p, size_t n)
{
    if (g->n + n > g->cap) {
        g->cap = (g->n + n) * 2 + 64;
        g->b = realloc(g->b, g->cap);
        if (!g->b) abort();
    }
    memcpy(g->b + g->n, p, n);
    g->n += n;
}

static void u32(gb *g, uint32_t v)
{
    uint8_t b[4];
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> 8 * i);
    put(g, b, 4);
}

static void u64(gb *g, uint64_t v)
{
    u32(g, (uint32_t)v);
    u32(g, (uint32_t)(v >> 32));
}

static void strn(gb *g, const char *s, size_t n)
{
    u64(g, n);
    put(g, s, n);
}

static void str(gb *g, const char *s) { strn(g, s, strlen(s)); }

static void header(gb *g, uint32_t version, uint64_t n_t, uint64_t n_kv)
{
    put(g, "GGUF", 4);
    u32(g, version);
    u64(g, n_t);
    u64(g, n_kv);
}

/* A key's name and value type; its value follows. */
static void key(gb *g, const char *name, qkv_gguf_vtype t)
{
    str(g, name);
    u32(g, (uint32_t)t);
}

static void kv_u32(gb *g, const char *name, uint32_t v)
{
    key(g, name, QKV_GGUF_U32);
    u32(g, v);
}

static void kv_str(gb *g, const char *name, const char *v)
{
    key(g, name, QKV_GGUF_STRING);
    str(g, v);
}

static void tinfo(gb *g, const char *name, uint32_t nd, const uint64_t *dims, uint32_t type,
                  uint64_t off)
{
    str(g, name);
    u32(g, nd);
    for (uint32_t d = 0; d < nd; d++) u64(g, dims[d]);
    u32(g, type);
    u64(g, off);
}

static void pad(gb *g, size_t align)
{
    static const uint8_t z[64];
    while (g->n % align) put(g, z, 1);
}

static void zeros(gb *g, size_t n)
{
    for (size_t i = 0; i < n; i++) put(g, "", 1);
}

/* The valid file: 3 keys (a string, an array of strings, a U32) and two
 * F32 tensors a (4,2) and b (8,) packed in the data section. */
static gb valid_file(void)
{
    gb g = {0};
    header(&g, 3, 2, 3);
    kv_str(&g, "general.architecture", "llama");
    key(&g, "tok", QKV_GGUF_ARRAY);
    u32(&g, QKV_GGUF_STRING);
    u64(&g, 3);
    str(&g, "x");
    str(&g, "");
    str(&g, "yz");
    kv_u32(&g, "n", 7);
    tinfo(&g, "a", 2, (uint64_t[]){4, 2}, QKV_Q_F32, 0);
    tinfo(&g, "b", 1, (uint64_t[]){8}, QKV_Q_F32, 32);
    pad(&g, 32);
    zeros(&g, 64);
    return g;
}

/* The start of a file with n_t tensors and n_kv keys, the first a U32
 * "n": a test adds the others, then the tensor infos. */
static gb one_key(uint64_t n_t, uint64_t n_kv)
{
    gb g = {0};
    header(&g, 3, n_t, n_kv);
    kv_u32(&g, "n", 1);
    return g;
}

/* ---- checks --------------------------------------------------------------------- */

static int refused_ok(const gb *g, const char *needle, int line)
{
    qkv_gguf *out = (qkv_gguf *)1;
    qkv_status s = qkv_gguf_open_memory(g->b, g->n, "bad.gguf", &out);
    int ok = s == QKV_ERR_FORMAT && out == NULL && strstr(qkv_last_error(), needle) &&
             strncmp(qkv_last_error(), "gguf_open_memory: bad.gguf: ", 28) == 0;
    CHECK(ok, "line %d: %s \"%s\", wanted QKV_ERR_FORMAT with \"%s\"", line, qkv_status_name(s),
          qkv_last_error(), needle);
    if (s == QKV_OK) qkv_gguf_close(out);
    return ok;
}

/* g is refused with a message containing needle; frees g. */
#define REFUSED(g, needle)                                                                 \
    do {                                                                                   \
        refused_ok(&(g), (needle), __LINE__);                                              \
        free((g).b);                                                                       \
    } while (0)

static qkv_gguf *accepted(gb *g, int line)
{
    qkv_gguf *out = NULL;
    qkv_status s = qkv_gguf_open_memory(g->b, g->n, "ok.gguf", &out);
    CHECK(s == QKV_OK, "line %d: %s", line, qkv_last_error());
    return out;
}

static void truncations(void)
{
    gb g = valid_file();
    qkv_gguf *ok = accepted(&g, __LINE__);
    CHECK(ok && qkv_gguf_tensor_count(ok) == 2 && qkv_gguf_meta_count(ok) == 3, "valid file");
    qkv_gguf_close(ok);
    int refused = 0;
    for (size_t n = 0; n < g.n; n++) {
        gb t = {g.b, n, n};
        qkv_gguf *out = (qkv_gguf *)1;
        qkv_status s = qkv_gguf_open_memory(n ? g.b : NULL, n, "cut.gguf", &out);
        const char *m = qkv_last_error();
        int good = s == QKV_ERR_FORMAT && out == NULL &&
                   (strstr(m, "truncated") || strstr(m, "past the end") || strstr(m, "too short"));
        if (!good) CHECK(0, "cut at %zu of %zu: %s %s", n, g.n, qkv_status_name(s), m);
        refused += good;
        (void)t;
    }
    CHECK(refused == (int)g.n, "%d of %zu truncations refused", refused, g.n);
    printf("  %d truncations of a %zu-byte file: all refused\n", refused, g.n);
    free(g.b);
}

static void header_rules(void)
{
    gb g = valid_file();
    memcpy(g.b, "GGML", 4);
    REFUSED(g, "not a GGUF file: the magic is 47 47 4d 4c, expected 'GGUF'");
    g = valid_file();
    g.b[4] = 1;
    REFUSED(g, "GGUF version 1 (the first format, with 32-bit counts");
    g = valid_file();
    g.b[4] = 4;
    REFUSED(g, "unknown GGUF version 4; qkv reads versions 2 and 3");
    g = valid_file();
    g.b[4] = 0, g.b[7] = 3;
    REFUSED(g, "a big-endian GGUF file (version 3 read byte-swapped)");
    g = valid_file();
    g.b[4] = 2; /* version 2 reads the same */
    qkv_gguf *ok = accepted(&g, __LINE__);
    CHECK(qkv_gguf_version(ok) == 2, "version %d", qkv_gguf_version(ok));
    qkv_gguf_close(ok);
    free(g.b);
    g = (gb){0};
    header(&g, 3, 0, UINT64_MAX / 2);
    REFUSED(g, "truncated or corrupt");
    g = (gb){0};
    header(&g, 3, (uint64_t)1 << 40, 0);
    zeros(&g, 100);
    REFUSED(g, "1099511627776 tensors");
}

static void value_rules(void)
{
    gb g = one_key(0, 2);
    str(&g, "k");
    u32(&g, 13);
    REFUSED(g, "key 'k': unknown value type id 13 (GGUF has 0..12)");
    g = one_key(0, 2);
    key(&g, "arr", QKV_GGUF_ARRAY);
    u32(&g, 99);
    u64(&g, 0);
    REFUSED(g, "the array element type of key 'arr': unknown value type id 99");
    g = one_key(0, 2);
    key(&g, "huge", QKV_GGUF_ARRAY);
    u32(&g, QKV_GGUF_U8);
    u64(&g, (uint64_t)1 << 62);
    zeros(&g, 16);
    REFUSED(g, "key 'huge': array length 4611686018427387904 of U8 cannot fit");
    g = one_key(0, 2);
    key(&g, "strs", QKV_GGUF_ARRAY);
    u32(&g, QKV_GGUF_STRING);
    u64(&g, 1000);
    zeros(&g, 64);
    REFUSED(g, "key 'strs': array length 1000 of STRING cannot fit");
    g = one_key(0, 2);
    key(&g, "s", QKV_GGUF_STRING);
    u64(&g, 50);
    put(&g, "short", 5);
    REFUSED(g, "the value of key 's': string length 50 at offset");
    g = one_key(0, 2);
    key(&g, "s", QKV_GGUF_STRING);
    u64(&g, UINT64_MAX);
    REFUSED(g, "runs past the end of the file");
    g = one_key(0, 2);
    u64(&g, (uint64_t)1 << 63); /* a key's own length */
    zeros(&g, 16);
    REFUSED(g, "the name of key 1: string length 9223372036854775808");
    g = one_key(0, 2);
    key(&g, "list", QKV_GGUF_ARRAY);
    u32(&g, QKV_GGUF_STRING);
    u64(&g, 2);
    str(&g, "ok");
    u64(&g, 99);
    REFUSED(g, "a string of element 1 of key 'list': string length 99");
    g = one_key(0, 2);
    key(&g, "b", QKV_GGUF_BOOL);
    put(&g, "\x02", 1);
    REFUSED(g, "key 'b': BOOL value 2 at offset");
    g = one_key(0, 2);
    key(&g, "bs", QKV_GGUF_ARRAY);
    u32(&g, QKV_GGUF_BOOL);
    u64(&g, 3);
    put(&g, "\x01\x00\x07", 3);
    REFUSED(g, "element 2 of key 'bs': BOOL value 7");
    g = one_key(0, 2);
    key(&g, "n", QKV_GGUF_U8);
    put(&g, "\x01", 1);
    REFUSED(g, "key 'n' appears twice (keys 0 and 1)");
    g = one_key(0, 2);
    strn(&g, "a\0b", 3);
    u32(&g, QKV_GGUF_U8);
    put(&g, "\x01", 1);
    REFUSED(g, "key 1 ('a...'): the name holds a NUL byte");
    g = one_key(0, 2);
    key(&g, "", QKV_GGUF_U8);
    put(&g, "\x01", 1);
    REFUSED(g, "key 1: empty name");
    g = one_key(0, 2);
    key(&g, "f", QKV_GGUF_F64);
    put(&g, "1234", 4);
    REFUSED(g, "truncated: the value of key 'f': 8 bytes needed at offset");
}

/* Arrays nested depth deep around an empty U8 array, as key "nest". */
static gb nested(int depth)
{
    gb g = one_key(0, 2);
    key(&g, "nest", QKV_GGUF_ARRAY);
    for (int d = 1; d < depth; d++) {
        u32(&g, QKV_GGUF_ARRAY);
        u64(&g, 1);
    }
    u32(&g, QKV_GGUF_U8);
    u64(&g, 0);
    return g;
}

static void nesting_and_alignment(void)
{
    gb g = nested(8);
    qkv_gguf *ok = accepted(&g, __LINE__);
    qkv_gguf_vtype et;
    int64_t n;
    CHECK(ok && qkv_gguf_get_array(ok, "nest", &et, &n) == QKV_OK && et == QKV_GGUF_ARRAY && n == 1,
          "nested arrays: %s", qkv_last_error());
    CHECK_ERR(qkv_gguf_array_i32(ok, "nest", (int32_t[1]){0}, 1), QKV_ERR_FORMAT, "ARRAY of ARRAY");
    qkv_gguf_close(ok);
    free(g.b);
    g = nested(9);
    REFUSED(g, "key 'nest': arrays nested deeper than 8");
    g = nested(1); /* an empty array */
    ok = accepted(&g, __LINE__);
    CHECK(ok && qkv_gguf_get_array(ok, "nest", &et, &n) == QKV_OK && et == QKV_GGUF_U8 && n == 0,
          "empty array");
    CHECK(ok && qkv_gguf_array_f32(ok, "nest", NULL, 0) == QKV_OK, "empty copy");
    qkv_gguf_close(ok);
    free(g.b);
    g = one_key(0, 2);
    kv_u32(&g, "general.alignment", 48);
    REFUSED(g, "key 'general.alignment' is 48, expected a power of two");
    g = one_key(0, 2);
    kv_u32(&g, "general.alignment", 0);
    REFUSED(g, "key 'general.alignment' is 0, expected a power of two");
    g = one_key(0, 2);
    key(&g, "general.alignment", QKV_GGUF_U64);
    u64(&g, 64);
    REFUSED(g, "key 'general.alignment' is U64, expected U32");
    /* alignment 8: offsets that are multiples of 8 are fine */
    g = one_key(1, 2);
    kv_u32(&g, "general.alignment", 8);
    tinfo(&g, "w", 1, (uint64_t[]){2}, QKV_Q_F32, 8);
    pad(&g, 8);
    zeros(&g, 16);
    ok = accepted(&g, __LINE__);
    CHECK(ok && qkv_gguf_alignment(ok) == 8 && qkv_gguf_tensor_offset(ok, 0) == 8, "alignment 8");
    qkv_gguf_close(ok);
    free(g.b);
}

/* A file with one tensor (name, dims, type, offset) and room bytes of data. */
static gb one_tensor(const char *name, uint32_t nd, const uint64_t *dims, uint32_t type,
                     uint64_t off, size_t room)
{
    gb g = one_key(1, 1);
    tinfo(&g, name, nd, dims, type, off);
    pad(&g, 32);
    zeros(&g, room);
    return g;
}

static void tensor_rules(void)
{
    gb g = one_tensor("w", 2, (uint64_t[]){4, 2}, 4, 0, 64);
    REFUSED(g, "tensor 'w': unknown tensor type id 4");
    g = one_tensor("w", 2, (uint64_t[]){4, 2}, 1000, 0, 64);
    REFUSED(g, "tensor 'w': unknown tensor type id 1000");
    g = one_tensor("w", 2, (uint64_t[]){(uint64_t)1 << 32, (uint64_t)1 << 32}, QKV_Q_F32, 0, 64);
    REFUSED(g, "tensor 'w': the element count (the product of the dimensions) overflows int64");
    g = one_tensor("w", 1, (uint64_t[]){(uint64_t)1 << 62}, QKV_Q_F64, 0, 64);
    REFUSED(g, "tensor 'w': its byte size overflows");
    g = one_tensor("w", 2, (uint64_t[]){4, 0}, QKV_Q_F32, 0, 64);
    REFUSED(g, "tensor 'w': dimension 1 is 0, expected 1..2^63-1");
    g = one_tensor("w", 1, (uint64_t[]){UINT64_MAX}, QKV_Q_F32, 0, 64);
    REFUSED(g, "tensor 'w': dimension 0 is 18446744073709551615");
    g = one_tensor("w", 0, NULL, QKV_Q_F32, 0, 64);
    REFUSED(g, "tensor 'w': 0 dimensions, expected 1..4");
    g = one_tensor("w", 5, (uint64_t[]){1, 1, 1, 1, 1}, QKV_Q_F32, 0, 64);
    REFUSED(g, "tensor 'w': 5 dimensions, expected 1..4");
    g = one_tensor("w", 1, (uint64_t[]){33}, QKV_Q_Q4_0, 0, 64);
    REFUSED(g, "tensor 'w': Q4_0 rows of 33 elements are not whole blocks of 32");
    g = one_tensor("w", 1, (uint64_t[]){8}, QKV_Q_F32, 16, 64);
    REFUSED(g, "tensor 'w': data offset 16 is not a multiple of the alignment 32");
    g = one_tensor("w", 1, (uint64_t[]){8}, QKV_Q_F32, 0, 31);
    REFUSED(g, "tensor 'w': its 32 bytes at data offset 0");
    g = one_tensor("w", 1, (uint64_t[]){8}, QKV_Q_F32, (uint64_t)1 << 63, 64);
    REFUSED(g, "run past the end of the file");
    char longname[65];
    memset(longname, 'x', 64);
    longname[64] = '\0';
    g = one_tensor(longname, 1, (uint64_t[]){8}, QKV_Q_F32, 0, 64);
    REFUSED(g, "the name is 64 bytes, more than 63");
    g = one_key(2, 1); /* overlapping: b starts inside a */
    tinfo(&g, "a", 1, (uint64_t[]){16}, QKV_Q_F32, 0);
    tinfo(&g, "b", 1, (uint64_t[]){8}, QKV_Q_F32, 32);
    pad(&g, 32);
    zeros(&g, 128);
    REFUSED(g, "tensors 'a' (data bytes 0..64) and 'b' (from 32) overlap");
    g = one_key(2, 1); /* the same offset, listed in reverse */
    tinfo(&g, "b", 1, (uint64_t[]){8}, QKV_Q_F32, 64);
    tinfo(&g, "a", 1, (uint64_t[]){8}, QKV_Q_F32, 64);
    pad(&g, 32);
    zeros(&g, 128);
    REFUSED(g, "overlap");
    g = one_key(2, 1);
    tinfo(&g, "w", 1, (uint64_t[]){8}, QKV_Q_F32, 0);
    tinfo(&g, "w", 1, (uint64_t[]){8}, QKV_Q_F32, 32);
    pad(&g, 32);
    zeros(&g, 64);
    REFUSED(g, "tensor 'w' appears twice (tensors 0 and 1)");
    g = one_key(1, 1);
    tinfo(&g, "w", 1, (uint64_t[]){8}, QKV_Q_F32, 0);
    REFUSED(g, "past the end of the file"); /* no data section at all */
    /* a gap between tensors and bytes after the last are allowed */
    g = one_key(2, 1);
    tinfo(&g, "a", 1, (uint64_t[]){8}, QKV_Q_F32, 64);
    tinfo(&g, "b", 1, (uint64_t[]){8}, QKV_Q_F32, 0);
    pad(&g, 32);
    zeros(&g, 160);
    qkv_gguf *ok = accepted(&g, __LINE__);
    CHECK(ok && qkv_gguf_tensor_find(ok, "b") == 1, "gaps");
    qkv_gguf_close(ok);
    free(g.b);
}

/* Seeded random corruptions: 1-4 bytes set to random or edge values;
 * every open must succeed or fail with a message, and an accepted file's
 * accessors must work. */
static void corruptions(void)
{
    gb v = valid_file();
    uint8_t *buf = malloc(v.n);
    qkv_rng r;
    qkv_rng_seed(&r, 37);
    int accepted_n = 0, refused = 0, bad = 0;
    static const uint8_t edge[] = {0x00, 0x01, 0x02, 0x7f, 0x80, 0xff, 0x20, 0x40};
    for (int it = 0; it < 20000; it++) {
        memcpy(buf, v.b, v.n);
        int k = 1 + (int)(qkv_rng_next(&r) % 4);
        for (int j = 0; j < k; j++) {
            size_t at = (size_t)(qkv_rng_next(&r) % v.n);
            uint64_t x = qkv_rng_next(&r);
            buf[at] = x & 1 ? edge[(x >> 1) % sizeof edge] : (uint8_t)(x >> 8);
        }
        size_t len = qkv_rng_next(&r) % 8 == 0 ? (size_t)(qkv_rng_next(&r) % v.n) : v.n;
        qkv_gguf *g = NULL;
        qkv_status s = qkv_gguf_open_memory(buf, len, "c.gguf", &g);
        if (s != QKV_OK) {
            refused++;
            bad += g != NULL || qkv_last_error()[0] == '\0';
            continue;
        }
        accepted_n++;
        for (int64_t i = 0; i < qkv_gguf_tensor_count(g); i++) {
            const void *p;
            size_t nb;
            int nd;
            int64_t dims[4];
            qkv_qtype t;
            const char *name = qkv_gguf_tensor_name(g, i);
            bad += !name || qkv_gguf_tensor_info(g, name, &t, &nd, dims, &p, &nb) != QKV_OK ||
                   (const uint8_t *)p + nb > buf + len;
        }
        for (int64_t i = 0; i < qkv_gguf_meta_count(g); i++) {
            const char *key = qkv_gguf_meta_key(g, i);
            bad += !key || qkv_gguf_meta_find(g, key) != i;
        }
        qkv_gguf_close(g);
    }
    CHECK(bad == 0, "%d corruptions broke a rule", bad);
    printf("  20000 random corruptions: %d accepted (checked), %d refused with a message\n",
           accepted_n, refused);
    free(buf);
    free(v.b);
}

static void paths(void)
{
    qkv_gguf *g = (qkv_gguf *)1;
    CHECK_ERR(qkv_gguf_open("/nonexistent/x.gguf", &g), QKV_ERR_NOTFOUND, "/nonexistent/x.gguf: cannot open");
    CHECK(g == NULL, "*out not NULL");
    CHECK_ERR(qkv_gguf_open("/tmp", &g), QKV_ERR_IO, "not a regular file");
    char dir[] = "/tmp/qkv-ggb-XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/empty.gguf", dir);
    FILE *f = fopen(path, "wb");
    if (f) fclose(f);
    CHECK_ERR(qkv_gguf_open(path, &g), QKV_ERR_FORMAT, "empty.gguf: not a GGUF file: 0 bytes");
    gb v = valid_file();
    f = fopen(path, "wb");
    if (f) fwrite(v.b, 1, v.n, f), fclose(f);
    CHECK_OK(qkv_gguf_open(path, &g));
    const char *s = NULL;
    CHECK_OK(qkv_gguf_array_str(g, "tok", 2, &s, NULL));
    CHECK(s && strcmp(s, "yz") == 0, "tok[2] '%s'", s ? s : "");
    qkv_gguf_close(g);
    free(v.b);
    unlink(path);
    rmdir(dir);
    CHECK_ERR(qkv_gguf_open(NULL, &g), QKV_ERR_ARG, "path is NULL");
    CHECK_ERR(qkv_gguf_open_memory(NULL, 5, "m", &g), QKV_ERR_ARG, "buf is NULL");
    qkv_gguf_close(NULL);
    CHECK(qkv_gguf_tensor_count(NULL) == 0 && qkv_gguf_meta_find(NULL, "x") == -1, "NULL g");
}

/* QKV_GGUF_WRITE_SEEDS=DIR: the valid file and a nested-array file into
 * DIR (tests/fuzz/corpus/fuzz_gguf/'s hand-written seeds). */
static void write_seeds(const char *dir)
{
    gb files[2] = {valid_file(), nested(3)};
    const char *names[2] = {"packed.gguf", "nested.gguf"};
    for (int i = 0; i < 2; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "wb");
        CHECK(f && fwrite(files[i].b, 1, files[i].n, f) == files[i].n, "writing %s", path);
        if (f) fclose(f);
        free(files[i].b);
    }
}

int main(void)
{
    const char *seeds = getenv("QKV_GGUF_WRITE_SEEDS");
    if (seeds) write_seeds(seeds);
    truncations();
    header_rules();
    value_rules();
    nesting_and_alignment();
    tensor_rules();
    corruptions();
    paths();
    printf("test_gguf_bad: %d passed, %d failed\n", h_pass, h_fail);
    return h_fail != 0;
}
