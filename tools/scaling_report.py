#!/usr/bin/python3
"""scaling_report.py: a scaling study's results.csv as PNG plots and a markdown summary.

usage: /usr/bin/python3 tools/scaling_report.py [-o DIR] [--machine FILE [--trident EXE]] RESULTS.csv

RESULTS.csv is what jobscripts/scaling/scaling.sh (through point.sbatch) writes: one row per
point (study, mode, layout, ranks, ... tokens_per_s, mfu, mem_ledger_mib, exposed_comm_share,
status). Points are grouped into series by (study, mode, layout), drawn against ranks:
  - tokens/s, with the ideal line (the series' smallest rank count scaled linearly);
  - parallel efficiency = (tokens/s per rank at R) / (tokens/s per rank of the baseline R0: the
    point with the fewest ranks of the same study and mode, any layout, dp on a tie; so a tp or
    pp layout is judged against the same reference as dp). For strong scaling (fixed global batch) this is T(R0) R0 / (T(R) R) with T the step
    time; for weak scaling (fixed batch per dp rank) it is T(R0) / T(R) when R/R0 = dp/dp0;
  - MFU (model FLOPs utilisation, as trident reports it);
  - memory per rank (the sum of trident's mem_* ledger columns, solid; peak RSS, dashed);
  - the share of the step spent in exposed (not overlapped) communication, and in the pipeline
    bubble (dashed; pp layouts).
With --machine FILE every point is also predicted: `trident plan` (the performance model,
docs/scaling.md) for exactly the point's layout, from the resolved deck its run wrote
(RUN_DIR/deck.ini), on that machine file; the table gets the predicted ms/step and its error, and
the tokens/s panel the predicted tokens/s (dashed, x markers).
Writes DIR/scaling.png and DIR/scaling.md (DIR: the CSV's folder by default) and prints the
markdown. Rows whose status is not "ok" are listed as failed points, not drawn. When the same
point (study, mode, layout, ranks) appears more than once, the last row counts.

Needs matplotlib (Debian: python3-matplotlib, installed by tools/install_deps.sh --test).
Exit status: 0 written, 1 unreadable CSV or no matplotlib, 2 bad usage or no usable row.
"""
import argparse
import csv
import math
import os
import shutil
import subprocess
import sys
import tempfile

REQUIRED = ["study", "mode", "layout", "ranks", "tokens_per_s", "status"]


def number(text):
    """The cell as a finite float, None when empty, not a number, NaN or infinite."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def load(path):
    """(ok rows keyed by point, failed rows) of the CSV; raises ValueError naming what is wrong."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: not a scaling results file (no column {', '.join(missing)})")
        rows = list(reader)
    points, failed = {}, []
    for i, r in enumerate(rows, start=2):
        if None in r or any(r.get(c) is None for c in REQUIRED):
            raise ValueError(f"{path}, line {i}: not a row of {len(reader.fieldnames)} columns (a damaged line?)")
        ranks = number(r["ranks"])
        if ranks is None or ranks < 1 or ranks != int(ranks):
            raise ValueError(f"{path}, line {i}: ranks '{r['ranks']}' is not a positive whole number")
        r["ranks"] = str(int(ranks))
        key = (r["study"], r["mode"], r["layout"], int(ranks))
        tps = number(r["tokens_per_s"])
        if r["status"] == "ok" and (tps is None or tps <= 0):
            raise ValueError(f"{path}, line {i}: an ok point with tokens_per_s '{r['tokens_per_s']}' (not a positive "
                             f"number): a damaged row")
        if r["status"] != "ok":
            failed.append(r)
            points.pop(key, None)
        else:
            points[key] = r
    return points, failed


def series_of(points):
    """{(study, mode, layout): [rows sorted by ranks]} with each row's efficiency added: tokens/s
    per rank over that of the baseline of its (study, mode), the point with the fewest ranks of
    any layout (the dp layout on a tie), so layouts compare against one reference."""
    series, base = {}, {}
    for (study, mode, layout, ranks), r in points.items():
        series.setdefault((study, mode, layout), []).append(r)
        b = base.get((study, mode))
        if b is None or (ranks, layout != "dp") < (int(b["ranks"]), b["layout"] != "dp"):
            base[(study, mode)] = r
    for (study, mode, _), rows in series.items():
        rows.sort(key=lambda r: int(r["ranks"]))
        b = base[(study, mode)]
        per_rank0 = number(b["tokens_per_s"]) / int(b["ranks"])
        for r in rows:
            r["efficiency"] = number(r["tokens_per_s"]) / int(r["ranks"]) / per_rank0
            r["baseline"] = f"{b['ranks']} rank(s), layout {b['layout']}"
    return series


def find_trident(given):
    """The trident executable: --trident, else TRIDENT_BIN, else build/bin/trident of this checkout, else PATH."""
    for c in (given, os.environ.get("TRIDENT_BIN"),
              os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "bin", "trident")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return shutil.which("trident")


