/* matvec.c: x W^T for a few rows x (matvec.h), with bf16 weights or FP32. A decoding step
 * multiplies one row per sequence by every weight matrix of the model: the
 * time is the weights' bytes over memory bandwidth, so the loops read each
 * weight row once for up to 4 rows of x (4 accumulators per weight row,
 * 4 weight rows at a time for independent chains), and convert bf16 to
 * floats by a shift (bf16 is the top half of a float). One row of x (a
 * batch of one) reads the weights' rows one after the other, 4 chains
 * along each: a single stream of memory per thread, which halved the
 * time of a 6-layer d_model 512 decoding step over the 4 weight rows
 * side by side (docs/bf16_decode.md). */
#include <omp.h>
#include <string.h>
#include "core/internal.h"
#include "kernels/attention.h"
#include "kernels/half.h"
#include "kernels/matvec.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { XR = 4, WR = 4 }; /* rows of x and of W per block */

/* y[r*ys + o] += x_r . w_o over in, for r < nx rows of x (xs floats
 * apart) and o in [o0, o1): the reference, in double. */
static void rows_ref(const float *x, int64_t xs, int64_t nx, const uint16_t *w, int64_t in,
                     int64_t o0, int64_t o1, float *y, int64_t ys)
{
    for (int64_t o = o0; o < o1; o++)
        for (int64_t r = 0; r < nx; r++) {
            double s = 0;
            for (int64_t i = 0; i < in; i++) s += (double)x[r * xs + i] * qkv_bf16_to_float(w[o * in + i]);
            y[r * ys + o] += (float)s;
        }
}

/* The same in portable C (float sums, 4 weight rows at a time). */
static void rows_c(const float *x, int64_t xs, int64_t nx, const uint16_t *w, int64_t in,
                   int64_t o0, int64_t o1, float *y, int64_t ys)
{
    for (int64_t r = 0; r < nx; r++)
        for (int64_t o = o0; o < o1; o++) {
            float s = 0;
            for (int64_t i = 0; i < in; i++) s += x[r * xs + i] * qkv_bf16_to_float(w[o * in + i]);
            y[r * ys + o] += s;
        }
}

