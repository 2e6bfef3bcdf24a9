/* llamacpp_check.h: qkv's logits and greedy continuations against
 * llama.cpp's on the same GGUF model (tests/test_llm_llamacpp.c,
 * tests/check_llm_llamacpp_*.c). The reference is tools/llamacpp_oracle.py
 * (llama-cpp-python 0.3.36, llama.cpp itself), run once into
 * build/llamacpp/NAME/ and read from there afterwards (rm -r that folder
 * to run it again): chunks of 512 KJV tokens tokenized by llama.cpp (BOS
 * first in each chunk when the model adds one), llama.cpp's top 256
 * log-probabilities at each position, and its greedy continuations of 10
 * prompts. KL(llama.cpp || qkv) is taken over the top 256 ids plus the rest
 * of the mass as one bucket (a lower bound of the full KL).
 *
 * Two comparisons, because 8-bit activations make a third party's logits
 * chaotic functions of float rounding:
 * 1. The model with every tensor dequantized to F32 (the oracle's f32
 *    command, gguf-py's dequantization): neither side quantizes its
 *    activations, so the two must agree to float rounding: argmax on
 *    >= 99.9% of positions, mean KL <= 1e-4 nats, and every greedy
 *    continuation equal or its first difference a near tie (both gaps
 *    within NEAR_TIE).
 * 2. The shipped quantized file: llama.cpp and qkv both round activations
 *    to 8-bit blocks before the integer dot products, and a difference of
 *    1e-7 anywhere flips some rounding that then grows through the layers.
 *    The floor is measured in the same run: qkv against itself with only
 *    the float order changed (the portable reference kernels: the same
 *    integer sums), on the first chunk. Bound: KL(llama.cpp || qkv) <=
 *    FLOOR_FACTOR x that floor. Greedy continuations are printed, not
 *    bounded (after the first flip they are different texts). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"

#define NEAR_TIE 0.1
#define F32_ARGMAX_MIN 0.999
#define F32_KL_MAX 1e-4
#define FLOOR_FACTOR 1.5

static const char *PY = "data/venv/bin/python";

/* Runs the oracle's sub-command cmd into dir unless dir/file exists. */
static int oracle(const char *cmd, const char *dir, const char *file, const char *model, const char *args)
{
    char p[768];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    if (access(p, R_OK) == 0) return 1;
    mkdir("build/llamacpp", 0755);
    snprintf(p, sizeof p, "%s tools/llamacpp_oracle.py %s %s %s %s", PY, cmd, dir, model, args);
    int rc = system(p);
    CHECK(rc == 0, "the llama.cpp oracle failed (exit %d): %s (llama_cpp: tools/get_data.sh oracle)", rc, p);
    return rc == 0;
}

static double log_softmax_at(const float *x, int64_t V, double *lse)
{
    double mx = x[0], s = 0;
    for (int64_t v = 1; v < V; v++) mx = x[v] > mx ? x[v] : mx;
    for (int64_t v = 0; v < V; v++) s += exp((double)x[v] - mx);
    *lse = mx + log(s);
    return mx;
}

/* KL(llama.cpp || qkv) at one position over the top ids + the rest bucket. */
static double kl_at(const float *x, int64_t V, const int32_t *tid, const float *tlp, int K, double *rest)
{
    double lse, P = 0, Q = 0, kl = 0;
    log_softmax_at(x, V, &lse);
    for (int k = 0; k < K; k++) {
        double lp = tlp[k], lq = (double)x[tid[k]] - lse, p = exp(lp);
        kl += p * (lp - lq), P += p, Q += exp(lq);
    }
    double pr = 1 - P, qr = 1 - Q;
    if (pr > 1e-12) kl += pr * log(pr / (qr > 1e-12 ? qr : 1e-12));
    *rest = pr;
    return kl;
}

/* qkv's logits (T,V) of one chunk from an empty cache, with the
 * reference kernels when ref is 1. */
static void chunk_logits(const qkv_llm *m, const int64_t *ids, int T, int ref, float *logits)
{
    qkv_ctx *c;
    qkv_kv_cache kc;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_ctx_set_grad(c, 0);
    CHECK_OK(qkv_llm_cache_init(&kc, m, T));
    qkv_set_reference(ref);
    CHECK_OK(qkv_llm_forward(c, m, &kc, ids, T, 1, logits));
    qkv_set_reference(0);
    qkv_kv_cache_free(&kc);
    qkv_ctx_free(c);
}

