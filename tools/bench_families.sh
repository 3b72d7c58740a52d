#!/usr/bin/env bash
# Model-family benchmark: training throughput per core of the llama family against GPT-2 at the
# same parameter count, on one rank (one core), at several sizes.
#
# usage: tools/bench_families.sh [--out DIR] [--sizes "128 256 384"] [--steps N] [--data FILE]
#
# For each width C (n_layer 4, n_head C/32, block 128, micro-batch 8 on one rank) it trains
# input/shakespeare_char.ini's GPT-2 and a Llama whose SwiGLU width is chosen so a block has GPT-2's
# 12 C^2 parameters (n_kv_head = n_head / 2, F = (12 C^2 - 3 C^2) / 3 C = 3C), N steps each (default
# 30), and reads the median ms per step of steps 6..N from metrics.csv (the first steps warm up).
# Results: DIR/families.csv (size, family, parameters, median ms/step, tokens/s, MFU) and the ratio
# llama / gpt2 of tokens per second printed per size (default DIR: runs/bench_families).
# This is a benchmark, not a test: it prints measured numbers and asserts nothing.
source "$(dirname "$0")/script_help.sh"
set -euo pipefail
cd "$(dirname "$0")/.."
out=runs/bench_families sizes="128 256 384" steps=30 data=data/shakespeare_char.h5
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$(need_value "$@") || exit 2; shift 2 ;;
    --sizes) sizes=$(need_value "$@") || exit 2; shift 2 ;;
    --steps) steps=$(need_value "$@") || exit 2; shift 2 ;;
    --data) data=$(need_value "$@") || exit 2; shift 2 ;;
    -h|--help) script_help; exit 0 ;;
    *) echo "bench_families.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
# Values checked before anything runs (usage errors, exit 2).
bad() { echo "bench_families.sh: $*" >&2; exit 2; }
[[ "$steps" =~ ^[0-9]+$ ]] && [ "$((10#$steps))" -ge 8 ] || bad "--steps '$steps': expected a whole number of at least 8"
[ -n "${sizes// }" ] || bad "--sizes '$sizes': expected widths, e.g. \"128 256 384\""
for C in $sizes; do
  [[ "$C" =~ ^[0-9]+$ ]] && [ "$((10#$C))" -ge 32 ] && [ "$((10#$C % 32))" -eq 0 ] ||
    bad "--sizes '$sizes': '$C' is not a width (a positive multiple of 32)"
  # Llama runs with n_kv_head = n_head / 2 (n_head = max(2, width / 32)), which must divide n_head.
  nh=$((10#$C / 32)); [ "$nh" -ge 2 ] || nh=2
  [ "$((nh % (nh / 2)))" -eq 0 ] ||
    bad "--sizes '$sizes': '$C' gives n_head = $nh, which n_kv_head = $((nh / 2)) does not divide (llama): use 32, 64, 96 or a multiple of 64"
done
[ ! -e "$out" ] || [ -d "$out" ] || bad "--out '$out' exists and is not a directory"
bin=build/bin/trident
[ -x "$bin" ] || { echo "bench_families.sh: $bin not built (tools/build.sh)" >&2; exit 1; }
[ -f "$data" ] || { echo "bench_families.sh: $data missing (see README: trident prep)" >&2; exit 1; }
mkdir -p "$out"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
csv="$out/families.csv"
echo "size,family,parameters,ms_per_step,tokens_per_sec,mfu" > "$csv"
for C in $sizes; do
  nh=$((C / 32)); [ "$nh" -ge 2 ] || nh=2
  declare -A tps=()
  for family in gpt2 llama; do
    run="$out/run_${family}_${C}"
    rm -rf "$run"
    extra=()
    if [ "$family" = llama ]; then
      extra=(--model.arch=llama --model.n_kv_head=$((nh / 2)) --model.ffn_hidden=$((3 * C)))
    fi
    "$bin" train --config input/shakespeare_char.ini --data.path="$data" --train.out_dir="$run" \
      --model.n_embd="$C" --model.n_head="$nh" --model.block_size=128 --train.global_batch_size=8 \
      --train.max_steps="$steps" --train.warmup_steps=2 --train.eval_interval=0 --train.log_interval=10 \
      --checkpoint.interval=0 --checkpoint.save_final=false "${extra[@]}" > "$run.log" 2>&1 ||
      { echo "bench_families.sh: $family C=$C failed, see $run.log" >&2; exit 1; }
    params=$(sed -n 's/.* | \([0-9.]*[kMG]*\) parameters\( |.*\)\{0,1\}$/\1/p' "$run.log" | head -n 1)
    read -r ms tok mfu < <(awk -F, 'NR > 1 && $1 >= 6 {print $7, $6, $8}' "$run/metrics.csv" | sort -g |
      awk '{a[NR] = $0} END {print a[int((NR + 1) / 2)]}')
    tps[$family]=$tok
    echo "$C,$family,$params,$ms,$tok,$mfu" >> "$csv"
    printf '  C=%-4s %-5s %8s params  %8.2f ms/step  %9.0f tok/s  MFU %5.1f%%\n' "$C" "$family" "$params" "$ms" "$tok" \
      "$(awk -v m="$mfu" 'BEGIN { print 100 * m }')"
  done
  awk -v a="${tps[llama]}" -v b="${tps[gpt2]}" -v c="$C" 'BEGIN { printf "  C=%s: llama / gpt2 tokens per second = %.3f\n", c, a / b }'
done
echo "results: $csv"
