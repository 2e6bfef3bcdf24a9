/* safetensors_internal.h: what the safetensors files share (the table, its
 * dtypes, messages, little-endian loads), and the in-memory entry point of
 * the reader, which the fuzz target calls.
 *
 *   safetensors.c           open, parse, close, lookup, accessors
 *   safetensors_validate.c  the header: JSON fields, sizes, offsets, tiling
 *   safetensors_read.c      typed reads (F32, I64, BOOL, into a qkv_tensor)
 *   safetensors_write.c     qkv_safetensors_save (atomic)
 *   state_dict.c            PyTorch state_dicts into and out of qkv_params
 */
#ifndef QKV_IO_SAFETENSORS_INTERNAL_H
#define QKV_IO_SAFETENSORS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"

enum {
    ST_MAX_RANK = 8,
    ST_ALIGN = 64,   /* the data buffer's alignment in memory */
    ST_QNAME = 96,   /* room for a name quoted in a message */
    ST_SHAPE = 200   /* room for a shape in a message */
};

#define ST_NDTYPES (QKV_ST_BOOL + 1)
/* A dtype's name in the format ("F32") and its element size in bytes. */
const char *st_dtype_name(qkv_st_dtype dt);
size_t st_dtype_size(qkv_st_dtype dt);

typedef struct {
    char *name;
    qkv_st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_RANK];
    uint64_t begin, end; /* data_offsets, relative to the data buffer */
} st_tensor;

typedef struct {
    char *key, *val;
} st_meta;

struct qkv_safetensors {
    char *label;         /* the path, for messages */
    st_tensor *t;        /* sorted by name, for bsearch */
    int n;
    st_meta *meta;       /* sorted by key */
    int n_meta;
    uint8_t *data;       /* the byte buffer, ST_ALIGN-aligned */
    size_t data_len;
};

/* Where a message comes from: "fn: label: what". */
typedef struct {
    const char *fn, *label;
} st_where;

qkv_status st_fail(const st_where *w, qkv_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* A name fit for a message: non-printing bytes as \xNN, long names cut
 * (at a UTF-8 character boundary) with "...". */
const char *st_quote(const char *s, char buf[ST_QNAME]);
/* "(2,3)" for a shape; "()" for a scalar. */
const char *st_shape_str(const int64_t *shape, int ndim, char *buf, size_t cap);
/* The byte size of a tensor; 0 on overflow (with *ok cleared). A zero
 * dimension makes it empty however large the others are. */
uint64_t st_nbytes(const int64_t *shape, int ndim, size_t elem, int *ok);
int st_cmp_tensor_name(const void *a, const void *b);
int st_cmp_meta_key(const void *a, const void *b);

/* The tensor called name, or an error from fn (NULL st or name included). */
qkv_status st_lookup(const char *fn, const qkv_safetensors *st, const char *name,
                     const st_tensor **out);

/* The header: hdr[0, hlen) parsed and validated into st, whose data buffer
 * (data_len bytes) is already in place (safetensors_validate.c). */
qkv_status st_parse_header(const st_where *w, const char *hdr, size_t hlen, qkv_safetensors *st);
/* The 8-byte length prefix against the total size: total is the file's
 * length and prefix its first 8 bytes (unused when total < 8). */
qkv_status st_check_prefix(const st_where *w, const uint8_t prefix[8], uint64_t total,
                           uint64_t *hlen);

/* Little-endian loads and stores, independent of the host. */
static inline uint16_t st_ld16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static inline uint32_t st_ld32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t st_ld64(const uint8_t *p)
{
    return st_ld32(p) | (uint64_t)st_ld32(p + 4) << 32;
}

static inline void st_st32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline void st_st64(uint8_t *p, uint64_t v)
{
    st_st32(p, (uint32_t)v);
    st_st32(p + 4, (uint32_t)(v >> 32));
}

/* Parses and strictly validates a whole safetensors file held in buf[0, len)
 * (copied; buf may be freed afterwards). label names the source in error
 * messages, as the path does for qkv_safetensors_open. */
qkv_status qkv_safetensors_parse(const uint8_t *buf, size_t len, const char *label,
                                 qkv_safetensors **out);

#endif
