#!/usr/bin/python3
"""bleu_oracle.py: corpora and NLTK's corpus_bleu of each, for
tests/test_bleu.c (Debian's python3-nltk; default weights, no smoothing).

  tools/bleu_oracle.py --out DIR --seed S [--cases N]

For each case k: DIR/case_KKKK.hyp and DIR/case_KKKK.ref0 (.ref1, ... when
the case has several references per sentence), one sentence a line, and a
line in DIR/scores.txt: "K NREFS SCORE" with SCORE as repr() prints it (the
shortest text that reads back as the same double). The first cases are
fixed (NLTK's own docstring example, empty hypotheses, hypotheses shorter
than 4 words, no unigram match, no 4-gram match, an empty corpus, where
NLTK raises ZeroDivisionError and 0 is written); the
rest are random: a small vocabulary so that n-grams match, lengths 0 to
20, copies of the reference with edits, and white space that Python's
str.split() splits at (tabs, NBSP, U+2003, U+3000) between tokens.
"""
import argparse
import os
import random
import warnings

from nltk.translate.bleu_score import corpus_bleu

warnings.simplefilter("ignore")  # method0's "0 counts of n-gram overlaps"

VOCAB = ["the", "a", "cat", "sat", "on", "mat", "le", "chat", "est", "sur", "tapis", "été",
         "déjà", "ça", ",", ".", "!", "«", "»", "日本", "x", "y", "z", "file", "fichier"]
SPACES = [" ", " ", " ", " ", "\t", "\u00a0", "\u2003", "\u3000", "  "]


def fixed_cases():
    doc_h1 = ("It is a guide to action which ensures that the military always obeys the commands of the party").split()
    doc_r11 = ("It is a guide to action that ensures that the military will forever heed Party commands").split()
    doc_r12 = ("It is the guiding principle which guarantees the military forces always being under the command of the Party").split()
    doc_r13 = ("It is the practical guide for the army always to heed the directions of the party").split()
    doc_h2 = "he read the book because he was interested in world history".split()
    doc_r21 = "he was interested in world history because he read the book".split()
    return [
        # NLTK's docstring example: 0.5920...
        ([doc_h1, doc_h2], [[doc_r11, doc_r12, doc_r13], [doc_r21, doc_r21, doc_r21]]),
        # empty hypotheses among others
        ([[], "the cat sat on the mat".split(), []], [["the cat sat".split()], ["the cat sat on a mat".split()], [["x"]]]),
        # every hypothesis empty: 0
        ([[], []], [[["a", "b"]], [["c"]]]),
        # hypotheses shorter than 4 words (no 4-gram at all)
        ([["the", "cat"], ["on", "the", "mat"], ["a"]], [[["the", "cat", "sat"]], [["on", "the", "mat"]], [["a"]]]),
        # no unigram matches: 0
        ([["p", "q"]], [[["r", "s"]]]),
        # unigrams and bigrams match, no 4-gram: NLTK's sys.float_info.min
        ([["a", "b", "c", "a", "b"]], [[["a", "b", "x", "a", "b"]]]),
        # a perfect match: 1
        ([["w", "x", "y", "z", "w"]], [[["w", "x", "y", "z", "w"]]]),
        # an empty corpus: 0
        ([], []),
    ]


def random_case(rng):
    n = rng.randint(1, 30)
    nrefs = rng.choice([1, 1, 1, 2, 3])
    vocab = VOCAB[: rng.randint(4, len(VOCAB))]
    hyps, refs = [], []
    for _ in range(n):
        rs = []
        for _ in range(nrefs):
            rs.append([rng.choice(vocab) for _ in range(rng.randint(0, 20))])
        base = list(rng.choice(rs))
        r = rng.random()
        if r < 0.1:
            h = []
        elif r < 0.6:  # the reference with edits
            h = base
            for _ in range(rng.randint(0, 4)):
                op = rng.random()
                if op < 0.4 and h:
                    h[rng.randrange(len(h))] = rng.choice(vocab)
                elif op < 0.7 and h:
                    del h[rng.randrange(len(h))]
                else:
                    h.insert(rng.randint(0, len(h)), rng.choice(vocab))
        else:
            h = [rng.choice(vocab) for _ in range(rng.randint(0, 12))]
        hyps.append(h)
        refs.append(rs)
    return hyps, refs


def line(rng, tokens):
    if not tokens:
        return rng.choice(["", " ", "\t"])
    s = rng.choice(["", "", " ", "\u00a0"])
    for i, t in enumerate(tokens):
        s += (rng.choice(SPACES) if i else "") + t
    return s + rng.choice(["", "", " "])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=200)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    cases = fixed_cases()
    while len(cases) < a.cases:
        cases.append(random_case(rng))
    with open(os.path.join(a.out, "scores.txt"), "w") as scores:
        for k, (hyps, refs) in enumerate(cases):
            nrefs = max((len(r) for r in refs), default=1)
            name = os.path.join(a.out, "case_%04d" % k)
            with open(name + ".hyp", "w", encoding="utf-8") as f:
                for h in hyps:
                    f.write(line(rng, h) + "\n")
            for j in range(nrefs):
                with open(name + ".ref%d" % j, "w", encoding="utf-8") as f:
                    for r in refs:
                        f.write(line(rng, r[j]) + "\n")
            # NLTK reads what the files hold, split as str.split() splits
            read = lambda p: open(p, encoding="utf-8").read().split("\n")[:-1]
            fh = [s.split() for s in read(name + ".hyp")]
            fr = [read(name + ".ref%d" % j) for j in range(nrefs)]
            list_of_refs = [[fr[j][i].split() for j in range(nrefs)] for i in range(len(fh))]
            # an empty corpus: NLTK raises ZeroDivisionError (Fraction(0, 0));
            # qkv gives 0, which is what the test expects
            score = corpus_bleu(list_of_refs, fh) if fh else 0.0
            scores.write("%d %d %r\n" % (k, nrefs, float(score)))


if __name__ == "__main__":
    main()
