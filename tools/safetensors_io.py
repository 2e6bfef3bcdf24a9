#!/usr/bin/python3
"""Read and write safetensors files with torch, without the safetensors
package (Debian 12 does not ship one).

    save(path, {"w": torch.randn(3, 4)}, {"format": "pt"})
    tensors, metadata = load(path)

The format: an 8-byte little-endian u64 header length N, N bytes of UTF-8
JSON (padded at the end with spaces), then the byte buffer. The header maps
each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
into the buffer) and may hold "__metadata__", an object of strings.

Run with /usr/bin/python3 (the interpreter that has torch and numpy). The
command line is for qkv's tests:

    safetensors_io.py --selftest-write PATH   writes the reference file
    safetensors_io.py --selftest-check PATH   checks the file the C test wrote
    safetensors_io.py --dump PATH             lists a file's tensors
"""
import json
import math
import struct
import sys

import numpy as np
import torch

# safetensors dtype -> (torch dtype, numpy dtype of the bytes on disk).
# numpy has no bfloat16, so BF16 travels as its 16 bits in an int16.
DTYPES = {
    "F64": (torch.float64, "<f8"),
    "F32": (torch.float32, "<f4"),
    "F16": (torch.float16, "<f2"),
    "BF16": (torch.bfloat16, "<i2"),
    "I64": (torch.int64, "<i8"),
    "I32": (torch.int32, "<i4"),
    "I16": (torch.int16, "<i2"),
    "I8": (torch.int8, "i1"),
    "U8": (torch.uint8, "u1"),
    "BOOL": (torch.bool, "u1"),
}
_BY_TORCH = {td: name for name, (td, _) in DTYPES.items()}
MAX_HEADER = 100 * 1000 * 1000


def _to_bytes(t):
    """A tensor's elements as little-endian bytes, row-major."""
    name = _BY_TORCH[t.dtype]
    t = t.detach().cpu().contiguous()
    if name == "BF16":
        t = t.view(torch.int16)
    elif name == "BOOL":
        t = t.to(torch.uint8)
    return t.numpy().astype(DTYPES[name][1], copy=False).tobytes()


def _from_bytes(buf, dtype, shape):
    np_dtype = np.dtype(DTYPES[dtype][1])
    # A native-order copy: torch.from_numpy wants both.
    arr = np.frombuffer(buf, dtype=np_dtype).astype(np_dtype.newbyteorder("="))
    if dtype == "BOOL":
        if arr.size and arr.max() > 1:
            raise ValueError("BOOL tensor holds a byte other than 0 or 1")
        t = torch.from_numpy(arr.astype(np.bool_))
    elif dtype == "BF16":
        t = torch.from_numpy(arr).view(torch.bfloat16)
    else:
        t = torch.from_numpy(arr)
    return t.reshape(shape)


def save(path, tensors, metadata=None):
    """Writes tensors (a dict of name -> torch.Tensor) and optional string
    metadata to path. Larger elements come first, so every tensor starts
    aligned to its element size."""
    for name, t in tensors.items():
        if not isinstance(name, str) or not name or name == "__metadata__":
            raise ValueError("bad tensor name %r" % (name,))
        if t.dtype not in _BY_TORCH:
            raise ValueError("tensor %r has unsupported dtype %s" % (name, t.dtype))
    if metadata is not None:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise ValueError("metadata must map str to str")
    order = sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))
    header, chunks, at = {}, [], 0
    if metadata:
        header["__metadata__"] = dict(metadata)
    for name in order:
        data = _to_bytes(tensors[name])
        header[name] = {"dtype": _BY_TORCH[tensors[name].dtype],
                        "shape": list(tensors[name].shape),
                        "data_offsets": [at, at + len(data)]}
        chunks.append(data)
        at += len(data)
    text = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)


