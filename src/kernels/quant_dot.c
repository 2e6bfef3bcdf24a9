/* quant_dot.c: qkv_qmatvec and qkv_qmatmul (include/qkv/quant.h): x
 * quantized to 8-bit blocks once, then every weight row's blocks dotted
 * with them by the build of the dot products picked for this CPU
 * (quant_dot_simd.h, compiled for AVX2 and for AVX-512 VNNI) or by the
 * portable C ones here, which are the reference: the same integer sums,
 * the float scaling in a plain order. Types without integer dot products
 * (F32, F16, BF16, Q2_K, Q3_K, Q8_K) are widened 256 elements at a time
 * and multiplied in FP32. */
#include <stdlib.h>
#include <string.h>
#include "core/internal.h"
#include "kernels/half.h"
#include "kernels/quant_blocks.h"

/* ---- the portable dot products ------------------------------------------ */

/* A 32-block of type t at b: its codes q (unsigned for the 4- and 5-bit
 * types, Q8_0's signed values), its scale *d and the factor *ow of x's
 * block sum (the codes' offset -8 d or -16 d, or the minimum m). */
static void codes32(qkv_qtype t, const uint8_t *b, int *q, float *d, float *ow)
{
    uint16_t h[2];
    memcpy(h, b, 4);
    *d = qkv_half_to_float(h[0]);
    int with_m = t == QKV_Q_Q4_1 || t == QKV_Q_Q5_1;
    *ow = with_m ? qkv_half_to_float(h[1]) : t == QKV_Q_Q4_0 ? -8 * *d : t == QKV_Q_Q5_0 ? -16 * *d : 0;
    const uint8_t *p = b + 2 + 2 * with_m;
    if (t == QKV_Q_Q8_0)
        for (int j = 0; j < 32; j++) q[j] = (int8_t)p[j];
    else if (t == QKV_Q_Q5_0 || t == QKV_Q_Q5_1)
        qkv_q5_codes(p, p + 4, q);
    else
        for (int j = 0; j < 16; j++) {
            q[j] = p[j] & 0xF;
            q[j + 16] = p[j] >> 4;
        }
}

/* sum_b d_b dx_b (q . x)_b + ow_b s_b over nb blocks of type t. */
static float pdot32(qkv_qtype t, const void *w, const void *xq, int64_t nb)
{
    const uint8_t *b = w;
    const qkv_act32 *a = xq;
    int bytes = qkv_qtype_block_bytes(t), q[32];
    float acc = 0, d, ow;
    for (int64_t i = 0; i < nb; i++) {
        codes32(t, b + i * bytes, q, &d, &ow);
        int s = 0;
        for (int j = 0; j < 32; j++) s += q[j] * a[i].qs[j];
        acc += d * a[i].d * (float)s + ow * a[i].s;
    }
    return acc;
}

static float pdot_q4_0(const void *w, const void *xq, int64_t nb) { return pdot32(QKV_Q_Q4_0, w, xq, nb); }
static float pdot_q4_1(const void *w, const void *xq, int64_t nb) { return pdot32(QKV_Q_Q4_1, w, xq, nb); }
static float pdot_q5_0(const void *w, const void *xq, int64_t nb) { return pdot32(QKV_Q_Q5_0, w, xq, nb); }
static float pdot_q5_1(const void *w, const void *xq, int64_t nb) { return pdot32(QKV_Q_Q5_1, w, xq, nb); }
static float pdot_q8_0(const void *w, const void *xq, int64_t nb) { return pdot32(QKV_Q_Q8_0, w, xq, nb); }

/* Q4_K and Q5_K against Q8_K: d sum_j sc_j (q . x)_j - dmin sum_j m_j sum(x)_j. */
static float pdot_k45(const uint16_t *dd, const uint8_t *scales, const uint8_t *qh, const uint8_t *qs,
                      const qkv_blk_q8_K *a)
{
    uint8_t sc[8], mn[8];
    qkv_k_scale_min(scales, sc, mn);
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; j++) {
        int s = 0;
        for (int l = 0; l < 32; l++) {
            int q = (qs[j / 2 * 32 + l] >> (4 * (j % 2))) & 0xF;
            if (qh) q |= ((qh[l] >> j) & 1) << 4;
            s += q * a->qs[j * 32 + l];
        }
        sumi += sc[j] * s;
        summ += mn[j] * (a->bsums[2 * j] + a->bsums[2 * j + 1]);
    }
    return qkv_half_to_float(dd[0]) * a->d * (float)sumi - qkv_half_to_float(dd[1]) * a->d * (float)summ;
}

static float pdot_q4_K(const void *w, const void *xq, int64_t nb)
{
    const qkv_blk_q4_K *b = w;
    const qkv_blk_q8_K *a = xq;
    float acc = 0;
    for (int64_t i = 0; i < nb; i++) {
        uint16_t dd[2] = {b[i].d, b[i].dmin};
        acc += pdot_k45(dd, b[i].scales, NULL, b[i].qs, &a[i]);
    }
    return acc;
}

