#!/usr/bin/env python3
"""llama.cpp's tokenizations of test texts, for tests/test_gguf_tokenizer.c.

For each GGUF file given, llama.cpp itself (llama-cpp-python's
Llama(vocab_only=True)) tokenizes texts the C tests never tuned on, with
add_special and parse_special off and on, and detokenizes the ids with
special on. Chat prompts come from llama.cpp's llama_chat_apply_template
(its C formatting of known templates, the same path qkv mirrors).

Texts: a sample of the KJV's lines (every STEP-th line) and some runs of
lines, Debian's licence texts (paragraphs and whole files), package
descriptions from /var/lib/dpkg/status, chunks of this repository's C
sources, and hand-written accents, CJK, emoji, white space and special
tokens.

Output (binary, one record after another):
  T <model> <add_special> <parse_special> <ntext> <nids> <ndetok>\\n
  then the text's bytes, "\\n", the ids separated by spaces, "\\n", the
  detokenized bytes, "\\n";
  E <model> <n>\\n then the ids llama_vocab_is_eog holds true, "\\n";
  C <ntemplate> <add_assistant> <nmessages> <nout>\\n
  then the template (a name, or a file's tokenizer.chat_template), "\\n",
  per message "<nrole> <ncontent>\\n" role content "\\n", then the
  formatted prompt, "\\n".
With --pre NAME,NAME,... the first file is also copied (metadata only,
tensor count 0) to OUT.NAME.gguf with tokenizer.ggml.pre set to each
NAME, and those copies follow the files given as further models (texts
with add_special and parse_special off only): the other pre-tokenizers on
the same vocabulary (every third text); with --space-prefix the last file
likewise to OUT.space.gguf with tokenizer.ggml.add_space_prefix on.
Run: data/venv/bin/python tools/gguf_tokenizer_oracle.py OUT [--pre N,..] [--space-prefix] MODEL.gguf...
"""
import ctypes
import glob
import mmap
import os
import random
import struct
import sys

import llama_cpp

STEP = 13  # KJV lines taken: every 13th of ~31k: ~2400 lines


