#!/usr/bin/env bash
# --resume takes the model from the checkpoint (training_state.json 'extra.model', and the
# config.json saved beside model.safetensors), on 2 ranks. A run started from a Hugging Face
# folder (--init-from) resumes, evaluates (--eval-only) and exports without that folder or any shape
# flag, and its export keeps the folder's other config.json keys; an f16 checkpoint resumes in f16
# without --dtype; the evaluation equals one with every shape flag repeated. A shape flag, --dtype
# or --seq that disagrees with the checkpoint is refused with one line naming both values.
# Usage: resume_model.sh BMT_TRAIN MPIEXEC [MPIEXEC_PREFLAGS...]
source "$(dirname "$0")/common.sh"

llmc_shard 20240520 4000 >"$work/tokens.bin"
shape=(--model llama-1b --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 96 --vocab 300)
common=(--batch 4 --seq 32 --log-every 100 --no-progress --data "$work/tokens.bin")
ev=(--batch 4 --seq 32 --eval-only --val-data "$work/tokens.bin")

# A Hugging Face folder with a key bmt-train does not use, which an export must keep.
job 1 "${shape[@]}" "${common[@]}" --steps 0 --export-hf "$work/hf"
expect_success "a Llama exported as a Hugging Face folder"
sed -i 's/^{/{"bos_token_id": 123, /' "$work/hf/config.json"
grep -q '"bos_token_id": 123' "$work/hf/config.json" || fail "could not add bos_token_id to the exported config.json"
job 2 --init-from "$work/hf" "${common[@]}" --steps 4 --save "$work/ck"
expect_success "4 steps from --init-from, saved"
[ -f "$work/ck/step-4/config.json" ] || fail "expected config.json in the checkpoint"
mv "$work/hf" "$work/hf-gone"

job 2 --resume "$work/ck" "${common[@]}" --steps 6 --save "$work/ck" --export-hf "$work/exp"
expect_success "resumed without the Hugging Face folder or a shape flag, exported"
grep -q "resumed from $work/ck/step-4 at step 4: continues that run exactly" <<<"$out" || fail "expected an exact continuation"
grep -q "model $work/hf (llama, 2 layers, 4 heads (2 key/value), dim 64, vocab 300)" <<<"$out" ||
  fail "expected the checkpoint's model in the startup table, found: $(grep 'bmt-train  model' <<<"$out")"
grep -q '"bos_token_id": 123' "$work/exp/config.json" || fail "the export lost the Hugging Face folder's bos_token_id"

job 2 --resume "$work/ck/step-4" "${ev[@]}"
expect_success "--resume --eval-only without shape flags"
loss=$(sed -n 's/^eval: loss \([0-9.]*\) .*/\1/p' <<<"$out")
job 2 --resume "$work/ck/step-4" "${ev[@]}" "${shape[@]}"
expect_success "--resume --eval-only with every shape flag repeated"
repeated=$(sed -n 's/^eval: loss \([0-9.]*\) .*/\1/p' <<<"$out")
[ -n "$loss" ] && [ "$loss" = "$repeated" ] || fail "eval loss '$loss' without the flags, '$repeated' with them"

expect_refused "--layers 3 resuming a 2-layer checkpoint, no --model" \
  "--resume: the checkpoint holds another model \(layers 2 there, 3 here\): expected the same model \(resume with --layers 2\), or leave out --model, --init-from and the shape flags: the checkpoint gives the model" \
  --resume "$work/ck" "${ev[@]}" --layers 3
expect_refused "--dtype bf16 resuming an f32 checkpoint" "--resume: .*\(dtype f32 there, bf16 here\)" --resume "$work/ck" "${ev[@]}" --dtype bf16
expect_refused "--rope-theta 10 resuming a checkpoint of theta 10000" "--rope-theta 10: expected 10000 as the checkpoint's model has" \
  --resume "$work/ck" "${ev[@]}" --rope-theta 10
expect_refused "--seq 100000 beyond the checkpoint's positions" "--seq: expected at most [0-9]+ tokens for the checkpoint's model" \
  --resume "$work/ck" "${ev[@]}" --seq 100000

# An f16 checkpoint resumes in f16 without --dtype.
job 2 "${tiny[@]}" --dtype f16 --steps 2 --save "$work/f16"
expect_success "2 steps in f16, saved"
job 2 --resume "$work/f16" --steps 3 --batch 12 --seq 32 --no-progress
expect_success "the f16 checkpoint resumed without --dtype"
grep -q "dtype f16" <<<"$out" || fail "expected the resumed run in f16, found: $(grep 'dtype' <<<"$out")"
finish
