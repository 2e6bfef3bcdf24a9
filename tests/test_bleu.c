/* test_bleu.c: qkv_bleu_corpus and `qkv bleu` against NLTK's corpus_bleu
 * (tools/bleu_oracle.py, Debian's python3-nltk): fixed corpora (NLTK's
 * docstring example, empty hypotheses, hypotheses shorter than 4 words, no
 * unigram match, no 4-gram match, a perfect match, an empty corpus) and
 * random ones with 1 to 3 references and Unicode white space; equal to
 * 1e-9 (relative for scores below 1e-9); plus bad arguments and files. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>
#include "parity.h"

static char qkv_bin[4096];


/* The lines of text (each ends with '\n'), split in place. */
static int64_t split_lines(char *text, char **lines, int64_t max)
{
    int64_t n = 0;
    for (char *p = text; *p && n < max;) {
        char *e = strchr(p, '\n');
        if (!e) break;
        *e = 0, lines[n++] = p, p = e + 1;
    }
    return n;
}

/* |got - want| <= 1e-9, relative to want when want is below 1e-9 (NLTK's
 * scores near 1e-77 when a higher order has no match). */
static int close_enough(double got, double want, double *worst)
{
    double d = fabs(got - want), e = fabs(want) >= 1e-9 ? d : (d == 0 ? 0 : d / fmax(fabs(want), 1e-300));
    if (!(e <= *worst)) *worst = e;
    return e <= 1e-9;
}

static int sh(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_oracle(void)
{
    char dir[] = "/tmp/qkv_bleu_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp failed");
        return;
    }
    enum { CASES = 300, CLI_CASES = 25 };
    char cmd[1024], path[600];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/bleu_oracle.py --out %s --seed 1 --cases %d", dir, CASES);
    int rc = system(cmd);
    CHECK(rc == 0, "the NLTK oracle failed (exit %d): %s (run from the repo root; python3-nltk: tools/setup.sh --test)",
          rc, cmd);
    snprintf(path, sizeof path, "%s/scores.txt", dir);
    FILE *sf = rc == 0 ? fopen(path, "r") : NULL;
    int checked = 0, exact = 0;
    double worst = 0, worst_cli = 0;
    int k, nrefs;
    double want;
    while (sf && fscanf(sf, "%d %d %lf", &k, &nrefs, &want) == 3) {
        char *text[4] = {0}, **lines[4] = {0};
        int64_t n[4] = {0};
        for (int f = 0; f <= nrefs && f < 4; f++) {
            snprintf(path, sizeof path, f ? "%s/case_%04d.ref%d" : "%s/case_%04d.hyp", dir, k, f - 1);
            text[f] = h_slurp(path, NULL);
            lines[f] = malloc(4096 * sizeof **lines);
            n[f] = text[f] && lines[f] ? split_lines(text[f], lines[f], 4096) : -1;
        }
        const char **refs = malloc((size_t)(n[0] * nrefs + 1) * sizeof *refs);
        for (int f = 1; f <= nrefs; f++)
            for (int64_t i = 0; i < n[0] && i < n[f]; i++) refs[(f - 1) * n[0] + i] = lines[f][i];
        qkv_bleu_score sc;
        qkv_status s = qkv_bleu_corpus((const char *const *)lines[0], refs, n[0], nrefs, &sc);
        CHECK(s == QKV_OK, "case %d: %s", k, qkv_last_error());
        CHECK(close_enough(sc.bleu, want, &worst), "case %d: BLEU %.17g, NLTK %.17g", k, sc.bleu, want);
        exact += sc.bleu == want;
        checked++;
        if (k < CLI_CASES) {
            /* the command on the same files */
            char out[700];
            snprintf(out, sizeof out, "%s/cli.txt", dir);
            int m = snprintf(cmd, sizeof cmd, "%s bleu %s/case_%04d.hyp", qkv_bin, dir, k);
            for (int f = 0; f < nrefs; f++) m += snprintf(cmd + m, sizeof cmd - (size_t)m, " %s/case_%04d.ref%d", dir, k, f);
            snprintf(cmd + m, sizeof cmd - (size_t)m, " > %s", out);
            int st = sh(cmd);
            FILE *o = fopen(out, "r");
            double got = -1;
            CHECK(st == 0 && o && fscanf(o, "%lf", &got) == 1 && close_enough(got, want, &worst_cli),
                  "case %d: qkv bleu exit %d, printed %.17g, NLTK %.17g", k, st, got, want);
            if (o) fclose(o);
        }
        for (int f = 0; f < 4; f++) free(text[f]), free(lines[f]);
        free(refs);
    }
    if (sf) fclose(sf);
    CHECK(checked == CASES, "%d of %d cases checked", checked, CASES);
    printf("test_bleu: %d corpora against NLTK, %d bit-identical, worst difference %.3g (command: %.3g)\n", checked,
           exact, worst, worst_cli);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* Counts worked by hand: hyp "a b c a b", ref "a b x a b": unigrams 4/5
 * (c unmatched), bigrams 2/4 (a b twice; b c and c a no), no 3- or 4-gram
 * match; lengths 5 and 5: brevity penalty 1. */
