/* qkv/quant.h: quantized weights in ggml's block formats (included by
 * qkv.h): the types, their block sizes, dequantization, quantization and
 * products that read the blocks directly (docs/gguf.md). */
#include "qkv.h" /* first: qkv.h includes every area header in order */
#ifndef QKV_QUANT_H
#define QKV_QUANT_H
#ifdef __cplusplus
extern "C" {
#endif

/* The tensor types of a GGUF file; the values are ggml's type ids, as
 * stored in the file. X(ENUM, id, name, elements per block, bytes per block) */
#define QKV_QTYPES(X)                                                          \
    X(QKV_Q_F32, 0, "F32", 1, 4)                                               \
    X(QKV_Q_F16, 1, "F16", 1, 2)                                               \
    X(QKV_Q_Q4_0, 2, "Q4_0", 32, 18)                                           \
    X(QKV_Q_Q4_1, 3, "Q4_1", 32, 20)                                           \
    X(QKV_Q_Q5_0, 6, "Q5_0", 32, 22)                                           \
    X(QKV_Q_Q5_1, 7, "Q5_1", 32, 24)                                           \
    X(QKV_Q_Q8_0, 8, "Q8_0", 32, 34)                                           \
    X(QKV_Q_Q8_1, 9, "Q8_1", 32, 36)                                           \
    X(QKV_Q_Q2_K, 10, "Q2_K", 256, 84)                                         \
    X(QKV_Q_Q3_K, 11, "Q3_K", 256, 110)                                        \
    X(QKV_Q_Q4_K, 12, "Q4_K", 256, 144)                                        \
    X(QKV_Q_Q5_K, 13, "Q5_K", 256, 176)                                        \
    X(QKV_Q_Q6_K, 14, "Q6_K", 256, 210)                                        \
    X(QKV_Q_Q8_K, 15, "Q8_K", 256, 292)                                        \
    X(QKV_Q_I8, 24, "I8", 1, 1)                                                \
    X(QKV_Q_I16, 25, "I16", 1, 2)                                              \
    X(QKV_Q_I32, 26, "I32", 1, 4)                                              \
    X(QKV_Q_I64, 27, "I64", 1, 8)                                              \
    X(QKV_Q_F64, 28, "F64", 1, 8)                                              \
    X(QKV_Q_BF16, 30, "BF16", 1, 2)

typedef enum {
#define QKV_QTYPE_ENUM(e, id, name, blk, bytes) e = id,
    QKV_QTYPES(QKV_QTYPE_ENUM)
#undef QKV_QTYPE_ENUM
} qkv_qtype;

/* 1 if id is one of QKV_QTYPES (a type id read from a file is checked
 * with this before it is used as a qkv_qtype). */
QKV_API int qkv_qtype_known(int id);
/* "Q4_K"; "unknown" for an id not in the list. */
QKV_API const char *qkv_qtype_name(qkv_qtype t);
/* Elements per block and bytes per block (0 and 0 for an unknown id). */
QKV_API int qkv_qtype_block_elems(qkv_qtype t);
QKV_API int qkv_qtype_block_bytes(qkv_qtype t);
/* Bytes that n elements take (n a multiple of the block size); sets
 * QKV_ERR_SHAPE and returns 0 if n is not a multiple or the size
 * overflows, QKV_ERR_DTYPE if the type is unknown. */
QKV_API size_t qkv_qtype_row_bytes(qkv_qtype t, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
