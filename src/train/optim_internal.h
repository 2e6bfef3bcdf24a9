/* optim_internal.h: the optimizer's layout, shared by optim.c and
 * checkpoint.c (which saves and restores its state). */
#ifndef QKV_OPTIM_INTERNAL_H
#define QKV_OPTIM_INTERNAL_H
#include "core/internal.h"

enum { OPTIM_MAX_BUFS = 3 };

struct qkv_optim {
    qkv_params *params;
    qkv_optim_opts o;
    int n;         /* parameters in the store when the optimizer was made */
    int64_t numel; /* their elements together */
    int64_t step;  /* updates taken */
    int nbuf;      /* state buffers per parameter */
    /* The elements this optimizer keeps state for and updates: [lo, hi) of
     * the parameters' elements in store order; 0, numel unless sharded
     * (ZeRO-1, qkv_optim_shard). Element e's buffer b is at
     * state[b * (hi - lo) + e - lo]; unsharded, buffer b of parameter i
     * starts at state + b * numel + off[i]. */
    int64_t lo, hi;
    int sharded;   /* qkv_optim_shard was called */
    float *state;
    int64_t *off;  /* (n) */
};

/* The PyTorch state name of buffer b ("exp_avg", "momentum_buffer", ...). */
const char *qkv_optim_buf_name(const qkv_optim *o, int b);
/* How many buffers an optimizer with these options keeps per parameter. */
int qkv_optim_nbuf_for(const qkv_optim_opts *o);
/* Checks the hyper-parameters as torch.optim's constructors do; fn names
 * the caller in the message. */
qkv_status qkv_optim_check_opts(const char *fn, const qkv_optim_opts *o);
const char *qkv_optim_kind_name(qkv_optim_kind k);

/* Whether x (n) holds a NaN or infinity; *at gets the first one's index
 * (checkpoint.c). */
int qkv_first_nonfinite(const float *x, int64_t n, int64_t *at);
/* The first parameter of p holding a non-finite value (its element in
 * *at), or NULL: checkpoints and the training loop refuse such a store. */
const qkv_tensor *qkv_params_nonfinite(qkv_params *p, int64_t *at);

/* Buffer b of parameter i: an unsharded optimizer only. */
static inline float *qkv_optim_buf(const qkv_optim *o, int b, int i)
{
    return o->state + (int64_t)b * o->numel + o->off[i];
}

static inline int qkv_optim_sharded(const qkv_optim *o) { return o->sharded; }

/* Keeps state for elements [lo, hi) only (their values kept, the rest
 * freed); qkv_optim_step then updates only those elements. An optimizer
 * already sharded is refused (QKV_ERR_STATE). */
qkv_status qkv_optim_shard(qkv_optim *o, int64_t lo, int64_t hi);
#endif
