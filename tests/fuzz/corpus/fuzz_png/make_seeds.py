#!/usr/bin/python3
"""Writes the seeds of tests/fuzz/fuzz_png.c into this folder: tiny PNGs
(zlib + struct, no imaging library) of each colour type and several bit
depths, a palette with tRNS, an Adam7-interlaced image. Run it from
anywhere: /usr/bin/python3 tests/fuzz/corpus/fuzz_png/make_seeds.py"""
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def png(w, h, depth, ctype, rows, extra=b"", interlace=0):
    """rows: the filtered scanlines (each starting with its filter byte)."""
    ihdr = struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, interlace)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra +
            chunk(b"IDAT", zlib.compress(b"".join(rows), 9)) + chunk(b"IEND", b""))


def plain_rows(w, h, bytes_per_px, f=lambda x, y, k: (x * 37 + y * 91 + k * 53) & 0xFF):
    return [b"\x00" + bytes(f(x, y, k) for x in range(w) for k in range(bytes_per_px)) for y in range(h)]


def write(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


write("grey8.png", png(5, 4, 8, 0, plain_rows(5, 4, 1)))
write("grey16.png", png(3, 3, 16, 0, plain_rows(3, 3, 2)))
# 1-bit grey: 10 pixels = 2 bytes a row
write("grey1.png", png(10, 3, 1, 0, [b"\x00\xa5\x40", b"\x00\x5a\x80", b"\x00\xff\x00"]))
write("greyalpha8.png", png(4, 3, 8, 4, plain_rows(4, 3, 2)))
write("rgb8.png", png(4, 4, 8, 2, plain_rows(4, 4, 3)))
write("rgba16.png", png(2, 3, 16, 6, plain_rows(2, 3, 8)))
# sub and up filters
rows = plain_rows(4, 3, 3)
rows = [b"\x01" + rows[0][1:], b"\x02" + rows[1][1:], b"\x04" + rows[2][1:]]
write("rgb8_filters.png", png(4, 3, 8, 2, rows))
plte = chunk(b"PLTE", bytes([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255]))
write("palette4.png", png(6, 2, 4, 3, [b"\x00\x01\x23\x10", b"\x00\x32\x10\x02"], plte))
write("palette8_trns.png", png(3, 2, 8, 3, [b"\x00\x00\x01\x02", b"\x00\x03\x02\x01"],
                               plte + chunk(b"tRNS", bytes([0, 128]))))
write("grey8_trns.png", png(3, 2, 8, 0, plain_rows(3, 2, 1), chunk(b"tRNS", b"\x00\x25")))
# Adam7, 5x5 grey 8: pass sizes (w,h) from the starts and steps of each pass
passes = [(1, 1), (1, 1), (2, 1), (1, 2), (3, 1), (2, 3), (5, 2)]
rows = []
for p, (pw, ph) in enumerate(passes):
    rows += [b"\x00" + bytes((p * 40 + y * 7 + x) & 0xFF for x in range(pw)) for y in range(ph)]
write("adam7_grey8.png", png(5, 5, 8, 0, rows, interlace=1))
