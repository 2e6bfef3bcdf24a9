/* attention_decode.h: attention of a few new queries over a long KV cache
 * (the cached decoding step), split over the cache length across threads.
 *
 * For each (row n, head h): T queries q (T,D) over S keys and values, each
 * stored as (S,D) rows of one block; block (n,h) starts at
 * (n*H + h) * kv_stride floats. The key range is cut into chunks of `chunk`
 * keys; every (row, head, chunk) is one work item on OpenMP's threads and
 * leaves, per query, its running max m, its sum of exp(s - m) l and its
 * unnormalised output o = sum exp(s - m) v. The chunks of a query are then
 * merged with the log-sum-exp rule:
 *   M = max_c m_c,  out = sum_c exp(m_c - M) o_c / sum_c exp(m_c - M) l_c.
 * A query whose every key is masked gives output 0 (as every attention
 * path of the library); a NaN score gives it NaN (docs/reliability.md,
 * "NaN and infinity"). Forward only: no lse, no weights, no gradients. */
#ifndef QKV_ATTENTION_DECODE_H
#define QKV_ATTENTION_DECODE_H
#include <stddef.h>
#include "core/internal.h"

/* Keys per work item when desc.chunk is 0. On 2 cores, bench/decode.c's
 * model (8 heads, batch 1) stepped at the same speed with 128, 256, 512 or
 * 1024 (within the machine's noise): 8 (row, head) pairs already keep 2
 * threads busy. 256 leaves 16 items per (row, head) at 4096 keys for
 * machines with more cores than heads, at 16 x (D + 2) floats of scratch. */
enum { QKV_DECODE_CHUNK = 256 };

/* Below this many multiply-adds of scores (N*H*T*S*D) a call runs on one
 * thread. On AVX-512 one key of D = 32 costs about 4 ns on one thread
 * (q.k, exp, p v: bench/layers_bench --one decode_S1088_D32, 8 heads in
 * 35 us), so 2^19 is about 60 us of work, where waking a second thread
 * (tens of microseconds under OMP_WAIT_POLICY=PASSIVE on a busy machine)
 * starts to pay. `qkv train lm`'s default model (4 heads of 32) after 1024
 * tokens is 139k per layer: one thread (generation after 1024 tokens was
 * slower on two threads than on one with QKV_PAR_MIN as the threshold).
 * Where OpenMP's threads spin between regions (OMP_WAIT_POLICY unset or
 * ACTIVE) a region costs little, and from 2^17 two threads pay: the LM
 * 192,5,6 (6 heads of 32) after 1024 tokens generated 2,555-3,093 tokens/s
 * with 2^19 and 3,543-4,184 with 2^17, alternated; under PASSIVE 2,722-
 * 2,855 against 1,079-1,263 (build/bench/lm_bench --model 192,5,6
 * generate 1024 64, 2026-11-25). */
enum { QKV_DECODE_PAR_MIN = 1 << 19, QKV_DECODE_PAR_MIN_SPIN = 1 << 17 };

typedef struct {
    int64_t N, H;       /* rows, heads */
    int64_t T, S, D;    /* queries, keys (and values), head dim; T <= S when causal */
    int64_t kv_stride;  /* floats between consecutive (n,h) blocks of k (and v), >= S*D */
    float scale;        /* scores are scale * q.k */
    int causal;         /* bottom-right: query t sees keys j <= S - T + t */
    const uint8_t *kpm; /* key padding (N, kpm_stride) bool, true = masked; NULL for none */
    int64_t kpm_stride; /* bytes between rows of kpm, >= S */
    int64_t chunk;      /* keys per work item (at most S are used); 0 for QKV_DECODE_CHUNK */
    /* Grouped-query attention: query heads per key/value head. Head h of
     * row n reads k, v block n*(H/group) + h/group; 0 or 1: block n*H + h. */
    int64_t group;
    /* Sliding window (with causal): query t, at position p = S - T + t,
     * sees keys p - span < j <= p only; 0: no window. */
    int64_t span;
} qkv_decode_desc;

/* Scratch floats the kernel needs with `threads` threads. */
size_t qkv_decode_scratch(const qkv_decode_desc *d, int threads);

/* q (N,H,T,D); k, v: N*H (N*H/group) blocks of (S,D) rows, kv_stride apart;
 * out (N,H,T,D). Checks d and the pointers (qkv_fail on bad input), takes
 * its scratch from the arena a (released before it returns) and runs on
 * omp_get_max_threads() threads; on one inside a parallel region or when
 * the work (N*H*T*S*D multiply-adds of scores) is under QKV_PAR_MIN. The
 * result does not depend on the thread count. */
qkv_status qkv_decode_attend(qkv_arena *a, const qkv_decode_desc *d, const float *q,
                             const float *k, const float *v, float *out);
/* The same over keys and values stored in fp16 (an fp16 KV cache),
 * converted to floats as they are loaded. */
qkv_status qkv_decode_attend_half(qkv_arena *a, const qkv_decode_desc *d, const float *q,
                                  const uint16_t *k, const uint16_t *v, float *out);
/* The same over bf16 keys and values (a bf16 KV cache), widened to floats
 * as they are loaded (a shift: exact); FP32 arithmetic. AVX-512 loops
 * where the attention kernels run their AVX-512 build
 * (qkv_attn_simd_current()), else the AVX2 or portable ones: the sums'
 * order, so the last bits, differ between them. */
qkv_status qkv_decode_attend_bf16(qkv_arena *a, const qkv_decode_desc *d, const float *q,
                                  const uint16_t *k, const uint16_t *v, float *out);
#endif
