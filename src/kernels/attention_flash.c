/* attention_flash.c: attention in O(L) memory, as FlashAttention computes it.
 *
 * Forward: for a block of BQ query rows, walk the keys in tiles of BK, keep
 * per row a running max m, a running sum l of exp(s - m) and an unnormalised
 * output; rescale them by exp(m_old - m_new) when the max grows. The
 * log-sum-exp m + log l is saved for the backward.
 * Backward (FlashAttention-2): recompute p = exp(s - lse) tile by tile; with
 * D_i = dout_i . out_i, ds = p (dp - D). Threads (OpenMP) take (head, key
 * tile) pairs, so each owns its tile's dk and dv rows; dq, which every key
 * tile adds to, goes to a buffer per thread summed at the end.
 * Causal and local masks bound the key range of each query block, so tiles
 * they rule out are never computed. */
#include <omp.h>
#include <string.h>
#include "kernels/attention.h"

enum { BQ = 32, BK = 64 };

/* Keys [*lo, *hi) among the masked keys that rows [i0, i1) can see; keys at
 * index >= mask_keys are always visible and are added by the caller. */
static void key_range(const qkv_attn_desc *d, int64_t i0, int64_t i1, int64_t *lo, int64_t *hi)
{
    int64_t a = 0, b = d->mask_keys;
    int64_t first = i0 + d->diag, last = i1 - 1 + d->diag;
    if (d->causal != QKV_CAUSAL_NONE && last + 1 < b) b = last + 1;
    if (d->window >= 0) {
        if (last + d->window + 1 < b) b = last + d->window + 1;
        if (first - d->window > a) a = first - d->window;
    }
    if (b <= a) a = b = d->mask_keys; /* no masked key visible: straight to the extras */
    *lo = a;
    *hi = b;
}

/* The tiles of key indices rows [i0,i1) must visit: [lo,hi) then [mk,S). */
typedef struct {
    int64_t lo, hi, mk, S;
} key_walk;

static key_walk key_walk_make(const qkv_attn_desc *d, int64_t i0, int64_t i1)
{
    key_walk w;
    key_range(d, i0, i1, &w.lo, &w.hi);
    w.mk = d->mask_keys;
    w.S = d->S;
    return w;
}

/* Next tile start after j0 (tile of BK); -1 when done. */
static int64_t key_walk_next(const key_walk *w, int64_t j0, int64_t *j1)
{
    if (j0 < w->lo) j0 = w->lo;
    if (j0 >= w->hi && j0 < w->mk) j0 = w->mk;
    if (j0 >= w->S) return -1;
    int64_t end = j0 < w->hi ? w->hi : w->S;
    *j1 = j0 + BK < end ? j0 + BK : end;
    return j0;
}

/* s[j - j0] = scale * q_i . k_j + mask for j in [j0, j1); kt is the tile of
 * k transposed, (D, BK), so the inner loop runs over j and vectorises. */
static void tile_scores(const qkv_attn_desc *d, int64_t n, int64_t h, int64_t i,
                        const float *qi, const float *kt, int64_t j0, int64_t j1, float *s)
{
    int64_t nj = j1 - j0;
    for (int64_t j = 0; j < nj; j++) s[j] = 0;
    for (int64_t x = 0; x < d->D; x++) {
        float a = qi[x];
        const float *row = kt + x * BK;
        for (int64_t j = 0; j < nj; j++) s[j] += a * row[j];
    }
    for (int64_t j = 0; j < nj; j++) s[j] *= d->scale;
    if (qkv_attn_has_mask(d))
        for (int64_t j = 0; j < nj; j++) s[j] += qkv_attn_mask_term(d, n, h, i, j0 + j);
}

/* kt (D,BK) = k[j0:j1] transposed; k rows have D floats. */
static void tile_transpose(const float *k, int64_t D, int64_t j0, int64_t j1, float *kt)
{
    for (int64_t j = j0; j < j1; j++)
        for (int64_t x = 0; x < D; x++) kt[x * BK + (j - j0)] = k[j * D + x];
}

