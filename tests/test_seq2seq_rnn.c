/* test_seq2seq_rnn.c: the recurrent encoder-decoder with attention
 * (src/models/seq2seq_rnn*.c, src/decode/generate_rnn.c): finite-difference
 * gradients of every parameter for every attention kind (GRU and LSTM,
 * uni- and bidirectional), PyTorch parity of logits, attention weights,
 * loss and gradients (tools/seq2seq_rnn_oracle.py, which also checks its
 * location decoder against the tutorial's AttnDecoderRNN), the attention
 * weights' sums and zeros on padding, the full and the step-by-step
 * decoders agreeing, greedy decoding against the argmax-fed forward, a
 * reversal task learnt in a few hundred steps, bad input. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <time.h>
#include <unistd.h>
#include "gradcheck.h"
#include "kernels/rows.h"
#include "parity.h"

static const qkv_rnn_attention KINDS[] = {
    QKV_RNN_ATTN_DOT,      QKV_RNN_ATTN_SCALED_DOT, QKV_RNN_ATTN_COSINE,   QKV_RNN_ATTN_GENERAL,
    QKV_RNN_ATTN_REDUCED_RANK, QKV_RNN_ATTN_ADDITIVE, QKV_RNN_ATTN_LOCATION, QKV_RNN_ATTN_NONE};
#define N_KINDS 8

static int needs_same_dims(qkv_rnn_attention a) { return a <= QKV_RNN_ATTN_COSINE; }

/* A model and its inputs: src (N,S) with lengths, tgt_in (N,T). */
typedef struct {
    qkv_seq2seq_rnn m;
    qkv_params *p;
    qkv_arena *a;
    qkv_tensor *src, *tgt_in, *tgt_out;
    int64_t lengths[8];
    qkv_seq2seq_rnn_args args;
} s2r_case;

/* Fills an I64 (N,T) tensor with ids in [lo,hi). */
static qkv_tensor *rand_ids(qkv_arena *a, qkv_rng *r, int64_t N, int64_t T, int64_t lo, int64_t hi)
{
    qkv_tensor *t = NULL;
    CHECK_OK(qkv_tensor_new(a, QKV_I64, 2, (int64_t[]){N, T}, &t));
    for (int64_t i = 0; t && i < N * T; i++) t->idx[i] = lo + (int64_t)(qkv_rng_next(r) % (uint64_t)(hi - lo));
    return t;
}

static void free_case(s2r_case *k)
{
    qkv_seq2seq_rnn_free(&k->m);
    qkv_params_free(k->p);
    qkv_arena_free(k->a);
}

/* ---- finite differences -------------------------------------------------- */

/* out = cat(logits, weights) flattened. */
static qkv_status fwd_all(qkv_ctx *c, void *user, qkv_tensor **out)
{
    s2r_case *k = user;
    qkv_tensor *lg, *w, *f1, *f2;
    TRY(qkv_seq2seq_rnn_forward(c, &k->m, k->src, k->lengths, k->tgt_in, &k->args, &lg, &w));
    int64_t n1 = qkv_tensor_numel(lg);
    TRY(qkv_reshape(c, lg, 1, &n1, &f1));
    if (!w) return *out = f1, QKV_OK;
    int64_t n2 = qkv_tensor_numel(w);
    TRY(qkv_reshape(c, w, 1, &n2, &f2));
    return qkv_cat(c, f1, f2, 0, out);
}

static void make_case(s2r_case *k, const qkv_seq2seq_rnn_opts *o, uint64_t seed, int64_t N,
                      int64_t S, int64_t T)
{
    qkv_rng r;
    qkv_rng_seed(&r, seed);
    memset(k, 0, sizeof *k);
    CHECK_OK(qkv_arena_new(&k->a, 0));
    CHECK_OK(qkv_params_new(&k->p));
    CHECK_OK(qkv_seq2seq_rnn_init(&k->m, o, k->p, "", &r));
    k->src = rand_ids(k->a, &r, N, S, 1, o->src_vocab);
    k->tgt_in = rand_ids(k->a, &r, N, T, 1, o->tgt_vocab);
    k->tgt_out = rand_ids(k->a, &r, N, T, 1, o->tgt_vocab);
    for (int64_t n = 0; n < N; n++) k->lengths[n] = n == 0 ? S : 1 + n % S;
    k->args = qkv_seq2seq_rnn_args_default();
}

static void test_gradcheck(void)
{
    double worst_all = 0;
    int ran = 0;
    for (int ki = 0; ki < N_KINDS; ki++)
        for (int mode = 0; mode < 2; mode++)
            for (int bi = 0; bi < 2; bi++) {
                qkv_rnn_attention kind = KINDS[ki];
                if (bi && needs_same_dims(kind)) continue;
                qkv_seq2seq_rnn_opts o = qkv_seq2seq_rnn_opts_default(5, 4, 2, 3);
                o.attention = kind, o.rnn = mode ? QKV_RNN_LSTM : QKV_RNN_GRU, o.bidirectional = bi;
                o.attn_rank = 2, o.max_length = 4;
                o.num_layers = 1 + (ki + mode) % 2;
                s2r_case k;
                make_case(&k, &o, 10 + ki * 4 + mode * 2 + bi, 2, 3, 3);
                k.lengths[1] = 2;
                qkv_tensor *in[64];
                int n = 0;
                for (int i = 0; i < qkv_params_count(k.p) && n < 64; i++) in[n++] = qkv_params_at(k.p, i);
                /* Location: z = relu(attn_combine(..)) has kinks that finite
                 * differences of float32 forwards cross; a bias of 2 keeps z
                 * positive here (the PyTorch parity below covers both sides). */
                if (kind == QKV_RNN_ATTN_LOCATION) CHECK_OK(qkv_init_constant(k.m.attn_combine.bias, 2.0f));
                double e = h_gradcheck(fwd_all, &k, in, n, 2e-2f, 1e-2);
                CHECK(e < 5e-3, "gradcheck %s %s bidirectional %d: worst %.3g", qkv_rnn_attention_name(kind),
                      mode ? "LSTM" : "GRU", bi, e);
                worst_all = fmax(worst_all, e);
                ran++;
                free_case(&k);
            }
    printf("gradcheck: %d configurations (8 attention kinds x GRU/LSTM x uni/bi), worst %.3g\n", ran,
           worst_all);
}

