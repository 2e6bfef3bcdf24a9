#!/usr/bin/env python3
"""BertTokenizerFast's tokenizations of test texts, for tests/test_wordpiece.c.

transformers' BertTokenizerFast (Hugging Face tokenizers underneath), loaded
from the all-MiniLM-L6-v2 folder data/minilm as sentence-transformers loads
it, tokenizes texts the C tests never tuned on:
  - Debian's package descriptions (`apt-cache dumpavail`: every STEP-th
    line of the Description fields, and some whole descriptions),
  - Debian's licence texts (/usr/share/common-licenses/*: every line, and
    each whole file: long texts, cut at 256 and 512 ids),
  - the translations of libc-l10n and iso-codes (data/l10n, from
    tools/get_data.sh l10n: msgstr strings of Greek, Russian, Chinese,
    Japanese, Arabic, Korean, Hebrew, Hindi, Thai, ... catalogues),
  - hand-written cases: accents, emoji, control characters, very long
    words, empty lines, special tokens written in the text, invalid UTF-8,
  - real lines with random bytes, control characters and marks put in
    (random.Random(SEED)).
Not among them: characters Unicode assigned after 8.0 in the categories
the normalizer asks about (Cc/Cf/Co, Mn, P*), such as U+2E52 or U+08E2:
tokenizers' tables (Unicode 8.0) see them as letters, utf8proc's (15.0) as
what they are, so qkv differs there by design (docs/bert.md, "Tokenizer").
A text is bytes; BertTokenizerFast gets it decoded as Python does with
errors="replace" (each invalid sequence one U+FFFD, which the clean-up
then drops).

Variants (the tokenizer's normalizer replaced by a BertNormalizer with
other switches), every VSTEP-th text:
  0 the folder's settings (lowercase, accents stripped, CJK split, clean-up)
  1 lowercase off (so strip_accents off)
  2 lowercase on, strip_accents off
  3 lowercase off, strip_accents on
  4 clean-up off, CJK not split (valid UTF-8 texts only)

Output (binary, one record after another):
  T <variant> <ntext> <nfull> <n256> <n512> <ndecode>\\n
  then the text's bytes "\\n"; the ids with [CLS]/[SEP], not cut "\\n";
  for 256 then 512: ids "\\n" attention mask "\\n" token type ids "\\n"
  (truncation=True, max_length=N); then decode(full ids) as UTF-8 "\\n".
  Numbers are separated by spaces.
Run: data/venv/bin/python tools/wordpiece_oracle.py OUT
"""
import glob
import os
import random
import struct
import subprocess
import sys

from tokenizers import normalizers
from transformers.utils import logging as hf_logging
from transformers import BertTokenizerFast

SEED = 38
STEP = 3  # description lines taken: every 3rd
VSTEP = 7
LOCALES = ["el", "ru", "zh_CN", "zh_TW", "ja", "ar", "ko", "he", "hi", "th", "vi", "uk", "bg", "ka", "hy",
           "fa", "ta", "bn", "de", "fr", "es", "pl", "tr", "cs", "hu", "ro", "pt_BR", "sr", "lt", "eo"]


