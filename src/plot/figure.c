/* figure.c: a figure's life (the format from the extension, the atomic
 * write), the drawing calls the figure logic makes, and text: cleaning any
 * UTF-8 into something every backend can draw, and measuring it. */
#define _POSIX_C_SOURCE 200809L /* mkstemp, fsync, fchmod */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include "plot/plot_internal.h"

/* ---- checks ---------------------------------------------------------------- */

qkv_status qkv_plot_check_size(const char *fn, const char *what, int64_t n, int64_t max)
{
    if (n < 1 || n > max)
        return qkv_fail(QKV_ERR_ARG, "%s: %s is %lld, expected 1 to %lld", fn, what, (long long)n,
                        (long long)max);
    return QKV_OK;
}

qkv_status qkv_plot_check_product(const char *fn, const char *what, int n, const int64_t *sizes, int64_t max)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++) {
        if (sizes[i] < 1)
            return qkv_fail(QKV_ERR_ARG, "%s: %s: size %lld is not positive", fn, what, (long long)sizes[i]);
        if (p > max / sizes[i])
            return qkv_fail(QKV_ERR_ARG, "%s: %s: more than %lld values", fn, what, (long long)max);
        p *= sizes[i];
    }
    return QKV_OK;
}

/* ---- the atomic write ---------------------------------------------------- */

qkv_status qkv_plot_tmp_open(const char *fn, const char *path, char **tmp, FILE **file)
{
    size_t n = strlen(path);
    *tmp = malloc(n + 8);
    *file = NULL;
    if (!*tmp) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    memcpy(*tmp, path, n);
    memcpy(*tmp + n, ".XXXXXX", 8);
    int fd = mkstemp(*tmp);
    if (fd < 0) {
        qkv_status s = qkv_fail(QKV_ERR_IO, "%s: cannot write %s: %s", fn, path, strerror(errno));
        free(*tmp);
        *tmp = NULL;
        return s;
    }
    (void)fchmod(fd, 0644); /* mkstemp makes it 0600; a figure is for reading */
    *file = fdopen(fd, "wb");
    if (!*file) {
        qkv_status s = qkv_fail(QKV_ERR_IO, "%s: cannot write %s: %s", fn, path, strerror(errno));
        close(fd);
        remove(*tmp);
        free(*tmp);
        *tmp = NULL;
        return s;
    }
    return QKV_OK;
}

qkv_status qkv_plot_tmp_commit(const char *fn, const char *path, char *tmp, FILE *file, int failed, int err)
{
    if (!failed && (fflush(file) != 0 || ferror(file) || fsync(fileno(file)) != 0)) failed = 1, err = errno;
    if (fclose(file) != 0 && !failed) failed = 1, err = errno;
    if (!failed && rename(tmp, path) != 0) failed = 1, err = errno;
    if (failed) remove(tmp);
    free(tmp);
    if (failed)
        return qkv_fail(QKV_ERR_IO, "%s: cannot write %s: %s", fn, path,
                        err ? strerror(err) : "write failed");
    return QKV_OK;
}

/* ---- the figure's life ------------------------------------------------------ */

static void fig_font(cairo_t *cr, double size, int bold)
{
    cairo_select_font_face(cr, QKV_FIG_FONT, CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
}

/* Grey anti-aliasing, metrics unhinted: advances scale with the size and
 * are the same on every surface, so one layout serves PNG, SVG and PDF. */
static void fig_font_options(cairo_t *cr)
{
    cairo_font_options_t *o = cairo_font_options_create();
    cairo_font_options_set_antialias(o, CAIRO_ANTIALIAS_GRAY);
    cairo_font_options_set_hint_metrics(o, CAIRO_HINT_METRICS_OFF);
    cairo_font_options_set_hint_style(o, CAIRO_HINT_STYLE_SLIGHT);
    cairo_set_font_options(cr, o);
    cairo_font_options_destroy(o);
}

qkv_status qkv_fig_init(qkv_fig *f, const char *fn, const char *path)
{
    memset(f, 0, sizeof *f);
    f->fn = fn;
    f->path = path;
    QKV_NEED(path, fn, "path");
    if (!path[0]) return qkv_fail(QKV_ERR_ARG, "%s: path is empty", fn);
    const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
    if (!dot || (slash && dot < slash) || dot == path || dot[-1] == '/')
        return qkv_fail(QKV_ERR_ARG, "%s: %s has no extension: expected .png, .svg or .pdf", fn, path);
    if (!strcasecmp(dot, ".png"))
        f->format = QKV_FIG_PNG;
    else if (!strcasecmp(dot, ".svg"))
        f->format = QKV_FIG_SVG;
    else if (!strcasecmp(dot, ".pdf"))
        f->format = QKV_FIG_PDF;
    else
        return qkv_fail(QKV_ERR_ARG, "%s: unknown extension '%.40s' of %s: expected .png, .svg or .pdf", fn,
                        dot, path);
    f->measure_surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 1, 1);
    f->measure = cairo_create(f->measure_surface);
    if (cairo_status(f->measure) != CAIRO_STATUS_SUCCESS)
        return qkv_fail(QKV_ERR_NOMEM, "%s: cannot start Cairo: %s", fn,
                        cairo_status_to_string(cairo_status(f->measure)));
    fig_font_options(f->measure);
    return QKV_OK;
}

