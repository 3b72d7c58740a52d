#!/usr/bin/env bash
# Deck values a run cannot use, and resumes with a deck that differs from the checkpoint's: an
# empty boolean and values outside float are refused naming the key (exit 2); a resume lists every
# changed key and what it does, refuses (exit 2, the key named, nothing written) the changes that
# would change what the step or the data position mean, and takes them with [train] allow_changed.
set -u
source "$(dirname "$0")/cli_lib.sh"

make_text "$WORK/text.txt"
"$TRIDENT" prep --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || { echo "prep failed"; exit 1; }
tiny_deck "$WORK/deck.ini" "$WORK/run" "$WORK/tok.h5"

# ---- values the run cannot represent ----------------------------------------------------------
expect_exit 2 "command line: bad value for 'bias' in section \[model\]: the value is empty; expected a boolean" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --model.bias=
sed 's/^bias = false$/bias =/' "$WORK/deck.ini" > "$WORK/empty_bool.ini"
expect_exit 2 "deck '$WORK/empty_bool.ini', line 6: bad value for 'bias' in section \[model\]: the value is empty" -- \
  "$TRIDENT" train --config "$WORK/empty_bool.ini"
expect_exit 2 "bad value for 'async' in section \[checkpoint\]: the value is empty" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --checkpoint.async=
expect_exit 2 "\[train\] lr = 1e\+39 is outside the range of float" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --train.lr=1e39
expect_exit 2 "\[train\] beta2 = 0.999999999 rounds to 1 in float" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --train.beta2=0.999999999
expect_exit 0 "lr = 1e\+39" -- "$TRIDENT" train --config "$WORK/deck.ini" --train.lr=1e39 --train.dtype=double --print-config
expect_exit 2 "\[train\] allow_changed = max_step: 'max_step' is not a deck key \(did you mean 'max_steps'" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --train.allow_changed=max_step
expect_exit 0 "allow_changed" -- "$TRIDENT" train --help

# ---- resumes with a changed deck ------------------------------------------------------------------
expect_exit 0 "stopping after step 3" -- "$TRIDENT" train --config "$WORK/deck.ini" --train.stop_at_step=3
ck="$WORK/run/checkpoints/step_00000003.h5"
cp "$ck" "$WORK/ck3.h5"
# resume_from TAG ARGS...: resume the step-3 checkpoint into a run directory of its own.
resume_from() { local tag="$1"; shift; "$TRIDENT" train --config "$WORK/deck.ini" --train.out_dir="$WORK/r_$tag" \
  --train.stop_at_step=4 --resume "$ck" "$@"; }

# Refused: the LR schedule (with the jump), the data, the seed; several at once, each named.
expect_exit 2 "\[train\] max_steps 6 -> 8: refused; the LR schedule changes under the step counter: the LR of step 4 goes from [0-9.e-]+ to [0-9.e-]+ \(\+[0-9]+%\)" -- \
  resume_from steps --train.max_steps=8
expect_exit 2 "allow the change with --train.allow_changed=train.max_steps" -- resume_from steps --train.max_steps=8
# Another token file of the same tokenizer (the same characters in another order): refused.
tac "$WORK/text.txt" > "$WORK/text_other.txt"
"$TRIDENT" prep --output "$WORK/tok_other.h5" "$WORK/text_other.txt" >/dev/null || { echo "prep failed"; exit 1; }
expect_exit 2 "\[data\] path $WORK/tok.h5 -> $WORK/tok_other.h5: refused; consumed_samples \(24\) would index another token file" -- \
  resume_from data --data.path="$WORK/tok_other.h5"
# A copy, or the file named from another working directory: the tokens the checkpoint recorded
# (its content hash), so the same data, listed and resumed.
cp "$WORK/tok.h5" "$WORK/tok_copy.h5"
expect_exit 0 "without changing the training math: .*\[data\] path $WORK/tok.h5 -> $WORK/tok_copy.h5" -- \
  resume_from data_copy --data.path="$WORK/tok_copy.h5"
expect_exit 2 "--train.allow_changed=train.lr,train.seed" -- resume_from two --train.lr=1e-3 --train.seed=5
check "refused resumes wrote no checkpoint" test -z "$(ls "$WORK"/r_steps/checkpoints/*.h5 "$WORK"/r_data/checkpoints/*.h5 \
  "$WORK"/r_two/checkpoints/*.h5 2>/dev/null)"
check "the checkpoint is untouched" cmp -s "$ck" "$WORK/ck3.h5"
# Every rank reaches the same verdict: one message, exit 2.
out="$("$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/deck.ini" --train.out_dir="$WORK/r_np2" --resume "$ck" \
  --train.seed=5 2>&1)"; rc=$?
check "two ranks refuse alike (exit $rc)" test "$rc" -eq 2
check "... with the key named once" test "$(grep -c "\[train\] seed 1337 -> 5: refused" <<<"$out")" -eq 1

# Allowed: the same changes pass with [train] allow_changed (command line or deck), with a warning.
expect_exit 0 "warning: .*\[train\] max_steps 6 -> 8: takes effect \(allowed by \[train\] allow_changed\); .*the LR of step 4 goes from" -- \
  resume_from steps_ok --train.max_steps=8 --train.allow_changed=max_steps
expect_exit 0 "\[data\] path .* takes effect \(allowed by \[train\] allow_changed\)" -- \
  resume_from data_ok --data.path="$WORK/tok_other.h5" --train.allow_changed=data.path
