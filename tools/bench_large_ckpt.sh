#!/usr/bin/env bash
# A real checkpoint round trip with a shard of more than 2 GiB (issue 13, item 1): one rank holds
# a 541M-parameter model (n_embd 1024, 16 heads, 43 layers), so each of its three shard datasets
# (parameters and both AdamW moments, float32) is 2,165,014,528 bytes, past the 2^31 - 1 bytes
# one MPI-IO call can carry. Before the fix its first save failed with "can't convert from size to
# size_i"; now every transfer is split into calls of at most TRIDENT_IO_MAX_CALL_BYTES (1 GiB).
#
# usage: tools/bench_large_ckpt.sh [--out DIR] [--layers N] [--data PATH] [--keep]
#
# Runs, on one rank (batch 1, block 64, so a step is a few seconds):
#   stop    trains step 1 of 2 and saves it (stop_at_step = 1): a 6.5 GB file;
#   verify  `trident ckpt verify` of that file (every checksum, read in 64 MiB pieces);
#   resume  --resume: verifies, loads, trains step 2 and saves it;
#   straight  the same 2 steps without a stop, saving only at the end;
#   diff    `trident ckpt diff` of the two step-2 checkpoints: must be identical (bitwise resume).
# Prints the file size and the time of each save, verification and load, and exits 1 if any
# step fails or the diff is not identical. Needs ~17 GB of free memory (weights, gradients,
# moments and the 12-byte-per-parameter save snapshot) and ~20 GB of disk in DIR (default
# /tmp/trident_large_ckpt, removed at the end unless --keep). Not part of ctest: it takes
# minutes and gigabytes; CI covers the same split path with the limit lowered to 4 KiB
# (mpi_io_limits, cli_io_limits), and `ctest -L long` (configured with -DTRIDENT_LONG_TESTS=ON)
# runs the io layer alone past 2^31 bytes and elements. `--layers 2` (25M parameters, 0.3 GB)
# checks the script itself in a minute.
source "$(dirname "$0")/script_help.sh"
set -euo pipefail
cd "$(dirname "$0")/.."
out=/tmp/trident_large_ckpt layers=43 data="" keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$(need_value "$@") || exit 2; shift 2 ;;
    --layers) layers=$(need_value "$@") || exit 2; shift 2 ;;
    --data) data=$(need_value "$@") || exit 2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) script_help; exit 0 ;;
    *) echo "bench_large_ckpt.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
# Values checked before anything runs (usage errors, exit 2).
[[ "$layers" =~ ^[0-9]+$ ]] && [ "$((10#$layers))" -ge 1 ] ||
  { echo "bench_large_ckpt.sh: --layers '$layers': expected a positive whole number of layers" >&2; exit 2; }
[ ! -e "$out" ] || [ -d "$out" ] || { echo "bench_large_ckpt.sh: --out '$out' exists and is not a directory" >&2; exit 2; }
bin="$(pwd)/build/bin/trident"
[ -x "$bin" ] || { echo "bench_large_ckpt.sh: $bin not built (tools/build.sh)" >&2; exit 1; }
mkdir -p "$out"
out="$(cd "$out" && pwd)"
[ "$keep" -eq 1 ] || trap 'rm -rf "$out/stop" "$out/straight"' EXIT
avail_gb=$(df -P -BG "$out" | awk 'NR == 2 {print int($4)}')
mem_gb=$(awk '/MemAvailable/ {print int($2 / 1048576)}' /proc/meminfo)
echo "== $out: ${avail_gb} GB free on disk, ${mem_gb} GiB of memory available"
[ "$avail_gb" -ge 20 ] || { echo "bench_large_ckpt.sh: needs ~20 GB free in $out" >&2; exit 1; }
[ "$mem_gb" -ge 17 ] || echo "warning: ~17 GiB of memory needed, ${mem_gb} GiB available"
if [ -z "$data" ]; then
  data="$out/shakespeare_char.h5"
  [ -f "$data" ] || "$bin" prep --output "$data" ../shared/data/tinyshakespeare.txt >/dev/null
fi
export OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2
common=(--config input/shakespeare_char.ini --data.path="$data" --model.n_embd=1024 --model.n_head=16
        --model.n_layer="$layers" --model.block_size=64 --model.dropout=0 --train.global_batch_size=1
        --train.micro_batch_size=1 --train.max_steps=2 --train.eval_interval=1000 --train.eval_iters=1 --train.log_interval=1
        --train.peak_tflops=0.1 --checkpoint.interval=0)
# seconds LOG CMD...: runs CMD with its output in LOG, prints its wall time in seconds.
seconds() { local log=$1; shift; /usr/bin/time -f %e -o "$out/time.txt" "$@" >"$log" 2>&1; cat "$out/time.txt"; }
gbps() { awk -v b="$1" -v t="$2" 'BEGIN {printf "%.2f GB/s", b / 1e9 / t}'; }
rm -rf "$out/stop" "$out/straight"

echo "== stop: step 1 of 2, saved"
"$bin" train "${common[@]}" --train.out_dir="$out/stop" --train.stop_at_step=1 2>&1 | tee "$out/stop.log" |
  grep -E "parameters|checkpoint:|error" || true
f1="$out/stop/checkpoints/step_00000001.h5"
[ -f "$f1" ] || { echo "bench_large_ckpt.sh: no checkpoint written" >&2; exit 1; }
size=$(stat -c %s "$f1")
echo "file: $f1, $size bytes ($(awk -v b="$size" 'BEGIN {printf "%.2f GB", b / 1e9}'))"
h5dump -H "$f1" | grep -A3 'DATASET "pp0_dp0_tp0"' | grep -m1 DATASPACE | sed 's/^ */shard dataset: /' || true
save=$(grep -oE 'stop_at_step, [0-9.]+ s' "$out/stop.log" | grep -oE '[0-9.]+ s' | cut -d' ' -f1)
[ -n "$save" ] && echo "save: ${save} s ($(gbps "$size" "$save"))"

echo "== raw disk: dd of the same size (conv=fsync)"
t=$(seconds "$out/dd.log" dd if=/dev/zero of="$out/dd.bin" bs=16M count=$((size / 16777216)) conv=fsync)
rm -f "$out/dd.bin"
echo "dd write: ${t} s ($(gbps "$size" "$t"))"

echo "== verify"
t=$(seconds "$out/verify.log" "$bin" ckpt verify "$f1") || { cat "$out/verify.log"; exit 1; }
echo "ckpt verify: ${t} s ($(gbps "$size" "$t")): $(cat "$out/verify.log")"

echo "== resume: verify, load, step 2, save"
"$bin" train "${common[@]}" --train.out_dir="$out/stop" --resume 2>&1 | tee "$out/resume.log" |
  grep -E "resumed from|checkpoint:|error" || true

echo "== straight: 2 steps, saved at the end"
"$bin" train "${common[@]}" --train.out_dir="$out/straight" 2>&1 | tee "$out/straight.log" |
  grep -E "checkpoint:|error" || true

echo "== diff"
"$bin" ckpt diff "$out/stop/checkpoints/step_00000002.h5" "$out/straight/checkpoints/step_00000002.h5"
