/* test_llm_llamacpp.c: qkv's Llama forward against llama.cpp itself, where
 * both compute the same thing: SmolLM2-135M-Instruct with every tensor
 * dequantized to F32 (no 8-bit activations on either side), one chunk of
 * 512 KJV tokens (argmax >= 99.9%, mean KL <= 1e-4 nats) and 10 greedy
 * continuations of 16 tokens (equal, or a near tie). The quantized file as
 * shipped is compared by the hand-run tests/check_llm_llamacpp_*.c
 * (tests/llamacpp_check.h says why the two differ). */
#include "llamacpp_check.h"

int main(void)
{
    return llamacpp_check("data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2", 0, 1, 16);
}
