/* attention_flash.c: the fast path of scaled dot-product attention: picks
 * the fused kernels' build for this CPU (attention_simd.h, compiled per
 * instruction set) and does the O(L) work around them: scratch sizes, the
 * sum of the per-thread dq buffers of the backward.
 * Also the attention weights from a forward's lse, when asked for. */
#include <stdlib.h>
#include <string.h>
#include "kernels/attention.h"
#include "kernels/bf16.h"

int qkv_attn_simd_runs(const qkv_attn_simd *s)
{
    if (!s->forward) return 0;
#if defined(__x86_64__) || defined(__i386__)
    if (s == &qkv_attn_simd_avx512) /* the file is built with these four */
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
    if (s == &qkv_attn_simd_avx2 || s == &qkv_attn_simd_bf16_avx2)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (s == &qkv_attn_simd_bf16_avx512)
        return qkv_attn_simd_runs(&qkv_attn_simd_avx512) && qkv_bf16_dot_supported();
    if (s == &qkv_attn_simd_bf16_amx)
        return qkv_attn_simd_runs(&qkv_attn_simd_bf16_avx512) && qkv_amx_usable();
#endif
    return 1;
}

/* The FP32 builds, widest first, and the bf16 ones; NULL-terminated. */
static const qkv_attn_simd *const simd_all[] = {&qkv_attn_simd_avx512, &qkv_attn_simd_avx2,
                                                &qkv_attn_simd_portable, NULL};
static const qkv_attn_simd *const bf16_all[] = {&qkv_attn_simd_bf16_amx, &qkv_attn_simd_bf16_avx512,
                                                &qkv_attn_simd_bf16_avx2, &qkv_attn_simd_bf16_portable, NULL};
static const qkv_attn_simd *simd_forced, *bf16_forced;

/* The build of `all` called name that runs here, or NULL. */
static const qkv_attn_simd *simd_named(const qkv_attn_simd *const *all, const char *name)
{
    for (; name && *all; all++)
        if (!strcmp(name, (*all)->name) && qkv_attn_simd_runs(*all)) return *all;
    return NULL;
}

/* *forced = the build of `all` called name (NULL name: none); 0, changing
 * nothing, for a name unknown or not runnable here. */
static int simd_force_in(const qkv_attn_simd *const *all, const qkv_attn_simd **forced, const char *name)
{
    const qkv_attn_simd *s = name ? simd_named(all, name) : NULL;
    if (name && !s) return 0;
    *forced = s;
    return 1;
}

const qkv_attn_simd *qkv_attn_simd_current(void)
{
    if (simd_forced) return simd_forced;
    const qkv_attn_simd *s = simd_named(simd_all, getenv("QKV_ISA"));
    if (s) return s;
    for (size_t i = 0; simd_all[i]; i++)
        if (qkv_attn_simd_runs(simd_all[i])) return simd_all[i];
    return &qkv_attn_simd_portable;
}

int qkv_attn_simd_force(const char *name) { return simd_force_in(simd_all, &simd_forced, name); }

int qkv_attn_simd_bf16_force(const char *name) { return simd_force_in(bf16_all, &bf16_forced, name); }

const qkv_attn_simd *qkv_attn_simd_bf16_current(void)
{
    if (bf16_forced) return bf16_forced;
    const qkv_attn_simd *f = qkv_attn_simd_current();
    if (f == &qkv_attn_simd_avx512 && qkv_attn_simd_runs(&qkv_attn_simd_bf16_amx)) return &qkv_attn_simd_bf16_amx;
    if (f == &qkv_attn_simd_avx512 && qkv_attn_simd_runs(&qkv_attn_simd_bf16_avx512))
        return &qkv_attn_simd_bf16_avx512;
    if (f != &qkv_attn_simd_portable && qkv_attn_simd_runs(&qkv_attn_simd_bf16_avx2)) return &qkv_attn_simd_bf16_avx2;
    return &qkv_attn_simd_bf16_portable;
}

