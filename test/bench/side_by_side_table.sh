#!/usr/bin/env bash
# bench/side_by_side_table.py on made-up runs of 2 rounds: medians, every round, the busy clock and
# power means, the energy per 1,000 tokens, the ratios (of the medians and of each round's pair),
# and a missing run shown as "-" rather than a crash.
set -euo pipefail
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
table="$(dirname "$0")/../../bench/side_by_side_table.py"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; echo "$out"; exit 1; }

for r in 1 2; do
  echo "{\"tokens_per_s_per_gpu\": $((30000 + 2000 * r)), \"mfu\": 0.3$r, \"peak_mem_gib\": 20.$r}" > "$work/fsdp2.$r.json"
  for step in 1 2 3 4 5 6 7; do  # the first 4 are warm-up at 10 tokens/s: kept, they would be the median
    tps=$((step <= 4 ? 10 : 60000 + 1000 * r))
    echo "{\"tokens_per_s\": $tps, \"mfu\": 0.25, \"mem_peak_bytes\": $((19 * 2**30))}"
  done > "$work/bmt.$r.jsonl"
  printf '1700, 650\n300, 80\n1800, 690\n' > "$work/bmt.$r.smi"  # the 80 W sample is idle: left out
  printf '1900, 500\n' > "$work/fsdp2.$r.smi"
done
out=$(python3 "$table" "$work" 2 4 2)
echo "$out" | grep -Eq '^pytorch-fsdp2 +33000 +31\.5% +20\.2 +1900 +500 +15\.15  32000 34000$' || fail "fsdp2 row"
echo "$out" | grep -Eq '^bmt-train +30750 +25\.0% +19\.0 +1750 +670 +21\.79  30500 31000$' || fail "bmt-train row"
echo "$out" | grep -q '^ratio bmt/fsdp2: tokens/s 0.93x (each round: 0.95x 0.91x), memory 0.94x$' || fail "ratio line"

rm "$work"/fsdp2.*.json
out=$(python3 "$table" "$work" 2 4 2)
echo "$out" | grep -Eq '^pytorch-fsdp2 +- +- +- +- +- +-  $' || fail "missing FSDP2 runs"
echo "$out" | grep -q ratio && fail "a ratio without FSDP2"
echo "side_by_side_table: ok"
