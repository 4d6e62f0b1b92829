#!/usr/bin/env bash
# A rank is killed with SIGKILL inside a checkpoint save, at three points of the save of step 8
# (BMT_TRAIN_FAULT kill-save-*): once the temporary directory exists, after model.safetensors,
# and with every file written but before the commit. Expected each time: the job ends non-zero
# within 60 s; step-4 stays the newest complete checkpoint and loads; the partial step-8.tmp is
# never loaded and is cleaned up by the next save; the resumed run reproduces the uninterrupted
# losses exactly. Last, a step directory with every file but no COMPLETE marker (a kill between
# the rename and the marker) is ignored too.
# Usage: kill_in_save.sh BMT_TRAIN MPIEXEC [MPIEXEC_PREFLAGS...]
source "$(dirname "$0")/common.sh"

run=("${reference[@]}" --keep-last 0)
reference_run

case_number=0
for fault in kill-save-begun:8:1 kill-save-model:8:1 kill-save-files:8:0; do
  case_number=$((case_number + 1))
  dir="$work/c$case_number"
  JOB_ENV="BMT_TRAIN_FAULT=$fault" job 2 "${run[@]}" --save "$dir" --metrics "$dir.jsonl"
  expect_failure "$fault: rank ${fault##*:} killed in the save of step 8" nonzero "killing this rank at step 8" 60
  [ "$(latest_complete "$dir")" = 4 ] || fail "$fault: expected step 4 as the newest complete checkpoint, found $(latest_complete "$dir")"
  [ -d "$dir/step-8.tmp" ] || fail "$fault: expected the partial save step-8.tmp to be left behind"
  [ ! -e "$dir/step-8" ] || fail "$fault: expected no step-8 directory"
  [ -f "$dir/step-8.tmp/model.safetensors" ] && [ "${fault%%:*}" = kill-save-begun ] && fail "$fault: model file present"
  if [ "${fault%%:*}" = kill-save-files ]; then
    # Killed after the rename, before the marker: complete files in a step directory without COMPLETE.
    mv "$dir/step-8.tmp" "$dir/step-8"
    [ -f "$dir/step-8/training_state.json" ] || fail "$fault: expected every file in the partial save"
  fi
  job 2 "${run[@]}" --save "$dir" --resume "$dir" --metrics "$dir.jsonl"
  expect_success "$fault: resume"
  grep -q "resumed from $dir/step-4 at step 4" <<<"$out" || fail "$fault: expected the resume to start from step-4"
  same_losses "$work/ref.jsonl" "$dir.jsonl" 1 12 || fail "$fault: losses differ from the uninterrupted run"
  [ ! -e "$dir/step-8.tmp" ] || fail "$fault: the leftover step-8.tmp was not removed by the next saves"
  [ "$(latest_complete "$dir")" = 12 ] || fail "$fault: expected step 12 complete after the resume"
  cmp -s "$work/ref/step-12/model.safetensors" "$dir/step-12/model.safetensors" ||
    fail "$fault: the final model differs from the uninterrupted run's"
done
finish
