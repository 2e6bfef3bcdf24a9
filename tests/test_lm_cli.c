/* test_lm_cli.c: `qkv train lm` and `qkv generate` end to end on a tiny
 * model trained for a few steps in a temporary folder: a run stopped
 * halfway and resumed ends bit for bit where the uninterrupted run ends;
 * the checkpoint rebuilds the model (generate) and exports to PyTorch with
 * the same logits (tools/lm_export.py); the loss curves and the attention
 * explorer are written; bad input (empty, invalid or unknown-character
 * prompts, prompts longer than the context, corrupt or wrong-kind
 * checkpoints, options --resume refuses) gets a clear message and the exit
 * status docs/cli.md gives, never a crash. The same round trip (train,
 * resume, generate, export) with rotary positions (--pos rotary). */
#define _XOPEN_SOURCE 700 /* mkdtemp, realpath */
#include <sys/stat.h>
#include "cli_shell.h"
#include "made_up_data.h"
#include "old_layout.h"

/* Whether buf (n bytes, NULs included) holds needle. */
static int holds(const char *buf, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; buf && i + k <= n; i++)
        if (!memcmp(buf + i, needle, k)) return 1;
    return 0;
}

#define TINY "--corpus corpus.txt --layers 2 --d-model 16 --heads 2 --context 16 --batch 4 --warmup 2 --dropout 0.1 " \
             "--eval-every 3 --eval-batches 2 --sample 0"

/* Training, resuming, the files a run writes. */
static void test_train(void)
{
    char *o, *e;
    int rc = qkv(&o, &e, "train lm " TINY " --steps 6 --out full --plots full/curves.svg");
    CHECK(rc == 0, "train lm: exit %d: %s", rc, e);
    CHECK(strstr(o, "tokens (chars tokenizer") && strstr(o, "parameters"), "train lm's header: %s", o);
    CHECK(strstr(e, "step 3: validation loss") && strstr(e, "step 6: validation loss") && strstr(e, "tokens/s"),
          "validation and progress lines: %s", e);
    CHECK(access(path_in("full/lm.ckpt"), R_OK) == 0 && access(path_in("full/curves.svg"), R_OK) == 0,
          "full/lm.ckpt or full/curves.svg missing");
    free(o), free(e);
    /* The same run in two pieces. */
    run_ok("train lm " TINY " --steps 6 --stop-at 3 --out parts");
    check_resumed("train lm --resume --out parts --sample 20", "resuming at step 3", "sample", "full/lm.ckpt", "parts/lm.ckpt");
    /* The same in the BF16 mode (--precision bf16): --resume takes the
     * precision from the checkpoint and still ends bit for bit where the
     * uninterrupted run ends, which differs from the FP32 run's end. */
    run_ok("train lm " TINY " --steps 6 --precision bf16 --out fullb");
    run_ok("train lm " TINY " --steps 6 --stop-at 3 --precision bf16 --out partsb");
    check_resumed("train lm --resume --out partsb", "resuming at step 3", NULL, "fullb/lm.ckpt", "partsb/lm.ckpt");
    size_t n1, n3;
    char *a = slurp(path_in("fullb/lm.ckpt"), &n3);
    CHECK(holds(a, n3, "\"lm.precision\":\"bf16\""), "the bf16 checkpoint does not name its precision");
    char *f = slurp(path_in("full/lm.ckpt"), &n1);
    CHECK(f && !holds(f, n1, "lm.precision"), "an FP32 checkpoint names a precision");
    free(a), free(f);
    /* What --resume and a new run refuse. */
    static const refusal bad[] = {
        {"--resume --out partsb --precision fp32", "--precision cannot be given", 2},
        {"--precision fp16", "--precision: 'fp16' is not one of fp32, bf16", 2},
        {"--resume --out parts --layers 3", "--layers cannot be given", 2},
        {"--resume --out parts --steps 6", "at step 6 already", 1},
        {TINY " --steps 6 --out full", "exists: continue it with --resume", 1},
        {"--corpus nothere.txt --out x", "cannot open nothere.txt", 1},
        {"--d-model 10 --heads 3", "not a multiple of --heads", 2},
    };
    check_refusals("train lm", bad, sizeof bad / sizeof *bad);
}

