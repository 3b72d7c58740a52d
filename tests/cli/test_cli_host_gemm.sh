#!/usr/bin/env bash
# [train] host_gemm = auto | openblas | onednn | shape (the library of a host build's fp32 GEMMs):
#  - a bad value is refused by name; forced choices are logged as such;
#  - auto measures both libraries once, records the rates in the peak cache and picks the faster;
#    later runs read the record (so a resume on the same machine picks the same library), and a
#    record that says otherwise changes the pick;
#  - shape does so for each GEMM shape of the run, and a recorded table routes every GEMM (bitwise
#    as the library it names), also on a resume;
#  - both libraries train to the same losses within 1e-4 relative (another summation order);
#  - a resume may switch the library (a change that keeps the training math).
# Skipped (77) in a build without oneDNN.
set -u
source "$(dirname "$0")/cli_lib.sh"

make_text "$WORK/text.txt"
"$TRIDENT" prep --output "$WORK/tok.h5" "$WORK/text.txt" >/dev/null || { echo "prep failed"; exit 1; }
tiny_deck "$WORK/deck.ini" "$WORK/unused" "$WORK/tok.h5"
export TRIDENT_PEAK_CACHE="$WORK/peak.tsv"
run1() { timeout 300 "$TRIDENT" train --config "$WORK/deck.ini" --train.max_steps=6 "$@"; }

if run1 --train.host_gemm=onednn --train.out_dir="$WORK/probe" 2>&1 | grep -q "has no oneDNN"; then
  echo "skip: this build has no oneDNN"
  exit 77
fi
expect_exit 2 "\[train\] host_gemm = mkl: expected auto, openblas, onednn or shape" -- run1 --train.host_gemm=mkl
expect_exit 0 "fp32 GEMMs: OpenBLAS \(\[train\] host_gemm = openblas\)" -- run1 --train.host_gemm=openblas --train.out_dir="$WORK/ob"
expect_exit 0 "fp32 GEMMs: oneDNN \(\[train\] host_gemm = onednn\)" -- run1 --train.host_gemm=onednn --train.out_dir="$WORK/od"
close() {  # close A B: train loss and grad norm within 1e-4 relative, row by row
  paste -d, <(cut -d, -f2,5 "$1") <(cut -d, -f2,5 "$2") | tail -n +2 |
    awk -F, '{for (i = 1; i <= 2; i++) {d = $i - $(i + 2); if (d < 0) d = -d; if (d > 1e-4 * ($i < 0 ? -$i : $i)) bad = 1}} END {exit bad}'
}
check "oneDNN and OpenBLAS train to the same losses within 1e-4" close "$WORK/ob/metrics.csv" "$WORK/od/metrics.csv"

# ---- auto: measured once, recorded when steady, then read ------------------------------------------------
# A probe taken on a busy machine (the libraries' best rounds more than 10% apart) is used but not
# recorded, so it cannot decide later runs; a steady one is recorded. On a busy CI machine up to four
# tries.
steady=0
for try in 1 2 3 4; do
  out="$(run1 --train.out_dir="$WORK/a1_$try" 2>&1)"; rc=$?
  check "auto, try $try: exit 0 and the probe of both libraries named" bash -c "test $rc -eq 0 && grep -Eq \
'fp32 GEMMs: (oneDNN|OpenBLAS) \(auto: oneDNN fp32 matmul [0-9]+ GFLOP/s, OpenBLAS sgemm [0-9]+ GFLOP/s in the 512\^3 probe \(measured now' \
<<<\"\$1\"" _ "$out"
  lines="$(grep -cE '\| (openblas|onednn)	' "$WORK/peak.tsv" 2>/dev/null)"
  if grep -q "so not recorded: later runs measure again))" <<<"$out"; then
    # (oneDNN's fp32 line may be there: it is also the MFU peak's, which the run records itself)
    check "an unsteady probe is not recorded" test "$(grep -cE '\| openblas	' "$WORK/peak.tsv" 2>/dev/null)" -eq 0
  else
    check "a steady probe of both libraries is recorded" bash -c "grep -q 'measured now))' <<<\"\$1\" && test ${lines:-0} -eq 2" _ "$out"
    steady=1
    break
  fi
done
if [ "$steady" = 1 ]; then
  expect_exit 0 "fp32 GEMMs: .*\(recorded in $WORK/peak.tsv\)" -- run1 --train.out_dir="$WORK/a2"
  # A record that makes OpenBLAS the faster one (and then oneDNN) decides the pick.
  sed -i -E 's/(\| openblas\t)[0-9.]+/\1999999/; s/(\| onednn\t)[0-9.]+/\11/' "$WORK/peak.tsv"
  expect_exit 0 "fp32 GEMMs: OpenBLAS \(auto: oneDNN fp32 matmul 1 GFLOP/s, OpenBLAS sgemm 999999" -- run1 --train.out_dir="$WORK/a3"
  sed -i -E 's/(\| openblas\t)[0-9.]+/\11/; s/(\| onednn\t)[0-9.]+/\1999999/' "$WORK/peak.tsv"
  expect_exit 0 "fp32 GEMMs: oneDNN \(auto: oneDNN fp32 matmul 999999" -- run1 --train.out_dir="$WORK/a4"
