/* rows.h: loops over the rows of a (rows, n) matrix that several ops share
 * (bias broadcast, bias and residual gradients), on OpenMP's threads when
 * the matrix is large (QKV_PAR_MIN elements). Each output is summed in row
 * order, as one thread would, so results do not depend on the thread count. */
#ifndef QKV_KERNELS_ROWS_H
#define QKV_KERNELS_ROWS_H
#include <stdint.h>

/* acc[j] += sum_r x[r, j]: x (rows,n), acc (n). */
void qkv_rows_sum_into(float *acc, const float *x, int64_t rows, int64_t n);
/* The backward of y = relu(pre) feeding bf16 products: g = dy where
 * y > 0, else 0, written as bf16 to d16 (rows,n), and db[j] += sum_r
 * g[r, j] when db is not NULL (qkv_rows_sum_into's column-block order):
 * the mask, the conversion and the bias gradient in one pass over dy. */
void qkv_rows_relu_grad_bf16(const float *y, const float *dy, int64_t rows, int64_t n, uint16_t *d16,
                             float *db);
/* y[i] = x[i] < 0 ? 0 : x[i] for i < n: torch.relu's values (a NaN stays
 * NaN, -0 stays -0); y may be x. */
void qkv_vec_relu(float *y, const float *x, int64_t n);
/* torch.relu of one value: a NaN stays NaN, -0 stays -0. */
static inline float qkv_relu1(float x) { return x < 0.0f ? 0.0f : x; }
/* 1 where relu's backward passes the gradient, from the bits of its output
 * y: torch's threshold_backward, y <= 0 ? 0 : dy, so y > 0 or a NaN of
 * either sign (an integer test: the loops that use it vectorise). */
static inline int qkv_relu_passes(int32_t yb) { return (yb > 0) | ((yb & 0x7fffffff) > 0x7f800000); }
/* y[r, j] = b[j]: y (rows,n), b (n). */
void qkv_rows_broadcast(float *y, const float *b, int64_t rows, int64_t n);
/* y[r, j] = a[r, j] + b[j] (b NULL: y = a): y, a (rows,n), b (n). */
void qkv_rows_add(float *y, const float *a, const float *b, int64_t rows, int64_t n);
/* y1[i] = x[i] (add1 0) or y1[i] += x[i], and the same for y2, for i < n,
 * in one pass (either y may be NULL; y1 and y2 may be one buffer, then
 * the two apply in turn; neither may overlap x). */
void qkv_vec_to2(float *y1, int add1, float *y2, int add2, const float *x, int64_t n);
/* y[i] = tanh(x[i]), sigmoid(x[i]) = 1 / (1 + exp(-x[i])), exp(x[i]) for
 * i < n, vectorised, within a few ulp of tanhf, expf (exp: x clamped to
 * [-87, 88]); callers use the libm functions under qkv_reference(). y may
 * be x. */
void qkv_vec_tanh(float *y, const float *x, int64_t n);
void qkv_vec_sigmoid(float *y, const float *x, int64_t n);
void qkv_vec_exp(float *y, const float *x, int64_t n);
/* y[i] = erf(x[i]), vectorised and branch-free, within 2e-7 of erf in
 * double (a few ulp; +-1 from |x| = 3.9 on, NaN for NaN); callers use erff
 * under qkv_reference(). y may be x. */
void qkv_vec_erf(float *y, const float *x, int64_t n);
/* y[i] = erfc(x[i]) = 1 - erf(x[i]), the same way, keeping its relative
 * accuracy for large x (within 3e-7 absolute; relatively about 4e-7 plus
 * 1.5e-7 x^2 from the rounding of x^2, measured in tests/test_seq2seq_rnn.c);
 * 0 at +inf, 2 at -inf, NaN for NaN. */
void qkv_vec_erfc(float *y, const float *x, int64_t n);
/* For tests: run the five functions above through one build of their loops,
 * "base" (the library's target) or "avx512" (vmath.h); NULL goes back to
 * the automatic pick. 0 when that build does not run on this CPU. */
int qkv_vmath_force(const char *name);
/* A softmax cross entropy's row passes (train/loss_linear.c, loss.c), vectorised,
 * the same bits in every build: qkv_ce_bias_max: y (n) = x + b (b may be
 * NULL; y may be x), returns qkv_max_f32(y); qkv_ce_exp_sum: x = exp(x - m) (as
 * qkv_vec_exp), returns their sum in double (16 partial sums in a fixed
 * order); qkv_ce_grad: g = e a + c for the exps e (n), over e or in bf16
 * to d16 where not NULL, and colsum (n) += g. */
float qkv_ce_bias_max(float *y, const float *x, const float *b, int64_t n);
double qkv_ce_exp_sum(float *x, float m, int64_t n);
void qkv_ce_grad(float *e, int64_t n, float a, float c, uint16_t *d16, float *colsum);

/* Sums in double with 8 independent partial sums (one running sum waits
 * on the add's latency at every element: 4-8x slower on long rows); the
 * order is fixed, so the result is too. qkv_sum_f64: sum x[i];
 * qkv_sum_sq_dev: sum (x[i] - m)^2; qkv_sum_dot_dev: sum g[i] (x[i] - m). */
double qkv_sum_f64(const float *x, int64_t n);
/* The largest of x[0..n) that is not NaN (-inf if there is none), with 16
 * independent partial maxima (ce_rows.h's loop, AVX-512 where vmath's is). */
float qkv_max_f32(const float *x, int64_t n);
double qkv_sum_sq_dev(const float *x, double m, int64_t n);
double qkv_sum_dot_dev(const float *g, const float *x, double m, int64_t n);
/* y = x * w / sqrt(mean(x^2) + eps) for each row of x (rows,C), the mean
 * in double; w (C) or NULL (ones); rstd (rows) or NULL gets 1/sqrt(..).
 * y may be x. F.rms_norm's forward (src/nn/rms_norm.c) and the models'. */
void qkv_rows_rms_norm(const float *x, const float *w, float eps, float *y, double *rstd, int64_t rows,
                       int64_t C);
#endif
