/* qkv/gguf.h: reading GGUF files (llama.cpp's model format), versions 2
 * and 3 (included by qkv.h). The file is mapped read-only and validated
 * whole at open: every metadata value, every tensor info, the alignment,
 * the data offsets (inside the file, aligned, no two tensors overlapping).
 * Tensor types are qkv_qtype (qkv/quant.h). docs/gguf.md describes the
 * format and the checks. */
#include "qkv.h" /* first: qkv.h includes every area header in order */
#ifndef QKV_GGUF_H
#define QKV_GGUF_H
#ifdef __cplusplus
extern "C" {
#endif

/* A metadata value's type, with the ids the file stores. */
typedef enum {
    QKV_GGUF_U8 = 0,
    QKV_GGUF_I8 = 1,
    QKV_GGUF_U16 = 2,
    QKV_GGUF_I16 = 3,
    QKV_GGUF_U32 = 4,
    QKV_GGUF_I32 = 5,
    QKV_GGUF_F32 = 6,
    QKV_GGUF_BOOL = 7,
    QKV_GGUF_STRING = 8,
    QKV_GGUF_ARRAY = 9,
    QKV_GGUF_U64 = 10,
    QKV_GGUF_I64 = 11,
    QKV_GGUF_F64 = 12
} qkv_gguf_vtype;

/* "U32", "STRING", "ARRAY", ...; "unknown" for another value. */
QKV_API const char *qkv_gguf_vtype_name(qkv_gguf_vtype t);

typedef struct qkv_gguf qkv_gguf;

/* Maps path read-only and validates it; on failure *out is NULL and the
 * message names the path and what is wrong (the key or tensor, the offset).
 * The file must not be truncated while it is open (as with any mapping,
 * reading a page that is gone raises SIGBUS). */
QKV_API qkv_status qkv_gguf_open(const char *path, qkv_gguf **out);
/* The same over bytes in memory, buf[0, len), which are borrowed, not
 * copied: they must outlive the qkv_gguf. label names them in messages. */
QKV_API qkv_status qkv_gguf_open_memory(const void *buf, size_t len, const char *label,
                                        qkv_gguf **out);
QKV_API void qkv_gguf_close(qkv_gguf *g);

QKV_API int qkv_gguf_version(const qkv_gguf *g);       /* 2 or 3 */
QKV_API int64_t qkv_gguf_alignment(const qkv_gguf *g); /* general.alignment, default 32 */
/* The file offset where the tensor data section starts (aligned). */
QKV_API uint64_t qkv_gguf_data_offset(const qkv_gguf *g);

/* ---- metadata: key/value pairs, in file order ---------------------------- */

QKV_API int64_t qkv_gguf_meta_count(const qkv_gguf *g);
/* Key i (NUL-terminated, owned by g); NULL out of range. */
QKV_API const char *qkv_gguf_meta_key(const qkv_gguf *g, int64_t i);
/* The index of key, or -1 if absent (O(1): a hash table). */
QKV_API int64_t qkv_gguf_meta_find(const qkv_gguf *g, const char *key);
/* Value i's type; for an ARRAY, qkv_gguf_meta_elem_type gives its
 * elements' type and qkv_gguf_meta_len their count (for a scalar: its own
 * type, and 1). Out of range: -1 cast to the enum, and -1. */
QKV_API qkv_gguf_vtype qkv_gguf_meta_type(const qkv_gguf *g, int64_t i);
QKV_API qkv_gguf_vtype qkv_gguf_meta_elem_type(const qkv_gguf *g, int64_t i);
QKV_API int64_t qkv_gguf_meta_len(const qkv_gguf *g, int64_t i);

/* Typed getters by key. A missing key is QKV_ERR_NOTFOUND naming it; a
 * value of a type that does not convert is QKV_ERR_FORMAT naming the key
 * and its type.
 *  get_i64:  any integer type or BOOL (a U64 above INT64_MAX: QKV_ERR_FORMAT)
 *  get_f32:  F32 or F64 (rounded to float)
 *  get_str:  STRING, as a NUL-terminated copy owned by g (len may be NULL;
 *            a string holding a NUL byte reads short through *s, whole
 *            through len)
 *  get_bool: BOOL (0 or 1)
 *  get_u64:  any integer type or BOOL, not negative (a U64 in full)
 *  get_f64:  F32 or F64, exactly */
QKV_API qkv_status qkv_gguf_get_i64(const qkv_gguf *g, const char *key, int64_t *out);
QKV_API qkv_status qkv_gguf_get_f32(const qkv_gguf *g, const char *key, float *out);
QKV_API qkv_status qkv_gguf_get_str(const qkv_gguf *g, const char *key, const char **s,
                                    size_t *len);
QKV_API qkv_status qkv_gguf_get_bool(const qkv_gguf *g, const char *key, int *out);
QKV_API qkv_status qkv_gguf_get_u64(const qkv_gguf *g, const char *key, uint64_t *out);
QKV_API qkv_status qkv_gguf_get_f64(const qkv_gguf *g, const char *key, double *out);

/* Arrays. get_array: the element type and count of the ARRAY at key
 * (QKV_ERR_FORMAT if it is not an array); either pointer may be NULL.
 * array_str: element j of an array of STRING (NUL-terminated copy owned by
 * g, O(1): indexed at open); len may be NULL.
 * array_f32 / array_i32: copy all n elements (n must equal the length)
 * with conversion: f32 from any numeric type (F64 and the 64-bit integers
 * rounded), i32 from any integer type or BOOL, each value range-checked
 * (QKV_ERR_FORMAT naming the key and the index). An array of arrays reads
 * only through qkv_gguf_get_array (its elements are not indexed). */
QKV_API qkv_status qkv_gguf_get_array(const qkv_gguf *g, const char *key, qkv_gguf_vtype *elem,
                                      int64_t *n);
QKV_API qkv_status qkv_gguf_array_str(const qkv_gguf *g, const char *key, int64_t j,
                                      const char **s, size_t *len);
QKV_API qkv_status qkv_gguf_array_f32(const qkv_gguf *g, const char *key, float *dst, int64_t n);
QKV_API qkv_status qkv_gguf_array_i32(const qkv_gguf *g, const char *key, int32_t *dst,
                                      int64_t n);

/* ---- tensors, in file order ---------------------------------------------- */

QKV_API int64_t qkv_gguf_tensor_count(const qkv_gguf *g);
/* Tensor i's name (owned by g); NULL out of range. */
QKV_API const char *qkv_gguf_tensor_name(const qkv_gguf *g, int64_t i);
/* The index of the tensor called name, or -1 (O(1): a hash table). */
QKV_API int64_t qkv_gguf_tensor_find(const qkv_gguf *g, const char *name);
/* Looks a tensor up (QKV_ERR_NOTFOUND naming it); any out pointer may be
 * NULL. dims gets ndim (1..4) entries in ggml's order: dims[0] is the
 * contiguous one (a PyTorch (out,in) weight is dims {in, out}). data points
 * into the mapping (valid until qkv_gguf_close; aligned in memory to
 * qkv_gguf_alignment, as the mapping starts on a page; for
 * qkv_gguf_open_memory, as aligned as buf is), nbytes is its size. */
QKV_API qkv_status qkv_gguf_tensor_info(const qkv_gguf *g, const char *name, qkv_qtype *type,
                                        int *ndim, int64_t *dims, const void **data,
                                        size_t *nbytes);
/* Tensor i's data offset as stored: relative to qkv_gguf_data_offset. */
QKV_API uint64_t qkv_gguf_tensor_offset(const qkv_gguf *g, int64_t i);

#ifdef __cplusplus
}
#endif
#endif
