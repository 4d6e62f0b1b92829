#!/usr/bin/env bash
# A 6.65B-parameter GPT-2 shape on one GPU in one call: 32 blocks, width 4096, 32 heads, MLP 16384,
# vocab 50304, bf16, seq 1024, per-block recompute. The rows, each a short bench/side_by_side.sh run:
#   plain      FSDP2 and bmt-train, batch 8
#   offload    FSDP2 with CPUOffloadPolicy and bmt-train --offload, batch 8
#   offload32  bmt-train --offload, batch 32 in micro-batches of 8
#   plain32    bmt-train, batch 32 in micro-batches of 8
#   delayed    bmt-train --offload --offload-delayed, batch 8 (only if time is left)
# then one table (bench/big_model_table.py): step s, tokens/s, MFU and peak GiB of each system in
# each row, and the pairs held to the targets (bmt-train against FSDP2 without and with offload,
# the offload's overhead over the on-GPU step, offload at batch 32 against no offload).
#   bench/big_model.sh BMT_TRAIN [OUT]
# BMT_TRAIN: a CUDA build of bmt-train; python3 with PyTorch for FSDP2. OUT (default: a new
# temporary directory) keeps every row's raw records and output. The runs are short (a warmup step
# or two, then two or three measured ones), and every run gets a time limit from what is left of
# BUDGET seconds (default 450), so the call ends within 8 minutes; a row that ran out of time is
# shown as missing.
set -euo pipefail
bmt=$1
out=${2:-$(mktemp -d)}
budget=${BUDGET:-450}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
start=$SECONDS
shape=(LAYERS=32 DIM=4096 HEADS=32 FFN=16384 VOCAB=50304)

# row NAME SYSTEMS BATCH STEPS WARMUP LIMIT [VAR=VALUE...]: one side_by_side.sh call into OUT/NAME,
# each of its SYSTEMS (1 or 2) runs limited to LIMIT seconds or an even share of what is left.
row() {
  local name=$1 systems=$2 batch=$3 steps=$4 warmup=$5 limit=$6; shift 6
  local left=$((budget - (SECONDS - start)))
  local each=$((left / systems))
  [ "$each" -lt "$limit" ] || each=$limit
  if [ "$each" -lt 30 ]; then
    echo "$name: skipped, $left s of the budget left"
    return
  fi
  printf 'batch=%s\nwarmup=%s\nsystems=%s\n' "$batch" "$warmup" "$systems" > "$out/$name.meta"
  echo "$name: batch $batch, $steps steps after $warmup warmup, at most $each s a system ($*)"
  env "${shape[@]}" WARMUP="$warmup" RUN_TIMEOUT="$each" OUT="$out/$name" "$@" \
    bash "$here/side_by_side.sh" "$bmt" gpt2-1.5b "$batch" 1 "$steps" 1 > "$out/$name.txt" 2>&1 \
    || echo "$name: side_by_side.sh failed (see $out/$name.txt)"
}

echo "# big model: GPT-2 shape, 32 blocks, width 4096, 32 heads, MLP 16384, vocab 50304 (6.65B parameters), bf16, seq 1024, 1 GPU; $(date -u +%FT%TZ)"
row plain 2 8 3 2 100
row offload 2 8 2 1 150 PEER_OFFLOAD=1 BMT_OFFLOAD=1
row offload32 1 32 2 1 120 PEER=none BMT_OFFLOAD=1 MICRO_BATCH=8
row plain32 1 32 2 1 90 PEER=none MICRO_BATCH=8
row delayed 1 8 3 2 100 PEER=none BMT_OFFLOAD=delayed
python3 "$here/big_model_table.py" "$out"
echo "raw records: $out ($((SECONDS - start)) s)"
