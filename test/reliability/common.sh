# Shared by the reliability scripts (sourced, not run): argument handling, a job runner that records
# how a job ended, and checks on checkpoints and metrics.
#   script.sh BMT_TRAIN MPIEXEC [MPIEXEC_PREFLAGS...]
set -u
exe=$1; mpiexec=$2; shift 2; preflags=("$@")
work=$(mktemp -d "${TMPDIR:-/tmp}/bmt-reliability.XXXXXX")
cleanup() { chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
failures=0 sanitizer=
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
finish() {
  [ $failures -eq 0 ] && echo "all checks passed"
  exit $((failures > 0))
}
# Oversubscribed ranks must not spin while they wait (scripts/test.sh sets this too).
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
tiny=(--model tiny --batch 12 --seq 32 --lr 0.01 --log-every 100 --no-progress)
# The uninterrupted run that the fault scripts compare with (reference_run below).
reference=("${tiny[@]}" --steps 12 --save-every 4)

# job NP ARGS...: runs bmt-train on NP ranks under a hard limit (150 s) and sets rc, secs (wall time of
# the whole job, to 0.1 s), out (stdout and stderr), and error (the "bmt-train: error" lines).
# With JOB_ENV set ("NAME=value ..."), the job runs in that environment.
job() {
  local np=$1; shift
  local start=$(date +%s%N)
  out=$(env ${JOB_ENV:-} timeout -k 5 150 "$mpiexec" -np "$np" "${preflags[@]}" "$exe" "$@" 2>&1)
  rc=$?
  local end=$(date +%s.%N)
  secs=$(( ($(date +%s%N) - start) / 100000000 )); secs="$((secs / 10)).$((secs % 10))"
  error=$(grep -E "bmt-train: error|BMT_TRAIN_FAULT" <<<"$out" | head -3 | tr '\n' ' ')
  # A fault injected by BMT_TRAIN_FAULT prints its wall-clock time: how long the job took to end after it.
  local t=$(grep -o 'BMT_TRAIN_FAULT: .*(t=[0-9.]*)' <<<"$out" | head -1 | sed 's/.*t=\([0-9.]*\).*/\1/')
  after=${t:+$(awk -v a="$end" -v b="$t" 'BEGIN { printf "%.2f", a - b }')}
  sanitizer_reports
}
# mpmd "ARGS OF RANK 0" "ARGS OF RANK 1": one rank each, different arguments (MPI's MPMD syntax).
mpmd() {
  local start=$(date +%s%N)
  out=$(timeout -k 5 150 "$mpiexec" "${preflags[@]}" -np 1 "$exe" $1 : -np 1 "$exe" $2 2>&1)
  rc=$?
  secs=$(( ($(date +%s%N) - start) / 100000000 )); secs="$((secs / 10)).$((secs % 10))"
  error=$(grep -E "bmt-train: error" <<<"$out" | head -3 | tr '\n' ' ')
  after=
  sanitizer_reports
}
# In a sanitizer build (BMT_SANITIZE) a report ends its process with a non-zero code, which a case
# that expects the job to fail would accept: every case checks for reports in the output instead.
sanitizer_reports() {
  sanitizer=$(grep -E "ERROR: (Address|Leak)Sanitizer|runtime error: " <<<"$out" | head -1)
}
# One line per case for docs/RELIABILITY.md.
report() {
  echo "RESULT | $1 | exit $rc | ${secs} s${after:+ (${after} s after the fault)} | ${error:-(no error line)}"
  [ -z "$sanitizer" ] || { fail "$1: sanitizer report: $sanitizer"; show; }
}
show() { echo "---- output of the last job (exit $rc, ${secs} s):"; echo "$out" | tail -25; echo "----"; }

# expect_failure NAME EXIT_CODE PATTERN LIMIT_S: the last job ended with EXIT_CODE ("nonzero" for
# any), within LIMIT_S seconds, its output matches PATTERN, and none of its processes is left.
expect_failure() {
  local name=$1 code=$2 pattern=$3 limit=$4 ok=1
  report "$name"
  if [ "$code" = nonzero ]; then
    [ $rc -ne 0 ] || { fail "$name: expected a non-zero exit, found 0"; ok=0; }
  else
    [ $rc -eq "$code" ] || { fail "$name: expected exit code $code, found $rc"; ok=0; }
  fi
  # (mpirun itself exits 137 when a rank was killed: only the time tells a hang from that.)
  awk -v s="$secs" 'BEGIN { exit !(s >= 150) }' && { fail "$name: the job hung and was killed by the test's timeout"; ok=0; }
  grep -qE -- "$pattern" <<<"$out" || { fail "$name: expected output matching '$pattern'"; ok=0; }
  awk -v s="$secs" -v l="$limit" 'BEGIN { exit !(s <= l) }' || { fail "$name: took $secs s, limit $limit s"; ok=0; }
  expect_no_processes "$name" || ok=0
  [ $ok -eq 1 ] || show
}
# expect_refused NAME PATTERN ARGS...: a 2-rank job with ARGS is refused: exit code 2 within 60 s
# and exactly one error line, "bmt-train: error: " followed by PATTERN (an extended regex).
expect_refused() {
  local name=$1 pattern=$2; shift 2
  job 2 "$@"
  expect_failure "$name" 2 "bmt-train: error: $pattern" 60
  [ "$(grep -c "bmt-train: error" <<<"$out")" -eq 1 ] || fail "$name: expected exactly one error line"
}
# expect_refused_at_startup NAME PATTERN ARGS...: expect_refused, and no step trained before it.
expect_refused_at_startup() {
  expect_refused "$@"
  grep -q "^trained\|^step " <<<"$out" && fail "$1: expected no training step, found some"
}
expect_success() {
  local name=$1
  report "$name"
  [ $rc -eq 0 ] || { fail "$name: expected exit code 0, found $rc"; show; }
}
# reference_run: the reference run's checkpoints and metrics as $work/ref and $work/ref.jsonl. Under
# ctest it is trained once for every script that needs it (the test reliability_reference_run,
# which leaves it where BMT_RELIABILITY_REFERENCE names); a script run on its own trains it here.
reference_run() {
  if [ -n "${BMT_RELIABILITY_REFERENCE:-}" ]; then
    cp -r "$BMT_RELIABILITY_REFERENCE/ref" "$BMT_RELIABILITY_REFERENCE/ref.jsonl" "$work/" ||
      fail "expected the reference run in '$BMT_RELIABILITY_REFERENCE' (the test reliability_reference_run), found none"
  else
    job 2 "${reference[@]}" --save "$work/ref" --metrics "$work/ref.jsonl"
    expect_success "uninterrupted reference run, 2 ranks"
  fi
}
# No process of the job (every job names a path under $work) is still running a second after it
# ended. A process gone never comes back, so the check passes as soon as none is left.
expect_no_processes() {
  local left i
  for ((i = 0; ; i++)); do
    left=$(pgrep -f -- "$work" | grep -v "^$$\$" || true)
    [ -z "$left" ] && return 0
    [ $i -lt 10 ] || break
    sleep 0.1
  done
  fail "$1: processes still running: $(ps -o pid=,args= -p $(echo $left | tr ' ' ',') | head -3)"
  return 1
}

# Token files. int32 V...: little-endian int32s -> stdout. counting_tokens N: N tokens counting 0, 1,
# ..., 255, 0, ... (little-endian uint16) -> stdout (printf -v: no subshell a token). llmc_shard
# MAGIC N: an llm.c shard of them.
int32() { local v; for v in "$@"; do printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $((v & 255)) $((v >> 8 & 255)) $((v >> 16 & 255)) $((v >> 24 & 255)))"; done; }
counting_tokens() { local n=$1 i byte; for ((i = 0; i < n; i++)); do printf -v byte '\\%03o\\000' $((i % 256)); printf "$byte"; done; }
llmc_shard() { local magic=$1 n=$2; int32 "$magic" 1 "$n"; head -c $((253 * 4)) /dev/zero; counting_tokens "$n"; }

# The newest step with a COMPLETE marker under a checkpoint root ("none" if there is none).
latest_complete() {
  local best=none d s
  for d in "$1"/step-*; do
    [ -f "$d/COMPLETE" ] || continue
    s=${d##*/step-}
    [[ $s =~ ^[0-9]+$ ]] || continue
    if [ "$best" = none ] || [ "$s" -gt "$best" ]; then best=$s; fi
  done
  echo "$best"
}
# "step loss" lines of a metrics file; a step logged twice (a run resumed over it) keeps the last.
losses() {
  sed -n 's/.*"loss":\([^,]*\),.*"step":\([0-9]*\).*/\2 \1/p' "$1" | awk '{ l[$1] = $2 } END { for (s in l) print s, l[s] }' | sort -n
}
# field FILE STEP KEY: the value of KEY in the metrics line of STEP.
field() { grep "\"step\":$2[,}]" "$1" | tail -1 | sed -n "s/.*\"$3\":\\([^,}]*\\).*/\\1/p"; }
# same_losses A B FIRST LAST [TOLERANCE]: steps FIRST..LAST have equal losses (or within a relative
# tolerance) in metrics files A and B.
same_losses() {
  local a=$1 b=$2 first=$3 last=$4 tol=${5:-0}
  awk -v f="$first" -v l="$last" -v tol="$tol" '
    NR == FNR { if ($1 >= f && $1 <= l) want[$1] = $2; next }
    ($1 in want) { c++; d = want[$1] - $2; if (d < 0) d = -d; m = want[$1] < 0 ? -want[$1] : want[$1]
                   if ((tol == 0 && want[$1] != $2) || d > tol * m) { print "step " $1 ": " want[$1] " vs " $2; bad = 1 } }
    END { if (c != l - f + 1) { print "compared " c " steps, expected " l - f + 1; bad = 1 } exit bad }' \
    <(losses "$a") <(losses "$b")
}

# start_job NP ARGS...: job, in the background; its output goes to $work/bg.out. wait_job then sets
# what job sets. job_pid is the time limit's process; mpirun_pid the launcher it started.
start_job() {
  local np=$1; shift
  bg_start=$(date +%s%N)
  env ${JOB_ENV:-} timeout -k 5 150 "$mpiexec" -np "$np" "${preflags[@]}" "$exe" "$@" >"$work/bg.out" 2>&1 &
  job_pid=$!
  mpirun_pid=
  for _ in $(seq 100); do
    mpirun_pid=$(pgrep -P "$job_pid" | head -1)
    [ -n "$mpirun_pid" ] && break
    sleep 0.05
  done
}
wait_job() {
  wait "$job_pid"
  rc=$?
  out=$(cat "$work/bg.out")
  secs=$(( ($(date +%s%N) - bg_start) / 100000000 )); secs="$((secs / 10)).$((secs % 10))"
  error=$(grep -E "bmt-train: error" <<<"$out" | head -3 | tr '\n' ' ')
  after=
  sanitizer_reports
}
# wait_for_step FILE STEP: waits (up to 60 s) until the metrics file FILE records STEP.
wait_for_step() {
  for _ in $(seq 1200); do
    grep -q "\"step\":$2[,}]" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}
