/* test_dist_cli.c: `qkv train lm`, `qkv train mlp|cnn` and `qkv train
 * translation` data-parallel
 * under `mpirun --allow-run-as-root --oversubscribe -np 2`, on tiny models
 * and the made-up data (made_up_data.h), in a temporary folder:
 *  - 2 ranks give the parameters of 1 process with the same global batch
 *    (lm, mlp, translation), and a run saved by 2 ranks and resumed by 1
 *    ends where the uninterrupted 1-process run ends;
 *  - the validation loss and test accuracy (split between the ranks for
 *    lm and vision, rank 0's for translation) and translation's log.tsv
 *    are what one process writes;
 *  - lm --zero1, saved and resumed by 2 ranks: the bits of 2 ranks without;
 *  - cnn: BatchNorm's running statistics stay the same on every rank (else
 *    the parameter checksum after the last step stops the run),
 *    num_batches_tracked counts global steps, and a 2-rank save resumes on
 *    1 rank;
 *  - a rank that cannot read its corpus (mpirun's MPMD form gives rank 1
 *    another --corpus) stops every rank with a message naming the rank and
 *    the file.
 * Without MPI (or mpirun) it says loudly that these did NOT run.
 *
 * How close is "the same": the max over parameters of |2 ranks - 1
 * process| / max |p|, and the same ratio of root mean squares. With SGD
 * (test_dist) the max is 2e-7. These trainers use AdamW, which divides
 * each gradient by its own running RMS: an element whose gradient is a
 * cancellation (a sum of terms much larger than itself) has float
 * rounding of the size of the gradient, and Adam turns that into a
 * difference of a good part of lr, whatever the split. One process with
 * 2 threads differs from 1 thread by as much (measured, docs/distributed.md).
 * So: lm, every parameter but one slice within 1e-6 (max); that slice is
 * the attention's key bias, whose true gradient is 0 (softmax does not
 * change when every score of a query moves by q . b_k), so both runs move
 * it by Adam-amplified rounding only: bounded by steps x lr. mlp: RMS
 * within 1e-5 and max within 1e-3; translation: max within 1e-5. How much
 * rounding there is depends on the BLAS kernel: OpenBLAS's AVX-512 sgemm
 * (picked by itself on Zen 4 and Zen 5) gave mlp max 9.3e-6, RMS 1.1e-7
 * and translation max 7.7e-8; its Haswell sgemm (OPENBLAS_CORETYPE=Haswell,
 * set on some machines), which rounds a row differently in products of
 * another row count (each rank's share of the batch), gave 1.4e-4, 1.3e-6
 * and 1.1e-6. A gradient reduced wrongly moves parameters by a good part
 * of lr (1e-3 here) per step, relative differences far above these. */
#define _XOPEN_SOURCE 700 /* mkdtemp, setenv */
#include <sys/stat.h>
#include <unistd.h>
#include "cli_run.h"
#include "harness.h"
#include "made_up_data.h"

static char qkv_bin[512], mpirun[512], tmp[64] = "/tmp/qkv_test_dist_cli_XXXXXX", out[128], err[128];

/* mpirun's path from PATH into mpirun; 0 if found. */
static int find_mpirun(void)
{
    const char *path = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof dirs, "%s", path ? path : "/usr/bin:/bin");
    for (char *d = strtok(dirs, ":"); d; d = strtok(NULL, ":")) {
        snprintf(mpirun, sizeof mpirun, "%s/mpirun", d);
        if (access(mpirun, X_OK) == 0) return 0;
    }
    return -1;
}

/* Runs "qkv ARGS" (np 0) or "mpirun ... -np NP qkv ARGS" (np > 0), or with
 * np < 0 the MPMD form "mpirun -np 1 qkv ARGS : -np 1 qkv ARGS2". args:
 * a space-separated string (no quoting needed: our paths have no spaces). */
