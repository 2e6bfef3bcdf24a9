/* heatmap.c: attention maps drawn as the lecture notes draw them.
 *
 * The layout, from the top: the title; then a grid of panels, one per
 * head (or one for their mean), each with its head's title, the key axis
 * name, the key labels (rotated when any is wider than a cell), and the
 * map, whose row i / column j is the square cell at (map_x + j s,
 * map_y + i s), s points a side (whole points, so that cells meet without
 * seams); query labels and the query axis name on the map's left; the
 * colour bar right of the grid, level with the first map; notes under
 * everything. Long sequences become blocks of cells averaged (never
 * cropped); labels then give each block's first index. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "plot/plot_internal.h"

static const char *FN = "qkv_plot_heatmap";

enum { MARGIN = 14, GAP = 18, MAX_HEADS_GRID = 64, MAX_NOTES = 4, LABEL_CHARS = 40 };
#define TITLE_FS 15.0
#define HEAD_FS 12.0
#define AXIS_FS 11.0
#define NOTE_FS 10.0

/* The maps as drawn, and their labels. */
typedef struct {
    const qkv_heatmap *h;
    qkv_fig *fig;
    int64_t R, C, br, bc; /* display rows/cols; block sizes */
    int nmaps;
    float *cells; /* (nmaps, R, C) */
    double lo, hi;
    char notes[MAX_NOTES][192];
    int nnotes, nan_note; /* nan_note: index of the note with the hatched swatch, or -1 */
} hm_data;

typedef struct {
    double s, fs, ann_fs; /* cell side; label and annotation font sizes (0: none) */
    int64_t krow, kcol; /* every k-th label is drawn */
    int rotated;
    double head_h, axis_h, map_x, map_y, panel_w, panel_h;
    int gc, gr;
    double title_h, grid_w, grid_h, bar_h, bar_w, notes_y, W, H;
} hm_layout;

/* ---- the data: checks, means over heads and blocks ------------------------ */

static qkv_status check_labels(const char *const *labels, int64_t n, const char *what)
{
    for (int64_t i = 0; labels && i < n; i++)
        if (!labels[i]) return qkv_fail(QKV_ERR_ARG, "%s: %s[%lld] is NULL", FN, what, (long long)i);
    return QKV_OK;
}

static qkv_status check(const qkv_heatmap *h)
{
    QKV_NEED(h, FN, "h");
    QKV_NEED(h->weights, FN, "h->weights");
    QKV_TRY(qkv_plot_check_size(FN, "heads", h->heads, 4096));
    QKV_TRY(qkv_plot_check_size(FN, "rows", h->rows, (int64_t)1 << 24));
    QKV_TRY(qkv_plot_check_size(FN, "cols", h->cols, (int64_t)1 << 24));
    const int64_t sizes[3] = {h->heads, h->rows, h->cols};
    QKV_TRY(qkv_plot_check_product(FN, "heads x rows x cols", 3, sizes, (int64_t)1 << 34));
    if (!h->average_heads && h->heads > MAX_HEADS_GRID)
        return qkv_fail(QKV_ERR_ARG, "%s: %lld heads: a grid draws at most %d (set average_heads)", FN,
                        (long long)h->heads, MAX_HEADS_GRID);
    if (h->annotate < -1 || h->annotate > 1)
        return qkv_fail(QKV_ERR_ARG, "%s: annotate is %d, expected -1, 0 or 1", FN, h->annotate);
    if (!(isnan(h->lo) && isnan(h->hi)) && !(isfinite(h->lo) && isfinite(h->hi) && h->lo < h->hi))
        return qkv_fail(QKV_ERR_ARG,
                        "%s: colour range [%g, %g]: expected lo < hi, both finite (or both NaN: [0, 1])", FN,
                        h->lo, h->hi);
    if (h->max_cells != 0) QKV_TRY(qkv_plot_check_size(FN, "max_cells", h->max_cells, 512));
    if (h->max_cells == 1) return qkv_fail(QKV_ERR_ARG, "%s: max_cells is 1, expected 2 to 512", FN);
    if (h->width || h->height) {
        if (h->width < 64 || h->height < 64 || h->width > QKV_FIG_MAX_SIDE || h->height > QKV_FIG_MAX_SIDE)
            return qkv_fail(QKV_ERR_ARG,
                            "%s: size %lld x %lld: expected 64 to %d a side (or 0 x 0: automatic)", FN,
                            (long long)h->width, (long long)h->height, QKV_FIG_MAX_SIDE);
    }
    QKV_TRY(check_labels(h->row_labels, h->rows, "row_labels"));
    QKV_TRY(check_labels(h->col_labels, h->cols, "col_labels"));
    QKV_TRY(check_labels(h->head_titles, h->heads, "head_titles"));
    return QKV_OK;
}

