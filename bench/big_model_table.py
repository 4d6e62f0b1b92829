#!/usr/bin/env python3
"""The table bench/big_model.sh prints, from the rows it leaves in OUT.

Each row NAME has OUT/NAME.meta (batch=, warmup=, systems= 2, or 1 for bmt-train alone) and OUT/NAME/ with side_by_side.sh's raw records:
fsdp2.1.json (fsdp2_gpt.py's JSON line) and bmt.1.jsonl (bmt-train --metrics, the first `warmup`
records skipped). Prints, per row and system, the step time, tokens/s, MFU and peak GiB (medians
over the measured steps; peak: the highest), then each target the issue sets and whether it held:
  no offload, batch 8:  bmt-train >= 1.20x FSDP2's tokens/s, with a peak no higher than FSDP2's
  offload, batch 8:     bmt-train >= 4x FSDP2-with-CPUOffloadPolicy's tokens/s; offload overhead
                        (offloaded step - on-GPU step) <= 3 s; GPU peak <= 30 GiB
  batch 32 (micro 8):   offloaded tokens/s >= 70% of the same batch without offload
Run: big_model_table.py OUT
"""
import json
import os
import statistics
import sys

SEQ = 1024
ROWS = [
    ("plain", "no offload, batch 8"),
    ("offload", "offload, batch 8"),
    ("offload32", "offload, batch 32 (micro 8)"),
    ("plain32", "no offload, batch 32 (micro 8)"),
    ("delayed", "offload delayed, batch 8"),
]

if len(sys.argv) != 2:
    sys.exit(__doc__)
out = sys.argv[1]


def meta(name):
    try:
        with open(os.path.join(out, name + ".meta")) as f:
            return {k: int(v) for k, v in (line.strip().split("=", 1) for line in f if "=" in line)}
    except OSError:
        return None


def fsdp2(name, m):
    """(step s, tokens/s, MFU, peak GiB) of the FSDP2 run, or None."""
    try:
        with open(os.path.join(out, name, "fsdp2.1.json")) as f:
            r = json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None
    return r["step_ms"] / 1e3, r["tokens_per_s_per_gpu"], r["mfu"], r["peak_mem_gib"]


def bmt(name, m):
    """(step s, tokens/s, MFU, peak GiB) of the bmt-train run over its measured steps, or None."""
    try:
        with open(os.path.join(out, name, "bmt.1.jsonl")) as f:
            records = [json.loads(line) for line in f if line.strip()][m["warmup"]:]
    except (OSError, ValueError):
        return None
    if not records:
        return None
    tps = statistics.median(r["tokens_per_s"] for r in records)
    mfu = statistics.median(r["mfu"] for r in records) if records[0].get("mfu") is not None else None
    return m["batch"] * SEQ / tps, tps, mfu, max(r["mem_peak_bytes"] for r in records) / 2**30


results = {}  # (row, system) -> (step s, tokens/s, MFU, peak GiB)
fmt = lambda v, f: "-" if v is None else f.format(v)
print(f"{'run':<32} {'system':<15} {'step s':>7} {'tokens/s':>9} {'MFU':>6} {'peak GiB':>9}")
for name, label in ROWS:
    m = meta(name)
    if m is None:
        continue
    systems = [("pytorch-fsdp2", fsdp2), ("bmt-train", bmt)][2 - m.get("systems", 2):]  # 1: bmt-train alone
    for system, read in systems:
        r = read(name, m)
        results[(name, system)] = r
        step, tps, mfu, peak = r if r else (None, None, None, None)
        print(f"{label:<32} {system:<15} {fmt(step, '{:7.2f}')} {fmt(tps, '{:9.0f}')} "
              f"{fmt(mfu and mfu * 100, '{:5.1f}%')} {fmt(peak, '{:9.1f}')}")


def get(name, system):
    return results.get((name, system))


def verdict(ok):
    return "held" if ok else "missed"


print("targets:")
fp, bp = get("plain", "pytorch-fsdp2"), get("plain", "bmt-train")
if fp and bp:
    ratio = bp[1] / fp[1]
    print(f"  no offload, batch 8: bmt-train {ratio:.2f}x FSDP2's tokens/s (>= 1.20x: {verdict(ratio >= 1.2)}), "
          f"peak {bp[3]:.1f} vs {fp[3]:.1f} GiB (no higher: {verdict(bp[3] <= fp[3])})")
else:
    print("  no offload, batch 8: a run is missing")
fo, bo = get("offload", "pytorch-fsdp2"), get("offload", "bmt-train")
if fo and bo:
    ratio = bo[1] / fo[1]
    print(f"  offload, batch 8: bmt-train {ratio:.2f}x FSDP2-with-CPUOffloadPolicy's tokens/s "
          f"(>= 4x: {verdict(ratio >= 4)})")
if bo:
    print(f"  offload, batch 8: GPU peak {bo[3]:.1f} GiB (<= 30: {verdict(bo[3] <= 30)})")
    if bp:
        overhead = bo[0] - bp[0]
        print(f"  offload, batch 8: overhead {overhead:.2f} s a step (offloaded {bo[0]:.2f} s - on the GPU "
              f"{bp[0]:.2f} s; <= 3 s: {verdict(overhead <= 3)})")
if not (fo and bo and bp):
    print("  offload, batch 8: " + ", ".join(what for what, r in (("FSDP2 offloaded", fo), ("bmt-train offloaded", bo),
                                                                   ("bmt-train on the GPU", bp)) if not r)
          + " missing")
b32o, b32 = get("offload32", "bmt-train"), get("plain32", "bmt-train")
if b32o and b32:
    share = b32o[1] / b32[1]
    print(f"  batch 32 (micro 8): offloaded {b32o[1]:.0f} tokens/s = {share:.0%} of {b32[1]:.0f} without offload "
          f"(>= 70%: {verdict(share >= 0.7)})")
else:
    print("  batch 32 (micro 8): a run is missing")
d = get("delayed", "bmt-train")
if d and bp:
    print(f"  offload delayed, batch 8: overhead {d[0] - bp[0]:.2f} s a step (no target; the update one step late)")
