/* rnn.c: torch.nn.GRU and torch.nn.LSTM, forward and backward through time.
 *
 * One tape entry per layer (both directions): the input projection of every
 * time step is one GEMM, x (L*N,In) W_ih^T; each step is then one
 * (N,H) x (H,G*H) GEMM h W_hh^T and the gates' nonlinearities. The backward
 * runs the steps in reverse by hand, keeping the gates' gradients of every
 * step, and ends with three GEMMs for dW_ih, dW_hh and dx. Under
 * qkv_reference() both directions run plain per-element loops (double
 * accumulation, one dot product per gate unit) instead of the GEMMs and
 * libm's expf and tanhf instead of the vectorised ones (kernels/rows.c);
 * the gate formulas are the same. docs/rnn.md has the equations.
 *
 * The GEMMs follow the ctx's precision (qkv_gemm_ctx): in BF16 mode their
 * inputs are rounded to bf16, sums in FP32 (docs/bf16.md), and W_hh is
 * converted once per direction for all the steps' products. The
 * reference path's loops stay FP32 in both modes. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nn/nn_check.h"
#include "kernels/bf16.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_bf16_vnni.h"
#include "kernels/rows.h"

static inline float sigm(float a) { return 1.0f / (1.0f + expf(-a)); }

/* ---- the gate formulas of one (time step, batch entry) -------------------- */

/* GRU, PyTorch's equations; ax = W_ih x + b_ih, ah = W_hh h + b_hh (3H each,
 * gate order r,z,n):
 *   r = sigmoid(ax_r + ah_r), z = sigmoid(ax_z + ah_z),
 *   n = tanh(ax_n + r * ah_n), h' = (1 - z) * n + z * h.
 * Saves r, z, n, ah_n in g (4H). h is updated in place. */
static void gru_cell(int64_t H, const float *ax, const float *ah, float *h, float *g)
{
    for (int64_t j = 0; j < H; j++) {
        float r = sigm(ax[j] + ah[j]);
        float z = sigm(ax[H + j] + ah[H + j]);
        float hn = ah[2 * H + j];
        float n = tanhf(ax[2 * H + j] + r * hn);
        g[j] = r, g[H + j] = z, g[2 * H + j] = n, g[3 * H + j] = hn;
        h[j] = (1.0f - z) * n + z * h[j];
    }
}

/* gru_cell with the nonlinearities as vector calls (kernels/rows.c), for
 * the fast path: the same equations, the same saved values. */
static void gru_cell_vec(int64_t H, const float *ax, const float *ah, float *h, float *g)
{
    for (int64_t j = 0; j < 2 * H; j++) g[j] = ax[j] + ah[j];
    qkv_vec_sigmoid(g, g, 2 * H); /* r, z */
    for (int64_t j = 0; j < H; j++) {
        g[3 * H + j] = ah[2 * H + j];
        g[2 * H + j] = ax[2 * H + j] + g[j] * ah[2 * H + j];
    }
    qkv_vec_tanh(g + 2 * H, g + 2 * H, H); /* n */
    for (int64_t j = 0; j < H; j++) h[j] = (1.0f - g[H + j]) * g[2 * H + j] + g[H + j] * h[j];
}

/* (The cells' backwards take restrict pointers, distinct buffers: without
 * them GCC left these loops scalar, about 4% of a translation step.)
 * Differentiates gru_cell at (hprev, g): dh is dL/dh' on entry and the
 * direct part of dL/dh on return (the W_hh part is added by the caller from
 * dah); dax, dah (3H) are dL/d(ax), dL/d(ah). */
static void gru_cell_backward(int64_t H, const float *restrict hprev, const float *restrict g,
                              float *restrict dh, float *restrict dax, float *restrict dah)
{
    for (int64_t j = 0; j < H; j++) {
        float r = g[j], z = g[H + j], n = g[2 * H + j], hn = g[3 * H + j], d = dh[j];
        float dn = d * (1.0f - z);             // h' = (1 - z) n + z h
        float dz = d * (hprev[j] - n);         //   "
        dh[j] = d * z;                         //   "
        float dan = dn * (1.0f - n * n);       // n = tanh(ax_n + r ah_n)
        float dr = dan * hn;                   //   "
        float dar = dr * r * (1.0f - r);       // r = sigmoid(ax_r + ah_r)
        float daz = dz * z * (1.0f - z);       // z = sigmoid(ax_z + ah_z)
        dax[j] = dar, dax[H + j] = daz, dax[2 * H + j] = dan;
        dah[j] = dar, dah[H + j] = daz, dah[2 * H + j] = dan * r;
    }
}

/* LSTM, PyTorch's equations; a = W_ih x + b_ih + W_hh h + b_hh (4H, gate
 * order i,f,g,o):
 *   i = sigmoid(a_i), f = sigmoid(a_f), g = tanh(a_g), o = sigmoid(a_o),
 *   c' = f * c + i * g, h' = o * tanh(c').
 * Saves i, f, g, o in gs (4H) and tanh(c') in tc (H); h, cs in place. */
static void lstm_cell(int64_t H, const float *ax, const float *ah, float *h, float *cs, float *gs,
                      float *tc)
{
    for (int64_t j = 0; j < H; j++) {
        float i = sigm(ax[j] + ah[j]);
        float f = sigm(ax[H + j] + ah[H + j]);
        float g = tanhf(ax[2 * H + j] + ah[2 * H + j]);
        float o = sigm(ax[3 * H + j] + ah[3 * H + j]);
        float cn = f * cs[j] + i * g, t = tanhf(cn);
        gs[j] = i, gs[H + j] = f, gs[2 * H + j] = g, gs[3 * H + j] = o;
        tc[j] = t;
        cs[j] = cn;
        h[j] = o * t;
    }
}

/* lstm_cell with the nonlinearities as vector calls, for the fast path. */
static void lstm_cell_vec(int64_t H, const float *ax, const float *ah, float *h, float *cs, float *gs,
                          float *tc)
{
    for (int64_t j = 0; j < 4 * H; j++) gs[j] = ax[j] + ah[j];
    qkv_vec_sigmoid(gs, gs, 2 * H);                 /* i, f */
    qkv_vec_tanh(gs + 2 * H, gs + 2 * H, H);        /* g */
    qkv_vec_sigmoid(gs + 3 * H, gs + 3 * H, H);     /* o */
    for (int64_t j = 0; j < H; j++) cs[j] = gs[H + j] * cs[j] + gs[j] * gs[2 * H + j];
    qkv_vec_tanh(tc, cs, H);
    for (int64_t j = 0; j < H; j++) h[j] = gs[3 * H + j] * tc[j];
}