static float pdot_q5_K(const void *w, const void *xq, int64_t nb)
{
    const qkv_blk_q5_K *b = w;
    const qkv_blk_q8_K *a = xq;
    float acc = 0;
    for (int64_t i = 0; i < nb; i++) {
        uint16_t dd[2] = {b[i].d, b[i].dmin};
        acc += pdot_k45(dd, b[i].scales, b[i].qh, b[i].qs, &a[i]);
    }
    return acc;
}

static float pdot_q6_K(const void *w, const void *xq, int64_t nb)
{
    const qkv_blk_q6_K *b = w;
    const qkv_blk_q8_K *a = xq;
    float acc = 0;
    for (int64_t i = 0; i < nb; i++) {
        int sumi = 0;
        for (int k = 0; k < 16; k++) {
            int s = 0;
            for (int e = k * 16; e < k * 16 + 16; e++) {
                int h = e / 128, l = e % 64;
                int lo = (b[i].ql[h * 64 + l] >> (4 * (e / 64 % 2))) & 0xF;
                int hi = (b[i].qh[h * 32 + e % 32] >> (2 * (e / 32 % 4))) & 3;
                s += ((lo | hi << 4) - 32) * a[i].qs[e];
            }
            sumi += b[i].scales[k] * s;
        }
        acc += qkv_half_to_float(b[i].d) * a[i].d * (float)sumi;
    }
    return acc;
}

const qkv_qdot_set qkv_qdot_portable = {
    "portable", {pdot_q4_0, pdot_q4_1, pdot_q5_0, pdot_q5_1, pdot_q8_0, pdot_q4_K, pdot_q5_K, pdot_q6_K}, {NULL}};

/* ---- picking a build ------------------------------------------------------ */

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
/* F16C from CPUID leaf 1 (clang 14's __builtin_cpu_supports has no "f16c"). */
static int cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

static int set_runs(const qkv_qdot_set *s)
{
    if (!s->one[0]) return 0;
#if defined(__x86_64__) || defined(__i386__)
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    if (s == &qkv_qdot_avx2) return avx2;
    if (s == &qkv_qdot_vnni)
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
#endif
    return s == &qkv_qdot_portable;
}

static const qkv_qdot_set *const qdot_all[] = {&qkv_qdot_vnni, &qkv_qdot_avx2, &qkv_qdot_portable, NULL};
static const qkv_qdot_set *qdot_forced;

static const qkv_qdot_set *qdot_current(void)
{
    if (qkv_reference()) return &qkv_qdot_portable;
    if (qdot_forced) return qdot_forced;
    for (int i = 0; qdot_all[i]; i++)
        if (set_runs(qdot_all[i])) return qdot_all[i];
    return &qkv_qdot_portable;
}

const char *qkv_quant_isa(void) { return qdot_current()->name; }

int qkv_quant_force_isa(const char *name)
{
    if (!name) {
        qdot_forced = NULL;
        return 1;
    }
    for (int i = 0; qdot_all[i]; i++)
        if (!strcmp(name, qdot_all[i]->name) && set_runs(qdot_all[i])) {
            qdot_forced = qdot_all[i];
            return 1;
        }
    return 0;
}

/* ---- the products ----------------------------------------------------------- */

/* How a type's rows are multiplied: the dot of set s (x as activation
 * blocks of 32 or as Q8_K), or widened (FP32). */
typedef enum { ACT_FP32, ACT_32, ACT_K } act_kind;

/* The entry of type t in a set (-1: none, the FP32 path). */
static int dot_index(qkv_qtype t, act_kind *k)
{
    *k = ACT_32;
    switch (t) {
    case QKV_Q_Q4_0: return QKV_QD_Q4_0;
    case QKV_Q_Q4_1: return QKV_QD_Q4_1;
    case QKV_Q_Q5_0: return QKV_QD_Q5_0;
    case QKV_Q_Q5_1: return QKV_QD_Q5_1;
    case QKV_Q_Q8_0: return QKV_QD_Q8_0;
    default: break;
    }
    *k = ACT_K;
    switch (t) {
    case QKV_Q_Q4_K: return QKV_QD_Q4_K;
    case QKV_Q_Q5_K: return QKV_QD_Q5_K;
    case QKV_Q_Q6_K: return QKV_QD_Q6_K;
    default: break;
    }
    *k = ACT_FP32;
    return -1;
}

/* One row w (cols elements of a type without integer dots) times x:
 * widened 256 at a time, 8 running sums. */
