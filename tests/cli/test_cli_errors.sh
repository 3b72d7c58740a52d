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
# A deck without --config, and an example deck named from outside the tree: the message says what to type.
expect_exit 2 "unknown argument '$WORK/deck.ini': give the deck with --config" -- "$TRIDENT" train "$WORK/deck.ini"
expect_exit 2 "unknown argument 'my.ini': give the deck with --config" -- "$TRIDENT" plan my.ini
mkdir -p "$WORK/root/input" "$WORK/elsewhere" && cp "$WORK/deck.ini" "$WORK/root/input/example.ini"
expect_exit 2 "cannot open deck file 'input/example.ini'; the installed example deck is --config $WORK/root/input/example.ini" -- \
  env -C "$WORK/elsewhere" TRIDENT_ROOT="$WORK/root" "$TRIDENT" train --config input/example.ini
expect_exit 2 "cannot open deck file 'nope.ini' \(relative to the current directory, $WORK/elsewhere\)" -- \
  env -C "$WORK/elsewhere" TRIDENT_ROOT="$WORK/root" "$TRIDENT" train --config nope.ini

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
expect_exit 2 "comm_backend = gloo: expected auto, mpi or nccl" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --parallel.comm_backend=gloo
# NCCL where it cannot run fails alike on every rank: a deck error (2) in a build without NCCL, a
# runtime error (1) on a machine without a GPU.
if ! command -v nvidia-smi >/dev/null 2>&1; then
  [ "${TRIDENT_HAVE_NCCL:-FALSE}" = TRUE ] && want=1 || want=2
  expect_exit "$want" "\[parallel\] comm_backend = nccl: " -- \
    "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/deck.ini" --parallel.comm_backend=nccl
fi
expect_exit 0 "collectives: dp mpi, tp mpi, pp mpi, mp mpi, world mpi \(\[parallel\] comm_backend = mpi\)" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --parallel.comm_backend=mpi --train.max_steps=1 --train.out_dir="$WORK/run_mpi"
expect_exit 2 "zero_stage = 4 must be 0, 1, 2 or 3" -- "$TRIDENT" train --config "$WORK/deck.ini" --parallel.zero_stage=4
expect_exit 2 "shard_group_size = 3 does not divide dp = 2" -- \
  "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/deck.ini" --parallel.zero_stage=3 --parallel.shard_group_size=3
expect_exit 2 "param_dtype = half: write fp16" -- "$TRIDENT" train --config "$WORK/deck.ini" --train.param_dtype=half
expect_exit 2 "\[train\] loss_scale_backoff = 2 must be between 0 and 1" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --train.param_dtype=fp16 --train.loss_scale_backoff=2
expect_exit 2 "activation_checkpointing = all: expected none or block" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --train.activation_checkpointing=all
expect_exit 0 "optimizer .* MiB" -- "$TRIDENT" train --config "$WORK/deck.ini" --dry-run 8 --parallel.zero_stage=3 \
  --train.out_dir="$WORK/dry"
expect_exit 0 "ZeRO paper formula" -- "$TRIDENT" train --config "$WORK/deck.ini" --dry-run --train.out_dir="$WORK/dry"
check "--dry-run allocates nothing and writes no run directory" test ! -e "$WORK/dry"
# Counts beyond what the code holds are refused, not wrapped into another value.
expect_exit 2 "--dry-run 99999999999: expected an integer from 1 to 1073741823" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --dry-run 99999999999
expect_exit 2 "global_batch_size = 4294967298 is larger than 2147483647" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --dry-run --train.global_batch_size=4294967298
expect_exit 1 "token file '$WORK/missing.h5' does not exist" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --data.path="$WORK/missing.h5"
expect_exit 1 "not an HDF5 file" -- "$TRIDENT" train --config "$WORK/deck.ini" --data.path="$WORK/text.txt"
expect_exit 2 "vocab_size = 3 is smaller" -- "$TRIDENT" train --config "$WORK/deck.ini" --model.vocab_size=3
expect_exit 1 "cannot read input file '$WORK/none.txt': No such file or directory" -- "$TRIDENT" prep --output "$WORK/x.h5" "$WORK/none.txt"