static cli_result run(int np, const char *args, const char *args2)
{
    static char buf[4096], buf2[4096];
    const char *argv[48];
    int n = 0;
    if (np) {
        static const char *mpi[] = {"--allow-run-as-root", "--oversubscribe", "-np"};
        for (int i = 0; i < 3; i++) argv[n++] = mpi[i];
        argv[n++] = np > 0 ? (np == 2 ? "2" : "1") : "1";
        argv[n++] = qkv_bin;
    }
    snprintf(buf, sizeof buf, "%s", args);
    for (char *t = strtok(buf, " "); t && n < 44; t = strtok(NULL, " ")) argv[n++] = t;
    if (np < 0) {
        static const char *colon[] = {":", "-np", "1"};
        for (int i = 0; i < 3; i++) argv[n++] = colon[i];
        argv[n++] = qkv_bin;
        snprintf(buf2, sizeof buf2, "%s", args2);
        for (char *t = strtok(buf2, " "); t && n < 46; t = strtok(NULL, " ")) argv[n++] = t;
    }
    argv[n] = NULL;
    return cli_run(np ? mpirun : qkv_bin, NULL, out, err, argv, 120);
}

/* A run that must succeed; its result freed. */
static void ok(int np, const char *what, const char *args)
{
    cli_result r = run(np, args, NULL);
    CHECK(r.status == 0, "%s: exit %d\nstdout:\n%s\nstderr:\n%s", what, r.status, r.out, r.err);
    free(r.out), free(r.err);
}

/* The line of text starting with key (up to its newline) in s; "" if none. */
static const char *line_of(const char *s, const char *key, char *buf, size_t cap)
{
    const char *p = strstr(s, key);
    size_t n = 0;
    if (p)
        while (p[n] && p[n] != '\n' && n + 1 < cap) n++;
    snprintf(buf, cap, "%.*s", (int)n, p ? p : "");
    return buf;
}

/* A run that must succeed; the line starting with key of its stdout or
 * stderr into line. */
static void ok_line(int np, const char *what, const char *args, const char *key, char *line, size_t cap)
{
    cli_result r = run(np, args, NULL);
    CHECK(r.status == 0, "%s: exit %d\nstdout:\n%s\nstderr:\n%s", what, r.status, r.out, r.err);
    line_of(strstr(r.out, key) ? r.out : r.err, key, line, cap);
    CHECK(line[0], "%s: no line '%s' in\n%s%s", what, key, r.out, r.err);
    free(r.out), free(r.err);
}

typedef struct {
    double max_rel, rms_rel, apart; /* apart: max |diff| of the parameters kept apart */
    int64_t n;
} diff;

/* The parameters whose true gradient is 0, kept apart: the attention's key
 * bias (the middle third of "in_proj_bias"); the CNN's conv biases, which
 * a BatchNorm's mean takes away again, and the running means, which carry
 * them. */
static const char *const lm_apart[] = {"in_proj_bias", NULL},
                         *const cnn_apart[] = {"param/0.bias", "param/4.bias", "running_mean", NULL};

/* The parameters ("param/...") of two checkpoints: max |a - b| / max |a|
 * and rms(a - b) / rms(a), over every element but those of tensors whose
 * names contain a string of apart (may be NULL; of "in_proj_bias" only the
 * middle third). */
static diff compare(const char *pa, const char *pb, const char *const *apart)
{
    diff d = {INFINITY, INFINITY, 0, 0};
    qkv_safetensors *a = NULL, *b = NULL;
    if (qkv_safetensors_open(pa, &a) || qkv_safetensors_open(pb, &b)) {
        CHECK(0, "cannot open %s or %s: %s", pa, pb, qkv_last_error());
        qkv_safetensors_close(a);
        return d;
    }
    double maxd = 0, maxa = 0, sd = 0, sa = 0;
    for (int i = 0; i < qkv_safetensors_count(a); i++) {
        const char *name = qkv_safetensors_name(a, i);
        if (strncmp(name, "param/", 6)) continue;
        qkv_st_dtype dt;
        int nd;
        int64_t shape[8], n = 1;
        if (qkv_safetensors_info(a, name, &dt, &nd, shape, NULL, NULL) || dt != QKV_ST_F32) continue;
        for (int k = 0; k < nd; k++) n *= shape[k];
        float *x = malloc((size_t)(n ? n : 1) * sizeof *x), *y = malloc((size_t)(n ? n : 1) * sizeof *y);
        int bad = !x || !y || qkv_safetensors_read_f32(a, name, x, n) || qkv_safetensors_read_f32(b, name, y, n);
        CHECK(!bad, "%s: cannot read %s from both: %s", pb, name, qkv_last_error());
        int kb = 0, kq = strstr(name, "in_proj_bias") != NULL;
        for (int k = 0; apart && apart[k]; k++) kb |= strstr(name, apart[k]) != NULL;
        for (int64_t j = 0; !bad && j < n; j++) {
            double e = fabs((double)x[j] - y[j]);
            if (kb && (!kq || (j >= n / 3 && j < 2 * n / 3))) {
                if (e > d.apart) d.apart = e;
                continue;
            }
            if (e > maxd) maxd = e;
            if (fabs(x[j]) > maxa) maxa = fabs(x[j]);
            sd += e * e, sa += (double)x[j] * x[j];
            d.n++;
        }
        free(x), free(y);
    }
    qkv_safetensors_close(a), qkv_safetensors_close(b);
    if (maxa > 0) d.max_rel = maxd / maxa, d.rms_rel = sqrt(sd / sa);
    return d;
}

