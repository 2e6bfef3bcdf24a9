#!/bin/sh
# dist_bench.sh: data-parallel training throughput of `qkv train toy` (the
# toy attention network, 54,081 parameters, global batch 100) on this
# machine: one process with one thread, two MPI ranks with one thread each,
# and one process with two threads; then the all-reduce's measured cost and
# the communication model's prediction (bench/dist_allreduce.c).
#   make MPI=1 && bench/dist_bench.sh [EPOCHS]     (default 1: 100 steps)
# Prints samples per second as rank 0's progress line reports it.
set -e
cd "$(dirname "$0")/.."
E=${1:-1}
Q=build/qkv
run() { # label, command...: the last progress line's samples/s
    label=$1; shift
    rate=$("$@" train toy -m attention -t pairs -n 10000 --test 100 -e "$E" 2>/dev/null |
        tr '\r' '\n' | grep -oE '[0-9]+ samples/s' | tail -n 1 | cut -d' ' -f1)
    printf '| %s | %s |\n' "$label" "$rate"
}
export OMP_WAIT_POLICY=PASSIVE
echo "| configuration | samples/s |"
echo "|---|---|"
run "1 process, 1 thread" env OMP_NUM_THREADS=1 $Q
run "2 ranks x 1 thread (mpirun -np 2)" env OMP_NUM_THREADS=1 mpirun --allow-run-as-root -np 2 --bind-to core $Q
run "1 process, 2 threads" env OMP_NUM_THREADS=2 $Q
OMP_NUM_THREADS=1 mpirun --allow-run-as-root -np 2 build/bench/dist_allreduce 54081
