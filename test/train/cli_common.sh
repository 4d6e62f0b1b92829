# shellcheck shell=bash
# Sourced by the CLI test scripts once they have set exe, mpiexec and preflags: a work folder
# removed on exit, fail (counted in failures), run NP ARGS... (bmt-train under the MPI launcher,
# two minutes at most), and reading and comparing --metrics files.
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
run() { local np=$1; shift; timeout 120 "$mpiexec" -np "$np" "${preflags[@]}" "$exe" --no-progress "$@"; }
# field FILE KEY: "step value" lines of the metrics file's KEY.
field() { sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p" "$1" | awk '{ print NR " " $1 }'; }
steps() { sed -n 's/.*"step":\([0-9]*\).*/\1/p' "$1"; }
near() {  # near A B WHAT: the losses and gradient norms of metrics files A and B agree within 1e-5
  local key
  for key in loss grad_norm; do
    paste <(steps "$1") <(field "$1" $key) <(steps "$2") <(field "$2" $key) | \
      awk '{ d = $3 - $6; if (d < 0) d = -d
             if ($1 != $4 || d > 1e-5 * ($3 < 0 ? -$3 : $3)) { print "step " $1 ": " $3 " vs " $6; bad = 1 } }
           END { exit bad }' || fail "$3: $key differs"
  done
  local a b
  a=$(steps "$1" | wc -l); b=$(steps "$2" | wc -l)
  [ "$a" -eq "$b" ] || fail "$3: $a steps in $1, $b in $2"
  [ "$a" -gt 0 ] || fail "$3: no steps in $1 or $2"
}
