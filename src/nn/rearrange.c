/* rearrange.c: einops.rearrange for qkv tensors.
 *
 * A pattern "b c (h p1) (w p2) -> b (h w) (p1 p2 c)" names the elementary
 * axes of x (a parenthesised group on the left is one dim of x decomposed,
 * row-major; on the right, axes composed into one dim of y). Compiling it:
 * the lengths of the left's elementary axes (from x's shape and the sizes
 * string), each axis's stride in x, then the right's axes in order give a
 * strided walk (nn/gather.c) that writes y. docs/vision.md has the grammar
 * and the errors. */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nn/gather.h"
#include "nn/nn_check.h"

#define FN "rearrange"
#define NAME_MAX_LEN 32
#define MAX_GROUPS QKV_GATHER_MAX_AXES

/* One side of the arrow: groups of axis names. Group g holds the names
 * name[start[g]] .. name[start[g+1]-1]; a top-level name is a group of
 * one, "1" and "()" are empty groups. paren[g]: written in parentheses. */
typedef struct {
    int ngroups, naxes;
    int start[MAX_GROUPS + 1];
    int paren[MAX_GROUPS];
    char name[QKV_GATHER_MAX_AXES][NAME_MAX_LEN];
    int ell_group; /* the group holding "...", or -1 */
} side_t;

static qkv_status side_group(side_t *s, int paren, const char *which)
{
    if (s->ngroups == MAX_GROUPS)
        return qkv_fail(QKV_ERR_ARG, FN ": the %s side has more than %d dims", which, MAX_GROUPS);
    s->paren[s->ngroups] = paren;
    s->start[s->ngroups++] = s->naxes;
    return QKV_OK;
}

static qkv_status side_axis(side_t *s, const char *name, size_t len, const char *which)
{
    if (s->naxes == QKV_GATHER_MAX_AXES)
        return qkv_fail(QKV_ERR_ARG, FN ": the %s side has more than %d axes", which,
                        QKV_GATHER_MAX_AXES);
    if (len >= NAME_MAX_LEN)
        return qkv_fail(QKV_ERR_ARG, FN ": axis name '%.*s' is longer than %d characters",
                        (int)len, name, NAME_MAX_LEN - 1);
    memcpy(s->name[s->naxes], name, len);
    s->name[s->naxes++][len] = 0;
    return QKV_OK;
}

/* Parses [p, end) into s; which is "left" or "right" for messages. */
static qkv_status parse_side(const char *p, const char *end, const char *which, side_t *s)
{
    memset(s, 0, sizeof *s);
    s->ell_group = -1;
    int in_paren = 0;
    while (p < end) {
        char ch = *p;
        if (isspace((unsigned char)ch)) {
            p++;
        } else if (ch == '(') {
            if (in_paren) return qkv_fail(QKV_ERR_ARG, FN ": nested parentheses on the %s side", which);
            QKV_TRY(side_group(s, 1, which));
            in_paren = 1, p++;
        } else if (ch == ')') {
            if (!in_paren) return qkv_fail(QKV_ERR_ARG, FN ": ')' without '(' on the %s side", which);
            in_paren = 0, p++;
        } else if (ch == '.') {
            if (end - p < 3 || strncmp(p, "...", 3) != 0)
                return qkv_fail(QKV_ERR_ARG, FN ": a lone '.' on the %s side (an ellipsis is '...')", which);
            if (s->ell_group >= 0)
                return qkv_fail(QKV_ERR_ARG, FN ": more than one '...' on the %s side", which);
            if (!in_paren) QKV_TRY(side_group(s, 0, which));
            s->ell_group = s->ngroups - 1;
            QKV_TRY(side_axis(s, "...", 3, which));
            p += 3;
        } else if (isdigit((unsigned char)ch)) {
            const char *q = p;
            while (q < end && isalnum((unsigned char)*q)) q++;
            if (q - p != 1 || *p != '1')
                return qkv_fail(QKV_ERR_ARG, FN ": anonymous axis '%.*s' on the %s side: rearrange "
                                "allows only 1 (a unit axis), as einops does", (int)(q - p), p, which);
            /* "1" is an empty group, and nothing inside parentheses. */
            if (!in_paren) QKV_TRY(side_group(s, 0, which));
            p = q;
        } else if (isalpha((unsigned char)ch) || ch == '_') {
            const char *q = p;
            while (q < end && (isalnum((unsigned char)*q) || *q == '_')) q++;
            if (!in_paren) QKV_TRY(side_group(s, 0, which));
            QKV_TRY(side_axis(s, p, (size_t)(q - p), which));
            p = q;
        } else {
            return qkv_fail(QKV_ERR_ARG, FN ": unexpected character '%c' on the %s side", ch, which);
        }
    }
    if (in_paren) return qkv_fail(QKV_ERR_ARG, FN ": '(' without ')' on the %s side", which);
    s->start[s->ngroups] = s->naxes;
    return QKV_OK;
}

