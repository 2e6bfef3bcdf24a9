/* gemm.c: matrix multiply through CBLAS (OpenBLAS), with the reference loop
 * kept beside it.
 *
 * Threads: qkv runs everything on one pool, OpenMP's. OpenBLAS is set to
 * one thread, and a large product is split here into column (or row) blocks
 * that OpenMP threads multiply at once. Two pools (OpenBLAS's own threads
 * beside OpenMP's) spin against each other on a two-core machine and were
 * measured 2-4x slower on a training step. */
#include <cblas.h>
#include <omp.h>
#include "core/internal.h"
#include "kernels/gemm.h"
#include "kernels/matvec.h"
#ifdef QKV_DNNL
#include <dnnl.h>
#endif

static int gemm_path = QKV_GEMM_AUTO;

void qkv_gemm_set_path(int path) { gemm_path = path; }

/* oneDNN's sgemm (JIT kernels, AVX-512 here) ran 1.03-1.17x faster than
 * OpenBLAS's on one core on every product of the default ViT's step (K = 64
 * forward and dX products of 6,400 rows, dW products with K = 1,600 and
 * 6,400) and 1.1-1.2x on 4096x128x128-type products, but 1.1-2x slower on
 * products under about 2 MFLOP (its call costs a few microseconds more):
 * bench/gemm_f32.c. The products from this many FLOP (2 M N K) on take it. */
#define QKV_GEMM_DNNL_MIN_FLOPS 4e6

/* The same rows of op(A) multiplied by the same op(B) should come out the
 * same whatever the product's number of rows: a batch split over threads
 * (qkv_gemm's row blocks) or over data-parallel ranks (docs/distributed.md)
 * then rounds as one whole batch. Neither library promises it; a throwaway
 * test on ten shapes (row counts 1 to 6,400) found OpenBLAS's rows
 * differing on up to 3 rows on most shapes, up to 17 on x W^T of 64x64 and
 * up to 100 on 100x100, and oneDNN's on up to 15 rows, and on x W^T of
 * 256x784 up to 192. So oneDNN takes only products whose batch dimension
 * (M, or K for op(A) = A^T, a weight gradient) has at least MIN_ROWS, split
 * over threads in blocks of at least MIN_BLOCK rows; smaller batches (as in
 * tests/test_dist_cli.c: 8 rows per rank against 16, which oneDNN failed)
 * keep OpenBLAS's behaviour. */
#define QKV_GEMM_DNNL_MIN_ROWS 1024
#define QKV_GEMM_DNNL_MIN_BLOCK 256

/* One sub-product on the calling thread: oneDNN's or OpenBLAS's sgemm; one
 * row times a transposed B (a decoding step's x W^T) by qkv's own loop,
 * which reads W as one stream (OpenBLAS 0.3.21 packs W for such a call). */
static void gemm_block(int dnnl, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (M == 1 && !ta && tb && qkv_matvec_row_f32(N, K, A, B, ldb, alpha, beta, C)) return;
#ifdef QKV_DNNL
    /* row-major, as cblas_sgemm's CblasRowMajor; called inside qkv's
     * parallel region (or with one thread), so it runs on one thread */
    if (dnnl) {
        /* oneDNN's sgemm threads a call made outside an active parallel
         * region over OpenMP's threads itself, split its own way (the bits
         * then depend on the thread count, and small products ran 4-6x
         * slower, bench/gemm_f32 with 2 threads): it runs here on one
         * thread, the calling thread's own thread count set to 1 for the
         * call (an OpenMP setting per thread). */
        int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
        if (nt > 1) omp_set_num_threads(1);
        dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        if (nt > 1) omp_set_num_threads(nt);
        if (st == dnnl_success) return;
    }
#else
    (void)dnnl;
#endif
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (blasint)M,
                (blasint)N, (blasint)K, alpha, A, (blasint)lda, B, (blasint)ldb, beta, C, (blasint)ldc);
}

void qkv_gemm_ref(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++) {
                float a = ta ? A[k * lda + i] : A[i * lda + k];
                float b = tb ? B[j * ldb + k] : B[k * ldb + j];
                acc += (double)a * b;
            }
            float *c = &C[i * ldc + j];
            *c = (float)(alpha * acc + (beta == 0.0f ? 0.0 : (double)beta * *c));
        }
}

/* How many blocks a product large enough to split is cut into: at least
 * QKV_GEMM_BLOCKS, or one per processor (omp_get_num_procs: a property of
 * the machine, not of the thread count asked for). */
#define QKV_GEMM_BLOCKS 4

static int64_t gemm_block_count(void)
{
    static int n;
    if (!n) { /* a benign race: every thread writes the same value */
        int p = omp_get_num_procs();
        n = p > QKV_GEMM_BLOCKS ? p : QKV_GEMM_BLOCKS;
    }
    return n;
}

/* C's rows [0, M) x columns [0, N) = bias (N), broadcast over the rows. */
static void bias_rows(float *C, int64_t ldc, const float *bias, int64_t M, int64_t N)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) C[i * ldc + j] = bias[j];
}

