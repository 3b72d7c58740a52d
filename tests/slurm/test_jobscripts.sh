#!/usr/bin/env bash
# The job scripts' own logic with no Slurm, no root and no build (jobscript_checks.sh): train.sbatch
# run directly with fake trident, srun, mpiexec, scontrol, squeue and hostname, for both launchers;
# a signal before trident starts, TRIDENT_ARGS with newlines, status 3 without a stop file,
# mpiexec's 0 after a forwarded signal, a missing submit directory, the --help texts, chain.sh's -t.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
export TRIDENT="${TRIDENT:-unused}"   # cli_lib.sh wants one; the checks use their own fake
source "$here/../cli/cli_lib.sh"
source "$here/jobscript_checks.sh"
for launcher in srun mpiexec; do jobscript_checks "$launcher"; done
echo "$FAILED failed"
exit "$FAILED"
