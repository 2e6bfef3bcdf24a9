/* quant_matvec.c: qkv_qmatvec's speed as GB/s of weight bytes streamed,
 * against the machine's read bandwidth measured in the same run (every
 * thread summing its share of a 1 GiB buffer, best of 5), for the types of
 * SmolLM2 (Q4_1, Q8_0) and Gemma 3 Q4_K_M (Q4_K, Q6_K, Q5_0) and the
 * rest. Each matrix is about 160 MB, well past the caches, so a product
 * reads it from memory as a decoding step reads its weights; best of 7
 * products after one warm-up, each followed by a plain read of the same
 * bytes by all threads (column "read", GB/s; "of read" = the product's
 * share of it). Also a qkv_qmatmul of 64 rows (GFLOP/s, as
 * prompt processing runs) per type.
 *   build/bench/quant_matvec [--isa portable|avx2|avx512vnni] [--types Q4_1,Q8_0] [--mb MB]
 * Threads: OpenMP's (OMP_NUM_THREADS). --mb 1 keeps each matrix in the
 * caches: the kernels' compute rate rather than memory's. */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include "bench_util.h"
#include "qkv/quant.h"

/* One thread's sum of n 32-byte vectors at p (AVX2 loads, 4 chains). */
__attribute__((target("avx2"))) static uint64_t read_sum(const uint8_t *p, int64_t n)
{
    __m256i a[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int64_t i = 0; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++)
            a[k] = _mm256_add_epi64(a[k], _mm256_loadu_si256((const __m256i *)(p + 32 * (i + k))));
    __m256i s = _mm256_add_epi64(_mm256_add_epi64(a[0], a[1]), _mm256_add_epi64(a[2], a[3]));
    return (uint64_t)_mm256_extract_epi64(s, 0) + (uint64_t)_mm256_extract_epi64(s, 3);
}

/* GB/s of reading the buffer with all threads, best of reps. */
static double read_bandwidth(const uint8_t *buf, int64_t bytes, int reps)
{
    double best = 0;
    uint64_t sink = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
#pragma omp parallel reduction(+ : sink)
        {
            int nt = omp_get_num_threads(), id = omp_get_thread_num();
            int64_t vec = bytes / 32, per = (vec / nt) & ~(int64_t)3;
            sink += read_sum(buf + 32 * per * id, per);
        }
        double t = bench_now() - t0;
        if (bytes / t * 1e-9 > best) best = bytes / t * 1e-9;
    }
    if (sink == 42) printf(" ");
    return best;
}

/* Random valid blocks of type t: random bytes, then every block's f16
 * scales (and Q8_K's float one) set to normal values near 0.01. */
static void fill_weights(qkv_qtype t, uint8_t *w, int64_t rows, int64_t cols)
{
    int64_t blk = qkv_qtype_block_elems(t), bb = qkv_qtype_block_bytes(t), nb = rows * cols / blk;
    qkv_rng r;
    qkv_rng_seed(&r, 1);
    for (int64_t i = 0; i < nb * bb; i += 8) {
        uint64_t v = qkv_rng_next(&r);
        memcpy(w + i, &v, i + 8 <= nb * bb ? 8 : (size_t)(nb * bb - i));
    }
    if (blk == 1) { /* F16/BF16/F32: values from normal floats */
        float *tmp = malloc((size_t)cols * sizeof(float));
        qkv_rng_fill_normal(&r, tmp, cols, 0, 0.02f);
        for (int64_t o = 0; o < rows; o++) TRY(qkv_quantize(t, tmp, w + o * cols * bb, cols));
        free(tmp);
        return;
    }
    int off[2] = {-1, -1};
    switch (t) {
    case QKV_Q_Q4_1: case QKV_Q_Q5_1: case QKV_Q_Q4_K: case QKV_Q_Q5_K: off[0] = 0, off[1] = 2; break;
    case QKV_Q_Q2_K: off[0] = 80, off[1] = 82; break;
    case QKV_Q_Q3_K: off[0] = 108; break;
    case QKV_Q_Q6_K: off[0] = 208; break;
    case QKV_Q_Q8_K: break;
    default: off[0] = 0;
    }
    const uint16_t h = 0x211f; /* 0.0100 in f16 */
    const float f = 0.01f;
    for (int64_t b = 0; b < nb; b++) {
        if (t == QKV_Q_Q8_K) memcpy(w + b * bb, &f, 4);
        for (int k = 0; k < 2; k++)
            if (off[k] >= 0) memcpy(w + b * bb + off[k], &h, 2);
    }
}

