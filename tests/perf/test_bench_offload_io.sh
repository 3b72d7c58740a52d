#!/usr/bin/env bash
# bench_offload_io (the offload device's bandwidth through Trident's OffloadFile, for machine files'
# [storage]) at RANKS ranks on tiny files: it runs, every option is documented, the result line and
# the JSON agree and hold positive rates, the ranks' files are removed, and bad input exits with a
# message: 2 for bad usage, 1 for a directory it cannot write.
# Environment: BENCH (the executable), MPIEXEC, RANKS.
set -euo pipefail
: "${BENCH:?}" "${MPIEXEC:?}" "${RANKS:?}"
dir=$(mktemp -d)
trap 'chmod -R u+w "$dir"; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$BENCH" --help > "$dir/help.txt" || fail "--help exit status $?"
for opt in --dir --mib --record-mib --reps --json; do
  grep -q -- "$opt" "$dir/help.txt" || fail "--help does not document $opt"
done
expect() {  # expect RC PATTERN CMD...: exit status RC and PATTERN in stderr+stdout
  local want=$1 pat=$2; shift 2
  set +e; out=$("$@" 2>&1); rc=$?; set -e
  [ "$rc" = "$want" ] || fail "exit $rc, not $want: $* ($out)"
  grep -Eq -- "$pat" <<<"$out" || fail "no /$pat/ in: $out"
}
expect 2 "--dir DIR is required" "$BENCH"
expect 2 "--mib 0: expected a whole number" "$BENCH" --dir "$dir" --mib 0
expect 2 "unknown option '--bogus'" "$BENCH" --dir "$dir" --bogus
expect 1 "offload file '$dir/missing/bench_offload_io.0.bin'" "$BENCH" --dir "$dir/missing" --mib 1 --record-mib 1

mkdir "$dir/disk"
"$MPIEXEC" -n "$RANKS" "$BENCH" --dir "$dir/disk" --mib 4 --record-mib 1 --reps 2 --json "$dir/r.json" > "$dir/out.txt" ||
  fail "bench_offload_io exit status $?"
[ "$(grep -c '^pass ' "$dir/out.txt")" = 2 ] || fail "expected two timed passes"
grep -q "($RANKS ranks, 4 records of 1 MiB each" "$dir/out.txt" || fail "the pass lines do not name $RANKS ranks and 4 records"
line=$(grep '^read_gbs=' "$dir/out.txt") || fail "no result line"
r=$(sed -E 's/read_gbs=([0-9.e+-]+) write_gbs=.*/\1/' <<<"$line")
w=$(sed -E 's/.*write_gbs=([0-9.e+-]+)$/\1/' <<<"$line")
/usr/bin/python3 - "$dir/r.json" "$r" "$w" "$RANKS" <<'PY' || fail "the JSON does not match the result line"
import json, sys
j = json.load(open(sys.argv[1]))
r, w, n = float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
assert j["ranks"] == n and j["mib_per_rank"] == 4 and j["record_mib"] == 1, j
assert j["read_gbs"] > 0 and j["write_gbs"] > 0, j
assert abs(j["read_gbs"] - r) <= 1e-5 * r and abs(j["write_gbs"] - w) <= 1e-5 * w, (j, r, w)
PY
[ -z "$(ls -A "$dir/disk")" ] || fail "the ranks' files were left behind: $(ls "$dir/disk")"
echo "ok: bench_offload_io at $RANKS ranks: $line"
