/* test_llm.c: the Llama and Gemma 3 models (qkv/llm.h) against
 * tools/llm_ref.py, a PyTorch reference of both written from
 * transformers' modeling code: seven small random configurations (GQA
 * 2:1, 3:1, 4:1 and none, tied and untied, BF16 weights, Gemma's pattern
 * with windows smaller than T, softcapping, T up to 150: several of the
 * fused kernels' tiles) saved as HF folders; logits of a prefill, of
 * step-by-step decoding, of a prefill then steps, of uneven pieces, and
 * under the reference switch, each within 1e-4 relative. Also F.rms_norm and
 * nn.RMSNorm (values, gradients, gradcheck), sdpa with enable_gqa
 * (values and gradients), and the loader's errors. */
#define _POSIX_C_SOURCE 200809L
#include <float.h>
#include "gradcheck.h"
#include "oracle.h"

#define TOL 1e-4

static double worst_logits;

/* Runs ids through m in pieces of the given sizes (sum T), every logit
 * row kept, and compares with want (T,V). */
static void run_pieces(qkv_ctx *c, const qkv_llm *m, const qkv_tensor *ids, qkv_tensor *want,
                       const int64_t *piece, int np, const char *what, const char *name)
{
    int64_t T = ids->shape[0], V = m->cfg.vocab;
    float *got = calloc((size_t)(T * V), sizeof(float));
    qkv_kv_cache kc;
    CHECK_OK(qkv_llm_cache_init(&kc, m, T + 3));
    int64_t t = 0;
    for (int i = 0; i < np && t < T; i++) {
        int64_t n = piece[i] < T - t ? piece[i] : T - t;
        CHECK_OK(qkv_llm_forward(c, m, &kc, ids->idx + t, n, 1, got + t * V));
        t += n;
        if (i == np - 1) i--; /* the last size repeats */
    }
    CHECK(kc.len == T, "%s %s: cache len %lld after %lld tokens", name, what, (long long)kc.len, (long long)T);
    char lbl[96];
    snprintf(lbl, sizeof lbl, "%s logits", what);
    h_compare(name, lbl, got, want, TOL, &worst_logits);
    /* the last-token-only form of one more call equals the last row */
    qkv_kv_cache_truncate(&kc, T - 1);
    float *last = calloc((size_t)V, sizeof(float));
    CHECK_OK(qkv_llm_forward(c, m, &kc, ids->idx + T - 1, 1, 0, last));
    CHECK(h_rel_err(last, want->data + (T - 1) * V, V) <= TOL, "%s %s: last-only logits differ", name, what);
    free(last);
    qkv_kv_cache_free(&kc);
    free(got);
}

