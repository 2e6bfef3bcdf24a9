/* classify.c: `qkv classify CHECKPOINT IMAGE.png...`: the top classes of
 * images by a model of `qkv train vit|cnn|mlp`, with probabilities. A PNG
 * of another size or colour is converted to the model's input
 * (qkv_image_fit: luma, bilinear) with a note on stderr; --test-index N
 * takes Fashion-MNIST's test image N instead. For a ViT, --attention FILE
 * draws the class token's attention in the last layer, head by head, over
 * the image, and the attention rollout across the layers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/vision.h"
#include "qkv/plot.h"

const char qkv_cli_classify_usage[] =
    "usage: qkv classify CHECKPOINT [IMAGE.png...] [OPTIONS]\n"
    "  prints the top classes of each image, with probabilities, by the model of\n"
    "  qkv train vit|cnn|mlp (CHECKPOINT: the checkpoint or the run's --out folder);\n"
    "  grey or colour PNGs of any size are converted to the model's input, with a note\n"
    "  -k, --top K            classes to print (default 3)\n"
    "      --test-index N     Fashion-MNIST's test image N (0 to 9999) instead of a PNG\n"
    "      --data DIR         Fashion-MNIST's files for --test-index (default: the run's)\n"
    "      --attention FILE   ViT only, one image: the class token's attention in the\n"
    "                         last layer per head over the image, and the attention\n"
    "                         rollout across layers (.png, .svg or .pdf)\n"
    "  -h, --help             show this usage\n";

typedef struct {
    const char *name;     /* the file, or "test image N" */
    float *pixels;        /* (C,H,W) the model's input in [0,1], before normalisation */
    int64_t label;        /* the true class for a test image, else -1 */
} cl_image;

/* The image at path as the model's input; a note on stderr when converted or resized. */
static qkv_status read_png(const vision_config *g, const char *path, float *dst)
{
    float *src;
    int64_t c, h, w;
    unsigned changes = 0;
    QKV_CLI_TRY(qkv_png_read(path, &src, &c, &h, &w));
    qkv_status s = qkv_image_fit(src, c, h, w, dst, g->channels, g->height, g->width, &changes);
    free(src);
    if (s) return s;
    if (changes)
        qkv_cli_report("classify",
                       "note: %s is %lldx%lld with %lld channel%s: %s%s%s to the model's %lldx%lld "
                "with %lld", path, (long long)w, (long long)h, (long long)c, c > 1 ? "s" : "",
                changes & QKV_IMAGE_CONVERTED ? "converted" : "",
                changes == (QKV_IMAGE_CONVERTED | QKV_IMAGE_RESIZED) ? " and " : "",
                changes & QKV_IMAGE_RESIZED ? "resized (bilinear)" : "", (long long)g->width,
                (long long)g->height, (long long)g->channels);
    return QKV_OK;
}

/* The class token's attention in the last layer per head, and the rollout:
 * one figure of overlays. */
static qkv_status draw_attention(qkv_ctx *c, const vision_model *m, const cl_image *im, const char *cls,
                                 double prob, const char *path)
{
    const vision_config *g = &m->cfg;
    int64_t L = g->layers, H = g->heads, S = m->vit.seq_len, gh = m->vit.grid_h, gw = m->vit.grid_w, P = gh * gw;
    if (qkv_ctx_captured_count(c) != L)
        return qkv_cli_fail(QKV_ERR_STATE, "%d attention maps captured, expected %lld", qkv_ctx_captured_count(c),
                           (long long)L);
    float *all = malloc((size_t)(L * H * S * S) * sizeof *all), *roll = malloc((size_t)(S * S) * sizeof *roll);
    float *maps = malloc((size_t)((H + 1) * P) * sizeof *maps); // (H+1, gh, gw)
    float *img = malloc((size_t)(g->height * g->width * g->channels) * sizeof *img); // (h,w,c)
    qkv_overlay *ov = malloc((size_t)(H + 1) * sizeof *ov);
    char(*titles)[64] = malloc((size_t)(H + 1) * sizeof *titles);
    qkv_status s = all && roll && maps && img && ov && titles ? QKV_OK : qkv_cli_fail(QKV_ERR_NOMEM, "out of memory");
    for (int64_t l = 0; !s && l < L; l++) memcpy(all + l * H * S * S, qkv_ctx_captured(c, (int)l)->data,
                                                 (size_t)(H * S * S) * sizeof *all);
    if (!s) s = qkv_attention_rollout(all, L, H, S, roll);
    if (!s) {
        const float *last = all + (L - 1) * H * S * S;
        for (int64_t h = 0; h < H; h++) /* row 0 (the class token), the patches' columns */
            memcpy(maps + h * P, last + h * S * S + (S - P), (size_t)P * sizeof *maps);
        memcpy(maps + H * P, roll + (S - P), (size_t)P * sizeof *maps);
        for (int64_t y = 0; y < g->height; y++)
            for (int64_t x = 0; x < g->width; x++)
                for (int64_t ch = 0; ch < g->channels; ch++)
                    img[(y * g->width + x) * g->channels + ch] = im->pixels[(ch * g->height + y) * g->width + x];
        for (int64_t h = 0; h <= H; h++) {
            if (h < H) snprintf(titles[h], sizeof titles[0], "layer %lld, head %lld", (long long)L - 1, (long long)h);
            else snprintf(titles[h], sizeof titles[0], "rollout over %lld layers", (long long)L);
            ov[h] = (qkv_overlay){.image = img, .h = g->height, .w = g->width, .channels = g->channels == 3 ? 3 : 1,
                                  .weights = maps + h * P, .grid_h = gh, .grid_w = gw, .title = titles[h], .alpha = 0.55f};
        }
        char title[300];
        snprintf(title, sizeof title, "%.80s: %s (%.1f%%): the class token's attention", im->name, cls, 100 * prob);
        s = qkv_plot_overlay_grid(path, ov, (int)(H + 1), H + 1 <= 5 ? (int)(H + 1) : 4, title);
    }
    free(all), free(roll), free(maps), free(img), free(ov), free(titles);
    return s;
}

