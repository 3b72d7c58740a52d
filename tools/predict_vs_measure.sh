#!/usr/bin/env bash
# Compares the performance model with real runs: for each case (deck, ranks, layout overrides) runs
# `trident train` for a few steps, takes the median ms_per_step of the steps after the first two
# from metrics.csv, asks `trident plan` for the prediction of exactly that layout, and prints one
# markdown row (measured, predicted, error) per case; the same rows go to a CSV, with the offload
# traffic and wait per step (metrics.csv) next to the model's (decks with offload_optimizer = nvme),
# and the step's breakdown (forward, backward, optimizer, exposed dp communication) next to the model's.
# fp32 GEMMs go through the library the machine file's rates were measured with ([compute]
# host_gemm, written by tools/machine_file.sh; OpenBLAS for files without it).
# Usage: tools/predict_vs_measure.sh --machine FILE [--build DIR] [--steps N] [--cases FILE] [--out CSV] [--reuse] [--trainer EXE]
#   --machine FILE  machine file (input/machines/*.ini) the predictions use (required)
#   --build DIR     build directory with bin/trident (default build)
#   --steps N       optimizer steps per run (default 8; the first two are not timed)
#   --cases FILE    one case a line: "deck ranks --section.key=value ..." (default: the built-in list)
#   --out CSV       results (default runs/predict_vs_measure/results.csv)
#   --reuse         keep a case's earlier run (its metrics.csv in the output folder) instead of training again
#   --trainer EXE   the trident that trains (default DIR/bin/trident; plan always uses DIR/bin/trident)
# Needs data/shakespeare_char.h5 (trident prep --tokenizer char, see input/shakespeare_char.ini).
# On a loaded machine every measured number moves with the load: run it on a quiet one.
source "$(dirname "$0")/script_help.sh"
set -euo pipefail
cd "$(dirname "$0")/.."

machine=""; build=build; steps=8; cases=""; out=runs/predict_vs_measure/results.csv; reuse=0; trainer=""
while [ $# -gt 0 ]; do
  case "$1" in
    --machine) machine=$(need_value "$@") || exit 2; shift 2 ;;
    --build) build=$(need_value "$@") || exit 2; shift 2 ;;
    --steps) steps=$(need_value "$@") || exit 2; shift 2 ;;
    --cases) cases=$(need_value "$@") || exit 2; shift 2 ;;
    --out) out=$(need_value "$@") || exit 2; shift 2 ;;
    --reuse) reuse=1; shift ;;
    --trainer) trainer=$(need_value "$@") || exit 2; shift 2 ;;
    -h|--help) script_help; exit 0 ;;
    *) echo "predict_vs_measure.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
done
[ -n "$trainer" ] || trainer="$build/bin/trident"
[ -n "$machine" ] || { echo "predict_vs_measure.sh: give --machine FILE" >&2; exit 2; }
# Every value checked before anything trains (usage errors, exit 2). Relative paths are taken from
# the repository root (where this script runs).
bad() { echo "predict_vs_measure.sh: $*" >&2; exit 2; }
where() { case "$1" in /*) ;; *) printf ' (relative to the repository root, %s)' "$PWD" ;; esac; }
[[ "$steps" =~ ^[0-9]+$ ]] && [ "$((10#$steps))" -ge 3 ] ||
  bad "--steps '$steps': expected a whole number of at least 3 (the first two steps are not timed)"
[ -e "$machine" ] || bad "--machine '$machine': no such file$(where "$machine")"
[ -f "$machine" ] || bad "--machine '$machine' is not a file"
[ -r "$machine" ] || bad "--machine '$machine': not readable"
if [ -n "$cases" ]; then
  [ -e "$cases" ] || bad "--cases '$cases': no such file$(where "$cases")"
  [ -f "$cases" ] || bad "--cases '$cases' is not a file"
  [ -r "$cases" ] || bad "--cases '$cases': not readable"
fi
[ ! -d "$out" ] || bad "--out '$out' is a directory: give the results CSV's name"
[ -x "$build/bin/trident" ] || bad "--build '$build': no executable $build/bin/trident$(where "$build") (build first: tools/build.sh)"
[ -x "$trainer" ] || bad "--trainer '$trainer': not an executable file$(where "$trainer")"
work=$(dirname "$out"); mkdir -p "$work"
# Train with the fp32 GEMM library the machine file's rates were measured with (files without the
# key were measured with OpenBLAS).
host_gemm=$(awk -F= '/^[ \t]*host_gemm[ \t]*=/ {sub(/[#;].*/, "", $2); gsub(/[ \t\r]/, "", $2); print $2}' "$machine")
host_gemm=${host_gemm:-openblas}
failed=0
if [ -z "$cases" ]; then
  cases="$work/cases.txt"
  cat > "$cases" <<'C'
