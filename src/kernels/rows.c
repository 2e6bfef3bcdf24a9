/* rows.c: row loops shared by several ops (rows.h). */
#include <math.h>
#include <string.h>
#include "core/internal.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/ce_rows.h"
#include "kernels/rows.h"
#include "kernels/vmath.h"

/* Columns go to threads in blocks of this many, so each thread sums whole
 * columns in row order. */
enum { COLS = 64 };

/* Narrow matrices (one column block: a ViT's 64-wide bias gradients over
 * 6,400 rows ran on one thread) are summed by chunks of rows instead: at
 * most SUM_CHUNKS chunks, each summed in row order on some thread, then the
 * chunks added in order, so the result depends on the shape only. */
enum { SUM_CHUNKS = 32, SUM_CHUNK_MIN = 128 };

void qkv_rows_sum_into(float *acc, const float *x, int64_t rows, int64_t n)
{
    int64_t nblk = (n + COLS - 1) / COLS;
    int64_t nch = rows / SUM_CHUNK_MIN < SUM_CHUNKS ? rows / SUM_CHUNK_MIN : SUM_CHUNKS;
    if (nblk == 1 && nch > 1 && rows * n >= QKV_PAR_MIN && !qkv_reference()) {
        float part[SUM_CHUNKS][COLS]; /* n <= COLS */
        int64_t len = (rows + nch - 1) / nch;
#pragma omp parallel for
        for (int64_t k = 0; k < nch; k++) {
            for (int64_t j = 0; j < n; j++) part[k][j] = 0.0f;
            for (int64_t r = k * len; r < rows && r < (k + 1) * len; r++)
                for (int64_t j = 0; j < n; j++) part[k][j] += x[r * n + j];
        }
        for (int64_t k = 0; k < nch; k++)
            for (int64_t j = 0; j < n; j++) acc[j] += part[k][j];
        return;
    }
    QKV_PAR_FOR(rows * n >= QKV_PAR_MIN && nblk > 1,
        for (int64_t b = 0; b < nblk; b++) {
            int64_t j0 = b * COLS, j1 = j0 + COLS < n ? j0 + COLS : n;
            /* the block's sums in a local array (acc might alias x, so sums
             * kept in acc went to memory and back at every row), the same
             * additions in the same order */
            float loc[COLS];
            for (int64_t j = j0; j < j1; j++) loc[j - j0] = acc[j];
            for (int64_t r = 0; r < rows; r++)
                for (int64_t j = j0; j < j1; j++) loc[j - j0] += x[r * n + j];
            for (int64_t j = j0; j < j1; j++) acc[j] = loc[j - j0];
        });
}

/* One row's columns [0,n) of qkv_rows_relu_grad_bf16: o = bf16(g), loc += g
 * (out of line with restrict pointers, so the loop vectorises). */
static __attribute__((noinline)) void relu_grad_row(const float *restrict y, const float *restrict dy,
                                                    uint16_t *restrict o, float *restrict loc, int64_t n)
{
    for (int64_t j = 0; j < n; j++) {
        int32_t yb; /* relu passes dy where y > 0 or NaN, from y's bits (qkv_relu_passes) */
        uint32_t db;
        memcpy(&yb, &y[j], sizeof yb);
        memcpy(&db, &dy[j], sizeof db);
        db &= -(uint32_t)qkv_relu_passes(yb); /* masks, not selects: the loop vectorises */
        float g;
        memcpy(&g, &db, sizeof g);
        /* 0 + g: the value the two-op backward writes into a fresh dx (a
         * -0 dy gives +0 there too) */
        g = 0.0f + g;
        o[j] = qkv_bf16_from_float(g);
        loc[j] += g;
    }
}

void qkv_rows_relu_grad_bf16(const float *y, const float *dy, int64_t rows, int64_t n, uint16_t *d16,
                             float *db)
{
    int64_t nblk = (n + COLS - 1) / COLS;
    QKV_PAR_FOR(rows * n >= QKV_PAR_MIN && nblk > 1,
        for (int64_t b = 0; b < nblk; b++) {
            int64_t j0 = b * COLS, j1 = j0 + COLS < n ? j0 + COLS : n;
            float loc[COLS];
            for (int64_t j = j0; j < j1; j++) loc[j - j0] = db ? db[j] : 0.0f;
            for (int64_t r = 0; r < rows; r++)
                relu_grad_row(y + r * n + j0, dy + r * n + j0, d16 + r * n + j0, loc, j1 - j0);
            if (db)
                for (int64_t j = j0; j < j1; j++) db[j] = loc[j - j0];
        });
}