def kjv_texts():
    path = "data/kjv/kjv.txt"
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    out = [l for l in lines[::STEP] if l]
    for i in range(0, len(lines) - 6, len(lines) // 20):  # 20 runs of 6 lines
        out.append(b"\n".join(lines[i:i + 6]))
    return out


def licence_texts():
    out = []
    for p in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isdir(p):
            continue
        with open(p, "rb") as f:
            t = f.read()
        out.extend(x for x in t.split(b"\n\n") if x.strip())
        if len(t) < 40000:
            out.append(t)
    return out


def package_texts(limit=600):
    out, cur = [], None
    try:
        with open("/var/lib/dpkg/status", "rb") as f:
            for line in f:
                if line.startswith(b"Description:"):
                    cur = [line[len(b"Description: "):].rstrip(b"\n")]
                elif cur is not None and line.startswith(b" "):
                    cur.append(line.rstrip(b"\n"))
                elif cur is not None:
                    out.append(b"\n".join(cur))
                    cur = None
                    if len(out) >= limit:
                        break
    except OSError:
        pass
    return out


def code_texts():
    out = []
    for p in sorted(glob.glob("src/data/*.c"))[:8]:
        with open(p, "rb") as f:
            lines = f.read().split(b"\n")
        out.extend(b"\n".join(lines[i:i + 40]) for i in range(0, len(lines), 40))
    return out


def hand_texts():
    t = [
        "Hello world", " Hello world", "  leading spaces", "trailing spaces   ", "tabs\tand\t\ttabs",
        "a\n\nb\n\n\nc\n\n\n\n\nd", "\n", "\n\n\n", " ", "   ", "\t", "\r\n", " \n \n ",
        "x" + " " * 40 + "y", "\n" * 40, "\t" * 35 + "z", "        indented code();",
        "Crème brûlée, naïve café, Øresund, Łódź, São Paulo, façade, coöperate",
        "Ελληνικά, русский язык, עברית, العربية, हिन्दी, ไทย",
        "日本語のテキストです。中文文本，한국어 텍스트。", "漢字かなカナ１２３",
        "emoji 😀🎉👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ ✨", "math: ∑ x² ≤ ∞, √2 ≈ 1.414, π", "1234567890 12 345 6789 1,000,000.50",
        "I'm you're he's we've they'll I'd it's DON'T WE'RE", "can't won't shouldn't 'quoted' \"double\"",
        "C:\\path\\to\\file.txt https://example.com/a?b=c&d=e#f", "a\u00a0b\u2009c\u3000d\u200be\ufeff",
        "e\u0301 a\u0308 combining", "\u2581 already a space mark \u2581\u2581",
        "x = [1, 2, 3]; y = {'a': 1}  # comment\n    return x  ", "<b>bold</b> <i>it</i> <tr><td>1</td></tr>",
        "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|>text<|endoftext|>",
        "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n", "<bos>x<eos> <pad> <unk> <mask>",
        "<unused0> <unused12>x<start_of_image>", "<0x41> <0xFF> [multimodal]", "<|im_start|><|im_start|>",
        " <|im_end|> ", "<fim_prefix>a<fim_suffix>b<fim_middle>", "<end_of_turn><end_of_turn>\n\n",
    ]
    out = [s.encode("utf-8") for s in t]
    out += [b"bad \xff\xfe utf8", b"cut \xe6\x97", b"\xc3(", b"ok \xf0\x9f\x98"]
    return out + random_texts()


def random_texts(n=300):
    """Random bytes (mostly invalid UTF-8), random code points (letters, marks,
    digits, punctuation, white space, CJK, emoji, U+2581) and random joins
    of special tokens' texts, from a fixed seed."""
    rng = random.Random(1)
    pool = [0x20, 0x0A, 0x09, 0x0D, 0xA0, 0x3000, 0x2581, 0x301, 0x308, 0x30, 0x39, 0x661, 0xFF11, 0x41, 0x7A,
            0xE9, 0x3B1, 0x416, 0x5D0, 0x627, 0x915, 0xE01, 0x4E2D, 0x3042, 0xAC00, 0x1F600, 0x1F44D, 0x200D,
            0xFE0F, 0x27, 0x2E, 0x2C, 0x21, 0x3F, 0x2D, 0x5F, 0x24, 0x2B, 0x3C, 0x3E, 0x7C, 0x60, 0xFFFD, 0x85,
            0x2028, 0x1680, 0xFEFF, 0x10FFFF, 0xE000]
    specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<start_of_turn>", "<end_of_turn>", "<bos>",
                "<b>", "</s>", "<unused3>", "\n\n", "   ", "\t\t", "'s", "'LL", "123", "x"]
    out = []
    for i in range(n):
        k = rng.randrange(1, 60)
        if i % 3 == 0:
            out.append(bytes(rng.randrange(256) for _ in range(k)))
        elif i % 3 == 1:
            out.append("".join(chr(rng.choice(pool)) for _ in range(k)).encode("utf-8"))
        else:
            out.append("".join(rng.choice(specials) for _ in range(k // 4 + 1)).encode("utf-8"))
    return out


CHATS = [
    [("user", "Hello!")],
    [("system", "You are terse."), ("user", "What is 2+2?")],
    [("user", " Hi "), ("assistant", "Hello, how can I help? "), ("user", "Tell me a joke.\n")],
    [("system", " Be kind. "), ("system", "Be brief."), ("user", "Why is the sky blue?"),
     ("assistant", "Rayleigh scattering."), ("user", "Thanks")],
    [("user", "Ελληνικά 日本語 😀"), ("assistant", "<b>ok</b>")],
]


def detokenize(m, ids):
    """llama_token_to_piece of each id with special on, joined (Llama.detokenize
    reads each piece into 32 bytes, too few for long white-space tokens, and
    drops a space after BOS)."""
    buf = ctypes.create_string_buffer(4096)
    out = []
    for t in ids:
        n = llama_cpp.llama_token_to_piece(m._model.vocab, t, buf, len(buf), 0, True)
        if n < 0:
            raise SystemExit("llama_token_to_piece failed for %d" % t)
        out.append(buf.raw[:n])
    return b"".join(out)


def chat_template(tmpl, msgs, add):
    arr = (llama_cpp.llama_chat_message * len(msgs))()
    keep = []
    for i, (r, c) in enumerate(msgs):
        rb, cb = r.encode(), c.encode()
        keep += [rb, cb]
        arr[i].role, arr[i].content = rb, cb
    buf = ctypes.create_string_buffer(1 << 16)
    n = llama_cpp.llama_chat_apply_template(tmpl.encode(), arr, len(msgs), add, buf, len(buf))
    if n < 0:
        raise SystemExit("llama_chat_apply_template failed for " + tmpl)
    return buf.raw[:n]


SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUF scalar types


def skip_value(data, t, off):
    """The offset after a value of GGUF type t at off."""
    if t == 8:
        return off + 8 + struct.unpack_from("<Q", data, off)[0]
    if t != 9:
        return off + SIZES[t]
    et, n = struct.unpack_from("<IQ", data, off)
    off += 12
    if et in SIZES:
        return off + n * SIZES[et]
    for _ in range(n):
        off = skip_value(data, et, off)
    return off


def copy_with(src, dst, key, value):
    """src's header and metadata (no tensors: their count set to 0) into dst,
    with key's value replaced by value (a str, or a bool): the key/value
    pairs walked as the format lays them out (GGUF v2/v3: magic, version,
    tensor count, pair count, then the pairs)."""
    with open(src, "rb") as f:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    n_kv = struct.unpack_from("<Q", data, 16)[0]
    off, span = 24, None
    for _ in range(n_kv):
        start = off
        kl = struct.unpack_from("<Q", data, off)[0]
        k = data[off + 8:off + 8 + kl]
        t = struct.unpack_from("<I", data, off + 8 + kl)[0]
        off = skip_value(data, t, off + 12 + kl)
        if k == key.encode():
            span = (start, off)
    kb = key.encode()
    if isinstance(value, bool):
        field = struct.pack("<Q", len(kb)) + kb + struct.pack("<IB", 7, int(value))
    else:
        vb = value.encode()
        field = struct.pack("<Q", len(kb)) + kb + struct.pack("<IQ", 8, len(vb)) + vb
    head = bytearray(data[:span[0]])
    head[8:16] = struct.pack("<Q", 0)
    with open(dst, "wb") as out:
        out.write(bytes(head) + field + data[span[1]:off])
    data.close()


def main():
    args = sys.argv[1:]
    pres, space = [], False
    while len(args) > 2 and args[1] in ("--pre", "--space-prefix"):
        if args[1] == "--pre":
            pres = args[2].split(",")
            del args[1:3]
        else:
            space = True
            del args[1]
    out_path, models = args[0], args[1:]
    variants = []
    for p in pres:
        variants.append("%s.%s.gguf" % (out_path, p))
        copy_with(models[0], variants[-1], "tokenizer.ggml.pre", p)
    if space:  # the last file with tokenizer.ggml.add_space_prefix on
        variants.append("%s.space.gguf" % out_path)
        copy_with(models[-1], variants[-1], "tokenizer.ggml.add_space_prefix", True)
    base = len(models)
    models = models + variants
    hand = hand_texts()
    texts = kjv_texts() + licence_texts() + package_texts() + code_texts() + hand
    first_hand = len(texts) - len(hand)
    with open(out_path, "wb") as out:
        for mi, path in enumerate(models):
            m = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
            for ti, t in enumerate(texts):
                if mi >= base and ti % 3:
                    continue  # the copies: a third of the texts
                # both switches on: every third text below 2000 bytes and all
                # the hand-written ones (llama.cpp's own search for its 6,000
                # special tokens makes this the slow part of the oracle)
                both = len(t) < 2000 and ((mi < base and ti % 3 == 0) or
                                          (ti >= first_hand and (mi < base or (space and mi == len(models) - 1))))
                for add, special in ((0, 0), (1, 1)) if both else ((0, 0),):
                    ids = m.tokenize(t, add_bos=bool(add), special=bool(special))
                    det = detokenize(m, ids)
                    s = " ".join(map(str, ids)).encode()
                    out.write(b"T %d %d %d %d %d %d\n" % (mi, add, special, len(t), len(ids), len(det)))
                    out.write(t + b"\n" + s + b"\n" + det + b"\n")
            if mi < base:  # the ids llama.cpp ends generation at
                v = m._model.vocab
                eog = [i for i in range(llama_cpp.llama_vocab_n_tokens(v)) if llama_cpp.llama_vocab_is_eog(v, i)]
                out.write(b"E %d %d\n" % (mi, len(eog)) + " ".join(map(str, eog)).encode() + b"\n")
            tmpls = ["chatml", "gemma"] if mi == 0 else []
            if mi < base and m.metadata.get("tokenizer.chat_template"):
                tmpls.append(m.metadata["tokenizer.chat_template"])
            for name in tmpls:
                for msgs in CHATS:
                    for add in (0, 1):
                        got = chat_template(name, msgs, add)
                        tb = name.encode()
                        out.write(b"C %d %d %d %d\n" % (len(tb), add, len(msgs), len(got)) + tb + b"\n")
                        for r, c in msgs:
                            rb, cb = r.encode(), c.encode()
                            out.write(b"%d %d\n" % (len(rb), len(cb)) + rb + cb + b"\n")
                        out.write(got + b"\n")
            del m


if __name__ == "__main__":
    main()