/* Top-k of one image; the attention figure if asked. */
static qkv_status classify_one(qkv_ctx *c, const vision_model *m, const cl_image *im, int64_t topk,
                               const char *attention)
{
    const vision_config *g = &m->cfg;
    int64_t per = g->channels * g->height * g->width, K = g->classes;
    qkv_ctx_reset(c);
    qkv_ctx_set_training(c, 0);
    qkv_ctx_set_grad(c, 0);
    qkv_ctx_set_capture(c, attention != NULL);
    qkv_tensor *x, *logits;
    QKV_CLI_TRY(qkv_tensor_new(qkv_ctx_arena(c), QKV_F32, 4, (int64_t[]){1, g->channels, g->height, g->width}, &x));
    for (int64_t i = 0; i < per; i++) x->data[i] = (im->pixels[i] - g->mean) / g->std;
    QKV_CLI_TRY(vision_forward(c, m, x, &logits));
    double *p = malloc((size_t)K * sizeof *p), mx = -INFINITY, sum = 0;
    int64_t *order = malloc((size_t)K * sizeof *order);
    if (!p || !order) return free(p), free(order), qkv_cli_fail(QKV_ERR_NOMEM, "out of memory");
    for (int64_t k = 0; k < K; k++) mx = fmax(mx, logits->data[k]);
    for (int64_t k = 0; k < K; k++) sum += p[k] = exp(logits->data[k] - mx);
    for (int64_t k = 0; k < K; k++) p[k] /= sum, order[k] = k;
    for (int64_t i = 0; i < K; i++) /* a selection sort: K is small */
        for (int64_t j = i + 1; j < K; j++)
            if (p[order[j]] > p[order[i]]) {
                int64_t t = order[i];
                order[i] = order[j], order[j] = t;
            }
    printf("%s", im->name);
    if (im->label >= 0) printf(" (true class: %s)", qkv_fashion_mnist_class(im->label));
    printf(":\n");
    char buf[3][24];
    for (int64_t i = 0; i < topk && i < K; i++) {
        const char *name = K == 10 ? qkv_fashion_mnist_class(order[i]) : NULL;
        if (!name) snprintf(buf[0], sizeof buf[0], "class %lld", (long long)order[i]), name = buf[0];
        printf("  %6.2f%%  %s\n", 100 * p[order[i]], name);
    }
    qkv_status s = QKV_OK;
    if (attention) {
        const char *name = K == 10 ? qkv_fashion_mnist_class(order[0]) : NULL;
        if (!name) snprintf(buf[1], sizeof buf[1], "class %lld", (long long)order[0]), name = buf[1];
        s = draw_attention(c, m, im, name, p[order[0]], attention);
        if (!s) printf("wrote %s: the class token's attention per head (last layer) and the rollout\n", attention);
    }
    qkv_ctx_set_capture(c, 0);
    free(p), free(order);
    return s;
}

/* Test image index of set (checked against it and the model's images g)
 * into im, named in name (n bytes). */
