/* gemm_bf16.c: the BF16 mode's matmul (gemm_bf16.h).
 *
 * The inputs are packed into compact bf16 copies (rounded to nearest even,
 * kernels/bf16.h) and multiplied by oneDNN's matmul primitive (bf16 inputs,
 * FP32 accumulation and output, vdpbf16ps on CPUs with AVX512-BF16),
 * run on qkv's OpenMP pool (Debian's oneDNN uses OpenMP too). oneDNN was
 * measured against libxsmm on this machine's shapes: docs/bf16.md,
 * bench/bf16_gemm.c. Without oneDNN, or when it declines a shape, the
 * inputs are rounded to bf16 in FP32 copies and qkv_gemm multiplies them. */
#include <stdlib.h>
#include "core/internal.h"
#include "kernels/bf16.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_bf16_vnni.h"
#include "kernels/rows.h"
#ifdef QKV_DNNL
#include <dnnl.h>
#endif

static int bf16_path = QKV_BF16_AUTO;

void qkv_gemm_bf16_set_path(int path) { bf16_path = path; }

/* Below this many FLOP (2 M N K) a product takes the fallback: a oneDNN call
 * costs some 20-40 us of its own, and bf16 ran 3-8x slower than FP32 on
 * products of 16^3 to 64^3 and on a 1-row x W^T of 2048x512 (2.1 MFLOP);
 * from 128^3 (4.2 MFLOP) on it ran faster (bench/bf16_gemm --sweep,
 * docs/bf16.md). */
#define QKV_BF16_DNNL_MIN_FLOPS 4e6

void qkv_gemm_ctx(const qkv_ctx *c, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                  int64_t ldc)
{
    if (qkv_ctx_precision(c) == QKV_BF16)
        qkv_gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else
        qkv_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void qkv_gemm_ctx_bias(const qkv_ctx *c, int64_t M, int64_t N, int64_t K, const float *A, const float *B,
                       const float *bias, float *C)
{
    if (!bias) return qkv_gemm_ctx(c, 0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N);
    if (qkv_ctx_precision(c) != QKV_BF16) return qkv_gemm_bias(0, 1, M, N, K, 1.0f, A, K, B, K, bias, C, N);
    qkv_rows_broadcast(C, bias, M, N);
    qkv_gemm_bf16(0, 1, M, N, K, 1.0f, A, K, B, K, 1.0f, C, N);
}

/* X (rows,cols) with leading dimension ld into Y (rows,cols) compact,
 * each value rounded to bf16 and kept as a float. */
static void pack_round(const float *X, int64_t rows, int64_t cols, int64_t ld, float *Y)
{
    QKV_PAR_FOR(rows * cols >= 4 * QKV_PAR_MIN,
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < cols; j++)
                Y[r * cols + j] = qkv_bf16_round(X[r * ld + j]));
}

/* A buffer of the calling thread, kept and grown for the thread's life;
 * NULL when out of memory. */
typedef struct {
    void *p;
    size_t cap;
} thread_buf;

static void *thread_buf_get(thread_buf *b, size_t bytes)
{
    if (bytes > b->cap) {
        free(b->p);
        b->p = malloc(bytes);
        b->cap = b->p ? bytes : 0;
    }
    return b->p;
}

/* The copies of the inputs go to a buffer of the calling thread (up to
 * SCRATCH_KEEP bytes; larger ones are freed after the product): a fresh
 * malloc per product cost the page faults of its first touch on every call
 * (about 1% of an encoder layer's training step in perf). NULL when out of
 * memory. */
enum { SCRATCH_KEEP = 32 << 20 };
static _Thread_local thread_buf copies;

static void *scratch_get(size_t bytes)
{
    return bytes > SCRATCH_KEEP ? malloc(bytes) : thread_buf_get(&copies, bytes);
}

#ifdef QKV_DNNL
/* ---- oneDNN ------------------------------------------------------------ */

