#!/bin/sh
# seq2seq_rnn.sh: a training step of the recurrent seq2seq, qkv against
# PyTorch in one run (bench/seq2seq_rnn_step.c and .py: same model, shapes,
# loss and optimizer).
#
#   bench/seq2seq_rnn.sh [-r REPS] [-p fp32|bf16|all] [-m] [ATTN [RNN [B [H [V [L [STEPS]]]]]]]
#
# Defaults: additive gru 64 256 8000 12 10, 3 repetitions, -p fp32. Each
# repetition runs qkv with 2 threads and with 1, then PyTorch with 1 thread
# and with 2 (torch.set_num_threads), each in its own process, interleaved;
# each prints the median wall and CPU time of STEPS steps. PyTorch runs with
# OMP_WAIT_POLICY=PASSIVE (with 2 threads its OpenMP threads otherwise spin
# against OpenBLAS's: docs/benchmarks.md), qkv with the caller's
# environment (unset: OpenMP's default, threads spin a while between
# regions, as `qkv train` runs by default; OMP_WAIT_POLICY=PASSIVE
# bench/seq2seq_rnn.sh ... times qkv that way too). -p bf16 runs qkv in its BF16 mode and PyTorch under
# torch.autocast('cpu', bfloat16) (docs/bf16.md); -p all runs both
# precisions of both sides in every repetition (8 processes), so that
# "PyTorch's best configuration" is the fastest of its four. -m runs each
# PyTorch process twice, the second time with glibc's malloc told to keep
# its memory (MALLOC_MMAP_THRESHOLD_=4000000000 MALLOC_TRIM_THRESHOLD_=
# 4000000000 MALLOC_TOP_PAD_=1000000000: PyTorch frees and allocates its
# activations every step, and these settings took 12-20% off its step
# here), rows "torchtuned..."; the best of all is "PyTorch's best". Prints every
# row, then the median over repetitions of each and the ratios: wall time,
# PyTorch's best over qkv's best (and over qkv's best FP32 row); CPU time,
# one thread each, FP32 (on a shared machine the CPU time moves less than
# the wall). The environment is passed on as it is: to time OpenBLAS's own
# choice of kernels where OPENBLAS_CORETYPE is set, unset it for the run.
set -eu
cd "$(dirname "$0")/.."
REPS=3 PREC=fp32 TUNED=0
while [ $# -gt 0 ]; do
    case "$1" in
    -r) REPS="$2"; shift 2 ;;
    -p) PREC="$2"; shift 2 ;;
    -m) TUNED=1; shift ;;
    *) break ;;
    esac
done
case "$PREC" in fp32) precs=fp32 ;; bf16) precs=bf16 ;; all) precs="fp32 bf16" ;;
*) echo "seq2seq_rnn.sh: -p takes fp32, bf16 or all, not '$PREC'" >&2; exit 2 ;; esac
A="${1:-additive}" R="${2:-gru}" B="${3:-64}" H="${4:-256}" V="${5:-8000}" L="${6:-12}" S="${7:-10}"
PY="${TORCH_PY:-/usr/bin/python3}"
make -s -j2 build/bench/seq2seq_rnn_step >/dev/null
out=$(mktemp)
i=0
while [ $i -lt "$REPS" ]; do
    for p in $precs; do
        for th in 2 1; do
            QKV_BENCH_PRECISION=$p OMP_NUM_THREADS=$th OPENBLAS_NUM_THREADS=$th \
                build/bench/seq2seq_rnn_step "$A" "$R" "$B" "$H" "$V" "$L" "$S" | tee -a "$out"
        done
        for th in 1 2; do
            OMP_WAIT_POLICY=PASSIVE TORCH_VARIANTS=$p "$PY" bench/seq2seq_rnn_step.py "$A" "$R" "$B" "$H" "$V" "$L" "$S" "$th" | tee -a "$out"
            [ "$TUNED" = 1 ] || continue
            MALLOC_MMAP_THRESHOLD_=4000000000 MALLOC_TRIM_THRESHOLD_=4000000000 MALLOC_TOP_PAD_=1000000000 \
                OMP_WAIT_POLICY=PASSIVE TORCH_VARIANTS=$p "$PY" bench/seq2seq_rnn_step.py "$A" "$R" "$B" "$H" "$V" "$L" "$S" "$th" |
                sed 's/^ROW torch/ROW torchtuned_/' | tee -a "$out"
        done
    done
    i=$((i + 1))
done
# rows: "ROW qkv2 ...", "ROW qkvbf16_2 ...", "ROW torch1 ...", "ROW torchbf16_1 ..."
awk -v cfg="$A $R B=$B H=$H V=$V L=$L" '
    { w[$2] = w[$2] " " $5; c[$2] = c[$2] " " $6 }
    function median(s,   a, n, i, j, t) {
        n = split(s, a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    END {
        qb = tb = qf = 1e30
        for (k in w) {
            m = median(w[k])
            printf "%s, %s: median wall %.1f ms\n", cfg, k, m
            if (k ~ /^qkv/ && m < qb) { qb = m; qn = k }
            if (k ~ /^qkv[0-9]/ && m < qf) qf = m
            if (k ~ /^torch/ && m < tb) { tb = m; tn = k }
        }
        printf "%s, wall: PyTorch best (%s) %.1f ms / qkv best (%s) %.1f ms = %.2f", cfg, tn, tb, qn, qb, tb / qb
        if (qf < 1e30 && qf != qb) printf "; / qkv best FP32 %.1f ms = %.2f", qf, tb / qf
        printf "\n"
        if ("qkv1" in c && "torch1" in c) {
            qc = median(c["qkv1"]); tc = median(c["torch1"])
            printf "%s, CPU ms, 1 thread each, FP32: qkv %.1f, PyTorch %.1f; PyTorch / qkv = %.2f\n", cfg, qc, tc, tc / qc
        }
    }' "$out"
rm -f "$out"
