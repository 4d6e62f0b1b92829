#!/usr/bin/env bash
# Configurations that cannot fit, on 2 ranks. The memory of a configuration is estimated before
# any of it is allocated (the startup table's estimate: sharded state and gather/gradient buffers),
# and one whose estimate exceeds the memory there is refused with both numbers (exit 2, one error
# line, within 60 s): once --dim 16777216 grew until the kernel killed it (exit 137, no message).
# A prefetch deeper than the blocks costs nothing more (2000000000 once ended in std::bad_alloc and
# exit 1), and an allocation that fails anyway is one error line with exit 2.
# Usage: memory.sh BMT_TRAIN MPIEXEC [MPIEXEC_PREFLAGS...]
source "$(dirname "$0")/common.sh"

run=("${tiny[@]}" --steps 2 --metrics "$work/m.jsonl")
bad() { expect_refused_at_startup "$@"; }  # bad NAME PATTERN ARGS...
size='[0-9.e+]+ [KMGT]?i?B'
# On the CUDA build the state and buffers are held to the device's free memory; on the host build
# the device is the host, shared by the ranks of the node.
if grep -qa cudaMemGetInfo "$exe"; then
  cuda=1
  too_big="memory: expected this configuration to fit in the $size free on this rank's device, found an estimated $size needed before activations \($size sharded state \+ $size gather/gradient buffers\)"
else
  cuda=0
  too_big="memory: expected this configuration to fit in the $size of host memory available on $(hostname) \(MemAvailable\), found an estimated $size needed before activations by its 2 ranks \($size sharded state \+ $size gather/gradient buffers each\)"
fi
bad "--dim 16777216 (grew until killed)" "$too_big" "${run[@]}" --dim 16777216
# A model of the usual shape that no machine holds: 1024 Llama 3 8B blocks (2.2e11 parameters).
bad "llama3-8b with 1024 blocks" "$too_big" --model llama3-8b --layers 1024 --batch 2 --seq 32 --steps 2 --no-progress

# An evaluation is held to the same check (its estimate has no gradient or optimizer state): --dim
# 65536 --eval-only once tried to allocate 103 GB, and a config.json of 100000 layers hung building
# the model (its construction is quadratic in the layers) instead of being refused from its shape.
llmc_shard 20240520 4000 >"$work/val.bin"
ev=(--batch 2 --seq 32 --eval-only --val-data "$work/val.bin")
bad "--dim 65536 --eval-only (tried to allocate 103 GB)" "$too_big" --model tiny --dim 65536 --heads 4 "${ev[@]}"
mkdir -p "$work/deep"
cat >"$work/deep/config.json" <<'CONFIG'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632,
 "num_hidden_layers": 100000, "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
 "max_position_embeddings": 2048, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": false,
 "hidden_act": "silu", "torch_dtype": "bfloat16"}
CONFIG
bad "a config.json of 100000 layers, --eval-only (hung)" "$too_big" --init-from "$work/deep" "${ev[@]}"
awk -v s="$secs" 'BEGIN { exit !(s <= 15) }' || fail "a config.json of 100000 layers: refused after $secs s, expected within 15 s"
bad "a config.json of 100000 layers, training" "$too_big" --init-from "$work/deep" --batch 2 --seq 32 --steps 2 --no-progress

# The deepest prefetch gathers every block ahead and no more: the same estimate as a prefetch of
# one block ahead with two blocks, and it trains.
job 2 "${run[@]}" --prefetch 16777216
expect_success "--prefetch 16777216"
deep=$(grep "estimated memory" <<<"$out")
job 2 "${run[@]}" --prefetch 1
[ "$deep" = "$(grep "estimated memory" <<<"$out")" ] || fail "--prefetch 16777216: estimated '$deep', not the estimate of --prefetch 1"
bad "--prefetch 2000000000 (was std::bad_alloc, exit 1)" \
  "--prefetch: expected a number of blocks in \[0, 16777216\], found '2000000000'" "${run[@]}" --prefetch 2000000000

# Allocations that fail although the estimate passed, in an address space capped at 1.5 GB (CUDA
# reserves more address space than that at startup: host build only). A tensor: the allocator's
# error; a host container (the synthetic data's tables for 16777216 tokens): std::bad_alloc, said
# in one line on every rank.
if [ $cuda -eq 0 ]; then
  before=$failures
  (
    ulimit -v 1500000
    bad "a tensor beyond the address space" "out of memory: expected to allocate [0-9]+ bytes" \
      "${run[@]}" --dim 2048 --heads 8
    bad "a host container beyond the address space" \
      "out of memory: a host allocation failed \(std::bad_alloc\): expected the process.s memory \(or its limit, ulimit -v\) to hold what it allocates, found it exhausted \(on rank 0 of 2\)" \
      "${run[@]}" --vocab 16777216
    exit $((failures - before))
  )
  failures=$((failures + $?))
fi
finish