/* A scalar tensor of a checkpoint (-1 if absent). */
static double scalar(const char *path, const char *name)
{
    qkv_safetensors *a;
    float v = -1;
    if (qkv_safetensors_open(path, &a) == QKV_OK) {
        if (qkv_safetensors_read_f32(a, name, &v, 1)) v = -1;
        qkv_safetensors_close(a);
    }
    return v;
}

static const char *at(const char *name) { return cli_path(tmp, name); }

/* "  what: max 1.2e-08, rms 3e-09 (of 4592 elements)" */
static void report(const char *what, const diff *d)
{
    printf("  %s: relative difference max %.3g, rms %.3g over %lld elements", what, d->max_rel, d->rms_rel,
           (long long)d->n);
    if (d->apart > 0) printf("; parameters of zero gradient: max |diff| %.3g", d->apart);
    printf("\n");
}

/* One trainer on 1 process and on 2 ranks (extra: options of the 2 ranks
 * only), compared; then 2 ranks stopped early (stop: the option) and
 * resumed by 1 process (resume: the options after --out's), compared with
 * the 1-process run. Both must print the line starting with key alike (up
 * to its last comma when cut: the seconds). */
typedef struct {
    const char *name;   /* in messages */
    const char *dir;    /* the runs' folders: DIR1, DIR2, DIR3 (NULL: name) */
    const char *args;   /* "train KIND ..." without --out */
    const char *extra, *key, *stop, *resume, *ckpt;
    int cut;
    const char *const *apart; /* see compare; their max |diff| <= apart_max */
    double apart_max, max_rel, rms_rel;
} parity_case;

static void line_cut(char *line, int cut)
{
    char *c = cut ? strrchr(line, ',') : NULL;
    if (c) *c = 0;
}

static void check_diff(const parity_case *p, const char *what, const char *ref, const char *got)
{
    diff d = compare(ref, got, p->apart);
    char title[200];
    snprintf(title, sizeof title, "%s, %s", p->name, what);
    report(title, &d);
    CHECK(d.max_rel <= p->max_rel && d.rms_rel <= p->rms_rel, "%s: relative difference max %g, rms %g",
          title, d.max_rel, d.rms_rel);
    CHECK(d.apart <= p->apart_max, "%s: the parameters of zero gradient moved %g apart", title, d.apart);
}

