#!/usr/bin/env bash
# Output files, on 2 ranks. Every output path is checked at startup: an unwritable --plot or
# --timeline ends the job before its first step (exit 2, one error line naming the flag and the
# path, within 60 s), where once the picture failed only after all training and the timeline only
# warned. Every write of a file the user asked for is checked: a metrics record that fills the disk
# (a file size limit, BMT_TRAIN_FAULT=disk-full-metrics) ends the job with exit 2 and one line naming
# the file and the step, and the file keeps whole JSON lines (it once stopped mid-record while the
# job exited 0); a loss curve or a timeline trace that cannot be written ends it the same way and
# leaves no file (once an empty picture, or a trace cut short). An evaluation (--eval-only) checks its
# --metrics and --eval-logits at startup (once only after evaluating) and every write of them (its
# metrics record on a full disk once exited 0), and refuses the outputs of training it would leave
# unwritten (--timeline was ignored).
# Usage: outputs.sh BMT_TRAIN MPIEXEC [MPIEXEC_PREFLAGS...]
source "$(dirname "$0")/common.sh"

run=("${tiny[@]}" --steps 30)
bad() { expect_refused_at_startup "$@"; }  # bad NAME PATTERN ARGS...

bad "--plot in a missing directory" "--plot: cannot write '$work/missing/curve.svg': No such file or directory" \
  "${run[@]}" --metrics "$work/m.jsonl" --plot "$work/missing/curve.svg"
mkdir -p "$work/adir"
bad "--plot naming a directory" "--plot: cannot write '$work/adir': Is a directory" "${run[@]}" --metrics "$work/m.jsonl" --plot "$work/adir"
touch "$work/afile"
bad "--timeline under a regular file" "--timeline: cannot write '$work/afile/trace.rank0.json': cannot create its directory" \
  "${run[@]}" --timeline "$work/afile/trace.json"
bad "--metrics naming a directory" "--metrics: cannot write '$work/adir': Is a directory" "${run[@]}" --metrics "$work/adir"

# whole_lines FILE: every line is one JSON object ({...}) and the file ends with a newline.
whole_lines() { [ -s "$1" ] && [ "$(tail -c 1 "$1" | od -An -c | tr -d ' ')" = '\n' ] && ! grep -qv '^{.*}$' "$1"; }

JOB_ENV="BMT_TRAIN_FAULT=disk-full-metrics:1" job 2 "${run[@]}" --metrics "$work/full.jsonl"
expect_failure "metrics on a disk that fills (was exit 0, a record cut short)" 2 \
  "bmt-train: error: --metrics '$work/full.jsonl': writing the record of step [0-9]+ failed: File too large \(a full disk, or a file size limit\?\); the file keeps the whole records of the steps before it" 60
failed_step=$(grep -o "writing the record of step [0-9]*" <<<"$out" | grep -o "[0-9]*$")
whole_lines "$work/full.jsonl" || fail "metrics on a full disk: the file does not hold whole JSON lines"
[ "$(wc -l <"$work/full.jsonl")" -eq $((failed_step - 1)) ] \
  || fail "metrics on a full disk: expected the $((failed_step - 1)) records before step $failed_step, found $(wc -l <"$work/full.jsonl")"
[ "$(grep -c "bmt-train: error" <<<"$out")" -eq 1 ] || fail "metrics on a full disk: expected exactly one error line"

JOB_ENV="BMT_TRAIN_FAULT=disk-full-plot:5" job 2 "${tiny[@]}" --steps 5 --metrics "$work/p.jsonl"
expect_failure "a loss curve on a full disk (was an empty picture, exit 0)" 2 \
  "bmt-train: error: --plot '$work/p.svg': cannot write the loss curve: writing [0-9]+ bytes to '$work/p.svg.tmp' failed after 256 bytes: File too large; '$work/p.svg' is left as it was" 60
[ ! -e "$work/p.svg" ] && [ ! -e "$work/p.svg.tmp" ] || fail "a loss curve on a full disk: a picture (or its temporary) was left"
whole_lines "$work/p.jsonl" && [ "$(wc -l <"$work/p.jsonl")" -eq 5 ] || fail "a loss curve on a full disk: the metrics lost records"

JOB_ENV="BMT_TRAIN_FAULT=disk-full-timeline:5:1" job 2 "${tiny[@]}" --steps 5 --timeline "$work/tl/t.json"
expect_failure "a timeline trace on a full disk (was a trace cut short)" 2 \
  "bmt-train: error: timeline: cannot write '$work/tl/t.rank1.json': File too large" 60
[ ! -e "$work/tl/t.rank1.json" ] && [ ! -e "$work/tl/t.rank1.json.tmp" ] || fail "a timeline on a full disk: a trace (or its temporary) was left"
[ "$(grep -c "bmt-train: error" <<<"$out")" -eq 1 ] || fail "a timeline on a full disk: expected exactly one error line"

job 2 "${tiny[@]}" --steps 5 --export-hf "$work/hf"
expect_success "a Hugging Face export"
[ -s "$work/hf/config.json" ] || fail "a Hugging Face export: no config.json"
JOB_ENV="BMT_TRAIN_FAULT=disk-full-export:5" job 2 "${tiny[@]}" --steps 5 --export-hf "$work/hf"
expect_failure "a Hugging Face export on a full disk" 2 \
  "bmt-train: error: safetensors writer '$work/hf/model.safetensors': .*\(no space left, or a file size limit\?\)" 60
[ ! -e "$work/hf/config.json" ] || fail "an export on a full disk: a config.json (the earlier export's) beside weights cut short"
[ "$(grep -c "bmt-train: error" <<<"$out")" -eq 1 ] || fail "an export on a full disk: expected exactly one error line"

