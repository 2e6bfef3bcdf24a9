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
  C <ntemplate> <add_assistant> <nmessages> <nout>\\n
  then the template (a name, or a file's tokenizer.chat_template), "\\n",
  per message "<nrole> <ncontent>\\n" role content "\\n", then the
  formatted prompt, "\\n".
With --pre NAME,NAME,... the first file is also copied (metadata only,
gguf-py's writer) to OUT.NAME.gguf with tokenizer.ggml.pre set to each
NAME, and those copies follow the files given as further models (texts
with add_special and parse_special off only): the other pre-tokenizers on
the same vocabulary (every third text).
Run: data/venv/bin/python tools/gguf_tokenizer_oracle.py OUT [--pre N,..] MODEL.gguf...
"""
import ctypes
import glob
import os
import sys

import gguf
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


def copy_with_pre(src, dst, pre):
    """src's metadata (no tensors) into dst, with tokenizer.ggml.pre = pre."""
    r = gguf.GGUFReader(src)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    w = gguf.GGUFWriter(dst, arch=arch)
    VT = gguf.GGUFValueType
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        if k == "tokenizer.ggml.pre":
            w.add_string(k, pre)
        elif f.types[0] == VT.ARRAY and f.types[1] == VT.STRING:
            w.add_array(k, [bytes(f.parts[d]) for d in f.data])
        elif f.types[0] == VT.ARRAY:
            w.add_array(k, [f.parts[d][0].item() for d in f.data])
        elif f.types[0] == VT.STRING:
            w.add_string(k, bytes(f.parts[f.data[0]]).decode())
        else:
            w.add_key_value(k, f.parts[f.data[0]][0].item(), f.types[0])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    args = sys.argv[1:]
    pres = []
    if len(args) > 2 and args[1] == "--pre":
        pres = args[2].split(",")
        del args[1:3]
    out_path, models = args[0], args[1:]
    variants = []
    for p in pres:
        variants.append("%s.%s.gguf" % (out_path, p))
        copy_with_pre(models[0], variants[-1], p)
    base = len(models)
    models = models + variants
    texts = kjv_texts() + licence_texts() + package_texts() + code_texts() + hand_texts()
    with open(out_path, "wb") as out:
        for mi, path in enumerate(models):
            m = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
            for ti, t in enumerate(texts):
                if mi >= base and ti % 3:
                    continue  # the copies: a third of the texts
                for add, special in ((0, 0), (1, 1)) if len(t) < 2000 and mi < base else ((0, 0),):
                    ids = m.tokenize(t, add_bos=bool(add), special=bool(special))
                    det = detokenize(m, ids)
                    s = " ".join(map(str, ids)).encode()
                    out.write(b"T %d %d %d %d %d %d\n" % (mi, add, special, len(t), len(ids), len(det)))
                    out.write(t + b"\n" + s + b"\n" + det + b"\n")
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
