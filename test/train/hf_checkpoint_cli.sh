#!/usr/bin/env bash
# bmt-train with Hugging Face checkpoints, end to end: a trained Llama (grouped-query attention)
# and GPT-2 (bf16) exported with --export-hf, single-file and sharded, evaluate with --init-from
# and --eval-only at several world sizes exactly as their bmt-train checkpoints do under --resume;
# --eval-logits writes [seq, vocab] floats; --resume wins over --init-from; a mismatched or
# corrupted checkpoint, or a flag that disagrees with its config.json, ends with exit code 2 and
# one line naming what was expected and what was found.
# Usage: hf_checkpoint_cli.sh MAX_RANKS BMT_TRAIN MPIEXEC [MPIEXEC_PREFLAGS...]
set -u
max_np=$1; exe=$2; mpiexec=$3; shift 3; preflags=("$@")
. "$(dirname "$0")/cli_common.sh"
other_np=$((max_np < 3 ? max_np : 3))

# Token files: raw uint16 below the models' vocabulary of 300.
perl -e 'srand(3); print pack("v*", map { int(rand(300)) } 1..20000)' > "$work/train.bin"
perl -e 'srand(4); print pack("v*", map { int(rand(300)) } 1..6000)' > "$work/val.bin"
llama=(--model llama-1b --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 96 --vocab 300)
gpt2=(--model tiny --vocab 300 --dtype bf16)
common=(--batch 12 --seq 16 --log-every 100)
eval_loss() { sed -n 's/^eval: loss \([0-9.]*\) .*/\1/p'; }
# Two eval losses of the same weights agree within 1e-6 (about 2 f32 ulps at these losses): the
# sums are in f64, but each token's loss is an f32 computed from logits whose GEMM blocks its rows
# by the rows a rank has, which changes with the world size. A wrong tensor moves it far more.
same() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-6) }'; }

for model in llama gpt2; do
  if [ $model = llama ]; then flags=("${llama[@]}"); else flags=("${gpt2[@]}"); fi
  run 2 "${flags[@]}" "${common[@]}" --steps 3 --data "$work/train.bin" --save "$work/$model-ckpt" \
    --export-hf "$work/$model-hf" >/dev/null || fail "$model: training with --export-hf failed"
  if [ ! -f "$work/$model-hf/config.json" ] || [ ! -f "$work/$model-hf/model.safetensors" ]; then
    fail "$model: --export-hf wrote no config.json and model.safetensors"
  fi
  dtype=(); [ $model = gpt2 ] && dtype=(--dtype bf16)
  # The same weights, sharded: files of at most 40 kB and an index.
  run 1 --init-from "$work/$model-hf" "${dtype[@]}" "${common[@]}" --steps 0 --export-hf "$work/$model-sharded" \
    --export-shard-gb 0.00004 >/dev/null || fail "$model: sharded export failed"
  if [ ! -f "$work/$model-sharded/model.safetensors.index.json" ] || [ -f "$work/$model-sharded/model.safetensors" ]; then
    fail "$model: the sharded export has no index, or a single file"
  fi
  [ "$(find "$work/$model-sharded" -name 'model-*-of-*.safetensors' | wc -l)" -gt 2 ] \
    || fail "$model: the sharded export has too few files"

  want=$(run 2 "${flags[@]}" "${common[@]}" --resume "$work/$model-ckpt" --eval-only --val-data "$work/val.bin" \
         | eval_loss)
  [ -n "$want" ] || fail "$model: --resume --eval-only printed no loss"
  for np in 1 "$other_np"; do
    for dir in "$model-hf" "$model-sharded"; do
      got=$(run "$np" --init-from "$work/$dir" "${dtype[@]}" "${common[@]}" --eval-only --val-data "$work/val.bin" \
            | eval_loss)
      same "$got" "$want" || fail "$model: --init-from $dir at np $np: eval loss '$got', the checkpoint's '$want'"
    done
  done
done

# --eval-logits: the first validation sequence's logits, 16 x 300 f32.
run 2 --init-from "$work/llama-hf" "${common[@]}" --eval-only --val-data "$work/val.bin" \
  --eval-logits "$work/logits.bin" >/dev/null || fail "--eval-logits run failed"
[ "$(stat -c %s "$work/logits.bin" 2>/dev/null)" = $((16 * 300 * 4)) ] || fail "--eval-logits: expected 19200 bytes"

# --resume keeps its meaning next to --init-from: the run continues the checkpoint.
out=$(run 2 --init-from "$work/llama-hf" "${common[@]}" --steps 4 --data "$work/train.bin" \
      --resume "$work/llama-ckpt" 2>&1) || fail "--init-from with --resume failed: $out"
echo "$out" | grep -q "resumed from .* at step 3" || fail "--init-from with --resume did not resume: $out"

# Bad input: exit code 2 and one line naming what was expected and what was found.
expect_usage_error() {
  local what=$1 pattern=$2; shift 2
  local out
  out=$(run 2 "$@" 2>&1 >/dev/null); local rc=$?
  [ $rc -eq 2 ] || fail "$what: expected exit code 2, found $rc"
  echo "$out" | grep -q "bmt-train: error: .*$pattern" || fail "$what: expected an error naming '$pattern', found: $out"
}
ev=(--eval-only --val-data "$work/val.bin" "${common[@]}")
expect_usage_error "a flag that disagrees" "--kv-heads 4: expected 2 as --init-from's config.json" \
  --init-from "$work/llama-hf" --kv-heads 4 "${ev[@]}"
expect_usage_error "a preset that disagrees" "--model gpt2-124m: expected a gpt2 of 12 layers" \
  --init-from "$work/gpt2-hf" --model gpt2-124m "${ev[@]}"
expect_usage_error "no checkpoint" "cannot open '$work/none/config.json'" --init-from "$work/none" "${ev[@]}"
cp -r "$work/llama-hf" "$work/mismatched"
sed -i 's/"num_key_value_heads": 2/"num_key_value_heads": 4/' "$work/mismatched/config.json"
expect_usage_error "a config that does not fit the weights" \
  "tensor 'model.layers.0.self_attn.k_proj.weight' in model.safetensors: expected shape \[64, 64\] (for blocks.0.wk.weight), found \[32, 64\]" \
  --init-from "$work/mismatched" "${ev[@]}"
cp -r "$work/llama-hf" "$work/truncated"
head -c 100000 "$work/llama-hf/model.safetensors" > "$work/truncated/model.safetensors"
expect_usage_error "a truncated file" "truncated/model.safetensors" --init-from "$work/truncated" "${ev[@]}"
cp -r "$work/gpt2-sharded" "$work/lost-shard"
rm "$work/lost-shard/model-00002-of-"*.safetensors
expect_usage_error "a missing shard" "model-00002-of-[0-9]*.safetensors': cannot open" --init-from "$work/lost-shard" "${ev[@]}"
expect_usage_error "evaluation without data" "--eval-only: expected --val-data" --init-from "$work/llama-hf" --eval-only
touch "$work/a-file"
expect_usage_error "an export where no directory can be" "--export-hf: cannot write '$work/a-file/config.json'" \
  --init-from "$work/llama-hf" "${common[@]}" --steps 1 --export-hf "$work/a-file"
expect_usage_error "evaluation that saves" "--eval-only: expected nothing saved, found --export-hf" \
  --init-from "$work/llama-hf" "${ev[@]}" --export-hf "$work/x"

[ $failures -eq 0 ] && echo "all Hugging Face checkpoint checks passed"
exit $((failures > 0))
