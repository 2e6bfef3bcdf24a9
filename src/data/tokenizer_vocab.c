/* tokenizer_vocab.c: tokenizers from a GGUF file's vocabulary, as llama.cpp
 * (llama-vocab.cpp) builds and runs them: "gpt2" (byte-level BPE over a
 * pre-tokenizer, tokenizer_llama_pre.c) and "llama" (SentencePiece's BPE
 * with scores and byte fallback, tokenizer_spm.c); control, user-defined
 * and unknown tokens split out of the text first (control and unknown only
 * when asked to), BOS/EOS as the vocabulary says. docs/tokenizers.md. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "core/internal.h"
#include "data/tokenizer_internal.h"

static const char SPACE_MARK[] = "\xE2\x96\x81"; /* U+2581, SentencePiece's space */

/* The texts that end generation in llama.cpp (its special_eog_ids by
 * name); llama.cpp makes them control tokens whatever the file says, and so
 * do its fill-in-the-middle names. */
#define EOG_NAMES                                                                                              \
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>", \
        "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",           \
        "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>"
/* ... and llama.cpp's fill-in-the-middle pad, repository and file-separator
 * names, which end generation too. */
#define FIM_EOG_NAMES                                                                                     \
    "<|fim_pad|>", "<fim-pad>", "<PAD>", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", \
        "<|file_sep|>", "<fim-sep>", "<SEP>"
static const char *const eog_names[] = {EOG_NAMES, FIM_EOG_NAMES, NULL};
static const char *const forced_control[] = {
    EOG_NAMES, FIM_EOG_NAMES, "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "<|fim_suffix|>",
    "<fim-suffix>", "<fim_suffix>", "<SUF>", "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", NULL,
};
/* The end-of-turn names, in the order tried when the file names no EOT. */
static const char *const eot_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                        "<EOT>", "_<EOT>", "<end_of_utterance>", NULL};

static int64_t find_raw(const qkv_tokenizer *t, const char *s)
{
    return *tok_strmap_slot(&t->rmap, t->raw, t->raw_off, (const unsigned char *)s, strlen(s));
}

static int64_t raw_len(const qkv_tokenizer *t, int64_t id) { return t->raw_off[id + 1] - t->raw_off[id]; }

/* A special token and its text's length, to sort: the longest first, then by id. */
typedef struct {
    int64_t len, id;
} by_len;
static int by_length(const void *a, const void *b)
{
    const by_len *x = a, *y = b;
    return x->len != y->len ? (x->len > y->len ? -1 : 1) : (x->id > y->id) - (x->id < y->id);
}

/* A token's text as the file stores it; the spec gives lengths or NUL-terminated strings. */
static size_t spec_len(const char *const *s, const size_t *lens, int64_t i) { return lens ? lens[i] : strlen(s[i]); }

/* What each id decodes to (llama.cpp's token_to_piece with special on). */
static qkv_status make_pieces(qkv_tokenizer *t, const char *fn)
{
    int64_t V = t->vocab_size;
    uint32_t enc[256];
    int dec[0x144];
    tok_gpt2_bytes(enc, dec);
    t->tok_off = malloc((size_t)(V + 1) * sizeof *t->tok_off);
    t->tok_bytes = malloc((size_t)t->raw_off[V] + 1);
    if (!t->tok_off || !t->tok_bytes) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    int64_t k = 0;
    for (int64_t id = 0; id < V; id++) {
        const unsigned char *r = t->raw + t->raw_off[id];
        size_t n = (size_t)raw_len(t, id);
        unsigned char *o = t->tok_bytes + k, a = t->attr[id];
        t->tok_off[id] = k;
        if (a & (TOK_A_CONTROL | TOK_A_UNKNOWN | TOK_A_USER)) {
            memcpy(o, r, n), k += (int64_t)n;
        } else if ((a & TOK_A_NORMAL) && t->kind == QKV_TOKENIZER_GGUF_GPT2) {
            int64_t m = tok_gpt2_text_bytes((const char *)r, n, dec, o);
            if (m < 0) memcpy(o, r, n), m = (int64_t)n; /* a character outside GPT-2's alphabet: as it is */
            k += m;
        } else if (a & TOK_A_NORMAL) { /* llama: U+2581 back to spaces (never longer) */
            size_t m = 0;
            for (size_t i = 0; i < n;)
                if (n - i >= 3 && !memcmp(r + i, SPACE_MARK, 3)) o[m++] = ' ', i += 3;
                else o[m++] = r[i++];
            k += (int64_t)m;
        } else if ((a & TOK_A_BYTE) && t->kind == QKV_TOKENIZER_GGUF_LLAMA && n >= 5) {
            char hex[3] = {(char)r[3], (char)r[4], 0};
            *o = (unsigned char)strtol(hex, NULL, 16), k++;
        } /* unused, undefined, and gpt2's byte tokens: nothing */
    }
    t->tok_off[V] = k;
    return QKV_OK;
}

