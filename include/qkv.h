/* qkv.h: the public interface of libqkv, attention and transformers in C11.
 *
 * Conventions (docs/core.md explains them in full):
 *  - Every public call returns a qkv_status; on failure qkv_last_error()
 *    says what was wrong and with which argument and shapes. The library never
 *    exits and never prints.
 *  - Tensors are dense, row-major, up to 4 dims, in PyTorch's dim order.
 *  - Ops take a qkv_ctx: outputs come from its activation arena (reset every
 *    step with qkv_ctx_reset) and, when any input needs a gradient, the op is
 *    recorded on the ctx's tape. qkv_backward runs the tape in reverse.
 *  - Parameters live in a qkv_params store, which outlives steps, keeps
 *    PyTorch state_dict names and holds their gradients.
 */
#ifndef QKV_H
#define QKV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status and errors ------------------------------------------------ */

typedef enum {
    QKV_OK = 0,
    QKV_ERR_ARG,    /* a NULL pointer or a bad option value */
    QKV_ERR_SHAPE,  /* ranks or sizes that do not fit together */
    QKV_ERR_DTYPE,  /* a tensor of the wrong element type */
    QKV_ERR_NOMEM,  /* an allocation failed */
    QKV_ERR_IO,     /* a file could not be opened, read or written */
    QKV_ERR_FORMAT, /* a file's contents are malformed */
    QKV_ERR_STATE,  /* a call made in the wrong order */
    QKV_ERR_NOTFOUND
} qkv_status;

/* The message of the last failed call on this thread ("" if none). */
const char *qkv_last_error(void);
const char *qkv_status_name(qkv_status s);

/* ---- memory: arenas --------------------------------------------------- */

/* A bump allocator over large chunks. Pointers stay valid until
 * qkv_arena_reset (which keeps the chunks for reuse) or qkv_arena_free. */
typedef struct qkv_arena qkv_arena;
qkv_status qkv_arena_new(qkv_arena **out, size_t chunk_bytes);
void qkv_arena_free(qkv_arena *a);
void qkv_arena_reset(qkv_arena *a);
/* 64-byte aligned, zero-filled; NULL (with the error set) when out of memory. */
void *qkv_arena_alloc(qkv_arena *a, size_t bytes);
size_t qkv_arena_used(const qkv_arena *a);  /* bytes handed out since reset */
size_t qkv_arena_peak(const qkv_arena *a);  /* most bytes ever handed out at once */
/* Scratch: mark the arena, allocate, then release back to the mark, which
 * frees everything allocated after it (in LIFO order, like a stack). */
typedef struct {
    void *chunk;
    size_t used, total;
} qkv_arena_mark;
qkv_arena_mark qkv_arena_get_mark(const qkv_arena *a);
void qkv_arena_release(qkv_arena *a, qkv_arena_mark m);

/* ---- tensors ---------------------------------------------------------- */

#define QKV_MAX_DIMS 4

typedef enum { QKV_F32 = 0, QKV_BOOL = 1, QKV_I64 = 2 } qkv_dtype;

typedef struct qkv_tensor qkv_tensor;
struct qkv_tensor {
    qkv_dtype dtype;
    int ndim;
    int64_t shape[QKV_MAX_DIMS];
    float *data;      /* F32 elements, or NULL for BOOL tensors */
    uint8_t *mask;    /* BOOL elements (0 or 1), or NULL */
    int64_t *idx;     /* I64 elements (token ids, class labels), or NULL */
    float *grad;      /* same size as data; NULL until a gradient is needed */
    int requires_grad;
    /* A view shares data (and gradient) with base, starting at offset. */
    qkv_tensor *base;
    int64_t offset;
    const char *name; /* parameters: their state_dict key */
};

int64_t qkv_tensor_numel(const qkv_tensor *t);
/* "(2,3,4)" into buf; returns buf. */
const char *qkv_shape_str(const qkv_tensor *t, char *buf, size_t n);

/* A new zero-filled tensor from the arena. shape has ndim entries. */
qkv_status qkv_tensor_new(qkv_arena *a, qkv_dtype dtype, int ndim, const int64_t *shape,
                          qkv_tensor **out);
/* A tensor over caller-owned memory (no copy); for inputs and masks. */
qkv_status qkv_tensor_wrap(qkv_arena *a, float *data, int ndim, const int64_t *shape,
                           qkv_tensor **out);
qkv_status qkv_tensor_wrap_bool(qkv_arena *a, uint8_t *mask, int ndim, const int64_t *shape,
                                qkv_tensor **out);
