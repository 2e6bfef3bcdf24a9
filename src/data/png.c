/* png.c: PNG images through libpng, and fitting an image to a model's
 * input (channel conversion, PyTorch's bilinear resize).
 *
 * libpng reports errors by longjmp to the setjmp in read_png: everything
 * that read_png allocates is held in a struct outside its frame (not in
 * locals, whose values are indeterminate after the jump unless volatile),
 * so the one cleanup path frees it whichever way control arrives. */
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "data/image_internal.h"
#include "data/tokenizer_internal.h" /* tok_read_file */

typedef struct {
    const char *path;         /* the name in messages */
    const uint8_t *bytes;     /* the whole PNG (n) */
    size_t n, pos;            /* bytes read so far */
    png_structp png;
    png_infop info;
    uint8_t *raw;     /* the decoded rows */
    png_bytep *rows;  /* pointers into raw */
    float *pixels;    /* the result (C,H,W) */
    char msg[200];    /* libpng's error message */
} png_job;

static void on_error(png_structp png, png_const_charp msg)
{
    png_job *j = png_get_error_ptr(png);
    snprintf(j->msg, sizeof j->msg, "%s", msg ? msg : "libpng error");
    png_longjmp(png, 1);
}

/* Warnings (bad ancillary chunks, sRGB profiles) are not errors, and the
 * library never prints. */