/* byte_id: gpt2, the token of byte b's GPT-2 character; llama, <0xXX> or else the byte itself. */
static void find_bytes(qkv_tokenizer *t)
{
    uint32_t enc[256];
    int dec[0x144];
    tok_gpt2_bytes(enc, dec);
    for (int b = 0; b < 256; b++) {
        unsigned char s[8];
        size_t n;
        if (t->kind == QKV_TOKENIZER_GGUF_GPT2) n = (size_t)tok_utf8_encode(enc[b], s);
        else n = (size_t)snprintf((char *)s, sizeof s, "<0x%02X>", b);
        t->byte_id[b] = *tok_strmap_slot(&t->rmap, t->raw, t->raw_off, s, n);
        if (t->byte_id[b] < 0 && t->kind == QKV_TOKENIZER_GGUF_LLAMA) {
            s[0] = (unsigned char)b;
            t->byte_id[b] = *tok_strmap_slot(&t->rmap, t->raw, t->raw_off, s, 1);
        }
    }
}

/* The merges "A B" (split at the first space after the first byte), in rank
 * order; a pair given twice keeps its first rank, and a merge whose parts
 * or join are not tokens is left out (it could never apply to token ids). */
static qkv_status add_merges(qkv_tokenizer *t, const qkv_vocab_spec *v, const char *fn)
{
    t->merges = malloc((size_t)(v->n_merges ? v->n_merges : 1) * sizeof *t->merges);
    if (!t->merges) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for %" PRId64 " merges", fn, v->n_merges);
    QKV_TRY(tok_pairmap_init(&t->ranks, (size_t)v->n_merges, fn));
    for (int64_t i = 0; i < v->n_merges; i++) {
        const unsigned char *m = (const unsigned char *)v->merges[i];
        size_t n = spec_len(v->merges, v->merge_lens, i);
        const unsigned char *sp = n > 1 ? memchr(m + 1, ' ', n - 1) : NULL;
        if (!sp) return qkv_fail(QKV_ERR_FORMAT, "%s: merge %" PRId64 " ('%.40s') has no space", fn, i, (const char *)m);
        size_t a = (size_t)(sp - m);
        int64_t l = *tok_strmap_slot(&t->rmap, t->raw, t->raw_off, m, a);
        int64_t r = *tok_strmap_slot(&t->rmap, t->raw, t->raw_off, sp + 1, n - a - 1);
        if (l < 0 || r < 0 || tok_pairmap_get(&t->ranks, l, r) >= 0) continue;
        unsigned char *join = malloc(n);
        if (!join) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
        memcpy(join, m, a), memcpy(join + a, sp + 1, n - a - 1);
        int64_t j = *tok_strmap_slot(&t->rmap, t->raw, t->raw_off, join, n - 1);
        free(join);
        if (j < 0) continue;
        t->merges[t->nmerges] = (tok_merge){l, r, j};
        QKV_TRY(tok_pairmap_put(&t->ranks, l, r, t->nmerges));
        t->nmerges++;
    }
    return QKV_OK;
}