def predict(points, machine, trident):
    """Adds predicted_ms (and predicted_tokens_per_s) to every point whose run folder holds its
    resolved deck: `trident plan` for exactly that layout. Returns the points it could not predict,
    each with the reason (shown in the report, never fatal)."""
    missed = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in points.values():
            deck = os.path.join(r.get("run_dir", ""), "deck.ini")
            if not os.path.isfile(deck):
                missed.append((r, f"no {deck}"))
                continue
            csv_path = os.path.join(tmp, "plan.csv")
            cmd = [trident, "plan", "--config", deck, "--machine", machine, "--ranks", r["ranks"],
                   "--tp", r.get("tp") or "1", "--pp", r.get("pp") or "1", "--zero-stages", r.get("zero_stage") or "0",
                   "--fixed-micro-batch", "--fixed-recompute", "--fixed-schedule", "--csv", csv_path]
            p = subprocess.run(cmd, capture_output=True, text=True)  # exit 1: over memory, still predicted
            rows = []
            if os.path.isfile(csv_path):
                with open(csv_path, newline="") as f:
                    rows = list(csv.DictReader(f))
                os.remove(csv_path)
            ms = number(rows[0].get("step_ms")) if rows else None
            if ms is None or ms <= 0:
                last = (p.stderr or p.stdout).strip().splitlines()
                missed.append((r, last[-1] if last else f"trident plan exited {p.returncode}"))
                continue
            r["predicted_ms"] = ms
            tps, meas = number(r.get("tokens_per_step")), number(r.get("ms_per_step"))
            if tps:
                r["predicted_tokens_per_s"] = tps / (ms / 1e3)
            if meas:
                r["prediction_error"] = (ms - meas) / meas
    return missed


def fmt(v, spec):
    return "" if v is None else format(v, spec)


def markdown(series, failed, csv_path, machine=None, missed=()):
    studies = ", ".join(sorted({k[0] for k in series}))
    out = [f"# Scaling study: {studies}", "",
           f"From `{csv_path}`. Efficiency: tokens/s per rank against the baseline of the same study and mode.", ""]
    if machine:
        out += [f"Predicted: `trident plan` for each point's layout and resolved deck on `{machine}` (the performance "
                f"model, docs/scaling.md); error = (predicted - measured) / measured ms/step.", ""]
    for (study, mode, layout), rows in sorted(series.items()):
        out += [f"## {study}: {mode} scaling, layout {layout}", "", f"Efficiency baseline: {rows[0]['baseline']}.", "",
                "| ranks | nodes | dp x tp x pp | ZeRO | global batch | ms/step | tokens/s | efficiency | MFU | "
                "mem/rank MiB (RSS) | exposed comm | bubble |" + (" predicted ms/step | error |" if machine else ""),
                "|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if machine else "")]
        for r in rows:
            share = number(r.get("exposed_comm_share"))
            bubble = number(r.get("bubble_share"))
            mfu = number(r.get("mfu"))
            out.append(
                f"| {r['ranks']} | {r.get('nodes', '')} | {r.get('dp', '')} x {r.get('tp', '')} x {r.get('pp', '')} | "
                f"{r.get('zero_stage', '')} | {r.get('global_batch', '')} | {fmt(number(r.get('ms_per_step')), '.3g')} | "
                f"{fmt(number(r['tokens_per_s']), '.4g')} | {r['efficiency']:.2f} | "
                f"{'' if mfu is None else format(100 * mfu, '.1f') + '%'} | "
                f"{fmt(number(r.get('mem_ledger_mib')), '.1f')} ({fmt(number(r.get('rss_mib')), '.0f')}) | "
                f"{'' if share is None else format(100 * share, '.0f') + '%'} | "
                f"{'' if bubble is None else format(100 * bubble, '.0f') + '%'} |" +
                (f" {fmt(r.get('predicted_ms'), '.3g')} | "
                 f"{'' if r.get('prediction_error') is None else format(100 * r['prediction_error'], '+.0f') + '%'} |"
                 if machine else ""))
        out.append("")
    if missed:
        out += ["## Points not predicted", ""]
        out += [f"- {r['study']} {r['mode']} {r['layout']}, {r['ranks']} ranks: {why}" for r, why in missed]
        out.append("")
    if failed:
        out += ["## Failed points", ""]
        out += [f"- {r['study']} {r['mode']} {r['layout']}, {r['ranks']} ranks: {r['status']} "
                f"(`{r.get('run_dir', '')}/train.log`)" for r in failed]
        out.append("")
    return "\n".join(out)


def plot(series, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 5, figsize=(24, 4.4))
    panels = [("tokens/s", "tokens_per_s", 1.0), ("parallel efficiency", "efficiency", 1.0), ("MFU (%)", "mfu", 100.0),
              ("memory per rank (MiB)", "mem_ledger_mib", 1.0), ("exposed comm / bubble (dashed), % of step",
                                                                 "exposed_comm_share", 100.0)]
    for (study, mode, layout), rows in sorted(series.items()):
        label = f"{study} {mode} {layout}"
        x = [int(r["ranks"]) for r in rows]
        for ax, (title, key, scale) in zip(axes, panels):
            y = [number(r.get(key)) if key != "efficiency" else r["efficiency"] for r in rows]
            pts = [(a, b * scale) for a, b in zip(x, y) if b is not None]
            if pts:
                line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label)
                if key == "tokens_per_s":  # ideal: the baseline's tokens/s per rank, times ranks
                    t0 = pts[0][1] / pts[0][0] / rows[0]["efficiency"]
                    ax.plot(x, [t0 * v for v in x], ":", color=line.get_color(), alpha=0.6)
                    pred = [(a, r["predicted_tokens_per_s"]) for a, r in zip(x, rows) if r.get("predicted_tokens_per_s")]
                    if pred:
                        ax.plot([p[0] for p in pred], [p[1] for p in pred], "x--", color=line.get_color(), alpha=0.6)
                if key == "exposed_comm_share":
                    bub = [(a, 100.0 * number(r.get("bubble_share"))) for a, r in zip(x, rows)
                           if number(r.get("bubble_share")) is not None]
                    if any(b > 0 for _, b in bub):
                        ax.plot([p[0] for p in bub], [p[1] for p in bub], "x--", color=line.get_color(), alpha=0.6)
                if key == "mem_ledger_mib":
                    rss = [(a, number(r.get("rss_mib"))) for a, r in zip(x, rows) if number(r.get("rss_mib"))]
                    if rss:
                        ax.plot([p[0] for p in rss], [p[1] for p in rss], "x--", color=line.get_color(), alpha=0.6)
    ticks = sorted({int(r["ranks"]) for rows in series.values() for r in rows})
    for ax, (title, key, _) in zip(axes, panels):
        ax.set_title(title)
        ax.set_xlabel("ranks")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])
        ax.minorticks_off()
        ax.grid(True, alpha=0.3)
        if key == "efficiency":
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.set_ylim(bottom=0)
    axes[0].legend(fontsize=8)
    axes[0].set_yscale("log")
    fig.suptitle("Trident scaling study (dotted: ideal; dashed: predicted tokens/s, peak RSS)")
    fig.tight_layout()
    fig.savefig(png, dpi=90)


