/* lm_config.c: a language model's options as one line of text, kept in its
 * checkpoints' metadata ("lm.config") so that a checkpoint alone rebuilds
 * the model (qkv generate, tools/lm_export.py). Words "key=value" separated
 * by single spaces, in a fixed order; parsing is strict (every key, in that
 * order, values in range) since the text comes from a file. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "models/seq_internal.h"

static const char *posenc_names[] = {"none", "sinusoidal", "learned", "rotary"};

/* Bounds on what a file may ask for: far above any model trained here,
 * low enough that the sizes' products cannot overflow. */
#define MAX_VOCAB ((int64_t)1 << 24)
#define MAX_LEN ((int64_t)1 << 20)
#define MAX_LAYERS 1024
#define MAX_WIDTH ((int64_t)1 << 16)

/* x with the fewest significant digits (%.Ng, N = 1..9) that read back as
 * the same float: 1e-05 rather than 9.99999975e-06. */
static const char *short_float(float x, char *buf, size_t n)
{
    for (int d = 1; d <= 9; d++) {
        snprintf(buf, n, "%.*g", d, (double)x);
        if (strtof(buf, NULL) == x) break;
    }
    return buf;
}

qkv_status qkv_lm_opts_format(const qkv_lm_opts *o, char *buf, size_t n)
{
    const char *fn = "lm_opts_format";
    QKV_NEED(o, fn, "opts");
    QKV_NEED(buf, fn, "buf");
    const qkv_transformer_layer_opts *l = &o->layer;
    const char *act = qkv_activation_name(l->activation);
    if (!act || (unsigned)o->posenc > QKV_POSENC_ROTARY)
        return qkv_fail(QKV_ERR_ARG, "%s: unknown activation or positional encoding", fn);
    char drop[24], eps[24], bv[24], base[48] = "";
    float b = l->rotary_base > 0.0f ? l->rotary_base : 10000.0f;
    if (b == floorf(b) && b < 1e9f) /* whole bases as such: 10000, not 1e+04 */
        snprintf(bv, sizeof bv, "%.0f", (double)b);
    else
        short_float(b, bv, sizeof bv);
    if (o->posenc == QKV_POSENC_ROTARY) /* the last word, with rotary positions only */
        snprintf(base, sizeof base, " rotary_base=%s", bv);
    int k = snprintf(buf, n,
                     "vocab_size=%lld max_len=%lld num_layers=%lld d_model=%lld nhead=%lld "
                     "dim_feedforward=%lld dropout=%s activation=%s layer_norm_eps=%s "
                     "norm_first=%d bias=%d final_norm=%d posenc=%s scale_embedding=%d "
                     "tie_weights=%d padding_idx=%lld%s",
                     (long long)o->vocab_size, (long long)o->max_len, (long long)o->num_layers,
                     (long long)l->d_model, (long long)l->nhead, (long long)l->dim_feedforward,
                     short_float(l->dropout, drop, sizeof drop), act,
                     short_float(l->layer_norm_eps, eps, sizeof eps), l->norm_first != 0,
                     l->bias != 0, o->final_norm != 0, posenc_names[o->posenc],
                     o->scale_embedding != 0, o->tie_weights != 0, (long long)o->padding_idx, base);
    if (k < 0 || (size_t)k >= n)
        return qkv_fail(QKV_ERR_ARG, "%s: a buffer of %zu bytes is too small", fn, n);
    return QKV_OK;
}

/* The value of word key at *p ("key=" then the value up to a space or the
 * end) into val; *p moves past it and its space. */
static qkv_status next_word(const char **p, const char *key, char *val, size_t n)
{
    size_t kl = strlen(key);
    if (strncmp(*p, key, kl) || (*p)[kl] != '=')
        return qkv_fail(QKV_ERR_FORMAT, "lm_opts_parse: expected '%s=' at '%.24s'", key, *p);
    const char *v = *p + kl + 1;
    size_t vl = strcspn(v, " ");
    if (vl == 0 || vl >= n)
        return qkv_fail(QKV_ERR_FORMAT, "lm_opts_parse: %s has an empty or overlong value", key);
    memcpy(val, v, vl);
    val[vl] = 0;
    *p = v + vl + (v[vl] == ' ');
    return QKV_OK;
}

