/* augment.c: torchvision's RandomCrop(padding) and RandomHorizontalFlip
 * and Normalize on a batch (n,C,H,W), in place, drawn from a qkv_rng. */
#include <math.h>
#include <string.h>
#include "data/image_internal.h"

qkv_status qkv_image_check_dims(const char *fn, int64_t n, int64_t c, int64_t h, int64_t w)
{
    if (n < 0 || c < 1 || h < 1 || w < 1)
        return qkv_fail(QKV_ERR_SHAPE, "%s: batch (%lld,%lld,%lld,%lld): n must be >= 0, C, H and W "
                        ">= 1", fn, (long long)n, (long long)c, (long long)h, (long long)w);
    if (n && (c > INT64_MAX / h || c * h > INT64_MAX / w || c * h * w > INT64_MAX / n))
        return qkv_fail(QKV_ERR_SHAPE, "%s: batch (%lld,%lld,%lld,%lld) has too many elements", fn,
                        (long long)n, (long long)c, (long long)h, (long long)w);
    return QKV_OK;
}

/* One plane (h,w) shifted: out[y][x] = in[y+dy][x+dx], 0 outside, in
 * place. Rows are visited so that a source row is read before it is
 * overwritten (ascending when dy >= 0), memmove handles a row onto itself. */
static void shift_plane(float *p, int64_t h, int64_t w, int64_t dy, int64_t dx)
{
    for (int64_t k = 0; k < h; k++) {
        int64_t y = dy >= 0 ? k : h - 1 - k, sy = y + dy;
        float *row = p + y * w;
        if (sy < 0 || sy >= h || dx >= w || -dx >= w) {
            memset(row, 0, (size_t)w * sizeof *row);
            continue;
        }
        const float *src = p + sy * w;
        /* x in [x0, x1) reads src[x + dx] inside [0, w) */
        int64_t x0 = dx < 0 ? -dx : 0, x1 = dx > 0 ? w - dx : w;
        memmove(row + x0, src + x0 + dx, (size_t)(x1 - x0) * sizeof *row);
        memset(row, 0, (size_t)x0 * sizeof *row);
        memset(row + x1, 0, (size_t)(w - x1) * sizeof *row);
    }
}

qkv_status qkv_image_random_crop(qkv_rng *r, float *x, int64_t n, int64_t c, int64_t h, int64_t w,
                                 int p)
{
    QKV_NEED(r, "image_random_crop", "rng");
    QKV_NEED(x, "image_random_crop", "x");
    QKV_TRY(qkv_image_check_dims("image_random_crop", n, c, h, w));
    if (p < 0) return qkv_fail(QKV_ERR_ARG, "image_random_crop: padding %d < 0", p);
    for (int64_t i = 0; i < n; i++) {
        /* torchvision: top = randint(0, H + 2p - H + 1), then left */
        int64_t top = (int64_t)qkv_rng_below(r, 2 * (uint64_t)p + 1);
        int64_t left = (int64_t)qkv_rng_below(r, 2 * (uint64_t)p + 1);
        for (int64_t ch = 0; ch < c; ch++) shift_plane(x + (i * c + ch) * h * w, h, w, top - p, left - p);
    }
    return QKV_OK;
}

qkv_status qkv_image_random_hflip(qkv_rng *r, float *x, int64_t n, int64_t c, int64_t h, int64_t w,
                                  float p)
{
    QKV_NEED(r, "image_random_hflip", "rng");
    QKV_NEED(x, "image_random_hflip", "x");
    QKV_TRY(qkv_image_check_dims("image_random_hflip", n, c, h, w));
    if (!(p >= 0 && p <= 1)) return qkv_fail(QKV_ERR_ARG, "image_random_hflip: p %g is not in [0,1]", p);
    for (int64_t i = 0; i < n; i++) {
        if (!(qkv_rng_uniform(r) < p)) continue;
        float *img = x + i * c * h * w;
        for (int64_t row = 0; row < c * h; row++) {
            float *q = img + row * w;
            for (int64_t a = 0, b = w - 1; a < b; a++, b--) {
                float t = q[a];
                q[a] = q[b];
                q[b] = t;
            }
        }
    }
    return QKV_OK;
}

qkv_status qkv_image_normalize(float *x, int64_t n, int64_t c, int64_t h, int64_t w,
                               const float *mean, const float *std)
{
    QKV_NEED(x, "image_normalize", "x");
    QKV_NEED(mean, "image_normalize", "mean");
    QKV_NEED(std, "image_normalize", "std");
    QKV_TRY(qkv_image_check_dims("image_normalize", n, c, h, w));
    for (int64_t ch = 0; ch < c; ch++)
        if (!isfinite(mean[ch]) || !isfinite(std[ch]) || !(std[ch] > 0))
            return qkv_fail(QKV_ERR_ARG, "image_normalize: channel %lld: mean %g and std %g must be "
                            "finite, std > 0", (long long)ch, mean[ch], std[ch]);
    for (int64_t i = 0; i < n; i++)
        for (int64_t ch = 0; ch < c; ch++) {
            /* as Normalize: x.sub_(mean).div_(std), in float */
            float *q = x + (i * c + ch) * h * w, m = mean[ch], s = std[ch];
            for (int64_t k = 0; k < h * w; k++) q[k] = (q[k] - m) / s;
        }
    return QKV_OK;
}
