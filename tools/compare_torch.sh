#!/usr/bin/env bash
# compare_torch.sh: Trident vs. the PyTorch peer (tools/torch_peer.py) on the shakespeare_char deck,
# one run after the other on the same machine, same data, model, batch, schedule and evaluation.
#
# Runs (each with OPENBLAS_NUM_THREADS / OMP_NUM_THREADS set, so that a "core" means one core):
#   trident_np2   mpiexec -n 2 trident train --config input/shakespeare_char.ini   (2 ranks x 1 thread)
#   trident_np1   mpiexec -n 1 trident train ... --parallel.dp=1                   (1 rank  x 1 thread)
#   torch_t1      torch_peer.py --threads 1   (OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1)
#   torch_t2      torch_peer.py --threads 2   (OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2)
#   torch_t2_passive  as torch_t2 with OMP_WAIT_POLICY=PASSIVE (only with --with-passive)
#   torch_ddp2    torch_peer.py --ddp 2 --threads 1 (gloo DDP, 2 processes x 1 thread; only with --with-ddp)
# Measured on the 2-core project machine: torch_t2 is SLOWER than torch_t1 (spinning OpenMP and OpenBLAS
# workers fight over 2 cores, ~2x the CPU time); OMP_WAIT_POLICY=PASSIVE removes most of that.
# Trident runs with --train.out_dir=<out>/<run> --train.max_steps=<steps> --checkpoint.interval=0
# (the peer saves nothing; Trident still writes its end-of-run checkpoint, which counts in wall_s only).
#
# Reported per run: wall_s (whole command: start-up, evaluation and checkpoint included), train_s
# (sum of per-step times: Trident's metrics.csv ms_per_step, the peer's train_loop_seconds; evaluation
# excluded), tokens/s = arithmetic mean of the per-step tokens_per_sec over steps > 10 (Trident's
# metrics.csv column; the peer's json tokens_per_sec_mean, the same statistic), its median, tokens/s per
# core, final train / val loss (val: the whole validation split, both sides), the run's own CPU
# seconds, and "foreign CPU s": busy CPU time of the machine during the run minus the run's own, i.e.
# what other processes used meanwhile (a warning names runs where it is clearly above zero; on a busy
# machine the numbers mean little). The CSV also holds the 1-minute load average before each run.
#
# How to run (from anywhere; it works in the repository root):
#   tools/compare_torch.sh                       # the full 2000-step comparison (~10+ minutes, quiet machine!)
#   tools/compare_torch.sh --steps 100 --out /tmp/cmp --results /tmp/cmp/results.csv
# Prints a markdown table on stdout (progress goes to stderr) and writes the CSV to --results.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: tools/compare_torch.sh [options]

Trident (mpiexec -n 2 and -n 1) against tools/torch_peer.py (1 and 2 threads) on
input/shakespeare_char.ini, one after the other. Markdown table on stdout, CSV in --results.

options:
  --steps N         max_steps of every run (default 2000; the lr schedule decays over N)
  --out DIR         directory for run outputs and logs (default: a new /tmp/compare_torch.XXXXXX)
  --results PATH    CSV results file (default: DIR/results.csv)
  --trident PATH    the Trident binary (default: the checkout's build/bin/trident; a relative
                    PATH is taken from the directory you run the script in)
  --python PATH     the Python with torch (default: /usr/bin/python3, Debian's torch 1.13)
  --data PATH       the text file (default: /work/shared/data/tinyshakespeare.txt); used by the peer
                    and by `trident prep` when data/shakespeare_char.h5 is missing
  --config PATH     the Trident deck (default: the checkout's input/shakespeare_char.ini; a
                    relative PATH is taken from the directory you run the script in)
  --mpiexec CMD     the MPI launcher (default: mpiexec)
  --with-ddp        also run the peer as gloo DDP, 2 processes x 1 thread
  --with-passive    also run the 2-thread peer with OMP_WAIT_POLICY=PASSIVE
  --all             both of the above
  --skip-trident    run only the peer
  --skip-torch      run only Trident
  -h, --help        this text
EOF
}

