#!/usr/bin/env bash
# A scheduler's request to stop: SIGUSR1 to mpirun (which forwards it to every rank, as Slurm's
# --signal does through srun) or SIGTERM to one rank alone. Expected: the ranks agree at the next
# step boundary, all stop after the same step, save a checkpoint there and exit 75; resumed from it,
# the run ends with exactly the losses and the final model of an uninterrupted run. Without --save
# the run says that nothing was saved and exits 76. At 2 ranks and 4 (BMT_TEST_MAX_NP permitting).
# Usage: stop_signal.sh BMT_TRAIN MPIEXEC [MPIEXEC_PREFLAGS...]
source "$(dirname "$0")/common.sh"

steps=60
run=("${tiny[@]}" --steps $steps --save-every 20)

# signalled NAME NP SIGNAL TARGET DIR: a run into DIR (no --save when DIR is "-") gets SIGNAL once
# its metrics record step 3, sent to mpirun (TARGET "mpirun") or to one rank's process ("rank");
# sets stopped to the step it stopped after.
signalled() {
  local name=$1 np=$2 signal=$3 target=$4 dir=$5 save=()
  [ "$dir" = - ] || save=(--save "$dir")
  rm -f "$work/s.jsonl"
  start_job "$np" "${run[@]}" ${save[@]+"${save[@]}"} --metrics "$work/s.jsonl"
  wait_for_step "$work/s.jsonl" 3 || fail "$name: step 3 never recorded"
  if [ "$target" = mpirun ]; then
    kill -"$signal" "$mpirun_pid"
  else
    kill -"$signal" "$(pgrep -P "$mpirun_pid" -f -- "$exe" | tail -1)"
  fi
  wait_job
  report "$name"
  grep "^stopped after" <<<"$out"
  stopped=$(sed -n "s/^stopped after step \([0-9]*\) of $steps on SIG$signal.*/\1/p" <<<"$out")
  [ -n "$stopped" ] || { fail "$name: expected 'stopped after step N of $steps on SIG$signal'"; show; return; }
  [ "$stopped" -lt $steps ] || fail "$name: the run ended before the signal (the test proves nothing)"
  expect_no_processes "$name"
}

# resumed NAME NP DIR REFERENCE: the stopped run resumed from DIR matches the uninterrupted one.
resumed() {
  local name=$1 np=$2 dir=$3 ref=$4
  [ "$(latest_complete "$dir")" = "$stopped" ] ||
    fail "$name: expected step $stopped as the newest complete checkpoint, found $(latest_complete "$dir")"
  job "$np" "${run[@]}" --save "$dir" --resume "$dir" --metrics "$work/s.jsonl"
  expect_success "$name: resumed"
  grep -q "resumed from $dir/step-$stopped at step $stopped" <<<"$out" || fail "$name: expected a resume from step-$stopped"
  same_losses "$ref.jsonl" "$work/s.jsonl" 1 $steps || fail "$name: losses differ from the uninterrupted run"
  cmp -s "$ref/step-$steps/model.safetensors" "$dir/step-$steps/model.safetensors" ||
    fail "$name: the final model differs from the uninterrupted run's"
}

for np in 2 4; do
  [ "$np" -gt "${BMT_TEST_MAX_NP:-4}" ] && continue
  job $np "${run[@]}" --save "$work/ref$np" --metrics "$work/ref$np.jsonl"
  expect_success "uninterrupted reference run, $np ranks"
  signalled "SIGUSR1 to mpirun, $np ranks" $np USR1 mpirun "$work/usr1-$np"
  [ $rc -eq 75 ] || fail "SIGUSR1, $np ranks: expected exit status 75, found $rc"
  grep -q "continue with --resume $work/usr1-$np (exit status 75)" <<<"$out" || fail "SIGUSR1, $np ranks: expected how to continue"
  resumed "SIGUSR1, $np ranks" $np "$work/usr1-$np" "$work/ref$np"
done

# SIGTERM to one rank alone: the others learn it at the boundary and stop after the same step.
signalled "SIGTERM to one rank of 2" 2 TERM rank "$work/term"
[ $rc -eq 75 ] || fail "SIGTERM to one rank: expected exit status 75, found $rc"
resumed "SIGTERM to one rank of 2" 2 "$work/term" "$work/ref2"

signalled "SIGUSR1 without --save, 2 ranks" 2 USR1 mpirun -
[ $rc -eq 76 ] || fail "without --save: expected exit status 76, found $rc"
grep -q "on SIGUSR1: nothing saved (no --save); exit status 76" <<<"$out" || fail "without --save: expected 'nothing saved'"
finish
