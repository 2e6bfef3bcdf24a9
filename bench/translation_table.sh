#!/bin/sh
# translation_table.sh: issue 11's table: every attention kind of the
# recurrent seq2seq and the transformer, each trained by the shipped
# command (`qkv train translation`, its defaults: the same data, tokenizers,
# sentence limit, batch, steps and seed), one after the other, then scored
# on the test split by `qkv eval`. Prints one markdown row per model:
# parameters, wall time of the training, last validation loss, test BLEU,
# exact match, test perplexity.
#
#   bench/translation_table.sh [OUTDIR [KIND...]]
#
# OUTDIR defaults to runs/table (a folder per model, with train.log and
# eval.log); KINDs are attention kinds (none dot scaled cosine general
# reduced additive location) or `transformer`; default: all of them.
# Needs tools/get_data.sh translation; takes about 3 to 4 minutes a model
# on two idle cores.
set -eu
cd "$(dirname "$0")/.."
OUT="${1:-runs/table}"
[ $# -gt 0 ] && shift
KINDS="${*:-additive none dot scaled cosine general reduced location transformer}"
QKV="${QKV:-build/qkv}"
[ "$QKV" = build/qkv ] && make -s -j2 build/qkv >/dev/null
export OMP_WAIT_POLICY=PASSIVE
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
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$QKV" train translation $args --out "$d" > "$d.train.log" 2>&1
    t1=$(date +%s.%N)
    "$QKV" eval "$d" > "$d.eval.log" 2>&1
    params=$(sed -n 's/.* \([0-9]*\) parameters.*/\1/p' "$d.train.log" | head -1)
    vloss=$(sed -n 's/.*validation loss \([0-9.]*\).*/\1/p' "$d.train.log" | tail -1)
    bleu=$(sed -n 's/^BLEU \([0-9.]*\).*/\1/p' "$d.eval.log")
    em=$(sed -n 's/^exact match \([0-9.]*%\).*/\1/p' "$d.eval.log")
    ppl=$(sed -n 's/.*perplexity \([0-9.]*\).*/\1/p' "$d.eval.log" | tail -1)
    wall=$(echo "$t1 $t0" | awk '{s = $1 - $2; printf "%d min %02d s", s / 60, s % 60}')
    echo "| $name | \`qkv train translation $args\` | $params | $wall | $vloss | $bleu | $em | $ppl |"
done
