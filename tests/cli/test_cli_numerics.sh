#!/usr/bin/env bash
# The numerics policy end to end at 2 ranks (docs/numerics.md), with NaNs and spikes injected
# through TRIDENT_POISON (core/fault.hpp):
#  - a non-finite loss or gradient on ONE rank makes every rank skip ([train] nonfinite = skip):
#    the result is bitwise the run poisoned on every rank (without the agreement, rank 0 would
#    update and its replica would differ); the skipped step leaves parameters and moments
#    untouched, advances step, data position and LR schedule, and is counted in metrics.csv;
#  - nonfinite = stop on one rank: every rank exits 1 (no hang), nothing past the last good step saved;
#  - max_consecutive_skips: exit 1 at the limit, every committed checkpoint finite and verified;
#  - resume: skip counters and the spike window restored, so loss_z and the state are bitwise
#    those of the uninterrupted run;
#  - spike rollback: the last checkpoint reloaded, the batches up to the spike skipped (exact
#    sample indices), metrics rows of the abandoned steps set aside; the rollback budget.
set -u
source "$(dirname "$0")/cli_lib.sh"

make_text "$WORK/text.txt"
"$TRIDENT" prep --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || { echo "prep failed"; exit 1; }
tiny_deck "$WORK/deck.ini" "$WORK/unused" "$WORK/tok.h5"
# run2 ARGS: train the tiny deck on 2 ranks; poisoned KIND:STEPS RANK run2 ARGS: with TRIDENT_POISON
# (RANK -1: every rank).
run2() {
  timeout 300 "$MPIEXEC" -n 2 env TRIDENT_POISON="${POISON:-}" TRIDENT_POISON_RANK="${POISON_RANK:--1}" \
    "$TRIDENT" train --config "$WORK/deck.ini" "$@"
}
poisoned() { local p="$1" r="$2"; shift 2; POISON="$p" POISON_RANK="$r" "$@"; }
SHARDS="pp0_dp0_tp0 pp0_dp1_tp0"
same_state() {  # same_state A B: every shard of parameters and moments bitwise equal
  local kind shard
  for kind in param exp_avg exp_avg_sq; do
    for shard in $SHARDS; do h5diff -q "$1" "$2" "/shards/$kind/$shard" || return 1; done
  done
}
attr() { /usr/bin/python3 -c "import h5py,sys; print(h5py.File(sys.argv[1],'r').attrs[sys.argv[2]])" "$1" "$2"; }
ck() { printf '%s/checkpoints/step_%08d.h5' "$1" "$2"; }
# metrics.csv columns that are deterministic: step, losses, lr, grad norm, skipped, skipped_steps, loss_z.
det_cols() { cut -d, -f1-5,20-22 "$1"; }

# ---- options, help and bad values ---------------------------------------------------------------
expect_exit 0 "nonfinite = stop .*max_consecutive_skips = 5.*spike_window = 128.*spike_rollback = false" -- \
  bash -c "'$TRIDENT' train --help | tr '\n' ' '"
expect_exit 2 "\[train\] nonfinite = maybe: expected stop or skip" -- run2 --train.nonfinite=maybe
expect_exit 2 "\[train\] max_consecutive_skips = 0 must be >= 1" -- run2 --train.max_consecutive_skips=0
expect_exit 2 "spike_window = 1 must be 0 \(off\) or >= 2" -- run2 --train.spike_window=1
expect_exit 2 "spike_rollback = true needs checkpoints to roll back to" -- \
  run2 --train.spike_rollback=true --checkpoint.interval=0
expect_exit 2 "spike_rollback = true needs the spike detector" -- run2 --train.spike_rollback=true --train.spike_window=0

# ---- skip: agreement across ranks, what a skipped step changes -------------------------------------
common=(--train.nonfinite=skip --checkpoint.interval=1 --checkpoint.keep=10 --data.sample_log=true)
expect_exit 0 "step 3: non-finite loss or gradient norm \(first seen on world rank 1\): update skipped" -- \
  poisoned loss:3 1 run2 "${common[@]}" --train.out_dir="$WORK/loss1"
expect_exit 0 "first seen on world rank 1\): update skipped" -- \
  poisoned grad:3 1 run2 "${common[@]}" --train.out_dir="$WORK/grad1"
expect_exit 0 "first seen on world rank 0\): update skipped" -- \
  poisoned loss:3 -1 run2 "${common[@]}" --train.out_dir="$WORK/all"
expect_exit 0 "step +6/6" -- run2 "${common[@]}" --train.out_dir="$WORK/clean"
check "a NaN loss on rank 1 only: every rank skipped (state bitwise that of a NaN on every rank)" \
  same_state "$(ck "$WORK/loss1" 6)" "$(ck "$WORK/all" 6)"
