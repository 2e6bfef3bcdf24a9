/* Image data: the idx reader (every type code, plain and gzip'd, against
 * files and values from tools/image_oracle.py, which writes them with
 * Python's struct and gzip), corrupt and truncated files, image sets,
 * batches, the seeded shuffle, augmentation's exact effect, and the real
 * Fashion-MNIST files (data/fashion-mnist from tools/get_data.sh
 * fashion-mnist; missing files are a failure that names the script). */
#define _POSIX_C_SOURCE 200809L
#include <zlib.h>
#include "parity.h"

static char dir[] = "/tmp/qkv_idx_XXXXXX";

static char *path_in(const char *name)
{
    static char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}


static void spill(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f) fwrite(b, 1, n, f), fclose(f);
}

/* ---- the oracle's files -------------------------------------------------- */

static void test_oracle_files(void)
{
    qkv_safetensors *st = NULL;
    qkv_arena *a = NULL;
    qkv_arena_new(&a, 1 << 20);
    CHECK_OK(qkv_safetensors_open(path_in("expected.safetensors"), &st));
    if (!st) return;
    int count = (int)h_meta_int(st, "count"), types_seen = 0;
    CHECK(count == 12, "the oracle wrote %d idx files, expected 12 (6 types, plain and gzip)", count);
    for (int k = 0; k < count; k++) {
        char name[32];
        snprintf(name, sizeof name, "idx_%02d", k);
        const char *m = qkv_safetensors_meta(st, name);
        int code = 0, gz = 0;
        char file[64] = "", shape[64] = "";
        if (!m || sscanf(m, "%d %d %63s %63s", &code, &gz, file, shape) != 4) {
            CHECK(0, "metadata for %s", name);
            continue;
        }
        qkv_tensor *want = h_load(st, a, name, 0);
        qkv_idx *x = NULL;
        CHECK_OK(qkv_idx_read(path_in(file), &x));
        if (!x || !want) continue;
        types_seen |= 1 << (code & 15);
        CHECK((int)qkv_idx_type_of(x) == code, "%s: type %d, want %d", file, qkv_idx_type_of(x), code);
        char got_shape[64] = "";
        for (int d = 0; d < qkv_idx_ndim(x); d++)
            snprintf(got_shape + strlen(got_shape), sizeof got_shape - strlen(got_shape), "%s%lld",
                     d ? "," : "", (long long)qkv_idx_dim(x, d));
        CHECK(strcmp(got_shape, shape) == 0, "%s: shape %s, want %s", file, got_shape, shape);
        int64_t n = qkv_idx_numel(x);
        CHECK(n == qkv_tensor_numel(want), "%s: %lld elements", file, (long long)n);
        if (n != qkv_tensor_numel(want)) continue;
        float *f = malloc((size_t)n * sizeof *f);
        int64_t *i = malloc((size_t)n * sizeof *i);
        CHECK_OK(qkv_idx_read_f32(x, f, n));
        if (want->dtype == QKV_I64) {
            CHECK_OK(qkv_idx_read_i64(x, i, n));
            int ok = 1;
            for (int64_t e = 0; e < n; e++) ok &= i[e] == want->idx[e] && f[e] == (float)want->idx[e];
            CHECK(ok, "%s: integer values differ from Python's", file);
        } else {
            CHECK_ERR(qkv_idx_read_i64(x, i, n), QKV_ERR_DTYPE, "not integers");
            int ok = 1;
            for (int64_t e = 0; e < n; e++) ok &= f[e] == want->data[e];
            CHECK(ok, "%s: float values differ from Python's", file);
        }
        CHECK_ERR(qkv_idx_read_f32(x, f, n + 1), QKV_ERR_SHAPE, "elements");
        free(f);
        free(i);
        qkv_idx_free(x);
    }
    CHECK(types_seen == (1 << 8 | 1 << 9 | 1 << 11 | 1 << 12 | 1 << 13 | 1 << 14),
          "type codes read: mask 0x%x", types_seen);

    /* a set: images in a 2-member gzip, plain labels */
    qkv_image_set *s = NULL;
    char ip[600];
    snprintf(ip, sizeof ip, "%s", path_in("set-images.gz"));
    CHECK_OK(qkv_image_set_load(ip, path_in("set-labels"), &s));
    qkv_tensor *wi = h_load(st, a, "set_images", 0), *wl = h_load(st, a, "set_labels", 0);
    if (s && wi && wl) {
        CHECK(s->n == 7 && s->channels == 1 && s->height == 5 && s->width == 6, "set dims");
        int ok = 1;
        for (int64_t e = 0; e < qkv_tensor_numel(wi); e++) ok &= s->images[e] == wi->data[e];
        CHECK(ok, "set images differ from torch's ToTensor (uint8 / 255)");
        int64_t maxl = 0;
        ok = 1;
        for (int64_t e = 0; e < 7; e++) ok &= s->labels[e] == wl->idx[e], maxl = wl->idx[e] > maxl ? wl->idx[e] : maxl;
        CHECK(ok && s->classes == maxl + 1, "labels / classes %lld", (long long)s->classes);
        float mean, sd;
        CHECK_OK(qkv_image_set_stats(s, &mean, &sd));
        qkv_tensor *wm = h_load(st, a, "set_mean", 0), *ws = h_load(st, a, "set_std", 0);
        if (wm && ws)
            CHECK(fabsf(mean - wm->data[0]) < 1e-6f && fabsf(sd - ws->data[0]) < 1e-6f,
                  "stats %g %g, torch %g %g", mean, sd, wm->data[0], ws->data[0]);
    }
    qkv_image_set_free(s);
    /* counts that disagree */
    s = NULL;
    CHECK_ERR(qkv_image_set_load(ip, path_in("idx_00"), &s), QKV_ERR_FORMAT, "idx_00: expected unsigned bytes (n)");
    CHECK(s == NULL, "no set on failure");
    qkv_safetensors_close(st);
    qkv_arena_free(a);
}

