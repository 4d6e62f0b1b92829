#!/usr/bin/env bash
# Side-by-side: bmt-train and PyTorch FSDP2 on the same GPU machine, same GPT-2 shapes, one after
# the other, one table: tokens/s per GPU, MFU (989 TFLOP/s, 6N + 6LCT FLOPs/token), peak memory
# per GPU, the mean SM clock and power of GPU 0 while it was busy, the energy that power spends per
# 1,000 tokens of one GPU, and the ratio (of the medians, and of each round's pair).
#   bench/side_by_side.sh BMT_TRAIN [MODEL] [BATCH_PER_GPU] [GPUS] [STEPS] [ROUNDS]
# BMT_TRAIN: path to a CUDA build of bmt-train. Needs python3 with PyTorch (FSDP2) for the peer.
# ROUNDS (default 1) runs the pair that many times, alternating which goes first; the table gives
# each system's median over the rounds and every round's value, since one run of either can be
# off by 10% on these machines. Both run at the GPU's power limit most of the time: the clock
# column says how far that pulled the clock down.
# Both recompute every block by default (bmt-train --recompute full, FSDP2 per-block checkpointing);
# BMT_ARGS with --recompute or --no-checkpointing decide bmt-train's side instead, and the header
# then says FSDP2's alone recomputes per block.
# RECOMPUTE=0 runs both without activation recomputation (bmt-train --no-checkpointing, FSDP2
# --no-checkpoint): each keeps every block's activations, as fits in an H200's memory up to GPT-2 XL.
# KEEP_ATTENTION=1 runs bmt-train with --keep-attention (its recompute reuses each block's attention
# output from forward instead of running attention again; more memory), and the header says so.
# KEEP_RESIDUAL=1 runs bmt-train with --keep-residual (its recompute reuses each block's attention
# residual sum from forward, which also skips the attention projection's GEMM; more memory), and
# the header says so.
# KEEP_BLOCKS=N runs bmt-train with --keep-blocks N (its last N blocks keep their activations
# instead of recomputing them; more memory), and the header says so.
# OUT=DIR keeps the raw records of every round there (fsdp2.R.json, bmt.R.jsonl, *.smi, *.log);
# without it they stay in a fresh temporary directory. The last line names where they are. Raw
# records do not go into the repository: bench/RESULTS.md holds the table (bench/results/ is
# ignored, for records kept next to a checkout).
# GEMM_AUTOTUNE=1 runs bmt-train with BMT_GEMM_AUTOTUNE=1 (each large GEMM's cuBLASLt candidates
# timed on first use; PyTorch keeps cuBLAS's heuristic choice), and the header says so.
# LAYERS, DIM, HEADS, FFN, VOCAB override MODEL's shape in both systems (bmt-train's --layers ...,
# fsdp2_gpt.py's same flags), and the header names the shape: any GPT-2-shaped model.
# PEER_OFFLOAD=1 runs FSDP2 with CPUOffloadPolicy (parameters, gradients and optimizer state in host
# memory). BMT_OFFLOAD=1 runs bmt-train with --offload, BMT_OFFLOAD=delayed with --offload
# --offload-delayed. MICRO_BATCH=N runs bmt-train with --micro-batch N (sequences per rank per
# forward; FSDP2 takes the whole batch in one). PEER=none runs bmt-train alone.
# PEER=hf-llama runs FSDP2 on transformers' LlamaForCausalLM (bench/peers/fsdp2_hf_llama.py: sdpa
# attention, fully_shard per decoder layer, transformers' per-layer checkpointing) for the released
# Llama presets (MODEL tinyllama-1.1b, llama3.2-1b, llama2-7b or llama3-8b); it needs transformers.
# SEQ=N (default 1024): tokens per sequence in both systems.
# BMT_ARGS="..." adds these bmt-train flags (e.g. --loss-chunk 2048), and the header names them.
# WARMUP=N (default 5): steps each system runs before the measured ones (and the table skips).
# RUN_TIMEOUT=S ends each system's run after S seconds (it then shows as failed in the table).
set -euo pipefail
bmt=$1; model=${2:-gpt2-1.5b}; batch=${3:-16}; gpus=${4:-$(nvidia-smi -L | wc -l)}; steps=${5:-20}; rounds=${6:-1}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
export NCCL_NVLS_ENABLE=0
seq=${SEQ:-1024}
warmup=${WARMUP:-5}
shape_flags=(); shape=""
for dim in LAYERS DIM HEADS FFN VOCAB; do
  value=${!dim:-}
  [ -n "$value" ] || continue
  flag=$(echo "$dim" | tr '[:upper:]' '[:lower:]')
  shape_flags+=(--"$flag" "$value"); shape="$shape${shape:+, }$flag $value"
done
[ -n "$shape" ] && model_text="$model shape ($shape)" || model_text=$model
if [ "${RECOMPUTE:-1}" = 0 ]; then
  mode="no recompute"; fsdp2_flags=(--no-checkpoint); bmt_flags=(--no-checkpointing)
elif [[ " ${BMT_ARGS:-} " =~ \ --(no-checkpointing|recompute)\  ]]; then
  # bmt-train's own recompute flags decide its side.
  mode="FSDP2 per-block recompute"; fsdp2_flags=(); bmt_flags=()
else
  mode="per-block recompute"; fsdp2_flags=(); bmt_flags=(--recompute full)
