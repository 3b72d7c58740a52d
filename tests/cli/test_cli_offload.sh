#!/usr/bin/env bash
# Optimizer-state offload ([parallel] offload_optimizer = nvme) through the executable.
# Oracle: the same run without offload. Checked:
#  - metrics.csv's deterministic columns (step, losses, lr, grad norm) byte-identical with and
#    without offload at 1 rank (ZeRO-0 fp32: moments only; ZeRO-1 bf16: master + moments) and at
#    dp 2 with ZeRO-1, 2, 3 (and ZeRO-2 with asynchronous saves); the final checkpoints identical
#    (`trident ckpt diff`);
#  - a run that switches offload on, or off, at a resume equals the uninterrupted run;
#  - the offload columns of metrics.csv (bytes read and written per step equal the file size);
#  - faults, each on every rank with exit 1, a message naming the file, and the previous
#    checkpoint still intact (`trident ckpt verify`) and still the newest: a missing directory, a
#    full device (ENOSPC from an LD_PRELOAD shim), a file-size limit (`ulimit -f`: EFBIG), an I/O
#    error in the middle of a run (EIO from the shim on one rank), a file truncated in the middle
#    of a run (the TRIDENT_POISON=offload_truncate hook on one rank);
#  - parameter offload (offload_params = nvme at ZeRO-3): byte-identical to the resident ZeRO-3 run,
#    switched on and off at a resume;
#  - the deck: host refused in a host build, offload_params without ZeRO-3 or without
#    offload_optimizer = nvme refused, nvme needs offload_path;
#    the dry run reports the bytes by device.
set -u
source "$(dirname "$0")/cli_lib.sh"
SRC="$(cd "$(dirname "$0")/../.." && pwd)"

make_text "$WORK/text.txt"
"$TRIDENT" prep --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || { echo "prep failed"; exit 1; }
tiny_deck "$WORK/d.ini" "$WORK/unused" "$WORK/tok.h5"
mkdir -p "$WORK/off"
OFF=(--parallel.offload_optimizer=nvme "--parallel.offload_path=$WORK/off")
det() { cut -d, -f1-5 "$1/metrics.csv"; }  # step, train_loss, val_loss, lr, grad_norm
last_ckpt() { echo "$1/checkpoints/step_00000006.h5"; }

# ---- equality ---------------------------------------------------------------------------------
run_pair() {  # run_pair NAME NP ARGS...: the run with and without offload, compared
  local name="$1" np="$2"; shift 2
  expect_exit 0 "step +6/6" -- "$MPIEXEC" -n "$np" "$TRIDENT" train --config "$WORK/d.ini" \
    --train.out_dir="$WORK/$name.res" "$@"
  expect_exit 0 "optimizer state offloaded to" -- "$MPIEXEC" -n "$np" "$TRIDENT" train --config "$WORK/d.ini" \
    --train.out_dir="$WORK/$name.off" "$@" "${OFF[@]}"
  check "$name: losses byte-identical with offload" cmp -s <(det "$WORK/$name.res") <(det "$WORK/$name.off")
  expect_exit 0 "identical" -- "$TRIDENT" ckpt diff "$(last_ckpt "$WORK/$name.res")" "$(last_ckpt "$WORK/$name.off")"
}
run_pair np1_z0 1 --parallel.zero_stage=0
run_pair np1_z1_bf16 1 --parallel.zero_stage=1 --train.param_dtype=bf16
run_pair np2_z1 2 --parallel.zero_stage=1
run_pair np2_z2 2 --parallel.zero_stage=2
run_pair np2_z3 2 --parallel.zero_stage=3
run_pair np2_z2_async 2 --parallel.zero_stage=2 --checkpoint.async=true  # snapshots read the file back
check "offload files are scratch: removed at exit" test -z "$(ls -A "$WORK/off")"

# The offload columns: every step reads and writes the whole file once (1 rank, ZeRO-1 bf16).
read -r rd wr <<<"$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i }
  NR == 2 { print $h["offload_read_mib"], $h["offload_write_mib"] }' "$WORK/np1_z1_bf16.off/metrics.csv")"
