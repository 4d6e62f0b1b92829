#!/usr/bin/env bash
# Bad input to bmt-train beyond the command-line cases of test/train/bmt_train_cli.sh: unwritable
# outputs, damaged checkpoints and training states, invalid token files and config files, numbers
# out of range. Expected for every case: exit code 2, one error line naming what was expected and
# what was found, within 60 s, no process left behind. A token id out of range on one rank only
# (its peers are already waiting in a collective) ends the whole job within 60 s.
# Usage: bad_input.sh BMT_TRAIN MPIEXEC [MPIEXEC_PREFLAGS...]
source "$(dirname "$0")/common.sh"

# N little-endian uint16 tokens, all equal to V -> stdout
tokens() {
  local n=$1 v=$2 i one
  one=$(printf '\\%03o\\%03o' $((v & 255)) $((v >> 8 & 255)))
  for ((i = 0; i < n; i++)); do printf "$one"; done
}
run=("${tiny[@]}" --steps 4)
bad() { expect_refused "$1" ".*$2" "${@:3}"; }  # bad NAME PATTERN ARGS...

job 2 "${run[@]}" --save "$work/good"
expect_success "a good checkpoint to damage"
copy() { rm -rf "$work/$1"; cp -r "$work/good" "$work/$1"; echo "$work/$1/step-4"; }

bad "--metrics in a missing directory" "--metrics: cannot write" "${run[@]}" --metrics "$work/missing/dir/m.jsonl"
touch "$work/a-file"
bad "--save under a regular file" "--save .*expected a directory checkpoints can be written to" "${run[@]}" --save "$work/a-file/x" --metrics "$work/m.jsonl"
bad "--resume of a directory without checkpoints" "expected a complete checkpoint" "${run[@]}" --resume "$work" --metrics "$work/m.jsonl"

d=$(copy truncated); head -c 100 "$d/model.safetensors" >"$d/m" && mv "$d/m" "$d/model.safetensors"
bad "--resume: model.safetensors truncated to 100 bytes" "safetensors" "${run[@]}" --steps 8 --resume "$d" --metrics "$work/m.jsonl"
d=$(copy header); printf '\377\377\377\377\377\377\377\177' | dd of="$d/model.safetensors" conv=notrunc status=none
bad "--resume: model.safetensors with a header length of 2^63" "header" "${run[@]}" --steps 8 --resume "$d" --metrics "$work/m.jsonl"
d=$(copy nooptim); rm "$d/optimizer.safetensors"
bad "--resume: optimizer.safetensors missing" "optimizer.safetensors" "${run[@]}" --steps 8 --resume "$d" --metrics "$work/m.jsonl"
d=$(copy state); sed -i 's/"scale":[^,}]*/"scale":"big"/' "$d/training_state.json"
bad "--resume: training state with a string loss scale" "loss_scaler.scale': expected a positive finite number" "${run[@]}" --steps 8 --resume "$d" --metrics "$work/m.jsonl"
d=$(copy statejson); head -c 40 "$d/training_state.json" >"$d/t" && mv "$d/t" "$d/training_state.json"
bad "--resume: training state cut short (invalid JSON)" "training_state.json" "${run[@]}" --steps 8 --resume "$d" --metrics "$work/m.jsonl"
d=$(copy stateloader); sed -i 's/"position": *[0-9]*/"position": -5/' "$d/training_state.json"
bad "--resume: training state with a negative data position" "loader state: expected a non-negative integer 'position'" "${run[@]}" --steps 8 --resume "$d" --metrics "$work/m.jsonl"

{ int32 20240520 7 1000; head -c $((253 * 4)) /dev/zero; tokens 1000 1; } >"$work/version.bin"
bad "llm.c token file of version 7" "expected version 1" "${run[@]}" --data "$work/version.bin" --metrics "$work/m.jsonl"
{ int32 20240520 1 5000; head -c $((253 * 4)) /dev/zero; tokens 1000 1; } >"$work/count.bin"
bad "llm.c token file whose count is beyond the file" "count beyond the file" "${run[@]}" --data "$work/count.bin" --metrics "$work/m.jsonl"
{ tokens 1000 1; printf 'x'; } >"$work/odd.bin"
bad "raw token file of an odd size" "expected an even number of bytes" "${run[@]}" --data "$work/odd.bin" --data-format raw --metrics "$work/m.jsonl"
tokens 100 1 >"$work/short.bin"
bad "token file shorter than one global batch" "expected at least one global batch" "${run[@]}" --data "$work/short.bin" --data-format raw --metrics "$work/m.jsonl"

printf 'seed = [oops\n' >"$work/array.toml"
bad "--config with an unterminated array" "line 1: expected one value for 'seed', found an array \[oops" "${run[@]}" --config "$work/array.toml" --metrics "$work/m.jsonl"
printf 'model = "tiny\n' >"$work/string.toml"
bad "--config with an unterminated string" "line 1: expected the closing \" of the string for 'model', found the end of the line \(unterminated string\)" --steps 4 --config "$work/string.toml" --metrics "$work/m.jsonl"
printf 'stepz = 3\n' >"$work/unknown.toml"
bad "--config with an unknown key" "line 1: unknown key 'stepz': expected a long flag name without its dashes \(bmt-train --help lists them\), such as 'steps'" "${run[@]}" --config "$work/unknown.toml" --metrics "$work/m.jsonl"
bad "--lr nan" "--lr: expected a finite number" "${run[@]}" --lr nan --metrics "$work/m.jsonl"
bad "--beta2 1" "--beta2: expected a number in \[0, 1\)" "${run[@]}" --beta2 1 --metrics "$work/m.jsonl"
bad "--layers -1" "--layers: expected a size" "${run[@]}" --layers -1 --metrics "$work/m.jsonl"
bad "--dim 99999999999" "--dim: expected a size" "${run[@]}" --dim 99999999999 --metrics "$work/m.jsonl"
bad "--batch 10^12 (too many tokens per step)" "tokens per step" "${run[@]}" --batch 1000000000000 --metrics "$work/m.jsonl"
JOB_ENV="BMT_GEMM_AUTOTUNE=yes" job 2 "${run[@]}" --metrics "$work/m.jsonl"
expect_failure "BMT_GEMM_AUTOTUNE=yes" 2 "bmt-train: error: BMT_GEMM_AUTOTUNE: expected 1 or 0 \(or unset\), found 'yes' \(on rank 0 of 2\)" 60
JOB_ENV="BMT_TRAIN_FAULT=explode:3" bad "BMT_TRAIN_FAULT malformed" "BMT_TRAIN_FAULT: expected" "${run[@]}" --metrics "$work/m.jsonl"

# One token id out of range (300 >= vocab 256) in one sequence: only the rank that draws it fails,
# while its peer waits in the step's first collective. The job must still end, within 60 s.
{ tokens 100 1; tokens 1 300; tokens 4000 2; } >"$work/onebad.bin"
job 2 "${tiny[@]}" --steps 40 --data "$work/onebad.bin" --data-format raw --metrics "$work/m.jsonl"
expect_failure "a token id out of range seen by one rank only" nonzero \
  "bmt-train: error on rank [01]: .*expected tokens below the vocabulary size 256, found 300" 60
grep -q "did not stop within 20 s .*: ending the job" <<<"$out" || fail "one bad token: expected the failing rank to end the job"
finish