/* Display cell (i, j) of map m: the mean over its block (and over the
 * heads when averaging); NaN if any weight in it is NaN. */
static float cell_mean(const qkv_heatmap *h, const hm_data *d, int m, int64_t i, int64_t j)
{
    int64_t r1 = (i + 1) * d->br < h->rows ? (i + 1) * d->br : h->rows;
    int64_t c1 = (j + 1) * d->bc < h->cols ? (j + 1) * d->bc : h->cols;
    int64_t h0 = h->average_heads ? 0 : m, h1 = h->average_heads ? h->heads : m + 1;
    double sum = 0;
    for (int64_t hh = h0; hh < h1; hh++)
        for (int64_t r = i * d->br; r < r1; r++) {
            const float *row = h->weights + (hh * h->rows + r) * h->cols;
            for (int64_t c = j * d->bc; c < c1; c++) sum += row[c];
        }
    return (float)(sum / ((double)(h1 - h0) * (double)(r1 - i * d->br) * (double)(c1 - j * d->bc)));
}

static qkv_status data_init(hm_data *d, const qkv_heatmap *h, qkv_fig *fig)
{
    int64_t max = h->max_cells ? h->max_cells : 128;
    memset(d, 0, sizeof *d);
    d->h = h, d->fig = fig, d->nan_note = -1;
    d->br = (h->rows + max - 1) / max, d->bc = (h->cols + max - 1) / max;
    d->R = (h->rows + d->br - 1) / d->br, d->C = (h->cols + d->bc - 1) / d->bc;
    d->nmaps = h->average_heads ? 1 : (int)h->heads;
    d->lo = isnan(h->lo) ? 0 : h->lo, d->hi = isnan(h->hi) ? 1 : h->hi;
    d->cells = malloc((size_t)(d->nmaps * d->R * d->C) * sizeof(float));
    if (!d->cells) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", FN);
    int64_t nan = 0;
    double vmin = INFINITY, vmax = -INFINITY;
    for (int m = 0; m < d->nmaps; m++)
        for (int64_t i = 0; i < d->R; i++)
            for (int64_t j = 0; j < d->C; j++) {
                float v = cell_mean(h, d, m, i, j);
                d->cells[(m * d->R + i) * d->C + j] = v;
                if (isnan(v))
                    nan++;
                else
                    vmin = fmin(vmin, v), vmax = fmax(vmax, v);
            }
    if (d->br > 1 || d->bc > 1)
        snprintf(d->notes[d->nnotes++], sizeof d->notes[0],
                 "downsampled from %lld x %lld to %lld x %lld: a cell is the mean of a block of %lld x %lld "
                 "weights, labelled by its first index",
                 (long long)h->rows, (long long)h->cols, (long long)d->R, (long long)d->C, (long long)d->br,
                 (long long)d->bc);
    if (vmin < d->lo || vmax > d->hi)
        snprintf(d->notes[d->nnotes++], sizeof d->notes[0],
                 "weights range over [%.3g, %.3g]: those outside the colour range [%.3g, %.3g] take its end "
                 "colours",
                 vmin, vmax, d->lo, d->hi);
    if (nan) {
        d->nan_note = d->nnotes;
        snprintf(d->notes[d->nnotes++], sizeof d->notes[0],
                 "no value (NaN weight): %lld cell%s, drawn white and hatched", (long long)nan,
                 nan > 1 ? "s" : "");
    }
    return QKV_OK;
}

