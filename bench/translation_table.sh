#!/bin/sh
# translation_table.sh: issue 11's table: every attention kind of the
# recurrent seq2seq and the transformer, each trained by the shipped
# command (`qkv train translation`, its defaults: the same data, tokenizers,
# sentence limit, batch, steps and seed), one after the other, then scored
# on the test split by `qkv eval`. Prints one markdown row per model:
# parameters, wall time of the training, last validation loss, test BLEU,
# exact match, test perplexity.
#
#   bench/translation_table.sh [-s STEPS] [-j THREADS] [OUTDIR [KIND...]]
#
# -s STEPS trains each model to STEPS steps in all (--steps STEPS); a model
# whose folder already holds a checkpoint is continued to STEPS (--resume
# --steps STEPS), which gives the same bits as one run of --steps STEPS
# (a constant learning rate and a bit-exact resume), so a table at 1500
# steps can be taken on to 3000 and 4500. Its logs are then KIND.train-STEPS.log
# and KIND.eval-STEPS.log, and the wall time is this leg's. -j THREADS sets
# OMP_NUM_THREADS for train and eval (default: all cores), to run two lists at once.
#
# OUTDIR defaults to runs/table (a folder per model, with train.log and
# eval.log); KINDs are attention kinds (none dot scaled cosine general
# reduced additive location) or `transformer`; default: all of them.
# Needs tools/get_data.sh translation; takes about 3 to 4 minutes a model
# on two idle cores.
set -eu
cd "$(dirname "$0")/.."
STEPS="" THREADS=""
while [ $# -gt 0 ]; do
    case "$1" in
        -s) STEPS="$2"; shift 2 ;;
        -j) THREADS="$2"; shift 2 ;;
        *) break ;;
    esac
done
OUT="${1:-runs/table}"
[ $# -gt 0 ] && shift
KINDS="${*:-additive none dot scaled cosine general reduced location transformer}"
QKV="${QKV:-build/qkv}"
[ "$QKV" = build/qkv ] && make -s -j2 build/qkv >/dev/null
export OMP_WAIT_POLICY=PASSIVE
[ -n "$THREADS" ] && export OMP_NUM_THREADS="$THREADS"
mkdir -p "$OUT"
echo "| model | command | parameters | wall time | validation loss | test BLEU | exact match | test perplexity |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for k in $KINDS; do
    d="$OUT/$k"
    if [ "$k" = transformer ]; then
        # post-norm transformer: the recurrent models' lr 0.002 does not train it
        args="--model transformer --lr 0.0003"
        name="transformer (2 + 2 layers, d_model 256, 4 heads, lr 0.0003)"
    else
        args="--attention $k"
        name="GRU, $k"
    fi
    tlog="$d.train.log" elog="$d.eval.log" run="$args"
    if [ -n "$STEPS" ]; then
        tlog="$d.train-$STEPS.log" elog="$d.eval-$STEPS.log" run="$args --steps $STEPS"
        [ -f "$d/checkpoint.safetensors" ] && run="--resume --steps $STEPS"
    fi
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$QKV" train translation $run --out "$d" > "$tlog" 2>&1
    t1=$(date +%s.%N)
    "$QKV" eval "$d" > "$elog" 2>&1
    params=$(sed -n 's/.* \([0-9]*\) parameters.*/\1/p' "$elog" | head -1)
    vloss=$(sed -n 's/.*validation loss \([0-9.]*\).*/\1/p' "$tlog" | tail -1)
    bleu=$(sed -n 's/^BLEU \([0-9.]*\).*/\1/p' "$elog")
    em=$(sed -n 's/^exact match \([0-9.]*%\).*/\1/p' "$elog")
    ppl=$(sed -n 's/.*perplexity \([0-9.]*\).*/\1/p' "$elog" | tail -1)
    wall=$(echo "$t1 $t0" | awk '{s = $1 - $2; printf "%d min %02d s", s / 60, s % 60}')
    [ -n "$STEPS" ] && args="$args --steps $STEPS"
    echo "| $name | \`qkv train translation $args\` | $params | $wall | $vloss | $bleu | $em | $ppl |"
done