die() { echo "compare_torch: error: $*" >&2; exit 1; }
usage_die() { echo "compare_torch: error: $*" >&2; exit 2; }  # bad usage: exit 2
note() { echo "compare_torch: $*" >&2; }
# optval OPTION [VALUE...]: VALUE, or a usage error when it is missing or is the next option
# ("--out --steps 3": --out has no value, not the folder "--steps"). In the loop below:
# `--out) OUT="$(optval "$@")" || exit 2; shift 2 ;;`.
optval() {
  [[ $# -ge 2 ]] || usage_die "$1 needs a value (try --help)"
  [[ "$2" != --* ]] || usage_die "$1 needs a value, got the option '$2' (try --help)"
  printf '%s' "$2"
}

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STEPS=2000
OUT=""
RESULTS=""
TRIDENT=""   # default build/bin/trident of this checkout
PY="/usr/bin/python3"
DATA="/work/shared/data/tinyshakespeare.txt"
CONFIG=""    # default input/shakespeare_char.ini of this checkout
MPIEXEC="mpiexec"
WITH_DDP=0
WITH_PASSIVE=0
DO_TRIDENT=1
DO_TORCH=1

while [[ $# -gt 0 ]]; do
  case "$1" in
    --steps) STEPS="$(optval "$@")" || exit 2; shift 2 ;;
    --steps=*) STEPS="${1#*=}"; shift ;;
    --out) OUT="$(optval "$@")" || exit 2; shift 2 ;;
    --out=*) OUT="${1#*=}"; shift ;;
    --results) RESULTS="$(optval "$@")" || exit 2; shift 2 ;;
    --results=*) RESULTS="${1#*=}"; shift ;;
    --trident) TRIDENT="$(optval "$@")" || exit 2; shift 2 ;;
    --trident=*) TRIDENT="${1#*=}"; shift ;;
    --python) PY="$(optval "$@")" || exit 2; shift 2 ;;
    --python=*) PY="${1#*=}"; shift ;;
    --data) DATA="$(optval "$@")" || exit 2; shift 2 ;;
    --data=*) DATA="${1#*=}"; shift ;;
    --config) CONFIG="$(optval "$@")" || exit 2; shift 2 ;;
    --config=*) CONFIG="${1#*=}"; shift ;;
    --mpiexec) MPIEXEC="$(optval "$@")" || exit 2; shift 2 ;;
    --mpiexec=*) MPIEXEC="${1#*=}"; shift ;;
    --with-ddp) WITH_DDP=1; shift ;;
    --with-passive) WITH_PASSIVE=1; shift ;;
    --all) WITH_DDP=1; WITH_PASSIVE=1; shift ;;
    --skip-trident) DO_TRIDENT=0; shift ;;
    --skip-torch) DO_TORCH=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; echo "compare_torch: error: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[[ "$STEPS" =~ ^[0-9]+$ ]] && (( 10#$STEPS > 0 )) || usage_die "--steps must be a positive integer, got '$STEPS'"

