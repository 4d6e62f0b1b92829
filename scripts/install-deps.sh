#!/usr/bin/env bash
# Installs the Debian 12 packages the CPU build, tests and benchmarks need. Idempotent: packages
# already present are not fetched again, and nothing is done when all are there.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config shellcheck
  libopenmpi-dev openmpi-bin
  libtrilinos-kokkos-dev
  libopenblas-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing: ${missing[*]}"
sudo_cmd=""
if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo_cmd apt-get update -qq
$sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
