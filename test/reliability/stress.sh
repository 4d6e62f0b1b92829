#!/usr/bin/env bash
# Long run: the tiny model for STEPS steps (default 300) on 4 ranks, saving every 25, interrupted
# three times by a killed rank (mid-step, inside a save, mid-step again) and resumed each time.
# Checks: the losses of the interrupted-and-resumed run equal the uninterrupted run's at every step;
# within every run, allocated memory (mem_bytes) is the same at every step after warm-up and the
# peak (mem_peak_bytes) stops growing, so nothing accumulates from step to step.
# Usage: stress.sh BMT_TRAIN MPIEXEC [MPIEXEC_PREFLAGS...]   (STEPS=N in the environment to change)
source "$(dirname "$0")/common.sh"
steps=${STEPS:-300}
run=("${tiny[@]}" --steps "$steps" --save-every 25 --keep-last 2)

job 4 "${run[@]}" --save "$work/ref" --metrics "$work/ref.jsonl"
expect_success "uninterrupted run of $steps steps on 4 ranks"
# Memory: flat after warm-up (the first 5 steps of a run fill the allocator's caches).
flat_memory() {
  awk -v warm="$2" '
    { match($0, /"mem_bytes":[0-9]+/); m = substr($0, RSTART + 12, RLENGTH - 12)
      match($0, /"mem_peak_bytes":[0-9]+/); p = substr($0, RSTART + 17, RLENGTH - 17)
      n++ }
    n == warm { m0 = m; p0 = p }
    n > warm && (m != m0 || p != p0) { print "step line " n ": mem_bytes " m " (was " m0 "), mem_peak_bytes " p " (was " p0 ")"; bad = 1; exit }
    END { if (n <= warm) { print "only " n " steps"; bad = 1 } exit bad }' "$1"
}
flat_memory "$work/ref.jsonl" 5 || fail "memory grows during the uninterrupted run"

: >"$work/all.jsonl"
segment=0
for fault in "kill-step:$((steps / 4 + 7)):2" "kill-save-model:$((steps / 2)):1" "kill-step:$((steps * 3 / 4 + 13)):0" ""; do
  segment=$((segment + 1))
  resume=(); [ $segment -gt 1 ] && resume=(--resume "$work/run")
  JOB_ENV=${fault:+BMT_TRAIN_FAULT=$fault} job 4 "${run[@]}" --save "$work/run" "${resume[@]}" --metrics "$work/seg$segment.jsonl"
  if [ -n "$fault" ]; then
    expect_failure "segment $segment ends with $fault" nonzero "killing this rank" 60
  else
    expect_success "last segment runs to step $steps"
  fi
  cat "$work/seg$segment.jsonl" >>"$work/all.jsonl"
  [ "$(wc -l <"$work/seg$segment.jsonl")" -gt 6 ] && { flat_memory "$work/seg$segment.jsonl" 5 || fail "memory grows in segment $segment"; }
done
same_losses "$work/ref.jsonl" "$work/all.jsonl" 1 "$steps" || fail "the interrupted run's losses differ from the uninterrupted run's"
finish
