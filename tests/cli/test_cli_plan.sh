#!/usr/bin/env bash
# `trident plan`: bad input ends with a message and exit 2; a good deck and machine file give a
# ranking whose best layout `trident train --dry-run` accepts for the same ranks, and nothing in the
# ranking exceeds the machine's memory; a machine too small for the model gives exit 1.
set -u
source "$(dirname "$0")/cli_lib.sh"
SRC="$(cd "$(dirname "$0")/../.." && pwd)"

make_text "$WORK/text.txt"
"$TRIDENT" prep --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || { echo "prep failed"; exit 1; }
tiny_deck "$WORK/deck.ini" "$WORK/run" "$WORK/tok.h5"
cat > "$WORK/m.ini" <<'M'
[machine]
name = cli test box
devices_per_node = 4
memory_per_device_gib = 1
[compute]
peak_tflops_float = 0.1
memory_gbs = 10
[link.intra]
alpha_us = 5
busbw_gbs = 2
M

expect_exit 0 "--machine FILE" -- "$TRIDENT" plan --help
expect_exit 0 "busbw_gbs" -- "$TRIDENT" plan --help
expect_exit 2 "no input deck" -- "$TRIDENT" plan --machine "$WORK/m.ini" --ranks 2
expect_exit 2 "no machine file" -- "$TRIDENT" plan --config "$WORK/deck.ini" --ranks 2
expect_exit 2 "exactly one of --ranks N and --nodes K" -- "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/m.ini"
expect_exit 2 "--ranks 0: expected an integer from 1 to 1073741823" -- "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/m.ini" --ranks 0
expect_exit 2 "--ranks 2000000000: expected an integer from 1 to 1073741823" -- "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/m.ini" --ranks 2000000000
expect_exit 2 "--tp 0: expected comma-separated integers from 1" -- "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/m.ini" --ranks 2 --tp 0
expect_exit 2 "no layout of 2 ranks has the tp and pp sizes asked for \(--tp 3\): tp x pp must divide" -- \
  "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/m.ini" --ranks 2 --tp 3
expect_exit 2 "machine file $WORK is a directory, not a machine file" -- "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK" --ranks 2
{ echo "[machine]"; echo "devices_per_node = 2000000000"; grep -v '^devices_per_node\|^\[machine\]' "$WORK/m.ini"; } > "$WORK/mbig.ini"
expect_exit 2 "--nodes 2 x 2000000000 devices per node = 4000000000 ranks: more than 1073741823" -- \
  "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/mbig.ini" --nodes 2
# --csv writes a new file: never the deck or machine file read, a device, or (without --force) an
# existing file.
expect_exit 2 "--csv $WORK/deck.ini is $WORK/deck.ini, which this command reads" -- \
  "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/m.ini" --ranks 2 --csv "$WORK/deck.ini" --force
if [ -e /dev/full ]; then
  expect_exit 2 "--csv /dev/full exists and is not a regular file" -- \
    "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/m.ini" --ranks 2 --csv /dev/full --force
fi
# An error that leaves no table keeps an existing file as it was, even with --force.
echo "kept table" > "$WORK/kept.csv"
expect_exit 2 "has the tp and pp sizes asked for" -- \
  "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/m.ini" --ranks 2 --tp 3 --csv "$WORK/kept.csv" --force
check "--csv: a plan that ends in an error leaves the file alone" grep -qx "kept table" "$WORK/kept.csv"
echo "old table" > "$WORK/old.csv"
expect_exit 2 "already exists: choose a new file, or add --force" -- \
  "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/m.ini" --ranks 2 --csv "$WORK/old.csv"
check "--csv without --force left the existing file as it was" grep -qx "old table" "$WORK/old.csv"
expect_exit 0 "rank" -- "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/m.ini" --ranks 2 --csv "$WORK/old.csv" --force
check "--csv --force replaced it with the table" grep -q "^dp,tp,pp," "$WORK/old.csv"
expect_exit 2 "machine file $WORK/nope.ini: cannot be read" -- "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/nope.ini" --ranks 2
printf 'bogus = 1\n' >> "$WORK/m_bad.ini"; cat "$WORK/m.ini" "$WORK/m_bad.ini" > "$WORK/m2.ini"
expect_exit 2 "unknown key \[link.intra\] bogus" -- "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/m2.ini" --ranks 2
expect_exit 2 "unknown argument '--rank'" -- "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/m.ini" --rank 2
expect_exit 2 "--zero-stages 5: expected comma-separated integers from 0 to 3" -- "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/m.ini" --ranks 2 --zero-stages 5
expect_exit 2 "--zero-stages 0,,1: expected comma-separated integers from 0 to 3" -- "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/m.ini" --ranks 2 --zero-stages 0,,1
# --csv: an empty name and a missing directory refused before the ranking.
expect_exit 2 "--csv: the file name is empty" -- "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/m.ini" --ranks 2 --csv ""
expect_exit 2 "--csv $WORK/no_such_dir/p.csv: '$WORK/no_such_dir' is not an existing directory" -- \
  "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/m.ini" --ranks 2 --csv "$WORK/no_such_dir/p.csv"