static void test_hand(void)
{
    const char *h[] = {"a b c a b"}, *r[] = {"a b x a b"};
    qkv_bleu_score sc;
    CHECK_OK(qkv_bleu_corpus(h, r, 1, 1, &sc));
    CHECK(sc.matches[0] == 4 && sc.totals[0] == 5 && sc.matches[1] == 2 && sc.totals[1] == 4 && sc.matches[2] == 0 &&
              sc.totals[2] == 3 && sc.matches[3] == 0 && sc.totals[3] == 2,
          "counts %lld/%lld %lld/%lld %lld/%lld %lld/%lld", (long long)sc.matches[0], (long long)sc.totals[0],
          (long long)sc.matches[1], (long long)sc.totals[1], (long long)sc.matches[2], (long long)sc.totals[2],
          (long long)sc.matches[3], (long long)sc.totals[3]);
    CHECK(sc.brevity_penalty == 1.0 && sc.hyp_len == 5 && sc.ref_len == 5, "bp %g", sc.brevity_penalty);
    /* clipping: "the the the" against "the cat": 1/3 */
    const char *h2[] = {"the the the"}, *r2[] = {"the cat"};
    CHECK_OK(qkv_bleu_corpus(h2, r2, 1, 1, &sc));
    CHECK(sc.matches[0] == 1 && sc.totals[0] == 3, "clipped %lld/%lld", (long long)sc.matches[0], (long long)sc.totals[0]);
    /* closest reference length, ties to the shorter: hyp 3 words, refs 2 and 4 -> 2 */
    const char *h3[] = {"a b c"}, *r3[] = {"a b", "a b c d"};
    CHECK_OK(qkv_bleu_corpus(h3, r3, 1, 2, &sc));
    CHECK(sc.ref_len == 2 && sc.brevity_penalty == 1.0, "closest ref %lld", (long long)sc.ref_len);
    /* bad arguments */
    CHECK_ERR(qkv_bleu_corpus(h, r, 1, 0, &sc), QKV_ERR_ARG, "nrefs is 0");
    CHECK_ERR(qkv_bleu_corpus(h, r, -1, 1, &sc), QKV_ERR_ARG, "n is -1");
    CHECK_ERR(qkv_bleu_corpus(NULL, r, 1, 1, &sc), QKV_ERR_ARG, "hyps is NULL");
    CHECK_ERR(qkv_bleu_corpus(h, r, 1, 1, NULL), QKV_ERR_ARG, "out is NULL");
    const char *hn[] = {NULL};
    CHECK_ERR(qkv_bleu_corpus(hn, r, 1, 1, &sc), QKV_ERR_ARG, "hyps[0] is NULL");
}

/* Paired bootstrap: the properties that hold whatever the draws, and one
 * sample recomputed the slow way (qkv_bleu_corpus on the resampled corpus,
 * the indices drawn as the function documents: qkv_rng_next % n). */
