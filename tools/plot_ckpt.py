#!/usr/bin/python3
"""Summarise and plot tools/bench_ckpt.sh results.

usage: /usr/bin/python3 tools/plot_ckpt.py [DIR]   (default runs/bench_ckpt)

Reads DIR's logs and metrics and writes
  DIR/ckpt_io.csv     ranks,operation,bytes,seconds,gb_per_s (GB = 1e9 bytes): dd, every save, every load
  DIR/ckpt_steps.csv  ranks,step,base_ms,sync_ms,async_ms,async_saving: step times with and without saves
  DIR/ckpt_io.png     bandwidth bars (left) and step times around asynchronous saves (right)
and prints the summary table that docs/checkpoint-io.md quotes.
"""
import argparse
import csv
import glob
import os
import re
import sys


def read(path):
    """The text of one of the benchmark's files, or a clear exit naming the one that is missing."""
    try:
        return open(path).read()
    except OSError as e:
        sys.exit(f"{sys.argv[0]}: error: cannot read '{path}' ({e.strerror}): the results are incomplete "
                 "(rerun tools/bench_ckpt.sh)")
    except UnicodeDecodeError:
        sys.exit(f"{sys.argv[0]}: error: '{path}' is not a text file: not a result of tools/bench_ckpt.sh")


def dd_result(path):
    m = re.search(r"^(\d+) bytes .* copied, ([0-9.]+) s", read(path), re.M)
    return (int(m.group(1)), float(m.group(2))) if m else None