/* Replaces "..." by k axes named "...0", "...1", ...: k groups of one at
 * the top level, k names inside a parenthesised group. */
static qkv_status expand_ellipsis(side_t *s, int k, const char *which)
{
    if (s->ell_group < 0) return QKV_OK;
    side_t o;
    memset(&o, 0, sizeof o);
    o.ell_group = -1;
    for (int g = 0; g < s->ngroups; g++) {
        int top = g == s->ell_group && !s->paren[g];
        if (!top) QKV_TRY(side_group(&o, s->paren[g], which));
        for (int i = s->start[g]; i < s->start[g + 1]; i++) {
            if (strcmp(s->name[i], "...") != 0) {
                QKV_TRY(side_axis(&o, s->name[i], strlen(s->name[i]), which));
                continue;
            }
            for (int j = 0; j < k; j++) {
                char nm[16];
                int len = snprintf(nm, sizeof nm, "...%d", j);
                if (top) QKV_TRY(side_group(&o, 0, which));
                QKV_TRY(side_axis(&o, nm, (size_t)len, which));
            }
        }
    }
    o.start[o.ngroups] = o.naxes;
    *s = o;
    return QKV_OK;
}

static int find_axis(const side_t *s, const char *name, size_t len)
{
    for (int i = 0; i < s->naxes; i++)
        if (strlen(s->name[i]) == len && strncmp(s->name[i], name, len) == 0) return i;
    return -1;
}

static qkv_status check_unique(const side_t *s, const char *which)
{
    for (int i = 0; i < s->naxes; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(s->name[i], s->name[j]))
                return qkv_fail(QKV_ERR_ARG, FN ": axis '%s' appears twice on the %s side",
                                s->name[i], which);
    return QKV_OK;
}

/* "(h p1)" or "h" or "1" for messages. */
static const char *group_str(const side_t *s, int g, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    if (s->start[g] == s->start[g + 1]) {
        snprintf(buf, n, "%s", s->paren[g] ? "()" : "1");
        return buf;
    }
    if (s->paren[g]) k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "(");
    for (int i = s->start[g]; i < s->start[g + 1] && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i > s->start[g] ? " " : "", s->name[i]);
    if (s->paren[g] && k < n) snprintf(buf + k, n - k, ")");
    return buf;
}

/* Reads "h=14, w=14" (entries separated by commas or spaces) into len[] of
 * the left side's axes (-1 where not given). */
static qkv_status parse_sizes(const char *sizes, const side_t *left, int64_t *len)
{
    for (int i = 0; i < left->naxes; i++) len[i] = -1;
    const char *p = sizes;
    while (p && *p) {
        if (isspace((unsigned char)*p) || *p == ',') {
            p++;
            continue;
        }
        const char *q = p;
        while (*q && (isalnum((unsigned char)*q) || *q == '_')) q++;
        const char *eq = q;
        while (isspace((unsigned char)*eq)) eq++;
        if (q == p || *eq != '=')
            return qkv_fail(QKV_ERR_ARG, FN ": sizes \"%s\": expected name=length entries such as \"h=14,w=14\"", sizes);
        int i = find_axis(left, p, (size_t)(q - p));
        if (i < 0)
            return qkv_fail(QKV_ERR_ARG, FN ": sizes gives '%.*s', which is not an axis of the pattern's left side",
                            (int)(q - p), p);
        char *e;
        long long v = strtoll(eq + 1, &e, 10);
        if (e == eq + 1 || v < 1 || v > ((int64_t)1 << 40))
            return qkv_fail(QKV_ERR_ARG, FN ": sizes gives %s a length that is not an integer in [1, 2^40]",
                            left->name[i]);
        if (len[i] >= 0) return qkv_fail(QKV_ERR_ARG, FN ": sizes gives %s twice", left->name[i]);
        len[i] = v;
        p = e;
    }
    return QKV_OK;
}

/* Lengths of the left's axes from x's dims and the given sizes. */
static qkv_status infer_lengths(const side_t *l, const qkv_tensor *x, int64_t *len)
{
    char gb[160];
    for (int g = 0; g < l->ngroups; g++) {
        int64_t d = x->shape[g], known = 1;
        int unknown = -1, n_unknown = 0;
        for (int i = l->start[g]; i < l->start[g + 1]; i++) {
            if (len[i] < 0) {
                unknown = i, n_unknown++;
                continue;
            }
            /* Saturate: sizes may be up to 2^40 each, 16 of them. */
            known = known > INT64_MAX / len[i] ? INT64_MAX : known * len[i];
        }
        if (n_unknown > 1)
            return qkv_fail(QKV_ERR_ARG, FN ": cannot infer the lengths in %s from dim %d of x "
                            "(length %lld): give all but one in sizes",
                            group_str(l, g, gb, sizeof gb), g, (long long)d);
        if (n_unknown == 1) {
            if (d % known != 0)
                return qkv_fail(QKV_ERR_SHAPE, FN ": dim %d of x (length %lld) does not divide "
                                "into %s: the given lengths make %lld",
                                g, (long long)d, group_str(l, g, gb, sizeof gb), (long long)known);
            len[unknown] = d / known;
        } else if (known != d) {
            return qkv_fail(QKV_ERR_SHAPE, FN ": dim %d of x has length %lld, but %s makes %lld",
                            g, (long long)d, group_str(l, g, gb, sizeof gb), (long long)known);
        }
    }
    return QKV_OK;
}