/* ---- attention weights, full against stepwise ------------------------------ */

/* The rows of weights (N,T,S) sum to 1 over each row's first lengths[n]
 * positions and are 0 after; returns the worst deviation. */
static double weights_dev(const qkv_tensor *w, const int64_t *lengths)
{
    int64_t N = w->shape[0], T = w->shape[1], S = w->shape[2];
    double worst = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t t = 0; t < T; t++) {
            double sum = 0;
            for (int64_t j = 0; j < S; j++) {
                float v = w->data[(n * T + t) * S + j];
                if (j < lengths[n]) sum += v;
                else worst = fmax(worst, fabs(v) + (v != 0 ? 1 : 0)); /* exactly 0 wanted */
                if (v < 0) worst = fmax(worst, 1);
            }
            worst = fmax(worst, fabs(sum - 1));
        }
    return worst;
}

static void test_weights_and_paths(void)
{
    double worst_w = 0, worst_path = 0;
    for (int ki = 0; ki < N_KINDS; ki++) {
        qkv_seq2seq_rnn_opts o = qkv_seq2seq_rnn_opts_default(9, 8, 6, 7);
        o.attention = KINDS[ki], o.max_length = 6, o.rnn = ki % 2 ? QKV_RNN_LSTM : QKV_RNN_GRU;
        o.bidirectional = !needs_same_dims(KINDS[ki]) && ki % 3 == 0;
        s2r_case k;
        make_case(&k, &o, 50 + ki, 4, 6, 5);
        int64_t len[4] = {6, 2, 4, 1};
        memcpy(k.lengths, len, sizeof len);
        qkv_ctx *c;
        CHECK_OK(qkv_ctx_new(&c));
        qkv_tensor *lg[2] = {NULL, NULL}, *w[2] = {NULL, NULL};
        for (int sw = 0; sw < 2; sw++) {
            k.args.stepwise = sw;
            CHECK_OK(qkv_seq2seq_rnn_forward(c, &k.m, k.src, k.lengths, k.tgt_in, &k.args, &lg[sw], &w[sw]));
        }
        if (lg[0] && lg[1]) {
            CHECK(lg[0]->shape[0] == 4 && lg[0]->shape[1] == 5 && lg[0]->shape[2] == 8, "logits shape");
            double e = h_rel_err(lg[1]->data, lg[0]->data, qkv_tensor_numel(lg[0]));
            CHECK(e <= 1e-5, "%s: stepwise and full logits differ by %.3g", qkv_rnn_attention_name(o.attention), e);
            worst_path = fmax(worst_path, e);
        }
        if (KINDS[ki] == QKV_RNN_ATTN_NONE) {
            CHECK(w[0] == NULL && w[1] == NULL, "none: weights given");
        } else if (w[0] && w[1]) {
            CHECK(w[0]->shape[0] == 4 && w[0]->shape[1] == 5 && w[0]->shape[2] == 6, "weights shape");
            double d = fmax(weights_dev(w[0], len), weights_dev(w[1], len));
            CHECK(d <= 1e-5, "%s: weights off by %.3g (sum 1 on the source, 0 on padding)",
                  qkv_rnn_attention_name(o.attention), d);
            worst_w = fmax(worst_w, d);
        }
        qkv_ctx_free(c);
        free_case(&k);
    }
    printf("attention weights: worst |sum - 1| or padding weight %.3g; full vs stepwise decoder %.3g\n",
           worst_w, worst_path);
}

/* ---- PyTorch parity -------------------------------------------------------- */

static double worst_out, worst_grad;
static int n_cases, n_runs;

