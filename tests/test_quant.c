/* test_quant.c: quantized weights (include/qkv/quant.h) against llama.cpp's
 * own references, through tools/quant_oracle.py in data/venv (gguf-py and
 * llama-cpp-python's libggml-base; tools/get_data.sh oracle):
 *  - random blocks of every type dequantized bit for bit as gguf-py does
 *    (and with zero, subnormal, inf and NaN scales, NaN equal to NaN);
 *  - random matrices of a dozen distributions quantized to the bytes of
 *    gguf-py's quantize and of llama.cpp's quantize_row_*_ref;
 *  - every tensor of SmolLM2-135M-Instruct Q4_1 and Gemma 3 270M Q4_K_M
 *    (data/, tools/get_data.sh smollm2 gemma3) dequantized to gguf-py's
 *    floats (a hash of each whole tensor);
 *  - the products qkv_qmatvec / qkv_qmatmul of every build (portable,
 *    AVX2, AVX-512 VNNI where the CPU runs them) against the same product
 *    with x replaced by its 8-bit blocks (float rounding only), against the
 *    FP32 product of the dequantized weights (within the bound that x's
 *    rounding to 8 bits sets), and qkv_qmatmul's rows equal to qkv_qmatvec;
 *  - bad input: unknown and unsupported types, partial blocks, NULLs. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <omp.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"
#include "qkv/quant.h"

#define PY "data/venv/bin/python"

static uint32_t bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

/* ---- dequantization and quantization of random data ---------------------- */

static void deq_case(const char *dir, int type, int64_t n, int strict, const char *bin, const char *f32)
{
    size_t nb, nf;
    uint8_t *raw = h_slurp_at(dir, bin, &nb);
    float *want = h_slurp_at(dir, f32, &nf), *got = malloc((size_t)n * sizeof(float));
    CHECK(raw && want && nf == (size_t)n * 4, "%s: oracle files missing", bin);
    if (raw && want && got) {
        CHECK_OK(qkv_dequantize((qkv_qtype)type, raw, got, n));
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < n; i++) {
            int same = bits(got[i]) == bits(want[i]) || (!strict && isnan(got[i]) && isnan(want[i]));
            if (!same && bad++ == 0) first = i;
        }
        CHECK(bad == 0, "dequantize %s%s: %lld of %lld floats differ (first at %lld: %a, gguf-py %a)",
              qkv_qtype_name((qkv_qtype)type), strict ? "" : " (special scales)", (long long)bad, (long long)n,
              (long long)first, first >= 0 ? got[first] : 0, first >= 0 ? want[first] : 0);
    }
    free(raw);
    free(want);
    free(got);
}

static void quant_case(const char *dir, int type, int64_t n, const char *name, const char *in, const char *gg,
                       const char *cc)
{
    qkv_qtype t = (qkv_qtype)type;
    float *x = h_slurp_at(dir, in, NULL);
    size_t bytes = qkv_qtype_row_bytes(t, n);
    uint8_t *got = calloc(bytes, 1);
    CHECK(x && got, "%s: oracle input missing", in);
    if (!x || !got) goto done;
    CHECK_OK(qkv_quantize(t, x, got, n));
    const char *refs[2] = {gg, cc}, *who[2] = {"gguf-py", "llama.cpp's quantize_row_*_ref"};
    for (int k = 0; k < 2; k++) {
        if (!strcmp(refs[k], "-")) continue;
        size_t len;
        uint8_t *want = h_slurp_at(dir, refs[k], &len);
        CHECK(want && len == bytes, "%s: %s's bytes missing", name, who[k]);
        if (want && len == bytes) {
            size_t bad = 0, first = 0;
            for (size_t i = 0; i < bytes; i++)
                if (got[i] != want[i] && bad++ == 0) first = i;
            CHECK(bad == 0, "quantize %s %s: %zu of %zu bytes differ from %s's (first at byte %zu: %02x, want %02x)",
                  qkv_qtype_name(t), name, bad, bytes, who[k], first, got[first], want[first]);
        }
        free(want);
    }
done:
    free(x);
    free(got);
}

/* ---- products ---------------------------------------------------------------- */

/* x with each block (32, or 256 for the K-quants) rounded as the products
 * round it: d = amax / 127 and nearest-even codes (blocks of 32), or
 * llama.cpp's Q8_K through qkv_quantize. */