static qkv_status check_spec(const qkv_vocab_spec *v, int *llama, const char *fn)
{
    if (!v->model || (strcmp(v->model, "gpt2") && strcmp(v->model, "llama")))
        return qkv_fail(QKV_ERR_FORMAT, "%s: tokenizer model '%.40s' is not supported (gpt2 or llama)", fn,
                        v->model ? v->model : "(none)");
    *llama = !strcmp(v->model, "llama");
    if (v->n_tokens < 1 || v->n_tokens > (1 << 24) || !v->tokens)
        return qkv_fail(QKV_ERR_ARG, "%s: %" PRId64 " tokens, expected 1 to %d", fn, v->n_tokens, 1 << 24);
    if (v->n_merges < 0 || (v->n_merges && !v->merges))
        return qkv_fail(QKV_ERR_ARG, "%s: %" PRId64 " merges without their texts", fn, v->n_merges);
    const int64_t sp[] = {v->bos, v->eos, v->unk, v->pad, v->eot};
    for (int i = 0; i < 5; i++)
        if (sp[i] < -1 || sp[i] >= v->n_tokens)
            return qkv_fail(QKV_ERR_FORMAT, "%s: special token id %" PRId64 " is outside the %" PRId64 " tokens", fn,
                            sp[i], v->n_tokens);
    for (int64_t i = 0; i < v->n_tokens; i++)
        if (!v->tokens[i]) return qkv_fail(QKV_ERR_ARG, "%s: token %" PRId64 " is NULL", fn, i);
    return QKV_OK;
}

static qkv_status build(qkv_tokenizer *t, const qkv_vocab_spec *v, int llama, const char *fn)
{
    int64_t V = v->n_tokens;
    size_t total = 0;
    for (int64_t i = 0; i < V; i++) total += spec_len(v->tokens, v->token_lens, i);
    t->vocab_size = V;
    t->raw = malloc(total + 1), t->raw_off = malloc((size_t)(V + 1) * sizeof *t->raw_off);
    t->attr = malloc((size_t)V), t->scores = llama ? calloc((size_t)V, sizeof *t->scores) : NULL;
    if (!t->raw || !t->raw_off || !t->attr || (llama && !t->scores) || tok_strmap_init(&t->rmap, V, fn) != QKV_OK)
        return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory for %" PRId64 " tokens", fn, V);
    static const unsigned char attr_of[] = {TOK_A_UNDEFINED, TOK_A_NORMAL, TOK_A_UNKNOWN, TOK_A_CONTROL,
                                            TOK_A_USER,      TOK_A_UNUSED, TOK_A_BYTE};
    int64_t o = 0;
    for (int64_t i = 0; i < V; i++) {
        size_t n = spec_len(v->tokens, v->token_lens, i);
        t->raw_off[i] = o;
        memcpy(t->raw + o, v->tokens[i], n), o += (int64_t)n;
        t->raw_off[i + 1] = o;
        *tok_strmap_slot(&t->rmap, t->raw, t->raw_off, t->raw + t->raw_off[i], n) = i; /* the last id wins */
        int32_t ty = v->types ? v->types[i] : 1;
        t->attr[i] = ty >= 0 && ty <= 6 ? attr_of[ty] : TOK_A_UNDEFINED;
        if (llama && v->scores) t->scores[i] = v->scores[i];
    }
    for (int k = 0; forced_control[k]; k++) {
        int64_t id = find_raw(t, forced_control[k]);
        if (id >= 0) t->attr[id] = TOK_A_CONTROL;
    }
    for (int k = 0; eog_names[k]; k++) {
        int64_t id = find_raw(t, eog_names[k]);
        if (id >= 0) t->attr[id] |= TOK_A_EOG;
    }
    t->specials = malloc((size_t)V * sizeof *t->specials);
    by_len *sp = malloc((size_t)V * sizeof *sp);
    if (!t->specials || !sp) return free(sp), qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    for (int64_t i = 0; i < V; i++)
        if ((t->attr[i] & (TOK_A_CONTROL | TOK_A_USER | TOK_A_UNKNOWN)) && raw_len(t, i) > 0)
            sp[t->nspecials++] = (by_len){raw_len(t, i), i};
    qsort(sp, (size_t)t->nspecials, sizeof *sp, by_length);
    for (int64_t k = 0; k < t->nspecials; k++) t->specials[k] = sp[k].id;
    free(sp);
    find_bytes(t);
    if (!llama) QKV_TRY(add_merges(t, v, fn));
    t->eot = v->eot;
    for (int k = 0; t->eot < 0 && eot_names[k]; k++) t->eot = find_raw(t, eot_names[k]);
    return make_pieces(t, fn);
}

