/* test_bf16_rnn.c: nn.GRU and nn.LSTM in the BF16 mode (src/nn/rnn.c,
 * docs/bf16.md). For each case, one forward and backward (loss =
 * sum(R * cat(output, h_n, c_n))) in four runs on one ctx:
 *   A  FP32 mode;
 *   B  BF16 mode;
 *   C  FP32 mode again: A's bits, every output and gradient (FP32 is
 *      unchanged, before and after a BF16 call);
 *   D  FP32 mode with x and the weights W_ih, W_hh rounded to bf16 first
 *      (h0 holds bf16 values in every run: it also enters the gates'
 *      formulas unrounded): the FP32 computation on the rounded inputs.
 * B must agree with D (bounds below) and differ from A. With one time step
 * and one layer, every input of the forward's products is one D rounded
 * too, so there B's forward is D's up to the order of the FP32 sums
 * (1e-6 norm-wise), while A is further off than 1e-4: that check tells
 * rounded from unrounded. Over several steps and layers BF16 also rounds
 * what D keeps in FP32 (the state h_t fed to the next step's product, the
 * next layer's input, the gates' gradients fed to the backward's
 * products), each by at most 2^-9 relative; the bound there is norm-wise
 * 2^-6 per tensor (the measured errors are in docs/bf16.md). Each case
 * runs with the products' automatic path (the steps' products with W_hh
 * by qkv_gemm_bf16_vnni where the CPU has AVX512-BF16 and the hidden size
 * allows: H = 16 and 256 here, not 20) and again with every product forced
 * through oneDNN (where built), so that the once-converted W_hh
 * (qkv_gemm_bf16_pre) is used on both of qkv_gemm_bf16's paths.
 * BF16 on 1 thread and on 2 gives the same bits: no sum may depend on
 * the thread count (the cells run by batch rows on the threads). */
#include <omp.h>
#include "gradcheck.h"
#include "kernels/bf16.h"
#include "kernels/gemm_bf16.h"

enum { MAXS = 24 };

/* The outputs and gradients of one run, copied. */
typedef struct {
    float *v[MAXS];
    int64_t n[MAXS];
    const char *name[MAXS];
    int k;
} snap;

typedef struct {
    const char *what;
    qkv_rnn_mode mode;
    int64_t L, N, In, H, layers;
    int bidirectional, lengths;
} rnn_case;

static void snap_add(snap *s, const char *name, const float *v, int64_t n)
{
    if (s->k == MAXS || !v) return;
    s->v[s->k] = malloc((size_t)n * sizeof(float));
    if (!s->v[s->k]) return;
    memcpy(s->v[s->k], v, (size_t)n * sizeof(float));
    s->n[s->k] = n, s->name[s->k++] = name;
}

static void snap_free(snap *s)
{
    for (int i = 0; i < s->k; i++) free(s->v[i]);
    s->k = 0;
}

/* One forward and backward in precision prec, into *out. */
static int run(qkv_ctx *c, qkv_precision prec, qkv_nn_rnn *m, qkv_params *p, qkv_tensor *x, qkv_tensor *h0,
               qkv_tensor *c0, const int64_t *lengths, const float *R, snap *out)
{
    qkv_tensor *y = NULL, *hn = NULL, *cn = NULL, *cat = NULL;
    qkv_params_zero_grad(p);
    memset(x->grad, 0, sizeof(float) * (size_t)qkv_tensor_numel(x));
    memset(h0->grad, 0, sizeof(float) * (size_t)qkv_tensor_numel(h0));
    memset(c0->grad, 0, sizeof(float) * (size_t)qkv_tensor_numel(c0));
    qkv_ctx_reset(c);
    if (qkv_ctx_set_precision(c, prec)) return 0;
    qkv_status st = m->mode == QKV_RNN_LSTM ? qkv_nn_lstm_forward(c, m, x, h0, c0, lengths, &y, &hn, &cn)
                                           : qkv_nn_gru_forward(c, m, x, h0, lengths, &y, &hn);
    qkv_tensor *parts[3] = {y, hn, cn};
    for (int i = 0; i < 3 && !st && parts[i]; i++) {
        int64_t n = qkv_tensor_numel(parts[i]);
        qkv_tensor *f;
        st = qkv_reshape(c, parts[i], 1, &n, &f);
        if (!st) st = cat ? qkv_cat(c, cat, f, 0, &cat) : (cat = f, QKV_OK);
    }
    if (!st) st = qkv_backward(c, cat, R);
    CHECK(st == QKV_OK, "run: %s", qkv_last_error());
    if (st) return 0;
    snap_add(out, "output", y->data, qkv_tensor_numel(y));
    snap_add(out, "h_n", hn->data, qkv_tensor_numel(hn));
    if (cn) snap_add(out, "c_n", cn->data, qkv_tensor_numel(cn));
    snap_add(out, "grad x", x->grad, qkv_tensor_numel(x));
    snap_add(out, "grad h0", h0->grad, qkv_tensor_numel(h0));
    if (cn) snap_add(out, "grad c0", c0->grad, qkv_tensor_numel(c0));
    int64_t nw = 4 * m->o.num_layers * (m->o.bidirectional ? 2 : 1);
    for (int64_t i = 0; i < nw; i++)
        if (m->weights[i]) snap_add(out, m->weights[i]->name, m->weights[i]->grad, qkv_tensor_numel(m->weights[i]));
    return 1;
}

