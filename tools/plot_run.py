#!/usr/bin/python3
"""plot_run.py (installed as trident-plot): draw a Trident run's metrics.csv as a PNG.

usage: trident-plot [-o OUT.png] [--smooth N] [--title T] RUN [RUN ...]
       /usr/bin/python3 tools/plot_run.py ...            (from a source tree)

RUN is a run directory ([train] out_dir, holding metrics.csv) or a metrics.csv file. One RUN
writes RUN/metrics.png unless -o says otherwise; several RUNs are overlaid (one colour each,
labelled by directory name) into -o (default runs_compare.png in the current directory).

Panels: train loss (thin; --smooth N adds an N-step moving average) and validation loss (dots);
learning rate; gradient norm (log scale); tokens/s and MFU; memory per rank by category (stacked
for one run, the tracked total per run when overlaid) and peak RSS; step time. Steps whose update
was skipped ([train] nonfinite = skip, or an fp16 overflow: the `skipped` column) are red lines in the loss panel and
counted in the title. metrics.csv holds the history of the
state being trained across restarts (one row per step, the `leg` column naming the invocation of
`trident train` that trained it): a dashed vertical line marks where each restart took over.

Needs matplotlib (Debian: python3-matplotlib, installed by tools/install_deps.sh --test).
Exit status: 0 written, 1 no matplotlib or unreadable file, 2 bad usage or a run without rows.
"""
import argparse
import csv
import os
import sys

MEM_COLUMNS = ["mem_params", "mem_grads", "mem_optimizer", "mem_gathered", "mem_activations", "mem_comm",
               "mem_checkpoint"]