# A file-size limit: the write fails with EFBIG, named (exit 1), not a kill by SIGXFSZ (exit 153)
# nor an MPI abort banner (a rank-local error on a 1-rank job ends cleanly). UCX's shared-memory
# transport itself needs files larger than the limit, hence sysv.
expect_exit 1 "cannot write '$WORK/big.csv': File too large" -- bash -c "ulimit -f 16; UCX_TLS=sysv,self \
  $(printf '%q ' "$TRIDENT" plan --config "$SRC/input/shakespeare_char.ini" --model.vocab_size=65 \
  --train.global_batch_size=4096 --machine "$SRC/input/machines/dgx-a100-80gb.ini" --ranks 4096 --csv "$WORK/big.csv")"
check "... and it leaves no file" test ! -e "$WORK/big.csv"
sed 's|^path = .*|path = /nonexistent/tok.h5|' "$WORK/deck.ini" > "$WORK/nodata.ini"
expect_exit 2 "give --model.vocab_size=N" -- "$TRIDENT" plan --config "$WORK/nodata.ini" --machine "$WORK/m.ini" --ranks 2
expect_exit 0 "breakdown of the fastest" -- "$TRIDENT" plan --config "$WORK/nodata.ini" --machine "$WORK/m.ini" --ranks 2 --model.vocab_size=65
expect_exit 0 "4 ranks" -- "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/m.ini" --nodes 1

# The best layout for 2 ranks, as deck overrides, passes `trident train --dry-run` at 2 ranks.
"$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/m.ini" --ranks 2 --csv "$WORK/plan.csv" > "$WORK/plan.txt" 2>&1
check "plan wrote its CSV" test -s "$WORK/plan.csv"
best=$(awk -F, 'NR > 1 && $8 == 1 {print; exit}' "$WORK/plan.csv")
IFS=, read -r dp tp pp zs mb ck sc _ <<<"$best"
expect_exit 0 "predicted memory per rank" -- "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/deck.ini" --dry-run 2 \
  --parallel.dp=$dp --parallel.tp=$tp --parallel.pp=$pp --parallel.zero_stage=$zs --train.micro_batch_size=$mb \
  --train.activation_checkpointing=$ck --parallel.pp_schedule=$sc
check "every fitting layout is within 1024 MiB" awk -F, 'NR > 1 && $8 == 1 && $20 > 1024 {bad = 1} END {exit bad}' "$WORK/plan.csv"

# A machine with 0.1 MiB per device: no layout of this model (about 1 MiB a rank) fits; exit 1 with the smallest listed.
sed 's/^memory_per_device_gib = 1$/memory_per_device_gib = 0.0001/' "$WORK/m.ini" > "$WORK/small.ini"
expect_exit 1 "no valid layout fits in memory" -- "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/small.ini" --ranks 2
# --show bounds that list too (it was always 5 rows); an option given twice is refused, not the last one taken.
out="$("$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/small.ini" --ranks 2 --show 1 2>&1)"
check "--show 1: one smallest layout listed" test "$(grep -cE '^ +[0-9]+  dp=' <<<"$out")" -eq 1
expect_exit 2 "--ranks is given twice" -- "$TRIDENT" plan --config "$WORK/deck.ini" --machine "$WORK/m.ini" --ranks 2 --ranks 4

# The machine file committed for the project's machine parses.
expect_exit 0 "breakdown of the fastest" -- "$TRIDENT" plan --config "$SRC/input/shakespeare_char.ini" \
  --machine "$SRC/input/machines/devbox-2core.ini" --ranks 2 --model.vocab_size=65
# The comparison with Megatron-LM's published runs (docs/scaling.md) runs end to end from the
# datasheet machine files: one prediction per published run, each a positive rate.
BUILD_DIR=$(cd "$(dirname "$TRIDENT")/.." && pwd)
expect_exit 0 "largest relative error" -- "$SRC/tools/published_runs.sh" --build "$BUILD_DIR" --out "$WORK/pub/results.csv"
check "28 published runs predicted (19 on A100, 9 on H100)" test "$(wc -l < "$WORK/pub/results.csv")" -eq 29
check "every prediction is a positive rate" awk -F, 'NR > 1 && !($15 > 0) {bad = 1} END {exit bad}' "$WORK/pub/results.csv"
# A GPU machine file plans bf16 GEMMs from this host build; the interleaved schedule's refusals are named.
expect_exit 0 "the machine runs a CUDA build" -- "$TRIDENT" plan --config "$SRC/input/published/megatron_gpt.ini" \
  --machine "$SRC/input/machines/dgx-h100-80gb.ini" --ranks 64 --tp 8 --pp 8 --zero-stages 1 --fixed-micro-batch \
  --fixed-recompute --fixed-schedule --model.n_layer=24 --model.n_embd=12288 --model.n_head=96 --assume-interleaved 3
expect_exit 2 "interleaved pipeline: stage 0's 3 layers do not split into 5 chunks" -- "$TRIDENT" plan \
  --config "$SRC/input/published/megatron_gpt.ini" --machine "$SRC/input/machines/dgx-h100-80gb.ini" --ranks 64 --tp 8 \
  --pp 8 --zero-stages 1 --fixed-micro-batch --fixed-recompute --fixed-schedule --model.n_layer=24 \
  --model.n_embd=12288 --model.n_head=96 --assume-interleaved 5
exit $FAILED
