/* qkv/train.h: losses, optimizers, schedules, checkpoints (included by qkv.h).
 * docs/training.md gives the exact formulas and the PyTorch equivalents. */
#include "qkv.h" /* first: qkv.h includes every area header in order */
#ifndef QKV_TRAIN_H
#define QKV_TRAIN_H
#include <stdio.h>
#ifdef __cplusplus
extern "C" {
#endif

/* ---- losses (tape ops) ------------------------------------------------- */

typedef enum {
    QKV_REDUCTION_MEAN = 0, /* the default, as PyTorch's reduction='mean' */
    QKV_REDUCTION_SUM,
    QKV_REDUCTION_NONE      /* per-element losses, shaped like the target */
} qkv_reduction;

/* F.mse_loss(input, target, reduction): (input - target)^2 reduced.
 * input and target F32 of the same shape -> loss () (or like input for
 * NONE). target gets a gradient too when it requires one. */
QKV_API qkv_status qkv_mse_loss(qkv_ctx *c, qkv_tensor *input, qkv_tensor *target,
                                qkv_reduction reduction, qkv_tensor **loss);

#define QKV_IGNORE_INDEX_DEFAULT (-100)

/* F.cross_entropy(logits, target, ignore_index=, label_smoothing=,
 * reduction=) with class-index targets, PyTorch 1.13's formula:
 *   logits (N,C) or (N,C,d1[,d2]) with target QKV_I64 (N) or (N,d1[,d2]),
 *   or unbatched logits (C) with a target of 0 dims -> loss () (NONE: like
 *   target). Targets equal to ignore_index contribute nothing and are not
 *   counted by MEAN; any other label outside [0,C) is QKV_ERR_ARG.
 * label_smoothing in [0,1]. Where every target is ignored, MEAN gives 0 with
 * a zero gradient (PyTorch gives NaN). */
QKV_API qkv_status qkv_cross_entropy(qkv_ctx *c, qkv_tensor *logits, const qkv_tensor *target,
                                     int64_t ignore_index, double label_smoothing,
                                     qkv_reduction reduction, qkv_tensor **loss);

/* F.cross_entropy(F.linear(x, weight, bias), target, ...) as one op, the
 * output layer of a language or translation model and its loss: x
 * (...,K), weight (V,K), bias (V) or NULL, target QKV_I64 shaped like x's
 * leading dims (...) -> loss () (NONE: like target); the classes are V.
 * The same numbers as the two ops (the same rules for ignore_index and
 * label_smoothing), but when recording it never keeps the logits nor
 * their softmax: it turns each row of logits into its gradient as soon as
 * the row's loss is known (the BF16 mode writes that gradient in bf16 for
 * the backward's products). */
QKV_API qkv_status qkv_linear_cross_entropy(qkv_ctx *c, qkv_tensor *x, qkv_tensor *weight,
                                            qkv_tensor *bias, const qkv_tensor *target,
                                            int64_t ignore_index, double label_smoothing,
                                            qkv_reduction reduction, qkv_tensor **loss);

/* ---- optimizers --------------------------------------------------------- */

typedef enum { QKV_OPTIM_SGD = 0, QKV_OPTIM_ADAM, QKV_OPTIM_ADAMW } qkv_optim_kind;

/* Hyper-parameters, as torch.optim's constructors take them (doubles, as
 * Python floats are). Fields a kind does not use are ignored. */
typedef struct {
    qkv_optim_kind kind;
    double lr;
    double weight_decay; /* SGD, Adam: L2 added to the gradient; AdamW: decoupled */
    int maximize;        /* ascend instead of descend */
    double momentum, dampening; /* SGD */
    int nesterov;               /* SGD: needs momentum > 0 and dampening 0 */
    double beta1, beta2, eps;   /* Adam, AdamW */
    int amsgrad;                /* Adam, AdamW */
} qkv_optim_opts;

/* torch.optim.SGD(lr=lr) defaults: momentum 0, dampening 0, weight_decay 0. */
QKV_API qkv_optim_opts qkv_optim_sgd_opts_default(double lr);
/* torch.optim.Adam defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0. */
QKV_API qkv_optim_opts qkv_optim_adam_opts_default(void);
/* torch.optim.AdamW defaults: as Adam but weight_decay 1e-2. */
QKV_API qkv_optim_opts qkv_optim_adamw_opts_default(void);
/* Deprecated aliases of the three (docs/core.md, "Names"). */
QKV_API QKV_DEPRECATED("qkv_optim_sgd_opts_default") qkv_optim_opts qkv_optim_sgd_default(double lr);
QKV_API QKV_DEPRECATED("qkv_optim_adam_opts_default") qkv_optim_opts qkv_optim_adam_default(void);
QKV_API QKV_DEPRECATED("qkv_optim_adamw_opts_default") qkv_optim_opts qkv_optim_adamw_default(void);

/* An optimizer over every parameter of a store, in store order. Its state
 * (exp_avg, exp_avg_sq, max_exp_avg_sq or momentum_buffer per parameter) is
 * allocated once, here. The store must not gain parameters afterwards. */
typedef struct qkv_optim qkv_optim;
QKV_API qkv_status qkv_optim_new(qkv_optim **out, qkv_params *params, const qkv_optim_opts *opts);
QKV_API void qkv_optim_free(qkv_optim *o);
/* One update of every parameter from its gradient (p->grad), as
 * optimizer.step(). Gradients are left as they are. */
QKV_API qkv_status qkv_optim_step(qkv_optim *o);
QKV_API qkv_status qkv_optim_set_lr(qkv_optim *o, double lr);
QKV_API double qkv_optim_get_lr(const qkv_optim *o); /* NaN for NULL */
/* The options in force (set_lr and checkpoint loads change them). */
QKV_API qkv_status qkv_optim_get_opts(const qkv_optim *o, qkv_optim_opts *opts);
QKV_API int64_t qkv_optim_steps(const qkv_optim *o); /* steps taken (PyTorch's state 'step') */

/* torch.nn.utils.clip_grad_norm_(params, max_norm) with norm_type 2:
 * total = ||all gradients||_2; every gradient *= min(max_norm / (total +
 * 1e-6), 1). total_norm (may be NULL) gets total, before clipping. */
QKV_API qkv_status qkv_clip_grad_norm(qkv_params *params, float max_norm, float *total_norm);

/* ---- learning-rate schedules ------------------------------------------- */

typedef enum {
    QKV_SCHEDULE_CONSTANT = 0, /* base_lr after the warm-up */
    QKV_SCHEDULE_COSINE,       /* cosine from base_lr to min_lr at total_steps */
    QKV_SCHEDULE_LINEAR        /* straight line from base_lr to min_lr at total_steps */
} qkv_schedule_decay;

typedef struct {
    double base_lr;
    int64_t warmup_steps;       /* W: linear warm-up over steps [0, W) */
    double warmup_start_factor; /* lr at step 0 is base_lr * this (default 0) */
    qkv_schedule_decay decay;
    int64_t total_steps;        /* decay ends here (COSINE, LINEAR); > W */
    double min_lr;              /* lr from total_steps on */
} qkv_schedule;

/* Constant base_lr, no warm-up. */
QKV_API qkv_schedule qkv_schedule_default(double base_lr);
/* QKV_ERR_ARG naming the first bad field. */
QKV_API qkv_status qkv_schedule_check(const qkv_schedule *s);
/* The learning rate for the update after `step` updates (step 0 is the
 * first): a pure function. NaN for a NULL or invalid schedule or step < 0. */
QKV_API double qkv_schedule_lr_at(const qkv_schedule *s, int64_t step);

/* ---- checkpoints ---------------------------------------------------------- */

#define QKV_CHECKPOINT_VERSION 2 /* 2: the metadata inside the checksum */
#define QKV_CHECKPOINT_USER_INTS 4

/* Where training stands; saved with the checkpoint, restored by load. */
typedef struct {
    int64_t step, epoch, batch;
    int64_t user[QKV_CHECKPOINT_USER_INTS]; /* anything else the caller counts */
} qkv_train_pos;

/* Saves the parameters ("param/<name>"), the optimizer's state
 * ("optim/<name>/exp_avg", ...) and hyper-parameters, pos and rng's state
 * into one safetensors file, atomically (a temporary file made exclusively,
 * fsync, rename). optim, pos and rng may each be NULL (then not saved).
 * Refused (QKV_ERR_ARG, nothing written): a NaN or infinite parameter or
 * optimizer state, pos's step, epoch or batch outside [0, 2^53], an
 * optimizer step outside [0, 2^53]. The checksum covers tensors and
 * metadata (version 2; version 1 files are refused on load). */
QKV_API qkv_status qkv_checkpoint_save(const char *path, qkv_params *params, const qkv_optim *optim,
                                       const qkv_train_pos *pos, const qkv_rng *rng);
/* Extra string metadata kept in a checkpoint (a model's configuration,
 * its tokenizer), inside the checksum: n pairs (0 to 64), keys unique and
 * none the checkpoint writes itself (format, format_version, params,
 * checksum, train.*, rng.*, optim.*). */
typedef struct {
    int n;
    const char *const *keys;
    const char *const *vals;
} qkv_checkpoint_meta;

/* qkv_checkpoint_save with meta (NULL: none) in the file's metadata. */
QKV_API qkv_status qkv_checkpoint_save_meta(const char *path, qkv_params *params,
                                            const qkv_optim *optim, const qkv_train_pos *pos,
                                            const qkv_rng *rng, const qkv_checkpoint_meta *meta);
/* A metadata value of the checkpoint at path, once its format and checksum
 * are verified: *val gets a malloc'd copy (free() it); QKV_ERR_NOTFOUND
 * when the key is absent. */
QKV_API qkv_status qkv_checkpoint_read_meta(const char *path, const char *key, char **val);
/* Restores what save wrote: every parameter name and shape must match the
 * store exactly (and the optimizer's kind and amsgrad / momentum, whose
 * other hyper-parameters, lr included, are restored as PyTorch's
 * load_state_dict does). optim, pos and rng may be NULL (not restored); a
 * non-NULL one must be in the file. On any error nothing is modified. */
QKV_API qkv_status qkv_checkpoint_load(const char *path, qkv_params *params, qkv_optim *optim,
                                       qkv_train_pos *pos, qkv_rng *rng);

/* ---- the training loop -------------------------------------------------- */

/* Progress of a run: on a terminal one line rewritten in place (at most ten
 * times a second), elsewhere plain lines (about twenty in a run, and the
 * last step): step, loss, learning rate, units (samples, tokens) per second. */
typedef struct {
    FILE *out; /* NULL: silent */
    int live;
    int64_t total;
    const char *unit;
    double t0, last;
    int64_t units, every;
} qkv_progress;

QKV_API void qkv_progress_start(qkv_progress *p, FILE *out, int64_t total_steps, const char *unit);
QKV_API void qkv_progress_step(qkv_progress *p, int64_t step, double loss, double lr,
                               int64_t units);
QKV_API void qkv_progress_finish(qkv_progress *p);

/* The batch function: build step's batch, run the forward and return the
 * scalar loss (in c's arena) and how many units (samples, tokens) it held.
 * Derive the data order from step so that a resumed run sees the same data. */
typedef qkv_status (*qkv_batch_fn)(qkv_ctx *c, void *user, int64_t step, qkv_tensor **loss,
                                   int64_t *units);

typedef struct {
    qkv_params *params;
    qkv_optim *optim;
    const qkv_schedule *schedule; /* NULL: the optimizer's lr stays */
    float clip_norm;              /* > 0: clip the gradients' global norm to it */
    int64_t steps;                /* train until pos->step reaches this */
    const char *checkpoint;       /* NULL: none; else saved every checkpoint_every steps and at the end */
    int64_t checkpoint_every;
    qkv_rng *rng;                 /* saved into checkpoints; may be NULL */
    FILE *progress;               /* NULL: silent */
    const char *unit;             /* "samples" (default), "tokens", ... */
    qkv_batch_fn batch;
    void *user;
    const qkv_checkpoint_meta *meta; /* NULL, or metadata saved with every checkpoint */
    /* NULL, or called after every step (after its checkpoint) with the
     * position reached and the step's loss, e.g. to evaluate: the ctx is
     * free to use (the next step resets it); an error stops training. */
    qkv_status (*after_step)(qkv_ctx *c, void *user, const qkv_train_pos *pos, double loss);
    /* Data-parallel training (docs/distributed.md): NULL or one rank trains
     * as one process. With N ranks each batch function builds its shard of
     * the step's global batch (qkv_dist_shard) and returns its units; the
     * gradients are averaged weighted by units; the optimizer is stepped
     * through qkv_dist_optim_step (ZeRO-1 if qkv_dist_zero1 was called);
     * only rank 0 prints progress and writes checkpoints. */
    struct qkv_dist *dist;
    int64_t check_every;   /* dist: compare parameter checksums every this many steps (0: 50) */
    int64_t bucket_floats; /* dist: all-reduce bucket size (0: 2^20 floats) */
    /* dist: BatchNorm's statistics over every rank's rows (PyTorch's
     * SyncBatchNorm, qkv_ctx_set_batch_sum), instead of each rank's own
     * (then rank 0's running statistics go to every rank after each step,
     * as DistributedDataParallel's broadcast_buffers does). A batch
     * function that fails on one rank then cannot tell the others (they
     * wait in a BatchNorm's sum): qkv_train returns its error there and
     * marks the engine broken (qkv_dist_broken); the program must exit
     * (qkv_dist_free does not finalize a broken engine), and mpirun then
     * stops the other ranks. */
    int sync_batchnorm;
} qkv_trainer;

/* Runs steps pos->step .. t->steps - 1: reset c, forward (t->batch),
 * check that the loss is finite, backward, clip, optimizer step, zero the
 * gradients, progress, checkpoint. A non-finite loss or gradient norm stops
 * training before that step changes anything, with an error naming the step
 * and the last checkpoint written, which is left as it was. To resume, load
 * a checkpoint into params, optim and pos and call again. */
QKV_API qkv_status qkv_train(qkv_ctx *c, const qkv_trainer *t, qkv_train_pos *pos);

/* ---- data-parallel training over a qkv_dist (qkv/dist.h; the loop calls
 * these, see qkv_trainer.dist) ---- */

/* After each rank's batch function: mine is its status, units and loss
 * its batch's. Every rank learns whether any failed: then all return an
 * error naming the first failed rank, the step and that rank's message.
 * Otherwise *total_units = sum units and *mean_loss = sum(loss * units) /
 * sum units, summed in rank order (the same bits on every rank). */
QKV_API qkv_status qkv_dist_batch_agree(qkv_dist *d, qkv_status mine, double units, double loss,
                                        int64_t step, double *total_units, double *mean_loss);
/* Every rank's status, before a collective step that a failed rank would
 * miss (after reading data and setting up, say): QKV_OK on every rank
 * when all are OK; otherwise every rank returns an error "WHAT: rank R of
 * N failed: MSG" naming the first failed rank, MSG its mine_msg (NULL:
 * its qkv_last_error()). Every rank must call it. One rank: returns mine. */
QKV_API qkv_status qkv_dist_agree(qkv_dist *d, qkv_status mine, const char *mine_msg,
                                  const char *what);
/* Every buffer of params (an entry with requires_grad 0: BatchNorm's
 * running statistics and num_batches_tracked) set to rank 0's, as
 * PyTorch's DistributedDataParallel(broadcast_buffers=True) does, so that
 * every rank's checkpointable state is the same. qkv_train calls it after
 * every optimizer step; nothing moves when the store has no buffer. */
QKV_API qkv_status qkv_dist_buffers_sync(qkv_dist *d, qkv_params *params);
/* A qkv_batch_sum_fn (qkv_ctx_set_batch_sum) over the ranks of d (user):
 * x (n doubles) summed over the ranks; weighted: sum_r w_r x_r / w_me with
 * w_r rank r's units / all units of the step, as qkv_dist_batch_agree
 * last saw them (a rank of weight 0 gets the plain sum). */
QKV_API qkv_status qkv_dist_batch_sum(void *user, double *x, int64_t n, int weighted);
/* Every gradient of params becomes the weighted mean over ranks:
 * sum_r (units_r / sum units) * grad_r, so that per-rank mean losses over
 * shards of a global batch give the gradient of the global batch's mean.
 * Reduced in buckets of about bucket_floats (0: 1M floats), all started
 * at once (MPI_Iallreduce) and waited in order. *total_units (may be NULL)
 * gets sum units. */
QKV_API qkv_status qkv_dist_grads_allreduce(qkv_dist *d, qkv_params *params, double units,
                                            int64_t bucket_floats, double *total_units);
/* A 64-bit hash of every parameter's bits, compared across ranks: QKV_OK
 * when all agree, QKV_ERR_STATE naming the first differing rank otherwise
 * (fn names the caller in the message). */
QKV_API qkv_status qkv_dist_check_params(qkv_dist *d, qkv_params *params, int64_t step);

/* ZeRO stage 1: this rank keeps (and updates) only its 1/size of the
 * optimizer's state, a contiguous range of the parameters' elements in
 * store order; qkv_dist_optim_step then all-gathers the parameters.
 * Call after any checkpoint load (which needs the whole state). *saved_bytes
 * (may be NULL) gets the bytes of state freed on this rank. */
QKV_API qkv_status qkv_dist_zero1(qkv_dist *d, qkv_optim *o, int64_t *saved_bytes);
/* qkv_optim_step, then (ZeRO-1) every rank's updated range to every rank.
 * d NULL: one process (qkv_optim_step only). */
QKV_API qkv_status qkv_dist_optim_step(qkv_dist *d, qkv_optim *o);
/* qkv_checkpoint_save_meta written by rank 0 only (a ZeRO-1 state
 * gathered to it first); every rank gets rank 0's status. d and meta may
 * be NULL. */
QKV_API qkv_status qkv_dist_checkpoint_save(qkv_dist *d, const char *path, qkv_params *params,
                                            const qkv_optim *optim, const qkv_train_pos *pos,
                                            const qkv_rng *rng, const qkv_checkpoint_meta *meta);

#ifdef __cplusplus
}
#endif
#endif