static void on_warning(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

/* libpng's input: the next len bytes of the job's buffer; running out is
 * an error (longjmp). */
static void on_read(png_structp png, png_bytep dst, size_t len)
{
    png_job *j = png_get_io_ptr(png);
    if (len > j->n - j->pos) png_error(png, "the file ends early");
    memcpy(dst, j->bytes + j->pos, len);
    j->pos += len;
}

/* Decodes into j->pixels; longjmps to the caller's setjmp on libpng errors. */
static qkv_status decode(png_job *j, int64_t *c, int64_t *h, int64_t *w)
{
    png_structp png = j->png;
    png_infop info = j->info;
    png_set_read_fn(png, j, on_read);
    png_read_info(png, info);
    int type = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
    /* The image's bytes before expansion (filter bytes not counted): the
     * least its compressed data can inflate to. */
    uint64_t packed = (uint64_t)png_get_image_height(png, info) * png_get_image_width(png, info) *
                      png_get_channels(png, info) * (unsigned)depth / 8;
    /* Palette -> RGB, grey below 8 bits -> 8 (scaled: 1 -> 255),
     * tRNS -> an alpha channel; 16 bits stay 16 (big-endian), read below. */
    if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    png_uint_32 W = png_get_image_width(png, info), H = png_get_image_height(png, info);
    int C = png_get_channels(png, info), bits = png_get_bit_depth(png, info);
    size_t rowbytes = png_get_rowbytes(png, info);
    if (C < 1 || C > 4 || (bits != 8 && bits != 16) || rowbytes != (size_t)W * C * (bits / 8))
        return qkv_fail(QKV_ERR_FORMAT, "png_read: %s: unexpected layout after expansion (%d channels "
                        "of %d bits)", j->path, C, bits);
    /* libpng allows up to 10^6 x 10^6 pixels; a header that claims more
     * than 2^28 (16384 x 16384) is refused before allocating for it. */
    if ((uint64_t)H * W > ((uint64_t)1 << 28))
        return qkv_fail(QKV_ERR_FORMAT, "png_read: %s: %ux%u pixels, more than qkv reads (2^28)",
                        j->path, (unsigned)W, (unsigned)H);
    /* deflate inflates at most 1032:1 (zlib's technical notes), so a
     * header whose pixels cannot fit in the file is refused before
     * allocating for them */
    if (packed > (uint64_t)j->n * 1032 + 1024)
        return qkv_fail(QKV_ERR_FORMAT, "png_read: %s: %ux%u pixels (%llu bytes) cannot come from "
                        "%zu bytes of compressed data", j->path, (unsigned)W, (unsigned)H,
                        (unsigned long long)packed, j->n);
    j->raw = malloc((size_t)H * rowbytes); /* H, W >= 1: libpng refuses 0 */
    j->rows = malloc((size_t)H * sizeof *j->rows);
    j->pixels = malloc((size_t)H * W * C * sizeof *j->pixels);
    if (!j->raw || !j->rows || !j->pixels)
        return qkv_fail(QKV_ERR_NOMEM, "png_read: %s: no memory for %ux%u pixels", j->path, (unsigned)W,
                        (unsigned)H);
    for (png_uint_32 y = 0; y < H; y++) j->rows[y] = j->raw + (size_t)y * rowbytes;
    png_read_image(png, j->rows);
    png_read_end(png, NULL);
    /* (H,W,C) interleaved -> (C,H,W), v / (2^bits - 1) (a division, so
     * that the float is v/255 rounded once) */
    float maxv = bits == 16 ? 65535.0f : 255.0f;
    for (png_uint_32 y = 0; y < H; y++)
        for (png_uint_32 x = 0; x < W; x++)
            for (int k = 0; k < C; k++) {
                const uint8_t *p = j->rows[y] + ((size_t)x * C + k) * (bits / 8);
                unsigned v = bits == 16 ? (unsigned)p[0] << 8 | p[1] : p[0];
                j->pixels[((size_t)k * H + y) * W + x] = (float)v / maxv;
            }
    *c = C, *h = H, *w = W;
    return QKV_OK;
}

/* Every chunk's length fits in the bytes left after its header, up to
 * IEND (or the end), checked before libpng sees the file: libpng (Debian's
 * 1.6) allocates a chunk's buffer from its declared length before reading
 * it, so a 100-byte file whose sPLT chunk claimed 1.8 GB took 1.8 GB of
 * memory and then failed as ending early (tests/fuzz: fuzz_png). Such a
 * file fails here, naming the chunk, having allocated nothing. */
static qkv_status chunks_fit(const png_job *j)
{
    for (size_t p = 8; p + 8 <= j->n;) {
        const uint8_t *h = j->bytes + p; /* length (big-endian), then the type */
        uint32_t len = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
        char type[5] = {0};
        for (int i = 0; i < 4; i++) type[i] = h[4 + i] >= 32 && h[4 + i] < 127 ? (char)h[4 + i] : '?';
        if (len > j->n - p - 8 || j->n - p - 8 - len < 4)
            return qkv_fail(QKV_ERR_FORMAT, "png_read: %s: chunk %s at byte %zu claims %lu bytes, the file "
                            "has %zu after its header", j->path, type, p, (unsigned long)len, j->n - p - 8);
        if (!memcmp(type, "IEND", 4)) break;
        p += 12 + (size_t)len; /* length, type, data, CRC */
    }
    return QKV_OK;
}

/* setjmp's frame: nothing in it changes between setjmp and the jump but
 * the job, which lives in the caller. */
static qkv_status read_png(png_job *j, int64_t *c, int64_t *h, int64_t *w)
{
    /* A bad CRC is an error in every chunk: a dropped tRNS would change
     * the channel count unseen (libpng's default only warns for
     * ancillary chunks). */
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
    png_set_crc_action(j->png, PNG_CRC_ERROR_QUIT, PNG_CRC_ERROR_QUIT);
#else
    /* `make fuzz` only: almost every mutated input would stop at a chunk's
     * CRC or the zlib stream's Adler-32, before the code behind them */
    png_set_crc_action(j->png, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE);
    png_set_option(j->png, PNG_IGNORE_ADLER32, PNG_OPTION_ON);
#endif
    if (setjmp(png_jmpbuf(j->png)))
        return qkv_fail(QKV_ERR_FORMAT, "png_read: %s: not a valid PNG (%s)", j->path, j->msg);
    return decode(j, c, h, w);
}

qkv_status qkv_png_read_mem(const void *bytes, size_t n, const char *name, float **pixels, int64_t *c,
                            int64_t *h, int64_t *w)
{
    QKV_NEED(pixels, "png_read_mem", "pixels");
    *pixels = NULL;
    QKV_NEED(bytes, "png_read_mem", "bytes");
    QKV_NEED(name, "png_read_mem", "name");
    QKV_NEED(c, "png_read_mem", "c");
    QKV_NEED(h, "png_read_mem", "h");
    QKV_NEED(w, "png_read_mem", "w");
    png_job j = {.path = name, .bytes = bytes, .n = n};
    if (n < 8 || png_sig_cmp(j.bytes, 0, 8) != 0)
        return qkv_fail(QKV_ERR_FORMAT, "png_read: %s: not a PNG file (%s)", name,
                        n < 8 ? "shorter than the signature" : "no PNG signature");
    qkv_status st = chunks_fit(&j);
    if (st != QKV_OK) return st;
    j.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &j, on_error, on_warning);
    j.info = j.png ? png_create_info_struct(j.png) : NULL;
    if (!j.info) st = qkv_fail(QKV_ERR_NOMEM, "png_read: %s: libpng could not start", name);
    if (st == QKV_OK) st = read_png(&j, c, h, w);
    if (j.png) png_destroy_read_struct(&j.png, j.info ? &j.info : NULL, NULL);
    free(j.raw);
    free(j.rows);
    if (st != QKV_OK) {
        free(j.pixels);
        return st;
    }
    *pixels = j.pixels;
    return QKV_OK;
}

qkv_status qkv_png_read(const char *path, float **pixels, int64_t *c, int64_t *h, int64_t *w)
{
    QKV_NEED(pixels, "png_read", "pixels");
    *pixels = NULL;
    QKV_NEED(path, "png_read", "path");
    QKV_NEED(c, "png_read", "c");
    QKV_NEED(h, "png_read", "h");
    QKV_NEED(w, "png_read", "w");
    char *data;
    size_t len;
    QKV_TRY(tok_read_file(path, &data, &len, "png_read"));
    qkv_status s = qkv_png_read_mem(data, len, path, pixels, c, h, w);
    free(data);
    return s;
}

/* ---- fitting an image to a model's input -------------------------------- */