/* X (rows,cols) with leading dimension ld into Y (rows,cols) compact. */
static void pack_bf16(const float *X, int64_t rows, int64_t cols, int64_t ld, uint16_t *Y)
{
    QKV_PAR_FOR(rows * cols >= 4 * QKV_PAR_MIN,
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < cols; j++) Y[r * cols + j] = qkv_bf16_from_float(X[r * ld + j]));
}

static dnnl_engine_t dnnl_eng;
static int dnnl_state; /* 0 not tried, 1 usable, -1 not */

/* Primitives for the shapes seen (a training step repeats a few dozen
 * shapes), those oneDNN declined too (p NULL). A full table makes room by
 * dropping the entry used least recently that no thread is running: a
 * translation model's training meets new row counts every step (packed
 * sentences), and a table that stopped taking new shapes made a
 * primitive per call from then on (300 BF16 steps of `qkv train
 * translation`: 4,542 primitives made, and 6-10% of the run's time). */
typedef struct {
    int ta, tb, bias; /* bias: a bias row (1,N) is added (DNNL_ARG_BIAS) */
    int blk;          /* B given in oneDNN's own layout (qkv_bf16_blocked_pack); tb is then 0 */
    int64_t M, N, K, ldc;
    float alpha, beta;
    dnnl_primitive_t p;
    size_t scratch; /* bytes of scratchpad an execution needs */
    int busy;       /* threads running p now */
    long used;      /* when it was last asked for (prim_clock) */
} prim_entry;
enum { PRIM_CAP = 256 };
static prim_entry prims[PRIM_CAP];
static int n_prims;
static long prim_clock;

/* op(A) (M,K) from a compact bf16 A: (M,K), or (K,M) when ta. */
static void desc_2d(dnnl_memory_desc_t *d, int64_t rows, int64_t cols, int trans, dnnl_data_type_t t, int64_t ld)
{
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {trans ? 1 : ld, trans ? ld : 1};
    dnnl_memory_desc_init_by_strides(d, 2, dims, t, strides);
}

/* B's descriptor when blk: the layout of qkv_bf16_blocked_pack, which
 * prim_make checked is the one the primitive asked for. */
static void desc_blocked(dnnl_memory_desc_t *d, int64_t K, int64_t N)
{
    dnnl_dims_t dims = {K, N};
    dnnl_memory_desc_init_by_tag(d, 2, dims, dnnl_bf16, dnnl_BA16a64b2a);
}

static void descs(int ta, int tb, int blk, int64_t M, int64_t N, int64_t K, int64_t ldc, dnnl_memory_desc_t *a,
                  dnnl_memory_desc_t *b, dnnl_memory_desc_t *c)
{
    desc_2d(a, M, K, ta, dnnl_bf16, ta ? M : K);
    if (blk) desc_blocked(b, K, N);
    else desc_2d(b, K, N, tb, dnnl_bf16, tb ? K : N);
    desc_2d(c, M, N, 0, dnnl_f32, ldc);
}

static long prim_made;  /* primitives made (qkv_gemm_bf16_made) */
static int prim_fail;   /* the next makes to fail as out of memory (tests) */

/* The primitive, and in *scratch the bytes of its scratchpad; NULL when
 * oneDNN declines, and when blk and the primitive, left to choose B's
 * layout ("any"), does not choose qkv_bf16_blocked_pack's; *oom set when
 * oneDNN ran out of memory (a failure that may pass, not a decline). The scratchpad
 * is the caller's (dnnl_scratchpad_mode_user): by default oneDNN
 * keeps one global scratchpad, and two products run at once from qkv's
 * threads (a linear layer's weight gradient by chunks) then wrote over each
 * other's partial sums: results off by more than their own size, and bf16
 * training that learned visibly slower on 2 threads than on 1. */