/* Differentiates lstm_cell at (cprev, gs, tc): dh, dc are dL/dh', dL/dc' on
 * entry; on return dh is 0 (all of dL/dh goes through W_hh, added by the
 * caller from da) and dc is dL/dc. da (4H) = dL/d(ax) = dL/d(ah). */
static void lstm_cell_backward(int64_t H, const float *restrict cprev, const float *restrict gs,
                               const float *restrict tc, float *restrict dh, float *restrict dc,
                               float *restrict da)
{
    for (int64_t j = 0; j < H; j++) {
        float i = gs[j], f = gs[H + j], g = gs[2 * H + j], o = gs[3 * H + j], t = tc[j];
        float dct = dc[j] + dh[j] * o * (1.0f - t * t); // h' = o tanh(c')
        float dout = dh[j] * t;                          //   "
        da[j] = dct * g * i * (1.0f - i);                // c' = f c + i g, i = sigmoid(a_i)
        da[H + j] = dct * cprev[j] * f * (1.0f - f);     // c' = f c + i g, f = sigmoid(a_f)
        da[2 * H + j] = dct * i * (1.0f - g * g);        // c' = f c + i g, g = tanh(a_g)
        da[3 * H + j] = dout * o * (1.0f - o);           // o = sigmoid(a_o)
        dc[j] = dct * f;                                 // c' = f c + i g
        dh[j] = 0.0f;
    }
}

/* ---- plain loops for the reference path ---------------------------------- */

/* y (G) = b + W v, W (G,K), double accumulation; b may be NULL. */
static void ref_matvec(int64_t G, int64_t K, const float *W, const float *v, const float *b, float *y)
{
    for (int64_t j = 0; j < G; j++) {
        double s = b ? b[j] : 0.0;
        for (int64_t k = 0; k < K; k++) s += (double)W[j * K + k] * v[k];
        y[j] = (float)s;
    }
}

/* y (K) += W^T d, W (G,K), double accumulation. */
static void ref_matvec_t(int64_t G, int64_t K, const float *W, const float *d, float *y)
{
    for (int64_t k = 0; k < K; k++) {
        double s = 0;
        for (int64_t j = 0; j < G; j++) s += (double)W[j * K + k] * d[j];
        y[k] += (float)s;
    }
}

/* dW (G,K) += d v^T; db (G) += d (db may be NULL). */
static void ref_outer(int64_t G, int64_t K, const float *d, const float *v, float *dW, float *db)
{
    for (int64_t j = 0; j < G; j++) {
        for (int64_t k = 0; k < K; k++) dW[j * K + k] += d[j] * v[k];
        if (db) db[j] += d[j];
    }
}

/* ---- one layer, both directions: the tape op ----------------------------- */

/* The rows a layer computes and keeps are its active (time step, batch
 * entry) pairs, step by step: with lengths, a sequence's steps past its end
 * are left out of every product (as PyTorch's packed sequences leave them
 * out), so the input projection, each step's product with W_hh and the
 * backward's three products run on P <= L*N rows. Step t's rows are
 * [off[t], off[t+1]), their batch entries bn[.] ascending; without lengths
 * P = L*N and row p is (t, n) = (p / N, p % N). */
typedef struct {
    qkv_rnn_mode mode;
    int64_t L, N, In, H, G, D, layer, P;
    int64_t *off;                 /* (L+1) the first row of each step */
    int32_t *bn;                  /* (P) the batch entry of each row */
    qkv_tensor *x, *y, *h0, *c0;  /* x (L,N,In), y (L,N,D*H); h0, c0 (D*nl,N,H) or NULL */
    const float *xp;              /* (P,In) x's active rows: x itself without lengths */
    qkv_tensor *hn, *cn;          /* (D*nl,N,H); cn NULL for GRU */
    qkv_tensor *w[2][4];          /* per direction: W_ih (GH,In), W_hh (GH,H), b_ih, b_hh (GH) */
    float *gates[2];              /* (P,4H): GRU r,z,n,ah_n; LSTM i,f,g,o */
    float *hprev[2], *cprev[2];   /* (P,H): the state before the row's step */
    float *tc[2];                 /* (P,H): LSTM tanh(c') */
    int ref;
} rnn_saved;

/* The rows [*p0, *p1) of step t whose batch entries lie in [n0, n1). */
static void step_rows(const rnn_saved *s, int64_t t, int64_t n0, int64_t n1, int64_t *p0, int64_t *p1)
{
    int64_t p = s->off[t], e = s->off[t + 1];
    while (p < e && s->bn[p] < n0) p++;
    *p0 = p;
    while (p < e && s->bn[p] < n1) p++;
    *p1 = p;
}

/* Rows [p0, p1) of step t are all of the batch entries [n0, n1). */
static int step_whole(int64_t p0, int64_t p1, int64_t n0, int64_t n1) { return p1 - p0 == n1 - n0; }

/* W_hh (GH,H) of direction d in bf16, once for all the steps' products
 * with op(W_hh) (W_hh^T when tb: the forward's h W_hh^T; W_hh: the
 * backward's dAh W_hh; converting it inside each product took about a fifth
 * of that product's time: docs/bf16.md): packed in pairs for
 * qkv_gemm_bf16_vnni where it runs that shape (*vnni set), else a compact
 * copy for qkv_gemm_bf16_pre; NULL outside the BF16 mode and in the
 * reference. Scratch from the arena (the caller releases). */
static qkv_status whh_bf16(qkv_ctx *c, const rnn_saved *s, int d, int tb, uint16_t **w16, int *vnni)
{
    *w16 = NULL;
    *vnni = 0;
    if (s->ref || qkv_ctx_precision(c) != QKV_BF16) return QKV_OK;
    int64_t GH = s->G * s->H, K = tb ? s->H : GH, N = tb ? GH : s->H;
    const float *W = s->w[d][1]->data; // (GH,H)
    *vnni = qkv_gemm_bf16_vnni_usable(s->N, N, K);
    if (*vnni) {
        *w16 = qkv_arena_alloc_uninit(qkv_ctx_arena(c), (size_t)qkv_bf16_vnni_len(K, N) * sizeof **w16);
        if (*w16) qkv_bf16_vnni_pack(tb, K, N, W, *w16);
    } else {
        *w16 = qkv_bf16_copy(qkv_ctx_arena(c), W, GH * s->H);
    }
    return *w16 ? QKV_OK : qkv_fail(QKV_ERR_NOMEM, "rnn: out of memory for scratch");
}

