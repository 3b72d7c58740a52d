#!/usr/bin/env bash
# Every layer that locks, on a file system that grants no lock (issue 13, items 2 and 7): an
# LD_PRELOAD shim (nolock_shim.c) makes flock, lockf and fcntl record locks fail with ENOLCK, as
# NFS without lockd does. The run lock and MPI-IO's locks are refused at start-up, before any
# step, with advice and exit status 2; with [checkpoint] run_lock = off and file_locking = false
# (or HDF5_USE_FILE_LOCKING=FALSE) the run saves, resumes and verifies without a single lock; on
# NFS (the shim's fake statfs) even that is refused, since ROMIO's NFS driver locks every access.
# `ckpt reshard` probes its output the same way; `trident prep` names HDF5_USE_FILE_LOCKING. And a
# busy run directory is refused with exit status 2 before a checkpoint is verified or loaded.
# Skipped (77) when the shim cannot be built or does not take effect.
set -u
source "$(dirname "$0")/cli_lib.sh"

SHIM="$WORK/nolock_shim.so"
cc -shared -fPIC -o "$SHIM" "$(dirname "$0")/nolock_shim.c" -ldl 2>"$WORK/cc.log" || {
  echo "skipped: cannot build the lock shim: $(head -1 "$WORK/cc.log")"; exit 77; }
if LD_PRELOAD="$SHIM" flock -n "$WORK/shim_check" true 2>/dev/null; then
  echo "skipped: the lock shim does not take effect here"; exit 77
fi
nolocks() { env LD_PRELOAD="$SHIM" NOLOCK_SHIM_LOG="$WORK/locks.log" "$@"; }

make_text "$WORK/text.txt"
"$TRIDENT" prep --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || { echo "prep failed"; exit 1; }
tiny_deck "$WORK/deck.ini" "$WORK/run" "$WORK/tok.h5"

# expect_no_work DIR LOG: the run stopped before training or saving anything.
expect_no_work() {
  check "no step was trained ($1)" bash -c "! grep -Eq '^step +[0-9]+/' '$2'"
  check "no checkpoint or .tmp was written ($1)" \
    test -z "$(find "$1" -name 'step_*' 2>/dev/null)"
}

# ---- the run lock -----------------------------------------------------------------------------
out="$("$MPIEXEC" -n 2 env LD_PRELOAD="$SHIM" "$TRIDENT" train --config "$WORK/deck.ini" 2>&1)"; rc=$?
echo "$out" > "$WORK/a.log"
check "no run lock: exit status 2 (was: a warning, and two jobs ran)" test "$rc" -eq 2
check "no run lock: the message says why and what to do" grep -Eq \
  "cannot lock run directory '$WORK/run': the file system grants no lock \(flock: No locks available; fcntl: No locks available\).*run_lock = off" "$WORK/a.log"
expect_no_work "$WORK/run" "$WORK/a.log"

# ---- MPI-IO's locks (ROMIO's data sieving): refused at start-up, not by MPI_Abort at the first save
out="$("$MPIEXEC" -n 2 env LD_PRELOAD="$SHIM" "$TRIDENT" train --config "$WORK/deck.ini" \
  --checkpoint.run_lock=off 2>&1)"; rc=$?
echo "$out" > "$WORK/b.log"
check "no fcntl locks: exit status 2 at start-up (was: MPI_Abort in the first save, a .tmp left)" test "$rc" -eq 2
check "no fcntl locks: the message names the setting that helps" grep -Eq \
  "refuses fcntl record locks \(No locks available\): MPI-IO would abort the job at the first save.*file_locking = false" "$WORK/b.log"
check "run_lock = off warns loudly" grep -q "warning: \[checkpoint\] run_lock = off: '$WORK/run' is not locked" "$WORK/b.log"
check "no MPI_Abort" bash -c "! grep -q 'MPI_Abort\|ADIOI_GEN_SetLock' '$WORK/b.log'"
expect_no_work "$WORK/run" "$WORK/b.log"

# ---- file_locking = false: saves, an asynchronous save, a resume and verification without locks
: > "$WORK/locks.log"
expect_exit 0 "step +6/6" -- "$MPIEXEC" -n 2 env LD_PRELOAD="$SHIM" NOLOCK_SHIM_LOG="$WORK/locks.log" \
  "$TRIDENT" train --config "$WORK/deck.ini" --checkpoint.run_lock=off --checkpoint.file_locking=false
check "two checkpoints committed, no .tmp left" \
  test -f "$WORK/run/checkpoints/step_00000003.h5" -a -f "$WORK/run/checkpoints/step_00000006.h5" \
  -a -z "$(find "$WORK/run" -name '*.tmp')"
check "MPI-IO asked for no lock: the start-up probe's one fcntl lock is the only one" \
  test "$(grep -c 'fcntl F_SETLKW' "$WORK/locks.log")" -eq 1
