#!/usr/bin/env bash
# Bad input never crashes or hangs: each mistake ends with a message naming the problem and the
# documented exit status (2 = bad deck or usage, 1 = runtime error such as a missing file).
set -u
source "$(dirname "$0")/cli_lib.sh"

make_text "$WORK/text.txt"
"$TRIDENT" prep --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || { echo "prep failed"; exit 1; }
tiny_deck "$WORK/deck.ini" "$WORK/run" "$WORK/tok.h5"

expect_exit 2 "usage: trident" -- "$TRIDENT"
expect_exit 0 "commands:" -- "$TRIDENT" --help
expect_exit 2 "unknown command 'trian'" -- "$TRIDENT" trian
expect_exit 0 "global_batch_size" -- "$TRIDENT" train --help
expect_exit 0 "--tokenizer" -- "$TRIDENT" prep --help
expect_exit 0 "--temperature" -- "$TRIDENT" sample --help
expect_exit 2 "no input deck" -- "$TRIDENT" train
expect_exit 2 "cannot open deck file '$WORK/nope.ini'" -- "$TRIDENT" train --config "$WORK/nope.ini"

cp "$WORK/deck.ini" "$WORK/unknown.ini"; printf '[model]\nn_layers = 3\n' >> "$WORK/unknown.ini"
expect_exit 2 "unknown key 'n_layers' in section \[model\]" -- "$TRIDENT" train --config "$WORK/unknown.ini"
expect_exit 2 "bad value for 'lr' in section \[train\]" -- "$TRIDENT" train --config "$WORK/deck.ini" --train.lr=fast
expect_exit 2 "n_embd = 30 is not divisible by \[model\] n_head = 4" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --model.n_embd=30 --model.n_head=4
expect_exit 2 "does not match the number of ranks \(2\)" -- \
  "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/deck.ini" --parallel.dp=3
expect_exit 2 "micro-batches must be whole" -- "$TRIDENT" train --config "$WORK/deck.ini" --train.micro_batch_size=3
expect_exit 2 "tp = 2 does not divide \[model\] n_head = 3" -- \
  "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/deck.ini" --parallel.tp=2 --model.n_head=3 --model.n_embd=33
expect_exit 2 "pp_layers = 1,2 must list pp = 2 counts summing to \[model\] n_layer = 2" -- \
  "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/deck.ini" --parallel.pp=2 --parallel.pp_layers=1,2
expect_exit 2 "pp_schedule = zigzag: expected 1f1b or gpipe" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --parallel.pp_schedule=zigzag
expect_exit 2 "zero_stage = 4 must be 0, 1, 2 or 3" -- "$TRIDENT" train --config "$WORK/deck.ini" --parallel.zero_stage=4
expect_exit 2 "shard_group_size = 3 does not divide dp = 2" -- \
  "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/deck.ini" --parallel.zero_stage=3 --parallel.shard_group_size=3
expect_exit 2 "param_dtype = fp16: expected float or bf16" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --train.param_dtype=fp16
expect_exit 2 "activation_checkpointing = all: expected none or block" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --train.activation_checkpointing=all
expect_exit 0 "optimizer .* MiB" -- "$TRIDENT" train --config "$WORK/deck.ini" --dry-run 8 --parallel.zero_stage=3
expect_exit 0 "ZeRO paper formula" -- "$TRIDENT" train --config "$WORK/deck.ini" --dry-run
check "--dry-run allocates nothing and writes no run directory" test ! -e "$WORK/run"
expect_exit 1 "token file '$WORK/missing.h5' does not exist" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --data.path="$WORK/missing.h5"
expect_exit 1 "not an HDF5 file" -- "$TRIDENT" train --config "$WORK/deck.ini" --data.path="$WORK/text.txt"
expect_exit 2 "vocab_size = 3 is smaller" -- "$TRIDENT" train --config "$WORK/deck.ini" --model.vocab_size=3
expect_exit 1 "cannot read input file" -- "$TRIDENT" prep --output "$WORK/x.h5" "$WORK/none.txt"

# A real checkpoint, then resumes that must be refused.
expect_exit 0 "checkpoint: .*step_00000003.h5" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --train.max_steps=3
ck="$WORK/run/checkpoints/step_00000003.h5"
expect_exit 1 "another model: \[model\] n_embd = 32 in the checkpoint, 64 in this run" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --model.n_embd=64 --resume "$ck"
expect_exit 1 "checkpoint '$WORK/absent.h5' does not exist" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --resume "$WORK/absent.h5"
head -c 5000 "$ck" > "$WORK/truncated.h5"
expect_exit 1 "truncated|not an HDF5|cannot open" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --resume "$WORK/truncated.h5"
expect_exit 1 "no checkpoint found" -- "$TRIDENT" sample --checkpoint "$WORK"
expect_exit 2 "not in the vocabulary" -- "$TRIDENT" sample --checkpoint "$ck" --prompt $'\x01'
check "the refused resumes left the checkpoint intact" cmp -s "$ck" "$WORK/run/checkpoints/step_00000003.h5"

echo "$FAILED failed"
exit "$FAILED"
