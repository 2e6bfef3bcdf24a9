/* quant_blocks.h: ggml's block layouts, byte for byte as a GGUF file
 * stores them (packed: a row of 18-byte blocks puts the scales at odd
 * addresses), and what src/kernels/quant_*.c share: the dequantizers of
 * one run of blocks, the 8-bit activation blocks the products quantize x
 * into, and the per-instruction-set tables of block dot products. */
#ifndef QKV_KERNELS_QUANT_BLOCKS_H
#define QKV_KERNELS_QUANT_BLOCKS_H
#include <stdint.h>
#include <string.h>
#include "qkv/quant.h"

#define QKV_QK 32   /* elements of a Q4_0 .. Q8_0 block */
#define QKV_QKK 256 /* elements of a K-quant super-block */

#define QKV_PACKED __attribute__((packed))
typedef struct QKV_PACKED { uint16_t d; uint8_t qs[16]; } qkv_blk_q4_0;                      /* 18 */
typedef struct QKV_PACKED { uint16_t d, m; uint8_t qs[16]; } qkv_blk_q4_1;                   /* 20 */
typedef struct QKV_PACKED { uint16_t d; uint8_t qh[4], qs[16]; } qkv_blk_q5_0;               /* 22 */
typedef struct QKV_PACKED { uint16_t d, m; uint8_t qh[4], qs[16]; } qkv_blk_q5_1;            /* 24 */
typedef struct QKV_PACKED { uint16_t d; int8_t qs[32]; } qkv_blk_q8_0;                       /* 34 */
typedef struct QKV_PACKED { uint8_t scales[16], qs[64]; uint16_t d, dmin; } qkv_blk_q2_K;    /* 84 */
typedef struct QKV_PACKED { uint8_t hmask[32], qs[64], scales[12]; uint16_t d; } qkv_blk_q3_K; /* 110 */
typedef struct QKV_PACKED { uint16_t d, dmin; uint8_t scales[12], qs[128]; } qkv_blk_q4_K;   /* 144 */
typedef struct QKV_PACKED { uint16_t d, dmin; uint8_t scales[12], qh[32], qs[128]; } qkv_blk_q5_K; /* 176 */
typedef struct QKV_PACKED { uint8_t ql[128], qh[64]; int8_t scales[16]; uint16_t d; } qkv_blk_q6_K; /* 210 */
typedef struct QKV_PACKED { float d; int8_t qs[256]; int16_t bsums[16]; } qkv_blk_q8_K;      /* 292 */

/* An activation block of 32 (the products' x for the 32-element types):
 * x[i] ~ d qs[i], s = d * sum(qs) (for the blocks' offsets and minima). */
typedef struct { float d, s; int8_t qs[32]; } qkv_act32;

/* Dequantizes nb blocks of src into dst (nb * block elements). */
typedef void (*qkv_dequant_fn)(const void *src, float *dst, int64_t nb);
/* The dequantizer of t, NULL for the types qkv_dequantize refuses. */
qkv_dequant_fn qkv_dequant_for(qkv_qtype t);
/* The K-quants' (quant_k.c). */
void qkv_dequant_q2_K(const void *src, float *dst, int64_t nb);
void qkv_dequant_q3_K(const void *src, float *dst, int64_t nb);
void qkv_dequant_q4_K(const void *src, float *dst, int64_t nb);
void qkv_dequant_q5_K(const void *src, float *dst, int64_t nb);
void qkv_dequant_q6_K(const void *src, float *dst, int64_t nb);
void qkv_dequant_q8_K(const void *src, float *dst, int64_t nb);

/* The 5-bit codes (0..31) of a Q5 block: low nibbles of qs (elements
 * 0..15, then the high nibbles 16..31), bit j of the 32 bits at qh4 as
 * bit 4 of element j. */
static inline void qkv_q5_codes(const uint8_t *qh4, const uint8_t *qs, int *q)
{
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
        q[j + 16] = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
    }
}

/* Q4_K's and Q5_K's 6-bit scales and minima of the 8 sub-blocks. */
static inline void qkv_k_scale_min(const uint8_t *q, uint8_t *sc, uint8_t *mn)
{
    for (int j = 0; j < 4; j++) {
        sc[j] = q[j] & 63;
        mn[j] = q[j + 4] & 63;
        sc[j + 4] = (uint8_t)((q[j + 8] & 0xF) | ((q[j] >> 6) << 4));
        mn[j + 4] = (uint8_t)((q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4));
    }
}

/* x (nb * 32) as activation blocks; x (nb * 256) as Q8_K blocks
 * (llama.cpp's quantize_row_q8_K_ref: qkv_quantize's Q8_K). */
void qkv_act32_quantize(const float *x, qkv_act32 *y, int64_t nb);
void qkv_q8_K_quantize(const float *x, qkv_blk_q8_K *y, int64_t nb);

/* The dot product of nb blocks of one weight row with nb activation
 * blocks (qkv_act32 for the 32-element types, qkv_blk_q8_K for the
 * K-quants); and of one weight row with 4 rows of activation blocks, row
 * r's at xq + r xs bytes, into out[r] (the same bits as the one-row dot of
 * each: qkv_qmatmul's rows are qkv_qmatvec's). */
typedef float (*qkv_qdot_fn)(const void *w, const void *xq, int64_t nb);
typedef void (*qkv_qdot4_fn)(const void *w, const void *xq, size_t xs, int64_t nb, float *out);
/* The types of a set's entries, in order. */
enum { QKV_QD_Q4_0, QKV_QD_Q4_1, QKV_QD_Q5_0, QKV_QD_Q5_1, QKV_QD_Q8_0, QKV_QD_Q4_K, QKV_QD_Q5_K, QKV_QD_Q6_K, QKV_QD_N };
/* A build of the dot products (NULL: not in this build; the portable one
 * has no 4-row dots). */
typedef struct {
    const char *name;
    qkv_qdot_fn one[QKV_QD_N];
    qkv_qdot4_fn four[QKV_QD_N];
} qkv_qdot_set;
extern const qkv_qdot_set qkv_qdot_portable, qkv_qdot_avx2, qkv_qdot_vnni;
#endif
