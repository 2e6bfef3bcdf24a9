/* check_llm_llamacpp_gemma3.c: qkv's logits and greedy continuations on
 * data/gemma3/gemma-3-270m-q4_k_m.gguf against llama.cpp's (tests/llamacpp_check.h says what is measured
 * and the bounds). */
#include "llamacpp_check.h"

int main(void)
{
    return llamacpp_check("data/gemma3/gemma-3-270m-q4_k_m.gguf", "gemma3", 1, 4, 64);
}
