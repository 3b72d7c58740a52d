#!/usr/bin/python3
"""Plot tools/bench_zero.sh results: per-rank memory of model states against dp for each ZeRO stage.

usage: /usr/bin/python3 tools/plot_zero.py [DIR]   (default runs/bench_zero; writes DIR/zero_memory.png)

Measured (solid) and predicted by --dry-run (dashed) model-state memory (params + grads + optimizer)
per rank, with the ZeRO paper's 2+2+12 bytes/parameter formula (dotted) for reference.
"""
import argparse
import csv
import os
import sys
from collections import defaultdict


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\nusage:")[0],
                                 epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", nargs="?", default="runs/bench_zero", help="the benchmark's results folder (default runs/bench_zero)")
    out = ap.parse_args().dir
    if not os.path.isdir(out):
        sys.exit(f"{sys.argv[0]}: error: '{out}' is not a folder of benchmark results (run the benchmark first)")
    if not os.path.exists(f"{out}/zero_memory.csv"):
        sys.exit(f"{sys.argv[0]}: error: '{out}' has no zero_memory.csv (run tools/bench_zero.sh first)")
    rows = list(csv.DictReader(open(f"{out}/zero_memory.csv")))
    if not rows:
        sys.exit(f"{sys.argv[0]}: error: '{out}/zero_memory.csv' has no rows (run tools/bench_zero.sh again)")
    series = defaultdict(dict)
    for n, r in enumerate(rows, start=2):
        try:
            series[(int(r["stage"]), r["source"])][int(r["dp"])] = (float(r["model_states"]), float(r["zero_paper"]))
        except (KeyError, TypeError, ValueError) as e:
            sys.exit(f"{sys.argv[0]}: error: '{out}/zero_memory.csv', line {n}: not a row of tools/bench_zero.sh "
                     f"(stage, source, dp, model_states, zero_paper): {e!r}")
    try:  # after parsing, so that --help works without matplotlib (as tools/plot_run.py)
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit(f"{sys.argv[0]}: error: needs matplotlib (Debian: apt-get install python3-matplotlib; "
                 "or pip install matplotlib)")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = {0: "tab:blue", 1: "tab:orange", 2: "tab:green", 3: "tab:red"}
    for stage in sorted({k[0] for k in series}):
        for source, style in (("measured", "-o"), ("predicted", "--x")):
            pts = sorted(series.get((stage, source), {}).items())
            if pts:
                ax.plot([p[0] for p in pts], [p[1][0] for p in pts], style, color=colors[stage],
                        label=f"stage {stage} {source}")
        pts = sorted(series.get((stage, "predicted"), {}).items())
        if pts:
            ax.plot([p[0] for p in pts], [p[1][1] for p in pts], ":", color=colors[stage], alpha=0.6,
                    label=f"stage {stage} ZeRO paper (2+2+12)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("dp (ranks)")
    ax.set_ylabel("model states per rank (MiB)")
    ax.set_title("Trident ZeRO: memory per rank, 52M-parameter model (fp32)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(f"{out}/zero_memory.png", dpi=120)
    print(f"wrote {out}/zero_memory.png")


if __name__ == "__main__":
    main()