qkv_status qkv_tokenizer_from_vocab(const qkv_vocab_spec *v, qkv_tokenizer **out)
{
    static const char fn[] = "tokenizer_from_vocab";
    QKV_NEED(out, fn, "out");
    *out = NULL;
    QKV_NEED(v, fn, "v");
    int llama = 0, ignore = 0, bos_default = 0, pre = 0;
    QKV_TRY(check_spec(v, &llama, fn));
    if (!llama && (pre = tok_llama_pre_find(v->pre, &ignore, &bos_default)) < 0)
        return qkv_fail(QKV_ERR_FORMAT, "%s: pre-tokenizer '%.60s' is not supported (known: %s)", fn, v->pre,
                        tok_llama_pre_names());
    qkv_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    t->kind = llama ? QKV_TOKENIZER_GGUF_LLAMA : QKV_TOKENIZER_GGUF_GPT2;
    t->pre = pre, t->ignore_merges = ignore;
    t->bos = v->bos, t->eos = v->eos, t->unk = v->unk, t->pad = v->pad;
    /* llama.cpp's defaults where the file says nothing (-1) */
    t->add_bos = v->add_bos >= 0 ? v->add_bos : llama || bos_default;
    t->add_eos = v->add_eos >= 0 ? v->add_eos : 0;
    t->add_space_prefix = v->add_space_prefix >= 0 ? v->add_space_prefix : llama;
    qkv_status st = build(t, v, llama, fn);
    if (st == QKV_OK && t->add_bos && t->bos < 0)
        st = qkv_fail(QKV_ERR_FORMAT, "%s: the vocabulary adds a BOS token but has none", fn);
    if (st == QKV_OK && t->add_eos && t->eos < 0)
        st = qkv_fail(QKV_ERR_FORMAT, "%s: the vocabulary adds an EOS token but has none", fn);
    if (st != QKV_OK) return qkv_tokenizer_free(t), st;
    *out = t;
    return QKV_OK;
}

/* ---- encoding ---- */

/* A piece of the text: raw text (id -1) or a special token. */
typedef struct {
    size_t off, len;
    int64_t id;
} frag;

typedef struct {
    frag *v;
    size_t n, cap;
} frags;

static int frag_push(frags *f, frag x)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 16;
        frag *v = realloc(f->v, cap * sizeof *v);
        if (!v) return 0;
        f->v = v, f->cap = cap;
    }
    f->v[f->n++] = x;
    return 1;
}

/* The first occurrence of p[0, n) in s[0, len) (n >= 1), or NULL. */
static const unsigned char *find_bytes_in(const unsigned char *s, size_t len, const unsigned char *p, size_t n)
{
    for (const unsigned char *e = s + len - n + 1; s < e;) {
        const unsigned char *c = memchr(s, p[0], (size_t)(e - s));
        if (!c) return NULL;
        if (!memcmp(c, p, n)) return c;
        s = c + 1;
    }
    return NULL;
}

/* llama.cpp's tokenizer_st_partition: for each special token, longest
 * first, each raw fragment is cut at the token's every occurrence, left to
 * right. A token whose first two bytes never occur together in the text is
 * skipped without a search. */