/* A step's product with W_hh (GH,H): C (M,Nc) = A op(W_hh) + beta C, op
 * its transpose when tb; on the calling thread with the packed W_hh of
 * qkv_gemm_bf16_vnni when vnni, else from w16, a compact bf16 copy
 * (whh_bf16), when given, else in the ctx's precision. */
static void whh_gemm(qkv_ctx *c, int vnni, int tb, int64_t M, int64_t Nc, int64_t K, const float *A,
                     const float *W, const uint16_t *w16, float beta, float *C)
{
    if (M == 0) return;
    if (vnni) qkv_gemm_bf16_vnni_rows(M, Nc, K, A, w16, beta, C);
    else if (w16) qkv_gemm_bf16_pre(0, tb, M, Nc, K, 1.0f, A, NULL, K, NULL, w16, 0, beta, C, Nc);
    else qkv_gemm_ctx(c, 0, tb, M, Nc, K, 1.0f, A, K, W, tb ? K : Nc, beta, C, Nc);
}

/* Row p (step t) of direction d, after ahn = h W_hh^T + b_hh (the fast
 * path; the reference computes its own axn and ahn here): the cell, its
 * saved gates, the output y[t,n]. */
static void cell_forward(rnn_saved *s, int d, int64_t t, int64_t p, float *axn, float *ahn, float *h, float *cs)
{
    int64_t N = s->N, In = s->In, H = s->H, GH = s->G * H, DH = s->D * H, n = s->bn[p];
    int lstm = s->mode == QKV_RNN_LSTM;
    float *yo = s->y->data + (t * N + n) * DH + d * H; // (H)
    if (s->ref) {
        const float *bih = s->w[d][2] ? s->w[d][2]->data : NULL, *bhh = s->w[d][3] ? s->w[d][3]->data : NULL;
        ref_matvec(GH, In, s->w[d][0]->data, s->x->data + (t * N + n) * In, bih, axn);
        ref_matvec(GH, H, s->w[d][1]->data, h + n * H, bhh, ahn);
    }
    float *g = s->gates[d] + p * 4 * H; // (4H)
    if (lstm && s->ref)
        lstm_cell(H, axn, ahn, h + n * H, cs + n * H, g, s->tc[d] + p * H);
    else if (lstm)
        lstm_cell_vec(H, axn, ahn, h + n * H, cs + n * H, g, s->tc[d] + p * H);
    else if (s->ref)
        gru_cell(H, axn, ahn, h + n * H, g);
    else
        gru_cell_vec(H, axn, ahn, h + n * H, g);
    memcpy(yo, h + n * H, (size_t)H * sizeof(float));
}

/* The backward of row p (step t): the gates' gradients daxn, dahn (GH,
 * the same row for LSTM), dh and dc of its batch entry updated through the
 * cell; the reference also adds dAh W_hh into dh here (the fast path does
 * it as a product). */
static void cell_backward(rnn_saved *s, int d, int64_t t, int64_t p, const float *Whh, float *daxn, float *dahn,
                          float *dh, float *dc)
{
    int64_t N = s->N, H = s->H, GH = s->G * H, DH = s->D * H, n = s->bn[p];
    const float *dy = s->y->grad; // (L,N,D*H) or NULL
    float *dhn = dh + n * H;
    if (dy) /* y[t,n,dH:(d+1)H] = h' */
        for (int64_t j = 0; j < H; j++) dhn[j] += dy[(t * N + n) * DH + d * H + j];
    if (s->mode == QKV_RNN_LSTM)
        lstm_cell_backward(H, s->cprev[d] + p * H, s->gates[d] + p * 4 * H, s->tc[d] + p * H, dhn, dc + n * H, daxn);
    else
        gru_cell_backward(H, s->hprev[d] + p * H, s->gates[d] + p * 4 * H, dhn, daxn, dahn);
    if (s->ref) ref_matvec_t(GH, H, Whh, dahn, dhn); /* ah = W_hh h + b_hh */
}

/* Rows [*n0, *n1) of N for the calling thread of a parallel region: equal
 * contiguous shares (each row's sums are the same on any share). */
static void thread_rows(int64_t N, int64_t *n0, int64_t *n1)
{
    int64_t nt = omp_get_num_threads(), per = (N + nt - 1) / nt;
    *n0 = omp_get_thread_num() * per;
    if (*n0 > N) *n0 = N;
    *n1 = *n0 + per < N ? *n0 + per : N;
}

/* Step t of direction d for batch entries [n0, n1): the states of its rows
 * [p0, p1) saved (the product's input), ah's rows n0.. = h W_hh^T + b_hh
 * (not in the reference), the cells; y = 0 for the entries whose sequences
 * have ended (their states stay). vnni: on the calling thread (whh_gemm). */
static void step_forward(qkv_ctx *c, rnn_saved *s, int d, int64_t t, int64_t n0, int64_t n1, int vnni,
                         const uint16_t *whh16, float *ax, float *ah, float *h, float *cs)
{
    int64_t N = s->N, H = s->H, GH = s->G * H, DH = s->D * H, p0, p1;
    const float *bhh = s->w[d][3] ? s->w[d][3]->data : NULL; // (GH)
    step_rows(s, t, n0, n1, &p0, &p1);
    for (int64_t p = p0; p < p1; p++) {
        memcpy(s->hprev[d] + p * H, h + s->bn[p] * H, (size_t)H * sizeof(float));
        if (s->mode == QKV_RNN_LSTM) memcpy(s->cprev[d] + p * H, cs + s->bn[p] * H, (size_t)H * sizeof(float));
    }
    float *ahk = ah + n0 * GH; // (p1-p0,GH) the rows' h W_hh^T + b_hh
    if (!s->ref) {
        for (int64_t p = p0; bhh && p < p1; p++) memcpy(ahk + (p - p0) * GH, bhh, (size_t)GH * sizeof(float));
        whh_gemm(c, vnni, 1, p1 - p0, GH, H, s->hprev[d] + p0 * H, s->w[d][1]->data, whh16, bhh ? 1.0f : 0.0f,
                 ahk);
    }
    /* the rows are independent: on OpenMP's threads where the step is large
     * and not already on one of them (never in the reference, whose ax is
     * one shared row) */
    QKV_PAR_FOR(!vnni && !s->ref && (p1 - p0) * GH >= QKV_PAR_MIN,
                for (int64_t p = p0; p < p1; p++)
                    cell_forward(s, d, t, p, s->ref ? ax : ax + p * GH, ahk + (p - p0) * GH, h, cs));
    if (step_whole(p0, p1, n0, n1)) return;
    for (int64_t n = n0, p = p0; n < n1; n++) {
        if (p < p1 && s->bn[p] == n) p++;
        else memset(s->y->data + (t * N + n) * DH + d * H, 0, (size_t)H * sizeof(float));
    }
}