qkv_status qkv_fig_begin(qkv_fig *f, double w, double h)
{
    if (!(w >= 1 && h >= 1 && w <= QKV_FIG_MAX_SIDE && h <= QKV_FIG_MAX_SIDE))
        return qkv_fail(QKV_ERR_ARG, "%s: the figure would be %.0f x %.0f points, more than %d a side", f->fn,
                        fmin(w, 1e9), fmin(h, 1e9), QKV_FIG_MAX_SIDE);
    f->w = ceil(w);
    f->h = ceil(h);
    QKV_TRY(qkv_plot_tmp_open(f->fn, f->path, &f->tmp, &f->file));
    qkv_status s = f->format == QKV_FIG_SVG ? qkv_fig_svg_begin(f) : qkv_fig_cairo_begin(f);
    if (s == QKV_OK && f->cr) fig_font_options(f->cr);
    return s;
}

qkv_status qkv_fig_end(qkv_fig *f)
{
    qkv_status s = f->ops->finish(f);
    f->ops->release(f);
    f->ops = NULL;
    FILE *file = f->file;
    char *tmp = f->tmp;
    f->file = NULL, f->tmp = NULL;
    qkv_status c =
        qkv_plot_tmp_commit(f->fn, f->path, tmp, file, s != QKV_OK || f->write_errno, f->write_errno);
    return s != QKV_OK ? s : c;
}

void qkv_fig_free(qkv_fig *f)
{
    if (f->ops) f->ops->release(f);
    f->ops = NULL;
    if (f->file) fclose(f->file);
    if (f->tmp) remove(f->tmp);
    free(f->tmp);
    f->file = NULL, f->tmp = NULL;
    if (f->measure) cairo_destroy(f->measure);
    if (f->measure_surface) cairo_surface_destroy(f->measure_surface);
    f->measure = NULL, f->measure_surface = NULL;
}

/* ---- text ------------------------------------------------------------------- */

/* The code point at s (U+FFFD for a malformed or overlong sequence, a
 * surrogate, or one past U+10FFFF); returns the bytes it took (>= 1). */
static int utf8_next(const unsigned char *s, uint32_t *cp)
{
    unsigned c = s[0];
    int n;
    uint32_t v, min;
    if (c < 0x80) return *cp = c, 1;
    if ((c & 0xE0) == 0xC0)
        n = 1, v = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0)
        n = 2, v = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0)
        n = 3, v = c & 0x07, min = 0x10000;
    else
        return *cp = 0xFFFD, 1;
    for (int i = 1; i <= n; i++) {
        if ((s[i] & 0xC0) != 0x80) return *cp = 0xFFFD, i; /* also stops at the NUL */
        v = v << 6 | (s[i] & 0x3F);
    }
    *cp = v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF) ? 0xFFFD : v;
    return n + 1;
}

static size_t utf8_put(char *out, uint32_t cp)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) return o[0] = (unsigned char)cp, 1;
    if (cp < 0x800)
        return o[0] = (unsigned char)(0xC0 | cp >> 6), o[1] = (unsigned char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12), o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18), o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)), o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

void qkv_fig_clean_text(char *out, size_t cap, const char *s, int max_chars)
{
    size_t n = 0;
    int chars = 0;
    if (max_chars <= 0) max_chars = 256;
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p) {
        uint32_t cp;
        p += utf8_next(p, &cp);
        /* control characters and noncharacters: drawn as the replacement */
        if (cp < 0x20 || (cp >= 0x7F && cp < 0xA0) || cp == 0xFFFE || cp == 0xFFFF) cp = 0xFFFD;
        if (chars == max_chars - 1 && *p) { /* more follows: the ellipsis ends it */
            n += utf8_put(out + n, 0x2026);
            break;
        }
        if (n + 4 + 3 + 1 > cap) break;
        n += utf8_put(out + n, cp);
        chars++;
    }
    out[n] = '\0';
}

