/* quant.c: the table of ggml's tensor types (include/qkv/quant.h). */
#include <stdint.h>
#include "core/internal.h"
#include "qkv/quant.h"

typedef struct {
    int id;
    const char *name;
    int blk, bytes; /* elements per block, bytes per block */
} qtype_row;

static const qtype_row qtype_rows[] = {
#define QKV_QTYPE_ROW(e, id, name, blk, bytes) {id, name, blk, bytes},
    QKV_QTYPES(QKV_QTYPE_ROW)
#undef QKV_QTYPE_ROW
};

static const qtype_row *qtype_find(int id)
{
    for (size_t i = 0; i < sizeof qtype_rows / sizeof qtype_rows[0]; i++)
        if (qtype_rows[i].id == id) return &qtype_rows[i];
    return NULL;
}

int qkv_qtype_known(int id) { return qtype_find(id) != NULL; }

const char *qkv_qtype_name(qkv_qtype t)
{
    const qtype_row *r = qtype_find((int)t);
    return r ? r->name : "unknown";
}

int qkv_qtype_block_elems(qkv_qtype t)
{
    const qtype_row *r = qtype_find((int)t);
    return r ? r->blk : 0;
}

int qkv_qtype_block_bytes(qkv_qtype t)
{
    const qtype_row *r = qtype_find((int)t);
    return r ? r->bytes : 0;
}

size_t qkv_qtype_row_bytes(qkv_qtype t, int64_t n)
{
    const qtype_row *r = qtype_find((int)t);
    if (!r) {
        qkv_fail(QKV_ERR_DTYPE, "qkv_qtype_row_bytes: unknown tensor type %d", (int)t);
        return 0;
    }
    if (n < 0 || n % r->blk != 0) {
        qkv_fail(QKV_ERR_SHAPE, "qkv_qtype_row_bytes: %lld elements of %s are not whole blocks of %d",
                 (long long)n, r->name, r->blk);
        return 0;
    }
    uint64_t blocks = (uint64_t)(n / r->blk);
    if (blocks > SIZE_MAX / (uint64_t)r->bytes) {
        qkv_fail(QKV_ERR_SHAPE, "qkv_qtype_row_bytes: %lld elements of %s overflow a size",
                 (long long)n, r->name);
        return 0;
    }
    return (size_t)(blocks * (uint64_t)r->bytes);
}