static void parity_case(const char *path, const char *file)
{
    h_case k;
    if (!h_case_begin(path, &k)) return;
    n_cases++;
    qkv_seq2seq_rnn_opts o = qkv_seq2seq_rnn_opts_default(h_meta_int(k.st, "src_vocab"), h_meta_int(k.st, "tgt_vocab"),
                                                          h_meta_int(k.st, "embed_dim"), h_meta_int(k.st, "hidden_size"));
    const char *an = qkv_safetensors_meta(k.st, "attention"), *rn = qkv_safetensors_meta(k.st, "rnn");
    CHECK_OK(qkv_rnn_attention_parse(an ? an : "?", &o.attention));
    o.rnn = rn && !strcmp(rn, "lstm") ? QKV_RNN_LSTM : QKV_RNN_GRU;
    o.bidirectional = (int)h_meta_int(k.st, "bidirectional");
    o.num_layers = h_meta_int(k.st, "num_layers");
    o.attn_rank = h_meta_int(k.st, "attn_rank");
    o.max_length = h_meta_int(k.st, "max_length");
    o.padding_idx = 0;
    int forcing = (int)h_meta_int(k.st, "forcing");
    qkv_seq2seq_rnn m;
    CHECK_OK(qkv_seq2seq_rnn_init(&m, &o, k.p, "", &k.r));
    CHECK_OK(qkv_params_load_state_dict(k.p, k.st, "model.", 1, NULL));
    qkv_tensor *src = h_load(k.st, k.a, "src", 0), *len = h_load(k.st, k.a, "src_lengths", 0);
    qkv_tensor *tin = h_load(k.st, k.a, "tgt_in", 0), *tout = h_load(k.st, k.a, "tgt_out", 0);
    qkv_tensor *want_lg = h_load(k.st, k.a, "logits", 0), *want_w = h_load(k.st, k.a, "weights", 0);
    qkv_tensor *want_loss = h_load(k.st, k.a, "loss", 0);
    /* runs: fast full, fast stepwise, reference full */
    for (int run = 0; run < 3 && src && len && tin && tout && want_lg && want_loss; run++) {
        qkv_set_reference(run == 2);
        qkv_ctx *c;
        CHECK_OK(qkv_ctx_new(&c));
        qkv_params_zero_grad(k.p);
        qkv_seq2seq_rnn_args args = qkv_seq2seq_rnn_args_default();
        args.teacher_forcing = forcing ? 1.0f : 0.0f;
        args.stepwise = run == 1;
        qkv_tensor *lg = NULL, *w = NULL, *loss = NULL;
        qkv_status s = qkv_seq2seq_rnn_forward(c, &m, src, len->idx, tin, &args, &lg, &w);
        CHECK(s == QKV_OK, "%s: forward: %s", file, qkv_last_error());
        if (s == QKV_OK) {
            n_runs++;
            h_compare(file, "logits", lg->data, want_lg, 1e-5, &worst_out);
            CHECK((w == NULL) == (want_w == NULL), "%s: weights given %d, PyTorch %d", file, w != NULL, want_w != NULL);
            if (w && want_w) {
                h_compare(file, "weights", w->data, want_w, 1e-5, &worst_out);
                CHECK(weights_dev(w, len->idx) <= 1e-5, "%s: weights do not sum to 1 / are not 0 on padding", file);
            }
            CHECK_OK(qkv_seq2seq_rnn_loss(c, lg, tout, 0, &loss));
            if (loss) {
                h_compare(file, "loss", loss->data, want_loss, 1e-5, &worst_out);
                CHECK_OK(qkv_backward(c, loss, NULL));
                for (int i = 0; i < qkv_params_count(k.p); i++) {
                    qkv_tensor *t = qkv_params_at(k.p, i);
                    char g[128];
                    snprintf(g, sizeof g, "grad.%s", t->name);
                    h_compare(file, g, t->grad, h_load(k.st, k.a, g, 0), 1e-4, &worst_grad);
                }
            }
        }
        qkv_ctx_free(c);
    }
    qkv_set_reference(0);
    qkv_seq2seq_rnn_free(&m);
    h_case_end(&k);
}

/* ---- decoding ----------------------------------------------------------------- */

/* Greedy decoding equals the forward fed its own argmax (teacher_forcing
 * 0), beam search with one beam equals greedy, and wider beams score at
 * least as well (length penalty 0: the sum of log-probs). */
static void test_decoding(void)
{
    for (int ki = 0; ki < N_KINDS; ki++) {
        qkv_seq2seq_rnn_opts o = qkv_seq2seq_rnn_opts_default(9, 7, 5, 6);
        o.attention = KINDS[ki], o.max_length = 6, o.rnn = ki % 2 ? QKV_RNN_GRU : QKV_RNN_LSTM;
        o.bidirectional = !needs_same_dims(KINDS[ki]);
        o.num_layers = 1 + ki % 2;
        s2r_case k;
        make_case(&k, &o, 70 + ki, 3, 5, 6);
        int64_t len[3] = {5, 3, 1};
        qkv_ctx *c;
        CHECK_OK(qkv_ctx_new(&c));
        qkv_generate_opts go = qkv_generate_opts_default();
        go.max_new_tokens = 6;
        int64_t tok[3][18], glen[3], blen[3];
        float gsc[3], bsc[3];
        CHECK_OK(qkv_seq2seq_rnn_generate(c, &k.m, k.src, len, 1, &go, tok[0], glen, gsc));
        /* the forward fed its own argmax from bos (id 1) */
        qkv_ctx_reset(c);
        for (int64_t i = 0; i < 3 * 6; i++) k.tgt_in->idx[i] = 1;
        k.args.teacher_forcing = 0;
        qkv_tensor *lg = NULL;
        CHECK_OK(qkv_seq2seq_rnn_forward(c, &k.m, k.src, len, k.tgt_in, &k.args, &lg, NULL));
        int same = lg != NULL;
        for (int64_t n = 0; lg && n < 3; n++)
            for (int64_t t = 0; t < 6; t++) {
                const float *row = lg->data + (n * 6 + t) * 7;
                int64_t best = 0;
                for (int64_t v = 1; v < 7; v++) best = row[v] > row[best] ? v : best;
                same &= glen[n] == 6 && tok[0][n * 6 + t] == best;
            }
        CHECK(same, "%s: greedy decoding differs from the argmax-fed forward", qkv_rnn_attention_name(o.attention));
        go.kind = QKV_DECODE_BEAM;
        go.num_beams = 1;
        go.length_penalty = 0;
        CHECK_OK(qkv_seq2seq_rnn_generate(c, &k.m, k.src, len, 1, &go, tok[1], blen, bsc));
        CHECK(!memcmp(tok[0], tok[1], sizeof tok[0]) && fabsf(bsc[0] - gsc[0]) < 1e-4f,
              "%s: one beam differs from greedy", qkv_rnn_attention_name(o.attention));
        go.num_beams = 3;
        CHECK_OK(qkv_seq2seq_rnn_generate(c, &k.m, k.src, len, 1, &go, tok[2], blen, bsc));
        for (int n = 0; n < 3; n++)
            CHECK(bsc[n] >= gsc[n] - 1e-4f, "%s: beam score %g below greedy %g", qkv_rnn_attention_name(o.attention),
                  bsc[n], gsc[n]);
        qkv_ctx_free(c);
        free_case(&k);
    }
}

