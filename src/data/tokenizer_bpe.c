/* tokenizer_bpe.c: byte-level BPE: the merge loop shared by qkv's trained
 * BPE and GPT-2's, the trainer, the qkv-bpe file, and GPT-2's two files
 * (encoder.json, vocab.bpe). docs/tokenizers.md has the formats. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/internal.h"
#include "data/tokenizer_internal.h"
#include "io/json.h"

static const char EOT[] = "<|endoftext|>";

/* The same loop as GPT-2's bpe(): find the adjacent pair of lowest rank,
 * merge its every occurrence left to right, again until no pair ranks. */
void tok_bpe_apply(const qkv_tokenizer *t, int64_t *w, int64_t *np)
{
    int64_t n = *np;
    while (n > 1) {
        int64_t best = -1;
        for (int64_t i = 0; i + 1 < n; i++) {
            int64_t r = tok_pairmap_get(&t->ranks, w[i], w[i + 1]);
            if (r >= 0 && (best < 0 || r < best)) best = r;
        }
        if (best < 0) break;
        const tok_merge *m = &t->merges[best];
        int64_t k = 0;
        for (int64_t i = 0; i < n; i++) {
            if (i + 1 < n && w[i] == m->left && w[i + 1] == m->right) w[k++] = m->merged, i++;
            else w[k++] = w[i];
        }
        n = k;
    }
    *np = n;
}

/* tok_bytes/tok_off of a qkv-bpe tokenizer: ids 0..255 the bytes, 256 + i
 * merge i, then <|endoftext|>. */
static qkv_status bpe_finish(qkv_tokenizer *t, const char *fn)
{
    int64_t V = 256 + t->nmerges + 1;
    t->vocab_size = V, t->eot = V - 1;
    for (int b = 0; b < 256; b++) t->byte_id[b] = b;
    t->tok_off = malloc((size_t)(V + 1) * sizeof *t->tok_off);
    if (!t->tok_off) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    t->tok_off[0] = 0;
    for (int64_t id = 0; id < V; id++) {
        int64_t l = id < 256 ? 1 : id == V - 1 ? (int64_t)sizeof EOT - 1 : 0;
        if (id >= 256 && id < V - 1) {
            const tok_merge *m = &t->merges[id - 256];
            l = t->tok_off[m->left + 1] - t->tok_off[m->left] + t->tok_off[m->right + 1] - t->tok_off[m->right];
        }
        t->tok_off[id + 1] = t->tok_off[id] + l;
    }
    t->tok_bytes = malloc((size_t)t->tok_off[V] + 1);
    if (!t->tok_bytes) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    for (int64_t id = 0; id < V; id++) {
        unsigned char *o = t->tok_bytes + t->tok_off[id];
        if (id < 256) *o = (unsigned char)id;
        else if (id == V - 1) memcpy(o, EOT, sizeof EOT - 1);
        else {
            const tok_merge *m = &t->merges[id - 256];
            size_t a = (size_t)(t->tok_off[m->left + 1] - t->tok_off[m->left]);
            memcpy(o, t->tok_bytes + t->tok_off[m->left], a);
            memcpy(o + a, t->tok_bytes + t->tok_off[m->right],
                   (size_t)(t->tok_off[m->right + 1] - t->tok_off[m->right]));
        }
    }
    QKV_TRY(tok_pairmap_init(&t->ranks, (size_t)t->nmerges, fn));
    for (int64_t i = 0; i < t->nmerges; i++) tok_pairmap_put(&t->ranks, t->merges[i].left, t->merges[i].right, i);
    return QKV_OK;
}

/* ---- training ---- */

typedef struct {
    const unsigned char *s; /* the piece's bytes, in the corpus */
    size_t len;
    int64_t count;
    int64_t *sym, nsym; /* its symbols as merges go */
} word;

static uint64_t fnv(const unsigned char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ULL;
    return h;
}

