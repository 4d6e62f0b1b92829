#!/usr/bin/env bash
# bmt-train against transformers on checkpoints transformers wrote (bench/hf_check.py): a GPT-2 and
# two Llamas with grouped-query attention, bf16 and f32, loaded with --init-from and evaluated
# with --eval-only, then trained a few steps and exported with --export-hf for transformers to
# load; one table of losses and logits against the tolerances (2e-3 bf16, 1e-5 f32).
#   bench/hf_check.sh BMT_TRAIN [LAUNCHER]
# BMT_TRAIN: a built bmt-train (CUDA build on a GPU machine). LAUNCHER: e.g. "mpirun -np 2
# --allow-run-as-root" (default: one process). Needs python3 with torch, transformers, safetensors
# and numpy; no network. OUT=DIR keeps the checkpoints and bmt-train's log there.
set -euo pipefail
bmt=$1; launcher=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
python3 -c 'import torch, transformers, safetensors, numpy' \
  || { echo "hf_check.sh: needs python3 with torch, transformers, safetensors and numpy" >&2; exit 2; }
work=${OUT:-$(mktemp -d)}
export NCCL_NVLS_ENABLE=0
exec python3 "$here/hf_check.py" --bmt-train "$bmt" --launcher "$launcher" --work "$work"
