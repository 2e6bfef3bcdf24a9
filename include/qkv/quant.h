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

/* ---- dequantization, quantization, products (src/kernels/quant_*.c) ---- */

/* dst (n) = the values of n elements of type t at src, bit for bit as
 * gguf-py's gguf.quants.dequantize and llama.cpp's dequantize_row_* give
 * them. Every floating-point and block type of the list but Q8_1 and the
 * integer types (QKV_ERR_DTYPE, naming the type); n a multiple of the
 * block (QKV_ERR_SHAPE otherwise). Large n on OpenMP's threads. */
QKV_API qkv_status qkv_dequantize(qkv_qtype t, const void *src, float *dst, int64_t n);
/* dst = n floats of src in type t: the bytes llama.cpp's reference
 * quantizer (quantize_row_*_ref) writes. F32, F16, BF16, Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0 and Q8_K; n a multiple of the block. */
QKV_API qkv_status qkv_quantize(qkv_qtype t, const float *src, void *dst, int64_t n);
/* 1 when qkv_dequantize (qkv_quantize) takes type t. */
QKV_API int qkv_qtype_can_dequantize(qkv_qtype t);
QKV_API int qkv_qtype_can_quantize(qkv_qtype t);

/* y (rows) = W x: W (rows, cols) in type t, row-major, each row cols
 * elements (cols a multiple of the block), as a GGUF 2-D tensor of dims
 * [cols, rows] stores it; x (cols). The product reads W's blocks as they
 * are: like llama.cpp, x is quantized to 8 bits (blocks of 32, or Q8_K
 * for the K-quants) and the sums are of int8 products (AVX2, or AVX-512
 * VNNI where the CPU has it), scaled per block in FP32; F32, F16, BF16,
 * Q2_K, Q3_K and Q8_K rows are widened a block at a time and multiplied
 * by x in FP32. Rows on OpenMP's threads; each y[r] is the same on any
 * number of them. Every type qkv_dequantize takes. */
QKV_API qkv_status qkv_qmatvec(qkv_qtype t, const void *W, int64_t rows, int64_t cols, const float *x,
                               float *y);
/* Y (n, rows) = X (n, cols) W^T, W as for qkv_qmatvec: row j of Y is
 * qkv_qmatvec of row j of X (the same bits). */
QKV_API qkv_status qkv_qmatmul(qkv_qtype t, const void *W, int64_t rows, int64_t cols, const float *X,
                               int64_t n, float *Y);
/* The products' kernels in use: "avx512vnni", "avx2" or "portable" (the
 * plain C reference, also taken under qkv_reference()). */
QKV_API const char *qkv_quant_isa(void);
/* Forces one of those by name (NULL: back to automatic); 0, changing
 * nothing, for a name unknown or not runnable on this CPU. For tests and
 * benchmarks. */
QKV_API int qkv_quant_force_isa(const char *name);

#ifdef __cplusplus
}
#endif
#endif
