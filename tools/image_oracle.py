#!/usr/bin/python3
"""The reference for qkv's image data tests (tests/test_idx.c, test_png.c).

    image_oracle.py --out DIR --seed 1 --what idx
        idx files of every type code, plain and gzip'd (Python's gzip and
        struct, not qkv's reader), and their values in DIR/expected.safetensors
    image_oracle.py --out DIR --seed 1 --what png
        PNG files written with zlib + struct (every colour type, bit depths
        1-16, palettes with and without transparency, tRNS, Adam7 interlacing,
        several row filters) and their pixels (C,H,W) as F32 in [0,1]; random
        images resized by torch.nn.functional.interpolate(mode="bilinear",
        align_corners=False, antialias=False); RGB images converted to grey
        with L = 0.299 R + 0.587 G + 0.114 B.

Run with /usr/bin/python3 (Debian's torch 1.13).
"""
import argparse
import gzip
import os
import random
import struct
import sys
import zlib

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

# ---- idx ------------------------------------------------------------------

IDX_TYPES = {0x08: ('B', 1), 0x09: ('b', 1), 0x0B: ('h', 2), 0x0C: ('i', 4), 0x0D: ('f', 4),
             0x0E: ('d', 8)}


def idx_bytes(code, shape, values):
    fmt, _ = IDX_TYPES[code]
    head = bytes([0, 0, code, len(shape)]) + b''.join(struct.pack('>I', d) for d in shape)
    return head + b''.join(struct.pack('>' + fmt, v) for v in values)


def random_values(rng, code, n):
    if code == 0x08:
        return [rng.randint(0, 255) for _ in range(n)]
    if code == 0x09:
        return [rng.randint(-128, 127) for _ in range(n)]
    if code == 0x0B:
        return [rng.randint(-32768, 32767) for _ in range(n)]
    if code == 0x0C:
        return [rng.randint(-2**31, 2**31 - 1) for _ in range(n)]
    if code == 0x0D:
        # values exactly representable in f32
        return [struct.unpack('>f', struct.pack('>f', rng.uniform(-1e3, 1e3)))[0] for _ in range(n)]
    return [rng.uniform(-1e6, 1e6) for _ in range(n)]


def write_idx(out, rng):
    tensors, meta = {}, {}
    k = 0
    for code in IDX_TYPES:
        for gz in (0, 1):
            ndim = rng.randint(1, 4)
            shape = [rng.randint(1, 5) for _ in range(ndim)]
            n = 1
            for d in shape:
                n *= d
            vals = random_values(rng, code, n)
            data = idx_bytes(code, shape, vals)
            name = 'idx_%02d' % k
            path = os.path.join(out, name + ('.gz' if gz else ''))
            with open(path, 'wb') as f:
                f.write(gzip.compress(data) if gz else data)
            if code in (0x0D, 0x0E):
                tensors[name] = torch.tensor(vals, dtype=torch.float64).float()
            else:
                tensors[name] = torch.tensor(vals, dtype=torch.int64)
            meta[name] = '%d %d %s %s' % (code, gz, os.path.basename(path), ','.join(map(str, shape)))
            k += 1
    # images (n,H,W) and labels (n) as a dataset; a 2-member gzip of images
    n, h, w = 7, 5, 6
    imgs = [rng.randint(0, 255) for _ in range(n * h * w)]
    labs = [rng.randint(0, 9) for _ in range(n)]
    raw = idx_bytes(0x08, [n, h, w], imgs)
    cut = 11
    with open(os.path.join(out, 'set-images.gz'), 'wb') as f:
        f.write(gzip.compress(raw[:cut]) + gzip.compress(raw[cut:]))
    with open(os.path.join(out, 'set-labels'), 'wb') as f:
        f.write(idx_bytes(0x08, [n], labs))
    # ToTensor in torch: uint8 -> float, / 255
    t = torch.tensor(imgs, dtype=torch.uint8).reshape(n, 1, h, w)
    tensors['set_images'] = t.float().div(255)
    tensors['set_labels'] = torch.tensor(labs, dtype=torch.int64)
    x = tensors['set_images'].double()
    tensors['set_mean'] = x.mean().reshape(1).float()
    tensors['set_std'] = x.std(unbiased=False).reshape(1).float()
    meta['count'] = str(k)
    safetensors_io.save(os.path.join(out, 'expected.safetensors'), tensors, meta)

# ---- PNG ------------------------------------------------------------------

ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # samples per pixel in the file


def chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))


def pack_row(samples, depth):
    """Samples of one row to bytes: big-endian 16-bit, bytes, or bits MSB first."""
    if depth == 16:
        return b''.join(struct.pack('>H', s) for s in samples)
    if depth == 8:
        return bytes(samples)
    per = 8 // depth
    out = bytearray()
    for i in range(0, len(samples), per):
        b = 0
        group = samples[i:i + per]
        for j, s in enumerate(group):
            b |= s << (8 - depth * (j + 1))
        out.append(b)
    return bytes(out)


def filter_rows(rows, bpp, kind):
    """Applies PNG filter kind (0 none, 1 sub, 2 up) to packed rows."""
    out, prev = b'', None
    for r in rows:
        if kind == 1:
            f = bytes((r[i] - (r[i - bpp] if i >= bpp else 0)) & 255 for i in range(len(r)))
        elif kind == 2:
            f = bytes((r[i] - (prev[i] if prev else 0)) & 255 for i in range(len(r)))
        else:
            f = r
        out += bytes([kind]) + f
        prev = r
    return out


