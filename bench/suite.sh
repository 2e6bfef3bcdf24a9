#!/bin/sh
# suite.sh: qkv against PyTorch on the performance issue's shapes, in one run.
#
#   bench/suite.sh [-r REPS] [--sweep] [--no-torch] [CONFIG ...]
#
#   -r REPS     repetitions of every configuration (default 3)
#   --sweep     add the attention sweep, forward and backward: B=1, 8 heads,
#               head_dim 32/64/128, L = 128..16384 (PyTorch only up to
#               L = 4096); about 9 TFLOP for qkv per repetition: about a
#               minute at 170 GFLOP/s, and PyTorch's part several more
#   --no-torch  qkv only
#   CONFIG ...  run only these configurations (names: build/bench/layers_bench --list)
#
# Environment: TORCH_PY (default /usr/bin/python3, a Python that imports torch),
# TORCH_VARIANTS (default "default t2"): "default" is PyTorch in the caller's
# environment with its own thread count; "t2" is torch.set_num_threads(2)
# with OMP_WAIT_POLICY=PASSIVE; "bf16" (not a default: another precision) is
# t2 with the encoder step's forward under torch.autocast bf16 (other
# configurations ignore it). Each configuration's table row takes the best
# (lowest median) variant. qkv runs in the caller's environment.
#
# Builds build/bench/layers_bench if needed, measures the 2-thread FP32 FMA
# peak (bench/peak.h) before and after, and then, for each repetition, runs
# every configuration as qkv, then each PyTorch variant, each in its own
# process (so the peak memory is per configuration: VmHWM growth over the
# process's resident set before the configuration's first allocation).
# Inside a process: one warm-up, then iterations until 0.5 s (1 to 10), the
# median. Across repetitions: the median of those. Prints a markdown table.
# The default suite took 6 minutes on the 2-core machine while it was shared
# with other work (docs/benchmarks.md); less on a quiet one.
set -eu
cd "$(dirname "$0")/.."
REPS=3
SWEEP=0
TORCH=1
CONFIGS=""
while [ $# -gt 0 ]; do
    case "$1" in
    -r) REPS="$2"; shift 2 ;;
    --sweep) SWEEP=1; shift ;;
    --no-torch) TORCH=0; shift ;;
    -h|--help) sed -n '2,/^set -eu$/p' "$0" | sed '$d'; exit 0 ;;
    -*) echo "suite.sh: unknown option $1" >&2; exit 2 ;;
    *) CONFIGS="$CONFIGS $1"; shift ;;
    esac
done
TORCH_PY="${TORCH_PY:-/usr/bin/python3}"
TORCH_VARIANTS="${TORCH_VARIANTS:-default t2}"
BIN=build/bench/layers_bench

make -s -j2 "$BIN" >&2
if [ "$TORCH" = 1 ] && ! "$TORCH_PY" -c 'import torch' 2>/dev/null; then
    echo "suite.sh: $TORCH_PY cannot import torch; running qkv only" >&2
    TORCH=0
fi
[ -n "$CONFIGS" ] || CONFIGS="$("$BIN" --list | tr '\n' ' ')"
if [ "$SWEEP" = 1 ]; then
    for d in 32 64 128; do
        for l in 128 256 512 1024 2048 4096 8192 16384; do
            CONFIGS="$CONFIGS attn_L${l}_D${d}"
        done
    done
fi

RAW="$(mktemp)"
trap 'rm -f "$RAW" "$RAW.one"' EXIT
PEAK0="$("$BIN" peak 2)"
echo "# FMA peak (2 threads) at start: $PEAK0 GFLOP/s" >&2

torch_run() { # variant config
    case "$1" in
    default) "$TORCH_PY" bench/torch_peer.py --one "$2" ;;
    t2) OMP_WAIT_POLICY=PASSIVE "$TORCH_PY" bench/torch_peer.py --one "$2" --threads 2 ;;
    bf16) OMP_WAIT_POLICY=PASSIVE "$TORCH_PY" bench/torch_peer.py --one "$2" --threads 2 --bf16 ;;
    *) echo "suite.sh: unknown torch variant $1" >&2; return 2 ;;
    esac
}

