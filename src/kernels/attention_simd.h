/* attention_simd.h: the fused attention kernels, written once over a SIMD
 * vector type and compiled once per instruction set. Each of
 * attention_avx512.c, attention_avx2.c and attention_portable.c defines
 *   VW       floats per vector (16, 8, 4)
 *   NV       vectors per row of a register block (accumulators: R x NV)
 *   ISA(x)   the name suffix of what it exports, ISA_NAME its name
 * and includes this file; attention_flash.c picks one at run time.
 *
 * Layout. A query block holds BQ rows, a key tile BK keys. Scores are kept
 * transposed, st (BK,BQ): key j's row holds its score against every query
 * of the block, so the softmax statistics of the BQ queries (max, sum,
 * log-sum-exp) are vectors and every pass over a tile runs across vectors.
 * All five products of forward and backward are one kernel, tile_gemm:
 *   forward    st  = K_tile Q_blk^T,    O_blk += P V_tile  (P read from st)
 *   backward   st  = K_tile  Q_blk^T,   dpt = V_tile dO_blk^T
 *              dV_tile += P^T dO_blk,   dK_tile += dS^T Q_blk,   dQ_blk = dS K_tile
 * Forward: online softmax over key tiles (running max m and sum l per query,
 * the output rescaled when m grows), log-sum-exp saved for the backward.
 * Backward: FlashAttention-2, recomputing p = exp(s - lse) tile by tile,
 * ds = p (dp - D_i) with D_i = dout_i . out_i. */
#include <omp.h>
#include <string.h>
#include "kernels/attention.h"

#ifndef VW
#error "define VW, NV and ISA before including attention_simd.h"
#endif

#include "kernels/attention_simd_tiles.h"

/* st (njp,BQ) of a (BK,BQ) buffer *= scale, plus the mask term where the
 * tile needs it; key rows past nj (padding up to njp) get -inf, and so do
 * masked keys whatever their score (a NaN or infinite q.k included: a
 * masked key's k never matters). */
static void scores_finish(const qkv_attn_desc *d, int64_t n, int64_t h, int64_t i0, int64_t i1,
                          int64_t j0, int64_t nj, int64_t njp, float *st)
{
    for (int64_t j = 0; j < njp; j++)
        for (int64_t i = 0; i < BQ; i += VW) {
            vf s = vload(st + j * BQ + i) * d->scale;
            vstore(st + j * BQ + i, j < nj ? s : vsplat(-INFINITY));
        }
    if (!tile_masked(d, i0, i1, j0, j0 + nj)) return;
    if (causal_only(d)) {
        /* Causal alone (a GPT's diagonal tiles): key j0+j is masked for the
         * queries i0+i with i0+i+diag < j0+j, the rows' first queries; the
         * same scores as the general loop, without its per-element calls. */
        for (int64_t j = 0; j < nj && j0 + j < d->mask_keys; j++) {
            int64_t lim = j0 + j - d->diag - i0;
            if (lim > i1 - i0) lim = i1 - i0;
            for (int64_t i = 0; i < lim; i++) st[j * BQ + i] = -INFINITY;
        }
        return;
    }
    /* A masked score is -inf whatever the key held (a NaN in a masked
     * key's k must not reach the row: docs/reliability.md, NaN inputs). */
    for (int64_t j = 0; j < nj; j++)
        for (int64_t i = 0; i < i1 - i0; i++) {
            float t = qkv_attn_mask_term(d, n, h, i0 + i, j0 + j);
            st[j * BQ + i] = t == -INFINITY ? t : st[j * BQ + i] + t;
        }
}

/* scores_finish, and mt[v] = max(mt[v], the scores of queries [v VW,
 * (v+1) VW) over the tile's nj keys): in one pass where the tile has no
 * mask term. */
