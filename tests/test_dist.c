/* test_dist.c: data-parallel training (src/dist/). Without MPI: the
 * single-process engine is the identity and training through it gives the
 * same bits as training without it; the MPI tests say that they did not
 * run. With MPI (make MPI=1 or found by pkg-config) and mpirun on PATH, this
 * program starts itself under `mpirun -np 2` and `-np 4` (as a worker) and
 * checks: 20 steps of the toy attention network with global batch 8 give the
 * parameters of one process with batch 8 (<= 1e-6 relative); the same with
 * ZeRO-1; a checkpoint saved by 4 ranks resumed by 2 continues to the same
 * parameters; a rank whose batch fails stops every rank with a message
 * naming it; a rank whose parameters drift is caught by the checksum.
 * And BatchNorm's synchronised path (qkv_ctx_set_batch_sum) over one
 * process gives the bits of the plain one. test_dist_cli.c trains the
 * commands under mpirun. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"
#include "core/internal.h" /* qkv_fail: a batch function's error */

enum { N_TRAIN = 32, T = 40, BATCH = 8, STEPS = 20, CH = 8 };

typedef struct {
    float *in, *target; // (N_TRAIN,1,T) each
    qkv_toy_net net;
    qkv_dist *dist;
    int fail_rank; /* this rank's batch fails at step 3 (-1: none); 100 + r: rank r's
                    * parameters drift at step 3 (the checksum must catch it); 200 + r:
                    * synchronised BatchNorm on the input, and rank r's batch fails at
                    * step 3 while the others wait in its sums */
    qkv_params *p;
} job;

/* Step s: rows [s*BATCH, (s+1)*BATCH) mod N_TRAIN, this rank's shard of them. */
static qkv_status batch(qkv_ctx *c, void *user, int64_t step, qkv_tensor **loss, int64_t *units)
{
    job *j = user;
    if (step == 3 && qkv_dist_rank(j->dist) + 100 == j->fail_rank)
        qkv_params_at(j->p, 0)->data[0] += 1e-3f;
    if (step == 3 && qkv_dist_rank(j->dist) == j->fail_rank % 100 && j->fail_rank % 200 < 100)
        return qkv_fail(QKV_ERR_IO, "cannot read the data shard /nonexistent/shard%d.bin", j->fail_rank % 100);
    int64_t first, n, row0 = (step * BATCH) % N_TRAIN;
    qkv_dist_shard(j->dist, BATCH, &first, &n);
    qkv_tensor *x, *t, *y;
    int64_t shape[3] = {n, 1, T};
    qkv_status s = qkv_tensor_wrap(qkv_ctx_arena(c), j->in + (row0 + first) * T, 3, shape, &x);
    if (!s) s = qkv_tensor_wrap(qkv_ctx_arena(c), j->target + (row0 + first) * T, 3, shape, &t);
    if (!s && j->fail_rank >= 200) s = qkv_batch_norm(c, x, NULL, NULL, NULL, NULL, 1, 0.1f, 1e-5f, &x);
    if (!s) s = qkv_module_forward(c, &j->net.seq.base, x, &y);
    *units = n;
    return s ? s : qkv_mse_loss(c, y, t, QKV_REDUCTION_MEAN, loss);
}

