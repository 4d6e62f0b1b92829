#!/usr/bin/env bash
# Token files that are not what they seem, and token files that change while a job reads them, on 2
# ranks. A file that is neither a valid llm.c shard nor raw tokens asked for (--data-format raw, or
# named train.bin / val.bin as nanoGPT writes them) is refused at startup: exit code 2, one error
# line naming the file, within 60 s. A file truncated or written again under a running job ends
# the job with an error naming it (once it was SIGBUS and an Open MPI backtrace), within 60 s of
# the change, with no process left. The controls train.
# Usage: data_files.sh BMT_TRAIN MPIEXEC [MPIEXEC_PREFLAGS...]
source "$(dirname "$0")/common.sh"

# little-endian int32s -> stdout
int32() { local v; for v in "$@"; do printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $((v & 255)) $((v >> 8 & 255)) $((v >> 16 & 255)) $((v >> 24 & 255)))"; done; }
# N tokens counting 0, 1, ..., 255, 0, ... (little-endian uint16) -> stdout (printf -v: no subshell per token)
tokens() { local n=$1 i byte; for ((i = 0; i < n; i++)); do printf -v byte '\\%03o\\000' $((i % 256)); printf "$byte"; done; }
llmc() { local magic=$1 n=$2; int32 "$magic" 1 "$n"; head -c $((253 * 4)) /dev/zero; tokens "$n"; }
run=("${tiny[@]}" --steps 3 --metrics "$work/m.jsonl")
bad() { expect_refused "$1" ".*$2" "${@:3}"; }  # bad NAME PATTERN ARGS...

tokens 4000 >"$work/tokens.u16"
llmc 20240521 4000 >"$work/wrong_magic.bin"
llmc 20240520 4000 >"$work/shard_000.bin"
mkdir -p "$work/nanogpt" && cp "$work/tokens.u16" "$work/nanogpt/train.bin"

bad "llm.c shard with a wrong magic number (was read as raw tokens)" \
  "token file '$work/wrong_magic.bin': expected an llm.c magic number, 20240520 \(uint16 tokens\) or 20240801 \(uint32 tokens\), in the first int32 of what is otherwise an llm.c header \(version 1, 4000 tokens\), found 20240521 \(a damaged shard\?\)" \
  "${run[@]}" --data "$work/wrong_magic.bin"
bad "headerless tokens not asked for as raw" \
  "token file '$work/tokens.u16': expected an llm.c shard \(the magic number 20240520 \(uint16 tokens\) or 20240801 \(uint32 tokens\) in its first int32\), found 65536; headerless uint16 tokens are read as raw only when asked for \(bmt-train --data-format raw\) or when named train.bin or val.bin" \
  "${run[@]}" --data "$work/tokens.u16"
bad "--data-format llmc on headerless tokens" "\(llm.c format\): expected the magic number 20240520 \(uint16 tokens\) or 20240801 \(uint32 tokens\) in the first int32, found 65536" \
  "${run[@]}" --data "$work/nanogpt/train.bin" --data-format llmc
bad "--data-format raw on an llm.c shard" "\(raw uint16\): expected headerless tokens, found an llm.c header" \
  "${run[@]}" --data "$work/shard_000.bin" --data-format raw
bad "--data-format u16" "--data-format: expected auto, llmc or raw, found 'u16'" "${run[@]}" --data "$work/shard_000.bin" --data-format u16

for control in "$work/shard_000.bin" "$work/nanogpt/train.bin" "$work/tokens.u16 --data-format raw"; do
  # shellcheck disable=SC2086 # the flags split on purpose
  job 2 "${run[@]}" --data $control
  expect_success "--data $control"
done

# changed_under_job NAME PATTERN CHANGE: a long job reads shard_000.bin; once it has logged two
# steps, CHANGE is run on the file, and the job must end with PATTERN within 60 s.
changed_under_job() {
  local name=$1 pattern=$2 change=$3 start ok=1
  llmc 20240520 4000 >"$work/shard_000.bin"
  rm -f "$work/long.jsonl"
  timeout -k 5 150 "$mpiexec" -np 2 "${preflags[@]}" "$exe" "${tiny[@]}" --steps 100000 --data "$work/shard_000.bin" \
    --metrics "$work/long.jsonl" >"$work/long.out" 2>&1 &
  local pid=$!
  for ((i = 0; i < 600; i++)); do
    [ "$(cat "$work/long.jsonl" 2>/dev/null | wc -l)" -ge 2 ] && break
    sleep 0.1
  done
  start=$(date +%s%N)
  eval "$change"
  wait $pid; rc=$?
  secs=$(( ($(date +%s%N) - start) / 100000000 )); secs="$((secs / 10)).$((secs % 10))"
  out=$(cat "$work/long.out"); error=$(grep -E "bmt-train: error" <<<"$out" | head -2 | tr '\n' ' '); after=
  sanitizer_reports
  report "$name"
  [ $rc -ne 0 ] || { fail "$name: expected a non-zero exit, found 0"; ok=0; }
  grep -qE -- "$pattern" <<<"$out" || { fail "$name: expected output matching '$pattern'"; ok=0; }
  grep -qiE "bus error|SIGBUS|signal 7" <<<"$out" && { fail "$name: a rank died of SIGBUS"; ok=0; }
  awk -v s="$secs" 'BEGIN { exit !(s <= 60) }' || { fail "$name: took $secs s after the change, limit 60 s"; ok=0; }
  expect_no_processes "$name" || ok=0
  [ $ok -eq 1 ] || show
}
changed_under_job "a token file truncated under the job (was SIGBUS)" \
  "bmt-train: error.*token file '$work/shard_000.bin' changed while the job reads it: expected its 9024 bytes as when it was opened, found 2048 \(truncated\)" \
  'truncate -s 2048 "$work/shard_000.bin"'
changed_under_job "a token file written again under the job" \
  "bmt-train: error.*token file '$work/shard_000.bin' changed while the job reads it: expected it unmodified since it was opened" \
  'touch -d "2001-01-01" "$work/shard_000.bin"'
finish
