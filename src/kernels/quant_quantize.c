/* quant_quantize.c: qkv_quantize (include/qkv/quant.h), the bytes of
 * llama.cpp's reference quantizers (ggml-quants.c, quantize_row_*_ref):
 * the same float32 operations in the same order, the same truncations
 * (C's float-to-integer conversion) and roundings (roundf, or the
 * 1.5 * 2^23 trick of Q8_K's nearest_int); gguf-py's numpy versions are
 * the same. Also the products' activation blocks (quant_blocks.h). */
#include <math.h>
#include <string.h>
#include "core/internal.h"
#include "kernels/half.h"
#include "kernels/quant_blocks.h"

static void q_f32(const float *x, void *y, int64_t nb) { memcpy(y, x, (size_t)nb * sizeof(float)); }

static void q_f16(const float *x, void *y, int64_t nb)
{
    uint8_t *o = y;
    for (int64_t i = 0; i < nb; i++) {
        uint16_t h = qkv_half_from_float(x[i]);
        memcpy(o + 2 * i, &h, 2);
    }
}

/* ggml_compute_fp32_to_bf16: NaN made quiet keeping its sign and top
 * payload bits, else rounded to nearest even. */
static void q_bf16(const float *x, void *y, int64_t nb)
{
    uint8_t *o = y;
    for (int64_t i = 0; i < nb; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        uint16_t h = (u & 0x7fffffff) > 0x7f800000 ? (uint16_t)((u >> 16) | 64)
                                                    : (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
        memcpy(o + 2 * i, &h, 2);
    }
}

/* The element of largest magnitude (the first of equals), and min / max. */
static float absmax_signed(const float *x)
{
    float amax = 0, max = 0;
    for (int j = 0; j < QKV_QK; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    return max;
}

static void min_max(const float *x, float *mn, float *mx)
{
    float lo = 3.40282347e38f, hi = -3.40282347e38f;
    for (int j = 0; j < QKV_QK; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

static void q_q4_0(const float *x, void *y, int64_t nb)
{
    qkv_blk_q4_0 *b = y;
    for (int64_t i = 0; i < nb; i++, x += QKV_QK) {
        float d = absmax_signed(x) / -8, id = d ? 1.0f / d : 0.0f;
        b[i].d = qkv_half_from_float(d);
        for (int j = 0; j < 16; j++) {
            int8_t q0 = (int8_t)(x[j] * id + 8.5f), q1 = (int8_t)(x[j + 16] * id + 8.5f);
            b[i].qs[j] = (uint8_t)((q0 < 15 ? q0 : 15) | (q1 < 15 ? q1 : 15) << 4);
        }
    }
}

static void q_q4_1(const float *x, void *y, int64_t nb)
{
    qkv_blk_q4_1 *b = y;
    for (int64_t i = 0; i < nb; i++, x += QKV_QK) {
        float mn, mx;
        min_max(x, &mn, &mx);
        float d = (mx - mn) / 15, id = d ? 1.0f / d : 0.0f;
        b[i].d = qkv_half_from_float(d);
        b[i].m = qkv_half_from_float(mn);
        for (int j = 0; j < 16; j++) {
            int8_t q0 = (int8_t)((x[j] - mn) * id + 0.5f), q1 = (int8_t)((x[j + 16] - mn) * id + 0.5f);
            b[i].qs[j] = (uint8_t)((q0 < 15 ? q0 : 15) | (q1 < 15 ? q1 : 15) << 4);
        }
    }
}

/* A Q5 block's low nibbles and high bits from its 32 values 0..31. */
static void q5_pack(const uint8_t *q, uint8_t *qh4, uint8_t *qs)
{
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0xF) | (q[j + 16] & 0xF) << 4);
        qh |= (uint32_t)((q[j] & 0x10) >> 4) << j;
        qh |= (uint32_t)((q[j + 16] & 0x10) >> 4) << (j + 16);
    }
    memcpy(qh4, &qh, 4);
}

static void q_q5_0(const float *x, void *y, int64_t nb)
{
    qkv_blk_q5_0 *b = y;
    for (int64_t i = 0; i < nb; i++, x += QKV_QK) {
        float d = absmax_signed(x) / -16, id = d ? 1.0f / d : 0.0f;
        uint8_t q[32];
        for (int j = 0; j < 32; j++) {
            int8_t v = (int8_t)(x[j] * id + 16.5f);
            q[j] = (uint8_t)(v < 31 ? v : 31);
        }
        b[i].d = qkv_half_from_float(d);
        q5_pack(q, b[i].qh, b[i].qs);
    }
}

static void q_q5_1(const float *x, void *y, int64_t nb)
{
    qkv_blk_q5_1 *b = y;
    for (int64_t i = 0; i < nb; i++, x += QKV_QK) {
        float mn, mx;
        min_max(x, &mn, &mx);
        float d = (mx - mn) / 31, id = d ? 1.0f / d : 0.0f;
        uint8_t q[32];
        for (int j = 0; j < 32; j++) q[j] = (uint8_t)((x[j] - mn) * id + 0.5f); /* no clamp, as in ggml */
        b[i].d = qkv_half_from_float(d);
        b[i].m = qkv_half_from_float(mn);
        q5_pack(q, b[i].qh, b[i].qs);
    }
}

static void q_q8_0(const float *x, void *y, int64_t nb)
{
    qkv_blk_q8_0 *b = y;
    for (int64_t i = 0; i < nb; i++, x += QKV_QK) {
        float amax = 0;
        for (int j = 0; j < QKV_QK; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
        float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        b[i].d = qkv_half_from_float(d);
        for (int j = 0; j < QKV_QK; j++) b[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

/* ggml's nearest_int: round to nearest even through the float adder. */
static inline int nearest_int(float v)
{
    float f = v + 12582912.f;
    int32_t i;
    memcpy(&i, &f, 4);
    return (i & 0x007fffff) - 0x00400000;
}

void qkv_q8_K_quantize(const float *x, qkv_blk_q8_K *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QKV_QKK) {
        float amax = 0, max = 0;
        for (int j = 0; j < QKV_QKK; j++)
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        memset(&y[i], 0, sizeof y[i]);
        if (!amax) continue;
        float iscale = -127.f / max;
        for (int j = 0; j < QKV_QKK; j++) {
            int v = nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int k = 0; k < 16; k++) s += y[i].qs[j * 16 + k];
            y[i].bsums[j] = (int16_t)s;
        }
        y[i].d = 1 / iscale;
    }
}

static void q_q8_K(const float *x, void *y, int64_t nb) { qkv_q8_K_quantize(x, y, nb); }

void qkv_act32_quantize(const float *x, qkv_act32 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QKV_QK) {
        float amax = 0;
        for (int j = 0; j < QKV_QK; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
        float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        int s = 0;
        for (int j = 0; j < QKV_QK; j++) {
            y[i].qs[j] = (int8_t)nearest_int(x[j] * id);
            s += y[i].qs[j];
        }
        y[i].d = d;
        y[i].s = d * (float)s;
    }
}

typedef void (*quant_fn)(const float *x, void *y, int64_t nb);

static quant_fn quant_for(qkv_qtype t)
{
    switch (t) {
    case QKV_Q_F32: return q_f32;
    case QKV_Q_F16: return q_f16;
    case QKV_Q_BF16: return q_bf16;
    case QKV_Q_Q4_0: return q_q4_0;
    case QKV_Q_Q4_1: return q_q4_1;
    case QKV_Q_Q5_0: return q_q5_0;
    case QKV_Q_Q5_1: return q_q5_1;
    case QKV_Q_Q8_0: return q_q8_0;
    case QKV_Q_Q8_K: return q_q8_K;
    default: return NULL;
    }
}

int qkv_qtype_can_quantize(qkv_qtype t) { return quant_for(t) != NULL; }

qkv_status qkv_quantize(qkv_qtype t, const float *src, void *dst, int64_t n)
{
    static const char *fn = "qkv_quantize";
    quant_fn f = quant_for(t);
    if (!f)
        return qkv_fail(QKV_ERR_DTYPE, "%s: quantizing to %s (%d) is not supported", fn, qkv_qtype_name(t), (int)t);
    int64_t blk = qkv_qtype_block_elems(t), bytes = qkv_qtype_block_bytes(t);
    if (n < 0 || n % blk)
        return qkv_fail(QKV_ERR_SHAPE, "%s: %lld elements are not whole blocks of %lld for %s", fn, (long long)n,
                        (long long)blk, qkv_qtype_name(t));
    if (n == 0) return QKV_OK;
    QKV_NEED(src, fn, "src");
    QKV_NEED(dst, fn, "dst");
    int64_t nb = n / blk, chunk = blk == 1 ? 4096 : 4096 / blk;
    uint8_t *o = dst;
    QKV_PAR_FOR(n >= 4 * QKV_PAR_MIN, for (int64_t b0 = 0; b0 < nb; b0 += chunk) {
        int64_t k = nb - b0 < chunk ? nb - b0 : chunk;
        f(src + b0 * blk, o + b0 * bytes, k);
    });
    return QKV_OK;
}
