/* attention_decode.c: the decoding step's attention, split over the cache
 * length (see attention_decode.h). A step has few queries (usually one per
 * row) and a long cache: the fused kernel's parallelism over query blocks
 * leaves one thread per (row, head) there, so here the keys are cut into
 * chunks that threads take, and the chunks' partial softmaxes are merged. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "kernels/attention.h"
#include "kernels/attention_decode.h"
#include "kernels/half.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* Keys per chunk: desc.chunk or the default, at most S. */
static int64_t chunk_len(const qkv_decode_desc *d)
{
    int64_t c = d->chunk > 0 ? d->chunk : QKV_DECODE_CHUNK;
    return c < d->S ? c : d->S;
}

static int64_t chunk_count(const qkv_decode_desc *d)
{
    return (d->S + chunk_len(d) - 1) / chunk_len(d);
}

/* Floats of one work item's partial result: m, l of each query, then o (T,D). */
static int64_t part_len(const qkv_decode_desc *d)
{
    return d->T * (d->D + 2);
}

/* Parts of every item, then per thread the chunk's scores. */
size_t qkv_decode_scratch(const qkv_decode_desc *d, int threads)
{
    int64_t items = d->N * d->H * chunk_count(d);
    return (size_t)(items * part_len(d) + (int64_t)threads * chunk_len(d));
}

/* How keys and values are stored: floats, fp16 or bf16; floats and bf16
 * on AVX-512 (KV_F32_512, KV_BF16_512) have loops of their own
 * (query_512 below). */
enum { KV_F32 = 0, KV_F16, KV_BF16, KV_BF16_512, KV_F32_512 };

static inline int kind_f32(int kind)
{
    return kind == KV_F32 || kind == KV_F32_512;
}

/* Element i of a key or value row of that kind. */
static inline float row_at(const void *x, int kind, int64_t i)
{
    if (kind_f32(kind)) return ((const float *)x)[i];
    if (kind == KV_F16) return qkv_half_to_float(((const uint16_t *)x)[i]);
    return qkv_bf16_to_float(((const uint16_t *)x)[i]);
}

/* Key or value row r of a block (elements, not bytes). */
static inline const void *row_ptr(const void *x, int kind, int64_t r)
{
    return kind_f32(kind) ? (const void *)((const float *)x + r) : (const uint16_t *)x + r;
}

#if defined(__F16C__) && defined(__FMA__)
/* Elements [i, i+8) of a row as floats: fp16 converted as loaded, bf16
 * widened to 32 bits and shifted into the top half (exact). */
static inline __m256 row_load8(const void *x, int kind, int64_t i)
{
    if (kind == KV_F32) return _mm256_loadu_ps((const float *)x + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)x + i));
    if (kind == KV_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
#endif

#if defined(__x86_64__)
#define W512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
/* Elements [i, i+16) of a float or bf16 row (KV_F32_512, KV_BF16_512) as
 * floats (bf16 widened and shifted: exact). */
W512 static inline __m512 load16(const void *x, int kind, int64_t i)
{
    if (kind == KV_F32_512) return _mm512_loadu_ps((const float *)x + i);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)x + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* a.b and y += a x over D for a float or bf16 row b (x): 16 lanes, then
 * the lanes' sum; the tail in C. */
W512 static inline float dot_512(const float *a, const void *b, int kind, int64_t D)
{
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= D; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), load16(b, kind, i), acc);
    float sum = _mm512_reduce_add_ps(acc);
    for (; i < D; i++) sum += a[i] * row_at(b, kind, i);
    return sum;
}

W512 static inline void axpy_512(float *y, float a, const void *x, int kind, int64_t D)
{
    __m512 av = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= D; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, load16(x, kind, i), _mm512_loadu_ps(y + i)));
    for (; i < D; i++) y[i] += a * row_at(x, kind, i);
}

