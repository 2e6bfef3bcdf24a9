/* score.c: the score functions of seq2seq attention (Luong et al. 2015,
 * Bahdanau et al. 2015): how well a decoder state s (a query) matches each
 * encoder state h (a key).
 *
 *   dot           s . h
 *   scaled dot    s . h / sqrt(Dq)
 *   cosine        s . h / (|s| |h|), 0 when |s| = 0 or |h| = 0
 *   general       s^T W_a h                  W_a (Dq,Dk)
 *   reduced rank  (U_a s) . (V_a h)          U_a (r,Dq), V_a (r,Dk)
 *   additive      v_a^T tanh(W_a h + V_a s)  W_a (r,Dk), V_a (r,Dq), v_a (r)
 *
 * Each kind is a short composition of tape ops: projections by qkv_linear,
 * then either the batched product q k^T (qkv_bmm_ex with b transposed), or
 * for cosine the product of row-normalised q and k, or for additive one
 * coarse op that sums v_a . tanh(.) over r and differentiates through tanh
 * itself. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "core/internal.h"
#include "kernels/rows.h"
#include "attention/score.h"
#include "nn/bmm.h"

#define KIND_ONE(NAME, name, same_dims, rank, params) +1
enum { N_KINDS = 0 QKV_SCORE_KINDS(KIND_ONE) };
#undef KIND_ONE

/* ---- row L2 normalisation (for cosine) -------------------------------------
 *
 * y = x / |x| per row of the last dim. The convention for a zero row: y = 0
 * and dx = 0. Cosine is normalise(q) . normalise(k), so a zero query or key
 * gives a score of 0 with a zero gradient, where s.h/(|s||h|) is 0/0. */

typedef struct {
    qkv_tensor *x, *y;
    double *norm; // (rows)
    int64_t rows, D;
} l2n_saved;

/* Differentiates y = x / |x|: dx += (dy - y (y . dy)) / |x|; 0 when |x| = 0. */
static qkv_status l2n_backward(qkv_ctx *c, void *p)
{
    l2n_saved *s = p;
    QKV_BACKWARD_ONE(c, s->y, s->x, dy, dx); // (rows,D) each
    const float *y = s->y->data; // (rows,D)
    int64_t D = s->D;
    for (int64_t r = 0; r < s->rows; r++) {
        if (s->norm[r] == 0) continue;
        const float *yr = y + r * D, *gr = dy + r * D;
        double yg = 0;
        for (int64_t d = 0; d < D; d++) yg += (double)yr[d] * gr[d];
        for (int64_t d = 0; d < D; d++)
            dx[r * D + d] += (float)((gr[d] - yr[d] * yg) / s->norm[r]);
    }
    return QKV_OK;
}

static qkv_status l2_normalize(qkv_ctx *c, qkv_tensor *x, qkv_tensor **y)
{
    int64_t D = x->shape[x->ndim - 1];
    int64_t rows = D ? qkv_tensor_numel(x) / D : 0;
    qkv_tensor *in[1] = {x};
    int rec = qkv_ctx_recording(c, in, 1);
    QKV_TRY(qkv_ctx_tensor(c, x->ndim, x->shape, rec, y));
    double *norm = qkv_ctx_alloc(c, (size_t)(rows ? rows : 1) * sizeof *norm); // (rows)
    if (!norm) return QKV_ERR_NOMEM;
    const float *xd = x->data; // (rows,D)
    float *yd = (*y)->data;    // (rows,D)
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int64_t d = 0; d < D; d++) ss += (double)xd[r * D + d] * xd[r * D + d];
        norm[r] = sqrt(ss);
        if (norm[r] == 0) continue; /* y row stays 0 */
        for (int64_t d = 0; d < D; d++) yd[r * D + d] = (float)(xd[r * D + d] / norm[r]);
    }
    if (!rec) return QKV_OK;
    l2n_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (l2n_saved){x, *y, norm, rows, D};
    return qkv_ctx_record(c, l2n_backward, s);
}

