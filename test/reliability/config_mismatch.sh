#!/usr/bin/env bash
# Ranks started differently, through MPI's MPMD syntax (mpirun -np 1 bmt-train A : -np 1 bmt-train B).
# Expected: the job stops at startup, before any training, with exit code 2 and one error line
# naming the differing rank and option, within 60 s; no rank hangs. (Different library builds are
# covered by the test reliability_configuration_check, which fakes another build's description.)
# Usage: config_mismatch.sh BMT_TRAIN MPIEXEC [MPIEXEC_PREFLAGS...]
source "$(dirname "$0")/common.sh"

base="--model tiny --batch 12 --seq 32 --steps 3 --no-progress --metrics $work/m.jsonl"
mpmd "$base --layers 2" "$base --layers 3"
expect_failure "MPMD: --layers 2 on rank 0, --layers 3 on rank 1" 2 \
  "configuration mismatch: .*'layers': rank 0 has 'layers=2', rank 1 has 'layers=3' \(on rank 1 of 2\)" 60
grep -q "step 1/" <<<"$out" && fail "--layers: training started"

mpmd "$base --dtype f32" "$base --dtype bf16"
expect_failure "MPMD: --dtype f32 on rank 0, bf16 on rank 1" 2 "'dtype': rank 0 has 'dtype=f32', rank 1 has 'dtype=bf16'" 60

mpmd "$base --seed 1" "$base --seed 2"
expect_failure "MPMD: --seed 1 on rank 0, --seed 2 on rank 1" 2 "'seed': rank 0 has 'seed=1', rank 1 has 'seed=2'" 60

# A flag only one rank cannot parse: that rank's error stops both.
mpmd "$base" "$base --bogus"
expect_failure "MPMD: an unknown flag on rank 1 only" 2 "bmt-train: error: .*--bogus.*on rank 1 of 2" 60

mpmd "$base --dim 64" "$base --dim 63"
expect_failure "MPMD: an invalid --dim on rank 1 only" 2 "bmt-train: error: .*dim divisible by heads.*on rank 1 of 2" 60

mpmd "$base" "$base --help"
expect_failure "MPMD: --help on rank 1 only" 2 "bmt-train: error: --help: expected on every rank or on none" 60

# The same arguments on both sides of the MPMD syntax: no error.
mpmd "$base --layers 2" "$base --layers 2"
expect_success "MPMD: the same arguments on both ranks"
finish