/* Trains from `from` (or fresh) to `steps`; out (numel) gets the parameters. */
static qkv_status train(qkv_dist *d, int zero1, const char *from, const char *ckpt, int64_t steps,
                        int fail_rank, float *out, int64_t *numel)
{
    job j = {.dist = d, .fail_rank = fail_rank};
    j.in = malloc(N_TRAIN * T * sizeof(float));
    j.target = malloc(N_TRAIN * T * sizeof(float));
    qkv_rng r;
    qkv_rng_seed(&r, 3);
    qkv_params *p = NULL;
    qkv_optim *o = NULL;
    qkv_ctx *c = NULL;
    qkv_status s = j.in && j.target ? QKV_OK : QKV_ERR_NOMEM;
    if (!s) s = qkv_toy_generate(&r, QKV_TOY_PAIRS, N_TRAIN, T, 0.3f, j.in, j.target);
    if (!s) s = qkv_params_new(&p);
    j.p = p;
    if (!s) s = qkv_toy_net_init(&j.net, QKV_TOY_ATTENTION, 1, CH, 5, 1, p, &r);
    /* SGD with momentum sees the gradients' scale (a sum instead of a mean
     * over ranks fails); AdamW with clipping hardly would, and is what
     * ZeRO-1 shards (its two moments). */
    qkv_optim_opts oo = qkv_optim_adamw_opts_default();
    oo.lr = 1e-2;
    if (!zero1) oo = qkv_optim_sgd_opts_default(1e-3), oo.momentum = 0.9;
    if (!s) s = qkv_optim_new(&o, p, &oo);
    qkv_train_pos pos = {0};
    if (!s && from) s = qkv_checkpoint_load(from, p, o, &pos, NULL);
    if (!s && zero1 && d) s = qkv_dist_zero1(d, o, NULL);
    if (!s) s = qkv_ctx_new(&c);
    qkv_trainer t = {.params = p, .optim = o, .clip_norm = zero1 ? 1.0f : 0, .steps = steps, .checkpoint = ckpt,
                     .checkpoint_every = 10, .batch = batch, .user = &j, .dist = d, .check_every = 5,
                     .sync_batchnorm = fail_rank >= 200};
    if (!s) s = qkv_train(c, &t, &pos);
    int64_t k = 0;
    for (int i = 0; !s && out && i < qkv_params_count(p); i++) {
        qkv_tensor *w = qkv_params_at(p, i);
        memcpy(out + k, w->data, (size_t)qkv_tensor_numel(w) * sizeof(float));
        k += qkv_tensor_numel(w);
    }
    if (numel) *numel = k;
    qkv_ctx_free(c);
    qkv_optim_free(o);
    qkv_toy_net_free(&j.net);
    qkv_params_free(p);
    free(j.in);
    free(j.target);
    return s;
}

/* ---- BatchNorm's sums across processes, on one process ---------------- */

static int g_sums; /* calls of counting_sum */

static qkv_status counting_sum(void *user, double *x, int64_t n, int weighted)
{
    g_sums++;
    return qkv_dist_batch_sum(user, x, n, weighted);
}

/* F.batch_norm in training mode on x (4,3,5,5), then MSE against a target
 * and the backward: y, the running statistics and every gradient into out
 * (in that order); with sum, through the synchronised path. */
