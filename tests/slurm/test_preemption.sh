#!/usr/bin/env bash
# Preemption and requeue under a real Slurm (slurm-wlm + munge started by this test on loopback,
# tools/slurm_local.sh): jobscripts/train.sbatch runs a 2-rank training; the test sends the
# preemption signal with `scancel --signal=USR1 --batch`; the job script forwards it, every rank
# stops after the same step with a checkpoint and exits 3, the script requeues the job, the job
# restarts, resumes and finishes -- and its losses are bitwise equal to an uninterrupted run.
# Needs root (munged, slurmd). Exit 77 (ctest: skipped) when Slurm or root is not available.
# Usage: test_preemption.sh (TRIDENT, MPIEXEC from the environment, as the CLI tests); LAUNCHER=srun|mpiexec.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../cli/cli_lib.sh"
source "$here/slurm_lib.sh"
launcher="${LAUNCHER:-srun}"
slurm_test_setup 's/^max_steps = 6/max_steps = 1500/; s/^interval = 3/interval = 0/; s/^eval_interval = 3/eval_interval = 0/'
jobid="$(TRIDENT_BIN="$TRIDENT" TRIDENT_DECK="$WORK/job.ini" TRIDENT_LAUNCHER="$launcher" \
  sbatch --parsable -n 2 --output="$WORK/job.out" "$repo/jobscripts/train.sbatch")" ||
  { echo "FAIL: sbatch refused the job"; exit 1; }
echo "submitted job $jobid ($launcher)"
# Preempt once the job is well under way.
for _ in $(seq 600); do
  [ -f "$WORK/job/metrics.csv" ] && [ "$(wc -l < "$WORK/job/metrics.csv")" -gt 100 ] && break
  sleep 0.2
done
check "the job is training before the signal" test "$(wc -l < "$WORK/job/metrics.csv" 2>/dev/null || echo 0)" -gt 100
scancel --signal=USR1 --batch "$jobid"
# Wait for the requeued job to finish (a requeued job waits cred_expire seconds before it restarts).
for _ in $(seq 1200); do
  # Two runs of the job script: the preempted one and the requeued one.
  [ "$(grep -c "trident exited with status" "$WORK/job.out" 2>/dev/null)" -ge 2 ] && break
  sleep 0.25
done
out="$(cat "$WORK/job.out")"
check "every rank stopped on the signal with a checkpoint and exit 3" grep -qE "stopping after step [0-9]+ on SIGUSR1; exit status 3" <<<"$out"
check "the job script requeued the job" grep -q "requeued job $jobid" <<<"$out"
check "the requeued job resumed from the signal's checkpoint" grep -qE "resumed from .*step_0*[1-9][0-9]*\.h5" <<<"$out"
check "the job script saw the stop (exit 3 or the stop file)" grep -q "trident stopped on a signal with a checkpoint" <<<"$out"
check "the requeued job finished" test "$(grep "trident exited with status" <<<"$out" | tail -1 | grep -c "status 0")" -eq 1
check "the requeued job ran as restart 1" grep -q "restart count 1" <<<"$out"
check "final losses bitwise equal to the uninterrupted run" \
  cmp -s <(cut -d, -f1-5 "$WORK/ref/metrics.csv") <(cut -d, -f1-5 "$WORK/job/metrics.csv")
[ "$FAILED" -eq 0 ] || { echo "--- job output"; tail -40 "$WORK/job.out"; }
echo "$FAILED failed"
exit "$FAILED"