static qkv_status train(const unsigned char *s, size_t len, int64_t vocab, qkv_tokenizer *t, const char *fn)
{
    qkv_status st = QKV_OK;
    /* the distinct pieces and their counts: an open-addressing table of
     * indexes into words (cap a power of two, at most half full) */
    size_t cap = 1024, nw = 0, wcap = 256;
    int64_t *slot = malloc(cap * sizeof *slot);
    word *w = malloc(wcap * sizeof *w);
    int64_t *syms = NULL, *pc_val = NULL;
    uint64_t *pc_key = NULL;
    if (!slot || !w) goto nomem;
    memset(slot, 0xff, cap * sizeof *slot);
    size_t total = 0;
    for (size_t i = 0; i < len;) {
        size_t l = tok_pretok_next(s + i, len - i);
        size_t h = (size_t)fnv(s + i, l);
        for (;; h++) {
            int64_t *e = &slot[h & (cap - 1)];
            if (*e < 0) {
                if (nw == wcap) {
                    word *w2 = realloc(w, 2 * wcap * sizeof *w);
                    if (!w2) goto nomem;
                    w = w2, wcap *= 2;
                }
                w[nw] = (word){s + i, l, 1, NULL, (int64_t)l};
                *e = (int64_t)nw++, total += l;
                break;
            }
            if (w[*e].len == l && !memcmp(w[*e].s, s + i, l)) {
                w[*e].count++;
                break;
            }
        }
        i += l;
        if (2 * nw >= cap) { /* grow and rehash */
            size_t c2 = cap * 2;
            int64_t *s2 = malloc(c2 * sizeof *s2);
            if (!s2) goto nomem;
            memset(s2, 0xff, c2 * sizeof *s2);
            for (size_t k = 0; k < nw; k++)
                for (size_t h2 = (size_t)fnv(w[k].s, w[k].len);; h2++)
                    if (s2[h2 & (c2 - 1)] < 0) {
                        s2[h2 & (c2 - 1)] = (int64_t)k;
                        break;
                    }
            free(slot), slot = s2, cap = c2;
        }
    }
    syms = malloc((total ? total : 1) * sizeof *syms);
    if (!syms) goto nomem;
    for (size_t k = 0, o = 0; k < nw; k++) {
        w[k].sym = syms + o;
        for (size_t j = 0; j < w[k].len; j++) syms[o++] = w[k].s[j];
    }
    int64_t want = vocab - 257;
    t->merges = malloc((size_t)(want > 0 ? want : 1) * sizeof *t->merges);
    size_t pcap = 16;
    while (pcap < 2 * total + 16) pcap *= 2;
    pc_key = malloc(pcap * sizeof *pc_key), pc_val = malloc(pcap * sizeof *pc_val);
    if (!t->merges || !pc_key || !pc_val) goto nomem;
    for (int64_t m = 0; m < want; m++) {
        /* count every adjacent pair, weighted by its piece's count */
        memset(pc_key, 0, pcap * sizeof *pc_key);
        for (size_t k = 0; k < nw; k++)
            for (int64_t j = 0; j + 1 < w[k].nsym; j++) {
                uint64_t key = ((uint64_t)w[k].sym[j] << 32 | (uint64_t)w[k].sym[j + 1]) + 1;
                for (size_t h = (size_t)(key * 0x9E3779B97F4A7C15ULL >> 20);; h++) {
                    size_t e = h & (pcap - 1);
                    if (pc_key[e] == 0) pc_key[e] = key, pc_val[e] = 0;
                    if (pc_key[e] == key) {
                        pc_val[e] += w[k].count;
                        break;
                    }
                }
            }
        /* the most frequent; ties: smallest left id, then smallest right */
        uint64_t best = 0;
        int64_t bc = 0;
        for (size_t e = 0; e < pcap; e++)
            if (pc_key[e] && (pc_val[e] > bc || (pc_val[e] == bc && pc_key[e] < best)))
                best = pc_key[e], bc = pc_val[e];
        if (bc < 2) break;
        int64_t L = (int64_t)((best - 1) >> 32), R = (int64_t)((best - 1) & 0xffffffffu), id = 256 + m;
        t->merges[m] = (tok_merge){L, R, id};
        t->nmerges = m + 1;
        for (size_t k = 0; k < nw; k++) {
            int64_t *y = w[k].sym, n = w[k].nsym, o = 0;
            for (int64_t j = 0; j < n; j++) {
                if (j + 1 < n && y[j] == L && y[j + 1] == R) y[o++] = id, j++;
                else y[o++] = y[j];
            }
            w[k].nsym = o;
        }
    }
    st = bpe_finish(t, fn);
    goto done;
nomem:
    st = qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
done:
    free(slot), free(w), free(syms), free(pc_key), free(pc_val);
    return st;
}