static void scores_finish_max(const qkv_attn_desc *d, int64_t n, int64_t h, int64_t i0, int64_t i1,
                              int64_t j0, int64_t nj, int64_t njp, float *st, vf mt[BQ / VW])
{
    if (tile_masked(d, i0, i1, j0, j0 + nj)) {
        scores_finish(d, n, h, i0, i1, j0, nj, njp, st);
        for (int64_t j = 0; j < nj; j++)
            for (int64_t v = 0; v < BQ / VW; v++) mt[v] = vmax(mt[v], vload(st + j * BQ + v * VW));
        return;
    }
    for (int64_t j = 0; j < nj; j++)
        for (int64_t v = 0; v < BQ / VW; v++) {
            vf s = vload(st + j * BQ + v * VW) * d->scale;
            vstore(st + j * BQ + v * VW, s);
            mt[v] = vmax(mt[v], s);
        }
    for (int64_t j = nj; j < njp; j++)
        for (int64_t i = 0; i < BQ; i += VW) vstore(st + j * BQ + i, vsplat(-INFINITY));
}

/* pt (BK,BQ) *= the dropout keep factors z(i,j); only with dropout on. */
static void tile_dropout(const qkv_attn_desc *d, int64_t nh, int64_t i0, int64_t i1, int64_t j0,
                         int64_t nj, float *pt)
{
    for (int64_t j = 0; j < nj; j++)
        for (int64_t i = 0; i < i1 - i0; i++) pt[j * BQ + i] *= qkv_attn_dropout(d, nh, i0 + i, j0 + j);
}

/* ---- forward -------------------------------------------------------------- */

/* Are the first n rows of x (rows of w floats) all finite? */
static int rows_finite(const float *x, int64_t n, int64_t w)
{
    vf acc = vsplat(0);
    for (int64_t r = 0; r < n * w; r += VW) acc += vload(x + r) * 0.0f; /* NaN for NaN or inf */
    vi bad = acc != acc;
    for (int l = 0; l < VW; l++)
        if (bad[l]) return 0;
    return 1;
}

/* ob (BQ,Dvp) += P V over the tile's nj keys, leaving out the keys masked
 * for each row, so that a masked key's value is never read (the tile
 * product would add 0 x NaN = NaN). Only for tiles with a masked key and a
 * non-finite value: the rare case. pt (BK,BQ) the probabilities. */
static void pv_skip_masked(const qkv_attn_desc *d, int64_t n, int64_t h, int64_t i0, int64_t i1,
                           int64_t j0, int64_t nj, const float *pt, const float *vt, int64_t Dvp,
                           float *ob)
{
    for (int64_t i = 0; i < i1 - i0; i++)
        for (int64_t j = 0; j < nj; j++) {
            if (qkv_attn_mask_term(d, n, h, i0 + i, j0 + j) == -INFINITY) continue;
            vf p = vsplat(pt[j * BQ + i]);
            for (int64_t x = 0; x < Dvp; x += VW)
                vstore(ob + i * Dvp + x, VFMA(p, vload(vt + j * Dvp + x), vload(ob + i * Dvp + x)));
        }
}

/* Per-thread scratch of the forward, in floats (sizes padded for VW = 16,
 * the widest, so that attention_flash.c can size it for any variant). */
static size_t fwd_scratch(const qkv_attn_desc *d)
{
    int64_t Dp = round_up(d->D, 16), Dvp = round_up(d->Dv, 16);
    return (size_t)(Dp * BQ + BK * Dp + BK * Dvp + BK * BQ + BQ * Dvp + 2 * BQ) + pack_scratch(d);
}

/* Query rows [i0,i1) of head (n,h). q (L,D), k (S,D), v (S,Dv) of this
 * head, out (L,Dv), rows d's q_rows, k_rows, ... apart; lse (L). */
