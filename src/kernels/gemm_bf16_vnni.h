/* gemm_bf16_vnni.h: products of a few rows (an RNN step's state, M = the
 * batch) against a weight converted to bf16 once and packed in pairs along
 * K, the layout of AVX512-BF16's dot products: C (M,N) = A B + beta C with A
 * (M,K) rounded to bf16 as it is read and FP32 sums, like qkv_gemm_bf16.
 * oneDNN runs such a product (64 x 768 x 256) on one thread and spends a
 * good part of it in its per-call setup (bench/bf16_gemm --rnn,
 * docs/bf16.md). */
#ifndef QKV_GEMM_BF16_VNNI_H
#define QKV_GEMM_BF16_VNNI_H
#include <stdint.h>

/* uint16_t elements of a packed op(B) (K,N): ceil(K/2) pairs of rows. */
int64_t qkv_bf16_vnni_len(int64_t K, int64_t N);
/* P = op(B) (K,N) packed: P[((k/2) N + n) 2 + k%2] = bf16(op(B)[k][n]),
 * 0 past K. B is (K,N) compact, or (N,K) compact when tb (a weight W
 * (N,K) used as W^T). */
/* Only where qkv_gemm_bf16_vnni_usable. */
void qkv_bf16_vnni_pack(int tb, int64_t K, int64_t N, const float *B, uint16_t *P);
/* 1 when qkv_gemm_bf16_vnni runs an (M,N,K) product on this CPU: AVX512-BF16,
 * N a multiple of 16, K at most 8192, outside qkv_reference(), and the bf16
 * products on their automatic path (qkv_gemm_bf16_set_path: tests that
 * force oneDNN or the fallback get those). */
int qkv_gemm_bf16_vnni_usable(int64_t M, int64_t N, int64_t K);
/* K's limit of qkv_gemm_bf16_vnni, 0 where it was not built. */
extern const int qkv_gemm_bf16_vnni_kmax;
/* C (M,N) = bf16(A) (M,K) P + beta C, A and C compact, on OpenMP's threads
 * by rows; beta 0 writes C without reading it. Only where
 * qkv_gemm_bf16_vnni_usable(M, N, K). */
void qkv_gemm_bf16_vnni(int64_t M, int64_t N, int64_t K, const float *A, const uint16_t *P, float beta, float *C);
/* vdpbf16ps takes subnormal inputs (below 1.2e-38) as 0 and flushes
 * subnormal results, as oneDNN's bf16 products (the same instruction) do;
 * qkv_gemm_bf16's FP32 fallback for small products keeps them. */
/* qkv_gemm_bf16_vnni on the calling thread alone (an RNN's steps run
 * inside one parallel region, each thread on its own rows): the same
 * bits, each element's sum being the same on any split of the rows. */
void qkv_gemm_bf16_vnni_rows(int64_t M, int64_t N, int64_t K, const float *A, const uint16_t *P, float beta,
                             float *C);
/* oneDNN's own layout of a matmul's bf16 weights op(B) (K,N) on this
 * CPU (the one its matmul asks for given format "any": BA16a64b2a): K
 * padded to a multiple of 32 and N to 64, zeros in the padding, then
 *   P[(n/64) Kp 64 + (k/32) 2048 + (k%32/2) 128 + (n%64) 2 + k%2]
 *     = bf16(op(B)[k][n]).
 * Given packed so, the matmul skips its own copy of B in every call
 * (docs/bf16.md, "Weights in oneDNN's layout"). uint16_t elements: */
int64_t qkv_bf16_blocked_len(int64_t K, int64_t N);
/* P = op(B) packed as above, from B (K,N) with leading dimension ldb, or
 * from B (N,K) (ldb) when tb (a weight W (N,K) used as W^T); on OpenMP's
 * threads where large. */
void qkv_bf16_blocked_pack(int tb, int64_t K, int64_t N, const float *B, int64_t ldb, uint16_t *P);
/* The same from B16 (K,N), compact bf16 (half the bytes to read: a linear
 * layer's input x kept in bf16 by its forward, for dW = dy^T x). */
void qkv_bf16_blocked_pack16(int64_t K, int64_t N, const uint16_t *B16, uint16_t *P);
/* A linear layer's W (N,K) (leading dimension ldw) read once for both of
 * its products: Pt = qkv_bf16_blocked_pack(1, K, N, W, ldw) (the forward's
 * x W^T) and Pn = qkv_bf16_blocked_pack(0, N, K, W, ldw) (the backward's
 * dy W), the same bits; either may be NULL. */
void qkv_bf16_blocked_pack2(int64_t K, int64_t N, const float *W, int64_t ldw, uint16_t *Pt, uint16_t *Pn);
/* A linear layer's x (M,K) compact, read once: x16 = its bf16 copy
 * (qkv_bf16_from_floats' bits) and xb = qkv_bf16_blocked_pack16(M, K, x16)
 * (x as op(B) of the backward's dW = dy^T x). */
void qkv_bf16_copy_blocked(int64_t M, int64_t K, const float *x, uint16_t *x16, uint16_t *xb);
#endif
