#!/usr/bin/env bash
# bench_collectives at RANKS ranks with tiny messages: it runs, covers every axis and operation, and
# its CSV's bandwidths are nccl-tests' definitions (algbw = bytes / time; busbw = algbw * factor,
# factor 2(n-1)/n all_reduce, (n-1)/n reduce_scatter and all_gather, 1 broadcast and send_recv),
# checked row by row to 1e-6 relative; the JSON holds one alpha-beta fit per operation and axis.
# Environment: BENCH (the executable), MPIEXEC, RANKS.
set -euo pipefail
: "${BENCH:?}" "${MPIEXEC:?}" "${RANKS:?}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$BENCH" --help > "$dir/help.txt" || fail "--help exit status $?"
for opt in --dp --tp --pp --axes --ops --backend --min-bytes --max-bytes --factor --iters --warmup --budget-bytes \
           --csv --json --quiet --help; do
  grep -q -- "$opt" "$dir/help.txt" || fail "--help does not document $opt"
done
set +e
"$BENCH" --max-bytes nonsense > /dev/null 2>&1; rc=$?
set -e
[ "$rc" = 2 ] || fail "a bad --max-bytes exits $rc, not 2"

"$MPIEXEC" -n "$RANKS" "$BENCH" --max-bytes 4096 --iters 3 --warmup 1 --backend mpi \
  --csv "$dir/c.csv" --json "$dir/c.json" > "$dir/out.txt" || fail "bench_collectives exit status $?"
head -1 "$dir/c.csv" | grep -q '^backend,axis,op,ranks,bytes,iters,time_us,algbw_gbs,busbw_gbs$' || fail "CSV header"
# 11 sizes (4 .. 4096 by 2) per axis and operation; send_recv only on axes of >= 2 ranks.
axes_ops=$(awk -F, 'NR > 1 {print $2 "/" $3}' "$dir/c.csv" | sort -u | wc -l)
want=$(( 3 * 4 + (RANKS >= 2 ? 1 : 0) ))
[ "$axes_ops" = "$want" ] || fail "$axes_ops axis/operation pairs in the CSV, expected $want"
rows=$(( $(wc -l < "$dir/c.csv") - 1 ))
[ "$rows" = $(( want * 11 )) ] || fail "$rows rows, expected $(( want * 11 ))"
awk -F, 'NR > 1 {
  n = $4; op = $3
  f = (op == "all_reduce") ? 2 * (n - 1) / n : (op == "reduce_scatter" || op == "all_gather") ? (n - 1) / n : 1
  if (op == "broadcast" && n == 1) f = 0
  alg = $5 / ($7 * 1e3)                       # bytes / (time_us * 1e-6) / 1e9
  if ($7 <= 0) { print "row " NR ": time " $7; bad = 1 }
  if (alg > 0 && (($8 - alg) / alg > 1e-6 || (alg - $8) / alg > 1e-6)) { print "row " NR ": algbw " $8 " != " alg; bad = 1 }
  d = $9 - $8 * f; if (d < 0) d = -d
  if (d > 1e-6 * $8 + 1e-12) { print "row " NR ": busbw " $9 " != algbw * " f; bad = 1 }
  if (op == "all_reduce" && n == 2 && $9 != $8) { print "row " NR ": n = 2 all_reduce busbw must equal algbw"; bad = 1 }
} END { exit bad }' "$dir/c.csv" || fail "bandwidth formula"
fits=$(grep -c '"alpha_s"' "$dir/c.json")
[ "$fits" = "$want" ] || fail "$fits fits in the JSON, expected $want"
grep -q '^fit mpi' "$dir/out.txt" || fail "no fit lines in the table"
echo "bench_collectives at $RANKS ranks: $rows rows, $fits fits, bandwidths as nccl-tests defines them"