qkv_status qkv_rearrange(qkv_ctx *c, qkv_tensor *x, const char *pattern, const char *sizes,
                         qkv_tensor **y)
{
    QKV_NEED_OUT_CTX(y, c, FN, "y");
    QKV_NEED_F32(x, FN, "x");
    QKV_NEED(pattern, FN, "pattern");
    const char *arrow = strstr(pattern, "->");
    if (!arrow || strstr(arrow + 2, "->"))
        return qkv_fail(QKV_ERR_ARG, FN ": pattern \"%s\" needs exactly one '->'", pattern);
    side_t l, r;
    QKV_TRY(parse_side(pattern, arrow, "left", &l));
    QKV_TRY(parse_side(arrow + 2, arrow + strlen(arrow), "right", &r));
    if (l.ell_group >= 0 && l.paren[l.ell_group])
        return qkv_fail(QKV_ERR_ARG, FN ": '...' inside parentheses on the left side (einops refuses it too)");
    if ((l.ell_group >= 0) != (r.ell_group >= 0))
        return qkv_fail(QKV_ERR_ARG, FN ": '...' on the %s side only", l.ell_group >= 0 ? "left" : "right");
    char bx[64];
    int k = x->ndim - (l.ngroups - (l.ell_group >= 0));
    if (k < 0 || (l.ell_group < 0 && k != 0))
        return qkv_fail(QKV_ERR_SHAPE, FN ": x %s has %d dims, the left side of \"%s\" has %s%d",
                        qkv_shape_str(x, bx, sizeof bx), x->ndim, pattern,
                        l.ell_group >= 0 ? "at least " : "", l.ngroups - (l.ell_group >= 0));
    QKV_TRY(expand_ellipsis(&l, k, "left"));
    QKV_TRY(expand_ellipsis(&r, k, "right"));
    QKV_TRY(check_unique(&l, "left"));
    QKV_TRY(check_unique(&r, "right"));
    for (int i = 0; i < r.naxes; i++)
        if (find_axis(&l, r.name[i], strlen(r.name[i])) < 0)
            return qkv_fail(QKV_ERR_ARG, FN ": axis '%s' is on the right side of \"%s\" but not on the left",
                            r.name[i], pattern);
    for (int i = 0; i < l.naxes; i++)
        if (find_axis(&r, l.name[i], strlen(l.name[i])) < 0)
            return qkv_fail(QKV_ERR_ARG, FN ": axis '%s' is on the left side of \"%s\" but not on the "
                            "right (rearrange keeps every axis)", l.name[i], pattern);
    if (r.ngroups > QKV_MAX_DIMS)
        return qkv_fail(QKV_ERR_SHAPE, FN ": \"%s\" makes %d dims; qkv tensors have at most %d",
                        pattern, r.ngroups, QKV_MAX_DIMS);

    int64_t len[QKV_GATHER_MAX_AXES], stride[QKV_GATHER_MAX_AXES];
    QKV_TRY(parse_sizes(sizes, &l, len));
    QKV_TRY(infer_lengths(&l, x, len));
    for (int i = l.naxes - 1; i >= 0; i--) stride[i] = i == l.naxes - 1 ? 1 : stride[i + 1] * len[i + 1];

    qkv_gather_map m;
    m.n = r.naxes;
    for (int i = 0; i < r.naxes; i++) {
        int j = find_axis(&l, r.name[i], strlen(r.name[i]));
        m.len[i] = len[j];
        m.istride[i] = stride[j];
    }
    int64_t shape[QKV_MAX_DIMS];
    for (int g = 0; g < r.ngroups; g++) {
        shape[g] = 1;
        for (int i = r.start[g]; i < r.start[g + 1]; i++) shape[g] *= m.len[i];
    }
    /* Elements in x's order: a reshape, returned as a view (no copy; the
     * gradient reaches x through the view's base). */
    qkv_gather_map s = m;
    if (qkv_gather_simplify(&s) && !qkv_reference())
        return qkv_tensor_view(qkv_ctx_arena(c), x, r.ngroups, shape, y);
    return qkv_gather(c, FN, x, &m, r.ngroups, shape, y);
}
