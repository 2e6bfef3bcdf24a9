/* tokenizer_spm.c: the merges of GGUF "llama" vocabularies (SentencePiece's
 * BPE) as llama.cpp's llm_tokenizer_spm_session does them: the text's UTF-8
 * characters to start with, then again and again the adjacent pair whose
 * join is a token of the highest score (ties: the leftmost); a piece left
 * that is no token goes out as its bytes (<0xXX>). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "core/internal.h"
#include "data/tokenizer_internal.h"

typedef struct {
    size_t start, n;     /* its bytes in the text; n = 0 once merged away */
    int64_t prev, next; /* neighbours in the chain, -1 at the ends */
} sym;

typedef struct {
    float score;
    int64_t left, right;
    size_t size; /* the join's bytes when pushed: stale if the pair changed since */
} bigram;

typedef struct {
    bigram *v;
    size_t n, cap;
} heap;

/* a comes out before b: the higher score, then the leftmost. */
static int before(const bigram *a, const bigram *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static int heap_push(heap *h, bigram b)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        bigram *v = realloc(h->v, cap * sizeof *v);
        if (!v) return 0;
        h->v = v, h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && before(&b, &h->v[(i - 1) / 2])) h->v[i] = h->v[(i - 1) / 2], i = (i - 1) / 2;
    h->v[i] = b;
    return 1;
}

static bigram heap_pop(heap *h)
{
    bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && before(&h->v[c + 1], &h->v[c])) c++;
        if (!before(&h->v[c], &last)) break;
        h->v[i] = h->v[c], i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

static int64_t lookup(const qkv_tokenizer *t, const unsigned char *s, size_t n)
{
    return *tok_strmap_slot(&t->rmap, t->raw, t->raw_off, s, n);
}

/* Pushes the pair (l, r) if their join is a token. */
static int try_pair(const qkv_tokenizer *t, const unsigned char *text, const sym *y, int64_t l, int64_t r, heap *h)
{
    if (l < 0 || r < 0) return 1;
    size_t size = y[l].n + y[r].n;
    int64_t id = lookup(t, text + y[l].start, size);
    if (id < 0) return 1;
    return heap_push(h, (bigram){t->scores ? t->scores[id] : 0.0f, l, r, size});
}

qkv_status tok_spm_encode(const qkv_tokenizer *t, const unsigned char *text, size_t len, tok_ids *ids)
{
    static const char fn[] = "tokenizer_encode";
    if (!len) return QKV_OK;
    sym *y = malloc(len * sizeof *y);
    heap h = {0};
    qkv_status st = QKV_OK;
    if (!y) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for %zu symbols", fn, len);
    /* the characters: a lead byte's length (llama.cpp's unicode_len_utf8),
     * cut at the end */
    int64_t ns = 0;
    for (size_t off = 0; off < len; ns++) {
        unsigned c = text[off];
        size_t l = c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        if (l > len - off) l = len - off;
        y[ns] = (sym){off, l, ns - 1, off + l == len ? -1 : ns + 1};
        off += l;
    }
    int ok = 1;
    for (int64_t i = 1; i < ns && ok; i++) ok = try_pair(t, text, y, i - 1, i, &h);
    while (h.n && ok) {
        bigram b = heap_pop(&h);
        sym *L = &y[b.left], *R = &y[b.right];
        if (L->n == 0 || R->n == 0 || L->n + R->n != b.size) continue;
        L->n += R->n, R->n = 0;
        L->next = R->next;
        if (R->next >= 0) y[R->next].prev = b.left;
        ok = try_pair(t, text, y, L->prev, b.left, &h) && try_pair(t, text, y, b.left, L->next, &h);
    }
    if (!ok) st = qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for the pairs of %zu bytes", fn, len);
    for (int64_t i = 0; i != -1 && st == QKV_OK; i = y[i].next) {
        int64_t id = lookup(t, text + y[i].start, y[i].n);
        if (id >= 0) {
            st = tok_ids_push(ids, id, fn);
            continue;
        }
        for (size_t j = 0; j < y[i].n && st == QKV_OK; j++) { /* byte fallback */
            unsigned char b = text[y[i].start + j];
            if (t->byte_id[b] < 0)
                st = qkv_fail(QKV_ERR_FORMAT, "%s: byte 0x%02X has no token (<0x%02X>) to fall back to", fn, b, b);
            else
                st = tok_ids_push(ids, t->byte_id[b], fn);
        }
    }
    free(y), free(h.v);
    return st;
}
