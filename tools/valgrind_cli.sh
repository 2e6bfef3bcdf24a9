#!/bin/sh
# valgrind_cli.sh: the qkv command's main commands under valgrind's
# memcheck, on small inputs: every run must report no error and no leak
# (definitely, indirectly or possibly lost; memory still reachable at exit,
# OpenMP's and OpenBLAS's thread pools, is not a leak). Results:
# docs/reliability.md, "Valgrind".
#   tools/valgrind_cli.sh [BUILD]     (default build; needs BUILD/qkv)
# One thread (OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1): valgrind runs
# threads one at a time anyway. valgrind does not run AVX-512: qkv's
# attention then takes its AVX2 build (valgrind's CPUID hides AVX-512).
# tools/valgrind_cairo.supp leaves out what Cairo and fontconfig keep
# cached for the life of the process (see there). About 15 minutes.
set -e
cd "$(dirname "$0")/.."
B=${1:-build}
qkv="$B/qkv"
[ -x "$qkv" ] || { echo "valgrind_cli: no $qkv: run make first" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind_cli: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/qkv-valgrind.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
# A safetensors file and a corpus for the commands below.
/usr/bin/python3 tools/safetensors_io.py --selftest-write "$tmp/t.safetensors"
printf 'the cat sat on the mat\nthe dog sat on the log\nhello world, hello qkv\n' > "$tmp/corpus.txt"
fail=0
n=0
run() { # run NAME ARGS...: qkv ARGS under memcheck
    name=$1
    shift
    n=$((n + 1))
    log="$tmp/$n.log"
    if valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite,indirect,possible \
        --errors-for-leak-kinds=definite,indirect,possible --error-exitcode=99 --track-origins=yes \
        --suppressions=tools/valgrind_cairo.supp \
        --log-file="$log" "$qkv" "$@" >"$tmp/$n.out" 2>"$tmp/$n.err" </dev/null; then rc=0; else rc=$?; fi
    errs=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' "$log" | tail -1)
    lost=$(sed -n 's/.*definitely lost: \([0-9,]*\) bytes.*/\1/p' "$log" | tail -1)
    heap=$(sed -n 's/.*total heap usage: \(.*\)/\1/p' "$log" | tail -1)
    if [ "$rc" = 99 ] || [ "${errs:-1}" != 0 ]; then
        echo "FAIL qkv $*: $errs errors (exit $rc)"
        cat "$log"
        fail=1
    else
        echo "ok   $name: qkv $* (exit $rc): 0 errors, definitely lost ${lost:-0} bytes; heap: $heap"
    fi
}
run demo demo
run "demo --png" demo --png "$tmp/heads.png"
run "toy, tiny" toy --task pairs --model attention --train 100 --test 4 --length 40 --epochs 1
run "train toy, tiny" train toy --task positional --model attention --pe binary --train 100 --test 4 --length 40 --epochs 1
run inspect inspect "$tmp/t.safetensors"
run "inspect, bad file" inspect "$tmp/corpus.txt"
run "tokenizer train" tokenizer train --vocab-size 300 "$tmp/corpus.txt" -o "$tmp/tok.bpe"
run "tokenizer encode" tokenizer encode --tokenizer "bpe:$tmp/tok.bpe" "$tmp/corpus.txt"
"$qkv" tokenizer encode --tokenizer "bpe:$tmp/tok.bpe" "$tmp/corpus.txt" > "$tmp/ids.txt"
run "tokenizer decode" tokenizer decode --tokenizer "bpe:$tmp/tok.bpe" "$tmp/ids.txt"
if [ -f data/gpt2/encoder.json ]; then
    run "tokenizer encode gpt2" tokenizer encode --tokenizer gpt2:data/gpt2 "$tmp/corpus.txt"
fi
# The trainers and their commands (translation, language model, vision),
# on tiny settings.
for i in 1 2 3 4 5 6 7 8; do cat "$tmp/corpus.txt"; done > "$tmp/lm.txt"
run "train lm, tiny" train lm --corpus "$tmp/lm.txt" --layers 1 --d-model 16 --heads 2 --context 16 \
    --batch 4 --steps 3 --eval-every 3 --eval-batches 1 --sample 8 --out "$tmp/lm"
run generate generate "$tmp/lm" --prompt "the cat" -n 8 --html "$tmp/lm.html"
mkdir -p "$tmp/mt"
for verb in open close save delete; do for noun in file folder image page; do
    printf '%s the %s\t%s le %s\n' "$verb" "$noun" "$verb-fr" "$noun-fr"
done; done > "$tmp/mt/train.tsv"
head -n 4 "$tmp/mt/train.tsv" > "$tmp/mt/valid.tsv"
tail -n 4 "$tmp/mt/train.tsv" > "$tmp/mt/test.tsv"
run "train translation, tiny" train translation --data "$tmp/mt" --hidden 16 --embed 16 --batch 4 \
    --steps 3 --eval-every 3 --threads 1 --out "$tmp/mt-run"
run translate translate "$tmp/mt-run" --show-attention --png "$tmp/align.png" "open the file"
run "eval translation" eval "$tmp/mt-run"
cut -f 2 "$tmp/mt/test.tsv" > "$tmp/ref.txt"
run bleu bleu "$tmp/ref.txt" "$tmp/ref.txt"
if [ -f data/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
    run "train vit, tiny" train vit --batch 16 --patch 7 --d-model 16 --layers 1 --heads 2 --mlp-dim 32 \
        --epochs 1 --train-limit 64 --test-limit 32 --out "$tmp/vit"
    run "eval vit" eval "$tmp/vit" --test-limit 32 --png "$tmp/confusion.png"
    run classify classify "$tmp/vit" --test-index 3 --attention "$tmp/att.png"
    run "train mlp, tiny" train mlp --batch 16 --epochs 1 --train-limit 64 --test-limit 32 --out "$tmp/mlp"
fi
run "usage error" toy --length 7
exit $fail
