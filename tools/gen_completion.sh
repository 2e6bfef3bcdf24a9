#!/bin/sh
# gen_completion.sh QKV FILE: bash completion for qkv from the command's own
# --help: the commands that `qkv --help` lists, each command's options from
# `qkv COMMAND --help`, train's kinds and each kind's options from
# `qkv train KIND --help`; other words complete as file names. The Makefile
# writes build/completion/qkv (installed in
# PREFIX/share/bash-completion/completions/qkv); to try it:
#   . build/completion/qkv
set -e
qkv=$1; out=$2
[ -x "$qkv" ] && [ -n "$out" ] || { echo "usage: tools/gen_completion.sh QKV FILE" >&2; exit 2; }
mkdir -p "$(dirname "$out")"

commands=$("$qkv" --help | sed -n '/^commands:/,/^$/{/^  [a-z]/p}' | awk '{ print $1 }')
kinds=$("$qkv" train --help | sed -n '/Kinds:/,/^  -/{/^    [a-z]/p}' | awk '{ print $1 }')
# The options a --help text names, on one line.
options() { grep -oE -- '(^|[ ,[])--?[a-zA-Z0-9][a-zA-Z0-9-]*' | sed 's/^[ ,[]//' | sort -u | tr '\n' ' '; }

{
    echo "# bash completion for qkv, written by tools/gen_completion.sh from qkv's --help."
    echo '_qkv() {'
    echo '    local cur=${COMP_WORDS[COMP_CWORD]} words=""'
    echo '    if [ "$COMP_CWORD" -eq 1 ]; then'
    echo "        words=\"$(echo $commands) --help --version\""
    echo '    elif [ "${COMP_WORDS[1]}" = train ] && [ "$COMP_CWORD" -eq 2 ]; then'
    echo "        words=\"$(echo $kinds)\""
    echo '    elif [ "${COMP_WORDS[1]}" = help ] && [ "$COMP_CWORD" -eq 2 ]; then'
    echo "        words=\"$(echo $commands)\""
    echo '    elif [[ $cur == -* ]]; then'
    echo '        case ${COMP_WORDS[1]} in'
    for kind in $kinds; do
        echo "        train) [ \"\${COMP_WORDS[2]}\" = $kind ] && words=\"$("$qkv" train "$kind" --help | options)\" ;;&"
    done
    for cmd in $commands; do
        [ "$cmd" = train ] && continue
        echo "        $cmd) words=\"$("$qkv" "$cmd" --help | options)\" ;;"
    done
    echo '        esac'
    echo '    fi'
    echo '    if [ -n "$words" ]; then'
    echo '        COMPREPLY=($(compgen -W "$words" -- "$cur"))'
    echo '    else'
    echo '        COMPREPLY=($(compgen -f -- "$cur"))'
    echo '    fi'
    echo '}'
    echo 'complete -o filenames -F _qkv qkv'
} > "$out"
