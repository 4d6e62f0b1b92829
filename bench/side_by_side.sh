#!/usr/bin/env bash
# Side-by-side: bmt-train and PyTorch FSDP2 on the same GPU machine, same GPT-2 shapes, one after
# the other, one table: tokens/s per GPU, MFU (989 TFLOP/s, 6N + 6LCT FLOPs/token), peak memory
# per GPU, and the ratio.
#   bench/side_by_side.sh BMT_TRAIN [MODEL] [BATCH_PER_GPU] [GPUS] [STEPS]
# BMT_TRAIN: path to a CUDA build of bmt-train. Needs python3 with PyTorch (FSDP2) for the peer.
set -euo pipefail
bmt=$1; model=${2:-gpt2-1.5b}; batch=${3:-16}; gpus=${4:-$(nvidia-smi -L | wc -l)}; steps=${5:-20}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
export NCCL_NVLS_ENABLE=0
seq=1024
warmup=5

echo "# side-by-side: $model, seq $seq, batch $batch per GPU, $gpus GPU(s), bf16, per-block recompute; $(date -u +%FT%TZ)"
python3 -m torch.distributed.run --standalone --nproc_per_node="$gpus" "$here/peers/fsdp2_gpt.py" \
  --model "$model" --batch "$batch" --seq "$seq" --steps "$steps" --warmup "$warmup" > "$out/fsdp2.json" 2> "$out/fsdp2.log" \
  || { echo "FSDP2 run failed:"; tail -20 "$out/fsdp2.log"; }
mpirun --allow-run-as-root --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH -np "$gpus" "$bmt" --no-progress \
  --model "$model" --dtype bf16 --batch $((batch * gpus)) --seq "$seq" --steps $((steps + warmup)) --warmup 2 \
  --log-every 5 --metrics "$out/bmt.jsonl" > "$out/bmt.log" 2>&1 \
  || { echo "bmt-train run failed:"; tail -20 "$out/bmt.log"; }

python3 - "$out" "$gpus" "$warmup" <<'PY'
import json, statistics, sys
out, gpus, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = []
try:
    f = json.loads(open(f"{out}/fsdp2.json").read().strip().splitlines()[-1])
    rows.append(("pytorch-fsdp2", f["tokens_per_s_per_gpu"], f["mfu"], f["peak_mem_gib"]))
except Exception as e:
    rows.append(("pytorch-fsdp2", None, None, None))
try:
    m = [json.loads(l) for l in open(f"{out}/bmt.jsonl")][warmup:]
    tps = statistics.median(x["tokens_per_s"] for x in m) / gpus
    mfu = statistics.median(x["mfu"] for x in m) if m[0]["mfu"] is not None else None
    mem = max(x["mem_peak_bytes"] for x in m) / 2**30
    rows.append(("bmt-train", tps, mfu, mem))
except Exception as e:
    rows.append(("bmt-train", None, None, None))
fmt = lambda v, f: "-" if v is None else f.format(v)
print(f"{'system':<15} {'tokens/s/GPU':>13} {'MFU':>7} {'peak GiB/GPU':>13}")
for name, tps, mfu, mem in rows:
    print(f"{name:<15} {fmt(tps, '{:13.0f}')} {fmt(mfu and mfu * 100, '{:6.1f}%')} {fmt(mem, '{:13.1f}')}")
if rows[0][1] and rows[1][1]:
    print(f"ratio bmt/fsdp2: tokens/s {rows[1][1] / rows[0][1]:.2f}x, memory {rows[1][3] / rows[0][3]:.2f}x")
PY
cp "$out"/* "${OUT:-/tmp}/" 2>/dev/null || true
