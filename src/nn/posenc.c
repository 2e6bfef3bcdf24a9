/* posenc.c: positional encodings: the sinusoidal table, the lecture's
 * binary channels, adding a position
 * table in either batch layout, learned positions, scaling, an index
 * channel, rotary embeddings (RoPE) and ALiBi's slopes and bias; and the
 * modules over them. docs/positional.md has the formulas. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nn/nn_check.h"
#include "qkv/posenc.h"

/* ---- sinusoidal ------------------------------------------------------------ */

static qkv_status sinusoidal_check(int64_t offset, int64_t T, int64_t d)
{
    if (d < 2 || d % 2)
        return qkv_fail(QKV_ERR_ARG, "sinusoidal: d %lld must be even and positive", (long long)d);
    if (T < 0 || offset < 0)
        return qkv_fail(QKV_ERR_ARG, "sinusoidal: T %lld and offset %lld must be >= 0",
                        (long long)T, (long long)offset);
    /* Positions offset .. offset + T - 1 are angles in double: past 2^53 a
     * double no longer holds every integer, neighbouring positions share
     * one angle, and offset + T may wrap. Refused rather than wrong. */
    const int64_t lim = (int64_t)1 << 53;
    if (T > lim || offset > lim - T)
        return qkv_fail(QKV_ERR_ARG, "sinusoidal: positions offset %lld .. + T %lld reach past "
                        "2^53, where a double angle no longer tells positions apart",
                        (long long)offset, (long long)T);
    return QKV_OK;
}

static qkv_status sinusoidal_fill_body(int64_t offset, int64_t T, int64_t d, float *pe)
{
    QKV_TRY(sinusoidal_check(offset, T, d));
    if (T > 0) QKV_NEED(pe, "sinusoidal", "pe");
    for (int64_t i = 0; i < d / 2; i++) {
        double freq = pow(10000.0, -2.0 * (double)i / (double)d); /* 10000^(-2i/d) */
        for (int64_t t = 0; t < T; t++) {
            double angle = (double)(offset + t) * freq;
            pe[t * d + 2 * i] = (float)sin(angle); // pe is (T,d)
            pe[t * d + 2 * i + 1] = (float)cos(angle);
        }
    }
    return QKV_OK;
}

qkv_status qkv_sinusoidal_fill(int64_t offset, int64_t T, int64_t d, float *pe)
{
    return qkv_fail_in("sinusoidal_fill", sinusoidal_fill_body(offset, T, d, pe));
}

qkv_status qkv_sinusoidal(qkv_ctx *c, int64_t offset, int64_t T, int64_t d, qkv_tensor **pe)
{
    QKV_NEED_OUT_CTX(pe, c, "sinusoidal", "pe");
    QKV_TRY(sinusoidal_check(offset, T, d));
    int64_t shape[2] = {T, d};
    QKV_TRY(qkv_ctx_tensor(c, 2, shape, 0, pe));
    return qkv_sinusoidal_fill(offset, T, d, (*pe)->data);
}

/* The same table transposed, (d,T): channels for Conv1d-layout inputs. */
static qkv_status pos_sinusoidal_body(int64_t T, int64_t d, float *pe)
{
    QKV_NEED(pe, "pos_sinusoidal", "pe");
    if (T <= 0) return qkv_fail(QKV_ERR_ARG, "pos_sinusoidal: T %lld must be positive", (long long)T);
    QKV_TRY(sinusoidal_check(0, T, d));
    if ((uint64_t)T > SIZE_MAX / sizeof(float) / (uint64_t)d)
        return qkv_fail(QKV_ERR_ARG, "pos_sinusoidal: T %lld x d %lld is too large", (long long)T,
                        (long long)d);
    float *td = malloc((size_t)T * (size_t)d * sizeof(float)); // (T,d)
    if (!td) return qkv_fail(QKV_ERR_NOMEM, "pos_sinusoidal: no memory for a (%lld,%lld) table",
                             (long long)T, (long long)d);
    qkv_sinusoidal_fill(0, T, d, td);
    for (int64_t t = 0; t < T; t++)
        for (int64_t k = 0; k < d; k++) pe[k * T + t] = td[t * d + k];
    free(td);
    return QKV_OK;
}

qkv_status qkv_pos_sinusoidal(int64_t T, int64_t d, float *pe)
{
    return qkv_fail_in("pos_sinusoidal", pos_sinusoidal_body(T, d, pe));
}

/* ---- binary (the lecture's positional channels) ----------------------------- */

int64_t qkv_pos_binary_channels(int64_t T)
{
    int64_t c = 0; /* ceil(log2(T)), in unsigned arithmetic so T near 2^63 ends */
    while (c < 63 && ((uint64_t)1 << c) < (uint64_t)(T > 0 ? T : 0)) c++;
    return c;
}

