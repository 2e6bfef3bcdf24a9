/* comm.h: the collectives the training floor (src/train/data_parallel.c)
 * builds on beyond include/qkv/dist.h: F32 buffers between the ranks, no
 * knowledge of what they hold. Each is the engine's operation (dist.c:
 * the identity on one process; dist_mpi.c: MPI). */
#ifndef QKV_DIST_COMM_H
#define QKV_DIST_COMM_H
#include "core/internal.h"

/* A scratch of room for n floats, kept by d for the next call. */
qkv_status qkv_dist_scratch(qkv_dist *d, int64_t n, float **out);
/* Starts the sum over ranks of x (n), bucket k (0, 1, ... in order);
 * qkv_dist_wait_all(d, nreq) waits for buckets 0 .. nreq-1. */
qkv_status qkv_dist_iallreduce(qkv_dist *d, float *x, int64_t n, int k);
qkv_status qkv_dist_wait_all(qkv_dist *d, int nreq);
/* buf (sum counts) floats: rank r's counts[r] at displs[r] to every rank. */
qkv_status qkv_dist_allgatherv(qkv_dist *d, float *buf, const int64_t *counts, const int64_t *displs);
/* Rank r's send (counts[r]) to root's recv at displs[r] (recv: root only). */
qkv_status qkv_dist_gatherv(qkv_dist *d, const float *send, float *recv, const int64_t *counts,
                            const int64_t *displs, int root);
/* Whether d is a started qkv_dist (a user pointer checked before use). */
int qkv_dist_started(const qkv_dist *d);
/* Rank's part of n items split into size parts, as qkv_dist_shard. */
void qkv_dist_shard_of(int64_t n, int rank, int size, int64_t *begin, int64_t *count);
/* A number the training floor keeps with d between calls: this rank's
 * units / all units at the last qkv_dist_batch_agree (0 at first). */
double qkv_dist_weight(const qkv_dist *d);
void qkv_dist_set_weight(qkv_dist *d, double w);
#endif