/* Forward of direction d. Scratch comes from the arena (caller releases). */
static qkv_status rnn_dir_forward(qkv_ctx *c, rnn_saved *s, int d)
{
    qkv_arena *a = qkv_ctx_arena(c);
    int64_t L = s->L, N = s->N, In = s->In, H = s->H, GH = s->G * H, P = s->P;
    int lstm = s->mode == QKV_RNN_LSTM;
    const float *Wih = s->w[d][0]->data;                     // (GH,In)
    const float *bih = s->w[d][2] ? s->w[d][2]->data : NULL; // (GH)
    float *h = qkv_arena_alloc(a, (size_t)(N * H) * sizeof(float));  // (N,H) the state
    float *cs = qkv_arena_alloc(a, (size_t)(N * H) * sizeof(float)); // (N,H) LSTM cell
    float *ah = qkv_arena_alloc(a, (size_t)(N * GH) * sizeof(float)); // (N,GH) a step's h W_hh^T + b_hh
    float *ax = s->ref ? qkv_arena_alloc(a, (size_t)GH * sizeof(float))           // (GH)
                       : qkv_arena_alloc_uninit(a, (size_t)(P * GH) * sizeof(float)); // (P,GH) written in full below
    if (!h || !cs || !ah || !ax) return qkv_fail(QKV_ERR_NOMEM, "rnn: out of memory for scratch");
    uint16_t *whh16; // W_hh^T in bf16 (whh_bf16) or NULL
    int vnni;
    QKV_TRY(whh_bf16(c, s, d, 1, &whh16, &vnni));
    int64_t row0 = s->layer * s->D + d; /* this layer and direction's row of h0/h_n */
    if (s->h0) memcpy(h, s->h0->data + row0 * N * H, (size_t)(N * H) * sizeof(float));
    if (lstm && s->c0) memcpy(cs, s->c0->data + row0 * N * H, (size_t)(N * H) * sizeof(float));
    if (!s->ref) { /* ax = x W_ih^T + b_ih, all rows at once */
        if (bih) qkv_rows_broadcast(ax, bih, P, GH);
        qkv_gemm_ctx(c, 0, 1, P, GH, In, 1.0f, s->xp, In, Wih, In, bih ? 1.0f : 0.0f, ax, GH);
    }
    if (vnni) { /* every step of a share of the batch's rows on each thread, no barrier */
        QKV_PRAGMA(omp parallel if (N * GH >= QKV_PAR_MIN))
        {
            int64_t n0, n1;
            thread_rows(N, &n0, &n1);
            for (int64_t st = 0; st < L && n0 < n1; st++)
                step_forward(c, s, d, d ? L - 1 - st : st, n0, n1, 1, whh16, ax, ah, h, cs);
        }
    }
    for (int64_t st = 0; st < L && !vnni; st++)
        step_forward(c, s, d, d ? L - 1 - st : st, 0, N, 0, whh16, ax, ah, h, cs);
    memcpy(s->hn->data + row0 * N * H, h, (size_t)(N * H) * sizeof(float));
    if (lstm) memcpy(s->cn->data + row0 * N * H, cs, (size_t)(N * H) * sizeof(float));
    return QKV_OK;
}

/* The backward of step t for batch entries [n0, n1): the cells of its rows
 * [p0, p1), then dh += dAh W_hh on those rows (through tmp's rows n0..
 * when some entries have ended: gathered, multiplied, put back). vnni: on
 * the calling thread (whh_gemm). */
static void step_backward(qkv_ctx *c, rnn_saved *s, int d, int64_t t, int64_t n0, int64_t n1, int vnni,
                          const uint16_t *whh16, float *dax, float *dah, float *dh, float *dc, float *tmp)
{
    int64_t H = s->H, GH = s->G * H, p0, p1;
    const float *Whh = s->w[d][1]->data;
    step_rows(s, t, n0, n1, &p0, &p1);
    QKV_PAR_FOR(!vnni && !s->ref && (p1 - p0) * GH >= QKV_PAR_MIN,
                for (int64_t p = p0; p < p1; p++)
                    cell_backward(s, d, t, p, Whh, dax + p * GH, dah + p * GH, dh, dc));
    if (s->ref) return;
    int whole = step_whole(p0, p1, n0, n1);
    float *C = whole ? dh + n0 * H : tmp + n0 * H; // (p1-p0,H)
    for (int64_t p = p0; !whole && p < p1; p++) memcpy(C + (p - p0) * H, dh + s->bn[p] * H, (size_t)H * sizeof(float));
    whh_gemm(c, vnni, 0, p1 - p0, H, GH, dah + p0 * GH, Whh, whh16, 1.0f, C);
    for (int64_t p = p0; !whole && p < p1; p++) memcpy(dh + s->bn[p] * H, C + (p - p0) * H, (size_t)H * sizeof(float));
}

/* Backward of direction d: differentiates rnn_dir_forward's steps in
 * reverse (the cells' comments name each expression), then
 *   ax = x W_ih^T + b_ih:  dx += dAx W_ih, dW_ih += dAx^T x, db_ih += sum dAx
 *   ah = h W_hh^T + b_hh:  dh += dAh W_hh (per step), dW_hh += dAh^T hprev,
 *                          db_hh += sum dAh
 * with dAx, dAh (P,GH) the gates' gradients of every row. dxp (P,In), when
 * given, receives dAx W_ih (added) instead of dx: the caller adds it into
 * dx's rows. */