check "offload_read_mib = offload_write_mib > 0 per step" awk -v a="$rd" -v b="$wr" 'BEGIN { exit !(a > 0 && a == b) }'
check "offload columns are zero without offload" \
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i } NR > 1 && $h["offload_read_mib"] != 0 { bad = 1 } END { exit bad }' \
  "$WORK/np1_z1_bf16.res/metrics.csv"

# ---- switching at a resume --------------------------------------------------------------------
for mode in on off; do
  if [ "$mode" = on ]; then first=(); second=("${OFF[@]}"); else first=("${OFF[@]}"); second=(); fi
  expect_exit 0 "stopping after step 3" -- "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/d.ini" \
    --train.out_dir="$WORK/switch_$mode" --parallel.zero_stage=1 --train.stop_at_step=3 "${first[@]}"
  expect_exit 0 "resumed from .*step_00000003.h5 at step 3" -- "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/d.ini" \
    --train.out_dir="$WORK/switch_$mode" --parallel.zero_stage=1 --resume "${second[@]}"
  check "offload switched $mode at the resume: losses equal the uninterrupted run" \
    cmp -s <(det "$WORK/np2_z1.res") <(det "$WORK/switch_$mode")
  expect_exit 0 "identical" -- "$TRIDENT" ckpt diff "$(last_ckpt "$WORK/np2_z1.res")" "$(last_ckpt "$WORK/switch_$mode")"
done

# ---- parameter offload (offload_params = nvme, ZeRO-3) ------------------------------------------
# Oracle: the resident ZeRO-3 run above. With the parameter shard in the file as well, the losses
# and the final checkpoint are the same, and switching it on or off at a resume changes nothing.
PAR=(--parallel.zero_stage=3 --parallel.offload_params=nvme "${OFF[@]}")
expect_exit 0 "optimizer state and parameter shard offloaded to" -- "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/d.ini" \
  --train.out_dir="$WORK/np2_z3_params.off" "${PAR[@]}"
check "np2_z3 with offload_params: losses byte-identical" cmp -s <(det "$WORK/np2_z3.res") <(det "$WORK/np2_z3_params.off")
expect_exit 0 "identical" -- "$TRIDENT" ckpt diff "$(last_ckpt "$WORK/np2_z3.res")" "$(last_ckpt "$WORK/np2_z3_params.off")"
col1() { awk -F, -v c="$2" 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i } NR == 2 { print $h[c] }' "$1/metrics.csv"; }
# A checkpoint of an offloaded run reshards to any stage: offload is scratch, not a property of the
# checkpoint (the resharded deck keeps none), and its parameters are the resident run's.
expect_exit 0 "" -- "$TRIDENT" ckpt reshard --dp 1 --zero-stage 1 --output "$WORK/resh.h5" "$(last_ckpt "$WORK/np2_z3_params.off")"
expect_exit 0 "" -- "$TRIDENT" ckpt reshard --dp 1 --zero-stage 2 --output "$WORK/resh2.h5" "$WORK/resh.h5"
check "the offloaded run's checkpoint stores offload_params = nvme" \
  grep -q "offload_params = nvme" <(h5dump -d /config "$(last_ckpt "$WORK/np2_z3_params.off")")
check "the resharded deck keeps no offload" grep -q "offload_params = none" <(h5dump -d /config "$WORK/resh2.h5")
check "the parameter records show in offload_read_mib: more per step than optimizer-only offload" \
  awk -v a="$(col1 "$WORK/np2_z3_params.off" offload_read_mib)" -v b="$(col1 "$WORK/np2_z3.off" offload_read_mib)" \
  'BEGIN { exit !(a > b && b > 0) }'
for mode in on off; do
  if [ "$mode" = on ]; then first=(--parallel.zero_stage=3); second=("${PAR[@]}"); else first=("${PAR[@]}"); second=(--parallel.zero_stage=3); fi
  expect_exit 0 "stopping after step 3" -- "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/d.ini" \
    --train.out_dir="$WORK/pswitch_$mode" --train.stop_at_step=3 "${first[@]}"
  expect_exit 0 "resumed from .*step_00000003.h5 at step 3" -- "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/d.ini" \
    --train.out_dir="$WORK/pswitch_$mode" --resume "${second[@]}"
  check "offload_params switched $mode at the resume: losses equal the uninterrupted run" \
    cmp -s <(det "$WORK/np2_z3.res") <(det "$WORK/pswitch_$mode")
