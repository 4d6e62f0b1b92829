#!/usr/bin/env bash
# Non-finite gradients in bmt-train: the loss of step 3 on one rank is made NaN or infinite
# (BMT_TRAIN_FAULT nan-loss / inf-loss), which poisons every rank's gradients.
#   f16 (dynamic loss scaling): step 3 is skipped and the loss scale halves;
#   bf16 and f32: step 3 is skipped with a warning, training goes on with finite losses;
#   every dtype: the skipped step leaves weights and optimizer state untouched (the checkpoints of
#   steps 2 and 3 are byte-identical);
#   --stop-on-nonfinite: the job stops with exit code 2 and a message; the checkpoint before it is
#   intact and resuming from it reproduces the uninterrupted run.
# Usage: nonfinite.sh BMT_TRAIN MPIEXEC [MPIEXEC_PREFLAGS...]
source "$(dirname "$0")/common.sh"

run=("${tiny[@]}" --steps 5 --save-every 1 --keep-last 0)
for c in "f16 nan-loss:3:1 gradient overflow at loss scale" "bf16 inf-loss:3:0 non-finite gradients .*step skipped" \
         "f32 nan-loss:3:1 non-finite gradients .*step skipped"; do
  read -r dtype fault pattern <<<"$c"
  job 2 "${run[@]}" --dtype "$dtype" --save "$work/clean-$dtype" --metrics "$work/clean-$dtype.jsonl"
  expect_success "$dtype without faults"
  JOB_ENV="BMT_TRAIN_FAULT=$fault" job 2 "${run[@]}" --dtype "$dtype" --save "$work/$dtype" --metrics "$work/$dtype.jsonl"
  report "$dtype, $fault: step 3 skipped"
  [ $rc -eq 0 ] || { fail "$dtype: expected the run to go on past the non-finite step, exit code $rc"; show; }
  grep -qE -- "$pattern" <<<"$out" || fail "$dtype: expected a message matching '$pattern'"
  [ "$(field "$work/clean-$dtype.jsonl" 3 skipped)" = false ] || fail "$dtype: step 3 skipped without a fault"
  [ "$(field "$work/$dtype.jsonl" 3 skipped)" = true ] || fail "$dtype: expected step 3 skipped"
  [ "$(field "$work/$dtype.jsonl" 2 skipped)" = false ] || fail "$dtype: expected step 2 applied"
  for s in 4 5; do
    loss=$(field "$work/$dtype.jsonl" $s loss)
    awk -v x="$loss" 'BEGIN { exit !(x + 0 == x && x > 0 && x < 100) }' || fail "$dtype: step $s loss '$loss' is not finite"
  done
  same_losses "$work/clean-$dtype.jsonl" "$work/$dtype.jsonl" 1 2 || fail "$dtype: steps before the fault differ"
  for f in model optimizer; do
    cmp -s "$work/$dtype/step-2/$f.safetensors" "$work/$dtype/step-3/$f.safetensors" ||
      fail "$dtype: the skipped step changed $f.safetensors"
  done
  before=$(field "$work/$dtype.jsonl" 2 loss_scale); after=$(field "$work/$dtype.jsonl" 3 loss_scale)
  if [ "$dtype" = f16 ]; then
    awk -v a="$before" -v b="$after" 'BEGIN { exit !(b * 2 == a) }' || fail "f16: expected the loss scale to halve, found $before -> $after"
  else
    [ "$before" = "$after" ] || fail "$dtype: the loss scale changed: $before -> $after"
  fi
done

# --stop-on-nonfinite: stop at step 6; checkpoint 4 is intact and the resumed run matches.
stop=("${tiny[@]}" --steps 8 --save-every 4 --stop-on-nonfinite)
job 2 "${stop[@]}" --save "$work/ref" --metrics "$work/ref.jsonl"
expect_success "f32 reference run for --stop-on-nonfinite"
JOB_ENV="BMT_TRAIN_FAULT=nan-loss:6:1" job 2 "${stop[@]}" --save "$work/stop" --metrics "$work/stop.jsonl"
expect_failure "f32, nan-loss:6:1 with --stop-on-nonfinite" 2 "bmt-train: error: non-finite gradients" 60
[ "$(latest_complete "$work/stop")" = 4 ] || fail "--stop-on-nonfinite: expected step 4 as the newest complete checkpoint"
job 2 "${stop[@]}" --save "$work/stop" --resume "$work/stop" --metrics "$work/stop.jsonl"
expect_success "resume after --stop-on-nonfinite"
same_losses "$work/ref.jsonl" "$work/stop.jsonl" 1 8 || fail "--stop-on-nonfinite: the resumed losses differ"
finish
