/* test_inspect.c: `qkv inspect` on a file written by qkv_safetensors_save
 * (every tensor's line, the totals, the metadata with escapes), on
 * malformed and missing files (the reader's message, exit 1), without an
 * argument (usage, exit 2); and tools/state_dict_io.py --selftest, which
 * round-trips an nn.Transformer's state_dict through safetensors and runs
 * this qkv binary's inspect on it. Run from the repo root; the qkv binary is
 * found beside the test's directory (build/tests/../qkv). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, WEXITSTATUS */
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"

static char qkv_bin[512], tmpdir[64];

/* Runs qkv with args, its stdout and stderr into files; returns the exit
 * status (-1 if it did not exit normally) and the outputs (malloc'd). */
static int run_qkv(const char *args, char **out, char **err)
{
    char cmd[2048], po[128], pe[128];
    snprintf(po, sizeof po, "%s/out.txt", tmpdir);
    snprintf(pe, sizeof pe, "%s/err.txt", tmpdir);
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s' 2>'%s'", qkv_bin, args, po, pe);
    int rc = system(cmd);
    const char *paths[2] = {po, pe};
    char **dst[2] = {out, err};
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(paths[i], "rb");
        char *buf = calloc(1, 1 << 16);
        if (f && buf) {
            size_t n = fread(buf, 1, (1 << 16) - 1, f);
            buf[n] = '\0';
        }
        if (f) fclose(f);
        *dst[i] = buf;
    }
    return rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Whether text has a line matching the words of want, in order, separated
 * by any run of spaces. */
static int has_row(const char *text, const char *const *words, int n)
{
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n'), *p = line;
        if (!end) end = line + strlen(line);
        int i = 0;
        for (; i < n; i++) {
            while (p < end && *p == ' ') p++;
            size_t w = strlen(words[i]);
            if ((size_t)(end - p) < w || strncmp(p, words[i], w) || (p + w < end && p[w] != ' ')) break;
            p += w;
        }
        if (i == n) return 1;
        line = *end ? end + 1 : NULL;
    }
    return 0;
}

#define ROW(text, ...) has_row((text), (const char *const[]){__VA_ARGS__}, \
                               (int)(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *)))

static void test_listing(void)
{
    qkv_arena *a;
    CHECK_OK(qkv_arena_new(&a, 0));
    qkv_tensor *w, *mask, *scalar, *empty;
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 2, (int64_t[]){3, 4}, &w));
    CHECK_OK(qkv_tensor_new(a, QKV_BOOL, 2, (int64_t[]){2, 2}, &mask));
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 0, NULL, &scalar));
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 1, (int64_t[]){0}, &empty));
    const char *names[4] = {"encoder.layers.0.linear1.weight", "mask", "scalar", "empty"};
    const qkv_tensor *ts[4] = {w, mask, scalar, empty};
    const char *keys[2] = {"format", "note"}, *vals[2] = {"pt", "two\nlines"};
    char path[128], args[256];
    snprintf(path, sizeof path, "%s/model.safetensors", tmpdir);
    CHECK_OK(qkv_safetensors_save(path, 4, names, ts, 2, keys, vals));
    char *out, *err;
    snprintf(args, sizeof args, "inspect '%s'", path);
    int rc = run_qkv(args, &out, &err);
    CHECK(rc == 0, "inspect exit %d, stderr: %s", rc, err);
    CHECK(strstr(out, "model.safetensors: 4 tensors") != NULL, "heading:\n%s", out);
    CHECK(ROW(out, "name", "dtype", "shape", "elements", "bytes"), "column heads:\n%s", out);
    CHECK(ROW(out, "encoder.layers.0.linear1.weight", "F32", "(3,4)", "12", "48"), "weight row:\n%s", out);
    CHECK(ROW(out, "mask", "BOOL", "(2,2)", "4", "4"), "mask row:\n%s", out);
    CHECK(ROW(out, "scalar", "F32", "()", "1", "4"), "scalar row:\n%s", out);
    CHECK(ROW(out, "empty", "F32", "(0,)", "0", "0"), "empty row:\n%s", out);
    CHECK(strstr(out, "total: 4 tensors, 17 parameters (elements), 56 bytes (56 B)") != NULL, "totals:\n%s", out);
    CHECK(strstr(out, "__metadata__:\n  format = pt\n  note = two\\nlines\n") != NULL, "metadata:\n%s", out);
    CHECK(err && err[0] == '\0', "nothing on stderr: %s", err);
    /* a file with no tensors and no metadata */
    snprintf(path, sizeof path, "%s/empty.safetensors", tmpdir);
    CHECK_OK(qkv_safetensors_save(path, 0, NULL, NULL, 0, NULL, NULL));
    free(out);
    free(err);
    snprintf(args, sizeof args, "inspect '%s'", path);
    rc = run_qkv(args, &out, &err);
    CHECK(rc == 0 && strstr(out, "0 tensors") && strstr(out, "total: 0 tensors, 0 parameters (elements), 0 bytes") &&
              strstr(out, "__metadata__: (none)"),
          "empty file: exit %d:\n%s%s", rc, out, err);
    free(out);
    free(err);
    qkv_arena_free(a);
}