qkv_status qkv_pos_binary(int64_t T, float *pe)
{
    QKV_NEED(pe, "pos_binary", "pe");
    if (T <= 0 || T > ((int64_t)1 << 40))
        return qkv_fail(QKV_ERR_ARG, "pos_binary: T %lld outside 1..2^40", (long long)T);
    int64_t c = qkv_pos_binary_channels(T);
    for (int64_t k = 0; k < c; k++)
        for (int64_t t = 0; t < T; t++) pe[k * T + t] = (float)((t >> k) & 1); // pe is (c,T)
    return QKV_OK;
}

/* ---- adding a position table -------------------------------------------- */

/* x viewed as (A,T,B,d): (N,T,d) batch-first is A = N, B = 1; (T,N,d) is
 * A = 1, B = N; (T,d) is A = B = 1. */
typedef struct {
    int64_t A, T, B, d;
} seq_shape;

static qkv_status seq_layout(const char *fn, const qkv_tensor *x, int batch_first, seq_shape *g)
{
    char bx[64];
    if (x->ndim != 2 && x->ndim != 3)
        return qkv_fail(QKV_ERR_SHAPE, "%s: x %s has %d dims, expected %s or (T,d)", fn,
                        qkv_shape_str(x, bx, sizeof bx), x->ndim, batch_first ? "(N,T,d)" : "(T,N,d)");
    const int64_t *s = x->shape;
    if (x->ndim == 2)
        *g = (seq_shape){1, s[0], 1, s[1]};
    else if (batch_first)
        *g = (seq_shape){s[0], s[1], 1, s[2]};
    else
        *g = (seq_shape){1, s[0], s[1], s[2]};
    return QKV_OK;
}

typedef struct {
    qkv_tensor *x, *pe, *y;
    int64_t offset;
    seq_shape g;
} addpos_saved;

/* Differentiates y[a,t,b,k] = x[a,t,b,k] + pe[offset+t,k]:
 * dx += dy, dpe[offset+t,k] += sum_{a,b} dy[a,t,b,k]. */
static qkv_status addpos_backward(qkv_ctx *c, void *p)
{
    addpos_saved *s = p;
    const float *dy = s->y->grad; // (A,T,B,d)
    if (!dy) return QKV_OK;
    qkv_arena *ar = qkv_ctx_arena(c);
    seq_shape g = s->g;
    int64_t n = g.A * g.T * g.B * g.d;
    if (s->x->requires_grad) {
        float *dx = qkv_tensor_grad(ar, s->x); // (A,T,B,d)
        if (!dx) return QKV_ERR_NOMEM;
        for (int64_t i = 0; i < n; i++) dx[i] += dy[i];
    }
    if (s->pe->requires_grad) {
        float *dpe = qkv_tensor_grad(ar, s->pe); // (P,d)
        if (!dpe) return QKV_ERR_NOMEM;
        for (int64_t a = 0; a < g.A; a++)
            for (int64_t t = 0; t < g.T; t++)
                for (int64_t b = 0; b < g.B; b++) {
                    const float *row = dy + ((a * g.T + t) * g.B + b) * g.d; // (d)
                    float *prow = dpe + (s->offset + t) * g.d;               // (d)
                    for (int64_t k = 0; k < g.d; k++) prow[k] += row[k];
                }
    }
    return QKV_OK;
}

qkv_status qkv_add_positional(qkv_ctx *c, qkv_tensor *x, qkv_tensor *pe, int64_t offset,
                              int batch_first, qkv_tensor **y)
{
    const char *fn = "add_positional";
    QKV_NEED_OUT_CTX(y, c, fn, "y");
    QKV_NEED_F32(x, fn, "x");
    QKV_NEED_F32(pe, fn, "pe");
    seq_shape g = {0, 0, 0, 0};
    QKV_TRY(seq_layout(fn, x, batch_first, &g));
    char bx[64], bp[64];
    if (pe->ndim != 2 || pe->shape[1] != g.d)
        return qkv_fail(QKV_ERR_SHAPE, "%s: pe %s, expected (P,%lld) to match x %s", fn,
                        qkv_shape_str(pe, bp, sizeof bp), (long long)g.d,
                        qkv_shape_str(x, bx, sizeof bx));
    if (offset < 0 || offset > pe->shape[0] - g.T)
        return qkv_fail(QKV_ERR_SHAPE, "%s: positions [%lld,%lld) of x %s are outside pe %s "
                        "(offset %lld)", fn, (long long)offset, (long long)(offset + g.T),
                        qkv_shape_str(x, bx, sizeof bx), qkv_shape_str(pe, bp, sizeof bp),
                        (long long)offset);
    qkv_tensor *in[2] = {x, pe};
    int rec = qkv_ctx_recording(c, in, 2);
    QKV_TRY(qkv_ctx_tensor(c, x->ndim, x->shape, rec, y));
    const float *xd = x->data; // (A,T,B,d)
    float *yd = (*y)->data;    // (A,T,B,d)
    for (int64_t a = 0; a < g.A; a++)
        for (int64_t t = 0; t < g.T; t++) {
            const float *prow = pe->data + (offset + t) * g.d; // (d)
            for (int64_t b = 0; b < g.B; b++) {
                int64_t at = ((a * g.T + t) * g.B + b) * g.d;
                for (int64_t k = 0; k < g.d; k++) yd[at + k] = xd[at + k] + prow[k];
            }
        }
    if (!rec) return QKV_OK;
    addpos_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (addpos_saved){x, pe, *y, offset, g};
    return qkv_ctx_record(c, addpos_backward, s);
}