/* ---- the additive combination ----------------------------------------------
 *
 * scores[n,t,s] = sum_k v[k] tanh(vs[n,t,k] + wh[n,s,k]), where vs = V_a s
 * and wh = W_a h come from qkv_linear. When recording, the (N,T,S,r) tanh
 * values are kept for the backward (the same memory PyTorch's autograd
 * keeps for tanh(V_a s + W_a h)), computed by qkv_vec_tanh (tanhf under
 * qkv_reference()). Both directions run the batch entries on
 * OpenMP's threads; each entry's numbers do not depend on the thread count
 * (dv is summed over the entries in order, after). */

typedef struct {
    qkv_tensor *vs, *wh, *v, *y;
    float *u; // (N,T,S,r) the tanh values
    int64_t N, T, S, r;
} additive_saved;

/* Differentiates y[n,t,s] = sum_k v[k] u[n,t,s,k], u = tanh(vs[n,t,k] + wh[n,s,k]):
 * dv[k] += dy u, and with e = dy v[k] (1 - u^2): dvs[n,t,k] += e, dwh[n,s,k] += e. */
static qkv_status additive_backward(qkv_ctx *c, void *p)
{
    additive_saved *s = p;
    const float *dy = s->y->grad; // (N,T,S)
    if (!dy) return QKV_OK;
    qkv_arena *a = qkv_ctx_arena(c);
    float *dvs = s->vs->requires_grad ? qkv_tensor_grad(a, s->vs) : NULL; // (N,T,r)
    float *dwh = s->wh->requires_grad ? qkv_tensor_grad(a, s->wh) : NULL; // (N,S,r)
    float *dv = s->v->requires_grad ? qkv_tensor_grad(a, s->v) : NULL;    // (r)
    if ((s->vs->requires_grad && !dvs) || (s->wh->requires_grad && !dwh) ||
        (s->v->requires_grad && !dv))
        return QKV_ERR_NOMEM;
    int64_t N = s->N, T = s->T, S = s->S, R = s->r;
    qkv_arena_mark mk = qkv_arena_get_mark(a);
    float *dvn = dv ? qkv_arena_alloc(a, (size_t)(N * R) * sizeof(float)) : NULL; // (N,r)
    if (dv && !dvn) return qkv_fail(QKV_ERR_NOMEM, "score_forward: out of memory for the backward");
    const float *v = s->v->data; // (r)
    QKV_PAR_FOR(N * T * S * R >= QKV_PAR_MIN,
        for (int64_t n = 0; n < N; n++)
            for (int64_t t = 0; t < T; t++) {
                float *dvst = dvs ? dvs + (n * T + t) * R : NULL; // (r)
                for (int64_t j = 0; j < S; j++) {
                    float g = dy[(n * T + t) * S + j];
                    const float *u = s->u + ((n * T + t) * S + j) * R; // (r)
                    float *dwhj = dwh ? dwh + (n * S + j) * R : NULL;   // (r)
                    if (dvn)
                        for (int64_t k = 0; k < R; k++) dvn[n * R + k] += g * u[k];
                    for (int64_t k = 0; k < R; k++) {
                        float e = g * v[k] * (1.0f - u[k] * u[k]);
                        if (dvst) dvst[k] += e;
                        if (dwhj) dwhj[k] += e;
                    }
                }
            });
    for (int64_t n = 0; dv && n < N; n++)
        for (int64_t k = 0; k < R; k++) dv[k] += dvn[n * R + k];
    qkv_arena_release(a, mk);
    return QKV_OK;
}