/* Writes n bytes of data to tmpdir/name; returns the path. */
static const char *write_file(const char *name, const void *data, size_t n, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, n, f);
        fclose(f);
    }
    return path;
}

static void test_errors(void)
{
    char path[128], args[256], *out, *err;
    /* header length past the end of the file */
    static const unsigned char trunc[12] = {0x00, 0x10, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' '};
    snprintf(args, sizeof args, "inspect '%s'", write_file("trunc.safetensors", trunc, sizeof trunc, path, sizeof path));
    int rc = run_qkv(args, &out, &err);
    CHECK(rc == 1, "truncated file: exit %d", rc);
    CHECK(strstr(err, "qkv: inspect: safetensors_open: ") && strstr(err, "trunc.safetensors") &&
              strstr(err, "runs past the end of the file"),
          "truncated file: stderr %s", err);
    CHECK(out[0] == '\0', "truncated file: nothing on stdout: %s", out);
    free(out);
    free(err);
    /* invalid JSON */
    const char bad[] = "\x10\0\0\0\0\0\0\0{\"a\":{\"dtype\":}} ";
    snprintf(args, sizeof args, "inspect '%s'", write_file("json.safetensors", bad, sizeof bad - 1, path, sizeof path));
    rc = run_qkv(args, &out, &err);
    CHECK(rc == 1 && strstr(err, "invalid JSON header"), "bad JSON: exit %d, stderr %s", rc, err);
    free(out);
    free(err);
    /* a valid empty tensor whose other dims are huge: its element count
     * is 0 (the product used to overflow: UBSan saw it in build-san) */
    const char hdr[] = "{\"big\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776,0],"
                       "\"data_offsets\":[0,0]},\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    unsigned char file[256] = {0};
    size_t hl = sizeof hdr - 1;
    for (int b = 0; b < 8; b++) file[b] = (unsigned char)((uint64_t)hl >> (8 * b));
    memcpy(file + 8, hdr, hl);
    snprintf(args, sizeof args, "inspect '%s'", write_file("huge0.safetensors", file, 8 + hl + 8, path, sizeof path));
    rc = run_qkv(args, &out, &err);
    CHECK(rc == 0 && ROW(out, "big", "F32", "(1099511627776,1099511627776,0)", "0", "0"),
          "shape [2^40,2^40,0]: exit %d, stdout %s, stderr %s", rc, out, err);
    free(out);
    free(err);
    /* missing file */
    snprintf(args, sizeof args, "inspect '%s/nonexistent.safetensors'", tmpdir);
    rc = run_qkv(args, &out, &err);
    CHECK(rc == 1 && strstr(err, "cannot open"), "missing file: exit %d, stderr %s", rc, err);
    free(out);
    free(err);
    /* no argument, too many */
    rc = run_qkv("inspect", &out, &err);
    CHECK(rc == 2 && strstr(err, "usage: qkv inspect FILE.safetensors"), "no argument: exit %d, stderr %s", rc, err);
    free(out);
    free(err);
    rc = run_qkv("inspect a b", &out, &err);
    CHECK(rc == 2 && strstr(err, "usage: qkv inspect"), "two arguments: exit %d, stderr %s", rc, err);
    free(out);
    free(err);
}

static void test_state_dict_tool(void)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/state_dict_io.py --selftest --qkv '%s'", qkv_bin);
    int rc = system(cmd);
    CHECK(rc == 0, "%s failed (exit %d; run the test from the repo root)", cmd, rc);
}

int main(int argc, char **argv)
{
    (void)argc;
    const char *slash = strrchr(argv[0], '/');
    int dir_len = slash ? (int)(slash - argv[0]) : 1;
    snprintf(qkv_bin, sizeof qkv_bin, "%.*s/../qkv", dir_len, slash ? argv[0] : ".");
    snprintf(tmpdir, sizeof tmpdir, "/tmp/qkv_inspect_XXXXXX");
    if (access(qkv_bin, X_OK) != 0 || !mkdtemp(tmpdir)) {
        CHECK(0, "no qkv binary at %s (build it first) or no temporary directory", qkv_bin);
        return h_finish("test_inspect");
    }
    test_listing();
    test_errors();
    test_state_dict_tool();
    h_tmpdir_remove(tmpdir);
    return h_finish("test_inspect");
}