static void model_case(const char *dir, int n)
{
    char path[700], name[32];
    snprintf(name, sizeof name, "case_%d", n);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    qkv_llm m;
    qkv_status s = qkv_llm_load_hf(path, &m);
    CHECK(s == QKV_OK, "%s: load: %s", name, qkv_last_error());
    if (s != QKV_OK) return;
    snprintf(path, sizeof path, "%s/%s/ref.safetensors", dir, name);
    qkv_safetensors *st;
    CHECK_OK(qkv_safetensors_open(path, &st));
    qkv_arena *a;
    qkv_ctx *c;
    CHECK_OK(qkv_arena_new(&a, 1 << 20));
    CHECK_OK(qkv_ctx_new(&c));
    qkv_ctx_set_grad(c, 0);
    qkv_tensor *ids = h_load(st, a, "ids", 0), *want = h_load(st, a, "logits", 0);
    CHECK(ids && want && want->shape[1] == m.cfg.vocab, "%s: reference tensors", name);
    if (ids && want) {
        run_pieces(c, &m, ids, want, (int64_t[]){1 << 20}, 1, "prefill", name);
        run_pieces(c, &m, ids, want, (int64_t[]){1}, 1, "decode", name);
        run_pieces(c, &m, ids, want, (int64_t[]){5, 1}, 2, "prefill 5 + decode", name);
        run_pieces(c, &m, ids, want, (int64_t[]){3, 7, 2, 70}, 4, "pieces 3,7,2,70..", name);
        qkv_set_reference(1); /* sdpa's reference kernel on every call, T = 1 too */
        run_pieces(c, &m, ids, want, (int64_t[]){6, 1}, 2, "reference", name);
        qkv_set_reference(0);
    }
    /* bad input: an id out of range, a cache too short */
    qkv_kv_cache kc;
    CHECK_OK(qkv_llm_cache_init(&kc, &m, 2));
    float *lg = calloc((size_t)(3 * m.cfg.vocab), sizeof(float));
    int64_t bad[3] = {0, m.cfg.vocab, 1};
    CHECK_ERR(qkv_llm_forward(c, &m, &kc, bad, 2, 1, lg), QKV_ERR_ARG, "position 1");
    CHECK_ERR(qkv_llm_forward(c, &m, &kc, bad, 3, 1, lg), QKV_ERR_SHAPE, "exceed");
    CHECK(kc.len == 0, "%s: a failed call left the cache at %lld", name, (long long)kc.len);
    free(lg);
    qkv_kv_cache_free(&kc);
    qkv_ctx_free(c);
    qkv_arena_free(a);
    qkv_safetensors_close(st);
    qkv_llm_free(&m);
}

/* ---- RMSNorm ---------------------------------------------------------------- */

static qkv_tensor *gc_x, *gc_w;
static qkv_status rms_fwd(qkv_ctx *c, void *user, qkv_tensor **out)
{
    return qkv_rms_norm(c, gc_x, user ? gc_w : NULL, 1e-5f, out);
}

static void rmsnorm_tests(const char *dir)
{
    char path[700];
    snprintf(path, sizeof path, "%s/rmsnorm.safetensors", dir);
    qkv_safetensors *st;
    CHECK_OK(qkv_safetensors_open(path, &st));
    qkv_arena *a;
    qkv_ctx *c;
    CHECK_OK(qkv_arena_new(&a, 1 << 20));
    CHECK_OK(qkv_ctx_new(&c));
    qkv_tensor *x = h_load(st, a, "x", 1), *w = h_load(st, a, "weight", 1), *g = h_load(st, a, "g", 0);
    double worst = 0;
    qkv_tensor *y;
    CHECK_OK(qkv_rms_norm(c, x, w, (float)h_meta_float(st, "eps"), &y));
    if (y) {
        h_compare("rmsnorm", "y", y->data, h_load(st, a, "y", 0), 1e-6, &worst);
        CHECK_OK(qkv_backward(c, y, g->data));
        h_compare("rmsnorm", "dx", x->grad, h_load(st, a, "dx", 0), 1e-5, &worst);
        h_compare("rmsnorm", "dw", w->grad, h_load(st, a, "dw", 0), 1e-5, &worst);
    }
    /* nn.RMSNorm(24) with PyTorch's defaults: eps None, weight ones */
    qkv_params *p;
    CHECK_OK(qkv_params_new(&p));
    qkv_nn_rmsnorm mod;
    CHECK_OK(qkv_nn_rmsnorm_init(&mod, 24, NAN, 1, p, "norm"));
    qkv_ctx_reset(c);
    qkv_tensor *y2;
    CHECK_OK(qkv_module_forward(c, &mod.base, x, &y2));
    if (y2) h_compare("rmsnorm", "nn.RMSNorm default", y2->data, h_load(st, a, "y_default", 0), 1e-6, &worst);
    CHECK(!strcmp(mod.base.type, "RMSNorm"), "module type %s", mod.base.type);
    CHECK_ERR(qkv_rms_norm(c, x, g, 1e-5f, &y2), QKV_ERR_SHAPE, "weight");
    CHECK_ERR(qkv_rms_norm(c, x, w, -1.0f, &y2), QKV_ERR_ARG, "eps");
    CHECK_ERR(qkv_nn_rmsnorm_init(&mod, 0, 1e-5f, 1, p, "n2"), QKV_ERR_ARG, "normalized_shape");
    printf("rmsnorm: worst relative error %.3g (y, dx, dw against F.rms_norm's formula)\n", worst);
    /* finite differences */
    qkv_rng rng;
    qkv_rng_seed(&rng, 3);
    gc_x = h_input(a, &rng, 2, (int64_t[]){4, 7}, 1.0f);
    gc_w = h_input(a, &rng, 1, (int64_t[]){7}, 1.0f);
    qkv_tensor *in[2] = {gc_x, gc_w};
    double e1 = h_gradcheck(rms_fwd, (void *)1, in, 2, 1e-2f, 1e-2);
    double e2 = h_gradcheck(rms_fwd, NULL, in, 1, 1e-2f, 1e-2);
    CHECK(e1 < 5e-3 && e2 < 5e-3, "rms_norm gradcheck %.3g, %.3g (no weight)", e1, e2);
    printf("rmsnorm gradcheck: worst %.3g with weight, %.3g without\n", e1, e2);
    qkv_params_free(p);
    qkv_ctx_free(c);
    qkv_arena_free(a);
    qkv_safetensors_close(st);
}