qkv_status qkv_tensor_wrap_i64(qkv_arena *a, int64_t *idx, int ndim, const int64_t *shape,
                               qkv_tensor **out);
/* A view with another shape over the same elements (a reshape). */
qkv_status qkv_tensor_view(qkv_arena *a, qkv_tensor *t, int ndim, const int64_t *shape,
                           qkv_tensor **out);
/* A view of rows [start, start+len) along dim 0 (contiguous, so a view). */
qkv_status qkv_tensor_narrow(qkv_arena *a, qkv_tensor *t, int64_t start, int64_t len,
                             qkv_tensor **out);
/* The tensor's gradient buffer, allocated zeroed from the arena if absent
 * (views resolve to their base's gradient). */
float *qkv_tensor_grad(qkv_arena *a, qkv_tensor *t);

/* ---- random numbers --------------------------------------------------- */

/* xoshiro256** seeded through splitmix64: reproducible across platforms. */
typedef struct { uint64_t s[4]; } qkv_rng;
void qkv_rng_seed(qkv_rng *r, uint64_t seed);
uint64_t qkv_rng_next(qkv_rng *r);
float qkv_rng_uniform(qkv_rng *r);                  /* [0,1) */
float qkv_rng_normal(qkv_rng *r);                   /* N(0,1) */
void qkv_rng_fill_uniform(qkv_rng *r, float *x, int64_t n, float lo, float hi);
void qkv_rng_fill_normal(qkv_rng *r, float *x, int64_t n, float mean, float std);

/* PyTorch's initialisers (torch.nn.init), same distributions and fans. */
qkv_status qkv_init_xavier_uniform(qkv_rng *r, qkv_tensor *t, float gain);
qkv_status qkv_init_xavier_normal(qkv_rng *r, qkv_tensor *t, float gain);
/* kaiming_uniform_(a=sqrt(5)) as nn.Linear uses: U(-1/sqrt(fan_in), 1/sqrt(fan_in)). */
qkv_status qkv_init_linear_default(qkv_rng *r, qkv_tensor *t);
qkv_status qkv_init_uniform(qkv_rng *r, qkv_tensor *t, float lo, float hi);
qkv_status qkv_init_constant(qkv_tensor *t, float v);

/* ---- parameters ------------------------------------------------------- */

/* Named, persistent parameters with gradients, in one store. */
typedef struct qkv_params qkv_params;
qkv_status qkv_params_new(qkv_params **out);
void qkv_params_free(qkv_params *p);
/* A new zeroed parameter named prefix+name with a zeroed gradient. */
qkv_status qkv_params_add(qkv_params *p, const char *prefix, const char *name, int ndim,
                          const int64_t *shape, qkv_tensor **out);
int qkv_params_count(const qkv_params *p);
qkv_tensor *qkv_params_at(qkv_params *p, int i);
qkv_tensor *qkv_params_find(qkv_params *p, const char *name);
int64_t qkv_params_numel(const qkv_params *p);
void qkv_params_zero_grad(qkv_params *p);

/* ---- context: arena + tape ------------------------------------------- */

typedef struct qkv_ctx qkv_ctx;
qkv_status qkv_ctx_new(qkv_ctx **out);
void qkv_ctx_free(qkv_ctx *c);
/* Drops the tape and every activation of the step; parameters stay. */
void qkv_ctx_reset(qkv_ctx *c);
qkv_arena *qkv_ctx_arena(qkv_ctx *c);
/* Training mode turns dropout on (default: off, as after module.eval()). */
void qkv_ctx_set_training(qkv_ctx *c, int training);
int qkv_ctx_training(const qkv_ctx *c);
/* Seeds the counter-based RNG that dropout masks are drawn from. */
void qkv_ctx_set_seed(qkv_ctx *c, uint64_t seed);
/* With grad off (like torch.no_grad) ops record nothing. Default: on. */
void qkv_ctx_set_grad(qkv_ctx *c, int enabled);

/* Backpropagates from out: seeds out's gradient with dout (a tensor of the
 * same numel), or with 1 when out has one element and dout is NULL. */
qkv_status qkv_backward(qkv_ctx *c, qkv_tensor *out, const float *dout);

/* Forces the reference kernels (plain loops) everywhere; for tests.
 * The environment variable QKV_REFERENCE=1 sets it at start-up. */
void qkv_set_reference(int on);
int qkv_reference(void);

/* ---- basic ops (forward recorded on the tape) ------------------------- */

/* y = x W^T + b, as torch.nn.functional.linear.
 * x (...,in), w (out,in), b (out) or NULL -> y (...,out) */
