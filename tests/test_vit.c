/* test_vit.c: the patch embedding (src/nn/patch_embed.c) and the vision
 * transformer (src/models/vit.c): PyTorch parity through tools/vit_oracle.py
 * (the patch embedding against nn.Conv2d(stride=P) including the notes'
 * 224x224 image in 16x16 patches -> 196x768; small ViTs' logits within
 * 1e-5 and every gradient within 1e-4, norm-wise relative), finite
 * differences, the 2-D sinusoidal table worked by hand, attention capture,
 * parameter names and bad input. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <unistd.h>
#include "gradcheck.h"
#include "parity.h"

static double worst_out, worst_grad;

static int same_shape(const qkv_tensor *a, const qkv_tensor *b)
{
    return a && b && a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim);
}

/* Runs the oracle with --kind kind and fn on each of its cases. */
static int run_cases(const char *kind, int cases, void (*fn)(const char *, const char *))
{
    char dir[] = "/tmp/qkv_vit_XXXXXX", extra[64];
    snprintf(extra, sizeof extra, "--cases %d --kind %s", cases, kind);
    int ok = h_oracle_run("vit_oracle.py", dir, extra), n = 0;
    for (int i = 0; ok && i < cases; i++, n++) {
        char path[600], name[32];
        snprintf(name, sizeof name, "%s_%04d", kind, i);
        snprintf(path, sizeof path, "%s/case_%04d.safetensors", dir, i);
        fn(path, name);
        unlink(path);
    }
    rmdir(dir);
    return n;
}

/* ---- patch embedding against Conv2d ---------------------------------------- */

static int patch_ran;

static void patch_case(const char *path, const char *file)
{
    qkv_safetensors *st;
    qkv_arena *a;
    if (!h_case_open(path, &st, &a, NULL, NULL)) return;
    qkv_tensor *x = h_load(st, a, "x", 1), *w = h_load(st, a, "weight", 1), *b = h_load(st, a, "bias", 1);
    qkv_tensor *want = h_load(st, a, "y", 0), *dout = h_load(st, a, "dout", 0);
    for (int ref = 0; ref < 2 && x && w && want && dout; ref++) {
        qkv_set_reference(ref);
        qkv_ctx *c;
        CHECK_OK(qkv_ctx_new(&c));
        qkv_tensor *ins[3] = {x, w, b};
        for (int i = 0; i < 3; i++)
            if (ins[i]) memset(ins[i]->grad, 0, (size_t)qkv_tensor_numel(ins[i]) * sizeof(float));
        qkv_tensor *y = NULL;
        CHECK_OK(qkv_patch_embed(c, x, w, b, &y));
        char b1[64], b2[64];
        CHECK(same_shape(y, want), "%s: y %s, PyTorch %s", file, y ? qkv_shape_str(y, b1, 64) : "-",
              qkv_shape_str(want, b2, 64));
        if (same_shape(y, want)) {
            patch_ran++;
            h_compare(file, "y", y->data, want, 1e-5, &worst_out);
            CHECK_OK(qkv_backward(c, y, dout->data));
            h_compare_grad(st, a, file, "grad.", "x", x, &worst_grad);
            h_compare_grad(st, a, file, "grad.", "weight", w, &worst_grad);
            if (b) h_compare_grad(st, a, file, "grad.", "bias", b, &worst_grad);
            if (x->shape[2] == 224)
                printf("patch embedding 224x224, 16x16 patches, C=3 -> (%lld,%lld,%lld)%s\n",
                       (long long)y->shape[0], (long long)y->shape[1], (long long)y->shape[2],
                       ref ? " (reference)" : "");
        }
        qkv_ctx_free(c);
    }
    qkv_set_reference(0);
    h_case_close(st, a, NULL);
}

/* ---- the ViT against its PyTorch module -------------------------------------- */

static int vit_ran;

