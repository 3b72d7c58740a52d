#!/usr/bin/env bash
# fp16 working parameters and gradient reduction with dynamic loss scaling, end to end
# (docs/numerics.md, "fp16"):
#  - a forced overflow schedule: the scale sequence, skipped and overflow counts in metrics.csv are
#    the hand-computed ones, an overflowed step changes no parameter or moment;
#  - agreement: 1 rank, dp2, tp2, pp2 and ZeRO-1/2/3 at 2 ranks give the same scale sequence and skips, and
#    losses within 1e-3 (fp16 rounding of the reduced gradient depends on the layout);
#  - a NaN gradient on one rank only is an overflow on every rank; a NaN loss stays the nonfinite
#    policy's; an overflow at the minimum scale stops with exit 1 and saves nothing;
#  - resume mid-run (between two growths): metrics columns and state bitwise those of the
#    uninterrupted run; resuming a bf16 checkpoint with fp16 and back;
#  - a power-of-two scale changes nothing of a step that does not overflow (bitwise);
#  - fp16 against float on the example deck (shortened), within the tolerance docs/numerics.md states.
set -u
source "$(dirname "$0")/cli_lib.sh"
SRC="$(cd "$(dirname "$0")/../.." && pwd)"

make_text "$WORK/text.txt"
"$TRIDENT" prep --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || { echo "prep failed"; exit 1; }
tiny_deck "$WORK/deck.ini" "$WORK/unused" "$WORK/tok.h5"
run1() { timeout 300 "$TRIDENT" train --config "$WORK/deck.ini" "$@"; }
run2() {
  timeout 300 "$MPIEXEC" -n 2 env TRIDENT_POISON="${POISON:-}" TRIDENT_POISON_RANK="${POISON_RANK:--1}" \
    "$TRIDENT" train --config "$WORK/deck.ini" "$@"
}
poisoned() { local p="$1" r="$2"; shift 2; POISON="$p" POISON_RANK="$r" "$@"; }
ck() { printf '%s/checkpoints/step_%08d.h5' "$1" "$2"; }
attr() { /usr/bin/python3 -c "import h5py,sys; f=h5py.File(sys.argv[1],'r'); print(f.attrs[sys.argv[2]] if sys.argv[2] in f.attrs else 'absent')" "$1" "$2"; }
# col FILE NAME: the column NAME of metrics.csv, one line, space separated.
col() { /usr/bin/python3 -c "import csv,sys; print(' '.join(r[sys.argv[2]] for r in csv.DictReader(open(sys.argv[1]))))" "$1" "$2"; }
# The deterministic columns: step, losses, lr, grad_norm, skipped, skipped_steps, loss_z, loss_scale, overflow_steps.
det_cols() { cut -d, -f1-5,20-24 "$1"; }
same_state() {  # same_state A B SHARD...: parameters and both moments bitwise equal in every SHARD
  local a="$1" b="$2" kind shard; shift 2
  for kind in param exp_avg exp_avg_sq; do
    for shard in "$@"; do h5diff -q "$a" "$b" "/shards/$kind/$shard" || return 1; done
  done
}

# ---- keys, help and bad values ------------------------------------------------------------------
expect_exit 0 "param_dtype = float .*fp16.*loss_scale_init = 65536.*loss_scale_growth_interval = 2000.*loss_scale_growth = 2 .*loss_scale_backoff = 0.5.*loss_scale_min = 1 " -- \
  bash -c "'$TRIDENT' train --help | tr '\n' ' '"
expect_exit 2 "\[train\] loss_scale_min = 1e\+06 must be > 0 .*at most \[train\] loss_scale_init = 65536" -- \
  run1 --train.param_dtype=fp16 --train.loss_scale_min=1e6
expect_exit 2 "\[train\] loss_scale_growth = 0.5 must be > 1" -- run1 --train.param_dtype=fp16 --train.loss_scale_growth=0.5
expect_exit 2 "\[train\] reduce_dtype = half: write fp16" -- run1 --train.reduce_dtype=half
expect_exit 2 "param_dtype/reduce_dtype = fp16 needs \[train\] dtype = float" -- \
  run1 --train.param_dtype=fp16 --train.dtype=double

