/* llm_gguf_ref.h: running tools/llm_ref.py --gguf for the GGUF model
 * tests (test_llm_gguf.c, test_llm_gguf_window.c). The including test
 * defines _POSIX_C_SOURCE first. */
#ifndef QKV_TEST_LLM_GGUF_REF_H
#define QKV_TEST_LLM_GGUF_REF_H
#include <unistd.h>
#include "oracle.h"

static const char *LLM_PY = "data/venv/bin/python";

/* One reference run: its folder, its output file, the file opened, and
 * its ids and logits loaded into a (NULL where something failed). */
typedef struct {
    char dir[32], out[96];
    qkv_safetensors *st;
    qkv_arena *a;
    qkv_tensor *ids, *logits;
} llm_ref_run;

/* Runs `llm_ref.py --gguf path ARGS --out DIR/ref.safetensors` with gguf-py's
 * interpreter; a missing model file (tools/get_data.sh tag) or a failing
 * reference is a failed check. Returns 1 when ids and logits were read. */
static inline int llm_ref_start(llm_ref_run *r, const char *path, const char *tag, const char *args)
{
    memset(r, 0, sizeof *r);
    if (access(path, R_OK) != 0) {
        CHECK(0, "%s is missing: run tools/get_data.sh %s", path, tag);
        return 0;
    }
    snprintf(r->dir, sizeof r->dir, "/tmp/qkv_llm_gguf_XXXXXX");
    if (!mkdtemp(r->dir)) return 0;
    snprintf(r->out, sizeof r->out, "%s/ref.safetensors", r->dir);
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "%s tools/llm_ref.py --gguf %s %s --out %s 2>/dev/null", LLM_PY, path, args, r->out);
    int rc = system(cmd);
    CHECK(rc == 0, "%s: the reference failed (exit %d): %s (gguf-py: tools/get_data.sh oracle)", tag, rc, cmd);
    CHECK_OK(qkv_arena_new(&r->a, 1 << 20));
    if (rc == 0) CHECK_OK(qkv_safetensors_open(r->out, &r->st));
    if (r->st && r->a) {
        r->ids = h_load(r->st, r->a, "ids", 0);
        r->logits = h_load(r->st, r->a, "logits", 0);
    }
    return r->ids && r->logits;
}

static inline void llm_ref_end(llm_ref_run *r)
{
    if (r->st) qkv_safetensors_close(r->st);
    if (r->a) qkv_arena_free(r->a);
    if (r->out[0]) unlink(r->out);
    if (r->dir[0]) rmdir(r->dir);
}
#endif
