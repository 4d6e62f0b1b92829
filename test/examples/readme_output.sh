#!/usr/bin/env bash
# examples/README.md's "Expected output" is what the programs print: each block of indented lines
# under "`mpirun -np 2 PROGRAM`:" must appear among PROGRAM's output lines at 2 ranks (lines naming
# a host are left out: host names are the reader's), and the plain-process sentence must give the
# numbers step 2 prints as one process.
#   readme_output.sh README EXAMPLES_DIR MPIEXEC [PREFLAGS...]
set -euo pipefail
readme=$1 dir=$2 mpiexec=$3
shift 3
failed=0
programs=$(grep -o '^`mpirun -np 2 [a-z0-9_]*`:' "$readme" | sed 's/^`mpirun -np 2 \([a-z0-9_]*\)`:$/\1/')
[ -n "$programs" ] || { echo "no expected output found in $readme"; exit 1; }
for program in $programs; do
  expected=$(awk -v head="\`mpirun -np 2 $program\`:" '
    $0 == head { on = 1; next }
    on && /^    / { print substr($0, 5); seen = 1; next }
    on && seen && !/^$/ { exit }' "$readme" | grep -v ' host ' || true)
  output=$("$mpiexec" -n 2 "$@" "$dir/$program" 2>&1) || { echo "$program failed:"; echo "$output"; failed=1; continue; }
  while IFS= read -r line; do
    [ -z "$line" ] && continue
    if ! grep -qxF -- "$line" <<<"$output"; then
      echo "README says $program prints:"; echo "  $line"; echo "it printed:"; sed 's/^/  /' <<<"$output"; failed=1
    fi
  done <<<"$expected"
done
# "As a plain process (world size 1) steps 2 and 3 print loss A, grad norm B, loss after the step C."
plain=$(tr '\n' ' ' <"$readme" | grep -o 'As a plain process[^.]*print loss [0-9]*\.[0-9]*, grad norm [0-9]*\.[0-9]*, *loss after the step [0-9]*\.[0-9]*' |
        sed 's/.*loss \([0-9.]*\), grad norm \([0-9.]*\), *loss after the step \([0-9.]*\)$/loss \1, grad norm \2, loss after one AdamW step \3/')
[ -n "$plain" ] || { echo "no plain-process numbers found in $readme"; exit 1; }
output=$("$dir/step2_zero3" 2>&1)
if ! grep -qF -- "$plain" <<<"$output"; then
  echo "README says step 2 as one process prints: $plain"; echo "it printed:"; sed 's/^/  /' <<<"$output"; failed=1
fi
[ "$failed" = 0 ] && echo "examples/README.md's expected output matches the programs"
exit "$failed"
