/* Tests of the safetensors reader and writer: round trips, every kind of
 * malformed file the reader must reject, dtype conversions, and files
 * exchanged with tools/safetensors_io.py (torch). Run from the repo root. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "io/safetensors_internal.h"

#define PY "/usr/bin/python3"

static char dir[64]; /* the temp dir every file of this test lives in */

static const char *tmp_path(const char *name)
{
    static char buf[8][256];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 256, "%s/%s", dir, name);
    return p;
}

static int write_file(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(bytes, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static int file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* A file image: the 8-byte length (hlen, or strlen(header) when hlen is
 * -1), the header, then n_data data bytes. */
typedef struct {
    uint8_t *p;
    size_t n;
} image;

static image make_image(const char *header, int64_t hlen, const void *data, size_t n_data)
{
    size_t h = strlen(header);
    uint64_t len = hlen < 0 ? (uint64_t)h : (uint64_t)hlen;
    image im = {malloc(8 + h + n_data + 1), 8 + h + n_data};
    for (int i = 0; i < 8; i++) im.p[i] = (uint8_t)(len >> (8 * i));
    memcpy(im.p + 8, header, h);
    if (n_data) memcpy(im.p + 8 + h, data, n_data);
    return im;
}

/* ---- malformed files -------------------------------------------------- */

/* Writes the image to a file and checks that both open() and the in-memory
 * parse() reject it with QKV_ERR_FORMAT and a message containing needle. */
static void expect_bad_image(int line, image im, const char *needle)
{
    const char *path = tmp_path("bad.st");
    qkv_safetensors *st = (qkv_safetensors *)1;
    qkv_status s;
    if (write_file(path, im.p, im.n) != 0) {
        CHECK(0, "line %d: cannot write %s", line, path);
        free(im.p);
        return;
    }
    s = qkv_safetensors_open(path, &st);
    CHECK(s == QKV_ERR_FORMAT && strstr(qkv_last_error(), needle) && strstr(qkv_last_error(), path)
              && st == NULL,
          "line %d: open -> %s \"%s\", wanted QKV_ERR_FORMAT with \"%s\"", line,
          qkv_status_name(s), qkv_last_error(), needle);
    st = (qkv_safetensors *)1;
    s = qkv_safetensors_parse(im.p, im.n, "mem", &st);
    CHECK(s == QKV_ERR_FORMAT && strstr(qkv_last_error(), needle) && st == NULL,
          "line %d: parse -> %s \"%s\", wanted QKV_ERR_FORMAT with \"%s\"", line,
          qkv_status_name(s), qkv_last_error(), needle);
    free(im.p);
}

/* A header with data bytes of zeros, expected to be rejected. */
static void expect_bad(int line, const char *header, size_t n_data, const char *needle)
{
    uint8_t *zeros = calloc(n_data + 1, 1);
    expect_bad_image(line, make_image(header, -1, zeros, n_data), needle);
    free(zeros);
}
#define BAD(header, n_data, needle) expect_bad(__LINE__, header, n_data, needle)

/* A header with n_data zero bytes that must load; returns the table. */
static qkv_safetensors *expect_good(int line, const char *header, size_t n_data)
{
    uint8_t *zeros = calloc(n_data + 1, 1);
    image im = make_image(header, -1, zeros, n_data);
    qkv_safetensors *st = NULL;
    qkv_status s = qkv_safetensors_parse(im.p, im.n, "mem", &st);
    CHECK(s == QKV_OK, "line %d: parse of %s -> %s: %s", line, header, qkv_status_name(s),
          qkv_last_error());
    free(zeros);
    free(im.p);
    return st;
}

/* "{"w":{"dtype":D,"shape":S,"data_offsets":O}}" */
static const char *entry(const char *dtype, const char *shape, const char *offsets)
{
    static char buf[4][512];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 512, "{\"w\":{\"dtype\":%s,\"shape\":%s,\"data_offsets\":%s}}", dtype, shape,
             offsets);
    return p;
}

static void test_bad_sizes(void)
{
    uint8_t five[5] = {1, 2, 3, 4, 5};
    const char *path = tmp_path("short.st");
    write_file(path, "", 0);
    CHECK_ERR(qkv_safetensors_open(path, &(qkv_safetensors *){NULL}), QKV_ERR_FORMAT, "shorter");
    write_file(path, five, 5);
    CHECK_ERR(qkv_safetensors_open(path, &(qkv_safetensors *){NULL}), QKV_ERR_FORMAT, "shorter");
    CHECK_ERR(qkv_safetensors_parse(five, 5, "mem", &(qkv_safetensors *){NULL}), QKV_ERR_FORMAT,
              "shorter");
    CHECK_ERR(qkv_safetensors_parse(NULL, 0, "mem", &(qkv_safetensors *){NULL}), QKV_ERR_FORMAT,
              "shorter");
    expect_bad_image(__LINE__, make_image("{}", 200000000, NULL, 0), "100 MB");
    expect_bad_image(__LINE__, make_image("{}", 1000, NULL, 0), "past the end");
    expect_bad_image(__LINE__, make_image("{}", 3, NULL, 0), "past the end");
    /* A NUL after the object is not space padding. */
    expect_bad_image(__LINE__, make_image("{}", 3, "", 1), "after the header");
}

static void test_bad_json(void)
{
    BAD("", 0, "invalid JSON");
    BAD("   ", 0, "invalid JSON");
    BAD("{", 0, "invalid JSON");
    BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},}", 4, "invalid JSON");
    BAD("{'w':1}", 0, "invalid JSON");
    BAD("{\"w\" 1}", 0, "invalid JSON");
    BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,],\"data_offsets\":[0,4]}}", 4, "invalid JSON");
    BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4, "leading zero");
    BAD(entry("\"F32\"", "[NaN]", "[0,4]"), 4, "invalid JSON");
    BAD(entry("\"F32\"", "[Infinity]", "[0,4]"), 4, "invalid JSON");
    BAD(entry("\"F32\"", "[-Infinity]", "[0,4]"), 4, "invalid JSON");
    BAD(entry("\"F32\"", "[1.]", "[0,4]"), 4, "invalid JSON");
    BAD(entry("\"F32\"", "[+1]", "[0,4]"), 4, "invalid JSON");
    BAD(entry("\"F32\"", "[1e]", "[0,4]"), 4, "invalid JSON");
    BAD("{\"w\":tru}", 0, "invalid JSON");
    BAD("{\"w\":\"abc}", 0, "unterminated");
    /* Trailing data: only space padding may follow the object. */
    BAD("{}x", 0, "after the header");
    BAD("{}\n", 0, "after the header");
    BAD("{} {}", 0, "after the header");
    /* Strings: control characters, escapes, UTF-8. */
    BAD("{\"w\x01\":{}}", 0, "control character");
    BAD("{\"w\t\":{}}", 0, "control character");
    BAD("{\"w\\q\":{}}", 0, "escape");
    BAD("{\"w\\u12G4\":{}}", 0, "escape");
    BAD("{\"w\\u12\":{}}", 0, "escape");
    BAD("{\"w\\udc00\":{}}", 0, "surrogate");
    BAD("{\"w\\ud800x\":{}}", 0, "surrogate");
    BAD("{\"w\\ud800\\u0041\":{}}", 0, "surrogate");
    BAD("{\"w\xff\":{}}", 0, "UTF-8");
    BAD("{\"w\xc0\xaf\":{}}", 0, "UTF-8");           /* overlong '/' */
    BAD("{\"w\xed\xa0\x80\":{}}", 0, "UTF-8");       /* an encoded surrogate */
    BAD("{\"w\xf4\x90\x80\x80\":{}}", 0, "UTF-8");   /* past U+10FFFF */
    BAD("{\"w\xe2\x9c\":{}}", 0, "UTF-8");           /* truncated */
    BAD("{\"a\\u0000b\":{}}", 0, "NUL");
    BAD("{\"__metadata__\":{\"k\":\"a\\u0000\"}}", 0, "NUL");
    /* Deep nesting is refused before it costs stack. */
    char deep[400] = "{\"w\":";
    for (int i = 0; i < 100; i++) strcat(deep, "[");
    BAD(deep, 0, "nested deeper");
}

