/* old_layout.h: a run's checkpoint rewritten with the metadata of an older
 * version, for the tests that older runs still open (test_vision_cli,
 * test_lm_cli). The whole state (parameters, the optimizer's moments, the
 * step, the generator) is read from src through the library (the
 * optimizer of options oo: AdamW or Adam, as the run's) and saved again
 * into dst with the n metadata pairs keys/vals instead of src's. */
#ifndef QKV_TESTS_OLD_LAYOUT_H
#define QKV_TESTS_OLD_LAYOUT_H
#include <stdlib.h>
#include <string.h>
#include "harness.h"

static inline void old_layout_save(const char *src, const char *dst, qkv_optim_opts oo, const char **keys, const char **vals,
                            int n)
{
    qkv_safetensors *st;
    qkv_params *p;
    CHECK_OK(qkv_safetensors_open(src, &st));
    CHECK_OK(qkv_params_new(&p));
    for (int i = 0; i < qkv_safetensors_count(st); i++) {
        const char *name = qkv_safetensors_name(st, i);
        int ndim;
        int64_t shape[8];
        qkv_tensor *t;
        if (strncmp(name, "param/", 6)) continue; /* the optimizer's state comes with the load */
        CHECK_OK(qkv_safetensors_info(st, name, NULL, &ndim, shape, NULL, NULL));
        CHECK_OK(qkv_params_add(p, "", name + 6, ndim, shape, &t));
    }
    int has_rng = qkv_safetensors_meta(st, "rng.s0") != NULL; /* translation keeps none */
    qkv_safetensors_close(st);
    qkv_optim *opt;
    qkv_train_pos pos;
    qkv_rng rng;
    CHECK_OK(qkv_optim_new(&opt, p, &oo));
    CHECK_OK(qkv_checkpoint_load(src, p, opt, &pos, has_rng ? &rng : NULL));
    qkv_checkpoint_meta meta = {n, keys, vals};
    CHECK_OK(qkv_checkpoint_save_meta(dst, p, opt, &pos, has_rng ? &rng : NULL, &meta));
    qkv_optim_free(opt);
    qkv_params_free(p);
}

/* Metadata key of the checkpoint at path, malloc'd ("" when missing). */
static inline char *old_layout_meta(const char *path, const char *key)
{
    char *v = NULL;
    if (qkv_checkpoint_read_meta(path, key, &v) != QKV_OK) v = strdup("");
    return v;
}

/* The run format's lines ("a=1\nb=2\n") as one line of words ("a=1 b=2"),
 * as older versions wrote lm.train and vision.train; in place. */
static inline char *old_layout_one_line(char *lines)
{
    size_t n = strlen(lines);
    if (n && lines[n - 1] == '\n') lines[--n] = 0;
    for (size_t i = 0; i < n; i++)
        if (lines[i] == '\n') lines[i] = ' ';
    return lines;
}
#endif