fi
if [ "${PEER_OFFLOAD:-0}" = 1 ]; then
  mode="$mode, FSDP2 with CPUOffloadPolicy"; fsdp2_flags+=(--cpu-offload)
fi
case "${BMT_OFFLOAD:-0}" in
  0) ;;
  1) mode="$mode, bmt-train --offload"; bmt_flags+=(--offload) ;;
  delayed) mode="$mode, bmt-train --offload --offload-delayed"; bmt_flags+=(--offload --offload-delayed) ;;
  *) echo "BMT_OFFLOAD: expected 0, 1 or delayed, found '$BMT_OFFLOAD'" >&2; exit 2 ;;
esac
if [ -n "${MICRO_BATCH:-}" ]; then
  mode="$mode, bmt-train micro-batch $MICRO_BATCH"; bmt_flags+=(--micro-batch "$MICRO_BATCH")
fi
peer=${PEER:-fsdp2}
case "$peer" in
  fsdp2) peer_script=fsdp2_gpt.py ;;
  hf-llama)
    peer_script=fsdp2_hf_llama.py; mode="$mode, FSDP2 on transformers' LlamaForCausalLM"
    [ -z "$shape" ] || { echo "PEER=hf-llama: expected a released preset's shape, found overrides ($shape)" >&2; exit 2; } ;;
  none) mode="$mode, bmt-train alone" ;;
  *) echo "PEER: expected fsdp2, hf-llama or none, found '$peer'" >&2; exit 2 ;;
esac
if [ "${KEEP_ATTENTION:-0}" = 1 ]; then
  mode="$mode, bmt-train keeps attention outputs"; bmt_flags+=(--keep-attention)
fi
if [ "${KEEP_RESIDUAL:-0}" = 1 ]; then
  mode="$mode, bmt-train keeps residual sums"; bmt_flags+=(--keep-residual)
fi
if [ "${KEEP_BLOCKS:-0}" != 0 ]; then
  mode="$mode, bmt-train keeps the last $KEEP_BLOCKS block(s)' activations"; bmt_flags+=(--keep-blocks "$KEEP_BLOCKS")
fi
if [ -n "${BMT_ARGS:-}" ]; then
  read -r -a extra <<< "$BMT_ARGS"
  mode="$mode, bmt-train $BMT_ARGS"; bmt_flags+=("${extra[@]}")
fi
limit=()
[ -n "${RUN_TIMEOUT:-}" ] && limit=(timeout -k 10 "$RUN_TIMEOUT")
bmt_env=()
if [ "${GEMM_AUTOTUNE:-0}" = 1 ]; then
  mode="$mode, bmt-train GEMMs autotuned"; bmt_env=(-x BMT_GEMM_AUTOTUNE=1)
fi

# Runs "$@" while sampling GPU 0's SM clock (MHz) and power (W) every 250 ms into $1.smi.
sampled() {
  local name=$1; shift
  nvidia-smi -i 0 --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 250 > "$out/$name.smi" 2>/dev/null &
  local smi=$!
  "${limit[@]}" "$@" || true
  kill "$smi" 2>/dev/null || true
  wait "$smi" 2>/dev/null || true
}
run_fsdp2() {
  sampled "fsdp2.$1" python3 -m torch.distributed.run --standalone --nproc_per_node="$gpus" "$here/peers/$peer_script" \
    --model "$model" "${shape_flags[@]}" --batch "$batch" --seq "$seq" --steps "$steps" --warmup "$warmup" \
    "${fsdp2_flags[@]}" \
    > "$out/fsdp2.$1.json" 2> "$out/fsdp2.$1.log"
  [ -s "$out/fsdp2.$1.json" ] || { echo "FSDP2 run $1 failed:"; tail -20 "$out/fsdp2.$1.log"; }
}
run_bmt() {
  sampled "bmt.$1" mpirun --allow-run-as-root --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH "${bmt_env[@]}" -np "$gpus" "$bmt" \
    --no-progress --model "$model" "${shape_flags[@]}" --dtype bf16 --batch $((batch * gpus)) --seq "$seq" \
    --steps $((steps + warmup)) \
    --warmup 2 --log-every 5 --metrics "$out/bmt.$1.jsonl" "${bmt_flags[@]}" > "$out/bmt.$1.log" 2>&1
  [ -s "$out/bmt.$1.jsonl" ] || { echo "bmt-train run $1 failed:"; tail -20 "$out/bmt.$1.log"; }
}

echo "# side-by-side: $model_text, seq $seq, batch $batch per GPU, $gpus GPU(s), bf16, $mode, $rounds round(s); $(date -u +%FT%TZ)"
for r in $(seq 1 "$rounds"); do
  if [ "$peer" = none ]; then run_bmt "$r"
  elif [ $((r % 2)) -eq 1 ]; then run_fsdp2 "$r"; run_bmt "$r"; else run_bmt "$r"; run_fsdp2 "$r"; fi
done

python3 "$here/side_by_side_table.py" "$out" "$gpus" "$warmup" "$rounds"
# The raw records (each round's JSON, --metrics lines, nvidia-smi samples and logs) go to OUT when
# it is set; otherwise they stay where they were written.
dest=$out
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT" && cp "$out"/* "$OUT/" && dest=$OUT; fi
echo "raw records: $dest"
