#!/usr/bin/env bash
# trident-plot (tools/plot_run.py): a real run trained in two legs (a restart) is drawn as a PNG,
# with the restart found at the step where the leg changes; two runs overlaid; the errors named.
# Skips (77) when /usr/bin/python3 has no matplotlib (Debian: python3-matplotlib).
set -u
source "$(dirname "$0")/cli_lib.sh"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
plot=(/usr/bin/python3 "$repo/tools/plot_run.py")
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || { echo "skipped: no matplotlib for /usr/bin/python3"; exit 77; }

make_text "$WORK/text.txt"
"$TRIDENT" prep --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || { echo "prep failed"; exit 1; }
tiny_deck "$WORK/deck.ini" "$WORK/run" "$WORK/tok.h5"
"$TRIDENT" train --config "$WORK/deck.ini" --train.stop_at_step=3 >"$WORK/leg1.log" 2>&1
"$TRIDENT" train --config "$WORK/deck.ini" --resume >"$WORK/leg2.log" 2>&1
check "the end-of-run line names trident-plot and the run" grep -q "metrics: $WORK/run/metrics.csv | plot: .*trident-plot $WORK/run" "$WORK/leg2.log"
cp -r "$WORK/run" "$WORK/run2"

expect_exit 0 "wrote $WORK/run/metrics.png" -- "${plot[@]}" "$WORK/run"
check "a PNG" bash -c "head -c 8 '$WORK/run/metrics.png' | grep -q PNG"
expect_exit 0 "wrote $WORK/title.png: x \(6 steps, 1 restart\)" -- "${plot[@]}" "$WORK/run" -o "$WORK/title.png" --title x --smooth 3
check "the restart is found at step 4, where the second leg starts" bash -c "cd '$repo/tools' && /usr/bin/python3 -c '
import csv, plot_run
rows = list(csv.DictReader(open(\"$WORK/run/metrics.csv\")))
assert plot_run.restarts(rows) == [4.0], plot_run.restarts(rows)'"
expect_exit 0 "wrote $WORK/both.png" -- "${plot[@]}" "$WORK/run" "$WORK/run2/metrics.csv" -o "$WORK/both.png"
check "overlay PNG" test -s "$WORK/both.png"
# A skipped update ([train] nonfinite = skip writes skipped = 1 and a nan loss) is counted.
awk -F, -v OFS=, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "skipped") c = i; if (!c) { c = NF + 1; $c = "skipped" } }
                  NR == 3 { $2 = "nan"; $c = 1 } NR > 3 && c > NF { $c = 0 } { print }' "$WORK/run/metrics.csv" > "$WORK/skip.csv"
expect_exit 0 "\(6 steps, 1 restart, 1 skipped\)" -- "${plot[@]}" "$WORK/skip.csv" -o "$WORK/skip.png"
# A last row cut short (a killed run, or one being written) is left out with a warning, not a
# traceback: the memory stack once broadcast 6 steps against 5 values.
{ head -n 6 "$WORK/run/metrics.csv"; sed -n 7p "$WORK/run/metrics.csv" | head -c 60; } > "$WORK/cut.csv"
expect_exit 0 "warning: .*cut.csv: 1 row\(s\) without every column \(cut short\?\) left out \(step 6\)" -- \
  "${plot[@]}" "$WORK/cut.csv" -o "$WORK/cut.png" --title x
expect_exit 0 "wrote $WORK/cut.png: x \(5 steps" -- "${plot[@]}" "$WORK/cut.csv" -o "$WORK/cut.png" --title x
# A run that has only its header yet is left out of an overlay, not the end of it.
head -n 1 "$WORK/run/metrics.csv" > "$WORK/just_started.csv"
expect_exit 0 "warning: .*just_started.csv has no rows yet: left out of the plot" -- \
  "${plot[@]}" "$WORK/run" "$WORK/just_started.csv" -o "$WORK/overlay_one.png"
expect_exit 1 "no metrics.csv" -- "${plot[@]}" "$WORK/nothing"
head -n 1 "$WORK/run/metrics.csv" > "$WORK/empty.csv"
expect_exit 2 "has no rows yet" -- "${plot[@]}" "$WORK/empty.csv"
expect_exit 2 "usage: trident-plot" -- "${plot[@]}"
expect_exit 0 "usage: trident-plot" -- "${plot[@]}" --help
printf "step,train_loss\n1,\xff\xfe\n" > "$WORK/binary.csv"
expect_exit 1 "binary.csv: not a metrics.csv of trident" -- "${plot[@]}" "$WORK/binary.csv"
printf "not,a,metrics\n1,2,3\n" > "$WORK/other.csv"
expect_exit 1 "other.csv: not a metrics.csv of trident \(its header has no step and train_loss" -- "${plot[@]}" "$WORK/other.csv"
cp "$WORK/run/metrics.csv" "$WORK/keep.csv"
expect_exit 2 "-o .*keep.csv: the plot is a .png, .pdf or .svg file" -- "${plot[@]}" "$WORK/run" -o "$WORK/keep.csv"
check "-o with a wrong extension wrote nothing over the csv" cmp -s "$WORK/keep.csv" "$WORK/run/metrics.csv"

echo "$FAILED failed"
exit "$FAILED"
