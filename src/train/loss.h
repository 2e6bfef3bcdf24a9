/* loss.h: the checks and the loss tensor that the losses of loss.c and
 * loss_linear.c share. */
#ifndef QKV_TRAIN_LOSS_H
#define QKV_TRAIN_LOSS_H
#include "core/internal.h"

/* r is one of QKV_REDUCTION_MEAN, _SUM, _NONE; else an error naming fn. */
qkv_status qkv_loss_check_reduction(const char *fn, qkv_reduction r);
/* Every label of y (I64) is ignore or in [0,C); else an error naming fn,
 * the first label that is not and its position in y. */
qkv_status qkv_ce_check_labels(const char *fn, const qkv_tensor *y, int64_t C, int64_t ignore);
/* The loss tensor: () for MEAN and SUM, shaped like `like` for NONE. */
qkv_status qkv_loss_tensor(qkv_ctx *c, qkv_reduction r, const qkv_tensor *like, int rec, qkv_tensor **loss);
#endif
