/* libFuzzer target for the GGUF reader (qkv_gguf_open_memory, the same
 * parse as qkv_gguf_open over a mapping): any bytes must give either an
 * open file whose every key, value, array element and tensor can be read
 * back, each tensor's data inside the input, or an error with a message
 * and *out NULL; never a crash, leak or out-of-bounds access.
 *
 * Build and run (from the repo root; `make fuzz` does the build):
 *   make fuzz && tests/fuzz/run.sh 600 fuzz_gguf
 * The seeds in tests/fuzz/corpus/fuzz_gguf/ are small valid files written
 * by gguf-py's GGUFWriter (data/venv/bin/python tools/gguf_oracle.py write
 * DIR) and by tests/test_gguf_bad.c's layout; a dictionary is not needed,
 * the format has no text tokens besides its magic "GGUF".
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qkv.h"

/* Every accessor on every key of an accepted file. */
static void read_keys(const qkv_gguf *g)
{
    for (int64_t i = 0; i < qkv_gguf_meta_count(g); i++) {
        const char *key = qkv_gguf_meta_key(g, i);
        if (!key || qkv_gguf_meta_find(g, key) != i) abort();
        qkv_gguf_vtype t = qkv_gguf_meta_type(g, i), et = qkv_gguf_meta_elem_type(g, i);
        int64_t n = qkv_gguf_meta_len(g, i), v;
        uint64_t u;
        double d;
        float f;
        int b;
        const char *s;
        size_t len;
        /* The scalar getters: each either works or refuses with a message. */
        if (qkv_gguf_get_i64(g, key, &v) && !qkv_last_error()[0]) abort();
        if (qkv_gguf_get_u64(g, key, &u) && !qkv_last_error()[0]) abort();
        if (qkv_gguf_get_f64(g, key, &d) && !qkv_last_error()[0]) abort();
        if (qkv_gguf_get_f32(g, key, &f) && !qkv_last_error()[0]) abort();
        if (qkv_gguf_get_bool(g, key, &b) && !qkv_last_error()[0]) abort();
        if (t == QKV_GGUF_STRING && (qkv_gguf_get_str(g, key, &s, &len) || strlen(s) > len)) abort();
        if (t != QKV_GGUF_ARRAY) continue;
        if (n > (1 << 20)) continue; /* keep each run fast */
        if (et == QKV_GGUF_STRING) {
            for (int64_t j = 0; j < n; j++)
                if (qkv_gguf_array_str(g, key, j, &s, &len) || strlen(s) > len) abort();
        } else if (et != QKV_GGUF_ARRAY && n > 0) {
            float *fv = malloc((size_t)n * sizeof *fv);
            int32_t *iv = malloc((size_t)n * sizeof *iv);
            if (fv && qkv_gguf_array_f32(g, key, fv, n) && !qkv_last_error()[0]) abort();
            if (iv && qkv_gguf_array_i32(g, key, iv, n) && !qkv_last_error()[0]) abort();
            free(fv);
            free(iv);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    qkv_gguf *g = (qkv_gguf *)1;
    if (qkv_gguf_open_memory(data, size, "fuzz", &g) != QKV_OK) {
        /* A refusal must say why and hand nothing out. */
        if (g != NULL || qkv_last_error()[0] == '\0') abort();
        return 0;
    }
    read_keys(g);
    for (int64_t i = 0; i < qkv_gguf_tensor_count(g); i++) {
        const char *name = qkv_gguf_tensor_name(g, i);
        qkv_qtype t;
        int nd;
        int64_t dims[4];
        const void *p;
        size_t nbytes;
        if (!name || qkv_gguf_tensor_find(g, name) != i ||
            qkv_gguf_tensor_info(g, name, &t, &nd, dims, &p, &nbytes) != QKV_OK)
            abort();
        if (!qkv_qtype_known((int)t) || nd < 1 || nd > 4) abort();
        const uint8_t *b = p;
        if (b < data || b + nbytes > data + size) abort();
        if (nbytes) {
            volatile uint8_t sink = b[0] ^ b[nbytes - 1]; /* ASan checks both ends */
            (void)sink;
        }
    }
    qkv_gguf_close(g);
    return 0;
}
