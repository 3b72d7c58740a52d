#!/usr/bin/env bash
# ZeRO benchmark: per-rank memory by category, bytes sent per step, and the prefetch/overlap gain,
# for ZeRO stages 0-3 at several dp sizes, on the 52M-parameter deck input/bench_zero_50m.ini.
#
# usage: tools/bench_zero.sh [--out DIR] [--ranks "1 2 4 8"] [--stages "0 1 2 3"] [--steps N]
#
# For each (stage, dp) it records the --dry-run prediction, then trains N steps (default 2) with
# `mpiexec -n dp` and reads the measured per-category peaks and the MiB sent per step from the run's
# metrics.csv, next to the ZeRO paper's formula and the ring-model communication volume
# (stages 0-2: 2(n-1)/n * 4 bytes * params; stage 3: 3(n-1)/n * 4 bytes * params). Then it times
# stage 3 at dp=2 with prefetch + overlap on and off. Results: DIR/zero_memory.csv,
# DIR/zero_prefetch.csv (default DIR: runs/bench_zero). Plot: tools/plot_zero.py DIR.
# This is a benchmark, not a test: it prints measured numbers and asserts nothing.
source "$(dirname "$0")/script_help.sh"
set -euo pipefail
cd "$(dirname "$0")/.."
out=runs/bench_zero ranks="1 2 4 8" stages="0 1 2 3" steps=2
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$(need_value "$@") || exit 2; shift 2 ;;
    --ranks) ranks=$(need_value "$@") || exit 2; shift 2 ;;
    --stages) stages=$(need_value "$@") || exit 2; shift 2 ;;
    --steps) steps=$(need_value "$@") || exit 2; shift 2 ;;
    -h|--help) script_help; exit 0 ;;
    *) echo "bench_zero.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
bin=build/bin/trident deck=input/bench_zero_50m.ini
[ -x "$bin" ] || { echo "bench_zero.sh: $bin not built (tools/build.sh)" >&2; exit 1; }
[ -f data/shakespeare_char.h5 ] || { echo "bench_zero.sh: data/shakespeare_char.h5 missing (see README)" >&2; exit 1; }
mkdir -p "$out"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
cats="params grads optimizer gathered activations comm"
mem_csv="$out/zero_memory.csv"
echo "stage,dp,source,params,grads,optimizer,gathered,activations,comm,total,model_states,zero_paper,comm_mib_per_step,comm_theory_mib,peak_rss_mib" > "$mem_csv"
echo "CSV rows as they are written to $mem_csv (the same columns):"; head -1 "$mem_csv"
n_params=""
for dp in $ranks; do
  for z in $stages; do
    run="$out/run_s${z}_dp${dp}"
    rm -rf "$run"
    pred="$("$bin" train --config "$deck" --dry-run "$dp" --parallel.zero_stage="$z")"
    n_params="$(sed -n 's/^model: \([0-9]*\) parameters.*/\1/p' <<<"$pred")"
    row="$z,$dp,predicted"
    tot=0
    for c in $cats; do
      v="$(awk -v c="$c" '$1 == c {print $2}' <<<"$pred")"; row="$row,$v"; tot="$(awk -v a="$tot" -v b="$v" 'BEGIN{print a+b}')"
    done
    zp="$(sed -n 's/^ZeRO paper formula.*: \([0-9.]*\) MiB.*/\1/p' <<<"$pred")"
    ms="$(sed -n 's/^Trident model states.*: \([0-9.]*\) MiB.*/\1/p' <<<"$pred")"
    theory="$(awk -v n="$dp" -v p="$n_params" -v z="$z" 'BEGIN{f = (z == 3 ? 3 : 2); print f * (n - 1) / n * 4 * p / 1048576}')"
    echo "$row,$tot,$ms,$zp,,$theory," >> "$mem_csv"
    echo "== stage $z dp $dp: predicted total $tot MiB (model states $ms, ZeRO paper $zp)"
    mpiexec -n "$dp" "$bin" train --config "$deck" --parallel.zero_stage="$z" --train.max_steps="$steps" \
      --train.out_dir="$run" > "$run.log" 2>&1 || { echo "run failed, see $run.log" >&2; exit 1; }
    last="$(tail -n 1 "$run/metrics.csv")"
    # metrics.csv columns: ... 9 peak_mem_mib, 10-15 mem_params..mem_comm, 16 comm_mib
    echo "$z,$dp,measured,$(cut -d, -f10-15 <<<"$last"),$(cut -d, -f10-15 <<<"$last" | tr , '\n' | awk '{s+=$1} END{print s}'),$(cut -d, -f10-12 <<<"$last" | tr , '\n' | awk '{s+=$1} END{print s}'),$zp,$(cut -d, -f16 <<<"$last"),$theory,$(cut -d, -f9 <<<"$last")" >> "$mem_csv"
    tail -n 1 "$mem_csv"
  done
done

pf_csv="$out/zero_prefetch.csv"
echo "prefetch,overlap_reduce,dp,stage,ms_per_step_mean,steps" > "$pf_csv"
if [[ " $ranks " == *" 2 "* ]]; then
  for mode in "true true" "false false"; do
    set -- $mode
    run="$out/run_prefetch_$1"
    rm -rf "$run"
    mpiexec -n 2 "$bin" train --config "$deck" --parallel.zero_stage=3 --parallel.prefetch="$1" \
      --parallel.overlap_reduce="$2" --train.max_steps=6 --train.out_dir="$run" > "$run.log" 2>&1
    # mean step time over steps 2..6 (step 1 includes start-up effects)
    mean="$(awk -F, 'NR > 2 {s += $7; n++} END {printf "%.1f", s / n}' "$run/metrics.csv")"
    echo "$1,$2,2,3,$mean,5" >> "$pf_csv"
    echo "== stage 3 dp 2 prefetch=$1 overlap=$2: $mean ms/step"
  done
fi
echo "wrote $mem_csv and $pf_csv"