static void test_bad_structure(void)
{
    BAD("[]", 0, "header is an array, not an object");
    BAD("\"x\"", 0, "not an object");
    BAD("{\"w\":[1]}", 0, "tensor 'w' is an array, not an object");
    BAD("{\"w\":null}", 0, "not an object");
    BAD("{\"__metadata__\":\"x\"}", 0, "__metadata__ is a string, not an object");
    BAD("{\"__metadata__\":{\"k\":1}}", 0, "value for 'k' is a number, not a string");
    BAD("{\"__metadata__\":{\"k\":null}}", 0, "not a string");
    BAD("{\"__metadata__\":{\"k\":{}}}", 0, "not a string");
    BAD("{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0, "duplicate __metadata__ key 'k'");
    BAD("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate __metadata__");
    BAD(entry("\"F8\"", "[1]", "[0,1]"), 1, "unknown dtype 'F8'");
    BAD(entry("\"f32\"", "[1]", "[0,4]"), 4, "unknown dtype");
    BAD(entry("\"\"", "[1]", "[0,4]"), 4, "unknown dtype");
    BAD(entry("5", "[1]", "[0,4]"), 4, "dtype is a number, not a string");
    BAD("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "missing the 'dtype' field");
    BAD("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "missing the 'shape' field");
    BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "missing the 'data_offsets' field");
    BAD("{\"w\":{}}", 0, "missing");
    BAD("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
        "unknown field 'x'");
    BAD("{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
        "duplicate field 'dtype'");
    BAD(entry("\"F32\"", "4", "[0,16]"), 16, "shape is a number, not an array");
    BAD(entry("\"F32\"", "[1]", "{}"), 4, "data_offsets is an object, not an array");
    BAD(entry("\"F32\"", "[1,1,1,1,1,1,1,1,1]", "[0,4]"), 4, "rank 9");
}

static void test_bad_numbers(void)
{
    BAD(entry("\"F32\"", "[-1]", "[0,4]"), 4, "shape[0] is negative");
    BAD(entry("\"F32\"", "[1]", "[-4,0]"), 4, "data_offsets[0] is negative");
    BAD(entry("\"F32\"", "[-1.5]", "[0,4]"), 4, "negative");
    BAD(entry("\"F32\"", "[1.5]", "[0,4]"), 4, "shape[0] is not an integer");
    BAD(entry("\"F32\"", "[1.0]", "[0,4]"), 4, "not an integer");
    BAD(entry("\"F32\"", "[1e0]", "[0,4]"), 4, "not an integer");
    BAD(entry("\"F32\"", "[1]", "[0,4.0]"), 4, "data_offsets[1] is not an integer");
    BAD(entry("\"F32\"", "[\"1\"]", "[0,4]"), 4, "shape[0] is a string, not an integer");
    BAD(entry("\"F32\"", "[true]", "[0,4]"), 4, "not an integer");
    BAD(entry("\"F32\"", "[null]", "[0,4]"), 4, "not an integer");
    BAD(entry("\"F32\"", "[[1]]", "[0,4]"), 4, "not an integer");
    BAD(entry("\"F32\"", "[99999999999999999999]", "[0,4]"), 4, "too large");
    BAD(entry("\"F32\"", "[9223372036854775808]", "[0,4]"), 4, "too large");
    BAD(entry("\"F32\"", "[1]", "[0,18446744073709551620]"), 4, "too large");
    /* Each dim fits, the byte count does not. */
    BAD(entry("\"F32\"", "[9223372036854775807,4]", "[0,4]"), 4, "too large");
    BAD(entry("\"F32\"", "[4294967296,4294967296]", "[0,4]"), 4, "too large");
    BAD(entry("\"F32\"", "[1]", "[0]"), 4, "has 1 entries, not 2");
    BAD(entry("\"F32\"", "[1]", "[0,4,8]"), 8, "not 2");
    BAD(entry("\"F32\"", "[0]", "[4,0]"), 4, "end before they begin");
    BAD(entry("\"F32\"", "[1]", "[0,4]"), 2, "past the end of the 2-byte data buffer");
}

static void test_bad_offsets(void)
{
    char want[512];
    /* The message names the file, the tensor, both sizes. */
    image im = make_image(entry("\"F32\"", "[2,2]", "[0,12]"), -1, "000000000000", 12);
    const char *path = tmp_path("size.st");
    write_file(path, im.p, im.n);
    free(im.p);
    snprintf(want, sizeof want,
             "safetensors_open: %s: tensor 'w' data_offsets [0,12] do not match dtype F32 and "
             "shape (2,2) (16 bytes)", path);
    CHECK_ERR(qkv_safetensors_open(path, &(qkv_safetensors *){NULL}), QKV_ERR_FORMAT, want);
    BAD(entry("\"F16\"", "[3]", "[0,8]"), 8, "do not match dtype F16 and shape (3) (6 bytes)");
    BAD(entry("\"F64\"", "[]", "[0,4]"), 4, "do not match dtype F64 and shape () (8 bytes)");
    BAD(entry("\"BOOL\"", "[0]", "[0,1]"), 1, "do not match");
    /* Tiling: overlaps, holes, and bytes past the last tensor. */
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
        "tensor 'b' data_offsets [4,12] overlap tensor 'a' [0,8]");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "overlap");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}", 8, "overlap");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12,
        "hole: bytes [4,8)");
    BAD(entry("\"F32\"", "[1]", "[4,8]"), 8, "hole: bytes [0,4)");
    BAD(entry("\"F32\"", "[1]", "[0,4]"), 8, "cover 4 bytes but the data buffer has 8");
    BAD("{}", 1, "cover 0 bytes");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
        "duplicate tensor name 'a'");
}

