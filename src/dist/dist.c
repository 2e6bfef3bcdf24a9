/* dist.c: qkv_dist's interface and the single-process engine, where every
 * collective is the identity (one rank holds the whole sum). */
#include <stdlib.h>
#include <string.h>
#include "dist/dist_internal.h"

static qkv_status s_allreduce(qkv_dist *d, void *x, int64_t n, int f64) { return QKV_OK; }
static qkv_status s_iallreduce(qkv_dist *d, float *x, int64_t n, int k) { return QKV_OK; }
static qkv_status s_wait_all(qkv_dist *d, int nreq) { return QKV_OK; }
static qkv_status s_broadcast(qkv_dist *d, void *buf, int64_t bytes, int root) { return QKV_OK; }
static qkv_status s_allgather(qkv_dist *d, const void *send, int64_t bytes, void *recv)
{
    if (recv != send) memmove(recv, send, (size_t)bytes);
    return QKV_OK;
}
static qkv_status s_allgatherv(qkv_dist *d, float *buf, const int64_t *counts, const int64_t *displs)
{
    return QKV_OK;
}
static qkv_status s_gatherv(qkv_dist *d, const float *send, float *recv, const int64_t *counts,
                            const int64_t *displs, int root)
{
    if (recv + displs[0] != send) memmove(recv + displs[0], send, (size_t)counts[0] * sizeof *send);
    return QKV_OK;
}
static qkv_status s_barrier(qkv_dist *d) { return QKV_OK; }
static void s_finalize(qkv_dist *d) {}

static const qkv_dist_ops single_ops = {"single", s_allreduce, s_iallreduce, s_wait_all, s_broadcast,
                                        s_allgather, s_allgatherv, s_gatherv, s_barrier, s_finalize};

qkv_status qkv_dist_new(qkv_dist **out, qkv_dist_engine engine)
{
    QKV_NEED(out, "dist_new", "out");
    *out = NULL;
    if (engine != QKV_DIST_AUTO && engine != QKV_DIST_SINGLE && engine != QKV_DIST_MPI)
        return qkv_fail(QKV_ERR_ARG, "dist_new: unknown engine %d", (int)engine);
    qkv_dist *d = calloc(1, sizeof *d);
    if (!d) return qkv_fail(QKV_ERR_NOMEM, "dist_new: out of memory");
    d->ops = &single_ops, d->rank = 0, d->size = 1;
    /* AUTO: MPI only under an MPI launcher, so that a plain run of an MPI
     * build never starts MPI and behaves as the build without it. */
    int mpi = engine == QKV_DIST_MPI || (engine == QKV_DIST_AUTO && qkv_dist_has_mpi() &&
                                         qkv_dist_launched());
    if (mpi) {
        qkv_status s = qkv_dist_mpi_start(d);
        if (s) {
            free(d->engine);
            free(d);
            return s;
        }
    }
    *out = d;
    return QKV_OK;
}

/* the deprecated name (docs/core.md, "Names") */
qkv_status qkv_dist_init(qkv_dist **out, qkv_dist_engine engine) { return qkv_dist_new(out, engine); }

void qkv_dist_free(qkv_dist *d)
{
    if (!d) return;
    if (!d->broken) d->ops->finalize(d); /* broken: the others wait elsewhere */
    free(d->flat);
    free(d);
}

int qkv_dist_rank(const qkv_dist *d) { return d ? d->rank : 0; }
int qkv_dist_broken(const qkv_dist *d) { return d ? d->broken : 0; }
void qkv_dist_set_broken(qkv_dist *d)
{
    if (d) d->broken = d->size > 1;
}
int qkv_dist_size(const qkv_dist *d) { return d ? d->size : 1; }
const char *qkv_dist_engine_name(const qkv_dist *d) { return d ? d->ops->name : "single"; }

qkv_status qkv_dist_scratch(qkv_dist *d, int64_t n, float **out)
{
    if (n > d->flat_cap) {
        float *f = realloc(d->flat, (size_t)n * sizeof *f);
        if (!f) return qkv_fail(QKV_ERR_NOMEM, "dist: out of memory for %lld floats", (long long)n);
        d->flat = f, d->flat_cap = n;
    }
    *out = d->flat;
    return QKV_OK;
}