static qkv_vit_opts opts_from_meta(qkv_safetensors *st)
{
    qkv_vit_opts o = qkv_vit_opts_default(h_meta_int(st, "image_h"), h_meta_int(st, "image_w"),
                                          h_meta_int(st, "in_channels"), h_meta_int(st, "patch"),
                                          h_meta_int(st, "num_classes"));
    o.d_model = h_meta_int(st, "d_model");
    o.nhead = h_meta_int(st, "nhead");
    o.num_layers = h_meta_int(st, "num_layers");
    o.dim_feedforward = h_meta_int(st, "dim_feedforward");
    const char *act = qkv_safetensors_meta(st, "activation"), *pos = qkv_safetensors_meta(st, "pos");
    const char *pool = qkv_safetensors_meta(st, "pool");
    o.activation = act && !strcmp(act, "relu") ? QKV_ACTIVATION_RELU : QKV_ACTIVATION_GELU;
    o.pos = !pos || !strcmp(pos, "learned") ? QKV_VIT_POS_LEARNED
            : !strcmp(pos, "sincos")        ? QKV_VIT_POS_SINCOS
                                            : QKV_VIT_POS_NONE;
    o.pool = pool && !strcmp(pool, "mean") ? QKV_VIT_POOL_MEAN : QKV_VIT_POOL_CLS;
    o.class_token = (int)h_meta_int(st, "class_token");
    return o;
}

static void vit_case(const char *path, const char *file)
{
    h_case k;
    if (!h_case_begin(path, &k)) return;
    qkv_vit_opts o = opts_from_meta(k.st);
    qkv_vit m;
    CHECK_OK(qkv_vit_init(&m, &o, k.p, "", &k.r));
    CHECK_OK(qkv_params_load_state_dict(k.p, k.st, "vit.", 1, NULL));
    qkv_tensor *table = h_load(k.st, k.a, "pos_table", 0);
    if (o.pos == QKV_VIT_POS_SINCOS) {
        CHECK(table && m.pos_table, "%s: no sinusoidal table", file);
        if (table && m.pos_table) {
            double e = h_rel_err(m.pos_table, table->data, qkv_tensor_numel(table));
            CHECK(e <= 1e-6, "%s: 2-D sinusoidal table differs from MAE's by %.3g", file, e);
        }
    }
    qkv_tensor *images = h_load(k.st, k.a, "images", 1), *want = h_load(k.st, k.a, "logits", 0);
    qkv_tensor *dout = h_load(k.st, k.a, "dout", 0);
    for (int ref = 0; ref < 2 && images && want && dout; ref++) {
        qkv_set_reference(ref);
        qkv_ctx *c;
        CHECK_OK(qkv_ctx_new(&c));
        qkv_params_zero_grad(k.p);
        memset(images->grad, 0, (size_t)qkv_tensor_numel(images) * sizeof(float));
        qkv_tensor *y = NULL;
        CHECK_OK(qkv_vit_forward(c, &m, images, &y));
        CHECK(same_shape(y, want), "%s: logits shape differs", file);
        if (same_shape(y, want)) {
            vit_ran++;
            h_compare(file, "logits", y->data, want, 1e-5, &worst_out);
            CHECK_OK(qkv_backward(c, y, dout->data));
            h_compare_grad(k.st, k.a, file, "grad.", "images", images, &worst_grad);
            h_compare_grads(k.st, k.a, file, "grad.", k.p, &worst_grad);
        }
        qkv_ctx_free(c);
    }
    qkv_set_reference(0);
    qkv_vit_free(&m);
    h_case_end(&k);
}

/* ---- torchvision's names ----------------------------------------------------- */

static int tv_ran;
static double worst_tv;

