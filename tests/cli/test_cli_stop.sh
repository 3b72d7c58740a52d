#!/usr/bin/env bash
# A stop signal never waits for a whole evaluation. A run that evaluates the whole validation split
# after every step (eval_iters = 0, seconds per evaluation) gets SIGTERM on one rank during an
# evaluation: every rank leaves the evaluation at the same batch, saves the step and exits 3 in a
# small fraction of the evaluation's time (the ratio is asserted, not a time: CI machines are
# slow); the checkpoint of that step resumes to the uninterrupted run's losses bitwise (the
# evaluation skipped at the stop changed nothing of the training).
set -u
source "$(dirname "$0")/cli_lib.sh"

# Three copies of the corpus: an evaluation of a few seconds here, still well over the 0.5 s floor
# checked below on a machine several times faster (one copy took 0.97 s and failed a 1 s floor).
make_text "$WORK/one.txt"
cat "$WORK/one.txt" "$WORK/one.txt" "$WORK/one.txt" > "$WORK/text.txt"
"$TRIDENT" prep --val-fraction 0.9 --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || { echo "prep failed"; exit 1; }
tiny_deck "$WORK/deck.ini" "$WORK/run" "$WORK/tok.h5"
sed -i 's/^max_steps = 6/max_steps = 3/; s/^eval_interval = 3/eval_interval = 1/; s/^eval_iters = 2/eval_iters = 0/;
        s/^interval = 3/interval = 0/' "$WORK/deck.ini"
run() { timeout -k 10 300 "$MPIEXEC" -n 2 "$TRIDENT" train --config "$WORK/deck.ini" "$@"; }

run --train.out_dir="$WORK/ref" > "$WORK/ref.out" 2>&1 || { echo "reference run failed"; tail -5 "$WORK/ref.out"; exit 1; }

run > "$WORK/stop.out" 2>&1 &
job=$!
for _ in $(seq 1200); do  # until step 1 and its evaluation are done (at most 120 s)
  [ "$(wc -l 2>/dev/null < "$WORK/run/metrics.csv" || echo 0)" -ge 2 ] && break
  sleep 0.1
done
sleep 0.3  # step 2 takes milliseconds: its evaluation is running now
rank_pid="$(pgrep -f "^$TRIDENT train --config $WORK/deck.ini" | tail -n 1)"
t0="$(date +%s.%N)"
[ -n "$rank_pid" ] && kill -TERM "$rank_pid"
wait "$job"; rc=$?
t1="$(date +%s.%N)"

eval_s="$(sed -n 's/.*step *1 | val loss [0-9.]* | .* tokens | \([0-9.]*\) s$/\1/p' "$WORK/stop.out" | head -n 1)"
stop_s="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')"
echo "     a whole evaluation took ${eval_s:-?} s; signal to exit took $stop_s s"
check "SIGTERM on one rank: exit status 3" test "$rc" -eq 3
check "the evaluation was abandoned at the stop" grep -q "evaluation abandoned after [0-9]* of [0-9]* batches" "$WORK/stop.out"
check "the evaluation is long enough to show anything (${eval_s:-?} s >= 0.5 s)" \
  awk -v e="${eval_s:-0}" 'BEGIN { exit !(e >= 0.5) }'
check "from the signal to exit 3 took under a third of one evaluation" \
  awk -v s="$stop_s" -v e="${eval_s:-0}" 'BEGIN { exit !(e > 0 && s < e / 3) }'
stopped="$(sed -n 's/.*stopping after step \([0-9]*\) on SIGTERM.*/\1/p' "$WORK/stop.out" | head -n 1)"
check "a checkpoint of the step it stopped at (${stopped:-none})" \
  test -n "$stopped" -a -f "$WORK/run/checkpoints/$(printf 'step_%08d.h5' "${stopped:-0}")"
[ "$rc" -eq 3 ] || tail -5 "$WORK/stop.out"

expect_exit 0 "resumed from .*step_0*${stopped:-x}.h5" -- run --resume
# The stopped step has no validation loss (its evaluation was abandoned); every other number of
# the first five columns is the uninterrupted run's, bitwise.
check "resumed: losses bitwise equal to the uninterrupted run" \
  cmp -s <(awk -F, -v s="${stopped:-0}" 'BEGIN{OFS=","} $1 == s {$3 = ""} {print $1,$2,$3,$4,$5}' "$WORK/ref/metrics.csv") \
         <(cut -d, -f1-5 "$WORK/run/metrics.csv")

# A stop during the *final* evaluation (step 3 of 3): the checkpoint of step 3 has no validation
# loss, so the resumed run, with nothing left to train, runs that evaluation and prints the val
# loss of the uninterrupted run (same parameters, same validation tokens).
run --train.out_dir="$WORK/run2" > "$WORK/stop2.out" 2>&1 &
job=$!
for _ in $(seq 1200); do  # until step 2 and its evaluation are done: step 3's evaluation follows
  [ "$(wc -l 2>/dev/null < "$WORK/run2/metrics.csv" || echo 0)" -ge 3 ] && break
  sleep 0.1
done
sleep 0.3
rank_pid="$(pgrep -f "^$TRIDENT train --config $WORK/deck.ini --train.out_dir=$WORK/run2" | tail -n 1)"
[ -n "$rank_pid" ] && kill -TERM "$rank_pid"
wait "$job"; rc=$?
check "final evaluation: SIGTERM during it exits 3" test "$rc" -eq 3
check "final evaluation: it was abandoned after step 3" \
  grep -q "step *3 | evaluation abandoned after" "$WORK/stop2.out"
want="$(sed -n 's/.*step *3 | val loss \([0-9.]*\) .*/\1/p' "$WORK/ref.out" | head -n 1)"
run --train.out_dir="$WORK/run2" --resume > "$WORK/resume2.out" 2>&1; rc=$?
check "final evaluation: the resumed run exits 0" test "$rc" -eq 0
check "final evaluation: the resumed run prints the uninterrupted run's val loss (${want:-none})" \
  grep -Eq "step +3 \| val loss ${want:-none} \|.*abandoned at a stop, run now" "$WORK/resume2.out"
check "final evaluation: metrics.csv's row of step 3 now has the uninterrupted run's val loss, bitwise" \
  test "$(awk -F, '$1 == 3 {print $3}' "$WORK/run2/metrics.csv")" = "$(awk -F, '$1 == 3 {print $3}' "$WORK/ref/metrics.csv")"
check "final evaluation: metrics.csv still has one row per step" test "$(cut -d, -f1 "$WORK/run2/metrics.csv" | tail -n +2 | tr '\n' ' ')" = "1 2 3 "
check "final evaluation: no step was trained again" bash -c "! grep -Eq 'step +[0-9]+/3 \| loss' '$WORK/resume2.out'"
[ "$rc" -eq 0 ] || tail -5 "$WORK/resume2.out"
exit "$FAILED"