# ---- a forced overflow schedule --------------------------------------------------------------------
# reduce_dtype = fp16 rounds the scaled gradients to fp16 (largest finite 65504). Scale 2^40
# overflows any gradient; x2^-30 gives 2^10, at which no gradient of this tiny model (all |g| < 64)
# overflows; two good steps grow it x2^20 to 2^30, which overflows again and backs off to the floor
# 1; two good steps at 1 grow it to 2^20 for step 7. By hand:
#   step        1      2     3     4      5  6
#   loss_scale  2^40   2^10  2^10  2^30   1  1
#   skipped     1      0     0     1      0  0
#   overflows   1      1     1     2      2  2
F=(--train.param_dtype=fp16 --train.reduce_dtype=fp16 --train.loss_scale_init=1099511627776
   --train.loss_scale_backoff=9.313225746154785e-10 --train.loss_scale_growth_interval=2
   --train.loss_scale_growth=1048576 --checkpoint.interval=1 --checkpoint.keep=10)
expect_exit 0 "step 1: gradient overflow at loss scale 1.09951e\+12 \(first seen on world rank 0\): update skipped, the scale is now 1024" -- \
  run1 "${F[@]}" --train.out_dir="$WORK/o1"
check "loss_scale column is the hand-computed sequence" \
  test "$(col "$WORK/o1/metrics.csv" loss_scale)" = "1099511627776 1024 1024 1073741824 1 1"
check "overflow_steps counts the overflows" test "$(col "$WORK/o1/metrics.csv" overflow_steps)" = "1 1 1 2 2 2"
check "overflowed steps are marked skipped" test "$(col "$WORK/o1/metrics.csv" skipped)" = "1 0 0 1 0 0"
check "overflows are not nonfinite skips (skipped_steps stays 0)" \
  test "$(col "$WORK/o1/metrics.csv" skipped_steps)" = "0 0 0 0 0 0"
check "an overflowed step has its real loss and grad_norm inf" \
  bash -c "awk -F, '\$1 == 4 && \$5 == \"inf\" && \$2 > 4 && \$2 < 5 {ok=1} END {exit !ok}' '$WORK/o1/metrics.csv'"
check "the overflowed step changed no parameter or moment" same_state "$(ck "$WORK/o1" 3)" "$(ck "$WORK/o1" 4)" pp0_dp0_tp0
check "AdamW counted only the applied steps" test "$(attr "$(ck "$WORK/o1" 6)" adam_step)" = 4
check "the checkpoint holds the grown scale of step 7 and the counts" \
  test "$(attr "$(ck "$WORK/o1" 6)" loss_scale) $(attr "$(ck "$WORK/o1" 6)" loss_scale_good_steps) $(attr "$(ck "$WORK/o1" 6)" overflow_steps)" = "1048576.0 0 2"
expect_exit 0 "OK|ok|intact" -- "$TRIDENT" ckpt verify "$(ck "$WORK/o1" 6)"

# ---- agreement across layouts ----------------------------------------------------------------------
# close A B: the scale, skip and overflow columns equal; every train_loss within 1e-3. dp2 and pp2
# round two partial gradient sums to fp16 (11 significant bits), one rank one sum: measured 2e-5
# to 1.2e-4 after a few updates, depending on the corpus, which is the repository's own sources
# (make_text), so it changes with every commit; a 1e-4 bound once failed on such a change alone.
close() {
  cmp -s <(cut -d, -f1,20,21,23,24 "$1") <(cut -d, -f1,20,21,23,24 "$2") || return 1
  paste -d, <(cut -d, -f2 "$1") <(cut -d, -f2 "$2") | awk -F, 'NR > 1 {d = $1 - $2; if (d < 0) d = -d; if (d > 1e-3) bad = 1} END {exit bad}'
}
expect_exit 0 "step 4: gradient overflow at loss scale 1.07374e\+09" -- run2 "${F[@]}" --train.out_dir="$WORK/dp2"
expect_exit 0 "step +6/6" -- run2 "${F[@]}" --train.out_dir="$WORK/tp2" --parallel.tp=2
expect_exit 0 "step +6/6" -- run2 "${F[@]}" --train.out_dir="$WORK/z1" --parallel.zero_stage=1
expect_exit 0 "step +6/6" -- run2 "${F[@]}" --train.out_dir="$WORK/z2" --parallel.zero_stage=2 --parallel.overlap_reduce=true
expect_exit 0 "step +6/6" -- run2 "${F[@]}" --train.out_dir="$WORK/z3" --parallel.zero_stage=3
expect_exit 0 "step +6/6" -- run2 "${F[@]}" --train.out_dir="$WORK/pp2" --parallel.pp=2
check "dp2: the same scales and skips as 1 rank, losses within 1e-3" close "$WORK/o1/metrics.csv" "$WORK/dp2/metrics.csv"
check "tp2: the same" close "$WORK/o1/metrics.csv" "$WORK/tp2/metrics.csv"
check "ZeRO-1 at dp2: the same" close "$WORK/o1/metrics.csv" "$WORK/z1/metrics.csv"
check "ZeRO-2 at dp2 (fp16 reduce-scatter, overlapped): the same" close "$WORK/o1/metrics.csv" "$WORK/z2/metrics.csv"
check "ZeRO-3 at dp2: the same" close "$WORK/o1/metrics.csv" "$WORK/z3/metrics.csv"
check "pp2: the same" close "$WORK/o1/metrics.csv" "$WORK/pp2/metrics.csv"