/* Generation and its bad input. */
static void test_generate(void)
{
    char *o, *e;
    int rc = qkv(&o, &e, "generate full/lm.ckpt --prompt 'and the lord' -n 30 --seed 3 --html page.html");
    CHECK(rc == 0 && !strncmp(o, "and the lord", 12) && strlen(o) > 12, "generate: exit %d: '%s' %s", rc, o, e);
    CHECK(strstr(e, "tokens/s") && strstr(e, "30 tokens in"), "generate's speed line: %s", e);
    size_t n;
    char *page = slurp(path_in("page.html"), &n);
    CHECK(n > 1000 && strstr(page, "<html") != NULL, "page.html: %zu bytes", n);
    free(page);
    char *o2, *e2;
    rc = qkv(&o2, &e2, "generate full --prompt 'and the lord' -n 30 --seed 3");
    CHECK(rc == 0 && !strcmp(o, o2), "the same seed from the run folder: '%s' vs '%s'", o, o2);
    free(o), free(e), free(o2), free(e2);
    rc = qkv(&o, &e, "generate full --prompt 'and the lord' -n 40 -t 0 -k 5 --top-p 0.9");
    CHECK(rc == 0 && strlen(o) > 40, "greedy: exit %d: %s", rc, e);
    free(o), free(e);
    /* 16-bit caches and bf16 weights (docs/bf16_decode.md), past the context (the window slides). */
    rc = qkv(&o, &e, "generate full --prompt 'and the lord' -n 40 -t 0 --cache bf16 --weights bf16");
    CHECK(rc == 0 && strlen(o) > 40 && strstr(e, "40 tokens in") && strstr(e, "bf16 cache, bf16 weights"),
          "--cache bf16 --weights bf16: exit %d: %s", rc, e);
    free(o), free(e);
    rc = qkv(&o, &e, "generate full --prompt 'and the lord' -n 10 --cache fp16 --weights fp32");
    CHECK(rc == 0 && strstr(e, "fp16 cache, fp32 weights"), "--cache fp16: exit %d: %s", rc, e);
    free(o), free(e);
    /* A prompt longer than the context (16): its last 16 tokens are kept. */
    rc = qkv(&o, &e, "generate full --prompt 'and the lord said unto him of the land' -n 5");
    CHECK(rc == 0 && strstr(e, "the prompt has 38 tokens, the model's context 16: the first 22 are dropped"),
          "a long prompt: exit %d: %s", rc, e);
    free(o), free(e);
    /* More new tokens than the context holds: the window slides. */
    rc = qkv(&o, &e, "generate full --prompt 'and' -n 50");
    CHECK(rc == 0 && strstr(e, "50 tokens in"), "50 tokens past a context of 16: exit %d: %s", rc, e);
    free(o), free(e);
    static const refusal bad[] = {
        {"full --prompt ''", "the prompt is empty", 2},
        {"full --prompt=", "the prompt is empty", 2},
        {"full", "--prompt TEXT is needed", 2},
        {"full --prompt a -t -1", "--temperature: '-1' is not a number", 2},
        {"full --prompt a --top-p 0", "--top-p: '0' is not a number", 2},
        {"full --prompt a --top-p nan", "--top-p: 'nan' is not a number in (0, 1]", 2},
        {"full --prompt a -t ' 1'", "--temperature: ' 1' is not a number in [0, 100]", 2},
        {"full --prompt a --cache bf8", "--cache bf8: expected fp32, fp16 or bf16", 2},
        {"full --prompt a --weights fp16", "--weights fp16: expected fp32 or bf16", 2},
        {"--prompt a", "expects 1 argument", 2},
        {"full --prompt \"$(printf 'a\\377b')\"", "not valid UTF-8 (byte 1)", 1},
        {"full --prompt \"$(printf 'ab\\303')\"", "not valid UTF-8 (byte 2)", 1},
        {"full --prompt 'the Lord'", "character 'L' (byte 4) is not in the model's vocabulary", 1},
        {"full --prompt 'earth\xc3\xa9'", "character '\xc3\xa9' (byte 5) is not in the model's vocabulary", 1},
        {"nothere.ckpt --prompt a", "nothere.ckpt", 1},
        {"corpus.txt --prompt a", "corpus.txt", 1},
        {"plain.ckpt --prompt a", "not of a language model (no lm.config)", 1},
        {"weights.safetensors --prompt a", "not a qkv checkpoint", 1},
        {"corrupt.ckpt --prompt a", "the file is corrupt", 1},
    };
    /* A checkpoint of something else, a plain state_dict, a corrupted copy. */
    qkv_params *p;
    qkv_tensor *w;
    CHECK_OK(qkv_params_new(&p));
    CHECK_OK(qkv_params_add(p, "", "w", 1, (int64_t[]){4}, &w));
    CHECK_OK(qkv_checkpoint_save(path_in("plain.ckpt"), p, NULL, NULL, NULL));
    CHECK_OK(qkv_params_save_safetensors(p, path_in("weights.safetensors"), NULL));
    qkv_params_free(p);
    char *ck = slurp(path_in("full/lm.ckpt"), &n);
    ck[n - 5] ^= 1; /* a parameter's byte */
    FILE *f = fopen(path_in("corrupt.ckpt"), "wb");
    if (f) fwrite(ck, 1, n, f), fclose(f);
    free(ck);
    check_refusals("generate -n 3", bad, sizeof bad / sizeof *bad);
}