qkv_status qkv_linear(qkv_ctx *c, qkv_tensor *x, qkv_tensor *w, qkv_tensor *b, qkv_tensor **y);
/* y = x.permute(perm) made contiguous; perm has x->ndim entries. */
qkv_status qkv_permute(qkv_ctx *c, qkv_tensor *x, const int *perm, qkv_tensor **y);
/* A reshape recorded as a view (no copy; gradients flow through the base). */
qkv_status qkv_reshape(qkv_ctx *c, qkv_tensor *x, int ndim, const int64_t *shape, qkv_tensor **y);
/* Appends one row per (n,h) along dim 2: x (N,H,S,D), row (H*D) or NULL for
 * zeros -> y (N,H,S+1,D). MultiheadAttention's bias_k/bias_v and add_zero_attn. */
qkv_status qkv_append_row(qkv_ctx *c, qkv_tensor *x, qkv_tensor *row, qkv_tensor **y);

/* ---- scaled dot-product attention ------------------------------------- */

typedef enum {
    QKV_CAUSAL_NONE = 0,
    QKV_CAUSAL_TOP_LEFT,     /* key j masked when j > i (PyTorch's is_causal) */
    QKV_CAUSAL_BOTTOM_RIGHT  /* key j masked when j > i + (S - L): decoding with a cache */
} qkv_causal;

typedef struct {
    float scale;        /* NAN (the default) means 1/sqrt(head_dim) */
    /* attn_mask: BOOL (true = masked out) or F32 (added to the scores);
     * shape (L,S), (N*H,L,S) or (N,H,L,S). NULL for none. */
    const qkv_tensor *attn_mask;
    /* key_padding_mask: BOOL (true = padding, masked) or F32 (added); (N,S). */
    const qkv_tensor *key_padding_mask;
    qkv_causal causal;
    /* Local attention: key j masked when |i' - j| > window, where i' is i
     * aligned as causal says (bottom-right when causal is BOTTOM_RIGHT).
     * Negative (the default) means no window. */
    int64_t window;
    float dropout_p;    /* on the weights, only in training mode */
    int need_weights;   /* also return the (N,H,L,S) weights (O(L*S) memory) */
    /* Keys at index >= mask_keys are never masked: MultiheadAttention's
     * bias_k and zero-attention keys. 0 (the default) means all S keys are
     * covered by the masks. */
    int64_t mask_keys;
    /* ALiBi: H slopes; score (h,i,j) gets -slopes[h] * |i' - j| added (i'
     * aligned as causal says), computed on the fly in O(L) memory. NULL for
     * none. */
    const float *alibi_slopes;
} qkv_sdpa_opts;

qkv_sdpa_opts qkv_sdpa_opts_default(void);

/* out = softmax(q k^T * scale + mask) v, rows with every key masked give 0.
 * q (N,H,L,D), k (N,H,S,D), v (N,H,S,Dv) -> out (N,H,L,Dv),
 * weights (N,H,L,S) when opts->need_weights (else *weights = NULL; weights may
 * be NULL when not needed). 3-D inputs (B,L,D) are taken as H = 1. */
qkv_status qkv_sdpa(qkv_ctx *c, qkv_tensor *q, qkv_tensor *k, qkv_tensor *v,
                    const qkv_sdpa_opts *opts, qkv_tensor **out, qkv_tensor **weights);

/* ---- multi-head attention (torch.nn.MultiheadAttention) --------------- */

typedef struct {
    int64_t embed_dim, num_heads;
    float dropout;      /* default 0 */
    int bias;           /* default 1 */
    int add_bias_kv;    /* default 0 */
    int add_zero_attn;  /* default 0 */
    int64_t kdim, vdim; /* 0 (default) means embed_dim */
    int batch_first;    /* default 0: (L,N,E) */
} qkv_mha_opts;

qkv_mha_opts qkv_mha_opts_default(int64_t embed_dim, int64_t num_heads);

typedef struct {
    qkv_mha_opts o;
    int64_t head_dim;
    int packed;  /* kdim == vdim == embed_dim: one in_proj_weight */
    /* Parameters (state_dict names); NULL where the options leave them out. */
    qkv_tensor *in_proj_weight;  /* (3E,E) when packed */
    qkv_tensor *q_proj_weight;   /* (E,E) when not packed */
    qkv_tensor *k_proj_weight;   /* (E,kdim) */
    qkv_tensor *v_proj_weight;   /* (E,vdim) */
    qkv_tensor *in_proj_bias;    /* (3E) when bias */
    qkv_tensor *bias_k, *bias_v; /* (1,1,E) when add_bias_kv */
    qkv_tensor *out_proj_weight; /* "out_proj.weight" (E,E) */
    qkv_tensor *out_proj_bias;   /* "out_proj.bias" (E) when bias */
} qkv_mha;

