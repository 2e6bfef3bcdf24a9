/* dist_cli.c: what every `qkv train` command does to train data-parallel
 * under mpirun (docs/distributed.md): start the engine, keep the other
 * ranks quiet, agree on the setup before the first collective step. */
#include <stdio.h>
#include "cli/cli.h"

qkv_status qkv_cli_dist_start(const char *cmd, qkv_dist **d)
{
    qkv_status s = qkv_dist_new(d, QKV_DIST_AUTO);
    if (s) {
        qkv_cli_report(cmd, "%s", qkv_last_error());
        return s;
    }
    if (qkv_dist_launched() && !qkv_dist_has_mpi())
        qkv_cli_report(cmd, "note: started by mpirun, but this qkv was built without MPI: "
                "each process trains alone (docs/distributed.md)");
    /* rank 0 prints, logs and draws; the others print only their errors */
    if (qkv_dist_rank(*d) != 0 && !freopen("/dev/null", "w", stdout)) {
        qkv_cli_report(cmd, "rank %d: cannot send its output to /dev/null", qkv_dist_rank(*d));
        qkv_dist_free(*d);
        *d = NULL;
        return QKV_ERR_IO;
    }
    return QKV_OK;
}

qkv_status qkv_cli_dist_agree(qkv_dist *d, qkv_status mine, const char *what)
{
    if (qkv_dist_size(d) == 1) return mine;
    qkv_status s = qkv_dist_agree(d, mine, mine ? qkv_cli_last_error() : NULL, what);
    if (s) qkv_cli_fail(s, "%s", qkv_last_error());
    return s;
}

const char *qkv_cli_dist_ranks(const qkv_dist *d)
{
    static char buf[64];
    if (qkv_dist_size(d) == 1) return "";
    snprintf(buf, sizeof buf, " per rank, data-parallel on %d ranks", qkv_dist_size(d));
    return buf;
}

void qkv_cli_zero1_note(const qkv_dist *d, int64_t saved)
{
    int n = qkv_dist_size(d);
    if (n == 1)
        printf("ZeRO-1: one process keeps the whole optimizer state (--zero1 shards it under mpirun)\n");
    else
        printf("ZeRO-1: the optimizer state on each of %d ranks is %lld bytes smaller (about %.0f%% of it)\n", n,
               (long long)saved, 100.0 * (n - 1) / n);
}