static void parity(const parity_case *p)
{
    char a[2048], l1[256], l2[256], d1[64], d2[64], d3[64], c1[128], c2[128], c3[128], what[64];
    const char *dir = p->dir ? p->dir : p->name;
    snprintf(d1, sizeof d1, "%s1", dir), snprintf(d2, sizeof d2, "%s2", dir), snprintf(d3, sizeof d3, "%s3", dir);
    snprintf(c1, sizeof c1, "%s/%s", d1, p->ckpt), snprintf(c2, sizeof c2, "%s/%s", d2, p->ckpt);
    snprintf(c3, sizeof c3, "%s/%s", d3, p->ckpt);
    snprintf(a, sizeof a, "%s --out %s", p->args, at(d1));
    snprintf(what, sizeof what, "%s, 1 process", p->name);
    ok_line(0, what, a, p->key, l1, sizeof l1);
    snprintf(a, sizeof a, "%s %s --out %s", p->args, p->extra, at(d2));
    snprintf(what, sizeof what, "%s, 2 ranks", p->name);
    ok_line(2, what, a, p->key, l2, sizeof l2);
    line_cut(l1, p->cut), line_cut(l2, p->cut);
    CHECK(!strcmp(l1, l2), "%s: 2 ranks say '%s', 1 process '%s'", p->name, l2, l1);
    check_diff(p, "2 ranks against 1 process", at(c1), at(c2));
    snprintf(a, sizeof a, "%s %s %s --out %s", p->args, p->extra, p->stop, at(d3));
    snprintf(what, sizeof what, "%s, 2 ranks, %s", p->name, p->stop);
    ok(2, what, a);
    snprintf(a, sizeof a, "%s --out %s", p->resume, at(d3));
    snprintf(what, sizeof what, "%s, resumed by 1 process", p->name);
    ok(0, what, a);
    check_diff(p, "saved by 2 ranks, resumed by 1, against 1 process", at(c1), at(c3));
}

#define LM_STEPS 6
#define LM_LR 3e-3

static void test_lm(void)
{
    char args[1536], a[2048];
    snprintf(args, sizeof args, "train lm --corpus %s --layers 1 --d-model 16 --heads 2 --context 16 --batch 4 "
             "--warmup 2 --steps %d --lr %g --eval-every 3 --eval-batches 3 --sample 0", at("corpus.txt"),
             LM_STEPS, LM_LR);
    parity(&(parity_case){.name = "lm", .args = args, .extra = "", .key = "step 6: validation loss",
                          .stop = "--stop-at 3", .resume = "train lm --resume --sample 0", .ckpt = "lm.ckpt",
                          .apart = lm_apart, .apart_max = LM_STEPS * LM_LR, .max_rel = 1e-6, .rms_rel = 1e-6});
    /* ZeRO-1: saved by 2 ranks (rank 0 gathers the moments), resumed by 2:
     * the bits of 2 ranks without it (AdamW is elementwise) */
    snprintf(a, sizeof a, "%s --zero1 --stop-at 3 --out %s", args, at("lmz"));
    ok(2, "lm, 2 ranks with --zero1 to step 3", a);
    snprintf(a, sizeof a, "train lm --resume --zero1 --sample 0 --out %s", at("lmz"));
    ok(2, "lm, resumed by 2 ranks with --zero1", a);
    diff d = compare(at("lm2/lm.ckpt"), at("lmz/lm.ckpt"), NULL);
    report("lm, --zero1 saved and resumed by 2 ranks, against 2 ranks", &d);
    CHECK(d.max_rel == 0, "lm, --zero1: relative difference %g from 2 ranks without it", d.max_rel);
    /* rank 1 cannot read its corpus: every rank stops, naming it */
    snprintf(a, sizeof a, "train lm --steps 2 --corpus %s --out %s", at("corpus.txt"), at("lm4"));
    char a2[2048];
    snprintf(a2, sizeof a2, "train lm --steps 2 --corpus %s --out %s", at("nothere.txt"), at("lm4"));
    cli_result r = run(-1, a, a2);
    CHECK(r.status != 0, "lm, rank 1 without its corpus: exit 0");
    CHECK(strstr(r.err, "qkv train lm: rank 0: train lm: rank 1 of 2 failed: cannot open") &&
              strstr(r.err, "nothere.txt"), "lm, rank 1 without its corpus: stderr\n%s", r.err);
    CHECK(access(at("lm4/lm.ckpt"), F_OK) != 0, "lm, a failed setup wrote a checkpoint");
    free(r.out), free(r.err);
}

#define CNN_STEPS 8 /* 2 epochs of 64 images in batches of 16 */
#define CNN_LR 1e-3 /* the default */

