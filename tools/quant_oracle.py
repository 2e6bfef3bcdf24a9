#!/usr/bin/env python3
"""quant_oracle.py: the reference values of tests/test_quant.c, from gguf-py
(gguf.quants.dequantize / quantize, llama.cpp's own Python package) and from
llama.cpp's C library as llama-cpp-python ships it (libggml-base.so:
quantize_row_*_ref, dequantize_row_*), both in data/venv (tools/get_data.sh
oracle).

  quant_oracle.py --out DIR --seed S         random blocks and matrices
  quant_oracle.py --out DIR --gguf FILE...   every tensor of GGUF files

Random mode writes DIR/index.txt, one case a line:
  deq TYPE N STRICT BYTES.bin FLOATS.f32
      N elements of ggml type id TYPE (random blocks: random bytes, the f16
      scales finite, or with STRICT 0 also zeros, subnormals, inf and NaN,
      which the test compares with any NaN equal to any NaN), and their
      dequantization by gguf-py (by llama.cpp's dequantize_row_q8_K for
      Q8_K, which gguf-py lacks)
  quant TYPE N NAME IN.f32 GGUFPY.bin GGML.bin
      N floats of distribution NAME and their bytes from gguf-py's quantize
      and from llama.cpp's quantize_row_*_ref ("-" where one has no such
      quantizer)
GGUF mode writes DIR/tensors.txt, one tensor a line:
  FILE_INDEX TYPE N OFFSET NBYTES HASH NAME
      the tensor's data at byte OFFSET of the file, and the hash of gguf-py's
      dequantization of it: sum over i of bits(float i) * (i * K + C | 1)
      mod 2^64, K = 0x9E3779B97F4A7C15, C = 0x632BE59BD9B4E019 (a single
      changed float always changes it).
"""
import argparse
import ctypes
import glob
import os
import sys

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf.quants import dequantize, quantize
except ImportError:
    sys.exit("quant_oracle.py: gguf-py is missing: run tools/get_data.sh oracle (data/venv)")

# byte offsets of the f16 scales in each block type, (block elements, bytes)
F16_FIELDS = {T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0], T.Q2_K: [80, 82],
              T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208]}
DEQ_TYPES = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K,
             T.Q5_K, T.Q6_K, T.Q8_K]
QUANT_TYPES = [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q8_K]
HASH_K, HASH_C = np.uint64(0x9E3779B97F4A7C15), np.uint64(0x632BE59BD9B4E019)


