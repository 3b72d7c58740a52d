#!/usr/bin/env bash
# The scaling-study driver end to end with mpiexec (jobscripts/scaling/scaling.sh, point.sbatch,
# tools/scaling_report.py) on a tiny deck at 1 and 2 ranks. Oracles: each row against the run's own
# metrics.csv (median step time of the timed steps, recomputed here with awk) and start-up log
# (layout, batch); stated invariants: strong scaling keeps tokens per step, weak scaling multiplies
# it by dp, the baseline's efficiency is 1 and every other is tokens/s per rank over the
# baseline's; a point trident refuses is a failed row (status, exit 1 from the driver), not a
# crash; bad usage exits 2 naming the option; the report refuses a CSV that is not a study's.
set -u
source "$(dirname "$0")/cli_lib.sh"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
driver="$repo/jobscripts/scaling/scaling.sh"
report="$repo/tools/scaling_report.py"

make_text "$WORK/text.txt"
"$TRIDENT" prep --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || { echo "prep failed"; exit 1; }
tiny_deck "$WORK/deck.ini" "$WORK/unused" "$WORK/tok.h5"
export TRIDENT_BIN="$TRIDENT"

# ---- bad usage ------------------------------------------------------------------------------
expect_exit 0 "strong or weak scaling" -- "$driver" --help
expect_exit 2 "give --config DECK" -- "$driver"
expect_exit 2 "--config '$WORK/nope.ini': no such file" -- "$driver" --config "$WORK/nope.ini"
expect_exit 2 "--mode 'fast': give strong or weak" -- "$driver" --config "$WORK/deck.ini" --mode fast
expect_exit 2 "--ranks: '0' is not a positive number" -- "$driver" --config "$WORK/deck.ini" --ranks 1,0
expect_exit 2 "--layouts: 'tp0' is not dp, tp, pp" -- "$driver" --config "$WORK/deck.ini" --layouts tp0
expect_exit 2 "--steps 2: give at least 3" -- "$driver" --config "$WORK/deck.ini" --steps 2
expect_exit 2 "--launcher 'ssh': give mpiexec or sbatch" -- "$driver" --config "$WORK/deck.ini" --launcher ssh
expect_exit 2 "--ranks: 99999 ranks on this machine's [0-9]+ cores with --launcher mpiexec" -- \
  "$driver" --config "$WORK/deck.ini" --ranks 99999
expect_exit 2 "--ranks needs a value" -- "$driver" --config "$WORK/deck.ini" --ranks
expect_exit 2 "no point to run" -- "$driver" --config "$WORK/deck.ini" --ranks 1 --layouts tp2 --out "$WORK/none"
expect_exit 2 "--steps 99999999999999999999: give at most" -- "$driver" --config "$WORK/deck.ini" --steps 99999999999999999999
touch "$WORK/afile"
expect_exit 2 "cannot create --out" -- "$driver" --config "$WORK/deck.ini" --out "$WORK/afile"
# A bad key for every run: the reason reaches the terminal, and nothing is reported.
expect_exit 1 "failed: trident train: error: unknown key 'bogus_key'" -- "$driver" --config "$WORK/deck.ini" --ranks 1 --steps 3 \
  --out "$WORK/badkey" -- --train.bogus_key=3

# ---- strong scaling: 1 and 2 ranks, layouts dp, tp2 and pp2 ------------------------------------
expect_exit 0 "wrote .*scaling.png" -- "$driver" --config "$WORK/deck.ini" --ranks 1,2 --layouts dp,tp2,pp2 --steps 6 \
  --out "$WORK/strong" --name tiny
csv="$WORK/strong/results.csv"
col() { head -n 1 "$csv" | tr ',' '\n' | grep -nx "$1" | cut -d: -f1; }
field() { awk -F, -v l="$1" -v r="$2" -v c="$(col "$3")" '$3 == l && $4 == r {v = $c} END {print v}' "$csv"; }
check "strong: 4 rows (the tp2 and pp2 points at 1 rank are skipped), all ok" \
  test "$(tail -n +2 "$csv" | wc -l)" = 4 -a "$(tail -n +2 "$csv" | grep -c ',ok,')" = 4
check "strong: layouts as asked (dp 1x1x1, dp 2x1x1, tp2 1x2x1)" test \
  "$(field dp 1 dp)$(field dp 1 tp)$(field dp 2 dp)$(field dp 2 tp)$(field tp2 2 dp)$(field tp2 2 tp)" = "112112"
check "strong: the same tokens per step everywhere (global batch 8 x block 16)" test \
  "$(field dp 1 tokens_per_step) $(field dp 2 tokens_per_step) $(field tp2 2 tokens_per_step)" = "128 128 128"
