/* backend_svg.c: figures written as SVG elements, one per drawing call:
 * <rect>, <polyline>, <text> (labels stay text: searchable, selectable,
 * XML-escaped so that no label is ever markup), <image> (a PNG inlined as
 * base64, pixels kept sharp) and <clipPath> groups. Text is placed with
 * Cairo's measurements of DejaVu Sans, as the other formats place it. */
#include <errno.h>
#include <string.h>
#include "plot/plot_internal.h"

/* Coordinates with two decimals: a hundredth of a point is below what any
 * viewer resolves. */
#define P2 "%.2f"

static void svg_colour(FILE *o, const char *attr, uint32_t rgb)
{
    fprintf(o, " %s=\"#%06x\"", attr, (unsigned)(rgb & 0xffffff));
}

/* s as XML character data or attribute text: the five special characters
 * escaped; s is already clean UTF-8 without control characters. */
static void svg_escaped(FILE *o, const char *s)
{
    for (; *s; s++) {
        const char *e = *s == '&'    ? "&amp;"
                        : *s == '<'  ? "&lt;"
                        : *s == '>'  ? "&gt;"
                        : *s == '"'  ? "&quot;"
                        : *s == '\'' ? "&#39;"
                                     : NULL;
        if (e)
            fputs(e, o);
        else
            fputc(*s, o);
    }
}

static void s_rect(qkv_fig *f, double x, double y, double w, double h, uint32_t rgb, double alpha)
{
    fprintf(f->file, "<rect x=\"" P2 "\" y=\"" P2 "\" width=\"" P2 "\" height=\"" P2 "\"", x, y, w, h);
    svg_colour(f->file, "fill", rgb);
    if (alpha < 1) fprintf(f->file, " fill-opacity=\"%.3f\"", alpha);
    fputs(" shape-rendering=\"crispEdges\"/>\n", f->file);
}

static void s_polyline(qkv_fig *f, const double *xy, int64_t n, uint32_t rgb, double lw, int dashed)
{
    FILE *o = f->file;
    fputs("<polyline points=\"", o);
    for (int64_t i = 0; i < n; i++) fprintf(o, "%s" P2 "," P2, i ? " " : "", xy[2 * i], xy[2 * i + 1]);
    fputs("\" fill=\"none\"", o);
    svg_colour(o, "stroke", rgb);
    fprintf(o, " stroke-width=\"" P2 "\" stroke-linejoin=\"round\"", lw);
    if (dashed) fprintf(o, " stroke-dasharray=\"" P2 "," P2 "\"", 5 * lw, 3 * lw);
    fputs("/>\n", o);
}

static void s_text(qkv_fig *f, double x, double y, const char *s, double size, uint32_t rgb, int halign,
                   int rotated, int bold)
{
    FILE *o = f->file;
    fprintf(o, "<text x=\"" P2 "\" y=\"" P2 "\" font-size=\"" P2 "\"", x, y, size);
    svg_colour(o, "fill", rgb);
    if (halign == QKV_FIG_CENTRE) fputs(" text-anchor=\"middle\"", o);
    if (halign == QKV_FIG_RIGHT) fputs(" text-anchor=\"end\"", o);
    if (bold) fputs(" font-weight=\"bold\"", o);
    if (rotated) fprintf(o, " transform=\"rotate(-90 " P2 " " P2 ")\"", x, y);
    fputc('>', o);
    svg_escaped(o, s);
    fputs("</text>\n", o);
}

/* ---- images: PNG bytes, base64 as they come ---------------------------- */

typedef struct {
    FILE *o;
    unsigned char held[3];
    int n;
} b64;

static void b64_put(b64 *b, int final)
{
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (!b->n || (b->n < 3 && !final)) return;
    unsigned v =
        (unsigned)b->held[0] << 16 | (b->n > 1 ? (unsigned)b->held[1] << 8 : 0) | (b->n > 2 ? b->held[2] : 0);
    char q[4] = {digits[v >> 18 & 63], digits[v >> 12 & 63], b->n > 1 ? digits[v >> 6 & 63] : '=',
                 b->n > 2 ? digits[v & 63] : '='};
    fwrite(q, 1, 4, b->o);
    b->n = 0;
}

static cairo_status_t b64_write(void *closure, const unsigned char *data, unsigned int len)
{
    b64 *b = closure;
    for (unsigned int i = 0; i < len; i++) {
        b->held[b->n++] = data[i];
        b64_put(b, 0);
    }
    return ferror(b->o) ? CAIRO_STATUS_WRITE_ERROR : CAIRO_STATUS_SUCCESS;
}

static void s_image(qkv_fig *f, double x, double y, double w, double h, cairo_surface_t *img, double alpha)
{
    FILE *o = f->file;
    fprintf(o, "<image x=\"" P2 "\" y=\"" P2 "\" width=\"" P2 "\" height=\"" P2 "\"", x, y, w, h);
    if (alpha < 1) fprintf(o, " opacity=\"%.3f\"", alpha);
    fputs(" preserveAspectRatio=\"none\" image-rendering=\"pixelated\""
          " style=\"image-rendering:pixelated\" xlink:href=\"data:image/png;base64,",
          o);
    b64 b = {o, {0}, 0};
    if (cairo_surface_write_to_png_stream(img, b64_write, &b) != CAIRO_STATUS_SUCCESS && !f->write_errno)
        f->write_errno = errno ? errno : EIO;
    b64_put(&b, 1);
    fputs("\"/>\n", o);
}

static void s_clip(qkv_fig *f, double x, double y, double w, double h)
{
    int id = f->clip_id++;
    fprintf(f->file,
            "<clipPath id=\"clip%d\"><rect x=\"" P2 "\" y=\"" P2 "\" width=\"" P2 "\" height=\"" P2
            "\"/></clipPath>\n<g clip-path=\"url(#clip%d)\">\n",
            id, x, y, w, h, id);
    f->clip_depth++;
}

static void s_unclip(qkv_fig *f)
{
    if (f->clip_depth <= 0) return;
    fputs("</g>\n", f->file);
    f->clip_depth--;
}

static qkv_status s_finish(qkv_fig *f)
{
    while (f->clip_depth > 0) s_unclip(f);
    fputs("</svg>\n", f->file);
    if (ferror(f->file) && !f->write_errno) f->write_errno = errno ? errno : EIO;
    return QKV_OK; /* a write error: the commit reports it */
}

static void s_release(qkv_fig *f) { (void)f; }

static const qkv_fig_ops svg_ops = {s_rect, s_polyline, s_text,   s_image,
                                    s_clip, s_unclip,   s_finish, s_release};

qkv_status qkv_fig_svg_begin(qkv_fig *f)
{
    f->ops = &svg_ops;
    /* xml:space="preserve": a label's own spaces (" the") are kept */
    fprintf(f->file,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" xmlns:xlink=\"http://www.w3.org/1999/xlink\""
            " version=\"1.1\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\""
            " font-family=\"DejaVu Sans, sans-serif\" xml:space=\"preserve\">\n",
            f->w, f->h, f->w, f->h);
    s_rect(f, 0, 0, f->w, f->h, 0xffffff, 1.0);
    return QKV_OK;
}
