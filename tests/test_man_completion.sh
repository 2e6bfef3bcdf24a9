#!/bin/sh
# test_man_completion.sh BUILD: the man pages and the bash completion that
# tools/gen_man.sh and tools/gen_completion.sh write from qkv's --help
# (BUILD/man/, BUILD/completion/qkv). Each command that `qkv --help` lists
# has a page that `man -l` renders with its usage line, and qkv.1 renders;
# sourced in bash, the completion of `qkv ` lists exactly those commands
# (compgen through _qkv), `qkv train ` the kinds, and `qkv train lm --la`
# gives --layers. BUILD/tests/test_man_completion runs this on BUILD.
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
qkv=$build/qkv
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL tests/test_man_completion.sh: $*"; fail=$((fail + 1)); }

commands=$("$qkv" --help | sed -n '/^commands:/,/^$/{/^  [a-z]/p}' | awk '{ print $1 }')
[ -n "$commands" ] && ok || bad "qkv --help lists no commands"

out=$(man -l "$build/man/qkv.1" 2>&1)
echo "$out" | grep -q "qkv COMMAND \[OPTIONS\]" && echo "$out" | grep -q "SEE ALSO" && ok ||
    bad "man -l qkv.1 does not render qkv's usage: $out"
for cmd in $commands; do
    usage=$("$qkv" "$cmd" --help | head -n 1 | sed 's/^usage: *//')
    out=$(man -l "$build/man/qkv-$cmd.1" 2>&1)
    echo "$out" | grep -qF "$usage" && ok || bad "man -l qkv-$cmd.1 does not render '$usage': $out"
done
out=$(man -l "$build/man/qkv-train.1" 2>&1)
echo "$out" | grep -q -- "--layers N" && ok || bad "qkv-train.1 lacks train lm's --layers"

# complete WORD...: what _qkv offers for the command line "WORD... " (the
# last word the one being completed), one a line, sorted.
complete_words() {
    bash -c '. "$0"; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _qkv; printf "%s\n" "${COMPREPLY[@]}"' \
        "$build/completion/qkv" "$@" | sort
}
want=$(printf '%s\n' $commands --help --version | sort)
got=$(complete_words qkv "")
[ "$got" = "$want" ] && ok || bad "completion of 'qkv ' gives [$(echo $got)], not [$(echo $want)]"
got=$(complete_words qkv tr)
[ "$got" = "$(printf 'train\ntranslate')" ] && ok || bad "completion of 'qkv tr' gives [$(echo $got)]"
want=$("$qkv" train --help | sed -n '/Kinds:/,/^  -/{/^    [a-z]/p}' | awk '{ print $1 }' | sort)
got=$(complete_words qkv train "")
[ -n "$want" ] && [ "$got" = "$want" ] && ok || bad "completion of 'qkv train ' gives [$(echo $got)], not [$(echo $want)]"
got=$(complete_words qkv train lm --la)
[ "$got" = "--layers" ] && ok || bad "completion of 'qkv train lm --la' gives [$(echo $got)]"
echo "test_man_completion: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