/* Mean KL(softmax(a) || softmax(b)) over T rows of V logits (full distributions). */
static double mean_kl_full(const float *a, const float *b, int T, int64_t V)
{
    double kl = 0;
    for (int t = 0; t < T; t++) {
        double la, lb;
        log_softmax_at(a + t * V, V, &la);
        log_softmax_at(b + t * V, V, &lb);
        for (int64_t v = 0; v < V; v++) {
            double pa = (double)a[t * V + v] - la;
            kl += exp(pa) * (pa - ((double)b[t * V + v] - lb));
        }
    }
    return kl / T;
}

/* The logits over the KJV chunks: argmax agreement and mean KL against
 * llama.cpp's; quantized: bounded by the floor (qkv against its reference
 * kernels on the first chunk), else by the F32 bounds. */
static void check_logits(const char *tag, const qkv_llm *m, const char *dir, int quantized)
{
    size_t len;
    char *meta = h_slurp_at(dir, "meta.txt", &len);
    int chunks = 0, ctx = 0, K = 0;
    long long vocab = 0;
    if (!meta || sscanf(meta, "%d %d %d %lld", &chunks, &ctx, &K, &vocab) != 4 || vocab != m->cfg.vocab) {
        CHECK(0, "%s: %s/meta.txt unreadable or of another vocabulary", tag, dir);
        free(meta);
        return;
    }
    int32_t *ids32 = h_slurp_at(dir, "ids.i32", &len), *tid = h_slurp_at(dir, "top_ids.i32", &len);
    float *tlp = h_slurp_at(dir, "top_lp.f32", &len);
    int64_t V = m->cfg.vocab, N = (int64_t)chunks * ctx, agree = 0;
    float *logits = malloc((size_t)(ctx * V) * sizeof *logits);
    int64_t *ids = malloc((size_t)ctx * sizeof *ids);
    double kl = 0, klmax = 0, rest = 0, floor = 0;
    for (int ch = 0; ids32 && tid && tlp && ch < chunks; ch++) {
        for (int t = 0; t < ctx; t++) ids[t] = ids32[ch * ctx + t];
        chunk_logits(m, ids, ctx, 0, logits);
        for (int t = 0; t < ctx; t++) {
            int64_t at = (int64_t)ch * ctx + t;
            double r, k = kl_at(logits + t * V, V, tid + at * K, tlp + at * K, K, &r);
            kl += k, rest += r, klmax = k > klmax ? k : klmax;
            agree += h_argmax(logits + t * V, V) == tid[at * K];
        }
        if (ch == 0 && quantized) {
            float *ref = malloc((size_t)(ctx * V) * sizeof *ref);
            chunk_logits(m, ids, ctx, 1, ref);
            floor = mean_kl_full(logits, ref, ctx, V);
            free(ref);
        }
    }
    kl /= (double)N;
    printf("%s vs llama.cpp over %lld KJV positions (%d chunks of %d): argmax agrees on %lld (%.2f%%), mean "
           "KL %.2e nats (max %.2e; the mass outside llama.cpp's top %d: %.2g on average)\n",
           tag, (long long)N, chunks, ctx, (long long)agree, 100.0 * agree / N, kl, klmax, K, rest / N);
    if (quantized) {
        printf("%s floor: qkv against its reference kernels on chunk 1: mean KL %.2e nats; llama.cpp's KL is "
               "%.2f x the floor (bound %.1f)\n", tag, floor, kl / floor, FLOOR_FACTOR);
        CHECK(kl <= FLOOR_FACTOR * floor, "%s: mean KL %.2e > %.1f x the floor %.2e", tag, kl, FLOOR_FACTOR, floor);
    } else {
        CHECK(agree >= F32_ARGMAX_MIN * N, "%s: argmax agrees on %lld of %lld", tag, (long long)agree,
              (long long)N);
        CHECK(kl <= F32_KL_MAX, "%s: mean KL %.2e > %.0e", tag, kl, F32_KL_MAX);
    }
    free(meta), free(ids32), free(tid), free(tlp), free(logits), free(ids);
}

/* Reads n numbers of line s after *p into out (ints or doubles). */
static int read_nums(char **p, int64_t n, int64_t *ints, double *dbl)
{
    for (int64_t i = 0; i < n; i++) {
        char *e;
        if (ints) ints[i] = strtoll(*p, &e, 10);
        else dbl[i] = strtod(*p, &e);
        if (e == *p) return 0;
        *p = e;
    }
    while (**p == ' ' || **p == '|') ++*p;
    return 1;
}