static dnnl_primitive_t prim_make(int ta, int tb, int blk, int bias, int64_t M, int64_t N, int64_t K, int64_t ldc,
                                  float alpha, float beta, size_t *scratch, int *oom)
{
    *oom = 0;
    if (prim_fail > 0) {
        prim_fail--;
        return *oom = 1, NULL;
    }
    dnnl_memory_desc_t a, b, c, bd, want;
    descs(ta, tb, 0, M, N, K, ldc, &a, &b, &c);
    desc_2d(&bd, 1, N, 0, dnnl_f32, N);
    if (blk) desc_blocked(&want, K, N);
    if (blk && dnnl_memory_desc_init_by_tag(&b, 2, (dnnl_dims_t){K, N}, dnnl_bf16, dnnl_format_tag_any) != dnnl_success)
        return NULL;
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t p = NULL;
    int ok = dnnl_matmul_desc_init(&md, &a, &b, bias ? &bd : NULL, &c) == dnnl_success &&
             dnnl_primitive_attr_create(&attr) == dnnl_success &&
             dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
    if (ok && alpha != 1.0f) ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha) == dnnl_success;
    if (ok && beta != 0.0f)
        ok = dnnl_post_ops_create(&po) == dnnl_success && dnnl_post_ops_append_sum(po, beta) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    dnnl_status_t st = dnnl_success;
    if (ok) ok = (st = dnnl_primitive_desc_create(&pd, &md, attr, dnnl_eng, NULL)) == dnnl_success;
    if (ok && blk) {
        const dnnl_memory_desc_t *w = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        ok = w && dnnl_memory_desc_equal(w, &want);
    }
    if (ok && (st = dnnl_primitive_create(&p, pd)) != dnnl_success) p = NULL;
    *oom = st == dnnl_out_of_memory;
    prim_made += p != NULL;
    if (p) {
        const dnnl_memory_desc_t *sm = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        *scratch = sm ? dnnl_memory_desc_get_size(sm) : 0;
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return p;
}

static int dnnl_ready(void)
{
    int s;
#pragma omp critical(qkv_dnnl)
    {
        if (dnnl_state == 0)
            /* oneDNN's bf16 kernels on CPUs without bf16 dot products emulate
             * them; the FP32 fallback is faster there. */
            dnnl_state =
                qkv_bf16_dot_supported() && dnnl_engine_create(&dnnl_eng, dnnl_cpu, 0) == dnnl_success ? 1 : -1;
        s = dnnl_state;
    }
    return s > 0;
}

/* A slot for a new entry: the next free one, else the idle entry used
 * least recently (its primitive destroyed), else -1 (every entry busy). */
static int prim_slot(void)
{
    if (n_prims < PRIM_CAP) return n_prims++;
    int old = -1;
    for (int i = 0; i < PRIM_CAP; i++)
        if (!prims[i].busy && (old < 0 || prims[i].used < prims[old].used)) old = i;
    if (old >= 0 && prims[old].p) dnnl_primitive_destroy(prims[old].p);
    return old;
}

/* The primitive of a product (made, or from the table), NULL when oneDNN
 * declined it; *slot its entry, or -1 when the caller owns it. Give it
 * back with prim_put. */
static dnnl_primitive_t prim_get(int ta, int tb, int blk, int bias, int64_t M, int64_t N, int64_t K, int64_t ldc,
                                 float alpha, float beta, size_t *scratch, int *slot)
{
    dnnl_primitive_t p = NULL;
    int found = -1;
    *slot = -1;
    *scratch = 0;
#pragma omp critical(qkv_dnnl)
    {
        for (int i = 0; i < n_prims && found < 0; i++) {
            prim_entry *e = &prims[i];
            if (e->ta == ta && e->tb == tb && e->blk == blk && e->bias == bias && e->M == M && e->N == N &&
                e->K == K && e->ldc == ldc && e->alpha == alpha && e->beta == beta)
                found = i, p = e->p, *scratch = e->scratch;
        }
        if (found < 0) {
            int oom; /* not kept: made again when next asked */
            p = prim_make(ta, tb, blk, bias, M, N, K, ldc, alpha, beta, scratch, &oom);
            found = oom ? -1 : prim_slot();
            if (found >= 0)
                prims[found] = (prim_entry){ta, tb, bias, blk, M, N, K, ldc, alpha, beta, p, *scratch, 0, 0};
        }
        if (found >= 0) {
            prims[found].used = ++prim_clock;
            prims[found].busy += p != NULL;
            *slot = found;
        }
    }
    return p;
}

