#!/usr/bin/env python3
"""The side-by-side table from the runs bench/side_by_side.sh leaves in OUT.

Reads OUT/fsdp2.R.json (fsdp2_gpt.py's JSON line), OUT/bmt.R.jsonl (bmt-train --metrics, the first
WARMUP records skipped) and OUT/{fsdp2,bmt}.R.smi (nvidia-smi samples: SM MHz, W) for rounds
R = 1..ROUNDS, and prints tokens/s per GPU, MFU, peak memory, GPU 0's mean SM clock and power
while busy (samples above 200 W), the energy that power spends per 1,000 tokens of one GPU (J/ktok),
each system's median over the rounds and every round's value, and the ratio of the medians and of
each round's pair (the two systems run back to back in a round, so a pair shares the machine's
state).
Run: side_by_side_table.py OUT GPUS WARMUP ROUNDS
"""
import json
import statistics
import sys

if len(sys.argv) != 5:
    sys.exit(__doc__)
out, gpus, warmup, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])


def fsdp2(r):
    f = json.loads(open(f"{out}/fsdp2.{r}.json").read().strip().splitlines()[-1])
    return f["tokens_per_s_per_gpu"], f["mfu"], f["peak_mem_gib"]


def bmt(r):
    m = [json.loads(l) for l in open(f"{out}/bmt.{r}.jsonl")][warmup:]
    tps = statistics.median(x["tokens_per_s"] for x in m) / gpus
    mfu = statistics.median(x["mfu"] for x in m) if m[0]["mfu"] is not None else None
    return tps, mfu, max(x["mem_peak_bytes"] for x in m) / 2**30


def busy_clock_power(name):  # means over the samples where GPU 0 drew more than 200 W
    try:
        rows = [[float(v) for v in l.split(",")] for l in open(f"{out}/{name}.smi") if l.strip()]
    except (OSError, ValueError):
        return None, None
    busy = [r for r in rows if r[1] > 200]
    return (statistics.mean(r[0] for r in busy), statistics.mean(r[1] for r in busy)) if busy else (None, None)


rows = []
for name, prefix, read in (("pytorch-fsdp2", "fsdp2", fsdp2), ("bmt-train", "bmt", bmt)):
    runs, clocks, powers, by_round = [], [], [], {}
    for r in range(1, rounds + 1):
        try:
            runs.append(read(r))
        except Exception:
            continue
        by_round[r] = runs[-1][0]
        clock, power = busy_clock_power(f"{prefix}.{r}")
        if clock is not None:
            clocks.append(clock)
            powers.append(power)
    if not runs:
        rows.append((name, None, None, None, None, None, None, {}))
        continue
    tps = statistics.median(x[0] for x in runs)
    mfu = statistics.median(x[1] for x in runs) if runs[0][1] is not None else None
    power = statistics.mean(powers) if powers else None
    rows.append((name, tps, mfu, max(x[2] for x in runs), statistics.mean(clocks) if clocks else None, power,
                 power / tps * 1000 if power else None, by_round))
fmt = lambda v, f: "-" if v is None else f.format(v)
print(f"{'system':<15} {'tokens/s/GPU':>13} {'MFU':>7} {'peak GiB/GPU':>13} {'SM MHz':>7} {'W':>5} {'J/ktok':>7}  rounds")
for name, tps, mfu, mem, clock, power, energy, each in rows:
    print(f"{name:<15} {fmt(tps, '{:13.0f}')} {fmt(mfu and mfu * 100, '{:6.1f}%')} {fmt(mem, '{:13.1f}')} "
          f"{fmt(clock, '{:7.0f}')} {fmt(power, '{:5.0f}')} {fmt(energy, '{:7.2f}')}  "
          f"{' '.join(f'{v:.0f}' for v in each.values())}")
if rows[0][1] and rows[1][1]:
    pairs = [rows[1][7][r] / rows[0][7][r] for r in rows[0][7] if r in rows[1][7]]
    print(f"ratio bmt/fsdp2: tokens/s {rows[1][1] / rows[0][1]:.2f}x (each round: "
          f"{' '.join(f'{x:.2f}x' for x in pairs)}), memory {rows[1][3] / rows[0][3]:.2f}x")