for p in "dp 1" "dp 2" "tp2 2"; do
  set -- $p
  run="$WORK/strong/point-$1-$2r"
  median="$(awk -F, 'NR > 1 && $1 > 2 {print $7}' "$run/metrics.csv" | sort -g |
            awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}')"
  check "strong $1 $2 ranks: ms_per_step $(field "$1" "$2" ms_per_step) = the median of metrics.csv's timed steps ($median)" \
    awk -v a="$(field "$1" "$2" ms_per_step)" -v b="$median" 'BEGIN { exit !(b > 0 && (a - b) ^ 2 <= (1e-5 * b) ^ 2) }'
  check "strong $1 $2 ranks: tokens_per_s = tokens per step / step time" \
    awk -v t="$(field "$1" "$2" tokens_per_s)" -v m="$median" 'BEGIN { e = 128 / (m / 1e3); exit !((t - e) ^ 2 <= (1e-4 * e) ^ 2) }'
  check "strong $1 $2 ranks: 4 timed steps, positive MFU and memory" awk -v s="$(field "$1" "$2" steps_timed)" \
    -v f="$(field "$1" "$2" mfu)" -v m="$(field "$1" "$2" mem_ledger_mib)" 'BEGIN { exit !(s == 4 && f > 0 && m > 0) }'
done
check "strong: one rank has no exposed communication" test "$(field dp 1 exposed_comm_ms)" = 0
check "strong: tp2 exposes communication" awk -v s="$(field tp2 2 exposed_comm_share)" 'BEGIN { exit !(s > 0 && s < 1) }'
check "strong: pp2 is 1 x 1 x 2 with a bubble, dp has none" test "$(field pp2 2 pp)" = 2 -a "$(field dp 2 bubble_share)" = 0 -a \
  -n "$(awk -v s="$(field pp2 2 bubble_share)" 'BEGIN { if (s > 0 && s < 1) print "y" }')"
eff="$(awk -v a="$(field dp 1 tokens_per_s)" -v b="$(field dp 2 tokens_per_s)" 'BEGIN { printf "%.2f", b / 2 / a }')"
check "report: baseline efficiency 1.00" grep -Eq '^\| 1 \| 1 \| 1 x 1 x 1 \| 0 \| 8 \| .* \| 1\.00 \|' "$WORK/strong/scaling.md"
check "report: 2 ranks dp efficiency = tokens/s per rank over the baseline's ($eff)" \
  grep -Eq "^\| 2 \| 1 \| 2 x 1 x 1 \| .* \| $eff \|" "$WORK/strong/scaling.md"
check "report: scaling.png is a PNG" bash -c "head -c 8 '$WORK/strong/scaling.png' | od -An -tx1 | grep -q '89 50 4e 47 0d 0a 1a 0a'"

# ---- the report with predictions: trident plan for each point's layout and resolved deck -------------
mach="$repo/input/machines/devbox-2core-quiet.ini"
expect_exit 0 "predicted ms/step" -- /usr/bin/python3 "$report" --machine "$mach" --trident "$TRIDENT" -o "$WORK/pred" \
  "$WORK/strong/results.csv"
run_of() { awk -F, -v l="$1" -v r="$2" 'NR > 1 && $3 == l && $4 == r {print $NF}' "$WORK/strong/results.csv"; }
"$TRIDENT" plan --config "$(run_of dp 2)/deck.ini" --machine "$mach" --ranks 2 --tp 1 --pp 1 --zero-stages 0 \
  --fixed-micro-batch --fixed-recompute --fixed-schedule --csv "$WORK/plan_dp2.csv" > /dev/null 2>&1
want="$(awk -F, 'NR == 2 {print $9}' "$WORK/plan_dp2.csv")"
got="$(grep -E '^\| 2 \| 1 \| 2 x 1 x 1 \|' "$WORK/pred/scaling.md" | awk -F'|' '{gsub(/ /, "", $(NF - 2)); print $(NF - 2)}')"
check "report: 2 ranks dp predicted $got = trident plan's step_ms for that layout ($want, to the 3 printed digits)" \
  awk -v a="$got" -v b="$want" 'BEGIN {d = a - b; if (d < 0) d = -d; exit !(b > 0 && d <= 0.005 * b)}'
check "report: every point of the strong study predicted" \
  test "$(grep -cE '\| [0-9.e+]+ \| [+-][0-9]+% \|$' "$WORK/pred/scaling.md")" -eq 4
mv "$(run_of tp2 2)/deck.ini" "$WORK/tp2_deck.ini"
expect_exit 0 "Points not predicted" -- /usr/bin/python3 "$report" --machine "$mach" --trident "$TRIDENT" -o "$WORK/pred2" \
  "$WORK/strong/results.csv"
check "report: a point without its deck.ini is listed, not fatal" grep -q "tp2, 2 ranks: no .*deck.ini" "$WORK/pred2/scaling.md"
mv "$WORK/tp2_deck.ini" "$(run_of tp2 2)/deck.ini"
expect_exit 2 "--machine $WORK/nope.ini: no such file" -- /usr/bin/python3 "$report" --machine "$WORK/nope.ini" \
  "$WORK/strong/results.csv"

# ---- weak scaling: the global batch grows with dp ----------------------------------------------
# 64 sequences of 16 tokens: trident logs "1.0k tokens/step"; the row has the exact count.
expect_exit 0 "weak scaling" -- "$driver" --config "$WORK/deck.ini" --mode weak --ranks 1,2 --steps 4 --out "$WORK/weak" \
  -- --train.global_batch_size=64
