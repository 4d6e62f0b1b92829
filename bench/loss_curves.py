#!/usr/bin/env python3
"""Loss curves of several bmt-train runs (--metrics JSON lines) in one SVG, and a table of each
run's final loss (the mean of its last 100 steps) against the first run's.
    bench/loss_curves.py OUT.svg TITLE LABEL=metrics.jsonl [LABEL=metrics.jsonl ...]
Curves are smoothed over 20 steps; the table uses the raw losses."""
import json
import math
import sys
from xml.sax.saxutils import escape

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def read(path):
    steps, losses = [], []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if "step" in r and isinstance(r.get("loss"), (int, float)) and math.isfinite(r["loss"]):
                steps.append(r["step"])
                losses.append(r["loss"])
    return steps, losses


def smooth(values, width=20):
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= width:
            total -= values[i - width]
        out.append(total / min(i + 1, width))
    return out


def main():
    target, title, runs = sys.argv[1], sys.argv[2], [a.split("=", 1) for a in sys.argv[3:]]
    data = [(label, *read(path)) for label, path in runs]
    data = [d for d in data if d[1]]
    if not data:
        sys.exit("no run wrote a loss")
    w, h, left, right, top, bottom = 760, 420, 70, 20, 40, 50
    xmax = max(s[-1] for _, s, _ in data)
    curves = [(label, steps, smooth(losses)) for label, steps, losses in data]
    tail = [v for _, _, ys in curves for v in ys[len(ys) // 10:]]
    ymin, ymax = min(tail), max(tail)
    ymax += 0.05 * (ymax - ymin)
    x = lambda s: left + (w - left - right) * s / xmax
    y = lambda v: top + (h - top - bottom) * (ymax - min(max(v, ymin), ymax)) / (ymax - ymin)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="14">{escape(title)}</text>']
    for i in range(6):
        v = ymin + (ymax - ymin) * i / 5
        svg.append(f'<line x1="{left}" x2="{w - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>')
        svg.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.3f}</text>')
    for i in range(6):
        s = xmax * i / 5
        svg.append(f'<text x="{x(s):.1f}" y="{h - bottom + 18}" text-anchor="middle">{int(s)}</text>')
    svg.append(f'<text x="{(left + w - right) / 2}" y="{h - 10}" text-anchor="middle">step (loss smoothed over 20 steps)</text>')
    for i, (label, steps, ys) in enumerate(curves):
        points = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in zip(steps, ys))
        color = COLORS[i % len(COLORS)]
        svg.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{points}"/>')
        svg.append(f'<text x="{w - right - 180}" y="{top + 18 * (i + 1)}" fill="{color}">{escape(label)}</text>')
    svg.append("</svg>")
    with open(target, "w") as f:
        f.write("\n".join(svg) + "\n")
    print(f"| run | steps | final loss (mean of the last 100 steps) | against {data[0][0]} |")
    print("|---|---|---|---|")
    first = None
    for label, steps, losses in data:
        final = sum(losses[-100:]) / len(losses[-100:])
        first = final if first is None else first
        print(f"| {label} | {steps[-1]} | {final:.4f} | {100 * (final - first) / first:+.2f}% |")


if __name__ == "__main__":
    main()