# A real checkpoint, then resumes that must be refused.
expect_exit 0 "checkpoint: .*step_00000003.h5" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --train.max_steps=3
ck="$WORK/run/checkpoints/step_00000003.h5"
expect_exit 2 "another model: \[model\] n_embd = 32 in the checkpoint, 64 in this run" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --model.n_embd=64 --resume "$ck"
expect_exit 1 "checkpoint '$WORK/absent.h5' does not exist" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --resume "$WORK/absent.h5"
head -c 5000 "$ck" > "$WORK/truncated.h5"
expect_exit 1 "cannot open checkpoint: '$WORK/truncated.h5' is truncated: 5000 of its [0-9]+ bytes are there \(a copy cut short" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --resume "$WORK/truncated.h5"
expect_exit 1 "no checkpoint found" -- "$TRIDENT" sample --checkpoint "$WORK"
expect_exit 2 "not in the vocabulary" -- "$TRIDENT" sample --checkpoint "$ck" --prompt $'\x01'
check "the refused resumes left the checkpoint intact" cmp -s "$ck" "$WORK/run/checkpoints/step_00000003.h5"

# ---- findings of the first review, each a regression test ----------------------------------------
expect_exit 2 "already holds checkpoints \(up to step 3\): pass --resume" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --train.max_steps=3
expect_exit 2 "\[train\] max_steps 3 -> 4: refused" -- "$TRIDENT" train --config "$WORK/deck.ini" --train.max_steps=4 --resume "$WORK/run"
expect_exit 0 "resumed from .*step_00000003.h5" -- "$TRIDENT" train --config "$WORK/deck.ini" --train.max_steps=4 \
  --train.allow_changed=max_steps --resume "$WORK/run"
expect_exit 2 "\[train\] lr = inf is not a finite number" -- "$TRIDENT" train --config "$WORK/deck.ini" --train.lr=inf
expect_exit 1 "not finite|diverged" -- "$TRIDENT" train --config "$WORK/deck.ini" --train.out_dir="$WORK/nan" \
  --train.lr=1e30 --train.min_lr=0 --checkpoint.interval=1 --train.max_steps=3
check "no committed checkpoint holds a non-finite value" /usr/bin/python3 - "$WORK/nan/checkpoints" <<'PYEOF'
import glob, sys, h5py, numpy as np
for path in glob.glob(sys.argv[1] + "/step_*.h5"):
    with h5py.File(path, "r") as f:
        for kind in f["shards"]:
            for shard in f["shards"][kind]:
                assert np.isfinite(f["shards"][kind][shard][...]).all(), (path, kind, shard)