else
  echo "skip: the reading of a recorded probe (the machine stayed too busy for a steady probe in four tries)"
fi

# ---- shape: each GEMM shape probed once and recorded, then read -------------------------------------------
# Each shape's two rates are recorded when steady (up to four runs until no shape is measured any
# more). Then a table that favours one library everywhere must train bitwise as that library alone
# (the OpenBLAS and oneDNN runs above): the table, not the process-wide pick, routes every GEMM.
same() { diff -q <(cut -d, -f2,5 "$1") <(cut -d, -f2,5 "$2") >/dev/null; }
complete=0
for try in 1 2 3 4; do
  out="$(run1 --train.host_gemm=shape --train.out_dir="$WORK/s$try" 2>&1)"; rc=$?
  check "shape, try $try: exit 0, the per-shape mode and its summary logged" bash -c "test $rc -eq 0 && \
grep -q 'fp32 GEMMs: per shape, each shape.s pick read from or recorded in $WORK/peak.tsv' <<<\"\$1\" && \
grep -Eq 'fp32 GEMMs per shape on rank 0: [0-9]+ shapes: oneDNN for [0-9]+, OpenBLAS for [0-9]+' <<<\"\$1\"" _ "$out"
  if [ "$try" = 1 ]; then
    check "shape, first run: every shape measured and named" bash -c "grep -Eq \
'fp32 GEMM (NN|NT|TN|TT) [0-9]+x[0-9]+x[0-9]+x[0-9]+ \(trans, batch x m x n x k\): (oneDNN|OpenBLAS) \(oneDNN [0-9]+ GFLOP/s, OpenBLAS [0-9]+ GFLOP/s, measured now' <<<\"\$1\"" _ "$out"
  fi
  if ! grep -q "measured now" <<<"$out"; then complete=1; break; fi
done
if [ "$complete" = 1 ]; then
  n_shapes="$(grep -c '| shape ' "$WORK/peak.tsv")"
  check "shape: two recorded lines per shape ($n_shapes lines)" bash -c "test $n_shapes -ge 4 && test $((n_shapes % 2)) -eq 0"
  sed -i -E '/\| shape /{s/(\| openblas \| shape [^\t]*\t)[0-9.]+/\1999999/; s/(\| onednn \| shape [^\t]*\t)[0-9.]+/\11/}' "$WORK/peak.tsv"
  expect_exit 0 "OpenBLAS for [0-9]+ \(" -- run1 --train.host_gemm=shape --train.out_dir="$WORK/s_ob"
  check "shape, a table favouring OpenBLAS: bitwise the OpenBLAS run" same "$WORK/ob/metrics.csv" "$WORK/s_ob/metrics.csv"
  sed -i -E '/\| shape /{s/(\| openblas \| shape [^\t]*\t)[0-9.]+/\11/; s/(\| onednn \| shape [^\t]*\t)[0-9.]+/\1999999/}' "$WORK/peak.tsv"
  expect_exit 0 "oneDNN for [0-9]+, OpenBLAS for 0" -- run1 --train.host_gemm=shape --train.out_dir="$WORK/s_od"
  check "shape, a table favouring oneDNN: bitwise the oneDNN run" same "$WORK/od/metrics.csv" "$WORK/s_od/metrics.csv"
  # A resume reads the same table, so it continues bitwise (stopped after step 3, against an
  # uninterrupted run of the same 8 steps).
  expect_exit 0 "done: steps 1-8" -- run1 --train.host_gemm=shape --train.out_dir="$WORK/s_full" --train.max_steps=8
  out="$(run1 --train.host_gemm=shape --train.out_dir="$WORK/s_cut" --train.max_steps=8 --train.stop_at_step=3 2>&1)"
  rc=$?
  check "shape, stopped at step 3: exit 0 and the per-shape summary logged there too" bash -c "test $rc -eq 0 && \
grep -q 'stopping after step 3' <<<\"\$1\" && grep -q 'fp32 GEMMs per shape on rank 0: ' <<<\"\$1\"" _ "$out"
  expect_exit 0 "done: steps 4-8" -- run1 --train.host_gemm=shape --train.out_dir="$WORK/s_cut" --resume --train.max_steps=8
  check "shape: the resume equals the uninterrupted run" same "$WORK/s_full/metrics.csv" "$WORK/s_cut/metrics.csv"
else
  echo "skip: the reading of recorded shapes (the machine stayed too busy for steady probes in four tries)"
fi
# Without a cache the shapes are measured in every run and nothing is written.
expect_exit 0 "per shape, each shape's pick read from or recorded in no cache" -- \
  env TRIDENT_PEAK_CACHE=off "$TRIDENT" train --config "$WORK/deck.ini" --train.max_steps=2 --train.host_gemm=shape \
  --train.out_dir="$WORK/s_off"

# ---- a resume may switch the library -----------------------------------------------------------------
expect_exit 0 "without changing the training math: \[train\] host_gemm onednn -> openblas" -- \
  run1 --train.host_gemm=openblas --train.out_dir="$WORK/od" --resume --train.max_steps=8 --train.allow_changed=max_steps

exit "$FAILED"