int main(int argc, char **argv)
{
    double mb = 160;
    const char *isa = NULL, *types = "Q4_1,Q8_0,Q4_K,Q6_K,Q5_0,Q4_0,Q5_1,Q5_K,Q2_K,Q3_K,F16,BF16,F32";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--isa")) isa = argv[i + 1];
        else if (!strcmp(argv[i], "--types")) types = argv[i + 1];
        else if (!strcmp(argv[i], "--mb")) mb = atof(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [--isa portable|avx2|avx512vnni] [--types Q4_1,Q8_0,...] [--mb MB]\n", argv[0]);
            return 2;
        }
    }
    if (isa && !qkv_quant_force_isa(isa)) {
        fprintf(stderr, "--isa %s: unknown or not runnable here\n", isa);
        return 2;
    }
    int64_t bw_bytes = (int64_t)1 << 30;
    uint8_t *bwbuf = malloc((size_t)bw_bytes);
    if (!bwbuf) return 1;
    memset(bwbuf, 1, (size_t)bw_bytes);
    double bw = read_bandwidth(bwbuf, bw_bytes, 5);
    free(bwbuf);
    printf("threads %d, products' build %s, read bandwidth %.1f GB/s (1 GiB, all threads, best of 5)\n",
           omp_get_max_threads(), qkv_quant_isa(), bw);
    printf("%-5s %14s %9s %9s %8s %8s %8s %12s\n", "type", "rows x cols", "MB", "ms", "GB/s", "read", "of read",
           "mm64 GFLOP/s");
    const int64_t cols = 4096;
    char list[256];
    snprintf(list, sizeof list, "%s", types);
    for (char *name = strtok(list, ","); name; name = strtok(NULL, ",")) {
        qkv_qtype t = QKV_Q_F32;
        int found = 0;
        for (int id = 0; id < 40 && !found; id++)
            if (qkv_qtype_known(id) && !strcmp(qkv_qtype_name((qkv_qtype)id), name)) t = (qkv_qtype)id, found = 1;
        if (!found || !qkv_qtype_can_dequantize(t)) {
            fprintf(stderr, "type %s: unknown or without products\n", name);
            return 2;
        }
        int64_t row_bytes = (int64_t)qkv_qtype_row_bytes(t, cols), rows = (int64_t)(mb * 1048576) / row_bytes / 64 * 64;
        if (rows < 64) rows = 64;
        uint8_t *w = malloc((size_t)(rows * row_bytes));
        float *x = malloc((size_t)(64 * cols) * sizeof(float)), *y = malloc((size_t)(64 * rows) * sizeof(float));
        qkv_rng r;
        qkv_rng_seed(&r, 2);
        qkv_rng_fill_normal(&r, x, 64 * cols, 0, 1);
        fill_weights(t, w, rows, cols);
        TRY(qkv_qmatvec(t, w, rows, cols, x, y));
        /* the product and a plain read of the same bytes, interleaved (a
         * shared machine's load reaches both alike), best of 7 each */
        double best = 1e30, wbw = 0;
        int reps = mb < 16 ? 200 : 1;
        for (int k = 0; k < 7; k++) {
            double t0 = bench_now();
            for (int q = 0; q < reps; q++) TRY(qkv_qmatvec(t, w, rows, cols, x, y));
            double dt = (bench_now() - t0) / reps;
            if (dt < best) best = dt;
            double b = read_bandwidth(w, rows * row_bytes / 128 * 128, 1);
            if (b > wbw) wbw = b;
        }
        /* qkv_qmatmul of 64 rows of X over the first 4096 weight rows (stays in cache: compute-bound) */
        int64_t mr = rows < 4096 ? rows : 4096;
        double bmm = 1e30;
        for (int k = 0; k < 3; k++) {
            double t0 = bench_now();
            TRY(qkv_qmatmul(t, w, mr, cols, x, 64, y));
            double dt = bench_now() - t0;
            if (dt < bmm) bmm = dt;
        }
        double gbs = rows * row_bytes / best * 1e-9;
        printf("%-5s %7lld x %4lld %9.1f %9.2f %8.1f %8.1f %7.0f%% %12.1f\n", name, (long long)rows, (long long)cols,
               rows * row_bytes * 1e-6, best * 1e3, gbs, wbw, 100 * gbs / wbw, 2.0 * 64 * mr * cols / bmm * 1e-9);
        free(w);
        free(x);
        free(y);
    }
    return 0;
}
