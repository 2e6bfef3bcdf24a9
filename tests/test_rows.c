/* test_rows.c: the row loops of kernels/rows.h against plain loops written
 * here (sizes below and above the parallel bound, flat blocks that cut rows
 * in the middle, one long row as a residual connection's add has), and the
 * add op's gradients when both operands have one shape (a residual
 * connection: each operand's gradient is dy, new or added into; a + a). */
#include <omp.h>
#include "harness.h"
#include "kernels/bf16.h"
#include "kernels/rows.h"

static void fill(float *x, int64_t n, unsigned seed)
{
    srand(seed);
    for (int64_t i = 0; i < n; i++) x[i] = (float)rand() / RAND_MAX * 4.0f - 2.0f;
}

static void test_rows_add(void)
{
    /* (rows, n): small, rows cut by the 16,384-element blocks (n = 3, 100,
     * 5,000), one row of 409,600 (a ViT's residual), and empty */
    const int64_t shapes[][2] = {{4, 5}, {20000, 3}, {700, 100}, {9, 5000}, {1, 409600}, {0, 7}, {5, 0}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int64_t rows = shapes[s][0], n = shapes[s][1], total = rows * n;
        float *a = malloc((size_t)(total + 1) * sizeof(float)), *b = malloc((size_t)(n + 1) * sizeof(float));
        float *y = malloc((size_t)(total + 1) * sizeof(float)), *c = malloc((size_t)(total + 1) * sizeof(float));
        fill(a, total, 1);
        fill(b, n, 2);
        for (int with_b = 0; with_b < 2; with_b++) {
            for (int64_t i = 0; i <= total; i++) y[i] = NAN;
            qkv_rows_add(y, a, with_b ? b : NULL, rows, n);
            int64_t bad = 0;
            for (int64_t r = 0; r < rows; r++)
                for (int64_t j = 0; j < n; j++) {
                    float want = a[r * n + j] + (with_b ? b[j] : 0.0f);
                    bad += memcmp(&y[r * n + j], &want, sizeof want) != 0;
                }
            CHECK(bad == 0 && isnan(y[total]), "rows_add (%lld,%lld)%s: %lld elements wrong or one past written",
                  (long long)rows, (long long)n, with_b ? "" : " without b", (long long)bad);
        }
        /* vec_to2: y (= y) copied, c added into; then one buffer both ways */
        for (int64_t i = 0; i <= total; i++) y[i] = NAN, c[i] = (float)(i % 7);
        qkv_vec_to2(y, 0, c, 1, a, total);
        int64_t bad = 0;
        for (int64_t i = 0; i < total; i++) bad += y[i] != a[i] || c[i] != (float)(i % 7) + a[i];
        CHECK(bad == 0 && isnan(y[total]) && c[total] == (float)(total % 7),
              "vec_to2 (copy, add) of %lld floats: %lld wrong", (long long)total, (long long)bad);
        qkv_vec_to2(c, 0, c, 1, a, total);
        qkv_vec_to2(NULL, 0, y, 1, a, total);
        bad = 0;
        for (int64_t i = 0; i < total; i++) bad += c[i] != a[i] + a[i] || y[i] != a[i] + a[i];
        CHECK(bad == 0, "vec_to2 on one buffer, and without y1: %lld wrong", (long long)bad);
        free(a), free(b), free(y), free(c);
    }
}

/* y = a + b with a and b of one shape (409,600 elements, above the parallel
 * bound): da = db = dy when the gradients are new; added into when a
 * gradient was already there (b used twice: y2 = y + b). */
static void test_add_residual_grads(void)
{
    enum { N = 409600 };
    qkv_ctx *c;
    qkv_ctx_new(&c);
    qkv_arena *A = qkv_ctx_arena(c);
    float *ad = malloc(N * sizeof(float)), *bd = malloc(N * sizeof(float)), *dy = malloc(N * sizeof(float));
    float *ga = malloc(N * sizeof(float)), *gb = malloc(N * sizeof(float));
    fill(ad, N, 3), fill(bd, N, 4), fill(dy, N, 5);
    for (int twice = 0; twice < 2; twice++) {
        qkv_ctx_reset(c);
        qkv_tensor *a, *b, *y;
        CHECK_OK(qkv_tensor_wrap(A, ad, 3, (int64_t[]){128, 50, 64}, &a));
        CHECK_OK(qkv_tensor_wrap(A, bd, 3, (int64_t[]){128, 50, 64}, &b));
        qkv_tensor_set_requires_grad(a, 1);
        qkv_tensor_set_requires_grad(b, 1);
        CHECK_OK(qkv_add(c, a, b, &y));
        if (twice) CHECK_OK(qkv_add(c, y, b, &y));
        CHECK_OK(qkv_backward(c, y, dy));
        CHECK_OK(qkv_tensor_read_grad(a, ga, N));
        CHECK_OK(qkv_tensor_read_grad(b, gb, N));
        int64_t bad_a = 0, bad_b = 0;
        for (int64_t i = 0; i < N; i++) {
            float wb = twice ? dy[i] + dy[i] : dy[i];
            bad_a += ga[i] != dy[i];
            bad_b += gb[i] != wb;
        }
        CHECK(bad_a == 0 && bad_b == 0, "residual add%s: %lld of da and %lld of db differ from dy%s",
              twice ? " with b used twice" : "", (long long)bad_a, (long long)bad_b, twice ? " + dy" : "");
    }
    /* a + a: a's gradient is dy + dy */
    qkv_ctx_reset(c);
    qkv_tensor *a, *y;
    CHECK_OK(qkv_tensor_wrap(A, ad, 3, (int64_t[]){128, 50, 64}, &a));
    qkv_tensor_set_requires_grad(a, 1);
    CHECK_OK(qkv_add(c, a, a, &y));
    CHECK_OK(qkv_backward(c, y, dy));
    CHECK_OK(qkv_tensor_read_grad(a, ga, N));
    int64_t bad = 0;
    for (int64_t i = 0; i < N; i++) bad += ga[i] != dy[i] + dy[i];
    CHECK(bad == 0, "a + a: %lld of da differ from dy + dy", (long long)bad);
    free(ad), free(bd), free(dy), free(ga), free(gb);
    qkv_ctx_free(c);
}

