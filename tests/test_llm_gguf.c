/* test_llm_gguf.c: the two GGUF files of tools/get_data.sh (SmolLM2-135M-
 * Instruct Q4_1, Llama; Gemma 3 270M Q4_K_M) through qkv_llm_load_gguf.
 * With every weight dequantized to FP32, the logits of a prefill and of
 * step-by-step decoding are compared with tools/llm_ref.py --gguf (the
 * PyTorch reference fed gguf-py's dequantized tensors, a Llama file's q/k
 * rows un-permuted to HF's order and rotated with rotate_half), within
 * 1e-4 relative. With the weights kept quantized (products over the
 * blocks, activations rounded to 8 bits as llama.cpp does), the agreement
 * with that reference is printed and loosely bounded. A missing file or
 * gguf-py is a failure naming tools/get_data.sh. */
#define _POSIX_C_SOURCE 200809L
#include "llm_gguf_ref.h"

#define TOL 1e-4
/* Token ids after each model's BOS (SmolLM2 1, Gemma 2). */
static const char *IDS = "504,3300,314,260,2019,28,5,100,4000,17,9,2";

/* Logits (T,V) of ids through m: one prefill, or T steps. */
static void logits_of(const qkv_llm *m, const int64_t *ids, int64_t T, int steps, float *out)
{
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    qkv_ctx_set_grad(c, 0);
    qkv_kv_cache kc;
    CHECK_OK(qkv_llm_cache_init(&kc, m, T));
    int64_t V = m->cfg.vocab;
    if (steps)
        for (int64_t t = 0; t < T; t++) CHECK_OK(qkv_llm_forward(c, m, &kc, ids + t, 1, 1, out + t * V));
    else
        CHECK_OK(qkv_llm_forward(c, m, &kc, ids, T, 1, out));
    qkv_kv_cache_free(&kc);
    qkv_ctx_free(c);
}

/* Mean over rows of KL(softmax(p) || softmax(q)), p and q (T,V) logits. */
static double mean_kl(const float *p, const float *q, int64_t T, int64_t V)
{
    double sum = 0;
    for (int64_t t = 0; t < T; t++) {
        const float *a = p + t * V, *b = q + t * V;
        double ma = a[h_argmax(a, V)], mb = b[h_argmax(b, V)], za = 0, zb = 0, kl = 0;
        for (int64_t i = 0; i < V; i++) {
            za += exp(a[i] - ma);
            zb += exp(b[i] - mb);
        }
        for (int64_t i = 0; i < V; i++) {
            double la = a[i] - ma - log(za), lb = b[i] - mb - log(zb);
            kl += exp(la) * (la - lb);
        }
        sum += kl;
    }
    return sum / (double)T;
}

static void one_file(const char *path, const char *tag, int bos, qkv_llm_arch arch, int64_t n_layer,
                     int64_t n_head, int64_t n_head_kv)
{
    char args[200];
    snprintf(args, sizeof args, "--ids %d,%s", bos, IDS);
    llm_ref_run r;
    llm_ref_start(&r, path, tag, args);
    qkv_tensor *ids = r.ids, *want = r.logits;
    qkv_llm m;
    CHECK_OK(qkv_llm_load_gguf(path, 1, &m));
    const qkv_llm_config *g = &m.cfg;
    CHECK(g->arch == arch && g->n_layer == n_layer && g->n_head == n_head && g->n_head_kv == n_head_kv && g->tied,
          "%s: config arch %d, %lld layers, %lld/%lld heads, tied %d", tag, (int)g->arch, (long long)g->n_layer,
          (long long)g->n_head, (long long)g->n_head_kv, g->tied);
    if (ids && want && m.layers) {
        int64_t T = ids->shape[0], V = g->vocab;
        float *got = malloc((size_t)(T * V) * sizeof(float));
        double worst = 0;
        logits_of(&m, ids->idx, T, 0, got);
        h_compare(tag, "FP32 prefill", got, want, TOL, &worst);
        logits_of(&m, ids->idx, T, 1, got);
        h_compare(tag, "FP32 decode", got, want, TOL, &worst);
        printf("%s FP32-dequantized: %lld positions, worst logits relative error %.3g (tolerance %.0e)\n", tag,
               (long long)T, worst, TOL);
        qkv_llm_free(&m);
        CHECK_OK(qkv_llm_load_gguf(path, 0, &m)); /* the quantized weights as stored */
        if (m.layers) {
            logits_of(&m, ids->idx, T, 1, got);
            int agree = 0;
            for (int64_t t = 0; t < T; t++) agree += h_argmax(got + t * V, V) == h_argmax(want->data + t * V, V);
            double e = h_rel_err(got, want->data, T * V), kl = mean_kl(want->data, got, T, V);
            printf("%s quantized products vs the FP32 reference: mean KL %.4f nats, argmax agrees on %d of %lld "
                   "positions, logits relative error %.3g\n", tag, kl, agree, (long long)T, e);
            /* 8-bit activations alone (same weights): about 0.01 nats on these made-up token runs */
            CHECK(kl < 0.03 && e < 0.1, "%s quantized: mean KL %.4f, relative error %.3g", tag, kl, e);
        }
        free(got);
    }
    qkv_llm_free(&m);
    llm_ref_end(&r);
}

int main(void)
{
    if (access(LLM_PY, X_OK) != 0) CHECK(0, "%s is missing: run tools/get_data.sh oracle", LLM_PY);
    one_file("data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2", 1, QKV_LLM_LLAMA, 30, 9, 3);
    one_file("data/gemma3/gemma-3-270m-q4_k_m.gguf", "gemma3", 2, QKV_LLM_GEMMA3, 18, 4, 1);
    qkv_llm m;
    CHECK_ERR(qkv_llm_load_gguf("/nonexistent.gguf", 1, &m), QKV_ERR_NOTFOUND, "nonexistent");
    return h_finish("test_llm_gguf");
}