/* Flat blocks of this many elements go to the threads (qkv_vec_relu). */
enum { RELU_BLOCK = 8192 };

void qkv_vec_relu(float *y, const float *x, int64_t n)
{
    int64_t nblk = (n + RELU_BLOCK - 1) / RELU_BLOCK;
    QKV_PAR_FOR(n >= QKV_PAR_MIN,
        for (int64_t b = 0; b < nblk; b++) {
            int64_t i1 = (b + 1) * RELU_BLOCK < n ? (b + 1) * RELU_BLOCK : n;
            for (int64_t i = b * RELU_BLOCK; i < i1; i++) y[i] = qkv_relu1(x[i]);
        });
}

void qkv_rows_broadcast(float *y, const float *b, int64_t rows, int64_t n)
{
    QKV_PAR_FOR(rows * n >= QKV_PAR_MIN,
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < n; j++) y[r * n + j] = b[j]);
}

/* Flat blocks of this many elements go to the threads: a residual
 * connection adds two tensors of one shape (one row of 409,600 floats in a
 * ViT step), which a loop over rows ran on one thread. */
enum { FLAT_BLK = 16384 };

void qkv_rows_add(float *y, const float *a, const float *b, int64_t rows, int64_t n)
{
    int64_t total = rows * n, nblk = (total + FLAT_BLK - 1) / FLAT_BLK;
    QKV_PAR_FOR(total >= QKV_PAR_MIN,
        for (int64_t k = 0; k < nblk; k++) {
            int64_t i = k * FLAT_BLK, end = i + FLAT_BLK < total ? i + FLAT_BLK : total;
            while (i < end) { /* the block's pieces of rows */
                int64_t j = i % n, m = n - j < end - i ? n - j : end - i;
                for (int64_t t = 0; t < m; t++) y[i + t] = a[i + t] + (b ? b[j + t] : 0.0f);
                i += m;
            }
        });
}

void qkv_vec_to2(float *y1, int add1, float *y2, int add2, const float *x, int64_t n)
{
    int64_t nblk = (n + FLAT_BLK - 1) / FLAT_BLK;
    QKV_PAR_FOR(n >= QKV_PAR_MIN,
        for (int64_t k = 0; k < nblk; k++) {
            int64_t i0 = k * FLAT_BLK, i1 = i0 + FLAT_BLK < n ? i0 + FLAT_BLK : n;
            for (int64_t i = i0; i < i1; i++) { /* y1 first, then y2: right when they are one buffer */
                if (y1) y1[i] = add1 ? y1[i] + x[i] : x[i];
                if (y2) y2[i] = add2 ? y2[i] + x[i] : x[i];
            }
        });
}

/* ---- exp, sigmoid, tanh, erf and erfc of a vector (vmath.h) ----------
 * The AVX-512 build of the loops where the CPU has it: on this machine's
 * Zen 4, erfc took 0.90 ns an element against 1.53 in the baseline build,
 * exp 0.38 against 0.54 (build/bench/vmath: 256 elements in L1, one
 * thread); the loops are bound by their dependency chains, and one
 * instruction does 16 lanes. It goes with the AVX-512 attention kernels:
 * QKV_ISA=avx2 or portable (docs/attention.md) keeps the baseline build;
 * qkv_vmath_force picks one for tests. Both give the same bits. */
static const qkv_vmath vmath_base = {"base", vm_exp, vm_tanh, vm_sigmoid, vm_erf, vm_erfc};
static const qkv_vmath *vmath_forced;

/* vmath_avx512.c is built with attention_avx512.c's flags: it runs where
 * that build runs, and is picked where that build is (QKV_ISA included). */
static int vmath_avx512_runs(void) { return qkv_vmath_avx512.exp && qkv_attn_simd_runs(&qkv_attn_simd_avx512); }