/* qkv_vec_relu (torch.relu: NaN stays NaN, -0 stays -0, -inf gives 0) and
 * qkv_rows_relu_grad_bf16 against plain loops: the masked gradient's bf16
 * bits, and db's column sums in row order (exactly, as rows_sum_into's
 * column blocks add them), with db NULL too; one column block (n <= 64,
 * one thread) and several, below and above the parallel bound. */
static void test_relu(void)
{
    float x[7] = {1.5f, -2.0f, 0.0f, -0.0f, NAN, INFINITY, -INFINITY}, y[7];
    const float want[7] = {1.5f, 0.0f, 0.0f, -0.0f, NAN, INFINITY, 0.0f};
    qkv_vec_relu(y, x, 7);
    int same = 1;
    for (int i = 0; i < 7; i++) same &= memcmp(&y[i], &want[i], sizeof y[i]) == 0;
    CHECK(same, "vec_relu: NaN, -0, -inf or a sign differs from torch.relu's");
    const int64_t shapes[][2] = {{7, 5}, {300, 64}, {50, 130}, {1024, 2048}};
    for (int k = 0; k < 4; k++) {
        int64_t rows = shapes[k][0], n = shapes[k][1], m = rows * n;
        float *yv = malloc(sizeof(float) * (size_t)m), *dy = malloc(sizeof(float) * (size_t)m);
        float *db = malloc(sizeof(float) * (size_t)n), *want_db = malloc(sizeof(float) * (size_t)n);
        uint16_t *d16 = malloc(sizeof(uint16_t) * (size_t)m), *d16b = malloc(sizeof(uint16_t) * (size_t)m);
        if (!yv || !dy || !db || !want_db || !d16 || !d16b) return;
        fill(yv, m, 5 + k);
        fill(dy, m, 9 + k);
        qkv_vec_relu(yv, yv, m);
        for (int64_t i = 0; i < m; i += 5) dy[i] = -0.0f;
        for (int64_t i = 3; i < m; i += 97) yv[i] = i % 3 ? NAN : -NAN; /* NaN outputs pass dy, as torch's */
        for (int64_t i = 7; i < m; i += 89) yv[i] = -0.0f;
        for (int64_t j = 0; j < n; j++) db[j] = want_db[j] = 0.25f * (float)j;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < n; j++) {
                float g = yv[r * n + j] <= 0.0f ? 0.0f : dy[r * n + j];
                want_db[j] += g;
            }
        qkv_rows_relu_grad_bf16(yv, dy, rows, n, d16, db);
        qkv_rows_relu_grad_bf16(yv, dy, rows, n, d16b, NULL);
        int64_t bad = 0, bad_db = 0;
        for (int64_t i = 0; i < m; i++) {
            float g = yv[i] <= 0.0f ? 0.0f : dy[i];
            uint16_t w16 = qkv_bf16_from_float(0.0f + g);
            bad += d16[i] != w16 || d16b[i] != w16;
        }
        for (int64_t j = 0; j < n; j++) bad_db += memcmp(&db[j], &want_db[j], sizeof db[j]) != 0;
        CHECK(bad == 0, "rows_relu_grad_bf16 (%lld,%lld): %lld bf16 values differ", (long long)rows, (long long)n,
              (long long)bad);
        CHECK(bad_db == 0, "rows_relu_grad_bf16 (%lld,%lld): %lld of db's sums differ", (long long)rows,
              (long long)n, (long long)bad_db);
        free(yv), free(dy), free(db), free(want_db), free(d16), free(d16b);
    }
}

int main(void)
{
    test_relu();
    test_rows_add();
    omp_set_num_threads(1); /* the same on one thread */
    test_rows_add();
    omp_set_num_threads(2);
    test_add_residual_grads();
    return h_finish("test_rows");
}