/* Files at the edges of the format that must load. */
static void test_good_edges(void)
{
    qkv_safetensors *st;
    qkv_st_dtype dt;
    int ndim = -1;
    int64_t shape[8];
    size_t nbytes = 1;
    const void *data;

    st = expect_good(__LINE__, "{}", 0);
    CHECK(qkv_safetensors_count(st) == 0, "empty file count");
    qkv_safetensors_close(st);
    qkv_safetensors_close(expect_good(__LINE__, "{}      ", 0));
    qkv_safetensors_close(expect_good(__LINE__, " \t\r\n{ }", 0)); /* JSON whitespace inside */
    qkv_safetensors_close(expect_good(__LINE__, "{\"__metadata__\":{}}", 0));

    /* Rank 0, rank 8, zero-size tensors at the boundaries, "-0". */
    st = expect_good(__LINE__,
                     "{\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]},"
                     "\"z\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[8,8]},"
                     "\"z0\":{\"dtype\":\"I8\",\"shape\":[5,0],\"data_offsets\":[0,0]},"
                     "\"r8\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,-0],"
                     "\"data_offsets\":[10,10]},"
                     "\"b\":{\"dtype\":\"BOOL\",\"shape\":[1,2,1,1,1,1,1,1],"
                     "\"data_offsets\":[8,10]}}",
                     10);
    CHECK(qkv_safetensors_count(st) == 5, "count %d", qkv_safetensors_count(st));
    CHECK_OK(qkv_safetensors_info(st, "s", &dt, &ndim, shape, &data, &nbytes));
    CHECK(dt == QKV_ST_F64 && ndim == 0 && nbytes == 8, "scalar info");
    CHECK_OK(qkv_safetensors_info(st, "b", &dt, &ndim, shape, NULL, &nbytes));
    CHECK(dt == QKV_ST_BOOL && ndim == 8 && shape[1] == 2 && shape[7] == 1 && nbytes == 2,
          "rank-8 info");
    CHECK_OK(qkv_safetensors_info(st, "z", NULL, &ndim, shape, NULL, &nbytes));
    CHECK(ndim == 2 && shape[0] == 0 && shape[1] == 3 && nbytes == 0, "empty info");
    CHECK_OK(qkv_safetensors_read_f32(st, "z", NULL, 0));
    /* Names come back sorted. */
    CHECK(strcmp(qkv_safetensors_name(st, 0), "b") == 0 &&
          strcmp(qkv_safetensors_name(st, 4), "z0") == 0, "sorted names");
    qkv_safetensors_close(st);

    /* Escapes in names decode to UTF-8; a name may be the empty string. */
    st = expect_good(__LINE__,
                     "{\"a\\u00e9\\ud834\\udd1e\\n\\\"\\/\":{\"dtype\":\"U8\",\"shape\":[1],"
                     "\"data_offsets\":[0,1]},"
                     "\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]},"
                     "\"__metadata__\":{\"\\u00e9\":\"\\t\\b\\f\\r\\\\\"}}",
                     2);
    CHECK_OK(qkv_safetensors_info(st, "a\xc3\xa9\xf0\x9d\x84\x9e\n\"/", NULL, NULL, NULL, NULL,
                                  NULL));
    CHECK_OK(qkv_safetensors_info(st, "", NULL, NULL, NULL, NULL, NULL));
    const char *m = qkv_safetensors_meta(st, "\xc3\xa9");
    CHECK(m && strcmp(m, "\t\b\f\r\\") == 0, "escaped metadata '%s'", m ? m : "(null)");
    qkv_safetensors_close(st);
}

/* ---- conversions ------------------------------------------------------ */

static int same_bits(float a, float b) { return memcmp(&a, &b, 4) == 0; }

