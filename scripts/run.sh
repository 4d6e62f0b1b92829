#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: installs what it needs, builds, and runs a 2-rank MPI
# job. Extra arguments go to the program. Usage: scripts/run.sh [args]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build --parallel "$(nproc)" --target hello_distributed
flags=(--oversubscribe)
if [ "$(id -u)" -eq 0 ]; then flags+=(--allow-run-as-root); fi
mpirun -np 2 "${flags[@]}" build/examples/hello_distributed "$@"