/* ---- corrupt files -------------------------------------------------------- */

/* path must fail with QKV_ERR_FORMAT and a message naming it. */
static int fails_naming(const char *path)
{
    qkv_idx *x = NULL;
    qkv_status s = qkv_idx_read(path, &x);
    int ok = s == QKV_ERR_FORMAT && strstr(qkv_last_error(), path) && x == NULL;
    qkv_idx_free(x);
    return ok;
}

static void test_truncated(void)
{
    const char *files[] = {"idx_00", "idx_01.gz", "idx_11.gz", "set-images.gz", "set-labels"};
    for (int k = 0; k < 5; k++) {
        size_t n = 0;
        unsigned char *b = (unsigned char *)h_slurp(path_in(files[k]), &n);
        if (!b) {
            CHECK(0, "cannot read %s", files[k]);
            continue;
        }
        int bad = 0;
        char *cut = path_in("cut");
        static char cutp[600];
        snprintf(cutp, sizeof cutp, "%s", cut);
        for (size_t len = 0; len < n; len++) {
            spill(cutp, b, len);
            if (!fails_naming(cutp)) {
                bad++;
                fprintf(stderr, "  %s cut to %zu bytes: %s\n", files[k], len, qkv_last_error());
            }
        }
        CHECK(bad == 0, "%s: %d of %zu truncations not refused", files[k], bad, n);
        /* one byte more */
        b[n] = 0;
        spill(cutp, b, n + 1);
        CHECK(fails_naming(cutp), "%s with a byte appended: %s", files[k], qkv_last_error());
        /* gzip's trailer: CRC-32 and length, each byte flipped */
        if (strstr(files[k], ".gz")) {
            for (size_t i = n - 8; i < n; i++) {
                b[i] ^= 0x21;
                spill(cutp, b, n);
                CHECK(fails_naming(cutp), "%s with trailer byte %zu flipped: %s", files[k], i, qkv_last_error());
                b[i] ^= 0x21;
            }
        }
        free(b);
    }
}

/* An idx file from bytes; returns its path. */
static const char *write_bytes(const char *name, const unsigned char *b, size_t n)
{
    const char *p = path_in(name);
    spill(p, b, n);
    return p;
}