/* Gives back prim_get's primitive: destroyed when the caller owned it. */
static void prim_put(dnnl_primitive_t p, int slot)
{
    if (!p) return;
    if (slot < 0) {
        dnnl_primitive_destroy(p);
        return;
    }
#pragma omp critical(qkv_dnnl)
    prims[slot].busy--;
}

/* 1 when a product takes B packed by qkv_bf16_blocked_pack: the padding
 * of K to 32 and N to 64 adds at most an eighth of work, and oneDNN's
 * primitive asks for that layout. */
static int blocked_ok(int ta, int bias, int64_t M, int64_t N, int64_t K, int64_t ldc, float alpha, float beta)
{
    if (qkv_bf16_blocked_len(K, N) * 8 > 9 * K * N) return 0;
    size_t scratch;
    int slot;
    dnnl_primitive_t p = prim_get(ta, 0, 1, bias, M, N, K, ldc, alpha, beta, &scratch, &slot);
    prim_put(p, slot);
    return p != NULL;
}

/* Runs the product on compact bf16 Ah and Bh (Bh in the blocked layout
 * when blk), plus the row bias (N) where not NULL; 0 when oneDNN
 * declined. */
static int matmul_dnnl(int ta, int tb, int blk, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *Ah,
                       const uint16_t *Bh, const float *bias, float beta, float *C, int64_t ldc)
{
    size_t scratch;
    int slot;
    if (blk) tb = 0;
    dnnl_primitive_t p = prim_get(ta, tb, blk, bias != NULL, M, N, K, ldc, alpha, beta, &scratch, &slot);
    if (!p) return 0;
    static _Thread_local thread_buf pads; /* oneDNN's scratchpad: this thread's own */
    void *pad = scratch ? thread_buf_get(&pads, scratch) : NULL;
    if (scratch && !pad) {
        prim_put(p, slot);
        return 0;
    }
    dnnl_memory_desc_t a, b, c, pd, bd;
    descs(ta, tb, blk, M, N, K, ldc, &a, &b, &c);
    desc_2d(&bd, 1, N, 0, dnnl_f32, N);
    dnnl_dims_t pdims = {(dnnl_dim_t)(scratch ? scratch : 1)};
    dnnl_memory_t am = NULL, bm = NULL, cm = NULL, pm = NULL, biasm = NULL;
    dnnl_stream_t st = NULL;
    int ok = dnnl_memory_create(&am, &a, dnnl_eng, (void *)Ah) == dnnl_success &&
             dnnl_memory_create(&bm, &b, dnnl_eng, (void *)Bh) == dnnl_success &&
             dnnl_memory_create(&cm, &c, dnnl_eng, C) == dnnl_success &&
             (!bias || dnnl_memory_create(&biasm, &bd, dnnl_eng, (void *)bias) == dnnl_success) &&
             (!scratch || (dnnl_memory_desc_init_by_tag(&pd, 1, pdims, dnnl_u8, dnnl_a) == dnnl_success &&
                           dnnl_memory_create(&pm, &pd, dnnl_eng, pad) == dnnl_success)) &&
             dnnl_stream_create(&st, dnnl_eng, dnnl_stream_default_flags) == dnnl_success;
    if (ok) {
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
        int nargs = 3;
        if (scratch) args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, pm};
        if (bias) args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, biasm};
        ok = dnnl_primitive_execute(p, st, nargs, args) == dnnl_success &&
             dnnl_stream_wait(st) == dnnl_success;
    }
    if (st) dnnl_stream_destroy(st);
    if (pm) dnnl_memory_destroy(pm);
    if (biasm) dnnl_memory_destroy(biasm);
    if (cm) dnnl_memory_destroy(cm);
    if (bm) dnnl_memory_destroy(bm);
    if (am) dnnl_memory_destroy(am);
    prim_put(p, slot);
    return ok;
}

