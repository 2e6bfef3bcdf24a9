/* test_rearrange.c: qkv_rearrange (src/nn/rearrange.c, src/nn/gather.c):
 * PyTorch parity on 60 patterns (tools/rearrange_oracle.py: the einops
 * semantics as torch reshape/permute/reshape; forward and gradient must be
 * exact), fast against reference, finite differences, and bad patterns. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <unistd.h>
#include "gradcheck.h"
#include "parity.h"

/* ---- PyTorch parity ---------------------------------------------------------- */

static int n_cases, n_exact;

static void parity_case(const char *path, const char *file)
{
    qkv_safetensors *st;
    qkv_arena *a;
    if (!h_case_open(path, &st, &a, NULL, NULL)) return;
    n_cases++;
    const char *pattern = qkv_safetensors_meta(st, "pattern");
    const char *sizes = qkv_safetensors_meta(st, "sizes");
    qkv_tensor *x = h_load(st, a, "x", 1), *want = h_load(st, a, "y", 0);
    qkv_tensor *dout = h_load(st, a, "dout", 0), *gx = h_load(st, a, "grad.x", 0);
    int exact = 1;
    for (int ref = 0; ref < 2 && x && want && dout && gx && pattern; ref++) {
        qkv_set_reference(ref);
        qkv_ctx *c;
        CHECK_OK(qkv_ctx_new(&c));
        memset(x->grad, 0, (size_t)qkv_tensor_numel(x) * sizeof(float));
        qkv_tensor *y = NULL, *z = NULL;
        qkv_status s = qkv_rearrange(c, x, pattern, sizes, &y);
        CHECK(s == QKV_OK, "%s: \"%s\" [%s]: %s", file, pattern, sizes, qkv_last_error());
        if (s == QKV_OK) {
            char b1[64], b2[64];
            int same = y->ndim == want->ndim &&
                       !memcmp(y->shape, want->shape, sizeof(int64_t) * (size_t)y->ndim);
            CHECK(same, "%s: \"%s\": y %s, PyTorch %s", file, pattern, qkv_shape_str(y, b1, 64),
                  qkv_shape_str(want, b2, 64));
            int64_t n = qkv_tensor_numel(want);
            if (same) {
                int eq = !memcmp(y->data, want->data, (size_t)n * sizeof(float));
                CHECK(eq, "%s: \"%s\" (reference %d): y differs from PyTorch's", file, pattern, ref);
                /* A loss through one more op, so that a view result is
                 * differentiated like a copy: z = 1 * y. */
                CHECK_OK(qkv_scale(c, y, 1.0f, &z));
                if (z) CHECK_OK(qkv_backward(c, z, dout->data));
                int geq = !memcmp(x->grad, gx->data, (size_t)qkv_tensor_numel(x) * sizeof(float));
                CHECK(geq, "%s: \"%s\" (reference %d): grad x differs from PyTorch's", file, pattern, ref);
                exact &= eq && geq;
            } else {
                exact = 0;
            }
        } else {
            exact = 0;
        }
        qkv_ctx_free(c);
    }
    qkv_set_reference(0);
    n_exact += exact;
    h_case_close(st, a, NULL);
}

/* ---- finite differences ------------------------------------------------------ */

typedef struct {
    qkv_tensor *x;
    const char *pattern, *sizes;
} rg_case;

static qkv_status fwd_rearrange(qkv_ctx *c, void *user, qkv_tensor **out)
{
    rg_case *k = user;
    qkv_tensor *y, *x = k->x;
    /* Between two ops, so that a view result sits inside the graph. */
    qkv_status s = qkv_tanh(c, x, &x);
    if (s == QKV_OK) s = qkv_rearrange(c, x, k->pattern, k->sizes, &y);
    if (s != QKV_OK) return s;
    return qkv_tanh(c, y, out); /* something not linear after it */
}