static void test_bad_headers(void)
{
    static char p[600];
    const unsigned char bad_magic[] = {1, 0, 8, 1, 0, 0, 0, 1, 7};
    snprintf(p, sizeof p, "%s", write_bytes("h1", bad_magic, sizeof bad_magic));
    CHECK_ERR(qkv_idx_read(p, &(qkv_idx *){0}), QKV_ERR_FORMAT, "not an idx file");
    const unsigned char bad_type[] = {0, 0, 0x0A, 1, 0, 0, 0, 1, 7};
    snprintf(p, sizeof p, "%s", write_bytes("h2", bad_type, sizeof bad_type));
    CHECK_ERR(qkv_idx_read(p, &(qkv_idx *){0}), QKV_ERR_FORMAT, "type code 0x0a");
    const unsigned char no_dims[] = {0, 0, 8, 0, 7};
    snprintf(p, sizeof p, "%s", write_bytes("h3", no_dims, sizeof no_dims));
    CHECK_ERR(qkv_idx_read(p, &(qkv_idx *){0}), QKV_ERR_FORMAT, "0 dimensions");
    /* 4 x 2^32-1 doubles: the product overflows int64 */
    unsigned char ovf[4 + 16] = {0, 0, 0x0E, 4};
    memset(ovf + 4, 0xff, 16);
    snprintf(p, sizeof p, "%s", write_bytes("h4", ovf, sizeof ovf));
    CHECK_ERR(qkv_idx_read(p, &(qkv_idx *){0}), QKV_ERR_FORMAT, "overflow");
    /* 2^31 x 2^31 bytes claimed, 1 present: refused before allocating */
    const unsigned char big[] = {0, 0, 8, 2, 0x80, 0, 0, 0, 0x80, 0, 0, 0, 7};
    snprintf(p, sizeof p, "%s", write_bytes("h5", big, sizeof big));
    CHECK_ERR(qkv_idx_read(p, &(qkv_idx *){0}), QKV_ERR_FORMAT, "has left");
    /* a zero size: 0 elements whatever the other sizes */
    const unsigned char empty[] = {0, 0, 0x0C, 3, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
    snprintf(p, sizeof p, "%s", write_bytes("h6", empty, sizeof empty));
    qkv_idx *x = NULL;
    CHECK_OK(qkv_idx_read(p, &x));
    CHECK(x && qkv_idx_numel(x) == 0 && qkv_idx_ndim(x) == 3 && qkv_idx_dim(x, 0) == 4294967295LL &&
          qkv_idx_dim(x, 3) == -1, "empty file's dims");
    qkv_idx_free(x);
    /* 255 dimensions of 1 */
    unsigned char many[4 + 4 * 255 + 1] = {0, 0, 8, 255};
    for (int d = 0; d < 255; d++) many[4 + 4 * d + 3] = 1;
    many[sizeof many - 1] = 42;
    snprintf(p, sizeof p, "%s", write_bytes("h7", many, sizeof many));
    x = NULL;
    CHECK_OK(qkv_idx_read(p, &x));
    int64_t v = 0;
    CHECK(x && qkv_idx_ndim(x) == 255 && qkv_idx_read_i64(x, &v, 1) == QKV_OK && v == 42, "255 dims");
    qkv_idx_free(x);
    /* a gzip'd header that claims 10^9 bytes from a few dozen: refused
     * before allocating (deflate expands at most 1032:1) */
    const unsigned char claim[] = {0, 0, 8, 1, 0x3B, 0x9A, 0xCA, 0x00, 1, 2, 3};
    snprintf(p, sizeof p, "%s", path_in("h8.gz"));
    gzFile g = gzopen(p, "wb");
    gzwrite(g, claim, sizeof claim);
    gzclose(g);
    CHECK_ERR(qkv_idx_read(p, &(qkv_idx *){0}), QKV_ERR_FORMAT, "can hold");
    /* gzip followed by bytes that are not gzip */
    size_t n = 0;
    unsigned char *b = (unsigned char *)h_slurp(path_in("idx_01.gz"), &n);
    if (b) {
        unsigned char *c = malloc(n + 3);
        memcpy(c, b, n);
        memcpy(c + n, "abc", 3);
        snprintf(p, sizeof p, "%s", write_bytes("h9.gz", c, n + 3));
        CHECK_ERR(qkv_idx_read(p, &(qkv_idx *){0}), QKV_ERR_FORMAT, "not gzip");
        /* a corrupt deflate block: the first block's header byte set to the
         * reserved block type 3 */
        memcpy(c, b, n);
        c[10] = 0x07;
        snprintf(p, sizeof p, "%s", write_bytes("h10.gz", c, n));
        CHECK_ERR(qkv_idx_read(p, &(qkv_idx *){0}), QKV_ERR_FORMAT, "corrupt gzip");
        free(c);
        free(b);
    }
    CHECK_ERR(qkv_idx_read("/nonexistent/qkv.idx", &(qkv_idx *){0}), QKV_ERR_IO, "/nonexistent/qkv.idx");
    CHECK_ERR(qkv_idx_read(NULL, &(qkv_idx *){0}), QKV_ERR_ARG, "path");
    CHECK_ERR(qkv_idx_parse("", 0, "empty", NULL), QKV_ERR_ARG, "out");
    CHECK_ERR(qkv_idx_parse("", 0, "empty", &(qkv_idx *){0}), QKV_ERR_FORMAT, "empty: 0 bytes");
}

/* ---- batches, shuffles, augmentation ------------------------------------ */

/* A set of n images (n,c,h,w) whose pixel values are all different and > 0. */
static qkv_image_set *toy_set(int64_t n, int64_t c, int64_t h, int64_t w)
{
    qkv_image_set *s = calloc(1, sizeof *s);
    s->n = n, s->channels = c, s->height = h, s->width = w, s->classes = 3;
    s->images = malloc((size_t)(n * c * h * w) * sizeof *s->images);
    s->labels = malloc((size_t)n * sizeof *s->labels);
    for (int64_t i = 0; i < n * c * h * w; i++) s->images[i] = (float)(i + 1);
    for (int64_t i = 0; i < n; i++) s->labels[i] = i % 3;
    return s;
}

static void test_shuffle(void)
{
    qkv_rng r;
    int64_t a[50], b[50];
    for (int i = 0; i < 50; i++) a[i] = b[i] = i;
    qkv_rng_seed(&r, 5);
    CHECK_OK(qkv_shuffle_i64(&r, a, 50));
    qkv_rng_seed(&r, 5);
    CHECK_OK(qkv_shuffle_i64(&r, b, 50));
    int same = 1, seen[50] = {0}, moved = 0;
    for (int i = 0; i < 50; i++) same &= a[i] == b[i], seen[a[i]]++, moved += a[i] != i;
    int perm = 1;
    for (int i = 0; i < 50; i++) perm &= seen[i] == 1;
    CHECK(same && perm && moved > 30, "shuffle: same seed same order %d, a permutation %d, moved %d", same,
          perm, moved);
    /* all 6 orders of 3 come out about equally often */
    int count[6] = {0};
    qkv_rng_seed(&r, 9);
    for (int t = 0; t < 60000; t++) {
        int64_t p[3] = {0, 1, 2};
        qkv_shuffle_i64(&r, p, 3);
        count[p[0] * 2 + (p[1] > p[2])]++;
    }
    int even = 1;
    for (int k = 0; k < 6; k++) even &= count[k] > 9500 && count[k] < 10500;
    CHECK(even, "shuffle of 3: %d %d %d %d %d %d of 60000", count[0], count[1], count[2], count[3],
          count[4], count[5]);
    CHECK_ERR(qkv_shuffle_i64(&r, a, -1), QKV_ERR_ARG, "n -1");
    CHECK_ERR(qkv_shuffle_i64(NULL, a, 3), QKV_ERR_ARG, "rng");
}

/* Image img (c,h,w) shifted by torchvision's crop at (top, left) of the
 * p-padded image, written out with an explicit padded array. */
static void crop_ref(const float *img, int64_t c, int64_t h, int64_t w, int p, int top, int left, float *out)
{
    int64_t ph = h + 2 * p, pw = w + 2 * p;
    float *pad = calloc((size_t)(c * ph * pw), sizeof *pad);
    for (int64_t ch = 0; ch < c; ch++)
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++) pad[(ch * ph + y + p) * pw + x + p] = img[(ch * h + y) * w + x];
    for (int64_t ch = 0; ch < c; ch++)
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++) out[(ch * h + y) * w + x] = pad[(ch * ph + y + top) * pw + x + left];
    free(pad);
}

