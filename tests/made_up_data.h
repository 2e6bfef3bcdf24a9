/* made_up_data.h: the small made-up data the CLI tests train on (include
 * after harness.h): a verse-like text corpus for `qkv train lm`, images in
 * Fashion-MNIST's idx files for `qkv train vit|cnn|mlp`, sentence pairs for
 * `qkv train translation`. test_lm_cli.c, test_vision_cli.c,
 * test_translate_cli.c, test_dist_cli.c. */
#ifndef QKV_TEST_MADE_UP_DATA_H
#define QKV_TEST_MADE_UP_DATA_H
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

/* The corpus: a few verse-like lines, about 12 KB, made from a fixed list. */
static inline void write_corpus(const char *path)
{
    static const char *words[] = {"and", "the", "lord", "said", "unto", "him", "of", "land", "light",
                                  "God", "was", "waters", "day", "night", "heaven", "earth"};
    FILE *f = fopen(path, "w");
    uint64_t x = 88172645463325252ull;
    for (int line = 0; f && line < 400; line++) {
        fprintf(f, "  %d", line % 31 + 1);
        for (int w = 0; w < 6; w++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            fprintf(f, " %s", words[x % 16]);
        }
        fputs(".\n", f);
    }
    if (f) fclose(f);
}

static inline void put_be32(FILE *f, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    fwrite(b, 1, 4, f);
}

/* n images of 28x28 (class k: a bright band on rows 2k+4 and 2k+5, noise
 * elsewhere) and their labels, as idx files DIR/PART-images-idx3-ubyte and
 * DIR/PART-labels-idx1-ubyte. */
static inline void write_set(const char *dir, const char *part, int n, uint64_t seed)
{
    char p[300];
    snprintf(p, sizeof p, "%s/%s-images-idx3-ubyte", dir, part);
    FILE *fi = fopen(p, "wb");
    snprintf(p, sizeof p, "%s/%s-labels-idx1-ubyte", dir, part);
    FILE *fl = fopen(p, "wb");
    if (!fi || !fl) {
        CHECK(0, "cannot write the made-up set in %s", dir);
        if (fi) fclose(fi);
        if (fl) fclose(fl);
        return;
    }
    put_be32(fi, 0x00000803), put_be32(fi, (uint32_t)n), put_be32(fi, 28), put_be32(fi, 28);
    put_be32(fl, 0x00000801), put_be32(fl, (uint32_t)n);
    uint64_t x = seed;
    for (int i = 0; i < n; i++) {
        int k = i % 10;
        uint8_t img[28 * 28];
        for (int r = 0; r < 28; r++)
            for (int c = 0; c < 28; c++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                int band = r == 2 * k + 4 || r == 2 * k + 5;
                img[r * 28 + c] = (uint8_t)(band ? 200 + x % 56 : x % 60);
            }
        fwrite(img, 1, sizeof img, fi);
        uint8_t lab = (uint8_t)k;
        fwrite(&lab, 1, 1, fl);
    }
    fclose(fi), fclose(fl);
}

/* Translation pairs in DIR/train.tsv, valid.tsv and test.tsv: "VERB the
 * NOUN" -> "VERBE le NOM", and "VERB NOUN" (all in train.tsv). */
static inline void write_pairs(const char *data)
{
    static const char *const en_v[] = {"open", "close", "save", "delete", "copy"},
                             *const fr_v[] = {"ouvrir", "fermer", "enregistrer", "supprimer", "copier"},
                             *const en_n[] = {"file", "folder", "image", "page"},
                             *const fr_n[] = {"fichier", "dossier", "image", "page"};
    char path[256];
    FILE *f[3];
    static const char *const names[3] = {"train", "valid", "test"};
    mkdir(data, 0700);
    for (int k = 0; k < 3; k++) {
        snprintf(path, sizeof path, "%s/%s.tsv", data, names[k]);
        f[k] = fopen(path, "w");
    }
    if (!f[0] || !f[1] || !f[2]) {
        CHECK(0, "cannot write the made-up pairs in %s", data);
        for (int k = 0; k < 3; k++)
            if (f[k]) fclose(f[k]);
        return;
    }
    int i = 0;
    for (int v = 0; v < 5; v++)
        for (int n = 0; n < 4; n++, i++) {
            FILE *g = f[i % 7 == 3 ? 1 : i % 7 == 5 ? 2 : 0];
            fprintf(g, "%s the %s\t%s le %s\n", en_v[v], en_n[n], fr_v[v], fr_n[n]);
            fprintf(f[0], "%s %s\t%s %s\n", en_v[v], en_n[n], fr_v[v], fr_n[n]);
        }
    for (int k = 0; k < 3; k++) fclose(f[k]);
}

#endif
