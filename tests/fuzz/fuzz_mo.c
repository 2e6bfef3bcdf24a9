/* libFuzzer target for the .mo reader (src/data/mo.c): any bytes must give
 * either a catalogue whose every pair can be read back as NUL-terminated
 * valid UTF-8, or an error with a message, never a crash, leak or
 * out-of-bounds access.
 *
 * Build and run (from the repo root): make fuzz && tests/fuzz/run.sh 600 fuzz_mo
 * (run.sh reads the seeds in tests/fuzz/corpus/fuzz_mo/ and keeps what the
 * fuzzer adds in a scratch folder). The seeds are msgfmt's output in both
 * byte orders (plurals, a context, a Latin-1 header) and a
 * revision 0.1 file; regenerate them with tests/fuzz/corpus/fuzz_mo/make.sh.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qkv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    qkv_mo *mo = NULL;
    if (qkv_mo_parse(data, size, "fuzz", &mo) != QKV_OK) {
        /* A rejection must say why, and name the file. */
        if (mo != NULL || strstr(qkv_last_error(), "fuzz") == NULL) abort();
        return 0;
    }
    int64_t n = qkv_mo_count(mo);
    if (n < 0 || (uint64_t)n > size) abort();
    for (int64_t i = 0; i < n; i++) {
        const char *id, *str;
        if (qkv_mo_get(mo, i, &id, &str) != QKV_OK) abort();
        /* converted text can grow (Latin-1 to UTF-8: 2x; others up to 4x) */
        if (strlen(id) > 4 * size || strlen(str) > 4 * size) abort();
        if (!*id) abort(); /* the header entry is never a pair */
    }
    const char *id, *str;
    if (qkv_mo_get(mo, n, &id, &str) == QKV_OK) abort();
    if (!qkv_mo_charset(mo)) abort();
    qkv_mo_free(mo);
    return 0;
}
