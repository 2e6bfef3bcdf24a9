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

/* One panel's layout: the colour range, notes, the image's and the
 * panel's size at a scale fitting side points on the longer side. */
typedef struct {
    double lo, hi, dw, dh, th, bar_h, bar_w, w, h;
    char notes[2][128];
    int nn;
} panel;

static void layout(qkv_fig *f, const qkv_overlay *o, double side_pts, double title_size, panel *p)
{
    *p = (panel){.lo = INFINITY, .hi = -INFINITY};
    int64_t nan = 0, n = o->grid_h * o->grid_w;
    for (int64_t i = 0; i < n; i++) { /* the colour range: the finite weights' */
        double v = o->weights[i];
        if (isfinite(v))
            p->lo = fmin(p->lo, v), p->hi = fmax(p->hi, v);
        else
            nan++;
    }
    if (nan)
        snprintf(p->notes[p->nn++], sizeof p->notes[0], "%lld patch%s without a finite weight: not coloured",
                 (long long)nan, nan > 1 ? "es" : "");
    if (nan == n) p->lo = 0, p->hi = 1;
    if (!(p->lo < p->hi)) {
        double d = p->lo == 0 ? 1 : fabs(p->lo) * 0.1;
        snprintf(p->notes[p->nn++], sizeof p->notes[0], "every weight is %.4g", p->lo);
        p->lo -= d, p->hi += d;
    }
    double side = (double)(o->h > o->w ? o->h : o->w), scale = fmin(16, side_pts / side);
    p->dw = ceil(o->w * scale), p->dh = ceil(o->h * scale), p->th = o->title ? 2 * title_size : 0;
    p->bar_h = fmax(p->dh, 80);
    p->bar_w = qkv_colour_bar_width(f, 14, p->bar_h, p->lo, p->hi);
    p->w = fmax(p->dw + GAP + p->bar_w, o->title ? qkv_fig_text_width(f, o->title, title_size, 1, 200) : 0);
    p->h = p->th + p->bar_h + p->nn * 16 + (p->nn ? 8 : 0);
    for (int i = 0; i < p->nn; i++) p->w = fmax(p->w, qkv_fig_text_width(f, p->notes[i], 10, 0, 0));
}

/* Draws o laid out as p with its top left corner at (x0, y0). */
static qkv_status draw_panel(qkv_fig *f, const qkv_overlay *o, const panel *p, double x0, double y0,
                             const qkv_fig_style *title_style, double title_size)
{
    map_ctx mc = {o, p->lo, p->hi};
    cairo_surface_t *img = qkv_fig_pixels(CAIRO_FORMAT_RGB24, o->w, o->h, image_pixel, o);
    cairo_surface_t *map = qkv_fig_pixels(CAIRO_FORMAT_ARGB32, o->grid_w, o->grid_h, map_pixel, &mc);
    qkv_status s = QKV_OK;
    if (cairo_surface_status(img) || cairo_surface_status(map))
        s = qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for the images", FN);
    if (!s) {
        double x = x0, y = y0 + p->th;
        if (o->title) qkv_fig_text(f, x0 + p->w / 2, y0 + title_size, o->title, title_style);
        f->ops->image(f, x, y, p->dw, p->dh, img, 1.0);
        f->ops->image(f, x, y, p->dw, p->dh, map, o->alpha > 0 ? o->alpha : 0.6);
        qkv_fig_frame(f, x - 0.5, y - 0.5, p->dw + 1, p->dh + 1, 0x808080, 1.0);
        qkv_colour_bar(f, x + p->dw + GAP, y, 14, p->bar_h, p->lo, p->hi);
        for (int i = 0; i < p->nn; i++)
            qkv_fig_text(f, x, y + p->bar_h + 8 + i * 16, p->notes[i], &qkv_fig_note_style);
    }
    cairo_surface_destroy(img);
    cairo_surface_destroy(map);
    return s;
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
    panel p;
    layout(&f, o, 420, 15, &p);
    double W = 2 * MARGIN + p.w, H = 2 * MARGIN + p.h;
    s = qkv_fig_begin(&f, W, H);
    if (!s) s = draw_panel(&f, o, &p, MARGIN, MARGIN, &qkv_fig_title_style, 15);
    if (!s) s = qkv_fig_end(&f);
    qkv_fig_free(&f);
    return s;
}

qkv_status qkv_plot_overlay_grid(const char *path, const qkv_overlay *panels, int n, int columns,
                                 const char *title)
{
    const char *fn = "qkv_plot_overlay_grid";
    qkv_fig f;
    qkv_status s = qkv_fig_init(&f, fn, path);
    if (!s && (!panels || n < 1 || n > 256 || columns < 0))
        s = qkv_fail(QKV_ERR_ARG, "%s: %d panels (1 to 256, not NULL) in %d columns (0: up to 4)", fn,
                     panels ? n : 0, columns);
    for (int i = 0; !s && i < n; i++) s = check(&panels[i]);
    panel *p = s ? NULL : malloc((size_t)n * sizeof *p);
    if (!s && !p) s = qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    if (s) {
        qkv_fig_free(&f);
        return s;
    }
    int cols = columns > 0 ? columns : n < 4 ? n : 4, rows = (n + cols - 1) / cols;
    double cw = 0, ch = 0, th = title ? 30 : 0;
    for (int i = 0; i < n; i++) {
        layout(&f, &panels[i], 200, 12, &p[i]);
        cw = fmax(cw, p[i].w), ch = fmax(ch, p[i].h);
    }
    double W = 2 * MARGIN + cols * cw + (cols - 1) * GAP, H = 2 * MARGIN + th + rows * ch + (rows - 1) * GAP;
    if (title) W = fmax(W, 2 * MARGIN + qkv_fig_text_width(&f, title, 15, 1, 200));
    static const qkv_fig_style panel_title = {12, 0x202020, QKV_FIG_CENTRE, QKV_FIG_BASELINE, 0, 1, 200};
    s = qkv_fig_begin(&f, W, H);
    if (!s && title) qkv_fig_text(&f, W / 2, MARGIN + 15, title, &qkv_fig_title_style);
    for (int i = 0; !s && i < n; i++)
        s = draw_panel(&f, &panels[i], &p[i], MARGIN + (i % cols) * (cw + GAP), MARGIN + th + (i / cols) * (ch + GAP),
                       &panel_title, 12);
    if (!s) s = qkv_fig_end(&f);
    free(p);
    qkv_fig_free(&f);
    return s;
}
