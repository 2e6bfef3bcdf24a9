/* run_format.c: "key=value" lines through a table of fields (run_format.h). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli/run_format.h"

/* The value of field f of obj as text into v (n bytes). */
static void value_text(const rf_field *f, const void *obj, char *v, size_t n)
{
    const char *p = (const char *)obj + f->off;
    int iv;
    switch (f->type) {
    case RF_I64: snprintf(v, n, "%lld", (long long)*(const int64_t *)p); break;
    case RF_INT: snprintf(v, n, "%d", *(const int *)p); break;
    case RF_U64: snprintf(v, n, "%llu", (unsigned long long)*(const uint64_t *)p); break;
    case RF_F64: snprintf(v, n, "%.17g", *(const double *)p); break;
    case RF_F32: snprintf(v, n, "%.9g", (double)*(const float *)p); break;
    case RF_STR: snprintf(v, n, "%s", p); break;
    case RF_NAME:
        iv = *(const int *)p;
        snprintf(v, n, "%s", iv >= 0 && iv < f->n_names ? f->names[iv] : "?");
        break;
    case RF_FUNC: {
        const char *s = f->to_text(*(const int *)p);
        snprintf(v, n, "%s", s ? s : "?");
        break;
    }
    }
}

qkv_status rf_write(const rf_field *f, int n, const void *obj, char *buf, size_t cap)
{
    size_t k = 0;
    char v[1100];
    for (int i = 0; i < n; i++) {
        value_text(&f[i], obj, v, sizeof v);
        if (strchr(v, '\n') || !strcmp(v, "?"))
            return qkv_cli_fail(QKV_ERR_ARG, "run format: %s '%.60s' cannot be written", f[i].key, v);
        int w = snprintf(buf + k, cap - k, "%s=%s\n", f[i].key, v);
        if (w < 0 || (size_t)w >= cap - k)
            return qkv_cli_fail(QKV_ERR_ARG, "run format: %s does not fit in %zu bytes", f[i].key, cap);
        k += (size_t)w;
    }
    return QKV_OK;
}

int rf_is_lines(const char *text)
{
    const char *nl = strchr(text, '\n'), *eq = strchr(text, '=');
    return nl && eq && eq < nl && !memchr(text, ' ', (size_t)(eq - text));
}

/* v (the text of key f->key) into the field at p. */
static qkv_status parse_value(const char *what, const rf_field *f, const char *v, char *p)
{
    char *end = NULL;
    errno = 0;
    if (f->type == RF_I64 || f->type == RF_INT) {
        long long x = strtoll(v, &end, 10);
        if (!*v || errno || *end || x < f->lo || x > f->hi)
            return qkv_cli_fail(QKV_ERR_FORMAT, "%s: %s=%s is not a whole number in [%.0f, %.0f]", what, f->key,
                                v, f->lo, f->hi);
        if (f->type == RF_I64) *(int64_t *)p = x;
        else *(int *)p = (int)x;
    } else if (f->type == RF_U64) {
        unsigned long long x = strtoull(v, &end, 10);
        if (!*v || *v == '-' || errno || *end)
            return qkv_cli_fail(QKV_ERR_FORMAT, "%s: %s=%s is not a whole number >= 0", what, f->key, v);
        *(uint64_t *)p = x;
    } else if (f->type == RF_F64 || f->type == RF_F32) {
        double x = strtod(v, &end);
        if (!*v || errno || *end || !(x >= f->lo && x <= f->hi))
            return qkv_cli_fail(QKV_ERR_FORMAT, "%s: %s=%s is not a number in [%g, %g]", what, f->key, v, f->lo,
                                f->hi);
        if (f->type == RF_F64) *(double *)p = x;
        else *(float *)p = (float)x;
    } else if (f->type == RF_STR) {
        if (strlen(v) >= f->size)
            return qkv_cli_fail(QKV_ERR_FORMAT, "%s: %s is longer than %zu bytes", what, f->key, f->size - 1);
        snprintf(p, f->size, "%s", v);
    } else if (f->type == RF_NAME) {
        int k = 0;
        while (k < f->n_names && strcmp(v, f->names[k])) k++;
        if (k == f->n_names) return qkv_cli_fail(QKV_ERR_FORMAT, "%s: %s=%s is not a known name", what, f->key, v);
        *(int *)p = k;
    } else if (!f->from_text(v, (int *)p)) {
        return qkv_cli_fail(QKV_ERR_FORMAT, "%s: %s=%s is not a known name", what, f->key, v);
    }
    return QKV_OK;
}

/* Reads line [s, e) ("key=value") into copy; seen[] marks the fields read. */
static qkv_status read_line(const char *what, const char *s, const char *e, const rf_field *f, int n,
                            char *seen, char *copy)
{
    char line[1200];
    if ((size_t)(e - s) >= sizeof line) return qkv_cli_fail(QKV_ERR_FORMAT, "%s: a line is too long", what);
    memcpy(line, s, (size_t)(e - s));
    line[e - s] = 0;
    char *eq = strchr(line, '=');
    if (!eq) return qkv_cli_fail(QKV_ERR_FORMAT, "%s: '%.40s' is not key=value", what, line);
    *eq = 0;
    int i = 0;
    while (i < n && strcmp(f[i].key, line)) i++;
    if (i == n) return qkv_cli_fail(QKV_ERR_FORMAT, "%s: unknown key '%.40s'", what, line);
    if (seen[i]) return qkv_cli_fail(QKV_ERR_FORMAT, "%s: key '%s' appears twice", what, line);
    seen[i] = 1;
    return parse_value(what, &f[i], eq + 1, copy + f[i].off);
}

qkv_status rf_read(const char *what, const char *text, const rf_field *f, int n, void *obj, size_t size)
{
    char *copy = malloc(size), seen[64] = {0};
    if (!copy || n > 64) return free(copy), qkv_cli_fail(QKV_ERR_NOMEM, "%s: out of memory", what);
    memcpy(copy, obj, size);
    qkv_status s = QKV_OK;
    for (const char *p = text; *p && !s;) {
        const char *e = strchr(p, '\n');
        if (!e) e = p + strlen(p);
        s = read_line(what, p, e, f, n, seen, copy);
        p = *e ? e + 1 : e;
    }
    for (int i = 0; i < n && !s; i++)
        if (!seen[i] && !f[i].optional) s = qkv_cli_fail(QKV_ERR_FORMAT, "%s: no key '%s'", what, f[i].key);
    if (!s) memcpy(obj, copy, size);
    free(copy);
    return s;
}

void rf_run_checkpoint(const char *arg, const char *fallback, char *path, size_t n)
{
    /* VISION_CKPT_NAME, MT_CHECKPOINT, LM_CKPT_NAME */
    static const char *const names[] = {"model.ckpt", "checkpoint.safetensors", "lm.ckpt"};
    struct stat st;
    snprintf(path, n, "%s", arg);
    if (stat(arg, &st) != 0 || !S_ISDIR(st.st_mode)) return;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(path, n, "%s/%s", arg, names[i]);
        if (access(path, F_OK) == 0) return;
    }
    snprintf(path, n, "%s/%s", arg, fallback);
}
