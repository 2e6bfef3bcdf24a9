/* qkv/dist.h: data-parallel training across processes (included by qkv.h).
 * An engine moves F32 buffers between the ranks of a run: MPI when qkv is
 * built with it (make MPI=1, or found by pkg-config) and the program was
 * started by mpirun; otherwise one process, where every operation is the
 * identity and training behaves exactly as without this header. What
 * training does with it (the gradients' all-reduce, ZeRO-1, rank 0's
 * checkpoints) is in qkv/train.h. docs/distributed.md: how to run, what it
 * costs, the lines a trainer adds. */
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

/* Starts the engine (MPI_Init once per process; a second qkv_dist_new
 * shares it). */
QKV_API qkv_status qkv_dist_new(qkv_dist **out, qkv_dist_engine engine);
/* Deprecated alias (docs/core.md, "Names"). */
QKV_API QKV_DEPRECATED("qkv_dist_new") qkv_status qkv_dist_init(qkv_dist **out, qkv_dist_engine engine);
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

/* Whether the ranks can no longer agree (a rank failed where the others
 * wait in a collective it will not join: qkv_trainer.sync_batchnorm); then
 * qkv_dist_free does not finalize MPI (that would wait for them) and the
 * program should exit with a failure, which makes mpirun stop the others. */
QKV_API int qkv_dist_broken(const qkv_dist *d);
QKV_API void qkv_dist_set_broken(qkv_dist *d);

#ifdef __cplusplus
}
#endif
#endif
