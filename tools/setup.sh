#!/bin/sh
# Installs what qkv needs from Debian's archive (as root, or through sudo).
#   tools/setup.sh          build dependencies: compiler, make, pkg-config, OpenBLAS,
#                           Cairo and the DejaVu fonts (figures)
#   tools/setup.sh --test   also the test oracle, Debian's PyTorch (python3-torch),
#                           and Debian's chromium (the attention explorer's browser test)
set -e
pkgs="build-essential pkg-config libopenblas-dev libcairo2-dev fonts-dejavu-core"
[ "$1" = "--test" ] && pkgs="$pkgs python3-torch python3-numpy chromium"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
echo "setup: installing$missing"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