r=1
while [ "$r" -le "$REPS" ]; do
    for cfg in $CONFIGS; do
        echo "# rep $r/$REPS: $cfg" >&2
        if "$BIN" --one "$cfg" >"$RAW.one"; then
            sed "s/^ROW /qkv /" "$RAW.one" >>"$RAW"
        else
            echo "suite.sh: qkv failed on $cfg" >&2
        fi
        if [ "$TORCH" = 1 ]; then
            # PyTorch builds (8,L,L) scores: not past L = 4096 for attention
            # (1.5 GiB and more), nor past 8192 for MultiheadAttention
            # (2.1 GiB there, over 8 GiB at 16384).
            L=$(echo "$cfg" | sed -n 's/^attn\(fwd\)\{0,1\}_L\([0-9]*\)_.*/\2/p')
            if [ -n "$L" ] && [ "$L" -gt 4096 ]; then continue; fi
            L=$(echo "$cfg" | sed -n 's/^mha_B[0-9]*_L\([0-9]*\).*/\1/p')
            if [ -n "$L" ] && [ "$L" -gt 8192 ]; then continue; fi
            for v in $TORCH_VARIANTS; do
                if torch_run "$v" "$cfg" >"$RAW.one"; then
                    sed "s/^ROW /torch:$v /" "$RAW.one" >>"$RAW"
                else
                    echo "suite.sh: torch ($v) failed on $cfg" >&2
                fi
            done
        fi
    done
    r=$((r + 1))
done
PEAK1="$("$BIN" peak 2)"
echo "# FMA peak (2 threads) at end: $PEAK1 GFLOP/s" >&2

python3 - "$RAW" "$PEAK0" "$PEAK1" "$REPS" <<'EOF'
import statistics, sys
raw, p0, p1, reps = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
peak = max(p0, p1)
rows = {}   # label -> who -> (list of ms, flops, list of MiB)
order = []
for line in open(raw):
    who, label, ms, fl, mib = line.split()
    if label not in rows:
        rows[label] = {}
        order.append(label)
    d = rows[label].setdefault(who, ([], float(fl), []))
    d[0].append(float(ms))
    d[2].append(float(mib))
med = statistics.median
print(f"FP32 FMA peak measured by the suite on 2 threads: {p0:.0f} GFLOP/s at the start, "
      f"{p1:.0f} at the end (the higher, {peak:.0f}, is used); medians of {reps} repetitions.")
print()
print("| config | qkv median ms | qkv GFLOP/s | % of peak | torch best median ms | ratio (torch/qkv) | qkv peak MiB | torch peak MiB |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for label in order:
    d = rows[label]
    q = d.get("qkv")
    qms = med(q[0]) if q else None
    fl = q[1] if q else next(iter(d.values()))[1]
    best = None
    for who, t in d.items():
        if who.startswith("torch:") and (best is None or med(t[0]) < med(best[1][0])):
            best = (who[6:], t)
    cells = [label]
    if q:
        gf = fl / (qms * 1e-3) * 1e-9
        cells += [f"{qms:.1f}", f"{gf:.1f}", f"{100 * gf / peak:.1f}%"]
    else:
        cells += ["-", "-", "-"]
    if best:
        tms = med(best[1][0])
        cells += [f"{tms:.1f} ({best[0]})", f"{tms / qms:.2f}x" if q else "-"]
    else:
        cells += ["-", "-"]
    cells += [f"{med(q[2]):.0f}" if q else "-", f"{med(best[1][2]):.0f}" if best else "-"]
    print("| " + " | ".join(cells) + " |")
print()
print("ratio > 1: qkv is faster. torch variants: default = PyTorch's own thread count and "
      "environment; t2 = set_num_threads(2), OMP_WAIT_POLICY=PASSIVE. Peak MiB: growth of the "
      "process's peak resident set over its size before the configuration's first allocation "
      "(attention _fwd rows: after the first forward; _bwd rows: forward and backward).")
EOF
