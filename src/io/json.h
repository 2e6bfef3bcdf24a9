/* json.h: a small strict JSON reader (RFC 8259) for file headers.
 *
 * It parses a whole text into a tree of json_value and rejects anything the
 * grammar does not allow: trailing commas, single quotes, NaN/Infinity,
 * leading zeros, control characters and bad escapes in strings, invalid
 * UTF-8, lone surrogates. Numbers keep enough to tell integers from
 * fractions without going through double (so 2^63-1 stays exact).
 * Duplicate object keys are kept; callers that care check for them.
 */
#ifndef QKV_IO_JSON_H
#define QKV_IO_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    JSON_NULL = 0, JSON_FALSE, JSON_TRUE, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT
} json_type;

typedef struct json_value json_value;
typedef struct json_member json_member;

struct json_value {
    json_type type;
    size_t pos; /* byte offset of the value in the text, for messages */
    union {
        /* Decoded UTF-8, NUL-terminated; len excludes the terminator and
         * may be larger than strlen(s) when the text had "\u0000". */
        struct { char *s; size_t len; } str;
        /* mag is the integer part's magnitude, valid when !big.
         * integral: written without fraction or exponent. */
        struct { uint64_t mag; int neg, integral, big; } num;
        struct { json_value *items; size_t n; } arr;
        struct { json_member *items; size_t n; } obj;
    } u;
};

struct json_member {
    char *key;      /* decoded, NUL-terminated */
    size_t key_len; /* may exceed strlen(key) when the key had "\u0000" */
    json_value val;
};

typedef struct {
    int max_depth;    /* arrays/objects nested deeper than this are an error */
    size_t max_array; /* arrays with more items are an error; 0: no limit */
} json_limits;

typedef enum { JSON_OK = 0, JSON_ESYNTAX, JSON_ENOMEM } json_result;

/* Parses text[0, len). With end NULL only JSON whitespace may follow the
 * value; otherwise *end gets the offset just past the value and the caller
 * judges what follows. On failure err gets "at byte N: what was wrong". */
json_result json_parse(const char *text, size_t len, const json_limits *lim, json_value **out,
                       size_t *end, char *err, size_t errlen);
void json_free(json_value *v);

/* "a string", "an object", ... for messages. */
const char *json_type_name(json_type t);

/* Whether s[0, n) is well-formed UTF-8 (no overlongs, surrogates or code
 * points past U+10FFFF). */
int json_utf8_valid(const char *s, size_t n);

#endif
