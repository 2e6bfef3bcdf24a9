#!/bin/sh
# test_floors.sh BUILD: the library's folders are floors (README.md, "Where
# things live"): a folder of src/ uses only the folders above it in the
# README's table, or itself. Two checks per folder, in the table's order:
# its #include "X/..." lines name no folder below it, and the functions its
# objects (BUILD/src/DIR/*.o) call that another folder defines come from a
# folder above it. Each use that breaks the rule is printed.
h_name=test_floors; . "$(dirname "$0")/harness.sh"

# the src/ folders of the README's table, top to bottom
floors=$(sed -n 's/^| `src\/\([a-z]*\)\/` |.*/\1/p' "$root/README.md")
[ "$(echo "$floors" | wc -w)" -ge 10 ] && ok || bad "README.md's table names only: $floors"
for d in "$root"/src/*/; do
    d=$(basename "$d")
    echo "$floors" | grep -qx "$d" && ok || bad "src/$d/ is not a row of README.md's folder table"
done

# the position of a folder in the table (1 = top)
level() { echo "$floors" | grep -nx "$1" | cut -d: -f1; }

# every library object's defined functions, as "name folder"
for d in $floors; do
    for c in "$root"/src/$d/*.c; do
        o="$build/src/$d/$(basename "${c%.c}").o"
        [ -f "$o" ] && nm -g --defined-only "$o" | awk -v d="$d" 'NF == 3 { print $3, d }'
    done
done | sort -u > "$tmp/defs"
[ -s "$tmp/defs" ] && ok || bad "no objects under $build/src: build the library first"

for d in $floors; do
    me=$(level "$d")
    # includes
    for f in "$root"/src/$d/*.[ch]; do
        [ -f "$f" ] || continue
        for x in $(sed -n 's/^#include "\([a-z]*\)\/.*/\1/p' "$f" | sort -u); do
            lx=$(level "$x")
            [ -z "$lx" ] && continue # not a folder of src/ (qkv/plot.h, say)
            [ "$lx" -le "$me" ] && ok || bad "src/$d/$(basename "$f") includes from src/$x/, a floor below it"
        done
    done
    # calls
    for c in "$root"/src/$d/*.c; do
        o="$build/src/$d/$(basename "${c%.c}").o"
        [ -f "$o" ] || continue
        nm -u "$o" | awk '{ print $NF }' | sort -u > "$tmp/uses"
        join "$tmp/uses" "$tmp/defs" | while read -r sym x; do
            [ "$x" = "$d" ] && continue
            [ "$(level "$x")" -lt "$me" ] || echo "src/$d/$(basename "$c") calls $sym of src/$x/, a floor below it"
        done > "$tmp/up"
        [ -s "$tmp/up" ] && bad "$(cat "$tmp/up")" || ok
    done
done
finish
