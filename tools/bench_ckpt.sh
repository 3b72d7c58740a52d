#!/usr/bin/env bash
# Checkpoint I/O benchmark: save and load bandwidth of a 107M-parameter model (input deck
# input/bench_ckpt_100m.ini, 1.2 GiB per checkpoint) at 1 and 2 ranks, synchronous and
# asynchronous, next to the raw write and read speed of the same disk (dd), and the training-step
# slowdown while an asynchronous save runs.
#
# usage: tools/bench_ckpt.sh [--out DIR] [--ranks "1 2"] [--steps N] [--interval K] [--data PATH]
#                            [--warm]
# Defaults: --steps 12, --interval 4, --ranks "1 2", --data data/shakespeare_char.h5, --out runs/bench_ckpt.
#
# For each rank count R it runs, with `mpiexec -n R`:
#   base   N steps without checkpoints (the step time without saves);
#   sync   N steps, a synchronous save every K steps (training waits for each save);
#   async  the same with [checkpoint] async = true (a snapshot, then a background write);
#   load   resumes from the last checkpoint three ways: page cache warm with checksum verification,
#          cold (caches dropped; needs root, else skipped) with verification, cold without.
# dd writes (conv=fsync) and reads (cold when root) a file of one checkpoint's size in DIR before
# the runs, and writes it again after them (dd_write_after). --warm first touches 80% of the free
# memory once: on a virtual machine that returns freed pages to the host (virtio-balloon free
# page reporting) a page's first touch is slow, which bounds any write into new page cache pages;
# docs/checkpoint-io.md discusses it.
# Logs and metrics go to DIR (default runs/bench_ckpt); tools/plot_ckpt.py DIR turns them into
# DIR/ckpt_io.csv, DIR/ckpt_steps.csv and DIR/ckpt_io.png (docs/checkpoint-io.md shows how).
# This is a benchmark, not a test: it prints measured numbers and asserts nothing.
source "$(dirname "$0")/script_help.sh"
set -euo pipefail
cd "$(dirname "$0")/.."
out=runs/bench_ckpt ranks="1 2" steps=12 interval=4 data="" warm=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$(need_value "$@") || exit 2; shift 2 ;;
    --ranks) ranks=$(need_value "$@") || exit 2; shift 2 ;;
    --steps) steps=$(need_value "$@") || exit 2; shift 2 ;;
    --interval) interval=$(need_value "$@") || exit 2; shift 2 ;;
    --data) data=$(need_value "$@") || exit 2; shift 2 ;;
    --warm) warm=1; shift ;;
    -h|--help) script_help; exit 0 ;;
    *) echo "bench_ckpt.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
# Values checked before anything runs (usage errors, exit 2).
bad() { echo "bench_ckpt.sh: $*" >&2; exit 2; }
posint() { [[ "$1" =~ ^[0-9]+$ ]] && [ "$((10#$1))" -ge 1 ]; }
posint "$steps" || bad "--steps '$steps': expected a positive whole number of steps"
posint "$interval" || bad "--interval '$interval': expected a positive whole number of steps"
[ -n "${ranks// }" ] || bad "--ranks '$ranks': expected rank counts, e.g. \"1 2\""
for R in $ranks; do posint "$R" || bad "--ranks '$ranks': '$R' is not a positive number of ranks"; done
[ ! -e "$out" ] || [ -d "$out" ] || bad "--out '$out' exists and is not a directory"
bin=build/bin/trident deck=input/bench_ckpt_100m.ini
[ -x "$bin" ] || { echo "bench_ckpt.sh: $bin not built (tools/build.sh)" >&2; exit 1; }
data="${data:-data/shakespeare_char.h5}"
[ -f "$data" ] || { echo "bench_ckpt.sh: $data missing (see README; or --data PATH)" >&2; exit 1; }
mkdir -p "$out"
out="$(cd "$out" && pwd)"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
root=0; [ "$(id -u)" -eq 0 ] && root=1
drop_caches() { sync; [ "$root" -eq 1 ] && echo 3 > /proc/sys/vm/drop_caches; }
common=(--config "$deck" --data.path="$data" --train.max_steps="$steps" --checkpoint.keep=2)

if [ "$warm" -eq 1 ]; then
  echo "== warm-up: touching 80% of the free memory once"
  /usr/bin/python3 -c "
import mmap
free = int([l.split()[1] for l in open('/proc/meminfo') if l.startswith('MemAvailable')][0]) * 1024
n = int(free * 0.8) // mmap.PAGESIZE * mmap.PAGESIZE
m = mmap.mmap(-1, n)
for off in range(0, n, mmap.PAGESIZE):
    m[off] = 1
m.close()
print(f'touched {n / 2**30:.1f} GiB')"
fi

# ---- raw disk speed: one checkpoint's worth, written with fsync and read back
pred="$("$bin" train --config "$deck" --data.path="$data" --dry-run 1)"
n_params="$(sed -n 's/^model: \([0-9]*\) parameters.*/\1/p' <<<"$pred")"
mib=$(( n_params * 12 / 1048576 + 1 ))
echo "== raw disk: dd of $mib MiB in $out (model: $n_params parameters)"
dd if=/dev/zero of="$out/dd.bin" bs=16M count=$(( mib / 16 + 1 )) conv=fsync 2> "$out/dd_write.log"
drop_caches
dd if="$out/dd.bin" of=/dev/null bs=16M 2> "$out/dd_read.log"
rm -f "$out/dd.bin"
echo "n_params=$n_params root=$root steps=$steps interval=$interval warm=$warm" > "$out/bench.env"
tail -n 1 "$out/dd_write.log" "$out/dd_read.log"

for R in $ranks; do
  for mode in base sync async; do
    run="$out/r${R}_$mode"
    rm -rf "$run"
    extra=(--checkpoint.interval="$interval")
    [ "$mode" = base ] && extra=(--checkpoint.interval=0 --checkpoint.save_final=false)
    [ "$mode" = async ] && extra+=(--checkpoint.async=true)
    echo "== $R rank(s), $mode"
    mpiexec -n "$R" "$bin" train "${common[@]}" --train.out_dir="$run" "${extra[@]}" > "$run.log" 2>&1 ||
      { echo "run failed, see $run.log" >&2; exit 1; }
    grep -E "^checkpoint:" "$run.log" || true
  done
  run="$out/r${R}_sync"
  echo "== $R rank(s), load"
  mpiexec -n "$R" "$bin" train "${common[@]}" --train.out_dir="$run" --resume > "$out/r${R}_load_warm.log" 2>&1
  if [ "$root" -eq 1 ]; then
    drop_caches
    mpiexec -n "$R" "$bin" train "${common[@]}" --train.out_dir="$run" --resume > "$out/r${R}_load_cold.log" 2>&1
    drop_caches
    mpiexec -n "$R" "$bin" train "${common[@]}" --train.out_dir="$run" --resume \
      --checkpoint.verify_on_resume=false > "$out/r${R}_load_cold_noverify.log" 2>&1
  fi
  grep -hE "^resume|^resumed" "$out"/r"${R}"_load_*.log
done
echo "== raw disk again, after the runs"
dd if=/dev/zero of="$out/dd.bin" bs=16M count=$(( mib / 16 + 1 )) conv=fsync 2> "$out/dd_write_after.log"
rm -f "$out/dd.bin"
tail -n 1 "$out/dd_write_after.log"
echo "== results: /usr/bin/python3 tools/plot_ckpt.py $out"
/usr/bin/python3 tools/plot_ckpt.py "$out"
