#!/usr/bin/env bash
# `trident eval`: a checkpoint's whole-split loss on any layout. Oracles: the training run's own
# whole-split val loss in metrics.csv (bitwise on the layout and micro-batch that trained it; to
# rounding on 1 rank, tp2 and pp2, other summation orders), the token count of the split (from the
# run's start-up log: every window of block_size + 1 starting every block_size tokens), and
# perplexity = exp(loss). Bad input: each gets a message naming the problem and exit 2 (usage) or
# 1 (a damaged or missing file), never a crash.
set -u
source "$(dirname "$0")/cli_lib.sh"

make_text "$WORK/text.txt"
"$TRIDENT" prep --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || { echo "prep failed"; exit 1; }
tiny_deck "$WORK/deck.ini" "$WORK/run" "$WORK/tok.h5"
# The whole val split at the last step (eval_iters = 0), a checkpoint of it (save_final).
sed -i 's/^eval_interval = 3/eval_interval = 6/; s/^eval_iters = 2/eval_iters = 0/' "$WORK/deck.ini"
timeout -k 10 300 "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/deck.ini" > "$WORK/train.out" 2>&1 ||
  { echo "training failed"; tail -5 "$WORK/train.out"; exit 1; }
want="$(awk -F, '$1 == 6 {print $3}' "$WORK/run/metrics.csv")"
n_val="$(sed -n 's/.* \([0-9]*\) train \/ \([0-9]*\) val tokens.*/\2/p' "$WORK/train.out" | head -n 1)"
n_train="$(sed -n 's/.* \([0-9]*\) train \/ \([0-9]*\) val tokens.*/\1/p' "$WORK/train.out" | head -n 1)"
echo "     the run's whole-split val loss at step 6: $want ($n_val val tokens)"
ev() { timeout -k 10 120 "$MPIEXEC" -n "$1" "$TRIDENT" eval "${@:2}"; }
close() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(b > 0 && (a - b) ^ 2 <= (1e-6 * b) ^ 2) }'; }

# ---- the layout that trained it (dp 2, micro-batch 4): bitwise ----------------------------------
out="$(ev 2 --checkpoint "$WORK/run" --micro-batch 4 2>&1)"; rc=$?
check "dp2, micro-batch 4: exit 0" test "$rc" -eq 0
check "dp2, micro-batch 4: val loss $(loss_of "$out") = the run's $want (bitwise)" test "$(loss_of "$out")" = "$want"
check "dp2: the token count is every whole window of the split" \
  grep -q "| $(( (n_val - 1) / 16 * 16 )) tokens | step 6 of .*step_00000006.h5" <<<"$out"
check "dp2: no resume warnings (a model to read, not a run to continue)" bash -c "! grep -qi 'differ' <<<'$out'"
ppl="$(sed -n 's/.*perplexity \([0-9.e+]*\) .*/\1/p' <<<"$out")"
check "perplexity $ppl = exp(loss)" awk -v p="$ppl" -v l="$(loss_of "$out")" 'BEGIN { e = exp(l); exit !((p - e) ^ 2 <= (1e-3 * e) ^ 2) }'
[ "$rc" -eq 0 ] || tail -5 <<<"$out"

# ---- eval_iters beyond the split: the whole split instead (bounded time, the better estimate) ----
out="$(timeout -k 10 300 "$TRIDENT" train --config "$WORK/deck.ini" --train.out_dir="$WORK/run_capped" \
  --train.eval_iters=100000000 2>&1)"
check "eval_iters = 1e8: said once, the whole split read instead" \
  test "$(grep -c "eval_iters = 100000000 batches of .* is more than the val split's [0-9]* windows of 16 tokens: every evaluation reads the whole split" <<<"$out")" -eq 1
capped="$(awk -F, '$1 == 6 {print $3}' "$WORK/run_capped/metrics.csv")"
check "... its val loss $capped at step 6 is the whole split's $want (1 rank against 2: to 1e-4)" \
  awk -v a="$capped" -v b="$want" 'BEGIN { exit !(b > 0 && (a - b) ^ 2 <= (1e-4 * b) ^ 2) }'

# ---- other layouts: the same loss to rounding ----------------------------------------------------
for layout in "1" "2 --tp 2" "2 --pp 2" "2 --micro-batch 3"; do
  set -- $layout
  out="$(ev "$@" --checkpoint "$WORK/run/checkpoints" 2>&1)"; rc=$?
  check "eval on $layout rank(s): exit 0 and val loss $(loss_of "$out") = $want to rounding" \
    bash -c "[ $rc -eq 0 ] && awk -v a='$(loss_of "$out")' -v b='$want' 'BEGIN { exit !(b > 0 && (a - b) ^ 2 <= (1e-6 * b) ^ 2) }'"
done

# ---- the train split ------------------------------------------------------------------------------
out="$(ev 1 --checkpoint "$WORK/run/checkpoints/step_00000006.h5" --split train 2>&1)"; rc=$?
check "--split train: exit 0, every window of the $n_train train tokens" \
  bash -c "[ $rc -eq 0 ] && grep -q 'train loss [0-9.]* | .* | $(( (n_train - 1) / 16 * 16 )) tokens' <<<'$out'"

