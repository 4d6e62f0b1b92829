#!/usr/bin/env bash
# Saves that cannot be written.
#   Disk full: in the save of step 8 one rank's writes start failing (BMT_TRAIN_FAULT disk-full
#   lowers its file size limit, as a full disk would make writes fail). Expected: every rank stops
#   with the same one-line error and exit code 2 within 60 s; step-4 stays the newest complete
#   checkpoint and the resumed run reproduces the uninterrupted losses.
#   Unwritable root: a --save directory that cannot be created (a regular file stands where a
#   directory is expected; as a non-root user also a read-only directory) is refused at startup,
#   before any training, on every rank; the checkpoint the job resumed from is untouched.
# Usage: save_errors.sh BMT_TRAIN MPIEXEC [MPIEXEC_PREFLAGS...]
source "$(dirname "$0")/common.sh"

run=("${reference[@]}")
reference_run

for r in 1 0; do
  dir="$work/full$r"
  JOB_ENV="BMT_TRAIN_FAULT=disk-full:8:$r" job 2 "${run[@]}" --save "$dir" --metrics "$dir.jsonl"
  expect_failure "disk full on rank $r of 2 in the save of step 8" 2 \
    "bmt-train: error: safetensors writer '.*step-8.tmp/model.safetensors': .*no space left, or a file size limit.*on rank $r of 2" 60
  [ "$(grep -c "bmt-train: error" <<<"$out")" -eq 1 ] || fail "disk full: expected one error line"
  [ "$(latest_complete "$dir")" = 4 ] || fail "disk full: expected step 4 as the newest complete checkpoint, found $(latest_complete "$dir")"
  job 2 "${run[@]}" --save "$dir" --resume "$dir" --metrics "$dir.jsonl"
  expect_success "resume after the full disk"
  same_losses "$work/ref.jsonl" "$dir.jsonl" 1 12 || fail "disk full: the resumed losses differ from the uninterrupted run"
done

# A regular file where the checkpoint root's parent directory should be.
touch "$work/not-a-directory"
cp -r "$work/ref" "$work/from"
job 2 "${run[@]}" --steps 16 --resume "$work/from" --save "$work/not-a-directory/ckpt" --metrics "$work/u.jsonl"
expect_failure "--save under a regular file (resuming from step 12)" 2 \
  "bmt-train: error: --save '.*': expected a directory checkpoints can be written to" 60
grep -q "step 13/" <<<"$out" && fail "unwritable root: training started before the error"
diff -r "$work/ref" "$work/from" >/dev/null || fail "unwritable root: the checkpoint resumed from was modified"
if [ "$(id -u)" -ne 0 ]; then
  mkdir "$work/readonly" && chmod a-w "$work/readonly"
  job 2 "${run[@]}" --save "$work/readonly/ckpt" --metrics "$work/r.jsonl"
  expect_failure "--save in a read-only directory" 2 "bmt-train: error: --save" 60
else
  echo "running as root, which ignores permissions: the read-only directory case is skipped"
fi
finish