static void test_gradcheck(void)
{
    qkv_arena *a;
    qkv_rng r;
    qkv_rng_seed(&r, 2);
    CHECK_OK(qkv_arena_new(&a, 0));
    rg_case k = {h_input(a, &r, 4, (int64_t[]){2, 3, 4, 6}, 1.0f),
                 "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", "p1=2,p2=3"};
    /* A permutation (a copy), then a pure reshape (a view). */
    const char *pats[2][2] = {{"b c (h p1) (w p2) -> b (h w) (p1 p2 c)", "p1=2,p2=3"},
                              {"b c (h p) w -> (b c) h (p w)", "p=2"}};
    for (int i = 0; i < 2; i++)
        for (int ref = 0; ref < 2; ref++) {
            qkv_set_reference(ref);
            k.pattern = pats[i][0], k.sizes = pats[i][1];
            double e = h_gradcheck(fwd_rearrange, &k, &k.x, 1, 1e-2f, 1e-2);
            CHECK(e < 1e-3, "gradcheck rearrange \"%s\" (reference %d): worst %.3g", k.pattern, ref, e);
            printf("gradcheck rearrange \"%s\"%s: worst %.3g\n", k.pattern, ref ? " reference" : "", e);
        }
    qkv_set_reference(0);
    qkv_arena_free(a);
}

/* ---- fast against reference on a large tensor (threads, merged axes) ------ */

static void test_fast_vs_ref(void)
{
    qkv_arena *a;
    qkv_rng r;
    qkv_rng_seed(&r, 3);
    CHECK_OK(qkv_arena_new(&a, 0));
    qkv_tensor *x = h_input(a, &r, 4, (int64_t[]){8, 3, 64, 64}, 1.0f);
    const char *pats[3] = {"b c (h p1) (w p2) -> b (h w) (p1 p2 c)", "b c h w -> b (h w) c",
                           "b c (h p1) w -> (b h) p1 (c w)"};
    const char *sizes[3] = {"p1=8,p2=8", NULL, "p1=8"};
    for (int i = 0; i < 3; i++) {
        float *got[2] = {NULL, NULL};
        int64_t n = 0;
        for (int ref = 0; ref < 2; ref++) {
            qkv_set_reference(ref);
            qkv_ctx *c;
            CHECK_OK(qkv_ctx_new(&c));
            qkv_tensor *y = NULL;
            CHECK_OK(qkv_rearrange(c, x, pats[i], sizes[i], &y));
            if (y) {
                n = qkv_tensor_numel(y);
                got[ref] = malloc((size_t)n * sizeof(float));
                memcpy(got[ref], y->data, (size_t)n * sizeof(float));
            }
            qkv_ctx_free(c);
        }
        qkv_set_reference(0);
        CHECK(got[0] && got[1] && !memcmp(got[0], got[1], (size_t)n * sizeof(float)),
              "fast and reference differ on \"%s\"", pats[i]);
        free(got[0]), free(got[1]);
    }
    qkv_arena_free(a);
}

/* ---- bad patterns ------------------------------------------------------------ */

