/* libFuzzer target for the JSON reader (src/io/json.c), used by the
 * safetensors header and GPT-2's encoder.json: any bytes give a tree or
 * JSON_ESYNTAX with a message, never a crash, leak or out-of-bounds access.
 * An accepted text's strings are valid UTF-8 of the length given. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"

/* Walks the tree and checks what json.h promises of it. */
static void walk(const json_value *v, int depth)
{
    if (depth > 8) abort(); /* deeper than the limit allows */
    switch (v->type) {
    case JSON_STRING:
        if (v->u.str.s[v->u.str.len] != '\0' || !json_utf8_valid(v->u.str.s, v->u.str.len)) abort();
        break;
    case JSON_ARRAY:
        if (v->u.arr.n > 1000) abort();
        for (size_t i = 0; i < v->u.arr.n; i++) walk(&v->u.arr.items[i], depth + 1);
        break;
    case JSON_OBJECT:
        for (size_t i = 0; i < v->u.obj.n; i++) {
            const json_member *m = &v->u.obj.items[i];
            if (m->key[m->key_len] != '\0' || !json_utf8_valid(m->key, m->key_len)) abort();
            walk(&m->val, depth + 1);
        }
        break;
    default:
        if (v->type > JSON_OBJECT) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_limits lim = {8, 1000};
    json_value *v = NULL;
    char err[160] = "";
    size_t end = 0;
    /* Both modes: the whole text, and a value followed by anything. */
    json_result r = json_parse((const char *)data, size, &lim, &v, NULL, err, sizeof err);
    if (r == JSON_OK) {
        if (!v) abort();
        walk(v, 0);
        json_free(v);
    } else if (r != JSON_ESYNTAX || err[0] == '\0') {
        abort();
    }
    v = NULL;
    r = json_parse((const char *)data, size, &lim, &v, &end, err, sizeof err);
    if (r == JSON_OK) {
        if (!v || end > size) abort();
        walk(v, 0);
        json_free(v);
    }
    return 0;
}