static void tv_case(const char *path, const char *file)
{
    char data[600];
    snprintf(data, sizeof data, "%s", path);
    char *slash = strrchr(data, '/');
    if (slash) memcpy(slash + 1, "data", 4); /* case_NNNN -> data_NNNN */
    qkv_safetensors *st = NULL, *dt = NULL;
    CHECK_OK(qkv_safetensors_open(path, &st));
    CHECK_OK(qkv_safetensors_open(data, &dt));
    if (!st || !dt) {
        qkv_safetensors_close(st);
        qkv_safetensors_close(dt);
        return;
    }
    int64_t image = h_meta_int(st, "image");
    qkv_vit_opts o = qkv_vit_opts_default(image, image, h_meta_int(st, "in_channels"),
                                          h_meta_int(st, "patch"), h_meta_int(st, "num_classes"));
    o.d_model = h_meta_int(st, "d_model");
    o.nhead = h_meta_int(st, "nhead");
    o.num_layers = h_meta_int(st, "num_layers");
    o.dim_feedforward = h_meta_int(st, "dim_feedforward");
    qkv_arena *a;
    qkv_params *p;
    qkv_ctx *c;
    qkv_rng r;
    qkv_rng_seed(&r, 1);
    CHECK_OK(qkv_arena_new(&a, 0));
    CHECK_OK(qkv_params_new(&p));
    CHECK_OK(qkv_ctx_new(&c));
    qkv_vit m;
    CHECK_OK(qkv_vit_init(&m, &o, p, "model.", &r));
    CHECK_OK(qkv_vit_load_torchvision(p, st, "model."));
    qkv_tensor *images = h_load(dt, a, "images", 0), *want = h_load(dt, a, "logits", 0), *y = NULL;
    CHECK_OK(qkv_vit_forward(c, &m, images, &y));
    if (y && same_shape(y, want)) {
        tv_ran++;
        h_compare(file, "logits", y->data, want, 1e-5, &worst_tv);
    }
    /* A model built with other options does not take the file, and the
     * store is left as it was. */
    qkv_vit m2;
    qkv_params *p2;
    CHECK_OK(qkv_params_new(&p2));
    qkv_vit_opts o2 = o;
    o2.pos = QKV_VIT_POS_SINCOS;
    o2.d_model = 16, o2.nhead = 2;
    CHECK_OK(qkv_vit_init(&m2, &o2, p2, "", &r));
    qkv_tensor *w = qkv_params_find(p2, "conv_proj.weight");
    float w0 = w ? w->data[0] : 0;
    qkv_status s2 = qkv_vit_load_torchvision(p2, st, "");
    CHECK(s2 == QKV_ERR_NOTFOUND || s2 == QKV_ERR_SHAPE, "%s: a mismatched model loaded (%s)", file,
          qkv_status_name(s2));
    CHECK(w && w->data[0] == w0, "%s: a failed load changed a parameter", file);
    qkv_vit_free(&m2);
    qkv_params_free(p2);
    qkv_vit_free(&m);
    qkv_ctx_free(c);
    qkv_params_free(p);
    qkv_arena_free(a);
    qkv_safetensors_close(st);
    qkv_safetensors_close(dt);
    unlink(data);
}

static void test_torchvision_names(void)
{
    static const char *const pairs[][2] = {
        {"encoder.pos_embedding", "pos_embedding"},
        {"encoder.layers.encoder_layer_11.ln_1.weight", "encoder.layers.11.norm1.weight"},
        {"encoder.layers.encoder_layer_0.self_attention.out_proj.bias", "encoder.layers.0.self_attn.out_proj.bias"},
        {"encoder.layers.encoder_layer_3.mlp.3.weight", "encoder.layers.3.linear2.weight"},
        {"encoder.layers.encoder_layer_3.mlp.linear_1.bias", "encoder.layers.3.linear1.bias"},
        {"encoder.ln.bias", "encoder.norm.bias"},
        {"heads.head.weight", "head.weight"},
        {"class_token", "class_token"},
    };
    char out[128];
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        CHECK_OK(qkv_vit_torchvision_name(pairs[i][0], out, sizeof out));
        CHECK(!strcmp(out, pairs[i][1]), "torchvision '%s' -> '%s', expected '%s'", pairs[i][0], out, pairs[i][1]);
    }
    CHECK_ERR(qkv_vit_torchvision_name("heads.pre_logits.weight", out, sizeof out), QKV_ERR_NOTFOUND,
              "'heads.pre_logits.weight' is not a key");
    CHECK_ERR(qkv_vit_torchvision_name("encoder.layers.encoder_layer_x.ln_1.weight", out, sizeof out),
              QKV_ERR_NOTFOUND, "is not a key");
}

/* ---- finite differences ---------------------------------------------------- */

typedef struct {
    qkv_tensor *x, *w, *b;
    qkv_vit *m;
} pe_case;

static qkv_status fwd_patch(qkv_ctx *c, void *user, qkv_tensor **out)
{
    pe_case *k = user;
    qkv_tensor *y;
    TRY(qkv_patch_embed(c, k->x, k->w, k->b, &y));
    return qkv_tanh(c, y, out);
}

static qkv_status fwd_vit(qkv_ctx *c, void *user, qkv_tensor **out)
{
    pe_case *k = user;
    return qkv_vit_forward(c, k->m, k->x, out);
}

