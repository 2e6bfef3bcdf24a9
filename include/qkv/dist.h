/* qkv/dist.h: data-parallel training across processes (included by qkv.h).
 * An engine moves F32 buffers between the ranks of a run: MPI when qkv is
 * built with it (make MPI=1, or found by pkg-config) and the program was
 * started by mpirun; otherwise one process, where every operation is the
 * identity and training behaves exactly as without this header.
 * docs/distributed.md: how to run, what it costs, the lines a trainer adds. */
#include "qkv.h" /* first: qkv.h includes every area header in order */
#ifndef QKV_DIST_H
#define QKV_DIST_H
#ifdef __cplusplus
extern "C" {
#endif

typedef struct qkv_dist qkv_dist;

typedef enum {
    QKV_DIST_AUTO = 0, /* MPI when built with it and started by mpirun, else single */
    QKV_DIST_SINGLE,   /* one process: rank 0 of 1 */
    QKV_DIST_MPI       /* MPI_COMM_WORLD; QKV_ERR_ARG when built without MPI */
} qkv_dist_engine;

typedef enum { QKV_DIST_SUM = 0, QKV_DIST_MEAN } qkv_dist_op;

/* Starts the engine (MPI_Init once per process; a second qkv_dist_init
 * shares it). */
QKV_API qkv_status qkv_dist_init(qkv_dist **out, qkv_dist_engine engine);
/* Ends it (MPI_Finalize when the last qkv_dist goes). NULL is fine. */
QKV_API void qkv_dist_free(qkv_dist *d);
QKV_API int qkv_dist_rank(const qkv_dist *d); /* 0 for NULL */
QKV_API int qkv_dist_size(const qkv_dist *d); /* 1 for NULL */
QKV_API const char *qkv_dist_engine_name(const qkv_dist *d); /* "single", "mpi" */
/* Whether this build has the MPI engine. */
QKV_API int qkv_dist_has_mpi(void);
/* Whether an MPI launcher started this process (mpirun's environment:
 * OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_SIZE). */
QKV_API int qkv_dist_launched(void);

/* x (n) on every rank becomes the sum (or mean) over ranks, on every rank.
 * The same n on every rank. */
QKV_API qkv_status qkv_dist_allreduce(qkv_dist *d, float *x, int64_t n, qkv_dist_op op);
/* The same for doubles (losses, counts). */
QKV_API qkv_status qkv_dist_allreduce_f64(qkv_dist *d, double *x, int64_t n, qkv_dist_op op);
/* buf (bytes) of rank root copied to every rank. */
QKV_API qkv_status qkv_dist_broadcast(qkv_dist *d, void *buf, int64_t bytes, int root);
/* recv (size * bytes) gets every rank's send (bytes), in rank order. */
QKV_API qkv_status qkv_dist_allgather(qkv_dist *d, const void *send, int64_t bytes, void *recv);
QKV_API qkv_status qkv_dist_barrier(qkv_dist *d);

/* This rank's part [*begin, *begin + *count) of n items split into size
 * contiguous parts, the first n % size parts one longer. */
QKV_API void qkv_dist_shard(const qkv_dist *d, int64_t n, int64_t *begin, int64_t *count);

/* ---- data-parallel training (the loop calls these; see qkv_trainer.dist) -- */

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
/* Whether the ranks can no longer agree (a rank failed where the others
 * wait in a collective it will not join: qkv_trainer.sync_batchnorm); then
 * qkv_dist_free does not finalize MPI (that would wait for them) and the
 * program should exit with a failure, which makes mpirun stop the others. */
QKV_API int qkv_dist_broken(const qkv_dist *d);
QKV_API void qkv_dist_set_broken(qkv_dist *d);
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
