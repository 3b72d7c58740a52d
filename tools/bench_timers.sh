#!/usr/bin/env bash
# Timer overhead of the step-time breakdown ([train] timers, docs/scaling.md section 6): the example
# deck trained with timers = off and timers = coarse (and fine), alternating, several times each.
#
# usage: tools/bench_timers.sh [--out DIR] [--ranks "1 2"] [--reps N] [--steps N] [--modes "off coarse fine"]
#        [-- extra trident train options, e.g. --parallel.zero_stage=3]
# Defaults: --reps 5 (repetitions of every mode), --steps 40, --ranks "1 2", --modes "off coarse fine".
#
# Each run trains --steps steps (default 40) of input/shakespeare_char.ini with no evaluation, no
# checkpoint and a fixed peak (no GEMM probe); the statistic is the median ms_per_step of steps 3..N
# (the train_step time, which holds every timed scope and collective). The modes alternate within
# each repetition so that a change of the machine's load hits them alike. Results: DIR/timers.csv
# (ranks,mode,rep,median_ms), and a table of the median over repetitions per (ranks, mode) with its
# ratio to off (default DIR: runs/bench_timers). A benchmark, not a test: it asserts nothing.
source "$(dirname "$0")/script_help.sh"
set -euo pipefail
cd "$(dirname "$0")/.."
out=runs/bench_timers ranks="1 2" reps=5 steps=40 modes="off coarse fine"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$(need_value "$@") || exit 2; shift 2 ;;
    --ranks) ranks=$(need_value "$@") || exit 2; shift 2 ;;
    --reps) reps=$(need_value "$@") || exit 2; shift 2 ;;
    --steps) steps=$(need_value "$@") || exit 2; shift 2 ;;
    --modes) modes=$(need_value "$@") || exit 2; shift 2 ;;
    --) shift; break ;;
    -h|--help) script_help; exit 0 ;;
    *) echo "bench_timers.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
# Values checked before anything runs (usage errors, exit 2).
bad() { echo "bench_timers.sh: $*" >&2; exit 2; }
posint() { [[ "$1" =~ ^[0-9]+$ ]] && [ "$((10#$1))" -ge 1 ]; }
posint "$reps" || bad "--reps '$reps': expected a positive whole number of repetitions"
[[ "$steps" =~ ^[0-9]+$ ]] && [ "$((10#$steps))" -ge 3 ] || bad "--steps '$steps': expected a whole number of at least 3 (steps 3..N are timed)"
[ -n "${ranks// }" ] || bad "--ranks '$ranks': expected rank counts, e.g. \"1 2\""
for n in $ranks; do posint "$n" || bad "--ranks '$ranks': '$n' is not a positive number of ranks"; done
[ -n "${modes// }" ] || bad "--modes '$modes': expected timer modes, e.g. \"off coarse fine\""
for m in $modes; do case "$m" in off|coarse|fine) ;; *) bad "--modes '$modes': '$m' is not off, coarse or fine" ;; esac; done
[ ! -e "$out" ] || [ -d "$out" ] || bad "--out '$out' exists and is not a directory"
bin=build/bin/trident deck=input/shakespeare_char.ini
[ -x "$bin" ] || { echo "bench_timers.sh: $bin not built (tools/build.sh)" >&2; exit 1; }
[ -f data/shakespeare_char.h5 ] || { echo "bench_timers.sh: data/shakespeare_char.h5 missing (see README)" >&2; exit 1; }
mkdir -p "$out"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
csv="$out/timers.csv"
echo "ranks,mode,rep,median_ms" > "$csv"
for n in $ranks; do
  for rep in $(seq 1 "$reps"); do
    for mode in $modes; do
      run="$out/run_np${n}_${mode}_${rep}"
      rm -rf "$run"
      mpiexec -n "$n" "$bin" train --config "$deck" --train.out_dir="$run" --train.max_steps="$steps" \
        --train.eval_interval=0 --train.eval_iters=1 --train.log_interval=1000 --train.peak_tflops=0.1 \
        --checkpoint.interval=0 --checkpoint.save_final=false --train.timers="$mode" "$@" > "$run.log" 2>&1
      med="$(/usr/bin/python3 -c "
import csv, statistics, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if int(r['step']) >= 3]
print('%.4f' % statistics.median(float(r['ms_per_step']) for r in rows))" "$run/metrics.csv")"
      echo "$n,$mode,$rep,$med" | tee -a "$csv"
    done
  done
done
/usr/bin/python3 - "$csv" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
by = {}
for r in rows:
    by.setdefault((r["ranks"], r["mode"]), []).append(float(r["median_ms"]))
print("ranks mode    runs median_ms  min_ms   ratio_to_off(median)")
for (n, mode), v in sorted(by.items()):
    off = statistics.median(by.get((n, "off"), v))
    print(f"{n:5} {mode:7} {len(v):4} {statistics.median(v):9.3f} {min(v):8.3f}   {statistics.median(v) / off:.4f}")
EOF
