#!/usr/bin/env python3
"""gguf_oracle.py: gguf-py's view of GGUF files, for tests/test_gguf.c.

  data/venv/bin/python tools/gguf_oracle.py dump FILE.gguf OUT.txt
      writes what gguf.GGUFReader reads (version, alignment, data offset,
      every key/value with every array element, every tensor's name, type
      id, ggml dims, file offset and bytes) in the text form that
      tests/test_gguf.c writes from qkv's reader; the test compares the two.
  data/venv/bin/python tools/gguf_oracle.py write DIR
      writes small valid files with gguf.GGUFWriter (llama.cpp's writer,
      not qkv's) into DIR: the test reads them, and they seed
      tests/fuzz/corpus/fuzz_gguf/.

The dump format, one item a line:
  version V / alignment A / data_offset D / kv_count N / tensor_count M
  kv KEY TYPE VALUE                 a scalar
  kv KEY ARRAY ELEM N               an array, then its elements (not for
    [j] VALUE                       an array of arrays: gguf-py flattens those)
  tensor NAME TYPEID d0,d1,.. FILE_OFFSET NBYTES
Integers and bools in decimal, floats as '%.17g' of their double value,
strings with every byte outside 0x21..0x7e, and the backslash, as \\xNN.
"""
import sys

import numpy as np

VTYPES = ["U8", "I8", "U16", "I16", "U32", "I32", "F32", "BOOL", "STRING", "ARRAY",
          "U64", "I64", "F64"]


def esc(b):
    return "".join(chr(c) if 0x21 <= c <= 0x7e and c != 0x5c else "\\x%02x" % c for c in b)


def scalar(t, part):
    if t == 8:
        return esc(part.tobytes())
    v = part[0]
    if t in (6, 12):
        return "%.17g" % float(v)
    return str(int(v))


def dump(path, out):
    import gguf
    r = gguf.GGUFReader(path)
    fields = list(r.fields.values())[3:]  # after GGUF.version, tensor_count, kv_count
    lines = ["version %d" % int(r.fields["GGUF.version"].parts[0][0]),
             "alignment %d" % int(r.alignment), "data_offset %d" % int(r.data_offset),
             "kv_count %d" % len(fields), "tensor_count %d" % len(r.tensors)]
    for f in fields:
        t = int(f.parts[2][0])
        key = esc(f.name.encode("utf-8"))
        if t != 9:
            lines.append("kv %s %s %s" % (key, VTYPES[t], scalar(t, f.parts[f.data[0]])))
            continue
        et, n = int(f.parts[3][0]), int(f.parts[4][0])
        lines.append("kv %s ARRAY %s %d" % (key, VTYPES[et], n))
        if et == 9:
            continue
        for j, idx in enumerate(f.data):
            lines.append("  [%d] %s" % (j, scalar(et, f.parts[idx])))
    for t in r.tensors:
        dims = ",".join(str(int(d)) for d in t.shape)
        lines.append("tensor %s %d %s %d %d" % (esc(t.name.encode("utf-8")), int(t.tensor_type),
                                                 dims, int(t.data_offset), int(t.n_bytes)))
    with open(out, "w") as fp:
        fp.write("\n".join(lines) + "\n")


def write(d):
    import gguf
    # Every scalar type, strings with bytes outside ASCII, arrays of each
    # kind, and tensors of a few types, with the default alignment.
    w = gguf.GGUFWriter(d + "/types.gguf", "llama")
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 0.1)
    w.add_uint64("t.u64", 18446744073709551615)
    w.add_int64("t.i64", -9223372036854775808)
    w.add_float64("t.f64", 1e300)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "h\u00e9llo \u4e16\u754c\n\\")
    w.add_array("t.arr_str", ["a", "", "\u00df", "x y"])
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_f32", [0.5, -1.25, 3e38])
    w.add_key_value("t.arr_u8", [0, 255], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.UINT8)
    w.add_key_value("t.arr_bool", [True, False], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.BOOL)
    w.add_array("t.arr_empty", [])
    w.add_tensor("a.weight", np.arange(12, dtype=np.float32).reshape(3, 4))
    w.add_tensor("b.bias", np.arange(5, dtype=np.float16))
    w.add_tensor("c.idx", np.arange(7, dtype=np.int32))
    q = np.zeros((1, 36), dtype=np.uint8)  # two Q4_0 blocks: one row of 64 elements
    w.add_tensor("d.q4_0", q, raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    finish(w)
    # A custom alignment; and no tensors.
    w = gguf.GGUFWriter(d + "/align64.gguf", "gemma3")
    w.add_custom_alignment(64)
    w.add_tensor("x", np.ones((2, 3, 4), dtype=np.float32))
    w.add_tensor("y", np.ones((1, 1, 1, 5), dtype=np.float32))
    finish(w)
    w = gguf.GGUFWriter(d + "/empty.gguf", "none")
    finish(w)
    # general.alignment written as a plain key: the writer still aligns its
    # tensors to 32, so 'y' (at 96) is misaligned for 64, which ggml
    # refuses and gguf.GGUFReader does not check; qkv must refuse it.
    w = gguf.GGUFWriter(d + "/misaligned.gguf", "gemma3")
    w.add_uint32("general.alignment", 64)
    w.add_tensor("x", np.ones((2, 3, 4), dtype=np.float32))
    w.add_tensor("y", np.ones((1, 1, 1, 5), dtype=np.float32))
    finish(w)


def finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "dump":
        dump(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "write":
        write(sys.argv[2])
    else:
        sys.exit(__doc__)
