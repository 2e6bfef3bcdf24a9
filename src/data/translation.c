/* translation.c: English/French sentence pairs from gettext catalogues:
 * each pair cleaned (translation_clean.c) and filtered, then at the end
 * sorted, deduplicated and split by a hash of the English side into
 * train/valid/test TSV files. docs/translation_data.md. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/internal.h"
#include "data/tokenizer_internal.h"

typedef struct {
    char *en, *fr; /* one allocation: en's text, then fr's */
    uint64_t hash;  /* of en: the sort key and the split */
} tr_pair;

struct qkv_translation_set {
    int64_t max_words;
    tr_pair *v;
    int64_t n, cap;
};

/* FNV-1a over the bytes, then splitmix64's finaliser to mix the low bits. */
static uint64_t tr_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    h ^= h >> 30, h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27, h *= 0x94d049bb133111ebULL;
    return h ^ (h >> 31);
}

/* 90% train, 5% valid, 5% test by the hash's remainder mod 100. */
static int tr_split(uint64_t h)
{
    uint64_t b = h % 100;
    return b < 90 ? 0 : b < 95 ? 1 : 2;
}

int qkv_translation_split(const char *english) { return english ? tr_split(tr_hash(english)) : 0; }

qkv_status qkv_translation_set_new(int64_t max_words, qkv_translation_set **out)
{
    static const char fn[] = "translation_set_new";
    QKV_NEED(out, fn, "out");
    *out = NULL;
    if (max_words < 1)
        return qkv_fail(QKV_ERR_ARG, "%s: max_words is %" PRId64 ", expected >= 1", fn, max_words);
    *out = calloc(1, sizeof **out);
    if (!*out) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    (*out)->max_words = max_words;
    return QKV_OK;
}

/* the deprecated name (docs/core.md, "Names") */
qkv_status qkv_translation_set_init(int64_t max_words, qkv_translation_set **out)
{
    return qkv_translation_set_new(max_words, out);
}

void qkv_translation_set_free(qkv_translation_set *s)
{
    if (!s) return;
    for (int64_t i = 0; i < s->n; i++) free(s->v[i].en);
    free(s->v), free(s);
}

/* A control character (C0, DEL, C1) or invalid UTF-8 anywhere in s? */
static int has_control(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0, l; i < n; i += l) {
        int32_t cp = tok_utf8_decode(u + i, n - i, &l);
        if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F)) return 1;
    }
    return 0;
}

static int64_t words(const char *s)
{
    int64_t n = *s ? 1 : 0;
    for (; *s; s++) n += *s == ' ';
    return n;
}

/* Equal once lower-cased (tok_lower_cp), both valid UTF-8. */
static int same_lower(const char *a, const char *b)
{
    const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
    size_t n = strlen(a), m = strlen(b), i = 0, j = 0, l, k;
    while (i < n && j < m) {
        int32_t p = tok_utf8_decode(x + i, n - i, &l), q = tok_utf8_decode(y + j, m - j, &k);
        if (tok_lower_cp((uint32_t)p) != tok_lower_cp((uint32_t)q)) return 0;
        i += l, j += k;
    }
    return i == n && j == m;
}

qkv_status qkv_translation_add_pair(qkv_translation_set *s, const char *en, const char *fr,
                                    qkv_translation_counts *c)
{
    static const char fn[] = "translation_add_pair";
    QKV_NEED(s, fn, "s");
    QKV_NEED(en, fn, "en");
    QKV_NEED(fr, fn, "fr");
    QKV_NEED(c, fn, "c");
    c->read++;
    char *e, *f;
    QKV_TRY(qkv_translation_clean(en, &e));
    qkv_status st = qkv_translation_clean(fr, &f);
    if (st != QKV_OK) return free(e), st;
    int64_t *why = NULL;
    if (!*e || !*f) why = &c->empty;
    else if (has_control(e) || has_control(f)) why = &c->control;
    else if (same_lower(e, f)) why = &c->untranslated;
    else if (words(e) > s->max_words || words(f) > s->max_words) why = &c->too_long;
    if (why) {
        (*why)++;
        free(e), free(f);
        return QKV_OK;
    }
    size_t le = strlen(e), lf = strlen(f);
    char *both = malloc(le + lf + 2);
    if (both) memcpy(both, e, le + 1), memcpy(both + le + 1, f, lf + 1);
    free(e), free(f);
    if (!both) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    if (s->n == s->cap) {
        int64_t cap = s->cap ? s->cap * 2 : 1024;
        tr_pair *v = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v) return free(both), qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for %" PRId64 " pairs", fn, cap);
        s->v = v, s->cap = cap;
    }
    s->v[s->n++] = (tr_pair){both, both + le + 1, tr_hash(both)};
    c->kept++;
    return QKV_OK;
}

qkv_status qkv_translation_add_mo(qkv_translation_set *s, const char *path, qkv_translation_counts *c)
{
    static const char fn[] = "translation_add_mo";
    QKV_NEED(s, fn, "s");
    QKV_NEED(path, fn, "path");
    QKV_NEED(c, fn, "c");
    qkv_mo *mo;
    QKV_TRY(qkv_mo_read(path, &mo));
    qkv_status st = QKV_OK;
    for (int64_t i = 0; i < qkv_mo_count(mo) && st == QKV_OK; i++) {
        const char *id, *str;
        st = qkv_mo_get(mo, i, &id, &str);
        if (st == QKV_OK) st = qkv_translation_add_pair(s, id, str, c);
    }
    qkv_mo_free(mo);
    return st;
}

static int cmp_pair(const void *pa, const void *pb)
{
    const tr_pair *a = pa, *b = pb;
    if (a->hash != b->hash) return a->hash < b->hash ? -1 : 1;
    int r = strcmp(a->en, b->en);
    return r ? r : strcmp(a->fr, b->fr);
}

qkv_status qkv_translation_write(qkv_translation_set *s, const char *dir, qkv_translation_counts *c)
{
    static const char fn[] = "translation_write";
    static const char *const names[3] = {"train", "valid", "test"};
    QKV_NEED(s, fn, "s");
    QKV_NEED(dir, fn, "dir");
    QKV_NEED(c, fn, "c");
    if (s->n) qsort(s->v, (size_t)s->n, sizeof *s->v, cmp_pair);
    FILE *f[3] = {NULL, NULL, NULL};
    char path[3][4096];
    qkv_status st = QKV_OK;
    for (int k = 0; k < 3 && st == QKV_OK; k++) {
        if (snprintf(path[k], sizeof path[k], "%s/%s.tsv", dir, names[k]) >= (int)sizeof path[k])
            st = qkv_fail(QKV_ERR_ARG, "%s: the folder name is too long", fn);
        else if (!(f[k] = fopen(path[k], "wb")))
            st = qkv_fail(QKV_ERR_IO, "%s: cannot create %s: %s", fn, path[k], strerror(errno));
    }
    for (int64_t i = 0; i < s->n && st == QKV_OK; i++) {
        if (i > 0 && !cmp_pair(&s->v[i - 1], &s->v[i])) {
            c->duplicates++;
            continue;
        }
        int k = tr_split(s->v[i].hash);
        c->split[k]++;
        fprintf(f[k], "%s\t%s\n", s->v[i].en, s->v[i].fr);
    }
    for (int k = 0; k < 3; k++) {
        if (!f[k]) continue;
        int bad = ferror(f[k]);
        if ((fclose(f[k]) != 0 || bad) && st == QKV_OK)
            st = qkv_fail(QKV_ERR_IO, "%s: cannot write %s", fn, path[k]);
    }
    return st;
}