sed 's/^log_interval = 1$/log_interval = 1\nallow_changed = seed, lr/' "$WORK/deck.ini" > "$WORK/deck_allow.ini"
expect_exit 0 "\[train\] seed 1337 -> 5: takes effect \(allowed" -- "$TRIDENT" train --config "$WORK/deck_allow.ini" \
  --train.out_dir="$WORK/r_deck_ok" --train.stop_at_step=4 --resume "$ck" --train.seed=5 --train.lr=1e-3
check "an allowed resume continues the run" test -f "$WORK/r_steps_ok/checkpoints/step_00000004.h5"

# Warned: hyperparameters the restart state stays valid under.
expect_exit 0 "warning: .*\[train\] eps 1e-08 -> 1e-06: takes effect; the optimisation changes from step 4" -- \
  resume_from eps --train.eps=1e-6 --train.weight_decay=0.05
expect_exit 0 "\[train\] global_batch_size 8 -> 16: takes effect; from step 4 each step takes 16 sequences; the data continues at sample 24" -- \
  resume_from gbs --train.global_batch_size=16
# Listed only: layout and run control; the same file named another way is no change of data.
expect_exit 0 "without changing the training math: \[train\] micro_batch_size 8 -> 4" -- \
  resume_from mb --train.micro_batch_size=4
expect_exit 0 "without changing the training math: .*\[data\] path $WORK/tok.h5 -> $WORK/./tok.h5" -- \
  resume_from same_file --data.path="$WORK/./tok.h5"
# The model's shape: refused whatever allow_changed says (the tensors do not fit).
expect_exit 2 "another model: \[model\] n_embd = 32 in the checkpoint, 64 in this run" -- \
  resume_from shape --model.n_embd=64 --train.allow_changed=n_embd
# No hyperparameter changed: nothing warned.
out="$(resume_from same 2>&1)"; rc=$?
check "a resume with only run control changed runs (exit $rc)" test "$rc" -eq 0
check "... and warns of nothing" test -z "$(grep -E "warning|refused" <<<"$out")"


# The same path, other tokens: the text's lines reversed (the same characters, so the same char
# vocabulary) prepped over the token file. The checkpoint records the file's content hash.
cp "$WORK/tok.h5" "$WORK/tok_orig.h5"
tac "$WORK/text.txt" > "$WORK/text_rev.txt"
"$TRIDENT" prep --force --output "$WORK/tok.h5" "$WORK/text_rev.txt" >/dev/null || echo "FAIL prep of the reversed text"
check "the reversed text has the same char vocabulary (the case this check is for)" \
  cmp -s <(h5dump -d /vocab "$WORK/tok.h5" 2>/dev/null | grep -v HDF5) <(h5dump -d /vocab "$WORK/tok_orig.h5" 2>/dev/null | grep -v HDF5)
expect_exit 2 "token file '$WORK/tok.h5' holds other tokens than the file the checkpoint was trained on \(content hash [0-9a-f]{16}, the checkpoint's [0-9a-f]{16}\): consumed_samples \([0-9]+\) would index other data.*--train.allow_changed=data.path" -- \
  resume_from other_tokens
check "... and nothing was written" test ! -e "$WORK/r_other_tokens/checkpoints/step_00000004.h5"
expect_exit 0 "holds other tokens .*continuing as \[train\] allow_changed names data.path" -- \
  resume_from other_tokens_allowed --train.allow_changed=data.path
# The same tokens split otherwise (prepped again with another --val-fraction): the content hash
# covers train then val as one stream, so the checkpoint's train split size tells them apart.
"$TRIDENT" prep --force --val-fraction 0.2 --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || echo "FAIL prep at 0.2"
check "the re-split file has the original's content hash (the case this check is for)" \
  test "$(h5dump -a content_xxh64 "$WORK/tok.h5" | grep '(0)')" = "$(h5dump -a content_xxh64 "$WORK/tok_orig.h5" | grep '(0)')"
expect_exit 2 "token file '$WORK/tok.h5' holds the same tokens as the file the checkpoint was trained on, split otherwise: its train split has [0-9]+ tokens, the checkpoint's [0-9]+ \(prepped again with another --val-fraction\?\): consumed_samples \([0-9]+\) would index other data" -- \
  resume_from resplit
cp "$WORK/tok_orig.h5" "$WORK/tok.h5"
expect_exit 0 "resumed from" -- resume_from orig_tokens_again

# Another tokenizer is never an allowed data change: ids would mean other characters, and the next
# checkpoint would record the new file's tokenizer for the old model. Refused even with
# allow_changed = data.path (here another char vocabulary, from another text).
printf 'zyx wvu tsr qpo nml kji hgf edc ba\n%.0s' $(seq 300) > "$WORK/other.txt"
"$TRIDENT" prep --output "$WORK/other_vocab.h5" "$WORK/other.txt" >/dev/null || echo "FAIL prep of the other text"
# The model's vocabulary size as the checkpoint has it (the deck takes it from the token file), so
# the deck check passes and the tokenizer check is what refuses.
vocab="$(h5dump -a vocab_size "$WORK/tok.h5" | sed -n 's/^ *(0): *\([0-9]*\).*/\1/p')"
expect_exit 2 "cannot resume from .* on token file '$WORK/other_vocab.h5': the checkpoint's char vocabulary differs from the token file's .*token ids would mean other characters" -- \
  resume_from other_vocab --data.path="$WORK/other_vocab.h5" --train.allow_changed=data.path --model.vocab_size="$vocab"
check "... and nothing was written" test -z "$(ls "$WORK"/r_other_vocab/checkpoints/*.h5 2>/dev/null)"

echo "$FAILED failed"
exit "$FAILED"
