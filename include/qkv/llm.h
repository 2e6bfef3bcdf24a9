/* qkv/llm.h: pretrained decoder-only language models of the Llama and
 * Gemma 3 families (included by qkv.h): their configuration, their weights
 * behind one small interface (a linear weight is a ggml block type, its
 * bytes and its shape, so FP32 safetensors and quantized GGUF tensors look
 * the same to the forward), loading from a Hugging Face folder
 * (config.json + model.safetensors), and inference: a prefill of T tokens
 * and one-token decoding steps over a KV cache, returning logits
 * (src/models/llm.c, llm_load.c, llm_forward.c).
 *
 * Llama (HF LlamaForCausalLM), per layer, x the residual stream (T,E):
 *   h = rmsnorm(x) * attn_norm
 *   q, k, v = h Wq^T, h Wk^T, h Wv^T;  RoPE(q), RoPE(k) with rope_base
 *   x += attention(q, k, v) Wo^T      (n_head query heads over n_head_kv
 *                                      key/value heads: kv head = h / (n_head/n_head_kv))
 *   x += (silu(rmsnorm(x) * ffn_norm Wg^T) * (.. Wu^T)) Wd^T
 *   logits = rmsnorm(x) * out_norm Wout^T   (Wout = the embedding when tied)
 * Gemma 3 (HF Gemma3ForCausalLM): the embedding times sqrt(E); RMSNorm
 * weights applied as (1 + w) (stored here already offset: see
 * qkv_llm_layer); q and k each normalised per head (QK-norm) before RoPE;
 * the attention output and the MLP output normalised again (post norms)
 * before they join the residual; GeGLU (gelu, tanh approximation) in place
 * of SiLU; sliding-window layers (every layer but each pattern-th) with
 * the local RoPE base, the others global with rope_base; scores scaled by
 * query_pre_attn_scalar^-1/2; logits = cap * tanh(logits / cap) when
 * final_softcap > 0.
 *
 * RoPE pairs: HF checkpoints rotate (x[i], x[i + hd/2]) (rotate_half,
 * QKV_ROPE_HALF); llama.cpp's GGUF Llama files hold q and k weights whose
 * rows the converter permuted so that adjacent pairs (x[2i], x[2i+1])
 * rotate (QKV_ROPE_INTERLEAVED): the loader of each source sets rope_layout. */
#include "qkv.h" /* first: qkv.h includes every area header in order */
#ifndef QKV_LLM_H
#define QKV_LLM_H
#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    QKV_LLM_LLAMA = 0, /* LlamaForCausalLM; GGUF general.architecture "llama" */
    QKV_LLM_GEMMA3     /* Gemma3ForCausalLM; GGUF "gemma3" */
} qkv_llm_arch;

/* "llama", "gemma3"; NULL out of range. */
QKV_API const char *qkv_llm_arch_name(qkv_llm_arch a);

typedef struct {
    qkv_llm_arch arch;
    int64_t n_layer, d_model, n_head, n_head_kv, head_dim, d_ff, vocab;
    int64_t max_pos;          /* max_position_embeddings (information; the cache sets the limit) */
    float rope_base;          /* rope_theta: every Llama layer, Gemma's global layers */
    float rope_base_local;    /* Gemma's sliding layers (rope_local_base_freq, 10000) */
    qkv_rope_layout rope_layout; /* QKV_ROPE_HALF (HF) or QKV_ROPE_INTERLEAVED (GGUF llama) */
    float eps;                /* rms_norm_eps */
    /* Sliding window: a query at position p sees keys p - window < j <= p
     * (HF's sliding_window, llama.cpp's n_swa); 0: none. */
    int64_t window;
    /* Layer i slides when pattern > 0 and (i + 1) % pattern != 0 (Gemma 3:
     * 6, five local layers then a global one); 0: every layer global. */
    int64_t pattern;
    float attn_scale;         /* scores' scale; 0: 1/sqrt(head_dim) */
    float final_softcap;      /* final_logit_softcapping; 0: none */
    int tied;                 /* the output projection is the token embedding */
} qkv_llm_config;

/* Whether layer i of a model with config cfg uses the sliding window. */
QKV_API int qkv_llm_layer_is_local(const qkv_llm_config *cfg, int64_t i);
/* Checks a configuration: sizes >= 1, n_head a multiple of n_head_kv,
 * head_dim even, bases and eps positive. QKV_ERR_ARG naming the field. */
QKV_API qkv_status qkv_llm_config_check(const qkv_llm_config *cfg);

/* A weight matrix (rows,cols) = (out,in), row-major in ggml's block type
 * `type` (QKV_Q_F32: plain floats), data held by whoever loaded it. */
typedef struct {
    qkv_qtype type;
    const void *data;
    int64_t rows, cols;
} qkv_llm_weight;