static int same_bits(const snap *a, const snap *b)
{
    if (a->k != b->k) return 0;
    for (int i = 0; i < a->k; i++)
        if (a->n[i] != b->n[i] || memcmp(a->v[i], b->v[i], (size_t)a->n[i] * sizeof(float))) return 0;
    return 1;
}

/* Rounds t's values to bf16 in place, keeping the originals in *keep. */
static float *round_in_place(qkv_tensor *t)
{
    int64_t n = qkv_tensor_numel(t);
    float *keep = malloc((size_t)n * sizeof(float));
    if (keep) memcpy(keep, t->data, (size_t)n * sizeof(float));
    qkv_bf16_round_floats(t->data, t->data, n);
    return keep;
}

static double worst_fwd_b16, worst_all_b16; /* the largest errors seen, for the docs */

static void test_case(const rnn_case *k, const char *path)
{
    qkv_rng r;
    qkv_rng_seed(&r, 40 + (uint64_t)k->L * 7 + (uint64_t)k->H);
    qkv_arena *a = NULL;
    qkv_params *p = NULL;
    qkv_ctx *c = NULL;
    CHECK_OK(qkv_arena_new(&a, 0));
    CHECK_OK(qkv_params_new(&p));
    CHECK_OK(qkv_ctx_new(&c));
    qkv_nn_rnn m = {0};
    qkv_rnn_opts o = qkv_rnn_opts_default(k->In, k->H);
    o.num_layers = k->layers, o.bidirectional = k->bidirectional;
    if (!a || !p || !c) goto done;
    CHECK_OK(k->mode == QKV_RNN_LSTM ? qkv_nn_lstm_init(&m, &o, p, "", &r) : qkv_nn_gru_init(&m, &o, p, "", &r));
    if (!m.weights) goto done;
    int64_t D = k->bidirectional ? 2 : 1, rows = D * k->layers;
    int64_t xs[3] = {k->L, k->N, k->In}, hs[3] = {rows, k->N, k->H};
    qkv_tensor *x = h_input(a, &r, 3, xs, 1.0f), *h0 = h_input(a, &r, 3, hs, 0.5f), *c0 = h_input(a, &r, 3, hs, 0.5f);
    int64_t nout = k->L * k->N * D * k->H + 2 * rows * k->N * k->H;
    float *R = malloc(sizeof(float) * (size_t)nout);
    int64_t *len = malloc(sizeof(int64_t) * (size_t)k->N);
    if (!x || !h0 || !c0 || !R || !len) goto done;
    /* h0 feeds a product (rounded in BF16 mode) and the gates' formulas (not
     * rounded): bf16 values from the start, so that D and BF16 read the same */
    qkv_bf16_round_floats(h0->data, h0->data, qkv_tensor_numel(h0));
    qkv_rng_fill_uniform(&r, R, nout, -1, 1);
    for (int64_t n = 0; n < k->N; n++) len[n] = k->L - (n * 5) % k->L; /* L first, then shorter */
    const int64_t *lengths = k->lengths ? len : NULL;
    snap A = {0}, B = {0}, C = {0}, Dr = {0}, B1 = {0};
    int nthr = omp_get_max_threads();
    omp_set_num_threads(2);
    int ok = run(c, QKV_FP32, &m, p, x, h0, c0, lengths, R, &A) && run(c, QKV_BF16, &m, p, x, h0, c0, lengths, R, &B) &&
             run(c, QKV_FP32, &m, p, x, h0, c0, lengths, R, &C);
    omp_set_num_threads(1);
    ok = ok && run(c, QKV_BF16, &m, p, x, h0, c0, lengths, R, &B1);
    omp_set_num_threads(nthr);
    if (ok) CHECK(same_bits(&B, &B1), "%s (%s): BF16 on 1 thread is not the bits of 2 threads", k->what, path);
    /* D: the products' inputs rounded (x, W_ih, W_hh; not the biases, which
     * BF16 mode adds in FP32, nor c0, which no product reads), FP32 */
    qkv_tensor *t[1 + 4 * 2 * 4] = {x};
    int nt = 1;
    for (int64_t i = 0; i < 4 * rows && nt < 1 + 4 * 2 * 4; i++)
        if (i % 4 < 2) t[nt++] = m.weights[i];
    float *keep[1 + 4 * 2 * 4];
    for (int i = 0; i < nt; i++) keep[i] = round_in_place(t[i]);
    ok = ok && run(c, QKV_FP32, &m, p, x, h0, c0, lengths, R, &Dr);
    for (int i = 0; i < nt; i++)
        if (keep[i]) memcpy(t[i]->data, keep[i], sizeof(float) * (size_t)qkv_tensor_numel(t[i])), free(keep[i]);
    if (ok) {
        CHECK(same_bits(&A, &C), "%s (%s): FP32 mode after a BF16 run is not FP32's bits from before", k->what, path);
        CHECK(!same_bits(&A, &B), "%s (%s): BF16 mode gave FP32's bits: nothing was rounded", k->what, path);
        /* one step, one layer: the forward's products see only inputs D rounded too */
        int exact = k->L == 1 && k->layers == 1;
        int nfwd = k->mode == QKV_RNN_LSTM ? 3 : 2;
        for (int i = 0; i < B.k && i < Dr.k; i++) {
            double e = h_rel_err(B.v[i], Dr.v[i], B.n[i]), bound = exact && i < nfwd ? 1e-6 : 0x1p-6;
            CHECK(e <= bound, "%s (%s): %s in BF16 is %.3g from FP32 on rounded inputs (bound %.3g)", k->what, path,
                  B.name[i], e, bound);
            if (exact && i < nfwd) {
                double e32 = h_rel_err(A.v[i], Dr.v[i], A.n[i]);
                CHECK(e32 > 1e-4, "%s (%s): %s: FP32 on raw inputs only %.3g from rounded ones: cannot tell",
                      k->what, path, A.name[i], e32);
                worst_fwd_b16 = fmax(worst_fwd_b16, e);
            } else {
                worst_all_b16 = fmax(worst_all_b16, e);
            }
        }
    }
    snap_free(&A), snap_free(&B), snap_free(&C), snap_free(&Dr), snap_free(&B1);
    free(R);
    free(len);
done:
    qkv_nn_gru_free(&m); /* the same for an LSTM */
    qkv_ctx_free(c);
    qkv_params_free(p);
    qkv_arena_free(a);
}