static void test_convert(void)
{
    /* F16: 1, -2.5, 65504, 2^-24 (smallest subnormal), largest subnormal,
     * smallest normal, -0, inf, -inf, nan. */
    static const uint16_t h[10] = {0x3c00, 0xc100, 0x7bff, 0x0001, 0x03ff,
                                   0x0400, 0x8000, 0x7c00, 0xfc00, 0x7e00};
    const float hw[9] = {1.0f, -2.5f, 65504.0f, 0x1p-24f, 1023 * 0x1p-24f, 0x1p-14f,
                         -0.0f, INFINITY, -INFINITY};
    /* BF16: 1, -3.140625, 2^-130 (subnormal in both). */
    static const uint16_t bf[3] = {0x3f80, 0xc049, 0x0008};
    const float bfw[3] = {1.0f, -3.140625f, 0x1p-130f};
    uint8_t data[128] = {0}, *p = data;
    float out[10];
    for (int i = 0; i < 10; i++, p += 2) p[0] = (uint8_t)h[i], p[1] = (uint8_t)(h[i] >> 8);
    for (int i = 0; i < 3; i++, p += 2) p[0] = (uint8_t)bf[i], p[1] = (uint8_t)(bf[i] >> 8);
    /* I16 -300, 300; I8 -128, 127; I32 -7; I64 -2^53; F64 -0.1 */
    const uint8_t rest[] = {0xd4, 0xfe, 0x2c, 0x01, 0x80, 0x7f, 0xf9, 0xff, 0xff, 0xff,
                            0, 0, 0, 0, 0, 0, 0xe0, 0xff,
                            0x9a, 0x99, 0x99, 0x99, 0x99, 0x99, 0xb9, 0xbf};
    memcpy(p, rest, sizeof rest);
    size_t n = (size_t)(p - data) + sizeof rest;
    image im = make_image("{\"h\":{\"dtype\":\"F16\",\"shape\":[10],\"data_offsets\":[0,20]},"
                          "\"bf\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[20,26]},"
                          "\"i16\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[26,30]},"
                          "\"i8\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[30,32]},"
                          "\"i32\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[32,36]},"
                          "\"i64\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[36,44]},"
                          "\"f64\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[44,52]}}",
                          -1, data, n);
    qkv_safetensors *st = NULL;
    CHECK_OK(qkv_safetensors_parse(im.p, im.n, "conv", &st));
    free(im.p);
    if (!st) return;
    CHECK_OK(qkv_safetensors_read_f32(st, "h", out, 10));
    for (int i = 0; i < 9; i++)
        CHECK(same_bits(out[i], hw[i]), "f16[%d] = %g, want %g", i, out[i], hw[i]);
    CHECK(isnan(out[9]), "f16 nan gave %g", out[9]);
    CHECK_OK(qkv_safetensors_read_f32(st, "bf", out, 3));
    for (int i = 0; i < 3; i++) CHECK(same_bits(out[i], bfw[i]), "bf16[%d] = %g", i, out[i]);
    /* Integers widen to int64 (sign-extended); as floats they are refused. */
    int64_t iv[2] = {0, 0};
    CHECK_OK(qkv_safetensors_read_i64(st, "i16", iv, 2));
    CHECK(iv[0] == -300 && iv[1] == 300, "i16 %lld %lld", (long long)iv[0], (long long)iv[1]);
    CHECK_OK(qkv_safetensors_read_i64(st, "i8", iv, 2));
    CHECK(iv[0] == -128 && iv[1] == 127, "i8 %lld %lld", (long long)iv[0], (long long)iv[1]);
    CHECK_OK(qkv_safetensors_read_i64(st, "i32", iv, 1));
    CHECK(iv[0] == -7, "i32 %lld", (long long)iv[0]);
    CHECK_OK(qkv_safetensors_read_i64(st, "i64", iv, 1));
    CHECK(iv[0] == -9007199254740992LL, "i64 %lld", (long long)iv[0]);
    CHECK_ERR(qkv_safetensors_read_f32(st, "i32", out, 1), QKV_ERR_DTYPE, "'i32' is I32");
    CHECK_ERR(qkv_safetensors_read_f32(st, "i64", out, 1), QKV_ERR_DTYPE, "safetensors_read_i64");
    CHECK_ERR(qkv_safetensors_read_i64(st, "f64", iv, 1), QKV_ERR_DTYPE, "'f64' is F64");
    CHECK_OK(qkv_safetensors_read_f32(st, "f64", out, 1));
    CHECK(out[0] == -0.1f, "f64 %g", out[0]);
    qkv_safetensors_close(st);
}

/* ---- round trips and the API's argument checks ------------------------ */

/* The file that the Python side checks (tools/safetensors_io.py C_NAMES,
 * _c_expected and C_META hold the same values). */
static const char *const c_names[6] = {"w", "special", "mask", "scalar", "empty",
                                       "\xe5\x90\x8d\xe5\x89\x8d\"q\\"};
static const char *const c_meta_k[2] = {"format", "k\"ey"};
static const char *const c_meta_v[2] = {"pt", "v\nal \xe2\x9c\x93"};
static float c_w[12], c_special[5], c_scalar[1] = {42.0f}, c_named[2] = {7.0f, -7.0f};
static uint8_t c_mask[6] = {1, 0, 0, 7, 1, 0}; /* 7: any nonzero byte is true */

static qkv_status save_c_file(const char *path)
{
    static qkv_tensor t[6];
    const qkv_tensor *tp[6];
    for (int i = 0; i < 12; i++) c_w[i] = i * 0.25f - 1.5f;
    c_special[0] = -0.0f, c_special[1] = INFINITY, c_special[2] = -INFINITY;
    c_special[3] = NAN, c_special[4] = 0x1p-149f;
    t[0] = (qkv_tensor){.dtype = QKV_F32, .ndim = 2, .shape = {3, 4}, .data = c_w};
    t[1] = (qkv_tensor){.dtype = QKV_F32, .ndim = 1, .shape = {5}, .data = c_special};
    t[2] = (qkv_tensor){.dtype = QKV_BOOL, .ndim = 2, .shape = {2, 3}, .mask = c_mask};
    t[3] = (qkv_tensor){.dtype = QKV_F32, .ndim = 0, .data = c_scalar};
    t[4] = (qkv_tensor){.dtype = QKV_F32, .ndim = 1, .shape = {0}};
    t[5] = (qkv_tensor){.dtype = QKV_F32, .ndim = 1, .shape = {2}, .data = c_named};
    for (int i = 0; i < 6; i++) tp[i] = &t[i];
    return qkv_safetensors_save(path, 6, c_names, tp, 2, c_meta_k, c_meta_v);
}