/* exp(x) in 16 lanes: the fused kernels' polynomial (attention_simd.h's
 * vexp: Cephes' expf coefficients, about 1 ulp); 0 below -87.3. */
W512 static inline __m512 exp16(__m512 x)
{
    const __m512 magic = _mm512_set1_ps(12582912.0f); /* 1.5 * 2^23 */
    __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_maskz_mov_ps(~tiny, x), _mm512_set1_ps(88.0f));
    __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), magic);
    __m512 n = _mm512_sub_ps(t, magic);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f),
                               _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x));
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(
        _mm512_add_epi32(_mm512_sub_epi32(_mm512_castps_si512(t), _mm512_castps_si512(magic)),
                         _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(~tiny, p, _mm512_castsi512_ps(e));
}

/* The permutations that sum 16 vectors' lanes into one vector (sum16):
 * at stage st (0..3) two vectors that each hold m = 2^st keys' partial
 * sums, w = 16/m lanes per key, become one that holds the 2m keys' in
 * w/2 lanes: lane i takes key p = i / (w/2) of the first vector (p < m)
 * or the second, its lanes sub and sub + w/2 (sub = i % (w/2)), added. */
static void sum16_index(int32_t idx[4][2][16])
{
    for (int st = 0; st < 4; st++) {
        int m = 1 << st, w = 16 / m, h = w / 2;
        for (int i = 0; i < 16; i++) {
            int p = i / h, sub = i % h, src = p < m ? p * w + sub : 16 + (p - m) * w + sub;
            idx[st][0][i] = src;
            idx[st][1][i] = src + h;
        }
    }
}

W512 static inline __m512 sum_pair(__m512 a, __m512 b, const int32_t ix[2][16])
{
    __m512i lo = _mm512_loadu_si512(ix[0]), hi = _mm512_loadu_si512(ix[1]);
    return _mm512_add_ps(_mm512_permutex2var_ps(a, lo, b), _mm512_permutex2var_ps(a, hi, b));
}

/* q.k for the 16 keys [j, j+16) of k (rows of D = 16 nd), the keys past
 * n reading key n-1 again (their lanes are not used): lane i = key j+i.
 * qv (nd) the query in registers; ix sum16_index's. */
W512 static inline __attribute__((always_inline)) __m512
dot16_keys(const __m512 *qv, const void *k, int kind, const int nd, int64_t j, int64_t n,
           const int32_t ix[4][2][16])
{
    __m512 r[16];
    for (int i = 0; i < 16; i++) {
        int64_t row = (j + i < n ? j + i : n - 1) * 16 * nd;
        __m512 acc = _mm512_mul_ps(qv[0], load16(k, kind, row));
        for (int d = 1; d < nd; d++) acc = _mm512_fmadd_ps(qv[d], load16(k, kind, row + 16 * d), acc);
        r[i] = acc;
    }
    for (int st = 0, m = 16; st < 4; st++, m /= 2)
        for (int i = 0; i < m / 2; i++) r[i] = sum_pair(r[2 * i], r[2 * i + 1], ix[st]);
    return r[0];
}

/* One query qt over n >= 1 keys and values (rows of D = 16 nd, float or
 * bf16) on AVX-512, chunk_attend's two passes: the scaled scores into s
 * (n) 16 keys at a time (a key masked by kpm (n), NULL for none, -inf)
 * and their max m; then p_j = exp(s_j - m) (masked keys skipped, as the
 * generic loop skips them), l = sum p_j and o (D) = sum p_j v_j with the
 * accumulators in registers. Returns m (NaN when a score is NaN, -inf
 * when every key is masked: o and *l are then not written). */
W512 static inline __attribute__((always_inline)) float
query_512(const float *qt, const void *k, const void *v, int kind, const int nd,
          const uint8_t *kpm, int64_t n, float scale, float *s, float *o, float *l)
{
    int32_t ix[4][2][16];
    sum16_index(ix);
    __m512 qv[8], ninf = _mm512_set1_ps(-INFINITY), mv = ninf, sc = _mm512_set1_ps(scale);
    for (int d = 0; d < nd; d++) qv[d] = _mm512_loadu_ps(qt + 16 * d);
    __mmask16 nan = 0, any_masked = 0;
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 in = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
        __m512 sv = _mm512_mul_ps(sc, dot16_keys(qv, k, kind, nd, j, n, ix));
        if (kpm) {
            __mmask16 pad = _mm_test_epi8_mask(_mm_maskz_loadu_epi8(in, kpm + j),
                                               _mm_set1_epi8((char)0xff)) & in;
            sv = _mm512_mask_mov_ps(sv, pad, ninf);
            any_masked |= pad;
        }
        nan |= _mm512_mask_cmp_ps_mask(in, sv, sv, _CMP_UNORD_Q);
        mv = _mm512_mask_max_ps(mv, in, mv, sv);
        _mm512_mask_storeu_ps(s + j, in, sv);
    }
    if (nan) return NAN;
    float m = _mm512_reduce_max_ps(mv);
    if (m == -INFINITY) return m;
    mv = _mm512_set1_ps(m);
    __m512 lv = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 in = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
        __m512 sv = _mm512_maskz_loadu_ps(in, s + j);
        __mmask16 live = _mm512_cmp_ps_mask(sv, ninf, _CMP_NEQ_UQ) & in;
        __m512 p = exp16(_mm512_sub_ps(sv, mv));
        lv = _mm512_mask_add_ps(lv, live, lv, p);
        _mm512_mask_storeu_ps(s + j, in, _mm512_mask_mov_ps(_mm512_set1_ps(-1.0f), live, p));
    }
    *l = _mm512_reduce_add_ps(lv);
    __m512 a0[8], a1[8];
    for (int d = 0; d < nd; d++) a0[d] = a1[d] = _mm512_setzero_ps();
    int64_t j = 0;
    if (!any_masked) /* two sets of accumulators: two chains of fused multiply-adds */
        for (; j + 2 <= n; j += 2) {
            __m512 p0 = _mm512_set1_ps(s[j]), p1 = _mm512_set1_ps(s[j + 1]);
            for (int d = 0; d < nd; d++) {
                a0[d] = _mm512_fmadd_ps(p0, load16(v, kind, j * 16 * nd + 16 * d), a0[d]);
                a1[d] = _mm512_fmadd_ps(p1, load16(v, kind, (j + 1) * 16 * nd + 16 * d), a1[d]);
            }
        }
    for (; j < n; j++) {
        if (s[j] < 0) continue; /* masked: -1 */
        __m512 p = _mm512_set1_ps(s[j]);
        for (int d = 0; d < nd; d++) a0[d] = _mm512_fmadd_ps(p, load16(v, kind, j * 16 * nd + 16 * d), a0[d]);
    }
    for (int d = 0; d < nd; d++) _mm512_storeu_ps(o + 16 * d, _mm512_add_ps(a0[d], a1[d]));
    return m;
}