/* ---- learned positions ------------------------------------------------------ */

typedef struct {
    qkv_tensor *w, *y;
    int64_t offset, T, d;
} positions_saved;

/* Differentiates y[t] = weight[offset+t]: dweight[offset+t] += dy[t]. */
static qkv_status positions_backward(qkv_ctx *c, void *p)
{
    positions_saved *s = p;
    QKV_BACKWARD_ONE(c, s->y, s->w, dy, dw); // dy (T,d), dw (P,d)
    dw += s->offset * s->d;
    for (int64_t i = 0; i < s->T * s->d; i++) dw[i] += dy[i];
    return QKV_OK;
}

qkv_status qkv_positions(qkv_ctx *c, qkv_tensor *weight, int64_t offset, int64_t T,
                         qkv_tensor **y)
{
    QKV_NEED_OUT_CTX(y, c, "positions", "y");
    QKV_NEED_F32(weight, "positions", "weight");
    char bw[64];
    if (weight->ndim != 2)
        return qkv_fail(QKV_ERR_SHAPE, "positions: weight %s has %d dims, expected 2 (max_len,d)",
                        qkv_shape_str(weight, bw, sizeof bw), weight->ndim);
    if (T < 0 || offset < 0 || offset > weight->shape[0] - T)
        return qkv_fail(QKV_ERR_SHAPE, "positions: %lld rows from row %lld (offset %lld, T %lld) "
                        "are outside weight %s", (long long)T, (long long)offset, (long long)offset,
                        (long long)T, qkv_shape_str(weight, bw, sizeof bw));
    int64_t d = weight->shape[1], shape[2] = {T, d};
    qkv_tensor *in[1] = {weight};
    int rec = qkv_ctx_recording(c, in, 1);
    QKV_TRY(qkv_ctx_tensor(c, 2, shape, rec, y));
    if (T * d > 0)
        memcpy((*y)->data, weight->data + offset * d, (size_t)(T * d) * sizeof(float));
    if (!rec) return QKV_OK;
    positions_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (positions_saved){weight, *y, offset, T, d};
    return qkv_ctx_record(c, positions_backward, s);
}

/* ---- scale ------------------------------------------------------------------ */

typedef struct {
    qkv_tensor *x, *y;
    float alpha;
    int64_t n;
} scale_saved;

/* Differentiates y = alpha x: dx += alpha dy. */
static qkv_status scale_backward(qkv_ctx *c, void *p)
{
    scale_saved *s = p;
    QKV_BACKWARD_ONE(c, s->y, s->x, dy, dx); // (n) each
    for (int64_t i = 0; i < s->n; i++) dx[i] += s->alpha * dy[i];
    return QKV_OK;
}

qkv_status qkv_scale(qkv_ctx *c, qkv_tensor *x, float alpha, qkv_tensor **y)
{
    QKV_NEED_OUT_CTX(y, c, "scale", "y");
    QKV_NEED_F32(x, "scale", "x");
    if (!isfinite(alpha)) return qkv_fail(QKV_ERR_ARG, "scale: alpha %g is not finite", (double)alpha);
    qkv_tensor *in[1] = {x};
    int rec = qkv_ctx_recording(c, in, 1);
    QKV_TRY(qkv_ctx_tensor(c, x->ndim, x->shape, rec, y));
    int64_t n = qkv_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) (*y)->data[i] = alpha * x->data[i];
    if (!rec) return QKV_OK;
    scale_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (scale_saved){x, *y, alpha, n};
    return qkv_ctx_record(c, scale_backward, s);
}

/* ---- index channel ----------------------------------------------------------- */

/* x as (O,ia), y as (O,ia+ib): y[o] = (x[o], the ib index values of o). */
typedef struct {
    qkv_tensor *x, *y;
    int64_t O, ia, ib;
} catpos_saved;

/* Differentiates y[o, :ia] = x[o]: dx[o] += dy[o, :ia] (the index channel
 * is a constant). */
