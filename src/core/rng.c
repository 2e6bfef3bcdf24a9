/* rng.c: xoshiro256** seeded by splitmix64, and torch.nn.init's initialisers.
 * The streams differ from PyTorch's, the distributions and fans are the same. */
#include <math.h>
#include "core/internal.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void qkv_rng_seed(qkv_rng *r, uint64_t seed)
{
    if (!r) return;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* The void and value functions cannot report an error: a NULL r (or x)
 * gives 0 (or fills nothing) instead of a crash. */
uint64_t qkv_rng_next(qkv_rng *r)
{
    if (!r) return 0;
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

float qkv_rng_uniform(qkv_rng *r) { return (float)(qkv_rng_next(r) >> 40) * (1.0f / 16777216.0f); }

float qkv_rng_normal(qkv_rng *r)
{
    /* Box-Muller in double; u1 in (0,1] so log never sees 0. */
    double u1 = ((double)(qkv_rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (double)(qkv_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void qkv_rng_fill_uniform(qkv_rng *r, float *x, int64_t n, float lo, float hi)
{
    if (!r || !x) return;
    for (int64_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * qkv_rng_uniform(r);
}

void qkv_rng_fill_normal(qkv_rng *r, float *x, int64_t n, float mean, float std)
{
    if (!r || !x) return;
    for (int64_t i = 0; i < n; i++) x[i] = mean + std * qkv_rng_normal(r);
}

/* torch.nn.init._calculate_fan_in_and_fan_out: dim 1 is fan_in, dim 0 fan_out,
 * each times the receptive field (the product of dims 2..). */
static qkv_status fans(const char *fn, const qkv_tensor *t, double *fan_in, double *fan_out)
{
    if (t->ndim < 2)
        return qkv_fail(QKV_ERR_SHAPE, "%s: fans need at least 2 dims, tensor has %d", fn, t->ndim);
    double rf = 1;
    for (int i = 2; i < t->ndim; i++) rf *= (double)t->shape[i];
    *fan_in = (double)t->shape[1] * rf;
    *fan_out = (double)t->shape[0] * rf;
    return QKV_OK;
}

static qkv_status check_init(const char *fn, qkv_rng *r, const qkv_tensor *t)
{
    QKV_NEED(r, fn, "rng");
    QKV_NEED(t, fn, "tensor");
    if (t->dtype != QKV_F32 || !t->data)
        return qkv_fail(QKV_ERR_DTYPE, "%s: tensor is not F32", fn);
    return QKV_OK;
}

/* A gain for the xavier initialisers: finite and >= 0 (torch takes any
 * number, but a NaN, infinite or negative gain only makes NaN, inf or a
 * mirrored draw: refused rather than returned as OK). */
static qkv_status check_gain(const char *fn, float gain)
{
    if (!isfinite(gain) || gain < 0)
        return qkv_fail(QKV_ERR_ARG, "%s: gain %g must be finite and >= 0", fn, (double)gain);
    return QKV_OK;
}

/* uniform_(a, b): torch refuses a > b ("uniform_ expects to return a
 * [from, to) range"); bounds must be finite and b - a must be too (the
 * draw is a + (b - a) u). */
qkv_status qkv_init_uniform(qkv_rng *r, qkv_tensor *t, float lo, float hi)
{
    QKV_TRY(check_init("init_uniform", r, t));
    if (!isfinite(lo) || !isfinite(hi))
        return qkv_fail(QKV_ERR_ARG, "init_uniform: low %g and high %g must be finite", (double)lo,
                        (double)hi);
    if (lo > hi)
        return qkv_fail(QKV_ERR_ARG, "init_uniform: low %g > high %g", (double)lo, (double)hi);
    if (!isfinite(hi - lo))
        return qkv_fail(QKV_ERR_ARG, "init_uniform: high - low = %g - %g overflows a float",
                        (double)hi, (double)lo);
    qkv_rng_fill_uniform(r, t->data, qkv_tensor_numel(t), lo, hi);
    return QKV_OK;
}

/* What both xavier initialisers check, and their fan_in + fan_out. */
static qkv_status xavier_fans(const char *fn, qkv_rng *r, qkv_tensor *t, float gain, double *fan_sum)
{
    double fi = 0, fo = 0;
    QKV_TRY(check_init(fn, r, t));
    QKV_TRY(check_gain(fn, gain));
    QKV_TRY(fans(fn, t, &fi, &fo));
    *fan_sum = fi + fo;
    return QKV_OK;
}

qkv_status qkv_init_xavier_uniform(qkv_rng *r, qkv_tensor *t, float gain)
{
    double f;
    QKV_TRY(xavier_fans("init_xavier_uniform", r, t, gain, &f));
    float a = (float)(gain * sqrt(6.0 / f));
    qkv_rng_fill_uniform(r, t->data, qkv_tensor_numel(t), -a, a);
    return QKV_OK;
}

qkv_status qkv_init_xavier_normal(qkv_rng *r, qkv_tensor *t, float gain)
{
    double f;
    QKV_TRY(xavier_fans("init_xavier_normal", r, t, gain, &f));
    qkv_rng_fill_normal(r, t->data, qkv_tensor_numel(t), 0.0f, (float)(gain * sqrt(2.0 / f)));
    return QKV_OK;
}

qkv_status qkv_init_linear_default(qkv_rng *r, qkv_tensor *t)
{
    double fi = 0, fo = 0;
    QKV_TRY(check_init("init_linear_default", r, t));
    QKV_TRY(fans("init_linear_default", t, &fi, &fo));
    /* kaiming_uniform_(a=sqrt(5)): gain sqrt(2/(1+5)), bound gain*sqrt(3/fan_in). */
    float b = (float)(1.0 / sqrt(fi));
    qkv_rng_fill_uniform(r, t->data, qkv_tensor_numel(t), -b, b);
    return QKV_OK;
}

qkv_status qkv_init_constant(qkv_tensor *t, float v)
{
    QKV_NEED(t, "init_constant", "tensor");
    if (t->dtype != QKV_F32 || !t->data)
        return qkv_fail(QKV_ERR_DTYPE, "init_constant: tensor is not F32");
    if (!isfinite(v)) /* torch fills it; a NaN or inf parameter is never wanted */
        return qkv_fail(QKV_ERR_ARG, "init_constant: value %g must be finite", (double)v);
    int64_t n = qkv_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) t->data[i] = v;
    return QKV_OK;
}
