#!/usr/bin/env bash
# Values that were once clamped, wrapped, misread or silently defaulted, and config files a TOML
# reader takes in more than one way: each is refused on 2 ranks with exit code 2 and one error line
# naming the flag or the config file's line, what was expected (the allowed values) and what was found, within 60 s,
# with no process left. A config file using every kind of value (the control) is accepted.
# Usage: bad_values.sh BMT_TRAIN MPIEXEC [MPIEXEC_PREFLAGS...]
source "$(dirname "$0")/common.sh"

run=("${tiny[@]}" --steps 2)
bad() { expect_refused "$@"; }  # bad NAME PATTERN ARGS...
config() { printf "$2" >"$work/$1.toml"; echo "$work/$1.toml"; }

bad "--steps 99999999999999999999 (was INT64_MAX)" \
  "--steps: expected a whole number in \[0, 9223372036854775807\], found '99999999999999999999'" "${run[@]}" --steps 99999999999999999999
bad "--seed -1 (was 18446744073709551615)" "--seed: expected a whole number in \[0, 18446744073709551615\], found '-1'" \
  "${run[@]}" --seed -1
bad "--batch 0x10 (was 16)" "--batch: expected a whole number in \[1, 9223372036854775807\], found '0x10'" "${run[@]}" --batch 0x10
bad "--warmup 2.5" "--warmup: expected a whole number in \[0, 9223372036854775807\], found '2.5'" "${run[@]}" --warmup 2.5
bad "--lr 1e99 (was inf)" "--lr: expected a number within single precision \(below 3.4e38 in magnitude\), found '1e99'" \
  "${run[@]}" --lr 1e99
bad "--dtype fp33 (listed integer dtypes)" \
  "--dtype: expected f32, bf16 or f16 \(or fp32, float32, bfloat16, fp16, float16\), found 'fp33'" "${run[@]}" --dtype fp33
bad "--dtype i32" "--dtype: expected f32, bf16 or f16 .*, found 'i32'" "${run[@]}" --dtype i32
bad "--zero-level 1" "--zero-level: expected 2 or 3, found '1'" "${run[@]}" --zero-level 1

# Values once taken as something else without a word: --lr 0 trained at the preset's rate and
# --loss-scale 0 at 65536; a --min-lr above the peak rate made the cosine schedule rise (with --lr,
# and with the preset's); --eval-every with token files and no --val-data never evaluated; an
# --export-shard-gb below a byte was refused only after training; a config.json vocabulary of 2^31
# passed the check and overflowed the int32 token ids.
bad "--lr 0 (trained at the preset's 0.01)" "--lr: expected a finite number > 0 \(leave it out for the preset's\), found '0'" \
  "${run[@]}" --lr 0
bad "--loss-scale 0 (was 65536 for f16)" \
  "--loss-scale: expected a finite number > 0 \(leave it out for 65536 with f16, 1 otherwise\), found '0'" \
  "${run[@]}" --dtype f16 --loss-scale 0
bad "--min-lr above --lr (the schedule rose)" "--min-lr 0.1: expected at most the peak learning rate 0.01 \(--lr\), found 0.1" \
  "${run[@]}" --min-lr 0.1
bad "--min-lr above the preset's peak rate" \
  "--min-lr 0.5: expected at most the peak learning rate 0.01 \(the preset's; --lr sets it\), found 0.5" \
  --model tiny --batch 12 --seq 32 --steps 2 --no-progress --min-lr 0.5
perl -e 'print pack("S<*", map { ($_ * 31) % 256 } 0 .. 9999)' >"$work/train.bin"
bad "--eval-every with token files and no --val-data (never evaluated)" \
  "--eval-every 1: expected validation data \(--val-data token files\), found none beside the token files of --data" \
  "${run[@]}" --data "$work/train.bin" --eval-every 1
expect_refused_at_startup "--export-shard-gb 1e-12 (refused after training)" \
  "--export-shard-gb: expected a size in \[1e-06, 1e\+09\] GB \(1 KB to 1 PB\), found '1e-12'" \
  "${run[@]}" --export-hf "$work/export" --export-shard-gb 1e-12
mkdir -p "$work/hf-vocab"
printf '{"model_type": "llama", "vocab_size": 2147483648, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}\n' \
  >"$work/hf-vocab/config.json"
expect_refused_at_startup "config.json vocab_size 2^31 (overflowed int32)" \
  "config.json '$work/hf-vocab/config.json': expected a positive integer 'vocab_size' of at most 16777216, found 2147483648" \
  --init-from "$work/hf-vocab" --batch 12 --seq 32 --steps 2 --no-progress

c=$(config array 'batch = [4, 8]\n')
bad "config batch = [4, 8] (used 8)" "--config '$c' line 1: expected one value for 'batch', found an array \[4, 8\]" "${run[@]}" --config "$c"
c=$(config duplicate 'steps = 2\nbatch = 12\nsteps = 3\n')
bad "config with a key twice (the last one won)" "--config '$c' line 3: 'steps' is set twice \(lines 1 and 3\): expected each key once" \
  "${run[@]}" --config "$c"
c=$(config string 'lr = "0.1"\n')
bad "config lr = \"0.1\" (a string, accepted)" "--config '$c' line 1: 'lr' takes a number, found the string \"0.1\" \(write lr = 0.1\)" \
  "${run[@]}" --config "$c"
c=$(config section '[train]\nsteps = 2\n')
bad "config with a [section] (INI was not able to parse)" \
  "--config '$c' line 1: expected key = value lines \(bmt-train's options have no sections\), found the section header '\[train\]'" \
  "${run[@]}" --config "$c"
c=$(config word 'dtype = bf16\n')
bad "config dtype = bf16 (a bare word)" "--config '$c' line 1: 'dtype' takes a quoted string, found bf16 \(write dtype = \"bf16\"\)" \
  "${run[@]}" --config "$c"
c=$(config switch 'offload = 1\n')
bad "config offload = 1" "--config '$c' line 1: 'offload' is a switch: expected true or false, found 1" "${run[@]}" --config "$c"
c=$(config dotted 'model.layers = 3\n')
bad "config with a dotted key" "--config '$c' line 1: expected a flag name, found the dotted key 'model.layers'" "${run[@]}" --config "$c"
c=$(config wholenumber 'eval-batches = 2.0\n')
bad "config eval-batches = 2.0" "--eval-batches: expected a whole number in \[1, 9223372036854775807\], found '2.0'" "${run[@]}" --config "$c"
bad "--config of a missing file" "--config: expected a readable TOML file, found none at '$work/missing.toml'" "${run[@]}" \
  --config "$work/missing.toml"

# The control: every kind of value, comments, and a command-line flag winning over the file.
c=$(config good '# a run\nmodel = "tiny"  # the preset\nbatch = 12\nseq = 32\nsteps = 1_000\nlr = 1e-2\nkeep-attention = true\nno-checkpointing = false\n')
job 2 --config "$c" --steps 2 --log-every 100 --no-progress --metrics "$work/m.jsonl"
expect_success "a config file with every kind of value"
grep -q "steps 2 " <<<"$out" || fail "a config file: the command line's --steps 2 did not win over the file's 1000"
grep -q "recompute on, attention kept" <<<"$out" || fail "a config file: keep-attention = true was not taken"
finish
