#!/bin/sh
# seq2seq_rnn.sh: a training step of the recurrent seq2seq, qkv against
# PyTorch in one run (bench/seq2seq_rnn_step.c and .py: same model, shapes,
# loss and optimizer).
#
#   bench/seq2seq_rnn.sh [-r REPS] [ATTN [RNN [B [H [V [L [STEPS]]]]]]]
#
# Defaults: additive gru 64 256 8000 12 10, 3 repetitions. Each repetition
# runs qkv, then PyTorch with 1 thread, then with 2 threads
# (OMP_WAIT_POLICY=PASSIVE), each in its own process, interleaved; each
# prints the median of STEPS steps. Prints every row, then the median over
# repetitions of each and the ratio of PyTorch's best to qkv.
set -eu
cd "$(dirname "$0")/.."
REPS=3
if [ "${1:-}" = "-r" ]; then REPS="$2"; shift 2; fi
A="${1:-additive}" R="${2:-gru}" B="${3:-64}" H="${4:-256}" V="${5:-8000}" L="${6:-12}" S="${7:-10}"
PY="${TORCH_PY:-/usr/bin/python3}"
make -s -j2 build/bench/seq2seq_rnn_step >/dev/null
export OMP_WAIT_POLICY=PASSIVE
out=$(mktemp)
i=0
while [ $i -lt "$REPS" ]; do
    build/bench/seq2seq_rnn_step "$A" "$R" "$B" "$H" "$V" "$L" "$S" | tee -a "$out"
    for th in 1 2; do "$PY" bench/seq2seq_rnn_step.py "$A" "$R" "$B" "$H" "$V" "$L" "$S" "$th" | tee -a "$out"; done
    i=$((i + 1))
done
awk -v cfg="$A $R B=$B H=$H V=$V L=$L" '
    { v[$2] = v[$2] " " $5 }
    function median(s,   a, n, i, j, t) {
        n = split(s, a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    END {
        q = median(v["qkv"]); t1 = median(v["torch1"]); t2 = median(v["torch2"])
        best = t1 < t2 ? t1 : t2
        printf "%s: qkv %.1f ms, PyTorch 1 thread %.1f ms, 2 threads %.1f ms; PyTorch best / qkv = %.2f\n", cfg, q, t1, t2, best / q
    }' "$out"
rm -f "$out"
