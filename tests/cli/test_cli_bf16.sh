#!/usr/bin/env bash
# bf16 GEMM inputs on the host ([train] compute_dtype = bf16: oneDNN's matmul with fp32
# accumulation, docs/performance.md), end to end:
#  - a CPU without the AVX512-BF16 dot product (simulated: oneDNN's own DNNL_MAX_CPU_ISA) is refused
#    at start-up on every rank, with exit 2 and a message naming the key, the CPU and the way out,
#    also when only one rank lacks it;
#  - resume mid-run: losses, norms and the final state bitwise those of the uninterrupted bf16 run;
#    switching compute_dtype at a resume (bf16 -> float) is accepted;
#  - trident eval of a bf16 checkpoint; on a CPU without bf16 it is refused with the way out
#    (--compute-dtype float), which evaluates it within the stated tolerance (0.02);
#  - --dry-run predicts the bf16 copy of the GEMM operands (activations grow);
#  - bf16 against float on the example deck (shortened), final validation losses within 0.02.
# Skipped (77) where this build or CPU has no bf16 GEMM.
set -u
source "$(dirname "$0")/cli_lib.sh"
SRC="$(cd "$(dirname "$0")/../.." && pwd)"

make_text "$WORK/text.txt"
"$TRIDENT" prep --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || { echo "prep failed"; exit 1; }
tiny_deck "$WORK/deck.ini" "$WORK/unused" "$WORK/tok.h5"
run1() { timeout 300 "$TRIDENT" train --config "$WORK/deck.ini" "$@"; }
run2() { timeout 300 "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/deck.ini" "$@"; }
B=(--train.compute_dtype=bf16)

# Skipped only for the two documented reasons (a build without oneDNN, a CPU without the
# instructions); any other failure of this first run is a failure.
probe="$(run1 "${B[@]}" --train.max_steps=1 --train.out_dir="$WORK/probe" 2>&1)"
if grep -Eq "compute_dtype = bf16.*(has no oneDNN|no AVX512-BF16 dot-product instructions)" <<<"$probe"; then
  echo "skip: $(grep -m1 "compute_dtype" <<<"$probe")"
  exit 77
fi
expect_exit 0 "step +1/1" -- run1 "${B[@]}" --train.max_steps=1 --train.out_dir="$WORK/probe2"

# ---- a CPU without bf16 dot products ----------------------------------------------------------------
expect_exit 2 "compute_dtype = bf16 cannot run here: this CPU has no AVX512-BF16 .*AVX512_CORE, capped by DNNL_MAX_CPU_ISA.*compute_dtype = float" -- \
  env DNNL_MAX_CPU_ISA=AVX512_CORE timeout 120 "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/deck.ini" "${B[@]}" \
  --train.out_dir="$WORK/refused"
check "the refused run wrote no checkpoint" bash -c "! ls '$WORK'/refused/checkpoints/*.h5 2>/dev/null"
# One rank without the instructions (mixed nodes): every rank stops with the message, none hangs.
expect_exit 2 "compute_dtype = bf16 cannot run here: .*no AVX512-BF16.*\(rank 1\)" -- \
  timeout 120 "$MPIEXEC" -n 1 "$TRIDENT" train --config "$WORK/deck.ini" "${B[@]}" --train.out_dir="$WORK/refused1" : \
  -n 1 env DNNL_MAX_CPU_ISA=AVX512_CORE "$TRIDENT" train --config "$WORK/deck.ini" "${B[@]}" --train.out_dir="$WORK/refused1"
expect_exit 0 "compute_dtype = float .*oneDNN's AVX512-BF16 kernels on a CPU" -- bash -c "'$TRIDENT' train --help | tr '\n' ' '"

# ---- resume equals the uninterrupted run ------------------------------------------------------------
det() { cut -d, -f1-5 "$1"; }  # step, train loss, val loss, lr, grad norm
expect_exit 0 "step +8/8" -- run2 "${B[@]}" --train.max_steps=8 --checkpoint.interval=4 --train.out_dir="$WORK/straight"
expect_exit 0 "stopping after step 3" -- run2 "${B[@]}" --train.max_steps=8 --checkpoint.interval=4 --train.out_dir="$WORK/cut" \
  --train.stop_at_step=3
expect_exit 0 "resumed from .*step_00000003.h5 at step 3" -- run2 "${B[@]}" --train.max_steps=8 --checkpoint.interval=4 --train.out_dir="$WORK/cut" --resume
check "bf16 resume: metrics bitwise those of the uninterrupted run" diff <(det "$WORK/straight/metrics.csv") <(det "$WORK/cut/metrics.csv")
for kind in param exp_avg exp_avg_sq; do
  for shard in pp0_dp0_tp0 pp0_dp1_tp0; do
    check "bf16 resume: $kind/$shard bitwise equal" h5diff -q "$WORK/straight/checkpoints/step_00000008.h5" \
      "$WORK/cut/checkpoints/step_00000008.h5" "/shards/$kind/$shard"
  done