static void test_gradcheck_patch(void)
{
    qkv_arena *a;
    qkv_rng r;
    qkv_rng_seed(&r, 4);
    CHECK_OK(qkv_arena_new(&a, 0));
    /* 7x8 image in 3x2 patches: a row is left over, as Conv2d drops it. */
    pe_case k = {h_input(a, &r, 4, (int64_t[]){2, 2, 7, 8}, 1.0f),
                 h_input(a, &r, 4, (int64_t[]){3, 2, 3, 2}, 0.5f),
                 h_input(a, &r, 1, (int64_t[]){3}, 0.5f), NULL};
    qkv_tensor *in[3] = {k.x, k.w, k.b};
    for (int ref = 0; ref < 2; ref++) {
        qkv_set_reference(ref);
        double e = h_gradcheck(fwd_patch, &k, in, 3, 1e-2f, 1e-2);
        CHECK(e < 2e-3, "gradcheck patch_embed (reference %d): worst %.3g", ref, e);
        printf("gradcheck patch_embed%s: worst %.3g\n", ref ? " reference" : "", e);
    }
    qkv_set_reference(0);
    qkv_arena_free(a);
}

static void test_gradcheck_vit(qkv_vit_pos pos, qkv_vit_pool pool, int cls)
{
    qkv_arena *a;
    qkv_params *p;
    qkv_rng r;
    qkv_rng_seed(&r, 6);
    CHECK_OK(qkv_arena_new(&a, 0));
    CHECK_OK(qkv_params_new(&p));
    qkv_vit_opts o = qkv_vit_opts_default(4, 6, 2, 2, 3);
    o.d_model = 8, o.nhead = 2, o.num_layers = 2, o.dim_feedforward = 8;
    o.pos = pos, o.pool = pool, o.class_token = cls;
    qkv_vit m;
    CHECK_OK(qkv_vit_init(&m, &o, p, "", &r));
    /* Zero-initialised tensors (class token, head) and identical layers
     * would hide mistakes: randomise every parameter. */
    for (int i = 0; i < qkv_params_count(p); i++) {
        qkv_tensor *t = qkv_params_at(p, i);
        for (int64_t j = 0; j < qkv_tensor_numel(t); j++) t->data[j] += 0.2f * qkv_rng_normal(&r);
    }
    pe_case k = {h_input(a, &r, 4, (int64_t[]){2, 2, 4, 6}, 1.0f), NULL, NULL, &m};
    qkv_tensor *in[64];
    int n = 0;
    in[n++] = k.x;
    for (int i = 0; i < qkv_params_count(p) && n < 64; i++) in[n++] = qkv_params_at(p, i);
    double e = h_gradcheck(fwd_vit, &k, in, n, 2e-2f, 1e-2);
    CHECK(e < 1e-2, "gradcheck ViT pos %d pool %d class_token %d: worst %.3g", pos, pool, cls, e);
    printf("gradcheck ViT (2 layers, pos %s, pool %s, class token %d): worst %.3g\n",
           pos == QKV_VIT_POS_LEARNED ? "learned" : pos == QKV_VIT_POS_SINCOS ? "sincos" : "none",
           pool == QKV_VIT_POOL_CLS ? "cls" : "mean", cls, e);
    qkv_vit_free(&m);
    qkv_params_free(p);
    qkv_arena_free(a);
}

/* ---- the 2-D sinusoidal table, worked by hand ------------------------------- */

static void test_sincos(void)
{
    /* d = 8: each half h = 4 has frequencies w_0 = 1, w_1 = 10000^(-1/2) = 0.01.
     * Grid 2x3 with a class token: token (i=1, j=2) is row 1 + 1*3 + 2 = 6;
     * its channels 0-3 come from the column 2, 4-7 from the row 1. */
    float pe[7 * 8];
    CHECK_OK(qkv_pos_2d_sincos_fill(2, 3, 8, 1, pe));
    const float *t = pe + 6 * 8;
    double want[8] = {sin(2.0), sin(0.02), cos(2.0), cos(0.02), sin(1.0), sin(0.01), cos(1.0), cos(0.01)};
    double e = 0, z = 0;
    for (int i = 0; i < 8; i++) e = fmax(e, fabs(t[i] - want[i]));
    for (int i = 0; i < 8; i++) z = fmax(z, fabs(pe[i]));
    CHECK(e < 1e-7, "sincos table: token (1,2) off by %.3g", e);
    CHECK(z == 0, "sincos table: the class token's row is not zero");
    CHECK_ERR(qkv_pos_2d_sincos_fill(2, 3, 6, 0, pe), QKV_ERR_ARG, "d a positive multiple of 4");
    CHECK_ERR(qkv_pos_2d_sincos_fill(2, 3, 8, 0, NULL), QKV_ERR_ARG, "pe is NULL");
}