PYEOF
expect_exit 2 "is also an input" -- "$TRIDENT" prep --output "$WORK/text.txt" "$WORK/text.txt"
expect_exit 2 "refusing to overwrite .*not a Trident token file" -- "$TRIDENT" prep --output "$ck" "$WORK/text.txt"
check "prep did not touch the checkpoint" cmp -s "$ck" "$WORK/run/checkpoints/step_00000003.h5"
expect_exit 2 "is a directory" -- "$TRIDENT" prep --output "$WORK/x.h5" "$WORK"
expect_exit 0 "" -- "$TRIDENT" prep --output "$WORK/new/data/tok.h5" "$WORK/text.txt"
check "prep creates the output's directory (data/ in a fresh clone)" test -f "$WORK/new/data/tok.h5"
touch "$WORK/afile"
expect_exit 2 "--output '$WORK/afile/tok.h5': '$WORK/afile' is not a directory" -- "$TRIDENT" prep --output "$WORK/afile/tok.h5" "$WORK/text.txt"
expect_exit 2 "Kokkos rejected its options --kokkos-threads=abc" -- "$TRIDENT" --kokkos-threads=abc train --config "$WORK/deck.ini"
expect_exit 2 "deck '$WORK' is not a file" -- "$TRIDENT" train --config "$WORK"
expect_exit 2 "'abc' is not a token id" -- "$TRIDENT" sample --checkpoint "$ck" --prompt-ids 1,abc
expect_exit 2 "--prompt-ids: the list is empty" -- "$TRIDENT" sample --checkpoint "$ck" --prompt-ids ""
expect_exit 2 "--prompt and --prompt-ids both given" -- "$TRIDENT" sample --checkpoint "$ck" --prompt-ids 1 --prompt a
# An argument given twice with two values is an error, not "the last wins" (deck keys on the
# command line may be repeated: job scripts append to a user's arguments).
cp "$WORK/deck.ini" "$WORK/deck2.ini"
expect_exit 2 "--config given twice \($WORK/deck.ini, $WORK/deck2.ini\)" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --config "$WORK/deck2.ini" --print-config
expect_exit 0 "n_layer" -- "$TRIDENT" train --config "$WORK/deck.ini" --config "$WORK/deck.ini" --print-config
expect_exit 2 "--resume given two checkpoints \(a.h5, b.h5\)" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --resume a.h5 --resume=b.h5
expect_exit 2 "^trident sample: error: --temperature nan: must be a finite number >= 0" -- "$TRIDENT" sample --checkpoint "$ck" --temperature nan
expect_exit 2 "--top-k -1: must be >= 0" -- "$TRIDENT" sample --checkpoint "$ck" --top-k=-1
expect_exit 2 "--seed -5: must be >= 0" -- "$TRIDENT" sample --checkpoint "$ck" --seed=-5
# An out_dir that cannot be made: what stands in the way is named (exit 2), never a raw
# filesystem_error; a missing token file under --dry-run is one message, not an MPI abort.
touch "$WORK/afile"; ln -sfn "$WORK/nowhere" "$WORK/dangling_out"
expect_exit 2 "\[train\] out_dir '$WORK/afile/sub' cannot be created: '$WORK/afile' is a file, not a directory" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --train.out_dir="$WORK/afile/sub"
expect_exit 2 "\[train\] out_dir '$WORK/dangling_out' is a symbolic link to nothing" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --train.out_dir="$WORK/dangling_out"
expect_exit 2 "\[train\] out_dir '$WORK/dangling_out/run' cannot be created: '$WORK/dangling_out' is a symbolic link to nothing" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --train.out_dir="$WORK/dangling_out/run"
# A run's checkpoints/ given as out_dir is named (a run there started at step 0 beside them).
mkdir -p "$WORK/ckonly" && printf 'step_00000003.h5\n' > "$WORK/ckonly/latest"
expect_exit 2 "out_dir '$WORK/ckonly' holds checkpoints itself .*give the run directory \\('$WORK'\\) as out_dir" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --train.out_dir="$WORK/ckonly" --resume
check "... and nothing is written there" test "$(ls -A "$WORK/ckonly")" = latest
expect_exit 1 "token file '$WORK/no_tokens.h5' does not exist" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --data.path="$WORK/no_tokens.h5" --dry-run 2
check "... without an MPI abort banner" bash -c "! '$TRIDENT' train --config '$WORK/deck.ini' --data.path='$WORK/no_tokens.h5' --dry-run 2 2>&1 | grep -q Abort"
check "train --help does not print Kokkos's help" bash -c "! '$TRIDENT' train --help | grep -qi kokkos"
/usr/bin/python3 - "$WORK/tok.h5" "$WORK/bogus.h5" <<'PYEOF'
import sys, shutil, h5py
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    f.attrs["tokenizer"] = "bogus"
PYEOF
expect_exit 1 "unknown tokenizer 'bogus'" -- "$TRIDENT" train --config "$WORK/deck.ini" --data.path="$WORK/bogus.h5"
cp "$ck" "$WORK/kinds.h5"
/usr/bin/python3 -c "import h5py, sys; f = h5py.File(sys.argv[1], 'r+'); f.attrs['kinds'] = b'param'" "$WORK/kinds.h5"
expect_exit 1 "checksums does not have one row per shard" -- "$TRIDENT" ckpt verify "$WORK/kinds.h5"
touch "$WORK/run/checkpoints/step_99999999999999999999999.h5"
expect_exit 0 "step_00000004.h5" -- "$TRIDENT" ckpt ls "$WORK/run"
mkdir -p "$WORK/ldir/checkpoints/latest"
expect_exit 1 "latest' is not a file" -- "$TRIDENT" train --config "$WORK/deck.ini" --train.out_dir="$WORK/ldir"
touch "$WORK/afile"
expect_exit 2 "out_dir '$WORK/afile' exists and is not a directory" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --train.out_dir="$WORK/afile"
# Two jobs on one run directory: the second is refused while the first holds the lock.
"$TRIDENT" train --config "$WORK/deck.ini" --train.out_dir="$WORK/busy" --train.max_steps=100000 >/dev/null 2>&1 &
busy=$!
for _ in $(seq 50); do [ -s "$WORK/busy/.trident.lock" ] && break; sleep 0.2; done
expect_exit 2 "is in use by another Trident job \(host .* pid $busy\)" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --train.out_dir="$WORK/busy" --train.max_steps=100000 --resume
kill -9 "$busy" 2>/dev/null; wait "$busy" 2>/dev/null

