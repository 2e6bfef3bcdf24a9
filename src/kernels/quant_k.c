/* quant_k.c: dequantizing the K-quants (super-blocks of 256 elements with
 * 16 or 8 scaled sub-blocks), each value computed as gguf-py computes it:
 * the sub-block's scale d * sc first, then times the value, then minus the
 * sub-block's minimum dmin * m (float32, one rounding each). Q8_K (the
 * products' activation type, not in gguf-py) as llama.cpp's
 * dequantize_row_q8_K: d * q. */
#include <string.h>
#include "kernels/half.h"
#include "kernels/quant_blocks.h"

void qkv_dequant_q2_K(const void *src, float *dst, int64_t nb)
{
    const qkv_blk_q2_K *b = src;
    for (int64_t i = 0; i < nb; i++, dst += QKV_QKK) {
        float d = qkv_half_to_float(b[i].d), dmin = qkv_half_to_float(b[i].dmin);
        /* element h 128 + s 32 + l: bits 2s of qs[h 32 + l]; sub-block k = e / 16 */
        for (int k = 0; k < 16; k++) {
            uint8_t sc = b[i].scales[k];
            float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
            const uint8_t *q = b[i].qs + k / 8 * 32 + k % 2 * 16;
            int shift = 2 * (k / 2 % 4);
            for (int l = 0; l < 16; l++) dst[k * 16 + l] = dl * (float)((q[l] >> shift) & 3) - ml;
        }
    }
}

void qkv_dequant_q3_K(const void *src, float *dst, int64_t nb)
{
    const qkv_blk_q3_K *b = src;
    for (int64_t i = 0; i < nb; i++, dst += QKV_QKK) {
        float d = qkv_half_to_float(b[i].d), dl[16];
        const uint8_t *sc = b[i].scales;
        for (int k = 0; k < 16; k++) { /* 6-bit scales: low 4 bits from bytes 0..7, high 2 from 8..11 */
            int lo = k < 8 ? sc[k] & 0xF : sc[k - 8] >> 4, hi = (sc[8 + k % 4] >> (2 * (k / 4))) & 3;
            dl[k] = d * (float)((int8_t)(lo | hi << 4) - 32);
        }
        for (int k = 0; k < 16; k++) { /* element e = 16 k + l: h = e / 128, s = e / 32 % 4, l' = e % 32 */
            const uint8_t *q = b[i].qs + k / 8 * 32 + k % 2 * 16, *hm = b[i].hmask + k % 2 * 16;
            int shift = 2 * (k / 2 % 4), bit = k / 2;
            for (int l = 0; l < 16; l++) {
                int ql = (q[l] >> shift) & 3, qh = (hm[l] >> bit) & 1;
                dst[k * 16 + l] = dl[k] * (float)(ql - ((qh ^ 1) << 2)); /* minus 4 where the mask bit is 0 */
            }
        }
    }
}

/* Q4_K's and Q5_K's: 8 sub-blocks of 32, 4 low bits in qs (sub-block 2c
 * in the low nibbles of qs[32 c ..], 2c + 1 in the high ones) and for Q5_K
 * bit j of qh[l] as bit 4 of sub-block j's element l. */
static void dq_k45(const uint16_t *dd, const uint8_t *scales, const uint8_t *qh, const uint8_t *qs, float *dst)
{
    float d = qkv_half_to_float(dd[0]), dmin = qkv_half_to_float(dd[1]);
    uint8_t sc[8], mn[8];
    qkv_k_scale_min(scales, sc, mn);
    for (int j = 0; j < 8; j++) {
        float dj = d * (float)sc[j], mj = dmin * (float)mn[j];
        for (int l = 0; l < 32; l++) {
            int q = (qs[j / 2 * 32 + l] >> (4 * (j % 2))) & 0xF;
            if (qh) q |= ((qh[l] >> j) & 1) << 4;
            dst[j * 32 + l] = dj * (float)q - mj;
        }
    }
}

void qkv_dequant_q4_K(const void *src, float *dst, int64_t nb)
{
    const qkv_blk_q4_K *b = src;
    for (int64_t i = 0; i < nb; i++) {
        uint16_t dd[2] = {b[i].d, b[i].dmin};
        dq_k45(dd, b[i].scales, NULL, b[i].qs, dst + i * QKV_QKK);
    }
}

void qkv_dequant_q5_K(const void *src, float *dst, int64_t nb)
{
    const qkv_blk_q5_K *b = src;
    for (int64_t i = 0; i < nb; i++) {
        uint16_t dd[2] = {b[i].d, b[i].dmin};
        dq_k45(dd, b[i].scales, b[i].qh, b[i].qs, dst + i * QKV_QKK);
    }
}

void qkv_dequant_q6_K(const void *src, float *dst, int64_t nb)
{
    const qkv_blk_q6_K *b = src;
    for (int64_t i = 0; i < nb; i++, dst += QKV_QKK) {
        float d = qkv_half_to_float(b[i].d);
        /* element h 128 + s 64 + l (l < 64): nibble s of ql[h 64 + l]; its
         * 2 high bits are bits 2 (e / 32 % 4) of qh[h 32 + e % 32] */
        for (int e = 0; e < QKV_QKK; e++) {
            int h = e / 128, s = e / 64 % 2, l = e % 64;
            int lo = (b[i].ql[h * 64 + l] >> (4 * s)) & 0xF, hi = (b[i].qh[h * 32 + e % 32] >> (2 * (e / 32 % 4))) & 3;
            dst[e] = d * (float)b[i].scales[e / 16] * (float)((lo | hi << 4) - 32);
        }
    }
}

void qkv_dequant_q8_K(const void *src, float *dst, int64_t nb)
{
    const qkv_blk_q8_K *b = src;
    for (int64_t i = 0; i < nb; i++, dst += QKV_QKK) {
        float d = b[i].d;
        for (int e = 0; e < QKV_QKK; e++) dst[e] = d * (float)b[i].qs[e];
    }
}
