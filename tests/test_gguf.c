/* test_gguf.c: the GGUF reader against gguf-py (llama.cpp's own reader).
 *   - SmolLM2-135M-Instruct Q4_1 and Gemma 3 270M Q4_K_M (data/ from
 *     tools/get_data.sh smollm2, gemma3; gguf-py from tools/get_data.sh
 *     oracle): every key and value (every array element: the 262k-token
 *     vocabulary, scores and types) and every tensor's name, type, ggml
 *     dims, file offset and bytes, compared line by line between qkv's dump
 *     and tools/gguf_oracle.py's dump of gguf.GGUFReader; a missing file or
 *     gguf-py is a failure naming tools/get_data.sh
 *   - small files written by gguf.GGUFWriter (every scalar type, strings
 *     with non-ASCII bytes, arrays, F32/F16/I32/Q4_0 tensors, a custom
 *     alignment, an empty file): the same dump comparison, then the typed
 *     getters (conversions, range checks, error messages) and the tensor data
 *   - `qkv inspect` on them (and on a safetensors-looking name, picked by magic)
 * Bad files are in test_gguf_bad.c. Run from the repo root. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli_run.h"

static const char *PY = "data/venv/bin/python";
static char tmpdir[64] = "/tmp/qkv-gguf-XXXXXX";

/* Writes b[0, n) escaped as tools/gguf_oracle.py's esc() does. */
static void esc(FILE *f, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x21 && c <= 0x7e && c != '\\') fputc(c, f);
        else fprintf(f, "\\x%02x", c);
    }
}

/* One scalar of type t at element j of key (or the key itself, j < 0). */
static void put_value(FILE *f, const qkv_gguf *g, const char *key, qkv_gguf_vtype t, int64_t j)
{
    if (t == QKV_GGUF_STRING) {
        const char *s;
        size_t len = 0;
        if (j < 0) qkv_gguf_get_str(g, key, &s, &len);
        else qkv_gguf_array_str(g, key, j, &s, &len);
        esc(f, s, len);
        return;
    }
    if (j >= 0) return; /* array elements are written by put_array */
    if (t == QKV_GGUF_F32 || t == QKV_GGUF_F64) {
        double v = 0;
        qkv_gguf_get_f64(g, key, &v);
        fprintf(f, "%.17g", v);
    } else if (t == QKV_GGUF_U64) {
        uint64_t v = 0;
        qkv_gguf_get_u64(g, key, &v);
        fprintf(f, "%" PRIu64, v);
    } else {
        int64_t v = 0;
        qkv_gguf_get_i64(g, key, &v);
        fprintf(f, "%" PRId64, v);
    }
}

/* The elements of a numeric array, one line each. */
static void put_array(FILE *f, const qkv_gguf *g, const char *key, qkv_gguf_vtype et, int64_t n)
{
    if (et == QKV_GGUF_STRING) {
        for (int64_t j = 0; j < n; j++) {
            fprintf(f, "  [%" PRId64 "] ", j);
            put_value(f, g, key, et, j);
            fputc('\n', f);
        }
        return;
    }
    if (et == QKV_GGUF_ARRAY) return;
    int is_float = et == QKV_GGUF_F32 || et == QKV_GGUF_F64;
    float *fv = is_float ? malloc((size_t)(n ? n : 1) * sizeof *fv) : NULL;
    int32_t *iv = is_float ? NULL : malloc((size_t)(n ? n : 1) * sizeof *iv);
    qkv_status s = is_float ? qkv_gguf_array_f32(g, key, fv, n) : qkv_gguf_array_i32(g, key, iv, n);
    for (int64_t j = 0; j < n; j++) {
        if (s != QKV_OK) fprintf(f, "  [%" PRId64 "] ?%s\n", j, qkv_last_error());
        else if (is_float) fprintf(f, "  [%" PRId64 "] %.17g\n", j, (double)fv[j]);
        else fprintf(f, "  [%" PRId64 "] %" PRId32 "\n", j, iv[j]);
    }
    free(fv);
    free(iv);
}

