#!/usr/bin/env bash
# The main job end to end at 2 ranks: prep, train, checkpoints, exact resume after stop_at_step
# (losses and every shard of parameters and AdamW moments bitwise equal to an uninterrupted run,
# compared with h5diff), time_limit_min, resuming at another dp size, sampling, and the sample
# order of a resume in the middle of an epoch ([data] sample_log).
set -u
source "$(dirname "$0")/cli_lib.sh"

make_text "$WORK/text.txt"
"$TRIDENT" prep --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || { echo "prep failed"; exit 1; }
tiny_deck "$WORK/a.ini" "$WORK/a" "$WORK/tok.h5"
tiny_deck "$WORK/b.ini" "$WORK/b" "$WORK/tok.h5"

expect_exit 0 "step +6/6 .*loss" -- "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/a.ini"
expect_exit 0 "stopping after step 3 as \[train\] stop_at_step asks" -- \
  "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/b.ini" --train.stop_at_step=3
expect_exit 0 "nothing to do: the run is at step 3 and \[train\] stop_at_step = 3" -- \
  "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/b.ini" --train.stop_at_step=3 --resume
check "a stop_at_step already reached trains no step" test ! -f "$WORK/b/checkpoints/step_00000004.h5"
expect_exit 0 "resumed from .*step_00000003.h5 at step 3" -- \
  "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/b.ini" --resume

check "metrics.csv has the documented columns" \
  grep -q "^step,train_loss,val_loss,lr,grad_norm,tokens_per_sec" "$WORK/a/metrics.csv"
check "metrics.csv has one row per step" test "$(tail -n +2 "$WORK/b/metrics.csv" | wc -l)" -eq 6
# Columns 1-5 (step, losses, lr, grad norm) are deterministic; timings are not.
check "resumed losses equal the uninterrupted run" \
  cmp -s <(cut -d, -f1-5 "$WORK/a/metrics.csv") <(cut -d, -f1-5 "$WORK/b/metrics.csv")
for kind in param exp_avg exp_avg_sq; do
  for shard in pp0_dp0_tp0 pp0_dp1_tp0; do
    check "$kind/$shard bitwise equal after resume" h5diff -q "$WORK/a/checkpoints/step_00000006.h5" \
      "$WORK/b/checkpoints/step_00000006.h5" "/shards/$kind/$shard"
  done
done
check "latest names the final checkpoint" grep -qx "step_00000006.h5" "$WORK/b/checkpoints/latest"

expect_exit 0 "already complete" -- "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/a.ini" --resume
expect_exit 0 "resumed from .*step_00000006.h5 at step 6" -- \
  "$TRIDENT" train --config "$WORK/a.ini" --train.max_steps=8 --train.allow_changed=max_steps --resume
check "dp=2 checkpoint continued at dp=1 to step 8" test -f "$WORK/a/checkpoints/step_00000008.h5"

# ZeRO-3 with bf16 working params and recomputation: the same CLI contract, bitwise resume.
expect_exit 0 "ZeRO stage 3, bf16 params, recompute" -- "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/a.ini" \
  --train.out_dir="$WORK/z" --parallel.zero_stage=3 --train.param_dtype=bf16 --train.activation_checkpointing=block
expect_exit 0 "stopping after step 3" -- "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/a.ini" \
  --train.out_dir="$WORK/z2" --parallel.zero_stage=3 --train.param_dtype=bf16 --train.activation_checkpointing=block \
  --train.stop_at_step=3
expect_exit 0 "resumed from .*step_00000003.h5" -- "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/a.ini" \
  --train.out_dir="$WORK/z2" --parallel.zero_stage=3 --train.param_dtype=bf16 --train.activation_checkpointing=block \
  --resume
check "ZeRO-3 resumed losses equal the uninterrupted run" \
  cmp -s <(cut -d, -f1-5 "$WORK/z/metrics.csv") <(cut -d, -f1-5 "$WORK/z2/metrics.csv")
check "metrics.csv reports memory by category and communication" \
  grep -q "mem_params,mem_grads,mem_optimizer,mem_gathered,mem_activations,mem_comm,comm_mib" "$WORK/z/metrics.csv"

tiny_deck "$WORK/c.ini" "$WORK/c" "$WORK/tok.h5"
expect_exit 0 "time_limit_min = 0.0001 is near" -- \
  "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/c.ini" --train.time_limit_min=0.0001
check "time limit wrote a checkpoint" test -f "$WORK/c/checkpoints/step_00000001.h5"

expect_exit 0 "." -- "$TRIDENT" sample --checkpoint "$WORK/a" --prompt "int " --tokens 40 --seed 3
s1="$("$TRIDENT" sample --checkpoint "$WORK/a" --prompt "int " --tokens 40 --seed 3 2>&1)"
s2="$("$TRIDENT" sample --checkpoint "$WORK/a/checkpoints/step_00000008.h5" --prompt "int " --tokens 40 --seed 3 2>&1)"
check "sampling is reproducible for a seed" test "$s1" = "$s2"

# ---- resume in the middle of an epoch: the same samples, at another dp -------------------------
# A corpus so short that one epoch is 5 steps (63 characters: 56 training tokens, 40 windows of T+1 = 17 tokens, batch 8): the
# uninterrupted run at dp 2 and a run stopped at step 7 (mid-epoch 2) and resumed at dp 1 and then
# dp 2 again must load exactly the same windows, step by step ([data] sample_log writes what the
# ranks loaded); every epoch must visit each of the 40 windows once.
head -c 63 "$WORK/text.txt" > "$WORK/short.txt"
"$TRIDENT" prep --output "$WORK/short.h5" "$WORK/short.txt" >/dev/null || { echo "prep of the short corpus failed"; FAILED=$((FAILED + 1)); }
for name in e1 e2; do
  tiny_deck "$WORK/$name.ini" "$WORK/$name" "$WORK/short.h5"
  sed -i 's/^max_steps = 6/max_steps = 12/; s/^eval_interval = 3/eval_interval = 0/; s/^\[checkpoint\]/sample_log = true\n[checkpoint]/' "$WORK/$name.ini"
done
expect_exit 0 "step +12/12" -- "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/e1.ini"
expect_exit 0 "stopping after step 7" -- "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/e2.ini" --train.stop_at_step=7
expect_exit 0 "stopping after step 10" -- \
  "$TRIDENT" train --config "$WORK/e2.ini" --resume --train.stop_at_step=10 --parallel.dp=1
expect_exit 0 "step +12/12" -- "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/e2.ini" --resume
check "samples.csv: one row per sample of every step" test "$(tail -n +2 "$WORK/e2/samples.csv" | wc -l)" -eq 96
check "mid-epoch resume at dp 1 and dp 2 loads the uninterrupted run's samples" \
  cmp -s "$WORK/e1/samples.csv" "$WORK/e2/samples.csv"
expect_exit 0 "epochs ok: 2 full" -- /usr/bin/python3 - "$WORK/e1/samples.csv" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
samples = [int(r["sample"]) for r in rows]
assert samples == list(range(96)), "sample indices are not 0..95 in order"
offsets = [int(r["offset"]) for r in rows]
assert sorted(offsets[:40]) == list(range(40)) and sorted(offsets[40:80]) == list(range(40)), "an epoch repeats a window"
assert offsets[:40] != offsets[40:80], "epoch 2 repeats epoch 1's order"
print("epochs ok: 2 full")
EOF

echo "$FAILED failed"
exit "$FAILED"
