/* bmm.c: batched matrix product, torch.bmm (plus the 2-D "weights times
 * values" form: a (B,K) with b (B,K,P) gives (B,P)). */
#include <stdio.h>
#include "core/internal.h"
#include "kernels/gemm_bf16.h"
#include "nn/bmm.h"

/* The batch's products on OpenMP's threads, one product per thread at a
 * time, where there are several and together enough work (an attention's
 * 64 products of 13 x 12 x 256 ran one after the other); each product then
 * runs on its one thread, with the bits it has on any number (qkv_gemm
 * cuts products by their shape). */
static int bmm_par(int64_t B, int64_t M, int64_t K, int64_t P) { return B > 1 && B * M * K * P >= QKV_PAR_MIN; }

typedef struct {
    qkv_tensor *a, *b, *y;
    int64_t B, M, K, P;
    int trans_b;
    float alpha;
} bmm_saved;

/* Differentiates y_i = alpha * a_i op(b_i) for each batch i:
 * da_i += alpha * dy_i op(b_i)^T, and
 * db_i += alpha * a_i^T dy_i     (b not transposed: b_i is (K,P)), or
 * db_i += alpha * dy_i^T a_i     (trans_b: b_i is (P,K)). */
static qkv_status bmm_backward(qkv_ctx *c, void *p)
{
    bmm_saved *s = p;
    const float *dy = s->y->grad; // (B,M,P)
    if (!dy) return QKV_OK;
    qkv_arena *ar = qkv_ctx_arena(c);
    int64_t M = s->M, K = s->K, P = s->P;
    const float *a = s->a->data; // (B,M,K)
    const float *b = s->b->data; // (B,K,P), or (B,P,K) when trans_b
    if (s->a->requires_grad) {
        float *da = qkv_tensor_grad(ar, s->a); // (B,M,K)
        if (!da) return QKV_ERR_NOMEM;
        QKV_PAR_FOR(bmm_par(s->B, M, K, P), for (int64_t i = 0; i < s->B; i++) {
            const float *dyi = dy + i * M * P, *bi = b + i * K * P;
            float *dai = da + i * M * K;
            if (s->trans_b) qkv_gemm_ctx(c, 0, 0, M, K, P, s->alpha, dyi, P, bi, K, 1.0f, dai, K);
            else qkv_gemm_ctx(c, 0, 1, M, K, P, s->alpha, dyi, P, bi, P, 1.0f, dai, K);
        });
    }
    if (s->b->requires_grad) {
        float *db = qkv_tensor_grad(ar, s->b); // like b
        if (!db) return QKV_ERR_NOMEM;
        QKV_PAR_FOR(bmm_par(s->B, M, K, P), for (int64_t i = 0; i < s->B; i++) {
            const float *dyi = dy + i * M * P, *ai = a + i * M * K;
            float *dbi = db + i * K * P;
            if (s->trans_b) qkv_gemm_ctx(c, 1, 0, P, K, M, s->alpha, dyi, P, ai, K, 1.0f, dbi, K);
            else qkv_gemm_ctx(c, 1, 0, K, P, M, s->alpha, ai, K, dyi, P, 1.0f, dbi, P);
        });
    }
    return QKV_OK;
}

qkv_status qkv_bmm_ex(qkv_ctx *c, qkv_tensor *a, qkv_tensor *b, int trans_b, float alpha,
                      qkv_tensor **y)
{
    int64_t B = b->shape[0];
    int64_t M = a->ndim == 3 ? a->shape[1] : 1;
    int64_t K = a->shape[a->ndim - 1];
    int64_t P = trans_b ? b->shape[1] : b->shape[2];
    int64_t shape3[3] = {B, M, P}, shape2[2] = {B, P};
    qkv_tensor *in[2] = {a, b};
    int rec = qkv_ctx_recording(c, in, 2);
    QKV_TRY(qkv_ctx_tensor(c, a->ndim, a->ndim == 3 ? shape3 : shape2, rec, y));
    float *yd = (*y)->data; // (B,M,P)
    QKV_PAR_FOR(bmm_par(B, M, K, P), for (int64_t i = 0; i < B; i++)
        qkv_gemm_ctx(c, 0, trans_b, M, P, K, alpha, a->data + i * M * K, K, b->data + i * K * P,
                 trans_b ? K : P, 0.0f, yd + i * M * P, P));
    if (!rec) return QKV_OK;
    bmm_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (bmm_saved){a, b, *y, B, M, K, P, trans_b, alpha};
    return qkv_ctx_record(c, bmm_backward, s);
}

qkv_status qkv_bmm(qkv_ctx *c, qkv_tensor *a, qkv_tensor *b, qkv_tensor **y)
{
    QKV_NEED_OUT_CTX(y, c, "bmm", "y");
    QKV_NEED(a, "bmm", "a");
    QKV_NEED(b, "bmm", "b");
    char ba[64], bb[64];
    if (a->dtype != QKV_F32 || b->dtype != QKV_F32)
        return qkv_fail(QKV_ERR_DTYPE, "bmm: a and b must be F32");
    if (b->ndim != 3)
        return qkv_fail(QKV_ERR_SHAPE, "bmm: b %s has %d dims, expected 3 (B,K,P)",
                        qkv_shape_str(b, bb, sizeof bb), b->ndim);
    if (a->ndim != 2 && a->ndim != 3)
        return qkv_fail(QKV_ERR_SHAPE, "bmm: a %s has %d dims, expected 3 (B,M,K) or 2 (B,K)",
                        qkv_shape_str(a, ba, sizeof ba), a->ndim);
    if (a->shape[0] != b->shape[0])
        return qkv_fail(QKV_ERR_SHAPE, "bmm: batch sizes differ: a %s, b %s",
                        qkv_shape_str(a, ba, sizeof ba), qkv_shape_str(b, bb, sizeof bb));
    if (a->shape[a->ndim - 1] != b->shape[1])
        return qkv_fail(QKV_ERR_SHAPE, "bmm: a %s last dim %lld does not match b %s dim 1 %lld",
                        qkv_shape_str(a, ba, sizeof ba), (long long)a->shape[a->ndim - 1],
                        qkv_shape_str(b, bb, sizeof bb), (long long)b->shape[1]);
    return qkv_bmm_ex(c, a, b, 0, 1.0f, y);
}
