#!/usr/bin/env bash
# Checkpoints that survive anything, at 2 ranks:
#  0. asynchronous saves write bitwise what synchronous ones write, and training is unchanged;
#  1. a rank killed (SIGKILL, fault injection) at each point of the save and commit sequence, for
#     the 1st, 2nd or 3rd save, with synchronous and asynchronous saves and at ZeRO-3: every trial
#     resumes from the newest complete checkpoint and ends bitwise equal to an uninterrupted run;
#  2. a file-size limit (ulimit -f: writes fail with EFBIG like a full disk) during saves: every
#     rank reports it, the run stops (on_error = stop) or goes on (continue), nothing hangs, and the
#     previous checkpoint stays intact;
#  3. a corrupted dataset, a truncated file and a missing `latest` target in the newest
#     checkpoint: the resume falls back to the previous complete one, saying so;
#  4. a resume from an older checkpoint branches off: later checkpoints are moved aside;
#  5. a stop signal to one rank: all stop at one step with a checkpoint and exit 3.
set -u
source "$(dirname "$0")/cli_lib.sh"
PY=/usr/bin/python3

make_text "$WORK/text.txt"
"$TRIDENT" prep --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || { echo "prep failed"; exit 1; }
deck() {  # deck FILE OUT_DIR
  tiny_deck "$1" "$2" "$WORK/tok.h5"
  sed -i 's/^max_steps = 6/max_steps = 8/; s/^interval = 3/interval = 2/; s/^keep = 5/keep = 2/; s/^eval_interval = 3/eval_interval = 0/' "$1"
}
run() { timeout -k 10 120 "$MPIEXEC" -n 2 "$TRIDENT" train "$@"; }
same_as_reference() {  # same_as_reference DIR: losses and final state bitwise equal to the reference run
  cmp -s <(cut -d, -f1-5 "$WORK/ref/metrics.csv") <(cut -d, -f1-5 "$1/metrics.csv") &&
    "$TRIDENT" ckpt diff "$WORK/ref/checkpoints/step_00000008.h5" "$1/checkpoints/step_00000008.h5" >/dev/null
}

deck "$WORK/ref.ini" "$WORK/ref"
run --config "$WORK/ref.ini" >/dev/null 2>&1 || { echo "reference run failed"; exit 1; }
deck "$WORK/ref3.ini" "$WORK/ref3"
run --config "$WORK/ref3.ini" --parallel.zero_stage=3 >/dev/null 2>&1 || { echo "reference ZeRO-3 run failed"; exit 1; }

# ---- 0. an asynchronous save writes what a synchronous one writes ---------------------------------
# The background writer works on a host snapshot taken at the step boundary while training goes
# on: its checkpoints and the run's losses must be bitwise those of the synchronous reference.
deck "$WORK/async.ini" "$WORK/async"
expect_exit 0 "written in the background" -- run --config "$WORK/async.ini" --checkpoint.async=true
check "async: losses bitwise equal to synchronous saves" \
  cmp -s <(cut -d, -f1-5 "$WORK/ref/metrics.csv") <(cut -d, -f1-5 "$WORK/async/metrics.csv")
for st in 6 8; do
  expect_exit 0 "identical: " -- "$TRIDENT" ckpt diff "$WORK/ref/checkpoints/step_0000000$st.h5" \
    "$WORK/async/checkpoints/step_0000000$st.h5"
done

# ---- 1. kill a rank inside a save ----------------------------------------------------------------
trial=0
kill_trial() {  # kill_trial POINT VISIT RANK EXTRA_ARGS...
  local point=$1 visit=$2 rank=$3; shift 3
  trial=$((trial + 1))
  local dir="$WORK/t$trial" ref="$WORK/ref" out rc
  for a in "$@"; do [ "$a" = "--parallel.zero_stage=3" ] && ref="$WORK/ref3"; done
  deck "$WORK/t$trial.ini" "$dir"
  out="$(TRIDENT_FAULT="$point:$visit" TRIDENT_FAULT_RANK="$rank" run --config "$WORK/t$trial.ini" "$@" 2>&1)"; rc=$?
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
    echo "FAIL trial $trial ($point:$visit rank $rank $*): the injected kill did not end the run (exit $rc)"
    FAILED=$((FAILED + 1)); return
  fi
  out="$(run --config "$WORK/t$trial.ini" "$@" --resume 2>&1)"; rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "FAIL trial $trial ($point:$visit): resume exited $rc"; echo "$out" | tail -3 | sed 's/^/    /'
    FAILED=$((FAILED + 1)); return
  fi
  local from; from="$(grep -o 'resumed from [^ ]*' <<<"$out" | sed 's|.*/||')"
  if cmp -s <(cut -d, -f1-5 "$ref/metrics.csv") <(cut -d, -f1-5 "$dir/metrics.csv") &&
     "$TRIDENT" ckpt diff "$ref/checkpoints/step_00000008.h5" "$dir/checkpoints/step_00000008.h5" >/dev/null; then
    echo "ok   trial $trial: killed rank $rank at $point:$visit $*; resumed from ${from:-scratch}; bitwise equal"
  else
    echo "FAIL trial $trial ($point:$visit $*): not equal to the uninterrupted run"; FAILED=$((FAILED + 1))
  fi
}
for point in ckpt.begin ckpt.created ckpt.written ckpt.closed; do
  for visit in 1 2 3; do kill_trial "$point" "$visit" $((visit % 2)); done
