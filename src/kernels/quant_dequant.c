/* quant_dequant.c: qkv_dequantize (include/qkv/quant.h): the floating-point
 * types and the blocks of 32 here, the K-quants in quant_k.c. Each value
 * is computed as gguf-py's numpy code computes it (float32 products and
 * sums, one rounding each, in its order: d * q + m, not a fused
 * multiply-add; the library is built in ISO C mode, which does not
 * contract them), so the results are the same bits. */
#include <string.h>
#include "core/internal.h"
#include "kernels/half.h"
#include "kernels/quant_blocks.h"

static void dq_f32(const void *src, float *dst, int64_t nb) { memcpy(dst, src, (size_t)nb * sizeof(float)); }
static void dq_f16(const void *src, float *dst, int64_t nb) { qkv_half_to_floats(src, dst, nb); }

static void dq_bf16(const void *src, float *dst, int64_t nb)
{
    const uint8_t *p = src;
    for (int64_t i = 0; i < nb; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = qkv_bf16_to_float(h);
    }
}

static void dq_q4_0(const void *src, float *dst, int64_t nb)
{
    const qkv_blk_q4_0 *b = src;
    for (int64_t i = 0; i < nb; i++, dst += QKV_QK) {
        float d = qkv_half_to_float(b[i].d);
        for (int j = 0; j < 16; j++) {
            dst[j] = d * (float)((b[i].qs[j] & 0xF) - 8);
            dst[j + 16] = d * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}

static void dq_q4_1(const void *src, float *dst, int64_t nb)
{
    const qkv_blk_q4_1 *b = src;
    for (int64_t i = 0; i < nb; i++, dst += QKV_QK) {
        float d = qkv_half_to_float(b[i].d), m = qkv_half_to_float(b[i].m);
        for (int j = 0; j < 16; j++) {
            dst[j] = d * (float)(b[i].qs[j] & 0xF) + m;
            dst[j + 16] = d * (float)(b[i].qs[j] >> 4) + m;
        }
    }
}

static void dq_q5_0(const void *src, float *dst, int64_t nb)
{
    const qkv_blk_q5_0 *b = src;
    for (int64_t i = 0; i < nb; i++, dst += QKV_QK) {
        float d = qkv_half_to_float(b[i].d);
        int q[32];
        qkv_q5_codes(b[i].qh, b[i].qs, q);
        for (int j = 0; j < 32; j++) dst[j] = d * (float)(q[j] - 16);
    }
}

static void dq_q5_1(const void *src, float *dst, int64_t nb)
{
    const qkv_blk_q5_1 *b = src;
    for (int64_t i = 0; i < nb; i++, dst += QKV_QK) {
        float d = qkv_half_to_float(b[i].d), m = qkv_half_to_float(b[i].m);
        int q[32];
        qkv_q5_codes(b[i].qh, b[i].qs, q);
        for (int j = 0; j < 32; j++) dst[j] = d * (float)q[j] + m;
    }
}

static void dq_q8_0(const void *src, float *dst, int64_t nb)
{
    const qkv_blk_q8_0 *b = src;
    for (int64_t i = 0; i < nb; i++, dst += QKV_QK) {
        float d = qkv_half_to_float(b[i].d);
        for (int j = 0; j < 32; j++) dst[j] = (float)b[i].qs[j] * d;
    }
}

qkv_dequant_fn qkv_dequant_for(qkv_qtype t)
{
    switch (t) {
    case QKV_Q_F32: return dq_f32;
    case QKV_Q_F16: return dq_f16;
    case QKV_Q_BF16: return dq_bf16;
    case QKV_Q_Q4_0: return dq_q4_0;
    case QKV_Q_Q4_1: return dq_q4_1;
    case QKV_Q_Q5_0: return dq_q5_0;
    case QKV_Q_Q5_1: return dq_q5_1;
    case QKV_Q_Q8_0: return dq_q8_0;
    case QKV_Q_Q2_K: return qkv_dequant_q2_K;
    case QKV_Q_Q3_K: return qkv_dequant_q3_K;
    case QKV_Q_Q4_K: return qkv_dequant_q4_K;
    case QKV_Q_Q5_K: return qkv_dequant_q5_K;
    case QKV_Q_Q6_K: return qkv_dequant_q6_K;
    case QKV_Q_Q8_K: return qkv_dequant_q8_K;
    default: return NULL;
    }
}

int qkv_qtype_can_dequantize(qkv_qtype t) { return qkv_dequant_for(t) != NULL; }

qkv_status qkv_dequantize(qkv_qtype t, const void *src, float *dst, int64_t n)
{
    static const char *fn = "qkv_dequantize";
    qkv_dequant_fn f = qkv_dequant_for(t);
    if (!f)
        return qkv_fail(QKV_ERR_DTYPE, "%s: type %s (%d) is not supported", fn, qkv_qtype_name(t), (int)t);
    int64_t blk = qkv_qtype_block_elems(t), bytes = qkv_qtype_block_bytes(t);
    if (n < 0 || n % blk)
        return qkv_fail(QKV_ERR_SHAPE, "%s: %lld elements of %s are not whole blocks of %lld", fn, (long long)n,
                        qkv_qtype_name(t), (long long)blk);
    if (n == 0) return QKV_OK;
    QKV_NEED(src, fn, "src");
    QKV_NEED(dst, fn, "dst");
    int64_t nb = n / blk, chunk = blk == 1 ? 4096 : 4096 / blk; /* blocks per task */
    const uint8_t *s = src;
    QKV_PAR_FOR(n >= 4 * QKV_PAR_MIN, for (int64_t b0 = 0; b0 < nb; b0 += chunk) {
        int64_t k = nb - b0 < chunk ? nb - b0 : chunk;
        f(s + b0 * bytes, dst + b0 * blk, k);
    });
    return QKV_OK;
}