/* One prompt's greedy continuation against llama.cpp's. */
static void greedy_one(const char *tag, const qkv_llm *m, int i, const int64_t *prompt, int64_t P,
                       const int64_t *want, const double *gaps, int64_t N, int strict)
{
    int64_t V = m->cfg.vocab, *seq = malloc((size_t)(P + N) * sizeof *seq);
    float *x = malloc((size_t)V * sizeof *x);
    qkv_ctx *c;
    qkv_kv_cache kc;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_ctx_set_grad(c, 0);
    CHECK_OK(qkv_llm_cache_init(&kc, m, P + N));
    memcpy(seq, prompt, (size_t)P * sizeof *seq);
    CHECK_OK(qkv_llm_forward(c, m, &kc, seq, P, 0, x));
    int64_t t = 0;
    for (; t < N; t++) {
        qkv_ctx_reset(c);
        int64_t id = h_argmax(x, V);
        if (id != want[t]) break;
        seq[P + t] = id;
        if (t + 1 < N) CHECK_OK(qkv_llm_forward(c, m, &kc, &id, 1, 0, x));
    }
    if (t == N) {
        printf("%s greedy %d: %lld tokens equal llama.cpp's\n", tag, i, (long long)N);
    } else {
        int64_t id = h_argmax(x, V);
        double ours = (double)x[id] - x[want[t]];
        printf("%s greedy %d: first difference at token %lld: qkv %lld, llama.cpp %lld; qkv's logit gap %.4f, "
               "llama.cpp's best-second gap %.4f\n", tag, i, (long long)t, (long long)id, (long long)want[t], ours,
               gaps[t]);
        CHECK(!strict || (ours <= NEAR_TIE && gaps[t] <= NEAR_TIE), "%s greedy %d: token %lld differs, not a near tie (gaps "
              "%.4f, %.4f > %.2f)", tag, i, (long long)t, ours, gaps[t], NEAR_TIE);
    }
    qkv_kv_cache_free(&kc);
    qkv_ctx_free(c);
    free(seq), free(x);
}

static void check_greedy(const char *tag, const qkv_llm *m, const char *dir, int strict)
{
    size_t len;
    char *text = h_slurp_at(dir, "greedy.txt", &len), *p = text;
    int lines = 0;
    while (p && *p) {
        long long P = strtoll(p, &p, 10), N = strtoll(p, &p, 10);
        if (P < 1 || N < 1 || P > 4096 || N > 4096) break;
        int64_t *prompt = malloc((size_t)P * sizeof *prompt), *want = malloc((size_t)N * sizeof *want);
        double *gaps = malloc((size_t)N * sizeof *gaps);
        int ok = read_nums(&p, P, prompt, NULL) && read_nums(&p, N, want, NULL) && read_nums(&p, N, NULL, gaps);
        if (ok) greedy_one(tag, m, lines++, prompt, P, want, gaps, N, strict);
        free(prompt), free(want), free(gaps);
        if (!ok) break;
        while (*p == '\n' || *p == ' ') p++;
    }
    CHECK(lines == 10, "%s: %s/greedy.txt: %d prompts read, 10 expected", tag, dir, lines);
    free(text);
}

/* One model against llama.cpp: chunks of 512 KJV tokens, greedy
 * continuations of n tokens; the oracle's files in build/llamacpp/DIR. */
static void compare_model(const char *path, const char *tag, int quantized, int chunks, int n)
{
    char dir[256], args[64];
    snprintf(dir, sizeof dir, "build/llamacpp/%s-c%dn%d", tag, chunks, n);
    qkv_llm m;
    CHECK_OK(qkv_llm_load_gguf(path, 0, &m));
    snprintf(args, sizeof args, "--chunks %d", chunks);
    if (m.layers && oracle("logits", dir, "meta.txt", path, args)) check_logits(tag, &m, dir, quantized);
    snprintf(args, sizeof args, "--n %d", n);
    if (m.layers && oracle("greedy", dir, "greedy.txt", path, args)) check_greedy(tag, &m, dir, !quantized);
    qkv_llm_free(&m);
}

/* The whole check for one model file: its F32 copy, then (quantized 1)
 * the file as shipped. */
static int llamacpp_check(const char *path, const char *tag, int quantized, int chunks, int n)
{
    if (access(path, R_OK) != 0) {
        CHECK(0, "%s is missing: run tools/get_data.sh %s", path, tag);
        return h_finish("check_llm_llamacpp");
    }
    if (access(PY, X_OK) != 0) {
        CHECK(0, "%s is missing: run tools/get_data.sh oracle", PY);
        return h_finish("check_llm_llamacpp");
    }
    char dir[256], f32[320], tag32[64];
    snprintf(dir, sizeof dir, "build/llamacpp/%s-f32", tag);
    snprintf(f32, sizeof f32, "%s/model.gguf", dir);
    snprintf(tag32, sizeof tag32, "%s-f32", tag);
    if (oracle("f32", dir, "model.gguf", path, "")) compare_model(f32, tag32, 0, chunks, n);
    if (quantized) compare_model(path, tag, 1, chunks, n);
    return h_finish("check_llm_llamacpp");
}