/* x Wᵀ with a short K and many columns (the translation model's output
 * layer, 832 x 4000 x 256; its recurrent layers' input projections): by
 * column blocks of DNNL_COLS, each block one oneDNN call on the thread that
 * takes it, the blocks dealt dynamically. oneDNN's own two-thread split of
 * the whole product ran at 557-584 GFLOP/s on that shape where the blocks
 * ran at 669-719 (cold caches, alternated, docs/seq2seq.md); on the
 * encoder's shapes (K 512 and 2048) the blocks gained nothing. The blocks
 * do not depend on the thread count, so neither do the bits. beta 0 only:
 * a failed block leaves the caller's fallback to write C whole. */
enum { DNNL_COLS = 128 };

static int matmul_dnnl_cols(int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *Ah, const uint16_t *Bh,
                            const float *bias, float *C, int64_t ldc)
{
    int nb = (int)((N + DNNL_COLS - 1) / DNNL_COLS), ok = 1;
#pragma omp parallel for schedule(dynamic, 1) reduction(&& : ok)
    for (int b = 0; b < nb; b++) {
        int64_t n0 = (int64_t)b * DNNL_COLS, n = N - n0 < DNNL_COLS ? N - n0 : DNNL_COLS;
        ok = matmul_dnnl(0, 1, 0, M, n, K, alpha, Ah, Bh + n0 * K, bias ? bias + n0 : NULL, 0.0f, C + n0, ldc) && ok;
    }
    return ok;
}

/* matmul_dnnl, or by column blocks for x Wᵀ with W as it is (not blk),
 * K <= 256, at least 4 blocks of columns and beta 0. With W blocked
 * (blk) the whole product ran faster than both (832 x 4000 x 256: 2.6
 * ms against 3.0 by blocks of plain W and 3.5 by blocks of blocked W,
 * docs/bf16.md). */
static int matmul_dnnl_any(int ta, int tb, int blk, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *Ah,
                           const uint16_t *Bh, const float *bias, float beta, float *C, int64_t ldc)
{
    if (!blk && ta == 0 && tb == 1 && K <= 256 && N >= 4 * DNNL_COLS && beta == 0.0f)
        return matmul_dnnl_cols(M, N, K, alpha, Ah, Bh, bias, C, ldc);
    return matmul_dnnl(ta, tb, blk, M, N, K, alpha, Ah, Bh, bias, beta, C, ldc);
}

int qkv_gemm_bf16_accelerated(void) { return bf16_path != QKV_BF16_FALLBACK && dnnl_ready(); }
void qkv_gemm_bf16_set_dnnl_cache(int capacity) { dnnl_set_primitive_cache_capacity(capacity); }
long qkv_gemm_bf16_made(void)
{
    long n;
#pragma omp critical(qkv_dnnl)
    n = prim_made;
    return n;
}
void qkv_gemm_bf16_fail_next(int n)
{
#pragma omp critical(qkv_dnnl)
    prim_fail = n;
}
int qkv_gemm_bf16_running(void)
{
    int n = 0;
#pragma omp critical(qkv_dnnl)
    for (int i = 0; i < n_prims; i++) n += prims[i].busy;
    return n;
}
#else
int qkv_gemm_bf16_accelerated(void) { return 0; }
void qkv_gemm_bf16_set_dnnl_cache(int capacity) { (void)capacity; }
int qkv_gemm_bf16_running(void) { return 0; }
long qkv_gemm_bf16_made(void) { return 0; }
void qkv_gemm_bf16_fail_next(int n) { (void)n; }
#endif

static void scratch_put(void *p, size_t bytes)
{
    if (bytes > SCRATCH_KEEP) free(p);
}

