/* libFuzzer target for the idx reader (plain and gzip'd): any bytes must
 * give either a table whose every element can be read, or an error with a
 * message naming the input, never a crash, leak, hang or out-of-bounds
 * access.
 *
 * Build and run (from the repo root): make fuzz && tests/fuzz/run.sh 600 fuzz_idx
 * (run.sh gives the fuzzer a scratch folder for what it adds, to keep it
 * out of the tree). The seeds: tiny idx files of each type code, plain and
 * gzip'd, a two-member gzip, and broken ones (truncated, bad CRC, a header
 * that claims more than the file holds). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qkv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    qkv_idx *x = NULL;
    if (qkv_idx_parse(data, size, "fuzz", &x) != QKV_OK) {
        /* A rejection must say why, and name the input. */
        if (x != NULL || strstr(qkv_last_error(), "fuzz") == NULL) abort();
        return 0;
    }
    /* Accepted: the sizes must multiply to the element count, and every
     * element must read (the conversions touch each byte of the data). */
    int64_t n = 1;
    for (int d = 0; d < qkv_idx_ndim(x); d++) {
        if (qkv_idx_dim(x, d) < 0) abort();
        if (qkv_idx_dim(x, d) == 0) n = 0;
    }
    for (int d = 0; d < qkv_idx_ndim(x) && n; d++) n *= qkv_idx_dim(x, d);
    if (n != qkv_idx_numel(x) || qkv_idx_ndim(x) < 1) abort();
    float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
    int64_t *i = malloc((size_t)(n ? n : 1) * sizeof *i);
    if (f && qkv_idx_read_f32(x, f, n) != QKV_OK) abort();
    qkv_idx_type t = qkv_idx_type_of(x);
    int is_int = t != QKV_IDX_F32 && t != QKV_IDX_F64;
    if (i && (qkv_idx_read_i64(x, i, n) == QKV_OK) != is_int) abort();
    free(f);
    free(i);
    qkv_idx_free(x);
    return 0;
}
