#!/usr/bin/env bash
# A chain of jobs under a real Slurm (slurm-wlm + munge started by this test on loopback,
# tools/slurm_local.sh): jobscripts/chain.sh submits 8 jobs of jobscripts/train.sbatch with the
# same name and --dependency=singleton; each job resumes the run and stops cleanly a few seconds
# in ([train] time_limit_min, what chain.sh derives from -t), so the run is carried by several
# jobs in turn. Checks: every job exits 0, at least two jobs stopped on the time limit and later
# ones resumed, and the losses are bitwise equal to an uninterrupted run. How far 8 jobs of ~4 s
# get depends on the machine's speed and load, so a run the chain left short of max_steps is
# finished by one more resume outside Slurm before the comparison (the chain's share is printed). Needs root (munged, slurmd); exit 77
# (ctest: skipped) when Slurm or root is not available.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../cli/cli_lib.sh"
source "$here/slurm_lib.sh"
slurm_test_setup 's/^max_steps = 6/max_steps = 12000/; s/^interval = 3/interval = 0/; s/^eval_interval = 3/eval_interval = 0/; s/^log_interval = 1/log_interval = 500/'
expect_exit 2 "-t 'soon' is not a Slurm time limit" -- "$repo/jobscripts/chain.sh" -t soon
expect_exit 2 "-t '1-' is not a Slurm time limit" -- "$repo/jobscripts/chain.sh" -t 1-
expect_exit 2 "-n 'x' is not a positive number" -- "$repo/jobscripts/chain.sh" -n x
expect_exit 0 "dependency=singleton" -- "$repo/jobscripts/chain.sh" --help
# 8 jobs of at most 5 minutes; each stops ~4 s after it starts (time_limit_min after the "--" wins).
ids="$(TRIDENT_BIN="$TRIDENT" TRIDENT_DECK="$WORK/job.ini" \
  "$repo/jobscripts/chain.sh" -n 8 -J chain-test -t 5 --ntasks=2 --output="$WORK/chain-%j.out" \
  -- --train.time_limit_min=0.07)" || { echo "FAIL: chain.sh could not submit"; exit 1; }
check "chain.sh printed 8 job ids" test "$(wc -w <<<"$ids")" -eq 8
last="$(tail -n 1 <<<"$ids")"
for _ in $(seq 1200); do
  [ -f "$WORK/chain-$last.out" ] && grep -q "\] srun exited with status" "$WORK/chain-$last.out" && break
  sleep 0.25
done
out="$(cat "$WORK"/chain-*.out 2>/dev/null)"
check "all 8 jobs ran and exited 0" test "$(grep -c "\] srun exited with status 0" <<<"$out")" -eq 8
check "at least two jobs stopped on the time limit with a checkpoint" \
  test "$(grep -c "time_limit_min = 0.07 is near" <<<"$out")" -ge 2
check "later jobs resumed the run" grep -qE "resumed from .*step_0*[1-9][0-9]*\.h5" <<<"$out"
reached="$(tail -n 1 "$WORK/job/metrics.csv" | cut -d, -f1)"
echo "the chain carried the run to step $reached of 12000"
if [ "$reached" != 12000 ]; then
  expect_exit 0 "step +12000/12000" -- timeout -k 10 300 "$MPIEXEC" -n 2 "$TRIDENT" train \
    --config "$WORK/job.ini" --resume
fi
check "losses bitwise equal to the uninterrupted run" \
  cmp -s <(cut -d, -f1-5 "$WORK/ref/metrics.csv") <(cut -d, -f1-5 "$WORK/job/metrics.csv")
[ "$FAILED" -eq 0 ] || { echo "--- job outputs"; grep -h "train.sbatch\|stopping\|resumed\|error" "$WORK"/chain-*.out | tail -40; }
echo "$FAILED failed"
exit "$FAILED"