qkv_status qkv_dist_iallreduce(qkv_dist *d, float *x, int64_t n, int k)
{
    return d->ops->iallreduce(d, x, n, k);
}

qkv_status qkv_dist_wait_all(qkv_dist *d, int nreq) { return d->ops->wait_all(d, nreq); }

qkv_status qkv_dist_allgatherv(qkv_dist *d, float *buf, const int64_t *counts, const int64_t *displs)
{
    return d->ops->allgatherv(d, buf, counts, displs);
}

qkv_status qkv_dist_gatherv(qkv_dist *d, const float *send, float *recv, const int64_t *counts,
                            const int64_t *displs, int root)
{
    return d->ops->gatherv(d, send, recv, counts, displs, root);
}

double qkv_dist_weight(const qkv_dist *d) { return d->weight; }
void qkv_dist_set_weight(qkv_dist *d, double w) { d->weight = w; }

static qkv_status allreduce(qkv_dist *d, void *x, int64_t n, qkv_dist_op op, int f64, const char *fn)
{
    QKV_NEED(d, fn, "dist");
    if (n > 0) QKV_NEED(x, fn, "x");
    if (n < 0) return qkv_fail(QKV_ERR_ARG, "%s: n %lld is negative", fn, (long long)n);
    if (op != QKV_DIST_SUM && op != QKV_DIST_MEAN)
        return qkv_fail(QKV_ERR_ARG, "%s: unknown op %d", fn, (int)op);
    if (d->size == 1 || n == 0) return QKV_OK;
    QKV_TRY(d->ops->allreduce(d, x, n, f64));
    if (op == QKV_DIST_MEAN)
        for (int64_t i = 0; i < n; i++) {
            if (f64) ((double *)x)[i] /= d->size;
            else ((float *)x)[i] /= (float)d->size;
        }
    return QKV_OK;
}

qkv_status qkv_dist_allreduce(qkv_dist *d, float *x, int64_t n, qkv_dist_op op)
{
    return allreduce(d, x, n, op, 0, "dist_allreduce");
}

qkv_status qkv_dist_allreduce_f64(qkv_dist *d, double *x, int64_t n, qkv_dist_op op)
{
    return allreduce(d, x, n, op, 1, "dist_allreduce_f64");
}

qkv_status qkv_dist_broadcast(qkv_dist *d, void *buf, int64_t bytes, int root)
{
    QKV_NEED(d, "dist_broadcast", "dist");
    if (bytes > 0) QKV_NEED(buf, "dist_broadcast", "buf");
    if (bytes < 0 || root < 0 || root >= d->size)
        return qkv_fail(QKV_ERR_ARG, "dist_broadcast: %lld bytes from root %d of %d ranks",
                        (long long)bytes, root, d->size);
    return d->size == 1 || bytes == 0 ? QKV_OK : d->ops->broadcast(d, buf, bytes, root);
}

qkv_status qkv_dist_allgather(qkv_dist *d, const void *send, int64_t bytes, void *recv)
{
    QKV_NEED(d, "dist_allgather", "dist");
    if (bytes < 0) return qkv_fail(QKV_ERR_ARG, "dist_allgather: %lld bytes", (long long)bytes);
    if (bytes == 0) return QKV_OK;
    QKV_NEED(send, "dist_allgather", "send");
    QKV_NEED(recv, "dist_allgather", "recv");
    return d->ops->allgather(d, send, bytes, recv);
}

qkv_status qkv_dist_barrier(qkv_dist *d)
{
    QKV_NEED(d, "dist_barrier", "dist");
    return d->ops->barrier(d);
}

int qkv_dist_started(const qkv_dist *d)
{
    return d->ops && d->size >= 1 && d->rank >= 0 && d->rank < d->size;
}

void qkv_dist_shard(const qkv_dist *d, int64_t n, int64_t *begin, int64_t *count)
{
    qkv_dist_shard_of(n, qkv_dist_rank(d), qkv_dist_size(d), begin, count);
}

void qkv_dist_shard_of(int64_t n, int rank, int nranks, int64_t *begin, int64_t *count)
{
    int64_t r = rank, size = nranks;
    if (n < 0) n = 0;
    int64_t q = n / size, extra = n % size;
    int64_t b = r * q + (r < extra ? r : extra), c = q + (r < extra);
    if (begin) *begin = b;
    if (count) *count = c;
}
