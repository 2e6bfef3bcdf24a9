/* backend_cairo.c: figures drawn by Cairo, written as PNG (an RGB image
 * surface, 1 pixel a point) or PDF (a vector surface with the text as
 * text, fonts embedded). */
#include <errno.h>
#include <math.h>
#include <cairo-pdf.h>
#include "plot/plot_internal.h"

static void set_rgb(cairo_t *cr, uint32_t rgb, double alpha)
{
    cairo_set_source_rgba(cr, ((rgb >> 16) & 255) / 255.0, ((rgb >> 8) & 255) / 255.0, (rgb & 255) / 255.0,
                          alpha);
}

static void c_rect(qkv_fig *f, double x, double y, double w, double h, uint32_t rgb, double alpha)
{
    set_rgb(f->cr, rgb, alpha);
    cairo_rectangle(f->cr, x, y, w, h);
    cairo_fill(f->cr);
}

static void c_polyline(qkv_fig *f, const double *xy, int64_t n, uint32_t rgb, double lw, int dashed)
{
    cairo_t *cr = f->cr;
    const double dash[2] = {5 * lw, 3 * lw};
    cairo_new_path(cr);
    cairo_move_to(cr, xy[0], xy[1]);
    for (int64_t i = 1; i < n; i++) cairo_line_to(cr, xy[2 * i], xy[2 * i + 1]);
    set_rgb(cr, rgb, 1.0);
    cairo_set_line_width(cr, lw);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    cairo_set_dash(cr, dash, dashed ? 2 : 0, 0);
    cairo_stroke(cr);
}

static void c_text(qkv_fig *f, double x, double y, const char *s, double size, uint32_t rgb, int halign,
                   int rotated, int bold)
{
    cairo_t *cr = f->cr;
    cairo_text_extents_t e;
    cairo_select_font_face(cr, QKV_FIG_FONT, CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
    cairo_text_extents(cr, s, &e);
    double shift = halign == QKV_FIG_CENTRE ? e.x_advance / 2 : halign == QKV_FIG_RIGHT ? e.x_advance : 0;
    cairo_save(cr);
    cairo_translate(cr, x, y);
    if (rotated) cairo_rotate(cr, -1.57079632679489661923); /* -pi/2 */
    cairo_move_to(cr, -shift, 0);
    set_rgb(cr, rgb, 1.0);
    cairo_show_text(cr, s);
    cairo_restore(cr);
}

static void c_image(qkv_fig *f, double x, double y, double w, double h, cairo_surface_t *img, double alpha)
{
    cairo_t *cr = f->cr;
    int iw = cairo_image_surface_get_width(img), ih = cairo_image_surface_get_height(img);
    cairo_save(cr);
    cairo_rectangle(cr, x, y, w, h);
    cairo_clip(cr);
    cairo_translate(cr, x, y);
    cairo_scale(cr, w / iw, h / ih);
    cairo_set_source_surface(cr, img, 0, 0);
    cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_NEAREST);
    cairo_paint_with_alpha(cr, alpha);
    cairo_restore(cr);
}

static void c_clip(qkv_fig *f, double x, double y, double w, double h)
{
    cairo_save(f->cr);
    cairo_rectangle(f->cr, x, y, w, h);
    cairo_clip(f->cr);
}

static void c_unclip(qkv_fig *f) { cairo_restore(f->cr); }

static cairo_status_t c_write(void *closure, const unsigned char *data, unsigned int len)
{
    qkv_fig *f = closure;
    if (fwrite(data, 1, len, f->file) != len) {
        f->write_errno = errno ? errno : EIO;
        return CAIRO_STATUS_WRITE_ERROR;
    }
    return CAIRO_STATUS_SUCCESS;
}

static qkv_status c_fail(qkv_fig *f, cairo_status_t st)
{
    if (f->write_errno) return QKV_OK; /* the commit reports the system's reason */
    return qkv_fail(st == CAIRO_STATUS_NO_MEMORY ? QKV_ERR_NOMEM : QKV_ERR_IO, "%s: drawing %s: %s", f->fn,
                    f->path, cairo_status_to_string(st));
}

static qkv_status c_finish(qkv_fig *f)
{
    cairo_status_t st = cairo_status(f->cr);
    if (st != CAIRO_STATUS_SUCCESS) return c_fail(f, st);
    if (f->format == QKV_FIG_PNG) {
        cairo_surface_flush(f->surface);
        st = cairo_surface_write_to_png_stream(f->surface, c_write, f);
    } else { /* the PDF is written as its surface finishes */
        cairo_surface_finish(f->surface);
        st = cairo_surface_status(f->surface);
    }
    return st == CAIRO_STATUS_SUCCESS ? QKV_OK : c_fail(f, st);
}

static void c_release(qkv_fig *f)
{
    if (f->cr) cairo_destroy(f->cr);
    if (f->surface) cairo_surface_destroy(f->surface);
    f->cr = NULL, f->surface = NULL;
}

static const qkv_fig_ops cairo_ops = {c_rect, c_polyline, c_text,   c_image,
                                      c_clip, c_unclip,   c_finish, c_release};

qkv_status qkv_fig_cairo_begin(qkv_fig *f)
{
    f->ops = &cairo_ops;
    if (f->format == QKV_FIG_PNG) {
        f->surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)f->w, (int)f->h);
    } else {
        f->surface = cairo_pdf_surface_create_for_stream(c_write, f, f->w, f->h);
        cairo_pdf_surface_set_metadata(f->surface, CAIRO_PDF_METADATA_CREATOR, "qkv " QKV_VERSION);
    }
    f->cr = cairo_create(f->surface);
    cairo_status_t st = cairo_status(f->cr);
    if (st != CAIRO_STATUS_SUCCESS) return c_fail(f, st);
    set_rgb(f->cr, 0xffffff, 1.0);
    cairo_paint(f->cr);
    return QKV_OK;
}
