/* qkv/train.h: losses, optimizers, schedules, checkpoints (included by qkv.h). */
#ifndef QKV_TRAIN_H
#define QKV_TRAIN_H
#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif
