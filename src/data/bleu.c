/* bleu.c: corpus BLEU-4 with the semantics of NLTK's corpus_bleu (default
 * weights, no smoothing), exactly: the same integer counts, the same
 * correctly rounded divisions, logarithms summed as math.fsum sums them
 * (exactly rounded). docs/translation_data.md has the definition. */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/internal.h"
#include "data/tokenizer_internal.h"

enum { BLEU_N = 4 };

/* Python's str.isspace() for a code point (what str.split() splits at). */
static int py_space(int32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

typedef struct {
    const char *s;
    size_t n;
    int32_t seg; /* which text: 0 the hypothesis, 1.. the references */
    int32_t pos; /* its index there */
} bl_tok;

/* Appends the tokens of s to *v (grown as needed). */
static qkv_status split(const char *s, int32_t seg, bl_tok **v, int64_t *n, int64_t *cap, int32_t *count)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t len = strlen(s), start = 0, l;
    int in = 0;
    *count = 0;
    for (size_t i = 0; i <= len; i += l) {
        int32_t cp = i < len ? tok_utf8_decode(u + i, len - i, &l) : (l = 1, ' ');
        int sp = cp >= 0 && py_space(cp);
        if (!sp && !in) start = i, in = 1;
        if (sp && in) {
            if (*n == *cap) {
                int64_t c2 = *cap ? *cap * 2 : 64;
                bl_tok *w = realloc(*v, (size_t)c2 * sizeof *w);
                if (!w) return qkv_fail(QKV_ERR_NOMEM, "bleu_corpus: out of memory");
                *v = w, *cap = c2;
            }
            (*v)[(*n)++] = (bl_tok){s + start, i - start, seg, (*count)++};
            in = 0;
        }
    }
    return QKV_OK;
}

static int cmp_tok(const void *pa, const void *pb)
{
    const bl_tok *a = pa, *b = pb;
    int r = memcmp(a->s, b->s, a->n < b->n ? a->n : b->n);
    return r ? r : (a->n > b->n) - (a->n < b->n);
}

typedef struct {
    int32_t id[BLEU_N];
} bl_gram;

static int cmp_gram(const void *a, const void *b) { return memcmp(a, b, sizeof(bl_gram)); }

/* The n-grams of ids[0, len), sorted, into g; their count. */
static int64_t grams(const int32_t *ids, int32_t len, int n, bl_gram *g)
{
    int64_t k = 0;
    for (int32_t i = 0; i + n <= len; i++, k++) {
        memset(&g[k], 0xff, sizeof g[k]);
        for (int j = 0; j < n; j++) g[k].id[j] = ids[i + j];
    }
    if (k > 1) qsort(g, (size_t)k, sizeof *g, cmp_gram);
    return k;
}

/* How many times x occurs in the sorted g[0, n). */
static int64_t occurrences(const bl_gram *g, int64_t n, const bl_gram *x)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t m = lo + (hi - lo) / 2;
        if (cmp_gram(&g[m], x) < 0) lo = m + 1;
        else hi = m;
    }
    int64_t c = 0;
    while (lo + c < n && !cmp_gram(&g[lo + c], x)) c++;
    return c;
}

/* Python's math.fsum of x[0, n): Shewchuk's exact partials, then the sum
 * rounded once (half to even), as CPython's math_fsum does. */
static double py_fsum(const double *x, int n)
{
    double p[BLEU_N + 1];
    int np = 0;
    for (int k = 0; k < n; k++) {
        double v = x[k];
        int i = 0;
        for (int j = 0; j < np; j++) {
            double y = p[j];
            if (fabs(v) < fabs(y)) {
                double t = v;
                v = y, y = t;
            }
            double hi = v + y, lo = y - (hi - v);
            if (lo != 0.0) p[i++] = lo;
            v = hi;
        }
        np = i;
        p[np++] = v;
    }
    double hi = 0.0, lo = 0.0;
    int m = np;
    if (m > 0) {
        hi = p[--m];
        while (m > 0) {
            double v = hi, y = p[--m];
            hi = v + y;
            lo = y - (hi - v);
            if (lo != 0.0) break;
        }
        if (m > 0 && ((lo < 0.0 && p[m - 1] < 0.0) || (lo > 0.0 && p[m - 1] > 0.0))) {
            double y = lo * 2.0, v = hi + y;
            if (y == v - hi) hi = v;
        }
    }
    return hi;
}

/* One sentence's counts added into out. */
static qkv_status sentence(const char *hyp, const char *const *refs, int64_t stride, int64_t nrefs,
                           qkv_bleu_score *out, bl_tok **toks, int64_t *cap)
{
    static const char fn[] = "bleu_corpus";
    int64_t nt = 0;
    int32_t len[1 + 64], *ids = NULL; /* nrefs <= 64 */
    QKV_TRY(split(hyp, 0, toks, &nt, cap, &len[0]));
    for (int64_t r = 0; r < nrefs; r++) QKV_TRY(split(refs[r * stride], (int32_t)r + 1, toks, &nt, cap, &len[r + 1]));
    /* the tokens as small integers: equal text, equal id */
    int64_t off[1 + 64];
    off[0] = 0;
    for (int64_t r = 0; r < nrefs; r++) off[r + 1] = off[r] + len[r];
    ids = malloc((size_t)(nt ? nt : 1) * sizeof *ids);
    bl_gram *g = malloc((size_t)(nt ? nt : 1) * sizeof *g);
    if (!ids || !g) return free(ids), free(g), qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    if (nt > 1) qsort(*toks, (size_t)nt, sizeof **toks, cmp_tok);
    for (int64_t i = 0, id = -1; i < nt; i++) {
        if (i == 0 || cmp_tok(&(*toks)[i - 1], &(*toks)[i])) id++;
        ids[off[(*toks)[i].seg] + (*toks)[i].pos] = (int32_t)id;
    }
    /* lengths: the hypothesis's, and the closest reference's (ties: the shorter) */
    int32_t h = len[0], best = -1;
    for (int64_t r = 0; r < nrefs; r++) {
        int32_t rl = len[r + 1];
        int64_t d = llabs((int64_t)rl - h), bd = llabs((int64_t)best - h);
        if (best < 0 || d < bd || (d == bd && rl < best)) best = rl;
    }
    out->hyp_len += h, out->ref_len += best;
    /* clipped counts: each distinct hypothesis n-gram, at most its count in
     * the reference where it occurs most */
    for (int n = 1; n <= BLEU_N; n++) {
        /* the hypothesis's n-grams at g[0, nh), reference r's at g + off[r + 1] */
        int64_t nh = grams(ids, h, n, g), nr[64], match = 0;
        for (int64_t r = 0; r < nrefs; r++) nr[r] = grams(ids + off[r + 1], len[r + 1], n, g + off[r + 1]);
        for (int64_t i = 0; i < nh;) {
            int64_t c = 1;
            while (i + c < nh && !cmp_gram(&g[i], &g[i + c])) c++;
            int64_t most = 0;
            for (int64_t r = 0; r < nrefs && most < c; r++) {
                int64_t k = occurrences(g + off[r + 1], nr[r], &g[i]);
                if (k > most) most = k;
            }
            match += c < most ? c : most;
            i += c;
        }
        out->matches[n - 1] += match;
        out->totals[n - 1] += nh > 1 ? nh : 1; /* NLTK: max(1, count) */
    }
    free(ids), free(g);
    return QKV_OK;
}

/* The score from its counts (out's matches, totals and lengths). */
static void bleu_finish(qkv_bleu_score *out)
{
    double logs[BLEU_N];
    for (int k = 0; k < BLEU_N; k++) {
        out->precision[k] = out->totals[k] ? (double)out->matches[k] / (double)out->totals[k] : 0.0;
        double p = out->matches[k] ? out->precision[k] : DBL_MIN; /* NLTK's method0 */
        logs[k] = 0.25 * log(p);
    }
    int64_t c = out->hyp_len, r = out->ref_len;
    out->brevity_penalty = c > r ? 1.0 : c == 0 ? 0.0 : exp(1.0 - (double)r / (double)c);
    out->bleu = out->matches[0] == 0 ? 0.0 : out->brevity_penalty * exp(py_fsum(logs, BLEU_N));
}

/* The arguments' checks, shared by both entry points. */
static qkv_status bleu_check(const char *fn, const char *const *hyps, const char *const *refs, int64_t n,
                             int64_t nrefs)
{
    if (n < 0) return qkv_fail(QKV_ERR_ARG, "%s: n is %" PRId64 ", expected >= 0", fn, n);
    if (nrefs < 1 || nrefs > 64) return qkv_fail(QKV_ERR_ARG, "%s: nrefs is %" PRId64 ", expected 1 to 64", fn, nrefs);
    if (n) QKV_NEED(hyps, fn, "hyps");
    if (n) QKV_NEED(refs, fn, "refs");
    for (int64_t i = 0; i < n; i++) {
        if (!hyps[i]) return qkv_fail(QKV_ERR_ARG, "%s: hyps[%" PRId64 "] is NULL", fn, i);
        for (int64_t r = 0; r < nrefs; r++)
            if (!refs[r * n + i]) return qkv_fail(QKV_ERR_ARG, "%s: refs[%" PRId64 "] is NULL", fn, r * n + i);
    }
    return QKV_OK;
}

