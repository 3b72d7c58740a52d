#!/usr/bin/env bash
# [model] attention = fused (kernels/attention.hpp: no (T, T) probabilities stored), end to end:
#  - bad values are refused by name; --help documents the key;
#  - --dry-run predicts less activation memory than attention = gemm, by exactly the probabilities
#    it no longer keeps, minus the fused kernel's own scratch (arithmetic below);
#  - training: the same losses as gemm up to summation order (metrics within 1e-4 relative over 8
#    steps at 2 ranks, dropout on); resume after stop_at_step is bitwise; a resume may switch the
#    kernel (reported as a change that keeps the training math, as a layout change is);
#    `trident sample` and `trident eval` load a fused run.
set -u
source "$(dirname "$0")/cli_lib.sh"

make_text "$WORK/text.txt"
"$TRIDENT" prep --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || { echo "prep failed"; exit 1; }
tiny_deck "$WORK/deck.ini" "$WORK/unused" "$WORK/tok.h5"
run1() { timeout 300 "$TRIDENT" train --config "$WORK/deck.ini" "$@"; }
run2() { timeout 300 "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/deck.ini" "$@"; }
F=(--model.attention=fused)

expect_exit 2 "\[model\] attention = flash: expected gemm or fused" -- run1 --model.attention=flash
expect_exit 0 "attention = gemm .*fused \(one query row at a time" -- bash -c "'$TRIDENT' train --help | tr '\n' ' '"

# ---- the dry run ---------------------------------------------------------------------------------
# The tiny deck (2 layers, 2 heads, width 32, dropout 0.1) at T = 128 and 16 sequences (one rank,
# one micro-batch), so the probabilities show in the printed MiB. The GEMM kernel keeps per block
# B*NH*T*T probabilities and has scratch of that size for backward (dpre) and for the dropped-out
# probabilities (pdrop); the fused kernel keeps B*NH*T log-sum-exps, its dpre shrinks the same way,
# it has no pdrop, and it adds K^T, V^T (2 B*T*C) and two rows (2 B*NH*T).
L=2; NH=2; C=32; T=128; B=16
act_mib() { run1 --dry-run 1 --model.block_size=$T --train.global_batch_size=$B "$@" 2>&1 | awk '$1 == "activations" {print $2}'; }
g=$(act_mib); f=$(act_mib "${F[@]}")
want=$(awk -v L=$L -v NH=$NH -v C=$C -v T=$T -v B=$B 'BEGIN {
  p = B * NH * T * T; r = B * NH * T
  printf "%.4f", 4 * ((L + 1) * (p - r) + p - 2 * B * T * C - 2 * r) / 1048576 }')
echo "     dry-run activations: gemm $g MiB, fused $f MiB, predicted difference $want MiB"
check "fused attention saves the (T, T) probabilities, to the printed precision" \
  awk -v g="$g" -v f="$f" -v w="$want" 'BEGIN {d = g - f - w; if (d < 0) d = -d; exit !(g > 0 && d <= 0.011)}'

# ---- training ------------------------------------------------------------------------------------
D=(--model.dropout=0.1 --train.max_steps=8 --checkpoint.interval=4)
expect_exit 0 "step +8/8" -- run2 "${D[@]}" --train.out_dir="$WORK/gemm"
expect_exit 0 "step +8/8" -- run2 "${D[@]}" "${F[@]}" --train.out_dir="$WORK/fused"
close() {  # close A B: columns 2 and 5 (train loss, grad norm) within 1e-4 relative, row by row
  paste -d, <(cut -d, -f2,5 "$1") <(cut -d, -f2,5 "$2") | tail -n +2 |
    awk -F, '{for (i = 1; i <= 2; i++) {d = $i - $(i + 2); if (d < 0) d = -d; if (d > 1e-4 * ($i < 0 ? -$i : $i)) bad = 1}} END {exit bad}'
}
check "fused losses and norms equal gemm's within 1e-4" close "$WORK/gemm/metrics.csv" "$WORK/fused/metrics.csv"
check "fused really ran (some column differs in the last digits, or the memory does)" \
  bash -c "! cmp -s <(cut -d, -f14 '$WORK/gemm/metrics.csv') <(cut -d, -f14 '$WORK/fused/metrics.csv')"
expect_exit 0 "stopping after step 3" -- run2 "${D[@]}" "${F[@]}" --train.out_dir="$WORK/cut" --train.stop_at_step=3
expect_exit 0 "resumed from .*step_00000003.h5 at step 3" -- run2 "${D[@]}" "${F[@]}" --train.out_dir="$WORK/cut" --resume
check "fused resume: metrics bitwise those of the uninterrupted run" \
  cmp -s <(cut -d, -f1-5 "$WORK/fused/metrics.csv") <(cut -d, -f1-5 "$WORK/cut/metrics.csv")
check "fused resume: final parameters bitwise" h5diff -q "$WORK/fused/checkpoints/step_00000008.h5" \
  "$WORK/cut/checkpoints/step_00000008.h5" /shards/param/pp0_dp0_tp0
expect_exit 0 "without changing the training math: \[model\] attention fused -> gemm" -- run2 "${D[@]}" --train.out_dir="$WORK/fused" --resume \
  --train.max_steps=10 --train.allow_changed=max_steps --model.attention=gemm
expect_exit 0 "ROMEO|." -- timeout 120 "$TRIDENT" sample --checkpoint "$WORK/cut" --prompt "int" --tokens 20
expect_exit 0 "val loss" -- timeout 120 "$TRIDENT" eval --checkpoint "$WORK/cut"
# `trident eval --attention` evaluates a checkpoint with the other kernel: the same loss to rounding.
lf="$(loss_of "$(timeout 120 "$TRIDENT" eval --checkpoint "$WORK/cut" 2>&1)")"
lg="$(loss_of "$(timeout 120 "$TRIDENT" eval --checkpoint "$WORK/cut" --attention gemm 2>&1)")"
echo "     eval of the fused run's checkpoint: fused $lf, --attention gemm $lg"
check "eval --attention gemm: the fused checkpoint's loss within 1e-6 relative" \
  awk -v a="$lf" -v b="$lg" 'BEGIN {d = a - b; if (d < 0) d = -d; exit !(a > 0 && b > 0 && d <= 1e-6 * a)}'

exit "$FAILED"
