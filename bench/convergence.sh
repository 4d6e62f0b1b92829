#!/usr/bin/env bash
# Convergence of a number format against the reference run: the same bmt-train run (same data,
# seed and schedule) in several variants on one GPU, then one picture of their loss curves and a
# table of each run's final loss (the mean of its last 100 steps) against the first variant's.
#   bench/convergence.sh BMT_TRAIN OUT NAME STEPS "ARGS" "LABEL1=FLAGS1" "LABEL2=FLAGS2" ...
# ARGS are every run's flags (model, batch, data); FLAGSi a variant's own. The runs share the GPU
# and run at once. OUT gets NAME.LABEL.jsonl, NAME.LABEL.log, NAME.svg and NAME.txt.
#   bench/convergence.sh build-cuda/apps/bmt-train/bmt-train out gpt2-124m 2000 \
#     "--model gpt2-124m --dtype bf16 --batch 16 --seq 512" "f32 moments=" "bf16 moments=--moments bf16"
set -euo pipefail
bmt=$1 out=$2 name=$3 steps=$4 args=$5
shift 5
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
pids=() files=()
for variant in "$@"; do
  label=${variant%%=*} flags=${variant#*=}
  file="$out/$name.${label// /_}"
  files+=("$label=$file.jsonl")
  # shellcheck disable=SC2086  # ARGS and FLAGS are flag lists
  "$bmt" $args $flags --steps "$steps" --log-every 100 --no-progress --metrics "$file.jsonl" > "$file.log" 2>&1 &
  pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
python3 "$here/loss_curves.py" "$out/$name.svg" "$name: $args" "${files[@]}" | tee "$out/$name.txt"
exit $failed