qkv_status qkv_tokenizer_bpe_train(const char *text, size_t len, int64_t vocab_size, qkv_tokenizer **out)
{
    static const char fn[] = "tokenizer_bpe_train";
    QKV_NEED(out, fn, "out");
    *out = NULL;
    if (len) QKV_NEED(text, fn, "text");
    if (vocab_size < 257 || vocab_size > (1 << 24))
        return qkv_fail(QKV_ERR_ARG, "%s: vocab_size is %" PRId64 ", expected 257 to %d (256 bytes + merges + <|endoftext|>)",
                        fn, vocab_size, 1 << 24);
    qkv_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    t->kind = QKV_TOKENIZER_BPE;
    qkv_status s = train((const unsigned char *)text, len, vocab_size, t, fn);
    if (s != QKV_OK) return qkv_tokenizer_free(t), s;
    *out = t;
    return QKV_OK;
}

/* ---- the qkv-bpe file ---- */

qkv_status tok_bpe_save(const qkv_tokenizer *t, FILE *f)
{
    fprintf(f, "qkv-bpe 1\n%" PRId64 "\n", t->nmerges);
    for (int64_t i = 0; i < t->nmerges; i++) fprintf(f, "%" PRId64 " %" PRId64 "\n", t->merges[i].left, t->merges[i].right);
    return QKV_OK;
}

int tok_parse_line_int(char **p, int hex, int64_t lo, int64_t hi, int64_t *v);

qkv_status tok_bpe_parse(const char *path, char *text, qkv_tokenizer **out)
{
    static const char fn[] = "tokenizer_load";
    char *p = text + strlen("qkv-bpe 1\n");
    int64_t n;
    if (!tok_parse_line_int(&p, 0, 0, (1 << 24) - 257, &n) || *p++ != '\n')
        return qkv_fail(QKV_ERR_FORMAT, "%s: %s: line 2: expected the count of merges (0 to %d)", fn, path,
                        (1 << 24) - 257);
    qkv_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    t->kind = QKV_TOKENIZER_BPE;
    t->merges = malloc((size_t)(n ? n : 1) * sizeof *t->merges);
    if (!t->merges) return qkv_tokenizer_free(t), qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    for (int64_t i = 0; i < n; i++) {
        int64_t l, r;
        if (!tok_parse_line_int(&p, 0, 0, 255 + i, &l) || *p++ != ' ' || !tok_parse_line_int(&p, 0, 0, 255 + i, &r) ||
            *p++ != '\n') {
            qkv_tokenizer_free(t);
            return qkv_fail(QKV_ERR_FORMAT,
                            "%s: %s: line %" PRId64 ": expected a merge 'LEFT RIGHT', two ids below %" PRId64, fn,
                            path, i + 3, 256 + i);
        }
        t->merges[i] = (tok_merge){l, r, 256 + i};
    }
    t->nmerges = n;
    if (*p) return qkv_tokenizer_free(t), qkv_fail(QKV_ERR_FORMAT, "%s: %s: text after the last merge", fn, path);
    qkv_status s = bpe_finish(t, fn);
    if (s != QKV_OK) return qkv_tokenizer_free(t), s;
    *out = t;
    return QKV_OK;
}

/* ---- GPT-2's files ---- */

/* GPT-2's bytes_to_unicode(): the printable bytes stand for themselves,
 * the others (0..32, 127..160, 173) for 256, 257, ... in order. */