static qkv_status catpos_backward(qkv_ctx *c, void *p)
{
    catpos_saved *s = p;
    QKV_BACKWARD_ONE(c, s->y, s->x, dy, dx); // dy (O,ia+ib), dx (O,ia)
    for (int64_t o = 0; o < s->O; o++)
        for (int64_t i = 0; i < s->ia; i++) dx[o * s->ia + i] += dy[o * (s->ia + s->ib) + i];
    return QKV_OK;
}

qkv_status qkv_cat_position(qkv_ctx *c, qkv_tensor *x, qkv_posidx kind, int channels_first,
                            qkv_tensor **y)
{
    QKV_NEED_OUT_CTX(y, c, "cat_position", "y");
    QKV_NEED_F32(x, "cat_position", "x");
    char bx[64];
    if (x->ndim != 2 && x->ndim != 3)
        return qkv_fail(QKV_ERR_SHAPE, "cat_position: x %s has %d dims, expected %s", qkv_shape_str(x, bx, sizeof bx),
                        x->ndim, channels_first ? "(N,C,T) or (C,T)" : "(N,T,C) or (T,C)");
    if (kind != QKV_POSIDX_UNIT && kind != QKV_POSIDX_RAW)
        return qkv_fail(QKV_ERR_ARG, "cat_position: kind %d is neither QKV_POSIDX_UNIT nor QKV_POSIDX_RAW", (int)kind);
    int nd = x->ndim, cdim = channels_first ? nd - 2 : nd - 1;
    int64_t N = nd == 3 ? x->shape[0] : 1, T = x->shape[channels_first ? nd - 1 : nd - 2];
    int64_t C = x->shape[cdim], shape[3];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)nd);
    shape[cdim] = C + 1;
    qkv_tensor *in[1] = {x};
    int rec = qkv_ctx_recording(c, in, 1);
    QKV_TRY(qkv_ctx_tensor(c, nd, shape, rec, y));
    /* channels last: O = N*T rows of C, one index each; first: O = N rows of C*T, T indices */
    int64_t O = channels_first ? N : N * T, ia = channels_first ? C * T : C, ib = channels_first ? T : 1;
    float *yd = (*y)->data; // (O,ia+ib)
    for (int64_t o = 0; o < O; o++) {
        if (ia) memcpy(yd + o * (ia + ib), x->data + o * ia, (size_t)ia * sizeof(float));
        for (int64_t k = 0; k < ib; k++) {
            int64_t t = channels_first ? k : o % T;
            yd[o * (ia + ib) + ia + k] = kind == QKV_POSIDX_RAW ? (float)t : (float)((double)t / (double)T);
        }
    }
    if (!rec) return QKV_OK;
    catpos_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (catpos_saved){x, *y, O, ia, ib};
    return qkv_ctx_record(c, catpos_backward, s);
}

/* ---- RoPE --------------------------------------------------------------------- */

qkv_rope_opts qkv_rope_opts_default(void)
{
    return (qkv_rope_opts){QKV_ROPE_INTERLEAVED, 10000.0f, 0, 0, NULL};
}

/* x as (rows,T,hd), rows = N * heads (N the positions' rows); the first r
 * dims of each row rotate in r/2 pairs. */
typedef struct {
    int64_t rows, T, hd, r, heads;
    int interleaved;
} rope_geom;

/* The cos and sin tables (R,r/2) and, per (n,t), the table row of its
 * position: tab (N,T), or NULL for row t. */
typedef struct {
    const float *cs, *sn;
    const int64_t *tab;
} rope_tables;

typedef struct {
    qkv_tensor *x, *y;
    rope_geom g;
    rope_tables tb;
} rope_saved;

/* One row's r/2 pairs (x[i], x[i+r/2]), rotate_half's: contiguous halves,
 * a loop the compiler vectorises. */
static void rope_pairs_half(const float *restrict x, float *restrict y, const float *ct,
                            const float *st, int64_t half, float sign, int accumulate)
{
    const float *a = x, *b = x + half;
    float *ya = y, *yb = y + half;
    if (accumulate)
        for (int64_t i = 0; i < half; i++) {
            float s = sign * st[i];
            ya[i] += a[i] * ct[i] - b[i] * s;
            yb[i] += a[i] * s + b[i] * ct[i];
        }
    else
        for (int64_t i = 0; i < half; i++) {
            float s = sign * st[i];
            ya[i] = a[i] * ct[i] - b[i] * s;
            yb[i] = a[i] * s + b[i] * ct[i];
        }
}

/* One row's r/2 pairs (x[2i], x[2i+1]), RoFormer's. */
static void rope_pairs_interleaved(const float *restrict x, float *restrict y, const float *ct,
                                   const float *st, int64_t half, float sign, int accumulate)
{
    for (int64_t i = 0; i < half; i++) {
        float a = x[2 * i], b = x[2 * i + 1], s = sign * st[i];
        float ya = a * ct[i] - b * s, yb = a * s + b * ct[i];
        y[2 * i] = accumulate ? y[2 * i] + ya : ya;
        y[2 * i + 1] = accumulate ? y[2 * i + 1] + yb : yb;
    }
}

