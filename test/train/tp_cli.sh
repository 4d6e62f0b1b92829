#!/usr/bin/env bash
# bmt-train's --tp end to end: tensor parallelism trains GPT-2 as 1 rank does (losses and gradient
# norms within 1e-5, with micro-batches and clipping) at tp 2 on 2 ranks and tp 2 x dp 2 on 4 (also
# with node sharding, 4 ranks standing in for 2 nodes of 2), the banner states the mesh, and a --tp
# that does not divide the world, the heads, the vocabulary or a node is refused in one line.
# Checkpoints saved at tp 2 x dp 2 resume at 1 rank and the other way round, continuing the runs;
# Hugging Face exports at tp 2 equal 1 rank's byte for byte, and imports train alike.
# Usage: tp_cli.sh BMT_TRAIN MPIEXEC [MPIEXEC_PREFLAGS...]
set -u
exe=$1; mpiexec=$2; shift 2; preflags=("$@")
. "$(dirname "$0")/cli_common.sh"
# 2 micro-batches a step on 4 ranks at tp 2 x dp 2 (4 on 2 ranks at tp 2, 8 on 1), and a clip below
# the gradient norm of every step.
tiny=(--model tiny --batch 8 --micro-batch 2 --seq 32 --lr 0.01 --grad-clip 0.5 --log-every 100)

expect_usage_error() {  # WHAT PATTERN NP ARGS...: exit code 2 and a one-line error
  local what=$1 pattern=$2 np=$3; shift 3
  local out
  out=$(run "$np" "$@" 2>&1 >/dev/null); local rc=$?
  [ $rc -eq 2 ] || fail "$what: expected exit code 2, found $rc"
  [ "$(echo "$out" | grep -c "bmt-train: error:")" -eq 1 ] || fail "$what: expected one error line, found: $out"
  echo "$out" | grep -q "bmt-train: error: .*$pattern" || fail "$what: expected an error naming '$pattern', found: $out"
}
expect_usage_error "a tp that does not divide the world" "expected a divisor of the world size 4, found 3" 4 "${tiny[@]}" --steps 1 --tp 3
expect_usage_error "a tp that does not divide the heads" "heads 4, kv_heads 4, ffn 256, vocab 256, tp 8" 8 \
  "${tiny[@]}" --steps 1 --tp 8 --batch 8 --micro-batch 8
expect_usage_error "a tp that does not divide the vocabulary" "vocab 255, tp 2" 2 "${tiny[@]}" --steps 1 --tp 2 \
  --vocab 255
expect_usage_error "whole logits at tp 2" "--tp 2: expected no --eval-logits" 2 --model tiny --batch 8 --seq 32 \
  --tp 2 --eval-only --val-data "$work/val.bin" --eval-logits "$work/logits.bin"
