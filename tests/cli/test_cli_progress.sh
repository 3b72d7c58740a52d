#!/bin/bash
# Progress of long operations (core/progress.hpp) through the real executable: prep in a batch log
# (stdout not a terminal) prints whole lines with percentages that never decrease and end at 100%,
# with rate, elapsed time and ETA; TRIDENT_PROGRESS=0 silences them; a short operation prints
# nothing by default; on a terminal (emulated with script(1)) the line is redrawn with '\r';
# ckpt export, reshard, verify, checkpoint load and a whole-split evaluation report too.
# TRIDENT_PROGRESS_INTERVAL=0 makes every update print, so small inputs are enough and the test is fast.
source "$(dirname "$0")/cli_lib.sh"

make_text "$WORK/small.txt"
# small.txt is ~0.9 MB (under a 1 MiB read chunk); three copies: three read chunks and two
# tokenizer reports before the final line.
cat "$WORK/small.txt" "$WORK/small.txt" "$WORK/small.txt" > "$WORK/big.txt"
[ "$(stat -c %s "$WORK/big.txt")" -gt $((2 * 1024 * 1024)) ] || { echo "FAIL big.txt is too small"; exit 1; }

# percents LABEL FILE: the percentages of LABEL's lines, one per line.
percents() { grep -E "^$1: +[0-9]+% " "$2" | sed -E "s/^$1: +([0-9]+)%.*/\\1/"; }
# monotone_to_100 LABEL FILE: at least two lines, percentages never decrease, the last is 100.
monotone_to_100() {
  local p; p="$(percents "$1" "$2")"
  [ "$(wc -l <<<"$p")" -ge 2 ] && sort -n -c <<<"$p" && [ "$(tail -1 <<<"$p")" = 100 ]
}

# ---- prep in a batch log -----------------------------------------------------------------------
TRIDENT_PROGRESS_INTERVAL=0 "$TRIDENT" prep --output "$WORK/big.h5" "$WORK/big.txt" > "$WORK/prep.log" 2>&1
check "prep exits 0" test $? -eq 0
check "prep: reading lines, monotone to 100%" monotone_to_100 "prep: reading" "$WORK/prep.log"
check "prep: tokenizing lines, monotone to 100%" monotone_to_100 "prep: tokenizing" "$WORK/prep.log"
check "prep: writing lines, monotone to 100%" monotone_to_100 "prep: writing [^:]*big.h5" "$WORK/prep.log"
check "a line has rate, elapsed and ETA" grep -qE '^prep: reading: +[0-9]+% [0-9.]+/[0-9.]+ MiB, [0-9.]+ [KMG]?i?B/s, elapsed [0-9.]+s, ETA ' "$WORK/prep.log"
check "the final line has the total time" grep -qE '^prep: tokenizing: 100% .*, done in [0-9.]+s$' "$WORK/prep.log"
check "no carriage returns in a batch log" bash -c "! grep -q \$'\\r' '$WORK/prep.log'"
check "the log's own lines are still there" grep -q "^wrote $WORK/big.h5" "$WORK/prep.log"

# The same token file with progress silenced, and the same tokens as with progress.
TRIDENT_PROGRESS=0 TRIDENT_PROGRESS_INTERVAL=0 "$TRIDENT" prep --output "$WORK/quiet.h5" "$WORK/big.txt" > "$WORK/quiet.log" 2>&1
check "TRIDENT_PROGRESS=0: no progress lines" bash -c "! grep -q '^prep: ' '$WORK/quiet.log'"
check "progress does not change the token file" h5diff -q "$WORK/big.h5" "$WORK/quiet.h5" /train
# Defaults (interval 10 s, nothing before 2 s): a small prep looks as it did before.
"$TRIDENT" prep --output "$WORK/small.h5" "$WORK/small.txt" > "$WORK/small.log" 2>&1
check "a short prep prints no progress by default" bash -c "! grep -q '^prep: ' '$WORK/small.log'"
expect_exit 0 "TRIDENT_PROGRESS='maybe' is not one of" -- env TRIDENT_PROGRESS=maybe "$TRIDENT" prep --force --output "$WORK/small.h5" "$WORK/small.txt"
expect_exit 0 "TRIDENT_PROGRESS_INTERVAL='soon' is not a number" -- env TRIDENT_PROGRESS_INTERVAL=soon "$TRIDENT" prep --force --output "$WORK/small.h5" "$WORK/small.txt"

