/* arena.c: a bump allocator over a list of large chunks.
 * Activations of a step come from one arena that is reset (not freed) at the
 * next step, so a training loop allocates nothing once it is warm. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/internal.h"

typedef struct chunk {
    struct chunk *next;
    size_t size, used;
    unsigned char *mem; /* 64-byte aligned */
} chunk;

struct qkv_arena {
    chunk *head, *cur;
    size_t chunk_bytes;
    size_t used, peak; /* bytes handed out since reset, and the most ever */
};

qkv_status qkv_arena_new(qkv_arena **out, size_t chunk_bytes)
{
    QKV_NEED(out, "arena_new", "out");
    *out = NULL;
    qkv_arena *a = calloc(1, sizeof *a);
    if (!a) return qkv_fail(QKV_ERR_NOMEM, "arena_new: out of memory");
    a->chunk_bytes = chunk_bytes ? chunk_bytes : ((size_t)4 << 20);
    *out = a;
    return QKV_OK;
}

void qkv_arena_free(qkv_arena *a)
{
    if (!a) return;
    for (chunk *c = a->head, *n; c; c = n) {
        n = c->next;
        free(c->mem);
        free(c);
    }
    free(a);
}

void qkv_arena_reset(qkv_arena *a)
{
    if (!a) return;
    for (chunk *c = a->head; c; c = c->next) c->used = 0;
    a->cur = a->head;
    a->used = 0;
}

static chunk *chunk_new(size_t size)
{
    chunk *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->mem = aligned_alloc(64, size);
    if (!c->mem) {
        free(c);
        return NULL;
    }
    c->size = size;
    return c;
}

void *qkv_arena_alloc_uninit(qkv_arena *a, size_t bytes)
{
    if (!a) {
        qkv_fail(QKV_ERR_ARG, "arena_alloc: arena is NULL");
        return NULL;
    }
    size_t need = (bytes + 63) & ~(size_t)63;
    if (need < bytes) {
        qkv_fail(QKV_ERR_NOMEM, "arena_alloc: %zu bytes overflows", bytes);
        return NULL;
    }
    if (need == 0) need = 64;
    /* Walk forward through the chunks kept from earlier steps. */
    while (a->cur && a->cur->size - a->cur->used < need) {
        if (!a->cur->next) break;
        a->cur = a->cur->next;
    }
    if (!a->cur || a->cur->size - a->cur->used < need) {
        size_t size = need > a->chunk_bytes ? need : a->chunk_bytes;
        chunk *c = chunk_new(size);
        if (!c) {
            qkv_fail(QKV_ERR_NOMEM, "arena_alloc: cannot allocate %zu bytes", size);
            return NULL;
        }
        /* Insert after cur so later chunks stay reachable for reuse. */
        if (!a->head) {
            a->head = c;
        } else if (a->cur) {
            c->next = a->cur->next;
            a->cur->next = c;
        }
        a->cur = c;
    }
    void *p = a->cur->mem + a->cur->used;
    a->cur->used += need;
    a->used += need;
    if (a->used > a->peak) a->peak = a->used;
#ifdef QKV_POISON
    for (size_t i = 0; i < need / sizeof(float); i++) ((float *)p)[i] = NAN;
#endif
    return p;
}

void *qkv_arena_alloc(qkv_arena *a, size_t bytes)
{
    void *p = qkv_arena_alloc_uninit(a, bytes);
    if (!p) return NULL;
    size_t need = bytes ? (bytes + 63) & ~(size_t)63 : 64;
    /* Zeroed, as callers expect; blocks of 4 MB or more on OpenMP's
     * threads. Smaller ones are cheaper on one: one thread clears 1 MB in
     * about 30 us, and waking a sleeping team (OMP_WAIT_POLICY=PASSIVE)
     * costs 30-60 us (docs/benchmarks.md, "Parallel regions"). Not even a
     * region of one thread for them (QKV_PAR_MIN's comment). */
    int64_t pages = (int64_t)(need >> 16);
    if (pages < 64) return memset(p, 0, need);
#pragma omp parallel for
    for (int64_t i = 0; i <= pages; i++) {
        size_t off = (size_t)i << 16;
        if (off < need) memset((unsigned char *)p + off, 0, need - off < 65536 ? need - off : 65536);
    }
    return p;
}

size_t qkv_arena_used(const qkv_arena *a) { return a ? a->used : 0; }
size_t qkv_arena_peak(const qkv_arena *a) { return a ? a->peak : 0; }

qkv_arena_mark qkv_arena_get_mark(const qkv_arena *a)
{
    qkv_arena_mark m = {0};
    if (a && a->cur) m = (qkv_arena_mark){a->cur, a->cur->used, a->used};
    else if (a) m.total = a->used;
    return m;
}

void qkv_arena_release(qkv_arena *a, qkv_arena_mark m)
{
    if (!a) return;
    if (!m.chunk) { /* marked before the first chunk: everything goes */
        qkv_arena_reset(a);
        return;
    }
    /* Chunks after the marked one were filled later: empty them. */
    for (chunk *c = ((chunk *)m.chunk)->next; c; c = c->next) c->used = 0;
    a->cur = m.chunk;
    a->cur->used = m.used;
    a->used = m.total;
}
