/* layers_helpers.h: what the layer tests share (test_layers_grad,
 * test_layers_values, test_layers_errors): the RNG their inputs and
 * parameters are drawn from, seeded 42, and the arena of their tensors. */
#ifndef QKV_TEST_LAYERS_HELPERS_H
#define QKV_TEST_LAYERS_HELPERS_H
#include "harness.h"

static qkv_rng R;
static qkv_arena *A;

/* Seeds R and makes A; 0 if A cannot be made. */
static inline int layers_setup(void)
{
    qkv_rng_seed(&R, 42);
    return qkv_arena_new(&A, 0) == QKV_OK;
}

/* Frees A and prints the summary line of the program called name. */
static inline int layers_finish(const char *name)
{
    qkv_arena_free(A);
    return h_finish(name);
}
#endif