# Paths given relative to the caller's directory stay valid after the cd below.
abspath() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
[[ -n "$OUT" ]] && OUT="$(abspath "$OUT")"
[[ -n "$RESULTS" ]] && RESULTS="$(abspath "$RESULTS")"
[[ "$DATA" == /* ]] || DATA="$(abspath "$DATA")"
# --trident and --config as given are the caller's paths too; the defaults are the checkout's.
if [[ -n "$TRIDENT" ]]; then TRIDENT="$(abspath "$TRIDENT")"; else TRIDENT="$ROOT/build/bin/trident"; fi
if [[ -n "$CONFIG" ]]; then CONFIG="$(abspath "$CONFIG")"; else CONFIG="$ROOT/input/shakespeare_char.ini"; fi
[[ -z "$OUT" || ! -e "$OUT" || -d "$OUT" ]] || usage_die "--out '$OUT' exists and is not a directory"
[[ -z "$RESULTS" || ! -d "$RESULTS" ]] || usage_die "--results '$RESULTS' is a directory: give the CSV file's name"
cd "$ROOT"

# ---- checks ---------------------------------------------------------------------------------------
# The python summariser below needs a python3 in any case; torch only for the peer.
command -v "$PY" >/dev/null 2>&1 || die "python '$PY' not found (Debian's torch lives in /usr/bin/python3; --python PATH)"
if [[ $DO_TORCH -eq 1 ]]; then
  [[ -f tools/torch_peer.py ]] || die "tools/torch_peer.py is missing (run from a Trident checkout)"
  "$PY" -c 'import torch' 2>/dev/null || die "'$PY' cannot import torch: install python3-torch (apt) and use /usr/bin/python3, or pass --python PATH, or --skip-torch"
  [[ -r "$DATA" ]] || die "text file '$DATA' is not readable (--data PATH)"
fi
if [[ $DO_TRIDENT -eq 1 ]]; then
  [[ -x "$TRIDENT" ]] || die "Trident binary '$TRIDENT' not found or not executable: build it (cmake -S . -B build && cmake --build build -j2) or pass --trident PATH, or --skip-trident"
  command -v "$MPIEXEC" >/dev/null 2>&1 || die "MPI launcher '$MPIEXEC' not found (apt-get install mpich, or --mpiexec CMD)"
  [[ -f "$CONFIG" ]] || die "deck '$CONFIG' not found (--config PATH)"
fi

if [[ -z "$OUT" ]]; then OUT="$(mktemp -d /tmp/compare_torch.XXXXXX)"; else mkdir -p "$OUT"; fi
[[ -n "$RESULTS" ]] || RESULTS="$OUT/results.csv"
mkdir -p "$(dirname "$RESULTS")"
TIMES_FILE="$OUT/.times"
ROWS="$OUT/rows.tsv"   # one line per finished run, turned into the table and CSV at the end
: > "$ROWS"
note "outputs in $OUT, results -> $RESULTS, $STEPS steps per run"
NCPU="$(nproc 2>/dev/null || echo '?')"
if [[ "$NCPU" != "?" && "$NCPU" -lt 2 ]]; then note "warning: only $NCPU core(s): the 2-core runs will be oversubscribed"; fi

now() { date +%s.%N; }
load1() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo ""; }
CLK_TCK="$(getconf CLK_TCK 2>/dev/null || echo 100)"
# Busy CPU seconds of the whole machine (user+nice+system+irq+softirq+steal, all cores).
machine_busy() { awk -v hz="$CLK_TCK" '/^cpu /{printf "%.3f", ($2+$3+$4+$7+$8+$9)/hz}' /proc/stat; }
# CHILD_CPU = CPU seconds of this shell's finished children (`times` must run in this shell itself,
# not inside $(...), whose subshell has no children of its own).
CHILD_CPU=0
children_cpu() {
  times > "$TIMES_FILE"
  CHILD_CPU="$(awk 'NR==2{s=0; for(i=1;i<=2;i++){split($i,a,/[ms]/); s+=a[1]*60+a[2]}; printf "%.3f", s}' "$TIMES_FILE")"
}
# Around a run: foreign_cpu_s = machine busy time - the run's own CPU time. Clearly above zero
# (more than ~5% of the run's wall time) means other work shared the cores: the timing is suspect.
measure_begin() { children_cpu; M_OWN0="$CHILD_CPU"; M_BUSY0="$(machine_busy)"; }
measure_end() {
  local busy1 own1
  busy1="$(machine_busy)"; children_cpu; own1="$CHILD_CPU"
  M_OWN="$(awk -v a="$M_OWN0" -v b="$own1" 'BEGIN{printf "%.2f", b - a}')"
  M_FOREIGN="$(awk -v a="$M_BUSY0" -v b="$busy1" -v o="$M_OWN" 'BEGIN{f = b - a - o; printf "%.2f", f}')"
}

# record RUN IMPL PROCS THREADS CORES WALL LOAD OWN_CPU FOREIGN_CPU KIND FILE: append one row (KIND=trident: FILE is
# metrics.csv; KIND=torch: FILE is the peer's json).
record() {
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$ROWS"
}

# ---- Trident ---------------------------------------------------------------------------------------
run_trident() {  # run_trident NAME NP EXTRA...
  local name="$1" np="$2"; shift 2
  local dir="$OUT/$name" log="$OUT/$name.log" t0 t1 l0
  rm -rf "$dir"
  note "$name: $MPIEXEC -n $np $TRIDENT train --config $CONFIG $* (log $log)"
  l0="$(load1)"; measure_begin; t0="$(now)"
  if ! OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$MPIEXEC" -n "$np" "$TRIDENT" train --config "$CONFIG" \
        --train.out_dir="$dir" --train.max_steps="$STEPS" --checkpoint.interval=0 "$@" > "$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "$name failed (full log: $log)"
  fi
  t1="$(now)"; measure_end
  [[ -s "$dir/metrics.csv" ]] || die "$name wrote no $dir/metrics.csv (log: $log)"
  record "$name" trident "$np" 1 "$np" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b - a}')" "$l0" "$M_OWN" "$M_FOREIGN" trident "$dir/metrics.csv"
}

if [[ $DO_TRIDENT -eq 1 ]]; then
  data_path="$(sed -n '/^\[data\]/,/^\[/{s/^[[:space:]]*path[[:space:]]*=[[:space:]]*//p}' "$CONFIG" | head -n1)"
  data_path="${data_path:-data/shakespeare_char.h5}"
  if [[ ! -f "$data_path" ]]; then
    [[ -r "$DATA" ]] || die "$data_path is missing and the text file '$DATA' is not readable (--data PATH)"
    note "prep: $TRIDENT prep --tokenizer char --output $data_path $DATA"
    mkdir -p "$(dirname "$data_path")"
    "$TRIDENT" prep --tokenizer char --output "$data_path" "$DATA" > "$OUT/prep.log" 2>&1 \
      || { tail -n 20 "$OUT/prep.log" >&2; die "trident prep failed (log: $OUT/prep.log)"; }
  fi
  run_trident trident_np2 2
  run_trident trident_np1 1 --parallel.dp=1
fi

# ---- PyTorch peer ----------------------------------------------------------------------------------
RUN_ENV=()  # extra VAR=VALUE settings for the next run_torch
run_torch() {  # run_torch NAME THREADS PROCS EXTRA...
  local name="$1" thr="$2" procs="$3"; shift 3
  local log="$OUT/$name.log" json="$OUT/$name.json" csv="$OUT/$name.csv" t0 t1 l0
  note "$name: ${RUN_ENV[*]:+${RUN_ENV[*]} }OPENBLAS_NUM_THREADS=$thr OMP_NUM_THREADS=$thr $PY tools/torch_peer.py --threads $thr $* (log $log)"
  l0="$(load1)"; measure_begin; t0="$(now)"
  if ! env ${RUN_ENV[@]+"${RUN_ENV[@]}"} OPENBLAS_NUM_THREADS="$thr" OMP_NUM_THREADS="$thr" "$PY" tools/torch_peer.py --data "$DATA" \
        --threads "$thr" --max-steps "$STEPS" --csv "$csv" --json "$json" "$@" > "$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "$name failed (full log: $log)"
  fi
  t1="$(now)"; measure_end
  [[ -s "$json" ]] || die "$name wrote no $json (log: $log)"
  record "$name" torch "$procs" "$thr" "$((procs * thr))" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b - a}')" "$l0" "$M_OWN" "$M_FOREIGN" torch "$json"
}