/* out = R(sign * angle) in, or out += it when accumulate; in, out (rows,T,hd).
 * sign -1 is the inverse rotation, the backward. */
static void rope_rotate(const float *in, float *out, int accumulate, float sign,
                        const rope_geom *g, const rope_tables *tb)
{
    int64_t half = g->r / 2;
    for (int64_t row = 0; row < g->rows; row++)
        for (int64_t t = 0; t < g->T; t++) {
            const float *x = in + (row * g->T + t) * g->hd; // (hd)
            float *y = out + (row * g->T + t) * g->hd;      // (hd)
            int64_t at = tb->tab ? tb->tab[(row / g->heads) * g->T + t] : t;
            const float *ct = tb->cs + at * half, *st = tb->sn + at * half; // (r/2)
            if (g->interleaved)
                rope_pairs_interleaved(x, y, ct, st, half, sign, accumulate);
            else
                rope_pairs_half(x, y, ct, st, half, sign, accumulate);
            for (int64_t k = g->r; k < g->hd; k++) y[k] = accumulate ? y[k] + x[k] : x[k];
        }
}

/* Differentiates y = R x (R orthogonal, block-diagonal in 2x2 rotations):
 * dx += R^T dy, the rotation by minus the angle. */
static qkv_status rope_backward(qkv_ctx *c, void *p)
{
    rope_saved *s = p;
    QKV_BACKWARD_ONE(c, s->y, s->x, dy, dx); // (rows,T,hd) each
    rope_rotate(dy, dx, 1, -1.0f, &s->g, &s->tb);
    return QKV_OK;
}

/* positions: I64 (N,T), N = x's first dim ((T,hd): 1), values in [0, 2^53]
 * (a double angle tells them apart), offset 0. */
static qkv_status rope_check_positions(const qkv_tensor *x, const qkv_rope_opts *o, int64_t N,
                                       int64_t T)
{
    const qkv_tensor *pos = o->positions;
    char bx[64], bp[64];
    if (pos->dtype != QKV_I64 || !pos->idx)
        return qkv_fail(QKV_ERR_DTYPE, "rope: positions must be I64");
    if (pos->ndim != 2 || pos->shape[0] != N || pos->shape[1] != T)
        return qkv_fail(QKV_ERR_SHAPE, "rope: positions %s, expected (N,T) = (%lld,%lld) for x %s",
                        qkv_shape_str(pos, bp, sizeof bp), (long long)N, (long long)T,
                        qkv_shape_str(x, bx, sizeof bx));
    if (o->offset)
        return qkv_fail(QKV_ERR_ARG, "rope: offset %lld with positions: give one or the other",
                        (long long)o->offset);
    for (int64_t i = 0; i < N * T; i++)
        if (pos->idx[i] < 0 || pos->idx[i] > ((int64_t)1 << 53))
            return qkv_fail(QKV_ERR_ARG, "rope: positions[%lld,%lld] = %lld is outside [0, 2^53]",
                            (long long)(i / T), (long long)(i % T), (long long)pos->idx[i]);
    return QKV_OK;
}

static qkv_status rope_check(const qkv_tensor *x, const qkv_rope_opts *o, rope_geom *g)
{
    char bx[64];
    if (x->ndim < 2)
        return qkv_fail(QKV_ERR_SHAPE, "rope: x %s has %d dims, expected (N,H,T,hd), (B,T,hd) or (T,hd)",
                        qkv_shape_str(x, bx, sizeof bx), x->ndim);
    if (o->layout != QKV_ROPE_INTERLEAVED && o->layout != QKV_ROPE_HALF)
        return qkv_fail(QKV_ERR_ARG, "rope: layout %d is neither QKV_ROPE_INTERLEAVED nor QKV_ROPE_HALF",
                        (int)o->layout);
    if (!(o->base > 0.0f) || !isfinite(o->base))
        return qkv_fail(QKV_ERR_ARG, "rope: base %g must be positive and finite", (double)o->base);
    if (o->offset < 0)
        return qkv_fail(QKV_ERR_ARG, "rope: offset %lld must be >= 0", (long long)o->offset);
    int64_t T = x->shape[x->ndim - 2], hd = x->shape[x->ndim - 1];
    int64_t r = o->rot_dim ? o->rot_dim : hd;
    if (r < 0 || r % 2 || r > hd)
        return qkv_fail(QKV_ERR_SHAPE, "rope: rotary dims %lld (rot_dim %lld) of x %s must be even "
                        "and at most head_dim %lld", (long long)r, (long long)o->rot_dim,
                        qkv_shape_str(x, bx, sizeof bx), (long long)hd);
    int64_t n = qkv_tensor_numel(x), N = x->ndim > 2 ? x->shape[0] : 1;
    if (o->positions) QKV_TRY(rope_check_positions(x, o, N, T));
    int64_t rows = T * hd != 0 ? n / (T * hd) : 0;
    *g = (rope_geom){rows, T, hd, r, N ? rows / N : 1, o->layout == QKV_ROPE_INTERLEAVED};
    return QKV_OK;
}

