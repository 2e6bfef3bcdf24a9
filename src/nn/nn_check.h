/* nn_check.h: argument checks shared by the layers in src/nn/. Internal. */
#ifndef QKV_NN_CHECK_H
#define QKV_NN_CHECK_H
#include "core/internal.h"

static inline const char *qkv_dtype_name(qkv_dtype d)
{
    return d == QKV_F32 ? "F32" : d == QKV_BOOL ? "BOOL" : d == QKV_I64 ? "I64" : "unknown";
}

/* Checks that tensor argument arg of function fn is present and has dtype
 * want, with its elements allocated. */
static inline qkv_status qkv_need_dtype(const qkv_tensor *t, qkv_dtype want, const char *fn,
                                        const char *arg)
{
    QKV_NEED(t, fn, arg);
    int has = want == QKV_F32 ? t->data != NULL : want == QKV_I64 ? t->idx != NULL : t->mask != NULL;
    if (t->dtype != want || (!has && qkv_tensor_numel(t) > 0))
        return qkv_fail(QKV_ERR_DTYPE, "%s: %s is %s, expected %s", fn, arg,
                        qkv_dtype_name(t->dtype), qkv_dtype_name(want));
    return QKV_OK;
}

#define QKV_NEED_F32(t, fn, arg) QKV_TRY(qkv_need_dtype((t), QKV_F32, (fn), (arg)))

/* Checks an optional (C) F32 argument arg of fn (a norm's weight, bias or
 * running statistics) against x, whose C (x's "what": "" or " channels")
 * it must match. */
static inline qkv_status qkv_check_vec_c(const char *fn, const qkv_tensor *t, const char *arg,
                                         const qkv_tensor *x, int64_t C, const char *what)
{
    if (!t) return QKV_OK;
    QKV_NEED_F32(t, fn, arg);
    if (t->ndim != 1 || t->shape[0] != C) {
        char bt[64], bx[64];
        return qkv_fail(QKV_ERR_SHAPE, "%s: %s %s does not match x %s%s, expected (%lld,)", fn, arg,
                        qkv_shape_str(t, bt, sizeof bt), qkv_shape_str(x, bx, sizeof bx), what,
                        (long long)C);
    }
    return QKV_OK;
}

/* The pointer arguments of a module's _init: the module, the parameter
 * store and (need_rng) the generator, checked in that order. */
static inline qkv_status qkv_nn_init_args(const char *fn, const void *m, const qkv_params *p,
                                          const qkv_rng *rng, int need_rng)
{
    QKV_NEED(m, fn, "module");
    QKV_NEED(p, fn, "params");
    if (need_rng) QKV_NEED(rng, fn, "rng");
    return QKV_OK;
}

/* F.gelu's approximate ("none" or NULL, "tanh") as a qkv_activation;
 * anything else is QKV_ERR_ARG naming fn (activation.c). */
qkv_status qkv_gelu_parse(const char *fn, const char *approximate, qkv_activation *act);
#endif