def main():
    ap = argparse.ArgumentParser(description="A scaling study's results.csv (jobscripts/scaling/scaling.sh) as "
                                             "PNG plots and a markdown summary.")
    ap.add_argument("results", help="results.csv of a study")
    ap.add_argument("-o", "--out", help="output folder (default: the CSV's folder)")
    ap.add_argument("--machine", help="machine file (input/machines/*.ini): predict every point with trident plan")
    ap.add_argument("--trident", help="trident executable for --machine (default: TRIDENT_BIN, build/bin/trident, PATH)")
    a = ap.parse_args()
    trident = None
    if a.trident is not None and not (os.path.isfile(a.trident) and os.access(a.trident, os.X_OK)):
        # Never a silent fallback to another trident than the one named.
        print(f"scaling_report: --trident {a.trident}: no such executable file", file=sys.stderr)
        return 2
    if a.machine:
        if not os.path.isfile(a.machine):
            print(f"scaling_report: --machine {a.machine}: no such file", file=sys.stderr)
            return 2
        trident = find_trident(a.trident)
        if not trident:
            print("scaling_report: --machine needs a trident executable (give --trident EXE or set TRIDENT_BIN)",
                  file=sys.stderr)
            return 2
    try:
        points, failed = load(a.results)
    except OSError as e:
        print(f"scaling_report: cannot read {a.results}: {e.strerror}", file=sys.stderr)
        return 1
    except UnicodeDecodeError:
        print(f"scaling_report: {a.results} is not a text CSV (not UTF-8)", file=sys.stderr)
        return 2
    except (ValueError, csv.Error) as e:
        print(f"scaling_report: {e}", file=sys.stderr)
        return 2
    if not points:
        print(f"scaling_report: {a.results}: no point ran successfully ({len(failed)} failed)", file=sys.stderr)
        return 2
    missed = predict(points, a.machine, trident) if a.machine else []
    if a.machine and len(missed) == len(points):
        # Nothing predicted, and trident plan blamed the machine file: the file is the problem, not
        # the points (a report of nothing but "not predicted" rows would hide it).
        bad = [why for _, why in missed if a.machine in why]
        if bad:
            print(f"scaling_report: --machine {a.machine} is not a machine file trident plan can use: {bad[0]}",
                  file=sys.stderr)
            return 1
    series = series_of(points)
    out = a.out or os.path.dirname(os.path.abspath(a.results))
    md = markdown(series, failed, a.results, a.machine, missed)
    try:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "scaling.md"), "w") as f:
            f.write(md + "\n")
    except OSError as e:
        print(f"scaling_report: cannot write the report into '{out}': {e.strerror}", file=sys.stderr)
        return 1
    print(md)
    try:
        plot(series, os.path.join(out, "scaling.png"))
    except ImportError:
        print("scaling_report: no matplotlib (Debian: python3-matplotlib); wrote only scaling.md", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"scaling_report: cannot write {os.path.join(out, 'scaling.png')}: {e.strerror}", file=sys.stderr)
        return 1
    print(f"wrote {os.path.join(out, 'scaling.png')} and {os.path.join(out, 'scaling.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
