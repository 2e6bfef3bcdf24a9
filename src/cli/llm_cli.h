/* llm_cli.h: what `qkv run`, `qkv chat` and `qkv perplexity` share
 * (llm_cli.c): a GGUF model opened with its tokenizer, the sampler
 * (temperature, top-k, top-p, min-p, repetition penalty, seed) and the
 * streaming generation loop over the model's KV cache. */
#ifndef QKV_CLI_LLM_CLI_H
#define QKV_CLI_LLM_CLI_H
#include <stdio.h>
#include "cli/cli.h"

/* The chat's model when `qkv chat` is given none. */
#define LLM_CLI_DEFAULT_MODEL "data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

/* A GGUF model, its tokenizer and its chat template (NULL if the file has
 * none; a copy). */
typedef struct {
    qkv_llm m;
    qkv_tokenizer *tok;
    char *tmpl;
    int64_t vocab;
    void **bufs; /* requantized weights (llm_cli_open_weights) */
    int64_t nbuf;
} llm_cli_model;

/* Opens path (a message on stderr naming cmd and what failed: a missing
 * file, not a GGUF file, an unsupported architecture ...; returns 1). */
int llm_cli_open(const char *cmd, const char *path, llm_cli_model *lm);
void llm_cli_close(llm_cli_model *lm);
/* The same with the weights as stored (LLM_CLI_STORED), dequantized to FP32
 * (LLM_CLI_F32, gguf-py's values), or dequantized and requantized by qkv
 * (qkv_quantize, llama.cpp's reference quantizer) to a qkv_qtype such as
 * QKV_Q_Q8_0 or QKV_Q_Q4_1: the layers' seven matrices and the output
 * projection; the embedding lookup and the norms stay FP32. */
enum { LLM_CLI_STORED = -1, LLM_CLI_F32 = -2 };
int llm_cli_open_weights(const char *cmd, const char *path, int weights, llm_cli_model *lm);

/* Sampling: temperature 0 is greedy (argmax, the lowest id on ties).
 * Before the draw, as llama.cpp's default sampler chain: the repetition
 * penalty (each id among the last repeat_last_n generated or prompt ids:
 * a positive logit divided by repeat_penalty, a negative one multiplied),
 * then top-k, top-p and min-p (keep the ids whose probability is at least
 * min_p times the largest), then the temperature. */
typedef struct {
    int64_t max_new_tokens, top_k, repeat_last_n, threads, ctx_size;
    float temperature, top_p, min_p, repeat_penalty;
    uint64_t seed;
} llm_cli_sampling;

/* The options every generating command takes (their getopt rows and
 * the usage lines are in llm_cli.c): fills s from the current option of a
 * when its val is one of them; returns 1 if it was, 0 if not. */
int llm_cli_sampling_option(qkv_cli_args *a, int c, llm_cli_sampling *s);
extern const struct option llm_cli_sampling_options[];
#define LLM_CLI_SAMPLING_USAGE                                                                   \
    "  -n, --max-new-tokens N    tokens to generate at most (default 256); the end of\n"     \
    "                            generation token (EOS, <|im_end|>, ...) stops earlier\n"    \
    "  -t, --temperature T       0 for greedy (argmax), else sampling (default 0.8)\n"        \
    "  -k, --top-k K             sample among the K most likely tokens (default 40; 0: all)\n" \
    "      --top-p P             ... the fewest whose probability reaches P (default 0.95)\n" \
    "      --min-p P             ... those at least P times the likeliest (default 0.05)\n"   \
    "      --repeat-penalty R    logits of the last --repeat-last-n tokens divided by R\n"    \
    "                            (multiplied when negative; default 1.1; 1: off)\n"           \
    "      --repeat-last-n N     tokens the penalty looks back at (default 64)\n"             \
    "  -s, --seed S              the sampling's seed (default 1)\n"                          \
    "  -c, --ctx-size N          the context (KV cache) in tokens (default 2048)\n"           \
    "  -j, --threads N           OpenMP threads (default: OMP_NUM_THREADS or all cores)\n"
/* Default sampling options. */
llm_cli_sampling llm_cli_sampling_default(void);

/* A generation in progress: the cache, the sequence so far (the cached
 * ids, then the one not yet fed), the last logits. */
typedef struct {
    const llm_cli_model *lm;
    llm_cli_sampling s;
    qkv_ctx *c;
    qkv_kv_cache kc;
    int64_t *seq, n, cap;
    float *logits, *work;
    qkv_rng rng;
} llm_cli_gen;

qkv_status llm_cli_gen_init(llm_cli_gen *g, const llm_cli_model *lm, const llm_cli_sampling *s);
void llm_cli_gen_free(llm_cli_gen *g);
/* Makes ids[0, n) the sequence: keeps the cached prefix they share with
 * it, feeds the rest (a prefill). n must fit the context. */
qkv_status llm_cli_gen_set(llm_cli_gen *g, const int64_t *ids, int64_t n);
/* Generates up to s.max_new_tokens tokens after the sequence, each
 * written to out as made (flushed), stopping at an end-of-generation
 * token (not written, not kept) or when the context is full (*full = 1).
 * *made gets the count, *seconds the time taken. */
qkv_status llm_cli_gen_run(llm_cli_gen *g, FILE *out, int64_t *made, int *full, double *seconds);
#endif