done
check "offload files are scratch: removed at exit (parameter offload too)" test -z "$(ls -A "$WORK/off")"

# ---- faults -----------------------------------------------------------------------------------
# A run stopped at step 3 (resident) is the checkpoint every fault below must leave intact.
base() {  # base DIR: a fresh run directory holding the step-3 checkpoint
  rm -rf "$1"
  "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/d.ini" --train.out_dir="$1" --parallel.zero_stage=1 \
    --train.stop_at_step=3 >/dev/null 2>&1
}
intact() {  # intact DIR: the step-3 checkpoint verifies and is still the newest
  expect_exit 0 "intact" -- "$TRIDENT" ckpt verify "$1/checkpoints/step_00000003.h5"
  check "$1: latest is still step 3, nothing newer" \
    test "$(cat "$1/checkpoints/latest")" = step_00000003.h5 -a ! -e "$1/checkpoints/step_00000006.h5"
}
resume_off() {  # resume_off DIR ARGS...: resume DIR with offload on
  local d="$1"; shift
  "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/d.ini" --train.out_dir="$d" --parallel.zero_stage=1 --resume \
    "${OFF[@]}" "$@"
}

base "$WORK/f_missing"
expect_exit 1 "offload file '$WORK/nowhere/trident-offload.0.bin': cannot create it: No such file or directory" -- \
  "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/d.ini" --train.out_dir="$WORK/f_missing" --parallel.zero_stage=1 \
  --resume --parallel.offload_optimizer=nvme --parallel.offload_path="$WORK/nowhere"
intact "$WORK/f_missing"
# The test hook's chunk size is a whole number (atoll read '1e6' as 1-byte chunks: minutes a step).
expect_exit 2 "TRIDENT_OFFLOAD_CHUNK_BYTES = '1e6' is not a whole number of bytes >= 64" -- \
  env TRIDENT_OFFLOAD_CHUNK_BYTES=1e6 "$TRIDENT" train --config "$WORK/d.ini" --train.out_dir="$WORK/f_chunk" \
  --parallel.zero_stage=1 --parallel.offload_optimizer=nvme --parallel.offload_path="$WORK"
# An offload_path that offload_optimizer does not use is said to be unused.
expect_exit 0 "offload_path = $WORK is not used: offload_optimizer = none" -- \
  "$TRIDENT" train --config "$WORK/d.ini" --train.out_dir="$WORK/f_unused" --train.max_steps=1 --parallel.offload_path="$WORK"

if [ "$(id -u)" != 0 ]; then
  mkdir -p "$WORK/ro" && chmod 500 "$WORK/ro"
  base "$WORK/f_ro"
  expect_exit 1 "offload file '$WORK/ro/trident-offload.0.bin': cannot create it: Permission denied" -- \
    "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/d.ini" --train.out_dir="$WORK/f_ro" --parallel.zero_stage=1 \
    --resume --parallel.offload_optimizer=nvme --parallel.offload_path="$WORK/ro"
  intact "$WORK/f_ro"
else
  echo "skip unwritable directory (running as root)"
fi

base "$WORK/f_efbig"
# 128 KiB: above the checkpoint directory's probe, below the offload file (~180 KiB). UCX's POSIX
# shared-memory transport creates larger files (in /dev/shm) at MPI_Init, which the limit stops:
# System V shared memory (no file) for this run only. (tcp,self, used before, hung now and then in
# MPI_Finalize on a loaded machine: one rank flushing its endpoint while the other waited in PMI.)
expect_exit 1 "trident-offload.[01].bin': cannot reserve .* File too large \(a file-size limit, ulimit -f" -- \
  bash -c "ulimit -f 128; UCX_TLS=sysv,self $(printf '%q ' "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/d.ini" \
    --train.out_dir="$WORK/f_efbig" --parallel.zero_stage=1 --resume "${OFF[@]}")"
intact "$WORK/f_efbig"

