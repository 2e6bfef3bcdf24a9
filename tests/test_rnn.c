/* test_rnn.c: nn.GRU and nn.LSTM (src/nn/rnn.c): finite-difference
 * gradients of every input and parameter (with lengths, bidirectional, two
 * layers), the fast path against the reference loops, PyTorch parity
 * (tools/rnn_oracle.py: random configurations of every option, outputs
 * within 1e-5 and gradients within 1e-4, norm-wise relative), bad input. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <unistd.h>
#include "gradcheck.h"
#include "parity.h"

/* ---- finite differences ---------------------------------------------------- */

typedef struct {
    qkv_nn_rnn m;
    qkv_tensor *x, *h0, *c0;
    const int64_t *lengths;
} rnn_case;

/* out = cat(output, h_n, c_n) flattened, so one sum(R * out) covers all. */
static qkv_status fwd_all(qkv_ctx *c, void *user, qkv_tensor **out)
{
    rnn_case *k = user;
    qkv_tensor *y, *hn, *cn = NULL;
    if (k->m.mode == QKV_RNN_LSTM)
        TRY(qkv_nn_lstm_forward(c, &k->m, k->x, k->h0, k->c0, k->lengths, &y, &hn, &cn));
    else
        TRY(qkv_nn_gru_forward(c, &k->m, k->x, k->h0, k->lengths, &y, &hn));
    qkv_tensor *parts[3] = {y, hn, cn}, *acc = NULL;
    for (int i = 0; i < 3 && parts[i]; i++) {
        qkv_tensor *f;
        int64_t n = qkv_tensor_numel(parts[i]);
        TRY(qkv_reshape(c, parts[i], 1, &n, &f));
        if (acc) TRY(qkv_cat(c, acc, f, 0, &acc));
        else acc = f;
    }
    *out = acc;
    return QKV_OK;
}

/* A GRU or LSTM with options o in a fresh store *p, and a fresh arena *a
 * for its inputs; r seeded with seed. */
static void make_rnn(rnn_case *k, qkv_rnn_mode mode, const qkv_rnn_opts *o, uint64_t seed,
                     qkv_arena **a, qkv_params **p, qkv_rng *r)
{
    qkv_rng_seed(r, seed);
    CHECK_OK(qkv_arena_new(a, 0));
    CHECK_OK(qkv_params_new(p));
    memset(k, 0, sizeof *k);
    CHECK_OK(mode == QKV_RNN_LSTM ? qkv_nn_lstm_init(&k->m, o, *p, "", r) : qkv_nn_gru_init(&k->m, o, *p, "", r));
}

static void free_rnn(rnn_case *k, qkv_arena *a, qkv_params *p)
{
    qkv_nn_gru_free(&k->m);
    qkv_params_free(p);
    qkv_arena_free(a);
}

static void test_gradcheck(qkv_rnn_mode mode, int bidirectional, int batch_first, int bias)
{
    qkv_arena *a;
    qkv_params *p;
    qkv_rng r;
    rnn_case k;
    qkv_rnn_opts o = qkv_rnn_opts_default(3, 3);
    o.num_layers = 2, o.bidirectional = bidirectional, o.batch_first = batch_first, o.bias = bias;
    make_rnn(&k, mode, &o, 5 + mode, &a, &p, &r);
    int64_t L = 4, N = 3, D = bidirectional ? 2 : 1;
    int64_t xs[3] = {batch_first ? N : L, batch_first ? L : N, 3}, hs[3] = {D * 2, N, 3};
    static const int64_t lengths[3] = {4, 2, 1};
    k.x = h_input(a, &r, 3, xs, 1.0f);
    k.h0 = h_input(a, &r, 3, hs, 0.5f);
    k.c0 = mode == QKV_RNN_LSTM ? h_input(a, &r, 3, hs, 0.5f) : NULL;
    k.lengths = lengths;
    qkv_tensor *in[32];
    int n = 0;
    in[n++] = k.x;
    in[n++] = k.h0;
    if (k.c0) in[n++] = k.c0;
    for (int i = 0; i < qkv_params_count(p); i++) in[n++] = qkv_params_at(p, i);
    for (int ref = 0; ref < 2; ref++) {
        qkv_set_reference(ref);
        double e = h_gradcheck(fwd_all, &k, in, n, 3e-2f, 1e-2);
        CHECK(e < 5e-3, "gradcheck %s bidirectional %d batch_first %d bias %d reference %d: worst %.3g",
              mode == QKV_RNN_LSTM ? "LSTM" : "GRU", bidirectional, batch_first, bias, ref, e);
        printf("gradcheck %s (2 layers, lengths, bidirectional %d, batch_first %d, bias %d)%s: worst %.3g\n",
               mode == QKV_RNN_LSTM ? "LSTM" : "GRU", bidirectional, batch_first, bias,
               ref ? " reference" : "", e);
    }
    qkv_set_reference(0);
    free_rnn(&k, a, p);
}

