#!/usr/bin/env bash
# Damaged or mismatched checkpoints, each resumed on 2 ranks: every field a resume reads is checked,
# on its own and against the others and the run, before step 1. Expected for every case: exit code
# 2, one error line naming the file and field (or the flag) and what was expected and found, within
# 60 s, no process left, the checkpoint unchanged. A checkpoint resumed as it was (the control)
# trains on.
# Usage: bad_checkpoint.sh BMT_TRAIN MPIEXEC [MPIEXEC_PREFLAGS...]
source "$(dirname "$0")/common.sh"
export LC_ALL=C  # byte lengths of the headers edited below

# little-endian uint64 -> stdout
le64() { local v=$1 i; for ((i = 0; i < 8; i++)); do printf "$(printf '\\%03o' $(((v >> (8 * i)) & 255)))"; done; }
# set_optimizer_step FILE VALUE: the "step" in a safetensors file's metadata, the header rewritten
# with its new length (tensor offsets are relative to the data, which stays as it was).
set_optimizer_step() {
  local f=$1 value=$2 len json
  len=$(od -An -t u8 -N 8 "$f" | tr -d ' ')
  json=$(tail -c +9 "$f" | head -c "$len" | sed "s/\"step\":\"[^\"]*\"/\"step\":\"$value\"/")
  { le64 ${#json}; printf '%s' "$json"; tail -c +$((len + 9)) "$f"; } >"$f.new" && mv "$f.new" "$f"
}
run=("${tiny[@]}" --steps 12)
bad() {  # bad NAME PATTERN DIR ARGS...: resumes DIR and expects the error; DIR must stay unchanged
  local name=$1 pattern=$2 dir=$3; shift 3
  local before
  before=$(cd "$dir" && find . -type f -exec md5sum {} + | sort)
  job 2 "$@" --resume "$dir" --metrics "$work/m.jsonl"
  expect_failure "$name" 2 "bmt-train: error: .*$pattern" 60
  [ "$(grep -c "bmt-train: error" <<<"$out")" -eq 1 ] || fail "$name: expected exactly one error line"
  [ "$(cd "$dir" && find . -type f -exec md5sum {} + | sort)" = "$before" ] || fail "$name: the checkpoint was modified"
}

job 2 "${tiny[@]}" --steps 8 --save "$work/good" --save-every 4
expect_success "a good checkpoint to damage (steps 4 and 8)"
copy() { rm -rf "$work/$1"; cp -r "$work/good" "$work/$1"; echo "$work/$1/step-8"; }

# optimizer.safetensors: its step count is a whole number no larger than the checkpoint's step.
for value in abc -5 99999999999999999999; do
  d=$(copy "optstep$value"); set_optimizer_step "$d/optimizer.safetensors" "$value"
  bad "optimizer.safetensors step '$value'" \
    "optimizer.safetensors': metadata 'step': expected a whole number of steps in \[0, 9007199254740992\], found '$value'" \
    "$d" "${run[@]}"
done
d=$(copy optstep9); set_optimizer_step "$d/optimizer.safetensors" 9
bad "optimizer.safetensors step 9 in checkpoint step 8" "metadata 'step': expected at most the checkpoint's step 8, found 9" \
  "$d" "${run[@]}"

# training_state.json: its step is the marker's and the directory's; the counts within it are not
# beyond it; the data position lies within the data.
d=$(copy statebig); sed -i 's/^  "step": 8$/  "step": 1000000000000000000/' "$d/training_state.json"
bad "training_state.json step 10^18" "training_state.json': 'step': expected 8, the step of the checkpoint's COMPLETE marker, found 1000000000000000000" \
  "$d" "${run[@]}"
d=$(copy state4); sed -i 's/^  "step": 8$/  "step": 4/' "$d/training_state.json"
bad "training_state.json step 4 in step-8" "'step': expected 8, the step of the checkpoint's COMPLETE marker, found 4" "$d" "${run[@]}"
d=$(copy sched); sed -i 's/^    "step": 8$/    "step": 9/' "$d/training_state.json"
bad "training_state.json lr_scheduler.step 9 in step-8" "'lr_scheduler.step': expected an integer in \[0, 8\], found 9" "$d" "${run[@]}"
d=$(copy position); sed -i 's/"position": [0-9]*/"position": 1000000000000000/' "$d/training_state.json"
bad "training_state.json data.position beyond the data" \
  "training_state.json': 'data': loader state: expected a position within the epoch's [0-9]* sequences of 32 \+ 1 tokens, found 1000000000000000" \
  "$d" "${run[@]}"

# Fields once accepted: an epoch no run of 8 steps reaches (it then claimed to continue exactly and
# diverged), an unknown schedule, a negative seed, no RNG position, no ranks, a negative learning
# rate or schedule length in the trajectory, and an earlier save's optimizer file.
d=$(copy epoch); sed -i 's/"epoch": 0/"epoch": 1000000000000000000/' "$d/training_state.json"
bad "training_state.json data.epoch 10^18" \
  "'data.epoch': expected at most the step 8 \(a step starts at most one epoch\), found 1000000000000000000" "$d" "${run[@]}"
d=$(copy schedname); sed -i 's/"name": "cosine"/"name": "bogus"/' "$d/training_state.json"
bad "training_state.json lr_scheduler.name bogus" \
  "'lr_scheduler.name': expected constant, linear, cosine, noam or exponential, found \"bogus\"" "$d" "${run[@]}"
d=$(copy seed); sed -i 's/^    "seed": 1$/    "seed": -3/' "$d/training_state.json"
bad "training_state.json rng.seed -3" "'rng.seed': expected an integer in \[0, 18446744073709551615\], found -3" "$d" "${run[@]}"
d=$(copy norng); sed -i '/"rng": {/,/}/d' "$d/training_state.json"
bad "training_state.json without its rng section" "'rng.key_counter': expected the dropout RNG's position, found none" "$d" "${run[@]}"
d=$(copy world); sed -i 's/^    "world_size": 2$/    "world_size": 0/' "$d/training_state.json"
bad "training_state.json extra.world_size 0" "'extra.world_size': expected a number of ranks >= 1, found 0" "$d" "${run[@]}"
d=$(copy trajlr); sed -i 's/^      "lr": .*/      "lr": -1.0,/' "$d/training_state.json"
bad "training_state.json extra.trajectory.lr -1" "'extra.trajectory.lr': expected a finite number >= 0, found -1.0" "$d" "${run[@]}"
d=$(copy trajsteps); sed -i 's/"schedule_steps": 8/"schedule_steps": -5/' "$d/training_state.json"
bad "training_state.json extra.trajectory.schedule_steps -5" \
  "'extra.trajectory.schedule_steps': expected a finite number >= 1, found -5" "$d" "${run[@]}"
d=$(copy oldoptim); cp "$work/good/step-4/optimizer.safetensors" "$d/optimizer.safetensors"
bad "step-4's optimizer.safetensors in step-8" \
  "optimizer.safetensors': metadata 'step': expected 8, the updates the training state says were applied \('extra.optimizer_steps'\), found 4 \(the optimizer file of another save\?\)" \
  "$d" "${run[@]}"

# COMPLETE: a step is loaded only with a marker that parses and names it.
d=$(copy garbage); echo 'garbage' >"$d/COMPLETE"
bad "COMPLETE holding garbage" "step-8/COMPLETE': expected a JSON object \{\"format\": 1, \"step\": N, ...\}, found text that is not JSON: 'garbage" \
  "$d" "${run[@]}"
d=$(copy othermark); sed -i 's/"step": 8/"step": 4/' "$d/COMPLETE"
bad "COMPLETE naming step 4 in step-8" "step-8/COMPLETE': expected step 8 \(the directory's\), found 4" "$d" "${run[@]}"

# The run against the checkpoint: --steps below its step; another dtype or shape.
bad "--steps 5 below the checkpoint's step 8" "--steps 5: expected at least the step of the checkpoint resumed from \(8\)" \
  "$work/good/step-8" "${tiny[@]}" --steps 5
bad "a bf16 resume of an f32 checkpoint" \
  "--resume: the checkpoint holds another model \(dtype f32 there, bf16 here\): expected the same model \(resume with --dtype f32\)" \
  "$work/good/step-8" "${run[@]}" --dtype bf16
bad "a 3-layer resume of a 2-layer checkpoint" "the checkpoint holds another model \(layers 2 there, 3 here\)" \
  "$work/good/step-8" "${run[@]}" --layers 3

# The control: the undamaged checkpoint trains on from step 8.
job 2 "${run[@]}" --resume "$work/good/step-8" --metrics "$work/m.jsonl"
expect_success "the undamaged checkpoint"
grep -q "trained 4 steps" <<<"$out" || fail "the undamaged checkpoint: expected 4 steps trained"
finish
