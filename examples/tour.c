/* tour.c: the README's quick tour as a program: nn.MultiheadAttention(64, 4,
 * batch_first=True), causal self-attention on a random batch, the backward,
 * and one AdamW step. Build it against the build tree (no install):
 *   cc examples/tour.c $(PKG_CONFIG_PATH=build pkg-config --cflags --libs qkv) -o tour
 *   LD_LIBRARY_PATH=build ./tour
 * or against an installed qkv: cc examples/tour.c $(pkg-config --cflags --libs qkv) */
#include <stdio.h>
#include <stdlib.h>
#include <qkv.h>

static int fail(const char *what)
{
    fprintf(stderr, "tour: %s: %s\n", what, qkv_last_error());
    return 1;
}

int main(void)
{
    enum { N = 2, L = 16, E = 64, H = 4 };
    qkv_params *p;  /* parameters, by state_dict name */
    qkv_ctx *c;     /* the activations of a step and its tape */
    qkv_rng rng;
    qkv_rng_seed(&rng, 0);
    if (qkv_params_new(&p) || qkv_ctx_new(&c)) return fail("start");

    qkv_mha mha; /* nn.MultiheadAttention(64, 4, batch_first=True) */
    qkv_mha_opts o = qkv_mha_opts_default(E, H);
    o.batch_first = 1;
    if (qkv_mha_init(&mha, &o, p, "self_attn.", &rng)) return fail("init");

    static float data[N * L * E], dout[N * L * E]; // x and d(loss)/d(out), (N,L,E)
    qkv_rng_fill_normal(&rng, data, N * L * E, 0, 1);
    qkv_rng_fill_normal(&rng, dout, N * L * E, 0, 1);
    qkv_tensor *x, *out, *w;
    if (qkv_tensor_wrap(qkv_ctx_arena(c), data, 3, (int64_t[]){N, L, E}, &x)) return fail("wrap");
    qkv_mha_args a = qkv_mha_args_default(); /* need_weights=True, average_attn_weights=True */
    a.causal = QKV_CAUSAL_TOP_LEFT;
    if (qkv_mha_forward(c, &mha, x, x, x, &a, &out, &w)) return fail("forward");
    /* w is (N,L,L): causal, so query 0 sees only key 0. */
    printf("out (%lld,%lld,%lld), weights (%lld,%lld,%lld); w[0][0][0] = %.4f, w[0][1][0..1] = "
           "%.4f %.4f\n", (long long)out->shape[0], (long long)out->shape[1],
           (long long)out->shape[2], (long long)w->shape[0], (long long)w->shape[1],
           (long long)w->shape[2], w->data[0], w->data[L], w->data[L + 1]);
    if (qkv_backward(c, out, dout)) return fail("backward"); /* into every parameter's ->grad */

    qkv_optim *opt;
    qkv_optim_opts oo = qkv_optim_adamw_opts_default();
    if (qkv_optim_new(&opt, p, &oo) || qkv_optim_step(opt)) return fail("AdamW");
    printf("%d parameter tensors, %lld numbers; one AdamW step taken\n", qkv_params_count(p),
           (long long)qkv_params_numel(p));
    qkv_ctx_reset(c); /* the next step reuses the arena */

    qkv_optim_free(opt);
    qkv_ctx_free(c);
    qkv_params_free(p);
    return 0;
}
