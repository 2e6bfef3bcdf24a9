/* oracle.h: reading the files that the PyTorch oracles in tools/ write. */
#ifndef QKV_TEST_ORACLE_H
#define QKV_TEST_ORACLE_H
#include <unistd.h> /* the including test defines _POSIX_C_SOURCE first */
#include "harness.h"

/* A tensor of the file as a new tensor in a: BOOL as stored, integers as
 * I64, floating-point dtypes as F32 (with a gradient buffer and
 * requires_grad when grad). NULL when absent. */
static inline qkv_tensor *h_load(qkv_safetensors *st, qkv_arena *a, const char *name, int grad)
{
    qkv_tensor *t = NULL;
    if (qkv_safetensors_load_tensor(st, name, a, &t) != QKV_OK) return NULL;
    if (grad && t->dtype == QKV_F32) {
        qkv_tensor_grad(a, t);
        t->requires_grad = 1;
    }
    return t;
}

/* A __metadata__ value as a number (0 when absent). */
/* Checks got against the oracle's tensor want (norm-wise relative error
 * <= tol) and keeps the worst error seen in *worst (inf for NaN). */
static inline void h_compare(const char *file, const char *what, const float *got,
                             qkv_tensor *want, double tol, double *worst)
{
    if (!want) {
        CHECK(0, "%s: reference tensor %s missing", file, what);
        return;
    }
    double e = h_rel_err(got, want->data, qkv_tensor_numel(want));
    CHECK(e <= tol, "%s: %s relative error %.3g > %.0e", file, what, e, tol);
    if (isnan(e) || e > *worst) *worst = isnan(e) ? INFINITY : e;
}

static inline int64_t h_meta_int(qkv_safetensors *st, const char *key)
{
    const char *v = qkv_safetensors_meta(st, key);
    return v ? atoll(v) : 0;
}

static inline double h_meta_float(qkv_safetensors *st, const char *key)
{
    const char *v = qkv_safetensors_meta(st, key);
    return v ? atof(v) : 0.0;
}
/* Runs `/usr/bin/python3 tools/SCRIPT --out DIR --seed 1 EXTRA` into dir, a
 * fresh temporary folder made from dir's XXXXXX template. A failing oracle
 * is a failed check, never a skip. Returns 1 when the oracle ran. */
static inline int h_oracle_run(const char *script, char *dir, const char *extra)
{
    char cmd[512];
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp failed");
        return 0;
    }
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/%s --out %s --seed 1%s%s", script, dir,
             extra ? " " : "", extra ? extra : "");
    int rc = system(cmd);
    CHECK(rc == 0, "the PyTorch oracle failed (exit %d): %s (run the test from the repo root)", rc,
          cmd);
    return rc == 0;
}

/* Runs `/usr/bin/python3 tools/SCRIPT --out DIR --cases N --seed 1` into a
 * fresh temporary DIR, then fn(path, "case_NNNN") on each file it wrote,
 * deleting them after. A failing oracle is a failed check, never a skip.
 * Returns the number of cases handed to fn. */
typedef void (*h_case_fn)(const char *path, const char *name);

static inline int h_oracle_cases(const char *script, int cases, h_case_fn fn)
{
    char dir[] = "/tmp/qkv_oracle_XXXXXX", extra[32];
    snprintf(extra, sizeof extra, "--cases %d", cases);
    int ok = h_oracle_run(script, dir, extra), n = 0;
    for (int i = 0; ok && i < cases; i++, n++) {
        char path[600], name[32];
        snprintf(name, sizeof name, "case_%04d", i);
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
        fn(path, name);
        unlink(path);
    }
    rmdir(dir);
    return n;
}
#endif
