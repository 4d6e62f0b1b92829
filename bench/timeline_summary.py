#!/usr/bin/env python3
"""Where a training step's compute time goes, from a bmt::timeline trace recorded with op detail
(bmt-train --timeline trace.json --timeline-ops, or BMT_TIMELINE_OPS=1).

    bench/timeline_summary.py trace.rank0.json [--skip 1] [--gaps]

Per phase of the compute stream (forward, recompute, backward, optimizer step), it prints the
milliseconds per step spent in each op, and the time inside the phase's spans that no op covers
(host gaps, and kernels queued outside any op). Op spans nested inside another op span (an op
called from an op's forward or backward) count toward the outer one only. The first --skip steps
(warm-up) are left out. --gaps splits each phase's uncovered time by where it falls: before a
block's first op, before which later op (from the previous op's end to that op's start), or after
its last op. A gap holds what ran outside every op (the autograd engine's own kernels, such as
the sum of two gradients of one tensor at a residual connection) and, where the GPU waited for the
host, the host's time between two ops.
"""
import argparse
import json
import sys
from collections import defaultdict

PHASES = ("forward", "recompute", "backward", "optimizer step")


def load(path):
    with open(path) as f:
        trace = json.load(f)
    tracks = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
              if e.get("ph") == "M" and e.get("name") == "thread_name"}
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X" and tracks.get(e["tid"]) == "compute"]
    spans.sort(key=lambda e: (e["ts"], -e["dur"]))
    return spans


def contains(outer, inner, tol=1.0):
    return inner["ts"] + tol >= outer["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + tol


def outermost(members):
    # Sorted by start (longest first on ties): a span inside the last outermost one is nested.
    last = None
    for op in members:
        if last is not None and contains(last, op):
            continue
        last = op
        yield op


def op_name(op):
    return op["name"].split(" ", 2)[-1]


def summarize(spans, skip, gaps):
    steps = [s for s in spans if s["cat"] == "step"]
    if len(steps) <= skip:
        sys.exit(f"timeline_summary: expected more than {skip} step spans, found {len(steps)} "
                 "(was the trace written by bmt-train?)")
    steps = steps[skip:]
    first, last = steps[0]["ts"], steps[-1]["ts"] + steps[-1]["dur"]
    in_steps = [s for s in spans if s["ts"] + 1.0 >= first and s["ts"] <= last]
    phases = [s for s in in_steps if s["cat"] in PHASES]
    ops = [s for s in in_steps if s["cat"].startswith("op ")]
    if not ops:
        sys.exit("timeline_summary: no op spans; record with --timeline-ops (BMT_TIMELINE_OPS=1)")

    per_op = defaultdict(float)  # (phase, op name) -> us
    calls = defaultdict(int)
    phase_total = defaultdict(float)
    phase_covered = defaultdict(float)

    gap_at = defaultdict(float)  # (phase, where) -> us
    gap_count = defaultdict(int)

    def add(phase, members):
        for op in outermost(members):
            name = op_name(op)
            per_op[(phase, name)] += op["dur"]
            calls[(phase, name)] += 1
            if phase in PHASES:
                phase_covered[phase] += op["dur"]

    placed = set()
    for p in phases:
        phase_total[p["cat"]] += p["dur"]
        members = [op for op in ops if contains(p, op)]
        placed.update(id(op) for op in members)
        add(p["cat"], members)
        cursor = p["ts"]
        for i, op in enumerate(outermost(members)):
            if op["ts"] > cursor:
                where = "before the first op" if i == 0 else "before " + op_name(op)
                gap_at[(p["cat"], where)] += op["ts"] - cursor
                gap_count[(p["cat"], where)] += 1
            cursor = max(cursor, op["ts"] + op["dur"])
        end = p["ts"] + p["dur"]
        if end > cursor:
            gap_at[(p["cat"], "after the last op")] += end - cursor
            gap_count[(p["cat"], "after the last op")] += 1
    # Ops outside every phase, except those that hold phases (the block list's own op).
    add("outside blocks", [op for op in ops if id(op) not in placed and not any(contains(op, p) for p in phases)])

    n = len(steps)
    step_ms = sum(s["dur"] for s in steps) / n / 1000.0
    print(f"{n} steps, {step_ms:.2f} ms per step on the compute stream")
    print(f"{'phase':<16}{'op':<28}{'ms/step':>10}{'calls/step':>12}{'% step':>8}")
    for phase in list(PHASES) + ["outside blocks"]:
        rows = sorted(((v, k[1]) for k, v in per_op.items() if k[0] == phase), reverse=True)
        if phase in PHASES and phase_total[phase] > 0:
            total = phase_total[phase] / n / 1000.0
            print(f"{phase:<16}{'(all)':<28}{total:>10.2f}{'':>12}{100 * total / step_ms:>7.1f}%")
        # Phases with spans of their own are labelled on their "(all)" row; the ops outside them on
        # their first row.
        label = "" if phase in PHASES else phase
        for us, name in rows:
            ms = us / n / 1000.0
            print(f"{label:<16}{name:<28}{ms:>10.2f}{calls[(phase, name)] / n:>12.1f}{100 * ms / step_ms:>7.1f}%")
            label = ""
        if phase in PHASES and phase_total[phase] > 0:
            gap = (phase_total[phase] - phase_covered[phase]) / n / 1000.0
            print(f"{'':<16}{'(not in any op)':<28}{gap:>10.2f}{'':>12}{100 * gap / step_ms:>7.1f}%")
            if gaps:
                where = sorted(((v, k[1]) for k, v in gap_at.items() if k[0] == phase), reverse=True)
                for us, name in where[:8]:
                    ms = us / n / 1000.0
                    count = gap_count[(phase, name)] / n
                    print(f"{'':<18}{'gap ' + name:<26}{ms:>10.2f}{count:>12.1f}{100 * ms / step_ms:>7.1f}%")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", help="one rank's trace (trace.rank0.json)")
    ap.add_argument("--skip", type=int, default=1, help="warm-up steps to leave out (default 1)")
    ap.add_argument("--gaps", action="store_true", help="split each phase's time in no op by where it falls")
    args = ap.parse_args()
    summarize(load(args.trace), args.skip, args.gaps)


if __name__ == "__main__":
    main()