/* vs (N,T,r) or (N,r), wh (N,S,r), v (r) -> y (N,T,S) or (N,S). */
static qkv_status additive_combine(qkv_ctx *c, qkv_tensor *vs, qkv_tensor *wh, qkv_tensor *v,
                                   qkv_tensor **y)
{
    int64_t N = wh->shape[0], S = wh->shape[1], R = wh->shape[2];
    int64_t T = vs->ndim == 3 ? vs->shape[1] : 1;
    int64_t shape3[3] = {N, T, S}, shape2[2] = {N, S};
    qkv_tensor *in[3] = {vs, wh, v};
    int rec = qkv_ctx_recording(c, in, 3);
    QKV_TRY(qkv_ctx_tensor(c, vs->ndim, vs->ndim == 3 ? shape3 : shape2, rec, y));
    float *yd = (*y)->data; // (N,T,S)
    qkv_arena *a = qkv_ctx_arena(c);
    qkv_arena_mark mk = qkv_arena_get_mark(a);
    /* (N,T,S,r) tanh values: kept for the backward when recording, else scratch */
    float *us = qkv_ctx_alloc_uninit(c, (size_t)(N * T * S * R) * sizeof(float)); // written in full below
    if (!us) return QKV_ERR_NOMEM;
    int ref = qkv_reference();
    QKV_PAR_FOR(N * T * S * R >= QKV_PAR_MIN,
        for (int64_t n = 0; n < N; n++)
            for (int64_t t = 0; t < T; t++) {
                const float *vsr = vs->data + (n * T + t) * R; // (r)
                for (int64_t j = 0; j < S; j++) {
                    const float *whr = wh->data + (n * S + j) * R; // (r)
                    float *u = us + ((n * T + t) * S + j) * R;     // (r)
                    for (int64_t k = 0; k < R; k++) u[k] = vsr[k] + whr[k];
                    if (ref)
                        for (int64_t k = 0; k < R; k++) u[k] = tanhf(u[k]);
                    else
                        qkv_vec_tanh(u, u, R);
                    /* sum_k v[k] u[k] in double, 8 partial sums (one chain
                     * of R dependent adds was 2.5% of a seq2seq step) */
                    yd[(n * T + t) * S + j] = (float)qkv_sum_dot_dev(v->data, u, 0.0, R);
                }
            });
    if (!rec) {
        qkv_arena_release(a, mk);
        return QKV_OK;
    }
    additive_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (additive_saved){vs, wh, v, *y, us, N, T, S, R};
    return qkv_ctx_record(c, additive_backward, s);
}

/* ---- init ------------------------------------------------------------------- */

/* A parameter prefix+name of the given shape, drawn from U(-bound, bound). */
static qkv_status add_param(qkv_params *p, const char *prefix, const char *name, int ndim,
                            int64_t d0, int64_t d1, qkv_rng *rng, double bound, qkv_tensor **out)
{
    int64_t shape[2] = {d0, d1};
    QKV_TRY(qkv_params_add(p, prefix, name, ndim, shape, out));
    return qkv_init_uniform(rng, *out, (float)-bound, (float)bound);
}

qkv_status qkv_score_init(qkv_score *sc, qkv_score_kind kind, int64_t query_dim,
                          int64_t key_dim, int64_t rank, qkv_params *p, const char *prefix,
                          qkv_rng *rng)
{
    QKV_NEED(sc, "score_init", "sc");
    memset(sc, 0, sizeof *sc); /* query_dim 0 marks it unusable until the end */
    int k = (int)kind;
    if (!qkv_score_kind_name(k))
        return qkv_fail(QKV_ERR_ARG, "score_init: kind %d is not a qkv_score_kind (0..%d)", k,
                        N_KINDS - 1);
    const char *kn = qkv_score_kind_name(k);
    if (query_dim <= 0 || key_dim <= 0)
        return qkv_fail(QKV_ERR_ARG, "score_init: query_dim %lld and key_dim %lld must be positive",
                        (long long)query_dim, (long long)key_dim);
    if (qkv_score_kind_same_dims(k) && query_dim != key_dim)
        return qkv_fail(QKV_ERR_SHAPE, "score_init: %s needs query_dim == key_dim, got %lld and %lld",
                        kn, (long long)query_dim, (long long)key_dim);
    if (qkv_score_kind_has_rank(k) && rank <= 0)
        return qkv_fail(QKV_ERR_ARG, "score_init: %s needs rank > 0, got %lld", kn, (long long)rank);
    if (qkv_score_kind_has_params(k)) {
        QKV_NEED(p, "score_init", "params");
        QKV_NEED(rng, "score_init", "rng");
    }
    qkv_score s = {kind, query_dim, key_dim, qkv_score_kind_has_rank(k) ? rank : 0, NULL, NULL, NULL, NULL};
    int64_t r = s.rank;
    /* Bounds 1/sqrt(fan_in), fan_in the input dim of each matrix (dim 1). */
    switch (kind) {
    case QKV_SCORE_GENERAL: /* s^T (W_a h): W_a maps h (Dk) to Dq */
        QKV_TRY(add_param(p, prefix, "W_a", 2, query_dim, key_dim, rng, 1.0 / sqrt((double)key_dim), &s.W_a));
        break;
    case QKV_SCORE_REDUCED_RANK:
        QKV_TRY(add_param(p, prefix, "U_a", 2, r, query_dim, rng, 1.0 / sqrt((double)query_dim), &s.U_a));
        QKV_TRY(add_param(p, prefix, "V_a", 2, r, key_dim, rng, 1.0 / sqrt((double)key_dim), &s.V_a));
        break;
    case QKV_SCORE_ADDITIVE:
        QKV_TRY(add_param(p, prefix, "W_a", 2, r, key_dim, rng, 1.0 / sqrt((double)key_dim), &s.W_a));
        QKV_TRY(add_param(p, prefix, "V_a", 2, r, query_dim, rng, 1.0 / sqrt((double)query_dim), &s.V_a));
        QKV_TRY(add_param(p, prefix, "v_a", 1, r, 0, rng, 1.0 / sqrt((double)r), &s.v_a));
        break;
    default: /* dot, scaled dot, cosine: no parameters */
        break;
    }
    *sc = s;
    return QKV_OK;
}