def _check_entry(name, e, buf_len):
    if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
        raise ValueError("tensor %r: entry must have exactly dtype, shape, data_offsets" % name)
    if e["dtype"] not in DTYPES:
        raise ValueError("tensor %r: unknown dtype %r" % (name, e["dtype"]))
    shape, offs = e["shape"], e["data_offsets"]
    ints = lambda xs: isinstance(xs, list) and all(
        type(x) is int and 0 <= x < 2**63 for x in xs)
    if not ints(shape) or len(shape) > 8:
        raise ValueError("tensor %r: bad shape %r" % (name, shape))
    if not ints(offs) or len(offs) != 2 or offs[0] > offs[1] or offs[1] > buf_len:
        raise ValueError("tensor %r: bad data_offsets %r" % (name, offs))
    size = np.dtype(DTYPES[e["dtype"]][1]).itemsize
    if math.prod(shape) * size != offs[1] - offs[0]:
        raise ValueError("tensor %r: data_offsets %r do not match dtype %s and shape %r"
                         % (name, offs, e["dtype"], shape))


def load(path):
    """Reads path; returns (dict of name -> torch.Tensor, metadata dict or
    None). Checks the structure as strictly as the C reader's essentials:
    fields, dtypes, sizes, and that the tensors tile the buffer."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("%s: shorter than 8 bytes" % path)
    (n,) = struct.unpack("<Q", raw[:8])
    if n > MAX_HEADER or n > len(raw) - 8:
        raise ValueError("%s: bad header length %d" % (path, n))
    header = json.loads(raw[8:8 + n].decode("utf-8").rstrip(" "),
                        parse_constant=_reject_constant, object_pairs_hook=_unique_object)
    if not isinstance(header, dict):
        raise ValueError("%s: header is not an object" % path)
    buf = raw[8 + n:]
    metadata = header.pop("__metadata__", None)
    if metadata is not None and (not isinstance(metadata, dict) or
                                 not all(isinstance(v, str) for v in metadata.values())):
        raise ValueError("%s: __metadata__ must map strings to strings" % path)
    at = 0
    for name, e in sorted(header.items(), key=lambda kv: _offsets_key(kv[1])):
        _check_entry(name, e, len(buf))
        if e["data_offsets"][0] != at:
            raise ValueError("%s: tensor %r leaves a hole or overlaps" % (path, name))
        at = e["data_offsets"][1]
    if at != len(buf):
        raise ValueError("%s: tensors do not cover the data buffer" % path)
    tensors = {name: _from_bytes(buf[e["data_offsets"][0]:e["data_offsets"][1]],
                                 e["dtype"], e["shape"])
               for name, e in header.items()}
    return tensors, metadata


def _reject_constant(word):
    raise ValueError("%s is not valid JSON" % word)


def _unique_object(pairs):
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("duplicate key in header")
    return obj


def _offsets_key(e):
    try:
        return (int(e["data_offsets"][0]), int(e["data_offsets"][1]))
    except Exception:
        return (-1, -1)  # malformed: _check_entry reports it


# ---- the cross-language test files --------------------------------------
# tests/test_safetensors.c holds the same values; keep the two in step.

SELFTEST_META = {"format": "pt", "note": "h\u00e9llo \"quoted\"\n\ttab \u2713 \U0001d11e"}


def selftest_tensors():
    """The tensors --selftest-write writes (the C test checks them)."""
    inf, nan = float("inf"), float("nan")
    return {
        "f32": torch.arange(6, dtype=torch.float32).reshape(2, 3) * 0.25 - 0.5,
        "f64": torch.tensor([1.5, -2.25, 1e300], dtype=torch.float64),
        # one, -2.5, largest half, smallest subnormal, a subnormal, inf, -inf, nan, -0
        "f16": torch.tensor([1.0, -2.5, 65504.0, 2.0**-24, 2.0**-15, inf, -inf, nan, -0.0],
                            dtype=torch.float16),
        "bf16": torch.tensor([[1.0, -3.140625], [2.0**100, 2.0**-130]], dtype=torch.bfloat16),
        "i64": torch.tensor([0, -1, 2**40, -(2**53)], dtype=torch.int64),
        "i32": torch.tensor([123456, -7], dtype=torch.int32),
        "i16": torch.tensor([-300, 300], dtype=torch.int16),
        "i8": torch.tensor([-128, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 7, 255], dtype=torch.uint8),
        "bool": torch.tensor([[True, False], [False, True]]),
        "scalar": torch.tensor(3.5, dtype=torch.float32),
        "empty": torch.zeros(0, 4, dtype=torch.float32),
        "layers.0.self_attn.in_proj_weight": torch.arange(12, dtype=torch.float32).reshape(3, 4),
    }


# What tests/test_safetensors.c writes.
C_NAMES = ["w", "special", "mask", "scalar", "empty", "\u540d\u524d\"q\\"]
C_META = {"format": "pt", "k\"ey": "v\nal \u2713"}


def _c_expected():
    f32 = torch.float32
    # -0, inf, -inf, the quiet NaN that C's NAN gives, the smallest subnormal
    bits = np.array([0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x00000001], np.uint32)
    special = torch.from_numpy(bits.view(np.float32).copy())
    return {
        "w": torch.arange(12, dtype=f32).reshape(3, 4) * 0.25 - 1.5,
        "special": special.view(f32),
        "mask": torch.tensor([[True, False, False], [True, True, False]]),
        "scalar": torch.tensor(42.0, dtype=f32),
        "empty": torch.zeros(0, dtype=f32),
        C_NAMES[5]: torch.tensor([7.0, -7.0], dtype=f32),
    }


def selftest_check(path):
    """Checks the file written by the C test; returns a list of problems."""
    tensors, meta = load(path)
    want = _c_expected()
    problems = []
    if sorted(tensors) != sorted(want):
        problems.append("names %r, expected %r" % (sorted(tensors), sorted(want)))
    if meta != C_META:
        problems.append("metadata %r, expected %r" % (meta, C_META))
    for name, w in want.items():
        t = tensors.get(name)
        if t is None:
            continue
        if t.dtype != w.dtype or tuple(t.shape) != tuple(w.shape):
            problems.append("%r is %s %s, expected %s %s"
                            % (name, t.dtype, tuple(t.shape), w.dtype, tuple(w.shape)))
            continue
        same = (t.view(torch.int32) == w.view(torch.int32)).all() if w.dtype == torch.float32 \
            else (t == w).all()
        if not bool(same):
            problems.append("%r values %s, expected %s" % (name, t.tolist(), w.tolist()))
    return problems


def write_cases(case, default_cases=24):
    """The command line of an oracle that writes random cases (called from its
    main): --out DIR --cases N --seed S; case(rng, gen, i) -> (tensors,
    metadata) for case i, written to DIR/case_NNNN.safetensors, with rng a
    random.Random and gen a torch.Generator, both seeded with S; one torch
    thread. Prints the number of cases."""
    import argparse
    import os
    import random
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", type=int, default=default_cases)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    torch.set_num_threads(1)
    for i in range(a.cases):
        t, meta = case(rng, gen, i)
        save(os.path.join(a.out, "case_%04d.safetensors" % i), t, meta)
    print(a.cases)


def main(argv):
    if len(argv) == 3 and argv[1] == "--selftest-write":
        save(argv[2], selftest_tensors(), SELFTEST_META)
        return 0
    if len(argv) == 3 and argv[1] == "--selftest-check":
        problems = selftest_check(argv[2])
        for p in problems:
            print("safetensors_io selftest: " + p, file=sys.stderr)
        return 1 if problems else 0
    if len(argv) == 3 and argv[1] == "--dump":
        tensors, meta = load(argv[2])
        for name, t in sorted(tensors.items()):
            print("%s %s %s" % (name, str(t.dtype).replace("torch.", ""), tuple(t.shape)))
        if meta:
            print("__metadata__ %s" % json.dumps(meta, ensure_ascii=False))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