/* The build d asks for: FP32 or bf16 operands. */
static const qkv_attn_simd *simd_for(const qkv_attn_desc *d)
{
    return d->bf16 ? qkv_attn_simd_bf16_current() : qkv_attn_simd_current();
}

/* Sizes for the widest build, which every narrower one fits in (the bf16
 * builds add their operand copies, the same size in each). */
static const qkv_attn_simd *simd_sizing(const qkv_attn_desc *d)
{
    return d->bf16 ? &qkv_attn_simd_bf16_portable : &qkv_attn_simd_portable;
}

size_t qkv_attn_forward_scratch(const qkv_attn_desc *d, int threads)
{
    return simd_sizing(d)->forward_scratch(d, threads);
}

/* D_i (N*H*L), the per-thread tiles and one dq buffer (N*H*L*D) per thread:
 * every key tile adds into every query row's dq. */
size_t qkv_attn_backward_scratch(const qkv_attn_desc *d, int threads)
{
    size_t nq = (size_t)(d->N * d->H * d->L * d->D);
    return (size_t)(d->N * d->H * d->L) +
           simd_sizing(d)->backward_scratch(d, threads) + (size_t)threads * nq;
}

void qkv_attn_forward_flash(const qkv_attn_desc *d, const float *q, const float *k,
                            const float *v, float *out, float *lse, float *scratch, int threads)
{
    simd_for(d)->forward(d, q, k, v, out, lse, scratch, threads);
}

void qkv_attn_backward_flash(const qkv_attn_desc *d, const float *q, const float *k,
                             const float *v, const float *out, const float *lse,
                             const float *dout, float *dq, float *dk, float *dv, float *scratch,
                             int threads)
{
    int64_t NH = d->N * d->H, L = d->L;
    size_t nq = (size_t)(NH * L * d->D);
    float *Di = scratch;                                                    // (N,H,L)
    float *tiles = Di + NH * L;                                             // (threads, per thread)
    float *dqs = tiles + simd_sizing(d)->backward_scratch(d, threads);        // (threads,N,H,L,D)
    /* One key tile per head: the kernel adds into dq itself (attention_simd.h) */
    int direct = d->S <= QKV_ATTN_BK;
    if (dq && !direct) memset(dqs, 0, (size_t)threads * nq * sizeof(float));
    simd_for(d)->backward(d, q, k, v, out, lse, dout, Di, dq ? (direct ? dq : dqs) : NULL,
                                      dk, dv, tiles, threads);
    if (dq && !direct) {
        int64_t D = d->D, ld = qkv_attn_ld(&d->q_rows, D);
#pragma omp parallel for num_threads(threads)
        for (int64_t r = 0; r < NH * L; r++) { /* row r % L of head r / L, rows as q's */
            float *row = dq + qkv_attn_head(&d->q_rows, d->H, r / L / d->H, r / L % d->H, L, D) + r % L * ld;
            for (int64_t x = 0; x < D; x++) {
                float acc = 0;
                for (int th = 0; th < threads; th++) acc += dqs[(size_t)th * nq + r * D + x];
                row[x] = (d->grads_unset ? 0.0f : row[x]) + d->scale * acc;
            }
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
                const float *qi = q + (nh * L + i) * D;
                const float *kj = k + qkv_attn_kv_head(d, &d->k_rows, nh / d->H, nh % d->H, D) + j * D;
                float t = qkv_attn_mask_term(d, nh / d->H, nh % d->H, i, j), s = 0;
                if (t == -INFINITY) { /* masked: 0 (NaN in a NaN row), k_j not read */
                    w[j] = isnan(li) ? NAN : 0.0f;
                    continue;
                }
                for (int64_t x = 0; x < D; x++) s += qi[x] * kj[x];
                s = s * d->scale + t;
                w[j] = expf(s - li) * qkv_attn_dropout(d, nh, i, j);
            }
        }
}
