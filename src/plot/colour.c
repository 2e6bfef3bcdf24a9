/* colour.c: the colour map of the heat maps: viridis (Smith, van der Walt
 * and Firing, matplotlib's default, CC0): perceptually uniform, readable in
 * grey and by the colour-blind. As matplotlib does, v in [0,1] picks one of
 * 256 levels, floor(256 v) (1 is the last); the levels are interpolated
 * linearly between every eighth of matplotlib's 256 entries (kept here,
 * with the last), which matches its table to within one unit of 255. */
#include <math.h>
#include "plot/plot_internal.h"

/* matplotlib's viridis entries 0, 8, 16, ..., 248 and 255: (r, g, b) in [0,1] */
static const float viridis[33][3] = {
    {0.267004, 0.004874, 0.329415}, {0.277018, 0.050344, 0.375715}, {0.282327, 0.094955, 0.417331},
    {0.282884, 0.135920, 0.453427}, {0.278826, 0.175490, 0.483397}, {0.270595, 0.214069, 0.507052},
    {0.258965, 0.251537, 0.524736}, {0.244972, 0.287675, 0.537260}, {0.229739, 0.322361, 0.545706},
    {0.214298, 0.355619, 0.551184}, {0.199430, 0.387607, 0.554642}, {0.185556, 0.418570, 0.556753},
    {0.172719, 0.448791, 0.557885}, {0.160665, 0.478540, 0.558115}, {0.149039, 0.508051, 0.557250},
    {0.137770, 0.537492, 0.554906}, {0.127568, 0.566949, 0.550556}, {0.120565, 0.596422, 0.543611},
    {0.120638, 0.625828, 0.533488}, {0.132268, 0.655014, 0.519661}, {0.157851, 0.683765, 0.501686},
    {0.196571, 0.711827, 0.479221}, {0.246070, 0.738910, 0.452024}, {0.304148, 0.764704, 0.419943},
    {0.369214, 0.788888, 0.382914}, {0.440137, 0.811138, 0.340967}, {0.515992, 0.831158, 0.294279},
    {0.595839, 0.848717, 0.243329}, {0.678489, 0.863742, 0.189503}, {0.762373, 0.876424, 0.137064},
    {0.845561, 0.887322, 0.099702}, {0.926106, 0.897330, 0.104071}, {0.993248, 0.906157, 0.143936}};

uint32_t qkv_plot_colour(double v)
{
    if (isnan(v)) return QKV_PLOT_NAN_COLOUR;
    int i = v <= 0 ? 0 : v >= 1 ? 255 : (int)(v * 256);
    if (i > 255) i = 255;
    int k = i / 8 < 31 ? i / 8 : 31, next = k == 31 ? 255 : 8 * (k + 1);
    double t = (double)(i - 8 * k) / (next - 8 * k);
    uint32_t rgb = 0;
    for (int c = 0; c < 3; c++) {
        double x = viridis[k][c] + t * (viridis[k + 1][c] - viridis[k][c]);
        rgb = rgb << 8 | (uint32_t)lround(x * 255);
    }
    return rgb;
}

uint32_t qkv_plot_colour_in(double v, double lo, double hi)
{
    return isnan(v) ? QKV_PLOT_NAN_COLOUR : qkv_plot_colour(qkv_axis_frac(v, lo, hi));
}

uint32_t qkv_plot_ink_on(uint32_t rgb)
{
    /* luma (Rec. 601): viridis is dark below about 0.55 */
    double y = 0.299 * (rgb >> 16 & 255) + 0.587 * (rgb >> 8 & 255) + 0.114 * (rgb & 255);
    return y < 150 ? 0xffffff : 0x000000;
}