/* ---- fast against reference ------------------------------------------------ */

/* Runs the module and a backward of sum(R * cat(output, h_n, c_n)); copies
 * the output then every gradient (x, h0, c0, parameters) into buf. */
static int64_t run_collect(rnn_case *k, qkv_params *p, float *buf)
{
    return h_collect(fwd_all, k, (qkv_tensor *[]){k->x, k->h0, k->c0}, 3, p, 9, buf);
}

static void test_fast_vs_ref(void)
{
    double worst = 0;
    for (int trial = 0; trial < 8; trial++) {
        qkv_arena *a;
        qkv_params *p;
        qkv_rng r;
        rnn_case k;
        qkv_rnn_mode mode = trial % 2 ? QKV_RNN_LSTM : QKV_RNN_GRU;
        int64_t In = 7 + trial, H = 16 + 3 * trial, L = 9, N = 5, D = trial & 2 ? 2 : 1;
        qkv_rnn_opts o = qkv_rnn_opts_default(In, H);
        o.num_layers = 1 + (trial & 4 ? 1 : 0), o.bidirectional = D == 2, o.bias = trial != 6;
        make_rnn(&k, mode, &o, 100 + trial, &a, &p, &r);
        int64_t xs[3] = {L, N, In}, hs[3] = {D * o.num_layers, N, H};
        static const int64_t lengths[5] = {9, 3, 7, 1, 9};
        k.x = h_input(a, &r, 3, xs, 1.0f);
        k.h0 = trial % 3 ? h_input(a, &r, 3, hs, 0.5f) : NULL;
        k.c0 = mode == QKV_RNN_LSTM ? h_input(a, &r, 3, hs, 0.5f) : NULL;
        k.lengths = trial % 4 == 1 ? NULL : lengths;
        size_t cap = 1 << 20;
        float *f = malloc(cap * sizeof *f), *g = malloc(cap * sizeof *g);
        qkv_set_reference(0);
        int64_t nf = run_collect(&k, p, f);
        qkv_set_reference(1);
        int64_t ng = run_collect(&k, p, g);
        qkv_set_reference(0);
        CHECK(nf == ng && nf > 0, "fast vs reference: %lld vs %lld values", (long long)nf, (long long)ng);
        double e = h_rel_err(f, g, nf);
        CHECK(e <= 1e-5, "fast vs reference trial %d: relative error %.3g", trial, e);
        worst = fmax(worst, isnan(e) ? INFINITY : e);
        free(f), free(g);
        free_rnn(&k, a, p);
    }
    printf("fast vs reference: 8 configurations, worst relative error %.3g\n", worst);
}

/* ---- PyTorch parity ---------------------------------------------------------- */

static double worst_out, worst_grad;
static int n_cases, n_ran;