def step_ms(run_dir):
    path = os.path.join(run_dir, "metrics.csv")
    try:
        rows = list(csv.DictReader(read(path).splitlines()))
        steps = {int(r["step"]): float(r["ms_per_step"]) for r in rows}
    except (KeyError, TypeError, ValueError):
        sys.exit(f"{sys.argv[0]}: error: '{path}' is not a Trident metrics.csv (columns step, ms_per_step)")
    if not steps:
        sys.exit(f"{sys.argv[0]}: error: '{path}' holds no steps: the run did not train (rerun tools/bench_ckpt.sh)")
    return steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\nusage:")[0],
                                 epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", nargs="?", default="runs/bench_ckpt", help="the benchmark's results folder (default runs/bench_ckpt)")
    out = ap.parse_args().dir
    if not os.path.isdir(out):
        sys.exit(f"{sys.argv[0]}: error: '{out}' is not a folder of benchmark results (run the benchmark first)")
    io_rows, step_rows = [], []

    def add(ranks, op, nbytes, secs):
        io_rows.append(dict(ranks=ranks, operation=op, bytes=nbytes, seconds=f"{secs:.3f}",
                            gb_per_s=f"{nbytes / secs / 1e9:.3f}" if secs > 0 else ""))

    for name, op in (("dd_write.log", "dd_write_fsync"), ("dd_read.log", "dd_read"),
                     ("dd_write_after.log", "dd_write_fsync_after")):
        if not os.path.exists(os.path.join(out, name)):
            continue
        r = dd_result(os.path.join(out, name))
        if not r:
            sys.exit(f"{sys.argv[0]}: error: '{os.path.join(out, name)}' holds no dd result line "
                     "(\"N bytes ... copied, S s\"): the results are incomplete (rerun tools/bench_ckpt.sh)")
        add(0, op, *r)
    ranks = sorted({int(m.group(1)) for p in glob.glob(os.path.join(out, "r*_sync.log"))
                    for m in [re.search(r"r(\d+)_sync\.log$", p)] if m})
    slow = {}
    for R in ranks:
        ck = sorted(glob.glob(os.path.join(out, f"r{R}_sync", "checkpoints", "step_*.h5")))
        size = os.path.getsize(ck[-1]) if ck else 0
        for s in re.findall(r"^checkpoint: \S+ \((?:interval|end of run), ([0-9.]+) s\)",
                            read(os.path.join(out, f"r{R}_sync.log")), re.M):
            add(R, "save_sync", size, float(s))
        alog = read(os.path.join(out, f"r{R}_async.log"))
        starts = [(int(a), float(b)) for a, b in
                  re.findall(r"^checkpoint: step (\d+) \(\w+\) snapshot in ([0-9.]+) s", alog, re.M)]
        writes = [float(w) for w in re.findall(r"written in the background in ([0-9.]+) s", alog)]
        for (_, stall), w in zip(starts, writes):
            add(R, "save_async_stall", size, stall)
            add(R, "save_async_write", size, w)
        base, sync, asy = (step_ms(os.path.join(out, f"r{R}_{m}")) for m in ("base", "sync", "async"))
        saving = set()
        for (s, _), w in zip(starts, writes):
            t, k = 0.0, s + 1
            while k in asy and t < w * 1000.0:
                saving.add(k)
                t += asy[k]
                k += 1
        for k in sorted(base):
            step_rows.append(dict(ranks=R, step=k, base_ms=base.get(k, ""), sync_ms=sync.get(k, ""),
                                  async_ms=asy.get(k, ""), async_saving=int(k in saving)))
        during = [k for k in saving if k in base]
        if during:
            slow[R] = sum(asy[k] for k in during) / sum(base[k] for k in during) - 1.0
        for kind in ("warm", "cold", "cold_noverify"):
            p = os.path.join(out, f"r{R}_load_{kind}.log")
            if not os.path.exists(p):
                continue
            text = read(p)
            v = re.search(r"verified \(XXH64.*\) in ([0-9.]+) s", text)
            ld = re.search(r"loaded in ([0-9.]+) s", text)
            if v:
                add(R, f"verify_{kind}", size, float(v.group(1)))
            if ld:
                add(R, f"load_{kind}" if kind != "cold" else "load_after_cold_verify", size, float(ld.group(1)))

    if not io_rows and not step_rows:
        sys.exit(f"{sys.argv[0]}: error: '{out}' holds no results of tools/bench_ckpt.sh (no dd_*.log, no "
                 "rN_sync.log): nothing to summarise, nothing written")
    with open(os.path.join(out, "ckpt_io.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["ranks", "operation", "bytes", "seconds", "gb_per_s"], lineterminator="\n")
        w.writeheader()
        w.writerows(io_rows)
    with open(os.path.join(out, "ckpt_steps.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["ranks", "step", "base_ms", "sync_ms", "async_ms", "async_saving"], lineterminator="\n")
        w.writeheader()
        w.writerows(step_rows)

    # Summary: median bandwidth per (ranks, operation); a save's first run pays page-fault costs.
    groups = {}
    for r in io_rows:
        groups.setdefault((r["ranks"], r["operation"]), []).append(r)
    print(f"{'ranks':>5}  {'operation':<24} {'n':>2} {'median s':>9} {'median GB/s':>11}  all GB/s")
    for (R, op), rs in sorted(groups.items()):
        secs = sorted(float(r["seconds"]) for r in rs)
        bw = [r["gb_per_s"] for r in rs]
        med = secs[len(secs) // 2]
        print(f"{R:>5}  {op:<24} {len(rs):>2} {med:>9.3f} {int(rs[0]['bytes']) / med / 1e9:>11.3f}  {' '.join(bw)}")
    for R, s in sorted(slow.items()):
        print(f"{R:>5}  step slowdown while an async save is written: {100 * s:+.1f}% "
              f"(steps overlapping the background write vs the same steps without saves)")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [1.3, 1]})
    labels, values, colors = [], [], []
    palette = {"dd": "tab:gray", "save": "tab:blue", "async": "tab:green", "load": "tab:orange", "verify": "tab:red"}
    order = [("dd_write_fsync", "dd write+fsync\n(before)", "dd"), ("dd_write_fsync_after", "dd write+fsync\n(after)", "dd"), ("save_sync", "sync save", "save"),
             ("save_async_write", "async: background write", "async"), ("save_async_stall", "async: step stall", "async"),
             ("dd_read", "dd read (cold)" if os.path.exists(os.path.join(out, "r1_load_cold.log")) else "dd read", "dd"),
             ("load_cold_noverify", "load (cold)", "load"), ("verify_cold", "verify (cold)", "verify"),
             ("load_warm", "load (cached)", "load")]
    for op, label, col in order:
        for R in ([0] if op.startswith("dd") else ranks):
            rs = groups.get((R, op))
            if not rs:
                continue
            secs = sorted(float(r["seconds"]) for r in rs)
            labels.append(label + ("" if R == 0 else f"\n{R} rank" + ("s" if R > 1 else "")))
            values.append(int(rs[0]["bytes"]) / secs[len(secs) // 2] / 1e9)
            colors.append(palette[col])
    ax.bar(range(len(values)), values, color=colors)
    ax.set_xticks(range(len(values)))
    ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("GB/s (checkpoint bytes / seconds, median)")
    ax.set_yscale("log")
    ax.set_title("Checkpoint I/O, 107M parameters (1.3 GB per checkpoint)", fontsize=10)
    for i, v in enumerate(values):
        ax.text(i, v, f"{v:.2f}", ha="center", va="bottom", fontsize=7)
    for R, style in zip(ranks, ("-", "--")):
        rows = [r for r in step_rows if r["ranks"] == R]
        st = [r["step"] for r in rows]
        bx.plot(st, [r["base_ms"] for r in rows], "k" + style, lw=1, label=f"{R} rank(s): no saves")
        bx.plot(st, [r["async_ms"] for r in rows], "g" + style, marker="o", ms=3, lw=1, label=f"{R} rank(s): async saves")
        for r in rows:
            if r["async_saving"]:
                bx.axvspan(r["step"] - 0.5, r["step"] + 0.5, color="g", alpha=0.08)
    bx.set_xlabel("step (shaded: a background save is being written)")
    bx.set_ylabel("ms per step")
    bx.set_title("Step time during asynchronous saves", fontsize=10)
    bx.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "ckpt_io.png"), dpi=110)
    print(f"wrote {out}/ckpt_io.csv, {out}/ckpt_steps.csv, {out}/ckpt_io.png")


if __name__ == "__main__":
    main()
