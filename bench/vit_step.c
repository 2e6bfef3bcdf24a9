/* vit_step.c: one training step (forward, cross-entropy, backward, AdamW)
 * of a ViT for 28x28 grey images, qkv against PyTorch in the same run.
 *   build/bench/vit_step [-b BATCH] [-p PATCH] [-d D_MODEL] [-l LAYERS]
 *                        [-H HEADS] [-f FF] [-r REPS] [--no-torch]
 * Defaults: batch 128, patch 4 (49 patches + the class token), d_model 64,
 * 4 layers, 4 heads, feed-forward 256, 3 repetitions. Each repetition
 * times 10 qkv steps (after 2 warm-up steps), then runs bench/vit_peer.py
 * (the same model in PyTorch, docs/vision.md) twice, with PyTorch's own
 * thread count and with torch.set_num_threads(2) under
 * OMP_WAIT_POLICY=PASSIVE, 10 steps each; every figure is a median of 10
 * steps, and the table gives the median over repetitions. The ratio is
 * against PyTorch's faster variant. TORCH_PY overrides /usr/bin/python3. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "bench_util.h"

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct {
    int64_t batch, patch, d, layers, heads, ff;
} cfg;

static int fail(void)
{
    fprintf(stderr, "vit_step: %s\n", qkv_last_error());
    return 1;
}

/* Median ms of 10 qkv steps after 2 warm-up steps; -1 on failure. */
static double qkv_steps(const cfg *g, int64_t *nparams)
{
    qkv_params *p;
    qkv_ctx *c;
    qkv_optim *o;
    qkv_rng r;
    qkv_vit m;
    qkv_rng_seed(&r, 1);
    qkv_vit_opts vo = qkv_vit_opts_default(28, 28, 1, g->patch, 10);
    vo.d_model = g->d, vo.num_layers = g->layers, vo.nhead = g->heads, vo.dim_feedforward = g->ff;
    qkv_optim_opts oo = qkv_optim_adamw_opts_default();
    if (qkv_params_new(&p) || qkv_ctx_new(&c) || qkv_vit_init(&m, &vo, p, "", &r) ||
        qkv_optim_new(&o, p, &oo))
        return fail(), -1;
    bench_set_precision(c); /* QKV_BENCH_PRECISION=bf16: products in bf16 */
    *nparams = qkv_params_numel(p);
    int64_t B = g->batch;
    float *img = malloc((size_t)(B * 28 * 28) * sizeof *img);
    int64_t *lab = malloc((size_t)B * sizeof *lab);
    qkv_rng_fill_uniform(&r, img, B * 28 * 28, 0, 1);
    for (int64_t i = 0; i < B; i++) lab[i] = (int64_t)(qkv_rng_next(&r) % 10);
    qkv_ctx_set_training(c, 1);
    double ms[12];
    for (int s = 0; s < 12; s++) {
        double t0 = omp_get_wtime();
        qkv_ctx_reset(c);
        qkv_tensor *x, *t, *y, *l;
        if (qkv_tensor_wrap(qkv_ctx_arena(c), img, 4, (int64_t[]){B, 1, 28, 28}, &x) ||
            qkv_tensor_wrap_i64(qkv_ctx_arena(c), lab, 1, (int64_t[]){B}, &t) ||
            qkv_vit_forward(c, &m, x, &y) ||
            qkv_cross_entropy(c, y, t, QKV_IGNORE_INDEX_DEFAULT, 0.0, QKV_REDUCTION_MEAN, &l) ||
            qkv_backward(c, l, NULL) || qkv_optim_step(o))
            return fail(), -1;
        qkv_params_zero_grad(p);
        ms[s] = (omp_get_wtime() - t0) * 1e3;
    }
    qkv_optim_free(o);
    qkv_vit_free(&m);
    qkv_ctx_free(c);
    qkv_params_free(p);
    free(img);
    free(lab);
    return median(ms + 2, 10);
}

/* PyTorch's median ms from bench/vit_peer.py; -1 when it did not run. */
static double torch_steps(const cfg *g, int threads)
{
    const char *py = getenv("TORCH_PY") ? getenv("TORCH_PY") : "/usr/bin/python3";
    char cmd[768], line[256];
    snprintf(cmd, sizeof cmd,
             "%s%s bench/vit_peer.py --batch %lld --patch %lld --d-model %lld --layers %lld "
             "--heads %lld --ff %lld --steps 10 --threads %d",
             threads ? "OMP_WAIT_POLICY=PASSIVE " : "", py, (long long)g->batch, (long long)g->patch,
             (long long)g->d, (long long)g->layers, (long long)g->heads, (long long)g->ff, threads);
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    double v = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "MEDIAN_MS ", 10)) v = atof(line + 10);
    if (pclose(f) != 0) return -1;
    return v;
}

int main(int argc, char **argv)
{
    cfg g = {128, 4, 64, 4, 4, 256};
    int reps = 3, torch = 1;
    for (int i = 1; i < argc; i++) {
        int64_t *dst = NULL;
        if (!strcmp(argv[i], "--no-torch")) { torch = 0; continue; }
        if (!strcmp(argv[i], "-b")) dst = &g.batch;
        else if (!strcmp(argv[i], "-p")) dst = &g.patch;
        else if (!strcmp(argv[i], "-d")) dst = &g.d;
        else if (!strcmp(argv[i], "-l")) dst = &g.layers;
        else if (!strcmp(argv[i], "-H")) dst = &g.heads;
        else if (!strcmp(argv[i], "-f")) dst = &g.ff;
        if ((dst || !strcmp(argv[i], "-r")) && i + 1 < argc) {
            int64_t v = atoll(argv[++i]);
            if (dst) *dst = v;
            else reps = (int)v;
            continue;
        }
        fprintf(stderr, "usage: vit_step [-b BATCH] [-p PATCH] [-d D_MODEL] [-l LAYERS] [-H HEADS] "
                        "[-f FF] [-r REPS] [--no-torch]\n");
        return 2;
    }
    if (reps < 1 || reps > 50) reps = 3;
    double q[50], t0[50], t2[50];
    int64_t np = 0;
    for (int r = 0; r < reps; r++) {
        q[r] = qkv_steps(&g, &np);
        if (q[r] < 0) return 1;
        t0[r] = torch ? torch_steps(&g, 0) : -1;
        t2[r] = torch ? torch_steps(&g, 2) : -1;
        printf("rep %d: qkv %.2f ms, PyTorch default %.2f ms, PyTorch 2 threads %.2f ms\n", r, q[r],
               t0[r], t2[r]);
        fflush(stdout);
    }
    double mq = median(q, reps), m0 = median(t0, reps), m2 = median(t2, reps);
    printf("ViT training step, 28x28x1, patch %lld, d_model %lld, %lld layers, %lld heads, ff %lld, "
           "batch %lld, %lld parameters, %d OpenMP threads:\n", (long long)g.patch, (long long)g.d,
           (long long)g.layers, (long long)g.heads, (long long)g.ff, (long long)g.batch, (long long)np,
           omp_get_max_threads());
    printf("  qkv %.2f ms/step", mq);
    if (torch && m0 > 0 && m2 > 0) {
        double best = m0 < m2 ? m0 : m2;
        printf("; PyTorch default %.2f, 2 threads %.2f; PyTorch best / qkv = %.2fx", m0, m2, best / mq);
    }
    printf(" (medians over %d repetitions)\n", reps);
    return 0;
}