input/shakespeare_char.ini 1
input/shakespeare_char.ini 1 --train.activation_checkpointing=block
input/shakespeare_char.ini 1 --train.micro_batch_size=3
input/shakespeare_char.ini 2 --parallel.zero_stage=0
input/shakespeare_char.ini 2 --parallel.zero_stage=1
input/shakespeare_char.ini 2 --parallel.zero_stage=2
input/shakespeare_char.ini 2 --parallel.zero_stage=3
input/shakespeare_char.ini 2 --parallel.tp=2
input/shakespeare_char.ini 2 --parallel.pp=2 --train.micro_batch_size=3
input/shakespeare_char.ini 2 --parallel.pp=2 --train.micro_batch_size=3 --parallel.pp_schedule=gpipe
input/bench_zero_50m.ini 1
input/bench_zero_50m.ini 2 --parallel.zero_stage=0
input/bench_zero_50m.ini 2 --parallel.zero_stage=3
C
fi
echo "deck,ranks,overrides,measured_ms,predicted_ms,error_pct,offload_read_mib,predicted_offload_read_mib,offload_write_mib,predicted_offload_write_mib,offload_wait_ms,predicted_offload_exposed_ms,fwd_ms,predicted_fwd_ms,bwd_ms,predicted_bwd_ms,opt_ms,predicted_opt_ms,dp_exposed_ms,predicted_dp_exposed_ms" > "$out"
echo "| deck | ranks | layout | measured ms/step | predicted ms/step | error |"
echo "|---|---|---|---|---|---|"
# median over the timed steps (after the first two) of metrics.csv's column named $2
median_of() {
  awk -F, -v col="$2" 'NR == 1 {for (i = 1; i <= NF; i++) if ($i == col) c = i; next} NR > 3 && c {print $c}' "$1" |
    sort -g | awk '{a[NR] = $1} END {if (NR == 0) print ""; else print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}
# the column named $2 of the plan CSV's first row
plan_col() { awk -F, -v col="$2" 'NR == 1 {for (i = 1; i <= NF; i++) if ($i == col) c = i; next} NR == 2 && c {print $c}' "$1"; }
i=0
while read -r deck ranks overrides; do
  [ -n "$deck" ] && [ "${deck:0:1}" != "#" ] || continue
  i=$((i + 1))
  run="$work/run$i"
  if [ "$reuse" = 0 ] || [ "$( { wc -l < "$run/metrics.csv"; } 2>/dev/null || echo 0)" -lt 4 ]; then
    rm -rf "$run"
    # shellcheck disable=SC2086
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 mpiexec -n "$ranks" "$trainer" train --config "$deck" $overrides \
      --train.max_steps="$steps" --train.eval_interval=0 --train.eval_iters=1 --train.log_interval=100 \
      --train.warmup_steps=0 --checkpoint.interval=0 --checkpoint.save_final=false --train.peak_tflops=0.1 \
      --train.host_gemm="$host_gemm" \
      --train.out_dir="$run" < /dev/null > "$work/run$i.log" 2>&1 || { echo "case $i failed: see $work/run$i.log" >&2; failed=$((failed + 1)); continue; }
  fi
  measured=$(median_of "$run/metrics.csv" ms_per_step)
  # The layout of this case only: the deck's keys with the overrides, nothing varied.
  tp=$(grep -o -- '--parallel.tp=[0-9]*' <<<"$overrides" | cut -d= -f2 || true)
  pp=$(grep -o -- '--parallel.pp=[0-9]*' <<<"$overrides" | cut -d= -f2 || true)
  zs=$(grep -o -- '--parallel.zero_stage=[0-9]*' <<<"$overrides" | cut -d= -f2 || true)
  zs=${zs:-$(awk -F= '/^zero_stage/ {gsub(/ /, "", $2); print $2}' "$deck")}
  # A fresh CSV each time: plan --csv never replaces a file without --force, and an old one
  # would be read as this run's prediction.
  rm -f "$work/plan$i.csv"
  # shellcheck disable=SC2086
  "$build/bin/trident" plan --config "$deck" --machine "$machine" --ranks "$ranks" $overrides \
    --tp "${tp:-1}" --pp "${pp:-1}" --zero-stages "${zs:-0}" --fixed-micro-batch --fixed-recompute --fixed-schedule \
    --csv "$work/plan$i.csv" < /dev/null > "$work/plan$i.txt" 2>&1 || true  # exit 1: the layout is over memory, still predicted
  [ -s "$work/plan$i.csv" ] && [ "$(wc -l < "$work/plan$i.csv")" -ge 2 ] ||
    { echo "plan for case $i failed: see $work/plan$i.txt" >&2; failed=$((failed + 1)); continue; }
  predicted=$(awk -F, 'NR == 2 {print $9}' "$work/plan$i.csv")
  err=$(awk -v m="$measured" -v p="$predicted" 'BEGIN {printf "%+.0f", 100 * (p - m) / m}')
  off="$(median_of "$run/metrics.csv" offload_read_mib),$(plan_col "$work/plan$i.csv" offload_read_mib)"
  off="$off,$(median_of "$run/metrics.csv" offload_write_mib),$(plan_col "$work/plan$i.csv" offload_write_mib)"
  exposed=$(awk -F, 'NR == 1 {for (i = 1; i <= NF; i++) {if ($i == "offload_ms") a = i; if ($i == "offload_hidden_ms") b = i}; next}
                     NR == 2 && a {printf "%.4f", $a - $b}' "$work/plan$i.csv")
  off="$off,$(median_of "$run/metrics.csv" offload_wait_ms),$exposed"
  # The breakdown side by side (metrics.csv's t_* columns, docs/scaling.md sec. 6, against the model's
  # components): forward, backward (with activation checkpointing's recompute, which runs in the
  # backward pass), optimizer, exposed dp communication.
  pc() { plan_col "$work/plan$i.csv" "$1"; }
  bwd=$(awk -v a="$(pc backward_ms)" -v b="$(pc recompute_ms)" 'BEGIN {printf "%.4f", a + b}')
  dpx=$(awk -v a="$(pc dp_ms)" -v b="$(pc dp_hidden_ms)" 'BEGIN {printf "%.4f", a - b}')
  brk="$(median_of "$run/metrics.csv" t_fwd),$(pc forward_ms),$(median_of "$run/metrics.csv" t_bwd),$bwd"
  brk="$brk,$(median_of "$run/metrics.csv" t_opt),$(pc optimizer_ms),$(median_of "$run/metrics.csv" t_comm_dp_exposed),$dpx"
  echo "$(basename "$deck" .ini),$ranks,\"$overrides\",$measured,$predicted,$err,$off,$brk" >> "$out"
  echo "| $(basename "$deck" .ini) | $ranks | ${overrides:-deck} | $measured | $predicted | ${err}% |"
done < "$cases"
echo "results in $out" >&2
[ "$failed" -eq 0 ] || { echo "predict_vs_measure.sh: $failed case(s) failed (above)" >&2; exit 1; }