static qkv_status rnn_dir_backward(qkv_ctx *c, rnn_saved *s, int d, float *dxp)
{
    qkv_arena *a = qkv_ctx_arena(c);
    int64_t L = s->L, N = s->N, In = s->In, H = s->H, GH = s->G * H, P = s->P;
    int lstm = s->mode == QKV_RNN_LSTM;
    int64_t row0 = s->layer * s->D + d;
    qkv_tensor **w = s->w[d];
    float *dh = qkv_arena_alloc(a, (size_t)(N * H) * sizeof(float));         // (N,H)
    float *dc = qkv_arena_alloc(a, (size_t)(N * H) * sizeof(float));         // (N,H)
    float *tmp = qkv_arena_alloc_uninit(a, (size_t)(N * H) * sizeof(float)); // (N,H) step_backward's
    /* dax, dah: every row written by the cell's backward */
    float *dax = qkv_arena_alloc_uninit(a, (size_t)(P * GH) * sizeof(float)); // (P,GH)
    float *dah = lstm ? dax : qkv_arena_alloc_uninit(a, (size_t)(P * GH) * sizeof(float)); // (P,GH)
    if (!dh || !dc || !tmp || !dax || !dah) return qkv_fail(QKV_ERR_NOMEM, "rnn: out of memory for scratch");
    if (s->hn->grad) memcpy(dh, s->hn->grad + row0 * N * H, (size_t)(N * H) * sizeof(float));
    if (lstm && s->cn->grad) memcpy(dc, s->cn->grad + row0 * N * H, (size_t)(N * H) * sizeof(float));
    uint16_t *whh16; // W_hh in bf16 (whh_bf16) or NULL
    int vnni;
    QKV_TRY(whh_bf16(c, s, d, 0, &whh16, &vnni));
    if (vnni) { /* every step of a share of the batch's rows on each thread, no barrier */
        QKV_PRAGMA(omp parallel if (N * GH >= QKV_PAR_MIN))
        {
            int64_t n0, n1;
            thread_rows(N, &n0, &n1);
            for (int64_t st = L - 1; st >= 0 && n0 < n1; st--)
                step_backward(c, s, d, d ? L - 1 - st : st, n0, n1, 1, whh16, dax, dah, dh, dc, tmp);
        }
    }
    for (int64_t st = L - 1; st >= 0 && !vnni; st--)
        step_backward(c, s, d, d ? L - 1 - st : st, 0, N, 0, whh16, dax, dah, dh, dc, tmp);
    /* The gradients were allocated by rnn_backward, before this scratch. */
    if (s->h0 && s->h0->requires_grad) qkv_vec_to2(s->h0->grad + row0 * N * H, 1, NULL, 0, dh, N * H);
    if (lstm && s->c0 && s->c0->requires_grad) qkv_vec_to2(s->c0->grad + row0 * N * H, 1, NULL, 0, dc, N * H);
    float *gw[4] = {NULL, NULL, NULL, NULL};
    for (int j = 0; j < 4; j++)
        if (w[j] && w[j]->requires_grad) gw[j] = w[j]->grad;
    float *dx = s->x->requires_grad ? s->x->grad : NULL;
    if (s->ref) {
        for (int64_t t = 0; t < L; t++)
            for (int64_t p = s->off[t]; p < s->off[t + 1]; p++) {
                int64_t tn = t * N + s->bn[p];
                if (dx) ref_matvec_t(GH, In, w[0]->data, dax + p * GH, dx + tn * In);
                if (gw[0]) ref_outer(GH, In, dax + p * GH, s->x->data + tn * In, gw[0], NULL);
                if (gw[1]) ref_outer(GH, H, dah + p * GH, s->hprev[d] + p * H, gw[1], NULL);
                if (gw[2]) for (int64_t j = 0; j < GH; j++) gw[2][j] += dax[p * GH + j];
                if (gw[3]) for (int64_t j = 0; j < GH; j++) gw[3][j] += dah[p * GH + j];
            }
        return QKV_OK;
    }
    if (dx) qkv_gemm_ctx(c, 0, 0, P, In, GH, 1.0f, dax, GH, w[0]->data, In, 1.0f, dxp ? dxp : dx, In);
    if (gw[0]) qkv_gemm_ctx(c, 1, 0, GH, In, P, 1.0f, dax, GH, s->xp, In, 1.0f, gw[0], In);
    if (gw[1]) qkv_gemm_ctx(c, 1, 0, GH, H, P, 1.0f, dah, GH, s->hprev[d], H, 1.0f, gw[1], H);
    if (gw[2]) qkv_rows_sum_into(gw[2], dax, P, GH);
    if (gw[3]) qkv_rows_sum_into(gw[3], dah, P, GH);
    return QKV_OK;
}

static qkv_status rnn_backward(qkv_ctx *c, void *p)
{
    rnn_saved *s = p;
    int lstm = s->mode == QKV_RNN_LSTM;
    if (!s->y->grad && !s->hn->grad && !(lstm && s->cn->grad)) return QKV_OK;
    qkv_arena *a = qkv_ctx_arena(c);
    /* Every gradient this op adds into, allocated before the scratch
     * (which is released after each direction). */
    qkv_tensor *need[11] = {s->x, s->h0, lstm ? s->c0 : NULL};
    int n = 3;
    for (int d = 0; d < s->D; d++)
        for (int j = 0; j < 4; j++) need[n++] = s->w[d][j];
    for (int i = 0; i < n; i++)
        if (need[i] && need[i]->requires_grad && !qkv_tensor_grad(a, need[i]))
            return qkv_fail(QKV_ERR_NOMEM, "rnn: out of memory for %s's gradient",
                            need[i]->name ? need[i]->name : i == 0 ? "x" : i == 1 ? "h0" : "c0");
    /* With ended sequences, dx's active rows are summed over the directions
     * in dxp (P,In), then added into dx's rows. */
    int64_t N = s->N, In = s->In;
    qkv_arena_mark mk0 = qkv_arena_get_mark(a);
    float *dxp = NULL; // (P,In), zeroed
    if (!s->ref && s->x->requires_grad && s->P < s->L * N &&
        !(dxp = qkv_arena_alloc(a, (size_t)(s->P * In) * sizeof(float))))
        return qkv_fail(QKV_ERR_NOMEM, "rnn: out of memory for scratch");
    qkv_status st = QKV_OK;
    for (int d = 0; d < s->D && st == QKV_OK; d++) {
        qkv_arena_mark mk = qkv_arena_get_mark(a);
        st = rnn_dir_backward(c, s, d, dxp);
        qkv_arena_release(a, mk);
    }
    if (st == QKV_OK && dxp)
        QKV_PAR_FOR(s->P * In >= QKV_PAR_MIN, for (int64_t t = 0; t < s->L; t++)
            for (int64_t p = s->off[t]; p < s->off[t + 1]; p++)
                qkv_vec_to2(s->x->grad + (t * N + s->bn[p]) * In, 1, NULL, 0, dxp + p * In, In));
    qkv_arena_release(a, mk0);
    return st;
}