/* ---- sdpa with enable_gqa ------------------------------------------------ */

static void gqa_tests(const char *dir)
{
    char path[700];
    snprintf(path, sizeof path, "%s/gqa.safetensors", dir);
    qkv_safetensors *st;
    CHECK_OK(qkv_safetensors_open(path, &st));
    qkv_arena *a;
    qkv_ctx *c;
    CHECK_OK(qkv_arena_new(&a, 1 << 20));
    CHECK_OK(qkv_ctx_new(&c));
    double worst = 0;
    const char *names[2] = {"a", "b"};
    for (int ref = 0; ref < 2; ref++)
        for (int i = 0; i < 2; i++) {
            qkv_set_reference(ref);
            qkv_ctx_reset(c);
            char k[32];
#define LD(t, grad) (snprintf(k, sizeof k, "%s." t, names[i]), h_load(st, a, k, grad))
            qkv_tensor *q = LD("q", 1), *kk = LD("k", 1), *v = LD("v", 1), *g = LD("g", 0);
            qkv_sdpa_opts o = qkv_sdpa_opts_default();
            o.enable_gqa = 1;
            if (i == 1) o.causal = QKV_CAUSAL_TOP_LEFT;
            qkv_tensor *out;
            CHECK_OK(qkv_sdpa(c, q, kk, v, &o, &out, NULL));
            if (!out) continue;
            h_compare("gqa", "out", out->data, LD("out", 0), 1e-5, &worst);
            CHECK_OK(qkv_backward(c, out, g->data));
            h_compare("gqa", "dq", q->grad, LD("dq", 0), 1e-5, &worst);
            h_compare("gqa", "dk", kk->grad, LD("dk", 0), 1e-5, &worst);
            h_compare("gqa", "dv", v->grad, LD("dv", 0), 1e-5, &worst);
            /* without the tape: the kernels read the grouped heads in place */
            qkv_ctx_set_grad(c, 0);
            qkv_tensor *w = NULL;
            o.need_weights = 1;
            CHECK_OK(qkv_sdpa(c, q, kk, v, &o, &out, &w));
            if (out) h_compare("gqa", "out without grad", out->data, LD("out", 0), 1e-5, &worst);
            CHECK(w && w->shape[1] == q->shape[1], "gqa weights (N,H,L,S)");
            qkv_ctx_set_grad(c, 1);
            o.need_weights = 0;
            o.enable_gqa = 0;
            CHECK_ERR(qkv_sdpa(c, q, kk, v, &o, &out, NULL), QKV_ERR_SHAPE, "head");
#undef LD
        }
    qkv_set_reference(0);
    /* heads that do not divide */
    qkv_tensor *q, *k;
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 4, (int64_t[]){1, 5, 3, 4}, &q));
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 4, (int64_t[]){1, 2, 3, 4}, &k));
    qkv_sdpa_opts o = qkv_sdpa_opts_default();
    o.enable_gqa = 1;
    qkv_tensor *out;
    CHECK_ERR(qkv_sdpa(c, q, k, k, &o, &out, NULL), QKV_ERR_SHAPE, "enable_gqa");
    printf("gqa sdpa: worst relative error %.3g (out, dq, dk, dv; fast and reference kernels)\n", worst);
    qkv_ctx_free(c);
    qkv_arena_free(a);
    qkv_safetensors_close(st);
}