/* Creates the parameters in p under prefix (e.g. "layers.0.self_attn.", or
 * "" ) and initialises them as PyTorch does, drawing from rng. */
qkv_status qkv_mha_init(qkv_mha *m, const qkv_mha_opts *o, qkv_params *p, const char *prefix,
                        qkv_rng *rng);

typedef struct {
    const qkv_tensor *key_padding_mask; /* BOOL or F32, (N,S) or (S) unbatched */
    int need_weights;                   /* default 1 */
    const qkv_tensor *attn_mask;        /* BOOL or F32, (L,S) or (N*H,L,S) */
    int average_attn_weights;           /* default 1 */
    qkv_causal causal;                  /* qkv's addition: a causal mask without a tensor */
    int64_t window;                     /* qkv's addition: local attention; -1 = none */
    const float *alibi_slopes;          /* qkv's addition: ALiBi, num_heads slopes, or NULL */
} qkv_mha_args;

qkv_mha_args qkv_mha_args_default(void);

/* query (L,N,E) ((N,L,E) with batch_first, (L,E) unbatched), key (S,N,kdim),
 * value (S,N,vdim) -> out like query; weights (N,L,S') averaged or
 * (N,H,L,S') per head (S' = S plus the bias_k and zero-attention keys),
 * unbatched without N; *weights is NULL when need_weights is 0. */
qkv_status qkv_mha_forward(qkv_ctx *c, const qkv_mha *m, qkv_tensor *query, qkv_tensor *key,
                           qkv_tensor *value, const qkv_mha_args *args, qkv_tensor **out,
                           qkv_tensor **weights);


/* ---- score functions (the lecture's seq2seq attention) ----------------- */

typedef enum {
    QKV_SCORE_DOT = 0,      /* s . h */
    QKV_SCORE_SCALED_DOT,   /* s . h / sqrt(dim) */
    QKV_SCORE_COSINE,       /* s . h / (|s| |h|) */
    QKV_SCORE_GENERAL,      /* s^T W_a h,             W_a (Dq,Dk) */
    QKV_SCORE_REDUCED_RANK, /* (U_a s)^T (V_a h),     U_a (r,Dq), V_a (r,Dk) */
    QKV_SCORE_ADDITIVE      /* v_a^T tanh(W_a h + V_a s), W_a (r,Dk), V_a (r,Dq), v_a (r) */
} qkv_score_kind;

typedef struct {
    qkv_score_kind kind;
    int64_t query_dim, key_dim, rank; /* rank: r for reduced-rank and additive */
    qkv_tensor *W_a, *U_a, *V_a, *v_a; /* parameters "W_a" "U_a" "V_a" "v_a"; NULL if unused */
} qkv_score;

/* dot, scaled dot and cosine need query_dim == key_dim and have no
 * parameters; rank is ignored except by reduced-rank and additive.
 * Weights are initialised like nn.Linear's (U(-1/sqrt(fan_in), ..)). */
qkv_status qkv_score_init(qkv_score *sc, qkv_score_kind kind, int64_t query_dim,
                          int64_t key_dim, int64_t rank, qkv_params *p, const char *prefix,
                          qkv_rng *rng);
/* query (N,T,Dq) (or (N,Dq)), keys (N,S,Dk) -> scores (N,T,S) (or (N,S)). */
qkv_status qkv_score_forward(qkv_ctx *c, const qkv_score *sc, qkv_tensor *query,
                             qkv_tensor *keys, qkv_tensor **scores);
/* Softmax over the last dim. key_padding_mask: NULL or BOOL (N,S) with
 * true = masked, for x (N,S) or (N,T,S). A row with every entry masked
 * gives zeros. */
qkv_status qkv_softmax(qkv_ctx *c, qkv_tensor *x, const qkv_tensor *key_padding_mask,
                       qkv_tensor **y);
/* Batched matrix product: a (B,M,K), b (B,K,P) -> y (B,M,P); 2-D a (B,K)
 * with 3-D b gives (B,P) (weights times values). */
qkv_status qkv_bmm(qkv_ctx *c, qkv_tensor *a, qkv_tensor *b, qkv_tensor **y);

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

/* Layers, training, models (include/qkv/). */
#include "qkv/nn.h"
#include "qkv/posenc.h"
#include "qkv/train.h"
#include "qkv/transformer.h"
#include "qkv/generate.h"
#include "qkv/models.h"
#endif