/* One layer: x (L,N,In) -> *y (L,N,D*H), writing rows layer*D.. of hn, cn. */
static qkv_status rnn_layer(qkv_ctx *c, const qkv_nn_rnn *m, int64_t layer, qkv_tensor *x,
                            qkv_tensor *h0, qkv_tensor *c0, const int64_t *lengths, qkv_tensor *hn,
                            qkv_tensor *cn, qkv_tensor **y)
{
    int64_t D = m->o.bidirectional ? 2 : 1, H = m->o.hidden_size;
    int64_t L = x->shape[0], N = x->shape[1], In = x->shape[2];
    qkv_tensor *in[11] = {x, h0, c0};
    int nin = 3;
    for (int d = 0; d < D; d++)
        for (int j = 0; j < 4; j++) in[nin++] = m->weights[4 * (layer * D + d) + j];
    int rec = qkv_ctx_recording(c, in, nin);
    int64_t shape[3] = {L, N, D * H};
    QKV_TRY(qkv_ctx_tensor_uninit(c, 3, shape, rec, y)); /* every (t, n) written: h' or 0 past its end */
    qkv_arena *a = qkv_ctx_arena(c);
    rnn_saved sv, *s = &sv;
    if (rec && !(s = qkv_ctx_alloc(c, sizeof *s))) return QKV_ERR_NOMEM;
    memset(s, 0, sizeof *s);
    s->mode = m->mode;
    s->L = L, s->N = N, s->In = In, s->H = H, s->G = m->mode == QKV_RNN_LSTM ? 4 : 3, s->D = D;
    s->layer = layer;
    s->x = x, s->y = *y, s->h0 = h0, s->c0 = c0, s->hn = hn, s->cn = cn;
    s->ref = qkv_reference();
    for (int d = 0; d < D; d++)
        for (int j = 0; j < 4; j++) s->w[d][j] = m->weights[4 * (layer * D + d) + j];
    /* What the backward keeps (in the arena for good when recording, else
     * scratch released below). */
    qkv_arena_mark mk = qkv_arena_get_mark(a);
    int lstm = m->mode == QKV_RNN_LSTM;
    s->off = qkv_arena_alloc_uninit(a, (size_t)(L + 1) * sizeof *s->off);
    s->bn = qkv_arena_alloc_uninit(a, (size_t)(L * N) * sizeof *s->bn);
    int ok = s->off && s->bn;
    for (int64_t t = 0; ok && t < L; t++) {
        s->off[t] = s->P;
        for (int64_t n = 0; n < N; n++)
            if (!lengths || t < lengths[n]) s->bn[s->P++] = (int32_t)n;
    }
    if (ok) s->off[L] = s->P;
    s->xp = x->data;
    if (ok && !s->ref && s->P < L * N) { /* x's active rows */
        float *xp = qkv_arena_alloc_uninit(a, (size_t)(s->P * In) * sizeof(float));
        QKV_PAR_FOR(xp && s->P * In >= QKV_PAR_MIN, for (int64_t t = 0; t < L; t++)
            for (int64_t p = s->off[t]; p < s->off[t + 1]; p++)
                memcpy(xp + p * In, x->data + (t * N + s->bn[p]) * In, (size_t)In * sizeof(float)));
        s->xp = xp;
        ok = xp != NULL;
    }
    for (int d = 0; ok && d < D; d++) {
        /* not zeroed: every row's gates, states and tc are written by its step */
        size_t nh = (size_t)(s->P * H) * sizeof(float);
        s->gates[d] = qkv_arena_alloc_uninit(a, 4 * nh);
        s->hprev[d] = qkv_arena_alloc_uninit(a, nh);
        s->cprev[d] = lstm ? qkv_arena_alloc_uninit(a, nh) : NULL;
        s->tc[d] = lstm ? qkv_arena_alloc_uninit(a, nh) : NULL;
        ok = s->gates[d] && s->hprev[d] && (!lstm || (s->cprev[d] && s->tc[d]));
    }
    if (!ok) {
        if (!rec) qkv_arena_release(a, mk);
        return qkv_fail(QKV_ERR_NOMEM, "rnn: out of memory for the saved gates");
    }
    qkv_status st = QKV_OK;
    for (int d = 0; d < D && st == QKV_OK; d++) {
        qkv_arena_mark m2 = qkv_arena_get_mark(a);
        st = rnn_dir_forward(c, s, d);
        qkv_arena_release(a, m2);
    }
    if (!rec) {
        qkv_arena_release(a, mk);
        return st;
    }
    return st == QKV_OK ? qkv_ctx_record(c, rnn_backward, s) : st;
}

/* ---- modules --------------------------------------------------------------- */

qkv_rnn_opts qkv_rnn_opts_default(int64_t input_size, int64_t hidden_size)
{
    return (qkv_rnn_opts){input_size, hidden_size, 1, 1, 0, 0, 0.0f};
}

static const char *mode_fn(qkv_rnn_mode mode, const char *what)
{
    static const char *names[2][2] = {{"nn_gru_init", "nn_gru_forward"}, {"nn_lstm_init", "nn_lstm_forward"}};
    return names[mode == QKV_RNN_LSTM][!strcmp(what, "forward")];
}

static qkv_status rnn_module_forward(qkv_ctx *c, qkv_module *base, qkv_tensor *x, qkv_tensor **y);

