/* test_deprecated.c: the old names kept as aliases of renamed functions
 * (docs/core.md, "Names") still link and give what their new names give.
 * Expected values are PyTorch's documented defaults (torch.optim.SGD, Adam,
 * AdamW) and UTF-8's bytes, not our own output. */
#include "harness.h"

/* the point of this file is calling the deprecated names */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static int same_opts(qkv_optim_opts a, qkv_optim_opts b)
{
    return a.kind == b.kind && a.lr == b.lr && a.weight_decay == b.weight_decay &&
           a.maximize == b.maximize && a.momentum == b.momentum && a.dampening == b.dampening &&
           a.nesterov == b.nesterov && a.beta1 == b.beta1 && a.beta2 == b.beta2 && a.eps == b.eps &&
           a.amsgrad == b.amsgrad;
}

static void test_optim_defaults(void)
{
    qkv_optim_opts sgd = qkv_optim_sgd_default(0.25), adam = qkv_optim_adam_default(),
                   adamw = qkv_optim_adamw_default();
    CHECK(same_opts(sgd, qkv_optim_sgd_opts_default(0.25)), "qkv_optim_sgd_default differs");
    CHECK(same_opts(adam, qkv_optim_adam_opts_default()), "qkv_optim_adam_default differs");
    CHECK(same_opts(adamw, qkv_optim_adamw_opts_default()), "qkv_optim_adamw_default differs");
    /* torch.optim: SGD(lr) momentum 0 dampening 0 weight_decay 0; Adam lr
     * 1e-3 betas (0.9, 0.999) eps 1e-8 weight_decay 0; AdamW weight_decay 1e-2 */
    CHECK(sgd.kind == QKV_OPTIM_SGD && sgd.lr == 0.25 && sgd.momentum == 0 && sgd.dampening == 0 &&
          sgd.weight_decay == 0, "SGD defaults");
    CHECK(adam.kind == QKV_OPTIM_ADAM && adam.lr == 1e-3 && adam.beta1 == 0.9 && adam.beta2 == 0.999 &&
          adam.eps == 1e-8 && adam.weight_decay == 0, "Adam defaults");
    CHECK(adamw.kind == QKV_OPTIM_ADAMW && adamw.lr == 1e-3 && adamw.weight_decay == 1e-2,
          "AdamW defaults");
}

static void test_tokenizer_bytes(void)
{
    qkv_tokenizer *t = NULL;
    CHECK_OK(qkv_tokenizer_bytes_init(&t));
    CHECK(t && qkv_tokenizer_vocab_size(t) == 256, "byte tokenizer: vocab %lld",
          (long long)qkv_tokenizer_vocab_size(t));
    int64_t *ids = NULL, n = 0;
    if (t) CHECK_OK(qkv_tokenizer_encode(t, "h\xc3\xa9", 3, &ids, &n));
    /* "hé" in UTF-8: 0x68 0xc3 0xa9 */
    CHECK(n == 3 && ids[0] == 0x68 && ids[1] == 0xc3 && ids[2] == 0xa9, "bytes of \"h\\u00e9\": %lld ids",
          (long long)n);
    free(ids);
    qkv_tokenizer_free(t);
    CHECK_ERR(qkv_tokenizer_bytes_init(NULL), QKV_ERR_ARG, "tokenizer_bytes_new: out");
}

static void test_translation_set(void)
{
    qkv_translation_set *s = NULL;
    CHECK_OK(qkv_translation_set_init(6, &s));
    CHECK(s != NULL, "translation set");
    qkv_translation_set_free(s);
    CHECK_ERR(qkv_translation_set_init(0, &s), QKV_ERR_ARG, "translation_set_new: max_words is 0");
}

static void test_dist(void)
{
    qkv_dist *d = NULL;
    CHECK_OK(qkv_dist_init(&d, QKV_DIST_SINGLE));
    CHECK(d && qkv_dist_rank(d) == 0 && qkv_dist_size(d) == 1 &&
          strcmp(qkv_dist_engine_name(d), "single") == 0, "single engine");
    float x[2] = {1.5f, -2};
    if (d) CHECK_OK(qkv_dist_allreduce(d, x, 2, QKV_DIST_SUM));
    CHECK(x[0] == 1.5f && x[1] == -2, "one rank's sum is itself");
    qkv_dist_free(d);
    CHECK_ERR(qkv_dist_init(NULL, QKV_DIST_SINGLE), QKV_ERR_ARG, "dist_new: out");
}

int main(void)
{
    test_optim_defaults();
    test_tokenizer_bytes();
    test_translation_set();
    test_dist();
    printf("test_deprecated: %d passed, %d failed\n", h_pass, h_fail);
    return h_fail != 0;
}