static int64_t bn_run(qkv_batch_sum_fn sum, void *user, float *out)
{
    qkv_params *p = NULL;
    qkv_ctx *c = NULL;
    qkv_tensor *x, *w, *b, *rm, *rv, *t, *y, *loss;
    int64_t xs[4] = {4, 3, 5, 5}, C = 3, k = 0;
    qkv_rng r;
    qkv_rng_seed(&r, 11);
    qkv_status s = qkv_params_new(&p);
    if (!s) s = qkv_params_add(p, "", "x", 4, xs, &x);
    if (!s) s = qkv_params_add(p, "", "w", 1, &C, &w);
    if (!s) s = qkv_params_add(p, "", "b", 1, &C, &b);
    if (!s) s = qkv_params_add_buffer(p, "", "rm", 1, &C, &rm);
    if (!s) s = qkv_params_add_buffer(p, "", "rv", 1, &C, &rv);
    if (!s) s = qkv_ctx_new(&c);
    if (!s) {
        qkv_rng_fill_normal(&r, x->data, 300, 0.5f, 2), qkv_rng_fill_normal(&r, w->data, 3, 1, 0.3f);
        qkv_rng_fill_normal(&r, b->data, 3, 0, 0.3f), qkv_rng_fill_normal(&r, rm->data, 3, 0, 1);
        for (int i = 0; i < 3; i++) rv->data[i] = 1 + 0.5f * (float)i;
        qkv_ctx_set_training(c, 1);
        qkv_ctx_set_batch_sum(c, sum, user);
        s = qkv_tensor_new(qkv_ctx_arena(c), QKV_F32, 4, xs, &t);
    }
    if (!s) qkv_rng_fill_normal(&r, t->data, 300, 0, 1);
    if (!s) s = qkv_batch_norm(c, x, rm, rv, w, b, 1, 0.1f, 1e-5f, &y);
    if (!s) s = qkv_mse_loss(c, y, t, QKV_REDUCTION_MEAN, &loss);
    if (!s) s = qkv_backward(c, loss, NULL);
    const qkv_tensor *parts[] = {y, rm, rv};
    for (int i = 0; !s && i < 3; i++)
        memcpy(out + k, parts[i]->data, (size_t)qkv_tensor_numel(parts[i]) * sizeof *out), k += qkv_tensor_numel(parts[i]);
    const qkv_tensor *grads[] = {x, w, b};
    for (int i = 0; !s && i < 3; i++)
        memcpy(out + k, grads[i]->grad, (size_t)qkv_tensor_numel(grads[i]) * sizeof *out), k += qkv_tensor_numel(grads[i]);
    CHECK_OK(s);
    qkv_ctx_free(c);
    qkv_params_free(p);
    return k;
}

/* The synchronised path over one process (the single engine's sum is the
 * identity, weight 1) gives the bits of the plain one, forward and
 * backward; two sums in the forward, one in the backward. */
static void check_sync_batchnorm(qkv_dist *single)
{
    static float plain[1024], synced[1024];
    int64_t n = bn_run(NULL, NULL, plain);
    g_sums = 0;
    int64_t m = bn_run(counting_sum, single, synced);
    CHECK(n == m && n == 300 + 6 + 300 + 6 && !memcmp(plain, synced, (size_t)n * sizeof *plain),
          "synchronised BatchNorm over one process differs from the plain one (%lld and %lld values)",
          (long long)n, (long long)m);
    CHECK(g_sums == 3, "synchronised BatchNorm summed %d times, expected 2 forward + 1 backward", g_sums);
}

enum { MAXP = 1 << 16 };

/* Worker: --worker ZERO1 FROM|- CKPT|- STEPS FAIL_RANK OUT|- */
static int worker(char **a)
{
    qkv_dist *d;
    if (qkv_dist_new(&d, QKV_DIST_MPI)) {
        fprintf(stderr, "worker: %s\n", qkv_last_error());
        return 2;
    }
    static float params[MAXP];
    int64_t n = 0;
    const char *from = strcmp(a[1], "-") ? a[1] : NULL, *ckpt = strcmp(a[2], "-") ? a[2] : NULL;
    qkv_status s = train(d, atoi(a[0]), from, ckpt, atoll(a[3]), atoi(a[4]), params, &n);
    int rc = 0;
    if (s) {
        fprintf(stderr, "worker rank %d: %s\n", qkv_dist_rank(d), qkv_last_error());
        rc = 1;
    } else if (qkv_dist_rank(d) == 0 && strcmp(a[5], "-")) {
        FILE *f = fopen(a[5], "wb");
        rc = !f || fwrite(params, sizeof(float), (size_t)n, f) != (size_t)n;
        if (f) fclose(f);
    }
    qkv_dist_free(d); /* broken (a failed rank under synchronised BatchNorm): not finalized */
    return rc;
}

static char self[4096], dir[64];

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Runs the worker under mpirun -np; returns its exit status; output in out. */
static int mpi_run(int np, const char *args, char *out, size_t cap)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 timeout 100 mpirun --allow-run-as-root "
             "--oversubscribe -np %d %s --worker %s 2>&1", np, self, args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t k = fread(out, 1, cap - 1, p);
    out[k] = 0;
    return pclose(p);
}

