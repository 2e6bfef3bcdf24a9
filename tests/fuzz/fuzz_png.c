/* libFuzzer target for the PNG reader (qkv_png_read_mem, which
 * qkv_png_read uses for files; src/data/png.c over libpng): any bytes must
 * give either an image of 1 to 4 channels whose every value is in [0,1],
 * or an error with a message naming the input, never a crash, leak, hang
 * or out-of-bounds access.
 *
 *   make fuzz && tests/fuzz/run.sh 600 fuzz_png
 * The seeds (tests/fuzz/corpus/fuzz_png/, written by make_seeds.py there):
 * tiny PNGs in grey 1/8/16 bits, grey+alpha, RGB, RGBA, palette with and
 * without tRNS, and an Adam7-interlaced one. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qkv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    float *px = (float *)1;
    int64_t c = -1, h = -1, w = -1;
    if (qkv_png_read_mem(data, size, "fuzz.png", &px, &c, &h, &w) != QKV_OK) {
        /* A rejection must say why, name the input, and leave no image. */
        if (px != NULL || strstr(qkv_last_error(), "fuzz.png") == NULL) abort();
        return 0;
    }
    if (!px || c < 1 || c > 4 || h < 1 || w < 1) abort();
    for (int64_t i = 0; i < c * h * w; i++)
        if (!(px[i] >= 0.0f && px[i] <= 1.0f)) abort();
    free(px);
    return 0;
}