done
expect_exit 0 "resumed from .*step_00000008.h5 at step 8" -- run2 --checkpoint.interval=4 --train.out_dir="$WORK/straight" \
  --resume --train.max_steps=12 --train.allow_changed=max_steps --train.compute_dtype=float
check "float after bf16: the run went on" test -f "$WORK/straight/checkpoints/step_00000012.h5"

# ---- trident eval of a bf16 checkpoint, also on a CPU without bf16 -------------------------------------
ev() { timeout -k 10 120 "$TRIDENT" eval --checkpoint "$WORK/cut/checkpoints/step_00000008.h5" "$@"; }
l16="$(loss_of "$(ev 2>&1)")"
expect_exit 2 "cannot evaluate with compute_dtype = bf16 here: this CPU has no AVX512-BF16.*trident eval --compute-dtype float" -- \
  env DNNL_MAX_CPU_ISA=AVX512_CORE timeout -k 10 120 "$TRIDENT" eval --checkpoint "$WORK/cut/checkpoints/step_00000008.h5"
l32="$(loss_of "$(env DNNL_MAX_CPU_ISA=AVX512_CORE timeout -k 10 120 "$TRIDENT" eval \
  --checkpoint "$WORK/cut/checkpoints/step_00000008.h5" --compute-dtype float 2>&1)")"
echo "     eval of the bf16 checkpoint: bf16 $l16, float on a CPU without bf16 $l32"
check "eval --compute-dtype float: the bf16 checkpoint's loss within 0.02" \
  awk -v a="$l16" -v b="$l32" 'BEGIN {d = a - b; if (d < 0) d = -d; exit !(a > 0 && b > 0 && d <= 0.02)}'
expect_exit 2 "\[train\] compute_dtype = half.*--compute-dtype" -- ev --compute-dtype half
expect_exit 2 "\[model\] attention = flash.*--attention" -- ev --attention flash

# ---- the dry run counts bf16 storage ----------------------------------------------------------------
act() { grep -Eo "activations +[0-9.]+" | head -1 | awk '{print $2}'; }
a32="$(run1 --dry-run 1 2>&1 | act)"
a16="$(run1 "${B[@]}" --dry-run 1 2>&1 | act)"
echo "     dry-run activations: float $a32 MiB, bf16 $a16 MiB"
# bf16 adds the GEMM operands' bf16 copy and halves the activations kept only for GEMMs (GPT-2: 7 of
# its B*T*C per block: 3.5 * 8*16*32 floats = 56 KiB per block here, against a copy of 40 KiB).
check "bf16 predicts less activation memory (GEMM-only activations in bf16, the operands' bf16 copy)" \
  awk -v a="$a32" -v b="$a16" 'BEGIN {exit !(a > 0 && b > 0 && b < a)}'

# ---- bf16 against float on the example deck ----------------------------------------------------------
# input/shakespeare_char.ini (the README's example), shortened to 300 steps, evaluated on 20 batches
# at the end. docs/performance.md states the tolerance: final validation losses within 0.02.
TEXT="$SRC/../shared/data/tinyshakespeare.txt"
if [ -f "$TEXT" ]; then
  "$TRIDENT" prep --tokenizer char --output "$WORK/shakespeare.h5" "$TEXT" >/dev/null
  ex=(--config "$SRC/input/shakespeare_char.ini" --data.path="$WORK/shakespeare.h5" --train.max_steps=300
      --train.warmup_steps=30 --train.eval_interval=300 --train.eval_iters=20 --train.log_interval=100
      --checkpoint.interval=0)
  expect_exit 0 "final val loss" -- timeout 300 "$MPIEXEC" -n 2 "$TRIDENT" train "${ex[@]}" --train.out_dir="$WORK/ex32"
  expect_exit 0 "final val loss" -- timeout 300 "$MPIEXEC" -n 2 "$TRIDENT" train "${ex[@]}" --train.out_dir="$WORK/ex16" "${B[@]}"
  v32="$(awk -F, 'NR > 1 && $3 != "" {v = $3} END {print v}' "$WORK/ex32/metrics.csv")"
  v16="$(awk -F, 'NR > 1 && $3 != "" {v = $3} END {print v}' "$WORK/ex16/metrics.csv")"
  echo "     example deck, 300 steps: val loss float $v32, bf16 $v16"
  check "bf16's final validation loss within 0.02 of float's" \
    awk -v a="$v32" -v b="$v16" 'BEGIN {d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 0.02)}'
  check "bf16 really ran (losses differ from float's)" \
    bash -c "! diff -q <(cut -d, -f2 '$WORK/ex32/metrics.csv') <(cut -d, -f2 '$WORK/ex16/metrics.csv') >/dev/null"
else
  echo "skip: example deck comparison ($TEXT not found)"
fi

exit "$FAILED"