static void test_round_trip(void)
{
    const char *path = tmp_path("c.st");
    qkv_safetensors *st = NULL;
    qkv_st_dtype dt;
    int ndim;
    int64_t shape[8];
    const void *data;
    size_t nbytes;
    float out[12];

    CHECK_OK(save_c_file(path));
    CHECK(!file_exists(tmp_path("c.st.tmp")), "temp file left behind");
    /* The header is padded to a multiple of 8. */
    FILE *f = fopen(path, "rb");
    uint8_t len8[8] = {0};
    CHECK(f && fread(len8, 1, 8, f) == 8, "read length");
    if (f) fclose(f);
    CHECK(len8[0] % 8 == 0, "header length %u not a multiple of 8", len8[0]);

    CHECK_OK(qkv_safetensors_open(path, &st));
    if (!st) return;
    CHECK(qkv_safetensors_count(st) == 6, "count %d", qkv_safetensors_count(st));
    CHECK_OK(qkv_safetensors_info(st, "w", &dt, &ndim, shape, &data, &nbytes));
    CHECK(dt == QKV_ST_F32 && ndim == 2 && shape[0] == 3 && shape[1] == 4 && nbytes == 48,
          "w info");
    CHECK(((uintptr_t)data & 3) == 0, "F32 data not 4-byte aligned");
    CHECK_OK(qkv_safetensors_read_f32(st, "w", out, 12));
    CHECK(memcmp(out, c_w, sizeof c_w) == 0, "w values");
    CHECK_OK(qkv_safetensors_read_f32(st, "special", out, 5));
    CHECK(memcmp(out, c_special, sizeof c_special) == 0, "special values (bitwise)");
    CHECK_OK(qkv_safetensors_info(st, "mask", &dt, &ndim, shape, &data, &nbytes));
    CHECK(dt == QKV_ST_BOOL && ndim == 2 && nbytes == 6 && ((const uint8_t *)data)[3] == 1,
          "mask info / normalised to 0/1");
    uint8_t mask[6] = {9, 9, 9, 9, 9, 9};
    CHECK_OK(qkv_safetensors_read_bool(st, "mask", mask, 6));
    CHECK(mask[0] == 1 && mask[1] == 0 && mask[3] == 1 && mask[5] == 0, "mask as bool");
    CHECK_OK(qkv_safetensors_info(st, "scalar", &dt, &ndim, shape, NULL, &nbytes));
    CHECK(ndim == 0 && nbytes == 4, "scalar info");
    CHECK_OK(qkv_safetensors_read_f32(st, "scalar", out, 1));
    CHECK(out[0] == 42.0f, "scalar %g", out[0]);
    CHECK_OK(qkv_safetensors_read_f32(st, "empty", out, 0));
    CHECK_OK(qkv_safetensors_read_f32(st, c_names[5], out, 2));
    CHECK(out[0] == 7.0f && out[1] == -7.0f, "escaped name values");
    /* Metadata. */
    CHECK(qkv_safetensors_meta(st, "format") &&
              strcmp(qkv_safetensors_meta(st, "format"), "pt") == 0,
          "meta format");
    CHECK(qkv_safetensors_meta(st, "k\"ey") &&
              strcmp(qkv_safetensors_meta(st, "k\"ey"), c_meta_v[1]) == 0, "meta escaped");
    CHECK(qkv_safetensors_meta(st, "nope") == NULL, "missing meta");
    CHECK(qkv_safetensors_meta_count(st) == 2 && !strcmp(qkv_safetensors_meta_key(st, 0), "format") &&
              !strcmp(qkv_safetensors_meta_key(st, 1), "k\"ey") && !qkv_safetensors_meta_key(st, 2) &&
              !qkv_safetensors_meta_key(st, -1),
          "metadata keys listed in order");

    /* Argument checks on a good table. */
    CHECK_ERR(qkv_safetensors_info(st, "nope", NULL, NULL, NULL, NULL, NULL), QKV_ERR_NOTFOUND,
              "no tensor named 'nope'");
    CHECK_ERR(qkv_safetensors_info(st, NULL, NULL, NULL, NULL, NULL, NULL), QKV_ERR_ARG, "name");
    CHECK_ERR(qkv_safetensors_read_f32(st, "w", out, 11), QKV_ERR_SHAPE, "has 12 elements");
    CHECK_ERR(qkv_safetensors_read_f32(st, "w", NULL, 12), QKV_ERR_ARG, "dst");
    CHECK_ERR(qkv_safetensors_read_f32(st, "nope", out, 1), QKV_ERR_NOTFOUND, "nope");
    CHECK(qkv_safetensors_name(st, -1) == NULL && qkv_safetensors_name(st, 6) == NULL,
          "name out of range");
    qkv_safetensors_close(st);

    /* Saving nothing gives a valid, empty file. */
    CHECK_OK(qkv_safetensors_save(tmp_path("none.st"), 0, NULL, NULL, 0, NULL, NULL));
    CHECK_OK(qkv_safetensors_open(tmp_path("none.st"), &st));
    CHECK(qkv_safetensors_count(st) == 0, "empty save count");
    qkv_safetensors_close(st);
}

/* ---- typed reads ---------------------------------------------------- */

/* Dtypes and shapes must mean what the destination holds: a BOOL mask is
 * no float, a (3,4) weight no (4,3) one, whatever the element counts. */