static void x_rounded(qkv_qtype t, const float *x, int64_t cols, float *xr)
{
    int blk = qkv_qtype_block_elems(t);
    if (blk == 32) {
        for (int64_t b = 0; b < cols; b += 32) {
            float amax = 0;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b + i]));
            float d = amax / 127, id = d ? 1.0f / d : 0.0f;
            for (int i = 0; i < 32; i++) xr[b + i] = d * rintf(x[b + i] * id);
        }
    } else if (blk == 256 && t != QKV_Q_Q2_K && t != QKV_Q_Q3_K && t != QKV_Q_Q8_K) {
        uint8_t *q = malloc(qkv_qtype_row_bytes(QKV_Q_Q8_K, cols));
        CHECK_OK(qkv_quantize(QKV_Q_Q8_K, x, q, cols));
        CHECK_OK(qkv_dequantize(QKV_Q_Q8_K, q, xr, cols));
        free(q);
    } else {
        memcpy(xr, x, (size_t)cols * sizeof(float));
    }
}

static const char *isas[] = {"portable", "avx2", "avx512vnni"};

/* W (rows, cols) of type t given as raw blocks and dequantized (wf). */
static void product_case(qkv_qtype t, const uint8_t *raw, const float *wf, int64_t rows, int64_t cols, int dist)
{
    float *x = malloc((size_t)(5 * cols) * sizeof(float)), *xr = malloc((size_t)cols * sizeof(float));
    float *y = malloc((size_t)rows * sizeof(float)), *Y = malloc((size_t)(5 * rows) * sizeof(float));
    qkv_rng r;
    qkv_rng_seed(&r, 100 + (uint64_t)dist * 31 + (uint64_t)t);
    for (int64_t i = 0; i < 5 * cols; i++) {
        float g = qkv_rng_normal(&r);
        x[i] = dist == 0 ? g : dist == 1 ? g * 1e-3f * (float)(i % 97) : (i % 64 < 8 ? 0.0f : g * 50.0f);
    }
    x_rounded(t, x, cols, xr);
    int blk = qkv_qtype_block_elems(t) == 32 ? 32 : 256;
    double worst_ref = 0, worst_fp = 0;
    int ran = 0;
    for (int k = 0; k < 3; k++) {
        if (!qkv_quant_force_isa(isas[k])) continue; /* not on this CPU */
        ran++;
        CHECK_OK(qkv_qmatvec(t, raw, rows, cols, x, y));
        for (int64_t o = 0; o < rows; o++) {
            const float *w = wf + o * cols;
            double exact = 0, rounded = 0, mag = 0, qbound = 0;
            for (int64_t b = 0; b < cols; b += blk) {
                double wmax = 0, xs = 0, amax = 0, wsum = 0;
                for (int i = 0; i < blk; i++) {
                    exact += (double)w[b + i] * x[b + i];
                    rounded += (double)w[b + i] * xr[b + i];
                    wmax = fmax(wmax, fabs(w[b + i]));
                    wsum += fabs(w[b + i]);
                    xs += fabs(xr[b + i]);
                    amax = fmax(amax, fabs(x[b + i]));
                }
                mag += 2 * wmax * xs;
                qbound += wsum * amax / 127 * 0.5 * (1 + 1e-5);
            }
            double e1 = fabs(y[o] - rounded), e2 = fabs(y[o] - exact);
            if (mag > 0) worst_ref = fmax(worst_ref, e1 / mag);
            CHECK(e1 <= 2e-6 * mag + 1e-30, "%s %s dist %d row %lld: %.9g vs %.9g (x rounded), error %.3g > %.3g",
                  qkv_qtype_name(t), isas[k], dist, (long long)o, y[o], rounded, e1, 2e-6 * mag);
            CHECK(e2 <= qbound + 1e-5 * mag + 1e-30, "%s %s dist %d row %lld: %.9g vs FP32 %.9g, error %.3g > bound %.3g",
                  qkv_qtype_name(t), isas[k], dist, (long long)o, y[o], exact, e2, qbound + 1e-5 * mag);
            if (qbound + mag > 0) worst_fp = fmax(worst_fp, e2 / (qbound + 1e-5 * mag));
        }
        /* qkv_qmatmul of 5 rows: each row of Y is qkv_qmatvec's */
        CHECK_OK(qkv_qmatmul(t, raw, rows, cols, x, 5, Y));
        int64_t bad = 0;
        for (int j = 0; j < 5; j++) {
            CHECK_OK(qkv_qmatvec(t, raw, rows, cols, x + j * cols, y));
            for (int64_t o = 0; o < rows; o++) bad += bits(y[o]) != bits(Y[j * rows + o]);
        }
        CHECK(bad == 0, "%s %s: %lld elements of qkv_qmatmul differ from qkv_qmatvec", qkv_qtype_name(t), isas[k],
              (long long)bad);
    }
    qkv_quant_force_isa(NULL);
    if (dist == 0)
        printf("  %-5s %dx%d: %d builds, worst error / magnitude vs x rounded %.2g, vs FP32 / its bound %.2g\n",
               qkv_qtype_name(t), (int)rows, (int)cols, ran, worst_ref, worst_fp);
    free(x);
    free(xr);
    free(y);
    free(Y);
}