/* Each sentence's counts: per[i] (n of them), or their sum into *sum. */
static qkv_status bleu_counts(const char *const *hyps, const char *const *refs, int64_t n, int64_t nrefs,
                              qkv_bleu_score *per, qkv_bleu_score *sum)
{
    bl_tok *toks = NULL;
    int64_t cap = 0;
    for (int64_t i = 0; i < n; i++) {
        qkv_status s = sentence(hyps[i], refs + i, n, nrefs, per ? &per[i] : sum, &toks, &cap);
        if (s != QKV_OK) return free(toks), s;
    }
    free(toks);
    return QKV_OK;
}

qkv_status qkv_bleu_corpus(const char *const *hyps, const char *const *refs, int64_t n, int64_t nrefs,
                           qkv_bleu_score *out)
{
    static const char fn[] = "bleu_corpus";
    QKV_NEED(out, fn, "out");
    memset(out, 0, sizeof *out);
    QKV_TRY(bleu_check(fn, hyps, refs, n, nrefs));
    QKV_TRY(bleu_counts(hyps, refs, n, nrefs, NULL, out));
    bleu_finish(out);
    return QKV_OK;
}

static void bleu_add(qkv_bleu_score *to, const qkv_bleu_score *x)
{
    for (int k = 0; k < BLEU_N; k++) to->matches[k] += x->matches[k], to->totals[k] += x->totals[k];
    to->hyp_len += x->hyp_len, to->ref_len += x->ref_len;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of sorted x[0, n) by linear interpolation (numpy's default). */
static double quantile(const double *x, int64_t n, double q)
{
    double h = q * (double)(n - 1);
    int64_t i = (int64_t)floor(h);
    if (i >= n - 1) return x[n - 1];
    return x[i] + (h - (double)i) * (x[i + 1] - x[i]);
}

qkv_status qkv_bleu_paired_bootstrap(const char *const *hyps_a, const char *const *hyps_b, const char *const *refs,
                                     int64_t n, int64_t nrefs, int64_t samples, uint64_t seed,
                                     qkv_bleu_bootstrap *out)
{
    static const char fn[] = "bleu_paired_bootstrap";
    QKV_NEED(out, fn, "out");
    memset(out, 0, sizeof *out);
    if (n < 1) return qkv_fail(QKV_ERR_ARG, "%s: n is %" PRId64 ", expected >= 1 sentence", fn, n);
    if (samples < 1 || samples > 1000000)
        return qkv_fail(QKV_ERR_ARG, "%s: samples is %" PRId64 ", expected 1 to 1000000", fn, samples);
    QKV_TRY(bleu_check(fn, hyps_a, refs, n, nrefs));
    QKV_TRY(bleu_check(fn, hyps_b, refs, n, nrefs));
    qkv_bleu_score *per = calloc((size_t)n * 2, sizeof *per); /* per[i]: A's sentence i, per[n + i]: B's */
    double *diff = malloc((size_t)samples * sizeof *diff);
    if (!per || !diff) return free(per), free(diff), qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
    qkv_status s = bleu_counts(hyps_a, refs, n, nrefs, per, NULL);
    if (s == QKV_OK) s = bleu_counts(hyps_b, refs, n, nrefs, per + n, NULL);
    if (s != QKV_OK) return free(per), free(diff), s;
    for (int64_t i = 0; i < n; i++) bleu_add(&out->a, &per[i]), bleu_add(&out->b, &per[n + i]);
    bleu_finish(&out->a), bleu_finish(&out->b);
    out->diff = out->a.bleu - out->b.bleu;
    out->samples = samples;
    qkv_rng rng;
    qkv_rng_seed(&rng, seed);
    for (int64_t k = 0; k < samples; k++) {
        /* n sentences drawn with replacement, the same ones for A and B */
        qkv_bleu_score a, b;
        memset(&a, 0, sizeof a), memset(&b, 0, sizeof b);
        for (int64_t j = 0; j < n; j++) {
            int64_t i = (int64_t)(qkv_rng_next(&rng) % (uint64_t)n);
            bleu_add(&a, &per[i]), bleu_add(&b, &per[n + i]);
        }
        bleu_finish(&a), bleu_finish(&b);
        diff[k] = a.bleu - b.bleu;
        out->a_wins += a.bleu > b.bleu;
        out->b_wins += b.bleu > a.bleu;
    }
    qsort(diff, (size_t)samples, sizeof *diff, cmp_double);
    out->diff_lo = quantile(diff, samples, 0.025);
    out->diff_hi = quantile(diff, samples, 0.975);
    free(per), free(diff);
    return QKV_OK;
}
