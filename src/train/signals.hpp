// train/signals.hpp: stopping cleanly when the batch system says the job must end.
//
// Layer: train (POSIX signals). Slurm sends SIGTERM at preemption and at the time limit (then
// SIGKILL after KillWait), and `sbatch --signal=...` can send SIGUSR1 earlier; the job script
// forwards them to the ranks. The handler only records the signal (async-signal-safe); the trainer
// agrees on it at the next step boundary (an all-reduce), so every rank stops after the same step,
// writes a checkpoint and exits with kExitRequeue. A second signal during that save changes
// nothing: the flag is already set and the save completes (or the last checkpoint stays intact).
#pragma once

namespace trident {

/// Exit status of a run that stopped on SIGUSR1/SIGTERM/SIGINT after writing a checkpoint: the
/// job script requeues the job (jobscripts/train.sbatch); at a terminal, `--resume` continues.
constexpr int kExitRequeue = 3;

/// Installs the SIGUSR1, SIGTERM and SIGINT handlers and ignores SIGXFSZ. Local; idempotent.
/// SIGINT (Ctrl-C at a terminal, which reaches mpiexec and every rank) is a stop request like
/// SIGTERM, announced on stderr; a second SIGINT aborts at once (the default action), without a
/// checkpoint. A SIGINT less than 1 s after the first (TRIDENT_INTERRUPT_MERGE_MS, milliseconds)
/// is the same Ctrl-C arriving twice -- from the terminal's process-group signal and again from
/// mpiexec's forwarding -- and is ignored. A SIGTERM/SIGUSR1 already recorded is not replaced by a
/// later SIGINT.
void install_stop_signal_handlers();
/// Silences the handler's SIGINT messages on this rank (all ranks but world rank 0). Local.
void set_stop_signal_quiet(bool quiet);
/// "SIGINT", "SIGTERM", "SIGUSR1" (else "a signal"). Local.
const char* stop_signal_name(int sig);
/// The number of the last stop signal received since installation, or 0. Local.
int stop_signal_received();
/// Forgets a received signal (tests). Local.
void clear_stop_signal();

/// Records a stop on signal `sig` after step `step` in the file named by the environment variable
/// TRIDENT_STOP_FILE (one line "step=<step> signal=<name>"), when it is set; a job script reads it
/// because some launchers (MPICH hydra's mpiexec, after forwarding a signal) do not pass exit
/// status 3 on. Call on one rank. A failure to write is logged as a warning, never thrown.
void write_stop_file(long long step, int sig);

}  // namespace trident
