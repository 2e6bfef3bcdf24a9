/* vit_rollout.c: attention rollout across a transformer's layers (Abnar &
 * Zuidema 2020): how attention flows from the input tokens to a token's
 * output through the residual stream. vision.h has the formula. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/internal.h"

qkv_status qkv_attention_rollout(const float *attn, int64_t layers, int64_t heads, int64_t S, float *out)
{
    const char *fn = "attention_rollout";
    QKV_NEED(attn, fn, "attn");
    QKV_NEED(out, fn, "out");
    if (layers < 1 || heads < 1 || S < 1 || S > 65536)
        return qkv_fail(QKV_ERR_ARG, "%s: layers %lld, heads %lld, S %lld (each at least 1, S at most 65536)",
                        fn, (long long)layers, (long long)heads, (long long)S);
    double *r = malloc((size_t)(S * S) * sizeof *r), *a = malloc((size_t)(S * S) * sizeof *a),
           *t = malloc((size_t)(S * S) * sizeof *t);
    if (!r || !a || !t) {
        free(r), free(a), free(t);
        return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for %lld x %lld", fn, (long long)S, (long long)S);
    }
    for (int64_t l = 0; l < layers; l++) {
        // a (S,S) = rownorm(mean over heads of attn[l] + I)
        const float *al = attn + l * heads * S * S;
        for (int64_t i = 0; i < S; i++) {
            double sum = 0;
            for (int64_t j = 0; j < S; j++) {
                double v = i == j;
                for (int64_t h = 0; h < heads; h++) v += al[(h * S + i) * S + j] / (double)heads;
                a[i * S + j] = v;
                sum += v;
            }
            for (int64_t j = 0; j < S; j++) a[i * S + j] = sum != 0 ? a[i * S + j] / sum : 0;
        }
        if (l == 0) {
            memcpy(r, a, (size_t)(S * S) * sizeof *r);
            continue;
        }
        // r = a r: the later layer on the left
        for (int64_t i = 0; i < S; i++)
            for (int64_t j = 0; j < S; j++) {
                double v = 0;
                for (int64_t k = 0; k < S; k++) v += a[i * S + k] * r[k * S + j];
                t[i * S + j] = v;
            }
        memcpy(r, t, (size_t)(S * S) * sizeof *r);
    }
    int bad = 0;
    for (int64_t i = 0; i < S * S; i++) {
        out[i] = (float)r[i];
        bad |= !isfinite(r[i]);
    }
    free(r), free(a), free(t);
    if (bad) return qkv_fail(QKV_ERR_ARG, "%s: the weights hold a NaN or an infinity", fn);
    return QKV_OK;
}
