/* attention.h: the scaled dot-product attention kernels and the mask
 * description they share. Two kernels compute the same function:
 *   attention_ref.c   materialises the (L,S) scores per head; plain loops,
 *                     double accumulation: the oracle for the fast one;
 *   attention_flash.c online softmax over key tiles, O(L) memory, whole
 *                     tiles skipped where causal/local masks rule them out.
 * Both: a query row whose every key is masked gives output 0, lse -inf and
 * zero gradients; a masked key's k is never read; a row with a NaN score
 * (NaN in q_i, in an unmasked k_j or mask value, or +inf) gives NaN output,
 * lse and weights (docs/reliability.md, "NaN and infinity"). */
#ifndef QKV_ATTENTION_KERNELS_H
#define QKV_ATTENTION_KERNELS_H
#include <math.h>
#include "core/internal.h"

/* Where the heads' rows lie in q, k, v or out (and in dq, dk, dv, dout):
 * element x of row i of head (n,h) at n*sn + h*sh + i*ld + x. All zero:
 * compact (N,H,rows,width), qkv_sdpa's tensors. A multi-head attention's
 * packed projection (N,L,3E) is read in place through them, and its output
 * written as (N,L,E), with no head split or merge (the fast kernels only). */
typedef struct {
    int64_t sn, sh, ld;
} qkv_attn_rows;

typedef struct {
    int64_t N, H, L, S, D, Dv;
    float scale;
    /* Masks cover keys j < mask_keys; later keys (bias_k, zero attention)
     * are never masked. */
    int64_t mask_keys;
    const uint8_t *bmask; /* attn_mask BOOL, rows of mask_keys, or NULL */
    const float *fmask;   /* attn_mask F32 (added), or NULL */
    int64_t mask_nh_stride; /* elements between (n,h) mask blocks: 0 for (L,S) */
    const uint8_t *kpm;   /* key_padding_mask BOOL (N,mask_keys) or NULL */
    const float *kpm_f;   /* key_padding_mask F32 (N,mask_keys), added, or NULL */
    qkv_causal causal;
    int64_t window;       /* local window; < 0 for none */
    int64_t diag;         /* i is aligned to i + diag: S_m - L bottom-right, else 0 */
    const float *alibi;   /* (H) ALiBi slopes, or NULL */
    float dropout_p;      /* 0 outside training */
    uint64_t dropout_seed;
    /* The fast path's products with bf16 operands (the ctx's QKV_BF16
     * mode): Q, K, V, P, dO and dS rounded to bf16, FP32 accumulation and
     * softmax statistics (attention_bf16_*.c). 0: FP32 throughout. */
    int bf16;
    /* Backward only: dq, dk and dv are new buffers, not yet set (the op's
     * gradients met for the first time): the fast kernels zero each head's
     * part just before adding into it, not in a pass of their own. */
    int grads_unset;
    /* Grouped-query attention, forward only (the forwards and
     * qkv_attn_weights): query heads per key/value head; k and v hold
     * H/group heads and head h reads head h / group. 0 or 1: H heads. The
     * backwards need it 0 or 1 (qkv_sdpa repeats k, v on the tape instead). */
    int64_t group;
    qkv_attn_rows q_rows, k_rows, v_rows, o_rows; /* all zero: compact */
} qkv_attn_desc;

/* Row stride and head offset of a head's rows (qkv_attn_rows): width and
 * (n H + h) rows width when compact. */
static inline int64_t qkv_attn_ld(const qkv_attn_rows *r, int64_t width) { return r->ld ? r->ld : width; }
static inline int64_t qkv_attn_head(const qkv_attn_rows *r, int64_t H, int64_t n, int64_t h, int64_t rows,
                                    int64_t width)
{
    return r->ld ? n * r->sn + h * r->sh : (n * H + h) * rows * width;
}

/* Where query head (n,h)'s keys or values start in k or v (rows r, width
 * floats a row): head h / group of H / group (grouped-query attention). */
static inline int64_t qkv_attn_kv_head(const qkv_attn_desc *d, const qkv_attn_rows *r, int64_t n, int64_t h,
                                       int64_t width)
{
    int64_t g = d->group > 1 ? d->group : 1;
    return qkv_attn_head(r, d->H / g, n, h / g, d->S, width);
}

/* True when any mask is present (the kernels skip the per-element test
 * otherwise). */
static inline int qkv_attn_has_mask(const qkv_attn_desc *d)
{
    return d->bmask || d->fmask || d->kpm || d->kpm_f || d->causal != QKV_CAUSAL_NONE ||
           d->window >= 0 || d->alibi;
}

/* The term added to score (n,h,i,j): 0, a float mask value, or -inf. */
static inline float qkv_attn_mask_term(const qkv_attn_desc *d, int64_t n, int64_t h, int64_t i,
                                       int64_t j)
{
    int64_t mk = d->mask_keys;
    if (j >= mk) return 0.0f;
    int64_t ia = i + d->diag;
    if (d->causal != QKV_CAUSAL_NONE && j > ia) return -INFINITY;
    if (d->window >= 0 && (j > ia + d->window || j < ia - d->window)) return -INFINITY;
    if (d->kpm && d->kpm[n * mk + j]) return -INFINITY;
    float t = d->kpm_f ? d->kpm_f[n * mk + j] : 0.0f;
    if (d->alibi) t -= d->alibi[h] * (float)(ia > j ? ia - j : j - ia);
    int64_t mo = (n * d->H + h) * d->mask_nh_stride + i * mk + j;
    if (d->bmask && d->bmask[mo]) return -INFINITY;
    if (d->fmask) t += d->fmask[mo];
    return t;
}

