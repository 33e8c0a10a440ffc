#!/usr/bin/python3
"""Plot of the checkpoint-mode benchmark: C++ trainer against its PyTorch twin.

Owns the figure only. Input: the JSON the C++ benchmark writes,
  {"title": "...", "modes": [{"mode", "cpp_step_seconds_median", "cpp_step_peak_bytes",
                             "cpp_activation_peak_bytes",
                             "torch_step_seconds_median", "torch_step_peak_bytes"}, ...]}
Output: a PNG with step time (ms, y) against step peak memory (MiB, x), one
point per mode and implementation, labelled with the mode name; where the
C++ activation peak (the step's peak without the parameters' gradients) was
measured, a hollow point at it, joined to the mode's step peak. Entries
missing (or null) for one implementation are skipped.

Usage: /usr/bin/python3 bench/plot_vs_pytorch.py --in RESULT.json --out PLOT.png
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# (key prefix in the JSON, legend label, colour, marker)
IMPLEMENTATIONS = [("cpp", "C++ (LibTorch)", "tab:blue", "o"), ("torch", "PyTorch twin", "tab:orange", "s")]


def points(modes, prefix):
    """[(mode, peak MiB, median ms)] for one implementation."""
    out = []
    for m in modes:
        sec, peak = m.get(f"{prefix}_step_seconds_median"), m.get(f"{prefix}_step_peak_bytes")
        if sec is not None and peak is not None:
            out.append((m["mode"], peak / 2**20, sec * 1e3))
    return out


def activation_points(modes):
    """[(activation peak MiB, step peak MiB, median ms)] of the C++ modes that have one."""
    out = []
    for m in modes:
        sec, peak, act = (m.get(k) for k in ("cpp_step_seconds_median", "cpp_step_peak_bytes",
                                              "cpp_activation_peak_bytes"))
        if sec is not None and peak is not None and act is not None:
            out.append((act / 2**20, peak / 2**20, sec * 1e3))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description="Step time against peak memory per checkpoint mode.")
    p.add_argument("--in", dest="inp", required=True, help="benchmark result JSON")
    p.add_argument("--out", required=True, help="PNG to write")
    a = p.parse_args(argv)
    with open(a.inp) as f:
        doc = json.load(f)
    modes = doc.get("modes", [])
    if not modes:
        sys.exit(f"plot_vs_pytorch: {a.inp} has no modes")

    fig, ax = plt.subplots(figsize=(7, 5))
    plotted = 0
    for prefix, label, colour, marker in IMPLEMENTATIONS:
        pts = points(modes, prefix)
        if not pts:
            continue
        plotted += len(pts)
        ax.scatter([x for _, x, _ in pts], [y for _, _, y in pts], c=colour, marker=marker, s=60, label=label,
                   zorder=3)
        for mode, x, y in pts:
            ax.annotate(mode, (x, y), textcoords="offset points", xytext=(6, 4), fontsize=9, color=colour)
    if not plotted:
        sys.exit(f"plot_vs_pytorch: {a.inp} has no complete (time, memory) pair")
    act = activation_points(modes)
    if act:
        for x, x_step, y in act:
            ax.plot([x, x_step], [y, y], color="tab:blue", linestyle=":", linewidth=1, zorder=2)
        ax.scatter([x for x, _, _ in act], [y for _, _, y in act], facecolors="none", edgecolors="tab:blue",
                   marker="o", s=60, label="C++ activation peak (gradients left out)", zorder=3)
    ax.set_xlabel("peak memory of a step (MiB)")
    ax.set_ylabel("step time, median (ms)")
    ax.set_title(doc.get("title", "gradient checkpointing modes"), fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax.margins(0.15)
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)
    print(f"plot_vs_pytorch: {plotted} points -> {a.out}")


if __name__ == "__main__":
    main()
