/* test_vision_cli.c: `qkv train vit|cnn|mlp`, `qkv eval` and `qkv classify`
 * end to end on tiny models trained for a few steps in a temporary folder,
 * on a small made-up set in Fashion-MNIST's files (bands of light whose
 * row gives the class, so a model can learn it in seconds): a run stopped
 * after an epoch and resumed ends bit for bit where the uninterrupted run
 * ends; eval prints the accuracy, per class, and draws the confusion
 * matrix; classify reads a colour PNG of another size (written here
 * through Cairo) with a note, and draws the ViT's attention into a valid
 * PNG; bad input (a checkpoint of another kind, a corrupt PNG, missing data,
 * --attention for a CNN) gets a clear message and exit status 1 or 2.
 * And attention rollout against the paper's formula, computed here. */
#define _XOPEN_SOURCE 700 /* mkdtemp, realpath */
#include <cairo/cairo.h> /* the tests are built without Cairo's -I flags */
#include <math.h>
#include <sys/stat.h>
#include "cli_shell.h"
#include "made_up_data.h"
#include "old_layout.h"

/* ---- the made-up data ------------------------------------------------------- */

/* A 40x30 colour PNG (Cairo, RGB) with the band of class 3, and a corrupt one. */
static void write_pngs(void)
{
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 40, 30);
    cairo_t *cr = cairo_create(s);
    cairo_set_source_rgb(cr, 0.05, 0.1, 0.05);
    cairo_paint(cr);
    cairo_set_source_rgb(cr, 0.9, 0.8, 0.85);
    cairo_rectangle(cr, 0, (2 * 3 + 4) * 30.0 / 28, 40, 2 * 30.0 / 28);
    cairo_fill(cr);
    cairo_destroy(cr);
    CHECK(cairo_surface_write_to_png(s, path_in("band3.png")) == CAIRO_STATUS_SUCCESS, "cairo: cannot write band3.png");
    cairo_surface_destroy(s);
    size_t n;
    char *png = slurp(path_in("band3.png"), &n);
    FILE *f = fopen(path_in("corrupt.png"), "wb");
    if (f) {
        fwrite(png, 1, n / 2, f); /* the signature and header, then nothing */
        fclose(f);
    }
    free(png);
}

/* A file qkv_png_read reads, of at least 100x100 pixels. */
static void check_png(const char *name)
{
    float *px = NULL;
    int64_t c, h, w;
    qkv_status s = qkv_png_read(path_in(name), &px, &c, &h, &w);
    CHECK(s == QKV_OK && h >= 100 && w >= 100, "%s: not a readable PNG (%s), %lldx%lld", name,
          s ? qkv_last_error() : "", s ? 0LL : (long long)w, s ? 0LL : (long long)h);
    free(px);
}

/* the accuracy in "... accuracy 87.50% ..." after key */
static double accuracy_after(const char *text, const char *key)
{
    const char *p = strstr(text, key);
    return p ? atof(p + strlen(key)) : -1;
}

#define VIT "train vit --data fm --batch 32 --patch 7 --d-model 16 --layers 2 --heads 2 --mlp-dim 32 --augment off"

