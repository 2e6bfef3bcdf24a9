/* test_plot.c: figures (libqkv-plot): the colour map against matplotlib's
 * viridis table; heat maps read back as pixels (the image's size, where
 * the cells are, what colour they have); SVGs that hold every label as
 * escaped text (any UTF-8, hostile markup) and parse as XML; PDFs; NaN
 * weights drawn as "no value" with a note; downsampling noted; line plots
 * with a log scale, NaN, infinite and huge values; overlays; unwritable
 * paths and bad arguments. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <dirent.h>
#include <unistd.h>
#include <cairo/cairo.h> /* the tests are built without Cairo's -I flags */
#include "harness.h"
#include "qkv/plot.h"

static char dir[64];

/* matplotlib's viridis (lib/matplotlib/_cm_listed.py), entries 0, 4, 100,
 * 128, 200 and 255 of its 256, as 0xRRGGBB (round(255 x)); a weight v picks
 * entry floor(256 v), 1 the last. */
#define VIRIDIS_0 0x440154u /* (0.267004, 0.004874, 0.329415) */
#define VIRIDIS_4 0x46075au /* (0.272594, 0.025563, 0.353093) */
#define VIRIDIS_100 0x2a768eu /* (0.166617, 0.463708, 0.558119) */
#define VIRIDIS_128 0x21918cu /* (0.127568, 0.566949, 0.550556): v = 0.5 */
#define VIRIDIS_200 0x70cf57u /* (0.440137, 0.811138, 0.340967) */
#define VIRIDIS_255 0xfde725u /* (0.993248, 0.906157, 0.143936): v = 1 */

static const char *file(const char *name)
{
    static char paths[8][160];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, sizeof paths[0], "%s/%s", dir, name);
    return p;
}

static char *slurp(const char *path, long *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    *len = 0;
    if (!f) return calloc(1, 1);
    fseek(f, 0, SEEK_END);
    *len = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = calloc(1, (size_t)*len + 1);
    if (buf && fread(buf, 1, (size_t)*len, f) != (size_t)*len) buf[0] = '\0';
    fclose(f);
    return buf;
}

/* needle in buf's len bytes (a PDF holds NUL bytes in its streams). */
static const char *find(const char *buf, long len, const char *needle)
{
    size_t n = strlen(needle);
    for (long i = 0; i + (long)n <= len; i++)
        if (!memcmp(buf + i, needle, n)) return buf + i;
    return NULL;
}

static int near(uint32_t a, uint32_t b, int tol)
{
    for (int s = 0; s < 24; s += 8)
        if (abs((int)(a >> s & 255) - (int)(b >> s & 255)) > tol) return 0;
    return 1;
}

static void test_colour(void)
{
    CHECK(qkv_plot_colour(0) == VIRIDIS_0, "colour(0) = %06x", qkv_plot_colour(0));
    CHECK(qkv_plot_colour(0.5) == VIRIDIS_128, "colour(0.5) = %06x", qkv_plot_colour(0.5));
    CHECK(qkv_plot_colour(1) == VIRIDIS_255, "colour(1) = %06x", qkv_plot_colour(1));
    CHECK(qkv_plot_colour(-3) == VIRIDIS_0 && qkv_plot_colour(7) == VIRIDIS_255, "clamping");
    CHECK(qkv_plot_colour(NAN) == QKV_PLOT_NAN_COLOUR, "NaN");
    /* entries between the ones colour.c keeps: within one unit */
    CHECK(near(qkv_plot_colour(4.5 / 256), VIRIDIS_4, 1), "colour(entry 4) = %06x",
          qkv_plot_colour(4.5 / 256));
    CHECK(near(qkv_plot_colour(100.5 / 256), VIRIDIS_100, 1), "entry 100: %06x",
          qkv_plot_colour(100.5 / 256));
    CHECK(near(qkv_plot_colour(200.5 / 256), VIRIDIS_200, 1), "entry 200: %06x",
          qkv_plot_colour(200.5 / 256));
}

/* ---- heat maps read back ------------------------------------------------------- */

typedef struct {
    cairo_surface_t *s;
    int w, h, stride;
    unsigned char *px;
} image;

static image load(const char *path)
{
    image im = {cairo_image_surface_create_from_png(path), 0, 0, 0, NULL};
    if (cairo_surface_status(im.s) == CAIRO_STATUS_SUCCESS) {
        im.w = cairo_image_surface_get_width(im.s), im.h = cairo_image_surface_get_height(im.s);
        im.stride = cairo_image_surface_get_stride(im.s), im.px = cairo_image_surface_get_data(im.s);
    }
    return im;
}

