#!/usr/bin/env bash
# Preemption and requeue under a real Slurm (slurm-wlm + munge started by this test on loopback,
# tools/slurm_local.sh): jobscripts/train.sbatch runs a 2-rank training and the test stops it on a
# signal in one of two ways (MODE):
#   signal  (default) `scancel --signal=USR1 --batch`, as --signal=B:USR1@120 does before the
#           time limit: the job script passes it on, every rank stops after the same step with a
#           checkpoint and exits 3, and the script requeues the job ("requeued job N");
#   requeue `scontrol requeue <jobid>`, as a user, an admin or a preemption with
#           PreemptMode=REQUEUE does: Slurm requeues the job itself and sends SIGTERM to all of
#           it, trident saves and exits 3, and the script says so ("Slurm is requeueing job N
#           itself") instead of requeueing again or warning.
# Either way the job restarts (restart count 1), resumes from the checkpoint of the step it
# stopped at, finishes, and its losses are bitwise equal to an uninterrupted run. The job is
# submitted from a scratch git repository with the repository's .gitignore and the script's
# default output file: afterwards `git status` must show nothing new there.
# Needs root (munged, slurmd). Exit 77 (ctest: skipped) when Slurm or root is not available.
# Usage: test_preemption.sh (TRIDENT, MPIEXEC from the environment, as the CLI tests);
#        LAUNCHER=srun|mpiexec, MODE=signal|requeue.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../cli/cli_lib.sh"
source "$here/slurm_lib.sh"
launcher="${LAUNCHER:-srun}"
mode="${MODE:-signal}"
case "$mode" in signal|requeue) ;; *) echo "FAIL: MODE=$mode (expected signal or requeue)"; exit 2 ;; esac
slurm_test_setup 's/^max_steps = 6/max_steps = 1500/; s/^interval = 3/interval = 0/; s/^eval_interval = 3/eval_interval = 0/'

# The submit directory: a scratch git repository holding only the repository's .gitignore.
src="$WORK/src"
mkdir -p "$src" && cp "$repo/.gitignore" "$src/" &&
  git -C "$src" init -q && git -C "$src" add .gitignore &&
  git -C "$src" -c user.name=test -c user.email=test@localhost commit -qm gitignore ||
  { echo "FAIL: cannot set up the scratch git repository"; exit 1; }

jobid="$(cd "$src" && TRIDENT_BIN="$TRIDENT" TRIDENT_DECK="$WORK/job.ini" TRIDENT_LAUNCHER="$launcher" \
  sbatch --parsable -n 2 "$repo/jobscripts/train.sbatch")" ||
  { echo "FAIL: sbatch refused the job"; exit 1; }
jobout="$src/trident-$jobid.out"  # the script's default --output=%x-%j.out in the submit directory
echo "submitted job $jobid ($launcher, $mode)"
# Stop it once the job is well under way.
for _ in $(seq 600); do
  [ -f "$WORK/job/metrics.csv" ] && [ "$(wc -l < "$WORK/job/metrics.csv")" -gt 100 ] && break
  sleep 0.2
done
check "the job is training before the signal" test "$(wc -l < "$WORK/job/metrics.csv" 2>/dev/null || echo 0)" -gt 100
if [ "$mode" = signal ]; then
  scancel --signal=USR1 --batch "$jobid"
else
  scontrol requeue "$jobid"
fi
# Wait for the requeued job to finish (a requeued job waits cred_expire seconds before it restarts).
for _ in $(seq 1200); do
  sed -n '/restart count 1;/,$p' "$jobout" 2>/dev/null | grep -q "\] $launcher exited with status 0" && break
  sleep 0.25
done
out="$(cat "$jobout")"
if [ "$mode" = signal ]; then sig=SIGUSR1; else sig=SIGTERM; fi
step="$(sed -n "s/^stopping after step \([0-9]*\) on $sig; exit status 3.*/\1/p" <<<"$out" | head -n 1)"
check "every rank stopped on $sig with a checkpoint and exit 3" test -n "$step"
check "the job script saw the checkpoint" grep -q "trident stopped on $sig after saving a checkpoint of step ${step:-none}" <<<"$out"
if [ "$mode" = signal ]; then
  check "the job script requeued the job" \
    grep -q "requeued job $jobid: it restarts with restart count 1 and resumes from the checkpoint of step ${step:-none}" <<<"$out"
else
  check "the job script said that Slurm requeues the job itself" \
    grep -q "Slurm is requeueing job $jobid itself .*: it restarts with restart count 1 and resumes from the checkpoint of step ${step:-none}" <<<"$out"
  check "the job script did not try to requeue it again" eval '! grep -q "requeued job" <<<"$out"'
fi
check "no warning from the job script" eval '! grep -q "^\[train.sbatch .*\] warning" <<<"$out"'
check "no signal logged after trident had ended" \
  test "$(grep -c "\] received SIG" <<<"$out")" -eq 1
check "the requeued job ran as restart 1" grep -q "restart count 1;" <<<"$out"
check "the requeued job resumed from that checkpoint" \
  grep -qE "resumed from .*step_0*${step:-none}\.h5 at step ${step:-none} " <<<"$out"
check "the requeued job finished" grep -q "\] $launcher exited with status 0" <<<"$(sed -n '/restart count 1;/,$p' <<<"$out")"
check "final losses bitwise equal to the uninterrupted run" \
  cmp -s <(cut -d, -f1-5 "$WORK/ref/metrics.csv") <(cut -d, -f1-5 "$WORK/job/metrics.csv")
# The job's files in the submit directory are ignored by git (job output, stop file).
for _ in $(seq 40); do [ "$(squeue -h -j "$jobid" -t all -o %T 2>/dev/null)" = COMPLETED ] && break; sleep 0.25; done
check "the job output is where the docs say (trident-$jobid.out in the submit directory)" test -s "$jobout"
check "git status shows nothing new in the submit directory" test -z "$(git -C "$src" status --porcelain)"
check "git ignores the stop file .trident-stop.$jobid" git -C "$src" check-ignore -q ".trident-stop.$jobid"
[ "$FAILED" -eq 0 ] || { echo "--- job output"; grep -v "^step\|^checkpoint:" "$jobout" | tail -40; git -C "$src" status --porcelain; }
echo "$FAILED failed"
exit "$FAILED"