static void test_train(void)
{
    char *o, *e;
    int rc = qkv(&o, &e, VIT " --epochs 2 --out full --plots full/p");
    CHECK(rc == 0, "train vit: exit %d: %s", rc, e);
    CHECK(strstr(o, "320 training images, 100 test images") && strstr(o, "parameters") &&
              strstr(o, "epoch 1: train loss") && strstr(o, "epoch 2: train loss") && strstr(o, "test accuracy"),
          "train vit's lines: %s", o);
    CHECK(strstr(e, "images/s") != NULL, "train vit's progress line: %s", e);
    CHECK(access(path_in("full/model.ckpt"), R_OK) == 0, "full/model.ckpt missing");
    check_png("full/p_loss.png");
    check_png("full/p_accuracy.png");
    free(o), free(e);
    /* the same run in two pieces */
    rc = qkv(&o, &e, VIT " --epochs 2 --stop-after 1 --out parts");
    CHECK(rc == 0 && !strstr(o, "epoch 2:"), "train vit --stop-after 1: exit %d: %s %s", rc, o, e);
    free(o), free(e);
    check_resumed("train vit --resume --out parts", "resuming at epoch 1", "epoch 2:", "full/model.ckpt",
                  "parts/model.ckpt");
    /* the same two ways in the BF16 mode: --resume takes the precision from
     * the checkpoint and ends bit for bit where the uninterrupted run ends */
    run_ok(VIT " --epochs 2 --precision bf16 --out fullb");
    run_ok(VIT " --epochs 2 --stop-after 1 --precision bf16 --out partsb");
    check_resumed("train vit --resume --out partsb", "resuming at epoch 1", NULL, "fullb/model.ckpt",
                  "partsb/model.ckpt");
    /* the baselines learn the bands */
    rc = qkv(&o, &e, "train mlp --data fm --batch 32 --epochs 3 --augment off --out mlp");
    double acc = accuracy_after(strstr(o, "epoch 3: ") ? strstr(o, "epoch 3: ") : "", "test accuracy ");
    CHECK(rc == 0 && acc >= 60, "train mlp: exit %d, test accuracy %.1f%% (wanted >= 60%%): %s %s", rc, acc, o, e);
    printf("made-up bands, 320 training images: the MLP's test accuracy after 3 epochs %.1f%%\n", acc);
    free(o), free(e);
    rc = qkv(&o, &e, "train cnn --data fm --batch 32 --epochs 1 --train-limit 160 --test-limit 50 --out cnn");
    CHECK(rc == 0 && strstr(o, "160 training images, 50 test images") && strstr(o, "epoch 1:"),
          "train cnn: exit %d: %s %s", rc, o, e);
    free(o), free(e);
}

static void test_eval_classify(void)
{
    char *o, *e;
    int rc = qkv(&o, &e, "eval mlp --png conf.png --svg conf.svg");
    CHECK(rc == 0 && strstr(o, "accuracy") && strstr(o, "per class:") && strstr(o, "T-shirt/top") &&
              strstr(o, "confusion matrix"), "eval: exit %d: %s %s", rc, o, e);
    /* the matrix's counts add up to the test images */
    const char *m = strstr(o, "confusion matrix");
    long total = 0;
    if (m) {
        m = strchr(m, '\n');
        m = m ? strchr(m + 1, '\n') : NULL;
        for (int row = 0; m && row < 10; row++) {
            char *end;
            strtol(m + 1, &end, 10); /* the row's index */
            for (int k = 0; k < 10; k++) total += strtol(end, &end, 10);
            m = strchr(end, '\n');
        }
    }
    CHECK(total == 100, "eval: the confusion matrix counts %ld images, expected 100", total);
    check_png("conf.png");
    size_t n;
    char *svg = slurp(path_in("conf.svg"), &n);
    CHECK(n > 500 && strstr(svg, "<svg") && strstr(svg, "Ankle boot"), "conf.svg: %zu bytes", n);
    free(svg);
    free(o), free(e);
    rc = qkv(&o, &e, "classify mlp band3.png -k 2");
    CHECK(rc == 0 && strstr(o, "band3.png:") && strstr(o, "%"), "classify: exit %d: %s %s", rc, o, e);
    CHECK(strstr(e, "converted") && strstr(e, "resized"), "classify's note on conversion: %s", e);
    free(o), free(e);
    rc = qkv(&o, &e, "classify full/model.ckpt --test-index 3 --attention att.png");
    CHECK(rc == 0 && strstr(o, "test image 3 (true class: Dress)") && strstr(o, "wrote att.png"),
          "classify --attention: exit %d: %s %s", rc, o, e);
    check_png("att.png");
    free(o), free(e);
    /* a checkpoint of another kind, and one with no kind */
    qkv_params *p;
    CHECK_OK(qkv_params_new(&p));
    qkv_tensor *t;
    CHECK_OK(qkv_params_add(p, "", "w", 1, (int64_t[]){3}, &t));
    const char *k[1] = {"kind"}, *v[1] = {"lm"};
    qkv_checkpoint_meta meta = {1, k, v};
    CHECK_OK(qkv_checkpoint_save_meta(path_in("lm.ckpt"), p, NULL, NULL, NULL, &meta));
    CHECK_OK(qkv_checkpoint_save(path_in("plain.ckpt"), p, NULL, NULL, NULL));
    qkv_params_free(p);
    static const refusal bad[] = {
        {"classify lm.ckpt band3.png", "kind 'lm', not an image classifier", 1},
        {"classify plain.ckpt band3.png", "not of an image classifier", 1},
        {"eval plain.ckpt", "without a kind", 1},
        {"classify mlp corrupt.png", "corrupt.png", 1},
        {"classify mlp nothere.png", "nothere.png", 1},
        {"classify cnn --test-index 0 --attention a.png", "needs a vision transformer", 1},
        {"classify mlp", "no image", 2},
        {"classify mlp --test-index 100", "has 100 images", 1},
        {"train cnn --resume --out full", "holds a vit, not a cnn", 1},
        {"train vit --data nothere --out x", "tools/get_data.sh fashion-mnist", 1},
        {"eval mlp --data nothere", "tools/get_data.sh fashion-mnist", 1},
        {"train vit --patch 5", "does not divide 28", 2},
        {"train cnn --patch 4", "is a ViT option", 2},
        {"train vit --resume --out full --lr 1", "--lr cannot be given", 2},
        {"train vit --resume --out fullb --precision fp32", "--precision cannot be given", 2},
        {"train mlp --precision half", "--precision: 'half' is not one of fp32, bf16", 2},
        {VIT " --epochs 2 --out full", "exists: continue it with --resume", 1},
    };
    check_refusals("", bad, sizeof bad / sizeof *bad);
}