/* ---- forward ---------------------------------------------------------------- */

/* Checks that parameter t of sc exists with shape (d0,d1), or (d0) when d1 < 0. */
static qkv_status check_param(const qkv_tensor *t, const char *name, const char *kn, int64_t d0,
                              int64_t d1)
{
    char bt[64];
    if (!t)
        return qkv_fail(QKV_ERR_ARG, "score_forward: sc->%s is NULL, which %s needs", name, kn);
    int nd = d1 < 0 ? 1 : 2;
    if (t->dtype != QKV_F32)
        return qkv_fail(QKV_ERR_DTYPE, "score_forward: %s is not F32", name);
    if (t->ndim != nd || t->shape[0] != d0 || (nd == 2 && t->shape[1] != d1)) {
        if (nd == 1)
            return qkv_fail(QKV_ERR_SHAPE, "score_forward: %s %s, expected (%lld,)", name,
                            qkv_shape_str(t, bt, sizeof bt), (long long)d0);
        return qkv_fail(QKV_ERR_SHAPE, "score_forward: %s %s, expected (%lld,%lld)", name,
                        qkv_shape_str(t, bt, sizeof bt), (long long)d0, (long long)d1);
    }
    return QKV_OK;
}

/* Checks that sc came from qkv_score_init (or was filled in consistently). */
static qkv_status check_score(const qkv_score *sc)
{
    int k = (int)sc->kind;
    if (!qkv_score_kind_name(k))
        return qkv_fail(QKV_ERR_ARG, "score_forward: sc has kind %d, not a qkv_score_kind "
                                     "(was qkv_score_init called?)", k);
    const char *kn = qkv_score_kind_name(k);
    int64_t Dq = sc->query_dim, Dk = sc->key_dim, r = sc->rank;
    if (Dq <= 0 || Dk <= 0)
        return qkv_fail(QKV_ERR_ARG, "score_forward: sc has query_dim %lld, key_dim %lld "
                                     "(was qkv_score_init called?)", (long long)Dq, (long long)Dk);
    if (qkv_score_kind_same_dims(k) && Dq != Dk)
        return qkv_fail(QKV_ERR_SHAPE, "score_forward: %s needs query_dim == key_dim, sc has %lld and %lld",
                        kn, (long long)Dq, (long long)Dk);
    if (qkv_score_kind_has_rank(k) && r <= 0)
        return qkv_fail(QKV_ERR_ARG, "score_forward: %s needs rank > 0, sc has %lld", kn, (long long)r);
    switch (sc->kind) {
    case QKV_SCORE_GENERAL:
        return check_param(sc->W_a, "W_a", kn, Dq, Dk);
    case QKV_SCORE_REDUCED_RANK:
        QKV_TRY(check_param(sc->U_a, "U_a", kn, r, Dq));
        return check_param(sc->V_a, "V_a", kn, r, Dk);
    case QKV_SCORE_ADDITIVE:
        QKV_TRY(check_param(sc->W_a, "W_a", kn, r, Dk));
        QKV_TRY(check_param(sc->V_a, "V_a", kn, r, Dq));
        return check_param(sc->v_a, "v_a", kn, r, -1);
    default:
        return QKV_OK;
    }
}

