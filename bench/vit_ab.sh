#!/bin/sh
# vit_ab.sh: two builds' default ViT training step, alternated in the same
# minutes (the machine's speed drifts by 10-20% over minutes, more than
# most changes move the step).
#
#   bench/vit_ab.sh OLD_VIT_STEP NEW_VIT_STEP [ROUNDS]
#
# OLD and NEW are build/bench/vit_step binaries of two builds (copy the old
# one aside before rebuilding). Each round runs `--no-torch -r 1` (12 steps,
# the median of the last 10) of OLD, then of NEW; ROUNDS (default 8)
# rounds. Prints each build's median and best over the rounds, in ms per
# step, and every round's figure.
set -e
[ $# -ge 2 ] || { echo "usage: bench/vit_ab.sh OLD_VIT_STEP NEW_VIT_STEP [ROUNDS]" >&2; exit 2; }
old=$1 new=$2 rounds=${3:-8}
for b in "$old" "$new"; do [ -x "$b" ] || { echo "vit_ab: $b is not an executable" >&2; exit 2; }; done
i=0
while [ "$i" -lt "$rounds" ]; do
    for which in old new; do
        [ "$which" = old ] && b=$old || b=$new
        ms=$("$b" --no-torch -r 1 2>&1 | awk '/^rep 0:/ {print $4}')
        [ -n "$ms" ] || { echo "vit_ab: $b printed no step time" >&2; exit 1; }
        echo "$which $ms"
    done
    i=$((i + 1))
done | awk '
    { v[$1, ++n[$1]] = $2 }
    END {
        for (w = 0; w < 2; w++) {
            k = w ? "new" : "old"; m = n[k]
            for (i = 1; i <= m; i++) s[i] = v[k, i]
            for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (s[j] < s[i]) { t = s[i]; s[i] = s[j]; s[j] = t }
            med = m % 2 ? s[(m + 1) / 2] : (s[m / 2] + s[m / 2 + 1]) / 2
            line = ""
            for (i = 1; i <= m; i++) line = line " " v[k, i]
            printf "%s: median %.2f ms, best %.2f ms; rounds:%s\n", k, med, s[1], line
        }
    }'