def png_bytes(w, h, depth, ctype, pix, interlace=0, filt=0, plte=None, trns=None):
    """pix[y][x] is a tuple of samples (palette index for type 3)."""
    bpp = max(1, CHANNELS[ctype] * depth // 8)
    if interlace:
        raw = b''
        for x0, y0, dx, dy in ADAM7:
            xs, ys = list(range(x0, w, dx)), list(range(y0, h, dy))
            if not xs or not ys:
                continue
            rows = [pack_row([s for x in xs for s in pix[y][x]], depth) for y in ys]
            raw += filter_rows(rows, bpp, filt)
    else:
        rows = [pack_row([s for x in range(w) for s in pix[y][x]], depth) for y in range(h)]
        raw = filter_rows(rows, bpp, filt)
    out = b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, depth, ctype, 0, 0, interlace))
    if plte is not None:
        out += chunk(b'PLTE', b''.join(bytes(c) for c in plte))
    if trns is not None:
        out += chunk(b'tRNS', trns)
    comp = zlib.compress(raw, 9)
    half = len(comp) // 2  # two IDAT chunks, as encoders split them
    out += chunk(b'IDAT', comp[:half]) + chunk(b'IDAT', comp[half:]) + chunk(b'IEND', b'')
    return out


def png_case(rng, ctype, depth, interlace, filt, with_trns):
    w, h = rng.randint(1, 13), rng.randint(1, 11)
    maxv = (1 << depth) - 1
    plte = trns = None
    if ctype == 3:
        ncol = rng.randint(1, min(maxv + 1, 20))
        plte = [tuple(rng.randint(0, 255) for _ in range(3)) for _ in range(ncol)]
        pix = [[(rng.randint(0, ncol - 1),) for _ in range(w)] for _ in range(h)]
        alpha = [rng.randint(0, 255) for _ in range(rng.randint(1, ncol))] if with_trns else None
        if alpha:
            trns = bytes(alpha)
        chans = 4 if alpha else 3
        exp = [[[0.0] * w for _ in range(h)] for _ in range(chans)]
        for y in range(h):
            for x in range(w):
                i = pix[y][x][0]
                for c in range(3):
                    exp[c][y][x] = plte[i][c] / 255
                if alpha:
                    exp[3][y][x] = (alpha[i] if i < len(alpha) else 255) / 255
        return png_bytes(w, h, depth, ctype, pix, interlace, filt, plte, trns), exp
    n = CHANNELS[ctype]
    pix = [[tuple(rng.randint(0, maxv) for _ in range(n)) for _ in range(w)] for _ in range(h)]
    key = None
    if with_trns:  # grey or RGB with a transparent colour: one that occurs
        key = pix[rng.randrange(h)][rng.randrange(w)]
        trns = b''.join(struct.pack('>H', s) for s in key)
    # libpng scales grey below 8 bits to 8 (v * 255 / maxv), so v / maxv
    chans = n + (1 if key else 0)
    exp = [[[0.0] * w for _ in range(h)] for _ in range(chans)]
    for y in range(h):
        for x in range(w):
            for c in range(n):
                exp[c][y][x] = pix[y][x][c] / maxv
            if key:
                exp[n][y][x] = 0.0 if pix[y][x] == key else 1.0
    return png_bytes(w, h, depth, ctype, pix, interlace, filt, plte, trns), exp


def write_png(out, rng):
    tensors, meta = {}, {}
    combos = [(0, d) for d in (1, 2, 4, 8, 16)] + [(2, 8), (2, 16), (3, 1), (3, 2), (3, 4), (3, 8),
                                                   (4, 8), (4, 16), (6, 8), (6, 16)]
    k = 0
    for ctype, depth in combos:
        for interlace in (0, 1):
            trns_ok = ctype in (0, 2, 3)
            for with_trns in ((0, 1) if trns_ok else (0,)):
                filt = rng.randint(0, 2)
                data, exp = png_case(rng, ctype, depth, interlace, filt, with_trns)
                name = 'png_%02d' % k
                with open(os.path.join(out, name + '.png'), 'wb') as f:
                    f.write(data)
                tensors[name] = torch.tensor(exp, dtype=torch.float64).float()
                meta[name] = 'type %d depth %d interlace %d trns %d' % (ctype, depth, interlace, with_trns)
                k += 1
    meta['png_count'] = str(k)
    # bilinear resizes, up and down, against F.interpolate
    nres = 30
    for i in range(nres):
        c, h, w = rng.randint(1, 3), rng.randint(1, 40), rng.randint(1, 40)
        dh, dw = rng.randint(1, 40), rng.randint(1, 40)
        if i == 0:
            h, w, dh, dw = 100, 80, 28, 28  # a photo to Fashion-MNIST's input
        x = torch.rand(1, c, h, w, generator=torch.Generator().manual_seed(1000 + i))
        y = F.interpolate(x, size=(dh, dw), mode='bilinear', align_corners=False, antialias=False)
        tensors['resize_%02d_x' % i] = x[0]
        tensors['resize_%02d_y' % i] = y[0]
        meta['resize_%02d' % i] = '%d %d' % (dh, dw)
    meta['resize_count'] = str(nres)
    # RGB -> grey (PIL's convert("L") formula, in float64)
    x = torch.rand(3, 9, 7, generator=torch.Generator().manual_seed(7))
    tensors['grey_x'] = x
    xd = x.double()
    tensors['grey_y'] = (0.299 * xd[0] + 0.587 * xd[1] + 0.114 * xd[2]).unsqueeze(0).float()
    safetensors_io.save(os.path.join(out, 'expected.safetensors'), tensors, meta)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--what', choices=['idx', 'png'], required=True)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    (write_idx if a.what == 'idx' else write_png)(a.out, rng)


if __name__ == '__main__':
    main()