static qkv_status partition(const qkv_tokenizer *t, const unsigned char *s, size_t len, int parse_special, frags *out)
{
    static const char fn[] = "tokenizer_encode";
    uint64_t pairs[1024] = {0}, singles[4] = {0};
    for (size_t i = 0; i < len; i++) {
        singles[s[i] >> 6] |= 1ull << (s[i] & 63);
        if (i + 1 < len) {
            unsigned p = (unsigned)s[i] << 8 | s[i + 1];
            pairs[p >> 6] |= 1ull << (p & 63);
        }
    }
    frags cur = {0}, nxt = {0};
    if (len && !frag_push(&cur, (frag){0, len, -1})) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    for (int64_t k = 0; k < t->nspecials; k++) {
        int64_t id = t->specials[k];
        if (!parse_special && (t->attr[id] & (TOK_A_CONTROL | TOK_A_UNKNOWN))) continue;
        const unsigned char *p = t->raw + t->raw_off[id];
        size_t n = (size_t)raw_len(t, id);
        unsigned pr = n > 1 ? (unsigned)p[0] << 8 | p[1] : 0;
        if (n > len || (n > 1 ? !(pairs[pr >> 6] >> (pr & 63) & 1) : !(singles[p[0] >> 6] >> (p[0] & 63) & 1))) continue;
        nxt.n = 0;
        int ok = 1, hit = 0;
        for (size_t i = 0; i < cur.n && ok; i++) {
            frag f = cur.v[i];
            const unsigned char *m;
            while (f.id < 0 && f.len >= n && ok && (m = find_bytes_in(s + f.off, f.len, p, n))) {
                size_t at = (size_t)(m - s);
                hit = 1;
                if (at > f.off) ok = frag_push(&nxt, (frag){f.off, at - f.off, -1});
                ok = ok && frag_push(&nxt, (frag){at, n, id});
                f.len -= at + n - f.off, f.off = at + n;
            }
            if (ok && f.len) ok = frag_push(&nxt, f);
        }
        if (!ok) return free(cur.v), free(nxt.v), qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
        if (hit) {
            frags tmp = cur;
            cur = nxt, nxt = tmp;
        }
    }
    free(nxt.v);
    *out = cur;
    return QKV_OK;
}

typedef struct {
    const qkv_tokenizer *t;
    tok_ids *ids;
    uint32_t enc[256];
    int dec[0x144];
} bpe_ctx;

/* One pre-tokenizer piece through the merges (tok_bpe_apply, the same loop
 * as GPT-2's). A byte without a token is left out, as llama.cpp leaves it;
 * the merges never join across it. */
static qkv_status bpe_word(const unsigned char *w, size_t n, void *arg)
{
    static const char fn[] = "tokenizer_encode";
    bpe_ctx *c = arg;
    const qkv_tokenizer *t = c->t;
    tok_ids *a = c->ids;
    if (t->ignore_merges) { /* the whole piece when it is a token */
        unsigned char *buf = calloc(2 * n + 1, 1);
        size_t m = 0;
        if (!buf) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
        for (size_t i = 0; i < n; i++) m += (size_t)tok_utf8_encode(c->enc[w[i]], buf + m);
        int64_t id = *tok_strmap_slot(&t->rmap, t->raw, t->raw_off, buf, m);
        free(buf);
        if (id >= 0) return tok_ids_push(a, id, fn);
    }
    for (size_t i = 0; i < n;) {
        int64_t start = a->n;
        for (; i < n && t->byte_id[w[i]] >= 0; i++) QKV_TRY(tok_ids_push(a, t->byte_id[w[i]], fn));
        int64_t m = a->n - start;
        tok_bpe_apply(t, a->v + start, &m);
        a->n = start + m;
        if (i < n) i++; /* the byte without a token */
    }
    return QKV_OK;
}

/* One raw fragment of a "llama" vocabulary: a space first when asked,
 * spaces as U+2581, then the merges. */
