#!/usr/bin/env bash
# The largest model one rank trains within a memory budget, with the state resident, with the
# optimizer state on disk (offload_optimizer = nvme) and with the ZeRO-3 parameter shard there
# too (offload_params = nvme): ZeRO-3 on one rank, bf16 working params, GPT blocks of width 768
# (7.1M parameters each) on the character data, 64 tokens per step, 2 steps per run.
#
# usage: tools/bench_offload_capacity.sh [--budget-gib G] [--project-gib P] [--out DIR] [--offload-path DIR]
#
# Per mode it measures the peak RSS (getrusage, metrics.csv) of runs with 4 and 12 blocks, fits
# RSS = a + b x blocks (the model states and the per-block activations grow with depth; the
# runtime, the slots and the staging buffers do not), takes the deepest model whose fitted RSS is
# within --budget-gib (default 3) and trains it to check that it runs and stays within the
# budget. It also prints the depth the fit gives for --project-gib (default 24, this machine's
# memory), not run: its offload file would not fit on this machine's disk. The parameter count of
# a depth is the dry run's. Results: DIR/capacity.csv (default runs/bench_offload_capacity; the
# offload files in DIR/scratch unless --offload-path). A benchmark: it asserts nothing.
source "$(dirname "$0")/script_help.sh"
set -euo pipefail
cd "$(dirname "$0")/.."
out=runs/bench_offload_capacity budget=3 project=24 offpath=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$(need_value "$@") || exit 2; shift 2 ;;
    --budget-gib) budget=$(need_value "$@") || exit 2; shift 2 ;;
    --project-gib) project=$(need_value "$@") || exit 2; shift 2 ;;
    --offload-path) offpath=$(need_value "$@") || exit 2; shift 2 ;;
    -h|--help) script_help; exit 0 ;;
    *) echo "bench_offload_capacity.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
  esac
done
# Values checked before anything runs (usage errors, exit 2).
bad() { echo "bench_offload_capacity.sh: $*" >&2; exit 2; }
posnum() { [[ "$1" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ ]] && awk -v v="$1" 'BEGIN {exit !(v > 0)}'; }
posnum "$budget" || bad "--budget-gib '$budget': expected a positive number of GiB"
posnum "$project" || bad "--project-gib '$project': expected a positive number of GiB"
[ ! -e "$out" ] || [ -d "$out" ] || bad "--out '$out' exists and is not a directory"
[ -z "$offpath" ] || [ ! -e "$offpath" ] || [ -d "$offpath" ] || bad "--offload-path '$offpath' exists and is not a directory"
bin=build/bin/trident deck=input/bench_zero_50m.ini
[ -x "$bin" ] || { echo "bench_offload_capacity.sh: $bin not built (tools/build.sh)" >&2; exit 1; }
[ -f data/shakespeare_char.h5 ] || { echo "bench_offload_capacity.sh: data/shakespeare_char.h5 missing (see README)" >&2; exit 1; }
mkdir -p "$out"
[ -n "$offpath" ] || offpath="$out/scratch"
mkdir -p "$offpath"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
shape=(--parallel.zero_stage=3 --train.param_dtype=bf16 --model.n_embd=768 --model.n_head=12
       --train.global_batch_size=1 --train.max_steps=2)
mode_args() {
  case "$1" in
    resident) ;;
    optimizer) echo --parallel.offload_optimizer=nvme --parallel.offload_path="$offpath" ;;
    optimizer+params) echo --parallel.offload_optimizer=nvme --parallel.offload_path="$offpath" --parallel.offload_params=nvme ;;
  esac
}
params_of() {  # params_of LAYERS: the dry run's parameter count
  "$bin" train --config "$deck" --dry-run 1 "${shape[@]}" --model.n_layer="$1" | sed -n 's/^model: \([0-9]*\) parameters.*/\1/p'
}
rss_of() {  # rss_of MODE LAYERS: trains, prints "peak_rss_mib ms_per_step" (ms of step 2)
  local run="$out/run_${1/+/_}_$2"
  rm -rf "$run"
  # shellcheck disable=SC2046
  "$bin" train --config "$deck" "${shape[@]}" --model.n_layer="$2" --train.out_dir="$run" $(mode_args "$1") \
    > "$run.log" 2>&1 || { echo "bench_offload_capacity.sh: $1 with $2 blocks failed: see $run.log" >&2; exit 1; }
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next } { if ($h["peak_mem_mib"] > r) r = $h["peak_mem_mib"]; ms = $h["ms_per_step"] }
           END { printf "%.1f %.0f\n", r, ms }' "$run/metrics.csv"
}
csv="$out/capacity.csv"
echo "mode,rss_4_mib,rss_12_mib,mib_per_block,fixed_mib,budget_gib,blocks,params,measured_rss_mib,ms_per_step,project_gib,project_blocks,project_params" > "$csv"
for mode in resident optimizer optimizer+params; do
  read -r r4 _ <<<"$(rss_of "$mode" 4)"
  read -r r12 _ <<<"$(rss_of "$mode" 12)"
  read -r slope fixed L P <<<"$(awk -v a="$r4" -v b="$r12" -v g="$budget" -v p="$project" 'BEGIN {
    s = (b - a) / 8; f = a - 4 * s; printf "%.3f %.1f %d %d\n", s, f, int((g * 1024 - f) / s), int((p * 1024 - f) / s) }')"
  read -r rss ms <<<"$(rss_of "$mode" "$L")"
  n=$(params_of "$L"); np=$(params_of "$P")
  echo "$mode,$r4,$r12,$slope,$fixed,$budget,$L,$n,$rss,$ms,$project,$P,$np" >> "$csv"
  echo "== $mode: RSS = $fixed MiB + $slope MiB/block; within $budget GiB: $L blocks, $n parameters, trained: peak RSS $rss MiB, $ms ms/step; within $project GiB (fit, not run): $P blocks, $np parameters"
done
awk -F, 'NR == 2 { base = $8; pbase = $13 } NR > 2 { printf "%s: %.2fx the resident model within the budget (%.2fx projected)\n", $1, $8 / base, $13 / pbase }' "$csv"
echo "wrote $csv"
