#!/usr/bin/env python3
"""Plot bench_auto_plan's JSON: measured plans (step time vs step peak), their
Pareto frontier, the budgets, and where `auto` landed for each.
Run with /usr/bin/python3 (Debian's matplotlib)."""
import argparse
import json

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--in", dest="src", default="bench/results/auto_plan.json")
    ap.add_argument("--out", default="bench/results/auto_plan.png")
    args = ap.parse_args()
    data = json.load(open(args.src))
    mib = 1024.0 * 1024.0
    pts = [(s["peak_bytes"] / mib, s["step_seconds"] * 1e3, s["name"]) for s in data["sample"]]
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=14, color="0.6", label="measured plans")
    frontier, best = [], float("inf")
    for x, y, _ in sorted(pts):
        if y < best:
            frontier.append((x, y))
            best = y
    ax.plot([p[0] for p in frontier], [p[1] for p in frontier], color="0.3", lw=1, label="Pareto frontier")
    for name in ("none", "selective", "full"):
        for x, y, n in pts:
            if n == name:
                ax.annotate(name, (x, y), fontsize=8, xytext=(3, 3), textcoords="offset points")
    for b in data["budgets"]:
        x = b["budget_bytes"] / mib
        ax.axvline(x, color="tab:blue", lw=0.6, ls=":")
        ax.scatter([b["auto_peak_bytes"] / mib], [b["auto_step_seconds"] * 1e3], marker="*", s=90, color="tab:red",
                   zorder=3)
    ax.scatter([], [], marker="*", s=90, color="tab:red", label="auto, one per budget (dotted)")
    ax.set_xlabel("step peak memory (MiB)")
    ax.set_ylabel("step time (ms)")
    ax.set_title("Automatic checkpoint plan vs measured plans")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
