/* test_lm.c: the decoder-only language model (qkv_lm) against PyTorch
 * (tools/lm_oracle.py: random small configurations, forward <= 1e-5 and
 * every parameter's gradient <= 1e-4, reference and fast kernels), its
 * options as text (qkv_lm_opts_format/parse), and the pieces qkv's LM
 * checkpoints are made of: extra checkpoint metadata inside the checksum
 * and a tokenizer kept as text. */
#define _POSIX_C_SOURCE 200809L
#include <unistd.h>
#include "harness.h"
#include "parity.h"

static double worst_out, worst_grad;
static int n_ran, n_rotary, n_padded;

static void parity_case(const char *path, const char *file)
{
    h_case k;
    if (!h_case_begin(path, &k)) return;
    qkv_lm_opts o;
    const char *cfg = qkv_safetensors_meta(k.st, "lm.config");
    CHECK(cfg != NULL, "%s: no lm.config", file);
    qkv_lm m = {0};
    qkv_status s = cfg ? qkv_lm_opts_parse(cfg, &o) : QKV_ERR_FORMAT;
    CHECK(s == QKV_OK, "%s: parse '%s': %s", file, cfg ? cfg : "", qkv_last_error());
    if (!s) {
        char back[512];
        CHECK_OK(qkv_lm_opts_format(&o, back, sizeof back));
        CHECK(!strcmp(back, cfg), "%s: format gives '%s', PyTorch's side wrote '%s'", file, back, cfg);
        CHECK_OK(s = qkv_lm_init(&m, &o, k.p, "", &k.r));
    }
    if (!s) CHECK_OK(s = qkv_params_load_state_dict(k.p, k.st, "lm.", 1, NULL));
    qkv_tensor *ids = h_load(k.st, k.a, "ids", 0), *want = h_load(k.st, k.a, "logits", 0);
    qkv_tensor *dlogits = h_load(k.st, k.a, "dlogits", 0);
    qkv_tensor *pad = h_load(k.st, k.a, "pad", 0); /* rotary cases: left-padded rows, or none */
    n_rotary += !s && o.posenc == QKV_POSENC_ROTARY;
    n_padded += pad != NULL;
    for (int ref = 0; ref < 2 && !s && ids && want && dlogits; ref++) {
        qkv_set_reference(ref);
        qkv_ctx *c;
        CHECK_OK(qkv_ctx_new(&c));
        qkv_ctx_set_training(c, 1); /* dropout is 0: training mode changes nothing */
        qkv_params_zero_grad(k.p);
        qkv_tensor *logits = NULL;
        CHECK_OK(qkv_lm_forward(c, &m, ids, pad, &logits));
        if (logits && qkv_tensor_numel(logits) == qkv_tensor_numel(want)) {
            n_ran++;
            h_compare(file, "logits", logits->data, want, 1e-5, &worst_out);
            CHECK_OK(qkv_backward(c, logits, dlogits->data));
            h_compare_grads(k.st, k.a, file, "grad.", k.p, &worst_grad);
        } else {
            CHECK(0, "%s: logits missing or of the wrong size", file);
        }
        qkv_ctx_free(c);
    }
    qkv_set_reference(0);
    qkv_lm_free(&m);
    h_case_end(&k);
}