check "a NaN gradient on rank 1 only: the same" same_state "$(ck "$WORK/grad1" 6)" "$(ck "$WORK/all" 6)"
check "the skipped step changed no parameter or moment" same_state "$(ck "$WORK/loss1" 2)" "$(ck "$WORK/loss1" 3)"
check "a step that is not skipped changes them" bash -c "! h5diff -q '$(ck "$WORK/loss1" 3)' '$(ck "$WORK/loss1" 4)' /shards/param/pp0_dp0_tp0"
check "the clean run differs (the poison did something)" \
  bash -c "! h5diff -q '$(ck "$WORK/clean" 6)' '$(ck "$WORK/loss1" 6)' /shards/param/pp0_dp0_tp0"
check "a skipped step advances the data position (samples.csv equals the clean run's)" \
  cmp -s "$WORK/clean/samples.csv" "$WORK/loss1/samples.csv"
check "consumed_samples advances on a skipped step" test "$(attr "$(ck "$WORK/loss1" 3)" consumed_samples)" = 24
check "AdamW's step count does not" test "$(attr "$(ck "$WORK/loss1" 3)" adam_step)" = 2
check "the LR schedule advances (lr column equals the clean run's)" \
  cmp -s <(cut -d, -f1,4 "$WORK/clean/metrics.csv") <(cut -d, -f1,4 "$WORK/loss1/metrics.csv")
check "metrics.csv marks step 3 skipped and counts it" \
  bash -c "awk -F, '\$1 == 3 && \$20 == 1 && \$21 == 1 {ok=1} \$1 == 6 && \$20 == 0 && \$21 == 1 {ok2=1} END {exit !(ok && ok2)}' '$WORK/loss1/metrics.csv'"
check "metrics.csv has the numerics columns" grep -q ",bubble,leg,mem_checkpoint,skipped,skipped_steps,loss_z,loss_scale,overflow_steps,t_step," "$WORK/loss1/metrics.csv"
check "checkpoints count the skipped steps" test "$(attr "$(ck "$WORK/loss1" 6)" skipped_steps)" = 1

# ---- stop (the default): one rank's NaN stops every rank -----------------------------------------
expect_exit 1 "training diverged at step 3: the loss or gradient norm is not finite \(first seen on world rank 1" -- \
  poisoned loss:3 1 run2 --checkpoint.interval=1 --train.out_dir="$WORK/stop"
check "stop saved nothing past the last good step" \
  bash -c "test -f '$(ck "$WORK/stop" 2)' && ! ls '$WORK/stop/checkpoints/' | grep -q step_00000003"

# ---- consecutive skips stop the run; no non-finite value is ever committed ----------------------------
expect_exit 1 "stopping at step 5: 3 steps in a row had a non-finite loss or gradient norm \(\[train\] max_consecutive_skips = 3" -- \
  poisoned grad:3-5 -1 run2 "${common[@]}" --train.max_consecutive_skips=3 --train.out_dir="$WORK/consec"
check "the skipped steps 3-4 were saved, step 5 was not" \
  bash -c "test -f '$(ck "$WORK/consec" 4)' && test ! -f '$(ck "$WORK/consec" 5)'"
check "the saved skipped steps hold the last good state" same_state "$(ck "$WORK/consec" 2)" "$(ck "$WORK/consec" 4)"
check "no committed checkpoint holds a non-finite value" /usr/bin/python3 - "$WORK/consec/checkpoints" <<'PYEOF'
import glob, sys, h5py, numpy as np
paths = glob.glob(sys.argv[1] + "/step_*.h5")
assert len(paths) == 4, paths
for path in paths:
    with h5py.File(path, "r") as f:
        for kind in f["shards"]:
            for shard in f["shards"][kind]:
                assert np.isfinite(f["shards"][kind][shard][...]).all(), (path, kind, shard)
PYEOF
expect_exit 0 "OK|ok|intact" -- "$TRIDENT" ckpt verify "$(ck "$WORK/consec" 4)"

# ---- resume: skip counters and the spike window come back bitwise ----------------------------------
res=(--train.nonfinite=skip --train.max_steps=9 --train.spike_window=3 --checkpoint.interval=0)
expect_exit 0 "step +9/9" -- poisoned grad:2 -1 run2 "${res[@]}" --train.out_dir="$WORK/u"
expect_exit 0 "stopping after step 4" -- poisoned grad:2 -1 run2 "${res[@]}" --train.out_dir="$WORK/r" \
  --train.stop_at_step=4
expect_exit 0 "resumed from .*step_00000004.h5" -- run2 "${res[@]}" --train.out_dir="$WORK/r" --resume
check "the window was full before the stop (loss_z at step 5 of the uninterrupted run)" \
  bash -c "awk -F, '\$1 == 5 && \$22 != \"\" {ok=1} END {exit !ok}' '$WORK/u/metrics.csv'"
