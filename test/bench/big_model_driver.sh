#!/usr/bin/env bash
# bench/big_model.sh end to end with stand-ins for nvidia-smi, mpirun and torch.distributed.run
# whose made-up runs depend on the flags they get (offload, batch): every row's flags (the 6.65B
# shape for both systems, the offloads, batch 32 in micro-batches of 8, the delayed update), one
# table with each system's step time, tokens/s, MFU and peak, the targets computed from them, and
# rows skipped once the time budget is spent.
set -euo pipefail
real_python=$(command -v python3) || { echo "python3 not found: skipped"; exit 77; }
script="$(cd "$(dirname "$0")/../../bench" && pwd)/big_model.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; echo "$out"; exit 1; }
mkdir -p "$work/bin"

cat > "$work/bin/nvidia-smi" <<'STUB'
#!/usr/bin/env bash
if [ "${1:-}" = -L ]; then echo "GPU 0: stand-in"; exit 0; fi
exec sleep 30
STUB
# bmt-train: 11000 tokens/s at 95 GiB; offloaded 4000 at 28 GiB; at batch 32, 11500 and 9000.
cat > "$work/bin/mpirun" <<'STUB'
#!/usr/bin/env bash
echo "bmt $*" >> "$STAND_IN_LOG"
offload=0; batch=0; steps=0
while [ $# -gt 0 ]; do
  case "$1" in --metrics) metrics=$2 ;; --offload) offload=1 ;; --batch) batch=$2 ;; --steps) steps=$2 ;; esac
  shift
done
case "$offload.$batch" in
  0.8) tps=11000; gib=95 ;; 1.8) tps=4000; gib=28 ;; 0.32) tps=11500; gib=60 ;; *) tps=9000; gib=29 ;;
esac
for _ in $(seq 1 "$steps"); do echo "{\"tokens_per_s\": $tps, \"mfu\": 0.45, \"mem_peak_bytes\": $((gib * 2**30))}"; done > "$metrics"
STUB
# FSDP2: 10000 tokens/s (0.8192 s a step of 8 x 1024) at 101 GiB; with CPUOffloadPolicy 800 at 25.
cat > "$work/bin/python3" <<STUB
#!/usr/bin/env bash
if [ "\${1:-}" = -m ] && [ "\${2:-}" = torch.distributed.run ]; then
  echo "fsdp2 \$*" >> "\$STAND_IN_LOG"
  case " \$* " in
    *" --cpu-offload "*) echo '{"step_ms": 10240, "tokens_per_s_per_gpu": 800, "mfu": 0.033, "peak_mem_gib": 25.0}' ;;
    *) echo '{"step_ms": 819.2, "tokens_per_s_per_gpu": 10000, "mfu": 0.41, "peak_mem_gib": 101.0}' ;;
  esac
  exit 0
fi
exec "$real_python" "\$@"
STUB
chmod +x "$work/bin"/*
export PATH="$work/bin:$PATH" STAND_IN_LOG="$work/calls"

out=$(bash "$script" /opt/bmt-train "$work/out")
calls=$(cat "$work/calls")
[ "$(grep -c '^bmt ' "$work/calls")" = 5 ] || fail "expected 5 bmt-train runs: $calls"
[ "$(grep -c '^fsdp2 ' "$work/calls")" = 2 ] || fail "expected 2 FSDP2 runs: $calls"
shape='--layers 32 --dim 4096 --heads 32 --ffn 16384 --vocab 50304 '
[ "$(grep -c -- "$shape" "$work/calls")" = 7 ] || fail "a run without the 6.65B shape: $calls"
[ "$(grep '^fsdp2 ' "$work/calls" | grep -c -- '--batch 8 ')" = 2 ] || fail "FSDP2 not at batch 8: $calls"
grep '^fsdp2 ' "$work/calls" | sed -n 2p | grep -q -- ' --cpu-offload$' || fail "the second FSDP2 run not offloaded: $calls"
grep '^fsdp2 ' "$work/calls" | sed -n 1p | grep -q -- '--cpu-offload' && fail "the first FSDP2 run offloaded: $calls"
bmt_run() { grep '^bmt ' "$work/calls" | sed -n "$1p"; }
bmt_run 1 | grep -q -- '--batch 8 .*--metrics [^ ]* --recompute full$' || fail "row plain: $(bmt_run 1)"
bmt_run 2 | grep -q -- '--batch 8 .* --offload$' || fail "row offload: $(bmt_run 2)"
bmt_run 3 | grep -q -- '--batch 32 .* --offload --micro-batch 8$' || fail "row offload32: $(bmt_run 3)"
bmt_run 4 | grep -q -- '--batch 32 .*--metrics [^ ]* --recompute full --micro-batch 8$' || fail "row plain32: $(bmt_run 4)"
bmt_run 5 | grep -q -- '--batch 8 .* --offload --offload-delayed$' || fail "row delayed: $(bmt_run 5)"

row() { grep -E "^$1 +$2 " <<< "$out" || fail "no row '$1 $2'"; }
row "no offload, batch 8" pytorch-fsdp2 | grep -Eq ' 0\.82 +10000 +41\.0% +101\.0$' || fail "FSDP2 row"
row "no offload, batch 8" bmt-train | grep -Eq ' 0\.74 +11000 +45\.0% +95\.0$' || fail "bmt-train row"
row "offload, batch 8" pytorch-fsdp2 | grep -Eq ' 10\.24 +800 +3\.3% +25\.0$' || fail "FSDP2 offload row"
row "offload, batch 8" bmt-train | grep -Eq ' 2\.05 +4000 .* 28\.0$' || fail "bmt-train offload row"
row "offload, batch 32 \(micro 8\)" bmt-train | grep -Eq ' 3\.64 +9000 ' || fail "batch 32 offload row"
grep -q 'offload, batch 32 (micro 8) *pytorch-fsdp2' <<< "$out" && fail "an FSDP2 row where it did not run"
grep -q "no offload, batch 8: bmt-train 1.10x FSDP2's tokens/s (>= 1.20x: missed), peak 95.0 vs 101.0 GiB (no higher: held)" <<< "$out" ||
  fail "no-offload targets"
grep -q "offload, batch 8: bmt-train 5.00x FSDP2-with-CPUOffloadPolicy's tokens/s (>= 4x: held)" <<< "$out" || fail "offload ratio"
grep -q "offload, batch 8: GPU peak 28.0 GiB (<= 30: held)" <<< "$out" || fail "offload peak"
grep -q "offload, batch 8: overhead 1.30 s a step (offloaded 2.05 s - on the GPU 0.74 s; <= 3 s: held)" <<< "$out" ||
  fail "offload overhead"
grep -q "batch 32 (micro 8): offloaded 9000 tokens/s = 78% of 11500 without offload (>= 70%: held)" <<< "$out" ||
  fail "batch 32 target"
grep -q "^raw records: $work/out " <<< "$out" || fail "where the raw records are"
[ -s "$work/out/offload/bmt.1.jsonl" ] && [ -s "$work/out/offload/fsdp2.1.json" ] || fail "raw records of row offload"

# No time left: every row skipped, the table says what is missing.
: > "$work/calls"
out=$(BUDGET=20 bash "$script" /opt/bmt-train "$work/out2")
[ -s "$work/calls" ] && fail "runs started without time: $(cat "$work/calls")"
grep -q "^plain: skipped, " <<< "$out" || fail "row plain not reported skipped"
grep -q "no offload, batch 8: a run is missing" <<< "$out" || fail "missing runs not reported"
echo "big_model_driver: ok"