/* y (M,rows) = x (M,cols) W^T: FP32 weights through the GEMM, the others
 * through qkv_qmatmul (qkv/quant.h: the blocks read as stored). */
QKV_API qkv_status qkv_llm_weight_matmul(const qkv_llm_weight *w, int64_t M, const float *x, float *y);
/* Row r of W as floats (cols of them): an embedding lookup. */
QKV_API qkv_status qkv_llm_weight_row(const qkv_llm_weight *w, int64_t r, float *out);

/* One layer's weights. The norm weights are the multipliers the forward
 * applies (Gemma's 1 + w already added: HF stores w, llama.cpp's GGUF
 * converter stores 1 + w), FP32, each of d_model floats (q_norm and
 * k_norm: head_dim). NULL where the family has none. */
typedef struct {
    qkv_llm_weight wq, wk, wv, wo;       /* (H*hd,E), (Hkv*hd,E), (Hkv*hd,E), (E,H*hd) */
    qkv_llm_weight w_gate, w_up, w_down; /* (F,E), (F,E), (E,F) */
    const float *attn_norm;              /* input_layernorm */
    const float *ffn_norm;               /* Llama post_attention_layernorm, Gemma pre_feedforward_layernorm */
    const float *post_attn_norm;         /* Gemma post_attention_layernorm */
    const float *post_ffn_norm;          /* Gemma post_feedforward_layernorm */
    const float *q_norm, *k_norm;        /* Gemma (head_dim) */
} qkv_llm_layer;

typedef struct {
    qkv_llm_config cfg;
    qkv_llm_weight tok_emb;  /* (vocab, d_model) */
    qkv_llm_weight output;   /* (vocab, d_model); a copy of tok_emb when tied */
    const float *out_norm;   /* model.norm (d_model) */
    qkv_llm_layer *layers;   /* n_layer */
    /* What the loader owns (freed by qkv_llm_free): buffers and files. */
    void *owned;
} qkv_llm;

/* Loads a Hugging Face folder: dir/config.json (architectures[0]
 * "LlamaForCausalLM" or "Gemma3ForCausalLM", the HF field names and
 * defaults) and dir/model.safetensors (HF tensor names, F32/F16/BF16
 * read as F32). An unknown architecture, a missing or mis-shaped tensor,
 * an unsupported option (rope_scaling, attention biases) is an error
 * naming it. Free with qkv_llm_free. */
QKV_API qkv_status qkv_llm_load_hf(const char *dir, qkv_llm *m);
/* The same from a config and an opened safetensors file (kept open by the
 * caller while m lives). */
QKV_API qkv_status qkv_llm_from_safetensors(const qkv_llm_config *cfg, const qkv_safetensors *st,
                                            qkv_llm *m);
/* Reads config.json's text into cfg. */
QKV_API qkv_status qkv_llm_config_from_hf_json(const char *text, size_t len, qkv_llm_config *cfg);
/* Loads a GGUF file: general.architecture "llama" (the llama.* keys;
 * RoPE on adjacent pairs, as the converter permuted q and k) or "gemma3"
 * (gemma3.*; norms stored as 1 + w, the local base 10000, every 6th layer
 * global, as llama.cpp has them), the tensors by llama.cpp's names
 * (token_embd, blk.N.attn_q, ..., output, absent when tied). dequantize
 * 0: the weights stay in their stored types, read from the mapped file
 * (kept open by m); 1: every weight dequantized to FP32 (gguf-py's
 * values) and the file closed. */
QKV_API qkv_status qkv_llm_load_gguf(const char *path, int dequantize, qkv_llm *m);
/* The configuration alone from an opened file. */
QKV_API qkv_status qkv_llm_config_from_gguf(const qkv_gguf *g, qkv_llm_config *cfg);
QKV_API void qkv_llm_free(qkv_llm *m);

/* A KV cache for m: one sequence of max_len positions, n_head_kv heads of
 * head_dim per layer (qkv_kv_cache_init). */
QKV_API qkv_status qkv_llm_cache_init(qkv_kv_cache *kc, const qkv_llm *m, int64_t max_len);

/* The T tokens ids at positions [kc->len, kc->len + T) -> logits: (T,vocab)
 * floats when all_logits, else those of the last token only (vocab).
 * A prefill is one call with the prompt, a decoding step one call with
 * T = 1; the logits equal the full forward's. kc->len + T <= kc->max_len;
 * then kc->len += T. Scratch from c's arena (released before returning);
 * inference only (nothing is recorded). Ids outside [0,vocab) are
 * QKV_ERR_ARG naming the position. */
QKV_API qkv_status qkv_llm_forward(qkv_ctx *c, const qkv_llm *m, qkv_kv_cache *kc, const int64_t *ids,
                                   int64_t T, int all_logits, float *logits);

#ifdef __cplusplus
}
#endif
#endif