static void test_typed_reads(void)
{
    const char *path = tmp_path("typed.st");
    qkv_safetensors *st = NULL;
    float out[12];
    CHECK_OK(save_c_file(path));
    CHECK_OK(qkv_safetensors_open(path, &st));
    if (!st) return;
    /* The BOOL mask as floats: refused, naming the tensor, its dtype and
     * the read that fits; out untouched. */
    out[0] = 42;
    CHECK_ERR(qkv_safetensors_read_f32(st, "mask", out, 6), QKV_ERR_DTYPE,
              "tensor 'mask' is BOOL, not a floating-point dtype");
    CHECK(strstr(qkv_last_error(), "safetensors_read_bool") && strstr(qkv_last_error(), path),
          "message: %s", qkv_last_error());
    CHECK(out[0] == 42, "a refused read wrote into dst");
    int64_t iv[12];
    uint8_t bv[12];
    CHECK_ERR(qkv_safetensors_read_i64(st, "mask", iv, 6), QKV_ERR_DTYPE, "'mask' is BOOL");
    CHECK_ERR(qkv_safetensors_read_i64(st, "w", iv, 12), QKV_ERR_DTYPE,
              "'w' is F32, not an integer dtype");
    CHECK_ERR(qkv_safetensors_read_bool(st, "w", bv, 12), QKV_ERR_DTYPE, "'w' is F32, not BOOL");
    CHECK_ERR(qkv_safetensors_read_bool(st, "mask", bv, 5), QKV_ERR_SHAPE, "has 6 elements");
    CHECK_ERR(qkv_safetensors_read_bool(st, "mask", NULL, 6), QKV_ERR_ARG, "dst");
    CHECK_ERR(qkv_safetensors_read_bool(NULL, "mask", bv, 6), QKV_ERR_ARG, "st");
    CHECK_ERR(qkv_safetensors_read_i64(st, NULL, iv, 6), QKV_ERR_ARG, "name");

    /* read_tensor: the exact stored shape, whatever the count. */
    float buf[12];
    for (int i = 0; i < 12; i++) buf[i] = -99;
    qkv_tensor t = {.dtype = QKV_F32, .ndim = 2, .shape = {4, 3}, .data = buf};
    CHECK_ERR(qkv_safetensors_read_tensor(st, "w", &t), QKV_ERR_SHAPE,
              "'w' is (3,4) in the file, (4,3) in the tensor");
    t.ndim = 1, t.shape[0] = 12;
    CHECK_ERR(qkv_safetensors_read_tensor(st, "w", &t), QKV_ERR_SHAPE,
              "'w' is (3,4) in the file, (12) in the tensor");
    CHECK(buf[0] == -99 && buf[11] == -99, "a refused read_tensor wrote into the tensor");
    t.ndim = 2, t.shape[0] = 3, t.shape[1] = 4;
    CHECK_OK(qkv_safetensors_read_tensor(st, "w", &t));
    CHECK(memcmp(buf, c_w, sizeof c_w) == 0, "read_tensor values");
    /* The mask into a BOOL tensor, and refused by an F32 one. */
    qkv_tensor m = {.dtype = QKV_BOOL, .ndim = 2, .shape = {2, 3}, .mask = bv};
    memset(bv, 9, sizeof bv);
    CHECK_OK(qkv_safetensors_read_tensor(st, "mask", &m));
    CHECK(bv[0] == 1 && bv[1] == 0 && bv[2] == 0 && bv[3] == 1 && bv[4] == 1 && bv[5] == 0,
          "mask via read_tensor");
    qkv_tensor mf = {.dtype = QKV_F32, .ndim = 2, .shape = {2, 3}, .data = buf};
    CHECK_ERR(qkv_safetensors_read_tensor(st, "mask", &mf), QKV_ERR_DTYPE, "'mask' is BOOL");
    qkv_tensor mi = {.dtype = QKV_I64, .ndim = 2, .shape = {2, 3}, .idx = iv};
    CHECK_ERR(qkv_safetensors_read_tensor(st, "mask", &mi), QKV_ERR_DTYPE, "not an integer");
    CHECK_ERR(qkv_safetensors_read_tensor(st, "w", NULL), QKV_ERR_ARG, "dst");
    CHECK_ERR(qkv_safetensors_read_tensor(st, "nope", &t), QKV_ERR_NOTFOUND, "'nope'");
    t.data = NULL;
    CHECK_ERR(qkv_safetensors_read_tensor(st, "w", &t), QKV_ERR_ARG, "dst");

    /* load_tensor: the stored shape and kind, from an arena. */
    qkv_arena *a = NULL;
    CHECK_OK(qkv_arena_new(&a, 0));
    qkv_tensor *x = NULL;
    CHECK_OK(qkv_safetensors_load_tensor(st, "w", a, &x));
    CHECK(x && x->dtype == QKV_F32 && x->ndim == 2 && x->shape[0] == 3 && x->shape[1] == 4 &&
              !memcmp(x->data, c_w, sizeof c_w), "load_tensor w");
    CHECK_OK(qkv_safetensors_load_tensor(st, "mask", a, &x));
    CHECK(x && x->dtype == QKV_BOOL && x->ndim == 2 && x->shape[1] == 3 && x->mask[3] == 1 &&
              x->mask[4] == 1 && x->mask[2] == 0, "load_tensor mask");
    CHECK_OK(qkv_safetensors_load_tensor(st, "scalar", a, &x));
    CHECK(x && x->ndim == 0 && x->data[0] == 42.0f, "load_tensor scalar");
    CHECK_OK(qkv_safetensors_load_tensor(st, "empty", a, &x));
    CHECK(x && x->ndim == 1 && x->shape[0] == 0, "load_tensor empty");
    size_t used = qkv_arena_used(a);
    x = (qkv_tensor *)1;
    CHECK_ERR(qkv_safetensors_load_tensor(st, "nope", a, &x), QKV_ERR_NOTFOUND, "'nope'");
    CHECK(x == NULL && qkv_arena_used(a) == used, "a failed load_tensor left *out or memory");
    CHECK_ERR(qkv_safetensors_load_tensor(st, "w", NULL, &x), QKV_ERR_ARG, "arena");
    CHECK_ERR(qkv_safetensors_load_tensor(st, "w", a, NULL), QKV_ERR_ARG, "out");
    qkv_safetensors_close(st);

    /* Integers load as I64 (widened), and a rank the tensors lack is refused. */
    const uint8_t data[] = {0xf9, 0xff, 0xff, 0xff, 0x05, 0, 0, 0,  /* I32 -7, 5 */
                            0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0};    /* U8 255, 2; F32 0 */
    image im = make_image("{\"i\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                          "\"u\":{\"dtype\":\"U8\",\"shape\":[1,2],\"data_offsets\":[8,10]},"
                          "\"r5\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],"
                          "\"data_offsets\":[10,14]}}",
                          -1, data, 14);
    CHECK_OK(qkv_safetensors_parse(im.p, im.n, "ints", &st));
    free(im.p);
    if (st) {
        CHECK_OK(qkv_safetensors_load_tensor(st, "i", a, &x));
        CHECK(x && x->dtype == QKV_I64 && x->ndim == 1 && x->idx[0] == -7 && x->idx[1] == 5,
              "load_tensor I32 -> I64");
        CHECK_OK(qkv_safetensors_load_tensor(st, "u", a, &x));
        CHECK(x && x->dtype == QKV_I64 && x->ndim == 2 && x->idx[0] == 255 && x->idx[1] == 2,
              "load_tensor U8 -> I64 (unsigned)");
        CHECK_ERR(qkv_safetensors_load_tensor(st, "r5", a, &x), QKV_ERR_SHAPE,
                  "'r5' is (1,1,1,1,1), 5 dims; qkv tensors have at most 4");
        qkv_safetensors_close(st);
    }
    qkv_arena_free(a);
}

