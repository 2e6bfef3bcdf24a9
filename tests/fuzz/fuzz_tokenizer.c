/* libFuzzer target for qkv's tokenizer files (qkv_tokenizer_load: the
 * `qkv-bpe 1` and `qkv-chars 1` formats of docs/tokenizers.md): any bytes
 * either load or fail with a message, never a crash, leak or out-of-bounds
 * access. A loaded tokenizer encodes the input itself as text; for bpe,
 * decoding gives it back byte for byte (the round trip docs/tokenizers.md
 * promises). */
#include "fuzz_file.h"

#include "qkv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file_write("tok.txt", data, size);
    qkv_tokenizer *t = NULL;
    if (qkv_tokenizer_load(path, &t) != QKV_OK) {
        if (t || qkv_last_error()[0] == '\0') abort();
        return 0;
    }
    int64_t *ids = NULL, n = 0;
    char *text = NULL;
    size_t len = 0;
    qkv_status s = qkv_tokenizer_encode(t, (const char *)data, size, &ids, &n);
    if (s == QKV_OK) {
        for (int64_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= qkv_tokenizer_vocab_size(t)) abort();
        if (qkv_tokenizer_decode(t, ids, n, &text, &len) != QKV_OK) abort();
        if (qkv_tokenizer_kind_of(t) == QKV_TOKENIZER_BPE && (len != size || memcmp(text, data, size)))
            abort();
    } else if (qkv_tokenizer_kind_of(t) == QKV_TOKENIZER_BPE) {
        abort(); /* byte-level: every byte string encodes */
    }
    free(ids), free(text);
    /* Every id decodes. */
    int64_t V = qkv_tokenizer_vocab_size(t), all[64];
    for (int64_t i = 0; i < V; i += 64) {
        int64_t k = V - i < 64 ? V - i : 64;
        for (int64_t j = 0; j < k; j++) all[j] = i + j;
        if (qkv_tokenizer_decode(t, all, k, &text, &len) != QKV_OK) abort();
        free(text);
    }
    qkv_tokenizer_free(t);
    return 0;
}