check "resumed losses, skip counts and loss z-scores equal the uninterrupted run" \
  cmp -s <(det_cols "$WORK/u/metrics.csv") <(det_cols "$WORK/r/metrics.csv")
check "resumed state bitwise equal" same_state "$(ck "$WORK/u" 9)" "$(ck "$WORK/r" 9)"
check "the window is in the checkpoint" /usr/bin/python3 -c "
import h5py, sys; w = h5py.File(sys.argv[1], 'r')['train_state/loss_window'][...]; assert len(w) == 3, w" "$(ck "$WORK/r" 4)"

# ---- spike rollback ------------------------------------------------------------------------------
spk=(--train.max_steps=8 --checkpoint.interval=2 --checkpoint.keep=10 --train.spike_window=4 --train.spike_zscore=100
     --train.spike_rollback=true --data.sample_log=true)
expect_exit 0 "rolled back to .*step_00000004.h5 \(step 4\); the data of steps 5-6 is skipped" -- \
  poisoned spike:6:once -1 run2 "${spk[@]}" --train.out_dir="$WORK/spike"
s="$WORK/spike"
check "metrics.csv holds steps 1-8 once each" test "$(cut -d, -f1 "$s/metrics.csv" | tail -n +2 | tr '\n' ' ')" = "1 2 3 4 5 6 7 8 "
check "the abandoned steps 5-6 (the spike's z > 100 among them) are in metrics.superseded.csv" \
  bash -c "awk -F, 'NR > 1 && \$1 == 6 && \$22 > 100 {ok=1} END {exit !ok}' '$s/metrics.superseded.csv' && \
           test \"\$(cut -d, -f1 '$s/metrics.superseded.csv' | tail -n +2 | tr '\n' ' ')\" = '5 6 '"
check "after the rollback, step 5 trains on samples 48-55 (the batches of steps 5-6 skipped)" \
  test "$(awk -F, '$1 == 5 {print $2}' "$s/samples.csv" | tr '\n' ' ')" = "48 49 50 51 52 53 54 55 "
check "the abandoned attempt's samples are kept aside" \
  test "$(awk -F, '$1 == 5 {print $2}' "$s/samples.superseded.csv" | tr '\n' ' ')" = "32 33 34 35 36 37 38 39 "
check "the final checkpoint's data position is 2 batches ahead of its step" \
  test "$(attr "$(ck "$s" 8)" consumed_samples)" = 80
check "the final checkpoint's lineage has the leg that rolled back (from step 4)" /usr/bin/python3 -c "
import h5py, sys
v = h5py.File(sys.argv[1], 'r').attrs['lineage']
v = v.decode() if isinstance(v, bytes) else str(v)
legs = v.split(';')
assert len(legs) == 2 and legs[1].endswith('@4'), v" "$(ck "$s" 8)"
check "an unpoisoned run to step 4 (the oracle for the checkpoint rolled back to)" \
  bash -c "env TRIDENT_POISON= timeout 300 '$MPIEXEC' -n 2 '$TRIDENT' train --config '$WORK/deck.ini' ${spk[*]} \
           --train.out_dir='$WORK/nospike' --train.stop_at_step=4 >/dev/null 2>&1"
check "the checkpoint rolled back to is left as the uninterrupted run wrote it" same_state "$(ck "$s" 4)" "$(ck "$WORK/nospike" 4)"
expect_exit 1 "stopping at step 6: a loss spike again after 2 rollbacks to the checkpoint of step 4 \(\[train\] spike_max_rollbacks = 2" -- \
  poisoned spike:6 -1 run2 "${spk[@]}" --train.spike_max_rollbacks=2 --train.out_dir="$WORK/spike2"
check "nothing past the checkpoint rolled back to was saved" test ! -f "$(ck "$WORK/spike2" 6)"
expect_exit 0 "loss spike: loss .* standard deviations above the mean of the last 4 losses \(\[train\] spike_zscore = 100\)$" -- \
  poisoned spike:6 -1 run2 "${spk[@]}" --train.spike_rollback=false --train.out_dir="$WORK/warn"
check "without rollback the spike is only reported (metrics.csv has 8 rows)" \
  test "$(tail -n +2 "$WORK/warn/metrics.csv" | wc -l)" -eq 8
# Rollback before the first checkpoint (interval 6, a spike at step 5): reported, training goes on.
expect_exit 0 "step 5: loss spike: .*: no checkpoint to roll back to yet" -- \
  poisoned spike:5 -1 run2 "${spk[@]}" --checkpoint.interval=6 --train.out_dir="$WORK/early"
check "... nothing rolled back (8 rows, no superseded rows), step 6 saved" \
  test "$(tail -n +2 "$WORK/early/metrics.csv" | wc -l)" -eq 8 -a ! -e "$WORK/early/metrics.superseded.csv" \
  -a -f "$(ck "$WORK/early" 6)"

exit "$FAILED"
