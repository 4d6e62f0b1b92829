#!/usr/bin/env bash
# The uninterrupted reference run of common.sh (reference_run), trained once into the directory
# BMT_RELIABILITY_REFERENCE names, for the scripts that compare with it (ctest's fixture
# reliability_reference).
# Usage: BMT_RELIABILITY_REFERENCE=DIR reference_run.sh BMT_TRAIN MPIEXEC [MPIEXEC_PREFLAGS...]
source "$(dirname "$0")/common.sh"

dir=${BMT_RELIABILITY_REFERENCE:?expected BMT_RELIABILITY_REFERENCE naming the directory to train into, found it unset}
unset BMT_RELIABILITY_REFERENCE  # reference_run trains
rm -rf "$dir"  # no earlier run's is left for the scripts if this one fails
reference_run
if [ $failures -eq 0 ]; then
  mkdir -p "$dir" && cp -r "$work/ref" "$work/ref.jsonl" "$dir/" || fail "cannot write the reference run to '$dir'"
fi
finish
