/* test_half.c: fp16 conversions (src/kernels/half.c): known encodings, the
 * portable scalar code against the array code (F16C instructions where the
 * build has them) on every half and on floats across the whole range,
 * halfway cases included, and round trips. */
#include <math.h>
#include "harness.h"
#include "kernels/half.h"

static uint32_t bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

int main(void)
{
    /* Known encodings (IEEE 754 binary16). */
    struct { float x; uint16_t h; } known[] = {
        {0.0f, 0x0000},      {-0.0f, 0x8000},     {1.0f, 0x3c00},        {-2.0f, 0xc000},
        {65504.0f, 0x7bff},  {65519.0f, 0x7bff},  {65520.0f, 0x7c00},    {1e9f, 0x7c00},
        {INFINITY, 0x7c00},  {-INFINITY, 0xfc00}, {0x1p-14f, 0x0400},    {0x1p-24f, 0x0001},
        {0x1p-25f, 0x0000},  {0x1.8p-25f, 0x0001}, {0.333333343f, 0x3555}, {1.0009765625f, 0x3c01},
        {1.00048828125f, 0x3c00}, /* halfway between 0x3c00 and 0x3c01: to even */
        {1.00146484375f, 0x3c02}, /* halfway between 0x3c01 and 0x3c02: to even */
    };
    for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
        uint16_t h = qkv_half_from_float(known[i].x), ha;
        qkv_half_from_floats(&known[i].x, &ha, 1);
        CHECK(h == known[i].h, "half(%a) = 0x%04x, expected 0x%04x", known[i].x, h, known[i].h);
    }
    CHECK(isnan(qkv_half_to_float(qkv_half_from_float(NAN))), "NaN stays NaN");
    /* Every half: the scalar and the array conversions agree, and going
     * back to half gives the same half (NaNs: stay NaN). */
    static uint16_t hs[65536], back[65536];
    static float fs[65536];
    for (int i = 0; i < 65536; i++) hs[i] = (uint16_t)i;
    qkv_half_to_floats(hs, fs, 65536);
    qkv_half_from_floats(fs, back, 65536);
    int bad = 0, bad_back = 0;
    for (int i = 0; i < 65536; i++) {
        float s = qkv_half_to_float(hs[i]);
        if (isnan(s) ? !isnan(fs[i]) : bits(s) != bits(fs[i])) bad++;
        if (isnan(s) ? (back[i] & 0x7fff) <= 0x7c00 : back[i] != hs[i]) bad_back++;
    }
    CHECK(bad == 0, "half -> float: scalar and array code differ on %d of 65536 halves", bad);
    CHECK(bad_back == 0, "half -> float -> half changes %d of 65536 halves", bad_back);
    /* Floats over the whole range, and halfway between neighbouring halves. */
    qkv_rng r;
    qkv_rng_seed(&r, 5);
    enum { NF = 1 << 20 };
    float *x = malloc(NF * sizeof *x);
    uint16_t *ha = malloc(NF * sizeof *ha);
    for (int i = 0; i < NF; i++) {
        if (i < 65536) { /* halfway above half i (where finite) */
            float lo = qkv_half_to_float((uint16_t)i), hi = qkv_half_to_float((uint16_t)(i + 1));
            x[i] = isfinite(lo) && isfinite(hi) && (i & 0x7fff) < 0x7bff ? 0.5f * (lo + hi) : lo;
        } else {
            float u = qkv_rng_uniform(&r);
            x[i] = ldexpf(2 * u - 1, (int)(qkv_rng_uniform(&r) * 60) - 40);
        }
    }
    qkv_half_from_floats(x, ha, NF);
    bad = 0;
    for (int i = 0; i < NF; i++) bad += !isnan(x[i]) && qkv_half_from_float(x[i]) != ha[i];
    CHECK(bad == 0, "float -> half: scalar and array code differ on %d of %d floats", bad, NF);
    free(x), free(ha);
    return h_finish("test_half");
}