static qkv_status get_int(const char **p, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    char v[32], *end;
    QKV_TRY(next_word(p, key, v, sizeof v));
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || x < lo || x > hi)
        return qkv_fail(QKV_ERR_FORMAT, "lm_opts_parse: %s=%s is not a whole number in [%lld, %lld]",
                        key, v, (long long)lo, (long long)hi);
    *out = x;
    return QKV_OK;
}

static qkv_status get_flag(const char **p, const char *key, int *out)
{
    int64_t x;
    QKV_TRY(get_int(p, key, 0, 1, &x));
    *out = (int)x;
    return QKV_OK;
}

static qkv_status get_float(const char **p, const char *key, double lo, double hi, float *out)
{
    char v[32], *end;
    QKV_TRY(next_word(p, key, v, sizeof v));
    errno = 0;
    double x = strtod(v, &end);
    if (errno || *end || !(x >= lo && x <= hi))
        return qkv_fail(QKV_ERR_FORMAT, "lm_opts_parse: %s=%s is not a number in [%g, %g]", key, v,
                        lo, hi);
    *out = (float)x;
    return QKV_OK;
}

qkv_status qkv_lm_opts_parse(const char *text, qkv_lm_opts *out)
{
    const char *fn = "lm_opts_parse";
    QKV_NEED(text, fn, "text");
    QKV_NEED(out, fn, "opts");
    const char *p = text;
    int64_t V, L, NL, E, H, F, pad;
    char v[32];
    QKV_TRY(get_int(&p, "vocab_size", 1, MAX_VOCAB, &V));
    QKV_TRY(get_int(&p, "max_len", 1, MAX_LEN, &L));
    QKV_TRY(get_int(&p, "num_layers", 0, MAX_LAYERS, &NL));
    QKV_TRY(get_int(&p, "d_model", 1, MAX_WIDTH, &E));
    QKV_TRY(get_int(&p, "nhead", 1, MAX_WIDTH, &H));
    qkv_lm_opts o = qkv_lm_opts_default(V, E, H, NL, L);
    QKV_TRY(get_int(&p, "dim_feedforward", 1, 16 * MAX_WIDTH, &F));
    o.layer.dim_feedforward = F;
    QKV_TRY(get_float(&p, "dropout", 0, 1, &o.layer.dropout));
    QKV_TRY(next_word(&p, "activation", v, sizeof v));
    if (qkv_activation_parse(v, &o.layer.activation) != QKV_OK)
        return qkv_fail(QKV_ERR_FORMAT, "%s: activation=%s is not relu, gelu, gelu_tanh or tanh", fn, v);
    QKV_TRY(get_float(&p, "layer_norm_eps", 1e-30, 0.5, &o.layer.layer_norm_eps));
    QKV_TRY(get_flag(&p, "norm_first", &o.layer.norm_first));
    QKV_TRY(get_flag(&p, "bias", &o.layer.bias));
    QKV_TRY(get_flag(&p, "final_norm", &o.final_norm));
    QKV_TRY(next_word(&p, "posenc", v, sizeof v));
    int k = 0;
    while (k < 4 && strcmp(v, posenc_names[k])) k++;
    if (k == 4)
        return qkv_fail(QKV_ERR_FORMAT, "%s: posenc=%s is not none, sinusoidal, learned or rotary", fn, v);
    o.posenc = (qkv_posenc_kind)k;
    QKV_TRY(get_flag(&p, "scale_embedding", &o.scale_embedding));
    QKV_TRY(get_flag(&p, "tie_weights", &o.tie_weights));
    QKV_TRY(get_int(&p, "padding_idx", -1, V - 1, &pad));
    o.padding_idx = pad;
    if (o.posenc == QKV_POSENC_ROTARY)
        QKV_TRY(get_float(&p, "rotary_base", 1e-30, 1e30, &o.layer.rotary_base));
    if (*p) return qkv_fail(QKV_ERR_FORMAT, "%s: unexpected text '%.24s' at the end", fn, p);
    if (E % H)
        return qkv_fail(QKV_ERR_FORMAT, "%s: d_model %lld is not a multiple of nhead %lld", fn,
                        (long long)E, (long long)H);
    *out = o;
    return QKV_OK;
}