static void test_bootstrap(void)
{
    const char *refs[] = {"le chat est noir", "une erreur est survenue", "fichier introuvable",
                          "la table des matieres", "le serveur ne repond pas", "ouvrir le fichier"};
    const char *good[] = {"le chat est noir", "une erreur est arrivee", "fichier introuvable",
                          "table des matieres", "le serveur ne repond plus", "ouvrir un fichier"};
    const char *bad[] = {"le chien est noir", "erreur", "le fichier", "la table", "serveur pas", "ouvrir"};
    const int64_t n = 6;
    qkv_bleu_bootstrap bs, again;
    qkv_bleu_score full;
    /* the full-corpus scores are qkv_bleu_corpus's, bit for bit */
    CHECK_OK(qkv_bleu_paired_bootstrap(good, bad, refs, n, 1, 200, 7, &bs));
    CHECK_OK(qkv_bleu_corpus(good, refs, n, 1, &full));
    CHECK(bs.a.bleu == full.bleu && bs.a.matches[1] == full.matches[1] && bs.a.ref_len == full.ref_len,
          "bootstrap A %.17g, corpus %.17g", bs.a.bleu, full.bleu);
    CHECK(bs.diff == bs.a.bleu - bs.b.bleu && bs.samples == 200, "diff %.17g", bs.diff);
    CHECK(bs.a_wins + bs.b_wins <= 200 && bs.diff_lo <= bs.diff_hi, "wins %lld+%lld, interval [%g, %g]",
          (long long)bs.a_wins, (long long)bs.b_wins, bs.diff_lo, bs.diff_hi);
    CHECK(bs.a_wins > 150 && bs.diff_lo > -0.5 && bs.diff_hi > 0.1, "good over bad: %lld of 200, [%g, %g]",
          (long long)bs.a_wins, bs.diff_lo, bs.diff_hi);
    /* the same seed gives the same samples; another seed other ones */
    CHECK_OK(qkv_bleu_paired_bootstrap(good, bad, refs, n, 1, 200, 7, &again));
    CHECK(!memcmp(&bs, &again, sizeof bs), "same seed, different results");
    CHECK_OK(qkv_bleu_paired_bootstrap(good, bad, refs, n, 1, 200, 8, &again));
    CHECK(again.diff_lo != bs.diff_lo || again.diff_hi != bs.diff_hi || again.a_wins != bs.a_wins,
          "seeds 7 and 8 gave the same interval and wins");
    /* one sample, recomputed on the resampled corpus itself */
    for (uint64_t seed = 1; seed <= 5; seed++) {
        CHECK_OK(qkv_bleu_paired_bootstrap(good, bad, refs, n, 1, 1, seed, &bs));
        qkv_rng rng;
        qkv_rng_seed(&rng, seed);
        const char *ra[6], *rb[6], *rr[6];
        for (int64_t j = 0; j < n; j++) {
            int64_t i = (int64_t)(qkv_rng_next(&rng) % (uint64_t)n);
            ra[j] = good[i], rb[j] = bad[i], rr[j] = refs[i];
        }
        qkv_bleu_score sa, sb;
        CHECK_OK(qkv_bleu_corpus(ra, rr, n, 1, &sa));
        CHECK_OK(qkv_bleu_corpus(rb, rr, n, 1, &sb));
        double d = sa.bleu - sb.bleu;
        CHECK(bs.diff_lo == d && bs.diff_hi == d && bs.a_wins == (sa.bleu > sb.bleu) && bs.b_wins == (sb.bleu > sa.bleu),
              "seed %llu: the sample's difference %.17g, recomputed %.17g", (unsigned long long)seed, bs.diff_lo, d);
    }
    /* a system against itself: every sample tied, the interval [0, 0] */
    CHECK_OK(qkv_bleu_paired_bootstrap(good, good, refs, n, 1, 100, 3, &bs));
    CHECK(bs.diff == 0 && bs.diff_lo == 0 && bs.diff_hi == 0 && bs.a_wins == 0 && bs.b_wins == 0,
          "A against A: diff %g [%g, %g], wins %lld/%lld", bs.diff, bs.diff_lo, bs.diff_hi, (long long)bs.a_wins,
          (long long)bs.b_wins);
    /* one sentence: every sample is the corpus, so the interval is the difference */
    CHECK_OK(qkv_bleu_paired_bootstrap(refs, bad, refs, 1, 1, 50, 3, &bs));
    CHECK(bs.diff_lo == bs.diff && bs.diff_hi == bs.diff && bs.a_wins == 50 && bs.diff == 1.0 - bs.b.bleu,
          "one sentence: diff %g [%g, %g], A wins %lld", bs.diff, bs.diff_lo, bs.diff_hi, (long long)bs.a_wins);
    /* bad arguments */
    CHECK_ERR(qkv_bleu_paired_bootstrap(good, bad, refs, 0, 1, 10, 1, &bs), QKV_ERR_ARG, "n is 0");
    CHECK_ERR(qkv_bleu_paired_bootstrap(good, bad, refs, n, 1, 0, 1, &bs), QKV_ERR_ARG, "samples is 0");
    CHECK_ERR(qkv_bleu_paired_bootstrap(good, NULL, refs, n, 1, 10, 1, &bs), QKV_ERR_ARG, "hyps is NULL");
    CHECK_ERR(qkv_bleu_paired_bootstrap(good, bad, refs, n, 0, 10, 1, &bs), QKV_ERR_ARG, "nrefs is 0");
    CHECK_ERR(qkv_bleu_paired_bootstrap(good, bad, refs, n, 1, 10, 1, NULL), QKV_ERR_ARG, "out is NULL");
}