/* ---- a task learnt ------------------------------------------------------------ */

/* Reversal: sources of 3-6 symbols (ids 3..9), targets the same reversed
 * then <eos> (2); <bos> = 1, padding 0. Trains a small GRU with additive
 * attention for a few hundred Adam steps, then decodes unseen sources
 * greedily and counts exact reversals. */
enum { PAD = 0, BOS = 1, EOS = 2, VOC = 10, MAXS = 6 };

static void make_batch(qkv_rng *r, int64_t N, int64_t *src, int64_t *lens, int64_t *tin, int64_t *tout)
{
    for (int64_t n = 0; n < N; n++) {
        int64_t L = 3 + (int64_t)(qkv_rng_next(r) % 4);
        lens[n] = L;
        for (int64_t j = 0; j < MAXS; j++) src[n * MAXS + j] = j < L ? 3 + (int64_t)(qkv_rng_next(r) % 7) : PAD;
        for (int64_t t = 0; t <= MAXS; t++) {
            int64_t y = t < L ? src[n * MAXS + L - 1 - t] : t == L ? EOS : PAD;
            tout[n * (MAXS + 1) + t] = y;
            tin[n * (MAXS + 1) + t] = t == 0 ? BOS : tout[n * (MAXS + 1) + t - 1];
            if (t > L) tin[n * (MAXS + 1) + t] = PAD;
        }
    }
}

