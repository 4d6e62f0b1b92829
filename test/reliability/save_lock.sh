#!/usr/bin/env bash
# Two jobs on one --save directory, 2 ranks each. While the first runs, the second is refused at
# startup (exit 2, one line naming the directory and the first job's host and pid, within 60 s)
# and the first trains on unharmed; once the first is gone (killed, so its lock file stays behind),
# a new job takes the directory and resumes from it. Once the second job ran into the first and one
# of them died with "cannot remove '.../step-3'".
# Usage: save_lock.sh BMT_TRAIN MPIEXEC [MPIEXEC_PREFLAGS...]
source "$(dirname "$0")/common.sh"

# The first job: long, saving every 5 steps, in the background. Its files are outside $work, so
# that the checks for processes left behind by the other jobs (which name $work) do not see it.
shared=$(mktemp -d "${TMPDIR:-/tmp}/bmt-reliability-shared.XXXXXX")
trap 'cleanup; rm -rf "$shared"' EXIT
timeout -k 5 150 "$mpiexec" -np 2 "${preflags[@]}" "$exe" "${tiny[@]}" --steps 100000 --save "$shared/ck" --save-every 5 \
  --metrics "$shared/first.jsonl" >"$shared/first.out" 2>&1 &
first=$!
for ((i = 0; i < 600; i++)); do
  [ "$(cat "$shared/first.jsonl" 2>/dev/null | wc -l)" -ge 6 ] && break
  sleep 0.1
done
owner=$(cat "$shared/ck/.lock" 2>/dev/null)
owner_pid=$(sed -n 's/.*pid \([0-9]*\).*/\1/p' <<<"$owner")
[ -n "$owner_pid" ] && ps -p "$owner_pid" -o args= | grep -q -- "$exe" \
  || fail "the lock file names '$owner', not a rank of the first job"

job 2 "${tiny[@]}" --steps 20 --save "$shared/ck" --save-every 3 --metrics "$work/second.jsonl"
expect_failure "a second job on the same --save" 2 \
  "bmt-train: error: --save '$shared/ck': expected no other job using it, found one holding its lock '$shared/ck/.lock': host $(hostname), pid $owner_pid \(since " 60
[ "$(grep -c "bmt-train: error" <<<"$out")" -eq 1 ] || fail "a second job: expected exactly one error line"
grep -q "^step \|^trained" <<<"$out" && fail "a second job: expected no training step, found some"

before=$(wc -l <"$shared/first.jsonl")
sleep 2
kill -0 $first 2>/dev/null && [ "$(wc -l <"$shared/first.jsonl")" -gt "$before" ] \
  || fail "the first job stopped training after the second was refused"
# Killing its rank 0 (the lock's holder) ends the first job, as a rank's death ends any job.
kill -KILL "$owner_pid" 2>/dev/null; wait $first 2>/dev/null
sleep 1
left=$(pgrep -f -- "$shared" || true)
[ -z "$left" ] || fail "the first job, killed: processes still running: $left"
[ -f "$shared/ck/.lock" ] || fail "expected the killed job's lock file to stay behind"

# The lock went with the killed job: a new job takes the directory and resumes from it.
last=$(latest_complete "$shared/ck")
job 2 "${tiny[@]}" --steps $((last + 3)) --resume "$shared/ck" --save "$shared/ck" --metrics "$work/third.jsonl"
expect_success "a job after the first was killed (its lock file left behind)"
grep -q "resumed from $shared/ck/step-$last at step $last" <<<"$out" || fail "the third job did not resume from step-$last"
finish
