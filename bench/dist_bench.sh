#!/bin/sh
# dist_bench.sh: data-parallel training throughput of `qkv train toy` (the
# toy attention network, 54,081 parameters, global batch 100) and of `qkv
# train lm` (a small GPT on data/kjv: 2 layers, d_model 64, batch 16 x 64
# tokens, 40 steps) on this machine: one process with one thread, two MPI
# ranks with one thread each, and one process with two threads; then the
# all-reduce's measured cost and the communication model's prediction
# (bench/dist_allreduce.c).
#   make MPI=1 && bench/dist_bench.sh [EPOCHS]     (default 1: 100 steps)
# Prints samples (tokens) per second as rank 0's last progress line reports
# it, and each configuration's ratio to one process with one thread.
set -e
cd "$(dirname "$0")/.."
E=${1:-1}
Q=build/qkv
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
base=
row() { # label, rate: a table row with the ratio to the first row's rate
    [ -z "$base" ] && base=$2
    printf '| %s | %s | %s |\n' "$1" "$2" "$(awk -v a="$2" -v b="$base" 'BEGIN { printf "%.2f", a / b }')"
}
run() { # label, command...: the last progress line's samples/s
    label=$1; shift
    rate=$("$@" train toy -m attention -t pairs -n 10000 --test 100 -e "$E" 2>/dev/null |
        tr '\r' '\n' | grep -oE '[0-9]+ samples/s' | tail -n 1 | cut -d' ' -f1)
    row "$label" "$rate"
}
n=0
run_lm() { # label, command...: the last progress line's tokens/s (stderr)
    label=$1; shift
    n=$((n + 1))
    rate=$("$@" train lm --corpus data/kjv/kjv.txt --layers 2 --d-model 64 --heads 4 --context 64 \
        --batch 16 --steps 40 --warmup 4 --eval-every 1000 --eval-batches 1 --sample 0 --out "$T/lm$n" \
        2>&1 >"$T/lm$n.out" | tr '\r' '\n' | grep -oE '[0-9]+ tokens/s' | tail -n 1 | cut -d' ' -f1)
    row "$label" "$rate"
}
table() { # title, unit, runner: the three configurations' rows, ratios to the first
    base=
    echo "$1"
    echo
    echo "| configuration | $2 | ratio |"
    echo "|---|---|---|"
    $3 "1 process, 1 thread" env OMP_NUM_THREADS=1 $Q
    $3 "2 ranks x 1 thread (mpirun -np 2)" env OMP_NUM_THREADS=1 mpirun --allow-run-as-root -np 2 --bind-to core $Q
    $3 "1 process, 2 threads" env OMP_NUM_THREADS=2 $Q
}
export OMP_WAIT_POLICY=PASSIVE
table "qkv train toy (attention, pairs, $E epoch(s) of 100 steps of 100 samples)" samples/s run
if [ -f data/kjv/kjv.txt ]; then
    echo
    table "qkv train lm (2 layers, d_model 64, 40 steps of 16 x 64 tokens)" tokens/s run_lm
else
    echo "(qkv train lm left out: data/kjv/kjv.txt is missing: tools/get_data.sh kjv)"
fi
echo
OMP_NUM_THREADS=1 mpirun --allow-run-as-root -np 2 build/bench/dist_allreduce 54081
P=$(grep -oE '[0-9]+ parameters' "$T/lm1.out" 2>/dev/null | head -n 1 | cut -d' ' -f1)
if [ -n "$P" ]; then
    echo "qkv train lm's $P parameters:"
    OMP_NUM_THREADS=1 mpirun --allow-run-as-root -np 2 build/bench/dist_allreduce "$P"
fi