static void forward_block(const qkv_attn_desc *d, int64_t n, int64_t h, int64_t i0, int64_t i1,
                          const float *q, const float *k, const float *v, float *out, float *lse,
                          kv_packed kv, float *scratch)
{
    int64_t D = d->D, Dv = d->Dv, Dvp = round_up(Dv, VW), nh = n * d->H + h;
    int64_t ldq = qkv_attn_ld(&d->q_rows, D), ldk = qkv_attn_ld(&d->k_rows, D);
    int64_t ldv = qkv_attn_ld(&d->v_rows, Dv), ldo = qkv_attn_ld(&d->o_rows, Dv);
    float *qt = scratch;                  // (D,BQ) the block's queries, transposed
    float *kbuf = qt + round_up(D, 16) * BQ; // (BK,Dp) a short key tile, padded
    float *vbuf = kbuf + BK * round_up(D, 16); // (BK,Dvp)
    float *st = vbuf + BK * round_up(Dv, 16);  // (BK,BQ) scores, then probabilities
    float *ob = st + BK * BQ;             // (BQ,Dvp) unnormalised output
    float *m = ob + BQ * round_up(Dv, 16), *l = m + BQ; // (BQ) running max and sum
    packs pk = packs_make(d, l + BQ);
    if (!fwd_block_begin(d, q, ldq, i0, i1, pk)) rows_transpose(q, ldq, D, i0, i1, BQ, qt);
    memset(ob, 0, (size_t)(BQ * Dvp) * sizeof(float));
    for (int64_t i = 0; i < BQ; i += VW) {
        vstore(m + i, vsplat(-INFINITY));
        vstore(l + i, vsplat(0));
    }
    key_walk w = key_walk_make(d, i0, i1);
    int64_t j1;
    for (int64_t j0 = key_walk_next(&w, 0, &j1); j0 >= 0; j0 = key_walk_next(&w, j1, &j1)) {
        /* A short tile (S < BK, a ViT's 50 tokens) is worked on njp rows,
         * nj rounded up to the register block, not on all BK. */
        int64_t nj = j1 - j0, njp = round_up(nj, R);
        int packed = fwd_tile_packed(d, kv, j0, nj), masked = tile_masked(d, i0, i1, j0, j1);
        /* The tile's keys and values as rows (a copy where they are not
         * contiguous): for the products where the build has not packed
         * them, and for a masked tile's check of its values */
        const float *kt = packed ? NULL : rows_block(k, ldk, D, j0, j1, njp, D, kbuf);
        const float *vt = packed && !masked ? NULL : rows_block(v, ldv, Dv, j0, j1, njp, Dvp, vbuf);
        /* Online softmax, BQ queries at once: new max, correction
         * exp(m_old - m_new), p = exp(s - m_new), l = l corr + sum p. */
        vf mt[BQ / VW]; /* the tile's max per query: BQ/VW independent chains */
        for (int64_t v = 0; v < BQ / VW; v++) mt[v] = vload(m + v * VW);
        if (!fwd_scores(d, kv, i0, i1, j0, packed, nj, njp, kt, qt, st, pk, mt)) /* st = K Q^T */
            scores_finish_max(d, n, h, i0, i1, j0, nj, njp, st, mt);
        /* A masked key's value is not read where some value is not finite
         * (pv_skip_masked); otherwise the probabilities go straight to the
         * product's operand where the build packs them (pairs) */
        int skip = masked && !rows_finite(vt, nj, Dvp);
        int pairs = d->dropout_p == 0.0f && !skip;
        for (int64_t i = 0; i < BQ; i += VW) {
            vf mb = mt[i / VW];
            vi none = mb == -INFINITY; /* every key so far masked */
            vf mref = vselect(none, vsplat(0), mb);
            vf corr = vexp(vload(m + i) - mref), sum = vsplat(0);
            for (int64_t j = 0; j < njp; j += 2) { /* njp is even */
                vf p0 = vexp_p(vload(st + j * BQ + i) - mref), p1 = vexp_p(vload(st + (j + 1) * BQ + i) - mref);
                sum += p0;
                sum += p1;
                p_put(st, pk, pairs, j, i, p0, p1);
            }
            vstore(l + i, vload(l + i) * corr + sum);
            vstore(m + i, mb);
            float cs[VW];
            vstore(cs, corr);
            for (int64_t r = 0; r < VW; r++)
                if (cs[r] != 1.0f)
                    for (int64_t x = 0; x < Dvp; x += VW)
                        vstore(ob + (i + r) * Dvp + x, vload(ob + (i + r) * Dvp + x) * cs[r]);
        }
        if (d->dropout_p > 0.0f) tile_dropout(d, nh, i0, i1, j0, nj, st);
        if (skip)
            pv_skip_masked(d, n, h, i0, i1, j0, nj, st, vt, Dvp, ob); /* masked v not read */
        else
            fwd_pv(kv, j0, packed, njp, st, pairs, vt, Dvp, ob, pk); /* O += P V */
    }
    for (int64_t i = i0; i < i1; i++) {
        float mi = m[i - i0], li = l[i - i0];
        if (mi == -INFINITY) { /* every key masked: output 0 */
            memset(out + i * ldo, 0, (size_t)Dv * sizeof(float));
            lse[i] = -INFINITY;
            continue;
        }
        float inv = 1.0f / li;
        for (int64_t x = 0; x < Dv; x++) out[i * ldo + x] = ob[(i - i0) * Dvp + x] * inv;
        lse[i] = mi + logf(li);
    }
}