static uint32_t pixel(const image *im, int x, int y)
{
    if (!im->px || x < 0 || y < 0 || x >= im->w || y >= im->h) return 0xff000000u;
    return *(const uint32_t *)(const void *)(im->px + (size_t)y * im->stride + 4 * (size_t)x) & 0xffffff;
}

/* The bounding box of the pixels that are want in a and not in b. */
static void only_in(const image *a, const image *b, uint32_t want, int box[4])
{
    box[0] = box[1] = 1 << 30, box[2] = box[3] = -1;
    for (int y = 0; y < a->h; y++)
        for (int x = 0; x < a->w; x++)
            if (pixel(a, x, y) == want && pixel(b, x, y) != want) {
                if (x < box[0]) box[0] = x;
                if (y < box[1]) box[1] = y;
                if (x > box[2]) box[2] = x;
                if (y > box[3]) box[3] = y;
            }
}

static void test_heatmap_pixels(void)
{
    /* three renders of a 3 x 4 map, each with a NaN at (2,0) (so all have
     * the same note and layout): A has a 1 at (1,2), B a 1 at (0,0) */
    float wa[12] = {0}, wb[12] = {0},
          wc[12] = {0, 0.5f, 1, 0.1f, 0.2f, 0.3f, 0.4f, 0.6f, NAN, 0.7f, 0.8f, 0.25f};
    wa[1 * 4 + 2] = 1, wb[0] = 1, wa[8] = wb[8] = NAN;
    const char *rows[3] = {"q0", "q1", "q2"}, *cols[4] = {"k0", "k1", "k2", "k3"};
    qkv_heatmap h = qkv_heatmap_default();
    h.heads = 1, h.rows = 3, h.cols = 4, h.row_labels = rows, h.col_labels = cols;
    h.annotate = 0, h.title = "pixels", h.width = 400, h.height = 300;
    h.weights = wa;
    CHECK_OK(qkv_plot_heatmap(file("a.png"), &h));
    h.weights = wb;
    CHECK_OK(qkv_plot_heatmap(file("b.png"), &h));
    h.weights = wc;
    CHECK_OK(qkv_plot_heatmap(file("c.png"), &h));
    image a = load(file("a.png")), b = load(file("b.png")), c = load(file("c.png"));
    CHECK(a.w == 400 && a.h == 300 && c.w == 400 && c.h == 300, "size %dx%d, %dx%d, want 400x300", a.w, a.h,
          c.w, c.h);
    CHECK(pixel(&a, 0, 0) == 0xffffff && pixel(&a, 399, 299) == 0xffffff, "background not white");
    int ra[4], rb[4];
    only_in(&a, &b, VIRIDIS_255, ra);
    only_in(&b, &a, VIRIDIS_255, rb);
    int s = rb[2] - rb[0] + 1;
    CHECK(s >= 8 && rb[3] - rb[1] + 1 == s && ra[2] - ra[0] + 1 == s && ra[3] - ra[1] + 1 == s,
          "the yellow cells are not equal squares: A (%d,%d)-(%d,%d), B (%d,%d)-(%d,%d)", ra[0], ra[1], ra[2],
          ra[3], rb[0], rb[1], rb[2], rb[3]);
    /* row i down, column j across: A's (1,2) is one cell below, two right of B's (0,0) */
    CHECK(ra[0] - rb[0] == 2 * s && ra[1] - rb[1] == s,
          "cell (1,2) at (%d,%d), cell (0,0) at (%d,%d), side %d", ra[0], ra[1], rb[0], rb[1], s);
    /* the centre of cell (i, j) of C has its weight's colour */
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) {
            float v = wc[i * 4 + j];
            uint32_t got = pixel(&c, rb[0] + j * s + s / 2, rb[1] + i * s + s / 2);
            if (isnan(v)) continue;
            CHECK(got == qkv_plot_colour(v), "cell (%d,%d) weight %g: %06x, want %06x", i, j, v, got,
                  qkv_plot_colour(v));
        }
    uint32_t c00 = pixel(&c, rb[0] + s / 2, rb[1] + s / 2), c01 = pixel(&c, rb[0] + s + s / 2, rb[1] + s / 2);
    uint32_t c02 = pixel(&c, rb[0] + 2 * s + s / 2, rb[1] + s / 2);
    CHECK(c00 == VIRIDIS_0 && c01 == VIRIDIS_128 && c02 == VIRIDIS_255,
          "weights 0, 0.5, 1 drawn %06x %06x %06x", c00, c01, c02);
    /* the NaN cell: no viridis colour, white with grey hatching */
    int white = 0, grey = 0, other = 0;
    for (int y = rb[1] + 2 * s + 2; y < rb[1] + 3 * s - 2; y++)
        for (int x = rb[0] + 2; x < rb[0] + s - 2; x++) {
            uint32_t p = pixel(&c, x, y);
            if (p == 0xffffff)
                white++;
            else if ((p >> 16 & 255) == (p >> 8 & 255) && (p & 255) == (p >> 8 & 255))
                grey++;
            else
                other++;
        }
    CHECK(white > 0 && grey > 0 && other == 0, "NaN cell: %d white, %d grey, %d coloured pixels", white, grey,
          other);
    cairo_surface_destroy(a.s), cairo_surface_destroy(b.s), cairo_surface_destroy(c.s);
}