def number(text):
    """The cell as a float; None when it is empty, not a number, or infinite (the grad_norm of an
    fp16 overflow step: nothing to draw). NaN is kept (a gap in the line)."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return None if v in (float("inf"), float("-inf")) else v


def read_run(path):
    """(label, csv path, rows as dicts of floats/str) of a run directory or a metrics.csv."""
    csv_path = os.path.join(path, "metrics.csv") if os.path.isdir(path) else path
    if not os.path.isfile(csv_path):
        raise FileNotFoundError(f"{path}: no metrics.csv (give a run directory, [train] out_dir, or a metrics.csv)")
    with open(csv_path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        header = reader.fieldnames or []
    if rows and not {"step", "train_loss"} <= set(header):
        raise csv.Error(f"its header has no step and train_loss columns: {','.join(header)[:80]}")
    # A row with fewer fields than the header (cut short by a kill, or being written now), or more
    # (not a row of this header): left out, named.
    short = [r for r in rows if None in r.values()]
    long_ = [r for r in rows if None in r]
    for bad, what in ((short, "without every column (cut short?)"), (long_, "with more fields than the header")):
        if bad:
            steps = [r.get("step") or "?" for r in bad]
            print(f"trident-plot: warning: {csv_path}: {len(bad)} row(s) {what} left out "
                  f"(step {', '.join(steps[:5])}{', ...' if len(steps) > 5 else ''})", file=sys.stderr)
    rows = [r for r in rows if None not in r and None not in r.values()]
    # A step or train_loss that is no number at all (not even nan/inf) is not a metrics.csv row of
    # trident: named, not drawn as an empty panel.
    for n, r in enumerate(rows, start=1):
        for column in ("step", "train_loss"):
            try:
                float(r[column])
            except ValueError:
                raise csv.Error(f"row {n} (step {r['step'] or '?'}): {column} '{r[column][:40]}' is not a number") from None
    label = os.path.basename(os.path.normpath(os.path.dirname(os.path.abspath(csv_path))))
    return label, csv_path, rows


def series(rows, column):
    """(steps, values) of the rows where `column` is a number."""
    xs, ys = [], []
    for r in rows:
        x, y = number(r.get("step")), number(r.get(column))
        if x is not None and y is not None:
            xs.append(x)
            ys.append(y)
    return xs, ys


def moving_average(ys, n):
    out, acc = [], 0.0
    for i, y in enumerate(ys):
        acc += y
        if i >= n:
            acc -= ys[i - n]
        out.append(acc / min(i + 1, n))
    return out


def skipped_steps(rows):
    """Steps whose update was dropped ([train] nonfinite = skip, or an fp16 overflow): skipped = 1."""
    return [x for x, y in zip(*series(rows, "skipped")) if y > 0]


def restarts(rows):
    """Steps where the leg (invocation of trident train) changes: the first step of each later leg."""
    out, prev = [], None
    for r in rows:
        leg = r.get("leg")
        if leg and prev is not None and leg != prev:
            out.append(number(r.get("step")))
        prev = leg or prev
    return [s for s in out if s is not None]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="trident-plot", description=__doc__.split("\n\n")[0],
                                 epilog="\n\n".join(p for p in __doc__.split("\n\n")[1:] if not p.startswith("usage:")),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="RUN", help="run directory or metrics.csv")
    ap.add_argument("-o", "--output", help="plot to write, .png, .pdf or .svg (default RUN/metrics.png, or runs_compare.png for several)")
    ap.add_argument("--smooth", type=int, default=0, metavar="N", help="also draw an N-step moving average of the train loss")
    ap.add_argument("--title", help="figure title (default: the run names)")
    args = ap.parse_args(argv)
    if args.smooth < 0:
        ap.error("--smooth N needs N >= 0")
    if args.output is not None:
        ext = os.path.splitext(args.output)[1].lower()
        if ext not in (".png", ".pdf", ".svg"):
            ap.error(f"-o {args.output}: the plot is a .png, .pdf or .svg file")
        if os.path.isdir(args.output):
            ap.error(f"-o {args.output} is a directory: give a file name")

    runs = []
    for path in args.runs:
        try:
            label, csv_path, rows = read_run(path)
        except OSError as e:
            print(f"trident-plot: error: {e}", file=sys.stderr)
            return 1
        except (UnicodeDecodeError, csv.Error) as e:
            print(f"trident-plot: error: {path}: not a metrics.csv of trident ({e})", file=sys.stderr)
            return 1
        if not rows:
            if len(args.runs) == 1:
                print(f"trident-plot: error: {csv_path} has no rows yet", file=sys.stderr)
                return 2
            print(f"trident-plot: warning: {csv_path} has no rows yet: left out of the plot", file=sys.stderr)
            continue
        runs.append((label, csv_path, rows))
    if not runs:
        print("trident-plot: error: none of the runs has rows yet", file=sys.stderr)
        return 2
    labels = [r[0] for r in runs]
    if len(set(labels)) < len(labels):  # same directory names: tell them apart by their paths
        runs = [(os.path.dirname(os.path.abspath(c)), c, rows) for _, c, rows in runs]
    out = args.output or (os.path.join(os.path.dirname(runs[0][1]), "metrics.png") if len(runs) == 1 else "runs_compare.png")
    # Where the plot goes is checked before drawing: an error, not savefig's traceback.
    out_dir = os.path.dirname(out) or "."
    if os.path.isdir(out):
        print(f"trident-plot: error: {out} is a directory: cannot write the plot there (give -o FILE.png)", file=sys.stderr)
        return 1
    if not os.path.isdir(out_dir):
        print(f"trident-plot: error: cannot write {out}: no directory {out_dir}", file=sys.stderr)
        return 1

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("trident-plot: error: needs matplotlib (Debian: apt-get install python3-matplotlib; "
              "or pip install matplotlib)", file=sys.stderr)
        return 1

    overlay = len(runs) > 1
    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5))
    (ax_loss, ax_lr, ax_norm), (ax_speed, ax_mem, ax_time) = axes
    ax_mfu = ax_speed.twinx()
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, _, rows) in enumerate(runs):
        c = colors[i % len(colors)]
        name = label if overlay else None
        xs, ys = series(rows, "train_loss")
        ax_loss.plot(xs, ys, color=c, lw=0.6, alpha=0.45 if args.smooth else 0.9,
                     label=f"{label} train" if overlay else "train")
        if args.smooth > 1 and ys:
            ax_loss.plot(xs, moving_average(ys, args.smooth), color=c, lw=1.4,
                         label=f"{label} train ({args.smooth}-step mean)" if overlay else f"train ({args.smooth}-step mean)")
        vx, vy = series(rows, "val_loss")
        if vx:
            ax_loss.plot(vx, vy, "o-", color=c, ms=4, lw=1.0, mec="black", mew=0.5,
                         label=f"{label} val" if overlay else "val")
        ax_lr.plot(*series(rows, "lr"), color=c, label=name)
        ax_norm.plot(*series(rows, "grad_norm"), color=c, lw=0.7, label=name)
        ax_speed.plot(*series(rows, "tokens_per_sec"), color=c, lw=0.7, label=f"{label} tok/s" if overlay else "tok/s")
        mx, my = series(rows, "mfu")
        if mx:
            scale = 100.0 if max(my) <= 1.0 else 1.0  # a fraction or a percentage
            ax_mfu.plot(mx, [m * scale for m in my], color=c if overlay else "tab:red", lw=0.7, ls=":",
                        label=f"{label} MFU" if overlay else "MFU")
        present = [m for m in MEM_COLUMNS if any(number(r.get(m)) is not None for r in rows)]
        if present and not overlay:
            stepped = [r for r in rows if number(r.get("step")) is not None]
            steps = [number(r.get("step")) for r in stepped]
            stacks = [[number(r.get(m)) or 0.0 for r in stepped] for m in present]
            ax_mem.stackplot(steps, *stacks, labels=[m[4:] for m in present], alpha=0.8)
        elif present:
            stepped = [r for r in rows if number(r.get("step")) is not None]
            totals = [sum(number(r.get(m)) or 0.0 for m in present) for r in stepped]
            ax_mem.plot([number(r.get("step")) for r in stepped], totals, color=c, label=f"{label} tracked")
        px, py = series(rows, "peak_mem_mib")
        if px and not overlay:
            ax_mem.plot(px, py, color="black", lw=1.0, ls="--", label="peak RSS")
        elif px:
            ax_mem.plot(px, py, color=c, lw=1.0, ls="--", label=f"{label} peak RSS")
        ax_time.plot(*series(rows, "ms_per_step"), color=c, lw=0.7, label=name)
        for k, x in enumerate(skipped_steps(rows)):
            ax_loss.axvline(x, color="red" if not overlay else c, lw=0.8, alpha=0.7,
                            label=(f"{label} skipped" if overlay else "skipped update") if k == 0 else None)
        for s in restarts(rows):
            for ax in (ax_loss, ax_lr, ax_norm, ax_speed, ax_mem, ax_time):
                ax.axvline(s, color=c if overlay else "gray", ls="--", lw=0.8, alpha=0.6)

    ax_loss.set_title("loss")
    ax_lr.set_title("learning rate")
    ax_norm.set_title("gradient norm (before clipping)")
    ax_norm.set_yscale("log")
    ax_speed.set_title("throughput")
    ax_speed.set_ylabel("tokens/s (global)")
    ax_mfu.set_ylabel("MFU (%, dotted)")
    ax_mem.set_title("memory per rank (MiB)")
    ax_time.set_title("step time (ms)")
    for ax in axes.flat:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in (ax_loss, ax_mem, ax_time) + ((ax_lr,) if overlay else ()):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    lines = ax_speed.get_legend_handles_labels()[0] + ax_mfu.get_legend_handles_labels()[0]
    if lines:
        ax_speed.legend(lines, [h.get_label() for h in lines], fontsize=7)
    n_restarts = sum(len(restarts(rows)) for _, _, rows in runs)
    title = args.title or ", ".join(r[0] for r in runs)
    summary = f"{sum(len(r[2]) for r in runs)} steps, {n_restarts} restart{'' if n_restarts == 1 else 's'}"
    n_skipped = sum(len(skipped_steps(rows)) for _, _, rows in runs)
    if n_skipped:
        summary += f", {n_skipped} skipped"
    fig.suptitle(f"{title}  ({summary}: dashed lines)")
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=110)
    except OSError as e:
        print(f"trident-plot: error: cannot write {out}: {e.strerror or e}", file=sys.stderr)
        return 1
    print(f"trident-plot: wrote {out}: {title} ({summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
