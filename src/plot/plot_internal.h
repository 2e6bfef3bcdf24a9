/* plot_internal.h: what the figure files of libqkv-plot share.
 *
 * A figure is drawn by figure logic (heatmap.c, lines.c, overlay.c) through
 * a small backend interface (qkv_fig_ops): filled rectangles, polylines,
 * text with an anchor and an optional 90-degree rotation, images, clipping.
 * Two backends implement it: Cairo for PNG and PDF (backend_cairo.c), and
 * one that writes SVG elements itself (backend_svg.c), so that the SVG
 * holds every label as <text> (Cairo's SVG surface writes glyph outlines).
 * Both lay text out with the same measurements (Cairo's text extents of
 * DejaVu Sans, metrics unhinted), so the three formats have one layout.
 *
 * Units: points, which are pixels in a PNG (1 point = 1 pixel). The origin
 * is the top-left corner, y grows downwards. Colours are 0xRRGGBB. */
#ifndef QKV_PLOT_INTERNAL_H
#define QKV_PLOT_INTERNAL_H
#include <stdio.h>
#include <cairo.h>
#include "qkv/plot.h"
#include "core/internal.h"

/* The largest figure side, in points (Cairo's image surfaces stop at
 * 32767 pixels; a figure this large is already a mistake). */
#define QKV_FIG_MAX_SIDE 16384
/* The font every figure uses. */
#define QKV_FIG_FONT "DejaVu Sans"

typedef enum { QKV_FIG_PNG, QKV_FIG_SVG, QKV_FIG_PDF } qkv_fig_format;

/* Horizontal anchor of a text (along its direction) ... */
enum { QKV_FIG_LEFT = 0, QKV_FIG_CENTRE, QKV_FIG_RIGHT };
/* ... and vertical (across it): the given point is the text's baseline, the
 * middle of its capitals, the top of its line or the bottom of its line. */
enum { QKV_FIG_BASELINE = 0, QKV_FIG_MIDDLE, QKV_FIG_TOP, QKV_FIG_BOTTOM };

typedef struct qkv_fig qkv_fig;

/* A backend. Coordinates are finite and inside the figure (the figure
 * logic computes them from its own layout, never straight from data). */
typedef struct {
    /* A filled rectangle, alpha in [0,1]. */
    void (*rect)(qkv_fig *f, double x, double y, double w, double h, uint32_t rgb, double alpha);
    /* An open polyline through n >= 2 points xy = (x0,y0, x1,y1, ...), line
     * width lw, dashed or solid. */
    void (*polyline)(qkv_fig *f, const double *xy, int64_t n, uint32_t rgb, double lw, int dashed);
    /* Text s (clean UTF-8) with its baseline through (x, y), anchored along
     * its direction by halign; rotated 90 degrees counter-clockwise (reading
     * upwards) about (x, y) when rotated. */
    void (*text)(qkv_fig *f, double x, double y, const char *s, double size, uint32_t rgb, int halign,
                 int rotated, int bold);
    /* An image (an RGB24 or ARGB32 Cairo surface) stretched over the
     * rectangle, pixels kept sharp (nearest neighbour). */
    void (*image)(qkv_fig *f, double x, double y, double w, double h, cairo_surface_t *img, double alpha);
    /* Clips what follows to a rectangle, until unclip. */
    void (*clip)(qkv_fig *f, double x, double y, double w, double h);
    void (*unclip)(qkv_fig *f);
    /* Writes the drawing to f->file; a status with a message on failure. */
    qkv_status (*finish)(qkv_fig *f);
    /* Frees what begin made (finished or not). */
    void (*release)(qkv_fig *f);
} qkv_fig_ops;

struct qkv_fig {
    const char *fn; /* the public call, for messages */
    const char *path;
    qkv_fig_format format;
    double w, h; /* the figure's size in points */
    cairo_surface_t *measure_surface; /* a 1x1 image: text extents for the layout */
    cairo_t *measure;
    /* after qkv_fig_begin: */
    char *tmp; /* the temporary file beside path */
    FILE *file;
    const qkv_fig_ops *ops;
    cairo_surface_t *surface; /* Cairo backend: the PNG image or the PDF */
    cairo_t *cr;
    int clip_depth; /* SVG backend: open clipping groups */
    int clip_id; /* SVG backend: the next clipPath id */
    int write_errno; /* a failed write's errno */
};

/* The backends: begin sets f->ops and draws a white background. */
qkv_status qkv_fig_cairo_begin(qkv_fig *f); /* PNG and PDF */
qkv_status qkv_fig_svg_begin(qkv_fig *f);

/* ---- the figure's life: init (measuring), begin (file, surface), end --- */

/* Checks path (non-empty, extension .png/.svg/.pdf in any case) and makes
 * the measuring context. fn names the public call in messages. */
qkv_status qkv_fig_init(qkv_fig *f, const char *fn, const char *path);
/* Opens a temporary file beside path and a w x h drawing on a white
 * background (w, h in [1, QKV_FIG_MAX_SIDE] after rounding up). */
qkv_status qkv_fig_begin(qkv_fig *f, double w, double h);
/* Finishes the drawing, flushes it to disk and renames it over path. */
qkv_status qkv_fig_end(qkv_fig *f);
/* Frees everything; removes the temporary file unless end renamed it. */
void qkv_fig_free(qkv_fig *f);

