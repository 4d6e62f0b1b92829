#!/usr/bin/env bash
# One rank of a training job is killed with SIGKILL in the middle of a step (BMT_TRAIN_FAULT
# kill-step: after its backward, while the other ranks go on into the optimizer's collectives).
# Expected: every rank is gone within 60 s and the job exits non-zero; the last complete checkpoint
# is the one before the kill; resuming from it trains the remaining steps with exactly the losses of
# an uninterrupted run, so nothing but the steps since that checkpoint is lost.
# Usage: kill_rank.sh BMT_TRAIN MPIEXEC [MPIEXEC_PREFLAGS...]
source "$(dirname "$0")/common.sh"

run=("${reference[@]}")
reference_run

# Rank 1 of 2 dies during step 7 (checkpoint 4 is complete, checkpoint 8 not yet written).
JOB_ENV="BMT_TRAIN_FAULT=kill-step:7:1" job 2 "${run[@]}" --save "$work/a" --metrics "$work/a.jsonl"
expect_failure "rank 1 of 2 killed (SIGKILL) in step 7" nonzero "killing this rank at step 7" 60
[ "$(latest_complete "$work/a")" = 4 ] || fail "after the kill: expected step 4 as the newest complete checkpoint, found $(latest_complete "$work/a")"
job 2 "${run[@]}" --save "$work/a" --resume "$work/a" --metrics "$work/a.jsonl"
expect_success "resume after the kill, 2 ranks"
grep -q "resumed from $work/a/step-4 at step 4" <<<"$out" || fail "expected the resumed run to start from step-4"
same_losses "$work/ref.jsonl" "$work/a.jsonl" 1 12 || fail "losses with a kill and a resume differ from the uninterrupted run"

# Rank 0 of 3 (the rank that writes metrics and publishes checkpoints) dies during step 10; the job
# resumes on 3 ranks from step 8 and must match an uninterrupted 3-rank run exactly. (2 ranks where
# the build registers MPI tests at 2 ranks at most: BMT_TEST_MAX_NP. The reference is a run at the
# same world size: another one sums the gradients in another order.)
np=3; [ "${BMT_TEST_MAX_NP:-4}" -lt 3 ] && np=2
ref_b="$work/ref.jsonl"
if [ $np -ne 2 ]; then
  ref_b="$work/ref$np.jsonl"
  job $np "${run[@]}" --metrics "$ref_b"
  expect_success "uninterrupted reference run, $np ranks"
fi
JOB_ENV="BMT_TRAIN_FAULT=kill-step:10:0" job $np "${run[@]}" --save "$work/b" --metrics "$work/b.jsonl"
expect_failure "rank 0 of $np killed (SIGKILL) in step 10" nonzero "killing this rank at step 10" 60
[ "$(latest_complete "$work/b")" = 8 ] || fail "after the kill: expected step 8 as the newest complete checkpoint, found $(latest_complete "$work/b")"
job $np "${run[@]}" --save "$work/b" --resume "$work/b" --metrics "$work/b.jsonl"
expect_success "resume after the kill, $np ranks"
same_losses "$ref_b" "$work/b.jsonl" 1 12 || fail "losses with a kill and a resume differ from the uninterrupted $np-rank run"
finish
