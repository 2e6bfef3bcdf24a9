/* qkv/models.h: models and data sets built from the library's layers
 * (included by qkv.h). */
#ifndef QKV_MODELS_H
#define QKV_MODELS_H
#ifdef __cplusplus
extern "C" {
#endif

/* ---- the lecture's toy sequence task (Fleuret, "13.2 Attention
 * mechanisms") ----------------------------------------------------------- */

typedef enum {
    QKV_TOY_PAIRS = 0,   /* average the heights of the two triangles, and of the two boxes */
    QKV_TOY_POSITIONAL   /* average the two leftmost shapes, and the two rightmost */
} qkv_toy_task;

/* n sequences of length T, each two triangles and two boxes at random,
 * non-overlapping places, heights in [1,25], widths in [5,11] scaled by
 * T/100, plus uniform noise of amplitude noise (the lecture: 0.3).
 * input and target are (n,1,T) (Conv1d's (N,C,L)); target is noise-free. */
qkv_status qkv_toy_generate(qkv_rng *r, qkv_toy_task task, int64_t n, int64_t T, float noise,
                            float *input, float *target);

/* The lecture's binary positional encoding: channel k of position t is bit k
 * of t, for k < ceil(log2(T)). pe is (channels, T); returns channels. */
int64_t qkv_pos_binary_channels(int64_t T);
qkv_status qkv_pos_binary(int64_t T, float *pe);
/* Sinusoidal encoding as channels: pe[2i][t] = sin(t / 10000^(2i/d)),
 * pe[2i+1][t] = cos(t / 10000^(2i/d)); pe is (d, T), d even. */
qkv_status qkv_pos_sinusoidal(int64_t T, int64_t d, float *pe);

#ifdef __cplusplus
}
#endif
#endif
