#!/usr/bin/env bash
# bench/side_by_side.sh end to end with stand-ins for nvidia-smi, mpirun and torch.distributed.run
# (each records its arguments and writes a made-up run): the flags each system gets with and
# without RECOMPUTE=0, GEMM_AUTOTUNE=1 and KEEP_BLOCKS=N, a shape (LAYERS ... VOCAB), the peer's
# and bmt-train's offload, MICRO_BATCH, PEER=none, PEER=hf-llama with SEQ and BMT_ARGS, RUN_TIMEOUT, the header's mode,
# rounds alternating which system goes first, and a table. Output is matched from here-strings, not pipes.
set -euo pipefail
real_python=$(command -v python3) || { echo "python3 not found: skipped"; exit 77; }
driver="$(cd "$(dirname "$0")/../../bench" && pwd)/side_by_side.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; echo "$out"; exit 1; }
mkdir -p "$work/bin"

cat > "$work/bin/nvidia-smi" <<'STUB'
#!/usr/bin/env bash
if [ "${1:-}" = -L ]; then echo "GPU 0: stand-in"; exit 0; fi
echo "1800, 600"
exec sleep 30  # sampling until the driver stops it
STUB
cat > "$work/bin/mpirun" <<'STUB'
#!/usr/bin/env bash
echo "bmt $*" >> "$STAND_IN_LOG"
[ -n "${STAND_IN_SLEEP:-}" ] && exec sleep "$STAND_IN_SLEEP"
while [ $# -gt 0 ]; do [ "$1" = --metrics ] && metrics=$2; shift; done
for step in 1 2 3 4 5 6 7 8; do echo '{"tokens_per_s": 40000, "mfu": 0.3, "mem_peak_bytes": 10737418240}'; done > "$metrics"
STUB
cat > "$work/bin/python3" <<STUB
#!/usr/bin/env bash
if [ "\${1:-}" = -m ] && [ "\${2:-}" = torch.distributed.run ]; then
  echo "fsdp2 \$*" >> "\$STAND_IN_LOG"
  echo '{"tokens_per_s_per_gpu": 32000, "mfu": 0.25, "peak_mem_gib": 20.0}'
  exit 0
fi
exec "$real_python" "\$@"
STUB
chmod +x "$work/bin"/*
export PATH="$work/bin:$PATH" STAND_IN_LOG="$work/calls"

out=$(OUT="$work/out1" bash "$driver" /opt/bmt-train gpt2-124m 4 1 3 2)
grep -q '^# side-by-side: gpt2-124m, seq 1024, batch 4 per GPU, 1 GPU(s), bf16, per-block recompute, 2 round(s)' <<< "$out" ||
  fail "header with recompute"
grep -Eq '^bmt-train +40000 ' <<< "$out" || fail "bmt-train row"
grep -Eq '^pytorch-fsdp2 +32000 ' <<< "$out" || fail "fsdp2 row"
grep -q '^ratio bmt/fsdp2: tokens/s 1.25x' <<< "$out" || fail "ratio"
grep -q "^raw records: $work/out1\$" <<< "$out" || fail "where the raw records are"
for f in fsdp2.1.json fsdp2.2.json bmt.1.jsonl bmt.2.jsonl; do [ -s "$work/out1/$f" ] || fail "raw record $f not in OUT"; done
order=$(cut -d' ' -f1 "$work/calls" | tr '\n' ' ')
[ "$order" = "fsdp2 bmt bmt fsdp2 " ] || fail "round order: $order"
grep -q -- '--no-checkpoint' "$work/calls" && fail "no-checkpoint flags without RECOMPUTE=0: $(cat "$work/calls")"
grep '^bmt ' "$work/calls" | grep -q -- '--batch 4 .*--steps 8 ' || fail "bmt-train's batch and steps: $(cat "$work/calls")"

: > "$work/calls"
out=$(RECOMPUTE=0 OUT="$work/out2" bash "$driver" /opt/bmt-train gpt2-124m 4 1 3 1)
grep -q ', bf16, no recompute, 1 round(s)' <<< "$out" || fail "header without recompute"
grep '^bmt ' "$work/calls" | grep -q -- ' --no-checkpointing' || fail "bmt-train without --no-checkpointing: $(cat "$work/calls")"
grep '^fsdp2 ' "$work/calls" | grep -q -- ' --no-checkpoint$' || fail "FSDP2 without --no-checkpoint: $(cat "$work/calls")"
grep -q 'BMT_GEMM_AUTOTUNE' "$work/calls" && fail "GEMM autotune without GEMM_AUTOTUNE=1: $(cat "$work/calls")"

: > "$work/calls"
out=$(GEMM_AUTOTUNE=1 OUT="$work/out3" bash "$driver" /opt/bmt-train gpt2-124m 4 1 3 1)
grep -q ', bf16, per-block recompute, bmt-train GEMMs autotuned, 1 round(s)' <<< "$out" || fail "header with autotune"
grep '^bmt ' "$work/calls" | grep -q -- '-x BMT_GEMM_AUTOTUNE=1 -np 1 ' || fail "bmt-train without BMT_GEMM_AUTOTUNE=1: $(cat "$work/calls")"
grep '^fsdp2 ' "$work/calls" | grep -q 'AUTOTUNE' && fail "FSDP2 given the autotune switch: $(cat "$work/calls")"

: > "$work/calls"
out=$(KEEP_BLOCKS=2 OUT="$work/out4" bash "$driver" /opt/bmt-train gpt2-124m 4 1 3 1)
grep -q ", per-block recompute, bmt-train keeps the last 2 block(s)' activations, 1 round(s)" <<< "$out" ||
  fail "header with kept blocks"
grep '^bmt ' "$work/calls" | grep -q -- ' --keep-blocks 2' || fail "bmt-train without --keep-blocks 2: $(cat "$work/calls")"
grep '^fsdp2 ' "$work/calls" | grep -q -- ' --keep' && fail "FSDP2 given the kept blocks: $(cat "$work/calls")"
# Any shape for both systems, each system's offload, bmt-train's micro-batches.
: > "$work/calls"
out=$(LAYERS=32 DIM=4096 HEADS=32 FFN=16384 VOCAB=50304 PEER_OFFLOAD=1 BMT_OFFLOAD=1 MICRO_BATCH=2 WARMUP=1 \
      OUT="$work/out5" bash "$driver" /opt/bmt-train gpt2-1.5b 4 1 3 1)
grep -q '^# side-by-side: gpt2-1.5b shape (layers 32, dim 4096, heads 32, ffn 16384, vocab 50304), seq 1024' <<< "$out" ||
  fail "header with the shape"
grep -q 'FSDP2 with CPUOffloadPolicy, bmt-train --offload, bmt-train micro-batch 2, 1 round(s)' <<< "$out" ||
  fail "header with the offloads"
for who in bmt fsdp2; do
  grep "^$who " "$work/calls" | grep -q -- '--model gpt2-1.5b --layers 32 --dim 4096 --heads 32 --ffn 16384 --vocab 50304 ' ||
    fail "$who without the shape: $(cat "$work/calls")"
done
grep '^fsdp2 ' "$work/calls" | grep -q -- ' --warmup 1 --cpu-offload$' || fail "FSDP2 without CPUOffloadPolicy: $(cat "$work/calls")"
grep '^bmt ' "$work/calls" | grep -q -- '--steps 4 .* --offload --micro-batch 2$' ||
  fail "bmt-train without --offload --micro-batch 2: $(cat "$work/calls")"
grep '^fsdp2 ' "$work/calls" | grep -q -- '--offload\|--micro-batch' && fail "FSDP2 given bmt-train's flags: $(cat "$work/calls")"

# bmt-train alone, with the delayed update; a run past RUN_TIMEOUT is ended and shows as failed.
: > "$work/calls"
out=$(PEER=none BMT_OFFLOAD=delayed OUT="$work/out6" bash "$driver" /opt/bmt-train gpt2-124m 4 1 3 1)
grep -q '^fsdp2 ' "$work/calls" && fail "PEER=none ran FSDP2: $(cat "$work/calls")"
grep '^bmt ' "$work/calls" | grep -q -- ' --offload --offload-delayed$' || fail "bmt-train without the delayed update"
grep -q ', bmt-train --offload --offload-delayed, bmt-train alone, 1 round(s)' <<< "$out" || fail "header, bmt-train alone"
grep -Eq '^bmt-train +40000 ' <<< "$out" || fail "bmt-train row alone"
start=$SECONDS
out=$(PEER=none RUN_TIMEOUT=2 STAND_IN_SLEEP=60 OUT="$work/out7" bash "$driver" /opt/bmt-train gpt2-124m 4 1 3 1)
[ $((SECONDS - start)) -lt 30 ] || fail "RUN_TIMEOUT=2 took $((SECONDS - start)) s"
grep -q 'bmt-train run 1 failed' <<< "$out" || fail "a run past RUN_TIMEOUT not reported failed"
out=$(BMT_OFFLOAD=yes bash "$driver" /opt/bmt-train gpt2-124m 4 1 3 1 2>&1) && fail "BMT_OFFLOAD=yes accepted"
grep -q "BMT_OFFLOAD: expected 0, 1 or delayed, found 'yes'" <<< "$out" || fail "BMT_OFFLOAD=yes: $out"

# The released Llama shapes against FSDP2 on transformers' Llama, at another sequence length, with
# more bmt-train flags; a shape override is refused there (the peer builds the preset as released).
: > "$work/calls"
out=$(PEER=hf-llama SEQ=2048 BMT_ARGS="--loss-chunk 2048 --kv-heads 8" OUT="$work/out8" \
      bash "$driver" /opt/bmt-train llama3.2-1b 4 1 3 1)
grep -q '^# side-by-side: llama3.2-1b, seq 2048, .*FSDP2 on transformers.* LlamaForCausalLM, bmt-train --loss-chunk 2048 --kv-heads 8, 1 round(s)' <<< "$out" ||
  fail "header with the transformers peer"
grep '^fsdp2 ' "$work/calls" | grep -q -- 'peers/fsdp2_hf_llama.py --model llama3.2-1b --batch 4 --seq 2048 ' ||
  fail "FSDP2 on transformers' Llama: $(cat "$work/calls")"
grep '^bmt ' "$work/calls" | grep -q -- '--model llama3.2-1b --dtype bf16 --batch 4 --seq 2048 .* --loss-chunk 2048 --kv-heads 8$' ||
  fail "bmt-train at seq 2048 with BMT_ARGS: $(cat "$work/calls")"
grep '^fsdp2 ' "$work/calls" | grep -q -- '--loss-chunk' && fail "FSDP2 given BMT_ARGS: $(cat "$work/calls")"
# bmt-train's own recompute flags in BMT_ARGS decide its side: no --recompute full beside them,
# and the header says only FSDP2 recomputes per block; without them bmt-train recomputes in full.
grep '^bmt ' "$work/calls" | grep -q -- '--recompute full' || fail "bmt-train not given --recompute full: $(cat "$work/calls")"
: > "$work/calls"
out=$(PEER=none BMT_ARGS="--moments bf16 --no-checkpointing" OUT="$work/out9" bash "$driver" /opt/bmt-train gpt2-124m 4 1 3 1)
grep -q '^# side-by-side: gpt2-124m, .*, FSDP2 per-block recompute, bmt-train alone, bmt-train --moments bf16 --no-checkpointing, 1 round(s)' <<< "$out" ||
  fail "header with bmt-train's own recompute flags: $out"
grep '^bmt ' "$work/calls" | grep -q -- '--recompute full' && fail "bmt-train given --recompute full beside --no-checkpointing: $(cat "$work/calls")"
out=$(PEER=hf-llama LAYERS=2 bash "$driver" /opt/bmt-train llama3.2-1b 4 1 3 1 2>&1) && fail "PEER=hf-llama with a shape accepted"
grep -q "PEER=hf-llama: expected a released preset's shape, found overrides (layers 2)" <<< "$out" || fail "hf-llama shape: $out"
echo "side_by_side_driver: ok"