/* scratch: threads x fwd_scratch, then fwd_shared (the packed K and V of
 * the builds that pack them). */
static void forward(const qkv_attn_desc *d, const float *q, const float *k, const float *v,
                    float *out, float *lse, float *scratch, int threads)
{
    int64_t NH = d->N * d->H, H = d->H, L = d->L, D = d->D, Dv = d->Dv, nb = (L + BQ - 1) / BQ;
    float *shared = fwd_shared(d) ? scratch + (size_t)threads * fwd_scratch(d) : NULL;
    /* Short sequences (a few query blocks a head) and heads enough for
     * every thread: each thread takes whole heads and packs a head's K and
     * V just before its blocks, into a head's room of shared of its own
     * (still in its cache when they read it), not every head's before any
     * block (written out to memory and read back). */
    int per_head = shared && fwd_head_floats(d) && nb <= 4 && NH >= 2 * threads; /* builds that pack */
#pragma omp parallel num_threads(threads)
    {
        float *mine = scratch + (size_t)omp_get_thread_num() * fwd_scratch(d);
        /* a thread's key and value buffers of forward_block (its layout) */
        float *kbuf = mine + round_up(D, 16) * BQ, *vbuf = kbuf + BK * round_up(D, 16);
        float *room = per_head ? shared + (size_t)omp_get_thread_num() * fwd_head_floats(d) : NULL;
        tiles_begin();
        if (!per_head) fwd_pack_heads(d, k, v, shared, kbuf, vbuf); /* with its barrier, where it packs */
#pragma omp for schedule(dynamic)
        for (int64_t t = 0; t < (per_head ? NH : NH * nb); t++) {
            /* a task: a head's blocks [b0, b1), all of them per head */
            int64_t nh = per_head ? t : t / nb, n = nh / H, h = nh % H;
            int64_t b0 = per_head ? 0 : t % nb, b1 = per_head ? nb : b0 + 1;
            float *hp = per_head ? room : shared ? shared + (size_t)nh * fwd_head_floats(d) : NULL;
            if (per_head) fwd_pack_head(d, k, v, nh, hp, kbuf, vbuf);
            for (int64_t b = b0; b < b1; b++) {
                int64_t i0 = b * BQ, i1 = i0 + BQ < L ? i0 + BQ : L;
                forward_block(d, n, h, i0, i1, q + qkv_attn_head(&d->q_rows, H, n, h, L, D),
                              k + qkv_attn_kv_head(d, &d->k_rows, n, h, D),
                              v + qkv_attn_kv_head(d, &d->v_rows, n, h, Dv),
                              out + qkv_attn_head(&d->o_rows, H, n, h, L, Dv), lse + nh * L,
                              fwd_head_packs(d, hp), mine);
            }
        }
        tiles_end();
    }
}

/* ---- backward ------------------------------------------------------------- */

/* dqb (BQ,Dp) = dS K over the tile's nj keys, leaving out the keys masked
 * for each row (ds = 0 there, but 0 x NaN would be NaN): for tiles with a
 * masked key and a non-finite k only. dst (BK,BQ), kt (BK,Dp). */