static double train_reverse(qkv_rnn_attention kind, int steps, double *secs)
{
    enum { N = 32, T = MAXS + 1 };
    qkv_params *p;
    qkv_rng r;
    qkv_rng_seed(&r, 2024);
    CHECK_OK(qkv_params_new(&p));
    qkv_seq2seq_rnn_opts o = qkv_seq2seq_rnn_opts_default(VOC, VOC, 16, 32);
    o.attention = kind, o.padding_idx = PAD, o.max_length = T;
    qkv_seq2seq_rnn m;
    CHECK_OK(qkv_seq2seq_rnn_init(&m, &o, p, "", &r));
    qkv_optim *opt = NULL;
    qkv_optim_opts oo = qkv_optim_adam_opts_default();
    oo.lr = 1e-2;
    CHECK_OK(qkv_optim_new(&opt, p, &oo));
    qkv_ctx *c;
    CHECK_OK(qkv_ctx_new(&c));
    int64_t src[N * MAXS], lens[N], tin[N * T], tout[N * T];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int step = 0; step < steps && opt; step++) {
        make_batch(&r, N, src, lens, tin, tout);
        qkv_ctx_reset(c);
        qkv_arena *a = qkv_ctx_arena(c);
        qkv_tensor *ts, *ti, *to, *lg, *loss;
        qkv_status s = qkv_tensor_wrap_i64(a, src, 2, (int64_t[]){N, MAXS}, &ts);
        if (s == QKV_OK) s = qkv_tensor_wrap_i64(a, tin, 2, (int64_t[]){N, T}, &ti);
        if (s == QKV_OK) s = qkv_tensor_wrap_i64(a, tout, 2, (int64_t[]){N, T}, &to);
        if (s == QKV_OK) s = qkv_seq2seq_rnn_forward(c, &m, ts, lens, ti, NULL, &lg, NULL);
        if (s == QKV_OK) s = qkv_seq2seq_rnn_loss(c, lg, to, PAD, &loss);
        qkv_params_zero_grad(p);
        if (s == QKV_OK) s = qkv_backward(c, loss, NULL);
        if (s == QKV_OK) s = qkv_optim_step(opt);
        if (s != QKV_OK) {
            CHECK(0, "reverse training step %d: %s", step, qkv_last_error());
            break;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    /* 64 unseen sources, greedy */
    enum { NE = 64 };
    int64_t es[NE * MAXS], el[NE], ei[NE * T], eo[NE * T], tok[NE * T], gl[NE];
    qkv_rng_seed(&r, 99);
    make_batch(&r, NE, es, el, ei, eo);
    qkv_ctx_reset(c);
    qkv_tensor *ts;
    int exact = 0;
    CHECK_OK(qkv_tensor_wrap_i64(qkv_ctx_arena(c), es, 2, (int64_t[]){NE, MAXS}, &ts));
    qkv_generate_opts go = qkv_generate_opts_default();
    go.max_new_tokens = T, go.end_id = EOS;
    qkv_status s = qkv_seq2seq_rnn_generate(c, &m, ts, el, BOS, &go, tok, gl, NULL);
    CHECK(s == QKV_OK, "reverse: generate: %s", qkv_last_error());
    for (int n = 0; s == QKV_OK && n < NE; n++) {
        int ok = gl[n] == el[n] + 1;
        for (int64_t t = 0; ok && t < gl[n]; t++) ok = tok[n * T + t] == eo[n * T + t];
        exact += ok;
    }
    qkv_ctx_free(c);
    qkv_optim_free(opt);
    qkv_seq2seq_rnn_free(&m);
    qkv_params_free(p);
    return (double)exact / NE;
}

static void test_reverse(void)
{
    double secs;
    double acc = train_reverse(QKV_RNN_ATTN_ADDITIVE, 300, &secs);
    CHECK(acc >= 0.9, "reverse task (additive attention, 300 steps): %.0f%% exact, expected >= 90%%", 100 * acc);
    printf("reverse task: GRU + additive attention, 300 steps of batch 32 in %.2f s: %.0f%% of 64 unseen "
           "sources reversed exactly (greedy)\n", secs, 100 * acc);
}

/* ---- the vectorised exp, sigmoid, tanh, erf, erfc (src/kernels/rows.c) against double ---- */

static void test_vec_math(void)
{
    enum { M = 200001 };
    float *x = malloc(M * sizeof *x), *y = malloc(M * sizeof *y);
    double worst[3] = {0, 0, 0};
    const char *names[3] = {"qkv_vec_tanh", "qkv_vec_sigmoid", "qkv_vec_exp"};
    for (int f = 0; f < 3; f++) {
        float lo = f == 0 ? -12.0f : f == 1 ? -80.0f : -87.0f, hi = f == 0 ? 12.0f : f == 1 ? 40.0f : 88.0f;
        for (int i = 0; i < M; i++) x[i] = lo + (hi - lo) * (float)i / (M - 1);
        x[1] = -1e-30f;
        if (f == 0) qkv_vec_tanh(y, x, M);
        else if (f == 1) qkv_vec_sigmoid(y, x, M);
        else qkv_vec_exp(y, x, M);
        for (int i = 0; i < M; i++) {
            double v = x[i], t = f == 0 ? tanh(v) : f == 1 ? 1.0 / (1.0 + exp(-v)) : exp(v);
            worst[f] = fmax(worst[f], fabs(y[i] - t) / fmax(fabs(t), 1e-38));
        }
        CHECK(worst[f] <= 3e-7, "%s: relative error %.3g against double", names[f], worst[f]);
    }
    float sp[5] = {0.0f, INFINITY, -INFINITY, NAN, 9.0f}, o[3][5];
    qkv_vec_tanh(o[0], sp, 5);
    qkv_vec_sigmoid(o[1], sp, 5);
    qkv_vec_exp(o[2], sp, 5);
    CHECK(o[0][0] == 0.0f && o[0][1] == 1.0f && o[0][2] == -1.0f && isnan(o[0][3]),
          "qkv_vec_tanh: 0, +-inf, NaN give %g %g %g %g", o[0][0], o[0][1], o[0][2], o[0][3]);
    CHECK(o[1][0] == 0.5f && o[1][1] == 1.0f && o[1][2] < 1e-37f && isnan(o[1][3]),
          "qkv_vec_sigmoid: 0, +-inf, NaN give %g %g %g %g", o[1][0], o[1][1], o[1][2], o[1][3]);
    CHECK(o[2][0] == 1.0f && isnan(o[2][3]), "qkv_vec_exp: 0, NaN give %g %g", o[2][0], o[2][3]);
    printf("vectorised math, worst relative error against double: tanh %.3g on [-12,12], sigmoid %.3g on "
           "[-80,40], exp %.3g on [-87,88]\n", worst[0], worst[1], worst[2]);
    /* erf: absolute error on [-6, 6] (both pieces and the switch at |x| = 1),
     * relative error where |x| < 1 (x P(x^2), tiny x included) */
    double eabs = 0, erel = 0;
    for (int i = 0; i < M; i++) x[i] = -6.0f + 12.0f * (float)i / (M - 1);
    x[0] = 1e-30f, x[1] = -3e-6f, x[2] = 1.0f, x[3] = nextafterf(1.0f, 0.0f), x[4] = -1.0f;
    qkv_vec_erf(y, x, M);
    for (int i = 0; i < M; i++) {
        double t = erf((double)x[i]);
        eabs = fmax(eabs, fabs(y[i] - t));
        if (fabs(x[i]) < 1) erel = fmax(erel, fabs(y[i] - t) / fabs(t));
    }
    CHECK(eabs <= 2e-7 && erel <= 3e-7, "qkv_vec_erf: absolute error %.3g, relative (|x| < 1) %.3g", eabs, erel);
    float se[5] = {0.0f, INFINITY, -INFINITY, NAN, 40.0f}, oe[5];
    qkv_vec_erf(oe, se, 5);
    CHECK(oe[0] == 0.0f && oe[1] == 1.0f && oe[2] == -1.0f && isnan(oe[3]) && oe[4] == 1.0f,
          "qkv_vec_erf: 0, +-inf, NaN, 40 give %g %g %g %g %g", oe[0], oe[1], oe[2], oe[3], oe[4]);
    printf("vectorised erf against double on [-6,6]: absolute error %.3g, relative %.3g where |x| < 1\n",
           eabs, erel);
    /* erfc: absolute error on [-6, 6]; relative error where x > 0, against
     * 4e-7 (the tail's fraction 1.2e-7 and float rounding in its
     * polynomial) plus 1.5e-7 x^2 (the rounding of x^2 and of -x^2 + c,
     * which exp magnifies) */
    double cabs = 0, crel = 0;
    qkv_vec_erfc(y, x, M);
    for (int i = 0; i < M; i++) {
        double t = erfc((double)x[i]), v = x[i];
        cabs = fmax(cabs, fabs(y[i] - t));
        if (v > 0) crel = fmax(crel, fabs(y[i] - t) / t / (4e-7 + 1.5e-7 * v * v));
    }
    CHECK(cabs <= 3e-7 && crel <= 1, "qkv_vec_erfc: absolute error %.3g, relative %.3g of the bound", cabs, crel);
    float sc[4] = {INFINITY, -INFINITY, NAN, 0.0f}, oc[4];
    qkv_vec_erfc(oc, sc, 4);
    CHECK(oc[0] == 0.0f && oc[1] == 2.0f && isnan(oc[2]) && oc[3] == 1.0f,
          "qkv_vec_erfc: +-inf, NaN, 0 give %g %g %g %g", oc[0], oc[1], oc[2], oc[3]);
    printf("vectorised erfc against double on [-6,6]: absolute error %.3g, relative within %.2f of "
           "4e-7 + 1.5e-7 x^2 where x > 0\n", cabs, crel);
    free(x), free(y);
}

/* ---- bad input --------------------------------------------------------------- */

static void test_errors(void)
{
    h_env e;
    h_env_begin(&e, 3);
    qkv_seq2seq_rnn m;
    qkv_rnn_attention ak;
    CHECK_ERR(qkv_rnn_attention_parse("luong", &ak), QKV_ERR_ARG, "unknown attention 'luong'");
    CHECK_OK(qkv_rnn_attention_parse("low-rank", &ak));
    CHECK(ak == QKV_RNN_ATTN_REDUCED_RANK, "low-rank parsed as %d", (int)ak);
    CHECK(qkv_rnn_attention_name((qkv_rnn_attention)42) == NULL, "name of 42");
    qkv_seq2seq_rnn_opts o = qkv_seq2seq_rnn_opts_default(6, 6, 4, 4);
    o.attention = (qkv_rnn_attention)42;
    CHECK_ERR(qkv_seq2seq_rnn_init(&m, &o, e.p, "", &e.r), QKV_ERR_ARG, "attention 42 is not a qkv_rnn_attention");
    o.attention = QKV_RNN_ATTN_DOT, o.bidirectional = 1;
    CHECK_ERR(qkv_seq2seq_rnn_init(&m, &o, e.p, "", &e.r), QKV_ERR_SHAPE,
              "dot attention compares the decoder state (hidden_size 4) with the encoder outputs "
              "(2*hidden_size = 8");
    o.attention = QKV_RNN_ATTN_LOCATION;
    CHECK_ERR(qkv_seq2seq_rnn_init(&m, &o, e.p, "", &e.r), QKV_ERR_ARG, "location attention needs max_length >= 1");
    CHECK(qkv_params_count(e.p) == 0, "a failed _init added parameters");
    o.max_length = 4;
    o.hidden_size = 0;
    CHECK_ERR(qkv_seq2seq_rnn_init(&m, &o, e.p, "", &e.r), QKV_ERR_ARG, "hidden_size 0");
    o.hidden_size = 4, o.padding_idx = 6;
    CHECK_ERR(qkv_seq2seq_rnn_init(&m, &o, e.p, "", &e.r), QKV_ERR_ARG, "padding_idx 6 outside [-1, 6)");
    o.padding_idx = -1;
    qkv_tensor *src, *tgt, *tgt6, *lg = NULL;
    CHECK_ERR(qkv_seq2seq_rnn_forward(e.c, &m, NULL, NULL, NULL, NULL, &lg, NULL), QKV_ERR_STATE,
              "module is not initialised");
    CHECK_OK(qkv_seq2seq_rnn_init(&m, &o, e.p, "", &e.r));
    CHECK(qkv_params_find(e.p, "decoder.attn.weight") && qkv_params_find(e.p, "bridge.weight") &&
          qkv_params_find(e.p, "encoder.rnn.weight_hh_l0_reverse") && qkv_params_find(e.p, "decoder.attn_combine.bias"),
          "location model parameter names");
    src = rand_ids(e.a, &e.r, 2, 4, 0, 6);
    tgt = rand_ids(e.a, &e.r, 2, 4, 0, 6);
    tgt6 = rand_ids(e.a, &e.r, 2, 6, 0, 6);
    CHECK_OK(qkv_seq2seq_rnn_forward(e.c, &m, src, NULL, tgt, NULL, &lg, NULL));
    CHECK_ERR(qkv_seq2seq_rnn_forward(e.c, &m, src, NULL, tgt6, NULL, &lg, NULL), QKV_ERR_SHAPE,
              "tgt_in has 6 steps, more than location attention's max_length 4");
    CHECK(lg == NULL, "logits set on failure");
    CHECK_ERR(qkv_seq2seq_rnn_forward(e.c, &m, tgt6, NULL, tgt, NULL, &lg, NULL), QKV_ERR_SHAPE,
              "src has 6 positions, more than location attention's max_length 4");
    int64_t bad[2] = {4, 5};
    CHECK_ERR(qkv_seq2seq_rnn_forward(e.c, &m, src, bad, tgt, NULL, &lg, NULL), QKV_ERR_ARG,
              "src_lengths[1] = 5 is not in [1,4] (S)");
    qkv_tensor *tgt3 = rand_ids(e.a, &e.r, 3, 4, 0, 6);
    CHECK_ERR(qkv_seq2seq_rnn_forward(e.c, &m, src, NULL, tgt3, NULL, &lg, NULL), QKV_ERR_SHAPE,
              "different batch sizes");
    qkv_seq2seq_rnn_args args = qkv_seq2seq_rnn_args_default();
    args.teacher_forcing = 1.5f;
    CHECK_ERR(qkv_seq2seq_rnn_forward(e.c, &m, src, NULL, tgt, &args, &lg, NULL), QKV_ERR_ARG,
              "teacher_forcing 1.5 is not in [0,1]");
    src->idx[3] = 6;
    CHECK_ERR(qkv_seq2seq_rnn_forward(e.c, &m, src, NULL, tgt, NULL, &lg, NULL), QKV_ERR_ARG, "embedding");
    src->idx[3] = 1;
    qkv_generate_opts go = qkv_generate_opts_default();
    int64_t tok[12], gl[2];
    go.max_new_tokens = 6;
    CHECK_ERR(qkv_seq2seq_rnn_generate(e.c, &m, src, NULL, 1, &go, tok, gl, NULL), QKV_ERR_SHAPE,
              "max_new_tokens 6 is more than location attention's max_length 4");
    go.max_new_tokens = 4;
    CHECK_ERR(qkv_seq2seq_rnn_generate(e.c, &m, src, NULL, 9, &go, tok, gl, NULL), QKV_ERR_ARG, "bos_id 9");
    qkv_ctx_set_training(e.c, 1);
    CHECK_ERR(qkv_seq2seq_rnn_generate(e.c, &m, src, NULL, 1, &go, tok, gl, NULL), QKV_ERR_STATE, "inference only");
    qkv_ctx_set_training(e.c, 0);
    qkv_tensor *loss = NULL;
    CHECK_OK(qkv_seq2seq_rnn_forward(e.c, &m, src, NULL, tgt, NULL, &lg, NULL));
    CHECK_ERR(qkv_seq2seq_rnn_loss(e.c, lg, tgt3, 0, &loss), QKV_ERR_SHAPE, "do not match tgt_out");
    CHECK_ERR(qkv_seq2seq_rnn_forward_loss(e.c, &m, src, NULL, tgt, tgt3, 0, NULL, &loss, NULL), QKV_ERR_SHAPE,
              "seq2seq_rnn_forward_loss: tgt_in (2,4) do not match tgt_out (3,4)");
    CHECK_ERR(qkv_seq2seq_rnn_forward_loss(e.c, &m, src, NULL, tgt, NULL, 0, NULL, &loss, NULL), QKV_ERR_ARG,
              "tgt_out is NULL");
    CHECK_OK(qkv_seq2seq_rnn_forward_loss(e.c, &m, src, NULL, tgt, tgt, 0, NULL, &loss, NULL));
    qkv_seq2seq_rnn_free(&m);
    h_env_end(&e);
}

/* One step's loss and every parameter gradient, by forward_loss (fused
 * 1) or by forward then loss, into g (every parameter in turn). */
static float step_grads(qkv_ctx *c, qkv_seq2seq_rnn *m, qkv_params *p, int fused, const int64_t *src,
                        const int64_t *lens, const int64_t *tin, const int64_t *tout, int64_t N, float *g)
{
    enum { T = MAXS + 1 };
    qkv_params_zero_grad(p);
    qkv_ctx_reset(c);
    qkv_arena *a = qkv_ctx_arena(c);
    qkv_tensor *ts, *ti, *to, *lg, *loss = NULL;
    qkv_status s = qkv_tensor_wrap_i64(a, (int64_t *)src, 2, (int64_t[]){N, MAXS}, &ts);
    if (!s) s = qkv_tensor_wrap_i64(a, (int64_t *)tin, 2, (int64_t[]){N, T}, &ti);
    if (!s) s = qkv_tensor_wrap_i64(a, (int64_t *)tout, 2, (int64_t[]){N, T}, &to);
    if (!s && fused) s = qkv_seq2seq_rnn_forward_loss(c, m, ts, lens, ti, to, PAD, NULL, &loss, NULL);
    if (!s && !fused) s = qkv_seq2seq_rnn_forward(c, m, ts, lens, ti, NULL, &lg, NULL);
    if (!s && !fused) s = qkv_seq2seq_rnn_loss(c, lg, to, PAD, &loss);
    if (!s) s = qkv_backward(c, loss, NULL);
    CHECK(s == QKV_OK, "forward_loss (fused %d): %s", fused, qkv_last_error());
    for (int i = 0, k = 0; i < qkv_params_count(p); i++) {
        qkv_tensor *t = qkv_params_at(p, i);
        int64_t n = qkv_tensor_numel(t);
        memcpy(g + k, t->grad, (size_t)n * sizeof *g);
        k += (int)n;
    }
    return s ? NAN : loss->data[0];
}

/* qkv_seq2seq_rnn_forward_loss against forward then loss: the same loss and
 * gradients, in FP32 and in BF16, for Luong attention (the fused output
 * layer), no attention, and location attention (the two calls inside). */
static void test_forward_loss(void)
{
    enum { N = 64, T = MAXS + 1 };
    static const qkv_rnn_attention kinds[3] = {QKV_RNN_ATTN_ADDITIVE, QKV_RNN_ATTN_NONE, QKV_RNN_ATTN_LOCATION};
    for (int ki = 0; ki < 3; ki++)
        for (int bf = 0; bf < 2; bf++) {
            qkv_params *p;
            qkv_rng r;
            qkv_rng_seed(&r, 7 + ki);
            CHECK_OK(qkv_params_new(&p));
            qkv_seq2seq_rnn_opts o = qkv_seq2seq_rnn_opts_default(VOC, VOC, 16, 32);
            o.attention = kinds[ki], o.padding_idx = PAD, o.max_length = T;
            qkv_seq2seq_rnn m;
            CHECK_OK(qkv_seq2seq_rnn_init(&m, &o, p, "", &r));
            qkv_ctx *c;
            CHECK_OK(qkv_ctx_new(&c));
            if (bf) CHECK_OK(qkv_ctx_set_precision(c, QKV_BF16));
            qkv_ctx_set_training(c, 1);
            int64_t src[N * MAXS], lens[N], tin[N * T], tout[N * T], n = qkv_params_numel(p);
            make_batch(&r, N, src, lens, tin, tout);
            float *g1 = malloc((size_t)n * sizeof *g1), *g2 = malloc((size_t)n * sizeof *g2);
            float l1 = step_grads(c, &m, p, 1, src, lens, tin, tout, N, g1);
            float l2 = step_grads(c, &m, p, 0, src, lens, tin, tout, N, g2);
            double eg = h_rel_err(g1, g2, n);
            CHECK(fabsf(l1 - l2) <= 1e-6f * fabsf(l2) && eg < 1e-5 && l1 > 0,
                  "forward_loss vs forward + loss (attention %d, %s): loss %.9g vs %.9g, gradients %.3g", ki,
                  bf ? "BF16" : "FP32", l1, l2, eg);
            free(g1), free(g2);
            qkv_ctx_free(c);
            qkv_seq2seq_rnn_free(&m);
            qkv_params_free(p);
        }
}

/* QKV_SCORE_KINDS is the one list: each row's qkv_rnn_attention value is
 * its qkv_score_kind value, has the row's name (and back), and
 * qkv_score_init keeps the row's columns (same dims, rank, parameters). */
static void test_score_list(void)
{
    qkv_params *p;
    qkv_rng r;
    qkv_rng_seed(&r, 5);
    CHECK_OK(qkv_params_new(&p));
    int n = 0;
#define ROW(NAME, name, same_dims, has_rank, has_params)                                              \
    do {                                                                                      \
        qkv_rnn_attention a = QKV_RNN_ATTN_##NAME, back = (qkv_rnn_attention)-1;              \
        const char *nm = qkv_rnn_attention_name(a);                                           \
        CHECK((int)a == n && (int)QKV_SCORE_##NAME == n && nm && !strcmp(nm, name),           \
              #NAME " is value %d named %s", n, nm);                                          \
        CHECK(qkv_rnn_attention_parse(name, &back) == QKV_OK && back == a, name " parses back"); \
        qkv_score sc;                                                                         \
        CHECK((qkv_score_init(&sc, QKV_SCORE_##NAME, 4, 5, 2, p, name ".", &r) == QKV_OK) == !(same_dims), \
              name ": query_dim 4, key_dim 5 %s", (same_dims) ? "refused" : "accepted");      \
        CHECK(qkv_score_init(&sc, QKV_SCORE_##NAME, 4, 4, 2, p, name "_r.", &r) == QKV_OK &&  \
                  sc.rank == ((has_rank) ? 2 : 0),                                                \
              name ": rank %lld", (long long)sc.rank);                                        \
        CHECK((qkv_score_init(&sc, QKV_SCORE_##NAME, 4, 4, 2, NULL, "", &r) == QKV_OK) == !(has_params), \
              name ": no params %s", (has_params) ? "refused" : "accepted");                     \
        n++;                                                                                  \
    } while (0);
    QKV_SCORE_KINDS(ROW)
#undef ROW
    CHECK(n == 6 && n == (int)QKV_RNN_ATTN_LOCATION, "%d score kinds, then location", n);
    qkv_rnn_attention ak;
    CHECK_ERR(qkv_rnn_attention_parse("luong", &ak), QKV_ERR_ARG, "unknown attention 'luong' "
              "(dot, scaled_dot, cosine, general, reduced_rank, additive, location, none)");
    qkv_params_free(p);
}

int main(void)
{
    test_errors();
    test_score_list();
    test_vec_math();
    test_gradcheck();
    test_weights_and_paths();
    test_decoding();
    test_forward_loss();
    int n = h_oracle_cases("seq2seq_rnn_oracle.py", 31, parity_case);
    CHECK(n == 31 && n_runs == 93, "parity: %d cases, %d runs compared", n, n_runs);
    printf("parity: %d cases x 3 runs (full, stepwise, reference): worst logits/weights/loss error %.3g, "
           "worst gradient error %.3g\n", n_cases, worst_out, worst_grad);
    test_reverse();
    return h_finish("test_seq2seq_rnn");
}
