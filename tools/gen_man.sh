#!/bin/sh
# gen_man.sh QKV MANDIR: man pages from the command's own --help, so that
# they say what `--help` says: MANDIR/qkv.1 from `qkv --help`, and
# MANDIR/qkv-COMMAND.1 from `qkv COMMAND --help` for each command that
# `qkv --help` lists; qkv-train.1 also has each kind's options
# (`qkv train KIND --help`). The Makefile runs it into build/man/:
#   man -l build/man/qkv-train.1
set -e
qkv=$1; dir=$2
[ -x "$qkv" ] && [ -n "$dir" ] || { echo "usage: tools/gen_man.sh QKV MANDIR" >&2; exit 2; }
mkdir -p "$dir"
version=$("$qkv" --version | sed 's/^qkv //')

# The commands, "NAME DESCRIPTION" a line, from the "commands:" block.
commands() { "$qkv" --help | sed -n '/^commands:/,/^$/{/^  [a-z]/p}' | sed 's/^  //'; }
# train's kinds, one a line, from the "Kinds:" block of `qkv train --help`.
kinds() { "$qkv" train --help | sed -n '/Kinds:/,/^  -/{/^    [a-z]/p}' | awk '{ print $1 }'; }
# Text as roff lines kept as they are: backslashes escaped, no line taken
# for a request.
verbatim() { printf '.nf\n'; sed -e 's/\\/\\e/g' -e "s/^[.']/\\\\\&&/"; printf '.fi\n'; }

# page FILE TITLE NAME SUMMARY HELP-TEXT-FILE: one page, the usage's first
# line as the synopsis, the whole text as the description.
page() {
    {
        printf '.TH %s 1 "" "qkv %s" "qkv manual"\n' "$2" "$version"
        printf '.SH NAME\n%s \\- %s\n' "$3" "$4"
        printf '.SH SYNOPSIS\n'; head -n 1 "$5" | sed 's/^usage: *//' | verbatim
        printf '.SH DESCRIPTION\n'; verbatim < "$5"
    } > "$1"
}

tmp=$(mktemp) && trap 'rm -f "$tmp"' EXIT
"$qkv" --help > "$tmp"
page "$dir/qkv.1" QKV qkv "attention and transformer models in C" "$tmp"
printf '.SH "SEE ALSO"\n' >> "$dir/qkv.1"
commands | awk '{ printf "%sqkv-%s(1)", (NR > 1 ? ", " : ""), $1 } END { print "" }' >> "$dir/qkv.1"
commands | while read -r cmd summary; do
    "$qkv" "$cmd" --help > "$tmp"
    page "$dir/qkv-$cmd.1" "QKV-$(echo "$cmd" | tr a-z A-Z)" "qkv-$cmd" "$summary" "$tmp"
    if [ "$cmd" = train ]; then
        for kind in $(kinds); do
            printf '.SS "qkv train %s"\n' "$kind" >> "$dir/qkv-train.1"
            "$qkv" train "$kind" --help | verbatim >> "$dir/qkv-train.1"
        done
    fi
    printf '.SH "SEE ALSO"\nqkv(1)\n' >> "$dir/qkv-$cmd.1"
done