static void dsk_skip_masked(const qkv_attn_desc *d, int64_t n, int64_t h, int64_t i0, int64_t i1,
                            int64_t j0, int64_t nj, const float *dst, const float *kt, int64_t Dp,
                            float *dqb)
{
    memset(dqb, 0, (size_t)(BQ * Dp) * sizeof(float));
    for (int64_t i = 0; i < i1 - i0; i++)
        for (int64_t j = 0; j < nj; j++) {
            if (qkv_attn_mask_term(d, n, h, i0 + i, j0 + j) == -INFINITY) continue;
            vf ds = vsplat(dst[j * BQ + i]);
            for (int64_t x = 0; x < Dp; x += VW)
                vstore(dqb + i * Dp + x, VFMA(ds, vload(kt + j * Dp + x), vload(dqb + i * Dp + x)));
        }
}

/* D_i = dout_i . out_i, summed exactly as tile_block sums dp_ij =
 * dout_i . v_j (one multiply-add after another from x = 0, fused alike):
 * where a row sees one key, out_i = v_j and ds = p (dp - D_i) is then
 * exactly 0, as PyTorch's is. */
static float row_dot(const float *a, const float *b, int64_t n)
{
#if defined(ATTN_BF16)
    /* In the bf16 builds dp_ij = bf16(dout_i) . bf16(v_j), so D_i takes
     * dout_i rounded the same way: then sum_j p_ij dp_ij = D_i up to the
     * forward's rounding of p, i.e. each row of ds sums to about 0, as
     * in FP32. With dout_i unrounded, every ds_ij of the row carried the
     * same error p_ij (D_i - bf16(dout_i) . out_i) (docs/bf16.md, "The
     * rows of dS sum to zero"). VW lanes at once, the tail one by one. */
    float ar[VW]; /* rounded in line (qkv_bf16_round_floats' bits): a call per VW
                   * values was most of the D_i loop's time at head size 64 */
    vf acc = vsplat(0);
    int64_t x = 0;
    for (; x + VW <= n; x += VW) {
        for (int l = 0; l < VW; l++) ar[l] = qkv_bf16_round(a[x + l]);
        acc = VFMA(vload(ar), vload(b + x), acc);
    }
    float s = 0;
    for (int l = 0; l < VW; l++) s += acc[l];
    for (; x < n; x++) s = SFMA(qkv_bf16_round(a[x]), b[x], s);
    return s;
#else
    float acc = 0;
    for (int64_t x = 0; x < n; x++) acc = SFMA(a[x], b[x], acc);
    return acc;
#endif
}

static size_t bwd_scratch(const qkv_attn_desc *d)
{
    int64_t Dp = round_up(d->D, 16), Dvp = round_up(d->Dv, 16);
    return (size_t)(2 * (Dp + Dvp) * BQ + 2 * (Dp + Dvp) * BK + 2 * BK * BQ + BQ * Dp + 2 * BQ) +
           pack_scratch(d);
}

/* The backward of key tile [j0,j1) of head (n,h): every query block that
 * sees it. q (L,D), k (S,D), v (S,Dv), dout (L,Dv) of this head, rows d's
 * q_rows, ... apart, lse and Di (L); adds into dk, dv (S,..) (either may be
 * NULL; rows as k's and v's) and dq (L,D), rows dq_ld apart (NULL for
 * none), times dq_scale; hp the head's packed query blocks (the bf16
 * dot-product build's bwd_pack_head), or NULL. Differentiates out_i =
 * sum_j z_ij p_ij v_j,
 * p_ij = exp(s_ij - lse_i), s_ij = scale q_i.k_j + mask_ij:
 *   dv_j += z p dout_i;  dp = z dout_i.v_j;  ds = p (dp - D_i)
 *   dq_i += scale ds k_j;  dk_j += scale ds q_i */