static void test_vision(void)
{
    char a[2048], base[1024], mlp[1200], cnn[1200];
    snprintf(base, sizeof base, "--data %s --train-limit 64 --test-limit 40 --batch 16 --epochs 2", at("fm"));
    snprintf(mlp, sizeof mlp, "train mlp %s", base);
    parity(&(parity_case){.name = "mlp", .args = mlp, .extra = "", .key = "epoch 2:", .cut = 1,
                          .stop = "--stop-after 1", .resume = "train mlp --resume", .ckpt = "model.ckpt",
                          .max_rel = 1e-3, .rms_rel = 1e-5});
    snprintf(cnn, sizeof cnn, "train cnn %s", base);
    parity(&(parity_case){.name = "cnn --sync-bn", .dir = "cnnsync", .args = cnn, .extra = "--sync-bn", .key = "epoch 2:",
                          .cut = 1, .stop = "--stop-after 1", .resume = "train cnn --resume",
                          .ckpt = "model.ckpt", .apart = cnn_apart, .apart_max = CNN_STEPS * CNN_LR,
                          .max_rel = 1e-6, .rms_rel = 1e-6});
    /* cnn: 2 ranks, each with BatchNorm statistics of its own shard; the
     * checksum after the last step covers the buffers */
    snprintf(a, sizeof a, "%s --stop-after 1 --out %s", cnn, at("cnn"));
    ok(2, "cnn, 2 ranks to epoch 1", a);
    CHECK(scalar(at("cnn/model.ckpt"), "param/1.num_batches_tracked") == 4,
          "cnn, 2 ranks: num_batches_tracked %g after 4 steps", scalar(at("cnn/model.ckpt"), "param/1.num_batches_tracked"));
    snprintf(a, sizeof a, "train cnn --resume --out %s", at("cnn"));
    ok(0, "cnn, resumed by 1 process", a);
    CHECK(scalar(at("cnn/model.ckpt"), "param/5.num_batches_tracked") == 8,
          "cnn, resumed: num_batches_tracked %g after 8 steps", scalar(at("cnn/model.ckpt"), "param/5.num_batches_tracked"));
}

/* A GRU with attention; batch 11 of 34 pairs: every epoch's last batch has
 * one row, so that rank 1 runs it with weight 0. */
static void test_translation(void)
{
    char args[1024];
    snprintf(args, sizeof args, "train translation --data %s --hidden 16 --embed 16 --batch 11 --dropout 0 "
             "--eval-every 4 --steps 8", at("pairs"));
    parity(&(parity_case){.name = "translation", .args = args, .extra = "", .key = "step 8: validation loss",
                          .stop = "--steps 4", .resume = "train translation --resume --steps 8",
                          .ckpt = "checkpoint.safetensors", .max_rel = 1e-5, .rms_rel = 1e-6});
    char *log1 = cli_slurp(at("translation1/log.tsv"), NULL), *log2 = cli_slurp(at("translation2/log.tsv"), NULL);
    CHECK(log1[0] && !strcmp(log1, log2), "translation: log.tsv of 2 ranks\n%s\nof 1 process\n%s", log2, log1);
    free(log1), free(log2);
}

int main(int argc, char **argv)
{
    if (!qkv_dist_has_mpi()) {
        printf("test_dist_cli: the MPI tests did NOT run: qkv was built without MPI (install libopenmpi-dev "
               "openmpi-bin, tools/setup.sh --test, and rebuild with make MPI=1)\n");
        return h_finish("test_dist_cli");
    }
    if (find_mpirun()) {
        printf("test_dist_cli: the MPI tests did NOT run: mpirun is not on PATH (apt-get install openmpi-bin)\n");
        return h_finish("test_dist_cli");
    }
    if (cli_setup(argv[0], qkv_bin, sizeof qkv_bin, tmp, out, sizeof out, err, sizeof err))
        return h_finish("test_dist_cli");
    /* one thread a rank; the sanitizers' leak check off (Open MPI keeps memory at exit) */
    setenv("OMP_NUM_THREADS", "1", 1);
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
    write_corpus(at("corpus.txt"));
    mkdir(at("fm"), 0700);
    write_set(at("fm"), "train", 64, 88172645463325252ull);
    write_set(at("fm"), "t10k", 40, 1234567ull);
    write_pairs(at("pairs"));
    test_lm();
    test_vision();
    test_translation();
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (h_fail == 0 && system(cmd) != 0) printf("test_dist_cli: could not remove %s\n", tmp);
    return h_finish("test_dist_cli");
}
