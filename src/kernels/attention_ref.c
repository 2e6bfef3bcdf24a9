/* attention_ref.c: the reference attention kernel. Materialises each head's
 * (L,S) scores and accumulates in double: slow and simple, the oracle the
 * fast kernel is tested against (and itself tested against PyTorch). */
#include "kernels/attention.h"

/* Is key j masked for row i of head (n,h)? A masked key is never read. */
static int ref_masked(const qkv_attn_desc *d, int64_t n, int64_t h, int64_t i, int64_t j)
{
    return qkv_attn_mask_term(d, n, h, i, j) == -INFINITY;
}

/* Row i of head (n,h): p[j] = softmax_j(q_i.k_j * scale + mask) (without
 * dropout); returns the log-sum-exp. Every key masked (or every score
 * -inf): p = 0, -inf. A NaN score of an unmasked key (or +inf): p = NaN,
 * NaN (docs/reliability.md, "NaN and infinity"). Masked keys' k are not
 * read. */
static double ref_row(const qkv_attn_desc *d, int64_t n, int64_t h, int64_t i, const float *qi,
                      const float *kh, double *p)
{
    double mx = -INFINITY;
    int nan = 0;
    for (int64_t j = 0; j < d->S; j++) {
        double term = qkv_attn_mask_term(d, n, h, i, j);
        if (term == -INFINITY) {
            p[j] = -INFINITY;
            continue;
        }
        double s = 0;
        for (int64_t x = 0; x < d->D; x++) s += (double)qi[x] * kh[j * d->D + x];
        p[j] = s * d->scale + term;
        if (isnan(p[j])) nan = 1;
        else if (p[j] > mx) mx = p[j];
    }
    if (nan) {
        for (int64_t j = 0; j < d->S; j++) p[j] = NAN;
        return NAN;
    }
    if (mx == -INFINITY) {
        for (int64_t j = 0; j < d->S; j++) p[j] = 0;
        return -INFINITY;
    }
    double sum = 0;
    for (int64_t j = 0; j < d->S; j++) sum += (p[j] = exp(p[j] - mx));
    for (int64_t j = 0; j < d->S; j++) p[j] /= sum;
    return mx + log(sum);
}

size_t qkv_attn_ref_scratch(const qkv_attn_desc *d) { return (size_t)(2 * d->S + 1); }

void qkv_attn_forward_ref(const qkv_attn_desc *d, const float *q, const float *k, const float *v,
                          float *out, float *lse, float *weights, double *scratch)
{
    int64_t L = d->L, S = d->S, D = d->D, Dv = d->Dv;
    double *p = scratch; // (S)
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t h = 0; h < d->H; h++) {
            int64_t nh = n * d->H + h, kvh = qkv_attn_kv_head(d, &d->k_rows, n, h, 1) / S; /* its k, v head */
            const float *kh = k + kvh * S * D, *vh = v + kvh * S * Dv;
            for (int64_t i = 0; i < L; i++) {
                lse[nh * L + i] = (float)ref_row(d, n, h, i, q + (nh * L + i) * D, kh, p);
                for (int64_t j = 0; j < S; j++) p[j] *= qkv_attn_dropout(d, nh, i, j);
                if (weights)
                    for (int64_t j = 0; j < S; j++) weights[(nh * L + i) * S + j] = (float)p[j];
                for (int64_t x = 0; x < Dv; x++) {
                    double acc = 0;
                    for (int64_t j = 0; j < S; j++)
                        if (!ref_masked(d, n, h, i, j)) acc += p[j] * vh[j * Dv + x];
                    out[(nh * L + i) * Dv + x] = (float)acc;
                }
            }
        }
}

/* Differentiates out_i = sum_j z_ij p_ij v_j with p_i = softmax(s_i),
 * s_ij = scale q_i.k_j + mask_ij, z the dropout factors:
 *   dv_j += z_ij p_ij dout_i
 *   dp_ij = z_ij dout_i.v_j,  ds_ij = p_ij (dp_ij - sum_k p_ik dp_ik)
 *   dq_i += scale sum_j ds_ij k_j,  dk_j += scale ds_ij q_i */
void qkv_attn_backward_ref(const qkv_attn_desc *d, const float *q, const float *k,
                           const float *v, const float *out, const float *lse,
                           const float *dout, float *dq, float *dk, float *dv, double *scratch)
{
    int64_t L = d->L, S = d->S, D = d->D, Dv = d->Dv;
    double *p = scratch, *dp = p + S; // (S) each
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t h = 0; h < d->H; h++) {
            int64_t nh = n * d->H + h;
            const float *kh = k + nh * S * D, *vh = v + nh * S * Dv;
            for (int64_t i = 0; i < L; i++) {
                const float *qi = q + (nh * L + i) * D, *doi = dout + (nh * L + i) * Dv;
                if (ref_row(d, n, h, i, qi, kh, p) == -INFINITY) continue;
                double dsum = 0;
                for (int64_t j = 0; j < S; j++) {
                    dp[j] = 0;
                    if (ref_masked(d, n, h, i, j)) continue; /* p = 0, v_j not read */
                    double z = qkv_attn_dropout(d, nh, i, j), g = 0;
                    for (int64_t x = 0; x < Dv; x++) g += (double)doi[x] * vh[j * Dv + x];
                    dp[j] = z * g;
                    dsum += p[j] * dp[j];
                    if (dv)
                        for (int64_t x = 0; x < Dv; x++)
                            dv[(nh * S + j) * Dv + x] += (float)(z * p[j] * doi[x]);
                }
                for (int64_t j = 0; j < S; j++) {
                    if (ref_masked(d, n, h, i, j)) continue; /* ds = 0, k_j not read */
                    double ds = p[j] * (dp[j] - dsum) * d->scale;
                    if (dq)
                        for (int64_t x = 0; x < D; x++) dq[(nh * L + i) * D + x] += (float)(ds * kh[j * D + x]);
                    if (dk)
                        for (int64_t x = 0; x < D; x++) dk[(nh * S + j) * D + x] += (float)(ds * qi[x]);
                }
            }
        }
    (void)out;
    (void)lse;
}
