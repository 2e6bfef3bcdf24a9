/* score.h: what each score function needs, read from include/qkv/attention.h's
 * QKV_SCORE_KINDS (the one list), for score.c and the models that pick a
 * kind (src/models/seq2seq_rnn.c). Out of range: NULL and 0. */
#ifndef QKV_ATTENTION_SCORE_H
#define QKV_ATTENTION_SCORE_H
#include "qkv/attention.h"

#define QKV_SCORE_COL_NAME_(NAME, name, same_dims, rank, params) case QKV_SCORE_##NAME: return name;
#define QKV_SCORE_COL_DIMS_(NAME, name, same_dims, rank, params) case QKV_SCORE_##NAME: return same_dims;
#define QKV_SCORE_COL_RANK_(NAME, name, same_dims, rank, params) case QKV_SCORE_##NAME: return rank;
#define QKV_SCORE_COL_PARAMS_(NAME, name, same_dims, rank, params) case QKV_SCORE_##NAME: return params;

/* "dot", "scaled_dot", ...; NULL for a value that is not a kind. */
static inline const char *qkv_score_kind_name(int k)
{
    switch (k) { QKV_SCORE_KINDS(QKV_SCORE_COL_NAME_) }
    return NULL;
}
/* Compares s with h directly: needs query_dim == key_dim. */
static inline int qkv_score_kind_same_dims(int k)
{
    switch (k) { QKV_SCORE_KINDS(QKV_SCORE_COL_DIMS_) }
    return 0;
}
/* Projects to the rank r (reduced rank, additive). */
static inline int qkv_score_kind_has_rank(int k)
{
    switch (k) { QKV_SCORE_KINDS(QKV_SCORE_COL_RANK_) }
    return 0;
}
/* Has parameters (W_a, U_a, V_a, v_a): needs params and an rng at init. */
static inline int qkv_score_kind_has_params(int k)
{
    switch (k) { QKV_SCORE_KINDS(QKV_SCORE_COL_PARAMS_) }
    return 0;
}

#undef QKV_SCORE_COL_NAME_
#undef QKV_SCORE_COL_DIMS_
#undef QKV_SCORE_COL_RANK_
#undef QKV_SCORE_COL_PARAMS_
#endif