static void test_cli(void)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "d=$(mktemp -d) && printf 'a b\\nc d\\n' > $d/h && printf 'a b\\n' > $d/r && %s bleu $d/h $d/r 2> $d/err;"
             " s=$?; grep -q 'has 2 lines but' $d/err && rm -rf $d && exit $s",
             qkv_bin);
    CHECK(sh(cmd) == 1, "line counts that differ: not exit 1 with a message");
    snprintf(cmd, sizeof cmd, "%s bleu /nonexistent/h /nonexistent/r 2> /dev/null", qkv_bin);
    CHECK(sh(cmd) == 1, "a missing file: not exit 1");
    snprintf(cmd, sizeof cmd, "%s bleu onlyone 2> /dev/null", qkv_bin);
    CHECK(sh(cmd) == 2, "one operand: not exit 2");
    snprintf(cmd, sizeof cmd, "%s bleu --help | grep -q corpus_bleu", qkv_bin);
    CHECK(sh(cmd) == 0, "qkv bleu --help");
    snprintf(cmd, sizeof cmd,
             "d=$(mktemp -d) && printf 'a b c d e\\n' > $d/h && %s bleu -v $d/h $d/h > $d/out &&"
             " head -1 $d/out | grep -qx 1 && grep -q '^p4 2/2' $d/out && rm -rf $d",
             qkv_bin);
    CHECK(sh(cmd) == 0, "qkv bleu -v on identical files: not 1 with p4 2/2");
    snprintf(cmd, sizeof cmd,
             "d=$(mktemp -d) && printf 'a b c d e\\nf g h i j\\n' > $d/r && printf 'a b c d x\\nf g h i j\\n' > $d/a &&"
             " printf 'x b c d x\\nf g x i j\\n' > $d/b && %s bleu --compare $d/b --samples 50 $d/a $d/r > $d/out &&"
             " grep -q '^A - B .* over 50 paired bootstrap samples of 2 sentences (seed 1)$' $d/out &&"
             " grep -q '^A above B in [0-9]* samples' $d/out && rm -rf $d",
             qkv_bin);
    CHECK(sh(cmd) == 0, "qkv bleu --compare: not the three lines");
    snprintf(cmd, sizeof cmd, "%s bleu --compare x --samples 0 a b 2> /dev/null", qkv_bin);
    CHECK(sh(cmd) == 2, "--samples 0: not exit 2");
}

int main(int argc, char **argv)
{
    (void)argc;
    const char *slash = strrchr(argv[0], '/');
    snprintf(qkv_bin, sizeof qkv_bin, "%.*s/../qkv", slash ? (int)(slash - argv[0]) : 1, slash ? argv[0] : ".");
    test_hand();
    test_oracle();
    test_bootstrap();
    test_cli();
    return h_finish("test_bleu");
}
