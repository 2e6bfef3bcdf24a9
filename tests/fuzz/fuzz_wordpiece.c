/* libFuzzer target for BERT's WordPiece vocabulary reader
 * (qkv_tokenizer_wordpiece_load, and qkv_tokenizer_wordpiece_open_dir's
 * tokenizer_config.json) and the tokenizer it makes. Byte 0 picks the
 * options (bit 0 lowercase, bits 1-2 strip_accents -1/0/1, bit 3 CJK split,
 * bit 4 clean-up, bit 5 max_chars_per_word 3 instead of 100, bit 7 a
 * folder); the rest is vocab.txt (with bit 7: tokenizer_config.json before
 * the first NUL byte, vocab.txt after it). Any bytes either load or fail
 * with a message, never a crash, leak or out-of-bounds access; a loaded
 * tokenizer then encodes the same bytes as text: ids in range, the BERT
 * form [CLS] ... [SEP] within its limit, and decode succeeds. */
#include "fuzz_file.h"

#include "qkv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    uint8_t m = data[0];
    data++, size--;
    qkv_tokenizer *t = NULL;
    qkv_status s;
    if (m & 0x80) {
        const uint8_t *nul = memchr(data, 0, size);
        size_t a = nul ? (size_t)(nul - data) : 0;
        fuzz_file_write("tokenizer_config.json", data, a);
        fuzz_file_write("vocab.txt", data + a + (nul != NULL), size - a - (nul != NULL));
        s = qkv_tokenizer_wordpiece_open_dir(fuzz_dir_get(), &t);
    } else {
        qkv_wordpiece_opts o;
        qkv_wordpiece_opts_default(&o);
        o.lowercase = m & 1;
        o.strip_accents = (m >> 1 & 3) == 3 ? -1 : m >> 1 & 1;
        o.split_cjk = m >> 3 & 1;
        o.clean_text = m >> 4 & 1;
        if (m & 0x20) o.max_chars_per_word = 3;
        s = qkv_tokenizer_wordpiece_load(fuzz_file_write("vocab.txt", data, size), &o, &t);
    }
    if (s != QKV_OK) {
        if (t || qkv_last_error()[0] == '\0') abort();
        return 0;
    }
    int64_t V = qkv_tokenizer_vocab_size(t), *ids = NULL, n = 0, nf = 0, cls = -1, sep = -1;
    if (qkv_tokenizer_special(t, "[CLS]", &cls) != QKV_OK || qkv_tokenizer_special(t, "[SEP]", &sep) != QKV_OK) abort();
    if (qkv_tokenizer_encode(t, (const char *)data, size, &ids, &n) != QKV_OK) abort();
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V) abort();
    char *text = NULL;
    size_t len = 0;
    if (qkv_tokenizer_decode(t, ids, n, &text, &len) != QKV_OK || strlen(text) > len) abort();
    free(ids), free(text);
    int64_t lim = 2 + m % 7;
    if (qkv_tokenizer_encode_bert(t, (const char *)data, size, lim, &ids, &n, &nf) != QKV_OK) abort();
    if (n < 2 || n > lim || ids[0] != cls || ids[n - 1] != sep || nf < n) abort();
    free(ids);
    qkv_tokenizer_free(t);
    return 0;
}