/* Row (or column) i's label. */
static const char *label(const hm_data *d, int col, int64_t i, char *buf, size_t cap)
{
    const char *const *labels = col ? d->h->col_labels : d->h->row_labels;
    int64_t b = col ? d->bc : d->br;
    if (labels && b == 1) return labels[i];
    snprintf(buf, cap, "%lld", (long long)(i * b));
    return buf;
}

static const char *head_title(const hm_data *d, int m, char *buf, size_t cap)
{
    const qkv_heatmap *h = d->h;
    if (h->average_heads) {
        if (h->heads == 1) return h->head_titles ? h->head_titles[0] : NULL;
        snprintf(buf, cap, "mean of %lld heads", (long long)h->heads);
        return buf;
    }
    if (h->head_titles) return h->head_titles[m];
    if (h->heads == 1) return NULL;
    snprintf(buf, cap, "head %d", m);
    return buf;
}

/* ---- the layout for a cell side s ------------------------------------------ */

/* The smallest of 1, 2, 5, 10, 20, 50, ... that is >= k. */
static int64_t nice_every(double k)
{
    for (int64_t m = 1;; m *= 10) {
        if (k <= m) return m;
        if (k <= 2 * m) return 2 * m;
        if (k <= 5 * m) return 5 * m;
    }
}

static double widest_label(const hm_data *d, int col, int64_t every, double fs)
{
    double w = 0;
    char buf[32];
    for (int64_t i = 0; i < (col ? d->C : d->R); i += every)
        w = fmax(w, qkv_fig_text_width(d->fig, label(d, col, i, buf, sizeof buf), fs, 0, LABEL_CHARS));
    return w;
}

static void layout(const hm_data *d, double s, hm_layout *L)
{
    const qkv_heatmap *h = d->h;
    qkv_fig *f = d->fig;
    memset(L, 0, sizeof *L);
    L->s = s;
    L->fs = fmin(11, fmax(8, s * 0.8));
    double pitch = L->fs * 1.3; /* the least distance between two labels' lines */
    L->krow = nice_every(pitch / s);
    double col_w = widest_label(d, 1, 1, L->fs);
    L->rotated = col_w + 4 > s;
    L->kcol = L->rotated ? L->krow : nice_every((col_w + 6) / s);
    double row_lab_w = widest_label(d, 0, L->krow, L->fs) + 6;
    double col_lab_h = L->rotated ? widest_label(d, 1, L->kcol, L->fs) + 6 : L->fs * 1.3 + 4;
    /* the weights in the cells: "0.00" must fit in a cell with a margin */
    int want = h->annotate == 1 || (h->annotate == -1 && d->R <= 16 && d->C <= 16);
    L->ann_fs = 11;
    while (L->ann_fs > 5 && qkv_fig_text_width(f, "0.00", L->ann_fs, 0, 0) > s - 6) L->ann_fs *= 0.9;
    if (!want || L->ann_fs < (h->annotate == 1 ? 5 : 7)) L->ann_fs = 0;
    char buf[64];
    double head_w = 0;
    for (int m = 0; m < d->nmaps; m++) {
        const char *t = head_title(d, m, buf, sizeof buf);
        if (t)
            L->head_h = HEAD_FS * 1.7,
            head_w = fmax(head_w, qkv_fig_text_width(f, t, HEAD_FS, 1, LABEL_CHARS));
    }
    L->axis_h = ceil(AXIS_FS * 1.6);
    L->map_x = ceil(L->axis_h + row_lab_w);
    L->map_y = ceil(L->head_h + L->axis_h + col_lab_h);
    L->panel_w = L->map_x + fmax(d->C * s, ceil(head_w));
    L->panel_h = L->map_y + d->R * s;
    L->gc = (int)ceil(sqrt((double)d->nmaps));
    L->gr = (d->nmaps + L->gc - 1) / L->gc;
    L->title_h = h->title ? ceil(TITLE_FS * 2) : 0;
    L->grid_w = L->gc * L->panel_w + (L->gc - 1) * GAP;
    L->grid_h = L->gr * L->panel_h + (L->gr - 1) * GAP;
    L->bar_h = fmax(d->R * s, 80);
    L->bar_w = qkv_colour_bar_width(f, 14, L->bar_h, d->lo, d->hi);
    double content_w = L->grid_w + GAP + L->bar_w;
    if (h->title) content_w = fmax(content_w, qkv_fig_text_width(f, h->title, TITLE_FS, 1, 200));
    double body_h = fmax(L->grid_h, L->map_y + L->bar_h);
    L->notes_y = ceil(MARGIN + L->title_h + body_h + (d->nnotes ? 10 : 0));
    for (int i = 0; i < d->nnotes; i++)
        content_w = fmax(content_w, 16 + qkv_fig_text_width(f, d->notes[i], NOTE_FS, 0, 200));
    L->W = ceil(2 * MARGIN + content_w);
    L->H = ceil(L->notes_y + d->nnotes * NOTE_FS * 1.6 + MARGIN);
}