# ---- messages that pointed the wrong way (issue 16), each a regression test ------------------------
# The key a user mistyped on the command line is not blamed on the deck; a near miss is named.
expect_exit 2 "unknown key 'lrr' in section \[train\] given on the command line .*did you mean 'lr' in section \[train\]" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --train.lrr=3
printf '[model]\nn_layer = 2\nn_hed = 2\n' > "$WORK/typo.ini"
expect_exit 2 "typo.ini', line 3: unknown key 'n_hed' in section \[model\] \(did you mean 'n_head'" -- \
  "$TRIDENT" train --config "$WORK/typo.ini"
printf '[model]\nn_layer 2\n' > "$WORK/syntax.ini"
expect_exit 2 "syntax.ini', line 2: syntax error" -- "$TRIDENT" train --config "$WORK/syntax.ini"
# A missing token file: how to make one, and where a relative path points.
(cd "$WORK" && expect_exit 1 "token file 'nope.h5' does not exist .*relative to the working directory, here '$WORK'.*trident prep --output nope.h5" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --data.path=nope.h5)
# prep refuses what no run can train on, once and without a doubled prefix.
printf 'ab' > "$WORK/two.txt"
expect_exit 2 "^trident prep: error: the input gives a training split of 1 token" -- \
  "$TRIDENT" prep --output "$WORK/two.h5" "$WORK/two.txt"
check "prep wrote no token file for it" test ! -e "$WORK/two.h5"
expect_exit 0 "--val-fraction arg \(=0.1\) " -- "$TRIDENT" prep --help
expect_exit 0 "block_size up to [0-9]+" -- "$TRIDENT" prep --output "$WORK/again.h5" "$WORK/text.txt"
# One rank is one rank; sampling says what it samples from (on stderr, the sample alone on stdout).
expect_exit 0 "\(1 rank\)" -- "$TRIDENT" train --config "$WORK/deck.ini" --train.out_dir="$WORK/one" --train.max_steps=1
expect_exit 0 "sampling from $ck \(step 3, " -- "$TRIDENT" sample --checkpoint "$ck" --tokens 5
check "the sample's stdout holds no log line" bash -c "! \"$TRIDENT\" sample --checkpoint \"$ck\" --tokens 5 2>/dev/null | grep -q 'sampling from'"

# Every script a user runs answers --help with its own text, at once, and starts nothing.
repo="$(cd "$(dirname "$0")/../.." && pwd)"
for script in "$repo"/tools/*.sh "$repo"/jobscripts/chain.sh; do
  [ "$(basename "$script")" = script_help.sh ] && continue
  out="$(cd "$WORK" && timeout 10 bash "$script" --help 2>&1)"; rc=$?
  check "$(basename "$script") --help: exit 0, its own usage text (not a tool's, not its code)" \
    test "$rc" = 0 -a -n "$out" -a "$(head -c 1 <<<"$out")" != "#" -a -z "$(grep -E '^(set -|Usage$|Usage: ctest)' <<<"$out")"
done
for script in "$repo"/tools/plot_*.py "$repo"/tools/trident_ckpt.py; do
  out="$(cd "$WORK" && timeout 20 "$script" --help 2>&1)"; rc=$?
  check "$(basename "$script") --help: exit 0 and a usage line" test "$rc" = 0 -a -n "$(grep '^usage: ' <<<"$out")"
done
# An option given without its value is a usage error (exit 2) naming it, not bash's "$2: unbound
# variable" (exit 1), in every script whose options take values.
for script in "$repo"/tools/*.sh; do
  [ "$(basename "$script")" = script_help.sh ] && continue
  grep -q 'need_value "\$@"' "$script" || continue
  opt="$(grep -o -m1 -E '^ +--[a-z-]+\) [a-z_]+=\$\(need_value' "$script" | sed -E 's/^ +(--[a-z-]+)\).*/\1/')"
  out="$(cd "$WORK" && timeout 10 bash "$script" "$opt" 2>&1)"; rc=$?
  check "$(basename "$script") $opt without a value: exit 2 naming it (got $rc)" \
    test "$rc" = 2 -a -n "$(grep -F -- "$opt needs a value" <<<"$out")"