#if defined(__AVX2__) && defined(__FMA__)
static inline __m256 load8_bf16(const uint16_t *p)
{
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline float sum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* AVX2: 8 lanes; WR weight rows per pass, the tail of in in C. */
static void rows_avx2(const float *x, int64_t xs, int64_t nx, const uint16_t *w, int64_t in,
                      int64_t o0, int64_t o1, float *y, int64_t ys)
{
    int64_t in8 = in / 8 * 8, o = o0;
    for (; o + WR <= o1; o += WR)
        for (int64_t r = 0; r < nx; r++) {
            const float *xr = x + r * xs; // (in)
            __m256 a[WR];
            for (int k = 0; k < WR; k++) a[k] = _mm256_setzero_ps();
            for (int64_t i = 0; i < in8; i += 8) {
                __m256 xv = _mm256_loadu_ps(xr + i);
                for (int k = 0; k < WR; k++)
                    a[k] = _mm256_fmadd_ps(xv, load8_bf16(w + (o + k) * in + i), a[k]);
            }
            for (int k = 0; k < WR; k++) {
                float s = sum8(a[k]);
                for (int64_t i = in8; i < in; i++) s += xr[i] * qkv_bf16_to_float(w[(o + k) * in + i]);
                y[r * ys + o + k] += s;
            }
        }
    rows_c(x, xs, nx, w, in, o, o1, y, ys);
}
#endif

#if defined(__x86_64__)
#define WIDE __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
WIDE static inline __m512 load16_bf16(const uint16_t *p)
{
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* x . w over in (a multiple of 64) floats, w bf16 (bf16 set) or FP32:
 * four chains of 16 lanes along the row. */
WIDE static inline __attribute__((always_inline)) float dot_row(const float *x, const void *w, int bf16,
                                                                 int64_t in)
{
    const uint16_t *wh = w;
    const float *wf = w;
    __m512 a[4];
    for (int k = 0; k < 4; k++) a[k] = _mm512_setzero_ps();
    for (int64_t i = 0; i < in; i += 64)
        for (int k = 0; k < 4; k++) {
            int64_t j = i + 16 * k;
            __m512 wv = bf16 ? load16_bf16(wh + j) : _mm512_loadu_ps(wf + j);
            a[k] = _mm512_fmadd_ps(_mm512_loadu_ps(x + j), wv, a[k]);
        }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}

WIDE static void row_f32_avx512(int64_t out, int64_t in, const float *x, const float *w, int64_t ldw,
                                float alpha, float beta, float *y)
{
    for (int64_t o = 0; o < out; o++) {
        float d = alpha * dot_row(x, w + o * ldw, 0, in);
        y[o] = beta == 0.0f ? d : d + beta * y[o];
    }
}

/* AVX-512: 16 lanes; WR weight rows per pass, the tail of in in C. */
WIDE static void rows_avx512(const float *x, int64_t xs, int64_t nx, const uint16_t *w, int64_t in,
                             int64_t o0, int64_t o1, float *y, int64_t ys)
{
    int64_t in16 = in / 16 * 16, o = o0;
    if (nx == 1 && in % 64 == 0) { /* one row of x: the weights' rows one after the other, one stream */
        for (; o < o1; o++) y[o] += dot_row(x, w + o * in, 1, in);
        return;
    }
    for (; o + WR <= o1; o += WR)
        for (int64_t r = 0; r < nx; r++) {
            const float *xr = x + r * xs; // (in)
            __m512 a[WR];
            for (int k = 0; k < WR; k++) a[k] = _mm512_setzero_ps();
            for (int64_t i = 0; i < in16; i += 16) {
                __m512 xv = _mm512_loadu_ps(xr + i);
                for (int k = 0; k < WR; k++)
                    a[k] = _mm512_fmadd_ps(xv, load16_bf16(w + (o + k) * in + i), a[k]);
            }
            for (int k = 0; k < WR; k++) {
                float s = _mm512_reduce_add_ps(a[k]);
                for (int64_t i = in16; i < in; i++) s += xr[i] * qkv_bf16_to_float(w[(o + k) * in + i]);
                y[r * ys + o + k] += s;
            }
        }
    for (; o < o1; o++) /* the last rows one at a time */
        for (int64_t r = 0; r < nx; r++) {
            __m512 a = _mm512_setzero_ps();
            for (int64_t i = 0; i < in16; i += 16)
                a = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * xs + i), load16_bf16(w + o * in + i), a);
            float s = _mm512_reduce_add_ps(a);
            for (int64_t i = in16; i < in; i++) s += x[r * xs + i] * qkv_bf16_to_float(w[o * in + i]);
            y[r * ys + o] += s;
        }
}
#endif

typedef void (*rows_fn)(const float *x, int64_t xs, int64_t nx, const uint16_t *w, int64_t in,
                        int64_t o0, int64_t o1, float *y, int64_t ys);

static rows_fn rows_pick(void)
{
    if (qkv_reference()) return rows_ref;
#if defined(__x86_64__)
    if (!strcmp(qkv_attn_simd_current()->name, "avx512")) return rows_avx512;
#endif
#if defined(__AVX2__) && defined(__FMA__)
    return rows_avx2;
#else
    return rows_c;
#endif
}

void qkv_matvec_bf16(int64_t M, int64_t out, int64_t in, const float *x, const uint16_t *w,
                     float *y)
{
    rows_fn f = rows_pick();
    int64_t nb = (out + 63) / 64; /* blocks of 64 weight rows shared out */
    int par = M * out * in >= QKV_PAR_MIN && !omp_in_parallel();
    for (int64_t r0 = 0; r0 < M; r0 += XR) {
        int64_t nx = M - r0 < XR ? M - r0 : XR;
        QKV_PAR_FOR_WITH(par, schedule(static),
            for (int64_t b = 0; b < nb; b++) {
                int64_t o0 = b * 64, o1 = o0 + 64 < out ? o0 + 64 : out;
                f(x + r0 * in, in, nx, w, in, o0, o1, y + r0 * out, out);
            });
    }
}

int qkv_matvec_row_f32(int64_t out, int64_t in, const float *x, const float *w, int64_t ldw, float alpha,
                       float beta, float *y)
{
#if defined(__x86_64__)
    if (in > 0 && in % 64 == 0 && !qkv_reference() && !strcmp(qkv_attn_simd_current()->name, "avx512")) {
        row_f32_avx512(out, in, x, w, ldw, alpha, beta, y);
        return 1;
    }
#endif
    (void)out, (void)x, (void)w, (void)ldw, (void)alpha, (void)beta, (void)y;
    return 0;
}