def description_texts():
    out = subprocess.run(["apt-cache", "dumpavail"], check=True, capture_output=True).stdout
    lines, whole, cur, in_desc = [], [], [], False
    for raw in out.split(b"\n"):
        if raw.startswith(b"Description:"):
            in_desc = True
            if cur:
                whole.append(b"\n".join(cur))
            cur = [raw[len(b"Description:"):].strip()]
            lines.append(cur[0])
        elif in_desc and raw.startswith(b" "):
            l = raw[1:]
            l = b"" if l == b"." else l
            cur.append(l)
            lines.append(l)
        else:
            in_desc = False
    if cur:
        whole.append(b"\n".join(cur))
    step = max(1, len(whole) // 150)  # 150 texts of 60 descriptions each: past 256 and 512 ids
    runs = [b"\n".join(whole[i:i + 60]) for i in range(0, len(whole) - 60, step)][:150]
    return lines[::STEP] + whole[::97] + runs


def licence_texts():
    out = []
    for p in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isdir(p):
            continue
        with open(p, "rb") as f:
            data = f.read()
        out.extend(data.split(b"\n"))
        out.append(data)
    return out


def mo_strings(path):
    with open(path, "rb") as f:
        d = f.read()
    if len(d) < 28:
        return []
    magic = struct.unpack("<I", d[:4])[0]
    e = "<" if magic == 0x950412DE else ">"
    n, _, toff = struct.unpack(e + "III", d[8:20])
    out = []
    for i in range(1, n):  # entry 0 is the header
        ln, off = struct.unpack(e + "II", d[toff + 8 * i:toff + 8 * i + 8])
        out.extend(s for s in d[off:off + ln].split(b"\0") if s)
    return out


def l10n_texts():
    root = "data/l10n/root/usr/share/locale"
    if not os.path.isdir(root):
        sys.exit("wordpiece_oracle: %s is missing: run tools/get_data.sh l10n" % root)
    out = []
    for loc in LOCALES:
        for p in sorted(glob.glob("%s/%s/LC_MESSAGES/*.mo" % (root, loc))):
            s = mo_strings(p)
            step = 1 if os.path.basename(p) == "libc.mo" else 5
            out.extend(s[::step])
    return out


def hand_texts():
    t = [
        "", " ", "\t\n\r", "Hello, world!", "HELLO World", "Héllo wörld, Ça va? naïve café résumé Ångström",
        "Straße STRASSE ß ẞ", "İstanbul ıi IJ ĳ ǅ Ǆ ǈ", "ΣΑΣ σας ΌΛΟΙ Ελληνικά", "Привет, МИР! Ёлка",
        "你好，世界！中文字符", "日本語のテキスト、カタカナとひらがな。", "한국어 텍스트 입니다", "مرحبا بالعالم، العربية",
        "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Tiếng Việt có dấu", "😀 😃 👍🏽 👨‍👩‍👧 🇫🇷 ❤️ 🫠 🥰",
        "a\x00b", "a\x01b\x02c\x7fd", "a\x0bb\x0cc\x1cd\x1fe", "x\u0085y", "zero\u200bwidth\u200cjoin\u200d",
        "soft\u00adhyphen", "bom\ufeffmark", "rtl\u200f\u202eoverride", "nb\u00a0sp\u2003em\u3000ideo",
        "a" * 99, "b" * 100, "c" * 101, "d" * 300, "é" * 100, "é" * 101, "x" * 50 + "!" + "y" * 150,
        "unaffable unbelievable supercalifragilisticexpialidocious", "don't won't it's we're I'm",
        "[CLS] [SEP] [PAD] [UNK] [MASK]", "a[MASK]b [mask] [Mask] [CLS[SEP]]", "[[SEP]]", "e\u0301 e\u0308\u0301 \u0301a",
        "ﬁ ﬂ ﬀ ㎏ ① ½ ²", "ＦＵＬＬ ｗｉｄｔｈ １２３", "𝐀𝐁𝐂 𝔘𝔫𝔦", "\U00020000\U0002a6d6\U0002b820\U0002b920 \uf900",
        "C++ C# .NET node.js e-mail 3.14 1,000,000 $5 50% a/b a\\b <tag> {x} |y| ~z^ `q` @u",
        "«quotes» „Gänsefüßchen“ ‘single’ — – … ¿¡ · • § ¶ † ‡ ‰ ′ ″ ‹›",
    ]
    out = [s.encode("utf-8") for s in t]
    out += [b"\xff\xfe invalid", b"ok \xc3 broken", b"\xe2\x82 half euro \xe2\x82\xac", b"\xed\xa0\x80 surrogate",
            b"\xc0\xaf overlong", b"\xf4\x90\x80\x80 too big", b"trail \x80\x80\x80", b"\xf0\x9f\x98 cut emoji"]
    return out


def mutated(texts, rng, n):
    pool = [t for t in texts if 5 < len(t) < 400]
    ins = [b"\x00", b"\x07", b"\t", b"\r\n", b"\xff", b"\xc3", b"\xcc\x81", b"\xe2\x80\x8b", b"\xef\xbf\xbd",
           b"\xf0\x9f\x98\x80", b"[SEP]", b"\xe4\xb8\xad", b"\xce\xa3", b"''", b"...", b"\xc2\xa0"]
    out = []
    for _ in range(n):
        t = bytearray(rng.choice(pool))
        for _ in range(rng.randint(1, 4)):
            at = rng.randint(0, len(t))
            t[at:at] = rng.choice(ins)
        out.append(bytes(t))
    return out


def variant_tok(base, v):
    if v == 0:
        return base
    tok = BertTokenizerFast.from_pretrained("data/minilm")
    kw = {1: dict(lowercase=False, strip_accents=None), 2: dict(lowercase=True, strip_accents=False),
          3: dict(lowercase=False, strip_accents=True),
          4: dict(lowercase=True, strip_accents=None, clean_text=False, handle_chinese_chars=False)}[v]
    kw.setdefault("clean_text", True)
    kw.setdefault("handle_chinese_chars", True)
    tok.backend_tokenizer.normalizer = normalizers.BertNormalizer(**kw)
    return tok


def valid(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: wordpiece_oracle.py OUT")
    hf_logging.set_verbosity_error()  # not the "longer than the maximum" warnings
    base = BertTokenizerFast.from_pretrained("data/minilm")
    toks = [variant_tok(base, v) for v in range(5)]
    parts = [description_texts(), licence_texts(), l10n_texts(), hand_texts()]
    texts = [t for p in parts for t in p]
    parts.append(mutated(texts, random.Random(SEED), 1500))
    texts += parts[-1]
    print("wordpiece_oracle: texts: descriptions %d, licences %d, translations %d, hand-written %d, mutated %d"
          % tuple(len(p) for p in parts), file=sys.stderr)
    with open(sys.argv[1], "wb") as f:
        for i, b in enumerate(texts):
            vs = [0] + ([1 + (i // VSTEP) % 4] if i % VSTEP == 0 else [])
            for v in vs:
                if v == 4 and not valid(b):
                    continue
                tok = toks[v]
                s = b.decode("utf-8", errors="replace")
                full = tok(s)["input_ids"]
                cut = [tok(s, truncation=True, max_length=m) for m in (256, 512)]
                dec = tok.decode(full).encode("utf-8")
                f.write(b"T %d %d %d %d %d %d\n" % (v, len(b), len(full), len(cut[0]["input_ids"]),
                                                   len(cut[1]["input_ids"]), len(dec)))
                f.write(b + b"\n")
                f.write(" ".join(map(str, full)).encode() + b"\n")
                for c in cut:
                    for k in ("input_ids", "attention_mask", "token_type_ids"):
                        f.write(" ".join(map(str, c[k])).encode() + b"\n")
                f.write(dec + b"\n")


if __name__ == "__main__":
    main()