/* Dropout keep factor for weight (nh,i,j): 0 or 1/(1-p). */
static inline float qkv_attn_dropout(const qkv_attn_desc *d, int64_t nh, int64_t i, int64_t j)
{
    if (d->dropout_p <= 0.0f) return 1.0f;
    if (d->dropout_p >= 1.0f) return 0.0f;
    float u = qkv_hash_uniform(d->dropout_seed, (uint64_t)((nh * d->L + i) * d->S + j));
    return u < d->dropout_p ? 0.0f : 1.0f / (1.0f - d->dropout_p);
}

/* The fused kernels' tile sizes: BQ queries by BK keys. */
enum { QKV_ATTN_BQ = 64, QKV_ATTN_BK = 128 };

/* One instruction set's build of the fused kernels (attention_simd.h):
 * forward fills out and lse; backward adds into dk, dv and into one
 * (N,H,L,D) dq buffer per thread, unscaled (attention_flash.c sums them
 * times scale) — or, when S <= QKV_ATTN_BK (one key tile per head), into
 * dq itself, scaled — using Di (N,H,L) as scratch for dout . out. Scratch sizes are
 * in floats, for all the threads (backward's: its tiles and packs; the
 * caller adds D_i and the dq buffers). forward is NULL where the build lacks the set. */
typedef struct {
    const char *name;
    void (*forward)(const qkv_attn_desc *d, const float *q, const float *k, const float *v,
                    float *out, float *lse, float *scratch, int threads);
    void (*backward)(const qkv_attn_desc *d, const float *q, const float *k, const float *v,
                     const float *out, const float *lse, const float *dout, float *Di, float *dqs,
                     float *dk, float *dv, float *scratch, int threads);
    size_t (*forward_scratch)(const qkv_attn_desc *d, int threads);
    size_t (*backward_scratch)(const qkv_attn_desc *d, int threads);
} qkv_attn_simd;

extern const qkv_attn_simd qkv_attn_simd_avx512, qkv_attn_simd_avx2, qkv_attn_simd_portable;
/* The same kernels with bf16 operands (d->bf16): bf16_amx multiplies on AMX
 * tiles (tdpbf16ps), bf16_avx512 with AVX512-BF16 dot products
 * (vdpbf16ps); bf16_avx2 and bf16_portable round the operands to bf16 and
 * multiply in FP32 (same numbers up to the order of the sums: correct, not
 * faster), for CPUs without either. */
extern const qkv_attn_simd qkv_attn_simd_bf16_amx, qkv_attn_simd_bf16_avx512, qkv_attn_simd_bf16_avx2,
    qkv_attn_simd_bf16_portable;

/* The build the fast path uses: the widest the CPU runs, or the one named
 * by the environment variable QKV_ISA (avx512, avx2, portable) when the CPU
 * runs it. qkv_attn_simd_force(name) switches (NULL: back to the default);
 * it returns 0, changing nothing, for a name unknown or not runnable here. */
const qkv_attn_simd *qkv_attn_simd_current(void);
/* 1 when this CPU runs build s (its instruction set is there and the build
 * is not empty); other kernels built with the same flags ask it too. */
int qkv_attn_simd_runs(const qkv_attn_simd *s);
int qkv_attn_simd_force(const char *name);
/* The build d->bf16 uses, following the FP32 choice: where the FP32 build is
 * avx512, bf16_amx where the CPU and OS lend AMX tiles, else bf16_avx512
 * where the CPU has AVX512-BF16; bf16_portable where the FP32 build is
 * portable, bf16_avx2 otherwise (or bf16_portable if AVX2 is missing).
 * qkv_attn_simd_bf16_force(name) picks a bf16 build by name where it runs
 * (a test's way to try each), NULL back to this rule; 0 changes nothing. */
const qkv_attn_simd *qkv_attn_simd_bf16_current(void);
int qkv_attn_simd_bf16_force(const char *name);

/* Scratch: the kernels allocate nothing; the caller passes this many
 * elements (from its arena), for `threads` OpenMP threads. */
size_t qkv_attn_ref_scratch(const qkv_attn_desc *d);                  /* doubles */
size_t qkv_attn_forward_scratch(const qkv_attn_desc *d, int threads);  /* floats */
size_t qkv_attn_backward_scratch(const qkv_attn_desc *d, int threads); /* floats */

/* q (N,H,L,D), k (N,H,S,D), v (N,H,S,Dv) -> out (N,H,L,Dv), lse (N,H,L);
 * weights (N,H,L,S) post-dropout when not NULL. */
void qkv_attn_forward_ref(const qkv_attn_desc *d, const float *q, const float *k, const float *v,
                          float *out, float *lse, float *weights, double *scratch);
/* Adds the gradients of out = attention(q,k,v) into dq, dk, dv (any may be
 * NULL), given dout (N,H,L,Dv) and the forward's out and lse. */
void qkv_attn_backward_ref(const qkv_attn_desc *d, const float *q, const float *k,
                           const float *v, const float *out, const float *lse,
                           const float *dout, float *dq, float *dk, float *dv, double *scratch);
void qkv_attn_forward_flash(const qkv_attn_desc *d, const float *q, const float *k,
                            const float *v, float *out, float *lse, float *scratch, int threads);
void qkv_attn_backward_flash(const qkv_attn_desc *d, const float *q, const float *k,
                             const float *v, const float *out, const float *lse,
                             const float *dout, float *dq, float *dk, float *dv, float *scratch,
                             int threads);
/* weights (N,H,L,S) from lse, post-dropout: the same matrix the reference
 * builds, for need_weights on the fast path. */
void qkv_attn_weights(const qkv_attn_desc *d, const float *q, const float *k, const float *lse,
                      float *weights);
#endif