static void parity_case(const char *path, const char *file)
{
    h_case k;
    if (!h_case_begin(path, &k)) return;
    n_cases++;
    const char *mode_s = qkv_safetensors_meta(k.st, "mode");
    qkv_rnn_mode mode = mode_s && !strcmp(mode_s, "lstm") ? QKV_RNN_LSTM : QKV_RNN_GRU;
    qkv_rnn_opts o = qkv_rnn_opts_default(h_meta_int(k.st, "input_size"), h_meta_int(k.st, "hidden_size"));
    o.num_layers = h_meta_int(k.st, "num_layers");
    o.bias = (int)h_meta_int(k.st, "bias");
    o.batch_first = (int)h_meta_int(k.st, "batch_first");
    o.bidirectional = (int)h_meta_int(k.st, "bidirectional");
    o.dropout = (float)h_meta_float(k.st, "dropout");
    qkv_nn_rnn m;
    CHECK_OK(mode == QKV_RNN_LSTM ? qkv_nn_lstm_init(&m, &o, k.p, "", &k.r) : qkv_nn_gru_init(&m, &o, k.p, "", &k.r));
    CHECK_OK(qkv_params_load_state_dict(k.p, k.st, "rnn.", 1, NULL));
    qkv_tensor *x = h_load(k.st, k.a, "x", 1), *h0 = h_load(k.st, k.a, "h0", 1), *c0 = h_load(k.st, k.a, "c0", 1);
    qkv_tensor *len = h_load(k.st, k.a, "lengths", 0);
    qkv_tensor *dout = h_load(k.st, k.a, "dout", 0), *dhn = h_load(k.st, k.a, "dh_n", 0), *dcn = h_load(k.st, k.a, "dc_n", 0);
    for (int ref = 0; ref < 2 && x && dout && dhn; ref++) {
        qkv_set_reference(ref);
        qkv_ctx *c;
        CHECK_OK(qkv_ctx_new(&c));
        qkv_params_zero_grad(k.p);
        qkv_tensor *ins[3] = {x, h0, c0};
        for (int i = 0; i < 3; i++)
            if (ins[i]) memset(ins[i]->grad, 0, (size_t)qkv_tensor_numel(ins[i]) * sizeof(float));
        qkv_tensor *y = NULL, *hn = NULL, *cn = NULL;
        const int64_t *lengths = len ? len->idx : NULL;
        qkv_status s = mode == QKV_RNN_LSTM ? qkv_nn_lstm_forward(c, &m, x, h0, c0, lengths, &y, &hn, &cn)
                                            : qkv_nn_gru_forward(c, &m, x, h0, lengths, &y, &hn);
        CHECK(s == QKV_OK, "%s: forward: %s", file, qkv_last_error());
        qkv_tensor *want = h_load(k.st, k.a, "output", 0);
        if (s == QKV_OK && want) {
            char b1[64], b2[64];
            int same = y->ndim == want->ndim && !memcmp(y->shape, want->shape, sizeof(int64_t) * (size_t)y->ndim);
            CHECK(same, "%s: output %s, PyTorch %s", file, qkv_shape_str(y, b1, 64), qkv_shape_str(want, b2, 64));
            if (same) {
                n_ran++;
                h_compare(file, "output", y->data, want, 1e-5, &worst_out);
                h_compare(file, "h_n", hn->data, h_load(k.st, k.a, "h_n", 0), 1e-5, &worst_out);
                if (cn) h_compare(file, "c_n", cn->data, h_load(k.st, k.a, "c_n", 0), 1e-5, &worst_out);
                /* d(sum(output dout) + sum(h_n dh_n) + sum(c_n dc_n)): seed the
                 * states' gradients, then backward from output. */
                float *gh = qkv_tensor_grad(qkv_ctx_arena(c), hn);
                memcpy(gh, dhn->data, (size_t)qkv_tensor_numel(hn) * sizeof(float));
                if (cn && dcn) {
                    float *gc = qkv_tensor_grad(qkv_ctx_arena(c), cn);
                    memcpy(gc, dcn->data, (size_t)qkv_tensor_numel(cn) * sizeof(float));
                }
                CHECK_OK(qkv_backward(c, y, dout->data));
                h_compare_grad(k.st, k.a, file, "grad.", "x", x, &worst_grad);
                if (h0) h_compare_grad(k.st, k.a, file, "grad.", "h0", h0, &worst_grad);
                if (c0) h_compare_grad(k.st, k.a, file, "grad.", "c0", c0, &worst_grad);
                h_compare_grads(k.st, k.a, file, "grad.", k.p, &worst_grad);
            }
        }
        qkv_ctx_free(c);
    }
    qkv_set_reference(0);
    qkv_nn_gru_free(&m);
    h_case_end(&k);
}

/* ---- bad input --------------------------------------------------------------- */

