/* lines.c: line plots: axes with nice ticks, grid lines, tick labels, axis
 * names, a title, a legend in the corner the lines leave emptiest, and an
 * optional log y scale. A point whose x or y is NaN or infinite (or, on a
 * log scale, whose y is <= 0) is left out and breaks its line; a note
 * under the axes counts those that were not NaN. Panels of several plots
 * share one figure (qkv_plot_lines_grid). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "plot/plot_internal.h"

enum { MAX_SERIES = 256, MAX_PANELS = 64, LEGEND_CHARS = 60 };
#define MAX_POINTS ((int64_t)1 << 28)
#define TICK_FS 10.0
#define LABEL_FS 11.0

/* matplotlib's "tab10" */
static const uint32_t palette[10] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                                     0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf};

static qkv_status check_plot(const char *fn, const qkv_line_plot *p, const char *where, int grid)
{
    if (!p->series) return qkv_fail(QKV_ERR_ARG, "%s: %sseries is NULL", fn, where);
    if (p->n_series < 1 || p->n_series > MAX_SERIES)
        return qkv_fail(QKV_ERR_ARG, "%s: %sn_series is %d, expected 1 to %d", fn, where, p->n_series,
                        MAX_SERIES);
    for (int i = 0; i < p->n_series; i++) {
        const qkv_series *s = &p->series[i];
        if (!s->y) return qkv_fail(QKV_ERR_ARG, "%s: %sseries[%d].y is NULL", fn, where, i);
        if (s->n < 1 || s->n > MAX_POINTS)
            return qkv_fail(QKV_ERR_ARG, "%s: %sseries[%d].n is %lld, expected 1 to %lld", fn, where, i,
                            (long long)s->n, (long long)MAX_POINTS);
        if (s->colour > 0xffffff)
            return qkv_fail(QKV_ERR_ARG, "%s: %sseries[%d].colour 0x%x is not 0xRRGGBB", fn, where, i,
                            (unsigned)s->colour);
    }
    if ((p->width || p->height) &&
        (p->width < 100 || p->height < 100 || p->width > QKV_FIG_MAX_SIDE || p->height > QKV_FIG_MAX_SIDE))
        return qkv_fail(QKV_ERR_ARG, "%s: %ssize %lld x %lld: expected 100 to %d a side (or 0 x 0: %s)", fn,
                        where, (long long)p->width, (long long)p->height, QKV_FIG_MAX_SIDE,
                        grid ? "480 x 300" : "800 x 500");
    return QKV_OK;
}

/* What one plot's data spans, in plotted units (log10 y on a log scale). */
typedef struct {
    double xlo, xhi, ylo, yhi;
    int64_t inf, nonpos, drawn;
} span;

static double series_x(const qkv_series *s, int64_t i) { return s->x ? s->x[i] : (double)i; }

/* Point i of s in plotted units; 0 if it is left out (counted in sp). */
static int point(const qkv_series *s, int64_t i, int log_y, double *x, double *y, span *sp)
{
    *x = series_x(s, i), *y = s->y[i];
    if (isnan(*x) || isnan(*y)) return 0;
    if (isinf(*x) || isinf(*y)) {
        if (sp) sp->inf++;
        return 0;
    }
    if (log_y && *y <= 0) {
        if (sp) sp->nonpos++;
        return 0;
    }
    if (log_y) *y = log10(*y);
    return 1;
}

/* A range that is not a point: lo < hi, both finite, padded by frac of its span. */
static void widen(double *lo, double *hi, double frac)
{
    if (!(*lo < *hi)) {
        double d = *lo == 0 ? 1 : fabs(*lo) * 0.1;
        *lo -= d, *hi += d;
    }
    double pad = (*hi / 2 - *lo / 2) * 2 * frac;
    *lo = fmax(*lo - pad, -DBL_MAX), *hi = fmin(*hi + pad, DBL_MAX);
}

static span data_span(const qkv_line_plot *p)
{
    span sp = {INFINITY, -INFINITY, INFINITY, -INFINITY, 0, 0, 0};
    for (int k = 0; k < p->n_series; k++)
        for (int64_t i = 0; i < p->series[k].n; i++) {
            double x, y;
            if (!point(&p->series[k], i, p->log_y, &x, &y, &sp)) continue;
            sp.xlo = fmin(sp.xlo, x), sp.xhi = fmax(sp.xhi, x);
            sp.ylo = fmin(sp.ylo, y), sp.yhi = fmax(sp.yhi, y);
            sp.drawn++;
        }
    if (!sp.drawn) sp.xlo = 0, sp.xhi = 1, sp.ylo = 0, sp.yhi = 1;
    widen(&sp.xlo, &sp.xhi, 0.0);
    widen(&sp.ylo, &sp.yhi, 0.05);
    return sp;
}

