/* check_llm_llamacpp_smollm2.c: qkv's logits and greedy continuations on
 * data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf against llama.cpp's (tests/llamacpp_check.h says what is measured
 * and the bounds). */
#include "llamacpp_check.h"

int main(void)
{
    return llamacpp_check("data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2");
}
