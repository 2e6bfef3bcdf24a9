/* libFuzzer target for the training checkpoint reader
 * (qkv_checkpoint_load, src/train/checkpoint.c): any bytes loaded into a
 * store of two parameters with an AdamW (amsgrad) optimizer, a position
 * and an RNG either load (every parameter finite, counters in range) or
 * fail with a message leaving store, optimizer, position and RNG as they
 * were; never a crash, leak or out-of-bounds access.
 *
 * The seeds in tests/fuzz/corpus/fuzz_checkpoint/ are checkpoints of this
 * store; QKV_FUZZ_WRITE_SEEDS=DIR build-fuzz/fuzz/fuzz_checkpoint writes
 * them again (then exits). */
#include "fuzz_file.h"
#include <math.h>

#include "qkv.h"

static qkv_params *P;
static qkv_optim *O;

static void make_store(qkv_params **p, qkv_optim **o, int amsgrad)
{
    qkv_tensor *w, *b;
    qkv_optim_opts oo = qkv_optim_adamw_opts_default();
    oo.amsgrad = amsgrad;
    if (qkv_params_new(p) != QKV_OK ||
        qkv_params_add(*p, "head.", "weight", 2, (int64_t[]){3, 2}, &w) != QKV_OK || /* w is (3,2) */
        qkv_params_add(*p, "head.", "bias", 1, (int64_t[]){3}, &b) != QKV_OK ||      /* b is (3) */
        qkv_optim_new(o, *p, &oo) != QKV_OK)
        abort();
}

/* A few steps of made-up gradients, so the optimizer state is not zero. */
static void steps(qkv_params *p, qkv_optim *o, int n, float scale)
{
    for (int s = 0; s < n; s++) {
        for (int i = 0; i < qkv_params_count(p); i++) {
            qkv_tensor *t = qkv_params_at(p, i);
            for (int64_t j = 0; j < qkv_tensor_numel(t); j++) t->grad[j] = scale * (float)(j + 1 - s);
        }
        if (qkv_optim_step(o) != QKV_OK) abort();
    }
}

static void write_seeds(const char *dir)
{
    char path[512];
    qkv_rng r;
    qkv_rng_seed(&r, 7);
    for (int k = 0; k < 3; k++) {
        qkv_params *p;
        qkv_optim *o;
        make_store(&p, &o, k != 1);
        steps(p, o, k + 1, 0.5f);
        qkv_train_pos pos = {k + 1, k, 2 * k, {k, 0, 0, 9}};
        snprintf(path, sizeof path, "%s/seed%d.safetensors", dir, k);
        /* seed 2: parameters only */
        if (qkv_checkpoint_save(path, p, k == 2 ? NULL : o, k == 2 ? NULL : &pos, k == 2 ? NULL : &r) != QKV_OK) {
            fprintf(stderr, "%s\n", qkv_last_error());
            abort();
        }
        qkv_optim_free(o);
        qkv_params_free(p);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *seeds = getenv("QKV_FUZZ_WRITE_SEEDS");
    if (seeds) {
        write_seeds(seeds);
        exit(0);
    }
    make_store(&P, &O, 1);
    steps(P, O, 2, 0.25f);
    return 0;
}

/* Everything a load may change, as bytes. */
typedef struct {
    float v[9];
    qkv_optim_opts opts;
    int64_t steps;
    qkv_train_pos pos;
    qkv_rng rng;
} snapshot;

static void take(snapshot *s, const qkv_train_pos *pos, const qkv_rng *rng)
{
    memset(s, 0, sizeof *s);
    memcpy(s->v, qkv_params_at(P, 0)->data, 6 * sizeof(float));
    memcpy(s->v + 6, qkv_params_at(P, 1)->data, 3 * sizeof(float));
    qkv_optim_get_opts(O, &s->opts);
    s->steps = qkv_optim_steps(O);
    s->pos = *pos;
    s->rng = *rng;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file_write("ck.safetensors", data, size);
    qkv_train_pos pos = {1, 2, 3, {4, 5, 6, 7}};
    qkv_rng rng;
    qkv_rng_seed(&rng, 11);
    snapshot before, after;
    take(&before, &pos, &rng);
    if (qkv_checkpoint_load(path, P, O, &pos, &rng) != QKV_OK) {
        if (qkv_last_error()[0] == '\0') abort();
        take(&after, &pos, &rng);
        if (memcmp(&before, &after, sizeof before)) abort(); /* a refused load changed something */
    } else {
        for (int i = 0; i < 9; i++)
            if (!isfinite(((float *)qkv_params_at(P, i < 6 ? 0 : 1)->data)[i < 6 ? i : i - 6])) abort();
        if (pos.step < 0 || pos.step > (1LL << 53) || qkv_optim_steps(O) < 0 ||
            qkv_optim_steps(O) > (1LL << 53))
            abort();
    }
    /* The parameters alone. */
    qkv_checkpoint_load(path, P, NULL, NULL, NULL);
    return 0;
}
