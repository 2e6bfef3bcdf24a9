/* embedding.c: F.embedding: rows of a weight table picked by integer ids. */
#include <stdio.h>
#include <string.h>
#include "nn/nn_check.h"

/* Columns of the weight's gradient a thread takes at a time (backward). */
enum { EMB_COLS = 64 };

typedef struct {
    qkv_tensor *w, *ids, *y;
    int64_t n, dim, padding_idx; /* n ids */
} emb_saved;

/* Differentiates y[i] = weight[ids[i]]: dweight[ids[i]] += dy[i], except
 * for the padding_idx row, which gets no gradient (as PyTorch). */
static qkv_status emb_backward(qkv_ctx *c, void *p)
{
    emb_saved *s = p;
    QKV_BACKWARD_ONE(c, s->y, s->w, dy, dw); // dy (n,dim), dw (num,dim)
    int64_t dim = s->dim, nblk = (dim + EMB_COLS - 1) / EMB_COLS;
    /* by blocks of columns on the threads: each element's sum runs over the
     * ids in order, whichever thread has its block */
    QKV_PAR_FOR(s->n * dim >= QKV_PAR_MIN && nblk > 1, for (int64_t b = 0; b < nblk; b++) {
        int64_t j0 = b * EMB_COLS, j1 = j0 + EMB_COLS < dim ? j0 + EMB_COLS : dim;
        for (int64_t i = 0; i < s->n; i++) {
            int64_t id = s->ids->idx[i];
            if (id == s->padding_idx) continue;
            for (int64_t j = j0; j < j1; j++) dw[id * dim + j] += dy[i * dim + j];
        }
    });
    return QKV_OK;
}

/* "[i][j]" for flat index k of ids. */
static const char *position_str(const qkv_tensor *ids, int64_t k, char *buf, size_t n)
{
    int64_t pos[QKV_MAX_DIMS];
    for (int d = ids->ndim - 1; d >= 0; d--) {
        pos[d] = ids->shape[d] ? k % ids->shape[d] : 0;
        k = ids->shape[d] ? k / ids->shape[d] : 0;
    }
    size_t at = 0;
    buf[0] = '\0';
    for (int d = 0; d < ids->ndim && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, "[%lld]", (long long)pos[d]);
    return buf;
}

qkv_status qkv_embedding(qkv_ctx *c, qkv_tensor *weight, qkv_tensor *ids, int64_t padding_idx,
                         qkv_tensor **y)
{
    QKV_NEED_OUT_CTX(y, c, "embedding", "y");
    QKV_NEED_F32(weight, "embedding", "weight");
    QKV_TRY(qkv_need_dtype(ids, QKV_I64, "embedding", "ids"));
    char bw[64], bi[64], bp[64];
    if (weight->ndim != 2)
        return qkv_fail(QKV_ERR_SHAPE, "embedding: weight %s has %d dims, expected 2 (num_embeddings,embedding_dim)",
                        qkv_shape_str(weight, bw, sizeof bw), weight->ndim);
    if (ids->ndim > QKV_MAX_DIMS - 1)
        return qkv_fail(QKV_ERR_SHAPE, "embedding: ids %s has %d dims, at most %d (the output adds one)",
                        qkv_shape_str(ids, bi, sizeof bi), ids->ndim, QKV_MAX_DIMS - 1);
    int64_t num = weight->shape[0], dim = weight->shape[1], n = qkv_tensor_numel(ids);
    if (padding_idx < -1 || padding_idx >= num)
        return qkv_fail(QKV_ERR_ARG, "embedding: padding_idx %lld out of range for weight %s "
                        "(0..%lld, or -1 for none)", (long long)padding_idx,
                        qkv_shape_str(weight, bw, sizeof bw), (long long)num - 1);
    for (int64_t i = 0; i < n; i++)
        if (ids->idx[i] < 0 || ids->idx[i] >= num)
            return qkv_fail(QKV_ERR_ARG, "embedding: ids%s = %lld is out of range for weight %s "
                            "(0..%lld)", position_str(ids, i, bp, sizeof bp),
                            (long long)ids->idx[i], qkv_shape_str(weight, bw, sizeof bw),
                            (long long)num - 1);
    int64_t shape[QKV_MAX_DIMS];
    for (int d = 0; d < ids->ndim; d++) shape[d] = ids->shape[d];
    shape[ids->ndim] = dim;
    qkv_tensor *in[1] = {weight};
    int rec = qkv_ctx_recording(c, in, 1);
    QKV_TRY(qkv_ctx_tensor_uninit(c, ids->ndim + 1, shape, rec, y)); /* every row written below */
    float *yd = (*y)->data; // (n,dim)
    QKV_PAR_FOR(n * dim >= QKV_PAR_MIN, for (int64_t i = 0; i < n; i++)
        memcpy(yd + i * dim, weight->data + ids->idx[i] * dim, (size_t)dim * sizeof(float)));
    if (!rec) return QKV_OK;
    emb_saved *s = qkv_ctx_alloc(c, sizeof *s);
    if (!s) return QKV_ERR_NOMEM;
    *s = (emb_saved){weight, ids, *y, n, dim, padding_idx};
    return qkv_ctx_record(c, emb_backward, s);
}
