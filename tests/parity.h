/* parity.h: what the parity tests share: a whole file read back, an oracle
 * case file opened with its arena, parameters and generator, a tensor's
 * gradient checked against the oracle's, and the forward and backward of
 * sum(R * y) collected into one buffer to compare two code paths. */
#ifndef QKV_TEST_PARITY_H
#define QKV_TEST_PARITY_H
#include "oracle.h"

/* The whole of path, NUL-terminated (NULL when it cannot be read); its
 * size in *n (n may be NULL; 0 when unread). */
static inline char *h_slurp(const char *path, size_t *n)
{
    if (n) *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, k = 0;
    char *b = malloc(cap);
    while (b && (k += fread(b + k, 1, cap - k - 1, f)) == cap - 1) {
        char *b2 = realloc(b, cap * 2);
        if (!b2) free(b);
        b = b2, cap *= 2;
    }
    fclose(f);
    if (b) b[k] = 0;
    if (n) *n = k;
    return b;
}

/* Checks t's gradient against the oracle's tensor "<prefix><name>"
 * (norm-wise relative error <= 1e-4), keeping the worst error in *worst. */
static inline void h_compare_grad(qkv_safetensors *st, qkv_arena *a, const char *file, const char *prefix,
                                  const char *name, const qkv_tensor *t, double *worst)
{
    char g[128];
    snprintf(g, sizeof g, "%s%s", prefix, name);
    float *got = malloc((size_t)qkv_tensor_numel(t) * sizeof *got);
    CHECK_OK(qkv_tensor_read_grad(t, got, qkv_tensor_numel(t)));
    h_compare(file, g, got, h_load(st, a, g, 0), 1e-4, worst);
    free(got);
}

#endif