static void test_api_args(void)
{
    qkv_safetensors *st = (qkv_safetensors *)1;
    float x[4] = {1, 2, 3, 4};
    qkv_tensor t = {.dtype = QKV_F32, .ndim = 1, .shape = {4}, .data = x};
    qkv_tensor bad = t;
    const qkv_tensor *one[1] = {&t}, *two[2] = {&t, &t}, *nul[1] = {NULL}, *badp[1] = {&bad};
    const char *n_w[1] = {"w"}, *n_ww[2] = {"w", "w"}, *n_empty[1] = {""};
    const char *n_null[1] = {NULL}, *n_meta[1] = {"__metadata__"}, *n_utf[1] = {"w\xff"};
    const char *k2[2] = {"k", "k"}, *v2[2] = {"a", "b"}, *knull[1] = {NULL};
    const char *path = tmp_path("args.st");

    CHECK_ERR(qkv_safetensors_open(NULL, &st), QKV_ERR_ARG, "path");
    CHECK(st == NULL, "out not cleared");
    CHECK_ERR(qkv_safetensors_open(path, NULL), QKV_ERR_ARG, "out");
    CHECK_ERR(qkv_safetensors_open(tmp_path("missing.st"), &st), QKV_ERR_IO, "missing.st");
    CHECK_ERR(qkv_safetensors_open(dir, &st), QKV_ERR_IO, "not a regular file");
    CHECK_ERR(qkv_safetensors_parse(NULL, 8, "m", &st), QKV_ERR_ARG, "buf");
    CHECK_ERR(qkv_safetensors_parse((const uint8_t *)"x", 1, "m", NULL), QKV_ERR_ARG, "out");
    CHECK(qkv_safetensors_count(NULL) == 0 && qkv_safetensors_name(NULL, 0) == NULL &&
          qkv_safetensors_meta(NULL, "k") == NULL, "NULL table accessors");
    CHECK_ERR(qkv_safetensors_info(NULL, "w", NULL, NULL, NULL, NULL, NULL), QKV_ERR_ARG, "st");
    CHECK_ERR(qkv_safetensors_read_f32(NULL, "w", x, 4), QKV_ERR_ARG, "st");
    qkv_safetensors_close(NULL);

    CHECK_ERR(qkv_safetensors_save(NULL, 1, n_w, one, 0, NULL, NULL), QKV_ERR_ARG, "path");
    CHECK_ERR(qkv_safetensors_save("", 1, n_w, one, 0, NULL, NULL), QKV_ERR_ARG, "path");
    CHECK_ERR(qkv_safetensors_save(path, -1, n_w, one, 0, NULL, NULL), QKV_ERR_ARG, "negative");
    CHECK_ERR(qkv_safetensors_save(path, 1, NULL, one, 0, NULL, NULL), QKV_ERR_ARG, "NULL");
    CHECK_ERR(qkv_safetensors_save(path, 1, n_w, NULL, 0, NULL, NULL), QKV_ERR_ARG, "NULL");
    CHECK_ERR(qkv_safetensors_save(path, 1, n_null, one, 0, NULL, NULL), QKV_ERR_ARG,
              "names[0] is NULL");
    CHECK_ERR(qkv_safetensors_save(path, 1, n_empty, one, 0, NULL, NULL), QKV_ERR_ARG,
              "names[0] is empty");
    CHECK_ERR(qkv_safetensors_save(path, 2, n_ww, two, 0, NULL, NULL), QKV_ERR_ARG,
              "tensor name 'w' appears twice");
    CHECK_ERR(qkv_safetensors_save(path, 1, n_meta, one, 0, NULL, NULL), QKV_ERR_ARG, "reserved");
    CHECK_ERR(qkv_safetensors_save(path, 1, n_utf, one, 0, NULL, NULL), QKV_ERR_ARG, "UTF-8");
    CHECK_ERR(qkv_safetensors_save(path, 1, n_w, nul, 0, NULL, NULL), QKV_ERR_ARG,
              "tensors[0] ('w') is NULL");
    bad.data = NULL;
    CHECK_ERR(qkv_safetensors_save(path, 1, n_w, badp, 0, NULL, NULL), QKV_ERR_ARG, "no data");
    bad = t, bad.dtype = (qkv_dtype)7;
    CHECK_ERR(qkv_safetensors_save(path, 1, n_w, badp, 0, NULL, NULL), QKV_ERR_DTYPE, "dtype");
    bad = t, bad.ndim = 5;
    CHECK_ERR(qkv_safetensors_save(path, 1, n_w, badp, 0, NULL, NULL), QKV_ERR_SHAPE, "ndim");
    bad = t, bad.shape[0] = -2;
    CHECK_ERR(qkv_safetensors_save(path, 1, n_w, badp, 0, NULL, NULL), QKV_ERR_SHAPE, "shape");
    bad = t, bad.dtype = QKV_BOOL;
    CHECK_ERR(qkv_safetensors_save(path, 1, n_w, badp, 0, NULL, NULL), QKV_ERR_ARG, "no mask");
    CHECK_ERR(qkv_safetensors_save(path, 1, n_w, one, 2, k2, v2), QKV_ERR_ARG,
              "metadata key 'k' appears twice");
    CHECK_ERR(qkv_safetensors_save(path, 1, n_w, one, 1, knull, v2), QKV_ERR_ARG, "NULL");
    CHECK_ERR(qkv_safetensors_save(path, 1, n_w, one, 1, NULL, v2), QKV_ERR_ARG, "NULL");
    CHECK_ERR(qkv_safetensors_save(path, 1, n_w, one, -1, NULL, NULL), QKV_ERR_ARG, "negative");
    CHECK(!file_exists(path) && !file_exists(tmp_path("args.st.tmp")), "failed saves wrote a file");
}

/* A failed save leaves the file at path as it was, and no temp file. */
static void test_save_atomic(void)
{
    float x[2] = {1, 2};
    qkv_tensor t = {.dtype = QKV_F32, .ndim = 1, .shape = {2}, .data = x};
    const qkv_tensor *one[1] = {&t};
    const char *n_w[1] = {"w"};
    const char *path = tmp_path("keep.st"), *tmp = tmp_path("keep.st.tmp");
    qkv_safetensors *st = NULL;
    float out[2];

    CHECK_OK(qkv_safetensors_save(path, 1, n_w, one, 0, NULL, NULL));
    /* Something planted at the old fixed temp name (here a directory) is
     * neither used nor removed: the temp file has a fresh, exclusive name. */
    CHECK(mkdir(tmp, 0700) == 0, "mkdir");
    x[0] = 99;
    CHECK_OK(qkv_safetensors_save(path, 1, n_w, one, 0, NULL, NULL));
    struct stat sb;
    CHECK(stat(tmp, &sb) == 0 && S_ISDIR(sb.st_mode), "the planted directory was touched");
    rmdir(tmp);
    CHECK_OK(qkv_safetensors_open(path, &st));
    CHECK_OK(qkv_safetensors_read_f32(st, "w", out, 2));
    CHECK(out[0] == 99 && out[1] == 2, "the save did not replace the file");
    qkv_safetensors_close(st);
    x[0] = 1;
    CHECK_OK(qkv_safetensors_save(path, 1, n_w, one, 0, NULL, NULL));

    /* The rename fails (path is a non-empty directory): the temp goes. */
    const char *dpath = tmp_path("adir.st");
    CHECK(mkdir(dpath, 0700) == 0, "mkdir");
    char inner[300];
    snprintf(inner, sizeof inner, "%s/x", dpath);
    write_file(inner, "x", 1);
    CHECK_ERR(qkv_safetensors_save(dpath, 1, n_w, one, 0, NULL, NULL), QKV_ERR_IO, "rename");
    CHECK(!file_exists(tmp_path("adir.st.tmp")), "temp file left after a failed rename");
    remove(inner);
    rmdir(dpath);

    /* A directory that does not exist. */
    CHECK_ERR(qkv_safetensors_save(tmp_path("no/such/dir.st"), 1, n_w, one, 0, NULL, NULL),
              QKV_ERR_IO, "cannot create");
}

