#!/bin/sh
# Builds every libFuzzer target (make fuzz: tests/fuzz/fuzz_*.c) and runs
# each for SECONDS (default 20) over its committed corpus
# tests/fuzz/corpus/NAME/. New inputs go to a scratch folder, not into the
# committed corpus; a finding is saved there and fails the run.
#   tests/fuzz/run.sh [SECONDS] [NAME...]
# Needs clang (CI calls it only when clang is present).
set -e
cd "$(dirname "$0")/../.."
secs=${1:-20}
[ $# -gt 0 ] && shift
make -j2 fuzz >/dev/null
scratch=$(mktemp -d "${TMPDIR:-/tmp}/qkv-fuzz-run.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
names=$*
[ -n "$names" ] || names=$(cd tests/fuzz && ls fuzz_*.c | sed 's/\.c$//')
fail=0
for n in $names; do
    mkdir -p "$scratch/$n" "tests/fuzz/corpus/$n"
    log="$scratch/$n.log"
    if OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE build-fuzz/fuzz/"$n" -max_total_time="$secs" -timeout=10 \
        -print_final_stats=1 -artifact_prefix="$scratch/$n-" "$scratch/$n" "tests/fuzz/corpus/$n" >"$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        echo "fuzz: $n: ${runs:-?} executions in ${secs} s, no finding"
    else
        echo "fuzz: $n: FINDING"
        tail -40 "$log"
        for a in "$scratch/$n"-*; do
            [ -f "$a" ] && cp "$a" "build-fuzz/" && echo "fuzz: input kept as build-fuzz/$(basename "$a")"
        done
        fail=1
    fi
done
exit $fail