static void test_errors(void)
{
    qkv_ctx *c;
    qkv_arena *a;
    CHECK_OK(qkv_ctx_new(&c));
    CHECK_OK(qkv_arena_new(&a, 0));
    qkv_tensor *x, *y = NULL, *b;
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 3, (int64_t[]){2, 6, 4}, &x));
    CHECK_OK(qkv_tensor_new(a, QKV_BOOL, 1, (int64_t[]){3}, &b));
    struct {
        const char *pattern, *sizes;
        qkv_status want;
        const char *needle;
    } bad[] = {
        {"b n d", NULL, QKV_ERR_ARG, "needs exactly one '->'"},
        {"b n d -> b -> n", NULL, QKV_ERR_ARG, "needs exactly one '->'"},
        {"b n d -> b n e", NULL, QKV_ERR_ARG, "axis 'e' is on the right side"},
        {"b n d -> b n", NULL, QKV_ERR_ARG, "axis 'd' is on the left side"},
        {"b n n -> b n", NULL, QKV_ERR_ARG, "axis 'n' appears twice on the left side"},
        {"b n d -> b (n n) d", NULL, QKV_ERR_ARG, "axis 'n' appears twice on the right side"},
        {"b (h w) d -> b h w d", NULL, QKV_ERR_ARG, "cannot infer the lengths in (h w) from dim 1"},
        {"b (h w) d -> b h w d", "h=4", QKV_ERR_SHAPE, "dim 1 of x (length 6) does not divide into (h w)"},
        {"b (h w) d -> b h w d", "h=2,w=2", QKV_ERR_SHAPE, "dim 1 of x has length 6, but (h w) makes 4"},
        {"b n d -> b n d", "q=3", QKV_ERR_ARG, "sizes gives 'q', which is not an axis"},
        {"b n d -> b n d", "n=0", QKV_ERR_ARG, "sizes gives n a length that is not an integer in [1, 2^40]"},
        {"b n d -> b n d", "n=1099511627777", QKV_ERR_ARG, "not an integer in [1, 2^40]"},
        {"b (n a c) d -> b (n a) c d", "a=1099511627776,c=1099511627776", QKV_ERR_SHAPE,
         "dim 1 of x (length 6) does not divide into (n a c)"},
        {"b n d -> b n d", "n 6", QKV_ERR_ARG, "expected name=length entries"},
        {"b n -> n b", NULL, QKV_ERR_SHAPE, "x (2,6,4) has 3 dims, the left side of \"b n -> n b\" has 2"},
        {"b n d e f -> b n d e f", NULL, QKV_ERR_SHAPE, "has 3 dims, the left side"},
        {"b (n a) (d e) -> b n a d e", "a=2,e=2", QKV_ERR_SHAPE, "makes 5 dims; qkv tensors have at most 4"},
        {"b (n 2) d -> b n d", NULL, QKV_ERR_ARG, "anonymous axis '2' on the left side"},
        {"b n d -> b n d 3", NULL, QKV_ERR_ARG, "anonymous axis '3' on the right side"},
        {"b ((n) d) -> b n d", NULL, QKV_ERR_ARG, "nested parentheses"},
        {"b n) d -> b n d", NULL, QKV_ERR_ARG, "')' without '('"},
        {"b (n d -> b n d", NULL, QKV_ERR_ARG, "'(' without ')'"},
        {"b n d -> b n d*", NULL, QKV_ERR_ARG, "unexpected character '*'"},
        {"b (n ...) -> b n ...", NULL, QKV_ERR_ARG, "'...' inside parentheses on the left side"},
        {"b ... -> b", NULL, QKV_ERR_ARG, "'...' on the left side only"},
        {"b n d -> ... b n d", NULL, QKV_ERR_ARG, "'...' on the right side only"},
        {"b ... ... -> b ...", NULL, QKV_ERR_ARG, "more than one '...'"},
        {"b .. d -> b d", NULL, QKV_ERR_ARG, "a lone '.'"},
        {"b n d 1 -> b n d", NULL, QKV_ERR_SHAPE, "has 3 dims, the left side"},
        {"b () d -> b d", NULL, QKV_ERR_SHAPE, "dim 1 of x has length 6, but () makes 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_ERR(qkv_rearrange(c, x, bad[i].pattern, bad[i].sizes, &y), bad[i].want, bad[i].needle);
        CHECK(y == NULL, "y set on a failed rearrange (\"%s\")", bad[i].pattern);
    }
    CHECK_ERR(qkv_rearrange(c, x, NULL, NULL, &y), QKV_ERR_ARG, "rearrange: pattern is NULL");
    CHECK_ERR(qkv_rearrange(c, NULL, "a -> a", NULL, &y), QKV_ERR_ARG, "rearrange: x is NULL");
    CHECK_ERR(qkv_rearrange(c, b, "a -> a", NULL, &y), QKV_ERR_DTYPE, "rearrange: x is BOOL");
    CHECK_ERR(qkv_rearrange(NULL, x, "a -> a", NULL, &y), QKV_ERR_ARG, "rearrange: ctx is NULL");
    CHECK_ERR(qkv_rearrange(c, x, "a -> a", NULL, NULL), QKV_ERR_ARG, "rearrange: y is NULL");
    /* A long name and many axes. */
    CHECK_ERR(qkv_rearrange(c, x, "b n abcdefghijabcdefghijabcdefghijabcdefghij -> b n abcdefghijabcdefghijabcdefghijabcdefghij",
                            NULL, &y), QKV_ERR_ARG, "is longer than 31 characters");
    CHECK_ERR(qkv_rearrange(c, x, "b n (a0 a1 a2 a3 a4 a5 a6 a7 a8 a9 b0 b1 b2 b3 b4 b5) -> b n a0",
                            NULL, &y), QKV_ERR_ARG, "more than 16 axes");
    /* What works: the heads' split with einops' names, unit axes, ellipsis. */
    CHECK_OK(qkv_rearrange(c, x, "b n (h d) -> b h n d", "h=2", &y));
    CHECK(y && y->ndim == 4 && y->shape[1] == 2 && y->shape[3] == 2, "split heads: wrong shape");
    CHECK_OK(qkv_rearrange(c, x, "b ... -> (b ...) 1", NULL, &y));
    CHECK(y && y->ndim == 2 && y->shape[0] == 48 && y->shape[1] == 1, "(b ...) 1: wrong shape");
    qkv_arena_free(a);
    qkv_ctx_free(c);
}