static float fp32_row(qkv_dequant_fn dq, int64_t blk, int64_t bytes, const uint8_t *w, const float *x,
                      int64_t cols)
{
    float buf[QKV_QKK], acc[8] = {0};
    for (int64_t c0 = 0; c0 < cols; c0 += QKV_QKK) {
        int64_t len = cols - c0 < QKV_QKK ? cols - c0 : QKV_QKK;
        dq(w + c0 / blk * bytes, buf, len / blk);
        int64_t i = 0;
        for (; i + 8 <= len; i += 8)
            for (int k = 0; k < 8; k++) acc[k] += buf[i + k] * x[c0 + i + k];
        for (; i < len; i++) acc[0] += buf[i] * x[c0 + i];
    }
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

#define QMAT_TILE 16 /* weight rows a task takes: read once for all n rows of X */

static qkv_status qmat(const char *fn, qkv_qtype t, const void *W, int64_t rows, int64_t cols, const float *X,
                       int64_t n, float *Y)
{
    qkv_dequant_fn dq = qkv_dequant_for(t);
    if (!dq) return qkv_fail(QKV_ERR_DTYPE, "%s: type %s (%d) is not supported", fn, qkv_qtype_name(t), (int)t);
    int64_t blk = qkv_qtype_block_elems(t), bytes = qkv_qtype_block_bytes(t);
    if (rows < 0 || cols < 0 || n < 0)
        return qkv_fail(QKV_ERR_SHAPE, "%s: negative size (rows %lld, cols %lld, n %lld)", fn, (long long)rows,
                        (long long)cols, (long long)n);
    if (cols % blk)
        return qkv_fail(QKV_ERR_SHAPE, "%s: cols %lld of %s are not whole blocks of %lld", fn, (long long)cols,
                        qkv_qtype_name(t), (long long)blk);
    if (cols && (rows > INT64_MAX / cols || (n && rows * cols > INT64_MAX / n)))
        return qkv_fail(QKV_ERR_SHAPE, "%s: %lld x %lld x %lld elements overflow", fn, (long long)rows,
                        (long long)cols, (long long)n);
    QKV_NEED(W, fn, "W");
    QKV_NEED(X, fn, "x");
    QKV_NEED(Y, fn, "y");
    if (rows == 0 || n == 0) return QKV_OK;
    if (cols == 0) {
        memset(Y, 0, (size_t)(rows * n) * sizeof(float));
        return QKV_OK;
    }
    act_kind kind;
    const qkv_qdot_set *set = qdot_current();
    int di = dot_index(t, &kind);
    qkv_qdot_fn dot = di >= 0 ? set->one[di] : NULL;
    qkv_qdot4_fn dot4 = di >= 0 ? set->four[di] : NULL;
    int64_t nb = cols / blk, rb = nb * bytes;
    size_t ab = kind == ACT_32 ? sizeof(qkv_act32) * (size_t)(cols / QKV_QK)
                : kind == ACT_K ? sizeof(qkv_blk_q8_K) * (size_t)(cols / QKV_QKK) : 0;
    uint8_t *xq = ab ? malloc(ab * (size_t)n) : NULL;
    if (ab && !xq) return qkv_fail(QKV_ERR_NOMEM, "%s: no memory for %lld quantized rows of x", fn, (long long)n);
    if (ab)
        QKV_PAR_FOR(n * cols >= QKV_PAR_MIN, for (int64_t j = 0; j < n; j++) {
            if (kind == ACT_32)
                qkv_act32_quantize(X + j * cols, (qkv_act32 *)(xq + j * ab), cols / QKV_QK);
            else
                qkv_q8_K_quantize(X + j * cols, (qkv_blk_q8_K *)(xq + j * ab), cols / QKV_QKK);
        });
    const uint8_t *w = W;
    QKV_PAR_FOR(rows * cols * n >= 4 * QKV_PAR_MIN, for (int64_t r0 = 0; r0 < rows; r0 += QMAT_TILE) {
        int64_t r1 = r0 + QMAT_TILE < rows ? r0 + QMAT_TILE : rows;
        int64_t j = 0;
        for (; dot4 && j + 4 <= n; j += 4) /* 4 rows of X for each weight row decoded */
            for (int64_t r = r0; r < r1; r++) {
                float o[4];
                dot4(w + r * rb, xq + j * ab, ab, nb, o);
                for (int q = 0; q < 4; q++) Y[(j + q) * rows + r] = o[q];
            }
        for (; j < n; j++)
            for (int64_t r = r0; r < r1; r++)
                Y[j * rows + r] = dot ? dot(w + r * rb, xq + j * ab, nb)
                                      : fp32_row(dq, blk, bytes, w + r * rb, X + j * cols, cols);
    });
    free(xq);
    return QKV_OK;
}

qkv_status qkv_qmatvec(qkv_qtype t, const void *W, int64_t rows, int64_t cols, const float *x, float *y)
{
    return qmat("qkv_qmatvec", t, W, rows, cols, x, 1, y);
}

qkv_status qkv_qmatmul(qkv_qtype t, const void *W, int64_t rows, int64_t cols, const float *X, int64_t n, float *Y)
{
    return qmat("qkv_qmatmul", t, W, rows, cols, X, n, Y);
}