/* The fallback without memory to spare: each input rounded as it is read
 * (A from A16, B from B16 where given, with leading dimensions lda, ldb). */
static void gemm_round_loop(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                            const uint16_t *A16, int64_t lda, const float *B, const uint16_t *B16, int64_t ldb,
                            float beta, float *C, int64_t ldc)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float acc = 0;
            for (int64_t k = 0; k < K; k++) {
                int64_t ai = ta ? k * lda + i : i * lda + k, bi = tb ? j * ldb + k : k * ldb + j;
                float a = qkv_bf16_to_float(A16 ? A16[ai] : qkv_bf16_from_float(A[ai]));
                float b = qkv_bf16_to_float(B16 ? B16[bi] : qkv_bf16_from_float(B[bi]));
                acc += a * b;
            }
            float *c = &C[i * ldc + j];
            *c = alpha * acc + (beta == 0.0f ? 0.0f : beta * *c);
        }
}

/* X (rows,cols), leading dimension ld, rounded to bf16 into floats Y
 * (rows,cols) compact; from X16 (compact) instead where given. */
static void round_into(const float *X, const uint16_t *X16, int64_t rows, int64_t cols, int64_t ld, float *Y)
{
    if (X16) qkv_bf16_to_floats(X16, Y, rows * cols);
    else pack_round(X, rows, cols, ld, Y);
}

int qkv_gemm_bf16_dnnl(int64_t M, int64_t N, int64_t K)
{
#ifdef QKV_DNNL
    int big = 2.0 * (double)M * (double)N * (double)K >= QKV_BF16_DNNL_MIN_FLOPS;
    return M > 0 && N > 0 && K > 0 && !qkv_reference() &&
           (bf16_path == QKV_BF16_DNNL || (bf16_path == QKV_BF16_AUTO && big)) && dnnl_ready();
#else
    (void)M, (void)N, (void)K;
    return 0;
#endif
}

void qkv_gemm_bf16_pre(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                       const uint16_t *A16, int64_t lda, const float *B, const uint16_t *B16, int64_t ldb,
                       float beta, float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0 || K <= 0) { /* nothing to round: qkv_gemm's C = beta * C */
        qkv_gemm(ta, tb, M, N, K, alpha, NULL, lda, NULL, ldb, beta, C, ldc);
        return;
    }
    /* Stored shapes: A is (M,K), or (K,M) when ta; B is (K,N), or (N,K) when tb. */
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    if (A16) lda = ac;
    if (B16) ldb = bc;
#ifdef QKV_DNNL
    if (qkv_gemm_bf16_dnnl(M, N, K)) {
        /* B packed into oneDNN's layout: from a compact bf16 copy (K,N)
         * where given, else from FP32 B when no copy is (ldb is then B's) */
        int from16 = B16 && !tb, blk = (from16 || (B && !B16)) && blocked_ok(ta, 0, M, N, K, ldc, alpha, beta);
        size_t na = A16 ? 0 : (size_t)(ar * ac);
        size_t nb = blk ? (size_t)qkv_bf16_blocked_len(K, N) : B16 ? 0 : (size_t)(br * bc);
        size_t bytes = (na + nb) * sizeof(uint16_t);
        uint16_t *buf = bytes ? scratch_get(bytes) : NULL;
        if (buf || !bytes) {
            const uint16_t *Ah = A16 ? A16 : buf, *Bh = B16 && !blk ? B16 : buf + na;
            if (!A16) pack_bf16(A, ar, ac, lda, buf);
            if (blk && from16) qkv_bf16_blocked_pack16(K, N, B16, buf + na);
            else if (blk) qkv_bf16_blocked_pack(tb, K, N, B, ldb, buf + na);
            else if (!B16) pack_bf16(B, br, bc, ldb, buf + na);
            int done = matmul_dnnl_any(ta, tb, blk, M, N, K, alpha, Ah, Bh, NULL, beta, C, ldc);
            if (bytes) scratch_put(buf, bytes);
            if (done) return;
        }
    }
