/* png.c: a minimal PNG writer (8-bit RGB, no dependencies).
 * The scanlines are deflated in one block with the fixed Huffman codes of
 * RFC 1951; the only matches sought are repeats of the previous pixel
 * (distance 3) and of the row above (distance one scanline), which is what
 * plots and heat maps are made of. Far from zlib's ratio on photographs,
 * within a few times of it on the images qkv draws, and a page of code. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/internal.h"

static uint32_t crc_table[256];

static void crc_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

static uint32_t crc_update(uint32_t crc, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return crc;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* Writes one chunk: length, type, data, CRC of type and data. */
static int chunk(FILE *f, const char *type, const uint8_t *data, uint32_t n)
{
    uint8_t hdr[8];
    put32(hdr, n);
    memcpy(hdr + 4, type, 4);
    uint32_t crc = crc_update(0xffffffffu, hdr + 4, 4);
    crc = crc_update(crc, data, n) ^ 0xffffffffu;
    uint8_t tail[4];
    put32(tail, crc);
    return fwrite(hdr, 1, 8, f) == 8 && (n == 0 || fwrite(data, 1, n, f) == n) &&
           fwrite(tail, 1, 4, f) == 4;
}

/* Bits into a byte stream, least significant first (RFC 1951, 3.1.1). */
typedef struct {
    uint8_t *out;
    size_t n;
    uint32_t acc;
    int bits;
} bitw;

static void put_bits(bitw *b, uint32_t v, int n)
{
    b->acc |= v << b->bits;
    b->bits += n;
    while (b->bits >= 8) {
        b->out[b->n++] = (uint8_t)b->acc;
        b->acc >>= 8;
        b->bits -= 8;
    }
}

/* A Huffman code goes most significant bit first. */
static void put_code(bitw *b, uint32_t code, int n)
{
    uint32_t r = 0;
    for (int i = 0; i < n; i++) r |= ((code >> i) & 1u) << (n - 1 - i);
    put_bits(b, r, n);
}

/* Fixed code of literal/length symbol sym (0..285). */
static void put_sym(bitw *b, int sym)
{
    if (sym < 144) put_code(b, 0x30 + (uint32_t)sym, 8);
    else if (sym < 256) put_code(b, 0x190 + (uint32_t)(sym - 144), 9);
    else if (sym < 280) put_code(b, (uint32_t)(sym - 256), 7);
    else put_code(b, 0xC0 + (uint32_t)(sym - 280), 8);
}

static const uint16_t len_base[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                      31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
static const uint8_t len_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                      2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const uint16_t dist_base[30] = {1,   2,   3,    4,    5,    7,    9,    13,    17,    25,
                                       33,  49,  65,   97,   129,  193,  257,  385,   513,   769,
                                       1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
static const uint8_t dist_extra[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                       6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

static void put_match(bitw *b, int len, int dist)
{
    int i = 28;
    while (len_base[i] > len) i--;
    put_sym(b, 257 + i);
    put_bits(b, (uint32_t)(len - len_base[i]), len_extra[i]);
    int j = 29;
    while (dist_base[j] > dist) j--;
    put_code(b, (uint32_t)j, 5);
    put_bits(b, (uint32_t)(dist - dist_base[j]), dist_extra[j]);
}

/* Deflates raw (n bytes) into out as one final fixed-Huffman block;
 * returns the bytes written. out must hold n * 9 / 8 + 16. */
static size_t deflate_fixed(const uint8_t *raw, size_t n, size_t row, uint8_t *out)
{
    bitw b = {out, 0, 0, 0};
    put_bits(&b, 1, 1); /* BFINAL */
    put_bits(&b, 1, 2); /* BTYPE 01: fixed codes */
    size_t dists[2] = {3, row};
    for (size_t i = 0; i < n;) {
        size_t best = 0, bestd = 0;
        for (int k = 0; k < 2; k++) {
            size_t d = dists[k];
            if (d > i || d > 32768) continue;
            size_t l = 0;
            while (l < 258 && i + l < n && raw[i + l] == raw[i + l - d]) l++;
            if (l > best) best = l, bestd = d;
        }
        if (best >= 3) {
            put_match(&b, (int)best, (int)bestd);
            i += best;
        } else {
            put_sym(&b, raw[i++]);
        }
    }
    put_sym(&b, 256); /* end of block */
    if (b.bits) put_bits(&b, 0, 8 - b.bits);
    return b.n;
}

qkv_status qkv_png_write(const char *path, int64_t w, int64_t h, const uint8_t *rgb)
{
    QKV_NEED(path, "png_write", "path");
    QKV_NEED(rgb, "png_write", "rgb");
    if (w <= 0 || h <= 0 || w > 16384 || h > 16384)
        return qkv_fail(QKV_ERR_ARG, "png_write: size %lldx%lld outside 1..16384", (long long)w,
                        (long long)h);
    if (!crc_table[1]) crc_init();
    /* Raw scanlines: a filter byte (0, none) then the row. */
    size_t row = (size_t)w * 3 + 1, raw_n = row * (size_t)h;
    uint8_t *raw = malloc(raw_n), *z = malloc(2 + raw_n + raw_n / 8 + 16 + 4);
    if (!raw || !z) {
        free(raw);
        free(z);
        return qkv_fail(QKV_ERR_NOMEM, "png_write: out of memory");
    }
    uint32_t s1 = 1, s2 = 0; /* adler32 of the raw data */
    for (size_t i = 0; i < raw_n; i++) {
        size_t y = i / row, x = i % row;
        raw[i] = x == 0 ? 0 : rgb[y * (size_t)w * 3 + x - 1];
        s1 = (s1 + raw[i]) % 65521;
        s2 = (s2 + s1) % 65521;
    }
    /* zlib stream: header (deflate, 32K window), the block, adler32. */
    size_t k = 0;
    z[k++] = 0x78, z[k++] = 0x01;
    k += deflate_fixed(raw, raw_n, row, z + k);
    free(raw);
    put32(z + k, (s2 << 16) | s1);
    k += 4;
    uint8_t ihdr[13];
    put32(ihdr, (uint32_t)w);
    put32(ihdr + 4, (uint32_t)h);
    ihdr[8] = 8, ihdr[9] = 2, ihdr[10] = ihdr[11] = ihdr[12] = 0; /* 8-bit RGB */
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        free(z);
        return qkv_fail(QKV_ERR_ARG, "png_write: path too long");
    }
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        free(z);
        return qkv_fail(QKV_ERR_IO, "png_write: cannot create %s", tmp);
    }
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    int ok = fwrite(sig, 1, 8, f) == 8 && chunk(f, "IHDR", ihdr, 13) &&
             chunk(f, "IDAT", z, (uint32_t)k) && chunk(f, "IEND", NULL, 0);
    free(z);
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return qkv_fail(QKV_ERR_IO, "png_write: cannot write %s", path);
    }
    return QKV_OK;
}
