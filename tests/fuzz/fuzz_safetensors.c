/* libFuzzer target for the safetensors reader: any bytes must give either a
 * valid table, whose every tensor can be read back, or an error with a
 * message, never a crash, leak or out-of-bounds access.
 *
 * Build and run (from the repo root; `make fuzz` does the build):
 *   clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
 *       tests/fuzz/fuzz_safetensors.c src/io/json.c src/io/safetensors*.c \
 *       src/core/error.c src/core/tensor.c src/core/arena.c -o build/fuzz/fuzz_safetensors
 *   mkdir -p /tmp/st_corpus    # seeds help: any small .safetensors files, e.g.
 *   /usr/bin/python3 tools/safetensors_io.py --selftest-write /tmp/st_corpus/py.st
 *   build/fuzz/fuzz_safetensors -max_total_time=60 -max_len=4096 /tmp/st_corpus
 * A dictionary of the header's tokens ("dtype", "shape", "data_offsets",
 * "__metadata__", "F16", "\ud800", ...) passed with -dict=FILE finds the
 * deeper checks sooner.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qkv.h"
#include "io/safetensors_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    qkv_safetensors *st = NULL;
    if (qkv_safetensors_parse(data, size, "fuzz", &st) != QKV_OK) {
        /* A rejection must say why. */
        if (st != NULL || qkv_last_error()[0] == '\0') abort();
        return 0;
    }
    /* Accepted: every accessor must work on every tensor. */
    qkv_arena *arena = NULL;
    qkv_arena_new(&arena, 1 << 16);
    for (int i = 0; i < qkv_safetensors_count(st); i++) {
        const char *name = qkv_safetensors_name(st, i);
        qkv_st_dtype dt;
        int ndim;
        int64_t shape[8];
        const void *p;
        size_t nbytes;
        if (!name || qkv_safetensors_info(st, name, &dt, &ndim, shape, &p, &nbytes) != QKV_OK)
            abort();
        /* The element count; a zero dim first, as the others may then be
         * huge. Otherwise it is bounded by nbytes, so it cannot overflow. */
        int64_t n = 1;
        for (int d = 0; d < ndim; d++)
            if (shape[d] == 0) n = 0;
        for (int d = 0; d < ndim && n; d++) n *= shape[d];
        if (n > 1 << 20) continue; /* keep each run fast */
        /* The typed read for its dtype must work, and load_tensor too
         * when the rank fits a qkv tensor. */
        int64_t *dst = malloc((size_t)(n ? n : 1) * sizeof *dst);
        qkv_status s = QKV_OK;
        if (dst && (dt == QKV_ST_F32 || dt == QKV_ST_F16 || dt == QKV_ST_BF16 || dt == QKV_ST_F64))
            s = qkv_safetensors_read_f32(st, name, (float *)dst, n);
        else if (dst && dt == QKV_ST_BOOL)
            s = qkv_safetensors_read_bool(st, name, (uint8_t *)dst, n);
        else if (dst)
            s = qkv_safetensors_read_i64(st, name, dst, n);
        free(dst);
        if (s != QKV_OK) abort();
        qkv_tensor *t = NULL;
        if (ndim <= QKV_MAX_DIMS && arena &&
            qkv_safetensors_load_tensor(st, name, arena, &t) != QKV_OK)
            abort();
    }
    qkv_arena_free(arena);
    qkv_safetensors_meta(st, "format");
    qkv_safetensors_close(st);
    return 0;
}