/* ---- files shared with torch ------------------------------------------ */

static int have_torch(void)
{
    return system(PY " -c 'import torch, numpy' >/dev/null 2>&1") == 0;
}

/* Checks one tensor of the Python-written file (tools/safetensors_io.py
 * selftest_tensors) against the values C expects, bit for bit. */
static void check_py_tensor(qkv_safetensors *st, const char *name, qkv_st_dtype want_dt,
                            int want_ndim, const float *want, int64_t n)
{
    qkv_st_dtype dt;
    int ndim = -1;
    int64_t shape[8], iv[16];
    uint8_t bv[16];
    float out[16];
    CHECK_OK(qkv_safetensors_info(st, name, &dt, &ndim, shape, NULL, NULL));
    CHECK(dt == want_dt && ndim == want_ndim, "%s: dtype %d ndim %d", name, dt, ndim);
    /* Each dtype through its own typed read, compared as float. */
    if (dt == QKV_ST_BOOL) {
        CHECK_OK(qkv_safetensors_read_bool(st, name, bv, n));
        for (int64_t i = 0; i < n; i++) out[i] = bv[i];
    } else if (dt == QKV_ST_F32 || dt == QKV_ST_F16 || dt == QKV_ST_BF16 || dt == QKV_ST_F64) {
        CHECK_OK(qkv_safetensors_read_f32(st, name, out, n));
    } else {
        CHECK_OK(qkv_safetensors_read_i64(st, name, iv, n));
        for (int64_t i = 0; i < n; i++) out[i] = (float)iv[i];
    }
    for (int64_t i = 0; i < n; i++)
        CHECK(same_bits(out[i], want[i]) || (isnan(out[i]) && isnan(want[i])),
              "%s[%lld] = %g, want %g", name, (long long)i, out[i], want[i]);
}

static void test_python_to_c(void)
{
    const char *path = tmp_path("py.st");
    char cmd[512];
    qkv_safetensors *st = NULL;
    snprintf(cmd, sizeof cmd, PY " tools/safetensors_io.py --selftest-write '%s'", path);
    CHECK(system(cmd) == 0, "%s failed", cmd);
    CHECK_OK(qkv_safetensors_open(path, &st));
    if (!st) return;
    CHECK(qkv_safetensors_count(st) == 13, "count %d", qkv_safetensors_count(st));
    const float f32[6] = {-0.5f, -0.25f, 0, 0.25f, 0.5f, 0.75f};
    const float f64[3] = {1.5f, -2.25f, INFINITY}; /* 1e300 is past float's range */
    const float f16[9] = {1, -2.5f, 65504, 0x1p-24f, 0x1p-15f, INFINITY, -INFINITY, NAN, -0.0f};
    const float bf16[4] = {1, -3.140625f, 0x1p100f, 0x1p-130f};
    const float i64[4] = {0, -1, 0x1p40f, -0x1p53f}, i32[2] = {123456, -7};
    const float i16[2] = {-300, 300}, i8[2] = {-128, 127}, u8[3] = {0, 7, 255};
    const float bl[4] = {1, 0, 0, 1}, scalar[1] = {3.5f};
    float w12[12];
    for (int i = 0; i < 12; i++) w12[i] = (float)i;
    check_py_tensor(st, "f32", QKV_ST_F32, 2, f32, 6);
    check_py_tensor(st, "f64", QKV_ST_F64, 1, f64, 3);
    check_py_tensor(st, "f16", QKV_ST_F16, 1, f16, 9);
    check_py_tensor(st, "bf16", QKV_ST_BF16, 2, bf16, 4);
    check_py_tensor(st, "i64", QKV_ST_I64, 1, i64, 4);
    check_py_tensor(st, "i32", QKV_ST_I32, 1, i32, 2);
    check_py_tensor(st, "i16", QKV_ST_I16, 1, i16, 2);
    check_py_tensor(st, "i8", QKV_ST_I8, 1, i8, 2);
    check_py_tensor(st, "u8", QKV_ST_U8, 1, u8, 3);
    check_py_tensor(st, "bool", QKV_ST_BOOL, 2, bl, 4);
    check_py_tensor(st, "scalar", QKV_ST_F32, 0, scalar, 1);
    check_py_tensor(st, "empty", QKV_ST_F32, 2, NULL, 0);
    check_py_tensor(st, "layers.0.self_attn.in_proj_weight", QKV_ST_F32, 2, w12, 12);
    const char *note = qkv_safetensors_meta(st, "note");
    CHECK(note && strcmp(note, "h\xc3\xa9llo \"quoted\"\n\ttab \xe2\x9c\x93 \xf0\x9d\x84\x9e") == 0,
          "note metadata '%s'", note ? note : "(null)");
    CHECK(qkv_safetensors_meta(st, "format") &&
              strcmp(qkv_safetensors_meta(st, "format"), "pt") == 0,
          "format metadata");
    qkv_safetensors_close(st);
}

static void test_c_to_python(void)
{
    const char *path = tmp_path("c2py.st");
    char cmd[512];
    CHECK_OK(save_c_file(path));
    snprintf(cmd, sizeof cmd, PY " tools/safetensors_io.py --selftest-check '%s'", path);
    CHECK(system(cmd) == 0, "%s failed (see its message above)", cmd);
}

int main(void)
{
    strcpy(dir, "/tmp/qkv_st_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_bad_sizes();
    test_bad_json();
    test_bad_structure();
    test_bad_numbers();
    test_bad_offsets();
    test_good_edges();
    test_convert();
    test_round_trip();
    test_typed_reads();
    test_api_args();
    test_save_atomic();
    /* The interop tests need Debian's PyTorch (tools/setup.sh --test): a
     * machine without it fails here rather than skipping. */
    CHECK(have_torch(), PY " cannot import torch: run tools/setup.sh --test");
    test_python_to_c();
    test_c_to_python();
    h_tmpdir_remove(dir);
    return h_finish("test_safetensors");
}
