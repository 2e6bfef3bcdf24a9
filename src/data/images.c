/* images.c: image sets from idx files (Fashion-MNIST), their statistics,
 * seeded shuffles and batches with augmentation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "data/image_internal.h"

void qkv_image_set_free(qkv_image_set *s)
{
    if (!s) return;
    free(s->images);
    free(s->labels);
    free(s);
}

/* Both files read and checked, then copied into the set. */
static qkv_status load_pair(const char *ip, const char *lp, qkv_idx *im, qkv_idx *lb,
                            qkv_image_set *s)
{
    const char *fn = "image_set_load";
    if (qkv_idx_type_of(im) != QKV_IDX_U8 || qkv_idx_ndim(im) != 3)
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s: expected unsigned bytes (n,H,W), the file holds "
                        "type 0x%02x with %d dims", fn, ip, (unsigned)qkv_idx_type_of(im), qkv_idx_ndim(im));
    if (qkv_idx_type_of(lb) != QKV_IDX_U8 || qkv_idx_ndim(lb) != 1)
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s: expected unsigned bytes (n), the file holds type "
                        "0x%02x with %d dims", fn, lp, (unsigned)qkv_idx_type_of(lb), qkv_idx_ndim(lb));
    s->n = qkv_idx_dim(im, 0), s->channels = 1;
    s->height = qkv_idx_dim(im, 1), s->width = qkv_idx_dim(im, 2);
    if (qkv_idx_dim(lb, 0) != s->n)
        return qkv_fail(QKV_ERR_SHAPE, "%s: %s has %lld images, %s %lld labels", fn, ip,
                        (long long)s->n, lp, (long long)qkv_idx_dim(lb, 0));
    if (s->height < 1 || s->width < 1)
        return qkv_fail(QKV_ERR_SHAPE, "%s: %s: images of %lldx%lld pixels", fn, ip,
                        (long long)s->height, (long long)s->width);
    int64_t numel = qkv_idx_numel(im);
    s->images = malloc((size_t)(numel ? numel : 1) * sizeof *s->images);
    s->labels = malloc((size_t)(s->n ? s->n : 1) * sizeof *s->labels);
    if (!s->images || !s->labels) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    /* ToTensor: a byte v becomes v / 255 in float (img.float().div(255)) */
    const uint8_t *px = qkv_idx_u8(im), *lab = qkv_idx_u8(lb);
    for (int64_t i = 0; i < numel; i++) s->images[i] = (float)px[i] / 255.0f;
    s->classes = 0;
    for (int64_t i = 0; i < s->n; i++) {
        s->labels[i] = lab[i];
        if (lab[i] + 1 > s->classes) s->classes = lab[i] + 1;
    }
    return QKV_OK;
}

qkv_status qkv_image_set_load(const char *images_path, const char *labels_path, qkv_image_set **out)
{
    QKV_NEED(out, "image_set_load", "out");
    *out = NULL;
    QKV_NEED(images_path, "image_set_load", "images_path");
    QKV_NEED(labels_path, "image_set_load", "labels_path");
    qkv_idx *im = NULL, *lb = NULL;
    qkv_image_set *s = calloc(1, sizeof *s);
    qkv_status st = s ? QKV_OK : qkv_fail(QKV_ERR_NOMEM, "image_set_load: out of memory");
    if (st == QKV_OK) st = qkv_idx_read(images_path, &im);
    if (st == QKV_OK) st = qkv_idx_read(labels_path, &lb);
    if (st == QKV_OK) st = load_pair(images_path, labels_path, im, lb, s);
    qkv_idx_free(im);
    qkv_idx_free(lb);
    if (st != QKV_OK) {
        qkv_image_set_free(s);
        return st;
    }
    *out = s;
    return QKV_OK;
}

/* DIR/NAME, or DIR/NAME.gz when only that one is there. */
static qkv_status find_file(const char *dir, const char *name, char *path, size_t n)
{
    snprintf(path, n, "%s/%s", dir, name);
    if (access(path, F_OK) == 0) return QKV_OK;
    snprintf(path, n, "%s/%s.gz", dir, name);
    if (access(path, F_OK) == 0) return QKV_OK;
    return qkv_fail(QKV_ERR_NOTFOUND, "fashion_mnist_load: %s/%s(.gz) not found: run "
                    "tools/get_data.sh fashion-mnist (it fetches Debian's dataset-fashion-mnist "
                    "into data/fashion-mnist)", dir, name);
}

