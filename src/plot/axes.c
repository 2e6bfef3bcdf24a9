/* axes.c: scales and ticks ("nice" steps of 1, 2 or 5 times a power of
 * ten, as R's pretty() and matplotlib's MaxNLocator pick them), tick
 * labels, and the colour bar the heat maps and overlays share. Every
 * computation stays finite for any finite lo < hi: spans that overflow a
 * double, or are too thin to split, fall back to the two ends. */
#include <math.h>
#include <stdlib.h>
#include "plot/plot_internal.h"

#define MAX_TICKS 64

double qkv_axis_frac(double v, double lo, double hi)
{
    if (fabs(lo) < 1e300 && fabs(hi) < 1e300) return (v - lo) / (hi - lo);
    return (v / 2 - lo / 2) / (hi / 2 - lo / 2); /* hi - lo would overflow */
}

static int ends(double lo, double hi, double *ticks, double *step)
{
    ticks[0] = lo, ticks[1] = hi;
    if (step) *step = 0;
    return 2;
}

int qkv_axis_ticks(double lo, double hi, int max, double *ticks, double *step)
{
    double span = hi - lo;
    if (max > MAX_TICKS) max = MAX_TICKS;
    if (max < 2 || !isfinite(span) || !(span > 0) || span < 1e-12 * fmax(fabs(lo), fabs(hi)))
        return ends(lo, hi, ticks, step);
    static const double mult[] = {1, 2, 5, 10, 20, 50, 100};
    double mag = pow(10, floor(log10(span / max))), s = 0, k0 = 0, k1 = -1;
    for (int i = 0; i < 7; i++) {
        s = mult[i] * mag;
        k0 = ceil(lo / s), k1 = floor(hi / s);
        if (k1 - k0 + 1 <= max) break;
    }
    if (!isfinite(s) || !(s > 0) || k1 - k0 + 1 < 2 || k1 - k0 + 1 > max) return ends(lo, hi, ticks, step);
    int n = 0;
    for (double k = k0; k <= k1 && n < max; k++) {
        double v = k * s;
        ticks[n++] = fabs(v) < s * 1e-9 ? 0 : v; /* -1e-17 is 0 */
    }
    if (step) *step = s;
    return n;
}

/* Ticks m 10^d (m from one set of mantissas, every k-th decade for the
 * powers) inside [llo, lhi]; returns the count, or max + 1 if more. */
static int log_set(double llo, double lhi, int max, const double *mant, int nm, int every, double *ticks)
{
    int n = 0;
    for (double d = floor(llo); d <= ceil(lhi); d += every)
        for (int m = 0; m < nm; m++) {
            double l = d + log10(mant[m]);
            if (l < llo - 1e-9 || l > lhi + 1e-9) continue;
            if (n == max) return max + 1;
            ticks[n++] = mant[m] * pow(10, d);
        }
    return n;
}

int qkv_axis_log_ticks(double llo, double lhi, int max, double *ticks)
{
    if (max > MAX_TICKS) max = MAX_TICKS;
    /* mantissas per decade, sparsest first: the first set giving 3 to max
     * ticks wins (else one giving 2; else linear ticks) */
    static const double sets[4][9] = {{1}, {1, 2, 5}, {1, 2, 3, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}};
    static const int sizes[4] = {1, 3, 4, 9};
    int every = (int)ceil((ceil(lhi) - floor(llo) + 1) / max);
    for (int least = 3; least >= 2; least--)
        for (int set = 0; set < 4; set++) {
            int n = log_set(llo, lhi, max, sets[set], sizes[set], set ? 1 : (every < 1 ? 1 : every), ticks);
            if (n >= least && n <= max) return n;
        }
    return qkv_axis_ticks(pow(10, llo), pow(10, lhi), max, ticks, NULL);
}

void qkv_axis_tick_label(char *out, size_t cap, double v, double step)
{
    if (!(step > 0)) {
        snprintf(out, cap, "%.4g", v);
        return;
    }
    int e = (int)floor(log10(step) + 1e-9);
    if (fabs(v) >= 1e6 || (step < 1e-4 && v != 0)) {
        /* enough significant digits to tell neighbouring ticks apart */
        int digits = v == 0 ? 1 : (int)floor(log10(fabs(v)) + 1e-9) - e + 1;
        snprintf(out, cap, "%.*g", digits < 1 ? 1 : digits > 15 ? 15 : digits, v);
    } else {
        snprintf(out, cap, "%.*f", e < 0 ? -e : 0, v);
    }
}

/* ---- the colour bar ---------------------------------------------------------- */

static int bar_ticks(double lo, double hi, double h, double *ticks, double *step)
{
    int max = (int)(h / 26);
    return qkv_axis_ticks(lo, hi, max < 2 ? 2 : max, ticks, step);
}

double qkv_colour_bar_width(qkv_fig *f, double bar_w, double h, double lo, double hi)
{
    double ticks[MAX_TICKS], step, w = 0;
    int n = bar_ticks(lo, hi, h, ticks, &step);
    for (int i = 0; i < n; i++) {
        char label[64];
        qkv_axis_tick_label(label, sizeof label, ticks[i], step);
        w = fmax(w, qkv_fig_text_width(f, label, 10, 0, 0));
    }
    return bar_w + 7 + w;
}

/* Row y of a 1 x 256 colour bar, the top row 1. */
static uint32_t bar_pixel(const void *ctx, int64_t x, int64_t y)
{
    (void)ctx, (void)x;
    return qkv_plot_colour((double)(255 - y) / 255.0);
}

void qkv_colour_bar(qkv_fig *f, double x, double y, double w, double h, double lo, double hi)
{
    cairo_surface_t *img = qkv_fig_pixels(CAIRO_FORMAT_RGB24, 1, 256, bar_pixel, NULL);
    if (cairo_surface_status(img) == CAIRO_STATUS_SUCCESS) f->ops->image(f, x, y, w, h, img, 1.0);
    cairo_surface_destroy(img);
    qkv_fig_frame(f, x, y, w, h, 0x808080, 0.8);
    static const qkv_fig_style tick = {10, 0x202020, QKV_FIG_LEFT, QKV_FIG_MIDDLE, 0, 0, 0};
    double ticks[MAX_TICKS], step;
    int n = bar_ticks(lo, hi, h, ticks, &step);
    for (int i = 0; i < n; i++) {
        char label[64];
        double ty = y + h * (1 - qkv_axis_frac(ticks[i], lo, hi));
        qkv_axis_tick_label(label, sizeof label, ticks[i], step);
        qkv_fig_line(f, x + w, ty, x + w + 4, ty, 0x404040, 0.8, 0);
        qkv_fig_text(f, x + w + 7, ty, label, &tick);
    }
}