done
# A mistyped option is a usage error (exit 2) that names it, and starts nothing.
expect_exit 2 "unknown option '--bogus'" -- bash "$repo/tools/compare_torch.sh" --bogus
expect_exit 2 "unknown option '--bogus'" -- bash "$repo/tools/device_bundle.sh" --bogus
mkdir -p "$WORK/zg" && printf 'a,b\n1,2\n' > "$WORK/zg/zero_memory.csv"
expect_exit 1 "zero_memory.csv', line 2: not a row of tools/bench_zero.sh" -- "$repo/tools/plot_zero.py" "$WORK/zg"
expect_exit 1 "is not a folder of benchmark results" -- "$repo/tools/plot_zero.py" "$WORK/no_such_results"
expect_exit 1 "cannot read '$WORK/truncated.h5'" -- "$repo/tools/trident_ckpt.py" "$WORK/truncated.h5"
# A token file cut short (an interrupted copy): named, with the way out.
head -c 3000 "$WORK/tok.h5" > "$WORK/tok_cut.h5"
expect_exit 1 "token file '$WORK/tok_cut.h5'.*damaged or truncated.*trident prep" -- \
  "$TRIDENT" train --config "$WORK/deck.ini" --data.path="$WORK/tok_cut.h5" --train.out_dir="$WORK/cut"

# jobscripts/train.sbatch run by hand with bad settings: exit 2 before any rank starts.
sbatch_script="$(cd "$(dirname "$0")/../.." && pwd)/jobscripts/train.sbatch"
for n in abc 0 -3; do
  expect_exit 2 "SLURM_NTASKS='$n' is not a positive number of tasks" -- env -C "$WORK" SLURM_NTASKS="$n" \
    TRIDENT_BIN="$TRIDENT" TRIDENT_DECK="$WORK/deck.ini" bash "$sbatch_script"
done
expect_exit 2 "trident executable '$WORK' not found, not executable or a directory" -- env -C "$WORK" \
  TRIDENT_BIN="$WORK" TRIDENT_DECK="$WORK/deck.ini" bash "$sbatch_script"

# ---- the tools' option and file checks (tools/*.sh, *.py, jobscripts): refused before any work ----
# trident-plot: where the plot cannot go, and a metrics.csv whose step or train_loss is not a number.
plot_run="$repo/tools/plot_run.py"
expect_exit 1 "cannot write $WORK/nonexistdir/x.png: no directory $WORK/nonexistdir" -- \
  "$plot_run" "$WORK/run" -o "$WORK/nonexistdir/x.png"
mkdir -p "$WORK/plotdir/metrics.png" && cp "$WORK/run/metrics.csv" "$WORK/plotdir/"
expect_exit 1 "$WORK/plotdir/metrics.png is a directory" -- "$plot_run" "$WORK/plotdir"
printf 'step,train_loss\n1,2.5\n2,abc\n' > "$WORK/nonnum.csv"
expect_exit 1 "nonnum.csv: not a metrics.csv of trident \(row 2 \(step 2\): train_loss 'abc' is not a number\)" -- \
  "$plot_run" "$WORK/nonnum.csv" -o "$WORK/nonnum.png"
# trident_ckpt.py: --npz into a missing folder, over an existing file (only with --force), a run directory.
reader="$repo/tools/trident_ckpt.py"
expect_exit 1 "--npz $WORK/nonexistdir/x.npz: no directory" -- "$reader" "$ck" --npz "$WORK/nonexistdir/x.npz"
: > "$WORK/exists.npz"
expect_exit 1 "--npz $WORK/exists.npz exists: not replaced \(add --force" -- "$reader" "$ck" --npz "$WORK/exists.npz"
check "trident_ckpt.py left the existing file alone" test ! -s "$WORK/exists.npz"
expect_exit 0 "wrote $WORK/exists.npz" -- "$reader" "$ck" --npz "$WORK/exists.npz" --force
check "no temporary file left beside the archive" bash -c "! ls '$WORK' | grep -q 'exists.npz.*tmp'"
expect_exit 0 "checkpoints/step_00000004.h5: step 4" -- "$reader" "$WORK/run"
expect_exit 1 "'$WORK/zg' is a directory without checkpoints; give a checkpoint file \(e.g. $WORK/zg/checkpoints/step_NNNNNNNN.h5\)" -- \
  "$reader" "$WORK/zg"