/* The same figure in the three formats has one size: the PNG's pixels,
 * the SVG's width and height, the PDF's MediaBox. */
static void test_formats(void)
{
    float w[2 * 6 * 6];
    for (int i = 0; i < 72; i++) w[i] = (float)(i % 7) / 6;
    const char *words[6] = {"the", "cat", "sat", "on", "the", "mat"};
    qkv_heatmap h = qkv_heatmap_default();
    h.weights = w, h.heads = 2, h.rows = 6, h.cols = 6, h.row_labels = words, h.col_labels = words;
    CHECK_OK(qkv_plot_heatmap(file("f.png"), &h));
    CHECK_OK(qkv_plot_heatmap(file("f.SVG"), &h));
    CHECK_OK(qkv_plot_heatmap(file("f.pdf"), &h));
    image im = load(file("f.png"));
    long n, pn;
    char *svg = slurp(file("f.SVG"), &n), *pdf = slurp(file("f.pdf"), &pn);
    int sw = 0, sh = 0, pw = 0, ph = 0;
    const char *p = strstr(svg, "<svg");
    if (p) p = strstr(p, " width=\"");
    if (p) sscanf(p, " width=\"%d\" height=\"%d\"", &sw, &sh);
    p = find(pdf, pn, "/MediaBox [ 0 0 ");
    if (p) sscanf(p, "/MediaBox [ 0 0 %d %d", &pw, &ph);
    CHECK(im.w > 100 && im.h > 100 && sw == im.w && sh == im.h && pw == im.w && ph == im.h,
          "sizes: png %dx%d, svg %dx%d, pdf %dx%d", im.w, im.h, sw, sh, pw, ph);
    CHECK(!strncmp(pdf, "%PDF-", 5) && pn > 1000 && find(pdf, pn, "%%EOF"), "not a whole PDF (%ld bytes)",
          pn);
    CHECK(!strncmp(svg, "<?xml", 5) && strstr(svg, "<svg"), "not an SVG");
    CHECK(strstr(svg, ">head 0</text>") && strstr(svg, ">head 1</text>") && strstr(svg, ">mat</text>"),
          "SVG lacks the head titles or labels");
    CHECK(strstr(svg, ">0.50</text>") || strstr(svg, ">0.33</text>"), "small maps are annotated");
    free(svg), free(pdf);
    cairo_surface_destroy(im.s);
}

/* XML-escapes s into out: what the SVG must hold. */
static void xml_escape(char *out, size_t cap, const char *s)
{
    size_t n = 0;
    for (; *s && n + 8 < cap; s++) {
        const char *e = *s == '<'    ? "&lt;"
                        : *s == '>'  ? "&gt;"
                        : *s == '&'  ? "&amp;"
                        : *s == '"'  ? "&quot;"
                        : *s == '\'' ? "&#39;"
                                     : NULL;
        if (e)
            n += (size_t)snprintf(out + n, cap - n, "%s", e);
        else
            out[n++] = *s;
    }
    out[n] = '\0';
}

