/* bmm.h: the batched product behind qkv_bmm, shared with the score
 * functions (which need b transposed and a scale). Internal. */
#ifndef QKV_NN_BMM_H
#define QKV_NN_BMM_H
#include "core/internal.h"

/* y = alpha * a op(b), per batch, recorded on the tape.
 * a (B,M,K) or (B,K) (taken as M = 1); b (B,K,P), or (B,P,K) when trans_b
 * -> y (B,M,P), or (B,P) when a is 2-D. The caller has checked the shapes
 * and dtypes. */
qkv_status qkv_bmm_ex(qkv_ctx *c, qkv_tensor *a, qkv_tensor *b, int trans_b, float alpha,
                      qkv_tensor **y);
#endif
