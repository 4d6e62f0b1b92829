#!/usr/bin/env bash
# Configures build/, the CPU build that scripts/test.sh and scripts/run.sh share (one configuration,
# so that running one after the other rebuilds nothing): Release at -O2, without debug information.
# -O3 (CMake's Release default) doubles the compile time of the Kokkos kernels without making the
# tests or the tiny training run faster, and debug information makes the library archive some twenty
# times larger and every link slower. For a debugger, configure another folder (docs/INSTALL.md).
# Extra arguments go to cmake. Usage: scripts/configure.sh [cmake args]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" "$@"
