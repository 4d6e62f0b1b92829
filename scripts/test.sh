#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: installs what it needs, builds the CPU build
# in build/ (reused when present), runs every test. Usage: scripts/test.sh [extra ctest args]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/configure.sh
cmake --build build --parallel "$(nproc)"
# Oversubscribed MPI tests must not spin: let idle ranks yield the core.
export OMPI_MCA_mpi_yield_when_idle=1
# Tests run side by side, an MPI test counting its ranks against the limit (PROCESSORS). Their
# processes spend much of their time waiting (MPI start-up, a peer's collective, a job that must
# end), so the limit is three times the cores; on 2 cores a test at 4 ranks then runs beside a test
# at 2 rather than alone.
jobs=$(( $(nproc) * 3 ))
# Long-running tests carry the label "stress" and are left out here; run them with
#   ctest --test-dir build -L stress --output-on-failure
ctest --test-dir build --output-on-failure --timeout 900 --parallel "$jobs" -LE stress "$@"