/* The atomic write under the figures (and anything else that writes a file
 * of libqkv-plot): a temporary file beside path, opened for writing ... */
qkv_status qkv_plot_tmp_open(const char *fn, const char *path, char **tmp, FILE **file);
/* ... then flushed, synced, closed and renamed over path (on failure:
 * removed, QKV_ERR_IO naming path and the system's reason). Frees tmp. */
qkv_status qkv_plot_tmp_commit(const char *fn, const char *path, char *tmp, FILE *file, int failed, int err);

/* ---- drawing (figure.c): thin wrappers over the backend ---------------- */

void qkv_fig_rect(qkv_fig *f, double x, double y, double w, double h, uint32_t rgb);
/* The outline of a rectangle, line width lw. */
void qkv_fig_frame(qkv_fig *f, double x, double y, double w, double h, uint32_t rgb, double lw);
void qkv_fig_line(qkv_fig *f, double x0, double y0, double x1, double y1, uint32_t rgb, double lw,
                  int dashed);
/* How a text is drawn. */
typedef struct {
    double size; /* points */
    uint32_t rgb;
    int halign, valign; /* QKV_FIG_LEFT ..., QKV_FIG_BASELINE ... */
    int rotated, bold; /* rotated: reading upwards */
    int max_chars; /* more characters end in an ellipsis; 0: 256 */
} qkv_fig_style;

/* The figures' titles: 15 points, bold, centred on (x, baseline y). */
extern const qkv_fig_style qkv_fig_title_style;
/* Notes under a figure: 10 points, grey, from (x, top y). */
extern const qkv_fig_style qkv_fig_note_style;

/* Text with any UTF-8 (invalid bytes and control characters become U+FFFD),
 * placed at (x, y) by the style's anchors. */
void qkv_fig_text(qkv_fig *f, double x, double y, const char *s, const qkv_fig_style *st);
/* A w x h Cairo image (CAIRO_FORMAT_RGB24: 0xRRGGBB; ARGB32: 0xAARRGGBB,
 * premultiplied) whose pixel (x, y) is pixel(ctx, x, y); check its status
 * (a failed allocation gives an image in an error state). */
cairo_surface_t *qkv_fig_pixels(cairo_format_t format, int64_t w, int64_t h,
                                uint32_t (*pixel)(const void *ctx, int64_t x, int64_t y), const void *ctx);
/* White with grey hatching and a grey frame: "no value" (NaN). */
void qkv_fig_no_value(qkv_fig *f, double x, double y, double w, double h);

/* ---- measuring (figure.c) ------------------------------------------------ */

/* The advance width of s as qkv_fig_text would draw it. */
double qkv_fig_text_width(qkv_fig *f, const char *s, double size, int bold, int max_chars);
/* Ascent and descent of the font at size (positive numbers). */
void qkv_fig_font_extents(qkv_fig *f, double size, double *ascent, double *descent);
/* s made clean and short into out (cap bytes): valid UTF-8 without control
 * characters, at most max_chars characters (0: 256), the last an ellipsis
 * when cut. */
void qkv_fig_clean_text(char *out, size_t cap, const char *s, int max_chars);

/* ---- axes and scales (axes.c) -------------------------------------------- */

/* Up to max ticks ("nice" steps: 1, 2 or 5 times a power of ten) inside
 * [lo, hi] (lo < hi, both finite), written to ticks; returns the count
 * (at least 2: lo and hi themselves when no nice step fits) and the step
 * (0 when lo and hi were used). */
int qkv_axis_ticks(double lo, double hi, int max, double *ticks, double *step);
/* Ticks of a log10 axis over [10^llo, 10^lhi]: powers of ten, or 1-2-5
 * within a few decades, else linear ticks; values, not logarithms. */
int qkv_axis_log_ticks(double llo, double lhi, int max, double *ticks);
/* A tick's label: v printed with as many decimals as step needs ("0.25",
 * "1e+06"); step 0: 3 significant digits. */
void qkv_axis_tick_label(char *out, size_t cap, double v, double step);
/* t in [0,1] of v on [lo, hi] without overflow, for any finite lo < hi. */
double qkv_axis_frac(double v, double lo, double hi);
/* A vertical colour bar: the colour map over [lo, hi] from the bottom
 * (lo) to the top (hi) of the w x h rectangle at (x, y), ticks and labels
 * on its right. Its width with the labels: qkv_colour_bar_width. */
void qkv_colour_bar(qkv_fig *f, double x, double y, double w, double h, double lo, double hi);
double qkv_colour_bar_width(qkv_fig *f, double bar_w, double h, double lo, double hi);

/* The colour map at a weight: (v - lo) / (hi - lo), clamped, NaN kept. */
uint32_t qkv_plot_colour_in(double v, double lo, double hi);
/* Black or white, whichever reads better on rgb. */
uint32_t qkv_plot_ink_on(uint32_t rgb);

/* Argument checks shared by the figures: a size n in [1, max]; a product
 * of sizes that fits (no overflow, at most max). */
qkv_status qkv_plot_check_size(const char *fn, const char *what, int64_t n, int64_t max);
qkv_status qkv_plot_check_product(const char *fn, const char *what, int n, const int64_t *sizes, int64_t max);
#endif