qkv_status qkv_score_forward(qkv_ctx *c, const qkv_score *sc, qkv_tensor *query,
                             qkv_tensor *keys, qkv_tensor **scores)
{
    QKV_NEED_OUT_CTX(scores, c, "score_forward", "scores");
    QKV_NEED(sc, "score_forward", "sc");
    QKV_NEED(query, "score_forward", "query");
    QKV_NEED(keys, "score_forward", "keys");
    QKV_TRY(check_score(sc));
    char bq[64], bk[64];
    if (query->dtype != QKV_F32 || keys->dtype != QKV_F32)
        return qkv_fail(QKV_ERR_DTYPE, "score_forward: query and keys must be F32");
    if (query->ndim != 2 && query->ndim != 3)
        return qkv_fail(QKV_ERR_SHAPE, "score_forward: query %s has %d dims, expected (N,T,Dq) or (N,Dq)",
                        qkv_shape_str(query, bq, sizeof bq), query->ndim);
    if (keys->ndim != 3)
        return qkv_fail(QKV_ERR_SHAPE, "score_forward: keys %s has %d dims, expected (N,S,Dk)",
                        qkv_shape_str(keys, bk, sizeof bk), keys->ndim);
    if (query->shape[query->ndim - 1] != sc->query_dim)
        return qkv_fail(QKV_ERR_SHAPE, "score_forward: query %s last dim %lld does not match query_dim %lld",
                        qkv_shape_str(query, bq, sizeof bq), (long long)query->shape[query->ndim - 1],
                        (long long)sc->query_dim);
    if (keys->shape[2] != sc->key_dim)
        return qkv_fail(QKV_ERR_SHAPE, "score_forward: keys %s last dim %lld does not match key_dim %lld",
                        qkv_shape_str(keys, bk, sizeof bk), (long long)keys->shape[2],
                        (long long)sc->key_dim);
    if (query->shape[0] != keys->shape[0])
        return qkv_fail(QKV_ERR_SHAPE, "score_forward: batch sizes differ: query %s, keys %s",
                        qkv_shape_str(query, bq, sizeof bq), qkv_shape_str(keys, bk, sizeof bk));

    qkv_tensor *a, *b; // query side (N,T,D) or (N,D); key side (N,S,D)
    switch (sc->kind) {
    case QKV_SCORE_DOT: /* s . h */
        return qkv_bmm_ex(c, query, keys, 1, 1.0f, scores);
    case QKV_SCORE_SCALED_DOT: /* s . h / sqrt(Dq) */
        return qkv_bmm_ex(c, query, keys, 1, (float)(1.0 / sqrt((double)sc->query_dim)), scores);
    case QKV_SCORE_COSINE: /* (s/|s|) . (h/|h|) */
        QKV_TRY(l2_normalize(c, query, &a));
        QKV_TRY(l2_normalize(c, keys, &b));
        return qkv_bmm_ex(c, a, b, 1, 1.0f, scores);
    case QKV_SCORE_GENERAL: /* s . (W_a h) */
        QKV_TRY(qkv_linear(c, keys, sc->W_a, NULL, &b)); // (N,S,Dq)
        return qkv_bmm_ex(c, query, b, 1, 1.0f, scores);
    case QKV_SCORE_REDUCED_RANK: /* (U_a s) . (V_a h) */
        QKV_TRY(qkv_linear(c, query, sc->U_a, NULL, &a)); // (N,T,r)
        QKV_TRY(qkv_linear(c, keys, sc->V_a, NULL, &b));  // (N,S,r)
        return qkv_bmm_ex(c, a, b, 1, 1.0f, scores);
    case QKV_SCORE_ADDITIVE: /* v_a . tanh(W_a h + V_a s) */
        QKV_TRY(qkv_linear(c, query, sc->V_a, NULL, &a)); // (N,T,r)
        QKV_TRY(qkv_linear(c, keys, sc->W_a, NULL, &b));  // (N,S,r)
        return additive_combine(c, a, b, sc->v_a, scores);
    }
    return qkv_fail(QKV_ERR_ARG, "score_forward: unknown kind %d", (int)sc->kind);
}