enum { TEXT_CAP = 256 * 4 + 8 };

double qkv_fig_text_width(qkv_fig *f, const char *s, double size, int bold, int max_chars)
{
    char buf[TEXT_CAP];
    cairo_text_extents_t e;
    qkv_fig_clean_text(buf, sizeof buf, s, max_chars);
    fig_font(f->measure, size, bold);
    cairo_text_extents(f->measure, buf, &e);
    return e.x_advance;
}

void qkv_fig_font_extents(qkv_fig *f, double size, double *ascent, double *descent)
{
    cairo_font_extents_t e;
    fig_font(f->measure, size, 0);
    cairo_font_extents(f->measure, &e);
    *ascent = e.ascent;
    *descent = e.descent;
}

const qkv_fig_style qkv_fig_title_style = {15, 0x000000, QKV_FIG_CENTRE, QKV_FIG_BASELINE, 0, 1, 200};
const qkv_fig_style qkv_fig_note_style = {10, 0x404040, QKV_FIG_LEFT, QKV_FIG_TOP, 0, 0, 200};

void qkv_fig_text(qkv_fig *f, double x, double y, const char *s, const qkv_fig_style *st)
{
    char buf[TEXT_CAP];
    double asc, desc, d = 0;
    qkv_fig_clean_text(buf, sizeof buf, s, st->max_chars);
    if (!buf[0]) return;
    qkv_fig_font_extents(f, st->size, &asc, &desc);
    /* DejaVu's capitals are 0.73 em tall: their middle is 0.365 em up. */
    if (st->valign == QKV_FIG_MIDDLE)
        d = 0.365 * st->size;
    else if (st->valign == QKV_FIG_TOP)
        d = asc;
    else if (st->valign == QKV_FIG_BOTTOM)
        d = -desc;
    /* across the text: down the page, or (rotated) to the right */
    if (st->rotated)
        x += d;
    else
        y += d;
    f->ops->text(f, x, y, buf, st->size, st->rgb, st->halign, st->rotated, st->bold);
}

/* ---- drawing ------------------------------------------------------------------ */

void qkv_fig_rect(qkv_fig *f, double x, double y, double w, double h, uint32_t rgb)
{
    f->ops->rect(f, x, y, w, h, rgb, 1.0);
}

void qkv_fig_line(qkv_fig *f, double x0, double y0, double x1, double y1, uint32_t rgb, double lw, int dashed)
{
    const double xy[4] = {x0, y0, x1, y1};
    f->ops->polyline(f, xy, 2, rgb, lw, dashed);
}

void qkv_fig_frame(qkv_fig *f, double x, double y, double w, double h, uint32_t rgb, double lw)
{
    const double xy[10] = {x, y, x + w, y, x + w, y + h, x, y + h, x, y};
    f->ops->polyline(f, xy, 5, rgb, lw, 0);
}

cairo_surface_t *qkv_fig_pixels(cairo_format_t format, int64_t w, int64_t h,
                                uint32_t (*pixel)(const void *ctx, int64_t x, int64_t y), const void *ctx)
{
    cairo_surface_t *s = cairo_image_surface_create(format, (int)w, (int)h);
    if (cairo_surface_status(s) != CAIRO_STATUS_SUCCESS) return s;
    unsigned char *px = cairo_image_surface_get_data(s);
    int stride = cairo_image_surface_get_stride(s);
    cairo_surface_flush(s);
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++) ((uint32_t *)(void *)(px + y * stride))[x] = pixel(ctx, x, y);
    cairo_surface_mark_dirty(s);
    return s;
}

void qkv_fig_no_value(qkv_fig *f, double x, double y, double w, double h)
{
    f->ops->rect(f, x, y, w, h, QKV_PLOT_NAN_COLOUR, 1.0);
    /* lines (x - x0) - (y - y0) = c, from the top or left edge down-right
     * to the right or bottom edge */
    double gap = fmax(3.0, fmin(w, h) / 5);
    for (double c = -h + gap / 2; c < w; c += gap) {
        double sx = c >= 0 ? c : 0, sy = c >= 0 ? 0 : -c, t = fmin(w - sx, h - sy);
        qkv_fig_line(f, x + sx, y + sy, x + sx + t, y + sy + t, 0x9a9a9a, 0.8, 0);
    }
    if (w >= 4 && h >= 4) qkv_fig_frame(f, x + 0.5, y + 0.5, w - 1, h - 1, 0x9a9a9a, 1.0);
}