static int64_t load(const char *path, float *x)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    int64_t n = (int64_t)fread(x, sizeof(float), MAXP, f);
    fclose(f);
    return n;
}

static void check_same(const char *what, const float *ref, int64_t n, const char *path)
{
    static float got[MAXP];
    int64_t m = load(path, got);
    CHECK(m == n, "%s: %lld parameters written, expected %lld", what, (long long)m, (long long)n);
    if (m != n) return;
    double e = h_rel_err(got, ref, n);
    printf("  %s: relative difference from one process %.3g%s\n", what, e, e == 0 ? " (bit-identical)" : "");
    CHECK(e <= 1e-6, "%s: relative difference %g from one process", what, e);
}

int main(int argc, char **argv)
{
    if (argc == 8 && !strcmp(argv[1], "--worker")) return worker(argv + 2);
    static float ref[MAXP], refz[MAXP], again[MAXP];
    int64_t n = 0, n2 = 0;

    /* The single engine: rank 0 of 1; collectives leave buffers as they are. */
    qkv_dist *d;
    CHECK_OK(qkv_dist_new(&d, QKV_DIST_SINGLE));
    CHECK(qkv_dist_rank(d) == 0 && qkv_dist_size(d) == 1, "single engine: rank %d of %d",
          qkv_dist_rank(d), qkv_dist_size(d));
    float x[3] = {1.5f, -2, 3};
    CHECK_OK(qkv_dist_allreduce(d, x, 3, QKV_DIST_MEAN));
    CHECK(x[0] == 1.5f && x[1] == -2 && x[2] == 3, "single allreduce changed the buffer");
    float g[3];
    CHECK_OK(qkv_dist_allgather(d, x, sizeof x, g));
    CHECK(!memcmp(g, x, sizeof x), "single allgather");
    CHECK_ERR(qkv_dist_allreduce(NULL, x, 3, QKV_DIST_SUM), QKV_ERR_ARG, "dist");
    CHECK_ERR(qkv_dist_broadcast(d, x, 4, 1), QKV_ERR_ARG, "root 1");
    qkv_dist *bad;
    CHECK_ERR(qkv_dist_new(&bad, 7), QKV_ERR_ARG, "engine");
    int64_t b, c;
    qkv_dist_shard(NULL, 10, &b, &c);
    CHECK(b == 0 && c == 10, "shard of one rank: [%lld, +%lld)", (long long)b, (long long)c);

    /* Training through the single engine (and ZeRO-1 on it) gives the bits
     * of training without it. */
    for (int z = 0; z < 2; z++) {
        CHECK_OK(train(NULL, z, NULL, NULL, STEPS, -1, z ? refz : ref, &n));
        CHECK_OK(train(d, z, NULL, NULL, STEPS, -1, again, &n2));
        CHECK(n == n2 && !memcmp(z ? refz : ref, again, (size_t)n * sizeof(float)),
              "one process through the single engine%s differs from training without it",
              z ? " with ZeRO-1" : "");
    }
    CHECK(h_rel_err(ref, refz, n) > 1e-3, "SGD and AdamW trained to the same parameters");
    check_sync_batchnorm(d);
    qkv_dist_free(d);
    if (!qkv_dist_has_mpi()) {
        printf("test_dist: the MPI tests did NOT run: qkv was built without MPI (install "
               "libopenmpi-dev openmpi-bin, tools/setup.sh --test, and rebuild)\n");
        return h_finish("test_dist");
    }
    if (system("command -v mpirun >/dev/null 2>&1") != 0) {
        printf("test_dist: the MPI tests did NOT run: mpirun is not on PATH (apt-get install openmpi-bin)\n");
        return h_finish("test_dist");
    }
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    if (k <= 0) snprintf(self, sizeof self, "%s", argv[0]);
    else self[k] = 0;
    snprintf(dir, sizeof dir, "/tmp/qkv_test_dist_XXXXXX");
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char args[600], out[16384], path[128], ck[128];
    snprintf(path, sizeof path, "%s/params.bin", dir);
    snprintf(ck, sizeof ck, "%s/ckpt.safetensors", dir);
    for (int z = 0; z < 2; z++)
        for (int np = 2; np <= 4; np += 2) {
            char what[64];
            snprintf(what, sizeof what, "%d ranks%s", np, z ? ", ZeRO-1" : "");
            snprintf(args, sizeof args, "%d - - %d -1 %s", z, STEPS, path);
            int rc = mpi_run(np, args, out, sizeof out);
            CHECK(rc == 0, "%s: mpirun exit %d:\n%s", what, rc, out);
            if (!rc) check_same(what, z ? refz : ref, n, path);
            remove(path);
        }
    /* 4 ranks save at step 10 (ZeRO-1: rank 0 gathers the moments); 2 resume */
    for (int z = 0; z < 2; z++) {
        char what[64];
        snprintf(what, sizeof what, "saved by 4 ranks, resumed by 2%s", z ? ", ZeRO-1" : "");
        snprintf(args, sizeof args, "%d - %s 10 -1 -", z, ck);
        int rc = mpi_run(4, args, out, sizeof out);
        CHECK(rc == 0, "%s: save: mpirun exit %d:\n%s", what, rc, out);
        snprintf(args, sizeof args, "%d %s - %d -1 %s", z, ck, STEPS, path);
        rc = mpi_run(2, args, out, sizeof out);
        CHECK(rc == 0, "%s: resume: mpirun exit %d:\n%s", what, rc, out);
        if (!rc) check_same(what, z ? refz : ref, n, path);
        remove(path);
        remove(ck);
    }
    /* rank 1 cannot read its shard at step 3: every rank stops, naming it */
    snprintf(args, sizeof args, "0 - - %d 1 -", STEPS);
    int rc = mpi_run(2, args, out, sizeof out);
    CHECK(rc != 0, "a failing rank: mpirun exit 0");
    CHECK(strstr(out, "worker rank 0: train: rank 1 of 2 stopped at step 3") &&
          strstr(out, "/nonexistent/shard1.bin"), "a failing rank: rank 0 said:\n%s", out);
    /* rank 1's parameters drift at step 3: the checksum after step 5 stops all */
    snprintf(args, sizeof args, "0 - - %d 101 -", STEPS);
    rc = mpi_run(2, args, out, sizeof out);
    CHECK(rc != 0, "drifting parameters: mpirun exit 0");
    CHECK(strstr(out, "worker rank 0: train: the parameters of rank 1 differ from rank 0's after step 4"),
          "drifting parameters: the workers said:\n%s", out);
    /* synchronised BatchNorm: rank 1 fails at step 3 while rank 0 waits in
     * a BatchNorm's sum; rank 1 exits without finalizing, mpirun stops
     * rank 0 (timeout 100 s above: a hang fails) */
    snprintf(args, sizeof args, "0 - - %d 201 -", STEPS);
    double t0 = now_s();
    rc = mpi_run(2, args, out, sizeof out);
    double sec = now_s() - t0;
    printf("  synchronised BatchNorm, rank 1 failing: mpirun exit %d after %.2f s\n", rc, sec);
    CHECK(rc != 0 && sec < 90, "synchronised BatchNorm, a failing rank: mpirun exit %d after %.1f s", rc, sec);
    CHECK(strstr(out, "worker rank 1: train: rank 1 of 2 stopped at step 3: cannot read the data shard "
                      "/nonexistent/shard1.bin (with synchronised BatchNorm"),
          "synchronised BatchNorm, a failing rank: the workers said:\n%s", out);
    rmdir(dir);
    return h_finish("test_dist");
}
