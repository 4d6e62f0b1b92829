#!/usr/bin/env bash
# Checks examples/slurm/train.sbatch without a Slurm cluster: it parses (bash -n, and shellcheck
# when installed), asks for requeueing with appended output, for SIGUSR1 to the batch shell ahead of
# the time limit and for GPUs per node (not per task). Run as a batch step with stand-ins for srun,
# bmt-train and scontrol, it passes srun the task's CPUs (srun does not inherit them since Slurm
# 22.05) and an --mpi plugin only when SRUN_MPI names one, keeps checkpoints under the job's id or
# CKPT, resumes from a complete checkpoint only, passes DATA and extra arguments on, expands its
# possibly empty arrays in the form bash before 4.4 accepts under set -u, ends with bmt-train's
# status, and on SIGUSR1 hands the signal to the ranks and requeues the job exactly when bmt-train
# exits with STOPPED_STATUS.
#   check_slurm_script.sh <path to train.sbatch>
set -euo pipefail
script=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
fail() { echo "FAIL: $*" >&2; exit 1; }

bash -n "$script" || fail "bash -n $script"
if command -v shellcheck >/dev/null; then
  shellcheck "$script" || fail "shellcheck $script"
else
  echo "shellcheck not installed: skipped"
fi
grep -qx '#SBATCH --requeue' "$script" || fail "expected '#SBATCH --requeue', found none"
grep -qx '#SBATCH --open-mode=append' "$script" || fail "expected '#SBATCH --open-mode=append', found none"
grep -qE '^#SBATCH --signal=B:USR1@[0-9]+$' "$script" || fail "expected '#SBATCH --signal=B:USR1@<seconds>', found none"
grep -qE '^#SBATCH --gpus-per-node=[0-9]+$' "$script" || fail "expected '#SBATCH --gpus-per-node=<G>', found none"
# --gpus-per-task neither asked for nor passed to srun (a site's cgroups may then hide the NVLink peers).
per_task=$(grep -E '^#SBATCH|^[^#]' "$script" | grep -e '--gpus-per-task' || true)
[ -z "$per_task" ] || fail "expected no --gpus-per-task, found: $per_task"
# Every array expansion "${name[@]}" must be guarded as ${name[@]+"${name[@]}"}.
bare=$(sed -E 's/\$\{([A-Za-z_]+)\[@\]\+"\$\{\1\[@\]\}"\}//g' "$script" | grep -oE '"\$\{[A-Za-z_]+\[@\]\}"' || true)
[ -z "$bare" ] || fail "expected \${a[@]+\"\${a[@]}\"} for possibly empty arrays under set -u, found bare $bare"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/bin"
# Stand-ins. srun records its options and runs the command once, as its only task, so that a signal
# to srun reaches it. bmt-train records its arguments; with STANDIN_WAIT it says it is running
# (file "running"), waits for SIGUSR1 and then exits with STANDIN_STATUS; without, it exits with
# STANDIN_STATUS at once. scontrol records its arguments.
cat > "$work/bin/srun" <<'STANDIN'
#!/usr/bin/env bash
opts=()
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do opts+=("$1"); shift; done
printf '%s\n' "${opts[@]}" > srun.args
exec "$@"
STANDIN
cat > "$work/bin/bmt-train" <<'STANDIN'
#!/usr/bin/env bash
printf '%s\n' "$@" > bmt-train.args
if [ -n "${STANDIN_WAIT:-}" ]; then
  stop=0
  trap 'stop=1' USR1
  touch running
  for _ in $(seq 600); do [ "$stop" = 1 ] && break; sleep 0.05; done
  [ "$stop" = 1 ] || exit 99
  touch signalled
fi
exit "${STANDIN_STATUS:-0}"
STANDIN
cat > "$work/bin/scontrol" <<'STANDIN'
#!/usr/bin/env bash
printf '%s\n' "$@" > scontrol.args
STANDIN
chmod +x "$work/bin/srun" "$work/bin/bmt-train" "$work/bin/scontrol"

