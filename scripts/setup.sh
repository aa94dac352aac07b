#!/usr/bin/env bash
# Installs gnnrt's build and test dependencies from Debian's packages.
# Idempotent: skips what is installed. Run as root on Debian 12.
#   scripts/setup.sh              build + test dependencies
#   scripts/setup.sh --reference  also python3-torch (golden data, torch comparisons)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  openmpi-bin libopenmpi-dev
  libboost-dev libboost-filesystem-dev
  libprotobuf-dev protobuf-compiler
  libspdlog-dev libfmt-dev
  libopenblas-openmp-dev
  libmetis-dev
  libcli11-dev
  nlohmann-json3-dev
  librandom123-dev
  libxxhash-dev
  libsodium-dev
  libgtest-dev libgmock-dev
  libbenchmark-dev
  python3 python3-numpy python3-matplotlib
  iproute2 util-linux bsdutils   # ip netns, unshare, script: the launcher's multi-host and terminal tests
)
if [[ "${1:-}" == "--reference" ]]; then
  packages+=(python3-torch)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "setup: missing packages (${missing[*]}); run as root" >&2
  exit 1
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