static qkv_status test_image(const qkv_image_set *test, int64_t index, const vision_config *g, cl_image *im,
                             char *name, size_t n)
{
    int64_t per = g->channels * g->height * g->width;
    if (index >= test->n)
        return qkv_cli_fail(QKV_ERR_ARG, "--test-index %lld: the test set has %lld images", (long long)index,
                            (long long)test->n);
    if (test->channels != g->channels || test->height != g->height || test->width != g->width)
        return qkv_cli_fail(QKV_ERR_SHAPE, "the test images are %lldx%lld, the model's %lldx%lld",
                            (long long)test->height, (long long)test->width, (long long)g->height,
                            (long long)g->width);
    memcpy(im->pixels, test->images + index * per, (size_t)per * sizeof *im->pixels);
    im->label = test->labels[index];
    snprintf(name, n, "test image %lld", (long long)index);
    im->name = name;
    return QKV_OK;
}

int qkv_cli_classify(int argc, char **argv)
{
    enum { TESTI = 256, DATA, ATTN };
    static const struct option options[] = {
        {"top", required_argument, NULL, 'k'}, {"test-index", required_argument, NULL, TESTI},
        {"data", required_argument, NULL, DATA}, {"attention", required_argument, NULL, ATTN}, QKV_CLI_HELP_OPTION};
    int64_t topk = 3, test_index = -1;
    const char *data = NULL, *attention = NULL;
    qkv_cli_args a;
    qkv_cli_args_init(&a, argc, argv, qkv_cli_classify_usage, options, 1, 1 << 20);
    int c;
    while ((c = qkv_cli_next(&a)) > 0) switch (c) {
        case 'k': topk = qkv_cli_int(&a, 1, 100000); break;
        case TESTI: test_index = qkv_cli_int(&a, 0, (int64_t)1 << 40); break;
        case DATA: data = a.value; break;
        case ATTN: attention = a.value; break;
        }
    if (c < 0) return a.status;
    int nimg = a.noperands - 1 + (test_index >= 0);
    if (nimg == 0) {
        qkv_cli_error(&a, "no image: give IMAGE.png files or --test-index N");
        return a.status;
    }
    if (attention && nimg != 1) {
        qkv_cli_error(&a, "--attention draws one image's attention: give one IMAGE.png or --test-index N");
        return a.status;
    }
    vision_model m;
    char path[1200];
    if (vision_model_load(&m, a.operands[0], path, sizeof path)) {
        return qkv_cli_report("classify", "%s", qkv_cli_last_error());
    }
    if (attention && m.cfg.kind != VISION_VIT) {
        qkv_cli_report("classify", "--attention needs a vision transformer; %s holds %s, which has no "
                "attention to draw", path, m.cfg.kind == VISION_CNN ? "a CNN" : "an MLP");
        vision_model_free(&m);
        return QKV_EXIT_FAILURE;
    }
    const vision_config *g = &m.cfg;
    qkv_ctx *ctx = NULL;
    qkv_image_set *test = NULL;
    cl_image im = {.label = -1};
    char name[64];
    im.pixels = malloc((size_t)(g->channels * g->height * g->width) * sizeof *im.pixels);
    int rc = QKV_EXIT_OK;
    qkv_status s = im.pixels ? qkv_ctx_new(&ctx) : qkv_cli_fail(QKV_ERR_NOMEM, "out of memory");
    for (int i = 1; !s && i < a.noperands; i++) {
        im.name = a.operands[i];
        if ((s = read_png(g, a.operands[i], im.pixels)) == QKV_OK) s = classify_one(ctx, &m, &im, topk, attention);
        if (s && s != QKV_ERR_NOMEM) { /* a bad file: say so, go on with the others */
            qkv_cli_report("classify", "%s", qkv_cli_last_error());
            rc = QKV_EXIT_FAILURE;
            s = QKV_OK;
        }
    }
    if (!s && test_index >= 0) {
        char dir[1100];
        vision_data_dir(path, data, dir, sizeof dir);
        s = vision_load_set(dir, 0, 0, &test);
        if (!s) s = test_image(test, test_index, g, &im, name, sizeof name);
        if (!s) s = classify_one(ctx, &m, &im, topk, attention);
    }
    if (s) {
        qkv_cli_report("classify", "%s", qkv_cli_last_error());
        rc = QKV_EXIT_FAILURE;
    }
    free(im.pixels);
    qkv_image_set_free(test);
    qkv_ctx_free(ctx);
    vision_model_free(&m);
    return rc;
}