/* query_512 for D = 16 nd, nd = 1..8, each build with nd constant. */
W512 static float query_512_any(const float *qt, const void *k, const void *v, int kind,
                                int64_t D, const uint8_t *kpm, int64_t n, float scale, float *s,
                                float *o, float *l)
{
    switch (D / 16) {
#define QUERY_CASE(nd) \
    case nd: return query_512(qt, k, v, kind, nd, kpm, n, scale, s, o, l);
    QUERY_CASE(1) QUERY_CASE(2) QUERY_CASE(3) QUERY_CASE(4)
    QUERY_CASE(5) QUERY_CASE(6) QUERY_CASE(7)
#undef QUERY_CASE
    default: return query_512(qt, k, v, kind, 8, kpm, n, scale, s, o, l);
    }
}
#endif

/* a.b over D, b a row of the given kind: 8 lanes of fused multiply-adds
 * (where the build has FMA) added pairwise at the end. Inlined with kind
 * constant. */
static inline __attribute__((always_inline)) float dot(const float *a, const void *b, int kind,
                                                       int64_t D)
{
#if defined(__x86_64__)
    if (kind == KV_BF16_512 || kind == KV_F32_512) return dot_512(a, b, kind, D);
#endif
    float sum = 0;
    int64_t i = 0;
#if defined(__F16C__) && defined(__FMA__)
    __m256 acc = _mm256_setzero_ps();
    for (; i + 8 <= D; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), row_load8(b, kind, i), acc);
    float l[8];
    _mm256_storeu_ps(l, acc);
    sum = ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
