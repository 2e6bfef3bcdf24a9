/* libFuzzer target for GPT-2's tokenizer files (qkv_tokenizer_gpt2_load:
 * DIR/encoder.json and DIR/vocab.bpe). The input is both files, split at
 * its first NUL byte (encoder.json before, vocab.bpe after; no NUL: an
 * empty vocab.bpe). Any bytes either load or fail with a message, never a
 * crash, leak or out-of-bounds access; a loaded tokenizer round-trips the
 * input as text (byte-level BPE: decode(encode(x)) == x). */
#include "fuzz_file.h"

#include "qkv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t a = nul ? (size_t)(nul - data) : size;
    fuzz_file_write("encoder.json", data, a);
    fuzz_file_write("vocab.bpe", data + a + (nul != NULL), size - a - (nul != NULL));
    qkv_tokenizer *t = NULL;
    if (qkv_tokenizer_gpt2_load(fuzz_dir_get(), &t) != QKV_OK) {
        if (t || qkv_last_error()[0] == '\0') abort();
        return 0;
    }
    int64_t *ids = NULL, n = 0;
    char *text = NULL;
    size_t len = 0;
    if (qkv_tokenizer_encode(t, (const char *)data, size, &ids, &n) != QKV_OK) abort();
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= qkv_tokenizer_vocab_size(t)) abort();
    if (qkv_tokenizer_decode(t, ids, n, &text, &len) != QKV_OK || len != size || memcmp(text, data, size))
        abort();
    free(ids), free(text);
    qkv_tokenizer_free(t);
    return 0;
}
