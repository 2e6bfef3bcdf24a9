/* bench_util.h: what the benchmark programs share: TRY (a failed qkv call
 * prints the library's message and exits: a benchmark has nothing to
 * recover), a monotonic clock in seconds, the precision QKV_BENCH_PRECISION
 * asks for, and the encoder layer whose training step several of them
 * time. */
#ifndef QKV_BENCH_UTIL_H
#define QKV_BENCH_UTIL_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "qkv.h"
#include "qkv/transformer.h"

#define TRY(x)                                                                    \
    do {                                                                          \
        if ((x) != QKV_OK) {                                                      \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, qkv_last_error()); \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

static inline double bench_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The ctx's precision as QKV_BENCH_PRECISION asks: fp32 (also when unset)
 * or bf16 (docs/bf16.md); any other value stops the benchmark with a
 * message. */
static inline void bench_set_precision(qkv_ctx *c)
{
    const char *e = getenv("QKV_BENCH_PRECISION");
    int bf16 = e && !strcmp(e, "bf16");
    if (e && !bf16 && strcmp(e, "fp32")) {
        fprintf(stderr, "QKV_BENCH_PRECISION=%s: expected fp32 or bf16\n", e);
        exit(2);
    }
    TRY(qkv_ctx_set_precision(c, bf16 ? QKV_BF16 : QKV_FP32));
}

/* TransformerEncoderLayer(E, H, F) without dropout, initialised from r, in
 * new parameters *p, and AdamW (its defaults) over them in *o. */
static inline void bench_encoder_new(int64_t E, int64_t H, int64_t F, qkv_rng *r, qkv_params **p,
                                     qkv_transformer_encoder_layer *layer, qkv_optim **o)
{
    qkv_transformer_layer_opts lo = qkv_transformer_layer_opts_default(E, H);
    lo.dim_feedforward = F;
    lo.dropout = 0;
    qkv_optim_opts oo = qkv_optim_adamw_opts_default();
    TRY(qkv_params_new(p));
    TRY(qkv_transformer_encoder_layer_init(layer, &lo, *p, "", r));
    TRY(qkv_optim_new(o, *p, &oo));
}
/* A product op(A)·op(B) of op(A) (M, K) and op(B) (K, N), named, for the
 * GEMM benchmarks' shape tables (bf16_gemm.c, gemm_f32.c). */
typedef struct {
    const char *name;
    int ta, tb;
    int64_t M, N, K;
} bench_shape;

#endif
