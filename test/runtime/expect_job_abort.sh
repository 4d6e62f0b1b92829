#!/usr/bin/env bash
# Runs a job that is meant to die and checks how it dies:
#   expect_job_abort.sh <limit seconds> <expected text>... -- <command...>
# Passes when the command exits non-zero, within the limit (so no rank was left hanging), and its
# output contains every expected text (so the runtime's own error path ran, not a crash).
set -u
limit=$1
shift
expected=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  expected+=("$1")
  shift
done
shift  # the --
start_ns=$(date +%s%N)
output=$(timeout --kill-after=5 $((limit * 3)) "$@" 2>&1)
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start_ns) / 1000000 ))
echo "$output"
echo "exit code $rc after ${elapsed_ms} ms (limit ${limit} s)"
fail=0
if [ "$rc" -eq 0 ]; then echo "FAILED: the job exited with 0; expected a non-zero exit"; fail=1; fi
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then echo "FAILED: the job hung and was killed"; fail=1; fi
if [ "$elapsed_ms" -gt $((limit * 1000)) ]; then echo "FAILED: the job took longer than ${limit} s to end"; fail=1; fi
for text in "${expected[@]}"; do
  if ! grep -qF -- "$text" <<<"$output"; then echo "FAILED: the output does not contain '$text'"; fail=1; fi
done
exit $fail
