/* qkv/plot.h: figures: attention heat maps, line plots and the interactive
 * attention explorer. They live in their own library, libqkv-plot (drawn
 * with Cairo), so that libqkv itself pulls in no graphics stack: include
 * this header and link -lqkv-plot before -lqkv (pkg-config: qkv-plot).
 * Not included by qkv.h.
 *
 * Every call writes one file, atomically (a temporary file renamed over
 * path), and returns a qkv_status with qkv_last_error() saying what was
 * wrong. Figures are PNG, SVG or PDF, chosen by path's extension (.png,
 * .svg, .pdf, any case); the same drawing code makes all three. Labels are
 * UTF-8 (DejaVu Sans; accents, Greek, Cyrillic drawn, glyphs the font lacks
 * drawn as boxes); SVG output holds every label as text. */
#include "qkv.h" /* first: qkv.h includes every area header in order */
#ifndef QKV_PLOT_H
#define QKV_PLOT_H
#ifdef __cplusplus
extern "C" {
#endif

/* ---- colours ------------------------------------------------------------ */

/* The colour map of every heat map: v in [0,1] -> 0xRRGGBB (viridis: dark
 * purple at 0, yellow at 1; v clamped). NaN maps to QKV_PLOT_NAN_COLOUR. */
QKV_API uint32_t qkv_plot_colour(double v);
#define QKV_PLOT_NAN_COLOUR 0xffffffu /* "no value": drawn white and hatched grey */

/* ---- attention heat maps ------------------------------------------------ */

/* heads maps of (rows, cols) weights, the notes' alignment tables: query
 * tokens down the left side (row i is query i), key tokens along the top
 * (rotated 90 degrees when any is longer than the cell), a colour bar with
 * its values, a title, and the weight printed in each cell when the map is
 * small (rows and cols <= 16, unless annotate says otherwise). Several
 * heads are drawn as a labelled grid ("head 0", ... unless head_titles),
 * or one map of their mean when average_heads. A map larger than max_cells
 * per side (default 128) is downsampled by averaging blocks of cells, and
 * the figure says so ("downsampled from 4096x4096, blocks of 32x32"): never
 * cropped. NaN weights are drawn as "no value" and noted under the map. */
typedef struct {
    const float *weights;             /* (heads, rows, cols) */
    int64_t heads, rows, cols;
    const char *const *row_labels;    /* (rows) query tokens, or NULL: "0", "1", ... */
    const char *const *col_labels;    /* (cols) key tokens, or NULL */
    const char *const *head_titles;   /* (heads) or NULL */
    const char *title;                /* or NULL */
    const char *row_axis, *col_axis;  /* axis names, or NULL: "query", "key" */
    int average_heads;                /* 1: one map, the heads' mean */
    int annotate;                     /* -1 (default): when small; 0 never; 1 always */
    float lo, hi;                     /* colour range; NaN (default): [0, 1] */
    int64_t max_cells;                /* downsample above; 0: 128; at most 512 */
    int64_t width, height;            /* the figure's size in pixels (points for SVG/PDF),
                                         64 to 16384; 0, 0: from the map's size */
} qkv_heatmap;

/* The defaults: everything zero/NULL but annotate -1, lo = hi = NaN. */
QKV_API qkv_heatmap qkv_heatmap_default(void);
QKV_API qkv_status qkv_plot_heatmap(const char *path, const qkv_heatmap *h);

/* An attention map laid over an image (a vision transformer's class token
 * over its patches): the image (h,w) grey or (h,w,3) RGB in [0,1], and a
 * (grid_h, grid_w) map of weights stretched over it, drawn with alpha. */
typedef struct {
    const float *image;      /* (h, w, channels) row-major, values in [0,1] */
    int64_t h, w, channels;  /* channels 1 or 3 */
    const float *weights;    /* (grid_h, grid_w) */
    int64_t grid_h, grid_w;
    const char *title;       /* or NULL */
    float alpha;             /* the map's opacity; 0: 0.6 */
} qkv_overlay;
QKV_API qkv_status qkv_plot_overlay(const char *path, const qkv_overlay *o);
/* n overlays as the panels of one figure (the heads of a layer, a
 * rollout beside them), columns across (0: up to 4), each about 200 points
 * on its image's longer side with its own title and colour bar; title
 * above them all, or NULL. */
QKV_API qkv_status qkv_plot_overlay_grid(const char *path, const qkv_overlay *panels, int n,
                                         int columns, const char *title);

/* ---- line plots --------------------------------------------------------- */

typedef struct {
    const char *label;  /* the legend's entry, or NULL: not in the legend */
    const double *x;    /* (n), or NULL: 0, 1, ..., n-1 */
    const double *y;    /* (n); NaN points break the line */
    int64_t n;
    uint32_t colour;    /* 0xRRGGBB; 0: the palette's next colour */
    int dashed;
} qkv_series;

/* Axes with ticks and labels, a legend (when any series has a label), a
 * title. log_y draws y on a log scale (points <= 0 left out, said in a note). */
typedef struct {
    const qkv_series *series;
    int n_series;
    const char *title, *x_label, *y_label; /* each may be NULL */
    int log_y;
    int64_t width, height;                 /* pixels (points for SVG/PDF); 0: 800 x 500 */
} qkv_line_plot;
QKV_API qkv_status qkv_plot_lines(const char *path, const qkv_line_plot *p);
/* n line plots as the panels of one figure, columns across (0: up to 2),
 * in rows, each drawn as qkv_plot_lines draws it in a cell as large as the
 * largest panel's width x height (0 x 0: 480 x 300); title above them all,
 * or NULL. */
QKV_API qkv_status qkv_plot_lines_grid(const char *path, const qkv_line_plot *panels, int n,
                                       int columns, const char *title);

/* ---- the interactive attention explorer (HTML) -------------------------- */

/* One self-contained HTML page (data inlined as JSON, plain JavaScript and
 * CSS, nothing fetched): for a sentence, every layer and head as a matrix
 * view (heat maps; hovering a cell shows both tokens and the weight) and a
 * head view (the tokens in two columns joined by lines whose opacity is
 * the weight; hovering a token keeps only its lines), with layer and head
 * selectors and "average of heads". Tokens are shown as text, never as
 * markup. */
typedef struct {
    const float *weights;             /* (layers, heads, queries, keys) */
    int64_t layers, heads, queries, keys;
    const char *const *query_tokens;  /* (queries) */
    const char *const *key_tokens;    /* (keys); self-attention: the same as query_tokens */
    const char *title;                /* or NULL */
} qkv_explorer;
QKV_API qkv_status qkv_explorer_write(const char *path, const qkv_explorer *e);

#ifdef __cplusplus
}
#endif
#endif
