#!/usr/bin/env bash
# Checks examples/slurm/train.sbatch without a Slurm cluster: it parses (bash -n, and shellcheck
# when installed), asks for requeueing with appended output as it promises to resume, and when run
# as a batch step with stand-ins for srun and bmt-train it passes srun the task's CPUs (srun does
# not inherit them since Slurm 22.05), resumes from a complete checkpoint only, passes extra
# arguments on, and expands its possibly empty arrays in the form bash before 4.4 accepts under
# set -u.
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
# Every array expansion "${name[@]}" must be guarded as ${name[@]+"${name[@]}"}.
bare=$(sed -E 's/\$\{([A-Za-z_]+)\[@\]\+"\$\{\1\[@\]\}"\}//g' "$script" | grep -oE '"\$\{[A-Za-z_]+\[@\]\}"' || true)
[ -z "$bare" ] || fail "expected \${a[@]+\"\${a[@]}\"} for possibly empty arrays under set -u, found bare $bare"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/bin"
# srun and bmt-train stand-ins: srun records its options and runs the command once.
cat > "$work/bin/srun" <<'EOF'
#!/usr/bin/env bash
opts=()
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do opts+=("$1"); shift; done
printf '%s\n' "${opts[@]}" > srun.args
exec "$@"
EOF
cat > "$work/bin/bmt-train" <<'EOF'
#!/usr/bin/env bash
printf '%s\n' "$@" > bmt-train.args
EOF
chmod +x "$work/bin/srun" "$work/bin/bmt-train"

# Runs the script as Slurm would run the batch step, in $work, with extra arguments "$@".
run() {
  (cd "$work" && env "${cpus_env[@]}" PATH="$work/bin:$PATH" SLURM_NTASKS=8 SLURM_JOB_NUM_NODES=2 \
    SLURM_JOB_NAME=check SLURM_JOB_ID=42 bash "$script" "$@" > step.log 2>&1) || { cat "$work/step.log"; fail "the batch step failed"; }
}
has() { grep -qxF -- "$2" "$work/$1"; }

cpus_env=(SLURM_CPUS_PER_TASK=8)
run
has srun.args --cpus-per-task=8 || fail "expected srun --cpus-per-task=8, found: $(tr '\n' ' ' < "$work/srun.args")"
has bmt-train.args --resume && fail "expected no --resume without a checkpoint"
has bmt-train.args --save || fail "expected bmt-train --save, found: $(tr '\n' ' ' < "$work/bmt-train.args")"

mkdir -p "$work/ckpt-check/step-500"
run
has bmt-train.args --resume && fail "expected no --resume from a checkpoint without COMPLETE"

touch "$work/ckpt-check/step-500/COMPLETE"
run --steps 20000
has bmt-train.args --resume || fail "expected --resume with a complete checkpoint"
has bmt-train.args ckpt-check || fail "expected --resume ckpt-check"
has bmt-train.args 20000 || fail "expected the extra arguments passed on"

cpus_env=(-u SLURM_CPUS_PER_TASK)
run
grep -q -- '--cpus-per-task' "$work/srun.args" && fail "expected no --cpus-per-task when the job sets none"
echo "train.sbatch: ok"
