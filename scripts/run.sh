#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: installs what it needs, builds bmt-train, and trains
# the tiny GPT on the built-in synthetic data with 2 MPI ranks (ZeRO-3 across them), writing
# out/tiny.jsonl (metrics), out/tiny.svg (loss curve) and checkpoints under out/ckpt.
# Extra arguments go to bmt-train (bmt-train --help lists them). Usage: scripts/run.sh [args]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/configure.sh
cmake --build build --parallel "$(nproc)" --target bmt-train
flags=(--oversubscribe)
if [ "$(id -u)" -eq 0 ]; then flags+=(--allow-run-as-root); fi
mkdir -p out
OMPI_MCA_mpi_yield_when_idle=1 mpirun -np 2 "${flags[@]}" build/apps/bmt-train/bmt-train \
  --model tiny --steps 200 --eval-every 50 --log-every 20 \
  --metrics out/tiny.jsonl --save out/ckpt --save-every 100 "$@"