#endif
    size_t bytes = (size_t)(ar * ac + br * bc) * sizeof(float);
    float *Ar = scratch_get(bytes);
    if (!Ar) {
        gemm_round_loop(ta, tb, M, N, K, alpha, A, A16, lda, B, B16, ldb, beta, C, ldc);
        return;
    }
    float *Br = Ar + ar * ac;
    round_into(A, A16, ar, ac, lda, Ar);
    round_into(B, B16, br, bc, ldb, Br);
    if (qkv_reference())
        qkv_gemm_ref(ta, tb, M, N, K, alpha, Ar, ac, Br, bc, beta, C, ldc);
    else
        qkv_gemm(ta, tb, M, N, K, alpha, Ar, ac, Br, bc, beta, C, ldc);
    scratch_put(Ar, bytes);
}

void qkv_gemm_bf16_bias(int64_t M, int64_t N, int64_t K, const uint16_t *A16, const float *B, const uint16_t *B16,
                        const float *bias, float *C)
{
#ifdef QKV_DNNL
    /* oneDNN adds the bias as the sums leave its registers: no pass that
     * fills C with it, none that reads C back to add (beta = 1) */
    if (bias && qkv_gemm_bf16_dnnl(M, N, K)) {
        if (B16 && matmul_dnnl_any(0, 1, 0, M, N, K, 1.0f, A16, B16, bias, 0.0f, C, N)) return;
        if (!B16 && blocked_ok(0, 1, M, N, K, N, 1.0f, 0.0f)) {
            size_t bytes = (size_t)qkv_bf16_blocked_len(K, N) * sizeof(uint16_t);
            uint16_t *P = scratch_get(bytes);
            int done = 0;
            if (P) {
                qkv_bf16_blocked_pack(1, K, N, B, K, P);
                done = matmul_dnnl_any(0, 1, 1, M, N, K, 1.0f, A16, P, bias, 0.0f, C, N);
                scratch_put(P, bytes);
            }
            if (done) return;
        }
    }
#endif
    if (bias) qkv_rows_broadcast(C, bias, M, N);
    qkv_gemm_bf16_pre(0, 1, M, N, K, 1.0f, NULL, A16, K, B, B16, K, bias ? 1.0f : 0.0f, C, N);
}

int qkv_gemm_bf16_packed_ok(int ta, int64_t M, int64_t N, int64_t K, float alpha, int bias, float beta)
{
#ifdef QKV_DNNL
    return qkv_gemm_bf16_dnnl(M, N, K) && blocked_ok(ta, bias, M, N, K, N, alpha, beta);
#else
    (void)ta, (void)M, (void)N, (void)K, (void)alpha, (void)bias, (void)beta;
    return 0;
#endif
}

int qkv_gemm_bf16_packed(int ta, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A16,
                         const uint16_t *P, const float *bias, float beta, float *C)
{
#ifdef QKV_DNNL
    return qkv_gemm_bf16_packed_ok(ta, M, N, K, alpha, bias != NULL, beta) &&
           matmul_dnnl_any(ta, 0, 1, M, N, K, alpha, A16, P, bias, beta, C, N);
#else
    (void)ta, (void)M, (void)N, (void)K, (void)alpha, (void)A16, (void)P, (void)bias, (void)beta, (void)C;
    return 0;
#endif
}

void qkv_gemm_bf16(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                   int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    qkv_gemm_bf16_pre(ta, tb, M, N, K, alpha, A, NULL, lda, B, NULL, ldb, beta, C, ldc);
}

int64_t qkv_bf16_vnni_len(int64_t K, int64_t N) { return (K + 1) / 2 * N * 2; }

int qkv_gemm_bf16_vnni_usable(int64_t M, int64_t N, int64_t K)
{
    return M > 0 && N > 0 && N % 16 == 0 && K > 0 && K <= qkv_gemm_bf16_vnni_kmax && !qkv_reference() &&
           bf16_path == QKV_BF16_AUTO && qkv_bf16_dot_supported();
}
