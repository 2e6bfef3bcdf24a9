/* rows.c: row loops shared by several ops (rows.h). */
#include "core/internal.h"
#include "kernels/rows.h"

/* Columns go to threads in blocks of this many, so each thread sums whole
 * columns in row order. */
enum { COLS = 64 };

void qkv_rows_sum_into(float *acc, const float *x, int64_t rows, int64_t n)
{
    int64_t nblk = (n + COLS - 1) / COLS;
#pragma omp parallel for if (rows * n >= QKV_PAR_MIN && nblk > 1)
    for (int64_t b = 0; b < nblk; b++) {
        int64_t j0 = b * COLS, j1 = j0 + COLS < n ? j0 + COLS : n;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = j0; j < j1; j++) acc[j] += x[r * n + j];
    }
}

void qkv_rows_broadcast(float *y, const float *b, int64_t rows, int64_t n)
{
#pragma omp parallel for if (rows * n >= QKV_PAR_MIN)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) y[r * n + j] = b[j];
}

void qkv_rows_add(float *y, const float *a, const float *b, int64_t rows, int64_t n)
{
#pragma omp parallel for if (rows * n >= QKV_PAR_MIN)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) y[r * n + j] = a[r * n + j] + (b ? b[j] : 0.0f);
}

void qkv_vec_add_into(float *y, const float *x, int64_t n)
{
#pragma omp parallel for if (n >= QKV_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

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