/* The largest cell side (whole points, 1 to 44) whose figure fits in
 * max_w x max_h; or, with target > 0, the side that makes a map about
 * target points across, shrunk until it fits. 0 if none fits. */
static double fit(const hm_data *d, double target, double max_w, double max_h, hm_layout *L)
{
    int64_t side = d->R > d->C ? d->R : d->C;
    double s = target > 0 ? fmin(44, fmax(1, floor(target / (double)side))) : 44;
    for (; s >= 1; s--) {
        layout(d, s, L);
        if (L->W <= max_w && L->H <= max_h) return s;
    }
    return 0;
}

/* ---- drawing ---------------------------------------------------------------- */

static void draw_panel(const hm_data *d, const hm_layout *L, int m, double px, double py)
{
    qkv_fig *f = d->fig;
    double s = L->s, mx = px + L->map_x, my = py + L->map_y, mw = d->C * s, mh = d->R * s;
    const qkv_fig_style head = {HEAD_FS, 0x000000, QKV_FIG_CENTRE, QKV_FIG_BASELINE, 0, 1, LABEL_CHARS},
                        col_axis = {AXIS_FS, 0x303030, QKV_FIG_CENTRE, QKV_FIG_BASELINE, 0, 0, LABEL_CHARS},
                        row_axis = {AXIS_FS, 0x303030, QKV_FIG_CENTRE, QKV_FIG_MIDDLE, 1, 0, LABEL_CHARS},
                        row_label = {L->fs, 0x000000, QKV_FIG_RIGHT, QKV_FIG_MIDDLE, 0, 0, LABEL_CHARS},
                        col_label = {L->fs,
                                     0x000000,
                                     L->rotated ? QKV_FIG_LEFT : QKV_FIG_CENTRE,
                                     L->rotated ? QKV_FIG_MIDDLE : QKV_FIG_BOTTOM,
                                     L->rotated,
                                     0,
                                     LABEL_CHARS};
    qkv_fig_style cell = {L->ann_fs, 0x000000, QKV_FIG_CENTRE, QKV_FIG_MIDDLE, 0, 0, 0};
    char buf[64];
    const char *t = head_title(d, m, buf, sizeof buf);
    if (t) qkv_fig_text(f, mx + mw / 2, py + L->head_h - 6, t, &head);
    qkv_fig_text(f, mx + mw / 2, py + L->head_h + L->axis_h - 5, d->h->col_axis ? d->h->col_axis : "key",
                 &col_axis);
    qkv_fig_text(f, px + L->axis_h / 2, my + mh / 2, d->h->row_axis ? d->h->row_axis : "query", &row_axis);
    for (int64_t j = 0; j < d->C; j += L->kcol)
        qkv_fig_text(f, mx + (j + 0.5) * s, my - 4, label(d, 1, j, buf, sizeof buf), &col_label);
    for (int64_t i = 0; i < d->R; i += L->krow)
        qkv_fig_text(f, mx - 5, my + (i + 0.5) * s, label(d, 0, i, buf, sizeof buf), &row_label);
    const float *cells = d->cells + (int64_t)m * d->R * d->C;
    for (int64_t i = 0; i < d->R; i++)
        for (int64_t j = 0; j < d->C; j++) {
            double v = cells[i * d->C + j], x = mx + j * s, y = my + i * s;
            if (isnan(v)) {
                qkv_fig_no_value(f, x, y, s, s);
                continue;
            }
            uint32_t c = qkv_plot_colour_in(v, d->lo, d->hi);
            qkv_fig_rect(f, x, y, s, s, c);
            if (L->ann_fs > 0) {
                snprintf(buf, sizeof buf, d->hi - d->lo <= 10 ? "%.2f" : "%.3g", v);
                cell.rgb = qkv_plot_ink_on(c);
                qkv_fig_text(f, x + s / 2, y + s / 2, buf, &cell);
            }
        }
    qkv_fig_frame(f, mx - 0.5, my - 0.5, mw + 1, mh + 1, 0x808080, 1.0);
}