qkv_status qkv_fashion_mnist_load(const char *dir, int train, qkv_image_set **out)
{
    QKV_NEED(out, "fashion_mnist_load", "out");
    *out = NULL;
    QKV_NEED(dir, "fashion_mnist_load", "dir");
    const char *part = train ? "train" : "t10k";
    char in[4096], ln[4096], ip[4200], lp[4200];
    snprintf(in, sizeof in, "%s-images-idx3-ubyte", part);
    snprintf(ln, sizeof ln, "%s-labels-idx1-ubyte", part);
    QKV_TRY(find_file(dir, in, ip, sizeof ip));
    QKV_TRY(find_file(dir, ln, lp, sizeof lp));
    QKV_TRY(qkv_image_set_load(ip, lp, out));
    if ((*out)->height != 28 || (*out)->width != 28 || (*out)->classes > 10) {
        qkv_status st = qkv_fail(QKV_ERR_FORMAT, "fashion_mnist_load: %s: %lldx%lld images with "
                                 "%lld classes, not Fashion-MNIST's 28x28 and 10", ip,
                                 (long long)(*out)->height, (long long)(*out)->width,
                                 (long long)(*out)->classes);
        qkv_image_set_free(*out);
        *out = NULL;
        return st;
    }
    (*out)->classes = 10;
    return QKV_OK;
}

/* The labels' names, from Zalando's README (and torchvision's FashionMNIST). */
static const char *const fashion_classes[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

const char *qkv_fashion_mnist_class(int64_t label)
{
    return label >= 0 && label < 10 ? fashion_classes[label] : NULL;
}

qkv_status qkv_image_set_stats(const qkv_image_set *s, float *mean, float *std)
{
    QKV_NEED(s, "image_set_stats", "set");
    QKV_NEED(mean, "image_set_stats", "mean");
    QKV_NEED(std, "image_set_stats", "std");
    int64_t hw = s->height * s->width;
    if (s->n < 1) return qkv_fail(QKV_ERR_SHAPE, "image_set_stats: the set has no images");
    for (int64_t ch = 0; ch < s->channels; ch++) {
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < s->n; i++) {
            const float *p = s->images + (i * s->channels + ch) * hw;
            for (int64_t k = 0; k < hw; k++) sum += p[k], sq += (double)p[k] * p[k];
        }
        double cnt = (double)s->n * (double)hw, m = sum / cnt, var = sq / cnt - m * m;
        mean[ch] = (float)m;
        std[ch] = (float)sqrt(var > 0 ? var : 0);
    }
    return QKV_OK;
}

qkv_status qkv_shuffle_i64(qkv_rng *r, int64_t *index, int64_t n)
{
    QKV_NEED(r, "shuffle_i64", "rng");
    if (n < 0) return qkv_fail(QKV_ERR_ARG, "shuffle_i64: n %lld < 0", (long long)n);
    if (n > 0) QKV_NEED(index, "shuffle_i64", "index");
    /* Fisher-Yates from the end: position i swaps with one in [0, i] */
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)qkv_rng_below(r, (uint64_t)i + 1), t = index[i];
        index[i] = index[j];
        index[j] = t;
    }
    return QKV_OK;
}

qkv_status qkv_image_set_batch(const qkv_image_set *s, const int64_t *index, int64_t n,
                               const qkv_image_aug *aug, qkv_rng *r, float *images,
                               int64_t *labels)
{
    const char *fn = "image_set_batch";
    QKV_NEED(s, fn, "set");
    if (n < 0) return qkv_fail(QKV_ERR_ARG, "%s: n %lld < 0", fn, (long long)n);
    if (n == 0) return QKV_OK;
    QKV_NEED(index, fn, "index");
    for (int64_t i = 0; i < n; i++)
        if (index[i] < 0 || index[i] >= s->n)
            return qkv_fail(QKV_ERR_ARG, "%s: index[%lld] = %lld is outside the set's [0, %lld)", fn,
                            (long long)i, (long long)index[i], (long long)s->n);
    int64_t c = s->channels, h = s->height, w = s->width, per = c * h * w;
    if (aug) {
        if (aug->crop_padding < 0 || !(aug->flip_p >= 0 && aug->flip_p <= 1))
            return qkv_fail(QKV_ERR_ARG, "%s: crop_padding %d must be >= 0 and flip_p %g in [0,1]", fn,
                            aug->crop_padding, aug->flip_p);
        if ((aug->crop_padding > 0 || aug->flip_p > 0) && !r)
            return qkv_fail(QKV_ERR_ARG, "%s: rng is NULL, and aug crops or flips", fn);
        if (!aug->mean != !aug->std)
            return qkv_fail(QKV_ERR_ARG, "%s: aug has a mean without a std or the other way round", fn);
    }
    for (int64_t i = 0; i < n; i++) {
        if (images) memcpy(images + i * per, s->images + index[i] * per, (size_t)per * sizeof *images);
        if (labels) labels[i] = s->labels[index[i]];
    }
    if (!aug || !images) return QKV_OK;
    if (aug->crop_padding > 0) QKV_TRY(qkv_image_random_crop(r, images, n, c, h, w, aug->crop_padding));
    if (aug->flip_p > 0) QKV_TRY(qkv_image_random_hflip(r, images, n, c, h, w, aug->flip_p));
    if (aug->mean) QKV_TRY(qkv_image_normalize(images, n, c, h, w, aug->mean, aug->std));
    return QKV_OK;
}