# ---- bad input -------------------------------------------------------------------------------------
expect_exit 2 "no --checkpoint given" -- ev 1
expect_exit 0 "Prints the mean loss .nats per token. and perplexity" -- ev 1 --help
expect_exit 1 "nope" -- ev 1 --checkpoint "$WORK/nope"
expect_exit 2 "--split 'test': give val or train" -- ev 1 --checkpoint "$WORK/run" --split test
expect_exit 2 "--data: the file name is empty" -- ev 1 --checkpoint "$WORK/run" --data ""
expect_exit 2 "--tp 2 x --pp 1 does not divide the 3 ranks" -- ev 3 --checkpoint "$WORK/run" --tp 2
expect_exit 2 "--micro-batch must be >= 1" -- ev 1 --checkpoint "$WORK/run" --micro-batch 0
expect_exit 2 "--tp 65536 x --pp 65536 needs more than the 2 rank\(s\)" -- ev 2 --checkpoint "$WORK/run" --tp 65536 --pp 65536
expect_exit 2 "--micro-batch 9223372036854775807 is more than" -- ev 1 --checkpoint "$WORK/run" --micro-batch 9223372036854775807
expect_exit 2 "this layout cannot evaluate the checkpoint's model: .*n_head" -- ev 4 --checkpoint "$WORK/run" --tp 4
# A micro-batch beyond the windows a rank reads is capped (it once allocated for all of them).
out="$(ev 1 --checkpoint "$WORK/run" --micro-batch 1000000 2>&1)"; rc=$?
check "--micro-batch 1000000: capped at the windows a rank reads, said, exit 0" \
  bash -c "[ $rc -eq 0 ] && grep -q -- '--micro-batch 1000000 is more than the [0-9]* window(s) of 16 tokens a dp rank reads: using' <<<'$out'"
check "... and the same loss $(loss_of "$out") to rounding" close "$(loss_of "$out")" "$want"
expect_exit 1 "token file '$WORK/missing.h5'" -- ev 1 --checkpoint "$WORK/run" --data "$WORK/missing.h5"
"$TRIDENT" prep --tokenizer byte --output "$WORK/bytes.h5" "$WORK/text.txt" >/dev/null
expect_exit 2 "token file '$WORK/bytes.h5': the checkpoint's tokenizer is 'char', the token file's 'byte'.*trident prep --tokenizer char" -- \
  ev 1 --checkpoint "$WORK/run" --data "$WORK/bytes.h5"
printf 'zyx wvu tsr qpo nml kji hgf edc ba\n%.0s' $(seq 200) > "$WORK/other.txt"
"$TRIDENT" prep --output "$WORK/other.h5" "$WORK/other.txt" >/dev/null
expect_exit 2 "the checkpoint's char vocabulary differs from the token file's .*token ids would mean other characters .*use the token file the checkpoint was trained on" -- ev 1 --checkpoint "$WORK/run" --data "$WORK/other.h5"
cp "$WORK/run/checkpoints/step_00000006.h5" "$WORK/damaged.h5"
corrupt_dataset "$WORK/damaged.h5" shards/param/pp0_dp0_tp0
expect_exit 1 "trident ckpt verify" -- ev 1 --checkpoint "$WORK/damaged.h5"

# Standard output that cannot be written (a full disk: /dev/full; closed: >&-) is an error, exit 1,
# for the commands whose output is the product; the sample stops at its first failed write rather
# than generating into a full disk. A closed stdout is held by /dev/null, so no file trident opens
# becomes fd 1. `train` only warns: its products are its files.
if [ -w /dev/full ]; then
  expect_exit 1 "trident sample: error: cannot write the sample to standard output: No space left on device" -- \
    bash -c '"$0" sample --checkpoint "$1" --tokens 100000 > /dev/full' "$TRIDENT" "$WORK/run"
  expect_exit 1 "trident eval: error: cannot write standard output" -- \
    bash -c '"$0" eval --checkpoint "$1" > /dev/full' "$TRIDENT" "$WORK/run"
  expect_exit 1 "trident ckpt ls: error: cannot write standard output" -- \
    bash -c '"$0" ckpt ls "$1" > /dev/full' "$TRIDENT" "$WORK/run"
  expect_exit 1 "trident --help: error: cannot write standard output" -- bash -c '"$0" --help > /dev/full' "$TRIDENT"
fi
expect_exit 1 "trident ckpt verify: error: cannot write standard output: it was closed when trident started" -- \
  bash -c '"$0" ckpt verify "$1" >&-' "$TRIDENT" "$WORK/run"
expect_exit 1 "trident sample: error: standard output is closed \(>&-\): nothing to write the sample to" -- \
  bash -c '"$0" sample --checkpoint "$1" --tokens 100000 >&-' "$TRIDENT" "$WORK/run"
# A command whose product is a file only warns: the file is written, and a retry is not refused.
expect_exit 0 "warning: trident prep: its log on standard output is incomplete: it was closed when trident started" -- \
  bash -c '"$0" prep --output "$1" "$2" >&-' "$TRIDENT" "$WORK/tok_closed.h5" "$WORK/text.txt"
check "... and the token file is there" "$TRIDENT" prep --verify "$WORK/tok_closed.h5"
cp -r "$WORK/run" "$WORK/run_closed"
expect_exit 0 "warning: trident train: its log on standard output is incomplete: it was closed when trident started" -- \
  bash -c '"$0" train --config "$1" --train.out_dir="$2" --resume --train.max_steps=7 --train.allow_changed=max_steps >&-' \
  "$TRIDENT" "$WORK/deck.ini" "$WORK/run_closed"
check "... and its checkpoint is a checkpoint (fd 1 was never one of its files)" \
  "$TRIDENT" ckpt verify "$WORK/run_closed/checkpoints/step_00000007.h5"
exit "$FAILED"