static qkv_status draw(const hm_data *d, const hm_layout *L, double W, double H)
{
    qkv_fig *f = d->fig;
    const qkv_heatmap *h = d->h;
    QKV_TRY(qkv_fig_begin(f, W, H));
    double ox = floor((W - L->W) / 2), oy = floor((H - L->H) / 2); /* centred in a fixed size */
    double gx = ox + MARGIN, gy = oy + MARGIN + L->title_h;
    if (h->title)
        qkv_fig_text(f, gx + (L->W - 2 * MARGIN) / 2, oy + MARGIN + TITLE_FS, h->title, &qkv_fig_title_style);
    for (int m = 0; m < d->nmaps; m++)
        draw_panel(d, L, m, gx + (m % L->gc) * (L->panel_w + GAP), gy + (m / L->gc) * (L->panel_h + GAP));
    qkv_colour_bar(f, gx + L->grid_w + GAP, gy + L->map_y, 14, L->bar_h, d->lo, d->hi);
    for (int i = 0; i < d->nnotes; i++) {
        double y = oy + L->notes_y + i * NOTE_FS * 1.6;
        if (i == d->nan_note) qkv_fig_no_value(f, gx, y + 1, 11, 11);
        qkv_fig_text(f, gx + 16, y, d->notes[i], &qkv_fig_note_style);
    }
    return qkv_fig_end(f);
}

qkv_heatmap qkv_heatmap_default(void)
{
    qkv_heatmap h;
    memset(&h, 0, sizeof h);
    h.annotate = -1;
    h.lo = h.hi = NAN;
    return h;
}

qkv_status qkv_plot_heatmap(const char *path, const qkv_heatmap *h)
{
    qkv_fig f;
    hm_data d = {0};
    hm_layout L;
    qkv_status s = qkv_fig_init(&f, FN, path);
    if (!s) s = check(h);
    if (!s) s = data_init(&d, h, &f);
    if (!s) {
        int fixed = h->width > 0;
        double gc = ceil(sqrt((double)d.nmaps)), target = gc == 1 ? 440 : gc == 2 ? 340 : 260;
        double W = fixed ? (double)h->width : QKV_FIG_MAX_SIDE,
               H = fixed ? (double)h->height : QKV_FIG_MAX_SIDE;
        if (!fit(&d, fixed ? 0 : target, W, H, &L))
            s = qkv_fail(QKV_ERR_ARG,
                         "%s: %lld map%s of %lld x %lld cells do not fit in %.0f x %.0f points "
                         "(lower max_cells, average the heads, or give a larger size)",
                         FN, (long long)d.nmaps, d.nmaps > 1 ? "s" : "", (long long)d.R, (long long)d.C, W,
                         H);
        else
            s = draw(&d, &L, fixed ? W : L.W, fixed ? H : L.H);
    }
    free(d.cells);
    qkv_fig_free(&f);
    return s;
}
