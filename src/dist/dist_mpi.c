/* dist_mpi.c: the MPI engine (MPI_COMM_WORLD), built when qkv is built
 * with MPI (the Makefile defines QKV_MPI); otherwise qkv_dist_mpi_start
 * says so. MPI's own errors are returned, not fatal (MPI_ERRORS_RETURN). */
#include <stdlib.h>
#include "dist/dist_internal.h"

int qkv_dist_launched(void)
{
    /* Open MPI's mpirun, PMIx launchers (srun, prterun), MPICH's hydra */
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_SIZE");
}

#ifndef QKV_MPI
int qkv_dist_has_mpi(void) { return 0; }

qkv_status qkv_dist_mpi_start(qkv_dist *d)
{
    (void)d;
    return qkv_fail(QKV_ERR_ARG, "dist_new: this qkv was built without MPI (build with make MPI=1 "
                    "after apt-get install libopenmpi-dev openmpi-bin)");
}
#else
#include <limits.h>
#include <mpi.h>

int qkv_dist_has_mpi(void) { return 1; }

static int users;     /* qkv_dist objects on MPI */
static int we_inited; /* MPI_Init was ours: MPI_Finalize is ours too */

typedef struct {
    MPI_Request *req;
    int cap;
} mpi_state;

static qkv_status mpi_err(const char *fn, int rc)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return qkv_fail(QKV_ERR_STATE, "dist: %s failed: %.*s", fn, len, msg);
}
#define MPI_TRY(fn, call)                                                                          \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS) return mpi_err(fn, rc_);                                           \
    } while (0)

/* MPI counts are ints: longer buffers go in chunks. */
enum { CHUNK = 1 << 30 };

static qkv_status m_allreduce(qkv_dist *d, void *x, int64_t n, int f64)
{
    for (int64_t i = 0; i < n; i += CHUNK) {
        int k = (int)(n - i < CHUNK ? n - i : CHUNK);
        void *p = f64 ? (void *)((double *)x + i) : (void *)((float *)x + i);
        MPI_TRY("MPI_Allreduce", MPI_Allreduce(MPI_IN_PLACE, p, k, f64 ? MPI_DOUBLE : MPI_FLOAT,
                                               MPI_SUM, MPI_COMM_WORLD));
    }
    return QKV_OK;
}

static qkv_status m_iallreduce(qkv_dist *d, float *x, int64_t n, int k)
{
    mpi_state *m = d->engine;
    if (n > INT_MAX) return qkv_fail(QKV_ERR_ARG, "dist: a bucket of %lld floats", (long long)n);
    if (k >= m->cap) {
        int cap = 2 * k + 8;
        MPI_Request *r = realloc(m->req, (size_t)cap * sizeof *r);
        if (!r) return qkv_fail(QKV_ERR_NOMEM, "dist: out of memory for requests");
        m->req = r, m->cap = cap;
    }
    MPI_TRY("MPI_Iallreduce",
            MPI_Iallreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &m->req[k]));
    return QKV_OK;
}

static qkv_status m_wait_all(qkv_dist *d, int nreq)
{
    mpi_state *m = d->engine;
    for (int k = 0; k < nreq; k++) MPI_TRY("MPI_Wait", MPI_Wait(&m->req[k], MPI_STATUS_IGNORE));
    return QKV_OK;
}

static qkv_status m_broadcast(qkv_dist *d, void *buf, int64_t bytes, int root)
{
    for (int64_t i = 0; i < bytes; i += CHUNK) {
        int k = (int)(bytes - i < CHUNK ? bytes - i : CHUNK);
        MPI_TRY("MPI_Bcast", MPI_Bcast((char *)buf + i, k, MPI_BYTE, root, MPI_COMM_WORLD));
    }
    return QKV_OK;
}

static qkv_status m_allgather(qkv_dist *d, const void *send, int64_t bytes, void *recv)
{
    if (bytes > INT_MAX) return qkv_fail(QKV_ERR_ARG, "dist_allgather: %lld bytes", (long long)bytes);
    MPI_TRY("MPI_Allgather", MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE,
                                           MPI_COMM_WORLD));
    return QKV_OK;
}

/* int copies of counts and displacements, or an error when they do not fit */
static qkv_status to_int(const qkv_dist *d, const int64_t *c64, const int64_t *d64, int *c, int *dp)
{
    for (int r = 0; r < d->size; r++) {
        if (c64[r] > INT_MAX || d64[r] > INT_MAX)
            return qkv_fail(QKV_ERR_ARG, "dist: more than 2^31 floats in one gather");
        c[r] = (int)c64[r], dp[r] = (int)d64[r];
    }
    return QKV_OK;
}

static qkv_status m_allgatherv(qkv_dist *d, float *buf, const int64_t *counts, const int64_t *displs)
{
    int *c = malloc(2 * (size_t)d->size * sizeof *c);
    if (!c) return qkv_fail(QKV_ERR_NOMEM, "dist: out of memory");
    qkv_status s = to_int(d, counts, displs, c, c + d->size);
    int rc = s ? MPI_SUCCESS : MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, c, c + d->size,
                                               MPI_FLOAT, MPI_COMM_WORLD);
    free(c);
    return s ? s : rc != MPI_SUCCESS ? mpi_err("MPI_Allgatherv", rc) : QKV_OK;
}

static qkv_status m_gatherv(qkv_dist *d, const float *send, float *recv, const int64_t *counts,
                            const int64_t *displs, int root)
{
    int *c = malloc(2 * (size_t)d->size * sizeof *c);
    if (!c) return qkv_fail(QKV_ERR_NOMEM, "dist: out of memory");
    qkv_status s = to_int(d, counts, displs, c, c + d->size);
    int rc = s ? MPI_SUCCESS : MPI_Gatherv(send, c[d->rank], MPI_FLOAT, recv, c, c + d->size,
                                            MPI_FLOAT, root, MPI_COMM_WORLD);
    free(c);
    return s ? s : rc != MPI_SUCCESS ? mpi_err("MPI_Gatherv", rc) : QKV_OK;
}

static qkv_status m_barrier(qkv_dist *d)
{
    MPI_TRY("MPI_Barrier", MPI_Barrier(MPI_COMM_WORLD));
    return QKV_OK;
}

static void m_finalize(qkv_dist *d)
{
    mpi_state *m = d->engine;
    if (m) free(m->req);
    free(m);
    int fin = 0;
    MPI_Finalized(&fin);
    if (--users == 0 && we_inited && !fin) MPI_Finalize();
}

static const qkv_dist_ops mpi_ops = {"mpi", m_allreduce, m_iallreduce, m_wait_all, m_broadcast,
                                     m_allgather, m_allgatherv, m_gatherv, m_barrier, m_finalize};

qkv_status qkv_dist_mpi_start(qkv_dist *d)
{
    int inited = 0, fin = 0;
    MPI_Finalized(&fin);
    if (fin) return qkv_fail(QKV_ERR_STATE, "dist_new: MPI was already finalized in this process");
    MPI_Initialized(&inited);
    if (!inited) {
        int provided;
        /* OpenMP threads compute; only the thread that started MPI calls it */
        MPI_TRY("MPI_Init_thread", MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided));
        we_inited = 1;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->size);
    d->engine = calloc(1, sizeof(mpi_state));
    if (!d->engine) return qkv_fail(QKV_ERR_NOMEM, "dist_new: out of memory");
    d->ops = &mpi_ops;
    users++;
    return QKV_OK;
}
#endif