/* One query block of one head: rows [i0,i1). */
static void forward_block(const qkv_attn_desc *d, int64_t n, int64_t h, int64_t i0, int64_t i1,
                          const float *qh, const float *kh, const float *vh, float *oh,
                          float *lseh, float *kt, float *s, float *m, float *l)
{
    int64_t D = d->D, Dv = d->Dv, nh = n * d->H + h;
    for (int64_t i = i0; i < i1; i++) {
        m[i - i0] = -INFINITY;
        l[i - i0] = 0;
        memset(oh + i * Dv, 0, (size_t)Dv * sizeof(float));
    }
    key_walk w = key_walk_make(d, i0, i1);
    int64_t j1;
    for (int64_t j0 = key_walk_next(&w, 0, &j1); j0 >= 0; j0 = key_walk_next(&w, j1, &j1)) {
        tile_transpose(kh, D, j0, j1, kt);
        for (int64_t i = i0; i < i1; i++) {
            float *si = s + (i - i0) * BK, *oi = oh + i * Dv;
            tile_scores(d, n, h, i, qh + i * D, kt, j0, j1, si);
            float mb = -INFINITY;
            for (int64_t j = 0; j < j1 - j0; j++) mb = si[j] > mb ? si[j] : mb;
            if (mb == -INFINITY) continue; /* every key of this tile masked */
            float mold = m[i - i0], mnew = mold > mb ? mold : mb;
            float corr = mold == -INFINITY ? 0.0f : expf(mold - mnew);
            float sum = 0;
            for (int64_t j = 0; j < j1 - j0; j++) sum += (si[j] = expf(si[j] - mnew));
            l[i - i0] = l[i - i0] * corr + sum;
            m[i - i0] = mnew;
            if (corr != 1.0f)
                for (int64_t x = 0; x < Dv; x++) oi[x] *= corr;
            for (int64_t j = 0; j < j1 - j0; j++) {
                float p = si[j] * qkv_attn_dropout(d, nh, i, j0 + j);
                if (p == 0.0f) continue;
                const float *vj = vh + (j0 + j) * Dv;
                for (int64_t x = 0; x < Dv; x++) oi[x] += p * vj[x];
            }
        }
    }
    for (int64_t i = i0; i < i1; i++) {
        float *oi = oh + i * Dv;
        if (m[i - i0] == -INFINITY) { /* every key masked: output 0 */
            lseh[i] = -INFINITY;
            continue;
        }
        float inv = 1.0f / l[i - i0];
        for (int64_t x = 0; x < Dv; x++) oi[x] *= inv;
        lseh[i] = m[i - i0] + logf(l[i - i0]);
    }
}

static size_t forward_per_thread(const qkv_attn_desc *d) { return (size_t)(d->D * BK + BQ * BK + 2 * BQ); }
static size_t backward_per_thread(const qkv_attn_desc *d) { return (size_t)(d->D * BK + d->Dv * BK + 2 * BK); }

size_t qkv_attn_forward_scratch(const qkv_attn_desc *d, int threads)
{
    return (size_t)threads * forward_per_thread(d);
}

/* D (N*H*L), per-thread tiles, and with more than one thread a dq buffer
 * per thread (N*H*L*D each): every key tile adds into every query row's dq. */
size_t qkv_attn_backward_scratch(const qkv_attn_desc *d, int threads)
{
    size_t nq = (size_t)(d->N * d->H * d->L * d->D);
    return (size_t)(d->N * d->H * d->L) + (size_t)threads * backward_per_thread(d) +
           (threads > 1 ? (size_t)threads * nq : 0);
}

void qkv_attn_forward_flash(const qkv_attn_desc *d, const float *q, const float *k,
                            const float *v, float *out, float *lse, float *scratch, int threads)
{
    int64_t NH = d->N * d->H, L = d->L, S = d->S, D = d->D, Dv = d->Dv, nb = (L + BQ - 1) / BQ;
#pragma omp parallel num_threads(threads)
    {
        float *kt = scratch + (size_t)omp_get_thread_num() * forward_per_thread(d); // (D,BK)
        float *s = kt + D * BK, *m = s + BQ * BK, *l = m + BQ;                      // (BQ,BK), (BQ), (BQ)
#pragma omp for schedule(dynamic)
        for (int64_t t = 0; t < NH * nb; t++) {
            int64_t nh = t / nb, i0 = (t % nb) * BQ, i1 = i0 + BQ < L ? i0 + BQ : L;
            forward_block(d, nh / d->H, nh % d->H, i0, i1, q + nh * L * D, k + nh * S * D,
                          v + nh * S * Dv, out + nh * L * Dv, lse + nh * L, kt, s, m, l);
        }
    }
}

void qkv_attn_weights(const qkv_attn_desc *d, const float *q, const float *k, const float *lse,
                      float *weights)
{
    int64_t L = d->L, S = d->S, D = d->D;
    for (int64_t nh = 0; nh < d->N * d->H; nh++)
        for (int64_t i = 0; i < L; i++) {
            float *w = weights + (nh * L + i) * S;
            float li = lse[nh * L + i];
            for (int64_t j = 0; j < S; j++) {
                if (li == -INFINITY) {
                    w[j] = 0;
                    continue;
                }
                const float *qi = q + (nh * L + i) * D, *kj = k + (nh * S + j) * D;
                float s = 0;
                for (int64_t x = 0; x < D; x++) s += qi[x] * kj[x];
                s = s * d->scale + qkv_attn_mask_term(d, nh / d->H, nh % d->H, i, j);
                w[j] = expf(s - li) * qkv_attn_dropout(d, nh, i, j);
            }
        }
}

/* The backward of one key tile [j0,j1) of one head. Differentiates
 * out_i = sum_j z_ij p_ij v_j, p_ij = exp(s_ij - lse_i),
 * s_ij = scale q_i.k_j + mask_ij:
 *   dv_j += z p dout_i;  dp = z dout_i.v_j;  ds = p (dp - D_i), D_i = dout_i.out_i
 *   dq_i += scale ds k_j;  dk_j += scale ds q_i
 * The tile's dk and dv rows belong to this call alone; dq rows are shared
 * with the head's other tiles, so dqh is the calling thread's own buffer. */