typedef struct {
    double px, py, pw, ph; /* the axes' rectangle */
    double xt[64], yt[64], xstep, ystep;
    int nx, ny;
} axes;

static void y_tick_label(char *buf, size_t cap, const qkv_line_plot *p, const axes *a, int i)
{
    qkv_axis_tick_label(buf, cap, a->yt[i], p->log_y ? 0 : a->ystep);
}

/* Lays out the axes in the w x h cell at (x0, y0); 0 if they do not fit. */
static int axes_layout(qkv_fig *f, const qkv_line_plot *p, const span *sp, int nnotes, double x0, double y0,
                       double w, double h, axes *a)
{
    double top = y0 + 10 + (p->title ? 13 * 1.9 : 0);
    double bottom = y0 + h - 8 - TICK_FS * 1.6 - (p->x_label ? LABEL_FS * 1.7 : 0) - nnotes * 10 * 1.5;
    a->ph = bottom - top;
    if (a->ph < 30) return 0;
    a->ny = p->log_y ? qkv_axis_log_ticks(sp->ylo, sp->yhi, (int)fmax(2, a->ph / 34), a->yt)
                     : qkv_axis_ticks(sp->ylo, sp->yhi, (int)fmax(2, a->ph / 34), a->yt, &a->ystep);
    double ytw = 0;
    for (int i = 0; i < a->ny; i++) {
        char buf[64];
        y_tick_label(buf, sizeof buf, p, a, i);
        ytw = fmax(ytw, qkv_fig_text_width(f, buf, TICK_FS, 0, 0));
    }
    a->px = x0 + 8 + (p->y_label ? LABEL_FS * 1.7 : 0) + ytw + 7;
    a->py = top;
    a->pw = x0 + w - 16 - a->px;
    if (a->pw < 30) return 0;
    a->nx = qkv_axis_ticks(sp->xlo, sp->xhi, (int)fmax(2, a->pw / 80), a->xt, &a->xstep);
    return 1;
}

static double ax_x(const axes *a, const span *sp, double x)
{
    return a->px + a->pw * qkv_axis_frac(x, sp->xlo, sp->xhi);
}
static double ax_y(const axes *a, const span *sp, double y)
{
    return a->py + a->ph * (1 - qkv_axis_frac(y, sp->ylo, sp->yhi));
}

static uint32_t series_colour(const qkv_line_plot *p, int k)
{
    int auto_index = 0;
    for (int i = 0; i < k; i++) auto_index += p->series[i].colour == 0;
    return p->series[k].colour ? p->series[k].colour : palette[auto_index % 10];
}

/* The lines: runs of consecutive drawn points as polylines of at most
 * CHUNK points (a long run continues from its last point), a lone point
 * as a dot. */
enum { CHUNK = 2048 };
static void draw_series(qkv_fig *f, const qkv_line_plot *p, const span *sp, const axes *a)
{
    double xy[2 * CHUNK];
    for (int k = 0; k < p->n_series; k++) {
        const qkv_series *s = &p->series[k];
        uint32_t c = series_colour(p, k);
        int64_t m = 0;
        int carried = 0;
        for (int64_t i = 0; i <= s->n; i++) {
            double x, y;
            if (i < s->n && point(s, i, p->log_y, &x, &y, NULL)) {
                xy[2 * m] = ax_x(a, sp, x), xy[2 * m + 1] = ax_y(a, sp, y);
                if (++m < CHUNK) continue;
                f->ops->polyline(f, xy, m, c, 1.6, s->dashed);
                xy[0] = xy[2 * m - 2], xy[1] = xy[2 * m - 1], m = 1, carried = 1;
                continue;
            }
            if (m >= 2)
                f->ops->polyline(f, xy, m, c, 1.6, s->dashed);
            else if (m == 1 && !carried)
                f->ops->rect(f, xy[0] - 1.5, xy[1] - 1.5, 3, 3, c, 1.0);
            m = 0, carried = 0;
        }
    }
}

