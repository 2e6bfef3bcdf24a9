#!/bin/sh
# Runs every test program in BUILD/tests (default build) and sums their
# closing lines.
# A program that crashes or prints no summary counts as one failure.
cd "$(dirname "$0")/.." || exit 1
dir=${1:-build}
pass=0; fail=0
for t in "$dir"/tests/test_*; do
    [ -x "$t" ] || continue
    out=$("$t" 2>&1); rc=$?
    line=$(printf '%s\n' "$out" | grep -E '[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then
        printf '%s\n' "$out" | tail -n 20
        echo "$t: no summary (exit $rc): counted as 1 failure"
        fail=$((fail + 1)); continue
    fi
    p=$(echo "$line" | sed -E 's/.* ([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    [ "$f" -ne 0 ] && printf '%s\n' "$out" | grep -E '^FAIL' | head -n 20
    echo "$line"
    pass=$((pass + p)); fail=$((fail + f))
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
