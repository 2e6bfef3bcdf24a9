/* dist_internal.h: an engine behind qkv_dist (dist.c: the single process;
 * dist_mpi.c: MPI). Another engine is one more table of these functions. */
#ifndef QKV_DIST_INTERNAL_H
#define QKV_DIST_INTERNAL_H
#include "dist/comm.h"

typedef struct qkv_dist_ops {
    const char *name;
    /* x (n) of type f64 ? double : float summed over ranks, in place */
    qkv_status (*allreduce)(qkv_dist *d, void *x, int64_t n, int f64);
    /* non-blocking: start the sum of bucket k, wait for buckets in order */
    qkv_status (*iallreduce)(qkv_dist *d, float *x, int64_t n, int k);
    qkv_status (*wait_all)(qkv_dist *d, int nreq);
    qkv_status (*broadcast)(qkv_dist *d, void *buf, int64_t bytes, int root);
    qkv_status (*allgather)(qkv_dist *d, const void *send, int64_t bytes, void *recv);
    /* buf (sum counts) floats: rank r's counts[r] at displs[r] to every rank */
    qkv_status (*allgatherv)(qkv_dist *d, float *buf, const int64_t *counts, const int64_t *displs);
    /* rank r's send (counts[r]) to root's recv at displs[r] */
    qkv_status (*gatherv)(qkv_dist *d, const float *send, float *recv, const int64_t *counts,
                          const int64_t *displs, int root);
    qkv_status (*barrier)(qkv_dist *d);
    void (*finalize)(qkv_dist *d);
} qkv_dist_ops;

struct qkv_dist {
    const qkv_dist_ops *ops;
    int rank, size;
    void *engine; /* the engine's own state (MPI requests) */
    float *flat;  /* (flat_cap) scratch: packed gradients, gathered parameters */
    int64_t flat_cap;
    double weight; /* qkv_dist_weight (comm.h) */
    int broken;    /* qkv_dist_set_broken: do not finalize */
};

/* The MPI engine (dist_mpi.c): QKV_ERR_ARG when built without MPI. */
qkv_status qkv_dist_mpi_start(qkv_dist *d);
#endif
