/* test_llm_gguf_window.c: Gemma 3 270M's sliding window (512) on the
 * real weights (tools/get_data.sh gemma3, dequantized to FP32): its first
 * two layers (both local) over 560 tokens against tools/llm_ref.py --gguf
 * (gguf-py's tensors, transformers' semantics), the logits of the last 4
 * positions from a prefill and decoding steps, and from one prefill,
 * within 1e-4 relative. A missing file or gguf-py is a failure naming
 * tools/get_data.sh. */
#define _POSIX_C_SOURCE 200809L
#include "llm_gguf_ref.h"

#define TOL 1e-4

/* Gemma 3's sliding window (512) on the real weights: its first two
 * layers (both local) over 560 tokens, the logits of the last 4 positions,
 * from a prefill of 556 and 4 decoding steps, and from one prefill. */
static void gemma_window(const char *path)
{
    llm_ref_run r;
    llm_ref_start(&r, path, "gemma3", "--ids 2 --random-ids 559 --layers 2 --last 4");
    qkv_tensor *ids = r.ids, *want = r.logits;
    qkv_llm m;
    CHECK_OK(qkv_llm_load_gguf(path, 1, &m));
    if (ids && want && m.layers) {
        m.cfg.n_layer = 2; /* the reference's first two layers */
        int64_t T = ids->shape[0], V = m.cfg.vocab, K = want->shape[0];
        CHECK(m.cfg.window == 512 && T > m.cfg.window, "gemma3 window %lld, T %lld", (long long)m.cfg.window,
              (long long)T);
        float *got = malloc((size_t)(K * V) * sizeof(float));
        qkv_ctx *c;
        CHECK_OK(qkv_ctx_new(&c));
        qkv_ctx_set_grad(c, 0);
        qkv_kv_cache kc;
        CHECK_OK(qkv_llm_cache_init(&kc, &m, T));
        CHECK_OK(qkv_llm_forward(c, &m, &kc, ids->idx, T - K + 1, 0, got));
        for (int64_t t = 1; t < K; t++) CHECK_OK(qkv_llm_forward(c, &m, &kc, ids->idx + T - K + t, 1, 0, got + t * V));
        double worst = 0;
        h_compare("gemma3 window", "prefill + steps", got, want, TOL, &worst);
        qkv_kv_cache_reset(&kc);
        CHECK_OK(qkv_llm_forward(c, &m, &kc, ids->idx, T, 0, got));
        double e = h_rel_err(got, want->data + (K - 1) * V, V);
        CHECK(e <= TOL, "gemma3 window: one prefill's last logits relative error %.3g", e);
        printf("gemma3 sliding window: 2 local layers over %lld tokens (window %lld), last %lld positions' "
               "logits, worst relative error %.3g\n", (long long)T, (long long)m.cfg.window, (long long)K,
               worst > e ? worst : e);
        qkv_kv_cache_free(&kc);
        qkv_ctx_free(c);
        free(got);
    }
    qkv_llm_free(&m);
    llm_ref_end(&r);
}

int main(void)
{
    if (access(LLM_PY, X_OK) != 0) CHECK(0, "%s is missing: run tools/get_data.sh oracle", LLM_PY);
    gemma_window("data/gemma3/gemma-3-270m-q4_k_m.gguf");
    return h_finish("test_llm_gguf_window");
}
