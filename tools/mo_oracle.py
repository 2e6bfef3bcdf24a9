#!/usr/bin/python3
"""mo_oracle.py: writes GNU .mo catalogues with struct, as gettext lays them
out, and the (msgid, msgstr) pairs a reader must get from each, for
tests/test_mo.c. Written from gettext's manual ("The Format of GNU MO
Files"), not from qkv's reader.

  tools/mo_oracle.py --out DIR --seed S [--cases N]

For each case k: DIR/case_KKKK.mo and DIR/case_KKKK.txt, one line per
expected pair: "HEX(msgid) HEX(msgstr)" (UTF-8 bytes in hex, so that any
text survives), in the order of the file's table. Cases vary the byte
order, the revision (0 or 1; revision 1 files carry an empty system-
dependent table), the charset (UTF-8 or ISO-8859-1, converted by the
reader), plural entries (only the first forms are expected), contexts
(msgctxt\\004msgid: expected without the context), the header entry (never
expected) and the hash table (present or not).
"""
import argparse
import os
import random
import struct

WORDS = ["file", "open", "save", "the", "cannot", "éditer", "fenêtre", "Œuvre", "naïve", "ça",
         "déjà", "«", "»", "%s", "%d", "&Help", "_Quit", "x", "été", "Ünïcödé", "日本", "emoji😀"]


def text(rng, latin1):
    words = [w for w in WORDS if not latin1 or all(ord(c) < 256 for c in w)]
    s = " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))
    if rng.random() < 0.1:
        s += "\n"  # a newline inside a message stays
    return s


def build(rng, k):
    order = "<" if k % 2 == 0 else ">"
    latin1 = k % 5 == 3
    charset = "ISO-8859-1" if latin1 else rng.choice(["UTF-8", "utf-8", "UTF8"])
    enc = "latin-1" if latin1 else "utf-8"
    entries, expected = {}, []
    header = ("Project-Id-Version: t 1\nMIME-Version: 1.0\n"
              "Content-Type: text/plain; charset=%s\nContent-Transfer-Encoding: 8bit\n"
              "Plural-Forms: nplurals=2; plural=(n > 1);\n" % charset)
    if k % 7 != 6:  # some files have no header: UTF-8 assumed
        entries[b""] = header.encode("ascii")
    else:
        enc, latin1 = "utf-8", False
    n = rng.randint(0, 12)
    for _ in range(n):
        msgid = text(rng, latin1)
        kind = rng.random()
        key = msgid.encode(enc)
        want_id = msgid
        if kind < 0.25:  # a context
            ctx = rng.choice(["menu", "STR_X|a", "verb"])
            key = ctx.encode(enc) + b"\x04" + key
        if kind > 0.75:  # plural forms
            plural = msgid + " (plural)"
            key += b"\x00" + plural.encode(enc)
            forms = [text(rng, latin1) for _ in range(rng.randint(1, 3))]
            value = b"\x00".join(f.encode(enc) for f in forms)
            want_str = forms[0]
        else:
            want_str = text(rng, latin1)
            value = want_str.encode(enc)
        if key in entries:
            continue
        entries[key] = value
        expected.append((key, want_id, want_str))
    keys = sorted(entries)  # msgfmt sorts the originals bytewise
    want = {key: (i, s) for key, i, s in expected}
    revision = 1 if k % 3 == 2 else 0
    nstr = len(keys)
    hashsize = 0 if k % 4 == 1 else (nstr * 4 // 3 + 3) | 1
    head = 28 + (20 if revision == 1 else 0)
    orig_tab = head
    trans_tab = orig_tab + 8 * nstr
    hash_off = trans_tab + 8 * nstr
    data_off = hash_off + 4 * hashsize
    blob = b""
    otab, ttab = [], []
    for key in keys:
        otab.append((len(key), data_off + len(blob)))
        blob += key + b"\x00"
    for key in keys:
        ttab.append((len(entries[key]), data_off + len(blob)))
        blob += entries[key] + b"\x00"
    out = struct.pack(order + "7I", 0x950412de, revision, nstr, orig_tab, trans_tab, hashsize, hash_off)
    if revision == 1:
        # no system-dependent segments or strings: their counts 0, offsets at the end
        end = data_off + len(blob)
        out += struct.pack(order + "5I", 0, end, 0, end, end)
    for l, o in otab + ttab:
        out += struct.pack(order + "2I", l, o)
    out += b"\x00" * (4 * hashsize)  # an empty hash table (readers may ignore it)
    out += blob
    pairs = [want[key] for key in keys if key in want]
    return out, pairs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=40)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    for k in range(a.cases):
        data, pairs = build(rng, k)
        name = os.path.join(a.out, "case_%04d" % k)
        with open(name + ".mo", "wb") as f:
            f.write(data)
        with open(name + ".txt", "w") as f:
            for i, s in pairs:
                f.write("%s %s\n" % (i.encode("utf-8").hex(), s.encode("utf-8").hex()))


if __name__ == "__main__":
    main()