out=$(BMT_TEST_NODE_SIZE=1 run 2 "${tiny[@]}" --steps 1 --tp 2 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "bmt-train: error: .*node" \
  || fail "a tp group crossing a node: expected a one-line error naming the node, found ($rc): $out"

# field, steps and near: reading and comparing --metrics files.

run 1 "${tiny[@]}" --steps 6 --metrics "$work/one.jsonl" --save "$work/ckpt_one" --save-every 3 >/dev/null \
  || fail "the 1-rank run failed"
field "$work/one.jsonl" grad_norm | awk '$2 <= 0.5 { print "step " $1 ": grad_norm " $2 " (expected above the clip, 0.5)"; bad = 1 }
                                          END { exit bad || NR == 0 }' || fail "a step was not clipped, or none was recorded"
run 2 "${tiny[@]}" --steps 6 --tp 2 --metrics "$work/tp2.jsonl" >"$work/tp2.out" || fail "the tp 2 run failed"
near "$work/one.jsonl" "$work/tp2.jsonl" "tp 2 against 1 rank"
grep -q "mesh tp 2 x dp 1" "$work/tp2.out" || fail "the banner does not state the mesh: $(cat "$work/tp2.out")"
run 4 "${tiny[@]}" --steps 6 --tp 2 --metrics "$work/tp2dp2.jsonl" --save "$work/ckpt_tp" --save-every 3 \
  >"$work/tp2dp2.out" || fail "the tp 2 x dp 2 run failed"
near "$work/one.jsonl" "$work/tp2dp2.jsonl" "tp 2 x dp 2 against 1 rank"
grep -q "mesh tp 2 x dp 2" "$work/tp2dp2.out" || fail "the banner does not state the mesh: $(cat "$work/tp2dp2.out")"
# With node sharding, 4 ranks as 2 nodes of 2: each node holds one tp group, and the shard group of
# one rank is replicated across the nodes.
BMT_TEST_NODE_SIZE=2 run 4 "${tiny[@]}" --steps 6 --tp 2 --shard-group node --metrics "$work/tp2node.jsonl" \
  >/dev/null || fail "tp 2 with --shard-group node failed"
near "$work/one.jsonl" "$work/tp2node.jsonl" "tp 2 x dp 2 with node sharding against 1 rank"

# FP8 at tp 2: each rank scales its own part; it trains within FP8's rounding of bf16.
run 2 "${tiny[@]}" --steps 6 --tp 2 --dtype bf16 --metrics "$work/bf16.jsonl" >/dev/null || fail "the bf16 tp 2 run failed"
run 2 "${tiny[@]}" --steps 6 --tp 2 --dtype bf16 --fp8 --metrics "$work/fp8.jsonl" >/dev/null \
  || fail "the FP8 tp 2 run failed"
paste <(field "$work/bf16.jsonl" loss) <(field "$work/fp8.jsonl" loss) | \
  awk '{ d = $2 - $4; if (d < 0) d = -d; if (NF != 4 || d > 0.05 * $2) { print "step " $1 ": bf16 " $2 ", fp8 " $4; bad = 1 } }
       END { if (NR != 6) print NR " steps, expected 6"; exit bad || NR != 6 }' \
  || fail "FP8 at tp 2: losses not within 5% of bf16's"

# Checkpoints hold whole tensors: one saved at tp 2 x dp 2 resumes at 1 rank, and 1 rank's at
# tp 2 x dp 2, each continuing the uninterrupted runs.
[ -f "$work/ckpt_tp/step-3/COMPLETE" ] || fail "no complete tp 2 checkpoint at step 3"
run 1 "${tiny[@]}" --steps 6 --metrics "$work/tp_to_one.jsonl" --resume "$work/ckpt_tp/step-3" >/dev/null \
  || fail "resuming the tp 2 checkpoint at 1 rank failed"
run 4 "${tiny[@]}" --steps 6 --tp 2 --metrics "$work/one_to_tp.jsonl" --resume "$work/ckpt_one/step-3" >/dev/null \
  || fail "resuming the 1-rank checkpoint at tp 2 failed"
tail -3 "$work/one.jsonl" >"$work/one_last.jsonl"
tail -3 "$work/tp2dp2.jsonl" >"$work/tp_last.jsonl"
near "$work/tp_last.jsonl" "$work/tp_to_one.jsonl" "tp 2 checkpoint resumed at 1 rank"
near "$work/one_last.jsonl" "$work/one_to_tp.jsonl" "1-rank checkpoint resumed at tp 2"

# Hugging Face files: the same weights export byte for byte at tp 2 as at 1 rank, and a model
# imported at tp 2 trains as at 1 rank.
run 1 "${tiny[@]}" --steps 2 --export-hf "$work/hf" >/dev/null || fail "the 1-rank export failed"
run 1 "${tiny[@]}" --init-from "$work/hf" --steps 0 --export-hf "$work/hf_one" >/dev/null \
  || fail "the 1-rank import and export failed"
run 2 "${tiny[@]}" --tp 2 --init-from "$work/hf" --steps 0 --export-hf "$work/hf_tp" >/dev/null \
  || fail "the tp 2 import and export failed"
for f in hf_one hf_tp; do
  cmp "$work/hf/model.safetensors" "$work/$f/model.safetensors" || fail "$f: the export differs from the import"
done
run 1 "${tiny[@]}" --init-from "$work/hf" --steps 4 --metrics "$work/hf_one.jsonl" >/dev/null \
  || fail "training from the import at 1 rank failed"
run 4 "${tiny[@]}" --tp 2 --init-from "$work/hf" --steps 4 --metrics "$work/hf_tp.jsonl" >/dev/null \
  || fail "training from the import at tp 2 x dp 2 failed"
near "$work/hf_one.jsonl" "$work/hf_tp.jsonl" "the import trained at tp 2 against 1 rank"

[ $failures -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all --tp checks passed"