#endif
    for (; i < D; i++) sum += a[i] * row_at(b, kind, i);
    return sum;
}

/* y += a x over D, x a row of the given kind. */
static inline __attribute__((always_inline)) void axpy(float *y, float a, const void *x, int kind,
                                                       int64_t D)
{
#if defined(__x86_64__)
    if (kind == KV_BF16_512 || kind == KV_F32_512) {
        axpy_512(y, a, x, kind, D);
        return;
    }
#endif
    int64_t i = 0;
#if defined(__F16C__) && defined(__FMA__)
    __m256 av = _mm256_set1_ps(a);
    for (; i + 8 <= D; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, row_load8(x, kind, i), _mm256_loadu_ps(y + i)));
#endif
    for (; i < D; i++) y[i] += a * row_at(x, kind, i);
}

/* One work item: the queries q (T,D) of one (row, head) over its keys
 * [j0, j1). k, v (j1 - j0, D) those keys' rows, of the given kind;
 * kpm (S) the row's padding or NULL; part (T,2) m and l, then (T,D) o;
 * s (j1 - j0) scratch for the scores. Inlined with kind constant, so each
 * build of the loops is for one type. */
static inline __attribute__((always_inline)) void
chunk_attend(const qkv_decode_desc *d, const float *q, const void *k, const void *v, int kind,
             const uint8_t *kpm, int64_t j0, int64_t j1, float *part, float *s)
{
    int64_t D = d->D, T = d->T;
    for (int64_t t = 0; t < T; t++) {
        const float *qt = q + t * D; // (D)
        float *ot = part + 2 * T + t * D; // (D)
        int64_t end = j1, beg = j0;
        if (d->causal && end > d->S - T + t + 1) end = d->S - T + t + 1;
        if (d->span > 0 && beg < d->S - T + t - d->span + 1) beg = d->S - T + t - d->span + 1;
        float m = -INFINITY, l = 0;
        memset(ot, 0, (size_t)D * sizeof(float));
#if defined(__x86_64__)
        if ((kind == KV_BF16_512 || kind == KV_F32_512) && D % 16 == 0 && D <= 128 && end > beg) {
            m = query_512_any(qt, row_ptr(k, kind, (beg - j0) * D), row_ptr(v, kind, (beg - j0) * D),
                              kind, D, kpm ? kpm + beg : NULL, end - beg, d->scale, s, ot, &l);
            part[2 * t] = m;
            part[2 * t + 1] = isnan(m) ? NAN : l;
            continue;
        }
#endif
        int nan = 0;
        for (int64_t j = beg; j < end; j++) {
            const void *kj = row_ptr(k, kind, (j - j0) * D); // key j's row
            float sj = kpm && kpm[j] ? -INFINITY : d->scale * dot(qt, kj, kind, D);
            s[j - j0] = sj;
            if (isnan(sj)) nan = 1;
            else if (sj > m) m = sj;
        }
        if (nan) { /* a NaN score: the query's output is NaN (chunks_merge) */
            part[2 * t] = part[2 * t + 1] = NAN;
            continue;
        }
        for (int64_t j = beg; j < end && m > -INFINITY; j++) {
            if (s[j - j0] == -INFINITY) continue; /* masked: weight 0 */
            float p = expf(s[j - j0] - m);
            l += p;
            axpy(ot, p, row_ptr(v, kind, (j - j0) * D), kind, D);
        }
        part[2 * t] = m;
        part[2 * t + 1] = l;
    }
}