SHIM="$WORK/offload_fault_shim.so"
if cc -shared -fPIC -o "$SHIM" "$(dirname "$0")/offload_fault_shim.c" -ldl 2>"$WORK/cc.log"; then
  base "$WORK/f_full"
  expect_exit 1 "trident-offload.1.bin': cannot reserve .*No space left on device \(the offload device is full\)" -- \
    env LD_PRELOAD="$SHIM" OFFLOAD_SHIM_FULL=1 OFFLOAD_SHIM_RANK=1 bash -c "$(printf '%q ' "$MPIEXEC" -n 2 \
    "$TRIDENT" train --config "$WORK/d.ini" --train.out_dir="$WORK/f_full" --parallel.zero_stage=1 --resume "${OFF[@]}")"
  intact "$WORK/f_full"
  base "$WORK/f_eio"
  # A resume writes every unit's record twice (4 units: initialisation, then the checkpoint's
  # state); the first step's writes fail on rank 1.
  expect_exit 1 "step 4: offload failed.*trident-offload.1.bin': write of record .* Input/output error" -- \
    env LD_PRELOAD="$SHIM" OFFLOAD_SHIM_EIO_AFTER=8 OFFLOAD_SHIM_RANK=1 bash -c "$(printf '%q ' "$MPIEXEC" -n 2 \
    "$TRIDENT" train --config "$WORK/d.ini" --train.out_dir="$WORK/f_eio" --parallel.zero_stage=1 --resume "${OFF[@]}")"
  intact "$WORK/f_eio"
  base "$WORK/f_eio_load"
  expect_exit 1 "optimizer-state offload failed: offload file '.*trident-offload.1.bin': write of record 1 .* Input/output error" -- \
    env LD_PRELOAD="$SHIM" OFFLOAD_SHIM_EIO_AFTER=5 OFFLOAD_SHIM_RANK=1 bash -c "$(printf '%q ' "$MPIEXEC" -n 2 \
    "$TRIDENT" train --config "$WORK/d.ini" --train.out_dir="$WORK/f_eio_load" --parallel.zero_stage=1 --resume "${OFF[@]}")"
  intact "$WORK/f_eio_load"
else
  echo "skip ENOSPC/EIO shim: cc failed ($(head -1 "$WORK/cc.log"))"
fi

base "$WORK/f_trunc"
expect_exit 1 "step 5: offload failed.*trident-offload.1.bin': truncated" -- \
  env TRIDENT_POISON=offload_truncate:5 TRIDENT_POISON_RANK=1 bash -c "$(printf '%q ' "$MPIEXEC" -n 2 \
  "$TRIDENT" train --config "$WORK/d.ini" --train.out_dir="$WORK/f_trunc" --parallel.zero_stage=1 --resume "${OFF[@]}")"
intact "$WORK/f_trunc"
# The offload file is scratch: the same resume without the fault finishes the run.
expect_exit 0 "step +6/6" -- resume_off "$WORK/f_trunc"
check "after the fault, the resumed run equals the uninterrupted one" cmp -s <(det "$WORK/np2_z1.res") <(det "$WORK/f_trunc")

# ---- deck and dry run -------------------------------------------------------------------------
if ! grep -qiE "^(1|on|true|yes)$" <<<"${TRIDENT_HAVE_CUDA:-0}"; then
  expect_exit 2 "offload_optimizer = host: this build has no GPU" -- \
    "$TRIDENT" train --config "$WORK/d.ini" --parallel.offload_optimizer=host --dry-run 1
fi
expect_exit 2 "offload_params = nvme needs \[parallel\] zero_stage = 3" -- \
  "$TRIDENT" train --config "$WORK/d.ini" --parallel.offload_params=nvme --dry-run 1
expect_exit 2 "offload_params = nvme needs \[parallel\] offload_optimizer = nvme" -- \
  "$TRIDENT" train --config "$WORK/d.ini" --parallel.zero_stage=3 --parallel.offload_params=nvme --dry-run 1
expect_exit 0 "offload_params = nvme: [0-9.]+ MiB per rank in .*and the parameter shard" -- \
  "$TRIDENT" train --config "$WORK/d.ini" --dry-run 2 --parallel.zero_stage=3 --parallel.offload_params=nvme "${OFF[@]}"
