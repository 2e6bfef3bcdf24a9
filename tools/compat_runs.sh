#!/bin/sh
# compat_runs.sh OLD_QKV [NEW_QKV]: runs made by an older qkv binary (say
# main's, before a change of the run format) opened and resumed by a newer
# one (default build/qkv): tiny translation, lm, mlp and vit runs; a run
# stopped by OLD and resumed by NEW must end with the tensors of OLD's
# uninterrupted run (tools/st_digest.py), and translate, eval, generate,
# classify must print the same with both. Prints SAME or DIFFER a check.
# Needs data/ (kjv, translation, fashion-mnist); run from the repository.
M=${1:?usage: tools/compat_runs.sh OLD_QKV [NEW_QKV]}
N=${2:-build/qkv}
X=$(mktemp -d)
trap 'rm -rf "$X"' EXIT
export OMP_NUM_THREADS=1
D="python3 tools/st_digest.py"
same() { if [ "$1" = "$2" ]; then echo "SAME: $3"; else echo "DIFFER: $3"; echo "--- main:"; echo "$1"; echo "--- branch:"; echo "$2"; fi; }
T="--batch 8 --hidden 32 --embed 32 --vocab 300 --eval-every 3 -s 10 -j 1"
$M train translation --steps 6 $T -o $X/mt > /dev/null 2>&1
$M train translation --steps 3 $T -o $X/mtp > /dev/null 2>&1
$N train translation --resume --steps 6 -j 1 -o $X/mtp > $X/r.txt 2>&1; echo "resume old translation: exit $? $(grep -c 'resuming at step 3' $X/r.txt)"
same "$($D $X/mt/checkpoint.safetensors | grep ' tensors ' | cut -d' ' -f3)" "$($D $X/mtp/checkpoint.safetensors | grep ' tensors ' | cut -d' ' -f3)" "translation 3 old + 3 resumed by the branch = 6 by main (tensors)"
same "$($M translate $X/mt 'the file is open' 2>&1)" "$($N translate $X/mt 'the file is open' 2>&1)" "translate of main's run"
same "$($M eval $X/mt --limit 20 2>&1)" "$($N eval $X/mt --limit 20 2>&1)" "eval of main's translation run"
L="--layers 1 --d-model 32 --heads 2 --context 32 --batch 4 --eval-every 4 --eval-batches 2 --sample 0 -s 5 -j 1"
$M train lm $L --steps 8 -o $X/lm > /dev/null 2>&1
$M train lm $L --steps 8 --stop-at 4 -o $X/lmp > /dev/null 2>&1
$N train lm --resume -j 1 -o $X/lmp > $X/r.txt 2>&1; echo "resume old lm: exit $? $(grep -c 'resuming at step 4' $X/r.txt)"
same "$($D $X/lm/lm.ckpt | grep ' tensors ' | cut -d' ' -f3)" "$($D $X/lmp/lm.ckpt | grep ' tensors ' | cut -d' ' -f3)" "lm 4 old + 4 resumed by the branch = 8 by main (tensors)"
same "$($M generate $X/lm --prompt 'In the' -n 20 -s 2 -j 1 2>/dev/null)" "$($N generate $X/lm --prompt 'In the' -n 20 -s 2 -j 1 2>/dev/null)" "generate from main's lm run"
V="--epochs 2 --train-limit 256 --test-limit 64 --batch 32 -s 9 -j 1"
$M train mlp $V -o $X/mlp > /dev/null 2>&1
$M train mlp $V --stop-after 1 -o $X/mlpp > /dev/null 2>&1
$N train mlp --resume -j 1 --test-limit 64 -o $X/mlpp > $X/r.txt 2>&1; echo "resume old mlp: exit $? $(grep -c 'resuming at epoch 1' $X/r.txt)"
same "$($D $X/mlp/model.ckpt | grep ' tensors ' | cut -d' ' -f3)" "$($D $X/mlpp/model.ckpt | grep ' tensors ' | cut -d' ' -f3)" "mlp 1 old + 1 resumed by the branch = 2 by main (tensors)"
same "$($M eval $X/mlp --test-limit 64 -j 1 2>&1 | sed 's/, [0-9.]* s$//')" "$($N eval $X/mlp --test-limit 64 -j 1 2>&1 | sed 's/, [0-9.]* s$//')" "eval of main's mlp run"
same "$($M classify $X/mlp --test-index 3 2>&1)" "$($N classify $X/mlp --test-index 3 2>&1)" "classify with main's mlp run"
$M train vit --epochs 1 --train-limit 256 --test-limit 64 --batch 32 -s 7 -j 1 -o $X/vit > /dev/null 2>&1
same "$($M eval $X/vit --test-limit 64 -j 1 2>&1 | sed 's/, [0-9.]* s$//')" "$($N eval $X/vit --test-limit 64 -j 1 2>&1 | sed 's/, [0-9.]* s$//')" "eval of main's vit run"
