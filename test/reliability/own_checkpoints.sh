#!/usr/bin/env bash
# A run keeps its last --keep-last checkpoints by deleting older ones in its --save folder, so it
# saves only into a folder whose checkpoints are its own. Once a fresh run into a folder holding
# another run's step-40/60/80 saved step-5 and step-10, and keeping the last 3 deleted both. Now a
# fresh run, or one resuming from elsewhere, into a folder with complete checkpoints is refused at
# startup (exit code 2, one line naming the steps and how to continue), the folder unchanged; a
# run resuming from the folder itself goes on. On 2 ranks.
# Usage: own_checkpoints.sh BMT_TRAIN MPIEXEC [MPIEXEC_PREFLAGS...]
source "$(dirname "$0")/common.sh"

run=("${tiny[@]}" --save-every 20)
job 2 "${run[@]}" --steps 80 --save "$work/old"
expect_success "another run's checkpoints: step-40, 60 and 80"
before=$(ls "$work/old")

expect_refused_at_startup "a fresh run into the folder" \
  "--save '$work/old': expected a folder without another run's checkpoints \(this run would prune them\), found step-40, step-60, step-80: continue that run with --resume $work/old, or choose another --save folder" \
  "${run[@]}" --steps 10 --save "$work/old"
[ "$(ls "$work/old")" = "$before" ] || fail "the refused run changed the folder: $(ls "$work/old" | tr '\n' ' ')"

job 2 "${run[@]}" --steps 20 --save "$work/elsewhere"
expect_success "a second run, elsewhere"
expect_refused_at_startup "a run resuming from another folder into the folder" \
  "--save '$work/old': expected a folder without another run's checkpoints .*found step-40, step-60, step-80 \(this run resumes $work/elsewhere/step-20\)" \
  "${run[@]}" --steps 40 --resume "$work/elsewhere" --save "$work/old"
[ "$(ls "$work/old")" = "$before" ] || fail "the refused resume changed the folder: $(ls "$work/old" | tr '\n' ' ')"

job 2 "${run[@]}" --steps 100 --resume "$work/old/step-60" --save "$work/old"
expect_success "the folder's own run, resumed from its step-60"
[ "$(latest_complete "$work/old")" = 100 ] || fail "expected step-100 saved, found $(latest_complete "$work/old")"
# A folder with only unfinished saves holds no run's checkpoints.
mkdir -p "$work/partial/step-5.tmp" "$work/partial/step-10"
job 2 "${run[@]}" --steps 20 --save "$work/partial"
expect_success "a fresh run into a folder of incomplete saves"
finish