# ---- on a terminal: redrawn in place -----------------------------------------------------------
if script -qc true /dev/null >/dev/null 2>&1; then
  TRIDENT_PROGRESS_INTERVAL=0 script -qec "'$TRIDENT' prep --output '$WORK/tty.h5' '$WORK/big.txt'" "$WORK/tty.log" >/dev/null 2>&1
  check "terminal: lines redrawn with \\r and cleared to the end" grep -q $'\r''prep: reading: .*'$'\x1b''\[K' "$WORK/tty.log"
  check "terminal: the final line ends the redrawn one" grep -qE 'prep: tokenizing: 100% .*done in' "$WORK/tty.log"
  # TRIDENT_PROGRESS=line forces whole lines on a terminal.
  TRIDENT_PROGRESS=line TRIDENT_PROGRESS_INTERVAL=0 script -qec "'$TRIDENT' prep --force --output '$WORK/tty.h5' '$WORK/big.txt'" "$WORK/line.log" >/dev/null 2>&1
  check "TRIDENT_PROGRESS=line: no redraws on a terminal" bash -c "! grep -q \$'\\rprep: ' '$WORK/line.log'"
else
  echo "skip terminal checks: script(1) cannot run here"
fi

# ---- training (whole-split evaluation, save), ckpt export / reshard / verify ----------------------
"$TRIDENT" prep --output "$WORK/data.h5" "$WORK/small.txt" >/dev/null 2>&1
tiny_deck "$WORK/deck.ini" "$WORK/run" "$WORK/data.h5"
TRIDENT_PROGRESS_INTERVAL=0 "$TRIDENT" train --config "$WORK/deck.ini" --train.max_steps=3 --train.eval_iters=0 \
  > "$WORK/train.log" 2>&1
check "train exits 0" test $? -eq 0
check "whole-split evaluation reports batches" grep -qE '^evaluation \(whole val split\): +[0-9]+% [0-9]+/[0-9]+ batches' "$WORK/train.log"
check "evaluation: no final progress line (the val loss line is it)" bash -c "! grep -qE '^evaluation.*done in' '$WORK/train.log'"
check "the val loss line is still there" grep -qE '^step +3 \| val loss' "$WORK/train.log"
check "step lines: one per step" test "$(grep -cE '^step +[0-9]+/3 \| loss' "$WORK/train.log")" -eq 3
ck="$WORK/run/checkpoints/step_00000003.h5"
TRIDENT_PROGRESS_INTERVAL=0 "$TRIDENT" ckpt export --format safetensors --output "$WORK/hf" "$ck" > "$WORK/export.log" 2>&1
check "ckpt export: final line at 100%" grep -qE '^ckpt export: 100% .* done in' "$WORK/export.log"
check "ckpt export: its checkpoint is verified with progress" grep -qE '^checkpoint verify: 100% ' "$WORK/export.log"
TRIDENT_PROGRESS_INTERVAL=0 "$MPIEXEC" -n 2 "$TRIDENT" ckpt reshard --output "$WORK/r2.h5" "$ck" > "$WORK/reshard.log" 2>&1
check "ckpt reshard exits 0" test $? -eq 0
check "ckpt reshard: checkpoint load reported" grep -qE '^checkpoint load: 100% ' "$WORK/reshard.log"
check "ckpt reshard: writing reported" grep -qE '^ckpt reshard: writing: 100% ' "$WORK/reshard.log"
check "rank 0 only: one final line per operation" test "$(grep -c '^checkpoint load: 100% .*done in' "$WORK/reshard.log")" -eq 1
check "the resharded checkpoint is the same state" "$TRIDENT" ckpt diff "$ck" "$WORK/r2.h5"
TRIDENT_PROGRESS=0 TRIDENT_PROGRESS_INTERVAL=0 "$TRIDENT" ckpt export --format safetensors --output "$WORK/hf2" "$ck" > "$WORK/export0.log" 2>&1
check "TRIDENT_PROGRESS=0 silences export" bash -c "! grep -qE '^(ckpt export|checkpoint verify): ' '$WORK/export0.log'"

exit $FAILED
