/* PNG images: qkv_png_read on files that tools/image_oracle.py writes with
 * zlib + struct (every colour type and bit depth, palettes, tRNS, Adam7),
 * against the pixel values it encoded, from files and from memory;
 * truncated and corrupt files;
 * qkv_image_fit's conversions and its bilinear resize against
 * F.interpolate(mode="bilinear", align_corners=False, antialias=False). */
#define _POSIX_C_SOURCE 200809L
#include <sys/resource.h>
#include "parity.h"

static char dir[] = "/tmp/qkv_png_XXXXXX";

static const char *path_in(const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

static void test_read(qkv_safetensors *st, qkv_arena *a)
{
    int count = (int)h_meta_int(st, "png_count"), seen = 0;
    CHECK(count == 52, "the oracle wrote %d PNGs", count);
    for (int k = 0; k < count; k++) {
        char name[32], file[64], p[600];
        snprintf(name, sizeof name, "png_%02d", k);
        snprintf(file, sizeof file, "%s.png", name);
        qkv_tensor *want = h_load(st, a, name, 0);
        float *px = NULL;
        int64_t c = 0, h = 0, w = 0;
        CHECK_OK(qkv_png_read(path_in(file, p, sizeof p), &px, &c, &h, &w));
        if (!px || !want) continue;
        const char *what = qkv_safetensors_meta(st, name);
        CHECK(c == want->shape[0] && h == want->shape[1] && w == want->shape[2],
              "%s (%s): (%lld,%lld,%lld), want (%lld,%lld,%lld)", file, what, (long long)c, (long long)h,
              (long long)w, (long long)want->shape[0], (long long)want->shape[1], (long long)want->shape[2]);
        if (c == want->shape[0] && h == want->shape[1] && w == want->shape[2]) {
            double e = h_rel_err(px, want->data, c * h * w);
            CHECK(e <= 1e-7, "%s (%s): pixels differ, relative error %.3g", file, what, e);
            seen++;
        }
        free(px);
    }
    CHECK(seen == count, "%d of %d PNGs read as encoded", seen, count);
}


/* Recomputes the CRC-32 of a PNG's IHDR chunk (bytes 12..28: "IHDR" and
 * its 13 bytes; the CRC at 29..32), after editing it. */
static void fix_ihdr_crc(unsigned char *b)
{
    unsigned long c = 0xffffffffUL;
    for (size_t i = 12; i < 29; i++) {
        c ^= b[i];
        for (int j = 0; j < 8; j++) c = c >> 1 ^ (0xEDB88320UL & (0 - (c & 1)));
    }
    c ^= 0xffffffffUL;
    b[29] = (unsigned char)(c >> 24), b[30] = (unsigned char)(c >> 16);
    b[31] = (unsigned char)(c >> 8), b[32] = (unsigned char)c;
}

static int refused(const char *path)
{
    float *px = (float *)1;
    int64_t c, h, w;
    qkv_status s = qkv_png_read(path, &px, &c, &h, &w);
    return s == QKV_ERR_FORMAT && px == NULL && strstr(qkv_last_error(), path) != NULL;
}

/* qkv_png_read_mem on each file's bytes gives what qkv_png_read gives. */
static void test_mem(int count)
{
    int same = 0;
    for (int k = 0; k < count; k++) {
        char file[64], p[600];
        snprintf(file, sizeof file, "png_%02d.png", k);
        size_t n = 0;
        unsigned char *b = (unsigned char *)h_slurp(path_in(file, p, sizeof p), &n);
        float *px = NULL, *pm = NULL;
        int64_t c = 0, h = 0, w = 0, cm = 0, hm = 0, wm = 0;
        if (b && qkv_png_read(p, &px, &c, &h, &w) == QKV_OK &&
            qkv_png_read_mem(b, n, file, &pm, &cm, &hm, &wm) == QKV_OK)
            same += c == cm && h == hm && w == wm && memcmp(px, pm, (size_t)(c * h * w) * sizeof *px) == 0;
        free(b), free(px), free(pm);
    }
    CHECK(same == count, "%d of %d PNGs read the same from memory", same, count);
}

static void test_corrupt(void)
{
    const char *files[] = {"png_00.png", "png_03.png", "png_19.png", "png_41.png", "png_51.png"};
    char src[600], cut[600];
    path_in("cut.png", cut, sizeof cut);
    for (int k = 0; k < 5; k++) {
        size_t n = 0;
        unsigned char *b = (unsigned char *)h_slurp(path_in(files[k], src, sizeof src), &n);
        if (!b) {
            CHECK(0, "cannot read %s", files[k]);
            continue;
        }
        /* every truncation that cuts into the image data or before it; the
         * last 12 bytes are IEND, which libpng (and PIL) do not need */
        int bad = 0;
        for (size_t len = 0; len + 12 < n; len++) {
            FILE *f = fopen(cut, "wb");
            fwrite(b, 1, len, f);
            fclose(f);
            if (!refused(cut)) {
                bad++;
                if (bad < 4) fprintf(stderr, "  %s cut to %zu: %s\n", files[k], len, qkv_last_error());
            }
        }
        CHECK(bad == 0, "%s: %d of %zu truncations not refused", files[k], bad, n - 12);
        /* one byte of each chunk's CRC flipped (IHDR at 29..32, the IDATs':
         * found by walking the chunks) */
        size_t pos = 8;
        int crcs = 0, crc_bad = 0;
        while (pos + 12 <= n) {
            size_t len = (size_t)b[pos] << 24 | (size_t)b[pos + 1] << 16 | (size_t)b[pos + 2] << 8 | b[pos + 3];
            size_t crc = pos + 8 + len;
            if (crc + 4 > n) break;
            int critical = memcmp(b + pos + 4, "IEND", 4) != 0; /* libpng stops before IEND's CRC */
            if (critical) {
                b[crc + 1] ^= 0x40;
                FILE *f = fopen(cut, "wb");
                fwrite(b, 1, n, f);
                fclose(f);
                crcs++;
                if (!refused(cut)) crc_bad++, fprintf(stderr, "  %s CRC at %zu: %s\n", files[k], crc, qkv_last_error());
                b[crc + 1] ^= 0x40;
            }
            pos = crc + 4;
        }
        CHECK(crcs >= 3 && crc_bad == 0, "%s: %d of %d bad CRCs not refused", files[k], crc_bad, crcs);
        /* a corrupt IHDR: bit depth 3 (with its CRC made right) is refused
         * by libpng's checks, not by the CRC */
        b[24] = 3;
        fix_ihdr_crc(b);
        FILE *f = fopen(cut, "wb");
        fwrite(b, 1, n, f);
        fclose(f);
        CHECK(refused(cut), "%s with bit depth 3: %s", files[k], qkv_last_error());
        free(b);
    }
    /* a header claiming 20000 x 20000 pixels (IHDR's CRC made right) */
    {
        size_t n = 0;
        unsigned char *b = (unsigned char *)h_slurp(path_in("png_20.png", src, sizeof src), &n);
        if (b) {
            const unsigned char dim[8] = {0, 0, 0x4e, 0x20, 0, 0, 0x4e, 0x20};
            memcpy(b + 16, dim, 8);
            fix_ihdr_crc(b);
            FILE *f = fopen(cut, "wb");
            fwrite(b, 1, n, f);
            fclose(f);
            float *px = NULL;
            int64_t c3, h3, w3;
            CHECK_ERR(qkv_png_read(cut, &px, &c3, &h3, &w3), QKV_ERR_FORMAT, "20000x20000 pixels, more than");
            free(b);
        }
    }
    /* 16000 x 16000 (within 2^28) with a few bytes of data: refused from
     * the header, before allocating gigabytes for them (under libFuzzer,
     * whose malloc limit is 2 GB, that allocation would be a finding) */
    {
        size_t n = 0;
        unsigned char *b = (unsigned char *)h_slurp(path_in("png_20.png", src, sizeof src), &n);
        if (b) {
            const unsigned char dim[8] = {0, 0, 0x3e, 0x80, 0, 0, 0x3e, 0x80};
            memcpy(b + 16, dim, 8);
            fix_ihdr_crc(b);
            float *px = (float *)1;
            int64_t c3, h3, w3;
            CHECK_ERR(qkv_png_read_mem(b, n, "big.png", &px, &c3, &h3, &w3), QKV_ERR_FORMAT,
                      "big.png: 16000x16000 pixels");
            CHECK(px == NULL && strstr(qkv_last_error(), "cannot come from"), "16000x16000: %s", qkv_last_error());
            free(b);
        }
    }
    /* A chunk that claims more bytes than the file holds (fuzz_png's
     * finding: an sPLT of 1.8 GB in a 100-byte file, for which libpng
     * allocated and touched 1.8 GB before failing): refused before libpng
     * reads it, the peak resident memory unchanged */
    {
        size_t n = 0;
        unsigned char *b = (unsigned char *)h_slurp(path_in("png_20.png", src, sizeof src), &n);
        if (b && n >= 33 + 20) {
            const unsigned char splt[12] = {0x6d, 0x0c, 0xb0, 0x00, 's', 'P', 'L', 'T', 'p', 'a', 'l', 0};
            memcpy(b + 33, splt, sizeof splt);
            struct rusage r0, r1;
            getrusage(RUSAGE_SELF, &r0);
            float *px = (float *)1;
            int64_t c3, h3, w3;
            CHECK_ERR(qkv_png_read_mem(b, 33 + 20, "splt.png", &px, &c3, &h3, &w3), QKV_ERR_FORMAT,
                      "splt.png: chunk sPLT at byte 33 claims 1829548032 bytes");
            getrusage(RUSAGE_SELF, &r1);
            CHECK(px == NULL && r1.ru_maxrss - r0.ru_maxrss < 100 * 1024,
                  "sPLT of 1.8 GB: the peak resident set grew by %ld KiB", r1.ru_maxrss - r0.ru_maxrss);
        }
        free(b);
    }
    float *px = NULL;
    int64_t c, h, w;
    CHECK_ERR(qkv_png_read("/nonexistent/x.png", &px, &c, &h, &w), QKV_ERR_IO, "/nonexistent/x.png");
    CHECK_ERR(qkv_png_read_mem(NULL, 8, "x", &px, &c, &h, &w), QKV_ERR_ARG, "bytes");
    CHECK_ERR(qkv_png_read_mem("\x89PNG", 4, "four.png", &px, &c, &h, &w), QKV_ERR_FORMAT,
              "four.png: not a PNG file (shorter than the signature)");
    FILE *f = fopen(cut, "wb");
    fputs("GIF89a not a png", f);
    fclose(f);
    CHECK_ERR(qkv_png_read(cut, &px, &c, &h, &w), QKV_ERR_FORMAT, "no PNG signature");
    CHECK_ERR(qkv_png_read(cut, NULL, &c, &h, &w), QKV_ERR_ARG, "pixels");
}

static void test_resize(qkv_safetensors *st, qkv_arena *a)
{
    int count = (int)h_meta_int(st, "resize_count");
    double worst = 0;
    CHECK(count == 30, "resize cases %d", count);
    for (int k = 0; k < count; k++) {
        char xn[32], yn[32], mn[32];
        snprintf(xn, sizeof xn, "resize_%02d_x", k);
        snprintf(yn, sizeof yn, "resize_%02d_y", k);
        snprintf(mn, sizeof mn, "resize_%02d", k);
        qkv_tensor *x = h_load(st, a, xn, 0), *y = h_load(st, a, yn, 0);
        if (!x || !y) {
            CHECK(0, "case %d missing", k);
            continue;
        }
        int64_t c = x->shape[0], dh = y->shape[1], dw = y->shape[2];
        float *out = malloc((size_t)(c * dh * dw) * sizeof *out);
        CHECK_OK(qkv_image_resize_bilinear(x->data, c, x->shape[1], x->shape[2], out, dh, dw));
        h_compare(mn, "bilinear", out, y, 5e-7, &worst);
        /* through qkv_image_fit: resized, not converted (unless same size) */
        unsigned changes = 99;
        CHECK_OK(qkv_image_fit(x->data, c, x->shape[1], x->shape[2], out, c == 2 ? 1 : c, dh, dw, &changes));
        int same = x->shape[1] == dh && x->shape[2] == dw;
        unsigned want = (same ? 0 : QKV_IMAGE_RESIZED) | (c == 2 ? QKV_IMAGE_CONVERTED : 0);
        CHECK(changes == want, "%s: fit says %u, want %u", mn, changes, want);
        if (c != 2) h_compare(mn, "fit", out, y, 5e-7, &worst);
        free(out);
    }
    printf("bilinear resize vs F.interpolate: %d cases, worst relative error %.2g\n", count, worst);
}

static void test_convert(qkv_safetensors *st, qkv_arena *a)
{
    qkv_tensor *x = h_load(st, a, "grey_x", 0), *y = h_load(st, a, "grey_y", 0);
    if (!x || !y) {
        CHECK(0, "grey case missing");
        return;
    }
    float out[3 * 9 * 7], rgba[4 * 9 * 7];
    unsigned ch = 0;
    double worst = 0;
    CHECK_OK(qkv_image_fit(x->data, 3, 9, 7, out, 1, 9, 7, &ch));
    CHECK(ch == QKV_IMAGE_CONVERTED, "RGB -> grey: changes %u", ch);
    h_compare("grey", "L = 0.299R+0.587G+0.114B", out, y, 1e-6, &worst);
    /* RGBA: alpha dropped, the same grey */
    memcpy(rgba, x->data, sizeof(float) * 3 * 63);
    for (int k = 0; k < 63; k++) rgba[3 * 63 + k] = 0.25f;
    CHECK_OK(qkv_image_fit(rgba, 4, 9, 7, out, 1, 9, 7, &ch));
    h_compare("grey", "RGBA -> L", out, y, 1e-6, &worst);
    /* grey -> RGB repeats the channel; grey+alpha -> RGB drops alpha */
    float g[2 * 4] = {0.1f, 0.2f, 0.3f, 0.4f, 1, 1, 0, 0}, rgb[3 * 4];
    CHECK_OK(qkv_image_fit(g, 2, 2, 2, rgb, 3, 2, 2, &ch));
    int ok = ch == QKV_IMAGE_CONVERTED;
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < 4; k++) ok &= rgb[c * 4 + k] == g[k];
    CHECK(ok, "grey+alpha -> RGB");
    CHECK_OK(qkv_image_fit(g, 1, 2, 2, rgb, 1, 2, 2, &ch));
    CHECK(ch == 0 && memcmp(rgb, g, 4 * sizeof(float)) == 0, "same shape: copied, no changes");
    CHECK_ERR(qkv_image_fit(g, 5, 2, 2, rgb, 1, 2, 2, &ch), QKV_ERR_SHAPE, "5 channels");
    CHECK_ERR(qkv_image_fit(g, 1, 2, 2, rgb, 2, 2, 2, &ch), QKV_ERR_SHAPE, "wants 2 channels");
    CHECK_ERR(qkv_image_fit(g, 1, 0, 2, rgb, 1, 2, 2, &ch), QKV_ERR_SHAPE, "batch");
    CHECK_ERR(qkv_image_fit(NULL, 1, 2, 2, rgb, 1, 2, 2, &ch), QKV_ERR_ARG, "src");
}

int main(void)
{
    if (!h_oracle_run("image_oracle.py", dir, "--what png")) return h_finish("test_png");
    char p[600];
    qkv_safetensors *st = NULL;
    qkv_arena *a = NULL;
    qkv_arena_new(&a, 1 << 20);
    CHECK_OK(qkv_safetensors_open(path_in("expected.safetensors", p, sizeof p), &st));
    if (st) {
        test_read(st, a);
        test_mem((int)h_meta_int(st, "png_count"));
        test_corrupt();
        test_resize(st, a);
        test_convert(st, a);
        qkv_safetensors_close(st);
    }
    qkv_arena_free(a);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "cannot remove %s\n", dir);
    return h_finish("test_png");
}