/* cos and sin of p_j * base^(-2i/r) in double, tables (R,r/2): p_j =
 * offset + j, or pos[j] when pos is given. */
static void rope_fill(const rope_geom *g, double base, int64_t R, int64_t offset,
                      const int64_t *pos, float *cs, float *sn)
{
    int64_t half = g->r / 2;
    for (int64_t i = 0; i < half; i++) {
        double inv_freq = pow(base, -2.0 * (double)i / (double)g->r);
        for (int64_t j = 0; j < R; j++) {
            double angle = (double)(pos ? pos[j] : offset + j) * inv_freq;
            cs[j * half + i] = (float)cos(angle);
            sn[j * half + i] = (float)sin(angle);
        }
    }
}

/* The tables from the ctx's arena. Without positions: rows offset + t.
 * With them: rows 0..max position when that is no more than the N*T
 * entries (the usual case: each angle computed once), else one row per
 * (n,t). */
static qkv_status rope_build(qkv_ctx *c, const rope_geom *g, const qkv_rope_opts *o, rope_tables *tb)
{
    int64_t R = g->T, NT = 0, most = 0;
    const int64_t *pos = o->positions ? o->positions->idx : NULL; // (N,T)
    int64_t *tab = NULL;
    if (pos) {
        NT = qkv_tensor_numel(o->positions);
        for (int64_t i = 0; i < NT; i++) most = pos[i] > most ? pos[i] : most;
        tab = qkv_ctx_alloc(c, (size_t)NT * sizeof *tab + 1); // (N,T)
        if (!tab) return QKV_ERR_NOMEM;
        int dense = most < NT;
        R = dense ? most + 1 : NT;
        for (int64_t i = 0; i < NT; i++) tab[i] = dense ? pos[i] : i;
        if (dense) pos = NULL; /* row j is position j */
    }
    size_t table = (size_t)(R * (g->r / 2)) * sizeof(float) + 1;
    float *cs = qkv_ctx_alloc(c, table), *sn = qkv_ctx_alloc(c, table); // (R,r/2) each
    if (!cs || !sn) return QKV_ERR_NOMEM;
    rope_fill(g, (double)o->base, R, o->offset, pos, cs, sn);
    *tb = (rope_tables){cs, sn, tab};
    return QKV_OK;
}

qkv_status qkv_rope(qkv_ctx *c, qkv_tensor *x, const qkv_rope_opts *opts, qkv_tensor **y)
{
    QKV_NEED_OUT_CTX(y, c, "rope", "y");
    QKV_NEED_F32(x, "rope", "x");
    qkv_rope_opts o = opts ? *opts : qkv_rope_opts_default();
    rope_geom g;
    QKV_TRY(rope_check(x, &o, &g));
    qkv_tensor *in[1] = {x};
    int rec = qkv_ctx_recording(c, in, 1);
    QKV_TRY(qkv_ctx_tensor(c, x->ndim, x->shape, rec, y));
    rope_tables tb;
    QKV_TRY(rope_build(c, &g, &o, &tb));
    rope_rotate(x->data, (*y)->data, 0, 1.0f, &g, &tb);
    if (!rec) return QKV_OK;
    rope_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (rope_saved){x, *y, g, tb};
    return qkv_ctx_record(c, rope_backward, s);
}

/* ---- ALiBi -------------------------------------------------------------------- */

/* The reference's get_slopes_power_of_2(n), element i, same operations:
 * start = 2^(-2^-(log2(n) - 3)), slope_i = start * start^i. */
static double alibi_pow2_slope(int64_t n, int64_t i)
{
    double start = pow(2.0, -pow(2.0, -(log2((double)n) - 3.0)));
    return start * pow(start, (double)i);
}

/* Slope of head h of H: those of the largest power of two p2 <= H first,
 * then get_slopes(2 p2)[0::2], i.e. its elements 0, 2, 4, ... */
static float alibi_slope(int64_t H, int64_t h)
{
    int64_t p2 = 1;
    while (p2 <= H / 2) p2 *= 2;
    return (float)(h < p2 ? alibi_pow2_slope(p2, h) : alibi_pow2_slope(2 * p2, 2 * (h - p2)));
}

qkv_status qkv_alibi_slopes(int64_t num_heads, float *slopes)
{
    if (num_heads < 1)
        return qkv_fail(QKV_ERR_ARG, "alibi_slopes: num_heads %lld must be positive", (long long)num_heads);
    QKV_NEED(slopes, "alibi_slopes", "slopes");
    for (int64_t h = 0; h < num_heads; h++) slopes[h] = alibi_slope(num_heads, h);
    return QKV_OK;
}

