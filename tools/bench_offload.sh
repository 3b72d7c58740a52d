#!/usr/bin/env bash
# Optimizer-state offload benchmark: peak RSS and step time with the optimizer state resident and
# on the local disk ([parallel] offload_optimizer = nvme), on the 52M-parameter deck
# input/bench_zero_50m.ini at ZeRO-1 on one rank with bf16 working params (the state that leaves:
# fp32 master weights and both AdamW moments, 12 bytes per parameter of the shard).
#
# usage: tools/bench_offload.sh [--out DIR] [--steps N] [--offload-path DIR] [--stage Z]
#
# With --stage 3 a third mode also offloads the ZeRO-3 parameter shard ([parallel] offload_params
# = nvme: 2 more bytes per parameter leave with bf16 working params).
#
# For each mode it records the --dry-run prediction (the ledger's total), trains N steps (default
# 5) and reads the process's peak RSS (getrusage, metrics.csv peak_mem_mib), the mean step time
# over steps 2..N and the offload columns. It prints the predicted drop (resident total minus
# offloaded total), the measured drop of peak RSS, their ratio, and the step-time ratio. Results:
# DIR/offload.csv (default DIR: runs/bench_offload; offload files in DIR/scratch unless
# --offload-path names a directory on another device). A benchmark: it asserts nothing.
source "$(dirname "$0")/script_help.sh"
set -euo pipefail
cd "$(dirname "$0")/.."
out=runs/bench_offload steps=5 offpath="" stage=1
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$(need_value "$@") || exit 2; shift 2 ;;
    --steps) steps=$(need_value "$@") || exit 2; shift 2 ;;
    --offload-path) offpath=$(need_value "$@") || exit 2; shift 2 ;;
    --stage) stage=$(need_value "$@") || exit 2; shift 2 ;;
    -h|--help) script_help; exit 0 ;;
    *) echo "bench_offload.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
bin=build/bin/trident deck=input/bench_zero_50m.ini
[ -x "$bin" ] || { echo "bench_offload.sh: $bin not built (tools/build.sh)" >&2; exit 1; }
[ -f data/shakespeare_char.h5 ] || { echo "bench_offload.sh: data/shakespeare_char.h5 missing (see README)" >&2; exit 1; }
mkdir -p "$out"
[ -n "$offpath" ] || offpath="$out/scratch"
mkdir -p "$offpath"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
common=(--parallel.zero_stage="$stage" --train.param_dtype=bf16 --train.max_steps="$steps")
csv="$out/offload.csv"
echo "mode,stage,predicted_peak_mib,predicted_optimizer_mib,nvme_mib,peak_rss_mib,ms_per_step,offload_read_mib,offload_write_mib,offload_wait_ms" > "$csv"
modes=(none nvme)
[ "$stage" = 3 ] && modes+=(nvme_params)  # ZeRO-3: the parameter shard to the disk as well
for mode in "${modes[@]}"; do
  args=("${common[@]}")
  [ "$mode" != none ] && args+=(--parallel.offload_optimizer=nvme --parallel.offload_path="$offpath")
  [ "$mode" = nvme_params ] && args+=(--parallel.offload_params=nvme)
  run="$out/run_$mode"
  rm -rf "$run"
  pred="$("$bin" train --config "$deck" --dry-run 1 "${args[@]}")"
  # The deck saves nothing (interval 0, save_final false): the ledger's peak is the total without
  # the checkpoint category.
  total="$(awk '$1 == "total" {t = $2} $1 == "checkpoint" {c = $2} END {printf "%.2f", t - c}' <<<"$pred")"
  optim="$(awk '$1 == "optimizer" {print $2}' <<<"$pred")"
  nvme="$(sed -n 's/^by device: .*nvme \([0-9.]*\) MiB.*/\1/p' <<<"$pred")"
  "$bin" train --config "$deck" "${args[@]}" --train.out_dir="$run" > "$run.log" 2>&1
  # Columns by name: peak_mem_mib (max), ms_per_step (mean over steps 2..N), offload columns (mean).
  read -r rss ms rd wr wt <<<"$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
    { if ($h["peak_mem_mib"] > rss) rss = $h["peak_mem_mib"] }
    NR > 2 { ms += $h["ms_per_step"]; rd += $h["offload_read_mib"]; wr += $h["offload_write_mib"];
             wt += $h["offload_wait_ms"]; n++ }
    END { printf "%.1f %.1f %.1f %.1f %.1f\n", rss, ms / n, rd / n, wr / n, wt / n }' "$run/metrics.csv")"
  echo "$mode,$stage,$total,$optim,$nvme,$rss,$ms,$rd,$wr,$wt" >> "$csv"
  echo "== $mode: predicted total $total MiB (optimizer $optim, nvme $nvme) | peak RSS $rss MiB | $ms ms/step |" \
       "offload read $rd MiB, write $wr MiB, waited $wt ms per step"
done
awk -F, 'NR == 2 { pt = $3; rss = $6; ms = $7 } NR >= 3 {
  pd = pt - $3; md = rss - $6
  printf "%s: predicted drop %.1f MiB, measured drop of peak RSS %.1f MiB (measured / predicted %.3f)\n", $1, pd, md, md / pd
  printf "%s: peak RSS ratio offloaded / resident %.3f; step time ratio %.2f\n", $1, $6 / rss, $7 / ms }' "$csv"
echo "wrote $csv"