/* qkv_gemm_bf16_pre (inputs already bf16) against qkv_gemm_bf16 on the
 * floats: the same numbers, bit for bit, with A16, B16 or both, every
 * orientation, beta 0 and 1. */
static void test_gemm_pre(const char *path)
{
    enum { M = 9, N = 37, K = 70 };
    float A[M * K], B[N * K], C0[M * N], C1[M * N];
    uint16_t A16[M * K], B16[N * K];
    qkv_rng r;
    qkv_rng_seed(&r, 8);
    qkv_rng_fill_uniform(&r, A, M * K, -1, 1);
    qkv_rng_fill_uniform(&r, B, N * K, -1, 1);
    qkv_bf16_from_floats(A, A16, M * K);
    qkv_bf16_from_floats(B, B16, N * K);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int pre = 1; pre < 4; pre++) /* 1: A16, 2: B16, 3: both */
                for (int beta = 0; beta < 2; beta++) {
                    int lda = ta ? M : K, ldb = tb ? K : N;
                    for (int i = 0; i < M * N; i++) C0[i] = C1[i] = (float)(i % 7) - 3;
                    qkv_gemm_bf16(ta, tb, M, N, K, 1.5f, A, lda, B, ldb, (float)beta, C0, N);
                    qkv_gemm_bf16_pre(ta, tb, M, N, K, 1.5f, pre & 1 ? NULL : A, pre & 1 ? A16 : NULL, lda,
                                      pre & 2 ? NULL : B, pre & 2 ? B16 : NULL, ldb, (float)beta, C1, N);
                    CHECK(!memcmp(C0, C1, sizeof C0),
                          "gemm_bf16_pre (%s, ta %d, tb %d, %s, beta %d) is not qkv_gemm_bf16's product", path,
                          ta, tb, pre == 1 ? "A16" : pre == 2 ? "B16" : "A16 and B16", beta);
                }
    /* both W (N,K) in FP32, with rows longer than K, and its compact copy
     * W16: ldb belongs to W16 (ignored), so W must not be read with it;
     * a shape whose B oneDNN takes in its blocked layout */
    enum { M2 = 16, N2 = 64, K2 = 64, LD2 = K2 + 5 };
    static float W[N2 * LD2], Wc[N2 * K2], X[M2 * K2], Y0[M2 * N2], Y1[M2 * N2];
    static uint16_t W16[N2 * K2];
    qkv_rng_fill_uniform(&r, W, N2 * LD2, -1, 1);
    qkv_rng_fill_uniform(&r, X, M2 * K2, -1, 1);
    for (int n = 0; n < N2; n++) memcpy(Wc + n * K2, W + n * LD2, sizeof(float) * K2);
    qkv_bf16_from_floats(Wc, W16, N2 * K2);
    qkv_gemm_bf16(0, 1, M2, N2, K2, 1.0f, X, K2, Wc, K2, 0.0f, Y0, N2);
    qkv_gemm_bf16_pre(0, 1, M2, N2, K2, 1.0f, X, NULL, K2, W, W16, K2, 0.0f, Y1, N2);
    CHECK(!memcmp(Y0, Y1, sizeof Y0), "gemm_bf16_pre (%s) with W and W16 given: not the product of W16", path);
}