done
for point in commit.synced commit.renamed commit.latest; do
  for visit in 1 3; do kill_trial "$point" "$visit" 0; done
done
kill_trial commit.rotating 1 0
kill_trial ckpt.written 2 1 --checkpoint.async=true
kill_trial commit.renamed 2 0 --checkpoint.async=true
kill_trial ckpt.created 2 0 --parallel.zero_stage=3
kill_trial commit.latest 3 0 --parallel.zero_stage=3 --checkpoint.async=true
check "at least 20 kill trials ran" test "$trial" -ge 20

# ---- 2. the disk fills up during a save (a tmpfs holding 1.6 checkpoints) -------------------------
# The save at step 2 fits; the one at step 4 runs out of space (ENOSPC) while step 2 is still there.
if [ "$(id -u)" -eq 0 ] && mkdir -p "$WORK/full/checkpoints" &&
   mount -t tmpfs -o size=$(( $(stat -c %s "$WORK/ref/checkpoints/step_00000008.h5") * 16 / 10 / 1024 ))k tmpfs \
     "$WORK/full/checkpoints" 2>/dev/null; then
  trap 'umount "$WORK/full/checkpoints" 2>/dev/null; rm -rf "$WORK"' EXIT
  deck "$WORK/full.ini" "$WORK/full"
  expect_exit 1 "checkpoint .*(No space left on device|not written)" -- run --config "$WORK/full.ini"
  check "the previous checkpoint verifies after the failed save" "$TRIDENT" ckpt verify "$WORK/full/checkpoints/step_00000002.h5"
  check "latest still names the last good checkpoint" grep -qx "step_00000002.h5" "$WORK/full/checkpoints/latest"
  check "no half-written file is left" test -z "$(ls "$WORK/full/checkpoints" | grep tmp)"
  # The saves of steps 4, 6 and 8 fail; training goes on to the end, but a run whose final
  # checkpoint failed exits 1 (a job script must not take it for a clean end).
  expect_exit 1 "the checkpoint of step 8 \(end of run\) failed; the last good checkpoint is .*step_00000002.h5" -- \
    run --config "$WORK/full.ini" --resume --checkpoint.on_error=continue
  check "on_error = continue trained to the end" grep -q "^8," "$WORK/full/metrics.csv"
  check "the last good checkpoint still verifies" "$TRIDENT" ckpt verify "$WORK/full/checkpoints/step_00000002.h5"
  umount "$WORK/full/checkpoints"
else
  echo "skip disk-full checks: mounting a small tmpfs needs root"
fi

# ---- 3. damaged newest checkpoints: fall back to the previous complete one -------------------------
deck "$WORK/dmg.ini" "$WORK/dmg"
sed -i 's/^keep = 2/keep = 10/' "$WORK/dmg.ini"
run --config "$WORK/dmg.ini" >/dev/null 2>&1
corrupt_dataset "$WORK/dmg/checkpoints/step_00000008.h5" shards/exp_avg/pp0_dp1_tp0
expect_exit 0 "step_00000008.h5 is incomplete or damaged \(.*fails its checksum.*\); trying an older one" -- \
  run --config "$WORK/dmg.ini" --resume