# ---- resume between two growths: bitwise ---------------------------------------------------------
# After step 2 the scaler has one good step of two: a resume that lost the count would grow at step
# 4 instead of 3, and step 4 would not overflow.
expect_exit 0 "stopping after step 2" -- run2 "${F[@]}" --train.out_dir="$WORK/r" --train.stop_at_step=2
expect_exit 0 "fp16 loss scaling: scale 1024" -- run2 "${F[@]}" --train.out_dir="$WORK/r" --resume
check "resumed losses, scales and counts equal the uninterrupted run byte for byte" \
  cmp -s <(det_cols "$WORK/dp2/metrics.csv") <(det_cols "$WORK/r/metrics.csv")
check "resumed state bitwise equal" same_state "$(ck "$WORK/dp2" 6)" "$(ck "$WORK/r" 6)" pp0_dp0_tp0 pp0_dp1_tp0
# A resume that raises loss_scale_min above the checkpoint's scale (1024 after step 2) starts at
# the new floor (was: the scale stayed below it, and the first overflow stopped the run "at the
# minimum loss scale 1024").
expect_exit 0 "warning: the checkpoint's loss scale 1024 is below \[train\] loss_scale_min = 4096: the scale starts at 4096" -- \
  run2 "${F[@]}" --train.out_dir="$WORK/rmin" --resume "$(ck "$WORK/r" 2)" --train.loss_scale_min=4096 --train.stop_at_step=3
check "... and its step 3 ran at scale 4096" test "$(col "$WORK/rmin/metrics.csv" loss_scale)" = 4096

# ---- a NaN on one rank, a NaN loss, the floor ---------------------------------------------------------
expect_exit 0 "step 3: gradient overflow at loss scale 65536 \(first seen on world rank 1\): update skipped, the scale is now 32768" -- \
  poisoned grad:3 1 run2 --train.param_dtype=fp16 --checkpoint.interval=1 --train.out_dir="$WORK/nan1"
expect_exit 0 "first seen on world rank 0\): update skipped" -- \
  poisoned grad:3 -1 run2 --train.param_dtype=fp16 --checkpoint.interval=1 --train.out_dir="$WORK/nanall"
check "a NaN gradient on rank 1 only: every rank skipped and backed off (state bitwise that of a NaN everywhere)" \
  same_state "$(ck "$WORK/nan1" 6)" "$(ck "$WORK/nanall" 6)" pp0_dp0_tp0 pp0_dp1_tp0
check "scale halves after the overflow, with nonfinite = stop the run went on" \
  test "$(col "$WORK/nan1/metrics.csv" loss_scale)" = "65536 65536 65536 32768 32768 32768"
expect_exit 1 "training diverged at step 3: the loss or gradient norm is not finite \(first seen on world rank 1" -- \
  poisoned loss:3 1 run2 --train.param_dtype=fp16 --train.out_dir="$WORK/nanloss"
expect_exit 1 "stopping at step 1: the gradients overflow \(inf or nan, first seen on world rank 0\) at the minimum loss scale 1.09951e\+12 \(\[train\] loss_scale_min\).*nothing is saved" -- \
  run2 "${F[@]}" --train.loss_scale_min=1099511627776 --train.out_dir="$WORK/floor"
check "the floor stop saved nothing" bash -c "! ls '$WORK/floor/checkpoints/' 2>/dev/null | grep -q step_"

