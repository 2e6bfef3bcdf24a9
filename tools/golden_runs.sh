#!/bin/sh
# Tiny runs of the main commands with fixed seeds, for refactors that must not
# change behaviour: prints every command's stdout and stderr (timings masked)
# and the sha256 of every checkpoint and output file, then each checkpoint's
# tensor digest and metadata (tools/st_digest.py), so that two builds can be
# compared:
#   tools/golden_runs.sh build > before.txt   (on the old tree)
#   tools/golden_runs.sh build > after.txt    (on the new tree)
#   diff before.txt after.txt                 (empty: byte-identical)
# Needs data/ (tools/get_data.sh kjv, translation, fashion-mnist). One thread,
# so that the runs are deterministic; about a minute on two cores.
set -u
B=${1:-build}
Q="$B/qkv"
D=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1
mask() { sed -E 's/[0-9]+(\.[0-9]+)? ?(ms|s|min|tokens\/s|steps\/s|samples\/s|images\/s|sentences\/s|pairs\/s)\b/T \2/g; s#'"$W"'#W#g; /^\| (pairs|positional) /s/\| [0-9]+ \|$/| T |/'; }
run() {
    echo "== $*" | mask
    "$@" > "$W/out" 2>&1
    echo "exit $?"
    mask < "$W/out"
}
run "$Q" demo
run "$Q" toy -n 200 --test 40 -l 40 -e 1 -s 3
run "$Q" train toy -n 200 --test 40 -l 40 -e 1 -s 4 -m attention -t pairs
run "$Q" train lm --layers 1 --d-model 32 --heads 2 --context 32 --batch 4 --steps 12 \
    --eval-every 6 --eval-batches 2 --sample 40 -s 5 -j 1 -o "$W/lm"
run "$Q" train lm --resume --steps 16 --sample 20 -j 1 -o "$W/lm"
run "$Q" generate "$W/lm" --prompt "In the beginning" -n 30 -s 2 -j 1
run "$Q" train lm --layers 1 --d-model 32 --heads 2 --context 32 --batch 4 --steps 8 \
    --eval-every 4 --eval-batches 2 --sample 0 --pos rotary --precision bf16 -s 6 -j 1 -o "$W/lmr"
run "$Q" train vit --epochs 1 --train-limit 256 --test-limit 64 --batch 32 -s 7 -j 1 -o "$W/vit"
run "$Q" eval "$W/vit" --test-limit 64 -j 1
run "$Q" train cnn --epochs 1 --train-limit 256 --test-limit 64 --batch 32 -s 8 -j 1 -o "$W/cnn"
run "$Q" train mlp --epochs 1 --train-limit 256 --test-limit 64 --batch 32 -s 9 -j 1 -o "$W/mlp"
run "$Q" train translation --steps 12 --batch 8 --hidden 32 --embed 32 --vocab 300 \
    --eval-every 6 -s 10 -j 1 -o "$W/mt"
run "$Q" train translation --resume --steps 16 -j 1 -o "$W/mt"
run "$Q" translate "$W/mt" "the file is open"
run "$Q" train translation -m transformer --steps 8 --batch 8 --hidden 32 --d-model 32 --heads 2 \
    --vocab 300 --eval-every 4 -s 11 -j 1 -o "$W/mtt"
run "$Q" translate "$W/mtt" "save the file"
# Error paths: their messages and exit statuses must stay the same too.
run "$Q" eval "$W/none"
run "$Q" eval "$W/lm"
run "$Q" translate "$W/lm" "a"
run "$Q" translate "$W/none" "a"
run "$Q" train translation --steps 2 -o "$W/mt"
run "$Q" generate "$W/mt" --prompt "a"
run "$Q" classify "$W/lm" x.png
printf 'kind translation\nmodel rnn\n' > "$W/bad.txt"
mkdir -p "$W/badmt" && cp "$W/mt/checkpoint.safetensors" "$W/badmt/" && cp "$W/bad.txt" "$W/badmt/config.txt"
run "$Q" translate "$W/badmt" "a"
run "$Q" eval "$W/badmt"
echo "== files"
(cd "$W" && find . -type f ! -name out | LC_ALL=C sort | xargs sha256sum)
# The checkpoints' tensors (names, shapes, bytes) apart from their metadata,
# and the metadata itself: a change of the run format changes the files'
# hashes above but not these tensor digests.
echo "== tensors"
(cd "$W" && find . -type f \( -name '*.ckpt' -o -name '*.safetensors' \) | LC_ALL=C sort |
    xargs python3 "$D/st_digest.py")
