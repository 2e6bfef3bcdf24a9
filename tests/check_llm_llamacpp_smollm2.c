/* check_llm_llamacpp_smollm2.c: qkv against llama.cpp on
 * data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf, its F32 copy and the Q4_1
 * file as shipped, 4 chunks of 512 KJV tokens and 10 greedy continuations
 * of 64 tokens (tests/llamacpp_check.h says what is measured and the
 * bounds). A hand-run check: the oracle takes minutes. */
#include "llamacpp_check.h"

int main(void)
{
    return llamacpp_check("data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2", 1, 4, 64);
}