static void backward_tile(const qkv_attn_desc *d, int64_t n, int64_t h, int64_t j0, int64_t j1,
                          const float *q, const float *k, const float *v, const float *lse,
                          const float *Di, const float *dout, float *dq, int64_t dq_ld, float dq_scale,
                          float *dk, float *dv, int unset, const float *hp, float *scratch)
{
    int64_t L = d->L, D = d->D, Dv = d->Dv, nh = n * d->H + h, nj = j1 - j0;
    int64_t ldq = qkv_attn_ld(&d->q_rows, D), ldk = qkv_attn_ld(&d->k_rows, D);
    int64_t ldv = qkv_attn_ld(&d->v_rows, Dv), ldo = qkv_attn_ld(&d->o_rows, Dv);
    int64_t njp = round_up(nj, R); /* rows worked on: a short tile is not padded to BK */
    int64_t Dp = round_up(D, VW), Dvp = round_up(Dv, VW);
    int64_t D16 = round_up(D, 16), Dv16 = round_up(Dv, 16);
    float *qt = scratch;            // (D,BQ) queries of the block, transposed
    float *dot = qt + D16 * BQ;     // (Dv,BQ) dout of the block, transposed
    float *qbuf = dot + Dv16 * BQ;  // (BQ,Dp) queries, padded
    float *dobuf = qbuf + D16 * BQ; // (BQ,Dvp) dout, padded
    float *kbuf = dobuf + Dv16 * BQ; // (BK,Dp) keys of the tile, padded
    float *vbuf = kbuf + D16 * BK;   // (BK,Dv)
    float *dkt = vbuf + Dv16 * BK;   // (BK,Dp) dk of the tile
    float *dvt = dkt + D16 * BK;     // (BK,Dvp) dv of the tile
    float *st = dvt + Dv16 * BK;     // (BK,BQ) scores, then p
    float *dpt = st + BK * BQ;       // (BK,BQ) dp, then ds
    float *dqb = dpt + BK * BQ;      // (BQ,Dp) dq of the block
    float *lb = dqb + D16 * BQ, *db = lb + BQ; // (BQ) lse (+inf where no key), D_i
    packs pk = packs_make(d, db + BQ);
    const float *kt = rows_block(k, ldk, D, j0, j1, njp, Dp, kbuf);
    const float *vt = rows_block(v, ldv, Dv, j0, j1, njp, Dv, vbuf);
    memset(dkt, 0, (size_t)(njp * Dp) * sizeof(float));
    memset(dvt, 0, (size_t)(njp * Dvp) * sizeof(float));
    int k_finite = -1; /* are the tile's keys finite? asked at its first masked block */
    tile_packs tp = bwd_tile_packs(d, kt, Dp, vt, njp, pk);
    for (int64_t i0 = 0; i0 < L; i0 += BQ) {
        int64_t i1 = i0 + BQ < L ? i0 + BQ : L;
        key_walk w = key_walk_make(d, i0, i1);
        /* Does this query block see any key of the tile: [lo,hi) or [mk,S)? */
        if (!((j0 < w.hi && j1 > w.lo) || j1 > w.mk)) {
            if (dq && (unset & 1)) rows_zero(dq, dq_ld, D, i0, i1); /* no addition comes */
            continue;
        }
        for (int64_t i = 0; i < BQ; i++) {
            int live = i < i1 - i0 && lse[i0 + i] != -INFINITY;
            lb[i] = live ? lse[i0 + i] : INFINITY; /* p = exp(s - inf) = 0 */
            db[i] = live ? Di[i0 + i] : 0.0f;
        }
        /* The block's queries and output gradients, transposed and as
         * rows, unless the build packed them for the whole call */
        block_packs bp = bwd_block_packs(d, hp, i0 / BQ);
        const float *qb = qbuf, *dob = dobuf;
        if (!bp.qt) {
            rows_transpose(q, ldq, D, i0, i1, BQ, qt);
            rows_transpose(dout, ldo, Dv, i0, i1, BQ, dot);
            qb = rows_block(q, ldq, D, i0, i1, BQ, Dp, qbuf);
            dob = rows_block(dout, ldo, Dv, i0, i1, BQ, Dvp, dobuf);
        }
        int masked = tile_masked(d, i0, i1, j0, j1);
        if (!bwd_probs(d, tp, bp, masked, nj, njp, lb, st)) {
            tile_gemm(njp, BQ, D, kt, Dp, 1, qt, BQ, st, BQ, 0, packs_ready(pk, tp.k_rows, bp.qt)); /* st = K Q^T */
            scores_finish(d, n, h, i0, i1, j0, nj, njp, st);
            /* p = 0 for masked keys (s = -inf) even in a NaN row (lse NaN) */
            for (int64_t j = 0; j < njp; j++)
                for (int64_t i = 0; i < BQ; i += VW) {
                    vf sv = vload(st + j * BQ + i);
                    vstore(st + j * BQ + i, vselect(sv == -INFINITY, vsplat(0), vexp_p(sv - vload(lb + i))));
                }
        }
        tile_gemm(njp, BQ, Dv, vt, Dv, 1, dot, BQ, dpt, BQ, 0, packs_ready(pk, tp.v_rows, bp.dot)); /* dpt = V dO^T */
        if (d->dropout_p > 0.0f) { /* ds = p (z dp - D), dv from z p */
            for (int64_t j = 0; j < nj; j++)
                for (int64_t i = 0; i < i1 - i0; i++) {
                    float z = qkv_attn_dropout(d, nh, i0 + i, j0 + j), p = st[j * BQ + i];
                    dpt[j * BQ + i] = p == 0.0f ? 0.0f : p * (z * dpt[j * BQ + i] - db[i]);
                    st[j * BQ + i] = z * p;
                }
        } else {
            for (int64_t j = 0; j < njp; j++)
                for (int64_t i = 0; i < BQ; i += VW) {
                    vf p = vload(st + j * BQ + i); /* ds = 0 where p = 0, even if D_i is NaN */
                    vstore(dpt + j * BQ + i, vselect(p == 0.0f, vsplat(0), p * (vload(dpt + j * BQ + i) - vload(db + i))));
                }
        }
        if (dv) tile_gemm(njp, Dvp, BQ, st, BQ, 1, dob, Dvp, dvt, Dvp, 1, packs_ready(pk, NULL, bp.dob)); /* dV += P dO */
        if (dk) tile_gemm(njp, Dp, BQ, dpt, BQ, 1, qb, Dp, dkt, Dp, 1, packs_ready(pk, NULL, bp.qb));    /* dK += dS Q */
        if (dq) {                                                         /* dQ = dS^T K */
            if (masked && k_finite < 0) k_finite = rows_finite(kt, nj, Dp);
            if (masked && !k_finite)
                dsk_skip_masked(d, n, h, i0, i1, j0, nj, dpt, kt, Dp, dqb); /* masked k not read */
            else
                tile_gemm(BQ, Dp, njp, dpt, 1, BQ, kt, Dp, dqb, Dp, 0, packs_ready(pk, NULL, tp.k_pairs));
            for (int64_t i = 0; i < i1 - i0; i++)
                for (int64_t x = 0; x < D; x++) {
                    float *g = dq + (i0 + i) * dq_ld + x;
                    *g = ((unset & 1) ? 0.0f : *g) + dq_scale * dqb[i * Dp + x];
                }
        }
    }
    for (int64_t j = 0; j < nj; j++) {
        if (dk)
            for (int64_t x = 0; x < D; x++) {
                float *g = dk + (j0 + j) * ldk + x;
                *g = ((unset & 2) ? 0.0f : *g) + d->scale * dkt[j * Dp + x];
            }
        if (dv)
            for (int64_t x = 0; x < Dv; x++) {
                float *g = dv + (j0 + j) * ldv + x;
                *g = ((unset & 2) ? 0.0f : *g) + dvt[j * Dvp + x];
            }
    }
}