/* qkv's view of g in tools/gguf_oracle.py's dump format. */
static void dump(const qkv_gguf *g, FILE *f)
{
    fprintf(f, "version %d\nalignment %" PRId64 "\ndata_offset %" PRIu64 "\n", qkv_gguf_version(g),
            qkv_gguf_alignment(g), qkv_gguf_data_offset(g));
    fprintf(f, "kv_count %" PRId64 "\ntensor_count %" PRId64 "\n", qkv_gguf_meta_count(g),
            qkv_gguf_tensor_count(g));
    for (int64_t i = 0; i < qkv_gguf_meta_count(g); i++) {
        const char *key = qkv_gguf_meta_key(g, i);
        qkv_gguf_vtype t = qkv_gguf_meta_type(g, i);
        fprintf(f, "kv ");
        esc(f, key, strlen(key));
        if (t == QKV_GGUF_ARRAY) {
            qkv_gguf_vtype et;
            int64_t n;
            qkv_gguf_get_array(g, key, &et, &n);
            fprintf(f, " ARRAY %s %" PRId64 "\n", qkv_gguf_vtype_name(et), n);
            put_array(f, g, key, et, n);
            continue;
        }
        fprintf(f, " %s ", qkv_gguf_vtype_name(t));
        put_value(f, g, key, t, -1);
        fputc('\n', f);
    }
    for (int64_t i = 0; i < qkv_gguf_tensor_count(g); i++) {
        const char *name = qkv_gguf_tensor_name(g, i);
        qkv_qtype type;
        int nd;
        int64_t dims[4];
        const void *data;
        size_t nbytes;
        qkv_gguf_tensor_info(g, name, &type, &nd, dims, &data, &nbytes);
        fprintf(f, "tensor ");
        esc(f, name, strlen(name));
        fprintf(f, " %d ", (int)type);
        for (int d = 0; d < nd; d++) fprintf(f, d ? ",%" PRId64 : "%" PRId64, dims[d]);
        /* data is where the offset says, in the mapping */
        uint64_t off = qkv_gguf_data_offset(g) + qkv_gguf_tensor_offset(g, i);
        fprintf(f, " %" PRIu64 " %zu\n", off, nbytes);
    }
}

/* Lines of a and b compared; returns the mismatches (the first few shown). */
static int64_t compare_dumps(const char *pa, const char *pb, int64_t *lines)
{
    FILE *a = fopen(pa, "r"), *b = fopen(pb, "r");
    char *la = NULL, *lb = NULL;
    size_t ca = 0, cb = 0;
    int64_t bad = 0, n = 0;
    if (!a || !b) {
        if (a) fclose(a);
        if (b) fclose(b);
        return -1;
    }
    for (;;) {
        ssize_t ra = getline(&la, &ca, a), rb = getline(&lb, &cb, b);
        if (ra < 0 && rb < 0) break;
        n++;
        if (ra < 0 || rb < 0 || strcmp(la, lb) != 0) {
            if (bad++ < 5)
                fprintf(stderr, "  line %" PRId64 ": qkv %s         gguf-py %s", n,
                        ra < 0 ? "(end)\n" : la, rb < 0 ? "(end)\n" : lb);
        }
    }
    free(la);
    free(lb);
    fclose(a);
    fclose(b);
    *lines = n;
    return bad;
}

/* Opens path, dumps it, has gguf-py dump it, compares. */
static void against_gguf_py(const char *path, const char *tag)
{
    qkv_gguf *g = NULL;
    qkv_status s = qkv_gguf_open(path, &g);
    CHECK(s == QKV_OK, "%s: %s (run tools/get_data.sh %s)", path, qkv_last_error(), tag);
    if (s != QKV_OK) return;
    const char *mine = cli_path(tmpdir, "qkv.txt"), *ref = cli_path(tmpdir, "py.txt");
    FILE *f = fopen(mine, "w");
    dump(g, f);
    fclose(f);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s tools/gguf_oracle.py dump '%s' '%s'", PY, path, ref);
    int rc = system(cmd);
    CHECK(rc == 0, "gguf-py could not dump %s (tools/get_data.sh oracle installs it)", path);
    int64_t lines = 0, bad = compare_dumps(mine, ref, &lines);
    CHECK(bad == 0 && lines > 5, "%s: %" PRId64 " of %" PRId64 " dump lines differ from gguf-py",
          path, bad, lines);
    printf("  %s: %" PRId64 " keys, %" PRId64 " tensors; %" PRId64 " dump lines, %" PRId64
           " differ from gguf-py\n", path, qkv_gguf_meta_count(g), qkv_gguf_tensor_count(g), lines,
           bad);
    qkv_gguf_close(g);
}