/* ---- attention capture, names, bad input ------------------------------------ */

static void test_model(void)
{
    qkv_arena *a;
    qkv_params *p;
    qkv_ctx *c;
    qkv_rng r;
    qkv_rng_seed(&r, 8);
    CHECK_OK(qkv_arena_new(&a, 0));
    CHECK_OK(qkv_params_new(&p));
    CHECK_OK(qkv_ctx_new(&c));
    qkv_vit_opts o = qkv_vit_opts_default(28, 28, 1, 7, 10);
    o.num_layers = 3;
    qkv_vit m;
    CHECK_OK(qkv_vit_init(&m, &o, p, "vit.", &r));
    const char *names[] = {"vit.conv_proj.weight", "vit.conv_proj.bias", "vit.class_token",
                           "vit.pos_embedding", "vit.encoder.layers.0.self_attn.in_proj_weight",
                           "vit.encoder.layers.2.linear2.bias", "vit.encoder.layers.1.norm1.weight",
                           "vit.encoder.norm.weight", "vit.head.weight", "vit.head.bias"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        CHECK(qkv_params_find(p, names[i]) != NULL, "parameter %s missing", names[i]);
    qkv_tensor *pe = qkv_params_find(p, "vit.pos_embedding");
    CHECK(pe && pe->ndim == 3 && pe->shape[1] == 17 && pe->shape[2] == 64, "pos_embedding not (1,17,64)");
    /* 64*1*49+64 + 64 + 17*64 + 3 * (4*64*64+4*64 + 2*64*256+256+64 + 4*64) + 2*64 + 10*64+10 */
    int64_t want_n = 64 * 49 + 64 + 64 + 17 * 64 + 3 * (4 * 64 * 64 + 4 * 64 + 2 * 64 * 256 + 256 + 64 + 4 * 64) +
                     2 * 64 + 10 * 64 + 10;
    CHECK(qkv_params_numel(p) == want_n, "parameters %lld, expected %lld", (long long)qkv_params_numel(p),
          (long long)want_n);
    qkv_tensor *img, *y = NULL;
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 4, (int64_t[]){2, 1, 28, 28}, &img));
    qkv_rng_fill_uniform(&r, img->data, 2 * 28 * 28, 0, 1);
    qkv_ctx_set_capture(c, 1);
    CHECK_OK(qkv_vit_forward(c, &m, img, &y));
    CHECK(y && y->ndim == 2 && y->shape[0] == 2 && y->shape[1] == 10, "logits not (2,10)");
    CHECK(qkv_ctx_captured_count(c) == 3, "captured %d attention maps, expected 3", qkv_ctx_captured_count(c));
    qkv_tensor *att = qkv_ctx_captured(c, 2);
    CHECK(att && att->ndim == 4 && att->shape[0] == 2 && att->shape[1] == 4 && att->shape[2] == 17 &&
              att->shape[3] == 17, "captured attention not (2,4,17,17)");
    if (att) {
        double s = 0;
        for (int j = 0; j < 17; j++) s += att->data[j]; /* the class token's row, head 0 */
        CHECK(fabs(s - 1) < 1e-5, "the class token's attention sums to %g", s);
    }
    qkv_ctx_set_capture(c, 0);
    /* Bad input. */
    qkv_tensor *img2;
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 4, (int64_t[]){2, 3, 28, 28}, &img2));
    CHECK_ERR(qkv_vit_forward(c, &m, img2, &y), QKV_ERR_SHAPE,
              "vit_features: images (2,3,28,28), expected F32 (N,1,28,28)");
    CHECK(y == NULL, "logits set on failure");
    CHECK_ERR(qkv_vit_forward(c, NULL, img, &y), QKV_ERR_ARG, "vit_features: model is NULL");
    qkv_vit_free(&m);
    int n0 = qkv_params_count(p);
    qkv_vit_opts bad = o;
    bad.pool = QKV_VIT_POOL_CLS, bad.class_token = 0;
    CHECK_ERR(qkv_vit_init(&m, &bad, p, "", &r), QKV_ERR_ARG, "pool on the class token needs class_token = 1");
    bad = o, bad.pos = QKV_VIT_POS_SINCOS, bad.d_model = 66, bad.nhead = 2;
    CHECK_ERR(qkv_vit_init(&m, &bad, p, "", &r), QKV_ERR_ARG, "need d_model % 4 == 0 (d_model 66)");
    bad = o, bad.patch = 29;
    CHECK_ERR(qkv_vit_init(&m, &bad, p, "", &r), QKV_ERR_ARG, "an image at least one patch wide");
    bad = o, bad.nhead = 5;
    CHECK_ERR(qkv_vit_init(&m, &bad, p, "", &r), QKV_ERR_ARG, "vit_init");
    bad = o, bad.num_classes = 0;
    CHECK_ERR(qkv_vit_init(&m, &bad, p, "", &r), QKV_ERR_ARG, "num_classes 0 must be >= 1");
    CHECK(qkv_params_count(p) == n0, "a failed vit_init added parameters");
    CHECK_ERR(qkv_vit_forward(c, &m, img, &y), QKV_ERR_STATE, "not initialised");
    /* The patch embedding's own checks. */
    qkv_tensor *w, *w2, *b3;
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 4, (int64_t[]){8, 1, 4, 4}, &w));
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 4, (int64_t[]){8, 2, 4, 4}, &w2));
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 1, (int64_t[]){3}, &b3));
    CHECK_ERR(qkv_patch_embed(c, img, w2, NULL, &y), QKV_ERR_SHAPE,
              "patch_embed: w (8,2,4,4), expected (D,C,ph,pw) with C = 1");
    CHECK_ERR(qkv_patch_embed(c, img, w, b3, &y), QKV_ERR_SHAPE, "patch_embed: b (3,), expected (8) (D of w (8,1,4,4))");
    qkv_tensor *small;
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 4, (int64_t[]){1, 1, 3, 8}, &small));
    CHECK_ERR(qkv_patch_embed(c, small, w, NULL, &y), QKV_ERR_SHAPE, "image 3x8 is smaller than a 4x4 patch");
    CHECK_ERR(qkv_patch_embed(c, b3, w, NULL, &y), QKV_ERR_SHAPE, "patch_embed: x (3,) has 1 dims, expected 4 (N,C,H,W)");
    qkv_nn_patch_embed pm;
    CHECK_OK(qkv_nn_patch_embed_init(&pm, 1, 8, 7, p, "pe.", &r));
    CHECK_OK(qkv_module_forward(c, &pm.base, img, &y));
    CHECK(y && y->shape[1] == 16 && y->shape[2] == 8, "PatchEmbed module: y not (2,16,8)");
    CHECK_ERR(qkv_nn_patch_embed_init(&pm, 1, 0, 7, p, "pe2.", &r), QKV_ERR_ARG, "embed_dim 0");
    qkv_ctx_free(c);
    qkv_params_free(p);
    qkv_arena_free(a);
}