static qkv_status alibi_check(int64_t N, int64_t H, int64_t L, int64_t S, qkv_alibi_kind kind)
{
    if (N < 1 || H < 1 || L < 1 || S < 1)
        return qkv_fail(QKV_ERR_ARG, "alibi_bias: N %lld, H %lld, L %lld and S %lld must be positive",
                        (long long)N, (long long)H, (long long)L, (long long)S);
    if (kind != QKV_ALIBI_CAUSAL && kind != QKV_ALIBI_SYMMETRIC)
        return qkv_fail(QKV_ERR_ARG, "alibi_bias: kind %d is neither QKV_ALIBI_CAUSAL nor QKV_ALIBI_SYMMETRIC",
                        (int)kind);
    /* N*H*L*S floats must be addressable: the product is checked step by
     * step, so it cannot wrap (the fill writes that many). */
    const int64_t dims[4] = {N, H, L, S}, most = INT64_MAX / (int64_t)sizeof(float);
    int64_t n = 1;
    for (int i = 0; i < 4; i++) {
        if (dims[i] > most / n)
            return qkv_fail(QKV_ERR_ARG, "alibi_bias: N %lld x H %lld x L %lld x S %lld floats "
                            "do not fit in memory", (long long)N, (long long)H, (long long)L,
                            (long long)S);
        n *= dims[i];
    }
    return QKV_OK;
}

/* One head's (L,S) bias: -m (i' - j) or -m |i' - j|, i' = i + S - L. */
static void alibi_head(float m, int64_t L, int64_t S, qkv_alibi_kind kind, float *b)
{
    for (int64_t i = 0; i < L; i++)
        for (int64_t j = 0; j < S; j++) {
            double dist = (double)(i + S - L - j);
            if (kind == QKV_ALIBI_SYMMETRIC) dist = fabs(dist);
            b[i * S + j] = (float)(-(double)m * dist);
        }
}

static qkv_status alibi_bias_fill_body(int64_t N, int64_t H, int64_t L, int64_t S, qkv_alibi_kind kind,
                                       float *bias)
{
    QKV_TRY(alibi_check(N, H, L, S, kind));
    QKV_NEED(bias, "alibi_bias", "bias");
    for (int64_t h = 0; h < H; h++) alibi_head(alibi_slope(H, h), L, S, kind, bias + h * L * S);
    for (int64_t n = 1; n < N; n++) /* the same for every batch entry */
        memcpy(bias + n * H * L * S, bias, (size_t)(H * L * S) * sizeof(float));
    return QKV_OK;
}

qkv_status qkv_alibi_bias_fill(int64_t N, int64_t H, int64_t L, int64_t S, qkv_alibi_kind kind,
                               float *bias)
{
    return qkv_fail_in("alibi_bias_fill", alibi_bias_fill_body(N, H, L, S, kind, bias));
}

qkv_status qkv_alibi_bias(qkv_ctx *c, int64_t N, int64_t H, int64_t L, int64_t S,
                          qkv_alibi_kind kind, qkv_tensor **bias)
{
    QKV_NEED_OUT_CTX(bias, c, "alibi_bias", "bias");
    QKV_TRY(alibi_check(N, H, L, S, kind));
    int64_t shape[3] = {N * H, L, S};
    QKV_TRY(qkv_ctx_tensor(c, 3, shape, 0, bias));
    return qkv_alibi_bias_fill(N, H, L, S, kind, (*bias)->data);
}

/* ---- modules ------------------------------------------------------------------ */

static qkv_status sinusoidal_forward(qkv_ctx *c, qkv_module *base, qkv_tensor *x, qkv_tensor **y)
{
    qkv_nn_sinusoidal *m = (qkv_nn_sinusoidal *)base;
    const char *fn = "nn_sinusoidal";
    QKV_NEED(y, fn, "y");
    *y = NULL;
    QKV_NEED_F32(x, fn, "x");
    seq_shape g = {0, 0, 0, 0};
    QKV_TRY(seq_layout(fn, x, m->batch_first, &g));
    char bx[64];
    if (g.d != m->d_model)
        return qkv_fail(QKV_ERR_SHAPE, "%s: x %s, expected d_model %lld in the last dim", fn,
                        qkv_shape_str(x, bx, sizeof bx), (long long)m->d_model);
    if (m->offset < 0 || m->offset > m->max_len - g.T)
        return qkv_fail(QKV_ERR_SHAPE, "%s: positions [%lld,%lld) of x %s exceed max_len %lld", fn,
                        (long long)m->offset, (long long)(m->offset + g.T),
                        qkv_shape_str(x, bx, sizeof bx), (long long)m->max_len);
    qkv_tensor *pe, *sum;
    QKV_TRY(qkv_sinusoidal(c, m->offset, g.T, g.d, &pe));
    QKV_TRY(qkv_add_positional(c, x, pe, 0, m->batch_first, &sum));
    return qkv_dropout(c, sum, m->dropout, y);
}

