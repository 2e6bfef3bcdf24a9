/* run_format.h: the one text format that describes a run (run_format.c):
 * "key=value" lines, one field a line, written and read through a table of
 * the fields (name, type, where in the struct, range). Every trainer keeps
 * its model's configuration and its run's options in this format inside
 * the checkpoint's metadata (FAMILY.config, FAMILY.train; docs/cli.md,
 * "A run's metadata"). Reading is strict: an unknown key, a key twice, a
 * value out of range or not a number, a required key missing are errors
 * naming the key. */
#ifndef QKV_CLI_RUN_FORMAT_H
#define QKV_CLI_RUN_FORMAT_H
#include <stddef.h>
#include "cli/cli.h"

typedef enum {
    RF_I64,    /* int64_t in [lo, hi] */
    RF_INT,    /* int in [lo, hi] */
    RF_U64,    /* uint64_t (lo, hi ignored) */
    RF_F64,    /* double in [lo, hi], written %.17g */
    RF_F32,    /* float in [lo, hi], written %.9g */
    RF_STR,    /* char[size], no newline in it */
    RF_NAME,   /* an int: the index of the value in names[0..n_names) */
    RF_FUNC,   /* an int through to_text / from_text (an enum with its own names) */
} rf_type;

typedef struct {
    const char *key;
    rf_type type;
    size_t off;   /* offsetof the field */
    size_t size;  /* RF_STR: the array's size */
    double lo, hi;
    const char *const *names; /* RF_NAME */
    int n_names;
    const char *(*to_text)(int v);            /* RF_FUNC */
    int (*from_text)(const char *s, int *v);  /* RF_FUNC: 1 if s names a value */
    int optional; /* may be absent on reading (the struct's value stays) */
} rf_field;

/* Table rows: RF_NUM(struct, field, type, lo, hi), RF_STRING(struct, field),
 * RF_CHOICE(struct, field, names, n). */
#define RF_NUM(S, F, T, LO, HI) {#F, T, offsetof(S, F), 0, LO, HI, NULL, 0, NULL, NULL, 0}
#define RF_STRING(S, F) {#F, RF_STR, offsetof(S, F), sizeof(((S *)0)->F), 0, 0, NULL, 0, NULL, NULL, 0}
#define RF_CHOICE(S, F, NAMES, N) {#F, RF_NAME, offsetof(S, F), 0, 0, 0, NAMES, N, NULL, NULL, 0}
/* A field under another key, an enum through its own functions. */
#define RF_CHOICE_AS(KEY, S, F, NAMES, N) {KEY, RF_NAME, offsetof(S, F), 0, 0, 0, NAMES, N, NULL, NULL, 0}
#define RF_ENUM(S, F, TO, FROM) {#F, RF_FUNC, offsetof(S, F), 0, 0, 0, NULL, 0, TO, FROM, 0}

/* The fields f[0..n) of obj as "key=value\n" lines into buf (cap bytes);
 * a value with a newline, or too small a buffer, is QKV_ERR_ARG naming it. */
qkv_status rf_write(const rf_field *f, int n, const void *obj, char *buf, size_t cap);
/* The lines of text into the fields of obj (a struct of size bytes);
 * what ("model.ckpt: vision.train") begins the messages. obj is changed
 * only on success. */
qkv_status rf_read(const char *what, const char *text, const rf_field *f, int n, void *obj, size_t size);
#define RF_COUNT(table) ((int)(sizeof(table) / sizeof *(table)))
/* The checkpoint of a run: arg itself when it is a file; in a run's folder
 * the first of the families' checkpoint files there (model.ckpt,
 * checkpoint.safetensors, lm.ckpt), or DIR/fallback when there is none.
 * qkv eval, generate, translate and classify open a run through it. */
void rf_run_checkpoint(const char *arg, const char *fallback, char *path, size_t n);
/* Whether text is in this format (a "key=value" first line ending with a
 * newline) rather than an older one-line format. */
int rf_is_lines(const char *text);
#endif
