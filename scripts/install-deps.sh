#!/usr/bin/env bash
# Installs the Debian packages tfckpt needs to build and test, skipping any already present.
# Usage: scripts/install-deps.sh        (run as root, or with sudo available)
set -euo pipefail

packages=(
  build-essential meson ninja-build pkg-config
  libcli11-dev nlohmann-json3-dev libabsl-dev
  libprotobuf-dev protobuf-compiler
  libcurl4-openssl-dev libssl-dev libpugixml-dev
  doctest-dev libleveldb-dev libisal-dev libsnappy-dev libzip-dev zlib1g-dev libre2-dev
  python3 python3-numpy time
  zsh fish strace
  python3-dev pybind11-dev python3-torch
  clang libclang-rt-14-dev
  ccache debootstrap file
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  sudo_cmd=(sudo)
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
