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

/* F.gelu's approximate ("none" or NULL, "tanh") as a qkv_activation;
 * anything else is QKV_ERR_ARG naming fn (activation.c). */
qkv_status qkv_gelu_parse(const char *fn, const char *approximate, qkv_activation *act);
#endif