/* The export: PyTorch's logits of the exported model equal qkv's, for the
 * run in folder run. */
static void test_export(const char *run)
{
    char ckpt[64];
    snprintf(ckpt, sizeof ckpt, "%s/lm.ckpt", run);
    qkv_params *p = NULL;
    qkv_lm m = {0};
    qkv_lm_opts lo;
    char *cfg = NULL;
    CHECK_OK(qkv_checkpoint_read_meta(path_in(ckpt), "lm.config", &cfg));
    qkv_status s = cfg ? qkv_lm_opts_parse(cfg, &lo) : QKV_ERR_FORMAT;
    free(cfg);
    qkv_rng r;
    qkv_rng_seed(&r, 9);
    if (!s) s = qkv_params_new(&p);
    if (!s) s = qkv_lm_init(&m, &lo, p, "", &r);
    if (!s) s = qkv_checkpoint_load(path_in(ckpt), p, NULL, NULL, NULL);
    CHECK(s == QKV_OK, "the checkpoint's model: %s", qkv_last_error());
    enum { N = 2, T = 16 };
    int64_t ids[N * T];
    for (int i = 0; i < N * T; i++) ids[i] = (i * 7 + 3) % lo.vocab_size;
    qkv_arena *a;
    qkv_ctx *c;
    CHECK_OK(qkv_arena_new(&a, 0));
    CHECK_OK(qkv_ctx_new(&c));
    qkv_tensor *tid, *fid, *logits = NULL;
    float fids[N * T]; /* the writer takes F32; lm_export.py reads them as int64 */
    for (int i = 0; i < N * T; i++) fids[i] = (float)ids[i];
    CHECK_OK(qkv_tensor_wrap_i64(a, ids, 2, (int64_t[]){N, T}, &tid));
    CHECK_OK(qkv_tensor_wrap(a, fids, 2, (int64_t[]){N, T}, &fid));
    const qkv_tensor *ts[1] = {fid};
    const char *names[1] = {"ids"};
    CHECK_OK(qkv_safetensors_save(path_in("ids.safetensors"), 1, names, ts, 0, NULL, NULL));
    if (!s) CHECK_OK(qkv_lm_forward(c, &m, tid, NULL, &logits));
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/lm_export.py %s --out %s --ids %s --logits %s > /dev/null",
             path_in(ckpt), path_in("model.pt"), path_in("ids.safetensors"), path_in("torch.safetensors"));
    int rc = system(cmd);
    CHECK(rc == 0, "tools/lm_export.py failed: %s", cmd);
    qkv_safetensors *st = NULL;
    if (rc == 0) CHECK_OK(qkv_safetensors_open(path_in("torch.safetensors"), &st));
    qkv_tensor *want = NULL;
    if (st) CHECK_OK(qkv_safetensors_load_tensor(st, "logits", a, &want));
    if (want && logits) {
        CHECK(qkv_tensor_numel(want) == qkv_tensor_numel(logits), "logits: %lld values from PyTorch, %lld from qkv",
              (long long)qkv_tensor_numel(want), (long long)qkv_tensor_numel(logits));
        double err = h_rel_err(logits->data, want->data, qkv_tensor_numel(want));
        CHECK(err <= 1e-5, "%s: exported model's logits: relative error %.3g", run, err);
        printf("exported to PyTorch (%s): logits relative error %.2g\n", run, err);
    }
    qkv_safetensors_close(st);
    qkv_ctx_free(c);
    qkv_arena_free(a);
    qkv_lm_free(&m);
    qkv_params_free(p);
}

