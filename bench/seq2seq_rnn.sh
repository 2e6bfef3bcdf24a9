#!/bin/sh
# seq2seq_rnn.sh: a training step of the recurrent seq2seq, qkv against
# PyTorch in one run (bench/seq2seq_rnn_step.c and .py: same model, shapes,
# loss and optimizer).
#
#   bench/seq2seq_rnn.sh [-r REPS] [ATTN [RNN [B [H [V [L [STEPS]]]]]]]
#
# Defaults: additive gru 64 256 8000 12 10, 3 repetitions. Each repetition
# runs qkv with 2 threads and with 1, then PyTorch with 1 thread and with 2
# (torch.set_num_threads), each in its own process, interleaved, all with
# OMP_WAIT_POLICY=PASSIVE; each prints the median wall and CPU time of
# STEPS steps. Prints every row, then the median over repetitions of each
# and two ratios: wall time, PyTorch's best over qkv's best; CPU time, one
# thread each (on a shared machine the CPU time moves less than the wall).
# QKV_BENCH_PRECISION=bf16 runs qkv in its BF16 mode, TORCH_VARIANTS=bf16
# PyTorch under torch.autocast('cpu', bfloat16) (docs/bf16.md).
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
    for th in 2 1; do
        OMP_NUM_THREADS=$th OPENBLAS_NUM_THREADS=$th build/bench/seq2seq_rnn_step "$A" "$R" "$B" "$H" "$V" "$L" "$S" | tee -a "$out"
    done
    for th in 1 2; do "$PY" bench/seq2seq_rnn_step.py "$A" "$R" "$B" "$H" "$V" "$L" "$S" "$th" | tee -a "$out"; done
    i=$((i + 1))
done
awk -v cfg="$A $R B=$B H=$H V=$V L=$L" '
    { k = $2; sub(/bf16_/, "", k); w[k] = w[k] " " $5; c[k] = c[k] " " $6 }
    function median(s,   a, n, i, j, t) {
        n = split(s, a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    END {
        q2 = median(w["qkv2"]); q1 = median(w["qkv1"]); t1 = median(w["torch1"]); t2 = median(w["torch2"])
        qb = q1 < q2 ? q1 : q2; tb = t1 < t2 ? t1 : t2
        printf "%s, wall ms: qkv 2 threads %.1f, 1 thread %.1f; PyTorch 1 thread %.1f, 2 threads %.1f; PyTorch best / qkv best = %.2f\n", cfg, q2, q1, t1, t2, tb / qb
        qc = median(c["qkv1"]); tc = median(c["torch1"])
        printf "%s, CPU ms, 1 thread each: qkv %.1f, PyTorch %.1f; PyTorch / qkv = %.2f\n", cfg, qc, tc, tc / qc
    }' "$out"
rm -f "$out"
