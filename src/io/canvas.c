/* canvas.c: an RGB canvas for plots and attention maps, saved as PNG. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/internal.h"

qkv_status qkv_canvas_new(qkv_canvas *cv, int64_t w, int64_t h, uint32_t bg)
{
    QKV_NEED(cv, "canvas_new", "canvas");
    cv->rgb = NULL;
    if (w <= 0 || h <= 0 || w > 16384 || h > 16384)
        return qkv_fail(QKV_ERR_ARG, "canvas_new: size %lldx%lld outside 1..16384", (long long)w,
                        (long long)h);
    cv->rgb = malloc((size_t)(w * h * 3));
    if (!cv->rgb) return qkv_fail(QKV_ERR_NOMEM, "canvas_new: out of memory");
    cv->w = w;
    cv->h = h;
    qkv_canvas_rect(cv, 0, 0, (double)w, (double)h, bg);
    return QKV_OK;
}

void qkv_canvas_free(qkv_canvas *cv)
{
    if (!cv) return;
    free(cv->rgb);
    cv->rgb = NULL;
}

static void put(qkv_canvas *cv, int64_t x, int64_t y, uint32_t c)
{
    if (x < 0 || y < 0 || x >= cv->w || y >= cv->h) return;
    uint8_t *p = cv->rgb + (y * cv->w + x) * 3;
    p[0] = (uint8_t)(c >> 16), p[1] = (uint8_t)(c >> 8), p[2] = (uint8_t)c;
}

void qkv_canvas_rect(qkv_canvas *cv, double x0, double y0, double x1, double y1, uint32_t c)
{
    if (!cv || !cv->rgb) return;
    for (int64_t y = (int64_t)floor(y0); y < (int64_t)ceil(y1); y++)
        for (int64_t x = (int64_t)floor(x0); x < (int64_t)ceil(x1); x++) put(cv, x, y, c);
}

void qkv_canvas_line(qkv_canvas *cv, double x0, double y0, double x1, double y1, uint32_t c)
{
    if (!cv || !cv->rgb || !isfinite(x0) || !isfinite(y0) || !isfinite(x1) || !isfinite(y1)) return;
    double dx = x1 - x0, dy = y1 - y0;
    int64_t n = (int64_t)ceil(fmax(fabs(dx), fabs(dy)));
    if (n > 100000) return; /* far off the canvas */
    for (int64_t i = 0; i <= n; i++) {
        double t = n ? (double)i / (double)n : 0;
        put(cv, (int64_t)lround(x0 + t * dx), (int64_t)lround(y0 + t * dy), c);
    }
}

/* A perceptually ordered dark-blue -> teal -> yellow map (viridis-like,
 * five stops linearly interpolated). */
uint32_t qkv_colormap(double v)
{
    static const double stop[5][3] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
    if (!(v > 0)) v = 0;
    if (v > 1) v = 1;
    double s = v * 4;
    int i = s >= 4 ? 3 : (int)s;
    double t = s - i;
    uint32_t c = 0;
    for (int k = 0; k < 3; k++) c = (c << 8) | (uint32_t)lround(stop[i][k] + t * (stop[i + 1][k] - stop[i][k]));
    return c;
}

qkv_status qkv_canvas_heatmap(qkv_canvas *cv, double x0, double y0, double cell, int64_t rows,
                              int64_t cols, const float *m, float lo, float hi)
{
    QKV_NEED(cv, "canvas_heatmap", "canvas");
    QKV_NEED(m, "canvas_heatmap", "values");
    if (rows <= 0 || cols <= 0 || !(cell > 0) || !(hi > lo))
        return qkv_fail(QKV_ERR_ARG, "canvas_heatmap: rows %lld, cols %lld, cell %g and range "
                        "[%g,%g] must be positive and non-empty", (long long)rows, (long long)cols,
                        cell, lo, hi);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            qkv_canvas_rect(cv, x0 + j * cell, y0 + i * cell, x0 + (j + 1) * cell, y0 + (i + 1) * cell,
                            qkv_colormap((m[i * cols + j] - lo) / (hi - lo)));
    return QKV_OK;
}

qkv_status qkv_canvas_save(const qkv_canvas *cv, const char *path)
{
    QKV_NEED(cv, "canvas_save", "canvas");
    if (!cv->rgb) return qkv_fail(QKV_ERR_STATE, "canvas_save: canvas has no pixels");
    return qkv_png_write(path, cv->w, cv->h, cv->rgb);
}