static void test_svg_labels(void)
{
    const char *labels[7] = {
        "café",    "中文", "😀 emoji", "</script><script>alert(1)</script>", "\"><img onerror=alert(1)>",
        "a & b's", " the"};
    float w[7 * 7];
    for (int i = 0; i < 49; i++) w[i] = 1.0f / 7;
    qkv_heatmap h = qkv_heatmap_default();
    h.weights = w, h.heads = 1, h.rows = 7, h.cols = 7, h.row_labels = labels, h.col_labels = labels;
    h.title = "<b>title</b> & ünïcödé";
    h.head_titles = (const char *const[]){"\xff\xfe bad \x01"};
    const char *path = file("labels.svg");
    CHECK_OK(qkv_plot_heatmap(path, &h));
    long n;
    char *svg = slurp(path, &n);
    for (int i = 0; i < 7; i++) {
        char want[256], esc[200];
        xml_escape(esc, sizeof esc, labels[i]);
        snprintf(want, sizeof want, ">%s</text>", esc);
        int count = 0;
        for (const char *p = svg; (p = strstr(p, want)); p++) count++;
        CHECK(count == 2, "label '%s' appears %d times as text (want 2: row and column)", labels[i], count);
    }
    CHECK(!strstr(svg, "<script") && !strstr(svg, "<img") && !strstr(svg, "<b>"), "raw markup in the SVG");
    CHECK(strstr(svg, ">&lt;b&gt;title&lt;/b&gt; &amp; ünïcödé</text>"), "title not escaped text");
    CHECK(strstr(svg, ">\xef\xbf\xbd\xef\xbf\xbd bad \xef\xbf\xbd</text>"),
          "invalid UTF-8 and controls not replaced");
    free(svg);
    /* Python's XML parser reads it and finds every label in a <text> */
    FILE *f = fopen(file("labels.txt"), "wb");
    for (int i = 0; f && i < 7; i++) fprintf(f, "%s\n", labels[i]);
    if (f) fclose(f);
    char cmd[1024];
    snprintf(
        cmd, sizeof cmd,
        "/usr/bin/python3 -c \"import sys, xml.dom.minidom as m\n"
        "d = m.parse(sys.argv[1])\n"
        "t = [''.join(c.data for c in e.childNodes) for e in d.getElementsByTagName('text')]\n"
        "want = open(sys.argv[2], encoding='utf-8').read().split('\\n')[:-1]\n"
        "assert len(want) == 7 and all(t.count(l) == 2 for l in want), [l for l in want if t.count(l) != 2]\n"
        "assert not d.getElementsByTagName('script') and not d.getElementsByTagName('img')\n"
        "\" %s %s",
        path, file("labels.txt"));
    CHECK(system(cmd) == 0,
          "the SVG does not parse as XML with every label in a <text> (python3 at /usr/bin/python3?)");
}

static void test_notes(void)
{
    /* NaN: no value, and a note */
    float w[9] = {0.1f, 0.2f, 0.3f, 0.4f, NAN, 0.6f, 0.7f, 0.8f, 0.9f};
    qkv_heatmap h = qkv_heatmap_default();
    h.weights = w, h.heads = 1, h.rows = 3, h.cols = 3;
    CHECK_OK(qkv_plot_heatmap(file("nan.svg"), &h));
    long n;
    char *svg = slurp(file("nan.svg"), &n);
    CHECK(strstr(svg, ">no value (NaN weight): 1 cell, drawn white and hatched</text>"), "no NaN note");
    CHECK(!strstr(svg, ">nan</text>") && !strstr(svg, ">0.50</text>"), "NaN drawn as a number");
    free(svg);
    /* 1000 x 1000: downsampled, said on the figure; 3 heads averaged */
    int64_t L = 1000;
    float *big = malloc((size_t)(3 * L * L) * sizeof(float));
    for (int64_t i = 0; i < 3 * L * L; i++) big[i] = (float)((i * 7919) % 1000) / 1000.0f;
    h = qkv_heatmap_default();
    h.weights = big, h.heads = 3, h.rows = L, h.cols = L, h.average_heads = 1;
    CHECK_OK(qkv_plot_heatmap(file("big.svg"), &h));
    CHECK_OK(qkv_plot_heatmap(file("big.png"), &h));
    svg = slurp(file("big.svg"), &n);
    CHECK(
        strstr(svg,
               ">downsampled from 1000 x 1000 to 125 x 125: a cell is the mean of a block of 8 x 8 weights"),
        "no downsampling note");
    CHECK(strstr(svg, ">mean of 3 heads</text>"), "no 'mean of 3 heads'");
    /* the labels are blocks' first indices: multiples of 8 */
    int numbers = 0, multiples = 0;
    for (const char *q = svg; (q = strstr(q, "\">")); q++) {
        char *end;
        long v = strtol(q + 2, &end, 10);
        if (end == q + 2 || strncmp(end, "</text>", 7)) continue;
        numbers++, multiples += v % 8 == 0;
    }
    CHECK(numbers >= 10 && multiples == numbers, "%d of %d labels are multiples of 8", multiples, numbers);
    image im = load(file("big.png"));
    CHECK(im.w > 300 && im.w < 2000 && im.h > 300 && im.h < 2000, "1000x1000 figure is %dx%d", im.w, im.h);
    cairo_surface_destroy(im.s);
    free(svg);
    /* weights outside the colour range: said; long labels: an ellipsis */
    float out[2] = {-0.5f, 2};
    const char *longl[1] = {"a label far longer than any cell could ever hold in a heat map"},
               *two[2] = {"x", "y"};
    h = qkv_heatmap_default();
    h.weights = out, h.heads = 1, h.rows = 1, h.cols = 2, h.row_labels = longl, h.col_labels = two;
    CHECK_OK(qkv_plot_heatmap(file("range.svg"), &h));
    svg = slurp(file("range.svg"), &n);
    CHECK(strstr(svg, "outside the colour range [0, 1]"), "no out-of-range note");
    CHECK(strstr(svg, ">a label far longer than any cell could …</text>"),
          "long label not cut with an ellipsis");
    free(svg);
    free(big);
}

