/* loss.h: the checks and the loss tensor that the losses of loss.c and
 * loss_linear.c share. */
#ifndef QKV_TRAIN_LOSS_H
#define QKV_TRAIN_LOSS_H
#include "core/internal.h"

/* r is one of QKV_REDUCTION_MEAN, _SUM, _NONE; else an error naming fn. */
qkv_status qkv_loss_check_reduction(const char *fn, qkv_reduction r);
/* label_smoothing is in [0,1]; else an error naming fn. */
qkv_status qkv_loss_check_smoothing(const char *fn, double label_smoothing);
/* Every label of y (I64) is ignore or in [0,C); else an error naming fn,
 * the first label that is not and its position in y. */
qkv_status qkv_ce_check_labels(const char *fn, const qkv_tensor *y, int64_t C, int64_t ignore);
/* The loss tensor: () for MEAN and SUM, shaped like `like` for NONE. */
qkv_status qkv_loss_tensor(qkv_ctx *c, qkv_reduction r, const qkv_tensor *like, int rec, qkv_tensor **loss);

/* The cross entropy's formulas, which qkv_cross_entropy and
 * qkv_linear_cross_entropy share. A position's loss from its two terms,
 * nll = lse - x_y and smooth = sum_c (lse - x_c): */
static inline float qkv_ce_mix(double ls, int64_t C, double nll, double smooth)
{
    return (float)((1.0 - ls) * nll + ls / (double)C * smooth);
}
/* The reduced loss from the terms' sums over the positions not ignored:
 * MEAN divides both by their count n_valid (PyTorch 1.13's rule; 0 when
 * there are none, where PyTorch gives NaN), SUM takes them as they are. */
static inline float qkv_ce_reduce(qkv_reduction r, double ls, int64_t C, int64_t n_valid, double nll_sum,
                                  double smooth_sum)
{
    if (r == QKV_REDUCTION_MEAN) {
        nll_sum = n_valid ? nll_sum / (double)n_valid : 0.0;
        smooth_sum = n_valid ? smooth_sum / (double)n_valid : 0.0;
    }
    return qkv_ce_mix(ls, C, nll_sum, smooth_sum);
}
/* The weights of the two terms in a position's gradient, times its
 * upstream gradient g: d loss / d x_c = wn (p_c - [c == y]) + ws (C p_c - 1). */
static inline void qkv_ce_weights(qkv_reduction r, double ls, int64_t C, int64_t n_valid, double g, double *wn,
                                  double *ws)
{
    double count = r == QKV_REDUCTION_MEAN ? (double)n_valid : 1.0;
    *wn = (1.0 - ls) * g / count;
    *ws = ls / (double)C * g / count;
}
#endif
