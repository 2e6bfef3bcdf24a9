/* amx.h: AMX tiles with bf16 products, shared by the files built with
 * -mamx-tile -mamx-bf16 (the bf16 attention's AMX build,
 * attention_bf16.h; an RNN step's product, gemm_bf16_vnni.c). Include
 * only where __AMX_TILE__ and __AMX_BF16__ are defined, and run only
 * where qkv_amx_usable() (kernels/bf16.h) said yes: before Linux lends
 * the tiles to the process, the first tile instruction faults.
 *
 * Eight tile registers of 16 rows x 64 bytes, set up by a thread before
 * its products (amx_begin) and released after (amx_end); oneDNN sets its
 * own between calls, so every call sets them again. amx_gemm uses C tiles
 * 0-3 (16x16 FP32), A tiles 4-5 (16 rows x 16 bf16 pairs), B tiles 6-7
 * (16 pairs x 16 columns). tdpbf16ps adds A B into C: FP32 products and
 * sums, bf16 subnormal inputs taken as zero (as vdpbf16ps does). */
#ifndef QKV_AMX_H
#define QKV_AMX_H
#include <immintrin.h>
#include <stdint.h>

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

/* GCC 12's tile intrinsics pass their pointers to asm without saying that
 * memory is read (ldtilecfg is declared to read 8 of its 64 bytes); the
 * volatile asm keeps them in order today, and these barriers make sure
 * that every store before them (the configuration, packed operands, C)
 * is in memory when the tiles read it. */
#define AMX_MEMORY_BARRIER() __asm__ __volatile__("" ::: "memory")

static inline void amx_begin(void)
{
    amx_config c = {.palette = 1};
    for (int t = 0; t < 8; t++) {
        c.colsb[t] = 64;
        c.rows[t] = 16;
    }
    AMX_MEMORY_BARRIER();
    _tile_loadconfig(&c);
    AMX_MEMORY_BARRIER();
}

static inline void amx_end(void) { _tile_release(); }

/* C (M,N) (+)= A B over K2 pairs, M, N and K2 multiples of 16: A rows of
 * bf16 pairs (A(r,kk) = A[r*ars + kk]), B (K2,N) pairs with rows ldb
 * apart, C rows ldc apart (all in 32-bit words). Blocks of 32x32 (2x2
 * tiles) where they fit, of 16 otherwise; only C's M x N is read or
 * written. */
static inline void amx_gemm(int64_t M, int64_t N, int64_t K2, const uint32_t *A, int64_t ars, const uint32_t *B,
                            int64_t ldb, float *C, int64_t ldc, int accumulate)
{
    int64_t sa = ars * 4, sb = ldb * 4, sc = ldc * 4;
    AMX_MEMORY_BARRIER();
    for (int64_t c = 0; c < N; c += 32)
        for (int64_t r = 0; r < M; r += 32) {
            int r2 = r + 32 <= M, c2 = c + 32 <= N;
            float *c00 = C + r * ldc + c, *c10 = c00 + 16 * ldc;
            if (accumulate) {
                _tile_loadd(0, c00, sc);
                if (c2) _tile_loadd(1, c00 + 16, sc);
                if (r2) _tile_loadd(2, c10, sc);
                if (r2 && c2) _tile_loadd(3, c10 + 16, sc);
            } else {
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
            }
            for (int64_t k = 0; k < K2; k += 16) {
                const uint32_t *a = A + r * ars + k, *b = B + k * ldb + c;
                _tile_loadd(4, a, sa);
                _tile_loadd(6, b, sb);
                _tile_dpbf16ps(0, 4, 6);
                if (c2) {
                    _tile_loadd(7, b + 16, sb);
                    _tile_dpbf16ps(1, 4, 7);
                }
                if (r2) {
                    _tile_loadd(5, a + 16 * ars, sa);
                    _tile_dpbf16ps(2, 5, 6);
                    if (c2) _tile_dpbf16ps(3, 5, 7);
                }
            }
            _tile_stored(0, c00, sc);
            if (c2) _tile_stored(1, c00 + 16, sc);
            if (r2) _tile_stored(2, c10, sc);
            if (r2 && c2) _tile_stored(3, c10 + 16, sc);
        }
    AMX_MEMORY_BARRIER();
}
#endif