/* The legend goes to the corner of the axes with the fewest points under it. */
static void draw_legend(qkv_fig *f, const qkv_line_plot *p, const span *sp, const axes *a)
{
    int n = 0;
    double lw = 0, row = 16;
    for (int k = 0; k < p->n_series; k++)
        if (p->series[k].label)
            n++, lw = fmax(lw, qkv_fig_text_width(f, p->series[k].label, TICK_FS, 0, LEGEND_CHARS));
    if (!n) return;
    double bw = 10 + 24 + 6 + lw, bh = 8 + n * row;
    int64_t best = -1;
    double bx = 0, by = 0;
    for (int corner = 0; corner < 4; corner++) { /* top right, top left, bottom right, bottom left */
        double x = corner % 2 ? a->px + 6 : a->px + a->pw - 6 - bw,
               y = corner < 2 ? a->py + 6 : a->py + a->ph - 6 - bh;
        int64_t under = 0;
        for (int k = 0; k < p->n_series; k++)
            for (int64_t i = 0; i < p->series[k].n; i++) {
                double px, py;
                if (!point(&p->series[k], i, p->log_y, &px, &py, NULL)) continue;
                px = ax_x(a, sp, px), py = ax_y(a, sp, py);
                under += px >= x && px <= x + bw && py >= y && py <= y + bh;
            }
        if (best < 0 || under < best) best = under, bx = x, by = y;
    }
    f->ops->rect(f, bx, by, bw, bh, 0xffffff, 0.88);
    qkv_fig_frame(f, bx, by, bw, bh, 0xb0b0b0, 0.8);
    static const qkv_fig_style entry = {TICK_FS, 0x000000, QKV_FIG_LEFT, QKV_FIG_MIDDLE, 0, 0, LEGEND_CHARS};
    double y = by + 4 + row / 2;
    for (int k = 0; k < p->n_series; k++) {
        if (!p->series[k].label) continue;
        qkv_fig_line(f, bx + 8, y, bx + 32, y, series_colour(p, k), 2, p->series[k].dashed);
        qkv_fig_text(f, bx + 38, y, p->series[k].label, &entry);
        y += row;
    }
}

/* One plot in the w x h cell at (x0, y0). */
static qkv_status draw_plot(qkv_fig *f, const qkv_line_plot *p, double x0, double y0, double w, double h)
{
    span sp = data_span(p);
    char notes[3][128];
    int nn = 0;
    if (!sp.drawn) snprintf(notes[nn++], sizeof notes[0], "no point to draw");
    if (sp.inf)
        snprintf(notes[nn++], sizeof notes[0], "%lld infinite point%s left out", (long long)sp.inf,
                 sp.inf > 1 ? "s" : "");
    if (sp.nonpos)
        snprintf(notes[nn++], sizeof notes[0], "%lld point%s <= 0 left out (log scale)", (long long)sp.nonpos,
                 sp.nonpos > 1 ? "s" : "");
    axes a;
    if (!axes_layout(f, p, &sp, nn, x0, y0, w, h, &a))
        return qkv_fail(QKV_ERR_ARG, "%s: %.0f x %.0f points is too small for the axes and their labels",
                        f->fn, w, h);
    static const qkv_fig_style title = {13, 0x000000, QKV_FIG_CENTRE, QKV_FIG_BASELINE, 0, 1, 120},
                               x_name = {LABEL_FS, 0x202020, QKV_FIG_CENTRE, QKV_FIG_TOP, 0, 0, 120},
                               y_name = {LABEL_FS, 0x202020, QKV_FIG_CENTRE, QKV_FIG_TOP, 1, 0, 120},
                               x_tick = {TICK_FS, 0x202020, QKV_FIG_CENTRE, QKV_FIG_TOP, 0, 0, 0},
                               y_tick = {TICK_FS, 0x202020, QKV_FIG_RIGHT, QKV_FIG_MIDDLE, 0, 0, 0};
    char buf[64];
    for (int i = 0; i < a.ny; i++) { /* grid lines and y ticks */
        double y = ax_y(&a, &sp, p->log_y ? log10(a.yt[i]) : a.yt[i]);
        qkv_fig_line(f, a.px, y, a.px + a.pw, y, 0xe6e6e6, 0.8, 0);
        qkv_fig_line(f, a.px - 4, y, a.px, y, 0x404040, 0.8, 0);
        y_tick_label(buf, sizeof buf, p, &a, i);
        qkv_fig_text(f, a.px - 6, y, buf, &y_tick);
    }
    for (int i = 0; i < a.nx; i++) {
        double x = ax_x(&a, &sp, a.xt[i]);
        qkv_fig_line(f, x, a.py, x, a.py + a.ph, 0xe6e6e6, 0.8, 0);
        qkv_fig_line(f, x, a.py + a.ph, x, a.py + a.ph + 4, 0x404040, 0.8, 0);
        qkv_axis_tick_label(buf, sizeof buf, a.xt[i], a.xstep);
        qkv_fig_text(f, x, a.py + a.ph + 6, buf, &x_tick);
    }
    f->ops->clip(f, a.px, a.py, a.pw, a.ph);
    draw_series(f, p, &sp, &a);
    f->ops->unclip(f);
    qkv_fig_frame(f, a.px, a.py, a.pw, a.ph, 0x404040, 1.0);
    draw_legend(f, p, &sp, &a);
    if (p->title) qkv_fig_text(f, a.px + a.pw / 2, y0 + 8 + 13, p->title, &title);
    double below = a.py + a.ph + 6 + TICK_FS * 1.6;
    if (p->x_label) qkv_fig_text(f, a.px + a.pw / 2, below, p->x_label, &x_name), below += LABEL_FS * 1.7;
    if (p->y_label) qkv_fig_text(f, x0 + 8, a.py + a.ph / 2, p->y_label, &y_name);
    for (int i = 0; i < nn; i++) qkv_fig_text(f, a.px, below + i * 15, notes[i], &qkv_fig_note_style);
    return QKV_OK;
}

