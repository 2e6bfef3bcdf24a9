/* qkv/io.h: files: safetensors (read, validate, write) (included by
 * qkv.h). Figures (PNG, SVG, PDF) are libqkv-plot's: qkv/plot.h. */
#include "qkv.h" /* first: qkv.h includes every area header in order */
#ifndef QKV_IO_H
#define QKV_IO_H
#ifdef __cplusplus
extern "C" {
#endif

/* ---- safetensors ------------------------------------------------------ */

typedef enum {
    QKV_ST_F32 = 0, QKV_ST_F16, QKV_ST_BF16, QKV_ST_F64, QKV_ST_I64, QKV_ST_I32,
    QKV_ST_I16, QKV_ST_I8, QKV_ST_U8, QKV_ST_BOOL
} qkv_st_dtype;

typedef struct qkv_safetensors qkv_safetensors;
/* Reads and strictly validates a whole file (header and offsets). */
QKV_API qkv_status qkv_safetensors_open(const char *path, qkv_safetensors **out);
QKV_API void qkv_safetensors_close(qkv_safetensors *st);
QKV_API int qkv_safetensors_count(const qkv_safetensors *st);
QKV_API const char *qkv_safetensors_name(const qkv_safetensors *st, int i);
/* Looks a tensor up; any out pointer may be NULL. shape gets ndim entries
 * (at most 8). */
QKV_API qkv_status qkv_safetensors_info(const qkv_safetensors *st, const char *name,
                                        qkv_st_dtype *dtype, int *ndim, int64_t *shape,
                                        const void **data, size_t *nbytes);
/* Typed reads: n must equal the tensor's element count, and its stored
 * dtype must mean what dst holds, else QKV_ERR_DTYPE naming the tensor and
 * its dtype (a BOOL mask read as floats would become 0/1 values *added* to
 * scores). read_f32 takes F32, F16, BF16, F64 (converted to float32);
 * read_i64 takes I64, I32, I16, I8, U8 (widened); read_bool takes BOOL
 * (into bytes 0/1). */
QKV_API qkv_status qkv_safetensors_read_f32(const qkv_safetensors *st, const char *name, float *dst,
                                            int64_t n);
QKV_API qkv_status qkv_safetensors_read_i64(const qkv_safetensors *st, const char *name,
                                            int64_t *dst, int64_t n);
QKV_API qkv_status qkv_safetensors_read_bool(const qkv_safetensors *st, const char *name,
                                             uint8_t *dst, int64_t n);
/* Into an existing tensor whose shape must equal the stored shape exactly
 * (QKV_ERR_SHAPE showing both: "'w' is (3,4) in the file, (4,3) in the
 * tensor"); dst->dtype picks the read: F32 -> read_f32 into data, I64 ->
 * read_i64 into idx, BOOL -> read_bool into mask. */
QKV_API qkv_status qkv_safetensors_read_tensor(const qkv_safetensors *st, const char *name,
                                               qkv_tensor *dst);
/* A new tensor from arena a with the stored shape (at most QKV_MAX_DIMS
 * dims) and the stored kind: F32/F16/BF16/F64 -> QKV_F32, integers ->
 * QKV_I64, BOOL -> QKV_BOOL. On failure *out is NULL and a is as before. */
QKV_API qkv_status qkv_safetensors_load_tensor(const qkv_safetensors *st, const char *name,
                                               qkv_arena *a, qkv_tensor **out);
/* The __metadata__ value for key, or NULL. */
QKV_API const char *qkv_safetensors_meta(const qkv_safetensors *st, const char *key);
/* The __metadata__ entries, sorted by key: count, and key i (NULL if out of range). */
QKV_API int qkv_safetensors_meta_count(const qkv_safetensors *st);
QKV_API const char *qkv_safetensors_meta_key(const qkv_safetensors *st, int i);

/* Writes F32 tensors (BOOL tensors are written as BOOL) and string
 * metadata (meta_keys/meta_vals, n_meta pairs) atomically: a temporary file,
 * flushed, then renamed over path. */
QKV_API qkv_status qkv_safetensors_save(const char *path, int n, const char *const *names,
                                        const qkv_tensor *const *tensors, int n_meta,
                                        const char *const *meta_keys, const char *const *meta_vals);

/* ---- PyTorch state_dicts into and out of a qkv_params store ------------
 * As module.load_state_dict(sd, strict): file key = prefix + parameter
 * name. Loading strips prefix from the file's keys and ignores keys that
 * lack it (load "encoder.layers.0." of a whole model's file into a store
 * built with prefix ""); prefix NULL means "". Every matched parameter
 * needs the exact stored shape (else QKV_ERR_SHAPE naming both shapes,
 * strict or not, as PyTorch's size mismatch) and a floating-point dtype
 * (a buffer may also load from an integer one; else QKV_ERR_DTYPE).
 * strict: a missing or unexpected name is an error (QKV_ERR_NOTFOUND
 * naming the first few); not strict: they are only reported. Everything is checked before anything is copied: on any error
 * the store is unchanged. docs/safetensors.md has an example. */

/* What a load matched. Names are in the store's namespace (a file key
 * with the prefix cut off). The lists are malloc'd: free them with
 * qkv_state_dict_report_free. */
typedef struct {
    int n_loaded;      /* parameters copied (0 when the load failed) */
    int n_missing;     /* store parameters with no tensor in the file */
    int n_unexpected;  /* file tensors under the prefix the store lacks */
    int n_ignored;     /* file tensors whose key does not start with prefix */
    char **missing;    /* (n_missing) in store order */
    char **unexpected; /* (n_unexpected) in sorted order */
} qkv_state_dict_report;

QKV_API void qkv_state_dict_report_free(qkv_state_dict_report *r);

/* From an open file. report may be NULL; when given it is overwritten
 * (free a previous one first) and filled even when the load fails once
 * the names could be matched, so a strict failure can list them all. */
QKV_API qkv_status qkv_params_load_state_dict(qkv_params *p, const qkv_safetensors *st,
                                              const char *prefix, int strict,
                                              qkv_state_dict_report *report);
/* The same from a path (opened, validated, closed). */
QKV_API qkv_status qkv_params_load_safetensors(qkv_params *p, const char *path, const char *prefix,
                                               int strict, qkv_state_dict_report *report);
/* Every parameter of p as F32 under key prefix + name (prefix NULL: ""),
 * with metadata {"format": "pt"}, atomically (qkv_safetensors_save):
 * safetensors.torch.load_file gives a state_dict that loads into the same
 * PyTorch module. */
QKV_API qkv_status qkv_params_save_safetensors(qkv_params *p, const char *path, const char *prefix);

#ifdef __cplusplus
}
#endif
#endif
