/* test_toy.c: the lecture's toy sequences and positional encodings. */
#include "harness.h"

/* The runs of non-zero values of x: count, start, length, whether flat (a
 * box: every value equal) and value at the start. */
typedef struct {
    int64_t start, len;
    int flat;
    float v;
} run;

static int find_runs(const float *x, int64_t T, run *r)
{
    int n = 0;
    for (int64_t t = 0; t < T; t++) {
        if (x[t] <= 0) continue;
        if (t == 0 || x[t - 1] <= 0) r[n++] = (run){t, 0, 1, x[t]};
        r[n - 1].len++;
        r[n - 1].flat &= x[t] == r[n - 1].v;
    }
    return n;
}

int main(void)
{
    /* The notes' table for len = 20 (its first three rows). */
    float pe[5 * 20];
    CHECK(qkv_pos_binary_channels(20) == 5 && qkv_pos_binary_channels(64) == 6, "binary channels");
    /* Ends for any T (a shift loop once ran forever above 2^62). */
    CHECK(qkv_pos_binary_channels(INT64_MAX) == 63 && qkv_pos_binary_channels((int64_t)1 << 62) == 62,
          "binary channels near 2^63: %lld", (long long)qkv_pos_binary_channels(INT64_MAX));
    CHECK(qkv_pos_binary_channels(1) == 0 && qkv_pos_binary_channels(0) == 0 &&
          qkv_pos_binary_channels(-5) == 0, "binary channels for T <= 1");
    CHECK_OK(qkv_pos_binary(20, pe));
    const char *rows[3] = {"01010101010101010101", "00110011001100110011", "00001111000011110000"};
    int ok = 1;
    for (int k = 0; k < 3; k++)
        for (int t = 0; t < 20; t++) ok &= pe[k * 20 + t] == (float)(rows[k][t] - '0');
    CHECK(ok, "binary encoding rows 0-2 as in the notes");
    CHECK(pe[3 * 20 + 8] == 1 && pe[3 * 20 + 7] == 0 && pe[4 * 20 + 16] == 1, "rows 3-4: bits 3 and 4");
    float sp[4 * 3];
    CHECK_OK(qkv_pos_sinusoidal(3, 4, sp));
    CHECK(fabsf(sp[0 * 3 + 1] - sinf(1)) < 1e-6 && fabsf(sp[1 * 3 + 2] - cosf(2)) < 1e-6 &&
              fabsf(sp[2 * 3 + 2] - sinf(2 / 100.0f)) < 1e-6,
          "sinusoidal: sin(t), cos(t), sin(t / 10000^(2/4))");
    CHECK_ERR(qkv_pos_sinusoidal(3, 5, sp), QKV_ERR_ARG, "d 5");

    qkv_rng r;
    qkv_rng_seed(&r, 11);
    int64_t n = 200, T = 64;
    float *in = malloc(n * T * 4), *tg = malloc(n * T * 4);
    for (int task = 0; task < 2; task++) {
        CHECK_OK(qkv_toy_generate(&r, (qkv_toy_task)task, n, T, 0.3f, in, tg));
        int good = 0;
        for (int64_t i = 0; i < n; i++) {
            run rs[64];
            int m = find_runs(tg + i * T, T, rs), boxes[2], nb = 0;
            for (int a = 0; a < m; a++)
                if (rs[a].flat && rs[a].len > 1 && nb < 2) boxes[nb++] = a;
            /* Four shapes; the two boxes share their height when they are a
             * pair: always for the pairs task, for the positional task
             * when both are among the two leftmost or the two rightmost. */
            int paired = task == 0 || (nb == 2 && (boxes[1] <= 1 || boxes[0] >= 2));
            good += m == 4 && nb == 2 && (!paired || fabsf(rs[boxes[0]].v - rs[boxes[1]].v) < 1e-4f);
        }
        CHECK(good >= n * 95 / 100, "task %d: %d of %lld targets have four shapes, boxes equal when paired",
              task, good, (long long)n);
        double noise = 0;
        for (int64_t i = 0; i < n * T; i++)
            if (tg[i] == 0) noise = fmax(noise, fabs(in[i] - 0));
        CHECK(noise <= 0.15 + 25, "input noise bounded");
    }
    CHECK_ERR(qkv_toy_generate(&r, QKV_TOY_PAIRS, 1, 10, 0.3f, in, tg), QKV_ERR_ARG, "T 10");
    CHECK_ERR(qkv_toy_generate(&r, (qkv_toy_task)7, 1, 64, 0.3f, in, tg), QKV_ERR_ARG, "task 7");
    CHECK_ERR(qkv_toy_generate(NULL, QKV_TOY_PAIRS, 1, 64, 0.3f, in, tg), QKV_ERR_ARG, "rng is NULL");
    free(in);
    free(tg);
    return h_finish("test_toy");
}