if [[ $DO_TORCH -eq 1 ]]; then
  run_torch torch_t1 1 1
  run_torch torch_t2 2 1
  if [[ $WITH_PASSIVE -eq 1 ]]; then
    RUN_ENV=(OMP_WAIT_POLICY=PASSIVE); run_torch torch_t2_passive 2 1; RUN_ENV=()
  fi
  if [[ $WITH_DDP -eq 1 ]]; then run_torch torch_ddp2 1 2 --ddp 2; fi
fi

# ---- table and CSV ---------------------------------------------------------------------------------
"$PY" - "$ROWS" "$RESULTS" "$STEPS" <<'PYEOF'
import csv, json, statistics, sys
rows_path, results_path, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])

def trident_stats(path):
    with open(path) as fh:
        rows = list(csv.DictReader(fh))
    tps = [float(r["tokens_per_sec"]) for r in rows if int(r["step"]) > 10]
    vals = [float(r["val_loss"]) for r in rows if r["val_loss"].strip()]
    return {"train_s": sum(float(r["ms_per_step"]) for r in rows) / 1e3,
            "tps": statistics.fmean(tps) if tps else float("nan"),
            "tps_median": statistics.median(tps) if tps else float("nan"),
            "train_loss": float(rows[-1]["train_loss"]) if rows else float("nan"),
            "val_loss": vals[-1] if vals else float("nan"), "steps": len(rows)}