/* Query t of one (row, head): its nc chunks' parts (nc, part_len), merged
 * by the log-sum-exp rule into out (D); 0 when every key is masked. */
static void chunks_merge(const qkv_decode_desc *d, const float *parts, int64_t nc, int64_t t,
                         float *out)
{
    int64_t D = d->D, T = d->T, pl = part_len(d);
    float M = -INFINITY, L = 0;
    for (int64_t c = 0; c < nc; c++) {
        float mc = parts[c * pl + 2 * t];
        if (isnan(mc)) { /* fmaxf would drop it */
            for (int64_t i = 0; i < D; i++) out[i] = NAN;
            return;
        }
        M = fmaxf(M, mc);
    }
    memset(out, 0, (size_t)D * sizeof(float));
    if (M == -INFINITY) return;
    for (int64_t c = 0; c < nc; c++) {
        const float *p = parts + c * pl; // one chunk's part
        if (p[2 * t] == -INFINITY) continue; /* no live key in this chunk */
        float w = expf(p[2 * t] - M);
        L += w * p[2 * t + 1];
        axpy(out, w, p + 2 * T + t * D, KV_F32, D);
    }
    float inv = 1.0f / L;
    for (int64_t i = 0; i < D; i++) out[i] *= inv;
}

static qkv_status decode_check(const qkv_decode_desc *d, const float *q, const void *k,
                               const void *v, const float *out)
{
    const char *fn = "decode_attend";
    QKV_NEED(d, fn, "desc");
    QKV_NEED(q, fn, "q");
    QKV_NEED(k, fn, "k");
    QKV_NEED(v, fn, "v");
    QKV_NEED(out, fn, "out");
    if (d->N < 1 || d->H < 1 || d->T < 1 || d->S < 1 || d->D < 1)
        return qkv_fail(QKV_ERR_SHAPE, "%s: N %lld, H %lld, T %lld, S %lld and D %lld must all be "
                        ">= 1", fn, (long long)d->N, (long long)d->H, (long long)d->T,
                        (long long)d->S, (long long)d->D);
    if (d->chunk < 0)
        return qkv_fail(QKV_ERR_ARG, "%s: chunk %lld < 0", fn, (long long)d->chunk);
    if (d->group < 0 || (d->group > 1 && d->H % d->group))
        return qkv_fail(QKV_ERR_ARG, "%s: group %lld does not divide H %lld", fn,
                        (long long)d->group, (long long)d->H);
    if (d->span < 0 || (d->span > 0 && !d->causal))
        return qkv_fail(QKV_ERR_ARG, "%s: span %lld must be >= 0, and causal when > 0", fn,
                        (long long)d->span);
    /* Sizes in double first: the products below must not overflow. */
    double keys = (double)d->N * d->H * d->S * d->D;
    double span = (double)d->N * d->H * d->kv_stride + (double)d->N * d->kpm_stride;
    double parts = (double)d->N * d->H * ((double)d->S / chunk_len(d) + 1) * d->T * (d->D + 2);
    if (keys > 1e15 || span > 1e18 || parts > 1e15 ||
        parts * sizeof(float) > 0.25 * (double)SIZE_MAX)
        return qkv_fail(QKV_ERR_ARG, "%s: N %lld, H %lld, S %lld, D %lld, T %lld, kv_stride %lld, "
                        "kpm_stride %lld is too large (%g keys' floats, %g floats of scratch)",
                        fn, (long long)d->N, (long long)d->H, (long long)d->S, (long long)d->D,
                        (long long)d->T, (long long)d->kv_stride, (long long)d->kpm_stride, keys,
                        parts);
    if (d->causal && d->T > d->S)
        return qkv_fail(QKV_ERR_SHAPE, "%s: causal with T %lld queries > S %lld keys (the "
                        "queries' own keys are the last T)", fn, (long long)d->T, (long long)d->S);
    if (d->kv_stride < d->S * d->D)
        return qkv_fail(QKV_ERR_SHAPE, "%s: kv_stride %lld < S*D = %lld (blocks overlap)", fn,
                        (long long)d->kv_stride, (long long)(d->S * d->D));
    if (d->kpm && d->kpm_stride < d->S)
        return qkv_fail(QKV_ERR_SHAPE, "%s: kpm_stride %lld < S %lld", fn,
                        (long long)d->kpm_stride, (long long)d->S);
    if (!isfinite(d->scale))
        return qkv_fail(QKV_ERR_ARG, "%s: scale %g is not finite", fn, d->scale);
    return QKV_OK;
}

