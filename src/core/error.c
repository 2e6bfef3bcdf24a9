/* error.c: the thread-local message behind qkv_last_error(). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "core/internal.h"

static _Thread_local char qkv_errbuf[512];

qkv_status qkv_fail(qkv_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(qkv_errbuf, sizeof qkv_errbuf, fmt, ap);
    va_end(ap);
    return s;
}

const char *qkv_last_error(void) { return qkv_errbuf; }

qkv_status qkv_fail_in(const char *fn, qkv_status s)
{
    size_t n = strlen(fn);
    if (s == QKV_OK || (strncmp(qkv_errbuf, fn, n) == 0 && qkv_errbuf[n] == ':')) return s;
    char inner[sizeof qkv_errbuf];
    memcpy(inner, qkv_errbuf, sizeof inner);
    return qkv_fail(s, "%s: %s", fn, inner);
}

const char *qkv_status_name(qkv_status s)
{
    switch (s) {
    case QKV_OK: return "QKV_OK";
    case QKV_ERR_ARG: return "QKV_ERR_ARG";
    case QKV_ERR_SHAPE: return "QKV_ERR_SHAPE";
    case QKV_ERR_DTYPE: return "QKV_ERR_DTYPE";
    case QKV_ERR_NOMEM: return "QKV_ERR_NOMEM";
    case QKV_ERR_IO: return "QKV_ERR_IO";
    case QKV_ERR_FORMAT: return "QKV_ERR_FORMAT";
    case QKV_ERR_STATE: return "QKV_ERR_STATE";
    case QKV_ERR_NOTFOUND: return "QKV_ERR_NOTFOUND";
    }
    return "QKV_ERR_UNKNOWN";
}

const char *qkv_version(void)
{
    return QKV_VERSION;
}