/* ---- rollout against the paper's 0.5 W + 0.5 I, multiplied here ------------- */

static void test_rollout(void)
{
    enum { L = 3, H = 2, S = 5 };
    float attn[L * H * S * S], out[S * S];
    uint64_t x = 12345;
    for (int r = 0; r < L * H * S; r++) { /* rows of random weights summing to 1 */
        double sum = 0;
        for (int j = 0; j < S; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            attn[r * S + j] = (float)(x % 1000 + 1);
            sum += attn[r * S + j];
        }
        for (int j = 0; j < S; j++) attn[r * S + j] = (float)(attn[r * S + j] / sum);
    }
    CHECK_OK(qkv_attention_rollout(attn, L, H, S, out));
    double r[S][S] = {{0}}, a[S][S], t[S][S];
    for (int i = 0; i < S; i++) r[i][i] = 1;
    for (int l = 0; l < L; l++) {
        for (int i = 0; i < S; i++)
            for (int j = 0; j < S; j++)
                a[i][j] = 0.5 * (i == j) + 0.25 * (attn[((l * H + 0) * S + i) * S + j] + attn[((l * H + 1) * S + i) * S + j]);
        for (int i = 0; i < S; i++)
            for (int j = 0; j < S; j++) {
                t[i][j] = 0;
                for (int k = 0; k < S; k++) t[i][j] += a[i][k] * r[k][j];
            }
        memcpy(r, t, sizeof r);
    }
    double worst = 0;
    for (int i = 0; i < S; i++)
        for (int j = 0; j < S; j++) worst = fmax(worst, fabs(out[i * S + j] - r[i][j]));
    CHECK(worst < 1e-6, "attention rollout: %.3g from 0.5 W + 0.5 I multiplied through 3 layers", worst);
    CHECK(qkv_attention_rollout(attn, 0, H, S, out) == QKV_ERR_ARG && strstr(qkv_last_error(), "attention_rollout"),
          "attention rollout with 0 layers: %s", qkv_last_error());
}

/* A run of an older version (vision.config and vision.train on one line,
 * as those versions wrote them) still opens: eval scores it as the run
 * itself, and --resume continues it to the uninterrupted run's checkpoint,
 * bit for bit (the metadata then written in the run format). */