/* Every file in dir (but the kept ones) was removed: no temporary left. */
static int leftovers(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strchr(e->d_name, '.') && strrchr(e->d_name, '.')[1] && strlen(strrchr(e->d_name, '.')) == 7) n++;
    if (d) closedir(d);
    return n; /* temporaries are NAME.XXXXXX */
}

static void test_errors(void)
{
    float w[4] = {0.25f, 0.25f, 0.25f, 0.25f};
    qkv_heatmap h = qkv_heatmap_default();
    h.weights = w, h.heads = 1, h.rows = 2, h.cols = 2;
    CHECK_ERR(qkv_plot_heatmap(file("x.jpg"), &h), QKV_ERR_ARG, "unknown extension '.jpg'");
    CHECK_ERR(qkv_plot_heatmap(file("noext"), &h), QKV_ERR_ARG, "has no extension");
    CHECK_ERR(qkv_plot_heatmap(NULL, &h), QKV_ERR_ARG, "path is NULL");
    CHECK_ERR(qkv_plot_heatmap("", &h), QKV_ERR_ARG, "path is empty");
    CHECK_ERR(qkv_plot_heatmap("/proc/x/y.png", &h), QKV_ERR_IO, "/proc/x/y.png");
    const char *missing = file("no/such/folder/f.svg");
    CHECK_ERR(qkv_plot_heatmap(missing, &h), QKV_ERR_IO, missing);
    CHECK(strstr(qkv_last_error(), "No such file"), "no reason: %s", qkv_last_error());
    CHECK_ERR(qkv_plot_heatmap(file("e.png"), NULL), QKV_ERR_ARG, "h is NULL");
    qkv_heatmap b = h;
    b.weights = NULL;
    CHECK_ERR(qkv_plot_heatmap(file("e.png"), &b), QKV_ERR_ARG, "h->weights is NULL");
    b = h, b.rows = 0;
    CHECK_ERR(qkv_plot_heatmap(file("e.png"), &b), QKV_ERR_ARG, "rows is 0");
    b = h, b.cols = -3;
    CHECK_ERR(qkv_plot_heatmap(file("e.png"), &b), QKV_ERR_ARG, "cols is -3");
    b = h, b.heads = 4096, b.rows = (int64_t)1 << 24, b.cols = (int64_t)1 << 24, b.average_heads = 1;
    CHECK_ERR(qkv_plot_heatmap(file("e.png"), &b), QKV_ERR_ARG, "more than");
    b = h, b.rows = INT64_MAX;
    CHECK_ERR(qkv_plot_heatmap(file("e.png"), &b), QKV_ERR_ARG, "rows is 9223372036854775807");
    b = h, b.heads = 65;
    CHECK_ERR(qkv_plot_heatmap(file("e.png"), &b), QKV_ERR_ARG, "at most 64");
    b = h, b.lo = 1, b.hi = 0;
    CHECK_ERR(qkv_plot_heatmap(file("e.png"), &b), QKV_ERR_ARG, "colour range [1, 0]");
    b = h, b.lo = 0, b.hi = NAN;
    CHECK_ERR(qkv_plot_heatmap(file("e.png"), &b), QKV_ERR_ARG, "colour range");
    b = h, b.lo = -INFINITY, b.hi = 1;
    CHECK_ERR(qkv_plot_heatmap(file("e.png"), &b), QKV_ERR_ARG, "colour range");
    b = h, b.annotate = 2;
    CHECK_ERR(qkv_plot_heatmap(file("e.png"), &b), QKV_ERR_ARG, "annotate is 2");
    b = h, b.max_cells = 1;
    CHECK_ERR(qkv_plot_heatmap(file("e.png"), &b), QKV_ERR_ARG, "max_cells");
    b = h, b.max_cells = 513;
    CHECK_ERR(qkv_plot_heatmap(file("e.png"), &b), QKV_ERR_ARG, "max_cells is 513");
    b = h, b.width = 10, b.height = 300;
    CHECK_ERR(qkv_plot_heatmap(file("e.png"), &b), QKV_ERR_ARG, "size 10 x 300");
    b = h, b.width = 1000000, b.height = 300;
    CHECK_ERR(qkv_plot_heatmap(file("e.png"), &b), QKV_ERR_ARG, "size 1000000 x 300");
    b = h, b.row_labels = (const char *const[]){"a", NULL};
    CHECK_ERR(qkv_plot_heatmap(file("e.png"), &b), QKV_ERR_ARG, "row_labels[1] is NULL");
    float *big = calloc(512 * 512, sizeof(float));
    b = h, b.weights = big, b.rows = 512, b.cols = 512, b.max_cells = 512, b.width = 64, b.height = 64;
    CHECK_ERR(qkv_plot_heatmap(file("e.png"), &b), QKV_ERR_ARG, "do not fit in 64 x 64");
    free(big);
    CHECK(access(file("e.png"), F_OK) != 0, "a failed call left e.png");
    /* a failure leaves what was there; a success replaces it whole */
    FILE *f = fopen(file("keep.png"), "wb");
    if (f) fputs("old", f), fclose(f);
    b = h, b.lo = 2, b.hi = 1;
    CHECK_ERR(qkv_plot_heatmap(file("keep.png"), &b), QKV_ERR_ARG, "colour range");
    long n;
    char *old = slurp(file("keep.png"), &n);
    CHECK(!strcmp(old, "old"), "a failed call changed the file");
    free(old);
    CHECK_OK(qkv_plot_heatmap(file("keep.png"), &h));
    old = slurp(file("keep.png"), &n);
    CHECK(n > 100 && !memcmp(old, "\x89PNG", 4), "keep.png not replaced by a PNG");
    free(old);
    CHECK(leftovers() == 0, "%d temporary files left in %s", leftovers(), dir);
}