static void backward_tile(const qkv_attn_desc *d, int64_t n, int64_t h, int64_t j0, int64_t j1,
                          const float *qh, const float *kh, const float *vh, const float *lseh,
                          const float *Dh, const float *doh, float *dqh, float *dkh, float *dvh,
                          float *scratch)
{
    int64_t L = d->L, D = d->D, Dv = d->Dv, nh = n * d->H + h, nj = j1 - j0;
    float *kt = scratch, *vt = kt + D * BK, *s = vt + Dv * BK, *dp = s + BK;
    tile_transpose(kh, D, j0, j1, kt);
    tile_transpose(vh, Dv, j0, j1, vt);
    for (int64_t i0 = 0; i0 < L; i0 += BQ) {
        int64_t i1 = i0 + BQ < L ? i0 + BQ : L;
        key_walk w = key_walk_make(d, i0, i1);
        /* Does this query block see any key of the tile: [lo,hi) or [mk,S)? */
        int visits = (j0 < w.hi && j1 > w.lo) || j1 > w.mk;
        if (!visits) continue;
        for (int64_t i = i0; i < i1; i++) {
            if (lseh[i] == -INFINITY) continue;
            const float *qi = qh + i * D, *doi = doh + i * Dv;
            tile_scores(d, n, h, i, qi, kt, j0, j1, s);
            for (int64_t j = 0; j < nj; j++) s[j] = expf(s[j] - lseh[i]); /* p */
            for (int64_t j = 0; j < nj; j++) dp[j] = 0;
            for (int64_t x = 0; x < Dv; x++) { /* dp_j = dout_i . v_j */
                float a = doi[x];
                const float *row = vt + x * BK;
                for (int64_t j = 0; j < nj; j++) dp[j] += a * row[j];
            }
            float *dqi = dqh ? dqh + i * D : NULL;
            for (int64_t j = 0; j < nj; j++) {
                if (s[j] == 0.0f) continue;
                float z = qkv_attn_dropout(d, nh, i, j0 + j);
                if (dvh && z != 0.0f) {
                    float c = z * s[j];
                    float *dvj = dvh + (j0 + j) * Dv;
                    for (int64_t x = 0; x < Dv; x++) dvj[x] += c * doi[x];
                }
                float ds = s[j] * (z * dp[j] - Dh[i]) * d->scale;
                if (dqi) {
                    const float *kj = kh + (j0 + j) * D;
                    for (int64_t x = 0; x < D; x++) dqi[x] += ds * kj[x];
                }
                if (dkh) {
                    float *dkj = dkh + (j0 + j) * D;
                    for (int64_t x = 0; x < D; x++) dkj[x] += ds * qi[x];
                }
            }
        }
    }
}

void qkv_attn_backward_flash(const qkv_attn_desc *d, const float *q, const float *k,
                             const float *v, const float *out, const float *lse,
                             const float *dout, float *dq, float *dk, float *dv, float *scratch,
                             int threads)
{
    int64_t NH = d->N * d->H, L = d->L, S = d->S, D = d->D, Dv = d->Dv;
    int64_t ntiles = (S + BK - 1) / BK;
    size_t nq = (size_t)(NH * L * D);
    float *Di = scratch;                               // (N,H,L)
    float *tiles = Di + NH * L;                        // (threads, per thread)
    float *dqs = tiles + (size_t)threads * backward_per_thread(d); // (threads,N,H,L,D) if threads > 1
#pragma omp parallel for num_threads(threads)
    for (int64_t r = 0; r < NH * L; r++) {
        float acc = 0;
        for (int64_t x = 0; x < Dv; x++) acc += dout[r * Dv + x] * out[r * Dv + x];
        Di[r] = acc;
    }
    if (dq && threads > 1) memset(dqs, 0, (size_t)threads * nq * sizeof(float));
#pragma omp parallel num_threads(threads)
    {
        int th = omp_get_thread_num();
        float *mine = tiles + (size_t)th * backward_per_thread(d);
        float *mydq = dq && threads > 1 ? dqs + (size_t)th * nq : dq;
#pragma omp for schedule(dynamic)
        for (int64_t t = 0; t < NH * ntiles; t++) {
            int64_t nh = t / ntiles, j0 = (t % ntiles) * BK, j1 = j0 + BK < S ? j0 + BK : S;
            backward_tile(d, nh / d->H, nh % d->H, j0, j1, q + nh * L * D, k + nh * S * D,
                          v + nh * S * Dv, lse + nh * L, Di + nh * L, dout + nh * L * Dv,
                          mydq ? mydq + nh * L * D : NULL, dk ? dk + nh * S * D : NULL,
                          dv ? dv + nh * S * Dv : NULL, mine);
        }
    }
    if (dq && threads > 1) {
#pragma omp parallel for num_threads(threads)
        for (int64_t i = 0; i < (int64_t)nq; i++)
            for (int th = 0; th < threads; th++) dq[i] += dqs[(size_t)th * nq + i];
    }
}