/* The typed getters on tools/gguf_oracle.py's types.gguf, whose values
 * the script sets (the expected values are the script's). */
static void getters(const char *path)
{
    qkv_gguf *g = NULL;
    CHECK_OK(qkv_gguf_open(path, &g));
    if (!g) return;
    int64_t v;
    float x;
    int b;
    const char *s;
    size_t len;
    CHECK_OK(qkv_gguf_get_i64(g, "t.u8", &v));
    CHECK(v == 200, "u8 %" PRId64, v);
    CHECK_OK(qkv_gguf_get_i64(g, "t.i64", &v));
    CHECK(v == INT64_MIN, "i64 %" PRId64, v);
    CHECK_OK(qkv_gguf_get_i64(g, "t.u32", &v));
    CHECK(v == 4000000000, "u32 %" PRId64, v);
    CHECK_OK(qkv_gguf_get_i64(g, "t.bool", &v));
    CHECK(v == 1, "bool as i64 %" PRId64, v);
    CHECK_ERR(qkv_gguf_get_i64(g, "t.u64", &v), QKV_ERR_FORMAT, "'t.u64' is U64 18446744073709551615");
    CHECK_ERR(qkv_gguf_get_i64(g, "t.str", &v), QKV_ERR_FORMAT, "key 't.str' is STRING");
    CHECK_ERR(qkv_gguf_get_i64(g, "t.f32", &v), QKV_ERR_FORMAT, "key 't.f32' is F32");
    uint64_t u;
    double d;
    CHECK_OK(qkv_gguf_get_u64(g, "t.u64", &u));
    CHECK(u == UINT64_MAX, "u64 %" PRIu64, u);
    CHECK_ERR(qkv_gguf_get_u64(g, "t.i8", &u), QKV_ERR_FORMAT, "'t.i8' is I8 -100, negative");
    CHECK_OK(qkv_gguf_get_f64(g, "t.f64", &d));
    CHECK(d == 1e300, "f64 %.17g", d);
    CHECK_ERR(qkv_gguf_get_i64(g, "no.such", &v), QKV_ERR_NOTFOUND, "no key 'no.such'");
    CHECK_OK(qkv_gguf_get_f32(g, "t.f32", &x));
    CHECK(x == 0.1f, "f32 %.9g", (double)x);
    CHECK_ERR(qkv_gguf_get_f32(g, "t.f64", &x), QKV_ERR_FORMAT, "beyond float's range");
    CHECK_ERR(qkv_gguf_get_f32(g, "t.i32", &x), QKV_ERR_FORMAT, "key 't.i32' is I32");
    CHECK_OK(qkv_gguf_get_bool(g, "t.bool", &b));
    CHECK(b == 1, "bool %d", b);
    CHECK_ERR(qkv_gguf_get_bool(g, "t.u8", &b), QKV_ERR_FORMAT, "key 't.u8' is U8, expected BOOL");
    CHECK_OK(qkv_gguf_get_str(g, "t.str", &s, &len));
    CHECK(len == 15 && strcmp(s, "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c\n\\") == 0, "str %zu '%s'", len, s);
    CHECK_OK(qkv_gguf_get_str(g, "general.architecture", &s, NULL));
    CHECK(strcmp(s, "llama") == 0, "architecture '%s'", s);
    CHECK_ERR(qkv_gguf_get_str(g, "t.arr_str", &s, NULL), QKV_ERR_FORMAT, "ARRAY of STRING, expected STRING");
    /* arrays */
    qkv_gguf_vtype et;
    int64_t n;
    CHECK_OK(qkv_gguf_get_array(g, "t.arr_str", &et, &n));
    CHECK(et == QKV_GGUF_STRING && n == 4, "arr_str %d %" PRId64, (int)et, n);
    CHECK_OK(qkv_gguf_array_str(g, "t.arr_str", 1, &s, &len));
    CHECK(len == 0 && s[0] == '\0', "empty string element");
    CHECK_OK(qkv_gguf_array_str(g, "t.arr_str", 2, &s, &len));
    CHECK(len == 2 && strcmp(s, "\xc3\x9f") == 0, "element 2 '%s'", s);
    CHECK_ERR(qkv_gguf_array_str(g, "t.arr_str", 4, &s, &len), QKV_ERR_ARG, "index 4 outside key 't.arr_str' (4 strings)");
    CHECK_ERR(qkv_gguf_array_str(g, "t.arr_i32", 0, &s, &len), QKV_ERR_FORMAT, "ARRAY of I32");
    CHECK_ERR(qkv_gguf_get_array(g, "t.u8", &et, &n), QKV_ERR_FORMAT, "key 't.u8' is U8, expected an ARRAY");
    int32_t iv[3];
    float fv[3];
    CHECK_OK(qkv_gguf_array_i32(g, "t.arr_i32", iv, 3));
    CHECK(iv[0] == 1 && iv[1] == -2 && iv[2] == 3, "arr_i32 %d %d %d", iv[0], iv[1], iv[2]);
    CHECK_OK(qkv_gguf_array_f32(g, "t.arr_i32", fv, 3));
    CHECK(fv[1] == -2.0f, "arr_i32 as f32 %g", (double)fv[1]);
    CHECK_OK(qkv_gguf_array_f32(g, "t.arr_f32", fv, 3));
    CHECK(fv[0] == 0.5f && fv[1] == -1.25f && fv[2] == 3e38f, "arr_f32 %g %g %g", (double)fv[0], (double)fv[1], (double)fv[2]);
    CHECK_ERR(qkv_gguf_array_i32(g, "t.arr_f32", iv, 3), QKV_ERR_FORMAT, "ARRAY of F32, expected an ARRAY of an integer type");
    CHECK_ERR(qkv_gguf_array_f32(g, "t.arr_f32", fv, 2), QKV_ERR_SHAPE, "has 3 elements, n is 2");
    CHECK_ERR(qkv_gguf_array_f32(g, "t.arr_str", fv, 4), QKV_ERR_FORMAT, "ARRAY of STRING");
    CHECK_OK(qkv_gguf_array_i32(g, "t.arr_bool", iv, 2));
    CHECK(iv[0] == 1 && iv[1] == 0, "arr_bool %d %d", iv[0], iv[1]);
    CHECK_OK(qkv_gguf_array_i32(g, "t.arr_u8", iv, 2));
    CHECK(iv[1] == 255, "arr_u8 %d", iv[1]);
    /* index access, types, lengths */
    int64_t k = qkv_gguf_meta_find(g, "t.arr_f32");
    CHECK(k >= 0 && qkv_gguf_meta_type(g, k) == QKV_GGUF_ARRAY &&
          qkv_gguf_meta_elem_type(g, k) == QKV_GGUF_F32 && qkv_gguf_meta_len(g, k) == 3,
          "meta by index");
    k = qkv_gguf_meta_find(g, "t.i16");
    CHECK(k >= 0 && qkv_gguf_meta_elem_type(g, k) == QKV_GGUF_I16 && qkv_gguf_meta_len(g, k) == 1,
          "scalar elem type and length");
    CHECK(qkv_gguf_meta_find(g, "t.i1") == -1 && qkv_gguf_meta_key(g, 99) == NULL &&
          qkv_gguf_meta_len(g, -1) == -1, "absent keys and indices");
    /* tensors: the data where it belongs */
    qkv_qtype type;
    int nd;
    int64_t dims[4];
    const void *data;
    size_t nbytes;
    CHECK_OK(qkv_gguf_tensor_info(g, "a.weight", &type, &nd, dims, &data, &nbytes));
    CHECK(type == QKV_Q_F32 && nd == 2 && dims[0] == 4 && dims[1] == 3 && nbytes == 48,
          "a.weight %d %d (%" PRId64 ",%" PRId64 ") %zu", (int)type, nd, dims[0], dims[1], nbytes);
    float w[12];
    memcpy(w, data, sizeof w);
    int arange = 1;
    for (int i = 0; i < 12; i++) arange &= w[i] == (float)i;
    CHECK(arange, "a.weight's data is not np.arange(12)");
    CHECK((uintptr_t)data % 32 == 0, "tensor data not 32-aligned in the mapping");
    CHECK_OK(qkv_gguf_tensor_info(g, "d.q4_0", &type, &nd, dims, NULL, &nbytes));
    CHECK(type == QKV_Q_Q4_0 && dims[0] == 64 && nbytes == 36, "d.q4_0 %d %" PRId64 " %zu", (int)type, dims[0], nbytes);
    CHECK_ERR(qkv_gguf_tensor_info(g, "e", NULL, NULL, NULL, NULL, NULL), QKV_ERR_NOTFOUND, "no tensor named 'e'");
    CHECK(qkv_gguf_tensor_find(g, "c.idx") == 2 && qkv_gguf_tensor_find(g, "c") == -1 &&
          qkv_gguf_tensor_name(g, 4) == NULL, "tensor lookups");
    qkv_gguf_close(g);
}

