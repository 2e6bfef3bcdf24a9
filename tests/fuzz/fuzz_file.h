/* fuzz_file.h: for fuzz targets whose reader takes a path. The input goes
 * into a file of a private folder (made once per process under TMPDIR or
 * /tmp, removed at exit); the reader then opens it as a user's file. */
#ifndef QKV_FUZZ_FILE_H
#define QKV_FUZZ_FILE_H
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_dir[256];

static void fuzz_dir_remove(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir);
    if (fuzz_dir[0] && system(cmd) != 0) fprintf(stderr, "fuzz: could not remove %s\n", fuzz_dir);
}

/* The path of the private folder (made on the first call). */
static const char *fuzz_dir_get(void)
{
    if (!fuzz_dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(fuzz_dir, sizeof fuzz_dir, "%s/qkv-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(fuzz_dir)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(fuzz_dir_remove);
    }
    return fuzz_dir;
}

/* Writes data[0, size) to DIR/name; returns the path (a static buffer). */
static const char *fuzz_file_write(const char *name, const uint8_t *data, size_t size)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir_get(), name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror("fuzz: writing the input");
        abort();
    }
    return path;
}
#endif