void tok_gpt2_bytes(uint32_t enc[256], int dec[0x144])
{
    int n = 0;
    for (int i = 0; i < 0x144; i++) dec[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        enc[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
        dec[enc[b]] = b;
    }
}

/* A map from byte strings to ids, over t->tok_bytes: tok_strmap's slot for
 * s[0, n); add >= 0 goes into an empty slot. Returns the id found, or -1. */
typedef tok_strmap strmap;

static int64_t strmap_find(const strmap *m, const qkv_tokenizer *t, const unsigned char *s, size_t n, int64_t add)
{
    int64_t *e = tok_strmap_slot(m, t->tok_bytes, t->tok_off, s, n);
    if (*e >= 0) return *e;
    if (add >= 0) *e = add;
    return -1;
}

/* key's GPT-2 characters back to bytes (in place: never longer); -1 if a
 * character is outside the 256. */
int64_t tok_gpt2_text_bytes(const char *key, size_t klen, const int dec[0x144], unsigned char *o)
{
    size_t n = 0;
    for (size_t i = 0, l; i < klen; i += l) {
        int32_t cp = tok_utf8_decode((const unsigned char *)key + i, klen - i, &l);
        if (cp < 0 || cp >= 0x144 || dec[cp] < 0) return -1;
        o[n++] = (unsigned char)dec[cp];
    }
    return (int64_t)n;
}

static qkv_status gpt2_encoder(const char *path, qkv_tokenizer *t, strmap *map, const int dec[0x144])
{
    static const char fn[] = "tokenizer_gpt2_load";
    char *text, err[160];
    size_t len;
    QKV_TRY(tok_read_file(path, &text, &len, fn));
    json_value *v = NULL;
    json_limits lim = {4, 0};
    json_result jr = json_parse(text, len, &lim, &v, NULL, err, sizeof err);
    free(text);
    if (jr == JSON_ENOMEM) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory reading %s", fn, path);
    if (jr != JSON_OK) return qkv_fail(QKV_ERR_FORMAT, "%s: %s is not valid JSON: %s", fn, path, err);
    qkv_status st = QKV_OK;
    if (v->type != JSON_OBJECT || v->u.obj.n < 256 || v->u.obj.n > (1u << 24)) {
        st = qkv_fail(QKV_ERR_FORMAT, "%s: %s: expected an object of 256 to %d tokens, got %s", fn, path, 1 << 24,
                      v->type == JSON_OBJECT ? "another count" : json_type_name(v->type));
        goto out;
    }
    int64_t V = (int64_t)v->u.obj.n;
    size_t total = 0;
    for (size_t i = 0; i < v->u.obj.n; i++) total += v->u.obj.items[i].key_len;
    t->vocab_size = V;
    t->tok_off = calloc((size_t)V + 1, sizeof *t->tok_off);
    const json_member **by_id = calloc((size_t)V, sizeof *by_id);
    t->tok_bytes = malloc(total + 1);
    if (!t->tok_off || !by_id || !t->tok_bytes || tok_strmap_init(map, V, fn) != QKV_OK) {
        free(by_id);
        st = qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
        goto out;
    }
    for (size_t i = 0; i < v->u.obj.n && st == QKV_OK; i++) {
        const json_member *m = &v->u.obj.items[i];
        const json_value *x = &m->val;
        if (x->type != JSON_NUMBER || !x->u.num.integral || x->u.num.neg || x->u.num.big ||
            x->u.num.mag >= (uint64_t)V)
            st = qkv_fail(QKV_ERR_FORMAT, "%s: %s: token \"%.40s\": expected an id from 0 to %" PRId64, fn, path,
                          m->key, V - 1);
        else if (by_id[x->u.num.mag])
            st = qkv_fail(QKV_ERR_FORMAT, "%s: %s: id %" PRIu64 " given twice (\"%.40s\")", fn, path, x->u.num.mag,
                          m->key);
        else
            by_id[x->u.num.mag] = m;
    }
    for (int64_t id = 0; id < V && st == QKV_OK; id++) {
        const json_member *m = by_id[id];
        int64_t n = tok_gpt2_text_bytes(m->key, m->key_len, dec, t->tok_bytes + t->tok_off[id]);
        if (n <= 0) {
            st = qkv_fail(QKV_ERR_FORMAT, "%s: %s: token \"%.40s\" is empty or not in GPT-2's byte alphabet", fn,
                          path, m->key);
            break;
        }
        t->tok_off[id + 1] = t->tok_off[id] + n;
        if (strmap_find(map, t, t->tok_bytes + t->tok_off[id], (size_t)n, id) >= 0)
            st = qkv_fail(QKV_ERR_FORMAT, "%s: %s: token \"%.40s\" given twice", fn, path, m->key);
    }
    free(by_id);
out:
    json_free(v);
    return st;
}

static qkv_status gpt2_merges(const char *path, qkv_tokenizer *t, const strmap *map, const int dec[0x144])
{
    static const char fn[] = "tokenizer_gpt2_load";
    char *text;
    size_t len;
    QKV_TRY(tok_read_file(path, &text, &len, fn));
    qkv_status st = QKV_OK;
    unsigned char *buf = malloc(len + 1);
    if (!buf) {
        free(text);
        return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    }
    if (strncmp(text, "#version", 8) || !len || text[len - 1] != '\n' || strlen(text) != len) {
        st = qkv_fail(QKV_ERR_FORMAT, "%s: %s: expected a first line '#version ...', merges, and a newline at the end (truncated?)",
                      fn, path);
        goto out;
    }
    int64_t nl = 0;
    for (size_t i = 0; i < len; i++) nl += text[i] == '\n';
    t->merges = malloc((size_t)nl * sizeof *t->merges);
    if (!t->merges || tok_pairmap_init(&t->ranks, (size_t)nl, fn) != QKV_OK) {
        st = qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
        goto out;
    }
    char *p = strchr(text, '\n') + 1;
    for (int64_t line = 2; *p; line++) {
        char *e = strchr(p, '\n'), *sp = memchr(p, ' ', (size_t)(e - p));
        int64_t ids[3] = {-1, -1, -1};
        if (sp && sp > p && sp + 1 < e && !memchr(sp + 1, ' ', (size_t)(e - sp - 1))) {
            /* the right token's bytes go just after the left's (only when
             * the left one decoded: a is -1 otherwise) */
            int64_t a = tok_gpt2_text_bytes(p, (size_t)(sp - p), dec, buf);
            int64_t b = a > 0 ? tok_gpt2_text_bytes(sp + 1, (size_t)(e - sp - 1), dec, buf + a) : -1;
            if (a > 0 && b > 0) {
                ids[0] = strmap_find(map, t, buf, (size_t)a, -1);
                ids[1] = strmap_find(map, t, buf + a, (size_t)b, -1);
                ids[2] = strmap_find(map, t, buf, (size_t)(a + b), -1);
            }
        }
        if (ids[0] < 0 || ids[1] < 0 || ids[2] < 0) {
            st = qkv_fail(QKV_ERR_FORMAT,
                          "%s: %s: line %" PRId64 ": expected 'A B', two tokens of encoder.json whose join is one too: '%.*s'",
                          fn, path, line, (int)(e - p > 60 ? 60 : e - p), p);
            goto out;
        }
        /* as the reference's dict of ranks, a pair given twice keeps its last rank */
        int64_t r = t->nmerges++;
        t->merges[r] = (tok_merge){ids[0], ids[1], ids[2]};
        tok_pairmap_put(&t->ranks, ids[0], ids[1], r);
        p = e + 1;
    }
out:
    free(buf), free(text);
    return st;
}

qkv_status qkv_tokenizer_gpt2_load(const char *dir, qkv_tokenizer **out)
{
    static const char fn[] = "tokenizer_gpt2_load";
    QKV_NEED(out, fn, "out");
    *out = NULL;
    QKV_NEED(dir, fn, "dir");
    size_t dl = strlen(dir);
    char *path = malloc(dl + 16);
    qkv_tokenizer *t = calloc(1, sizeof *t);
    if (!path || !t) {
        free(path), free(t);
        return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    }
    t->kind = QKV_TOKENIZER_GPT2, t->eot = -1;
    uint32_t enc[256];
    int dec[0x144];
    tok_gpt2_bytes(enc, dec);
    strmap map = {0};
    snprintf(path, dl + 16, "%s/encoder.json", dir);
    qkv_status st = gpt2_encoder(path, t, &map, dec);
    for (int b = 0; b < 256 && st == QKV_OK; b++) {
        unsigned char c = (unsigned char)b;
        t->byte_id[b] = strmap_find(&map, t, &c, 1, -1);
        if (t->byte_id[b] < 0)
            st = qkv_fail(QKV_ERR_FORMAT, "%s: %s: byte %d (U+%04X) has no token", fn, path, b, enc[b]);
    }
    if (st == QKV_OK) {
        t->eot = strmap_find(&map, t, (const unsigned char *)EOT, sizeof EOT - 1, -1);
        snprintf(path, dl + 16, "%s/vocab.bpe", dir);
        st = gpt2_merges(path, t, &map, dec);
    }
    free(map.slot), free(path);
    if (st != QKV_OK) return qkv_tokenizer_free(t), st;
    *out = t;
    return QKV_OK;
}
