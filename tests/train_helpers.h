/* train_helpers.h: what the training tests share (test_checkpoint,
 * test_optim): a small classifier's parameter store. */
#ifndef QKV_TEST_TRAIN_HELPERS_H
#define QKV_TEST_TRAIN_HELPERS_H
#include "harness.h"

/* A small classifier: y = x W^T + b over 6 features and 4 classes
 * (head.weight (4,6), head.bias (4)), initialised from seed. */
static inline void model_make(qkv_params **p, uint64_t seed)
{
    qkv_rng r;
    qkv_rng_seed(&r, seed);
    qkv_tensor *w, *b;
    CHECK_OK(qkv_params_new(p));
    CHECK_OK(qkv_params_add(*p, "head.", "weight", 2, (int64_t[]){4, 6}, &w));
    CHECK_OK(qkv_params_add(*p, "head.", "bias", 1, (int64_t[]){4}, &b));
    CHECK_OK(qkv_init_linear_default(&r, w));
    CHECK_OK(qkv_init_uniform(&r, b, -0.4f, 0.4f));
}
#endif
