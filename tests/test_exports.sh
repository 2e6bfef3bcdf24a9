#!/bin/sh
# test_exports.sh BUILD: the shared libraries export exactly the functions
# include/ declares (docs/core.md, "The shared library: what it exports"):
# `nm -D --defined-only` of BUILD/libqkv.so against the declarations of
# include/qkv.h and include/qkv/*.h but plot.h, and of BUILD/libqkv-plot.so
# against include/qkv/plot.h, both ways; each name that differs is printed.
# Also each library's SONAME (lib*.so.MAJOR, MAJOR from QKV_VERSION) and its
# links. The declarations are listed by the compiler (gcc -aux-info), so one
# written without QKV_API shows as declared but not exported.
# BUILD/tests/test_exports runs this on BUILD (the Makefile writes it).
h_name=test_exports; . "$(dirname "$0")/harness.sh"

# The functions of include/ declared in files that match (or with -v, do not
# match) the grep pattern given, one name a line, sorted.
declared() {
    echo '#include "qkv.h"' > "$tmp/all.c"
    for h in "$root"/include/qkv/*.h; do echo "#include \"qkv/${h##*/}\""; done >> "$tmp/all.c"
    gcc -std=c11 -I"$root/include" -fsyntax-only -aux-info "$tmp/aux.txt" "$tmp/all.c" || return 1
    grep '^/\* [^ ]*include/qkv' "$tmp/aux.txt" | grep "$@" |
        sed -E 's/^[^(]*[ *]([A-Za-z_][A-Za-z0-9_]*) \(.*/\1/' | sort -u
}

# compare LIB GREP-ARGS...: the library's defined dynamic symbols against the
# declarations of the headers chosen.
compare() {
    lib=$1; shift
    name=$(basename "$lib")
    if ! declared "$@" > "$tmp/decl"; then bad "$name: the headers do not compile"; return; fi
    if ! nm -D --defined-only "$lib" > "$tmp/nm"; then bad "$name: nm -D failed"; return; fi
    awk '{ print $NF }' "$tmp/nm" | sort -u > "$tmp/exp"
    echo "$name: $(wc -l < "$tmp/exp") exported, $(wc -l < "$tmp/decl") declared"
    extra=$(comm -23 "$tmp/exp" "$tmp/decl")
    missing=$(comm -13 "$tmp/exp" "$tmp/decl")
    if [ -n "$extra" ]; then
        for s in $extra; do bad "$name exports $s, which include/ does not declare"; done
    else ok; fi
    if [ -n "$missing" ]; then
        for s in $missing; do bad "$name does not export $s, declared in include/"; done
    else ok; fi
    [ "$(wc -l < "$tmp/decl")" -gt 0 ] && ok || bad "$name: no declarations found"
}

# soname LIB: BUILD/LIB.so -> LIB.so.MAJOR -> LIB.so.VERSION, SONAME LIB.so.MAJOR.
soname() {
    version=$(sed -n 's/^#define QKV_VERSION "\(.*\)"/\1/p' "$root/include/qkv.h")
    major=${version%%.*}
    so=$(readelf -d "$build/$1.so" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
    [ "$so" = "$1.so.$major" ] && ok || bad "$1.so: SONAME '$so', not $1.so.$major"
    [ "$(readlink "$build/$1.so")" = "$1.so.$major" ] && \
        [ "$(readlink "$build/$1.so.$major")" = "$1.so.$version" ] && [ -f "$build/$1.so.$version" ] && ok ||
        bad "$1.so: not the links $1.so -> $1.so.$major -> $1.so.$version"
}

compare "$build/libqkv.so" -v 'include/qkv/plot\.h:'
compare "$build/libqkv-plot.so" 'include/qkv/plot\.h:'
soname libqkv
soname libqkv-plot
finish