# Starts the script as Slurm starts the batch step, in $work, with the settings in
# "${settings[@]}" (env arguments) and the script's arguments "$@"; its output goes to step.log.
settings=()
start_step() {
  rm -f "$work"/*.args "$work/running" "$work/signalled"
  (cd "$work" && exec env "${settings[@]}" PATH="$work/bin:$PATH" SLURM_NTASKS=8 SLURM_JOB_NUM_NODES=2 \
     SLURM_JOB_NAME=check SLURM_JOB_ID=42 bash "$script" "$@") > "$work/step.log" 2>&1 &
  step_pid=$!
}
# Runs the batch step to its end; expects it to exit with status $1.
run() {
  local expect=$1 status=0
  shift
  start_step "$@"
  wait "$step_pid" || status=$?
  [ "$status" -eq "$expect" ] || { cat "$work/step.log"; fail "expected the batch step to exit $expect, found $status"; }
}
has() { grep -qxF -- "$2" "$work/$1"; }
args() { tr '\n' ' ' < "$work/$1"; }
# The argument after flag $1 in bmt-train's arguments.
value_of() { awk -v flag="$1" 'previous == flag { print } { previous = $0 }' "$work/bmt-train.args"; }

settings=(SLURM_CPUS_PER_TASK=8)
run 0
has srun.args --cpus-per-task=8 || fail "expected srun --cpus-per-task=8, found: $(args srun.args)"
grep -q -- '--mpi' "$work/srun.args" && fail "expected no srun --mpi without SRUN_MPI, found: $(args srun.args)"
has bmt-train.args --resume && fail "expected no --resume without a checkpoint"
has bmt-train.args --data && fail "expected no --data without DATA (bmt-train's synthetic data)"
[ "$(value_of --save)" = ckpt-42 ] || fail "expected --save ckpt-42 (the job's id), found: $(args bmt-train.args)"
[ -e "$work/scontrol.args" ] && fail "expected no requeue after a run that ended with 0"

mkdir -p "$work/ckpt-42/step-500"
run 0
has bmt-train.args --resume && fail "expected no --resume from a checkpoint without COMPLETE"

touch "$work/ckpt-42/step-500/COMPLETE"
settings=(SLURM_CPUS_PER_TASK=8 'DATA=tokens/train_*.bin' SRUN_MPI=pmi2)
run 0 --steps 20000
[ "$(value_of --resume)" = ckpt-42 ] || fail "expected --resume ckpt-42 with a complete checkpoint, found: $(args bmt-train.args)"
[ "$(value_of --steps | tail -1)" = 20000 ] || fail "expected the extra arguments passed on, found: $(args bmt-train.args)"
[ "$(value_of --data)" = 'tokens/train_*.bin' ] || fail "expected --data 'tokens/train_*.bin' from DATA, found: $(args bmt-train.args)"
has srun.args --mpi=pmi2 || fail "expected srun --mpi=pmi2 from SRUN_MPI, found: $(args srun.args)"

# CKPT names the folder: a new job continues another job's run from it.
mkdir -p "$work/earlier/step-900" && touch "$work/earlier/step-900/COMPLETE"
settings=(-u SLURM_CPUS_PER_TASK CKPT=earlier)
run 0
[ "$(value_of --save)" = earlier ] || fail "expected --save earlier from CKPT, found: $(args bmt-train.args)"
[ "$(value_of --resume)" = earlier ] || fail "expected --resume earlier from CKPT, found: $(args bmt-train.args)"
grep -q -- '--cpus-per-task' "$work/srun.args" && fail "expected no --cpus-per-task when the job sets none"

# A failure is the job's status, and no requeue.
settings=(STANDIN_STATUS=2)
run 2
[ -e "$work/scontrol.args" ] && fail "expected no requeue after bmt-train failed"

# SIGUSR1 to the batch shell (what --signal=B:USR1 sends) reaches bmt-train, and the job is
# requeued when bmt-train says it stopped after a checkpoint (STOPPED_STATUS, default 75), and only
# then.
signal_run() {  # <expected exit status of the step>
  local expect=$1 status=0
  start_step
  for _ in $(seq 200); do [ -e "$work/running" ] && break; sleep 0.05; done
  [ -e "$work/running" ] || { kill "$step_pid"; cat "$work/step.log"; fail "expected the bmt-train stand-in to start"; }
  kill -USR1 "$step_pid"
  wait "$step_pid" || status=$?
  [ -e "$work/signalled" ] || { cat "$work/step.log"; fail "expected SIGUSR1 to reach bmt-train"; }
  [ "$status" -eq "$expect" ] || { cat "$work/step.log"; fail "expected the batch step to exit $expect, found $status"; }
}
settings=(STANDIN_WAIT=1 STANDIN_STATUS=75)
signal_run 0
[ "$(args scontrol.args 2>/dev/null)" = "requeue 42 " ] || fail "expected scontrol requeue 42 after a stop on SIGUSR1"
settings=(STANDIN_WAIT=1 STANDIN_STATUS=3 STOPPED_STATUS=3)
signal_run 0
[ -e "$work/scontrol.args" ] || fail "expected a requeue when bmt-train exits with STOPPED_STATUS=3"
settings=(STANDIN_WAIT=1 STANDIN_STATUS=1)
signal_run 1
[ -e "$work/scontrol.args" ] && fail "expected no requeue when bmt-train failed after SIGUSR1"
echo "train.sbatch: ok"
