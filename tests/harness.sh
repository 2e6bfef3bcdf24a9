# harness.sh: what the shell tests (tests/test_*.sh) share, sourced as
# `h_name=NAME; . "$(dirname "$0")/harness.sh"`: $root (the repository),
# $build (the test's first argument, or root/build), ok and bad (bad prints
# "FAIL tests/NAME.sh: ..."), $tmp (a fresh folder removed on exit) and
# finish, which prints "NAME: N passed, M failed" and gives the status.
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL tests/$h_name.sh: $*"; fail=$((fail + 1)); }
tmp=$(mktemp -d "/tmp/qkv_${h_name}_XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
finish() {
    echo "$h_name: $pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}
