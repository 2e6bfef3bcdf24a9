/* transformer_helpers.h: what the transformer tests share (test_transformer,
 * test_transformer_modules, test_transformer_errors): the arena of test
 * tensors and the RNG (seeded 42), new F32 and BOOL tensors, and random
 * non-default parameter values. */
#ifndef QKV_TEST_TRANSFORMER_HELPERS_H
#define QKV_TEST_TRANSFORMER_HELPERS_H
#include "harness.h"

static qkv_arena *A;
static qkv_rng R;

/* Makes A and seeds R with 42. */
static inline void tf_setup(void)
{
    qkv_arena_new(&A, 0);
    qkv_rng_seed(&R, 42);
}

/* Frees A and prints the summary line of the program called name. */
static inline int tf_finish(const char *name)
{
    qkv_arena_free(A);
    return h_finish(name);
}

/* A new F32 tensor in A, uniform in [-scale, scale] (zeros for scale 0). */
static inline qkv_tensor *new_f32(int ndim, const int64_t *shape, float scale)
{
    qkv_tensor *t = NULL;
    qkv_tensor_new(A, QKV_F32, ndim, shape, &t);
    if (t && scale > 0) qkv_rng_fill_uniform(&R, t->data, qkv_tensor_numel(t), -scale, scale);
    return t;
}

static inline qkv_tensor *new_bool(int ndim, const int64_t *shape)
{
    qkv_tensor *t = NULL;
    qkv_tensor_new(A, QKV_BOOL, ndim, shape, &t);
    return t;
}

/* Random non-default values: ones and zeros would hide mistakes. */
static inline void randomize(qkv_params *p)
{
    for (int i = 0; i < qkv_params_count(p); i++) {
        qkv_tensor *t = qkv_params_at(p, i);
        qkv_rng_fill_uniform(&R, t->data, qkv_tensor_numel(t), -0.6f, 0.6f);
        if (strstr(t->name, "norm") && strstr(t->name, "weight"))
            for (int64_t j = 0; j < qkv_tensor_numel(t); j++) t->data[j] += 1.0f;
    }
}
#endif