/* Di (N*H*L) and the dq buffers (threads of them, compact (N,H,L,D) each)
 * are the caller's (attention_flash.c sizes them); tiles is threads x
 * bwd_scratch. With one key tile per head (S <= BK), a head's dq rows get
 * additions from that tile alone: dqs is then dq itself (rows as q's),
 * added into scaled, by whichever thread has the head (the same sums as
 * through the buffers: one addition to 0, times scale). */
static void backward(const qkv_attn_desc *d, const float *q, const float *k, const float *v,
                     const float *out, const float *lse, const float *dout, float *Di,
                     float *dqs, float *dk, float *dv, float *tiles, int threads)
{
    int64_t NH = d->N * d->H, H = d->H, L = d->L, S = d->S, D = d->D, Dv = d->Dv;
    int64_t ntiles = (S + BK - 1) / BK, ldo = qkv_attn_ld(&d->o_rows, Dv);
    size_t nq = (size_t)(NH * L * D);
#pragma omp parallel num_threads(threads)
    {
#pragma omp for
        for (int64_t r = 0; r < NH * L; r++) { /* every D_i before any tile (the for's barrier) */
            int64_t o = qkv_attn_head(&d->o_rows, H, r / L / H, r / L % H, L, Dv) + r % L * ldo;
            Di[r] = row_dot(dout + o, out + o, Dv);
        }
        int th = omp_get_thread_num();
        float *mine = tiles + (size_t)th * bwd_scratch(d);
        tiles_begin();
        float *shared = bwd_shared(d) ? tiles + (size_t)threads * bwd_scratch(d) : NULL;
        /* With one key tile per head, a head's packed queries serve that
         * tile alone: packed by the thread that takes the head, just before
         * the tile, into a head's room of shared of the thread's own (still
         * in its cache when the tile reads it), not every head's before
         * any tile (written out to memory and read back). */
        int per_head = shared && bwd_head_floats(d) && ntiles == 1 && NH >= threads; /* builds that pack */
        if (!per_head) bwd_pack_heads(d, q, dout, shared, mine); /* with its barrier, where it packs */
        int direct = ntiles == 1;
        float *mydq = dqs ? (direct ? dqs : dqs + (size_t)th * nq) : NULL;
        int64_t dq_ld = direct ? qkv_attn_ld(&d->q_rows, D) : D;
        /* Tiles dealt round-robin, the same way on every run: which tiles
         * add into which dq buffer, and so dq's rounding, repeat exactly
         * for a given thread count (a dynamic schedule would not). */
#pragma omp for schedule(static, 1)
        for (int64_t t = 0; t < NH * ntiles; t++) {
            int64_t nh = t / ntiles, n = nh / H, h = nh % H;
            int64_t j0 = (t % ntiles) * BK, j1 = j0 + BK < S ? j0 + BK : S;
            float *hdq = mydq ? mydq + (direct ? qkv_attn_head(&d->q_rows, H, n, h, L, D) : nh * L * D) : NULL;
            float *hdk = dk ? dk + qkv_attn_head(&d->k_rows, H, n, h, S, D) : NULL;
            float *hdv = dv ? dv + qkv_attn_head(&d->v_rows, H, n, h, S, Dv) : NULL;
            /* New gradient buffers: the tile writes its dk and dv rows (its
             * own) and, the only key tile, its head's dq rows (0 + each
             * value: the bits of adding into zeros) */
            int unset = d->grads_unset ? 2 | direct : 0;
            float *hp = shared ? shared + (size_t)(per_head ? th : nh) * bwd_head_floats(d) : NULL;
            if (per_head) bwd_pack_head(d, q, dout, nh, hp, mine);
            backward_tile(d, n, h, j0, j1, q + qkv_attn_head(&d->q_rows, H, n, h, L, D),
                          k + qkv_attn_head(&d->k_rows, H, n, h, S, D), v + qkv_attn_head(&d->v_rows, H, n, h, S, Dv),
                          lse + nh * L, Di + nh * L, dout + qkv_attn_head(&d->o_rows, H, n, h, L, Dv), hdq, dq_ld,
                          direct ? d->scale : 1.0f, hdk, hdv, unset, hp, mine);
        }
        tiles_end();
    }
}

/* Floats of forward's scratch for `threads` threads. */
static size_t fwd_scratch_all(const qkv_attn_desc *d, int threads)
{
    return (size_t)threads * fwd_scratch(d) + fwd_shared(d);
}

/* Floats of backward's tiles for `threads` threads and its shared packs. */
static size_t bwd_scratch_all(const qkv_attn_desc *d, int threads)
{
    return (size_t)threads * bwd_scratch(d) + bwd_shared(d);
}

const qkv_attn_simd ISA(qkv_attn_simd) = {ISA_NAME, forward, backward, fwd_scratch_all, bwd_scratch_all};
