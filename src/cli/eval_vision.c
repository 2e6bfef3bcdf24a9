/* eval_vision.c: `qkv eval CHECKPOINT` for the image classifiers of
 * `qkv train vit|cnn|mlp`: accuracy on Fashion-MNIST's test set, the
 * accuracy of every class, the confusion matrix printed and, with --png or
 * --svg, drawn as a heat map (each row, a true class, as fractions of that
 * class's images). qkv eval (eval.c) calls it for kinds vit, cnn, mlp. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/vision.h"
#include "qkv/plot.h"

extern const char qkv_cli_eval_usage[];

static qkv_status draw(const char *path, const int64_t *conf, int64_t K, const char *title)
{
    float *w = malloc((size_t)(K * K) * sizeof *w);
    const char **names = malloc((size_t)K * sizeof *names);
    char(*buf)[24] = malloc((size_t)K * sizeof *buf);
    if (!w || !names || !buf) {
        free(w), free(names), free(buf);
        return qkv_cli_fail(QKV_ERR_NOMEM, "out of memory");
    }
    for (int64_t t = 0; t < K; t++) {
        int64_t n = 0;
        for (int64_t p = 0; p < K; p++) n += conf[t * K + p];
        for (int64_t p = 0; p < K; p++) w[t * K + p] = n ? (float)conf[t * K + p] / (float)n : 0.0f;
        const char *c = qkv_fashion_mnist_class(t);
        if (!c || K != 10) snprintf(buf[t], sizeof buf[t], "%lld", (long long)t), c = buf[t];
        names[t] = c;
    }
    qkv_heatmap h = qkv_heatmap_default();
    h.weights = w, h.heads = 1, h.rows = K, h.cols = K, h.row_labels = names, h.col_labels = names;
    h.title = title, h.row_axis = "true class", h.col_axis = "predicted class", h.lo = 0, h.hi = 1;
    qkv_status s = qkv_plot_heatmap(path, &h);
    free(w), free(names), free(buf);
    return s;
}

/* The per-class accuracy and the confusion matrix conf (K x K: [true][predicted]). */
static void print_confusion(const int64_t *conf, int64_t K)
{
    printf("\nper class:\n");
    for (int64_t k = 0; k < K; k++) {
        int64_t n = 0;
        for (int64_t p = 0; p < K; p++) n += conf[k * K + p];
        const char *name = K == 10 ? qkv_fashion_mnist_class(k) : NULL;
        printf("  %2lld %-12s %6.2f%% of %lld\n", (long long)k, name ? name : "",
               n ? 100.0 * (double)conf[k * K + k] / (double)n : 0.0, (long long)n);
    }
    printf("\nconfusion matrix (rows: true class, columns: predicted):\n     ");
    for (int64_t p = 0; p < K; p++) printf(" %5lld", (long long)p);
    printf("\n");
    for (int64_t t = 0; t < K; t++) {
        printf("  %2lld ", (long long)t);
        for (int64_t p = 0; p < K; p++) printf(" %5lld", (long long)conf[t * K + p]);
        printf("\n");
    }
}

int qkv_cli_eval_vision(int argc, char **argv)
{
    enum { DATA = 256, TESTL, BATCH, PNG, SVG };
    static const struct option options[] = {
        {"data", required_argument, NULL, DATA}, {"test-limit", required_argument, NULL, TESTL},
        {"batch", required_argument, NULL, BATCH}, {"png", required_argument, NULL, PNG},
        {"svg", required_argument, NULL, SVG}, {"threads", required_argument, NULL, 'j'}, QKV_CLI_HELP_OPTION};
    const char *data = NULL, *figs[2] = {NULL, NULL};
    int64_t limit = 0, batch = 256, threads = 0;
    qkv_cli_args a;
    qkv_cli_args_init(&a, argc, argv, qkv_cli_eval_usage, options, 1, 1);
    int c;
    while ((c = qkv_cli_next(&a)) > 0) switch (c) {
        case DATA: data = a.value; break;
        case TESTL: limit = qkv_cli_int(&a, 1, (int64_t)1 << 40); break;
        case BATCH: batch = qkv_cli_int(&a, 1, 1 << 16); break;
        case PNG: figs[0] = a.value; break;
        case SVG: figs[1] = a.value; break;
        case 'j': threads = qkv_cli_int(&a, 1, 1024); break;
        }
    if (c < 0) return a.status;
    if (threads > 0) omp_set_num_threads((int)threads);
    vision_model m;
    char path[1200];
    if (vision_model_load(&m, a.operands[0], path, sizeof path)) {
        return qkv_cli_report("eval", "%s", qkv_cli_last_error());
    }
    char dir[1100];
    vision_data_dir(path, data, dir, sizeof dir);
    qkv_image_set *test = NULL;
    qkv_ctx *ctx = NULL;
    int64_t K = m.cfg.classes, *conf = calloc((size_t)(K * K), sizeof *conf);
    double acc, t0 = qkv_cli_now();
    int rc = QKV_EXIT_FAILURE;
    if (!conf) qkv_cli_fail(QKV_ERR_NOMEM, "out of memory");
    else if (vision_load_set(dir, 0, limit, &test) || qkv_ctx_new(&ctx)) {
    } else if (test->channels != m.cfg.channels || test->height != m.cfg.height || test->width != m.cfg.width) {
        qkv_cli_fail(QKV_ERR_SHAPE, "%s holds %lldx%lldx%lld images, the model takes %lldx%lldx%lld", dir,
                    (long long)test->channels, (long long)test->height, (long long)test->width,
                    (long long)m.cfg.channels, (long long)m.cfg.height, (long long)m.cfg.width);
    } else if (!vision_evaluate(ctx, &m, test, batch, &acc, conf)) {
        rc = QKV_EXIT_OK;
    }
    if (rc) {
        qkv_cli_report("eval", "%s", qkv_cli_last_error());
    } else {
        printf("%s (%s, %lld parameters) on %lld test images of %s: accuracy %.2f%% (%lld right), %.1f s\n", path,
               vision_kind_names[m.cfg.kind], (long long)qkv_params_numel_trainable(m.p), (long long)test->n, dir,
               100 * acc, (long long)(acc * (double)test->n + 0.5), qkv_cli_now() - t0);
        print_confusion(conf, K);
        char title[200];
        snprintf(title, sizeof title, "%s on %lld test images: %.2f%% right (rows: fraction of the true class)",
                 vision_kind_names[m.cfg.kind], (long long)test->n, 100 * acc);
        for (int i = 0; i < 2 && !rc; i++) {
            if (!figs[i]) continue;
            if (draw(figs[i], conf, K, title)) {
                qkv_cli_report("eval", "%s", qkv_cli_last_error());
                rc = QKV_EXIT_FAILURE;
            } else {
                printf("wrote %s\n", figs[i]);
            }
        }
    }
    free(conf);
    qkv_ctx_free(ctx);
    qkv_image_set_free(test);
    vision_model_free(&m);
    return rc;
}