# machine_file.sh: values checked before any benchmark; --reuse of raw results cut short.
mf="$repo/tools/machine_file.sh"
expect_exit 2 "--ranks '0': expected a positive whole number" -- bash "$mf" --ranks 0 --out "$WORK/m.ini"
expect_exit 2 "--max-bytes 'abc': expected a size in bytes" -- bash "$mf" --max-bytes abc --out "$WORK/m.ini"
expect_exit 2 "--min-time '0': expected a positive number of seconds" -- bash "$mf" --min-time 0 --out "$WORK/m.ini"
expect_exit 2 "--offload-dir '$WORK/afile': not a directory" -- bash "$mf" --offload-dir "$WORK/afile" --out "$WORK/m.ini"
expect_exit 2 "--out '$WORK' is a directory" -- bash "$mf" --out "$WORK"
# --ranks 1 (the default on a one-core node) measures no collectives: refused before the kernels run.
expect_exit 2 "--ranks '1': the collectives need at least 2 ranks" -- bash "$mf" --ranks 1 --out "$WORK/m.ini"
# The name makes paths: one plain name, never a way out of input/machines/ and runs/machine/.
expect_exit 2 "--name '../../../escape': expected a plain name \(letters, digits" -- \
  bash "$mf" --name ../../../escape --ranks 2 --out "$WORK/m.ini"
expect_exit 2 "--name '': expected a plain name" -- bash "$mf" --name "" --ranks 2 --out "$WORK/m.ini"
expect_exit 2 "--name '.hidden': expected a plain name" -- bash "$mf" --name .hidden --ranks 2 --out "$WORK/m.ini"
# The note is one line of the file: a line break would add keys (given twice); '#' and ';' would end it.
expect_exit 2 "--note .*: expected one line of text \(no newlines, carriage returns" -- \
  bash "$mf" --ranks 2 --note $'a\n[machine]\ndevices_per_node = 9' --out "$WORK/m.ini"
expect_exit 2 "--note .*: expected one line of text" -- bash "$mf" --ranks 2 --note $'quiet\r' --out "$WORK/m.ini"
expect_exit 2 "--note 'quiet; load 1': '#' and ';' start a comment" -- bash "$mf" --ranks 2 --note 'quiet; load 1' --out "$WORK/m.ini"
check "machine_file.sh wrote nothing for refused options" test ! -e "$WORK/m.ini"
# --out: an existing file only with --force; never a symbolic link or a file of the repository.
echo keep > "$WORK/mf_exists.ini"
expect_exit 2 "--out '$WORK/mf_exists.ini' exists: not replaced \(add --force" -- \
  bash "$mf" --ranks 2 --out "$WORK/mf_exists.ini"
check "machine_file.sh left the existing file alone" grep -qx keep "$WORK/mf_exists.ini"
ln -s "$WORK/mf_exists.ini" "$WORK/mf_link.ini"
expect_exit 2 "--out '$WORK/mf_link.ini' is a symbolic link" -- bash "$mf" --ranks 2 --out "$WORK/mf_link.ini" --force
if git -C "$repo" ls-files --error-unmatch tools/machine_file.sh >/dev/null 2>&1; then
  # --ranks 1 as well: were the check to let it through, the run still stops before writing anything.
  expect_exit 2 "--out '$mf' is a file tracked by git, not a machine file this tool wrote: not replaced" -- \
    bash "$mf" --reuse --force --ranks 1 --out "$mf"
  check "machine_file.sh is still itself and executable" bash -c "test -x '$mf' && head -n 1 '$mf' | grep -q '^#!'"
