#!/usr/bin/env bash
# bmt-train's --shard-group end to end, with 4 ranks standing in for 2 nodes of 2 (BMT_TEST_NODE_SIZE,
# for tests only): node sharding trains as 1 rank does (losses and gradient norms within 1e-5, with
# micro-batches and clipping), says what a rank sends inside and outside its node, saves checkpoints
# that 1 rank resumes, and resumes 1 rank's checkpoints; bad shard groups are refused in one line.
# Usage: hybrid_cli.sh BMT_TRAIN MPIEXEC [MPIEXEC_PREFLAGS...]
set -u
exe=$1; mpiexec=$2; shift 2; preflags=("$@")
. "$(dirname "$0")/cli_common.sh"
# 4 ranks as 2 nodes of 2, sharding within the node.
run_nodes() { BMT_TEST_NODE_SIZE=2 run 4 --shard-group node "$@"; }
# 2 micro-batches a step on 4 ranks (8 on 1), and a clip below the gradient norm of every step.
tiny=(--model tiny --batch 8 --micro-batch 1 --seq 32 --lr 0.01 --grad-clip 0.5 --log-every 100)

expect_usage_error() {  # WHAT PATTERN NODE_SIZE ARGS...: exit code 2 and a one-line error
  local what=$1 pattern=$2 node_size=$3; shift 3
  local out
  out=$(BMT_TEST_NODE_SIZE=$node_size run 4 "$@" 2>&1 >/dev/null); local rc=$?
  [ $rc -eq 2 ] || fail "$what: expected exit code 2, found $rc"
  echo "$out" | grep -q "bmt-train: error: .*$pattern" || fail "$what: expected an error naming '$pattern', found: $out"
}
expect_usage_error "an unknown shard group" "--shard-group: expected world or node, found 'rack'" 2 "${tiny[@]}" \
  --steps 1 --shard-group rack
expect_usage_error "nodes of different sizes" \
  "shard group node: expected the same number of ranks on every node, found 3 on node 0 and 1 on node 1" 3 \
  "${tiny[@]}" --steps 1 --shard-group node

# field, steps and near: reading and comparing --metrics files.

run 1 "${tiny[@]}" --steps 8 --metrics "$work/one.jsonl" --save "$work/ckpt_one" --save-every 4 >/dev/null \
  || fail "the 1-rank run failed"
run_nodes "${tiny[@]}" --steps 8 --metrics "$work/node.jsonl" --save "$work/ckpt_node" --save-every 4 \
  >"$work/node.out" || fail "the node-sharded run failed"
near "$work/one.jsonl" "$work/node.jsonl" "node sharding against 1 rank"
# Clipped every step: the norm scales every update, so an error in it shows in the losses.
field "$work/one.jsonl" grad_norm | awk '$2 <= 0.5 { bad = 1 } END { exit bad }' || fail "a step was not clipped"
grep -q "shard group node (2 ranks, 2 replicas)  a rank sends .* inside its node and .* to other nodes a step" \
  "$work/node.out" || fail "the banner does not state the traffic: $(cat "$work/node.out")"
grep -q "each / 2 ranks" "$work/node.out" || fail "the state is not divided over the shard group of 2"

# A checkpoint saved under node sharding resumes at 1 rank, and 1 rank's resumes under node
# sharding, each continuing the uninterrupted runs.
[ -f "$work/ckpt_node/step-4/COMPLETE" ] || fail "no complete node-sharded checkpoint at step 4"
run 1 "${tiny[@]}" --steps 8 --metrics "$work/node_to_one.jsonl" --resume "$work/ckpt_node/step-4" >/dev/null \
  || fail "resuming the node-sharded checkpoint at 1 rank failed"
run_nodes "${tiny[@]}" --steps 8 --metrics "$work/one_to_node.jsonl" --resume "$work/ckpt_one/step-4" >/dev/null \
  || fail "resuming the 1-rank checkpoint under node sharding failed"
tail -4 "$work/one.jsonl" >"$work/one_last.jsonl"
tail -4 "$work/node.jsonl" >"$work/node_last.jsonl"
near "$work/one_last.jsonl" "$work/node_to_one.jsonl" "node-sharded checkpoint resumed at 1 rank"
near "$work/node_last.jsonl" "$work/one_to_node.jsonl" "1-rank checkpoint resumed under node sharding"

[ $failures -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all --shard-group checks passed"