/* One work item (chunk_attend) for each kind, each a build of its own. */
static void chunk_f32(const qkv_decode_desc *d, const float *q, const void *k, const void *v,
                      const uint8_t *kpm, int64_t j0, int64_t j1, float *part, float *s)
{
    chunk_attend(d, q, k, v, KV_F32, kpm, j0, j1, part, s);
}

static void chunk_f16(const qkv_decode_desc *d, const float *q, const void *k, const void *v,
                      const uint8_t *kpm, int64_t j0, int64_t j1, float *part, float *s)
{
    chunk_attend(d, q, k, v, KV_F16, kpm, j0, j1, part, s);
}

static void chunk_bf16(const qkv_decode_desc *d, const float *q, const void *k, const void *v,
                       const uint8_t *kpm, int64_t j0, int64_t j1, float *part, float *s)
{
    chunk_attend(d, q, k, v, KV_BF16, kpm, j0, j1, part, s);
}

#if defined(__x86_64__)
W512 static void chunk_f32_512(const qkv_decode_desc *d, const float *q, const void *k,
                               const void *v, const uint8_t *kpm, int64_t j0, int64_t j1,
                               float *part, float *s)
{
    chunk_attend(d, q, k, v, KV_F32_512, kpm, j0, j1, part, s);
}

W512 static void chunk_bf16_512(const qkv_decode_desc *d, const float *q, const void *k,
                                    const void *v, const uint8_t *kpm, int64_t j0, int64_t j1,
                                    float *part, float *s)
{
    chunk_attend(d, q, k, v, KV_BF16_512, kpm, j0, j1, part, s);
}
#endif

typedef void (*chunk_fn)(const qkv_decode_desc *d, const float *q, const void *k, const void *v,
                         const uint8_t *kpm, int64_t j0, int64_t j1, float *part, float *s);

/* The chunks' partial attention, then their merge: on the calling
 * thread, or shared out between a region's threads (the `omp for`s). */
static void decode_items(const qkv_decode_desc *d, chunk_fn run, const float *q, const void *k,
                         const void *v, size_t elem, float *parts, float *scores, float *out)
{
    int64_t H = d->H, T = d->T, D = d->D, C = chunk_len(d), nc = chunk_count(d);
    int64_t items = d->N * H * nc, pl = part_len(d);
    float *s = scores + omp_get_thread_num() * C; // (C)
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; it++) {
        int64_t nh = it / nc, n = nh / H, j0 = it % nc * C, j1 = j0 + C < d->S ? j0 + C : d->S;
        int64_t g = d->group > 1 ? d->group : 1, kvh = n * (H / g) + nh % H / g; // its k, v block
        const uint8_t *kpm = d->kpm ? d->kpm + n * d->kpm_stride : NULL; // (S)
        size_t row0 = (size_t)(kvh * d->kv_stride + j0 * D) * elem;    // key j0 of block kvh, bytes
        run(d, q + nh * T * D, (const char *)k + row0, (const char *)v + row0, kpm, j0, j1,
            parts + it * pl, s);
    }