check "after a corrupted dataset: bitwise equal to the uninterrupted run" same_as_reference "$WORK/dmg"
head -c 20000 "$WORK/dmg/checkpoints/step_00000008.h5" > "$WORK/short.h5" && mv "$WORK/short.h5" "$WORK/dmg/checkpoints/step_00000008.h5"
expect_exit 0 "step_00000008.h5 is incomplete or damaged" -- run --config "$WORK/dmg.ini" --resume
check "after a truncated file: bitwise equal to the uninterrupted run" same_as_reference "$WORK/dmg"
echo "step_00000099.h5" > "$WORK/dmg/checkpoints/latest"
rm -f "$WORK/dmg/checkpoints/step_00000008.h5"
expect_exit 0 "resumed from .*step_00000006.h5" -- run --config "$WORK/dmg.ini" --resume
check "after a dangling latest: bitwise equal to the uninterrupted run" same_as_reference "$WORK/dmg"
expect_exit 1 "is damaged" -- bash -c "cp '$WORK/dmg/checkpoints/step_00000006.h5' '$WORK/bad.h5' && \
  printf 'ZZZZZZZZ' | dd of='$WORK/bad.h5' bs=1 seek=\$(( \$(stat -c %s '$WORK/bad.h5') - 4096 )) conv=notrunc 2>/dev/null; \
  timeout -k 10 120 '$MPIEXEC' -n 2 '$TRIDENT' train --config '$WORK/dmg.ini' --resume '$WORK/bad.h5'"
# Every checkpoint damaged: --resume stops (exit 1) and changes nothing, rather than starting again
# from step 0 and moving the checkpoints and their metrics aside.
mkdir -p "$WORK/alldmg" && cp -r "$WORK/ref/checkpoints" "$WORK/ref/metrics.csv" "$WORK/alldmg/"
for f in "$WORK/alldmg/checkpoints"/step_*.h5; do truncate -s 1000 "$f"; done
tree_sum() { (cd "$1" && find . -type f ! -name .trident.lock | sort | xargs sha256sum | sha256sum); }
sum_before="$(tree_sum "$WORK/alldmg")"
expect_exit 1 "resume: all [0-9]+ checkpoint\(s\) in .*alldmg/checkpoints are incomplete or damaged .*nothing was changed" -- \
  run --config "$WORK/dmg.ini" --train.out_dir="$WORK/alldmg" --resume
check "all damaged: the run directory is unchanged (no file moved, written or removed)" \
  test "$(tree_sum "$WORK/alldmg")" = "$sum_before"

# ---- 4. a run resumed from an older checkpoint branches off -----------------------------------
# Resuming from step 6 of a run that reached step 8 starts a new branch: its first save moves the
# old step 8 aside (superseded/), so a later plain --resume continues the branch, not the old run.
deck "$WORK/br.ini" "$WORK/br"
sed -i 's/^keep = 2/keep = 10/' "$WORK/br.ini"
mkdir -p "$WORK/br" && cp -r "$WORK/ref/checkpoints" "$WORK/ref/metrics.csv" "$WORK/br/"
expect_exit 0 "branched from an older checkpoint: moved 1 checkpoint\(s\) of step 7 and later \(step_00000008.h5\) to .*superseded/before_step_7/" -- \
  run --config "$WORK/br.ini" --resume "$WORK/br/checkpoints/step_00000006.h5" --checkpoint.interval=1 --train.stop_at_step=7
check "branch: the old step 8 is kept aside" test -f "$WORK/br/checkpoints/superseded/before_step_7/step_00000008.h5"
check "branch: latest names the branch's step 7" grep -qx "step_00000007.h5" "$WORK/br/checkpoints/latest"
expect_exit 0 "resumed from .*step_00000007.h5" -- run --config "$WORK/br.ini" --resume
check "branch: continued bitwise equal to the uninterrupted run" same_as_reference "$WORK/br"
check "branch: the abandoned branch's metrics rows are kept aside" grep -q "^8," "$WORK/br/metrics.superseded.csv"
# Branching again at the same step never replaces what an earlier branch set aside.
before="$(md5sum < "$WORK/br/checkpoints/superseded/before_step_7/step_00000008.h5")"
expect_exit 0 "moved 2 checkpoint\(s\) of step 7 and later \(step_00000007.h5, step_00000008.h5\) to .*before_step_7.1/" -- \
  run --config "$WORK/br.ini" --resume "$WORK/br/checkpoints/step_00000006.h5" --checkpoint.interval=1 --train.stop_at_step=7
check "branch: what an earlier branch set aside is untouched" \
  test "$(md5sum < "$WORK/br/checkpoints/superseded/before_step_7/step_00000008.h5")" = "$before"
# Where the checkpoints cannot be moved aside the save fails (on_error = stop): nothing is deleted.
rm -rf "$WORK/br/checkpoints/superseded" && echo x > "$WORK/br/checkpoints/superseded"
expect_exit 1 "cannot create .*superseded/before_step_7" -- \
  run --config "$WORK/br.ini" --resume "$WORK/br/checkpoints/step_00000006.h5" --checkpoint.interval=1 --train.stop_at_step=7