def torch_stats(path):
    with open(path) as fh:
        j = json.load(fh)
    nan = float("nan")
    f = lambda k: nan if j.get(k) is None else float(j[k])
    return {"train_s": f("train_loop_seconds"), "tps": f("tokens_per_sec_mean"),
            "tps_median": f("tokens_per_sec_median"), "train_loss": f("final_train_loss"),
            "val_loss": f("final_val_loss"), "steps": j.get("max_steps")}

out = []
with open(rows_path) as fh:
    for line in fh:
        name, impl, procs, thr, cores, wall, load, own, foreign, kind, path = line.rstrip("\n").split("\t")
        s = trident_stats(path) if kind == "trident" else torch_stats(path)
        cores_i = int(cores)
        out.append({"run": name, "impl": impl, "processes": int(procs), "threads_per_process": int(thr),
                    "cores": cores_i, "steps": s["steps"], "wall_s": float(wall), "train_s": s["train_s"],
                    "tokens_per_sec": s["tps"], "tokens_per_sec_median": s["tps_median"],
                    "tokens_per_sec_per_core": s["tps"] / cores_i,
                    "final_train_loss": s["train_loss"], "final_val_loss": s["val_loss"],
                    "cpu_s": float(own), "foreign_cpu_s": float(foreign),
                    "load1_before": load, "source": path})

cols = list(out[0].keys()) if out else []
with open(results_path, "w", newline="") as fh:
    w = csv.DictWriter(fh, fieldnames=cols)
    w.writeheader()
    for r in out:
        w.writerow({k: ("%.6g" % v if isinstance(v, float) else v) for k, v in r.items()})

print("| run | procs x threads | cores | wall s | train s | tokens/s (mean, steps>10) | median | tokens/s/core | final train loss | final val loss | CPU s | foreign CPU s |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in out:
    print("| %s | %d x %d | %d | %.1f | %.1f | %.0f | %.0f | %.0f | %.4f | %.4f | %.1f | %.1f |" % (
        r["run"], r["processes"], r["threads_per_process"], r["cores"], r["wall_s"], r["train_s"],
        r["tokens_per_sec"], r["tokens_per_sec_median"], r["tokens_per_sec_per_core"],
        r["final_train_loss"], r["final_val_loss"], r["cpu_s"], r["foreign_cpu_s"]))
print()
print("%d steps per run; tokens/s = mean of per-step tokens_per_sec over steps > 10 (evaluation excluded); "
      "wall s includes start-up, evaluation and Trident's end-of-run checkpoint; val loss on the whole "
      "validation split; CPU s: the run's own CPU time; foreign CPU s: CPU time other processes used "
      "meanwhile (clearly above 0: the timing is disturbed, rerun on a quiet machine). CSV: %s" % (steps, results_path))
suspect = [r["run"] for r in out if r["foreign_cpu_s"] > 0.05 * r["wall_s"] + 0.5]
if suspect:
    print()
    print("WARNING: other processes used the CPUs during %s: those timings are not trustworthy." % ", ".join(suspect))
PYEOF
