/* test_nomem.c: every error return carries a message, out of memory too.
 * Linked with -Wl,--wrap for malloc, calloc, realloc and aligned_alloc
 * (the Makefile's rule for this test), so that allocation number n made by
 * the library (or this test) fails. Each scenario below is run with n =
 * 1, 2, 3, ... until it makes fewer than n allocations: every run where an
 * allocation failed must either succeed anyway or fail with a status and a
 * non-empty message, and never crash (under the sanitizer build, never
 * leak or touch freed memory either). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <stdlib.h>
#include <unistd.h>
#include "harness.h"
#include "core/internal.h"

/* ---- the allocator with a failure at allocation fail_at ---------------- */

static long fail_at = -1, n_alloc;

static int should_fail(void) { return fail_at > 0 && ++n_alloc == fail_at; }

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
void *__wrap_malloc(size_t n) { return should_fail() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t k, size_t n) { return should_fail() ? NULL : __real_calloc(k, n); }
void *__wrap_realloc(void *p, size_t n) { return should_fail() ? NULL : __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t a, size_t n)
{
    return should_fail() ? NULL : __real_aligned_alloc(a, n);
}

typedef qkv_status (*scenario_fn)(void);

/* Runs s with every one of its allocations from number first on failing in
 * turn. */
static void run_failing_from(const char *name, scenario_fn s, long first)
{
    long runs = 0, silent = 0, absorbed = 0;
    for (long n = first;; n++) {
        qkv_fail(QKV_OK, "%s", ""); /* no stale message */
        n_alloc = 0;
        fail_at = n;
        qkv_status st = s();
        fail_at = -1;
        if (n_alloc < n) { /* nothing failed: the scenario itself must pass */
            CHECK(st == QKV_OK, "%s without failures: %s: %s", name, qkv_status_name(st),
                  qkv_last_error());
            break;
        }
        runs++;
        if (st == QKV_OK) absorbed++;
        else if (!qkv_last_error()[0]) {
            silent++;
            fprintf(stderr, "%s: allocation %ld failed: %s with no message\n", name, n,
                    qkv_status_name(st));
        }
    }
    CHECK(runs > 0, "%s made allocations", name);
    CHECK(silent == 0, "%s: %ld of %ld failed allocations gave a status without a message", name,
          silent, runs);
    printf("%s: %ld allocations failed in turn: %ld errors with messages, %ld absorbed\n", name,
           runs, runs - absorbed - silent, absorbed);
}

static void run_failing(const char *name, scenario_fn s) { run_failing_from(name, s, 1); }

/* ---- scenarios: each frees everything it made, on every path ----------- */

static char dir[64];

#define STEP(expr)                                                               \
    do {                                                                         \
        if ((s = (expr)) != QKV_OK) goto done;                                   \
    } while (0)

/* A TransformerEncoderLayer: init, forward, backward, AdamW step, then
 * with ckpt 1 a checkpoint saved, with ckpt 2 the saved one loaded. */
static int ckpt;

static qkv_status train_step(void)
{
    qkv_status s = QKV_OK;
    qkv_params *p = NULL;
    qkv_ctx *c = NULL;
    qkv_optim *o = NULL;
    qkv_rng rng;
    qkv_rng_seed(&rng, 1);
    qkv_transformer_encoder_layer l;
    qkv_transformer_layer_opts lo = qkv_transformer_layer_opts_default(16, 2);
    lo.dim_feedforward = 32;
    lo.batch_first = 1;
    char path[128];
    snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
    STEP(qkv_params_new(&p));
    STEP(qkv_ctx_new(&c));
    STEP(qkv_transformer_encoder_layer_init(&l, &lo, p, "", &rng));
    qkv_optim_opts oo = qkv_optim_adamw_opts_default();
    STEP(qkv_optim_new(&o, p, &oo));
    qkv_ctx_set_training(c, 1);
    qkv_tensor *x, *y, *loss, *target;
    STEP(qkv_tensor_new(qkv_ctx_arena(c), QKV_F32, 3, (int64_t[]){2, 5, 16}, &x));
    STEP(qkv_tensor_new(qkv_ctx_arena(c), QKV_F32, 3, (int64_t[]){2, 5, 16}, &target));
    qkv_rng_fill_normal(&rng, x->data, 160, 0, 1);
    STEP(qkv_transformer_encoder_layer_forward(c, &l, x, NULL, &y));
    STEP(qkv_mse_loss(c, y, target, QKV_REDUCTION_MEAN, &loss));
    STEP(qkv_backward(c, loss, NULL));
    STEP(qkv_optim_step(o));
    if (ckpt == 1) STEP(qkv_checkpoint_save(path, p, o, NULL, &rng));
    if (ckpt == 2) STEP(qkv_checkpoint_load(path, p, o, NULL, &rng));
done:
    qkv_optim_free(o);
    qkv_ctx_free(c);
    qkv_params_free(p);
    return s;
}

/* A small language model generating with a KV cache: beam search. */
static qkv_status generate(void)
{
    qkv_status s = QKV_OK;
    qkv_params *p = NULL;
    qkv_ctx *c = NULL;
    qkv_rng rng;
    qkv_rng_seed(&rng, 2);
    qkv_lm m = {0};
    qkv_kv_cache kc = {0};
    qkv_lm_opts lo = qkv_lm_opts_default(11, 8, 2, 2, 16);
    lo.layer.dim_feedforward = 16;
    qkv_generate_opts go = qkv_generate_opts_default();
    go.kind = QKV_DECODE_BEAM;
    go.num_beams = 2;
    go.max_new_tokens = 4;
    int64_t prompt[3] = {1, 2, 3}, tokens[4], lengths[1];
    STEP(qkv_params_new(&p));
    STEP(qkv_ctx_new(&c));
    STEP(qkv_lm_init(&m, &lo, p, "", &rng));
    STEP(qkv_lm_cache_init(&kc, &m, 2, 8));
    qkv_tensor *ids;
    STEP(qkv_tensor_wrap_i64(qkv_ctx_arena(c), prompt, 2, (int64_t[]){1, 3}, &ids));
    STEP(qkv_lm_generate(c, &m, &kc, ids, NULL, &go, tokens, lengths, NULL));
done:
    qkv_kv_cache_free(&kc);
    qkv_lm_free(&m);
    qkv_ctx_free(c);
    qkv_params_free(p);
    return s;
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/qkv_nomem_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    run_failing("train step", train_step);
    /* The checkpoint's allocations, failed in turn after a whole step's. */
    n_alloc = 0;
    fail_at = 1L << 40;
    CHECK_OK(train_step());
    fail_at = -1;
    long step_allocs = n_alloc;
    ckpt = 1;
    run_failing_from("checkpoint save", train_step, step_allocs + 1);
    ckpt = 2;
    run_failing_from("checkpoint load", train_step, step_allocs + 1);
    run_failing("generate", generate);
    char path[128];
    snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
    unlink(path);
    rmdir(dir);
    return h_finish("test_nomem");
}