def ggml_lib():
    """libggml-base.so of llama-cpp-python, or exit naming the setup step."""
    import llama_cpp
    libs = glob.glob(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so*"))
    if not libs:
        sys.exit("quant_oracle.py: llama_cpp's libggml-base.so is missing: run tools/get_data.sh oracle")
    return ctypes.CDLL(sorted(libs)[0])


def ggml_call(lib, fname, src, dst, n):
    fn = getattr(lib, fname)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    fn.restype = None
    fn(src.ctypes.data, dst.ctypes.data, n)


def random_f16(rng, n, strict):
    """n f16 scales as raw uint16: finite, of magnitudes 2^-14 .. 2^4; when
    not strict a third of them zeros, subnormals, infinities and NaNs."""
    mag = rng.uniform(-14, 4, n)
    v = (np.sign(rng.standard_normal(n)) * 2.0 ** mag).astype(np.float16).view(np.uint16)
    if not strict:
        special = np.array([0x0000, 0x8000, 0x0001, 0x83ff, 0x7c00, 0xfc00, 0x7e00, 0xfd01], dtype=np.uint16)
        pick = rng.random(n) < 0.33
        v[pick] = special[rng.integers(0, len(special), pick.sum())]
    return v


def random_blocks(rng, qtype, nblocks, strict):
    """Raw bytes of nblocks random blocks of qtype."""
    blk, size = gguf.GGML_QUANT_SIZES[qtype]
    if qtype == T.F32:
        x = rng.standard_normal(nblocks) * 10.0 ** rng.uniform(-30, 30, nblocks)
        return x.astype(np.float32).view(np.uint8)
    if qtype == T.F16:
        return random_f16(rng, nblocks, strict).view(np.uint8)
    if qtype == T.BF16:
        x = rng.integers(0, 1 << 16, nblocks, dtype=np.uint16)
        finite = (x & 0x7f80) != 0x7f80                        # exponent all ones: made finite
        return np.where(finite, x, x & 0xbfff).astype(np.uint16).view(np.uint8)
    raw = rng.integers(0, 256, (nblocks, size), dtype=np.uint8)
    if qtype == T.Q8_K:
        d = (rng.standard_normal(nblocks) * 10.0 ** rng.uniform(-6, 2, nblocks)).astype(np.float32)
        raw[:, 0:4] = d.view(np.uint8).reshape(nblocks, 4)
    for off in F16_FIELDS.get(qtype, []):
        raw[:, off:off + 2] = random_f16(rng, nblocks, strict).view(np.uint8).reshape(nblocks, 2)
    return raw.reshape(-1)


def dequant_ref(lib, qtype, raw):
    if qtype == T.Q8_K:
        n = raw.size // 292 * 256
        out = np.zeros(n, dtype=np.float32)
        ggml_call(lib, "dequantize_row_q8_K", raw, out, n)
        return out
    return np.asarray(dequantize(raw, qtype), dtype=np.float32).reshape(-1)


def distributions(rng, n):
    """(name, n floats) of the quantizers' test matrices."""
    yield "normal", rng.standard_normal(n)
    yield "uniform", rng.uniform(-1, 1, n)
    yield "laplace", rng.laplace(0, 1, n)
    yield "positive", rng.uniform(0, 3, n)
    yield "tiny", rng.standard_normal(n) * 1e-30
    yield "small", rng.standard_normal(n) * 1e-6
    yield "large", rng.standard_normal(n) * 1e4
    yield "huge", rng.standard_normal(n) * 1e30
    yield "halves", rng.integers(-40, 41, n) / 2.0          # ties of the roundings
    yield "steps", rng.integers(-8, 8, n) * 0.25
    x = rng.standard_normal(n)
    x[: n // 4] = 0                                           # whole rows of zeros
    x[n // 4: n // 4 + 32] = 1.5                              # a constant block
    x[n // 2] = 1e3                                           # an outlier
    yield "zeros_const_outlier", x
    x = rng.standard_normal(n) * 10.0 ** rng.integers(-20, 20, n // 32).repeat(32)
    yield "mixed_scales", x


def ggml_quant(lib, qtype, x):
    name = {T.Q4_0: "q4_0", T.Q4_1: "q4_1", T.Q5_0: "q5_0", T.Q5_1: "q5_1", T.Q8_0: "q8_0",
            T.Q8_K: "q8_K"}.get(qtype)
    if name is None:
        return None
    blk, size = gguf.GGML_QUANT_SIZES[qtype]
    out = np.zeros(x.size // blk * size, dtype=np.uint8)
    ggml_call(lib, "quantize_row_%s_ref" % name, x, out, x.size)
    return out


def random_mode(out, seed):
    rng = np.random.default_rng(seed)
    lib = ggml_lib()
    lines = []
    for qtype in DEQ_TYPES:
        blk, size = gguf.GGML_QUANT_SIZES[qtype]
        for strict in (1, 0):
            if qtype in (T.F32, T.BF16, T.Q8_K) and not strict:
                continue
            nblocks = max(1, 65536 // blk)
            raw = random_blocks(rng, qtype, nblocks, strict)
            with np.errstate(all="ignore"):
                f = dequant_ref(lib, qtype, raw)
            stem = "deq_%s_%d" % (qtype.name, strict)
            raw.tofile(os.path.join(out, stem + ".bin"))
            f.astype(np.float32).tofile(os.path.join(out, stem + ".f32"))
            lines.append("deq %d %d %d %s.bin %s.f32" % (qtype, f.size, strict, stem, stem))
    for qtype in QUANT_TYPES:
        for name, x in distributions(rng, 64 * 256):
            x = np.ascontiguousarray(x, dtype=np.float32)
            stem = "q_%s_%s" % (qtype.name, name)
            x.tofile(os.path.join(out, stem + ".f32"))
            files = []
            try:
                with np.errstate(all="ignore"):
                    g = np.asarray(quantize(x, qtype)).view(np.uint8).reshape(-1)
                g.tofile(os.path.join(out, stem + ".gguf.bin"))
                files.append(stem + ".gguf.bin")
            except NotImplementedError:
                files.append("-")
            c = ggml_quant(lib, qtype, x)
            if c is not None:
                c.tofile(os.path.join(out, stem + ".ggml.bin"))
            files.append(stem + ".ggml.bin" if c is not None else "-")
            lines.append("quant %d %d %s %s.f32 %s %s" % (qtype, x.size, name, stem, files[0], files[1]))
    with open(os.path.join(out, "index.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def tensor_hash(raw, qtype, blk, size):
    """The hash above of dequantize(raw, qtype), a few million elements at a time."""
    h = np.uint64(0)
    step = max(1, (1 << 22) // blk) * size
    start = 0
    for o in range(0, raw.size, step):
        f = np.asarray(dequantize(raw[o:o + step], qtype), dtype=np.float32).reshape(-1)
        idx = np.arange(start, start + f.size, dtype=np.uint64)
        mult = (idx * HASH_K + HASH_C) | np.uint64(1)
        h = h + np.sum(f.view(np.uint32).astype(np.uint64) * mult, dtype=np.uint64)
        start += f.size
    return int(h)


def gguf_mode(out, files):
    lines = []
    for fi, path in enumerate(files):
        r = gguf.GGUFReader(path)
        data = np.asarray(r.data).view(np.uint8).reshape(-1)
        for t in r.tensors:
            qtype = T(int(t.tensor_type))
            blk, size = gguf.GGML_QUANT_SIZES[qtype]
            n = int(t.n_elements)
            nbytes = n // blk * size
            raw = data[int(t.data_offset): int(t.data_offset) + nbytes]
            lines.append("%d %d %d %d %d %d %s" % (fi, int(qtype), n, int(t.data_offset), nbytes,
                                                    tensor_hash(raw, qtype, blk, size), t.name))
    with open(os.path.join(out, "tensors.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gguf", nargs="*")
    a = ap.parse_args()
    if a.gguf:
        gguf_mode(a.out, a.gguf)
    else:
        random_mode(a.out, a.seed)


if __name__ == "__main__":
    np.seterr(over="ignore")
    main()