static int run_oracle(const char *dir, const char *args)
{
    char cmd[1600];
    snprintf(cmd, sizeof cmd, PY " tools/quant_oracle.py --out %s %s", dir, args);
    int rc = system(cmd);
    CHECK(rc == 0, "the oracle failed (exit %d): %s (run from the repo root; tools/get_data.sh oracle)", rc, cmd);
    return rc == 0;
}

static void random_cases(void)
{
    char dir[] = "/tmp/qkv_quant_XXXXXX";
    if (!mkdtemp(dir) || !run_oracle(dir, "--seed 1")) return;
    char *index = h_slurp_at(dir, "index.txt", NULL);
    CHECK(index != NULL, "oracle index missing");
    int ndeq = 0, nquant = 0;
    for (char *line = index ? strtok(index, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        char a[128], b[128], c[128], d[128];
        int type;
        long long n;
        if (sscanf(line, "deq %d %lld %127s %127s %127s", &type, &n, a, b, c) == 5) {
            deq_case(dir, type, n, atoi(a), b, c);
            ndeq++;
            if (atoi(a) && type != QKV_Q_F32 && type != QKV_Q_Q8_K) { /* strict blocks: also as a weight */
                int64_t cols = 512, rows = n / cols;
                uint8_t *raw = h_slurp_at(dir, b, NULL);
                float *wf = h_slurp_at(dir, c, NULL);
                if (type == QKV_Q_BF16 && raw && wf) { /* random bits overflow a product: normal weights */
                    qkv_rng r;
                    qkv_rng_seed(&r, 7);
                    qkv_rng_fill_normal(&r, wf, n, 0, 1);
                    CHECK_OK(qkv_quantize(QKV_Q_BF16, wf, raw, n));
                    CHECK_OK(qkv_dequantize(QKV_Q_BF16, raw, wf, n));
                }
                for (int dist = 0; raw && wf && dist < 3; dist++) product_case((qkv_qtype)type, raw, wf, rows, cols, dist);
                free(raw);
                free(wf);
            }
        } else if (sscanf(line, "quant %d %lld %127s %127s %127s %127s", &type, &n, a, b, c, d) == 6) {
            quant_case(dir, type, n, a, b, c, d);
            nquant++;
        } else {
            CHECK(0, "oracle index line not understood: %s", line);
        }
    }
    printf("random: %d dequantization cases, %d quantization cases\n", ndeq, nquant);
    free(index);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
}

/* ---- every tensor of the two GGUF files ---------------------------------- */

static const char *gguf_files[] = {"data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "data/gemma3/gemma-3-270m-q4_k_m.gguf"};

static uint64_t floats_hash(const float *f, int64_t n, uint64_t start)
{
    uint64_t h = 0;
    for (int64_t i = 0; i < n; i++)
        h += (uint64_t)bits(f[i]) * (((uint64_t)(start + i) * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) | 1);
    return h;
}

static void gguf_cases(void)
{
    for (int i = 0; i < 2; i++)
        if (access(gguf_files[i], R_OK)) {
            CHECK(0, "%s is missing: run tools/get_data.sh smollm2 and tools/get_data.sh gemma3", gguf_files[i]);
            return;
        }
    char dir[] = "/tmp/qkv_quant_XXXXXX", args[600];
    snprintf(args, sizeof args, "--gguf %s %s", gguf_files[0], gguf_files[1]);
    if (!mkdtemp(dir) || !run_oracle(dir, args)) return;
    char *list = h_slurp_at(dir, "tensors.txt", NULL);
    CHECK(list != NULL, "oracle tensor list missing");
    const uint8_t *map[2];
    size_t size[2];
    for (int i = 0; i < 2; i++) {
        int fd = open(gguf_files[i], O_RDONLY);
        struct stat st;
        fstat(fd, &st);
        size[i] = (size_t)st.st_size;
        map[i] = mmap(NULL, size[i], PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
    }
    int count[2][32] = {{0}}, bad = 0, total = 0;
    float *buf = malloc((size_t)(1 << 22) * sizeof(float));
    for (char *line = list ? strtok(list, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        int fi, type;
        long long n, off, nbytes;
        unsigned long long want;
        char name[200];
        if (sscanf(line, "%d %d %lld %lld %lld %llu %199s", &fi, &type, &n, &off, &nbytes, &want, name) != 7) {
            CHECK(0, "tensor line not understood: %s", line);
            continue;
        }
        qkv_qtype t = (qkv_qtype)type;
        int64_t blk = qkv_qtype_block_elems(t), bb = qkv_qtype_block_bytes(t), step = (1 << 22) / blk * blk;
        CHECK((size_t)(off + nbytes) <= size[fi], "%s: outside the file", name);
        uint64_t h = 0;
        for (int64_t s = 0; s < n; s += step) {
            int64_t k = n - s < step ? n - s : step;
            CHECK_OK(qkv_dequantize(t, map[fi] + off + s / blk * bb, buf, k));
            h += floats_hash(buf, k, (uint64_t)s);
        }
        total++;
        if (type < 32) count[fi][type]++;
        if (h != want) bad++;
        CHECK(h == want, "%s: tensor %s (%s, %lld elements) dequantizes differently from gguf-py", gguf_files[fi], name,
              qkv_qtype_name(t), n);
    }
    for (int i = 0; i < 2; i++) {
        printf("%s:", gguf_files[i]);
        for (int t = 0; t < 32; t++)
            if (count[i][t]) printf(" %d %s", count[i][t], qkv_qtype_name((qkv_qtype)t));
        printf("\n");
        munmap((void *)map[i], size[i]);
    }
    printf("gguf: %d tensors, %d differ from gguf-py\n", total, bad);
    CHECK(total > 400, "only %d tensors listed", total);
    free(buf);
    free(list);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
}

/* ---- thread counts --------------------------------------------------------- */

/* Large enough to run on OpenMP's threads: the products on 1 thread and on
 * 3 give the same bits (each y[r] is one thread's sum). */
static void thread_cases(void)
{
    const qkv_qtype types[] = {QKV_Q_Q4_1, QKV_Q_Q8_0, QKV_Q_Q5_0, QKV_Q_Q4_K, QKV_Q_Q6_K, QKV_Q_F16};
    const int64_t rows = 1000, cols = 1024, n = 6;
    float *x = malloc((size_t)(n * cols) * sizeof(float)), *w = malloc((size_t)(rows * cols) * sizeof(float));
    float *y1 = malloc((size_t)(n * rows) * sizeof(float)), *y3 = malloc((size_t)(n * rows) * sizeof(float));
    uint8_t *q = malloc((size_t)rows * qkv_qtype_row_bytes(QKV_Q_F16, cols));
    qkv_rng r;
    qkv_rng_seed(&r, 5);
    qkv_rng_fill_normal(&r, x, n * cols, 0, 1);
    qkv_rng_fill_normal(&r, w, rows * cols, 0, 0.05f);
    int saved = omp_get_max_threads();
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        qkv_qtype t = types[k];
        size_t bytes = (size_t)rows * qkv_qtype_row_bytes(t, cols);
        if (qkv_qtype_can_quantize(t)) {
            CHECK_OK(qkv_quantize(t, w, q, rows * cols));
        } else { /* K-quants: random codes, scales 0.01 (f16 0x211f) */
            for (size_t i = 0; i < bytes; i++) q[i] = (uint8_t)qkv_rng_next(&r);
            int bb = qkv_qtype_block_bytes(t), off = t == QKV_Q_Q6_K ? 208 : 0;
            for (size_t b = 0; b < bytes / (size_t)bb; b++) {
                q[b * bb + off] = 0x1f, q[b * bb + off + 1] = 0x21;
                if (t == QKV_Q_Q4_K) q[b * bb + 2] = 0x1f, q[b * bb + 3] = 0x21;
            }
        }
        for (int mm = 0; mm < 2; mm++) {
            int64_t m = mm ? n : 1;
            omp_set_num_threads(1);
            CHECK_OK(qkv_qmatmul(t, q, rows, cols, x, m, y1));
            omp_set_num_threads(3);
            CHECK_OK(qkv_qmatmul(t, q, rows, cols, x, m, y3));
            int64_t bad = 0;
            for (int64_t i = 0; i < m * rows; i++) bad += bits(y1[i]) != bits(y3[i]);
            CHECK(bad == 0, "%s, %lld rows of x: %lld results differ between 1 and 3 threads", qkv_qtype_name(t),
                  (long long)m, (long long)bad);
        }
    }
    omp_set_num_threads(saved);
    free(x);
    free(w);
    free(y1);
    free(y3);
    free(q);
}

/* ---- bad input ----------------------------------------------------------------- */

static void bad_input(void)
{
    float f[64] = {0}, y[4];
    uint8_t q[512] = {0};
    CHECK_ERR(qkv_dequantize((qkv_qtype)99, q, f, 32), QKV_ERR_DTYPE, "unknown");
    CHECK_ERR(qkv_dequantize(QKV_Q_Q8_1, q, f, 32), QKV_ERR_DTYPE, "Q8_1");
    CHECK_ERR(qkv_dequantize(QKV_Q_I32, q, f, 32), QKV_ERR_DTYPE, "I32");
    CHECK_ERR(qkv_dequantize(QKV_Q_Q4_0, q, f, 33), QKV_ERR_SHAPE, "not whole blocks of 32");
    CHECK_ERR(qkv_dequantize(QKV_Q_Q4_K, q, f, 64), QKV_ERR_SHAPE, "not whole blocks of 256");
    CHECK_ERR(qkv_dequantize(QKV_Q_Q4_0, NULL, f, 32), QKV_ERR_ARG, "src");
    CHECK_ERR(qkv_quantize(QKV_Q_Q4_K, f, q, 256), QKV_ERR_DTYPE, "Q4_K");
    CHECK_ERR(qkv_quantize(QKV_Q_Q8_0, f, q, 48), QKV_ERR_SHAPE, "not whole blocks");
    CHECK_ERR(qkv_quantize(QKV_Q_Q8_0, f, NULL, 32), QKV_ERR_ARG, "dst");
    CHECK_ERR(qkv_qmatvec((qkv_qtype)5, q, 2, 32, f, y), QKV_ERR_DTYPE, "unknown");
    CHECK_ERR(qkv_qmatvec(QKV_Q_Q4_1, q, 2, 48, f, y), QKV_ERR_SHAPE, "cols 48");
    CHECK_ERR(qkv_qmatvec(QKV_Q_Q4_1, q, -1, 32, f, y), QKV_ERR_SHAPE, "negative");
    CHECK_ERR(qkv_qmatvec(QKV_Q_Q4_1, NULL, 2, 32, f, y), QKV_ERR_ARG, "W");
    CHECK_ERR(qkv_qmatmul(QKV_Q_Q6_K, q, 1, 256, f, 1, NULL), QKV_ERR_ARG, "y");
    CHECK_ERR(qkv_qmatmul(QKV_Q_Q8_0, q, INT64_MAX / 2, 64, f, 3, y), QKV_ERR_SHAPE, "overflow");
    CHECK_OK(qkv_dequantize(QKV_Q_Q4_0, q, f, 0));
    CHECK(!qkv_quant_force_isa("sse9"), "an unknown build name is refused");
    CHECK(qkv_quant_force_isa("portable") && !strcmp(qkv_quant_isa(), "portable"), "the portable build can be forced");
    qkv_quant_force_isa(NULL);
    qkv_set_reference(1);
    CHECK(!strcmp(qkv_quant_isa(), "portable"), "qkv_reference() picks the portable build");
    qkv_set_reference(0);
}

int main(void)
{
    if (access(PY, X_OK)) {
        CHECK(0, PY " is missing: run tools/get_data.sh oracle");
    } else {
        printf("products' build here: %s\n", qkv_quant_isa());
        random_cases();
        gguf_cases();
    }
    thread_cases();
    bad_input();
    printf("test_quant: %d passed, %d failed\n", h_pass, h_fail);
    return h_fail != 0;
}