static qkv_status rnn_init(qkv_nn_rnn *m, qkv_rnn_mode mode, const qkv_rnn_opts *o, qkv_params *p,
                           const char *prefix, qkv_rng *rng)
{
    const char *fn = mode_fn(mode, "init");
    QKV_NEED(m, fn, "module");
    m->weights = NULL;
    QKV_NEED(o, fn, "opts");
    QKV_NEED(p, fn, "params");
    QKV_NEED(rng, fn, "rng");
    if (o->input_size < 1 || o->hidden_size < 1 || o->num_layers < 1)
        return qkv_fail(QKV_ERR_ARG, "%s: input_size %lld, hidden_size %lld and num_layers %lld must be positive",
                        fn, (long long)o->input_size, (long long)o->hidden_size, (long long)o->num_layers);
    if (o->num_layers > 1024)
        return qkv_fail(QKV_ERR_ARG, "%s: num_layers %lld is more than 1024", fn, (long long)o->num_layers);
    if (!(o->dropout >= 0.0f && o->dropout <= 1.0f))
        return qkv_fail(QKV_ERR_ARG, "%s: dropout %g is not in [0,1]", fn, (double)o->dropout);
    int64_t D = o->bidirectional ? 2 : 1, H = o->hidden_size, G = mode == QKV_RNN_LSTM ? 4 : 3;
    qkv_tensor **w = calloc((size_t)(4 * o->num_layers * D), sizeof *w);
    if (!w) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    float bound = 1.0f / sqrtf((float)H);
    static const char *const kind[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
    for (int64_t k = 0; k < o->num_layers; k++)
        for (int64_t d = 0; d < D; d++)
            for (int j = 0; j < (o->bias ? 4 : 2); j++) {
                char name[64];
                snprintf(name, sizeof name, "%s_l%lld%s", kind[j], (long long)k, d ? "_reverse" : "");
                int64_t shape[2] = {G * H, j == 0 ? (k ? D * H : o->input_size) : H};
                qkv_tensor **t = &w[4 * (k * D + d) + j];
                qkv_status st = qkv_params_add(p, prefix, name, j < 2 ? 2 : 1, shape, t);
                if (st == QKV_OK) st = qkv_init_uniform(rng, *t, -bound, bound);
                if (st != QKV_OK) {
                    free(w);
                    return st;
                }
            }
    m->mode = mode;
    m->o = *o;
    m->o.bias = o->bias != 0, m->o.batch_first = o->batch_first != 0;
    m->o.bidirectional = o->bidirectional != 0;
    m->weights = w;
    m->base = (qkv_module){mode == QKV_RNN_LSTM ? "LSTM" : "GRU", rnn_module_forward};
    return QKV_OK;
}

qkv_status qkv_nn_gru_init(qkv_nn_gru *m, const qkv_rnn_opts *o, qkv_params *p, const char *prefix,
                           qkv_rng *rng)
{
    return rnn_init(m, QKV_RNN_GRU, o, p, prefix, rng);
}

qkv_status qkv_nn_lstm_init(qkv_nn_lstm *m, const qkv_rnn_opts *o, qkv_params *p, const char *prefix,
                            qkv_rng *rng)
{
    return rnn_init(m, QKV_RNN_LSTM, o, p, prefix, rng);
}

static void rnn_free(qkv_nn_rnn *m)
{
    if (!m) return;
    free(m->weights);
    m->weights = NULL;
    m->base.forward = NULL;
}

void qkv_nn_gru_free(qkv_nn_gru *m) { rnn_free(m); }
void qkv_nn_lstm_free(qkv_nn_lstm *m) { rnn_free(m); }

/* Checks a state h0 / c0: (D*nl,N,H) batched, (D*nl,H) unbatched. */
static qkv_status check_state(const char *fn, const char *arg, const qkv_tensor *t, int batched,
                              int64_t rows, int64_t N, int64_t H)
{
    if (!t) return QKV_OK;
    QKV_NEED_F32(t, fn, arg);
    char b[64];
    int ok = batched ? t->ndim == 3 && t->shape[0] == rows && t->shape[1] == N && t->shape[2] == H
                     : t->ndim == 2 && t->shape[0] == rows && t->shape[1] == H;
    if (ok) return QKV_OK;
    if (batched)
        return qkv_fail(QKV_ERR_SHAPE, "%s: %s %s, expected (D*num_layers,N,H) = (%lld,%lld,%lld)", fn, arg,
                        qkv_shape_str(t, b, sizeof b), (long long)rows, (long long)N, (long long)H);
    return qkv_fail(QKV_ERR_SHAPE, "%s: %s %s, expected (D*num_layers,H) = (%lld,%lld) for an unbatched x", fn,
                    arg, qkv_shape_str(t, b, sizeof b), (long long)rows, (long long)H);
}

static qkv_status rnn_forward(qkv_ctx *c, qkv_nn_rnn *m, qkv_rnn_mode mode, qkv_tensor *x, qkv_tensor *h0,
                              qkv_tensor *c0, const int64_t *lengths, qkv_tensor **output,
                              qkv_tensor **h_n, qkv_tensor **c_n)
{
    const char *fn = mode_fn(mode, "forward");
    QKV_NEED(output, fn, "output");
    *output = NULL;
    if (h_n) *h_n = NULL;
    if (c_n) *c_n = NULL;
    QKV_NEED(c, fn, "ctx");
    QKV_NEED(m, fn, "module");
    if (!m->weights || !m->base.forward)
        return qkv_fail(QKV_ERR_STATE, "%s: module not initialised (call its _init first)", fn);
    if (m->mode != mode)
        return qkv_fail(QKV_ERR_ARG, "%s: module is an %s", fn, m->mode == QKV_RNN_LSTM ? "LSTM" : "GRU");
    QKV_NEED_F32(x, fn, "x");
    char b[64];
    const qkv_rnn_opts *o = &m->o;
    int64_t D = o->bidirectional ? 2 : 1, H = o->hidden_size, rows = D * o->num_layers;
    if (x->ndim != 2 && x->ndim != 3)
        return qkv_fail(QKV_ERR_SHAPE, "%s: x %s has %d dims, expected 3 (%s) or 2 (L,input_size) unbatched", fn,
                        qkv_shape_str(x, b, sizeof b), x->ndim, o->batch_first ? "N,L,input_size" : "L,N,input_size");
    if (x->shape[x->ndim - 1] != o->input_size)
        return qkv_fail(QKV_ERR_SHAPE, "%s: x %s last dim does not match input_size %lld", fn,
                        qkv_shape_str(x, b, sizeof b), (long long)o->input_size);
    int batched = x->ndim == 3;
    int64_t L = batched && o->batch_first ? x->shape[1] : x->shape[0];
    int64_t N = batched ? (o->batch_first ? x->shape[0] : x->shape[1]) : 1;
    if (L < 1 || N < 1)
        return qkv_fail(QKV_ERR_SHAPE, "%s: x %s has no time steps or no batch entries", fn,
                        qkv_shape_str(x, b, sizeof b));
    QKV_TRY(check_state(fn, "h0", h0, batched, rows, N, H));
    if (mode == QKV_RNN_LSTM) QKV_TRY(check_state(fn, "c0", c0, batched, rows, N, H));
    if (lengths)
        for (int64_t n = 0; n < N; n++)
            if (lengths[n] < 1 || lengths[n] > L)
                return qkv_fail(QKV_ERR_ARG, "%s: lengths[%lld] = %lld is not in [1,%lld] (L)", fn,
                                (long long)n, (long long)lengths[n], (long long)L);
    /* Everything in the time-major layout (L,N,.). */
    qkv_tensor *xt = x;
    int64_t s3[3] = {L, N, o->input_size};
    if (!batched) QKV_TRY(qkv_reshape(c, x, 3, s3, &xt));
    else if (o->batch_first) QKV_TRY(qkv_permute(c, x, (const int[]){1, 0, 2}, &xt));
    int64_t sh[3] = {rows, 1, H};
    if (!batched && h0) QKV_TRY(qkv_reshape(c, h0, 3, sh, &h0));
    if (!batched && c0) QKV_TRY(qkv_reshape(c, c0, 3, sh, &c0));
    int nw = (int)(4 * rows);
    int rec = qkv_ctx_recording(c, (qkv_tensor *[]){xt, h0, c0}, 3) ||
              qkv_ctx_recording(c, m->weights, nw);
    int64_t shn[3] = {rows, N, H};
    qkv_tensor *hn = NULL, *cn = NULL, *y = xt;
    QKV_TRY(qkv_ctx_tensor(c, 3, shn, rec, &hn));
    if (mode == QKV_RNN_LSTM) QKV_TRY(qkv_ctx_tensor(c, 3, shn, rec, &cn));
    for (int64_t k = 0; k < o->num_layers; k++) {
        if (k > 0 && o->dropout > 0.0f) QKV_TRY(qkv_dropout(c, y, o->dropout, &y));
        QKV_TRY(rnn_layer(c, m, k, y, h0, mode == QKV_RNN_LSTM ? c0 : NULL, lengths, hn, cn, &y));
    }
    if (!batched) {
        QKV_TRY(qkv_reshape(c, y, 2, (int64_t[]){L, D * H}, &y));
        QKV_TRY(qkv_reshape(c, hn, 2, (int64_t[]){rows, H}, &hn));
        if (cn) QKV_TRY(qkv_reshape(c, cn, 2, (int64_t[]){rows, H}, &cn));
    } else if (o->batch_first) {
        QKV_TRY(qkv_permute(c, y, (const int[]){1, 0, 2}, &y));
    }
    *output = y;
    if (h_n) *h_n = hn;
    if (c_n) *c_n = cn;
    return QKV_OK;
}

qkv_status qkv_nn_gru_forward(qkv_ctx *c, qkv_nn_gru *m, qkv_tensor *x, qkv_tensor *h0,
                              const int64_t *lengths, qkv_tensor **output, qkv_tensor **h_n)
{
    return rnn_forward(c, m, QKV_RNN_GRU, x, h0, NULL, lengths, output, h_n, NULL);
}

qkv_status qkv_nn_lstm_forward(qkv_ctx *c, qkv_nn_lstm *m, qkv_tensor *x, qkv_tensor *h0,
                               qkv_tensor *c0, const int64_t *lengths, qkv_tensor **output,
                               qkv_tensor **h_n, qkv_tensor **c_n)
{
    return rnn_forward(c, m, QKV_RNN_LSTM, x, h0, c0, lengths, output, h_n, c_n);
}

/* In a Sequential: output = rnn(x), zero initial states, no lengths. */
static qkv_status rnn_module_forward(qkv_ctx *c, qkv_module *base, qkv_tensor *x, qkv_tensor **y)
{
    qkv_nn_rnn *m = (qkv_nn_rnn *)base;
    return rnn_forward(c, m, m->mode, x, NULL, NULL, NULL, y, NULL, NULL);
}

/* The masks form of lengths: padding_mask BOOL (N,L), true = padding (the
 * convention of key_padding_mask), each row real steps then padding only. */
qkv_status qkv_rnn_lengths_from_mask(const qkv_tensor *padding_mask, int64_t *lengths)
{
    const char *fn = "rnn_lengths_from_mask";
    QKV_NEED(padding_mask, fn, "padding_mask");
    QKV_NEED(lengths, fn, "lengths");
    char b[64];
    if (padding_mask->dtype != QKV_BOOL || padding_mask->ndim != 2 || !padding_mask->mask)
        return qkv_fail(QKV_ERR_ARG, "%s: padding_mask must be a BOOL (N,L) tensor, got %s %s", fn,
                        qkv_dtype_name(padding_mask->dtype), qkv_shape_str(padding_mask, b, sizeof b));
    int64_t N = padding_mask->shape[0], L = padding_mask->shape[1];
    for (int64_t n = 0; n < N; n++) {
        const uint8_t *row = padding_mask->mask + n * L; // (L)
        int64_t len = 0;
        while (len < L && !row[len]) len++;
        if (len == 0)
            return qkv_fail(QKV_ERR_ARG, "%s: row %lld starts with padding: every sequence needs at "
                            "least one step", fn, (long long)n);
        for (int64_t t = len; t < L; t++)
            if (!row[t])
                return qkv_fail(QKV_ERR_ARG, "%s: row %lld has a real step %lld after padding at %lld: "
                                "padding must come last (right-padded, as pack_padded_sequence)", fn,
                                (long long)n, (long long)t, (long long)len);
        lengths[n] = len;
    }
    return QKV_OK;
}