static void test_opts_text(void)
{
    qkv_lm_opts o = qkv_lm_opts_default(65, 128, 4, 3, 256), back;
    o.layer.activation = QKV_ACTIVATION_GELU;
    o.layer.norm_first = 1;
    o.layer.dropout = 0.1f;
    o.tie_weights = 1;
    char buf[512];
    CHECK_OK(qkv_lm_opts_format(&o, buf, sizeof buf));
    CHECK(!strcmp(buf, "vocab_size=65 max_len=256 num_layers=3 d_model=128 nhead=4 dim_feedforward=2048 "
                       "dropout=0.1 activation=gelu layer_norm_eps=1e-05 norm_first=1 "
                       "bias=1 final_norm=1 posenc=learned scale_embedding=0 tie_weights=1 padding_idx=-1"),
          "format: %s", buf);
    CHECK_OK(qkv_lm_opts_parse(buf, &back));
    CHECK(back.vocab_size == 65 && back.max_len == 256 && back.num_layers == 3 && back.layer.d_model == 128 &&
              back.layer.nhead == 4 && back.layer.dim_feedforward == 2048 && back.layer.dropout == 0.1f &&
              back.layer.activation == QKV_ACTIVATION_GELU && back.layer.layer_norm_eps == 1e-5f &&
              back.layer.norm_first == 1 && back.tie_weights == 1 && back.posenc == QKV_POSENC_LEARNED &&
              back.final_norm == 1 && back.padding_idx == -1,
          "parse did not give the options back");
    char small[40];
    CHECK_ERR(qkv_lm_opts_format(&o, small, sizeof small), QKV_ERR_ARG, "too small");
    /* Each bad field, in its place. */
    struct { const char *from, *to, *needle; } bad[] = {
        {"vocab_size=65", "vocab_size=0", "vocab_size=0 is not a whole number"},
        {"max_len=256", "max_len=99999999999", "max_len=99999999999"},
        {"nhead=4", "nhead=5", "not a multiple of nhead"},
        {"activation=gelu", "activation=swish", "activation=swish"},
        {"norm_first=1", "norm_first=2", "norm_first=2"},
        {"posenc=learned", "posenc=alibi", "posenc=alibi is not none, sinusoidal, learned or rotary"},
        {"posenc=learned", "posenc=rotary", "expected 'rotary_base=' at ''"}, /* rotary's last word */
        {"dropout=0.1", "dropout=nan", "dropout=nan"},
        {"padding_idx=-1", "padding_idx=65", "padding_idx=65"},
        {" bias=1", "", "expected 'bias='"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char t[600];
        const char *at = strstr(buf, bad[i].from);
        CHECK(at != NULL, "'%s' not in '%s'", bad[i].from, buf);
        if (!at) continue;
        snprintf(t, sizeof t, "%.*s%s%s", (int)(at - buf), buf, bad[i].to, at + strlen(bad[i].from));
        CHECK_ERR(qkv_lm_opts_parse(t, &back), QKV_ERR_FORMAT, bad[i].needle);
    }
    char t[600];
    snprintf(t, sizeof t, "%s extra=1", buf);
    CHECK_ERR(qkv_lm_opts_parse(t, &back), QKV_ERR_FORMAT, "unexpected text");
    CHECK_ERR(qkv_lm_opts_parse("", &back), QKV_ERR_FORMAT, "expected 'vocab_size='");
    /* rotary positions: posenc=rotary and a last word rotary_base (only then) */
    o.posenc = QKV_POSENC_ROTARY;
    o.layer.rotary_base = 500.0f;
    CHECK_OK(qkv_lm_opts_format(&o, buf, sizeof buf));
    CHECK(strstr(buf, " posenc=rotary ") && strstr(buf, "padding_idx=-1 rotary_base=500") &&
              !strcmp(strstr(buf, "rotary_base=500"), "rotary_base=500"), "format: %s", buf);
    CHECK_OK(qkv_lm_opts_parse(buf, &back));
    CHECK(back.posenc == QKV_POSENC_ROTARY && back.layer.rotary_base == 500.0f, "rotary options back");
    o.layer.rotary_base = 0.0f; /* the default: 10000, written out */
    CHECK_OK(qkv_lm_opts_format(&o, buf, sizeof buf));
    CHECK(strstr(buf, "rotary_base=10000") != NULL, "format: %s", buf);
    o.layer.rotary_base = 123.5f;
    CHECK_OK(qkv_lm_opts_format(&o, buf, sizeof buf));
    CHECK(strstr(buf, "rotary_base=123.5") != NULL, "format: %s", buf);
    snprintf(t, sizeof t, "%s", buf);
    strstr(t, " rotary_base=")[0] = 0;
    CHECK_ERR(qkv_lm_opts_parse(t, &back), QKV_ERR_FORMAT, "expected 'rotary_base='");
    snprintf(t, sizeof t, "%.*srotary_base=-1", (int)(strstr(buf, "rotary_base=") - buf), buf);
    CHECK_ERR(qkv_lm_opts_parse(t, &back), QKV_ERR_FORMAT, "rotary_base=-1 is not a number");
    o.posenc = QKV_POSENC_LEARNED;
    o.layer.rotary_base = 500.0f; /* ignored without rotary positions */
    CHECK_OK(qkv_lm_opts_format(&o, buf, sizeof buf));
    CHECK(!strstr(buf, "rotary"), "format without rotary: %s", buf);
    CHECK_ERR(qkv_lm_opts_parse(NULL, &back), QKV_ERR_ARG, "text is NULL");
}

static void test_checkpoint_meta(void)
{
    char dir[] = "/tmp/qkv_lm_XXXXXX", path[600];
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    snprintf(path, sizeof path, "%s/m.ckpt", dir);
    qkv_params *p;
    CHECK_OK(qkv_params_new(&p));
    qkv_tensor *w;
    CHECK_OK(qkv_params_add(p, "", "w", 1, (int64_t[]){3}, &w));
    for (int i = 0; i < 3; i++) w->data[i] = (float)i;
    const char *keys[] = {"lm.config", "lm.tokenizer"}, *vals[] = {"a=1 b=2", "line1\nline \"2\"\n"};
    qkv_checkpoint_meta meta = {2, keys, vals};
    CHECK_OK(qkv_checkpoint_save_meta(path, p, NULL, NULL, NULL, &meta));
    char *v = NULL;
    CHECK_OK(qkv_checkpoint_read_meta(path, "lm.tokenizer", &v));
    CHECK(v && !strcmp(v, vals[1]), "read_meta gave '%s'", v ? v : "(null)");
    free(v);
    CHECK_ERR(qkv_checkpoint_read_meta(path, "lm.other", &v), QKV_ERR_NOTFOUND, "no metadata 'lm.other'");
    CHECK_OK(qkv_checkpoint_load(path, p, NULL, NULL, NULL));
    /* The metadata is inside the checksum: change one byte of a value. */
    FILE *f = fopen(path, "r+b");
    char buf[4096];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    char *at = NULL;
    for (size_t i = 0; i + 7 <= n && !at; i++)
        if (!memcmp(buf + i, "a=1 b=2", 7)) at = buf + i;
    CHECK(at != NULL, "the value is not in the file's header");
    if (at) {
        fseek(f, (long)(at - buf), SEEK_SET);
        fputc('c', f);
    }
    if (f) fclose(f);
    CHECK_ERR(qkv_checkpoint_read_meta(path, "lm.config", &v), QKV_ERR_FORMAT, "the file is corrupt");
    CHECK_ERR(qkv_checkpoint_load(path, p, NULL, NULL, NULL), QKV_ERR_FORMAT, "the file is corrupt");
    const char *own[] = {"train.step"}, *dup[] = {"x", "x"}, *one[] = {"1"}, *two[] = {"1", "2"};
    meta = (qkv_checkpoint_meta){1, own, one};
    CHECK_ERR(qkv_checkpoint_save_meta(path, p, NULL, NULL, NULL, &meta), QKV_ERR_ARG, "is the checkpoint's own");
    meta = (qkv_checkpoint_meta){2, dup, two};
    CHECK_ERR(qkv_checkpoint_save_meta(path, p, NULL, NULL, NULL, &meta), QKV_ERR_ARG, "given twice");
    unlink(path);
    rmdir(dir);
    qkv_params_free(p);
}

static void test_tokenizer_text(void)
{
    const char text[] = "In the beginning God created the heaven and the earth. \xc3\xa9";
    qkv_tokenizer *t = NULL, *u = NULL, *b = NULL;
    CHECK_OK(qkv_tokenizer_chars_train(text, sizeof text - 1, &t));
    char *s = NULL;
    size_t len = 0;
    CHECK_OK(qkv_tokenizer_save_text(t, &s, &len));
    CHECK(s && !strncmp(s, "qkv-chars 1\n", 12), "chars text starts '%.12s'", s ? s : "");
    CHECK_OK(qkv_tokenizer_load_text(s, len, &u));
    CHECK(qkv_tokenizer_vocab_size(u) == qkv_tokenizer_vocab_size(t) && qkv_tokenizer_vocab_size(t) > 2,
          "vocab sizes %lld, %lld", (long long)qkv_tokenizer_vocab_size(u), (long long)qkv_tokenizer_vocab_size(t));
    qkv_tokenizer_free(u);
    CHECK_ERR(qkv_tokenizer_load_text(s, len - 3, &u), QKV_ERR_FORMAT, "(text)");
    CHECK_ERR(qkv_tokenizer_load_text("qkv-nope 1\n", 11, &u), QKV_ERR_FORMAT, "not a qkv tokenizer");
    free(s);
    CHECK_OK(qkv_tokenizer_bytes_new(&b));
    CHECK_ERR(qkv_tokenizer_save_text(b, &s, &len), QKV_ERR_ARG, "only chars, bpe and words");
    qkv_tokenizer_free(t);
    qkv_tokenizer_free(u);
    qkv_tokenizer_free(b);
}

int main(void)
{
    test_opts_text();
    test_checkpoint_meta();
    test_tokenizer_text();
    int n = h_oracle_cases("lm_oracle.py", 24, parity_case);
    CHECK(n == 24 && n_ran == 48, "%d oracle cases, %d forwards compared", n, n_ran);
    CHECK(n_rotary == 6 && n_padded == 3, "%d rotary cases (6 expected), %d left-padded (3)", n_rotary,
          n_padded);
    printf("PyTorch parity over %d configurations, %d rotary (%d left-padded) (reference and fast kernels): "
           "logits %.2g, gradients %.2g\n", n, n_rotary, n_padded, worst_out, worst_grad);
    return h_finish("test_lm");
}
