/* llm_internal.h: what the Llama/Gemma 3 files share (llm.c, llm_load.c,
 * llm_forward.c). Internal. */
#ifndef QKV_LLM_INTERNAL_H
#define QKV_LLM_INTERNAL_H
#include "core/internal.h"

/* What a qkv_llm owns: malloc'd buffers (weights converted to FP32, the
 * layer array) and an opened safetensors file, freed by qkv_llm_free. */
typedef struct {
    void **bufs;
    int nbuf, cap;
    qkv_gguf *gguf;      /* opened by qkv_llm_load_gguf (weights mapped from it), or NULL */
} llm_owned;

/* A zeroed buffer of n bytes that m owns (freed with it); NULL with the
 * error set when out of memory. */
void *llm_alloc(qkv_llm *m, size_t n);
#endif