# HDF5_USE_FILE_LOCKING=FALSE is taken as file_locking = false, for MPI-IO too.
expect_exit 0 "resumed from .*step_00000006.h5" -- "$MPIEXEC" -n 2 env LD_PRELOAD="$SHIM" HDF5_USE_FILE_LOCKING=FALSE \
  "$TRIDENT" train --config "$WORK/deck.ini" --checkpoint.run_lock=off --checkpoint.async=true --resume \
  --train.max_steps=9 --train.allow_changed=max_steps
expect_exit 0 "step_00000009.h5 .* ok" -- "$MPIEXEC" -n 2 env LD_PRELOAD="$SHIM" "$TRIDENT" ckpt ls --verify "$WORK/run"
expect_exit 0 "" -- "$MPIEXEC" -n 2 env LD_PRELOAD="$SHIM" "$TRIDENT" ckpt verify "$WORK/run/checkpoints/step_00000009.h5"
# ckpt reshard writes through the same save path and probes its output the same way (the deck in
# step 9 has file_locking = true: that run had only the environment variable).
expect_exit 2 "cannot write checkpoints in '$WORK'.*refuses fcntl record locks.*HDF5_USE_FILE_LOCKING=FALSE" -- \
  env LD_PRELOAD="$SHIM" "$TRIDENT" ckpt reshard --dp 1 --output "$WORK/dp1.h5" "$WORK/run/checkpoints/step_00000009.h5"
check "reshard: nothing written" test ! -e "$WORK/dp1.h5" -a ! -e "$WORK/dp1.h5.tmp"
expect_exit 0 "" -- env LD_PRELOAD="$SHIM" HDF5_USE_FILE_LOCKING=FALSE "$TRIDENT" ckpt reshard --dp 1 \
  --output "$WORK/dp1.h5" "$WORK/run/checkpoints/step_00000009.h5"

# ---- NFS without lockd: ROMIO's NFS driver locks every access, whatever the hints -------------
out="$("$MPIEXEC" -n 2 env LD_PRELOAD="$SHIM" NOLOCK_SHIM_NFS=1 "$TRIDENT" train --config "$WORK/deck.ini" \
  --train.out_dir="$WORK/nfs" --checkpoint.run_lock=off --checkpoint.file_locking=false 2>&1)"; rc=$?
echo "$out" > "$WORK/c.log"
check "NFS without locks: exit status 2 at start-up" test "$rc" -eq 2
check "NFS without locks: the message says what helps" \
  grep -Eq "It is NFS, where MPI-IO \(ROMIO's NFS driver\) locks every read and write.*local_lock=all" "$WORK/c.log"
check "NFS without locks: no MPI_Abort" bash -c "! grep -q 'MPI_Abort\|ADIOI_GEN_SetLock' '$WORK/c.log'"
expect_no_work "$WORK/nfs" "$WORK/c.log"

# ---- HDF5's own file locking: files written by one process (trident prep) ----------------------
expect_exit 1 "cannot create token file '$WORK/tok2.h5' as its temporary file '$WORK/\.tok2\.h5\.[A-Za-z0-9]{6}': .*No locks available.*set HDF5_USE_FILE_LOCKING=FALSE" -- \
  env LD_PRELOAD="$SHIM" "$TRIDENT" prep --output "$WORK/tok2.h5" "$WORK/text.txt"
check "prep: the refused create leaves no file, nor its temporary one (a retry would refuse to overwrite it)" \
  test ! -e "$WORK/tok2.h5" -a -z "$(ls -A "$WORK" | grep '^\.tok2\.h5\.')"
expect_exit 0 "" -- env LD_PRELOAD="$SHIM" HDF5_USE_FILE_LOCKING=FALSE "$TRIDENT" prep --force --output "$WORK/tok2.h5" "$WORK/text.txt"

# ---- a busy run directory (item 7): refused before the checkpoint is verified or loaded ----------
"$TRIDENT" train --config "$WORK/deck.ini" --resume --train.max_steps=100000 --train.allow_changed=max_steps --checkpoint.interval=0 \
  >"$WORK/holder.log" 2>&1 &
holder=$!
for _ in $(seq 100); do grep -q "pid $holder" "$WORK/run/.trident.lock" 2>/dev/null && break; sleep 0.2; done
out="$("$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/deck.ini" --resume 2>&1)"; rc=$?
echo "$out" > "$WORK/d.log"
check "busy out_dir: usage exit status 2 (was 1)" test "$rc" -eq 2
check "busy out_dir: the holder is named" \
  grep -Eq "run directory '$WORK/run' is in use by another Trident job \(host .* pid $holder\)" "$WORK/d.log"
check "busy out_dir: refused before verifying or loading the checkpoint" \
  bash -c "! grep -Eiq 'resumed from|verif|skipping|model:' '$WORK/d.log'"
# run_lock = off goes without a lock only where the file system grants none: here it grants one,
# and the holder is still respected (was: the second job ran into the live run's directory).
expect_exit 2 "run directory '$WORK/run' is in use by another Trident job \(host .* pid $holder\)" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --resume --checkpoint.run_lock=off
kill -9 "$holder" 2>/dev/null; wait "$holder" 2>/dev/null

echo "$FAILED failed"
exit "$FAILED"