/* Draws n panels (cells of cw x ch, columns across) under title. */
static qkv_status draw_panels(const char *fn, const char *path, const qkv_line_plot *panels, int n,
                              int columns, const char *title, double cw, double ch)
{
    int rows = (n + columns - 1) / columns;
    double th = title ? 34 : 0;
    qkv_fig f;
    qkv_status s = qkv_fig_init(&f, fn, path);
    if (!s) s = qkv_fig_begin(&f, columns * cw, rows * ch + th);
    if (!s && title) qkv_fig_text(&f, columns * cw / 2, 24, title, &qkv_fig_title_style);
    for (int i = 0; !s && i < n; i++)
        s = draw_plot(&f, &panels[i], (i % columns) * cw, th + (i / columns) * ch, cw, ch);
    if (!s) s = qkv_fig_end(&f);
    qkv_fig_free(&f);
    return s;
}

qkv_status qkv_plot_lines(const char *path, const qkv_line_plot *p)
{
    const char *fn = "qkv_plot_lines";
    QKV_NEED(p, fn, "p");
    QKV_TRY(check_plot(fn, p, "", 0));
    return draw_panels(fn, path, p, 1, 1, NULL, p->width ? (double)p->width : 800,
                       p->height ? (double)p->height : 500);
}

qkv_status qkv_plot_lines_grid(const char *path, const qkv_line_plot *panels, int n, int columns,
                               const char *title)
{
    const char *fn = "qkv_plot_lines_grid";
    QKV_NEED(panels, fn, "panels");
    if (n < 1 || n > MAX_PANELS)
        return qkv_fail(QKV_ERR_ARG, "%s: n is %d, expected 1 to %d", fn, n, MAX_PANELS);
    if (columns < 0 || columns > n)
        return qkv_fail(QKV_ERR_ARG, "%s: columns is %d, expected 0 to n = %d", fn, columns, n);
    double cw = 0, ch = 0;
    for (int i = 0; i < n; i++) {
        char where[32];
        snprintf(where, sizeof where, "panels[%d].", i);
        QKV_TRY(check_plot(fn, &panels[i], where, 1));
        cw = fmax(cw, panels[i].width ? (double)panels[i].width : 480);
        ch = fmax(ch, panels[i].height ? (double)panels[i].height : 300);
    }
    if (!columns) columns = n < 2 ? n : 2;
    int rows = (n + columns - 1) / columns;
    if (columns * cw > QKV_FIG_MAX_SIDE || rows * ch + 34 > QKV_FIG_MAX_SIDE)
        return qkv_fail(QKV_ERR_ARG, "%s: %d x %d panels of %.0f x %.0f points: more than %d a side", fn,
                        columns, rows, cw, ch, QKV_FIG_MAX_SIDE);
    return draw_panels(fn, path, panels, n, columns, title, cw, ch);
}