/* --pos rotary: trained, resumed bit for bit, its checkpoint's config
 * (posenc=rotary, no position table) rebuilds it for qkv generate. */
static void test_rotary(void)
{
    char *o, *e;
    int rc;
    run_ok("train lm " TINY " --pos rotary --steps 4 --out rope");
    run_ok("train lm " TINY " --pos rotary --steps 4 --stop-at 2 --out rope2");
    check_resumed("train lm --resume --out rope2", "resuming at step 2", NULL, "rope/lm.ckpt", "rope2/lm.ckpt");
    char *cfg = NULL;
    CHECK_OK(qkv_checkpoint_read_meta(path_in("rope/lm.ckpt"), "lm.config", &cfg));
    CHECK(cfg && strstr(cfg, " posenc=rotary ") && strstr(cfg, " rotary_base=10000"), "lm.config: %s",
          cfg ? cfg : "");
    free(cfg);
    rc = qkv(&o, &e, "inspect rope/lm.ckpt");
    CHECK(rc == 0 && strstr(o, "tok_emb.weight") && !strstr(o, "pos_emb"), "inspect: no position table: %s %s",
          o, e);
    free(o), free(e);
    rc = qkv(&o, &e, "generate rope --prompt 'and the lord' -n 30 -t 0");
    CHECK(rc == 0 && !strncmp(o, "and the lord", 12) && strlen(o) > 12, "generate (rotary): exit %d: '%s' %s", rc,
          o, e);
    free(o), free(e);
    static const refusal bad[] = {
        {"--pos alibi", "--pos: 'alibi' is not one of learned, rotary", 2},
        {"--pos rotary --d-model 6 --heads 2", "--pos rotary needs an even head size", 2},
        {"--resume --out rope --pos learned", "--pos cannot be given", 2},
    };
    check_refusals("train lm", bad, sizeof bad / sizeof *bad);
}

/* A run of an older version (no kind, lm.train on one line, as those
 * versions wrote it) still resumes, to the uninterrupted run's checkpoint
 * bit for bit (the metadata then written in the run format). */
static void test_old_layout(void)
{
    run_ok("train lm " TINY " --steps 6 --stop-at 3 --out old");
    const char *keys[4] = {"lm.config", "lm.tokenizer", "lm.tokenizer_file", "lm.train"};
    char *vals[4];
    for (int i = 0; i < 4; i++) vals[i] = old_layout_meta(path_in("old/lm.ckpt"), keys[i]);
    old_layout_one_line(vals[3]);
    CHECK(!strchr(vals[3], '\n') && strstr(vals[3], "context=16 batch=4 "), "lm.train on one line: '%s'", vals[3]);
    old_layout_save(path_in("old/lm.ckpt"), path_in("old/lm.ckpt"), qkv_optim_adamw_opts_default(), keys, (const char **)vals,
                    4);
    for (int i = 0; i < 4; i++) free(vals[i]);
    char *kind = old_layout_meta(path_in("old/lm.ckpt"), "kind");
    CHECK(!kind[0], "the older layout's checkpoint has a kind: %s", kind);
    free(kind);
    check_resumed("train lm --resume --out old", "resuming at step 3", NULL, "full/lm.ckpt", "old/lm.ckpt");
}

int main(int argc, char **argv)
{
    if (cli_shell_setup(argv[0], "/tmp/qkv_lm_cli_XXXXXX")) return h_finish("test_lm_cli");
    write_corpus(path_in("corpus.txt"));
    test_train();
    test_old_layout();
    test_generate();
    test_export("full");
    test_rotary();
    test_export("rope");
    cli_shell_cleanup();
    return h_finish("test_lm_cli");
}