/* PyTorch's source index for align_corners=False: src = scale (dst + 0.5)
 * - 0.5, negative values clamped to 0, scale = in/out; then the two
 * neighbours and their weights. The scale is a float, as PyTorch's; src
 * comes out as PyTorch 1.13's CPU kernel computes it, in double (the
 * float scale times dst + 0.5, a double: measured against F.interpolate,
 * a float src is up to 3e-6 off, this one within an ulp); the weights are
 * floats. */
typedef struct {
    int64_t i0, i1;
    float l0, l1;
} lerp_idx;

static void lerp_at(int64_t in, int64_t out, int64_t d, lerp_idx *e)
{
    float scale = (float)in / (float)out;
    double src = (double)scale * ((double)d + 0.5) - 0.5;
    if (src < 0) src = 0;
    e->i0 = (int64_t)src;
    if (e->i0 > in - 1) e->i0 = in - 1;
    e->i1 = e->i0 + (e->i0 < in - 1 ? 1 : 0);
    e->l1 = (float)(src - (double)e->i0);
    e->l0 = 1.0f - e->l1;
}

qkv_status qkv_image_resize_bilinear(const float *src, int64_t c, int64_t sh, int64_t sw,
                                     float *dst, int64_t dh, int64_t dw)
{
    QKV_NEED(src, "image_resize_bilinear", "src");
    QKV_NEED(dst, "image_resize_bilinear", "dst");
    QKV_TRY(qkv_image_check_dims("image_resize_bilinear", 1, c, sh, sw));
    QKV_TRY(qkv_image_check_dims("image_resize_bilinear", 1, c, dh, dw));
    for (int64_t ch = 0; ch < c; ch++) {
        const float *in = src + ch * sh * sw;
        float *out = dst + ch * dh * dw;
        for (int64_t y = 0; y < dh; y++) {
            lerp_idx ey;
            lerp_at(sh, dh, y, &ey);
            const float *r0 = in + ey.i0 * sw, *r1 = in + ey.i1 * sw;
            for (int64_t x = 0; x < dw; x++) {
                lerp_idx ex;
                lerp_at(sw, dw, x, &ex);
                out[y * dw + x] = ey.l0 * (ex.l0 * r0[ex.i0] + ex.l1 * r0[ex.i1]) +
                                  ey.l1 * (ex.l0 * r1[ex.i0] + ex.l1 * r1[ex.i1]);
            }
        }
    }
    return QKV_OK;
}

/* Channels of (sc,H,W) -> (dc,H,W), dc 1 or 3; alpha (channel 2 of grey+
 * alpha, 4 of RGBA) is dropped. */
static void convert(const float *src, int64_t sc, int64_t hw, float *dst, int64_t dc)
{
    int rgb = sc >= 3;
    for (int64_t k = 0; k < hw; k++) {
        float r = src[k], g = rgb ? src[hw + k] : r, b = rgb ? src[2 * hw + k] : r;
        if (dc == 1) {
            dst[k] = rgb ? 0.299f * r + 0.587f * g + 0.114f * b : r;
        } else {
            dst[k] = r, dst[hw + k] = g, dst[2 * hw + k] = b;
        }
    }
}

qkv_status qkv_image_fit(const float *src, int64_t sc, int64_t sh, int64_t sw, float *dst,
                         int64_t dc, int64_t dh, int64_t dw, unsigned *changes)
{
    const char *fn = "image_fit";
    if (changes) *changes = 0;
    QKV_NEED(src, fn, "src");
    QKV_NEED(dst, fn, "dst");
    if (sc < 1 || sc > 4)
        return qkv_fail(QKV_ERR_SHAPE, "%s: the image has %lld channels, expected 1 (grey), 2 (grey+"
                        "alpha), 3 (RGB) or 4 (RGBA)", fn, (long long)sc);
    if (dc != 1 && dc != 3)
        return qkv_fail(QKV_ERR_SHAPE, "%s: the input wants %lld channels; qkv converts to 1 (grey) "
                        "or 3 (RGB)", fn, (long long)dc);
    QKV_TRY(qkv_image_check_dims(fn, 1, sc, sh, sw));
    QKV_TRY(qkv_image_check_dims(fn, 1, dc, dh, dw));
    unsigned ch = 0;
    const float *img = src;
    float *tmp = NULL;
    if (sc != dc) {
        ch |= QKV_IMAGE_CONVERTED;
        int same = sh == dh && sw == dw;
        tmp = same ? dst : malloc((size_t)(dc * sh * sw) * sizeof *tmp);
        if (!tmp) return qkv_fail(QKV_ERR_NOMEM, "%s: out of memory", fn);
        convert(src, sc, sh * sw, tmp, dc);
        img = tmp;
    }
    if (sh != dh || sw != dw) {
        ch |= QKV_IMAGE_RESIZED;
        qkv_image_resize_bilinear(img, dc, sh, sw, dst, dh, dw);
    } else if (img == src) {
        memcpy(dst, src, (size_t)(dc * dh * dw) * sizeof *dst);
    }
    if (tmp && tmp != dst) free(tmp);
    if (changes) *changes = ch;
    return QKV_OK;
}