check "branch: a failed move aside deletes nothing" \
  test -f "$WORK/br/checkpoints/step_00000006.h5" -a -f "$WORK/br/checkpoints/step_00000007.h5" -a ! -e "$WORK/br/checkpoints/step_00000007.h5.tmp"

# A rank killed in the branch's first save: the branch left no checkpoint, so a plain --resume
# takes the old line's newest one, and metrics.csv follows it (lineage), not the dead branch.
deck "$WORK/kb.ini" "$WORK/kb"
sed -i 's/^keep = 2/keep = 10/' "$WORK/kb.ini"
mkdir -p "$WORK/kb" && cp -r "$WORK/ref/checkpoints" "$WORK/ref/metrics.csv" "$WORK/kb/"
TRIDENT_FAULT=ckpt.written:1 TRIDENT_FAULT_RANK=1 run --config "$WORK/kb.ini" --resume "$WORK/kb/checkpoints/step_00000006.h5" \
  --checkpoint.interval=1 --train.lr=0.01 --train.allow_changed=train.lr >/dev/null 2>&1
# Its own row: the same step as the reference's row 7, with the branch's learning rate (column 4).
check "lineage: the dead branch wrote a row of step 7" \
  test "$(awk -F, '$1 == 7 { print $4 }' "$WORK/kb/metrics.csv")" != "$(awk -F, '$1 == 7 { print $4 }' "$WORK/ref/metrics.csv")"
expect_exit 0 "the run is already complete: step 8" -- run --config "$WORK/kb.ini" --resume
check "lineage: metrics.csv is the old line's history again" \
  cmp -s <(cut -d, -f1-5 "$WORK/ref/metrics.csv") <(cut -d, -f1-5 "$WORK/kb/metrics.csv")
check "lineage: the dead branch's row is kept aside" grep -q "^7," "$WORK/kb/metrics.superseded.csv"

# A run killed in its very first save leaves rows but no checkpoint: the next --resume starts at
# step 0 and sets those rows aside instead of deleting them.
deck "$WORK/k0.ini" "$WORK/k0"
TRIDENT_FAULT=ckpt.written:1 TRIDENT_FAULT_RANK=1 run --config "$WORK/k0.ini" >/dev/null 2>&1
expect_exit 0 "step +8/8" -- run --config "$WORK/k0.ini" --resume
check "lineage: rows of a run that never saved are kept aside" grep -q "^2," "$WORK/k0/metrics.superseded.csv"
check "lineage: the restarted run's metrics equal the reference" \
  cmp -s <(cut -d, -f1-5 "$WORK/ref/metrics.csv") <(cut -d, -f1-5 "$WORK/k0/metrics.csv")

# ---- 5. a stop signal always writes a checkpoint ------------------------------------------------
# SIGUSR1 to one rank: every rank stops after the same step with a checkpoint of it and exits 3,
# also with [checkpoint] save_final = false (exit 3 promises a checkpoint to resume from).
deck "$WORK/sig.ini" "$WORK/sig"
sed -i 's/^max_steps = 8/max_steps = 100000/; s/^interval = 2/interval = 0/; s/^log_interval = 1/log_interval = 1000/' "$WORK/sig.ini"
timeout -k 10 120 "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/sig.ini" --checkpoint.save_final=false \
  > "$WORK/sig.out" 2>&1 & job=$!
for _ in $(seq 300); do
  [ "$(wc -l < "$WORK/sig/metrics.csv" 2>/dev/null || echo 0)" -gt 20 ] && break
  sleep 0.2
done
rank_pid="$(pgrep -f "^$TRIDENT train --config $WORK/sig.ini" | head -n 1)"
if [ -n "$rank_pid" ]; then kill -USR1 "$rank_pid"; fi
wait "$job"; rc=$?
check "signal: exit status 3" test "$rc" -eq 3
stopped="$(sed -n 's/.*stopping after step \([0-9]*\) on SIGUSR1.*/\1/p' "$WORK/sig.out")"
check "signal: a checkpoint of the step it stopped at, despite save_final = false" \
  test -n "$stopped" -a -f "$WORK/sig/checkpoints/$(printf 'step_%08d.h5' "${stopped:-0}")"
check "signal: latest names it" grep -qx "$(printf 'step_%08d.h5' "${stopped:-0}")" "$WORK/sig/checkpoints/latest"
[ "$rc" -eq 3 ] || tail -5 "$WORK/sig.out"

echo "$FAILED failed"
exit "$FAILED"