# ---- a power-of-two scale is exact -----------------------------------------------------------------
expect_exit 0 "loss scale 65536" -- run2 --train.param_dtype=fp16 --train.out_dir="$WORK/s16"
expect_exit 0 "loss scale 1$" -- run2 --train.param_dtype=fp16 --train.loss_scale_init=1 --train.out_dir="$WORK/s0"
check "scale 2^16 and scale 1: the same losses and norms" \
  cmp -s <(cut -d, -f1-5 "$WORK/s16/metrics.csv") <(cut -d, -f1-5 "$WORK/s0/metrics.csv")
check "and bitwise the same state" same_state "$(ck "$WORK/s16" 6)" "$(ck "$WORK/s0" 6)" pp0_dp0_tp0 pp0_dp1_tp0
expect_exit 0 "step +6/6" -- run2 --train.out_dir="$WORK/f32"
check "fp16 parameters differ from float ones (the rounding did something)" \
  bash -c "! cmp -s <(cut -d, -f1-2 '$WORK/s16/metrics.csv') <(cut -d, -f1-2 '$WORK/f32/metrics.csv')"

# ---- param_dtype changes on resume ------------------------------------------------------------------
expect_exit 0 "stopping after step 3" -- run2 --train.param_dtype=bf16 --train.out_dir="$WORK/x" --train.stop_at_step=3
run2 --train.param_dtype=fp16 --train.out_dir="$WORK/x" --train.stop_at_step=5 --resume >"$WORK/x.log" 2>&1
check "bf16 -> fp16 resume: exit 0, the change warned, the scale starts at loss_scale_init" \
  bash -c "grep -Eq 'param_dtype.*bf16.*fp16' '$WORK/x.log' && grep -q 'fp16 loss scaling: scale 65536,' '$WORK/x.log' &&
           grep -q 'stopping after step 5' '$WORK/x.log'"
check "the bf16 checkpoint resumed with fp16 records a scale" test "$(attr "$(ck "$WORK/x" 5)" loss_scale)" = 65536.0
expect_exit 0 "resumed from .*step_00000005.h5" -- run2 --train.param_dtype=bf16 --train.out_dir="$WORK/x" --resume
check "and back to bf16: no scale recorded" test "$(attr "$(ck "$WORK/x" 6)" loss_scale)" = absent
check "bf16 steps have loss_scale 1" test "$(col "$WORK/x/metrics.csv" loss_scale)" = "1 1 1 65536 65536 1"

# ---- fp16 against float on the example deck -------------------------------------------------------
# input/shakespeare_char.ini (the README's example), shortened to 300 steps with an evaluation of 20
# batches at the end. docs/numerics.md states the tolerance: final validation losses within 0.02.
TEXT="$SRC/../shared/data/tinyshakespeare.txt"
if [ -f "$TEXT" ]; then
  "$TRIDENT" prep --tokenizer char --output "$WORK/shakespeare.h5" "$TEXT" >/dev/null
  ex=(--config "$SRC/input/shakespeare_char.ini" --data.path="$WORK/shakespeare.h5" --train.max_steps=300
      --train.warmup_steps=30 --train.eval_interval=300 --train.eval_iters=20 --train.log_interval=100
      --checkpoint.interval=0)
  expect_exit 0 "final val loss" -- timeout 300 "$MPIEXEC" -n 2 "$TRIDENT" train "${ex[@]}" --train.out_dir="$WORK/ex32"
  expect_exit 0 "final val loss" -- timeout 300 "$MPIEXEC" -n 2 "$TRIDENT" train "${ex[@]}" --train.out_dir="$WORK/ex16" \
    --train.param_dtype=fp16
  v32="$(awk -F, 'NR > 1 && $3 != "" {v = $3} END {print v}' "$WORK/ex32/metrics.csv")"
  v16="$(awk -F, 'NR > 1 && $3 != "" {v = $3} END {print v}' "$WORK/ex16/metrics.csv")"
  echo "     example deck, 300 steps: val loss float $v32, fp16 $v16"
  check "fp16's final validation loss within 0.02 of float's" \
    awk -v a="$v32" -v b="$v16" 'BEGIN {d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 0.02)}'
  check "no overflow in the example run" test "$(col "$WORK/ex16/metrics.csv" overflow_steps | tr ' ' '\n' | sort -u)" = 0
else
  echo "skip the example deck: $TEXT not found"
fi

exit "$FAILED"