int main(void)
{
    test_sincos();
    test_model();
    test_gradcheck_patch();
    test_gradcheck_vit(QKV_VIT_POS_LEARNED, QKV_VIT_POOL_CLS, 1);
    test_gradcheck_vit(QKV_VIT_POS_SINCOS, QKV_VIT_POOL_MEAN, 0);
    int n = run_cases("patch", 12, patch_case);
    CHECK(n == 12 && patch_ran == 24, "patch parity: %d cases, %d runs compared", n, patch_ran);
    printf("patch embedding vs Conv2d(stride=P): %d cases (fast and reference): worst output %.3g, "
           "worst gradient %.3g\n", n, worst_out, worst_grad);
    worst_out = worst_grad = 0;
    n = run_cases("vit", 12, vit_case);
    CHECK(n == 12 && vit_ran == 24, "ViT parity: %d cases, %d runs compared", n, vit_ran);
    printf("ViT vs its PyTorch module: %d cases (fast and reference): worst logits %.3g, "
           "worst gradient %.3g\n", n, worst_out, worst_grad);
    test_torchvision_names();
    n = run_cases("torchvision", 4, tv_case);
    CHECK(n == 4 && tv_ran == 4, "torchvision parity: %d cases, %d compared", n, tv_ran);
    printf("ViT with torchvision's state_dict names (a module of torchvision's structure): %d cases, "
           "worst logits %.3g\n", n, worst_tv);
    return h_finish("test_vit");
}