static void test_lines(void)
{
    enum { N = 200 };
    double x[N], y1[N], y2[N], y3[N];
    for (int i = 0; i < N; i++) {
        x[i] = i * 0.05;
        y1[i] = 3 * exp(-x[i] / 3) + 0.05;
        y2[i] = i % 37 == 5 ? NAN : 2 * exp(-x[i] / 2) + 0.02;
        y3[i] = i == 20 ? -1 : i == 30 ? INFINITY : 1.5 * exp(-x[i]);
    }
    qkv_series s[3] = {
        {"conv", x, y1, N, 0, 0}, {"attention <&>", x, y2, N, 0x2ca02c, 1}, {NULL, NULL, y3, N, 0, 0}};
    qkv_line_plot p = {s, 3, "loss", "epoch", "MSE", 1, 0, 0};
    CHECK_OK(qkv_plot_lines(file("lines.svg"), &p));
    CHECK_OK(qkv_plot_lines(file("lines.png"), &p));
    CHECK_OK(qkv_plot_lines(file("lines.pdf"), &p));
    long n;
    char *svg = slurp(file("lines.svg"), &n);
    CHECK(strstr(svg, ">1 point &lt;= 0 left out (log scale)</text>") &&
              strstr(svg, ">1 infinite point left out</text>"),
          "notes missing");
    CHECK(strstr(svg, ">conv</text>") && strstr(svg, ">attention &lt;&amp;&gt;</text>") &&
              strstr(svg, ">epoch</text>") && strstr(svg, ">MSE</text>") && strstr(svg, ">loss</text>"),
          "legend, axis names or title missing");
    /* data lines (1.6 wide): y1 one; six NaNs break y2 into 7; y3 broken twice: 3 */
    int polylines = 0;
    for (const char *q = svg; (q = strstr(q, "stroke-width=\"1.60\"")); q++) polylines++;
    CHECK(polylines == 1 + 7 + 3, "%d data polylines, want 11", polylines);
    CHECK(strstr(svg, ">1</text>") || strstr(svg, ">0.1</text>") || strstr(svg, ">2</text>"),
          "no log tick labels");
    free(svg);
    image im = load(file("lines.png"));
    CHECK(im.w == 800 && im.h == 500, "line plot %dx%d, want 800x500", im.w, im.h);
    cairo_surface_destroy(im.s);
    /* huge, tiny, constant and all-NaN series: drawn, quickly, no hang (a
     * canvas once looped on +-1e300) */
    double hx[4] = {-1e300, 0, 1e300, 1.7e308}, hy[4] = {1e300, -1e300, 5e-324, -1.7e308}, c[3] = {4, 4, 4};
    double nans[2] = {NAN, NAN};
    qkv_series hs[3] = {
        {"huge", hx, hy, 4, 0, 0}, {"constant", NULL, c, 3, 0, 0}, {"none", NULL, nans, 2, 0, 0}};
    qkv_line_plot hp = {hs, 3, NULL, NULL, NULL, 0, 300, 200};
    CHECK_OK(qkv_plot_lines(file("huge.png"), &hp));
    hp.log_y = 1;
    CHECK_OK(qkv_plot_lines(file("huge_log.svg"), &hp));
    qkv_line_plot cp = {&hs[1], 1, "constant", NULL, NULL, 1, 0, 0};
    CHECK_OK(qkv_plot_lines(file("constant.png"), &cp));
    qkv_line_plot np = {&hs[2], 1, NULL, NULL, NULL, 0, 0, 0};
    CHECK_OK(qkv_plot_lines(file("nothing.svg"), &np));
    svg = slurp(file("nothing.svg"), &n);
    CHECK(strstr(svg, ">no point to draw</text>"), "an all-NaN plot says so");
    free(svg);
    /* a long series: polylines of at most 2048 points, each starting where
     * the last ended: 5000 points are 3 of them, joined */
    double *ly = malloc(5000 * sizeof(double));
    for (int i = 0; i < 5000; i++) ly[i] = sin(i * 0.01);
    qkv_series ls = {"sine", NULL, ly, 5000, 0, 0};
    qkv_line_plot lp = {&ls, 1, NULL, NULL, NULL, 0, 0, 0};
    CHECK_OK(qkv_plot_lines(file("long.svg"), &lp));
    svg = slurp(file("long.svg"), &n);
    int parts = 0, joined = 1;
    char last[64] = "";
    for (const char *q = svg; (q = strstr(q, "<polyline points=\"")); q++) {
        const char *pts = q + strlen("<polyline points=\""), *end = strchr(pts, '"');
        static const char data_line[] = "\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.60\"";
        if (!end || strncmp(end, data_line, strlen(data_line))) continue;
        size_t first_len = strcspn(pts, " \""); /* "x,y" of the first point */
        const char *l = end;
        while (l > pts && l[-1] != ' ') l--; /* ... and of the last */
        if (parts++ && (strlen(last) != first_len || strncmp(last, pts, first_len))) joined = 0;
        snprintf(last, sizeof last, "%.*s", (int)(end - l), l);
    }
    CHECK(parts == 3 && joined, "a 5000-point series drawn as %d polylines (want 3), joined: %d", parts, joined);
    free(svg);
    free(ly);
    /* a grid of panels */
    qkv_line_plot panels[3] = {p, hp, cp};
    panels[0].width = 300, panels[0].height = 200;
    CHECK_OK(qkv_plot_lines_grid(file("grid.png"), panels, 3, 2, "three panels"));
    im = load(file("grid.png"));
    CHECK(im.w == 2 * 480 && im.h == 2 * 300 + 34, "grid %dx%d, want 960x634", im.w, im.h);
    cairo_surface_destroy(im.s);
    /* bad arguments */
    CHECK_ERR(qkv_plot_lines(file("l.png"), NULL), QKV_ERR_ARG, "p is NULL");
    qkv_line_plot bad = p;
    bad.n_series = 0;
    CHECK_ERR(qkv_plot_lines(file("l.png"), &bad), QKV_ERR_ARG, "n_series is 0");
    bad = p, bad.series = NULL;
    CHECK_ERR(qkv_plot_lines(file("l.png"), &bad), QKV_ERR_ARG, "series is NULL");
    qkv_series bs = s[0];
    bad = p, bad.series = &bs, bad.n_series = 1;
    bs.y = NULL;
    CHECK_ERR(qkv_plot_lines(file("l.png"), &bad), QKV_ERR_ARG, "series[0].y is NULL");
    bs = s[0], bs.n = 0;
    CHECK_ERR(qkv_plot_lines(file("l.png"), &bad), QKV_ERR_ARG, "series[0].n is 0");
    bs = s[0], bs.colour = 0x1000000;
    CHECK_ERR(qkv_plot_lines(file("l.png"), &bad), QKV_ERR_ARG, "not 0xRRGGBB");
    bad = p, bad.width = 50, bad.height = 50;
    CHECK_ERR(qkv_plot_lines(file("l.png"), &bad), QKV_ERR_ARG, "size 50 x 50");
    CHECK_ERR(qkv_plot_lines(file("l.gif"), &p), QKV_ERR_ARG, "'.gif'");
    CHECK_ERR(qkv_plot_lines_grid(file("l.png"), panels, 0, 0, NULL), QKV_ERR_ARG, "n is 0");
    CHECK_ERR(qkv_plot_lines_grid(file("l.png"), panels, 3, 4, NULL), QKV_ERR_ARG, "columns is 4");
    panels[2].n_series = -1;
    CHECK_ERR(qkv_plot_lines_grid(file("l.png"), panels, 3, 0, NULL), QKV_ERR_ARG,
              "panels[2].n_series is -1");
    CHECK(access(file("l.png"), F_OK) != 0, "a failed call left l.png");
}

