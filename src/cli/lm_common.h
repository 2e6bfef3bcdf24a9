/* lm_common.h: what `qkv train lm` and `qkv generate` share (lm_common.c):
 * a language model checkpoint's metadata (the model's options and its
 * tokenizer), loading a model from a checkpoint, and streaming generation
 * through the KV cache. */
#ifndef QKV_CLI_LM_COMMON_H
#define QKV_CLI_LM_COMMON_H
#include <stdio.h>
#include "cli/cli.h"

/* The checkpoint file inside a run's folder (--out DIR). */
#define LM_CKPT_NAME "lm.ckpt"

/* A model with its parameters and tokenizer. */
typedef struct {
    qkv_lm_opts o;
    qkv_params *p;
    qkv_lm m;
    qkv_tokenizer *tok;
    char *tok_spec; /* "bytes", "chars", "bpe" or "gpt2:DIR": metadata lm.tokenizer */
    char *tok_text; /* chars, bpe: the tokenizer file's text (lm.tokenizer_file) */
} lm_model;

/* The model (options, tokenizer, parameters) of the checkpoint at path,
 * checked (format, checksum, the options in range, the tokenizer's vocabulary
 * the model's). On failure m is freed and qkv_last_error() says why. */
qkv_status lm_model_load(lm_model *m, const char *path);
/* A fresh model: parameters initialised from rng; takes tok (and the spec
 * and file text, malloc'd) over. */
qkv_status lm_model_init(lm_model *m, const qkv_lm_opts *o, qkv_tokenizer *tok, char *tok_spec,
                         char *tok_text, qkv_rng *rng);
void lm_model_free(lm_model *m);

/* Sampling options of a generation; temperature 0 is greedy (argmax).
 * cache: the KV cache's precision (0, FP32, by default); bf16_weights: 1
 * runs the cached steps on bf16 copies of the weights
 * (docs/bf16_decode.md). */
typedef struct {
    int64_t max_new_tokens;
    float temperature, top_p;
    int64_t top_k;
    uint64_t seed;
    qkv_kv_dtype cache;
    int bf16_weights;
} lm_sample_opts;

/* Generates after prompt ids[0, n) (1 <= n <= the model's max_len) up to
 * o->max_new_tokens tokens, writing each token's text to out as it is made
 * (flushed), and appending the ids to *all (malloc'd, prompt first; *n_all
 * its length). When the cache is full the window slides: the cache
 * restarts from the last half of the context. *seconds gets the time spent
 * generating (the prompt's forward excluded). */
qkv_status lm_generate_stream(lm_model *m, const int64_t *ids, int64_t n, const lm_sample_opts *o,
                              FILE *out, int64_t **all, int64_t *n_all, double *seconds);

#endif
