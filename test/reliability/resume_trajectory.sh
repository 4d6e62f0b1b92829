#!/usr/bin/env bash
# Resuming with another command than the checkpoint's run, on 2 ranks. A checkpoint records what
# its run's trajectory depends on (training_state.json 'extra.trajectory'); a resumed run says at
# startup, one line each, which settings differ and what that means, or that it continues that run
# exactly. Once 20 steps resumed to 40 silently differed from 40 straight. Checked: the lines, that
# a re-planned schedule's learning rates are those of a run of the new length from the start, that
# the same command continues exactly, and that a resumed run's metrics hold each step once.
# Usage: resume_trajectory.sh BMT_TRAIN MPIEXEC [MPIEXEC_PREFLAGS...]
source "$(dirname "$0")/common.sh"

run=("${tiny[@]}" --save-every 10)
job 2 "${run[@]}" --steps 20 --save "$work/ck" --metrics "$work/a.jsonl"
expect_success "20 steps, saved at 10 and 20"
notes() { grep "^| resume: " <<<"$out"; }

# The same command: nothing to say, and the metrics end up holding each step once.
job 2 "${run[@]}" --steps 20 --resume "$work/ck/step-10" --metrics "$work/a.jsonl"
expect_success "the same command from step 10"
grep -q "^| resumed from $work/ck/step-10 at step 10: continues that run exactly$" <<<"$out" \
  || fail "the same command: expected 'continues that run exactly', found: $(grep '^| resume' <<<"$out")"
[ -z "$(notes)" ] || fail "the same command: expected no resume notes, found: $(notes)"
steps=$(sed -n 's/.*"step":\([0-9]*\).*/\1/p' "$work/a.jsonl" | tr '\n' ' ')
[ "$steps" = "$(seq -s ' ' 1 20) " ] || fail "metrics after a resume from step 10: expected steps 1-20 once each, found $steps"

# 20 steps resumed to 40: the schedule is re-planned, and from step 21 on its learning rates are a
# 40-step run's.
job 2 "${run[@]}" --steps 40 --resume "$work/ck/step-20" --save "$work/ck40" --metrics "$work/b.jsonl"
expect_success "20 steps resumed to 40"
line="| resume: --steps 40 (the checkpoint's run: 20): the cosine schedule is re-planned for 40 steps: from step 21 on the learning rates are those of a 40-step run, while steps 1-20 followed a 20-step plan"
[ "$(notes)" = "$line" ] || fail "20 resumed to 40: expected the line '$line', found: $(notes)"
grep -q ": continues that run exactly" <<<"$out" && fail "20 resumed to 40: claimed to continue exactly"
job 2 "${run[@]}" --steps 40 --metrics "$work/c.jsonl"
expect_success "40 steps straight"
for s in 21 30 40; do
  [ "$(field "$work/b.jsonl" $s lr)" = "$(field "$work/c.jsonl" $s lr)" ] \
    || fail "step $s: the resumed run's learning rate $(field "$work/b.jsonl" $s lr) is not the 40-step run's $(field "$work/c.jsonl" $s lr)"
done
[ "$(field "$work/a.jsonl" 15 lr)" != "$(field "$work/c.jsonl" 15 lr)" ] || fail "step 15: the 20-step and 40-step plans agree (the test proves nothing)"
# The checkpoint of the resumed run records the new length: resuming it with its command says nothing.
job 2 "${run[@]}" --steps 40 --resume "$work/ck40/step-30" --metrics "$work/b.jsonl"
expect_success "the 40-step run's checkpoint, resumed as it was"
[ -z "$(notes)" ] || fail "the 40-step run's checkpoint: expected no resume notes, found: $(notes)"

# Several settings at once, and another world size: a line each.
job 2 "${run[@]}" --steps 30 --resume "$work/ck/step-20" --batch 24 --lr 0.02 --metrics "$work/d.jsonl"
expect_success "--batch and --lr changed"
for want in "--batch 24 (the checkpoint's run: 12): the sequences from step 21 on are neither those of the checkpoint's run nor those of a run with the new setting from the start" \
            "--lr 0.02 (the checkpoint's run: 0.01): the learning rates from step 21 on follow the new setting" \
            "--steps 30 (the checkpoint's run: 20): the cosine schedule is re-planned for 30 steps"; do
  grep -qF "| resume: $want" <<<"$out" || fail "--batch and --lr changed: expected a line '$want', found: $(notes)"
done
[ "$(notes | wc -l)" -eq 3 ] || fail "--batch and --lr changed: expected 3 lines, found: $(notes)"
job 1 "${run[@]}" --steps 20 --resume "$work/ck/step-10" --metrics "$work/e.jsonl"
expect_success "another world size"
want="| resume: 1 rank (the checkpoint's run: 2 ranks): the same steps, with sums added in another order: the run continues within rounding of the checkpoint's, not bit for bit"
[ "$(notes)" = "$want" ] || fail "another world size: expected '$want', found: $(notes)"

# A checkpoint written before trajectories were recorded: said so.
cp -r "$work/ck/step-10" "$work/old-10"
sed -i '/"trajectory"/,/^    }/d' "$work/old-10/training_state.json"
grep -q trajectory "$work/old-10/training_state.json" && fail "could not remove the trajectory from the test checkpoint"
job 2 "${run[@]}" --steps 20 --resume "$work/old-10" --metrics "$work/f.jsonl"
expect_success "a checkpoint without a trajectory"
grep -qF "| resume: the checkpoint does not record what its run's trajectory depends on" <<<"$out" \
  || fail "a checkpoint without a trajectory: expected it said, found: $(notes)"
# A data file rewritten with the same token count (once resumed as "exactly"): its size and
# modification time are recorded, and the change is named.
llmc_shard 20240520 4000 >"$work/tokens.bin"
job 2 "${run[@]}" --steps 20 --data "$work/tokens.bin" --save "$work/files"
expect_success "20 steps on a token file"
{ int32 20240520 1 4000; head -c $((253 * 4)) /dev/zero; counting_tokens 4001 | tail -c 8000; } >"$work/tokens.new"
cmp -s "$work/tokens.bin" "$work/tokens.new" && fail "the rewritten token file is the same (the test proves nothing)"
mv "$work/tokens.new" "$work/tokens.bin"
job 2 "${run[@]}" --steps 20 --data "$work/tokens.bin" --resume "$work/files/step-10"
expect_success "resumed after the token file was rewritten with the same token count"
grep -q ": continues that run exactly" <<<"$out" && fail "the rewritten token file: claimed to continue exactly"
grep -qE "^\| resume: --data file '$work/tokens.bin' was modified since the checkpoint \(at [0-9T:.-]+Z; the checkpoint's run read it as modified at [0-9T:.-]+Z\), its size the same: the sequences from step 11 on are those of its new content, not the checkpoint's run's$" <<<"$out" \
  || fail "the rewritten token file: expected it named, found: $(notes)"
finish