int main(void)
{
    static const rnn_case cases[] = {
        {"GRU, 2 layers, bidirectional, lengths", QKV_RNN_GRU, 6, 4, 7, 16, 2, 1, 1},
        {"LSTM, 2 layers, bidirectional, lengths", QKV_RNN_LSTM, 6, 4, 7, 16, 2, 1, 1},
        {"GRU, one step", QKV_RNN_GRU, 1, 5, 24, 20, 1, 1, 0},
        {"LSTM, one step", QKV_RNN_LSTM, 1, 5, 24, 20, 1, 0, 0},
        /* a step's h W_hh^T of 64 x 768 x 256 (25 MFLOP): qkv_gemm_bf16_vnni
         * (or oneDNN) on the automatic path */
        {"GRU, batch 64, hidden 256", QKV_RNN_GRU, 3, 64, 32, 256, 1, 0, 0},
    };
    int paths = qkv_gemm_bf16_accelerated() ? 2 : 1;
    for (int pth = 0; pth < paths; pth++) {
        const char *path = pth ? "oneDNN forced" : "automatic";
        qkv_gemm_bf16_set_path(pth ? QKV_BF16_DNNL : QKV_BF16_AUTO);
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) test_case(&cases[i], path);
        test_gemm_pre(path);
    }
    qkv_gemm_bf16_set_path(QKV_BF16_AUTO);
    printf("largest norm-wise error of BF16 against FP32 on rounded inputs: %.3g (one step, forward), %.3g "
           "(the rest)%s\n", worst_fwd_b16, worst_all_b16, paths == 2 ? "" : " (oneDNN not used)");
    return h_finish("test_bf16_rnn");
}