csv="$WORK/weak/results.csv"
check "weak: global batch 64 at dp 1 and 128 at dp 2" test "$(field dp 1 global_batch) $(field dp 2 global_batch)" = "64 128"
check "weak: tokens per step 1024 and 2048" test "$(field dp 1 tokens_per_step) $(field dp 2 tokens_per_step)" = "1024 2048"
check "weak: both rows ok with a step time" test "$(tail -n +2 "$csv" | grep -c ',ok,')" = 2 -a -n "$(field dp 2 ms_per_step)"

# ---- a point trident refuses: a failed row, the rest still reported -----------------------------
# A global batch of 3 cannot be split over 2 data-parallel ranks: trident exits 2 at 2 ranks.
expect_exit 1 "1 of 2 point\(s\) failed" -- "$driver" --config "$WORK/deck.ini" --ranks 1,2 --steps 3 \
  --out "$WORK/bad" -- --train.global_batch_size=3
check "failed point: its row says trident's exit status" grep -q ',"\?failed (exit 2)"\?,' "$WORK/bad/results.csv"
check "failed point: the report lists it and names its log" \
  grep -q "^- .*dp, 2 ranks: failed (exit 2) (.*point-dp-2r/train.log" "$WORK/bad/scaling.md"
check "failed point: its log says why" grep -q "global_batch_size" "$WORK/bad/point-dp-2r/train.log"

# ---- a row that cannot be written is an error of the point, not "appended" ---------------------
mkdir -p "$WORK/isdir/results.csv"  # a folder where the CSV should be: the append fails even for root
expect_exit 1 "error: could not append this point's row" -- env SCALING_RANKS=1 TRIDENT_LAUNCHER=mpiexec \
  bash "$repo/jobscripts/scaling/point.sbatch" "$WORK/isdir/results.csv" s strong dp "$WORK/deck.ini" \
  --train.max_steps=3 --train.out_dir="$WORK/isdir/run"
# Settings that cannot be right stop the point before it trains (exit 2), the deck untouched.
cp "$WORK/deck.ini" "$WORK/deck_before.ini"
expect_exit 2 "RESULTS '$WORK/deck.ini' is the deck" -- env SCALING_RANKS=1 TRIDENT_LAUNCHER=mpiexec \
  bash "$repo/jobscripts/scaling/point.sbatch" "$WORK/deck.ini" s strong dp "$WORK/deck.ini"
expect_exit 2 "SCALING_WARMUP='abc' is not a number of steps" -- env SCALING_RANKS=1 SCALING_WARMUP=abc \
  TRIDENT_LAUNCHER=mpiexec bash "$repo/jobscripts/scaling/point.sbatch" "$WORK/w.csv" s strong dp "$WORK/deck.ini"
check "point.sbatch: the deck is unchanged" cmp -s "$WORK/deck.ini" "$WORK/deck_before.ini"

# ---- a study name and folder with a comma: quoted CSV cells ---------------------------------------
expect_exit 0 "wrote .*scaling.png" -- "$driver" --config "$WORK/deck.ini" --ranks 1 --steps 3 --name "my,study" \
  --out "$WORK/with,comma"
check "a study name with a comma survives the CSV" grep -q '^## my,study: strong scaling' "$WORK/with,comma/scaling.md"

# ---- the report's own input checks ---------------------------------------------------------------
good="$WORK/strong/results.csv"
awk -F, 'BEGIN{OFS=","} NR == 2 {$4 = "1.5"} {print}' "$good" > "$WORK/frac.csv"
expect_exit 2 "line 2: ranks '1.5' is not a positive whole number" -- /usr/bin/python3 "$report" "$WORK/frac.csv"
c="$(head -n 1 "$good" | tr ',' '\n' | grep -nx tokens_per_s | cut -d: -f1)"
awk -F, -v c="$c" 'BEGIN{OFS=","} NR == 2 {$c = "0"} {print}' "$good" > "$WORK/zero.csv"
expect_exit 2 "line 2: an ok point with tokens_per_s '0'" -- /usr/bin/python3 "$report" "$WORK/zero.csv"
expect_exit 1 "cannot write the report into '$WORK/afile'" -- /usr/bin/python3 "$report" -o "$WORK/afile" "$good"
printf '\xff\xfe\x00' > "$WORK/binary.csv"
expect_exit 2 "is not a text CSV" -- /usr/bin/python3 "$report" "$WORK/binary.csv"
expect_exit 1 "cannot read" -- /usr/bin/python3 "$report" "$WORK/missing.csv"
printf 'step,loss\n1,2\n' > "$WORK/other.csv"
expect_exit 2 "not a scaling results file \(no column study" -- /usr/bin/python3 "$report" "$WORK/other.csv"
head -n 1 "$WORK/bad/results.csv" > "$WORK/empty.csv"
expect_exit 2 "no point ran successfully" -- /usr/bin/python3 "$report" "$WORK/empty.csv"
exit "$FAILED"