/* ---- the loader's errors ---------------------------------------------------- */

static void config_errors(void)
{
    qkv_llm_config g;
    const char *bad_arch = "{\"architectures\":[\"MistralForCausalLM\"],\"hidden_size\":8}";
    CHECK_ERR(qkv_llm_config_from_hf_json(bad_arch, strlen(bad_arch), &g), QKV_ERR_FORMAT, "MistralForCausalLM");
    const char *no_size = "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":8}";
    CHECK_ERR(qkv_llm_config_from_hf_json(no_size, strlen(no_size), &g), QKV_ERR_FORMAT, "num_hidden_layers");
    const char *gqa = "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":8,\"num_hidden_layers\":1,"
                      "\"num_attention_heads\":4,\"num_key_value_heads\":3,\"intermediate_size\":8,\"vocab_size\":5}";
    CHECK_ERR(qkv_llm_config_from_hf_json(gqa, strlen(gqa), &g), QKV_ERR_ARG, "multiple of n_head_kv");
    const char *scal = "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":8,\"num_hidden_layers\":1,"
                       "\"num_attention_heads\":4,\"intermediate_size\":8,\"vocab_size\":5,"
                       "\"rope_scaling\":{\"rope_type\":\"llama3\"}}";
    CHECK_ERR(qkv_llm_config_from_hf_json(scal, strlen(scal), &g), QKV_ERR_FORMAT, "rope_scaling");
    qkv_llm m;
    CHECK_ERR(qkv_llm_load_hf("/nonexistent/dir", &m), QKV_ERR_IO, "config.json");
}

/* A model folder whose safetensors lacks a tensor. */
static void missing_tensor(const char *dir)
{
    char src[700];
    snprintf(src, sizeof src, "%s/case_0/config.json", dir);
    FILE *f = fopen(src, "rb");
    char text[4096];
    size_t n = f ? fread(text, 1, sizeof text, f) : 0;
    if (f) fclose(f);
    qkv_llm_config cfg;
    CHECK_OK(qkv_llm_config_from_hf_json(text, n, &cfg));
    snprintf(src, sizeof src, "%s/rmsnorm.safetensors", dir); /* a file without the model's names */
    qkv_safetensors *st;
    CHECK_OK(qkv_safetensors_open(src, &st));
    qkv_llm m;
    CHECK_ERR(qkv_llm_from_safetensors(&cfg, st, &m), QKV_ERR_FORMAT, "model.embed_tokens.weight is missing");
    qkv_safetensors_close(st);
}

int main(void)
{
    char dir[] = "/tmp/qkv_llm_XXXXXX";
    if (!h_oracle_run("llm_ref.py", dir, NULL)) return h_finish("test_llm");
    for (int i = 0; i < 7; i++) model_case(dir, i);
    printf("llm: 7 models x 5 schedules, worst logits relative error %.3g (tolerance %.0e)\n", worst_logits, TOL);
    rmsnorm_tests(dir);
    gqa_tests(dir);
    config_errors();
    missing_tensor(dir);
    h_tmpdir_remove(dir);
    return h_finish("test_llm");
}