static qkv_status spm_fragment(const qkv_tokenizer *t, const unsigned char *s, size_t len, int prefix, tok_ids *a)
{
    size_t n = 0;
    unsigned char *buf = malloc(3 * (len + 1));
    if (!buf) return qkv_fail(QKV_ERR_NOMEM, "tokenizer_encode: out of memory for %zu bytes", len);
    if (prefix) memcpy(buf, SPACE_MARK, 3), n = 3;
    for (size_t i = 0; i < len; i++)
        if (s[i] == ' ') memcpy(buf + n, SPACE_MARK, 3), n += 3;
        else buf[n++] = s[i];
    qkv_status st = tok_spm_encode(t, buf, n, a);
    free(buf);
    return st;
}

qkv_status tok_vocab_encode(const qkv_tokenizer *t, const char *text, size_t len, int add_special, int parse_special,
                            tok_ids *a)
{
    static const char fn[] = "tokenizer_encode";
    const unsigned char *s = (const unsigned char *)text;
    frags fr = {0};
    QKV_TRY(partition(t, s, len, parse_special, &fr));
    qkv_status st = QKV_OK;
    if (add_special && t->add_bos) st = tok_ids_push(a, t->bos, fn);
    bpe_ctx c = {t, a, {0}, {0}};
    if (t->kind == QKV_TOKENIZER_GGUF_GPT2) tok_gpt2_bytes(c.enc, c.dec);
    int prev_special = 1; /* llama: a space before the text when it starts a fragment after a special */
    for (size_t i = 0; i < fr.n && st == QKV_OK; i++) {
        frag f = fr.v[i];
        if (f.id >= 0) st = tok_ids_push(a, f.id, fn), prev_special = 1;
        else if (t->kind == QKV_TOKENIZER_GGUF_GPT2) st = tok_llama_pre_split(t->pre, text + f.off, f.len, bpe_word, &c);
        else st = spm_fragment(t, s + f.off, f.len, t->add_space_prefix && prev_special, a), prev_special = 0;
    }
    if (st == QKV_OK && add_special && t->add_eos) st = tok_ids_push(a, t->eos, fn);
    free(fr.v);
    return st;
}

qkv_status qkv_tokenizer_info_of(const qkv_tokenizer *t, qkv_tokenizer_info *info)
{
    static const char fn[] = "tokenizer_info_of";
    QKV_NEED(t, fn, "t");
    QKV_NEED(info, fn, "info");
    if (t->kind != QKV_TOKENIZER_GGUF_GPT2 && t->kind != QKV_TOKENIZER_GGUF_LLAMA)
        return qkv_fail(QKV_ERR_ARG, "%s: not a GGUF vocabulary's tokenizer", fn);
    *info = (qkv_tokenizer_info){t->bos, t->eos, t->eot, t->unk, t->pad, t->add_bos, t->add_eos, t->add_space_prefix};
    return QKV_OK;
}

int qkv_tokenizer_is_eog(const qkv_tokenizer *t, int64_t id)
{
    if (!t || id < 0 || id >= t->vocab_size || (t->kind != QKV_TOKENIZER_GGUF_GPT2 && t->kind != QKV_TOKENIZER_GGUF_LLAMA))
        return 0;
    return id == t->eos || id == t->eot || (t->attr[id] & TOK_A_EOG) != 0;
}

int64_t tok_vocab_special(const qkv_tokenizer *t, const char *name)
{
    if (!strcmp(name, "bos")) return t->bos;
    if (!strcmp(name, "eos")) return t->eos;
    if (!strcmp(name, "eot")) return t->eot;
    if (!strcmp(name, "unk")) return t->unk;
    if (!strcmp(name, "pad")) return t->pad;
    int64_t id = find_raw(t, name);
    return id >= 0 && (t->attr[id] & (TOK_A_CONTROL | TOK_A_USER | TOK_A_UNKNOWN)) ? id : -1;
}
