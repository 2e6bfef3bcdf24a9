/* test_png.c: the PNG writer and the canvas. Python's zlib (standard
 * library) decodes what we wrote and checks every pixel. */
#define _POSIX_C_SOURCE 200809L
#include <unistd.h>
#include "harness.h"

int main(void)
{
    char dir[] = "/tmp/qkv_png_XXXXXX", path[128], cmd[2048];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/t.png", dir);
    /* 300 x 200: more than one 64 KiB stored block. */
    int64_t w = 300, h = 200;
    uint8_t *rgb = malloc((size_t)(w * h * 3));
    for (int64_t i = 0; i < w * h * 3; i++) rgb[i] = (uint8_t)((i * 7 + i / 3) % 251);
    CHECK_OK(qkv_png_write(path, w, h, rgb));
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import sys,zlib,struct\n"
             "d=open('%s','rb').read(); assert d[:8]==b'\\x89PNG\\r\\n\\x1a\\n'\n"
             "p=8; idat=b''\n"
             "while p<len(d):\n"
             "  n,=struct.unpack('>I',d[p:p+4]); t=d[p+4:p+8]; c=d[p+8:p+8+n]\n"
             "  assert struct.unpack('>I',d[p+8+n:p+12+n])[0]==zlib.crc32(t+c)\n"
             "  if t==b'IHDR': w,h=struct.unpack('>II',c[:8])\n"
             "  if t==b'IDAT': idat+=c\n"
             "  p+=12+n\n"
             "raw=zlib.decompress(idat); assert len(raw)==h*(3*w+1)\n"
             "px=b''.join(raw[y*(3*w+1)+1:(y+1)*(3*w+1)] for y in range(h))\n"
             "assert all(px[i]==(i*7+i//3)%%251 for i in range(len(px))), 'pixels'\n"
             "\"", path);
    CHECK(system(cmd) == 0, "Python decodes the PNG with the same pixels");
    /* A drawn picture (flat areas, lines, a heat map) compresses: matches
     * of the previous pixel and of the row above; Python checks every pixel
     * against the canvas's own bytes. */
    qkv_canvas pic;
    CHECK_OK(qkv_canvas_new(&pic, 400, 300, 0xffffff));
    float hm[36];
    for (int i = 0; i < 36; i++) hm[i] = (float)(i % 7) / 6.0f;
    CHECK_OK(qkv_canvas_heatmap(&pic, 10, 10, 30, 6, 6, hm, 0, 1));
    for (int i = 0; i < 50; i++) qkv_canvas_line(&pic, 200, 150, 399, (double)(i * 6), 0xd62728);
    char raw_path[160], pic_path[160];
    snprintf(raw_path, sizeof raw_path, "%s/pic.rgb", dir);
    snprintf(pic_path, sizeof pic_path, "%s/pic.png", dir);
    FILE *rf = fopen(raw_path, "wb");
    CHECK(rf && fwrite(pic.rgb, 1, 400 * 300 * 3, rf) == 400 * 300 * 3, "raw pixels written");
    if (rf) fclose(rf);
    CHECK_OK(qkv_canvas_save(&pic, pic_path));
    FILE *pf = fopen(pic_path, "rb");
    long png_size = 0;
    if (pf) {
        fseek(pf, 0, SEEK_END);
        png_size = ftell(pf);
        fclose(pf);
    }
    CHECK(png_size > 0 && png_size < 400 * 300 * 3 / 8, "the picture compresses to %ld bytes (raw %d)",
          png_size, 400 * 300 * 3);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import zlib,struct\n"
             "d=open('%s','rb').read(); p=8; idat=b''\n"
             "while p<len(d):\n"
             "  n,=struct.unpack('>I',d[p:p+4]); t=d[p+4:p+8]\n"
             "  if t==b'IDAT': idat+=d[p+8:p+8+n]\n"
             "  p+=12+n\n"
             "raw=zlib.decompress(idat); w=400\n"
             "px=b''.join(raw[y*(3*w+1)+1:(y+1)*(3*w+1)] for y in range(300))\n"
             "assert px==open('%s','rb').read(), 'pixels'\n"
             "\"", pic_path, raw_path);
    CHECK(system(cmd) == 0, "Python decodes the compressed picture with the canvas's pixels");
    qkv_canvas_free(&pic);
    unlink(raw_path);
    unlink(pic_path);
    CHECK_ERR(qkv_png_write(path, 0, 5, rgb), QKV_ERR_ARG, "size 0x5");
    CHECK_ERR(qkv_png_write(NULL, 2, 2, rgb), QKV_ERR_ARG, "path is NULL");
    CHECK_ERR(qkv_png_write("/nonexistent-dir/x.png", 2, 2, rgb), QKV_ERR_IO, "cannot create");
    qkv_canvas cv;
    CHECK_OK(qkv_canvas_new(&cv, 20, 10, 0xffffff));
    qkv_canvas_line(&cv, 0, 0, 19, 9, 0xff0000);
    qkv_canvas_line(&cv, -100, 5, 100, 5, 0x00ff00); /* clipped */
    CHECK(cv.rgb[0] == 255 && cv.rgb[1] == 0 && cv.rgb[(9 * 20 + 19) * 3] == 255, "line end points");
    CHECK(cv.rgb[(5 * 20 + 3) * 3 + 1] == 255 && cv.rgb[(5 * 20 + 3) * 3] == 0, "clipped line drawn");
    float m[4] = {0, 1, 0.5f, 0.25f};
    CHECK_OK(qkv_canvas_heatmap(&cv, 0, 0, 2, 2, 2, m, 0, 1));
    CHECK(qkv_colormap(0) == 0x440154 && qkv_colormap(1) == 0xfde725, "colormap ends");
    CHECK(cv.rgb[0] == 0x44 && cv.rgb[(0 * 20 + 2) * 3] == 0xfd, "heatmap cells");
    CHECK_ERR(qkv_canvas_heatmap(&cv, 0, 0, 2, 2, 2, m, 1, 1), QKV_ERR_ARG, "range [1,1]");
    qkv_canvas_free(&cv);
    CHECK_ERR(qkv_canvas_new(&cv, 0, 0, 0), QKV_ERR_ARG, "size 0x0");
    free(rgb);
    unlink(path);
    rmdir(dir);
    return h_finish("test_png");
}