#pragma omp for schedule(static)
    for (int64_t i = 0; i < d->N * H * T; i++) {
        int64_t nh = i / T, t = i % T;
        chunks_merge(d, parts + nh * nc * pl, nc, t, out + i * D);
    }
}

/* 1 when OpenMP's threads sleep between regions (OMP_WAIT_POLICY=PASSIVE):
 * each region then wakes them. Read once; a benign race. */
static int passive_wait(void)
{
    static int state; /* 0 unread, 1 passive, 2 not */
    if (!state) {
        const char *w = getenv("OMP_WAIT_POLICY");
        state = w && !strcasecmp(w, "passive") ? 1 : 2;
    }
    return state == 1;
}

/* k, v of the given kind (floats, fp16 or bf16 elements). */
static qkv_status decode_run(qkv_arena *a, const qkv_decode_desc *d, const float *q, const void *k,
                             const void *v, int kind, float *out)
{
    QKV_NEED(a, "decode_attend", "arena");
    QKV_TRY(decode_check(d, q, k, v, out));
    int64_t N = d->N, H = d->H, T = d->T, D = d->D, nc = chunk_count(d);
    int64_t items = N * H * nc, pl = part_len(d);
    size_t elem = kind_f32(kind) ? sizeof(float) : sizeof(uint16_t);
    chunk_fn run = kind == KV_F32 ? chunk_f32 : kind == KV_F16 ? chunk_f16 : chunk_bf16;
#if defined(__x86_64__)
    if (kind == KV_BF16_512) run = chunk_bf16_512;
    if (kind == KV_F32_512) run = chunk_f32_512;
#endif
    /* A step over a short cache is a few microseconds of work: waking the
     * team would cost more. */
    int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (N * H * T * d->S * D < (passive_wait() ? QKV_DECODE_PAR_MIN : QKV_DECODE_PAR_MIN_SPIN)) threads = 1;
    if (threads > items) threads = (int)items;
    qkv_arena_mark mark = qkv_arena_get_mark(a);
    size_t n = qkv_decode_scratch(d, threads);
    float *parts = qkv_arena_alloc(a, n * sizeof(float)); // (items, pl)
    if (!parts)
        return qkv_fail(QKV_ERR_NOMEM, "decode_attend: cannot allocate %zu floats of scratch", n);
    float *scores = parts + items * pl; // (threads, C)
    if (threads > 1) { /* not even a region of one thread otherwise (QKV_PAR_FOR) */
#pragma omp parallel num_threads(threads)
        decode_items(d, run, q, k, v, elem, parts, scores, out);
    } else
        decode_items(d, run, q, k, v, elem, parts, scores, out);
    qkv_arena_release(a, mark);
    return QKV_OK;
}

/* AVX-512 where the CPU has it and the attention kernels are not held to a
 * narrower build (QKV_ISA, qkv_attn_simd_force: attention_flash.c). */
static int wide512(void)
{
#if defined(__x86_64__)
    return !strcmp(qkv_attn_simd_current()->name, "avx512");
#else
    return 0;
#endif
}

qkv_status qkv_decode_attend(qkv_arena *a, const qkv_decode_desc *d, const float *q,
                             const float *k, const float *v, float *out)
{
    return decode_run(a, d, q, k, v, wide512() ? KV_F32_512 : KV_F32, out);
}

qkv_status qkv_decode_attend_half(qkv_arena *a, const qkv_decode_desc *d, const float *q,
                                  const uint16_t *k, const uint16_t *v, float *out)
{
    return decode_run(a, d, q, k, v, KV_F16, out);
}

qkv_status qkv_decode_attend_bf16(qkv_arena *a, const qkv_decode_desc *d, const float *q,
                                  const uint16_t *k, const uint16_t *v, float *out)
{
    return decode_run(a, d, q, k, v, wide512() ? KV_BF16_512 : KV_BF16, out);
}