static void test_crop(void)
{
    enum { C = 2, H = 4, W = 5, P = 2, N = 3000 };
    qkv_image_set *s = toy_set(1, C, H, W);
    float *x = malloc(sizeof(float) * N * C * H * W), ref[C * H * W];
    for (int i = 0; i < N; i++) memcpy(x + i * C * H * W, s->images, sizeof ref);
    qkv_rng r;
    qkv_rng_seed(&r, 3);
    CHECK_OK(qkv_image_random_crop(&r, x, N, C, H, W, P));
    /* each result is exactly one of the 25 crops, all channels alike; every
     * offset comes out, about N/25 times each */
    int hits[2 * P + 1][2 * P + 1], unmatched = 0;
    memset(hits, 0, sizeof hits);
    for (int i = 0; i < N; i++) {
        int found = 0;
        for (int t = 0; t <= 2 * P && !found; t++)
            for (int l = 0; l <= 2 * P && !found; l++) {
                crop_ref(s->images, C, H, W, P, t, l, ref);
                if (memcmp(ref, x + i * C * H * W, sizeof ref) == 0) hits[t][l]++, found = 1;
            }
        unmatched += !found;
    }
    int lo = N, hi = 0;
    for (int t = 0; t <= 2 * P; t++)
        for (int l = 0; l <= 2 * P; l++) lo = hits[t][l] < lo ? hits[t][l] : lo, hi = hits[t][l] > hi ? hits[t][l] : hi;
    CHECK(unmatched == 0 && lo > 80 && hi < 160, "crop: %d results match no crop; offsets seen %d..%d "
          "times (expected about 120)", unmatched, lo, hi);
    /* deterministic for a seed */
    float *y = malloc(sizeof(float) * 8 * C * H * W);
    for (int i = 0; i < 8; i++) memcpy(y + i * C * H * W, s->images, sizeof ref);
    qkv_rng_seed(&r, 3);
    CHECK_OK(qkv_image_random_crop(&r, y, 8, C, H, W, P));
    CHECK(memcmp(x, y, sizeof(float) * 8 * C * H * W) == 0, "crop: the same seed, the same crops");
    /* padding 0: unchanged; padding larger than the image: zeros possible */
    memcpy(y, s->images, sizeof ref);
    CHECK_OK(qkv_image_random_crop(&r, y, 1, C, H, W, 0));
    CHECK(memcmp(y, s->images, sizeof ref) == 0, "crop with padding 0 changes nothing");
    /* a worked case: a 1x3x3 image, padding 1, offsets (0,2): shifted up-left
     * by one row and ... out[y][x] = in[y-1][x+1] */
    float img[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, want[9] = {0, 0, 0, 2, 3, 0, 5, 6, 0}, got[9];
    crop_ref(img, 1, 3, 3, 1, 0, 2, got);
    CHECK(memcmp(got, want, sizeof got) == 0, "crop reference at (0,2)");
    int found = 0;
    for (int t = 0; t < 200 && !found; t++) {
        memcpy(got, img, sizeof img);
        qkv_image_random_crop(&r, got, 1, 1, 3, 3, 1);
        found = memcmp(got, want, sizeof got) == 0;
    }
    CHECK(found, "crop of 3x3 with padding 1 never gave offset (0,2) in 200 draws");
    CHECK_ERR(qkv_image_random_crop(&r, y, 1, C, H, W, -1), QKV_ERR_ARG, "padding -1");
    CHECK_ERR(qkv_image_random_crop(&r, y, 1, 0, H, W, 1), QKV_ERR_SHAPE, "batch");
    CHECK_ERR(qkv_image_random_crop(NULL, y, 1, C, H, W, 1), QKV_ERR_ARG, "rng");
    free(x);
    free(y);
    qkv_image_set_free(s);
}

static void test_flip(void)
{
    enum { C = 2, H = 3, W = 5, N = 10000 };
    qkv_image_set *s = toy_set(1, C, H, W);
    float mirror[C * H * W];
    for (int ch = 0; ch < C; ch++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) mirror[(ch * H + y) * W + x] = s->images[(ch * H + y) * W + W - 1 - x];
    float *x = malloc(sizeof(float) * N * C * H * W);
    for (int i = 0; i < N; i++) memcpy(x + i * C * H * W, s->images, sizeof mirror);
    qkv_rng r;
    qkv_rng_seed(&r, 11);
    CHECK_OK(qkv_image_random_hflip(&r, x, N, C, H, W, 0.5f));
    int flipped = 0, other = 0;
    for (int i = 0; i < N; i++) {
        if (memcmp(x + i * C * H * W, mirror, sizeof mirror) == 0) flipped++;
        else if (memcmp(x + i * C * H * W, s->images, sizeof mirror) != 0) other++;
    }
    CHECK(other == 0 && flipped > 4800 && flipped < 5200, "flip p=0.5: %d of %d mirrored, %d neither", flipped,
          N, other);
    memcpy(x, s->images, sizeof mirror);
    CHECK_OK(qkv_image_random_hflip(&r, x, 1, C, H, W, 1.0f));
    CHECK(memcmp(x, mirror, sizeof mirror) == 0, "flip p=1 mirrors");
    memcpy(x, s->images, sizeof mirror);
    CHECK_OK(qkv_image_random_hflip(&r, x, 1, C, H, W, 0.0f));
    CHECK(memcmp(x, s->images, sizeof mirror) == 0, "flip p=0 does nothing");
    CHECK_ERR(qkv_image_random_hflip(&r, x, 1, C, H, W, 1.5f), QKV_ERR_ARG, "p 1.5");
    free(x);
    qkv_image_set_free(s);
}

static void test_batch(void)
{
    qkv_image_set *s = toy_set(6, 1, 3, 4);
    int64_t idx[4] = {5, 0, 5, 2}, lab[4];
    float b[4 * 12];
    CHECK_OK(qkv_image_set_batch(s, idx, 4, NULL, NULL, b, lab));
    int ok = 1;
    for (int i = 0; i < 4; i++) {
        ok &= lab[i] == idx[i] % 3;
        for (int k = 0; k < 12; k++) ok &= b[i * 12 + k] == (float)(idx[i] * 12 + k + 1);
    }
    CHECK(ok, "batch gathers images and labels by index");
    /* crop + flip + normalise: deterministic for a seed, padding normalised
     * too (crop before Normalize, as in torchvision) */
    float mean = 3.0f, sd = 2.0f, b2[4 * 12];
    qkv_image_aug aug = {.crop_padding = 2, .flip_p = 0.5f, .mean = &mean, .std = &sd};
    qkv_rng r;
    qkv_rng_seed(&r, 1);
    CHECK_OK(qkv_image_set_batch(s, idx, 4, &aug, &r, b, lab));
    qkv_rng_seed(&r, 1);
    CHECK_OK(qkv_image_set_batch(s, idx, 4, &aug, &r, b2, NULL));
    CHECK(memcmp(b, b2, sizeof b) == 0, "augmented batch deterministic for a seed");
    int pad = 0, vals = 1;
    for (int k = 0; k < 4 * 12; k++) {
        float v = b[k] * sd + mean; /* undo Normalize: a pixel value or a 0 */
        pad += fabsf(b[k] + 1.5f) < 1e-6f;
        vals &= fabsf(v - roundf(v)) < 1e-4f && v >= -1e-4f && v <= 72.0f;
    }
    CHECK(pad > 0 && vals, "normalised padding (-mean/std) seen %d times; values pixel or 0: %d", pad, vals);
    /* rng required only when drawing */
    qkv_image_aug norm_only = {.mean = &mean, .std = &sd};
    CHECK_OK(qkv_image_set_batch(s, idx, 1, &norm_only, NULL, b, NULL));
    CHECK(b[0] == (61.0f - 3.0f) / 2.0f, "normalise only: image 5 pixel 0 (61) gives %g", b[0]);
    CHECK_ERR(qkv_image_set_batch(s, idx, 1, &aug, NULL, b, NULL), QKV_ERR_ARG, "rng");
    idx[1] = 6;
    CHECK_ERR(qkv_image_set_batch(s, idx, 4, NULL, NULL, b, lab), QKV_ERR_ARG, "index[1] = 6");
    float bad = 0;
    CHECK_ERR(qkv_image_normalize(b, 1, 1, 3, 4, &mean, &bad), QKV_ERR_ARG, "std 0");
    qkv_image_set_free(s);
}

/* ---- Fashion-MNIST -------------------------------------------------------- */

/* The first labels and pixel sums of the Debian package's files, computed
 * with Python alone (docs/data.md gives the command):
 *   gzip.open(path).read(); struct.unpack('>IIII', b[:16]); sum(b[16:16+784]) */
static void test_fashion(void)
{
    const char *d = "data/fashion-mnist";
    qkv_image_set *s = NULL;
    qkv_status st = qkv_fashion_mnist_load(d, 1, &s);
    CHECK(st == QKV_OK, "Fashion-MNIST is missing or unreadable (%s): run tools/get_data.sh fashion-mnist "
          "(tools/setup.sh --test does) from the repository's root", qkv_last_error());
    if (st != QKV_OK) return;
    static const int64_t first_train[10] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5}, first_test[10] = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7};
    static const int64_t sums_train[3] = {76247, 84598, 28662}, sums_test[3] = {33456, 100994, 51520};
    static const int64_t total[2] = {3431114169LL, 573469082LL};
    for (int part = 0; part < 2; part++) {
        if (part == 1) {
            qkv_image_set_free(s);
            s = NULL;
            CHECK_OK(qkv_fashion_mnist_load(d, 0, &s));
            if (!s) return;
        }
        const int64_t *first = part ? first_test : first_train, *sums = part ? sums_test : sums_train;
        CHECK(s->n == (part ? 10000 : 60000) && s->channels == 1 && s->height == 28 && s->width == 28 &&
              s->classes == 10, "split %d: (%lld,%lld,%lld,%lld)", part, (long long)s->n, (long long)s->channels,
              (long long)s->height, (long long)s->width);
        int ok = 1;
        for (int i = 0; i < 10; i++) ok &= s->labels[i] == first[i];
        CHECK(ok, "split %d: first labels differ from Python's", part);
        int64_t all = 0, counts[10] = {0};
        for (int64_t i = 0; i < s->n; i++) {
            int64_t sum = 0;
            for (int k = 0; k < 784; k++) sum += (int64_t)lrintf(s->images[i * 784 + k] * 255.0f);
            if (i < 3) CHECK(sum == sums[i], "split %d image %lld: pixel sum %lld, Python %lld", part, (long long)i,
                             (long long)sum, (long long)sums[i]);
            all += sum;
            if (s->labels[i] >= 0 && s->labels[i] < 10) counts[s->labels[i]]++;
        }
        CHECK(all == total[part], "split %d: all pixels sum to %lld, Python %lld", part, (long long)all,
              (long long)total[part]);
        ok = 1;
        for (int c = 0; c < 10; c++) ok &= counts[c] == s->n / 10;
        CHECK(ok, "split %d: not %lld images per class", part, (long long)(s->n / 10));
        if (part == 0) {
            /* numpy over the bytes / 255 in float64: 0.2860405969887955, 0.35302424451492237 */
            float mean = 0, sd = 0;
            CHECK_OK(qkv_image_set_stats(s, &mean, &sd));
            CHECK(fabs(mean - 0.2860405969887955) < 1e-6 && fabs(sd - 0.35302424451492237) < 1e-6,
                  "training set mean %.7f std %.7f, numpy 0.2860406 0.3530242", mean, sd);
        }
    }
    qkv_image_set_free(s);
}

static void test_classes(void)
{
    const char *want[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                            "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
    int ok = 1;
    for (int i = 0; i < 10; i++) ok &= qkv_fashion_mnist_class(i) && strcmp(qkv_fashion_mnist_class(i), want[i]) == 0;
    CHECK(ok && !qkv_fashion_mnist_class(10) && !qkv_fashion_mnist_class(-1), "class names");
    qkv_image_set *s = NULL;
    CHECK_ERR(qkv_fashion_mnist_load("/nonexistent", 1, &s), QKV_ERR_NOTFOUND, "tools/get_data.sh fashion-mnist");
}

int main(void)
{
    if (h_oracle_run("image_oracle.py", dir, "--what idx")) {
        test_oracle_files();
        test_truncated();
        test_bad_headers();
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd)) fprintf(stderr, "cannot remove %s\n", dir);
    }
    test_shuffle();
    test_crop();
    test_flip();
    test_batch();
    test_classes();
    test_fashion();
    return h_finish("test_idx");
}
