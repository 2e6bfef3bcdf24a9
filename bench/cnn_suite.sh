#!/bin/sh
# cnn_suite.sh: Conv2d and the default CNN, forward + backward, qkv against
# PyTorch, interleaved in one run.
#
#   bench/cnn_suite.sh [-r REPS] [--cpu] [N]   (defaults 3 repetitions, batch 64)
#
# Each repetition runs build/bench/cnn_bench (qkv, the caller's OpenMP
# threads), then bench/cnn_torch.py with PyTorch's default thread count and
# with 2 threads (OMP_WAIT_POLICY=PASSIVE), each its own process. Prints,
# per row, the medians over repetitions in ms, PyTorch's better variant and
# the ratio torch / qkv (> 1: qkv is faster).
# --cpu: both on one thread (OMP_NUM_THREADS=1, torch.set_num_threads(1)),
# timed by CPU time, which a busy shared machine disturbs far less than
# wall time; the "2 threads" column is then absent.
set -eu
cd "$(dirname "$0")/.."
REPS=3
CPU=0
if [ "${1:-}" = "-r" ]; then REPS="$2"; shift 2; fi
if [ "${1:-}" = "--cpu" ]; then CPU=1; shift; fi
N="${1:-64}"
TORCH_PY="${TORCH_PY:-/usr/bin/python3}"
make -s -j2 build/bench/cnn_bench >&2
RAW="$(mktemp)"
trap 'rm -f "$RAW"' EXIT
r=1
while [ "$r" -le "$REPS" ]; do
    if [ "$CPU" = 1 ]; then
        OMP_NUM_THREADS=1 build/bench/cnn_bench --cpu "$N" | sed 's/^ROW /qkv /' >>"$RAW"
        OMP_NUM_THREADS=1 "$TORCH_PY" bench/cnn_torch.py --threads 1 --cpu "$N" | sed 's/^ROW /torch_default /' >>"$RAW"
    else
        build/bench/cnn_bench "$N" | sed 's/^ROW /qkv /' >>"$RAW"
        "$TORCH_PY" bench/cnn_torch.py "$N" | sed 's/^ROW /torch_default /' >>"$RAW"
        OMP_WAIT_POLICY=PASSIVE "$TORCH_PY" bench/cnn_torch.py --threads 2 "$N" | sed 's/^ROW /torch_t2 /' >>"$RAW"
    fi
    r=$((r + 1))
done
"$TORCH_PY" - "$RAW" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    who, name, ms = line.split()
    rows.setdefault(name, {}).setdefault(who, []).append(float(ms))
print("| forward + backward | qkv ms | torch default ms | torch 2 threads ms | torch best / qkv |")
print("|---|---|---|---|---|")
for name, d in rows.items():
    m = {k: statistics.median(v) for k, v in d.items()}
    best = min(m.get('torch_default', 1e30), m.get('torch_t2', 1e30))
    print("| %s | %.2f | %.2f | %.2f | %.2f |" % (name, m['qkv'], m.get('torch_default', float('nan')),
                                                  m.get('torch_t2', float('nan')), best / m['qkv']))
PY