static void test_errors(void)
{
    h_env e;
    h_env_begin(&e, 3);
    qkv_nn_gru g;
    qkv_nn_lstm l;
    memset(&g, 0, sizeof g);
    qkv_rnn_opts o = qkv_rnn_opts_default(4, 0);
    CHECK_ERR(qkv_nn_gru_init(&g, &o, e.p, "", &e.r), QKV_ERR_ARG, "nn_gru_init: input_size 4, hidden_size 0");
    o = qkv_rnn_opts_default(4, 3);
    o.dropout = 1.5f;
    CHECK_ERR(qkv_nn_lstm_init(&l, &o, e.p, "", &e.r), QKV_ERR_ARG, "nn_lstm_init: dropout 1.5 is not in [0,1]");
    o.dropout = 0;
    CHECK_ERR(qkv_nn_gru_init(&g, &o, e.p, "", NULL), QKV_ERR_ARG, "nn_gru_init: rng is NULL");
    CHECK(qkv_params_count(e.p) == 0, "a failed _init added parameters");
    CHECK_ERR(qkv_nn_gru_init(&g, NULL, e.p, "", &e.r), QKV_ERR_ARG, "nn_gru_init: opts is NULL");
    qkv_tensor *y = NULL, *hn;
    CHECK_ERR(qkv_nn_gru_forward(e.c, &g, NULL, NULL, NULL, &y, &hn), QKV_ERR_STATE, "not initialised");
    o.num_layers = 2;
    CHECK_OK(qkv_nn_gru_init(&g, &o, e.p, "enc.", &e.r));
    CHECK(qkv_params_find(e.p, "enc.weight_hh_l1") != NULL, "weight_hh_l1 missing");
    CHECK(qkv_params_count(e.p) == 8, "GRU(4,3,num_layers=2) has %d parameters, expected 8", qkv_params_count(e.p));
    o.bidirectional = 1;
    o.num_layers = 1;
    CHECK_OK(qkv_nn_lstm_init(&l, &o, e.p, "dec.", &e.r));
    qkv_tensor *w = qkv_params_find(e.p, "dec.weight_ih_l0_reverse");
    CHECK(w && w->shape[0] == 12 && w->shape[1] == 4, "LSTM weight_ih_l0_reverse missing or not (12,4)");
    float bound = 1.0f / sqrtf(3.0f), mx = 0;
    for (int64_t i = 0; w && i < 48; i++) mx = fmaxf(mx, fabsf(w->data[i]));
    CHECK(mx <= bound && mx > 0.5f * bound, "init: max |w| %g, bound %g", mx, bound);
    qkv_tensor *x, *x2, *h0;
    CHECK_OK(qkv_tensor_new(e.a, QKV_F32, 3, (int64_t[]){5, 2, 4}, &x));
    CHECK_OK(qkv_tensor_new(e.a, QKV_F32, 3, (int64_t[]){5, 2, 5}, &x2));
    CHECK_OK(qkv_tensor_new(e.a, QKV_F32, 3, (int64_t[]){1, 2, 3}, &h0));
    CHECK_ERR(qkv_nn_gru_forward(e.c, &g, x2, NULL, NULL, &y, &hn), QKV_ERR_SHAPE,
              "nn_gru_forward: x (5,2,5) last dim does not match input_size 4");
    CHECK(y == NULL, "y set on failure");
    CHECK_ERR(qkv_nn_gru_forward(e.c, &g, x, h0, NULL, &y, &hn), QKV_ERR_SHAPE,
              "nn_gru_forward: h0 (1,2,3), expected (D*num_layers,N,H) = (2,2,3)");
    CHECK_ERR(qkv_nn_gru_forward(e.c, &l, x, NULL, NULL, &y, &hn), QKV_ERR_ARG, "nn_gru_forward: module is an LSTM");
    int64_t bad[2] = {5, 6};
    CHECK_ERR(qkv_nn_gru_forward(e.c, &g, x, NULL, bad, &y, &hn), QKV_ERR_ARG,
              "nn_gru_forward: lengths[1] = 6 is not in [1,5] (L)");
    bad[1] = 0;
    CHECK_ERR(qkv_nn_lstm_forward(e.c, &l, x, NULL, NULL, bad, &y, &hn, NULL), QKV_ERR_ARG,
              "nn_lstm_forward: lengths[1] = 0 is not in [1,5] (L)");
    CHECK_ERR(qkv_nn_lstm_forward(e.c, &l, x, NULL, h0, NULL, &y, &hn, NULL), QKV_ERR_SHAPE,
              "nn_lstm_forward: c0 (1,2,3), expected (D*num_layers,N,H) = (2,2,3)");
    qkv_tensor *x4;
    CHECK_OK(qkv_tensor_new(e.a, QKV_F32, 4, (int64_t[]){1, 5, 2, 4}, &x4));
    CHECK_ERR(qkv_nn_gru_forward(e.c, &g, x4, NULL, NULL, &y, &hn), QKV_ERR_SHAPE, "has 4 dims, expected 3");
    CHECK_ERR(qkv_nn_gru_forward(e.c, &g, x, NULL, NULL, NULL, &hn), QKV_ERR_ARG, "nn_gru_forward: output is NULL");
    /* The module in a Sequential: output only; h_n may be NULL. */
    qkv_tensor *y2 = NULL;
    CHECK_OK(qkv_module_forward(e.c, &l.base, x, &y));
    CHECK_OK(qkv_nn_lstm_forward(e.c, &l, x, NULL, NULL, NULL, &y2, NULL, NULL));
    CHECK(y && y2 && y->shape[2] == 6 && !memcmp(y->data, y2->data, 60 * sizeof(float)),
          "module_forward differs from nn_lstm_forward");
    qkv_nn_gru_free(&g);
    qkv_nn_lstm_free(&l);
    h_env_end(&e);
}