# An evaluation's outputs: 600 tokens of validation data, named as nanoGPT names them.
for ((i = 0; i < 600; i++)); do printf -v byte '\\%03o\\000' $((i * 7 % 256)); printf "$byte"; done >"$work/val.bin"
eval=("${tiny[@]}" --eval-only --val-data "$work/val.bin")
bad "--eval-only --metrics in a missing directory (was refused after evaluating)" \
  "--metrics: cannot write '$work/missing/e.jsonl': No such file or directory" "${eval[@]}" --metrics "$work/missing/e.jsonl"
grep -q "^eval:" <<<"$out" && fail "--eval-only --metrics in a missing directory: expected no evaluation, found one"
bad "--eval-only --eval-logits in a missing directory (was refused after the first forward)" \
  "--eval-logits: cannot write '$work/missing/l.bin': No such file or directory" "${eval[@]}" --eval-logits "$work/missing/l.bin"
bad "--eval-only --metrics on a full device (was exit 0, nothing written)" \
  "--metrics '/dev/full': cannot write the evaluation's record: writing [0-9]+ bytes to '/dev/full' failed after 0 bytes: No space left on device" \
  "${eval[@]}" --metrics /dev/full
bad "--eval-only --eval-logits on a full device" \
  "--eval-logits '/dev/full': cannot write the logits: writing 32768 bytes to '/dev/full' failed after 0 bytes: No space left on device" \
  "${eval[@]}" --eval-logits /dev/full
bad "--eval-only --timeline (was ignored)" \
  "--eval-only: expected only the evaluation's outputs \(--metrics, --eval-logits\), found --timeline $work/e.json" \
  "${eval[@]}" --timeline "$work/e.json"
job 2 "${eval[@]}" --metrics "$work/e.jsonl" --eval-logits "$work/e.bin"
expect_success "an evaluation's outputs"
whole_lines "$work/e.jsonl" && [ "$(wc -l <"$work/e.jsonl")" -eq 1 ] || fail "an evaluation's outputs: expected one whole JSON line"
[ "$(stat -c %s "$work/e.bin")" -eq $((32 * 256 * 4)) ] || fail "an evaluation's outputs: expected 32 x 256 f32 logits"

# Devices as --metrics. The file is read only on a resume and only as far as the records kept, and
# only a regular file: /dev/full once hung while rank 0's memory grew, /dev/zero ended in "out of
# memory", /dev/null failed on the loss curve after training.
bad "--metrics /dev/full (was a hang)"   "--metrics '/dev/full': expected a regular file, or a device that takes records without giving any back \(such as /dev/null\), found a device that reads back data"   "${run[@]}" --metrics /dev/full
bad "--metrics /dev/zero (was out of memory)" "--metrics '/dev/zero': expected a regular file, or a device that takes records without giving any back"   "${run[@]}" --metrics /dev/zero
job 2 "${tiny[@]}" --steps 5 --metrics /dev/null
expect_success "--metrics /dev/null (once failed on the loss curve)"
grep -q "^loss curve: none (--metrics '/dev/null' is not a regular file to draw it from)" <<<"$out" ||
  fail "--metrics /dev/null: expected the loss curve skipped, found: $(grep 'loss curve' <<<"$out")"
[ ! -e /dev/null.svg ] || fail "--metrics /dev/null: a picture was written to /dev/null.svg"
bad "--metrics /dev/null --plot" "--plot '$work/n.svg': expected --metrics to be a regular file to draw the loss curve from, found '/dev/null', which is not one" \
  "${run[@]}" --metrics /dev/null --plot "$work/n.svg"
# A large file that is not a metrics file: a resume reads one buffer of it, not all of it.
job 2 "${tiny[@]}" --steps 4 --save "$work/dev"
expect_success "a checkpoint to resume with a large --metrics"
truncate -s 4G "$work/big.jsonl"
job 2 "${tiny[@]}" --steps 5 --resume "$work/dev" --metrics "$work/big.jsonl"
report "resuming with 4 GB of zeros as --metrics"
awk -v s="$secs" 'BEGIN { exit !(s <= 60) }' || fail "resuming with 4 GB of zeros as --metrics: took $secs s"
grep -q "bmt-train: error: --metrics '$work/big.jsonl': expected the metrics of the run resumed" <<<"$out" ||
  { fail "resuming with 4 GB of zeros as --metrics: expected a --metrics error"; show; }
# An existing file that is not a metrics file is not overwritten by a resume (it once was, whole,
# with a note that only the records after the checkpoint's step were replaced).
printf 'notes of an experiment\nsecond line\n' >"$work/notes.txt"
bad "resuming with --metrics naming a text file" \
  "--metrics '$work/notes.txt': expected the metrics of the run resumed \(JSON lines with a \"step\"\), found a file of 35 bytes whose first line is not one: resuming would replace it; give another --metrics path, or remove the file" \
  "${tiny[@]}" --steps 5 --resume "$work/dev" --metrics "$work/notes.txt"
[ "$(cat "$work/notes.txt")" = "$(printf 'notes of an experiment\nsecond line')" ] || fail "the text file given as --metrics was changed"

# The control: every output written.
job 2 "${tiny[@]}" --steps 5 --metrics "$work/ok.jsonl" --plot "$work/ok.svg" --timeline "$work/trace/t.json"
expect_success "every output"
for f in ok.jsonl ok.svg trace/t.rank0.json trace/t.rank1.json; do [ -s "$work/$f" ] || fail "every output: '$f' missing or empty"; done
whole_lines "$work/ok.jsonl" || fail "every output: the metrics are not whole JSON lines"
finish
