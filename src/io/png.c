/* png.c: a minimal PNG writer (8-bit RGB, no dependencies).
 * The image data goes into zlib "stored" (uncompressed) deflate blocks:
 * larger files than a compressor would make, but every PNG reader accepts
 * them, and the writer stays a page long. */
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

qkv_status qkv_png_write(const char *path, int64_t w, int64_t h, const uint8_t *rgb)
{
    QKV_NEED(path, "png_write", "path");
    QKV_NEED(rgb, "png_write", "rgb");
    if (w <= 0 || h <= 0 || w > 16384 || h > 16384)
        return qkv_fail(QKV_ERR_ARG, "png_write: size %lldx%lld outside 1..16384", (long long)w,
                        (long long)h);
    if (!crc_table[1]) crc_init();
    /* Raw scanlines: a filter byte (0) then the row. */
    size_t row = (size_t)w * 3 + 1, raw_n = row * (size_t)h;
    size_t nblocks = (raw_n + 65534) / 65535;
    size_t z_n = 2 + raw_n + 5 * nblocks + 4;
    uint8_t *z = malloc(z_n);
    if (!z) return qkv_fail(QKV_ERR_NOMEM, "png_write: out of memory");
    /* zlib stream: header, stored blocks of at most 65535 bytes, adler32. */
    size_t k = 0, done = 0;
    z[k++] = 0x78, z[k++] = 0x01;
    uint32_t s1 = 1, s2 = 0;
    for (size_t b = 0; b < nblocks; b++) {
        size_t n = raw_n - done < 65535 ? raw_n - done : 65535;
        z[k++] = b + 1 == nblocks;
        z[k++] = (uint8_t)n, z[k++] = (uint8_t)(n >> 8);
        z[k++] = (uint8_t)~n, z[k++] = (uint8_t)(~n >> 8);
        for (size_t i = 0; i < n; i++, done++) {
            size_t y = done / row, x = done % row;
            uint8_t v = x == 0 ? 0 : rgb[y * (size_t)w * 3 + x - 1];
            z[k++] = v;
            s1 = (s1 + v) % 65521;
            s2 = (s2 + s1) % 65521;
        }
    }
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