static void test_old_layout(void)
{
    run_ok("train mlp --data fm --batch 32 --epochs 2 --augment off --out mlp2");
    run_ok("train mlp --data fm --batch 32 --epochs 2 --stop-after 1 --augment off --out mlp1");
    char *cfg = old_layout_meta(path_in("mlp1/model.ckpt"), "vision.config");
    char *train = old_layout_meta(path_in("mlp1/model.ckpt"), "vision.train"), line[300];
    long long c, h, w, k;
    char mean[40], std[40];
    CHECK(sscanf(cfg, "kind=mlp\nchannels=%lld\nheight=%lld\nwidth=%lld\nclasses=%lld\nmean=%39s\nstd=%39s", &c, &h,
                 &w, &k, mean, std) == 6, "vision.config in the run format: '%s'", cfg);
    snprintf(line, sizeof line, "kind=mlp image=%lldx%lldx%lld classes=%lld mean=%s std=%s", c, h, w, k, mean, std);
    const char *keys[3] = {"kind", "vision.config", "vision.train"}, *vals[3] = {"mlp", line, old_layout_one_line(train)};
    mkdir(path_in("old"), 0777);
    old_layout_save(path_in("mlp1/model.ckpt"), path_in("old/model.ckpt"), qkv_optim_adamw_opts_default(), keys, vals, 3);
    free(cfg), free(train);
    char *o1, *e1, *o2, *e2;
    int rc1 = qkv(&o1, &e1, "eval mlp1"), rc2 = qkv(&o2, &e2, "eval old");
    double a1 = accuracy_after(o1, "accuracy "), a2 = accuracy_after(o2, "accuracy ");
    const char *m1 = strstr(o1, "per class:"), *m2 = strstr(o2, "per class:");
    CHECK(rc1 == 0 && rc2 == 0 && a1 == a2 && m1 && m2 && !strcmp(m1, m2),
          "eval of the older layout: exit %d, accuracy %.2f (the run's own: %.2f): %s %s", rc2, a2, a1, o2, e2);
    free(o1), free(e1), free(o2), free(e2);
    check_resumed("train mlp --resume --out old", "resuming at epoch 1", "epoch 2:", "mlp2/model.ckpt",
                  "old/model.ckpt");
}

/* The run format's reader is strict: an unknown key, a key twice, a bad
 * number, a missing key, each named in the message. */
static void test_strict_metadata(void)
{
    static const char *const bad[][2] = {
        {"kind=mlp\nchannels=1\nheight=28\nwidth=28\nclasses=10\nmean=0.5\nstd=0.3\ncolour=blue\n", "unknown key 'colour'"},
        {"kind=mlp\nchannels=1\nchannels=1\nheight=28\nwidth=28\nclasses=10\nmean=0.5\nstd=0.3\n", "key 'channels' appears twice"},
        {"kind=mlp\nchannels=1\nheight=28\nwidth=28\nclasses=ten\nmean=0.5\nstd=0.3\n", "classes=ten is not a whole number"},
        {"kind=mlp\nchannels=1\nheight=28\nwidth=28\nclasses=10\nmean=0.5\nstd=-1\n", "std=-1 is not a number in"},
        {"kind=mlp\nchannels=1\nheight=28\nwidth=28\nclasses=10\nmean=0.5\n", "no key 'std'"}};
    mkdir(path_in("strict"), 0777);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *keys[2] = {"kind", "vision.config"}, *vals[2] = {"mlp", bad[i][0]};
        old_layout_save(path_in("mlp1/model.ckpt"), path_in("strict/model.ckpt"), qkv_optim_adamw_opts_default(), keys, vals,
                        2);
        char *o, *e;
        int rc = qkv(&o, &e, "eval strict");
        CHECK(rc == 1 && strstr(e, "vision.config") && strstr(e, bad[i][1]), "a vision.config with %s: exit %d, %s",
              bad[i][1], rc, e);
        free(o), free(e);
    }
}

int main(int argc, char **argv)
{
    test_rollout();
    if (cli_shell_setup(argv[0], "/tmp/qkv_vision_cli_XXXXXX")) return h_finish("test_vision_cli");
    mkdir(path_in("fm"), 0777);
    write_set(path_in("fm"), "train", 320, 88172645463325252ull);
    write_set(path_in("fm"), "t10k", 100, 1234567ull);
    write_pngs();
    test_train();
    test_eval_classify();
    test_old_layout();
    test_strict_metadata();
    cli_shell_cleanup();
    return h_finish("test_vision_cli");
}