expect_exit 2 "offload_optimizer = nvme needs \[parallel\] offload_path" -- \
  "$TRIDENT" train --config "$WORK/d.ini" --parallel.offload_optimizer=nvme --dry-run 1
expect_exit 0 "by device: accelerator 0.00 MiB, host [0-9.]+ MiB, nvme 0.00 MiB" -- \
  "$TRIDENT" train --config "$WORK/d.ini" --dry-run 1
expect_exit 0 "offload_optimizer = nvme: [0-9.]+ MiB per rank in $WORK/off/trident-offload.0.bin" -- \
  "$TRIDENT" train --config "$WORK/d.ini" --dry-run 2 --parallel.zero_stage=1 "${OFF[@]}"

# ---- the performance model's offload traffic is the run's -------------------------------------------
# trident plan predicts the bytes a step reads and writes on the offload device from the engine's own
# record plan (perf/step_model.cpp); metrics.csv counts what the run moved. Equal, per rank, in a
# plain step: the run's median step (a step with a save reads the offloaded state again; the step
# after an evaluation may find a unit still gathered and read less).
# (the machine file's own [storage] section, if it has one, is replaced)
{ awk '/^\[/ {skip = ($0 == "[storage]")} !skip' "$SRC/input/machines/devbox-2core-quiet.ini"
  printf '[storage]\nread_gbs = 1\nwrite_gbs = 1\n'; } > "$WORK/m.ini"
traffic_check() {  # traffic_check RUN RANKS ZERO: plan's offload bytes = the run's median step
  local run="$1" n="$2" z="$3"
  "$TRIDENT" plan --config "$run/deck.ini" --machine "$WORK/m.ini" --ranks "$n" --tp 1 --pp 1 --zero-stages "$z" \
    --fixed-micro-batch --fixed-recompute --fixed-schedule --csv "$run.plan.csv" > "$run.plan.txt" 2>&1
  for kind in read write; do
    local want got
    want=$(awk -F, -v c="offload_${kind}_mib" 'NR == 1 {for (i = 1; i <= NF; i++) h[$i] = i} NR == 2 {print $h[c]}' "$run.plan.csv")
    got=$(awk -F, -v c="offload_${kind}_mib" 'NR == 1 {for (i = 1; i <= NF; i++) h[$i] = i; next} {print $h[c]}' \
            "$run/metrics.csv" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
    check "$(basename "$run"): predicted offload $kind ${want:-none} MiB/step = the run's $got" \
      awk -v a="$want" -v b="$got" 'BEGIN {exit !(a > 0 && (a - b) ^ 2 <= (1e-5 * b) ^ 2)}'
  done
}
traffic_check "$WORK/np1_z0.off" 1 0
traffic_check "$WORK/np1_z1_bf16.off" 1 1
traffic_check "$WORK/np2_z3.off" 2 3
traffic_check "$WORK/np2_z3_params.off" 2 3
# The order of the passes decides how often the blocks enter their two slots (perf/step_model.hpp,
# block_slot_fills): 4 layers, 4 micro-batches on one rank, ZeRO-3 with the parameter shard
# offloaded, so every gather is a read the run counts. GPipe (a forward after a forward refills
# every block) reads 30 block units a step, 1F1B 18; both predicted exactly.
for sch in gpipe 1f1b; do
  expect_exit 0 "step +6/6" -- "$TRIDENT" train --config "$WORK/d.ini" --train.out_dir="$WORK/np1_z3_$sch.off" \
    --model.n_layer=4 --train.micro_batch_size=2 --parallel.pp_schedule=$sch "${PAR[@]}"
  traffic_check "$WORK/np1_z3_$sch.off" 1 3
done
check "GPipe reads more parameter records a step than 1F1B" \
  awk -v a="$(col1 "$WORK/np1_z3_gpipe.off" offload_read_mib)" -v b="$(col1 "$WORK/np1_z3_1f1b.off" offload_read_mib)" \
  'BEGIN { exit !(a > b && b > 0) }'

exit "$FAILED"