fi
build_dir="$(dirname "$(dirname "$TRIDENT")")"
if [ -x "$build_dir/bin/bench_kernels" ] && [ -x "$build_dir/bin/bench_collectives" ] && [ -x "$build_dir/bin/bench_offload_io" ]; then
  # A copy of the script, so that its runs/machine/<name>/ lies in $WORK, not in the source tree.
  mkdir -p "$WORK/mfcopy/tools" "$WORK/mfcopy/runs/machine/cut"
  cp "$mf" "$repo/tools/script_help.sh" "$WORK/mfcopy/tools/"
  printf '{"context": {}, "benchmarks": [{"name": "BM_Lin' > "$WORK/mfcopy/runs/machine/cut/kernels.json"
  expect_exit 1 "kernels.json cannot be read as a benchmark result .*rerun without --reuse" -- \
    bash "$WORK/mfcopy/tools/machine_file.sh" --name cut --ranks 2 --reuse --build "$build_dir" --out "$WORK/cut.ini"
  check "machine_file.sh --reuse wrote no machine file from it" test ! -e "$WORK/cut.ini"
  # Complete raw results: an existing machine file is replaced with --force only, whole (renamed into place).
  mkdir -p "$WORK/mfcopy/runs/machine/ok"
  rate() { printf '{"name": "BM_%s", "%s": 1e9, "cpu_time": 1, "real_time": 1}' "$1" "$2"; }
  printf '{"context": {}, "benchmarks": [%s, %s, %s, %s, %s]}\n' "$(rate LinearForward/N:384/C:128/OC:384 FLOP/s)" \
    "$(rate Attention/T:64/fast:1 FLOP/s)" "$(rate LayerNorm/N:384/C:128 bytes/s)" "$(rate Gelu/N:1 elements/s)" \
    "$(rate AdamW/params:804096 params/s)" > "$WORK/mfcopy/runs/machine/ok/kernels.json"
  echo '{"fits": [{"op": "all_reduce", "axis": "dp", "backend": "mpi", "alpha_s": 1e-5, "beta_bus_s_per_byte": 1e-10,
    "points": 9, "max_rel_error": 0.1}]}' \
    > "$WORK/mfcopy/runs/machine/ok/collectives.json"
  echo keep > "$WORK/ok.ini"
  expect_exit 2 "--out '$WORK/ok.ini' exists: not replaced" -- \
    bash "$WORK/mfcopy/tools/machine_file.sh" --name ok --ranks 2 --reuse --build "$build_dir" --out "$WORK/ok.ini"
  expect_exit 0 "wrote $WORK/ok.ini" -- \
    bash "$WORK/mfcopy/tools/machine_file.sh" --name ok --ranks 2 --reuse --force --note "quiet, load ~1" \
      --build "$build_dir" --out "$WORK/ok.ini"
  check "machine_file.sh --force replaced the file with a machine file" grep -qx "note = quiet, load ~1" "$WORK/ok.ini"
  check "no temporary file left beside the machine file" bash -c "! ls -A '$WORK' | grep -q 'ok.ini.*tmp'"
  expect_exit 0 "plan for .* on ok \(quiet, load ~1\)" -- "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/ok.ini" --ranks 2
fi
# predict_vs_measure.sh: --steps, --machine and --cases checked before anything trains.
pvm="$repo/tools/predict_vs_measure.sh" mach="$repo/input/machines/devbox-2core.ini"
expect_exit 2 "--steps '0': expected a whole number of at least 3" -- bash "$pvm" --machine "$mach" --steps 0 --out "$WORK/pvm/r.csv"
expect_exit 2 "--steps 'abc': expected a whole number" -- bash "$pvm" --machine "$mach" --steps abc --out "$WORK/pvm/r.csv"
expect_exit 2 "--machine '$WORK/nope.ini': no such file" -- bash "$pvm" --machine "$WORK/nope.ini" --out "$WORK/pvm/r.csv"
expect_exit 2 "--cases '/nonexist': no such file" -- bash "$pvm" --machine "$mach" --cases /nonexist --out "$WORK/pvm/r.csv"
check "predict_vs_measure.sh made nothing for refused options" test ! -e "$WORK/pvm"
# The benchmarks' numbers checked before anything runs.
expect_exit 2 "--steps 'abc': expected a positive whole number" -- bash "$repo/tools/bench_ckpt.sh" --steps abc --out "$WORK/b"
expect_exit 2 "--ranks '0': '0' is not a positive number of ranks" -- bash "$repo/tools/bench_ckpt.sh" --ranks 0 --out "$WORK/b"
expect_exit 2 "--sizes 'abc': 'abc' is not a width" -- bash "$repo/tools/bench_families.sh" --sizes abc --out "$WORK/b"
expect_exit 2 "--sizes '160': '160' gives n_head = 5, which n_kv_head = 2 does not divide" -- bash "$repo/tools/bench_families.sh" --sizes 160 --out "$WORK/b"
expect_exit 2 "--min-time '0.5s': expected a positive number of seconds \(a plain number" -- bash "$mf" --min-time 0.5s --out "$WORK/m.ini"
expect_exit 2 "--reps '0': expected a positive whole number" -- bash "$repo/tools/bench_timers.sh" --reps 0 --out "$WORK/b"
expect_exit 2 "--ranks 'x': 'x' is not a positive number of ranks" -- bash "$repo/tools/bench_timers.sh" --ranks x --out "$WORK/b"
expect_exit 2 "--budget-gib '-1': expected a positive number of GiB" -- \
  bash "$repo/tools/bench_offload_capacity.sh" --budget-gib -1 --out "$WORK/b"
