/* qkv/io.h: files: safetensors (read, validate, write) and images (PNG,
 * a canvas) (included by qkv.h). */
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
qkv_status qkv_safetensors_open(const char *path, qkv_safetensors **out);
void qkv_safetensors_close(qkv_safetensors *st);
int qkv_safetensors_count(const qkv_safetensors *st);
const char *qkv_safetensors_name(const qkv_safetensors *st, int i);
/* Looks a tensor up; any out pointer may be NULL. shape gets ndim entries
 * (at most 8). */
qkv_status qkv_safetensors_info(const qkv_safetensors *st, const char *name,
                                qkv_st_dtype *dtype, int *ndim, int64_t *shape,
                                const void **data, size_t *nbytes);
/* Copies a tensor into dst as float32 (converting F16/BF16/F64/ints);
 * n must equal its element count. */
qkv_status qkv_safetensors_read_f32(const qkv_safetensors *st, const char *name, float *dst,
                                    int64_t n);
/* The __metadata__ value for key, or NULL. */
const char *qkv_safetensors_meta(const qkv_safetensors *st, const char *key);
/* The __metadata__ entries, sorted by key: count, and key i (NULL if out of range). */
int qkv_safetensors_meta_count(const qkv_safetensors *st);
const char *qkv_safetensors_meta_key(const qkv_safetensors *st, int i);

/* Writes F32 tensors (BOOL tensors are written as BOOL) and string
 * metadata (meta_keys/meta_vals, n_meta pairs) atomically: a temporary file,
 * flushed, then renamed over path. */
qkv_status qkv_safetensors_save(const char *path, int n, const char *const *names,
                                const qkv_tensor *const *tensors, int n_meta,
                                const char *const *meta_keys, const char *const *meta_vals);


/* ---- images: PNG and a canvas for plots and attention maps ------------ */

/* Writes 8-bit RGB pixels (h rows of w pixels, 3 bytes each) as a PNG,
 * atomically (a temporary file renamed over path). */
qkv_status qkv_png_write(const char *path, int64_t w, int64_t h, const uint8_t *rgb);

typedef struct {
    int64_t w, h;
    uint8_t *rgb; /* (h, w, 3) */
} qkv_canvas;

/* Colours are 0xRRGGBB. Drawing clips to the canvas. */
qkv_status qkv_canvas_new(qkv_canvas *cv, int64_t w, int64_t h, uint32_t bg);
void qkv_canvas_free(qkv_canvas *cv);
void qkv_canvas_rect(qkv_canvas *cv, double x0, double y0, double x1, double y1, uint32_t c);
void qkv_canvas_line(qkv_canvas *cv, double x0, double y0, double x1, double y1, uint32_t c);
/* v in [0,1] -> a viridis-like colour. */
uint32_t qkv_colormap(double v);
/* A (rows, cols) matrix as cells of cell pixels from (x0, y0), values
 * mapped from [lo, hi]: attention maps. */
qkv_status qkv_canvas_heatmap(qkv_canvas *cv, double x0, double y0, double cell, int64_t rows,
                              int64_t cols, const float *m, float lo, float hi);
qkv_status qkv_canvas_save(const qkv_canvas *cv, const char *path);

#ifdef __cplusplus
}
#endif
#endif
