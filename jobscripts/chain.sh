#!/usr/bin/env bash
# =====================================================================================
# Submit a chain of Trident training jobs for a run longer than one job's time limit.
#
# usage: jobscripts/chain.sh [-n JOBS] [-J NAME] [-t TIME] [--margin-min M] [SBATCH_OPTIONS...]
#                            [-- TRIDENT_ARGS...]
#
# Submits JOBS (default 4) copies of jobscripts/train.sbatch with the same job name NAME and
# --dependency=singleton: Slurm runs at most one job of that name (and user) at a time, each
# starting when the previous one has ended, whatever its exit status. Every job resumes from the
# run's latest checkpoint (train.sbatch always passes --resume) and stops cleanly, with a
# checkpoint and exit status 0, M minutes before its time limit TIME ([train] time_limit_min =
# TIME - M; M defaults to 10% of TIME, at least 1 minute). Jobs left over once the run has reached
# [train] max_steps resume at the end and exit at once. A job that is preempted or requeued in
# between simply resumes too (see jobscripts/README.md). M must exceed 2.5 minutes (TIME of 25
# minutes or more with the default M), or the SIGUSR1 that train.sbatch asks for 120 s before the limit
# comes first: the job then requeues itself over and over and the chain waits (chain.sh says so).
#
#   -n JOBS          number of jobs in the chain (default 4)
#   -J NAME          job name, the key of the chain (default trident-chain-<date>); use a new
#                    name for every run, and the same name to extend a chain later
#   -t TIME          time limit of each job, [[D-]HH:]MM[:SS] as sbatch takes it (default 01:00:00)
#   --margin-min M   minutes kept free at the end of each job for the final checkpoint
#   SBATCH_OPTIONS   passed to every sbatch (e.g. -N 2 --ntasks-per-node=8 -p batch); give the
#                    task count as --ntasks=N: -n, -J and -t are this script's own
#   TRIDENT_ARGS     after --, appended to every job's trident command (later overrides win)
# Environment knobs of train.sbatch (TRIDENT_DECK, TRIDENT_BIN, TRIDENT_LAUNCHER, TRIDENT_ARGS)
# reach every job. Prints one job id per line on stdout; exits 2 on bad usage, 1 if sbatch fails.
# Example: jobscripts/chain.sh -n 6 -J gpt2-run1 -t 04:00:00 -N 4 --ntasks-per-node=8
# =====================================================================================
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
jobs=4 name="trident-chain-$(date +%Y%m%d-%H%M%S)" time="01:00:00" margin="" sbatch_opts=() trident_args=()
usage() { sed -n '5,6p' "$0" >&2; echo "(jobscripts/chain.sh --help for more)" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) awk 'NR > 2 && /^# =====/ {exit} NR > 2 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    -n) [ $# -ge 2 ] || usage; jobs=$2; shift 2 ;;
    -J) [ $# -ge 2 ] || usage; name=$2; shift 2 ;;
    -t) [ $# -ge 2 ] || usage; time=$2; shift 2 ;;
    --margin-min) [ $# -ge 2 ] || usage; margin=$2; shift 2 ;;
    --) shift; trident_args=("$@"); break ;;
    *) sbatch_opts+=("$1"); shift ;;
  esac
done
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "chain.sh: -n '$jobs' is not a positive number of jobs" >&2; exit 2; }
# Slurm time formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS -> minutes. Anything else
# ("1-", "1-2-3", "1-2:3:4:5", "-5") is refused here rather than read as something else.
[[ "$time" =~ ^([0-9]+-)?[0-9]+(:[0-9]+){0,2}$ ]] ||
  { echo "chain.sh: -t '$time' is not a Slurm time limit (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS)" >&2; exit 2; }
minutes="$(awk -v t="$time" 'BEGIN {
  d = 0; if (index(t, "-")) { split(t, a, "-"); d = a[1]; t = a[2]; dash = 1 }
  n = split(t, p, ":");
  for (i = 1; i <= n; i++) if (p[i] !~ /^[0-9]+$/) { print "bad"; exit }
  if (d !~ /^[0-9]+$/) { print "bad"; exit }
  if (dash) { h = p[1]; m = (n >= 2 ? p[2] : 0); s = (n >= 3 ? p[3] : 0) }
  else if (n == 1) { h = 0; m = p[1]; s = 0 } else if (n == 2) { h = 0; m = p[1]; s = p[2] }
  else if (n == 3) { h = p[1]; m = p[2]; s = p[3] } else { print "bad"; exit }
  print d * 1440 + h * 60 + m + s / 60 }')"
[ "$minutes" != bad ] && awk -v m="$minutes" 'BEGIN { exit !(m > 0) }' ||
  { echo "chain.sh: -t '$time' is not a Slurm time limit ([[D-]HH:]MM[:SS])" >&2; exit 2; }
[ -n "$margin" ] || margin="$(awk -v m="$minutes" 'BEGIN { x = m / 10; if (x < 1) x = 1; print x }')"
awk -v m="$margin" 'BEGIN { exit !(m ~ /^[0-9.]+$/ && m + 0 >= 0) }' ||
  { echo "chain.sh: --margin-min '$margin' is not a number of minutes" >&2; exit 2; }
limit="$(awk -v m="$minutes" -v g="$margin" 'BEGIN { print m - g }')"
awk -v l="$limit" 'BEGIN { exit !(l > 0) }' ||
  { echo "chain.sh: --margin-min $margin leaves no time in a $time job" >&2; exit 2; }

echo "chain.sh: $jobs jobs named '$name', $time each, stopping after ${limit} min" >&2
# train.sbatch asks for SIGUSR1 120 s before the time limit, which Slurm sends up to 30 s early.
# When that comes before time_limit_min, every job stops on SIGUSR1 and requeues itself, and the
# requeued job (same name) keeps the rest of the chain waiting: say so, unless --signal is given.
if ! printf '%s\n' "${sbatch_opts[@]}" | grep -q -- '^--signal' &&
   awk -v g="$margin" 'BEGIN { exit !(g * 60 < 150) }'; then
  echo "chain.sh: note: a margin of $margin min is shorter than train.sbatch's SIGUSR1 warning (120-150 s" \
       "before the time limit): each job will stop on SIGUSR1 and requeue itself, holding up the rest" \
       "of the chain; give --margin-min 3 so that jobs end on time_limit_min" >&2
fi
for i in $(seq "$jobs"); do
  id="$(sbatch --parsable -J "$name" -t "$time" --dependency=singleton "${sbatch_opts[@]}" \
        "$here/train.sbatch" --train.time_limit_min="$limit" "${trident_args[@]}")" ||
    { echo "chain.sh: sbatch failed for job $i of $jobs" >&2; exit 1; }
  echo "${id%%;*}"
done
