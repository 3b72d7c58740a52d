#!/usr/bin/env bash
# The scaling-study driver through a real Slurm (slurm-wlm + munge started by this test on
# loopback, tools/slurm_local.sh): `scaling.sh --launcher sbatch` submits one job per point
# (sbatch -n R point.sbatch, srun inside), waits for them, and reports. Checks: one ok row per
# point with Slurm's task count, srun as the launcher, the report written; --no-wait prints the
# job ids and the report command. Needs root (munged, slurmd); exit 77 (ctest: skipped) otherwise.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../cli/cli_lib.sh"
source "$here/slurm_lib.sh"
slurm_test_setup 's/^interval = 3/interval = 0/'
driver="$repo/jobscripts/scaling/scaling.sh"
export TRIDENT_BIN="$TRIDENT"

expect_exit 0 "wrote .*scaling.png" -- "$driver" --config "$WORK/job.ini" --launcher sbatch --ranks 1,2 --steps 4 \
  --out "$WORK/study" --sbatch-args "-t 5"
csv="$WORK/study/results.csv"
check "sbatch: 2 ok rows, ranks 1 and 2" \
  test "$(tail -n +2 "$csv" | grep ',ok,' | cut -d, -f4 | sort | tr '\n' ' ')" = "1 2 "
check "sbatch: each point ran under srun in its own job" \
  test "$(grep -l "ranks on 1 node(s): srun " "$WORK"/study/point-dp-*r.log | wc -l)" = 2
check "sbatch: the report has both points" test "$(grep -c '^| [12] | 1 |' "$WORK/study/scaling.md")" = 2

out="$("$driver" --config "$WORK/job.ini" --launcher sbatch --no-wait --ranks 2 --steps 4 --out "$WORK/nowait" 2>&1)"
check "--no-wait: prints the job id and the report command" \
  bash -c "grep -Eq 'point 1: 2 ranks.*: job [0-9]+' <<<'$out' && grep -q 'scaling_report.py $WORK/nowait/results.csv' <<<'$out'"
for _ in $(seq 600); do [ -s "$WORK/nowait/results.csv" ] && grep -q ',ok,' "$WORK/nowait/results.csv" && break; sleep 0.2; done
check "--no-wait: the job still writes its row" grep -q ',ok,' "$WORK/nowait/results.csv"
exit "$FAILED"
