/* toy.c: the lecture's toy sequences (Fleuret, "13.2 Attention mechanisms"):
 * two triangles and two boxes, and the targets of its two tasks. */
#include <math.h>
#include "core/internal.h"

typedef struct {
    double c, h, w; /* centre, height, width */
    int box;
} toy_shape;

/* The shape's value at position t: a triangle peaks at its centre and falls
 * to 0 at c +- w/2; a box is flat at h over [c - w/2, c + w/2]. */
static double shape_at(const toy_shape *s, double t)
{
    double d = fabs(t - s->c);
    if (s->box) return d <= s->w / 2 ? s->h : 0.0;
    double v = s->h - d * 2 * s->h / s->w;
    return v > 0 ? v : 0.0;
}

static double uniform(qkv_rng *r, double lo, double hi) { return lo + (hi - lo) * qkv_rng_uniform(r); }

/* Four shapes with at least one free position between any two. */
static void draw_shapes(qkv_rng *r, int64_t T, toy_shape s[4])
{
    double k = (double)T / 100.0, wmin = 5 * k, wmax = 11 * k;
    for (;;) {
        for (int i = 0; i < 4; i++) {
            s[i].box = i >= 2;
            s[i].w = uniform(r, wmin, wmax);
            s[i].h = uniform(r, 1, 25);
            s[i].c = uniform(r, wmax / 2, (double)T - wmax / 2);
        }
        int ok = 1;
        for (int i = 0; i < 4 && ok; i++)
            for (int j = i + 1; j < 4 && ok; j++)
                ok = fabs(s[i].c - s[j].c) > (s[i].w + s[j].w) / 2 + 1;
        if (ok) return;
    }
}

static void render(const toy_shape s[4], int64_t T, float *out)
{
    for (int64_t t = 0; t < T; t++) {
        double v = 0;
        for (int i = 0; i < 4; i++) v = fmax(v, shape_at(&s[i], (double)t));
        out[t] = (float)v;
    }
}

/* Is shape k in the first pair? Pairs task: shapes 0,1 are the triangles
 * (2,3 the boxes). Positional task: the two leftmost centres. */
static int in_first_pair(qkv_toy_task task, const toy_shape s[4], int k)
{
    if (task == QKV_TOY_PAIRS) return k < 2;
    int rank = 0;
    for (int b = 0; b < 4; b++) rank += s[b].c < s[k].c;
    return rank < 2;
}

static void pair_averages(qkv_toy_task task, const toy_shape s[4], double *a0, double *a1)
{
    *a0 = *a1 = 0;
    for (int k = 0; k < 4; k++) *(in_first_pair(task, s, k) ? a0 : a1) += s[k].h / 2;
}

qkv_status qkv_toy_generate(qkv_rng *r, qkv_toy_task task, int64_t n, int64_t T, float noise,
                            float *input, float *target)
{
    QKV_NEED(r, "toy_generate", "rng");
    QKV_NEED(input, "toy_generate", "input");
    QKV_NEED(target, "toy_generate", "target");
    if (task != QKV_TOY_PAIRS && task != QKV_TOY_POSITIONAL)
        return qkv_fail(QKV_ERR_ARG, "toy_generate: task %d is not a qkv_toy_task", (int)task);
    if (n < 0 || T < 40)
        return qkv_fail(QKV_ERR_ARG, "toy_generate: n %lld must be >= 0 and T %lld >= 40 (room "
                        "for four shapes)", (long long)n, (long long)T);
    if (!(noise >= 0)) return qkv_fail(QKV_ERR_ARG, "toy_generate: noise %g < 0", noise);
    for (int64_t i = 0; i < n; i++) {
        toy_shape s[4], t[4];
        double a0, a1; /* the two pair averages */
        do { /* as the lecture's generator: pairs whose averages differ by > 4 */
            draw_shapes(r, T, s);
            pair_averages(task, s, &a0, &a1);
        } while (fabs(a0 - a1) <= 4);
        render(s, T, input + i * T);
        for (int64_t x = 0; x < T; x++) input[i * T + x] += (float)uniform(r, -noise / 2, noise / 2);
        for (int k = 0; k < 4; k++) t[k] = s[k];
        for (int k = 0; k < 4; k++) t[k].h = in_first_pair(task, s, k) ? a0 : a1;
        render(t, T, target + i * T);
    }
    return QKV_OK;
}