/* Dropout between layers in training: the same masks on the fast and the
 * reference paths; eval mode has no dropout at all. */
static void test_dropout(void)
{
    qkv_params *p;
    qkv_arena *a;
    qkv_rng r;
    rnn_case k;
    qkv_rnn_opts o = qkv_rnn_opts_default(3, 8);
    o.num_layers = 2;
    o.dropout = 0.5f;
    make_rnn(&k, QKV_RNN_GRU, &o, 4, &a, &p, &r);
    qkv_tensor *x = h_input(a, &r, 3, (int64_t[]){6, 2, 3}, 1.0f);
    float out[3][96];
    for (int i = 0; i < 3; i++) {
        qkv_ctx *c;
        CHECK_OK(qkv_ctx_new(&c));
        qkv_ctx_set_seed(c, 11);
        qkv_ctx_set_training(c, i < 2);
        qkv_set_reference(i == 1);
        qkv_tensor *y = NULL;
        CHECK_OK(qkv_nn_gru_forward(c, &k.m, x, NULL, NULL, &y, NULL));
        if (y) memcpy(out[i], y->data, sizeof out[i]);
        qkv_ctx_free(c);
    }
    qkv_set_reference(0);
    CHECK(h_rel_err(out[0], out[1], 96) <= 1e-5, "dropout: fast and reference differ");
    CHECK(h_rel_err(out[0], out[2], 96) > 1e-3, "dropout: training and eval give the same output");
    free_rnn(&k, a, p);
}

/* The masks form of lengths: a right-padded mask gives the lengths that
 * give the same outputs; other masks are errors naming the row. */
static void test_masks(void)
{
    qkv_arena *a;
    CHECK_OK(qkv_arena_new(&a, 0));
    qkv_tensor *m;
    CHECK_OK(qkv_tensor_new(a, QKV_BOOL, 2, (int64_t[]){3, 5}, &m));
    static const uint8_t good[15] = {0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1};
    memcpy(m->mask, good, 15);
    int64_t len[3] = {-1, -1, -1};
    CHECK_OK(qkv_rnn_lengths_from_mask(m, len));
    CHECK(len[0] == 5 && len[1] == 2 && len[2] == 3, "lengths %lld %lld %lld, expected 5 2 3",
          (long long)len[0], (long long)len[1], (long long)len[2]);
    m->mask[10] = 1; // row 2: all padding
    CHECK_ERR(qkv_rnn_lengths_from_mask(m, len), QKV_ERR_ARG, "row 2 starts with padding");
    m->mask[10] = 0, m->mask[12] = 1, m->mask[13] = 0; // row 2: a gap
    CHECK_ERR(qkv_rnn_lengths_from_mask(m, len), QKV_ERR_ARG,
              "row 2 has a real step 3 after padding at 2");
    CHECK_ERR(qkv_rnn_lengths_from_mask(NULL, len), QKV_ERR_ARG, "padding_mask is NULL");
    CHECK_ERR(qkv_rnn_lengths_from_mask(m, NULL), QKV_ERR_ARG, "lengths is NULL");
    qkv_tensor *f;
    CHECK_OK(qkv_tensor_new(a, QKV_F32, 2, (int64_t[]){3, 5}, &f));
    CHECK_ERR(qkv_rnn_lengths_from_mask(f, len), QKV_ERR_ARG, "must be a BOOL (N,L) tensor");
    qkv_arena_free(a);
}

int main(void)
{
    test_errors();
    test_masks();
    test_dropout();
    test_gradcheck(QKV_RNN_GRU, 1, 0, 1);
    test_gradcheck(QKV_RNN_LSTM, 1, 1, 1);
    test_gradcheck(QKV_RNN_GRU, 0, 1, 0);
    test_gradcheck(QKV_RNN_LSTM, 0, 0, 0);
    test_fast_vs_ref();
    int n = h_oracle_cases("rnn_oracle.py", 40, parity_case);
    CHECK(n == 40 && n_ran == 80, "parity: %d cases, %d runs compared", n, n_ran);
    printf("parity: %d cases (fast and reference): worst output error %.3g, worst gradient error %.3g\n",
           n_cases, worst_out, worst_grad);
    return h_finish("test_rnn");
}
