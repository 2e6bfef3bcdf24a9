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
# cached for the life of the process (see there). About 8 minutes.
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
run "usage error" toy --length 7
exit $fail