/* Random strings over the grammar's characters: every call either works
 * (and then y has x's elements) or fails with a message; none crashes
 * (the sanitizer build checks the parser's bounds). */
static void test_random_strings(void)
{
    static const char *tok[] = {"a", "b", "c", "h", "w", "(a b)", "(h w)", "(b c a)", "1", "()",
                                "...", "(...)", "(a", ")", "2", ".", "-", "->", "=", "(1 h)"};
    static const char *sz[] = {"a=2", "h=2", "w=3", "b=4", "c=6", "h=0", "a", "=", ",", " "};
    qkv_ctx *c;
    qkv_arena *a;
    qkv_rng r;
    qkv_rng_seed(&r, 12);
    CHECK_OK(qkv_ctx_new(&c));
    CHECK_OK(qkv_arena_new(&a, 0));
    qkv_tensor *x;
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 3, (int64_t[]){2, 4, 6}, &x));
    int ok = 0, bad_msg = 0, bad_numel = 0;
    for (int i = 0; i < 20000; i++) {
        /* Mostly "L1 .. Lk -> R1 .. Rm" from the tokens; now and then one
         * of the tokens that break the grammar. */
        char pat[160] = "", sizes[64] = "";
        int nl = i % 3 ? 1 + (int)(qkv_rng_next(&r) % 4) : 3, nr = (int)(qkv_rng_next(&r) % 5);
        int ntok = i % 4 ? 10 : 20; /* a quarter may use the bad tokens */
        int left[4];
        for (int j = 0; j < nl; j++) {
            left[j] = (int)(qkv_rng_next(&r) % (uint64_t)ntok);
            strcat(pat, tok[left[j]]);
            strcat(pat, " ");
        }
        strcat(pat, "-> ");
        if (i % 2) { /* the left's tokens in another order */
            for (int j = nl - 1; j > 0; j--) {
                int k = (int)(qkv_rng_next(&r) % (uint64_t)(j + 1)), t = left[j];
                left[j] = left[k], left[k] = t;
            }
            nr = nl;
        }
        for (int j = 0; j < nr; j++) {
            strcat(pat, tok[i % 2 ? left[j] : (int)(qkv_rng_next(&r) % (uint64_t)ntok)]);
            strcat(pat, " ");
        }
        int ns = (int)(qkv_rng_next(&r) % 4);
        for (int j = 0; j < ns; j++) {
            strcat(sizes, sz[qkv_rng_next(&r) % (i % 5 ? 5 : 10)]);
            strcat(sizes, ",");
        }
        qkv_ctx_reset(c);
        qkv_tensor *y = NULL;
        qkv_status s = qkv_rearrange(c, x, pat, ns ? sizes : NULL, &y);
        if (s == QKV_OK) {
            ok++;
            bad_numel += !y || qkv_tensor_numel(y) != 48;
        } else {
            bad_msg += strncmp(qkv_last_error(), "rearrange: ", 11) != 0 || y != NULL;
        }
    }
    CHECK(bad_msg == 0, "random patterns: %d failures without a rearrange: message (or with y set)", bad_msg);
    CHECK(bad_numel == 0, "random patterns: %d results with the wrong element count", bad_numel);
    printf("random patterns: 20000, %d accepted, the rest refused with a message\n", ok);
    qkv_arena_free(a);
    qkv_ctx_free(c);
}

int main(void)
{
    test_errors();
    test_random_strings();
    test_gradcheck();
    test_fast_vs_ref();
    int n = h_oracle_cases("rearrange_oracle.py", 60, parity_case);
    CHECK(n == 60 && n_exact == 60, "parity: %d cases, %d exact", n, n_exact);
    printf("parity: %d patterns against torch reshape/permute (fast and reference): %d exact "
           "(forward and gradient bit for bit)\n", n_cases, n_exact);
    return h_finish("test_rearrange");
}
