/* vit_torchvision.c: loading torchvision's VisionTransformer state_dict
 * (vit_b_16 and friends, torchvision 0.13+ names, and the older
 * mlp.linear_1/linear_2) into a qkv_vit: the same tensors under other
 * names, so loading is a renaming. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/internal.h"

#define FN "vit_load_torchvision"

/* Rewrites the start of s from `from` to `to` into out; 1 when s starts with from. */
static int swap_prefix(const char *s, const char *from, const char *to, char *out, size_t n)
{
    size_t k = strlen(from);
    if (strncmp(s, from, k) != 0) return 0;
    snprintf(out, n, "%s%s", to, s + k);
    return 1;
}

/* A layer's key after "encoder_layer_<i>.": torchvision's EncoderBlock
 * names to nn.TransformerEncoderLayer's. */
static int map_layer(const char *rest, char *out, size_t n)
{
    static const char *const pairs[][2] = {
        {"ln_1.", "norm1."}, {"ln_2.", "norm2."}, {"self_attention.", "self_attn."},
        {"mlp.0.", "linear1."}, {"mlp.3.", "linear2."},
        {"mlp.linear_1.", "linear1."}, {"mlp.linear_2.", "linear2."}, /* torchvision < 0.13 */
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (swap_prefix(rest, pairs[i][0], pairs[i][1], out, n)) return 1;
    return 0;
}

qkv_status qkv_vit_torchvision_name(const char *key, char *out, size_t n)
{
    QKV_NEED(key, "vit_torchvision_name", "key");
    QKV_NEED(out, "vit_torchvision_name", "out");
    char rest[256];
    if (!strcmp(key, "conv_proj.weight") || !strcmp(key, "conv_proj.bias") || !strcmp(key, "class_token")) {
        snprintf(out, n, "%s", key);
        return QKV_OK;
    }
    if (!strcmp(key, "encoder.pos_embedding")) {
        snprintf(out, n, "pos_embedding");
        return QKV_OK;
    }
    if (swap_prefix(key, "encoder.ln.", "encoder.norm.", out, n) ||
        swap_prefix(key, "heads.head.", "head.", out, n))
        return QKV_OK;
    const char *lp = "encoder.layers.encoder_layer_";
    if (!strncmp(key, lp, strlen(lp))) {
        char *end;
        long long i = strtoll(key + strlen(lp), &end, 10);
        if (end != key + strlen(lp) && *end == '.' && i >= 0 && map_layer(end + 1, rest, sizeof rest)) {
            snprintf(out, n, "encoder.layers.%lld.%s", i, rest);
            return QKV_OK;
        }
    }
    return qkv_fail(QKV_ERR_NOTFOUND, "vit_torchvision_name: '%s' is not a key of torchvision's "
                    "VisionTransformer that qkv_vit has (heads.pre_logits is not supported)", key);
}

static qkv_status vit_load_torchvision_body(qkv_params *p, const qkv_safetensors *st, const char *prefix)
{
    QKV_NEED(p, FN, "params");
    QKV_NEED(st, FN, "file");
    if (!prefix) prefix = "";
    int np = qkv_params_count(p), nf = qkv_safetensors_count(st), want = 0;
    size_t plen = strlen(prefix);
    for (int i = 0; i < np; i++) want += strncmp(qkv_params_at(p, i)->name, prefix, plen) == 0;
    qkv_tensor **dst = calloc((size_t)(nf > 0 ? nf : 1), sizeof *dst);
    char *seen = calloc((size_t)(np > 0 ? np : 1), 1);
    if (!dst || !seen) {
        free(dst), free(seen);
        return qkv_fail(QKV_ERR_NOMEM, FN ": out of memory");
    }
    qkv_status s = QKV_OK;
    /* Everything is matched and checked before anything is copied. */
    for (int f = 0; f < nf && s == QKV_OK; f++) {
        const char *key = qkv_safetensors_name(st, f);
        char mapped[256], full[600];
        s = qkv_vit_torchvision_name(key, mapped, sizeof mapped);
        if (s != QKV_OK) break;
        snprintf(full, sizeof full, "%s%s", prefix, mapped);
        qkv_tensor *t = qkv_params_find(p, full);
        if (!t) {
            s = qkv_fail(QKV_ERR_NOTFOUND, FN ": the file's '%s' (qkv's '%s') has no parameter in "
                         "the model (built with other options?)", key, full);
            break;
        }
        qkv_st_dtype dt;
        int nd;
        int64_t shape[8];
        s = qkv_safetensors_info(st, key, &dt, &nd, shape, NULL, NULL);
        if (s != QKV_OK) break;
        if (dt != QKV_ST_F32 && dt != QKV_ST_F16 && dt != QKV_ST_BF16 && dt != QKV_ST_F64) {
            s = qkv_fail(QKV_ERR_DTYPE, FN ": '%s' is not floating-point", key);
            break;
        }
        char b[64];
        int same = nd == t->ndim && !memcmp(shape, t->shape, sizeof(int64_t) * (size_t)nd);
        if (!same) {
            char fs[96];
            int k = snprintf(fs, sizeof fs, "(");
            for (int d = 0; d < nd && k < (int)sizeof fs; d++)
                k += snprintf(fs + k, sizeof fs - (size_t)k, "%s%lld", d ? "," : "", (long long)shape[d]);
            if (k < (int)sizeof fs) snprintf(fs + k, sizeof fs - (size_t)k, ")");
            s = qkv_fail(QKV_ERR_SHAPE, FN ": '%s' is %s in the file, '%s' is %s in the model", key, fs,
                         full, qkv_shape_str(t, b, sizeof b));
            break;
        }
        for (int i = 0; i < np; i++)
            if (qkv_params_at(p, i) == t) seen[i]++;
        dst[f] = t;
    }
    int found = 0;
    for (int i = 0; i < np && s == QKV_OK; i++) {
        if (seen[i] > 1)
            s = qkv_fail(QKV_ERR_FORMAT, FN ": '%s' comes twice in the file (old and new names?)",
                         qkv_params_at(p, i)->name);
        found += seen[i] == 1;
    }
    if (s == QKV_OK && found != want) {
        for (int i = 0; i < np; i++)
            if (!seen[i] && !strncmp(qkv_params_at(p, i)->name, prefix, plen)) {
                s = qkv_fail(QKV_ERR_NOTFOUND, FN ": the file has nothing for '%s' (%d of %d "
                             "parameters found)", qkv_params_at(p, i)->name, found, want);
                break;
            }
    }
    for (int f = 0; f < nf && s == QKV_OK; f++)
        s = qkv_safetensors_read_tensor(st, qkv_safetensors_name(st, f), dst[f]);
    free(dst);
    free(seen);
    return s;
}

qkv_status qkv_vit_load_torchvision(qkv_params *p, const qkv_safetensors *st, const char *prefix)
{
    return qkv_fail_in("vit_load_torchvision", vit_load_torchvision_body(p, st, prefix));
}