static const qkv_vmath *vmath(void)
{
    static const qkv_vmath *picked; /* a benign race: every thread picks the same */
    if (vmath_forced) return vmath_forced;
    if (!picked)
        picked = qkv_vmath_avx512.exp && qkv_attn_simd_current() == &qkv_attn_simd_avx512 ? &qkv_vmath_avx512
                                                                                         : &vmath_base;
    return picked;
}

int qkv_vmath_force(const char *name)
{
    if (!name) return vmath_forced = NULL, 1;
    if (!strcmp(name, "base")) return vmath_forced = &vmath_base, 1;
    if (!strcmp(name, "avx512") && vmath_avx512_runs()) return vmath_forced = &qkv_vmath_avx512, 1;
    return 0;
}

void qkv_vec_exp(float *y, const float *x, int64_t n) { vmath()->exp(y, x, n); }

/* The cross entropy's row passes (ce_rows.h), from the build vmath
 * picked: the same bits either way. */
static const qkv_ce_rows ce_rows_base = {ce_max, ce_bias_max, ce_exp_sum, ce_grad};
static const qkv_ce_rows *ce_rows(void) { return vmath() == &qkv_vmath_avx512 ? &qkv_ce_rows_avx512 : &ce_rows_base; }
float qkv_max_f32(const float *x, int64_t n) { return ce_rows()->max(x, n); }
float qkv_ce_bias_max(float *y, const float *x, const float *b, int64_t n)
{
    return ce_rows()->bias_max(y, x, b, n);
}
double qkv_ce_exp_sum(float *x, float m, int64_t n) { return ce_rows()->exp_sum(x, m, n); }
void qkv_ce_grad(float *e, int64_t n, float a, float c, uint16_t *d16, float *colsum)
{
    ce_rows()->grad(e, n, a, c, d16, colsum);
}
void qkv_vec_tanh(float *y, const float *x, int64_t n) { vmath()->tanh(y, x, n); }
void qkv_vec_sigmoid(float *y, const float *x, int64_t n) { vmath()->sigmoid(y, x, n); }
void qkv_vec_erf(float *y, const float *x, int64_t n) { vmath()->erf(y, x, n); }
void qkv_vec_erfc(float *y, const float *x, int64_t n) { vmath()->erfc(y, x, n); }

/* The three sums share one shape: 8 lanes, then the tail, then the lanes
 * in order. TERM(i) is the i-th term. */
#define SUM8(n, TERM)                                                   \
    do {                                                                \
        double p_[8] = {0}, s_ = 0;                                     \
        int64_t i = 0;                                                  \
        for (; i + 8 <= (n); i += 8)                                    \
            for (int k_ = 0; k_ < 8; k_++) p_[k_] += TERM(i + k_);      \
        for (; i < (n); i++) s_ += TERM(i);                             \
        for (int k_ = 0; k_ < 8; k_++) s_ += p_[k_];                    \
        return s_;                                                      \
    } while (0)

double qkv_sum_f64(const float *x, int64_t n)
{
#define T(i) (double)x[i]
    SUM8(n, T);
#undef T
}

double qkv_sum_sq_dev(const float *x, double m, int64_t n)
{
#define T(i) (((double)x[i] - m) * ((double)x[i] - m))
    SUM8(n, T);
#undef T
}

double qkv_sum_dot_dev(const float *g, const float *x, double m, int64_t n)
{
#define T(i) ((double)g[i] * ((double)x[i] - m))
    SUM8(n, T);
#undef T
}
#undef SUM8

/* y = x * w / sqrt(mean(x^2) + eps) per row, the mean of squares in
 * double (qkv_sum_sq_dev about 0); w NULL means ones; rstd (rows) gets
 * each row's 1/sqrt(..) when not NULL. y may be x. */
void qkv_rows_rms_norm(const float *x, const float *w, float eps, float *y, double *rstd, int64_t rows,
                       int64_t C)
{
    QKV_PAR_FOR(rows * C >= QKV_PAR_MIN,
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * C; // (C)
            float *yr = y + r * C;       // (C)
            double rs = 1.0 / sqrt(qkv_sum_sq_dev(xr, 0.0, C) / (double)C + eps);
            if (rstd) rstd[r] = rs;
            for (int64_t j = 0; j < C; j++) yr[j] = (float)(xr[j] * rs * (w ? w[j] : 1.0f));
        });
}