/* `qkv inspect` on a GGUF file: version, metadata, tensors; picked by magic. */
static void inspect(const char *argv0, const char *types_path)
{
    char bin[4096], out[128], err[128];
    if (cli_setup(argv0, bin, sizeof bin, (char[]){"/tmp/qkv-ggi-XXXXXX"}, out, sizeof out, err,
                  sizeof err) != 0)
        return;
    const char *renamed = cli_path(tmpdir, "looks.safetensors");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", types_path, renamed);
    CHECK(system(cmd) == 0, "cp");
    cli_result r = cli_run(bin, NULL, out, err, (const char *const[]){"inspect", renamed, NULL}, 30);
    CHECK(r.status == 0, "inspect exit %d: %s", r.status, r.err);
    const char *want[] = {"GGUF version 3", "18 keys", "4 tensors", "alignment 32",
                          "t.u64", "18446744073709551615", "t.f64", "1.0000000000000001e+300",
                          "t.arr_str", "ARRAY of STRING, 4: \"a\", \"\", \"\xc3\x9f\", \"x y\"",
                          "d.q4_0", "Q4_0", "[64, 1]", "896", "t.str", "\"h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c\\n\\\\\"", "ARRAY of F32, 3: 0.5, -1.25, 3.00000001e+38"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        CHECK(strstr(r.out, want[i]) != NULL, "inspect output lacks '%s':\n%s", want[i], r.out);
    free(r.out);
    free(r.err);
    /* a truncated copy: the reader's message, exit 1 */
    snprintf(cmd, sizeof cmd, "head -c 200 '%s' > '%s'", types_path, renamed);
    CHECK(system(cmd) == 0, "head");
    r = cli_run(bin, NULL, out, err, (const char *const[]){"inspect", renamed, NULL}, 30);
    CHECK(r.status == 1 && strstr(r.err, "truncated") != NULL, "truncated: exit %d: %s", r.status, r.err);
    free(r.out);
    free(r.err);
}

int main(int argc, char **argv)
{
    (void)argc;
    CHECK(mkdtemp(tmpdir) != NULL, "mkdtemp");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s -c 'import gguf' 2>/dev/null", PY);
    int have_py = system(cmd) == 0;
    CHECK(have_py, "gguf-py is missing: run tools/get_data.sh oracle");
    if (have_py) {
        snprintf(cmd, sizeof cmd, "%s tools/gguf_oracle.py write '%s'", PY, tmpdir);
        CHECK(system(cmd) == 0, "tools/gguf_oracle.py write failed");
        const char *types = cli_path(tmpdir, "types.gguf");
        against_gguf_py(types, "oracle");
        against_gguf_py(cli_path(tmpdir, "align64.gguf"), "oracle");
        against_gguf_py(cli_path(tmpdir, "empty.gguf"), "oracle");
        getters(types);
        qkv_gguf *g = NULL;
        CHECK_ERR(qkv_gguf_open(cli_path(tmpdir, "misaligned.gguf"), &g), QKV_ERR_FORMAT,
                  "tensor 'y': data offset 96 is not a multiple of the alignment 64");
        CHECK(g == NULL, "a refused open leaves *out NULL");
        inspect(argv[0], types);
        against_gguf_py("data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2");
        against_gguf_py("data/gemma3/gemma-3-270m-q4_k_m.gguf", "gemma3");
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    printf("test_gguf: %d passed, %d failed\n", h_pass, h_fail);
    return h_fail != 0;
}
