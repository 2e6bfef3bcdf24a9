/* gguf_internal.h: what the GGUF reader's files share.
 *
 *   gguf.c       open (mmap) and close, the parse and every validation
 *   gguf_meta.c  the hash tables, metadata getters, tensor accessors
 *
 * The mapping is never written and never trusted: every length is checked
 * against the bytes left before it is used, every count against the
 * smallest size its items can take before anything is allocated for it.
 * Strings (keys, string values, the elements of string arrays, tensor
 * names) are copied once, NUL-terminated, into one pool; numeric values
 * are read from the mapping (little-endian, unaligned) when asked for.
 */
#ifndef QKV_IO_GGUF_INTERNAL_H
#define QKV_IO_GGUF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"
#include "io/safetensors_internal.h" /* st_quote, st_ld16/32/64: shared with safetensors */

enum {
    GGUF_MAX_DIMS = 4,
    GGUF_MAX_DEPTH = 8,       /* arrays of arrays, at most this deep */
    GGUF_MAX_NAME = 64,       /* ggml's GGML_MAX_NAME: a tensor name is shorter */
    GGUF_MAX_KEY = 65535,     /* the spec: a key is at most 2^16-1 bytes */
    GGUF_DEFAULT_ALIGN = 32,
    GGUF_QNAME = ST_QNAME     /* room for a name quoted in a message */
};

/* One key/value pair. */
typedef struct {
    size_t key;          /* pool offset of the key */
    uint64_t key_len;
    qkv_gguf_vtype type; /* the value's type */
    qkv_gguf_vtype elem; /* an ARRAY's element type; the type itself otherwise */
    int64_t n;           /* an ARRAY's length; 1 otherwise */
    uint64_t pos;        /* file offset of the value (an array: of its first element) */
    int64_t str;         /* STRING, or ARRAY of STRING: index of its first string
                            in soff/slen; -1 otherwise */
} gguf_kv;

typedef struct {
    size_t name;         /* pool offset */
    qkv_qtype type;
    int ndim;
    int64_t dims[GGUF_MAX_DIMS]; /* ggml order: dims[0] contiguous */
    uint64_t off;        /* relative to the data section */
    uint64_t nbytes;
} gguf_tensor;

/* An open-addressed table of indices (-1: empty), capacity a power of two. */
typedef struct {
    int64_t *slot;
    size_t cap;
} gguf_hash;

struct qkv_gguf {
    char *label;             /* the path, for messages */
    const uint8_t *base;     /* the file's bytes */
    size_t len;
    int mapped;              /* base is an mmap of len bytes (else borrowed) */
    int version;
    uint64_t alignment, data_off;
    gguf_kv *kv;
    int64_t n_kv;
    gguf_tensor *t;
    int64_t n_t;
    char *pool;              /* NUL-terminated copies of every string */
    size_t pool_len, pool_cap;
    size_t *soff;            /* string i: pool offset and length */
    uint64_t *slen;
    int64_t n_str, cap_str;
    gguf_hash kv_hash, t_hash;
};

/* Parses and validates g->base[0, g->len) into g (gguf.c); fn names the
 * public call in messages. */
qkv_status gguf_parse(qkv_gguf *g, const char *fn);

/* The hash tables over keys and tensor names (gguf_meta.c). Building
 * refuses a duplicate, naming it. */
qkv_status gguf_hash_build(qkv_gguf *g, const char *fn);
void gguf_hash_free(gguf_hash *h);

/* A name fit for a message: non-printing bytes as \xNN, long names cut
 * (safetensors' st_quote). */
#define gguf_quote st_quote

static inline const char *gguf_str(const qkv_gguf *g, size_t off) { return g->pool + off; }

/* Little-endian loads from the mapping, at any alignment (safetensors'). */
#define gguf_ld16 st_ld16
#define gguf_ld32 st_ld32
#define gguf_ld64 st_ld64

/* Bytes of one element of a scalar type; 0 for STRING, ARRAY, unknown. */
static inline int gguf_scalar_size(int t)
{
    switch (t) {
    case QKV_GGUF_U8: case QKV_GGUF_I8: case QKV_GGUF_BOOL: return 1;
    case QKV_GGUF_U16: case QKV_GGUF_I16: return 2;
    case QKV_GGUF_U32: case QKV_GGUF_I32: case QKV_GGUF_F32: return 4;
    case QKV_GGUF_U64: case QKV_GGUF_I64: case QKV_GGUF_F64: return 8;
    default: return 0;
    }
}

#endif