qkv_status qkv_nn_sinusoidal_init(qkv_nn_sinusoidal *m, int64_t d_model, float dropout,
                                  int64_t max_len, int batch_first)
{
    QKV_NEED(m, "nn_sinusoidal_init", "module");
    if (d_model < 2 || d_model % 2 || max_len < 1)
        return qkv_fail(QKV_ERR_ARG, "nn_sinusoidal_init: d_model %lld must be even and positive, "
                        "max_len %lld positive", (long long)d_model, (long long)max_len);
    if (!(dropout >= 0.0f && dropout <= 1.0f))
        return qkv_fail(QKV_ERR_ARG, "nn_sinusoidal_init: dropout %g must be in [0,1]", (double)dropout);
    *m = (qkv_nn_sinusoidal){{"PositionalEncoding", sinusoidal_forward}, d_model, max_len, 0,
                             dropout, batch_first != 0};
    return QKV_OK;
}

static qkv_status learned_pos_forward(qkv_ctx *c, qkv_module *base, qkv_tensor *x, qkv_tensor **y)
{
    qkv_nn_learned_pos *m = (qkv_nn_learned_pos *)base;
    return qkv_add_positional(c, x, m->weight, m->offset, m->batch_first, y);
}

static qkv_status nn_learned_pos_init_body(qkv_nn_learned_pos *m, int64_t max_len, int64_t d_model,
                                           int batch_first, qkv_params *p, const char *prefix,
                                           qkv_rng *rng)
{
    const char *fn = "nn_learned_pos_init";
    QKV_TRY(qkv_nn_init_args(fn, m, p, rng, 1));
    if (max_len < 1 || d_model < 1)
        return qkv_fail(QKV_ERR_ARG, "%s: max_len %lld and d_model %lld must be positive", fn,
                        (long long)max_len, (long long)d_model);
    memset(m, 0, sizeof *m);
    int64_t ws[2] = {max_len, d_model};
    QKV_TRY(qkv_params_add(p, prefix, "weight", 2, ws, &m->weight));
    qkv_rng_fill_normal(rng, m->weight->data, max_len * d_model, 0.0f, 1.0f);
    m->max_len = max_len;
    m->d_model = d_model;
    m->batch_first = batch_first != 0;
    m->base = (qkv_module){"LearnedPositionalEmbedding", learned_pos_forward};
    return QKV_OK;
}

qkv_status qkv_nn_learned_pos_init(qkv_nn_learned_pos *m, int64_t max_len, int64_t d_model,
                                   int batch_first, qkv_params *p, const char *prefix,
                                   qkv_rng *rng)
{
    return qkv_fail_in("nn_learned_pos_init", nn_learned_pos_init_body(m, max_len, d_model, batch_first, p, prefix, rng));
}

static qkv_status token_embedding_forward(qkv_ctx *c, qkv_module *base, qkv_tensor *x,
                                          qkv_tensor **y)
{
    qkv_nn_token_embedding *m = (qkv_nn_token_embedding *)base;
    QKV_NEED(y, "nn_token_embedding", "y");
    *y = NULL;
    qkv_tensor *e;
    QKV_TRY(qkv_embedding(c, m->emb.weight, x, m->emb.padding_idx, &e));
    if (m->scale == 1.0f) {
        *y = e;
        return QKV_OK;
    }
    return qkv_scale(c, e, m->scale, y);
}

static qkv_status nn_token_embedding_init_body(qkv_nn_token_embedding *m, int64_t num_embeddings,
                                               int64_t d_model, int64_t padding_idx, int scaled,
                                               qkv_params *p, const char *prefix, qkv_rng *rng)
{
    QKV_NEED(m, "nn_token_embedding_init", "module");
    qkv_nn_embedding emb;
    QKV_TRY(qkv_nn_embedding_init(&emb, num_embeddings, d_model, padding_idx, p, prefix, rng));
    m->emb = emb;
    m->scale = scaled ? (float)sqrt((double)d_model) : 1.0f;
    m->base = (qkv_module){"TokenEmbedding", token_embedding_forward};
    return QKV_OK;
}

qkv_status qkv_nn_token_embedding_init(qkv_nn_token_embedding *m, int64_t num_embeddings,
                                       int64_t d_model, int64_t padding_idx, int scaled,
                                       qkv_params *p, const char *prefix, qkv_rng *rng)
{
    return qkv_fail_in("nn_token_embedding_init", nn_token_embedding_init_body(m, num_embeddings, d_model, padding_idx, scaled, p, prefix, rng));
}