/* qkv_gemm, and qkv_gemm_bias with bias (then beta is 1 and C is first set
 * to the bias: the same sums as a broadcast before a beta-1 product). */
static void gemm_run(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                     const float *B, int64_t ldb, const float *bias, float beta, float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { /* C = beta * C, as BLAS defines it */
        if (bias) return bias_rows(C, ldc, bias, M, N);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return;
    }
    if (qkv_reference()) {
        if (bias) bias_rows(C, ldc, bias, M, N);
        qkv_gemm_ref(ta, tb, M, N, K, alpha, A, lda, B, ldb, bias ? 1.0f : beta, C, ldc);
        return;
    }
    static int blas_single = 0;
    if (!blas_single) { /* a benign race: every thread writes the same values */
        openblas_set_num_threads(1);
        blas_single = 1;
    }
    /* Split the longer of M and N into blocks that OpenMP threads multiply
     * at once. The blocks are a function of the product's shape alone, never
     * of the thread count, so the bits are the same on any number of
     * threads whatever the library's kernels do at a block's edges: OpenBLAS
     * 0.3.21's Haswell sgemm (the one OPENBLAS_CORETYPE=Haswell or =Zen
     * picks) rounds a row or column differently when the same product is
     * cut at other places (its tiles of 12 rows and of columns then fall
     * elsewhere), which the earlier one-block-per-thread split exposed.
     * QKV_GEMM_BLOCKS blocks (the processors' count where it is larger),
     * multiples of 16 wide, cost at most 2% against one block per thread on
     * 2 threads (the step's products, 2026-11-27, Zen 5); the seq2seq and
     * encoder training steps took the same time both ways (alternated). Small products run
     * whole on the calling thread: under 0.5 MFLOP, and under 4 MFLOP unless
     * they have at most 16 rows (a decoding step's matrix-vector products,
     * one row per sequence or beam). Measured on 2 cores by toggling the
     * bounds in one process: split, few-row products from 0.5 MFLOP ran
     * 1.3-20x faster (OpenBLAS is slow on a single 1-row call over a
     * 512x2048 matrix) and a d_model 512 decoding step 3-3.7x faster;
     * products of 32-100 rows under 4 MFLOP ran up to 1.8x slower split
     * whenever the second core was slow to respond, and small encoder
     * training steps up to 1.3x slower, so those stay whole. */
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    double flops = 2.0 * (double)M * (double)N * (double)K;
    int whole = flops < 0.5e6 || (flops < 4e6 && M > 16);
    int dnnl = gemm_path == QKV_GEMM_DNNL ||
               (gemm_path == QKV_GEMM_AUTO && flops >= QKV_GEMM_DNNL_MIN_FLOPS &&
                (ta ? K : M) >= QKV_GEMM_DNNL_MIN_ROWS);
    int split_n = N >= M;
    int64_t len = split_n ? N : M;
    int64_t nb = whole ? 1 : gemm_block_count();
    int64_t blk = ((len + nb - 1) / nb + 15) / 16 * 16;
    if (dnnl && !split_n && blk < QKV_GEMM_DNNL_MIN_BLOCK) blk = QKV_GEMM_DNNL_MIN_BLOCK;
    int64_t nblk = (len + blk - 1) / blk;
    /* oneDNN: a short last block of rows joins the one before (see above) */
    if (dnnl && !split_n && nblk > 1 && len - (nblk - 1) * blk < QKV_GEMM_DNNL_MIN_BLOCK) nblk--;
    if (nt > nblk) nt = (int)nblk;
    QKV_PAR_FOR_WITH(nt > 1, num_threads(nt),
        for (int64_t b = 0; b < nblk; b++) {
            int64_t o = b * blk, n = b == nblk - 1 ? len - o : blk;
            /* Sub-products: columns [o, o+n) of op(B) and C, or rows of op(A) and C. */
            const float *Ab = split_n ? A : (ta ? A + o : A + o * lda);
            const float *Bb = split_n ? (tb ? B + o * ldb : B + o) : B;
            float *Cb = split_n ? C + o : C + o * ldc;
            int64_t Mb = split_n ? M : n, Nb = split_n ? n : N;
            /* the bias broadcast in the block's own region (no parallel region of its own) */
            if (bias) bias_rows(Cb, ldc, split_n ? bias + o : bias, Mb, Nb);
            gemm_block(dnnl, ta, tb, Mb, Nb, K, alpha, Ab, lda, Bb, ldb, bias ? 1.0f : beta, Cb, ldc);
        });
}

void qkv_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
              int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    gemm_run(ta, tb, M, N, K, alpha, A, lda, B, ldb, NULL, beta, C, ldc);
}

void qkv_gemm_bias(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                   const float *B, int64_t ldb, const float *bias, float *C, int64_t ldc)
{
    gemm_run(ta, tb, M, N, K, alpha, A, lda, B, ldb, bias, 1.0f, C, ldc);
}