static void test_overlay(void)
{
    float img[28 * 28], w[7 * 7];
    for (int i = 0; i < 28 * 28; i++) img[i] = (float)(i % 28) / 27;
    for (int i = 0; i < 49; i++) w[i] = i == 24 ? 0.5f : 0.01f;
    w[3] = NAN;
    qkv_overlay o = {img, 28, 28, 1, w, 7, 7, "class token", 1.0f};
    CHECK_OK(qkv_plot_overlay(file("overlay.png"), &o));
    CHECK_OK(qkv_plot_overlay(file("overlay.svg"), &o));
    image im = load(file("overlay.png"));
    int yellow = 0; /* the heaviest patch, opaque: 60 x 60 points of the top colour */
    for (int y = 0; y < im.h; y++)
        for (int x = 0; x < im.w; x++) yellow += pixel(&im, x, y) == VIRIDIS_255;
    CHECK(yellow >= 3000 && yellow < 6000, "%d yellow pixels, want a patch of about 3600", yellow);
    cairo_surface_destroy(im.s);
    long n;
    char *svg = slurp(file("overlay.svg"), &n);
    CHECK(strstr(svg, "data:image/png;base64,iVBORw0KGgo") && strstr(svg, ">class token</text>") &&
              strstr(svg, ">1 patch without a finite weight: not coloured</text>"),
          "overlay SVG lacks the image, title or NaN note");
    free(svg);
    qkv_overlay b = o;
    b.channels = 2;
    CHECK_ERR(qkv_plot_overlay(file("o.png"), &b), QKV_ERR_ARG, "channels is 2");
    b = o, b.alpha = 2;
    CHECK_ERR(qkv_plot_overlay(file("o.png"), &b), QKV_ERR_ARG, "alpha is 2");
    b = o, b.alpha = NAN;
    CHECK_ERR(qkv_plot_overlay(file("o.png"), &b), QKV_ERR_ARG, "alpha is nan");
    b = o, b.h = 0;
    CHECK_ERR(qkv_plot_overlay(file("o.png"), &b), QKV_ERR_ARG, "h is 0");
    b = o, b.image = NULL;
    CHECK_ERR(qkv_plot_overlay(file("o.png"), &b), QKV_ERR_ARG, "o->image is NULL");
    CHECK_ERR(qkv_plot_overlay(file("o.png"), NULL), QKV_ERR_ARG, "o is NULL");
    CHECK_ERR(qkv_plot_overlay("/proc/x/o.pdf", &o), QKV_ERR_IO, "/proc/x/o.pdf");
}

/* LeakSanitizer: fontconfig's own caches and configuration leaks (see
 * src/cli/args.c); what Cairo or qkv allocate is still checked. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libfontconfig.so\n"; }

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/qkv_plot_XXXXXX");
    if (!mkdtemp(dir)) {
        CHECK(0, "no temporary directory");
        return h_finish("test_plot");
    }
    test_colour();
    test_heatmap_pixels();
    test_formats();
    test_svg_labels();
    test_notes();
    test_errors();
    test_lines();
    test_overlay();
    if (!h_fail) {
        h_tmpdir_remove(dir);
    } else {
        fprintf(stderr, "the figures are in %s\n", dir);
    }
    cairo_debug_reset_static_data(); /* Cairo's font caches: nothing left for the leak check */
    return h_finish("test_plot");
}
