/* overlay.c: an attention map laid over an image: which patches a vision
 * transformer's class token looks at. The image is drawn about 420 points
 * on its longer side (pixels kept sharp), the (grid_h, grid_w) weights
 * over it as blocks of the colour map with the given opacity, a colour bar
 * of the weights' range on the right, notes under it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "plot/plot_internal.h"

static const char *FN = "qkv_plot_overlay";

enum { MARGIN = 14, GAP = 18 };

static qkv_status check(const qkv_overlay *o)
{
    QKV_NEED(o, FN, "o");
    QKV_NEED(o->image, FN, "o->image");
    QKV_NEED(o->weights, FN, "o->weights");
    QKV_TRY(qkv_plot_check_size(FN, "h", o->h, 8192));
    QKV_TRY(qkv_plot_check_size(FN, "w", o->w, 8192));
    if (o->channels != 1 && o->channels != 3)
        return qkv_fail(QKV_ERR_ARG, "%s: channels is %lld, expected 1 or 3", FN, (long long)o->channels);
    QKV_TRY(qkv_plot_check_size(FN, "grid_h", o->grid_h, 4096));
    QKV_TRY(qkv_plot_check_size(FN, "grid_w", o->grid_w, 4096));
    if (!(o->alpha >= 0 && o->alpha <= 1))
        return qkv_fail(QKV_ERR_ARG, "%s: alpha is %g, expected 0 to 1 (0: 0.6)", FN, o->alpha);
    return QKV_OK;
}

static uint8_t byte_of(float v) { return isnan(v) || v <= 0 ? 0 : v >= 1 ? 255 : (uint8_t)lrintf(v * 255); }

/* A pixel of the image (values clamped to [0,1], NaN black) ... */
static uint32_t image_pixel(const void *ctx, int64_t x, int64_t y)
{
    const qkv_overlay *o = ctx;
    const float *p = o->image + (y * o->w + x) * o->channels;
    uint32_t r = byte_of(p[0]), g = o->channels == 3 ? byte_of(p[1]) : r,
             b = o->channels == 3 ? byte_of(p[2]) : r;
    return r << 16 | g << 8 | b;
}

/* ... and of the map: the colour map over [lo, hi], NaN transparent. */
typedef struct {
    const qkv_overlay *o;
    double lo, hi;
} map_ctx;

static uint32_t map_pixel(const void *ctx, int64_t x, int64_t y)
{
    const map_ctx *m = ctx;
    float v = m->o->weights[y * m->o->grid_w + x];
    return isnan(v) ? 0 : 0xff000000u | qkv_plot_colour_in(v, m->lo, m->hi);
}

qkv_status qkv_plot_overlay(const char *path, const qkv_overlay *o)
{
    qkv_fig f;
    qkv_status s = qkv_fig_init(&f, FN, path);
    if (!s) s = check(o);
    if (s) {
        qkv_fig_free(&f);
        return s;
    }
    /* the colour range: the finite weights' */
    double lo = INFINITY, hi = -INFINITY;
    int64_t nan = 0, n = o->grid_h * o->grid_w;
    for (int64_t i = 0; i < n; i++) {
        double v = o->weights[i];
        if (isfinite(v))
            lo = fmin(lo, v), hi = fmax(hi, v);
        else
            nan++;
    }
    char notes[2][128];
    int nn = 0;
    if (nan)
        snprintf(notes[nn++], sizeof notes[0], "%lld patch%s without a finite weight: not coloured",
                 (long long)nan, nan > 1 ? "es" : "");
    if (nan == n) lo = 0, hi = 1;
    if (!(lo < hi)) {
        double d = lo == 0 ? 1 : fabs(lo) * 0.1;
        snprintf(notes[nn++], sizeof notes[0], "every weight is %.4g", lo);
        lo -= d, hi += d;
    }
    double side = (double)(o->h > o->w ? o->h : o->w), scale = fmin(16, 420 / side);
    double dw = ceil(o->w * scale), dh = ceil(o->h * scale), th = o->title ? 30 : 0, bar_h = fmax(dh, 80);
    double bar_w = qkv_colour_bar_width(&f, 14, bar_h, lo, hi);
    double W =
        2 * MARGIN + fmax(dw + GAP + bar_w, o->title ? qkv_fig_text_width(&f, o->title, 15, 1, 200) : 0);
    double H = MARGIN + th + bar_h + nn * 16 + (nn ? 8 : 0) + MARGIN;
    for (int i = 0; i < nn; i++) W = fmax(W, 2 * MARGIN + qkv_fig_text_width(&f, notes[i], 10, 0, 0));
    map_ctx mc = {o, lo, hi};
    cairo_surface_t *img = qkv_fig_pixels(CAIRO_FORMAT_RGB24, o->w, o->h, image_pixel, o);
    cairo_surface_t *map = qkv_fig_pixels(CAIRO_FORMAT_ARGB32, o->grid_w, o->grid_h, map_pixel, &mc);
    if (cairo_surface_status(img) || cairo_surface_status(map))
        s = qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for the images", FN);
    if (!s) s = qkv_fig_begin(&f, W, H);
    if (!s) {
        double x = MARGIN, y = MARGIN + th;
        if (o->title) qkv_fig_text(&f, W / 2, MARGIN + 15, o->title, &qkv_fig_title_style);
        f.ops->image(&f, x, y, dw, dh, img, 1.0);
        f.ops->image(&f, x, y, dw, dh, map, o->alpha > 0 ? o->alpha : 0.6);
        qkv_fig_frame(&f, x - 0.5, y - 0.5, dw + 1, dh + 1, 0x808080, 1.0);
        qkv_colour_bar(&f, x + dw + GAP, y, 14, bar_h, lo, hi);
        for (int i = 0; i < nn; i++)
            qkv_fig_text(&f, x, y + bar_h + 8 + i * 16, notes[i], &qkv_fig_note_style);
        s = qkv_fig_end(&f);
    }
    cairo_surface_destroy(img);
    cairo_surface_destroy(map);
    qkv_fig_free(&f);
    return s;
}