expect_exit 2 "--budget-gib 'abc': expected a positive number of GiB" -- \
  bash "$repo/tools/bench_offload_capacity.sh" --budget-gib abc --out "$WORK/b"
expect_exit 2 "--layers '0': expected a positive whole number" -- bash "$repo/tools/bench_large_ckpt.sh" --layers 0 --out "$WORK/b"
expect_exit 2 "--layers 'abc': expected a positive whole number" -- bash "$repo/tools/bench_large_ckpt.sh" --layers abc --out "$WORK/b"
check "the refused benchmarks made no output folder" test ! -e "$WORK/b"
# compare_torch.sh: usage errors exit 2; an option is not a value; --config and --trident from the caller's folder.
ct="$repo/tools/compare_torch.sh"
expect_exit 2 "--steps must be a positive integer, got 'abc'" -- bash "$ct" --steps abc
expect_exit 2 "--out needs a value" -- bash "$ct" --out
expect_exit 2 "--out needs a value, got the option '--steps'" -- bash "$ct" --out --steps 3
expect_exit 1 "deck '$WORK/nope.ini' not found" -- env -C "$WORK" bash "$ct" --skip-torch --steps 1 \
  --trident "$TRIDENT" --mpiexec "$MPIEXEC" --config nope.ini --out "$WORK/ct"
expect_exit 1 "Trident binary '$WORK/nope' not found" -- env -C "$WORK" bash "$ct" --skip-torch --steps 1 \
  --trident nope --mpiexec "$MPIEXEC" --out "$WORK/ct"
# scaling_report.py: --trident that does not exist; a machine file trident plan cannot use.
printf 'study,mode,layout,ranks,tokens_per_s,status,run_dir,ms_per_step,tokens_per_step\ns,strong,dp,1,1000,ok,%s,10,128\n' \
  "$WORK/run" > "$WORK/study.csv"
printf '[machine]\nname = x\n' > "$WORK/badmachine.ini"
expect_exit 2 "--trident $WORK/nope: no such executable file" -- "$repo/tools/scaling_report.py" --trident "$WORK/nope" \
  -o "$WORK/sr" "$WORK/study.csv"
expect_exit 1 "--machine $WORK/badmachine.ini is not a machine file trident plan can use: .*devices_per_node" -- \
  "$repo/tools/scaling_report.py" --machine "$WORK/badmachine.ini" --trident "$TRIDENT" -o "$WORK/sr" "$WORK/study.csv"
# published_runs.sh: the machine files and --out checked up front.
pr="$repo/tools/published_runs.sh"
expect_exit 2 "--a100 '$WORK/nope.ini': no such machine file" -- bash "$pr" --a100 "$WORK/nope.ini" --out "$WORK/pr/r.csv"
expect_exit 2 "--h100 '$WORK/nope.ini': no such machine file" -- bash "$pr" --h100 "$WORK/nope.ini" --out "$WORK/pr/r.csv"
expect_exit 2 "--out '$WORK/afile/r.csv': '$WORK/afile' exists and is not a directory" -- bash "$pr" --out "$WORK/afile/r.csv"
# jobscripts/scaling/point.sbatch: MODE as scaling.sh checks it; a RESULTS folder refused before training.
point="$repo/jobscripts/scaling/point.sbatch"
expect_exit 2 "MODE 'sideways': give strong or weak" -- env SCALING_RANKS=1 TRIDENT_LAUNCHER=mpiexec TRIDENT_BIN="$TRIDENT" \
  bash "$point" "$WORK/pt.csv" s sideways dp "$WORK/deck.ini" --train.max_steps=3 --train.out_dir="$WORK/pt_run"
mkdir -p "$WORK/ptdir/results.csv"
expect_exit 1 "could not append this point's row to $WORK/ptdir/results.csv: it is a directory .*nothing trained" -- \
  env SCALING_RANKS=1 TRIDENT_LAUNCHER=mpiexec TRIDENT_BIN="$TRIDENT" \
  bash "$point" "$WORK/ptdir/results.csv" s strong dp "$WORK/deck.ini" --train.max_steps=3 --train.out_dir="$WORK/pt_run"
check "point.sbatch trained nothing for refused settings" test ! -e "$WORK/pt_run"

echo "$FAILED failed"
exit "$FAILED"
